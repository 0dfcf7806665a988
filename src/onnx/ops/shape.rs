//! Shape and data-movement operators: reshapes, transposes, slicing, concatenation, gathers
//! and scatters, padding, constants, and the shape-computing ops folded at import.
//!
//! ONNX index semantics differ from the IR's (XLA) ones: ONNX counts negative indices from the
//! end and calls out-of-range indices an error, while the IR clamps gather starts and skips
//! out-of-range scatter windows. Indices are therefore normalised in the graph with
//! `select(i < 0, i + dim, i)` (folded at import when they are constants, where out-of-range
//! values are reported); out-of-range run-time indices keep the IR's behaviour.

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::op::{ArithReduce, BinaryOp, CompareOp, Op, PadAxis, ReduceKind};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

use super::Handler;
use super::common::{
    axes as norm_axes, axis as norm_axis, bin, broadcast_dims, broadcast_to, cast, cmp, const_ints, extend_rank, iota,
    not_constant, opt_const_ints, reshape_to, select, static_dims,
};
use crate::onnx::graph::{Ctx, Node};
use crate::onnx::poly::Poly;
use crate::onnx::proto::attribute_proto::AttributeType;
use crate::onnx::symbolic;
use crate::onnx::tensor::{dtype_from_onnx, onnx_type_name, take_tensor_bytes};

/// Op types mapped here.
pub(super) const OPS: &[&str] = &[
    "Concat",
    "Constant",
    "ConstantOfShape",
    "DepthToSpace",
    "Dropout",
    "Expand",
    "EyeLike",
    "Flatten",
    "Gather",
    "GatherElements",
    "GatherND",
    "NonZero",
    "OneHot",
    "Pad",
    "Range",
    "Reshape",
    "ReverseSequence",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Shape",
    "Size",
    "Slice",
    "SpaceToDepth",
    "Split",
    "Squeeze",
    "Tile",
    "Transpose",
    "Trilu",
    "Unsqueeze",
];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    Some(match op {
        "Concat" => concat,
        "Constant" => constant,
        "ConstantOfShape" => constant_of_shape,
        "DepthToSpace" => depth_to_space,
        "Dropout" => dropout,
        "Expand" => expand,
        "EyeLike" => eye_like,
        "Flatten" => flatten,
        "Gather" => gather,
        "GatherElements" => gather_elements,
        "GatherND" => gather_nd,
        "NonZero" => non_zero,
        "OneHot" => one_hot,
        "Pad" => pad,
        "Range" => range,
        "Reshape" => reshape,
        "ReverseSequence" => reverse_sequence,
        "Scatter" | "ScatterElements" => scatter_elements,
        "ScatterND" => scatter_nd,
        "Shape" => shape,
        "Size" => size,
        "Slice" => slice,
        "SpaceToDepth" => space_to_depth,
        "Split" => split,
        "Squeeze" => squeeze,
        "Tile" => tile,
        "Transpose" => transpose,
        "Trilu" => trilu,
        "Unsqueeze" => unsqueeze,
        _ => return None,
    })
}

/// Largest number of elements of the `[updates, targets, window]` product that ScatterND /
/// ScatterElements with `reduction = "mul"` materialises (see [`scatter_core`]).
const SCATTER_MUL_MAX_ELEMENTS: usize = 1 << 26;

/// Largest constant that `Range`, `NonZero` and `Constant(sparse_value)` build at import (also
/// bounds the padded length of an axis).
const CONST_MAX_ELEMENTS: usize = 1 << 28;

// ---------------------------------------------------------------------------------------------
// Small graph-building helpers.

/// The product of `dims`, `None` on overflow.
fn checked_product(dims: &[i64]) -> Option<i64> {
    dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))
}

/// The size of axis `a` of `v`, which must be static.
fn static_axis(ctx: &Ctx<'_>, n: &Node<'_>, v: ValueId, a: usize) -> Result<i64> {
    let s = ctx.shape(v);
    match s.dims.get(a) {
        Some(&d) if d >= 0 => Ok(d),
        _ => Err(n.unsupported(format!(
            "axis {a} of {s} must be static (bind symbolic dimensions with ImportOptions::dims / --dim)"
        ))),
    }
}

/// Rejects axis lists on rank-0 operands (where [`norm_axes`] accepts axis 0).
fn require_rank(n: &Node<'_>, rank: usize, what: &str) -> Result<()> {
    if rank == 0 {
        return Err(n.invalid(format!("{what} must have rank ≥ 1")));
    }
    Ok(())
}

/// An int64 scalar constant.
fn scalar_i64(ctx: &mut Ctx<'_>, v: i64) -> Result<ValueId> {
    ctx.const_i64(&[v], &[])
}

/// Broadcasts `v` to `dims`, its axes going to `axes` (no node when already there).
fn broadcast_axes(ctx: &mut Ctx<'_>, v: ValueId, dims: &[i64], axes: Vec<usize>) -> Result<ValueId> {
    if ctx.shape(v).dims == dims && axes.iter().enumerate().all(|(i, &a)| i == a) {
        return Ok(v);
    }
    let shape = Shape::new(ctx.dtype(v), dims);
    ctx.emit1(Op::BroadcastInDim { shape, axes }, &[v])
}

/// Operand `v` as int64 indices (any integer dtype accepted).
fn index_operand(ctx: &mut Ctx<'_>, n: &Node<'_>, v: ValueId, what: &str) -> Result<ValueId> {
    let dt = ctx.dtype(v);
    if !dt.is_int() || dt.is_packed() {
        return Err(n.invalid(format!("{what} must have an integer type, got {dt}")));
    }
    cast(ctx, v, DType::Int64)
}

/// `select(idx < 0, idx + bound, idx)` on int64 indices; `bound` is a scalar or broadcasts.
fn wrap_negative(ctx: &mut Ctx<'_>, idx: ValueId, bound: ValueId) -> Result<ValueId> {
    let zero = scalar_i64(ctx, 0)?;
    let neg = cmp(ctx, CompareOp::LessThan, idx, zero)?;
    let shifted = bin(ctx, BinaryOp::Add, idx, bound)?;
    select(ctx, neg, shifted, idx)
}

/// Checks constant indices against `[-dim, dim)` (`dims` gives the bound of each element, cycling:
/// one bound for a single axis, `k` bounds for index vectors of size `k`).
fn check_known_indices(ctx: &Ctx<'_>, n: &Node<'_>, idx: ValueId, dims: &[i64], what: &str) -> Result<()> {
    if dims.is_empty() {
        return Ok(());
    }
    if let Some(vals) = ctx.known_i64s(idx) {
        for (i, &v) in vals.iter().enumerate() {
            let d = dims[i % dims.len()];
            if v < -d || v >= d {
                return Err(n.invalid(format!("{what} value {v} is out of range for a dimension of size {d}")));
            }
        }
    }
    Ok(())
}

/// ONNX `Gather` on normalised int64 indices: output = `dims[..axis] ++ idx.dims ++ dims[axis+1..]`.
fn gather_axis(ctx: &mut Ctx<'_>, x: ValueId, idx: ValueId, axis: usize, dims: &[i64]) -> Result<ValueId> {
    let q = ctx.rank(idx);
    let mut slice_sizes = dims.to_vec();
    slice_sizes[axis] = 1;
    let offset_output_axes =
        (0..dims.len()).filter(|&a| a != axis).map(|a| if a < axis { a } else { a - 1 + q }).collect();
    ctx.emit1(
        Op::Gather {
            index_vector_axis: q,
            offset_output_axes,
            collapsed_slice_axes: vec![axis],
            start_index_map: vec![axis],
            slice_sizes,
            indices_are_sorted: false,
        },
        &[x, idx],
    )
}

/// Stacks same-shape int64 components along a new trailing axis: `dims ++ [len]`.
fn stack_last(ctx: &mut Ctx<'_>, comps: &[ValueId], dims: &[i64]) -> Result<ValueId> {
    let mut d1 = dims.to_vec();
    d1.push(1);
    let parts = comps.iter().map(|&c| reshape_to(ctx, c, &d1)).collect::<Result<Vec<_>>>()?;
    if parts.len() == 1 {
        return Ok(parts[0]);
    }
    ctx.emit1(Op::Concatenate { axis: dims.len() }, &parts)
}

/// Full index vectors over `dims` (`dims ++ [rank]`): the iota of each axis, except the axes in
/// `given` whose component is the given int64 value (of shape `dims`).
fn full_index(ctx: &mut Ctx<'_>, dims: &[i64], rank: usize, given: &[(usize, ValueId)]) -> Result<ValueId> {
    let mut comps = Vec::with_capacity(rank);
    for a in 0..rank {
        let c = match given.iter().find(|(g, _)| *g == a) {
            Some(&(_, v)) => v,
            None => iota(ctx, dims, a)?,
        };
        comps.push(c);
    }
    stack_last(ctx, &comps, dims)
}

/// Gathers single elements of `x` at full index vectors (`idx` = `batch ++ [rank(x)]`).
fn gather_points(ctx: &mut Ctx<'_>, x: ValueId, idx: ValueId) -> Result<ValueId> {
    let r = ctx.rank(x);
    let q = ctx.rank(idx);
    ctx.emit1(
        Op::Gather {
            index_vector_axis: q - 1,
            offset_output_axes: vec![],
            collapsed_slice_axes: (0..r).collect(),
            start_index_map: (0..r).collect(),
            slice_sizes: vec![1; r],
            indices_are_sorted: false,
        },
        &[x, idx],
    )
}

/// The first element of a constant operand (scalar or one-element tensor), any numeric type.
fn known_scalar_f64(ctx: &Ctx<'_>, n: &Node<'_>, i: usize, what: &str) -> Result<f64> {
    let v = n.input(i)?;
    let vals = ctx
        .known_f64s(v)
        .or_else(|| ctx.known_i64s(v).map(|v| v.into_iter().map(|x| x as f64).collect()))
        .ok_or_else(|| not_constant(ctx, n, i, what, "a constant"))?;
    match vals.as_slice() {
        [x] => Ok(*x),
        _ => Err(n.invalid(format!("input {i} ({what}) must hold one element, got {}", vals.len()))),
    }
}

/// A scalar (or one-element) operand as a rank-0 value.
fn as_scalar(ctx: &mut Ctx<'_>, n: &Node<'_>, v: ValueId, what: &str) -> Result<ValueId> {
    let s = ctx.shape(v);
    if s.rank() == 0 {
        return Ok(v);
    }
    if s.is_dynamic() || s.num_elements() != 1 {
        return Err(n.invalid(format!("{what} must be a scalar, got shape {s}")));
    }
    reshape_to(ctx, v, &[])
}

// ---------------------------------------------------------------------------------------------
// Reshapes and axis permutations.

/// `Reshape(data, shape)`: 0 copies the input dim (unless `allowzero`), -1 is inferred. A
/// static reshape when the input dims and `shape` are known at import, else a `DynamicReshape`.
fn reshape(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let allowzero = n.attr_i_or("allowzero", 0)? != 0;
    let spec = match ctx.known_i64s(n.input(1)?) {
        Some(spec) if !ctx.shape(x).is_dynamic() => spec,
        known => {
            // Sizes known at import as constants or dynamic axis names: the output axes carry
            // those names; else every size is computed at run time.
            if let Some(polys) = symbolic::ints(ctx, n.input(1)?) {
                return Ok(vec![symbolic_reshape(ctx, n, x, &polys, allowzero)?]);
            }
            return Ok(vec![dynamic_reshape(ctx, n, x, known, allowzero)?]);
        }
    };
    let src = static_dims(ctx, n, x)?;
    let total: i64 = src.iter().product();
    let mut dims = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            0 if !allowzero => dims
                .push(*src.get(i).ok_or_else(|| n.invalid(format!("shape {spec:?}: 0 at axis {i} has no input dim")))?),
            -1 if infer.is_none() => {
                infer = Some(i);
                dims.push(1);
            }
            d if d < 0 => return Err(n.invalid(format!("shape {spec:?}: invalid dim {d}"))),
            d => dims.push(d),
        }
    }
    if let Some(i) = infer {
        if allowzero && spec.contains(&0) {
            return Err(n.invalid(format!("shape {spec:?}: -1 together with 0 and allowzero = 1")));
        }
        let known = checked_product(&dims).unwrap_or(0);
        if known == 0 || total % known != 0 {
            return Err(n.invalid(format!("cannot reshape {src:?} to {spec:?}")));
        }
        dims[i] = total / known;
    }
    if checked_product(&dims) != Some(total) {
        return Err(n.invalid(format!("cannot reshape {src:?} ({total} elements) to {spec:?}")));
    }
    Ok(vec![reshape_to(ctx, x, &dims)?])
}

/// The (dim, axis name) of an output axis whose size is `p`: static, or dynamic named after
/// the axes it is made of; an error naming the node when the IR's names cannot say it.
fn sym_dim(n: &Node<'_>, p: &Poly, what: &str) -> Result<(i64, String)> {
    if let Some(c) = p.as_const() {
        if c < 0 {
            return Err(n.invalid(format!("{what}: negative size {c}")));
        }
        return Ok((c, String::new()));
    }
    p.axis_name().map(|name| (DYNAMIC_DIM, name)).ok_or_else(|| {
        n.unsupported(format!(
            "{what}: the size {p} cannot be a dynamic axis (only axis names and sums of names plus a constant \
             can; bind the symbolic dimensions with ImportOptions::dims / --dim)"
        ))
    })
}

/// The sizes of all axes of `v` as polynomials (an error for anonymous dynamic axes).
fn dim_polys(n: &Node<'_>, s: &Shape) -> Result<Vec<Poly>> {
    (0..s.rank())
        .map(|i| Poly::of_dim(s, i).ok_or_else(|| n.unsupported(format!("axis {i} of {s} is dynamic and unnamed"))))
        .collect()
}

/// The product of polynomial sizes (an error naming the node on overflow).
fn poly_product(n: &Node<'_>, ps: &[Poly]) -> Result<Poly> {
    ps.iter().try_fold(Poly::constant(1), |acc, p| acc.mul(p)).ok_or_else(|| n.invalid("a size overflows"))
}

/// Reshape to sizes known at import as polynomials over the dynamic axis names ([`symbolic`]):
/// 0 copies the input dim (unless `allowzero`), -1 is inferred (statically when the dynamic
/// axes cancel out). Named sizes give axes of those names; a product of names (`batch*seq`) an
/// axis named after it. A plain `Reshape` when the dynamic axes keep their names and order,
/// else a `DynamicReshape` whose dynamic sizes are computed from the input's axes.
fn symbolic_reshape(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, spec: &[Poly], allowzero: bool) -> Result<ValueId> {
    use crate::ir::op::ReshapeDim;
    let xs = ctx.shape(x).clone();
    let src = dim_polys(n, &xs)?;
    let mut out: Vec<Option<Poly>> = Vec::with_capacity(spec.len());
    let text = || spec.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
    for (i, p) in spec.iter().enumerate() {
        match p.as_const() {
            Some(0) if !allowzero => out.push(Some(
                src.get(i)
                    .cloned()
                    .ok_or_else(|| n.invalid(format!("shape [{}]: 0 at axis {i} has no input dim", text())))?,
            )),
            Some(-1) if out.iter().all(Option::is_some) => {
                if allowzero && spec.iter().any(|p| p.as_const() == Some(0)) {
                    return Err(n.invalid(format!("shape [{}]: -1 together with 0 and allowzero = 1", text())));
                }
                out.push(None);
            }
            Some(c) if c < 0 => return Err(n.invalid(format!("shape [{}]: invalid dim {c}", text()))),
            _ => out.push(Some(p.clone())),
        }
    }
    let total = poly_product(n, &src)?;
    if let Some(i) = out.iter().position(Option::is_none) {
        let others: Vec<Poly> = out.iter().flatten().cloned().collect();
        let known = poly_product(n, &others)?;
        if known.as_const() == Some(0) {
            return Err(n.invalid(format!("cannot infer dim {i} of [{}]: the other dims multiply to 0", text())));
        }
        match total.div(&known) {
            Some(q) if q.mul(&known).as_ref() == Some(&total) => out[i] = Some(q),
            _ if total.as_const().is_some() && known.as_const().is_some() => {
                return Err(n.invalid(format!("cannot reshape {xs} to [{}]", text())));
            }
            _ => {}
        }
    }
    // Each output axis: static, or dynamic with its name and (when known) its size.
    let out_name = n.proto.output.first().cloned().unwrap_or_default();
    let mut dims = Vec::with_capacity(out.len());
    let mut names = Vec::with_capacity(out.len());
    for (i, p) in out.iter().enumerate() {
        match p {
            Some(p) if p.as_const().is_some() => {
                let (d, _) = sym_dim(n, p, "shape")?;
                dims.push(d);
                names.push(String::new());
            }
            Some(p) => {
                dims.push(DYNAMIC_DIM);
                names.push(p.axis_name().unwrap_or_else(|| p.to_string()));
            }
            None => {
                dims.push(DYNAMIC_DIM);
                names.push(format!("{out_name}:{i}"));
            }
        }
    }
    let in_names: Vec<&str> = (0..xs.rank()).filter(|&i| xs.dims[i] == DYNAMIC_DIM).map(|i| xs.axis_name(i)).collect();
    let out_names: Vec<&str> = (0..dims.len()).filter(|&i| dims[i] == DYNAMIC_DIM).map(|i| names[i].as_str()).collect();
    let static_in: Option<i64> = checked_product(&xs.dims.iter().copied().filter(|&d| d >= 0).collect::<Vec<_>>());
    let static_out: Option<i64> = checked_product(&dims.iter().copied().filter(|&d| d >= 0).collect::<Vec<_>>());
    if in_names == out_names && static_in == static_out && !dims.is_empty() {
        return reshape_to(ctx, x, &dims);
    }
    let mut specs = Vec::with_capacity(dims.len());
    let mut ins = vec![x];
    for (i, p) in out.iter().enumerate() {
        specs.push(match p {
            _ if dims[i] >= 0 => ReshapeDim::Static(dims[i]),
            Some(p) => {
                ins.push(symbolic::scalar(ctx, p)?);
                ReshapeDim::Dynamic(names[i].clone())
            }
            None => ReshapeDim::Inferred(names[i].clone()),
        });
    }
    ctx.emit1(Op::DynamicReshape { specs }, &ins)
}

/// Reshape with dims known only at run time: a `DynamicReshape` whose new axes are named
/// `"<output>:<i>"` (a copied dynamic input axis keeps its name). With a constant `spec` (the
/// input has dynamic axes) the sizes are static, copied (`DynamicDimensionSize`) or inferred;
/// with a run-time `shape` operand every size is computed in the graph (0 → the input dim
/// unless `allowzero`, -1 → the element count over the product of the others).
fn dynamic_reshape(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    x: ValueId,
    spec: Option<Vec<i64>>,
    allowzero: bool,
) -> Result<ValueId> {
    use crate::ir::op::ReshapeDim;
    let xs = ctx.shape(x).clone();
    let r = xs.rank();
    let out_name = n.proto.output.first().cloned().unwrap_or_default();
    let fresh = |i: usize| format!("{out_name}:{i}");
    let mut specs = Vec::new();
    let mut sizes = Vec::new();
    if let Some(spec) = spec {
        let mut inferred = false;
        for (i, &d) in spec.iter().enumerate() {
            match d {
                0 if !allowzero => {
                    if i >= r {
                        return Err(n.invalid(format!("shape {spec:?}: 0 at axis {i} has no input dim")));
                    }
                    if xs.dims[i] >= 0 {
                        specs.push(ReshapeDim::Static(xs.dims[i]));
                    } else {
                        let name = if xs.axis_name(i).is_empty() { fresh(i) } else { xs.axis_name(i).to_string() };
                        sizes.push(ctx.emit1(Op::DynamicDimensionSize { axis: i }, &[x])?);
                        specs.push(ReshapeDim::Dynamic(name));
                    }
                }
                -1 if !inferred => {
                    if allowzero && spec.contains(&0) {
                        return Err(n.invalid(format!("shape {spec:?}: -1 together with 0 and allowzero = 1")));
                    }
                    inferred = true;
                    specs.push(ReshapeDim::Inferred(fresh(i)));
                }
                d if d < 0 => return Err(n.invalid(format!("shape {spec:?}: invalid dim {d}"))),
                d => specs.push(ReshapeDim::Static(d)),
            }
        }
    } else {
        let sv = n.input(1)?;
        let ss = ctx.shape(sv).clone();
        if ss.rank() != 1 || ss.is_dynamic() {
            return Err(
                n.unsupported(format!("a run-time shape operand of shape {ss} (a 1-D static length is needed)"))
            );
        }
        let k = ss.dims[0];
        let s = index_operand(ctx, n, sv, "shape")?;
        let dims = if xs.is_dynamic() {
            let d = ctx.emit1(Op::DynamicShape, &[x])?;
            cast(ctx, d, DType::Int64)?
        } else {
            ctx.const_i64(&xs.dims, &[r as i64])?
        };
        let mut s0 = s;
        if !allowzero && k > 0 {
            // The input dims padded (with 0, rejected at run time) or cut to `k` entries.
            let src = if k as usize <= r {
                ctx.emit1(Op::Slice { starts: vec![0], limits: vec![k], strides: vec![1] }, &[dims])?
            } else {
                let pad = ctx.const_i64(&vec![0; k as usize - r], &[k - r as i64])?;
                if r == 0 { pad } else { ctx.emit1(Op::Concatenate { axis: 0 }, &[dims, pad])? }
            };
            let zero = scalar_i64(ctx, 0)?;
            let is_zero = cmp(ctx, CompareOp::Equal, s, zero)?;
            s0 = select(ctx, is_zero, src, s)?;
        }
        let minus_one = scalar_i64(ctx, -1)?;
        let one = scalar_i64(ctx, 1)?;
        let infer = cmp(ctx, CompareOp::Equal, s0, minus_one)?;
        let others = select(ctx, infer, one, s0)?;
        let known = ctx.emit1(Op::Reduce { kind: ReduceKind::Product, axes: vec![0] }, &[others])?;
        let known = bin(ctx, BinaryOp::Max, known, one)?;
        let total = ctx.emit1(Op::Reduce { kind: ReduceKind::Product, axes: vec![0] }, &[dims])?;
        let inferred = bin(ctx, BinaryOp::Div, total, known)?;
        let s1 = select(ctx, infer, inferred, s0)?;
        for i in 0..k {
            let v = ctx.emit1(Op::Slice { starts: vec![i], limits: vec![i + 1], strides: vec![1] }, &[s1])?;
            sizes.push(reshape_to(ctx, v, &[])?);
            specs.push(ReshapeDim::Dynamic(fresh(i as usize)));
        }
    }
    let mut ins = vec![x];
    ins.extend(sizes);
    ctx.emit1(Op::DynamicReshape { specs }, &ins)
}

/// `Flatten(input)`: `[prod(dims[..axis]), prod(dims[axis..])]`, axis in `[-r, r]`.
fn flatten(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let xs = ctx.shape(x).clone();
    let r = xs.rank() as i64;
    let a = n.attr_i_or("axis", 1)?;
    if a < -r || a > r {
        return Err(n.invalid(format!("axis {a} is out of range [-{r}, {r}]")));
    }
    let a = if a < 0 { a + r } else { a } as usize;
    if xs.is_dynamic() {
        let dims = dim_polys(n, &xs)?;
        let (outer, inner) = (poly_product(n, &dims[..a])?, poly_product(n, &dims[a..])?);
        return Ok(vec![symbolic_reshape(ctx, n, x, &[outer, inner], true)?]);
    }
    let dims = xs.dims;
    let outer: i64 = dims[..a].iter().product();
    let inner: i64 = dims[a..].iter().product();
    Ok(vec![reshape_to(ctx, x, &[outer, inner])?])
}

/// `Transpose(data)` with `perm` (default: reversed axes).
fn transpose(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let r = ctx.rank(x);
    let perm: Vec<usize> = match n.attr_ints("perm")? {
        None => (0..r).rev().collect(),
        Some(p) => {
            if p.len() != r {
                return Err(n.invalid(format!("perm {p:?} has {} entries for rank {r}", p.len())));
            }
            let axes = norm_axes(n, &p, r)?;
            if axes.len() != r {
                return Err(n.invalid(format!("perm {p:?} is not a permutation")));
            }
            axes
        }
    };
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(vec![x]);
    }
    Ok(vec![ctx.emit1(Op::Transpose { perm }, &[x])?])
}

/// The `axes` of Squeeze / Unsqueeze: an attribute before opset 13, an input from 13.
fn squeeze_axes(ctx: &Ctx<'_>, n: &Node<'_>) -> Result<Option<Vec<i64>>> {
    if n.opset < 13 { n.attr_ints("axes") } else { opt_const_ints(ctx, n, 1, "axes") }
}

/// `Squeeze(data, axes?)`: drops the listed size-1 axes (all size-1 axes when none are given,
/// or, before opset 13, when the `axes` attribute is empty).
fn squeeze(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = ctx.shape(x).dims.clone();
    let axes = squeeze_axes(ctx, n)?.filter(|a| n.opset >= 13 || !a.is_empty());
    let drop: Vec<usize> = match axes {
        None => {
            static_dims(ctx, n, x)?;
            (0..dims.len()).filter(|&a| dims[a] == 1).collect()
        }
        Some(list) => {
            if !list.is_empty() {
                require_rank(n, dims.len(), "data")?;
            }
            let axes = norm_axes(n, &list, dims.len())?;
            if let Some(&a) = axes.iter().find(|&&a| dims[a] < 0) {
                return Err(n.unsupported(format!("squeezing the dynamic axis {a} of {}", ctx.shape(x))));
            }
            if let Some(&a) = axes.iter().find(|&&a| dims[a] != 1) {
                return Err(n.invalid(format!("cannot squeeze axis {a} of size {} (shape {dims:?})", dims[a])));
            }
            axes
        }
    };
    let out: Vec<OutDim> = (0..dims.len()).filter(|a| !drop.contains(a)).map(OutDim::Copy).collect();
    Ok(vec![reshape_axes(ctx, x, &out)?])
}

/// `Unsqueeze(data, axes)`: inserts size-1 axes at the listed output positions.
fn unsqueeze(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let r = ctx.rank(x);
    let list = squeeze_axes(ctx, n)?.ok_or_else(|| n.invalid("axes are required"))?;
    let out_rank = r + list.len();
    let axes = norm_axes(n, &list, out_rank)?;
    let mut src = 0..r;
    let out: Vec<OutDim> = (0..out_rank)
        .map(|a| if axes.contains(&a) { OutDim::Fixed(1) } else { src.next().map_or(OutDim::Fixed(1), OutDim::Copy) })
        .collect();
    Ok(vec![reshape_axes(ctx, x, &out)?])
}

/// One output axis of [`reshape_axes`].
#[derive(Clone, Copy)]
enum OutDim {
    /// The size of this input axis (static or dynamic).
    Copy(usize),
    /// A static size.
    Fixed(i64),
}

/// Reshape whose output axes copy input axes (in order) or have static sizes: a plain
/// `Reshape`, which carries the dynamic axes' names over in order.
fn reshape_axes(ctx: &mut Ctx<'_>, x: ValueId, out: &[OutDim]) -> Result<ValueId> {
    let xs = ctx.shape(x);
    let dims: Vec<i64> = out
        .iter()
        .map(|d| match *d {
            OutDim::Copy(a) => xs.dims[a],
            OutDim::Fixed(v) => v,
        })
        .collect();
    reshape_to(ctx, x, &dims)
}

/// The operands of DepthToSpace / SpaceToDepth: the input, its dims `[b, c, h, w]`, `blocksize`
/// and `mode` (default DCR).
fn block_operands(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<(ValueId, [i64; 4], i64, String)> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    let bs = n.attr_i("blocksize")?.ok_or_else(|| n.invalid("blocksize is required"))?;
    let mode = n.attr_s("mode")?.unwrap_or_else(|| "DCR".to_string());
    let [b, c, h, w] = dims[..] else {
        return Err(n.invalid(format!("input must have rank 4, got shape {dims:?}")));
    };
    Ok((x, [b, c, h, w], bs, mode))
}

/// `DepthToSpace(input)` with `blocksize` and `mode` (DCR, CRD).
fn depth_to_space(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (x, [b, c, h, w], bs, mode) = block_operands(ctx, n)?;
    let bb = bs.checked_mul(bs).filter(|&bb| bs > 0 && bb <= c.max(1) && c % bb == 0);
    let Some(bb) = bb else {
        return Err(n.invalid(format!("blocksize {bs} does not divide the {c} channels into blocksize² groups")));
    };
    let cc = c / bb;
    let (tmp, perm) = match mode.as_str() {
        "DCR" => (vec![b, bs, bs, cc, h, w], vec![0, 3, 4, 1, 5, 2]),
        "CRD" => (vec![b, cc, bs, bs, h, w], vec![0, 1, 4, 2, 5, 3]),
        m => return Err(n.invalid(format!("mode {m:?} (expected DCR or CRD)"))),
    };
    let v = reshape_to(ctx, x, &tmp)?;
    let v = ctx.emit1(Op::Transpose { perm }, &[v])?;
    Ok(vec![reshape_to(ctx, v, &[b, cc, h * bs, w * bs])?])
}

/// `SpaceToDepth(input)` with `blocksize` and `mode` (DCR, CRD).
fn space_to_depth(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (x, [b, c, h, w], bs, mode) = block_operands(ctx, n)?;
    if bs <= 0 || h % bs != 0 || w % bs != 0 || bs.checked_mul(bs).and_then(|bb| bb.checked_mul(c)).is_none() {
        return Err(n.invalid(format!("blocksize {bs} does not divide the spatial dims {h}x{w}")));
    }
    let perm = match mode.as_str() {
        "DCR" => vec![0, 3, 5, 1, 2, 4],
        "CRD" => vec![0, 1, 3, 5, 2, 4],
        m => return Err(n.invalid(format!("mode {m:?} (expected DCR or CRD)"))),
    };
    let v = reshape_to(ctx, x, &[b, c, h / bs, bs, w / bs, bs])?;
    let v = ctx.emit1(Op::Transpose { perm }, &[v])?;
    Ok(vec![reshape_to(ctx, v, &[b, c * bs * bs, h / bs, w / bs])?])
}

// ---------------------------------------------------------------------------------------------
// Concatenation, splitting, slicing.

/// `Concat(inputs...)` along `axis`.
fn concat(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let ins = n.present_inputs();
    let Some(&first) = ins.first() else {
        return Err(n.invalid("at least one input is required"));
    };
    let r = ctx.rank(first);
    let dt = ctx.dtype(first);
    for &v in &ins {
        if ctx.rank(v) != r || ctx.dtype(v) != dt {
            return Err(n.invalid(format!("inputs differ in rank or type: {} and {}", ctx.shape(first), ctx.shape(v))));
        }
    }
    if r == 0 {
        return Err(n.invalid("inputs must have rank ≥ 1"));
    }
    let a = n.attr_i("axis")?.ok_or_else(|| n.invalid("axis is required"))?;
    let axis = norm_axis(n, a, r)?;
    if ins.len() == 1 {
        return Ok(vec![first]);
    }
    Ok(vec![ctx.emit1(Op::Concatenate { axis }, &ins)?])
}

/// `Split(input, split?)` along `axis`: sizes from the `split` input (opset 13+) or attribute
/// (before 13), else `num_outputs` (18+) or the node's output count (equal parts, the last
/// smaller when the axis does not divide evenly).
fn split(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    // Dynamic axes other than the split one are kept whole (slice limit -1).
    let dims = ctx.shape(x).dims.clone();
    let axis = norm_axis(n, n.attr_i_or("axis", 0)?, dims.len())?;
    if dims.is_empty() {
        return Err(n.invalid("input must have rank ≥ 1"));
    }
    let d = static_axis(ctx, n, x, axis)?;
    let outputs = n.num_outputs();
    let given = if n.opset >= 13 { opt_const_ints(ctx, n, 1, "split")? } else { n.attr_ints("split")? };
    let num = if n.opset >= 18 { n.attr_i("num_outputs")? } else { None };
    let sizes = match (given, num) {
        (Some(_), Some(_)) => return Err(n.invalid("split and num_outputs are both given")),
        (Some(s), None) => s,
        (None, num) => {
            let k = num.unwrap_or(outputs as i64);
            if k <= 0 {
                return Err(n.invalid(format!("cannot split into {k} outputs")));
            }
            if num.is_some() && k != outputs as i64 {
                return Err(n.invalid(format!("num_outputs = {k} but the node has {outputs} outputs")));
            }
            let chunk = if d % k == 0 { d / k } else { d / k + 1 };
            let mut s = vec![chunk; k as usize];
            let last = d - chunk * (k - 1);
            if last < 0 {
                return Err(n.invalid(format!("axis of size {d} cannot be split into {k} parts")));
            }
            s[k as usize - 1] = last;
            s
        }
    };
    let covered = sizes.iter().try_fold(0i64, |acc, &s| if s < 0 { None } else { acc.checked_add(s) });
    if sizes.len() != outputs || covered != Some(d) {
        return Err(
            n.invalid(format!("split sizes {sizes:?} do not cover the axis of size {d} with {outputs} outputs"))
        );
    }
    let mut outs = Vec::with_capacity(outputs);
    let mut pos = 0;
    for s in sizes {
        let mut starts = vec![0; dims.len()];
        let mut limits = dims.clone();
        starts[axis] = pos;
        limits[axis] = pos + s;
        pos += s;
        if s == d {
            outs.push(x);
            continue;
        }
        let strides = vec![1; dims.len()];
        outs.push(ctx.emit1(Op::Slice { starts, limits, strides }, &[x])?);
    }
    Ok(outs)
}

/// `Slice(data, starts, ends, axes?, steps?)` (attributes before opset 10), with ONNX clamping
/// and negative steps (a `Reverse` then a strided slice).
fn slice(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    // Dynamic axes that are not sliced are kept whole (slice limit -1).
    let dims = ctx.shape(x).dims.clone();
    let r = dims.len();
    let (starts, ends, axes, steps) = if n.opset < 10 {
        let starts = n.attr_ints("starts")?.ok_or_else(|| n.invalid("starts is required"))?;
        let ends = n.attr_ints("ends")?.ok_or_else(|| n.invalid("ends is required"))?;
        (starts, ends, n.attr_ints("axes")?, None)
    } else {
        let bounds = [1, 2].map(|i| n.input(i).ok().filter(|&v| ctx.known(v).is_none()));
        if bounds.iter().any(Option::is_some) {
            // Bounds computed from dynamic sizes.
            let polys = [1, 2].map(|i| n.input(i).ok().and_then(|v| symbolic::ints(ctx, v)));
            if let [Some(s), Some(e)] = polys {
                let axes = opt_const_ints(ctx, n, 3, "axes")?;
                let steps = opt_const_ints(ctx, n, 4, "steps")?;
                return Ok(vec![slice_symbolic(ctx, n, x, &s, &e, axes, steps)?]);
            }
        }
        let starts = const_ints(ctx, n, 1, "starts")?;
        let ends = const_ints(ctx, n, 2, "ends")?;
        let axes = opt_const_ints(ctx, n, 3, "axes")?;
        let steps = opt_const_ints(ctx, n, 4, "steps")?;
        (starts, ends, axes, steps)
    };
    let sliced_dynamic = {
        let list = axes.clone().unwrap_or_else(|| (0..starts.len() as i64).collect());
        let xs = ctx.shape(x);
        list.iter().any(|&a| {
            let a = if a < 0 { a + r as i64 } else { a };
            xs.dims.get(a as usize) == Some(&DYNAMIC_DIM)
        })
    };
    if sliced_dynamic {
        let to_polys = |v: &[i64]| v.iter().map(|&c| Poly::constant(c)).collect::<Vec<_>>();
        return Ok(vec![slice_symbolic(ctx, n, x, &to_polys(&starts), &to_polys(&ends), axes, steps)?]);
    }
    let k = starts.len();
    let (axes_list, steps) =
        slice_lists(n, r, k, ends.len(), axes, steps, || format!("starts {starts:?}, ends {ends:?}"))?;
    let axes = norm_axes(n, &axes_list, r)?;
    let mut lo = vec![0i64; r];
    let mut hi = dims.clone();
    let mut st = vec![1i64; r];
    let mut reversed = Vec::new();
    for i in 0..k {
        let (a, step) = (axes[i], steps[i]);
        let d = static_axis(ctx, n, x, a)?;
        if step == 0 {
            return Err(n.invalid(format!("step 0 on axis {a}")));
        }
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        if step > 0 {
            let s = norm(starts[i]).clamp(0, d);
            let e = norm(ends[i]).clamp(0, d);
            lo[a] = s;
            hi[a] = e.max(s);
            st[a] = step;
        } else {
            // Positions s, s+step, ... > e on the axis; in reversed coordinates (d-1-i) that is
            // d-1-s, d-1-s+|step|, ... < d-1-e.
            if d == 0 {
                continue;
            }
            let s = norm(starts[i]).clamp(0, d - 1);
            let e = norm(ends[i]).clamp(-1, d - 1);
            let (rs, re) = (d - 1 - s, d - 1 - e);
            lo[a] = rs;
            hi[a] = re.max(rs);
            st[a] = step.checked_neg().unwrap_or(i64::MAX);
            reversed.push(a);
        }
    }
    let mut v = x;
    if !reversed.is_empty() {
        reversed.sort_unstable();
        v = ctx.emit1(Op::Reverse { axes: reversed }, &[v])?;
    }
    if lo.iter().all(|&s| s == 0) && hi == dims && st.iter().all(|&s| s == 1) {
        return Ok(vec![v]);
    }
    Ok(vec![ctx.emit1(Op::Slice { starts: lo, limits: hi, strides: st }, &[v])?])
}

/// A `Slice`'s `axes` and `steps` (defaults: the first `k` axes, steps of 1) after checking the
/// rank of the data and that `ends`, `axes` and `steps` have the `k` entries of `starts`;
/// `bounds` describes starts and ends for the error.
fn slice_lists(
    n: &Node<'_>,
    r: usize,
    k: usize,
    ends: usize,
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
    bounds: impl FnOnce() -> String,
) -> Result<(Vec<i64>, Vec<i64>)> {
    if k > 0 {
        require_rank(n, r, "data")?;
    }
    let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if ends != k || axes.len() != k || steps.len() != k {
        return Err(n.invalid(format!("{}, axes {axes:?} and steps {steps:?} differ in length", bounds())));
    }
    Ok((axes, steps))
}

/// `Slice` with bounds that are polynomials over dynamic axis names ([`symbolic`]) or that cut
/// dynamic axes; steps must be 1 there. Per axis: the whole axis when the bounds cover it
/// (an end at or past the dim, or `INT_MAX`), static bounds on a dynamic axis when both are
/// constants (a static axis; they must lie within the run-time size), else a `Gather` of
/// `start + iota` over an axis named after the length (`position_ids[:, :seq]` has the axis
/// `seq`; the indices clamp to the axis, so the end must not pass the dim at run time).
fn slice_symbolic(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    x: ValueId,
    starts: &[Poly],
    ends: &[Poly],
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
) -> Result<ValueId> {
    let xs = ctx.shape(x).clone();
    let r = xs.rank();
    let k = starts.len();
    let (axes_list, steps) = slice_lists(n, r, k, ends.len(), axes, steps, || {
        format!("starts [{}], ends [{}]", fmt_polys(starts), fmt_polys(ends))
    })?;
    let axes = norm_axes(n, &axes_list, r)?;
    let dims = dim_polys(n, &xs)?;
    let mut lo = vec![0i64; r];
    let mut hi = xs.dims.clone();
    let mut gathers = vec![];
    for i in 0..k {
        let (a, d) = (axes[i], &dims[axes[i]]);
        let static_dim = d.as_const();
        let norm = |p: &Poly| -> Result<Poly> {
            match p.as_const() {
                // An end of INT_MAX or so: to the end of the axis.
                Some(c) if c >= i64::from(i32::MAX) => Ok(d.clone()),
                Some(c) if c < 0 && c <= -i64::from(i32::MAX) => Ok(Poly::constant(0)),
                Some(c) if c < 0 => d.add(&Poly::constant(c)).ok_or_else(|| n.invalid("a bound overflows")),
                _ => Ok(p.clone()),
            }
        };
        let (mut s, mut e) = (norm(&starts[i])?, norm(&ends[i])?);
        if let Some(dv) = static_dim {
            for p in [&mut s, &mut e] {
                if let Some(c) = p.as_const() {
                    *p = Poly::constant(c.clamp(0, dv));
                }
            }
        }
        // An end at or past the dim stops at the dim.
        if e.sub(d).and_then(|x| x.as_const()).is_some_and(|c| c >= 0) {
            e = d.clone();
        }
        if steps[i] != 1 {
            return Err(n.unsupported(format!(
                "step {} on axis {a} with bounds [{s}, {e}) computed from dynamic sizes (only step 1)",
                steps[i]
            )));
        }
        if s.as_const() == Some(0) && &e == d {
            continue;
        }
        match (s.as_const(), e.as_const()) {
            (Some(sc), Some(ec)) => {
                lo[a] = sc;
                hi[a] = ec.max(sc);
            }
            _ => {
                let len = e.sub(&s).ok_or_else(|| n.invalid("a bound overflows"))?;
                gathers.push((a, s, len));
            }
        }
    }
    let mut v = x;
    if lo.iter().any(|&s| s != 0) || hi != xs.dims {
        v = ctx.emit1(Op::Slice { starts: lo, limits: hi, strides: vec![1; r] }, &[v])?;
    }
    for (a, s, len) in gathers {
        let (l, name) = sym_dim(n, &len, &format!("the length of axis {a}"))?;
        let vs = ctx.shape(v).clone();
        if let Some(b) = (0..r).find(|&b| b != a && vs.dims[b] == DYNAMIC_DIM) {
            return Err(n.unsupported(format!(
                "slicing axis {a} of {vs} to the length {len} while axis {b} is dynamic as well"
            )));
        }
        let shape = Shape::with_names(DType::Int64, &[l], &[name.as_str()]).map_err(|e| n.invalid(e.to_string()))?;
        let mut idx = ctx.emit1(Op::Iota { shape, axis: 0 }, &[])?;
        if s.as_const() != Some(0) {
            let s = symbolic::scalar(ctx, &s)?;
            idx = bin(ctx, BinaryOp::Add, idx, s)?;
        }
        let vdims = vs.dims.clone();
        v = gather_axis(ctx, v, idx, a, &vdims)?;
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// Broadcasting and tiling.

/// `Expand(input, shape)`: bidirectional (NumPy) broadcast of the input with `shape`.
fn expand(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    if (ctx.shape(x).is_dynamic() || ctx.known(n.input(1)?).is_none())
        && let Some(shape) = symbolic::ints(ctx, n.input(1)?)
    {
        return Ok(vec![expand_symbolic(ctx, n, x, &shape)?]);
    }
    let shape = const_ints(ctx, n, 1, "shape")?;
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(n.invalid(format!("shape {shape:?} has a negative dim {d}")));
    }
    let src = static_dims(ctx, n, x)?;
    let out = broadcast_dims(n, &[src, shape])?;
    Ok(vec![broadcast_to(ctx, n, x, &out)?])
}

/// `Expand` to sizes known as polynomials over dynamic axis names ([`symbolic`]): NumPy
/// broadcasting where a size-1 axis takes the other side's size (static or named) and named
/// axes must agree by name. A `BroadcastInDim` to the named shape.
fn expand_symbolic(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, shape: &[Poly]) -> Result<ValueId> {
    let xs = ctx.shape(x).clone();
    let target: Vec<(i64, String)> = shape.iter().map(|p| sym_dim(n, p, "shape")).collect::<Result<_>>()?;
    let rank = xs.rank().max(target.len());
    let x = if xs.rank() == 0 { reshape_to(ctx, x, &vec![1; rank])? } else { extend_rank(ctx, n, x, rank)? };
    let xs = ctx.shape(x).clone();
    let off = rank - target.len();
    let mut dims = Vec::with_capacity(rank);
    let mut names = Vec::with_capacity(rank);
    for a in 0..rank {
        let (xd, xn) = (xs.dims[a], xs.axis_name(a).to_string());
        let (td, tn) = if a < off { (1, String::new()) } else { target[a - off].clone() };
        let (d, name) = if xd == 1 {
            (td, tn)
        } else if td == 1 || (xd == td && (xd >= 0 || xn == tn)) {
            (xd, xn)
        } else if xd >= 0 && td == DYNAMIC_DIM {
            // The named size must be xd (or 1) at run time.
            (xd, String::new())
        } else {
            return Err(n.unsupported(format!("cannot expand {xs} to [{}] (axis {a})", fmt_polys(shape))));
        };
        dims.push(d);
        names.push(name);
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = Shape::with_names(xs.dtype, &dims, &names).map_err(|e| n.invalid(e.to_string()))?;
    if out == xs {
        return Ok(x);
    }
    ctx.emit1(Op::BroadcastInDim { shape: out, axes: (0..rank).collect() }, &[x])
}

/// `[a, b*seq, 3]`.
fn fmt_polys(ps: &[Poly]) -> String {
    ps.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
}

/// `Tile(input, repeats)`: broadcast to `[r0, d0, r1, d1, ...]`, then merge each pair.
fn tile(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    let reps = const_ints(ctx, n, 1, "repeats")?;
    if reps.len() != dims.len() || reps.iter().any(|&r| r < 0) {
        return Err(n.invalid(format!("repeats {reps:?} must hold one non-negative count per axis of {dims:?}")));
    }
    if reps.iter().all(|&r| r == 1) {
        return Ok(vec![x]);
    }
    let mut wide = Vec::with_capacity(2 * dims.len());
    for (&r, &d) in reps.iter().zip(&dims) {
        wide.push(r);
        wide.push(d);
    }
    let axes = (0..dims.len()).map(|a| 2 * a + 1).collect();
    let b = broadcast_axes(ctx, x, &wide, axes)?;
    let out: Vec<i64> = reps
        .iter()
        .zip(&dims)
        .map(|(r, d)| r.checked_mul(*d).ok_or_else(|| n.invalid(format!("repeats {reps:?} overflow"))))
        .collect::<Result<_>>()?;
    Ok(vec![reshape_to(ctx, b, &out)?])
}

// ---------------------------------------------------------------------------------------------
// Padding.

/// Source index along an axis of size `d` for the padded relative position `j` (`0..d` inside).
fn pad_source(j: i64, d: i64, mode: &str) -> i64 {
    match mode {
        "edge" => j.clamp(0, d - 1),
        "wrap" => j.rem_euclid(d),
        _ => {
            // reflect (NumPy): mirror without repeating the edge, periodically.
            if d == 1 {
                return 0;
            }
            let p = 2 * (d - 1);
            let m = j.rem_euclid(p);
            if m < d { m } else { p - m }
        }
    }
}

/// The fill value of constant padding.
enum PadFill {
    /// Absent: zero (false).
    Zero,
    /// The `value` attribute (before opset 11).
    Value(f64),
    /// The `constant_value` input.
    Operand(ValueId),
}

/// `Pad(data, pads, constant_value?, axes?)` (attributes `pads`/`value` before opset 11) with
/// modes constant (negative pads crop), reflect, edge and wrap.
fn pad(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    let r = dims.len();
    let dt = ctx.dtype(x);
    let mode = n.attr_s("mode")?.unwrap_or_else(|| "constant".to_string());
    let (pads, fill, axes) = if n.opset < 11 {
        let pads = n.attr_ints("pads")?.ok_or_else(|| n.invalid("pads is required"))?;
        let value = n.attr_f_or("value", 0.0)?;
        (pads, PadFill::Value(f64::from(value)), None)
    } else {
        let pads = const_ints(ctx, n, 1, "pads")?;
        let fill = n.opt_input(2).map_or(PadFill::Zero, PadFill::Operand);
        let axes = if n.opset >= 18 && n.opt_input(3).is_some() { Some(const_ints(ctx, n, 3, "axes")?) } else { None };
        if n.opset < 18 && n.opt_input(3).is_some() {
            return Err(n.invalid("the axes input needs opset 18"));
        }
        (pads, fill, axes)
    };
    let axes = match axes {
        Some(list) if list.is_empty() => vec![],
        Some(list) => {
            require_rank(n, r, "data")?;
            norm_axes(n, &list, r)?
        }
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(n.invalid(format!("pads {pads:?} must hold 2 values per padded axis ({} axes)", axes.len())));
    }
    let mut cfg = vec![PadAxis::default(); r];
    for (i, &a) in axes.iter().enumerate() {
        cfg[a].start = pads[i];
        cfg[a].end = pads[axes.len() + i];
        let len = dims[a].checked_add(cfg[a].start).and_then(|v| v.checked_add(cfg[a].end));
        if len.is_none_or(|l| l < 0 || l as usize > CONST_MAX_ELEMENTS) {
            return Err(
                n.invalid(format!("pads {pads:?} give axis {a} of size {} a negative or too large size", dims[a]))
            );
        }
    }
    if cfg.iter().all(|c| c.start == 0 && c.end == 0) {
        return Ok(vec![x]);
    }
    match mode.as_str() {
        "constant" => {
            let fill = match fill {
                PadFill::Zero => ctx.scalar(dt, 0.0)?,
                PadFill::Value(v) => ctx.scalar(dt, v)?,
                PadFill::Operand(v) => {
                    if ctx.dtype(v) != dt {
                        return Err(n.invalid(format!("constant_value has type {}, data has {dt}", ctx.dtype(v))));
                    }
                    as_scalar(ctx, n, v, "constant_value")?
                }
            };
            Ok(vec![ctx.emit1(Op::Pad { axes: cfg }, &[x, fill])?])
        }
        "reflect" | "edge" | "wrap" => {
            let mut v = x;
            let mut cur = dims.clone();
            for a in 0..r {
                let PadAxis { start, end, .. } = cfg[a];
                if start == 0 && end == 0 {
                    continue;
                }
                let d = cur[a];
                if d == 0 {
                    return Err(n.invalid(format!("mode {mode:?} cannot pad the empty axis {a}")));
                }
                let len = d + start + end;
                let idx: Vec<i64> = (0..len).map(|j| pad_source(j - start, d, &mode)).collect();
                let idx = ctx.const_i64(&idx, &[len])?;
                v = gather_axis(ctx, v, idx, a, &cur)?;
                cur[a] = len;
            }
            Ok(vec![v])
        }
        m => Err(n.unsupported(format!("mode {m:?}"))),
    }
}

// ---------------------------------------------------------------------------------------------
// Gathers and scatters.

/// `Gather(data, indices)` along `axis`; negative indices count from the end.
fn gather(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let xs = ctx.shape(x).clone();
    let dims = xs.dims.clone();
    if dims.is_empty() {
        return Err(n.invalid("data must have rank ≥ 1"));
    }
    let axis = norm_axis(n, n.attr_i_or("axis", 0)?, dims.len())?;
    if let Some(b) = (0..dims.len()).find(|&b| b != axis && dims[b] == DYNAMIC_DIM) {
        // The IR's Gather cannot keep a dynamic axis whole: a constant scalar index is a slice.
        let idx = n.input(1)?;
        return match ctx.known_i64s(idx).as_deref() {
            Some(&[i]) if ctx.rank(idx) == 0 && (i >= 0 || dims[axis] >= 0) => {
                let i = if i < 0 { i + dims[axis] } else { i };
                let (mut lo, mut hi) = (vec![0; dims.len()], dims.clone());
                lo[axis] = i;
                hi[axis] = i + 1;
                let v = ctx.emit1(Op::Slice { starts: lo, limits: hi, strides: vec![1; dims.len()] }, &[x])?;
                let out: Vec<OutDim> = (0..dims.len()).filter(|&a| a != axis).map(OutDim::Copy).collect();
                Ok(vec![reshape_axes(ctx, v, &out)?])
            }
            _ => Err(n.unsupported(format!(
                "gathering axis {axis} of {xs} with indices other than a constant scalar while axis {b} is dynamic"
            ))),
        };
    }
    let idx = index_operand(ctx, n, n.input(1)?, "indices")?;
    let bound = if dims[axis] == DYNAMIC_DIM {
        let d = ctx.emit1(Op::DynamicDimensionSize { axis }, &[x])?;
        cast(ctx, d, DType::Int64)?
    } else {
        check_known_indices(ctx, n, idx, &[dims[axis]], "indices")?;
        scalar_i64(ctx, dims[axis])?
    };
    let idx = wrap_negative(ctx, idx, bound)?;
    Ok(vec![gather_axis(ctx, x, idx, axis, &dims)?])
}

/// `GatherElements(data, indices)` along `axis`: `out[i][j] = data[indices[i][j]][j]` (axis 0).
fn gather_elements(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let is = ctx.shape(n.input(1)?).clone();
    if is.is_dynamic() && !ctx.shape(x).is_dynamic() {
        return Ok(vec![gather_elements_dynamic(ctx, n, x, &is)?]);
    }
    let (_, full) = elements_index(ctx, n, x)?;
    Ok(vec![gather_points(ctx, x, full)?])
}

/// `GatherElements` of static data with indices of dynamic shape `is`: point indices built from
/// iotas over the indices' (named) shape.
fn gather_elements_dynamic(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, is: &Shape) -> Result<ValueId> {
    let dims = static_dims(ctx, n, x)?;
    let r = dims.len();
    if r == 0 || is.rank() != r {
        return Err(n.invalid(format!("indices {is} must have the rank of data {dims:?} (≥ 1)")));
    }
    let axis = norm_axis(n, n.attr_i_or("axis", 0)?, r)?;
    let idx = index_operand(ctx, n, n.input(1)?, "indices")?;
    let bound = scalar_i64(ctx, dims[axis])?;
    let idx = wrap_negative(ctx, idx, bound)?;
    let mut col = is.dims.clone();
    col.push(1);
    let mut comps = Vec::with_capacity(r);
    for a in 0..r {
        let c = if a == axis { idx } else { ctx.emit1(Op::Iota { shape: is.with_dtype(DType::Int64), axis: a }, &[])? };
        comps.push(ctx.emit1(Op::Reshape { dims: col.clone() }, &[c])?);
    }
    let full = if r == 1 { comps[0] } else { ctx.emit1(Op::Concatenate { axis: r }, &comps)? };
    gather_points(ctx, x, full)
}

/// The operands shared by GatherElements and ScatterElements (input 1, `indices`, along the
/// `axis` attribute of `data`): the indices' dims and the full point index of every element
/// (`[..idims, rank]`, negative indices wrapped, constant ones bounds-checked). Guards: data
/// of rank ≥ 1 and static dims; indices of the same rank, no larger than data off the axis.
fn elements_index(ctx: &mut Ctx<'_>, n: &Node<'_>, data: ValueId) -> Result<(Vec<i64>, ValueId)> {
    let dims = static_dims(ctx, n, data)?;
    let r = dims.len();
    if r == 0 {
        return Err(n.invalid("data must have rank ≥ 1"));
    }
    let axis = norm_axis(n, n.attr_i_or("axis", 0)?, r)?;
    let raw = n.input(1)?;
    let idims = static_dims(ctx, n, raw)?;
    if idims.len() != r || (0..r).any(|a| a != axis && idims[a] > dims[a]) {
        return Err(n.invalid(format!("indices shape {idims:?} does not fit data shape {dims:?} off axis {axis}")));
    }
    let idx = index_operand(ctx, n, raw, "indices")?;
    check_known_indices(ctx, n, idx, &[dims[axis]], "indices")?;
    let bound = scalar_i64(ctx, dims[axis])?;
    let idx = wrap_negative(ctx, idx, bound)?;
    let full = full_index(ctx, &idims, r, &[(axis, idx)])?;
    Ok((idims, full))
}

/// Index vectors of GatherND / ScatterND (shape `batch ++ [k]`) as normalised int64, bounded by
/// `bounds` (the `k` data dims they address).
fn nd_indices(ctx: &mut Ctx<'_>, n: &Node<'_>, raw: ValueId, idims: &[i64], bounds: &[i64]) -> Result<ValueId> {
    let idx = index_operand(ctx, n, raw, "indices")?;
    check_known_indices(ctx, n, idx, bounds, "indices")?;
    if bounds.is_empty() {
        return Ok(idx);
    }
    let mut bdims = vec![1i64; idims.len() - 1];
    bdims.push(bounds.len() as i64);
    let bound = ctx.const_i64(bounds, &bdims)?;
    wrap_negative(ctx, idx, bound)
}

/// `GatherND(data, indices)` with `batch_dims`.
fn gather_nd(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    let raw = n.input(1)?;
    let idims = static_dims(ctx, n, raw)?;
    let (r, q) = (dims.len(), idims.len());
    let b = n.attr_i_or("batch_dims", 0)?;
    if r == 0 || q == 0 || b < 0 || b as usize >= r.min(q) {
        return Err(n.invalid(format!("batch_dims {b} with data {dims:?} and indices {idims:?}")));
    }
    let b = b as usize;
    let k = idims[q - 1];
    if k < 1 || k as usize > r - b || idims[..b] != dims[..b] {
        return Err(n.invalid(format!("indices {idims:?} do not address data {dims:?} with batch_dims {b}")));
    }
    let k = k as usize;
    let idx = nd_indices(ctx, n, raw, &idims, &dims[b..b + k])?;
    let batch = &idims[..q - 1];
    let idx = if b > 0 {
        // Prefix each index vector with its batch coordinates.
        let mut one = batch.to_vec();
        one.push(1);
        let mut parts = Vec::with_capacity(b + 1);
        for a in 0..b {
            parts.push(iota(ctx, &one, a)?);
        }
        parts.push(idx);
        ctx.emit1(Op::Concatenate { axis: q - 1 }, &parts)?
    } else {
        idx
    };
    let m = b + k;
    let mut slice_sizes = vec![1i64; m];
    slice_sizes.extend_from_slice(&dims[m..]);
    let out = ctx.emit1(
        Op::Gather {
            index_vector_axis: q - 1,
            offset_output_axes: (q - 1..q - 1 + r - m).collect(),
            collapsed_slice_axes: (0..m).collect(),
            start_index_map: (0..m).collect(),
            slice_sizes,
            indices_are_sorted: false,
        },
        &[x, idx],
    )?;
    Ok(vec![out])
}

/// The `reduction` attribute of the scatter ops.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(n: &Node<'_>) -> Result<Reduction> {
    Ok(match n.attr_s("reduction")?.as_deref() {
        None | Some("none") => Reduction::None,
        Some("add") => Reduction::Add,
        Some("mul") => Reduction::Mul,
        Some("max") => Reduction::Max,
        Some("min") => Reduction::Min,
        Some(s) => return Err(n.invalid(format!("reduction {s:?} (expected none, add, mul, max or min)"))),
    })
}

/// ScatterND on normalised int64 `idx` (`batch ++ [k]`) and `upd` (`batch ++ dims[k..]`).
///
/// add / max / min map onto the IR's scatter. `none` scatters the (1-based) update number with
/// max into zeros over the `dims[..k]` targets, so that each target learns the last update
/// written to it (the reference's sequential order), then gathers that update's window. `mul` compares every update's target
/// with every target position and multiplies the matching updates (`[updates, targets, window]`
/// elements, bounded by [`SCATTER_MUL_MAX_ELEMENTS`]).
fn scatter_core(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    data: ValueId,
    idx: ValueId,
    upd: ValueId,
    red: Reduction,
) -> Result<ValueId> {
    let dims = ctx.shape(data).dims.clone();
    let idims = ctx.shape(idx).dims.clone();
    let dt = ctx.dtype(data);
    if ctx.dtype(upd) != dt {
        return Err(n.invalid(format!("updates have type {}, data has {dt}", ctx.dtype(upd))));
    }
    let (r, q) = (dims.len(), idims.len());
    let k = idims[q - 1] as usize;
    let window: Vec<usize> = (q - 1..q - 1 + r - k).collect();
    let scatter = |kind| Op::Scatter {
        kind,
        index_vector_axis: q - 1,
        update_window_axes: window.clone(),
        inserted_window_axes: (0..k).collect(),
        scatter_axes_to_operand_axes: (0..k).collect(),
        indices_are_sorted: false,
        unique_indices: false,
    };
    let rows: i64 = idims[..q - 1].iter().product();
    if rows == 0 || dims.contains(&0) {
        return Ok(data);
    }
    if red != Reduction::None
        && (!dt.is_numeric() || (dt.is_complex() && matches!(red, Reduction::Max | Reduction::Min)))
    {
        return Err(n.unsupported(format!("reduction {red:?} on element type {dt}")));
    }
    match red {
        Reduction::Add => ctx.emit1(scatter(ArithReduce::Sum), &[data, idx, upd]),
        Reduction::Max => ctx.emit1(scatter(ArithReduce::Max), &[data, idx, upd]),
        Reduction::Min => ctx.emit1(scatter(ArithReduce::Min), &[data, idx, upd]),
        Reduction::None => {
            // The last update number (1-based) written to each target, 0 where none is.
            let targets = &dims[..k];
            let ids = iota(ctx, &[rows], 0)?;
            let one = scalar_i64(ctx, 1)?;
            let ids = bin(ctx, BinaryOp::Add, ids, one)?;
            let ids = reshape_to(ctx, ids, &idims[..q - 1])?;
            let zero = scalar_i64(ctx, 0)?;
            let zeros = broadcast_axes(ctx, zero, targets, vec![])?;
            let last = Op::Scatter {
                kind: ArithReduce::Max,
                index_vector_axis: q - 1,
                update_window_axes: vec![],
                inserted_window_axes: (0..k).collect(),
                scatter_axes_to_operand_axes: (0..k).collect(),
                indices_are_sorted: false,
                unique_indices: false,
            };
            let pos = ctx.emit1(last, &[zeros, idx, ids])?;
            // Each target's update window, from the updates as `[rows] ++ dims[k..]`.
            let row = bin(ctx, BinaryOp::Sub, pos, one)?;
            let row = bin(ctx, BinaryOp::Max, row, zero)?;
            let mut rows_dims = vec![rows];
            rows_dims.extend_from_slice(&dims[k..]);
            let flat = reshape_to(ctx, upd, &rows_dims)?;
            let picked = gather_axis(ctx, flat, row, 0, &rows_dims)?;
            let hit = cmp(ctx, CompareOp::GreaterThan, pos, zero)?;
            let hit = broadcast_axes(ctx, hit, &dims, (0..k).collect())?;
            select(ctx, hit, picked, data)
        }
        Reduction::Mul => {
            let targets: i64 = dims[..k].iter().product();
            let win: i64 = dims[k..].iter().product();
            let total = (rows as usize).checked_mul(targets as usize).and_then(|t| t.checked_mul(win as usize));
            if total.is_none_or(|t| t > SCATTER_MUL_MAX_ELEMENTS) {
                return Err(n.unsupported(format!(
                    "reduction mul with {rows} updates into {targets} targets of {win} elements (more than \
                     {SCATTER_MUL_MAX_ELEMENTS} elements of work)"
                )));
            }
            // Linear target of each update.
            let mut strides = vec![1i64; k];
            for a in (0..k.saturating_sub(1)).rev() {
                strides[a] = strides[a + 1] * dims[a + 1];
            }
            let mut sdims = vec![1i64; q - 1];
            sdims.push(k as i64);
            let strides = ctx.const_i64(&strides, &sdims)?;
            let lin = bin(ctx, BinaryOp::Mul, idx, strides)?;
            let lin = ctx.emit1(Op::Reduce { kind: ReduceKind::Sum, axes: vec![q - 1] }, &[lin])?;
            let lin = reshape_to(ctx, lin, &[rows])?;
            let lin = broadcast_axes(ctx, lin, &[rows, targets], vec![0])?;
            let pos = iota(ctx, &[rows, targets], 1)?;
            let hit = cmp(ctx, CompareOp::Equal, lin, pos)?;
            let hit = broadcast_axes(ctx, hit, &[rows, targets, win], vec![0, 1])?;
            let u = reshape_to(ctx, upd, &[rows, win])?;
            let u = broadcast_axes(ctx, u, &[rows, targets, win], vec![0, 2])?;
            let one = ctx.scalar(dt, 1.0)?;
            let factors = select(ctx, hit, u, one)?;
            let prod = ctx.emit1(Op::Reduce { kind: ReduceKind::Product, axes: vec![0] }, &[factors])?;
            let prod = reshape_to(ctx, prod, &dims)?;
            bin(ctx, BinaryOp::Mul, data, prod)
        }
    }
}

/// `ScatterND(data, indices, updates)` with `reduction`.
fn scatter_nd(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let data = n.input(0)?;
    let dims = static_dims(ctx, n, data)?;
    let raw = n.input(1)?;
    let idims = static_dims(ctx, n, raw)?;
    let upd = n.input(2)?;
    let udims = static_dims(ctx, n, upd)?;
    let red = reduction(n)?;
    let (r, q) = (dims.len(), idims.len());
    if r == 0 || q == 0 {
        return Err(n.invalid(format!("data {dims:?} and indices {idims:?} must have rank ≥ 1")));
    }
    let k = idims[q - 1];
    let mut want = idims[..q - 1].to_vec();
    if k < 0 || k as usize > r {
        return Err(n.invalid(format!("indices {idims:?}: index vectors longer than the rank of data {dims:?}")));
    }
    want.extend_from_slice(&dims[k as usize..]);
    if udims != want {
        return Err(n.invalid(format!("updates shape {udims:?} (expected {want:?})")));
    }
    let idx = nd_indices(ctx, n, raw, &idims, &dims[..k as usize])?;
    Ok(vec![scatter_core(ctx, n, data, idx, upd, red)?])
}

/// `ScatterElements(data, indices, updates)` (and the deprecated `Scatter`) along `axis`.
fn scatter_elements(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let data = n.input(0)?;
    let upd = n.input(2)?;
    let udims = static_dims(ctx, n, upd)?;
    let red = reduction(n)?;
    let (idims, full) = elements_index(ctx, n, data)?;
    if udims != idims {
        return Err(n.invalid(format!("updates shape {udims:?} differs from indices shape {idims:?}")));
    }
    Ok(vec![scatter_core(ctx, n, data, full, upd, red)?])
}

// ---------------------------------------------------------------------------------------------
// Shapes and constants.

/// `Shape(data)` with optional `start`/`end`: an int64 constant when the dims are static, else
/// computed at run time.
fn shape(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let s = ctx.shape(x).clone();
    let r = s.rank() as i64;
    let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
    let start = clamp(n.attr_i_or("start", 0)?);
    let end = clamp(n.attr_i_or("end", r)?).max(start);
    if !s.is_dynamic() {
        let part = s.dims[start as usize..end as usize].to_vec();
        return Ok(vec![ctx.const_i64(&part, &[part.len() as i64])?]);
    }
    let dims = ctx.emit1(Op::DynamicShape, &[x])?;
    let dims = cast(ctx, dims, DType::Int64)?;
    if start == 0 && end == r {
        return Ok(vec![dims]);
    }
    Ok(vec![ctx.emit1(Op::Slice { starts: vec![start], limits: vec![end], strides: vec![1] }, &[dims])?])
}

/// `Size(data)`: the element count as an int64 scalar.
fn size(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let s = ctx.shape(x).clone();
    if !s.is_dynamic() {
        let count: i64 = s.dims.iter().product();
        return Ok(vec![scalar_i64(ctx, count)?]);
    }
    let dims = ctx.emit1(Op::DynamicShape, &[x])?;
    let dims = cast(ctx, dims, DType::Int64)?;
    Ok(vec![ctx.emit1(Op::Reduce { kind: ReduceKind::Product, axes: vec![0] }, &[dims])?])
}

/// `Constant` with exactly one of its value attributes.
fn constant(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    const KINDS: [&str; 8] = [
        "value",
        "value_float",
        "value_floats",
        "value_int",
        "value_ints",
        "value_string",
        "value_strings",
        "sparse_value",
    ];
    let present: Vec<&str> = KINDS.iter().copied().filter(|k| n.attr(k).is_some()).collect();
    let [kind] = present[..] else {
        return Err(n.invalid(format!("exactly one value attribute is required, got {present:?}")));
    };
    let v = match kind {
        "value" => {
            let t = n.attr_tensor("value")?;
            // A main-graph node's tensor was moved out of the model before import: move its
            // payload into the module; a subgraph's is borrowed, so copy it.
            let mut t = match ctx.constant_value(n) {
                Some(t) => t,
                None => t.ok_or_else(|| n.invalid("value has no tensor"))?.clone(),
            };
            ctx.initializer(&mut t)?
        }
        "value_float" => {
            let v = n.attr_f("value_float")?.unwrap_or_default();
            ctx.scalar(DType::Float32, f64::from(v))?
        }
        "value_floats" => {
            let v = n.attr_floats("value_floats")?.unwrap_or_default();
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            ctx.constant(Shape::new(DType::Float32, &[v.len() as i64]), bytes)?
        }
        "value_int" => scalar_i64(ctx, n.attr_i("value_int")?.unwrap_or_default())?,
        "value_ints" => {
            let v = n.attr_ints("value_ints")?.unwrap_or_default();
            ctx.const_i64(&v, &[v.len() as i64])?
        }
        "sparse_value" => sparse_constant(ctx, n)?,
        k => return Err(n.unsupported(format!("{k}: string tensors are not supported"))),
    };
    Ok(vec![v])
}

/// `Constant(sparse_value)`: the dense tensor (zeros except the listed values).
fn sparse_constant(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<ValueId> {
    let a = n.attr("sparse_value").ok_or_else(|| n.invalid("sparse_value is missing"))?;
    if !(a.r#type() == AttributeType::SparseTensor || a.r#type() == AttributeType::Undefined) {
        return Err(n.invalid("sparse_value is not a sparse tensor"));
    }
    let sp = a.sparse_tensor.as_ref().ok_or_else(|| n.invalid("sparse_value is empty"))?;
    let mut values = sp.values.clone().ok_or_else(|| n.invalid("sparse_value has no values"))?;
    let mut indices = sp.indices.clone().ok_or_else(|| n.invalid("sparse_value has no indices"))?;
    let (vshape, vbytes) = take_tensor_bytes(&mut values, ctx.base_dir)?;
    let (ishape, ibytes) = take_tensor_bytes(&mut indices, ctx.base_dir)?;
    let dims = sp.dims.clone();
    let dt = vshape.dtype;
    if dims.iter().any(|&d| d < 0) || checked_product(&dims).is_none_or(|c| c as usize > CONST_MAX_ELEMENTS) {
        return Err(n.invalid(format!("sparse_value dims {dims:?}")));
    }
    let out = Shape::new(dt, &dims);
    out.check_limits().map_err(|e| Error::limit("sparse_value", e.to_string()))?;
    let count = out.num_elements();
    if ishape.dtype != DType::Int64 || dt.is_packed() {
        return Err(n.unsupported("sparse_value with non-int64 indices or packed values"));
    }
    let nnz = vshape.num_elements();
    let idx: Vec<i64> = ibytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
    let w = dt.size();
    let mut dense = vec![0u8; count * w];
    let linear: Vec<i64> = match ishape.dims.as_slice() {
        [m] if *m as usize == nnz => idx,
        [m, rk] if *m as usize == nnz && *rk as usize == dims.len() => idx
            .chunks_exact(dims.len().max(1))
            .map(|c| {
                c.iter()
                    .zip(&dims)
                    .try_fold(0i64, |acc, (&i, &d)| if i < 0 || i >= d { None } else { Some(acc * d + i) })
                    .unwrap_or(-1)
            })
            .collect(),
        _ => return Err(n.invalid(format!("sparse_value indices shape {ishape} for {nnz} values of {dims:?}"))),
    };
    for (k, &l) in linear.iter().enumerate() {
        if l < 0 || l as usize >= count {
            return Err(n.invalid(format!("sparse_value index {l} is out of range")));
        }
        let l = l as usize;
        dense[l * w..(l + 1) * w].copy_from_slice(&vbytes[k * w..(k + 1) * w]);
    }
    ctx.constant(out, dense)
}

/// `ConstantOfShape(shape)`: `value` (a one-element tensor, default float 0) broadcast to `shape`.
fn constant_of_shape(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let sym = match ctx.known(n.input(0)?) {
        Some(_) => None,
        None => symbolic::ints(ctx, n.input(0)?),
    };
    let dims = match &sym {
        Some(_) => vec![],
        None => const_ints(ctx, n, 0, "shape")?,
    };
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        return Err(n.invalid(format!("shape {dims:?} has a negative dim {d}")));
    }
    let value = match n.attr_tensor("value")? {
        None => ctx.scalar(DType::Float32, 0.0)?,
        Some(t) => {
            let (s, bytes) = take_tensor_bytes(&mut t.clone(), ctx.base_dir)?;
            if s.num_elements() != 1 {
                return Err(n.invalid(format!("value must hold one element, got shape {s}")));
            }
            ctx.constant(Shape::scalar(s.dtype), bytes)?
        }
    };
    if let Some(polys) = sym {
        // Sizes named after dynamic axes: a broadcast to the named shape.
        let target: Vec<(i64, String)> = polys.iter().map(|p| sym_dim(n, p, "shape")).collect::<Result<_>>()?;
        let (d, names): (Vec<i64>, Vec<&str>) = target.iter().map(|(d, s)| (*d, s.as_str())).unzip();
        let shape = Shape::with_names(ctx.dtype(value), &d, &names).map_err(|e| n.invalid(e.to_string()))?;
        return Ok(vec![ctx.emit1(Op::BroadcastInDim { shape, axes: vec![] }, &[value])?]);
    }
    Ok(vec![broadcast_axes(ctx, value, &dims, vec![])?])
}

/// Integer `Range` whose bounds are polynomials over dynamic axis names ([`symbolic`]) and whose
/// `delta` is a constant dividing the span exactly: `start + delta * iota` over an axis named
/// after the count (`Range(0, seq, 1)` has the axis `seq`).
fn range_symbolic(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    start: &Poly,
    limit: &Poly,
    delta: &Poly,
    dt: DType,
) -> Result<ValueId> {
    let d = delta
        .as_const()
        .filter(|&d| d != 0)
        .ok_or_else(|| n.unsupported(format!("delta {delta}: a non-zero constant is needed")))?;
    let span = limit.sub(start).ok_or_else(|| n.invalid("the span overflows"))?;
    let count = span
        .div(&Poly::constant(d))
        .filter(|q| q.mul(&Poly::constant(d)).as_ref() == Some(&span))
        .ok_or_else(|| n.unsupported(format!("the span {span} is not a multiple of delta {d}")))?;
    let (len, name) = sym_dim(n, &count, "the element count")?;
    let shape = Shape::with_names(DType::Int64, &[len], &[name.as_str()]).map_err(|e| n.invalid(e.to_string()))?;
    let mut v = ctx.emit1(Op::Iota { shape, axis: 0 }, &[])?;
    if d != 1 {
        let k = scalar_i64(ctx, d)?;
        v = bin(ctx, BinaryOp::Mul, v, k)?;
    }
    if start.as_const() != Some(0) {
        let s = symbolic::scalar(ctx, start)?;
        v = bin(ctx, BinaryOp::Add, v, s)?;
    }
    cast(ctx, v, dt)
}

/// `Range(start, limit, delta)` on constants: folded into a constant.
fn range(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let ins = [n.input(0)?, n.input(1)?, n.input(2)?];
    let dt = ctx.dtype(ins[0]);
    if ins.iter().any(|&v| ctx.dtype(v) != dt || ctx.shape(v).num_elements() != 1 || ctx.shape(v).is_dynamic()) {
        return Err(n.invalid("start, limit and delta must be scalars of one type"));
    }
    let stash = n.attr_i_or("stash_type", 1)?;
    if dt.is_int() && ins.iter().any(|&v| ctx.known(v).is_none()) {
        let polys: Option<Vec<Poly>> = ins.iter().map(|&v| symbolic::ints(ctx, v)?.pop()).collect();
        if let Some(p) = polys {
            return Ok(vec![range_symbolic(ctx, n, &p[0], &p[1], &p[2], dt)?]);
        }
    }
    // The output size depends on all three values.
    let not_const = || {
        let i = ins.iter().position(|&v| ctx.known(v).is_none()).unwrap_or(0);
        not_constant(ctx, n, i, ["start", "limit", "delta"][i], "a constant scalar")
    };
    if dt.is_int() {
        let vals: Vec<i64> = ins
            .iter()
            .map(|&v| ctx.known_i64s(v).and_then(|x| x.first().copied()))
            .collect::<Option<_>>()
            .ok_or_else(not_const)?;
        let (start, limit, delta) = (i128::from(vals[0]), i128::from(vals[1]), i128::from(vals[2]));
        if delta == 0 {
            return Err(n.invalid("delta is 0"));
        }
        let span = limit - start;
        let count = if (span > 0) == (delta > 0) && span != 0 { (span + delta - delta.signum()) / delta } else { 0 };
        if count as usize > CONST_MAX_ELEMENTS {
            return Err(Error::limit("Range", format!("Range of {count} elements")));
        }
        let exact: Vec<i128> = (0..count).map(|i| start + i * delta).collect();
        let w = dt.size();
        let mut bytes = Vec::with_capacity(exact.len() * w);
        for v in &exact {
            bytes.extend_from_slice(&v.to_le_bytes()[..w]);
        }
        return Ok(vec![ctx.constant(Shape::new(dt, &[count as i64]), bytes)?]);
    }
    if !dt.is_float() {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let vals: Vec<f64> = ins
        .iter()
        .map(|&v| ctx.known_f64s(v).and_then(|x| x.first().copied()))
        .collect::<Option<_>>()
        .ok_or_else(not_const)?;
    let (start, limit, delta) = (vals[0], vals[1], vals[2]);
    if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
        return Err(n.invalid(format!("start {start}, limit {limit}, delta {delta}")));
    }
    let count = ((limit - start) / delta).ceil().max(0.0);
    if count > CONST_MAX_ELEMENTS as f64 {
        return Err(Error::limit("Range", format!("Range of {count} elements")));
    }
    let count = count as usize;
    let via_f32 = dt.is_half() && stash == 1;
    if dt.is_half() && !matches!(stash, 1 | 11) {
        return Err(n.invalid(format!("stash_type {stash} (expected 1 or 11)")));
    }
    let mut bytes = Vec::with_capacity(count * dt.size());
    for i in 0..count {
        let mut v = start + i as f64 * delta;
        if via_f32 {
            v = f64::from(v as f32);
        }
        let b = crate::onnx::graph::scalar_bytes(dt, v).ok_or_else(|| n.unsupported(format!("element type {dt}")))?;
        bytes.extend_from_slice(&b);
    }
    Ok(vec![ctx.constant(Shape::new(dt, &[count as i64]), bytes)?])
}

/// `NonZero(x)` on a constant: the `[rank, count]` int64 coordinates of its non-zero elements
/// (row-major order).
fn non_zero(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let s = ctx.shape(x).clone();
    let nz: Vec<bool> = if let Some(f) = ctx.known_f64s(x) {
        f.iter().map(|&v| v != 0.0).collect()
    } else if let Some(i) = ctx.known_i64s(x) {
        i.iter().map(|&v| v != 0).collect()
    } else if let (Some(b), DType::Bool) = (ctx.known(x), s.dtype) {
        b.iter().map(|&v| v != 0).collect()
    } else if ctx.known(x).is_some() {
        return Err(n.unsupported(format!("element type {}", s.dtype)));
    } else {
        // The output size depends on the input's values.
        return Err(not_constant(ctx, n, 0, "X", "a constant"));
    };
    // A scalar gives `[0, count]` (the reference's convention).
    let dims = s.dims.clone();
    let r = dims.len();
    let hits: Vec<usize> = nz.iter().enumerate().filter(|&(_, &b)| b).map(|(i, _)| i).collect();
    if hits.len() * r > CONST_MAX_ELEMENTS {
        return Err(Error::limit("NonZero", format!("NonZero of {} elements", hits.len())));
    }
    let mut out = vec![0i64; r * hits.len()];
    for (j, &lin) in hits.iter().enumerate() {
        let mut rem = lin as i64;
        for a in (0..r).rev() {
            out[a * hits.len() + j] = rem % dims[a];
            rem /= dims[a];
        }
    }
    Ok(vec![ctx.const_i64(&out, &[r as i64, hits.len() as i64])?])
}

// ---------------------------------------------------------------------------------------------
// Masks and one-hot encodings.

/// `Dropout(data, ratio?, training_mode?)` at inference: the input, and an all-true mask.
fn dropout(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    if n.opset >= 12 {
        // The seed only matters in training mode, which is rejected below.
        n.ignore_attrs(&["seed"]);
        if let Some(t) = n.opt_input(2) {
            match ctx.known(t) {
                Some(b) if b.iter().all(|&v| v == 0) => {}
                Some(_) => return Err(n.unsupported("training_mode = true (random dropout)")),
                None => return Err(not_constant(ctx, n, 2, "training_mode", "a constant false")),
            }
        }
    } else {
        // The ratio only matters in training, which these opsets do not express.
        n.ignore_attrs(&["ratio"]);
    }
    let mut outs = vec![x];
    if n.output_wanted(1) {
        let dims = static_dims(ctx, n, x)?;
        let mask_dt = if n.opset >= 10 { DType::Bool } else { ctx.dtype(x) };
        let one = ctx.scalar(mask_dt, 1.0)?;
        outs.push(broadcast_axes(ctx, one, &dims, vec![])?);
    }
    Ok(outs)
}

/// `Trilu(input, k?)`: keeps `j - i >= k` (upper) or `j - i <= k` (lower) of the last two axes.
fn trilu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    let r = dims.len();
    if r < 2 {
        return Err(n.invalid(format!("input must have rank ≥ 2, got {dims:?}")));
    }
    let upper = n.attr_i_or("upper", 1)? != 0;
    let k = match n.opt_input(1) {
        None => scalar_i64(ctx, 0)?,
        Some(k) => {
            let k = index_operand(ctx, n, k, "k")?;
            as_scalar(ctx, n, k, "k")?
        }
    };
    let row = iota(ctx, &dims, r - 2)?;
    let col = iota(ctx, &dims, r - 1)?;
    let diff = bin(ctx, BinaryOp::Sub, col, row)?;
    let dir = if upper { CompareOp::GreaterOrEqual } else { CompareOp::LessOrEqual };
    let keep = cmp(ctx, dir, diff, k)?;
    let zero = ctx.scalar(ctx.dtype(x), 0.0)?;
    Ok(vec![select(ctx, keep, x, zero)?])
}

/// `EyeLike(input)`: ones on the `k`-th diagonal of a 2-D tensor shaped like the input.
fn eye_like(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    if dims.len() != 2 {
        return Err(n.invalid(format!("input must have rank 2, got {dims:?}")));
    }
    let dt = match n.attr_i("dtype")? {
        None => ctx.dtype(x),
        Some(code) => dtype_from_onnx(code as i32)
            .ok_or_else(|| n.unsupported(format!("dtype {}", onnx_type_name(code as i32))))?,
    };
    let k = n.attr_i_or("k", 0)?;
    let row = iota(ctx, &dims, 0)?;
    let col = iota(ctx, &dims, 1)?;
    let diff = bin(ctx, BinaryOp::Sub, col, row)?;
    let k = scalar_i64(ctx, k)?;
    let eq = cmp(ctx, CompareOp::Equal, diff, k)?;
    Ok(vec![cast(ctx, eq, dt)?])
}

/// `OneHot(indices, depth, values)`: `values[1]` where the index along `axis` equals the
/// (negative-wrapped) index, `values[0]` elsewhere (out-of-range indices: all off).
fn one_hot(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let raw = n.input(0)?;
    let idims = static_dims(ctx, n, raw)?;
    let depth = known_scalar_f64(ctx, n, 1, "depth")?;
    if !(depth >= 1.0 && depth <= i64::MAX as f64) {
        return Err(n.invalid(format!("depth {depth} must be ≥ 1")));
    }
    let depth = depth as i64;
    let values = n.input(2)?;
    if ctx.shape(values).dims != [2] {
        return Err(n.invalid(format!("values must have shape [2], got {}", ctx.shape(values))));
    }
    let r = idims.len() as i64;
    let a = n.attr_i_or("axis", -1)?;
    if a < -r - 1 || a > r {
        return Err(n.invalid(format!("axis {a} is out of range [{}, {r}]", -r - 1)));
    }
    let axis = if a < 0 { a + r + 1 } else { a } as usize;
    let it = ctx.dtype(raw);
    if !it.is_numeric() || it.is_complex() {
        return Err(n.invalid(format!("indices must be numeric, got {it}")));
    }
    let idx = cast(ctx, raw, DType::Int64)?;
    let bound = scalar_i64(ctx, depth)?;
    let idx = wrap_negative(ctx, idx, bound)?;
    let mut out = idims.clone();
    out.insert(axis, depth);
    let keep: Vec<usize> = (0..out.len()).filter(|&i| i != axis).collect();
    let idx = broadcast_axes(ctx, idx, &out, keep)?;
    let pos = iota(ctx, &out, axis)?;
    let hit = cmp(ctx, CompareOp::Equal, pos, idx)?;
    let off = ctx.emit1(Op::Slice { starts: vec![0], limits: vec![1], strides: vec![1] }, &[values])?;
    let on = ctx.emit1(Op::Slice { starts: vec![1], limits: vec![2], strides: vec![1] }, &[values])?;
    let off = reshape_to(ctx, off, &[])?;
    let on = reshape_to(ctx, on, &[])?;
    Ok(vec![select(ctx, hit, on, off)?])
}

/// `ReverseSequence(input, sequence_lens)`: reverses the first `sequence_lens[b]` steps of the
/// time axis in each batch entry.
fn reverse_sequence(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    let r = dims.len();
    if r < 2 {
        return Err(n.invalid(format!("input must have rank ≥ 2, got {dims:?}")));
    }
    let batch_axis = n.attr_i_or("batch_axis", 1)?;
    let time_axis = n.attr_i_or("time_axis", 0)?;
    if !matches!((batch_axis, time_axis), (0, 1) | (1, 0)) {
        return Err(n.invalid(format!("batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1")));
    }
    let (ba, ta) = (batch_axis as usize, time_axis as usize);
    let lens = n.input(1)?;
    if ctx.shape(lens).dims != [dims[ba]] {
        return Err(n.invalid(format!("sequence_lens must have shape [{}], got {}", dims[ba], ctx.shape(lens))));
    }
    let lens = index_operand(ctx, n, lens, "sequence_lens")?;
    let lens = broadcast_axes(ctx, lens, &dims, vec![ba])?;
    let t = iota(ctx, &dims, ta)?;
    let inside = cmp(ctx, CompareOp::LessThan, t, lens)?;
    let one = scalar_i64(ctx, 1)?;
    let last = bin(ctx, BinaryOp::Sub, lens, one)?;
    let rev = bin(ctx, BinaryOp::Sub, last, t)?;
    let src = select(ctx, inside, rev, t)?;
    let full = full_index(ctx, &dims, r, &[(ta, src)])?;
    Ok(vec![gather_points(ctx, x, full)?])
}
