//! Helpers shared by the handlers: ONNX broadcasting onto the IR's equal-rank rule, axis
//! normalisation, reading constant operands, dtype checks.

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::{ValueDef, ValueId};
use crate::ir::op::{BinaryOp, CompareOp, Op, UnaryOp};
use crate::ir::shape::Shape;

use crate::onnx::graph::{Ctx, Node};

/// Normalises a possibly negative ONNX axis against `rank` (`-1` = last).
pub(crate) fn axis(n: &Node<'_>, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if a < -r || a >= r.max(1) && !(r == 0 && a == 0) {
        return Err(n.invalid(format!("axis {a} is out of range for rank {rank}")));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// Normalises a list of axes, rejecting duplicates.
pub(crate) fn axes(n: &Node<'_>, list: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(list.len());
    for &a in list {
        let a = axis(n, a, rank)?;
        if out.contains(&a) {
            return Err(n.invalid(format!("axis {a} is listed twice in {list:?}")));
        }
        out.push(a);
    }
    Ok(out)
}

/// The elements of operand `i`, which must be a constant integer tensor (after import-time
/// folding): `what` names it in the error (e.g. "shape").
pub(crate) fn const_ints(ctx: &Ctx<'_>, n: &Node<'_>, i: usize, what: &str) -> Result<Vec<i64>> {
    let v = n.input(i)?;
    ctx.known_i64s(v).ok_or_else(|| not_constant(ctx, n, i, what, "a constant integer tensor"))
}

/// The error for operand `i` of `n` (`what`, e.g. "axes"), which must be `kind` (e.g. "a
/// constant integer tensor") known at import but is not a constant. It names the graph inputs
/// the operand is computed from and says how to make them constants: freezing them with
/// [`ImportOptions::constant_inputs`](crate::onnx::ImportOptions::constant_inputs) (which
/// [`crate::onnx::inputs_to_freeze`] reads back from the error), making them initializers, or,
/// when the value may derive from dynamic dimensions, binding those.
pub(crate) fn not_constant(ctx: &Ctx<'_>, n: &Node<'_>, i: usize, what: &str, kind: &str) -> Error {
    let head = format!("input {i} ({what}) must be {kind} known at import");
    let Some(v) = n.opt_input(i) else { return n.invalid(format!("{head}, but it is not given")) };
    let inputs = ctx.graph_inputs_of(v);
    let quoted: Vec<String> = inputs.iter().map(|(s, _)| format!("{s:?}")).collect();
    let is_param = matches!(ctx.m.value(v).def, ValueDef::Param(_)) && ctx.m.value(v).func == ctx.m.main;
    let msg = match quoted.len() {
        0 => format!("{head}, but it is computed at run time"),
        1 if is_param => format!(
            "{head}, but it is {FROM_GRAPH_INPUT} {}: freeze it with ImportOptions::constant_inputs (or make it \
             an initializer)",
            quoted[0]
        ),
        k => {
            let dynamic = inputs.iter().any(|&(_, p)| ctx.shape(p).is_dynamic());
            let (them, s) = if k == 1 { ("it", "") } else { ("them", "s") };
            let mut m = format!(
                "{head}, but it is computed at run time from {FROM_GRAPH_INPUT}{s} {}: freeze {them} with \
                 ImportOptions::constant_inputs (or make {them} initializer{s})",
                quoted.join(", ")
            );
            if dynamic {
                m.push_str(
                    "; if it comes from their dynamic dimensions, bind those with ImportOptions::dims / --dim instead",
                );
            }
            m
        }
    };
    n.unsupported(msg)
}

/// The words before the quoted input names in [`not_constant`]'s message (`graph input "a"`,
/// `graph inputs "a", "b"`), which [`crate::onnx::inputs_to_freeze`] looks for.
pub(crate) const FROM_GRAPH_INPUT: &str = "graph input";

/// [`const_ints`] for an optional operand.
pub(crate) fn opt_const_ints(ctx: &Ctx<'_>, n: &Node<'_>, i: usize, what: &str) -> Result<Option<Vec<i64>>> {
    match n.opt_input(i) {
        None => Ok(None),
        Some(_) => const_ints(ctx, n, i, what).map(Some),
    }
}

/// Static dims of `v` (an error naming the node when an axis is dynamic).
pub(crate) fn static_dims(ctx: &Ctx<'_>, n: &Node<'_>, v: ValueId) -> Result<Vec<i64>> {
    let s = ctx.shape(v);
    if s.is_dynamic() {
        return Err(
            n.unsupported(format!("operand shape {s} has dynamic axes (bind them with ImportOptions::dims / --dim)"))
        );
    }
    Ok(s.dims.clone())
}

/// Reshapes `v` to rank `rank` by prepending size-1 axes (ONNX/NumPy rank extension).
pub(crate) fn extend_rank(ctx: &mut Ctx<'_>, _n: &Node<'_>, v: ValueId, rank: usize) -> Result<ValueId> {
    let r = ctx.rank(v);
    if r >= rank || r == 0 {
        return Ok(v);
    }
    // Dynamic axes keep their names (a Reshape maps them in order).
    let mut dims = vec![1i64; rank - r];
    dims.extend(&ctx.shape(v).dims);
    ctx.emit1(Op::Reshape { dims }, &[v])
}

/// Brings operands to a common rank so that the IR's binary broadcasting (equal ranks, dims
/// equal or 1, scalars broadcast) implements ONNX multidirectional broadcasting.
pub(crate) fn broadcastable(ctx: &mut Ctx<'_>, n: &Node<'_>, vs: &[ValueId]) -> Result<Vec<ValueId>> {
    let rank = vs.iter().map(|&v| ctx.rank(v)).max().unwrap_or(0);
    vs.iter().map(|&v| extend_rank(ctx, n, v, rank)).collect()
}

/// The ONNX broadcast of several static shapes (an error naming the node when incompatible).
pub(crate) fn broadcast_dims(n: &Node<'_>, shapes: &[Vec<i64>]) -> Result<Vec<i64>> {
    let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![1i64; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(n.invalid(format!("shapes {shapes:?} do not broadcast")));
            }
        }
    }
    Ok(out)
}

/// Broadcasts `v` to the static `dims` (ONNX rules: rank-extend, then expand size-1 axes).
pub(crate) fn broadcast_to(ctx: &mut Ctx<'_>, n: &Node<'_>, v: ValueId, dims: &[i64]) -> Result<ValueId> {
    let src = static_dims(ctx, n, v)?;
    if src == dims {
        return Ok(v);
    }
    if src.len() > dims.len() {
        return Err(n.invalid(format!("cannot broadcast {src:?} to {dims:?}")));
    }
    let off = dims.len() - src.len();
    let axes: Vec<usize> = (off..dims.len()).collect();
    let shape = crate::ir::shape::Shape::new(ctx.dtype(v), dims);
    ctx.emit1(Op::BroadcastInDim { shape, axes }, &[v])
}

/// The ONNX broadcast of shapes with named dynamic axes (equal ranks, after
/// [`broadcastable`]): a size-1 axis takes the other's size or name, dynamic axes meet by name.
/// The result's dtype is the first shape's.
pub(crate) fn broadcast_named(n: &Node<'_>, shapes: &[Shape]) -> Result<Shape> {
    let Some(first) = shapes.first() else { return Err(n.invalid("nothing to broadcast")) };
    let rank = first.rank();
    let mut dims = vec![1i64; rank];
    let mut names = vec![String::new(); rank];
    for s in shapes {
        if s.rank() != rank {
            return Err(n.invalid(format!("cannot broadcast {s} with {first}")));
        }
        for a in 0..rank {
            let (d, name) = (s.dims[a], s.axis_name(a));
            if d == 1 {
                continue;
            }
            if dims[a] == 1 {
                dims[a] = d;
                names[a] = name.to_string();
            } else if dims[a] != d || (d < 0 && names[a] != name) {
                let list: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
                return Err(n.unsupported(format!("shapes {} do not broadcast (axis {a})", list.join(", "))));
            }
        }
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    Shape::with_names(first.dtype, &dims, &names).map_err(|e| n.invalid(e.to_string()))
}

/// Broadcasts `v` (of the same rank) to `to`'s dims and axis names (its dtype kept).
pub(crate) fn broadcast_to_named(ctx: &mut Ctx<'_>, n: &Node<'_>, v: ValueId, to: &Shape) -> Result<ValueId> {
    let s = ctx.shape(v);
    if s.dims == to.dims && (0..s.rank()).all(|a| s.dims[a] >= 0 || s.axis_name(a) == to.axis_name(a)) {
        return Ok(v);
    }
    if s.rank() != to.rank() {
        return Err(n.invalid(format!("cannot broadcast {s} to {to}")));
    }
    let shape = to.with_dtype(s.dtype);
    let axes = (0..to.rank()).collect();
    ctx.emit1(Op::BroadcastInDim { shape, axes }, &[v])
}

/// Converts `v` to `dtype` (no node when it already has it).
pub(crate) fn cast(ctx: &mut Ctx<'_>, v: ValueId, dtype: DType) -> Result<ValueId> {
    if ctx.dtype(v) == dtype {
        return Ok(v);
    }
    ctx.emit1(Op::ConvertDType { dtype }, &[v])
}

/// Checks that operand `i` has a float dtype.
pub(crate) fn require_float(ctx: &Ctx<'_>, n: &Node<'_>, v: ValueId) -> Result<()> {
    let dt = ctx.dtype(v);
    if !dt.is_float() {
        return Err(n.unsupported(format!("element type {dt} (float types only)")));
    }
    Ok(())
}

/// `op(x)`.
pub(crate) fn un(ctx: &mut Ctx<'_>, op: UnaryOp, x: ValueId) -> Result<ValueId> {
    ctx.emit1(Op::Unary(op), &[x])
}

/// `op(a, b)` on operands of equal rank (or a scalar).
pub(crate) fn bin(ctx: &mut Ctx<'_>, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId> {
    ctx.emit1(Op::Binary(op), &[a, b])
}

/// The IEEE comparison `a dir b` (operands of equal rank, or a scalar).
pub(crate) fn cmp(ctx: &mut Ctx<'_>, dir: CompareOp, a: ValueId, b: ValueId) -> Result<ValueId> {
    ctx.emit1(Op::Compare { dir, total_order: false }, &[a, b])
}

/// `cond ? on_true : on_false` (operands of equal dims or scalars).
pub(crate) fn select(ctx: &mut Ctx<'_>, cond: ValueId, on_true: ValueId, on_false: ValueId) -> Result<ValueId> {
    ctx.emit1(Op::Where, &[cond, on_true, on_false])
}

/// `Reshape` unless `v` already has `dims`.
pub(crate) fn reshape_to(ctx: &mut Ctx<'_>, v: ValueId, dims: &[i64]) -> Result<ValueId> {
    if ctx.shape(v).dims == dims {
        return Ok(v);
    }
    ctx.emit1(Op::Reshape { dims: dims.to_vec() }, &[v])
}

/// An int64 iota of `dims` counting along `axis`.
pub(crate) fn iota(ctx: &mut Ctx<'_>, dims: &[i64], axis: usize) -> Result<ValueId> {
    ctx.emit1(Op::Iota { shape: Shape::new(DType::Int64, dims), axis }, &[])
}
