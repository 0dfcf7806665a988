//! Shape inference for data movement and reinterpretation: Bitcast, Reshape, DynamicReshape,
//! Transpose, BroadcastInDim, Concatenate, Slice, DynamicSlice, DynamicUpdateSlice and Pad
//! (catalogue §2 dynamic rules, §4.4, §4.5, §9). These ops accept every supported dtype,
//! packed ones included.

use super::{Group, check_axes_unique, check_dtype, check_target_dtype, make, merge_axis, names, product, to_dim};
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{PadAxis, ReshapeDim};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// Bitcast (§4.4): same width keeps the dims; a narrower target appends an axis of
/// `src_bits / dst_bits`; a wider target removes a last axis that must equal `dst_bits / src_bits`.
/// Bool counts as 8 bits; complex only to or from itself.
pub(super) fn bitcast(op: &str, x: &Shape, dtype: DType) -> Result<Shape> {
    check_target_dtype(op, dtype)?;
    if (x.dtype.is_complex() || dtype.is_complex()) && x.dtype != dtype {
        return Err(Error::invalid(
            op,
            format!("cannot bitcast {} to {dtype}: complex dtypes only bitcast to themselves", x.dtype),
        ));
    }
    let (sb, db) = (x.dtype.bits(), dtype.bits());
    if sb == db {
        return Ok(x.with_dtype(dtype));
    }
    if sb > db {
        let mut dims = x.dims.clone();
        dims.push((sb / db) as i64);
        let mut nm = names(x);
        nm.push(String::new());
        return Ok(make(dtype, dims, nm));
    }
    let k = (db / sb) as i64;
    let Some(&last) = x.dims.last() else {
        return Err(Error::invalid(
            op,
            format!("cannot bitcast scalar {} to wider {dtype}: needs a last axis of size {k}", x.dtype),
        ));
    };
    if last == DYNAMIC_DIM {
        return Err(Error::invalid(op, format!("cannot bitcast {x} to {dtype}: the last axis is dynamic")));
    }
    if last != k {
        return Err(Error::invalid(
            op,
            format!("cannot bitcast {x} to {dtype}: the last axis must have size {k}, got {last}"),
        ));
    }
    let r = x.rank() - 1;
    Ok(make(dtype, x.dims[..r].to_vec(), names(x)[..r].to_vec()))
}

/// Reshape (§4.5, §2): same element count; with dynamic axes, the same number of dynamic dims in
/// and out (names carried over in order) and equal products of the static dims.
pub(super) fn reshape(op: &str, x: &Shape, dims: &[i64]) -> Result<Shape> {
    if let Some((i, &d)) = dims.iter().enumerate().find(|(_, d)| **d < DYNAMIC_DIM) {
        return Err(Error::invalid(op, format!("dims {dims:?}: dimension {i} is {d}")));
    }
    let in_dyn: Vec<usize> = (0..x.rank()).filter(|&i| x.dims[i] == DYNAMIC_DIM).collect();
    let out_dyn = dims.iter().filter(|&&d| d == DYNAMIC_DIM).count();
    if in_dyn.len() != out_dyn {
        return Err(Error::invalid(
            op,
            format!("cannot reshape {x} to {dims:?}: {} dynamic axes in, {out_dyn} out", in_dyn.len()),
        ));
    }
    let pin = product(op, x.dims.iter().copied().filter(|&d| d != DYNAMIC_DIM))?;
    let pout = product(op, dims.iter().copied().filter(|&d| d != DYNAMIC_DIM))?;
    if pin != pout {
        return Err(Error::invalid(op, format!("cannot reshape {x} ({pin} elements) to {dims:?} ({pout} elements)")));
    }
    let mut dyn_names = in_dyn.iter().map(|&i| x.axis_name(i).to_string());
    let nm = dims.iter().map(|&d| if d == DYNAMIC_DIM { dyn_names.next().unwrap_or_default() } else { String::new() });
    Ok(make(x.dtype, dims.to_vec(), nm.collect()))
}

/// DynamicReshape (§4.5): operands `x` then one scalar int per `Dynamic` spec.
pub(super) fn dynamic_reshape(op: &str, inputs: &[&Shape], specs: &[ReshapeDim]) -> Result<Shape> {
    let Some(x) = inputs.first() else {
        return Err(Error::invalid(op, "operand x is missing"));
    };
    let n_dyn = specs.iter().filter(|s| matches!(s, ReshapeDim::Dynamic(_))).count();
    if inputs.len() != 1 + n_dyn {
        return Err(Error::invalid(
            op,
            format!("expects x plus {n_dyn} dynamic size operand(s), got {} operand(s)", inputs.len()),
        ));
    }
    for (k, v) in inputs[1..].iter().enumerate() {
        check_dtype(op, &format!("dynamic size operand {k}"), v.dtype, Group::Int)?;
        if !v.is_scalar() {
            return Err(Error::invalid(op, format!("dynamic size operand {k} must be a scalar, got {v}")));
        }
    }
    let mut dims = Vec::with_capacity(specs.len());
    let mut nm = Vec::with_capacity(specs.len());
    let mut inferred = None;
    for (i, s) in specs.iter().enumerate() {
        match s {
            ReshapeDim::Static(d) => {
                if *d < 0 {
                    return Err(Error::invalid(op, format!("spec {i}: static dimension {d} is negative")));
                }
                dims.push(*d);
                nm.push(String::new());
            }
            ReshapeDim::Dynamic(name) | ReshapeDim::Inferred(name) => {
                if name.is_empty() {
                    return Err(Error::invalid(op, format!("spec {i}: a dynamic axis must be named")));
                }
                if matches!(s, ReshapeDim::Inferred(_)) {
                    if let Some(j) = inferred {
                        return Err(Error::invalid(op, format!("specs {j} and {i} are both inferred (at most one)")));
                    }
                    inferred = Some(i);
                }
                dims.push(DYNAMIC_DIM);
                nm.push(name.clone());
            }
        }
    }
    let known = product(op, dims.iter().copied().filter(|&d| d != DYNAMIC_DIM))?;
    if !x.is_dynamic() {
        let size = product(op, x.dims.iter().copied())?;
        if n_dyn == 0 {
            if let Some(i) = inferred {
                if known == 0 {
                    return Err(Error::invalid(
                        op,
                        format!("cannot infer spec {i}: the static dimensions multiply to 0"),
                    ));
                }
                if size % known != 0 {
                    return Err(Error::invalid(
                        op,
                        format!("cannot infer spec {i}: {x} has {size} elements, not divisible by {known}"),
                    ));
                }
                dims[i] = to_dim(op, i, size / known)?;
            } else if size != known {
                return Err(Error::invalid(op, format!("cannot reshape {x} ({size} elements) to {known} elements")));
            }
        } else if (known == 0 && size != 0) || (known != 0 && size % known != 0) {
            return Err(Error::invalid(
                op,
                format!("{x} has {size} elements, not a multiple of the static dimensions' product {known}"),
            ));
        }
    }
    Ok(make(x.dtype, dims, nm))
}

/// Transpose (§4.5): `out[i] = in[perm[i]]`, perm a permutation of `0..rank`.
pub(super) fn transpose(op: &str, x: &Shape, perm: &[usize]) -> Result<Shape> {
    if perm.len() != x.rank() {
        return Err(Error::invalid(op, format!("perm {perm:?} has {} entries for rank {}", perm.len(), x.rank())));
    }
    check_axes_unique(op, "perm", perm, x.rank())?;
    let dims = perm.iter().map(|&p| x.dims[p]).collect();
    let nm = perm.iter().map(|&p| x.axis_name(p).to_string()).collect();
    Ok(make(x.dtype, dims, nm))
}

/// BroadcastInDim (§4.5, §2): x axis i goes to output axis `axes[i]` (unique, any order); each x dim
/// is 1 or equals the target dim; a dynamic x axis must map to a same-named dynamic output axis.
/// (Whether new dynamic output axes use bound names is checked by the builder, which knows the
/// parameters.)
pub(super) fn broadcast_in_dim(op: &str, x: &Shape, shape: &Shape, axes: &[usize]) -> Result<Shape> {
    shape.validate_for(op, &format!("target shape {shape}"))?;
    if shape.dtype != x.dtype {
        return Err(Error::invalid(op, format!("target dtype {} differs from x dtype {}", shape.dtype, x.dtype)));
    }
    if axes.len() != x.rank() {
        return Err(Error::invalid(op, format!("axes {axes:?} has {} entries for x of rank {}", axes.len(), x.rank())));
    }
    check_axes_unique(op, "axes", axes, shape.rank())?;
    let mut nm = names(shape);
    for (i, &a) in axes.iter().enumerate() {
        let (xd, td) = (x.dims[i], shape.dims[a]);
        let (xn, tn) = (x.axis_name(i), shape.axis_name(a));
        if xd == DYNAMIC_DIM {
            if td != DYNAMIC_DIM || xn != tn {
                return Err(Error::invalid(
                    op,
                    format!(
                        "dynamic axis {i} ({xn:?}) of x must map to a dynamic output axis of the same name; \
                         output axis {a} is {}",
                        if td == DYNAMIC_DIM { format!("{tn}=?") } else { td.to_string() }
                    ),
                ));
            }
        } else if xd != 1 {
            if td != xd {
                return Err(Error::invalid(
                    op,
                    format!("axis {i} of x has size {xd}, which is neither 1 nor target axis {a}'s size {td}"),
                ));
            }
            if tn.is_empty() {
                nm[a] = xn.to_string();
            } else if !xn.is_empty() && xn != tn {
                return Err(Error::invalid(op, format!("axis {i} of x is named {xn:?}, target axis {a} {tn:?}")));
            }
        }
    }
    Ok(make(shape.dtype, shape.dims.clone(), nm))
}

/// Symbolic terms of a dynamic axis name: `"=a+b+10"` → (`[a, b]`, 10); `"a"` → (`[a]`, 0).
fn sum_terms(op: &str, name: &str, terms: &mut Vec<String>, constant: &mut i128) -> Result<()> {
    match name.strip_prefix('=') {
        Some(sum) => {
            for t in sum.split('+').filter(|t| !t.is_empty()) {
                match t.parse::<i128>() {
                    Ok(c) => {
                        *constant = constant.checked_add(c).ok_or_else(|| {
                            Error::invalid(op, format!("constant {c} of dynamic axis name {name:?} overflows the sum"))
                        })?
                    }
                    Err(_) => terms.push(t.to_string()),
                }
            }
        }
        None => terms.push(name.to_string()),
    }
    Ok(())
}

/// Concatenate (§4.5): ≥ 1 operand of one dtype and rank ≥ 1; dims other than `axis` equal. A
/// dynamic concatenated axis yields the symbolic sum name `"=a+b+N"` (terms sorted).
pub(super) fn concatenate(op: &str, inputs: &[&Shape], axis: usize) -> Result<Shape> {
    let Some(first) = inputs.first() else {
        return Err(Error::invalid(op, "at least one operand is required"));
    };
    if first.is_scalar() {
        return Err(Error::invalid(op, "operand 0 is a scalar; scalars cannot be concatenated"));
    }
    super::check_axis(op, "axis", axis, first.rank())?;
    let mut dims = first.dims.clone();
    let mut nm = names(first);
    for (k, s) in inputs.iter().enumerate().skip(1) {
        if s.dtype != first.dtype {
            return Err(Error::invalid(op, format!("operand {k} has dtype {}, operand 0 {}", s.dtype, first.dtype)));
        }
        if s.rank() != first.rank() {
            return Err(Error::invalid(op, format!("operand {k} {s} has a different rank than operand 0 {first}")));
        }
        for i in (0..s.rank()).filter(|&i| i != axis) {
            let label = format!("operand {k}");
            let (d, n) =
                merge_axis(op, i, (dims[i], &nm[i]), (s.dims[i], s.axis_name(i)), false, ("operand 0", &label))?;
            dims[i] = d;
            nm[i] = n;
        }
    }
    let mut terms = vec![];
    let mut constant: i128 = 0;
    for s in inputs {
        if s.dims[axis] == DYNAMIC_DIM {
            sum_terms(op, s.axis_name(axis), &mut terms, &mut constant)?;
        } else {
            constant = constant
                .checked_add(s.dims[axis] as i128)
                .ok_or_else(|| Error::invalid(op, format!("axis {axis}: the concatenated size overflows")))?;
        }
    }
    if terms.is_empty() {
        dims[axis] = to_dim(op, axis, constant)?;
        nm[axis] = if inputs.len() == 1 { first.axis_name(axis).to_string() } else { String::new() };
    } else {
        dims[axis] = DYNAMIC_DIM;
        terms.sort();
        nm[axis] = if terms.len() == 1 && constant == 0 {
            terms.remove(0)
        } else {
            let mut s = format!("={}", terms.join("+"));
            if constant != 0 {
                s.push_str(&format!("+{constant}"));
            }
            s
        };
    }
    Ok(make(first.dtype, dims, nm))
}

/// Slice (§4.5, §9 strict): `0 ≤ start ≤ limit ≤ dim`, stride ≥ 1 (empty strides = all 1). On a
/// dynamic axis only the full range (`0, -1, 1`) keeps it dynamic; static bounds give a static dim.
pub(super) fn slice(op: &str, x: &Shape, starts: &[i64], limits: &[i64], strides: &[i64]) -> Result<Shape> {
    let r = x.rank();
    if starts.len() != r || limits.len() != r || !(strides.is_empty() || strides.len() == r) {
        return Err(Error::invalid(
            op,
            format!(
                "starts {starts:?}, limits {limits:?} and strides {strides:?} must each have one entry per axis of \
                 {x} (strides may be empty)"
            ),
        ));
    }
    let mut dims = Vec::with_capacity(r);
    let mut nm = Vec::with_capacity(r);
    for i in 0..r {
        let (s, l, st, d) = (starts[i], limits[i], strides.get(i).copied().unwrap_or(1), x.dims[i]);
        if st < 1 {
            return Err(Error::invalid(op, format!("axis {i}: stride {st} must be ≥ 1")));
        }
        if d == DYNAMIC_DIM && s == 0 && l == DYNAMIC_DIM && st == 1 {
            dims.push(DYNAMIC_DIM);
            nm.push(x.axis_name(i).to_string());
            continue;
        }
        let in_range = 0 <= s && s <= l && (d == DYNAMIC_DIM || l <= d);
        if !in_range {
            let dim = if d == DYNAMIC_DIM { format!("dynamic dim {:?}", x.axis_name(i)) } else { format!("dim {d}") };
            return Err(Error::invalid(
                op,
                format!("axis {i}: start {s}, limit {l} out of range for {dim} (need 0 ≤ start ≤ limit ≤ dim)"),
            ));
        }
        let n = (l as i128 - s as i128 + st as i128 - 1) / st as i128;
        dims.push(to_dim(op, i, n)?);
        let full = d != DYNAMIC_DIM && s == 0 && l == d && st == 1;
        nm.push(if full { x.axis_name(i).to_string() } else { String::new() });
    }
    Ok(make(x.dtype, dims, nm))
}

fn check_start_operands(op: &str, starts: &[&Shape], rank: usize) -> Result<()> {
    if starts.len() != rank {
        return Err(Error::invalid(op, format!("{} start operand(s) given for rank {rank}", starts.len())));
    }
    for (i, s) in starts.iter().enumerate() {
        check_dtype(op, &format!("start operand {i}"), s.dtype, Group::Int)?;
        if !s.is_scalar() {
            return Err(Error::invalid(op, format!("start operand {i} must be a scalar, got {s}")));
        }
    }
    Ok(())
}

/// DynamicSlice (§4.5): operands `x` then one scalar int start per axis; `0 ≤ size ≤ dim`.
pub(super) fn dynamic_slice(op: &str, inputs: &[&Shape], sizes: &[i64]) -> Result<Shape> {
    let Some(x) = inputs.first() else {
        return Err(Error::invalid(op, "operand x is missing"));
    };
    check_start_operands(op, &inputs[1..], x.rank())?;
    if sizes.len() != x.rank() {
        return Err(Error::invalid(op, format!("sizes {sizes:?} has {} entries for {x}", sizes.len())));
    }
    let mut nm = Vec::with_capacity(x.rank());
    for (i, &s) in sizes.iter().enumerate() {
        let d = x.dims[i];
        if s < 0 || (d != DYNAMIC_DIM && s > d) {
            return Err(Error::invalid(op, format!("axis {i}: size {s} out of range for {x} (need 0 ≤ size ≤ dim)")));
        }
        nm.push(if s == d { x.axis_name(i).to_string() } else { String::new() });
    }
    Ok(make(x.dtype, sizes.to_vec(), nm))
}

/// DynamicUpdateSlice (§4.5): operands `x, update` then one scalar int start per axis; update of
/// the same dtype and rank, each dim ≤ x's. Output: x's shape.
pub(super) fn dynamic_update_slice(op: &str, inputs: &[&Shape]) -> Result<Shape> {
    if inputs.len() < 2 {
        return Err(Error::invalid(
            op,
            format!("expects x, update and start operands, got {} operand(s)", inputs.len()),
        ));
    }
    let (x, u) = (inputs[0], inputs[1]);
    if u.dtype != x.dtype {
        return Err(Error::invalid(op, format!("update dtype {} differs from x dtype {}", u.dtype, x.dtype)));
    }
    if u.rank() != x.rank() {
        return Err(Error::invalid(op, format!("update {u} and x {x} have different ranks")));
    }
    check_start_operands(op, &inputs[2..], x.rank())?;
    for i in 0..x.rank() {
        let (xd, ud) = (x.dims[i], u.dims[i]);
        let ok = if ud == DYNAMIC_DIM {
            xd == DYNAMIC_DIM && x.axis_name(i) == u.axis_name(i)
        } else {
            xd == DYNAMIC_DIM || ud <= xd
        };
        if !ok {
            return Err(Error::invalid(op, format!("axis {i}: update {u} does not fit in x {x}")));
        }
    }
    Ok(x.clone())
}

/// Pad (§4.5, §9): per axis `d + start + end + max(d−1, 0)·interior` (must be ≥ 0), interior ≥ 0,
/// configs for the leading axes (missing = 0); fill is a scalar of x's dtype. Dynamic axes only
/// take an all-zero config.
pub(super) fn pad(op: &str, x: &Shape, fill: &Shape, axes: &[PadAxis]) -> Result<Shape> {
    if fill.dtype != x.dtype || !fill.is_scalar() {
        return Err(Error::invalid(op, format!("fill {fill} must be a scalar of x's dtype {}", x.dtype)));
    }
    if axes.len() > x.rank() {
        return Err(Error::invalid(op, format!("{} pad configs given for {x} of rank {}", axes.len(), x.rank())));
    }
    let mut dims = x.dims.clone();
    let mut nm = names(x);
    for (i, p) in axes.iter().enumerate() {
        if p.interior < 0 {
            return Err(Error::invalid(op, format!("axis {i}: interior padding {} is negative", p.interior)));
        }
        if *p == PadAxis::default() {
            continue;
        }
        let d = x.dims[i];
        if d == DYNAMIC_DIM {
            return Err(Error::invalid(
                op,
                format!("axis {i}: dynamic axis {:?} cannot be padded ({p:?})", x.axis_name(i)),
            ));
        }
        let n = d as i128 + p.start as i128 + p.end as i128 + (d as i128 - 1).max(0) * p.interior as i128;
        if n < 0 {
            return Err(Error::invalid(op, format!("axis {i}: padding {p:?} of dim {d} gives negative size {n}")));
        }
        dims[i] = to_dim(op, i, n)?;
        nm[i] = String::new();
    }
    Ok(make(x.dtype, dims, nm))
}
