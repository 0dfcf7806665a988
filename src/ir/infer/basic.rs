//! Shape inference for elementwise, shape-manipulation, reduction, cumulative and barrier ops.
//!
//! Rules: catalogue §2 (dynamic axes and name unification), §4.0–§4.6, §4.12, §9 and §10.
//! Data-movement ops live in `basic_movement.rs`; this file holds the dispatcher, the shared
//! helpers (dtype groups, broadcasting, axis-name unification) and the elementwise, reduction,
//! cumulative and barrier rules.

#[path = "basic_movement.rs"]
mod movement;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{BinaryOp, CompareOp, Op, ReduceKind, UnaryOp};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    let name = op.op_type().to_string();
    let n = name.as_str();
    for (i, s) in inputs.iter().enumerate() {
        if !s.dtype.is_supported() {
            return Err(Error::invalid(
                n,
                format!("operand {i} has dtype {}, which is declared only and cannot hold data", s.dtype),
            ));
        }
        s.validate_for(n, &format!("operand {i}"))?;
    }
    let single = |r: Result<Shape>| r.map(|s| vec![s]);
    match op {
        Op::Unary(u) => {
            arity(n, inputs, 1)?;
            single(unary(n, *u, inputs[0]))
        }
        Op::Binary(b) => {
            arity(n, inputs, 2)?;
            single(binary(n, *b, inputs[0], inputs[1]))
        }
        Op::Compare { dir, .. } => {
            arity(n, inputs, 2)?;
            single(compare(n, *dir, inputs[0], inputs[1]))
        }
        Op::Clamp => {
            arity(n, inputs, 3)?;
            single(clamp(n, inputs[0], inputs[1], inputs[2]))
        }
        Op::Where => {
            arity(n, inputs, 3)?;
            single(where_(n, inputs[0], inputs[1], inputs[2]))
        }
        Op::ConvertDType { dtype } => {
            arity(n, inputs, 1)?;
            check_target_dtype(n, *dtype)?;
            single(Ok(inputs[0].with_dtype(*dtype)))
        }
        Op::Bitcast { dtype } => {
            arity(n, inputs, 1)?;
            single(movement::bitcast(n, inputs[0], *dtype))
        }
        Op::Reshape { dims } => {
            arity(n, inputs, 1)?;
            single(movement::reshape(n, inputs[0], dims))
        }
        Op::DynamicReshape { specs } => single(movement::dynamic_reshape(n, inputs, specs)),
        Op::Transpose { perm } => {
            arity(n, inputs, 1)?;
            single(movement::transpose(n, inputs[0], perm))
        }
        Op::BroadcastInDim { shape, axes } => {
            arity(n, inputs, 1)?;
            single(movement::broadcast_in_dim(n, inputs[0], shape, axes))
        }
        Op::Concatenate { axis } => single(movement::concatenate(n, inputs, *axis)),
        Op::Slice { starts, limits, strides } => {
            arity(n, inputs, 1)?;
            single(movement::slice(n, inputs[0], starts, limits, strides))
        }
        Op::DynamicSlice { sizes } => single(movement::dynamic_slice(n, inputs, sizes)),
        Op::DynamicUpdateSlice => single(movement::dynamic_update_slice(n, inputs)),
        Op::Pad { axes } => {
            arity(n, inputs, 2)?;
            single(movement::pad(n, inputs[0], inputs[1], axes))
        }
        Op::Reverse { axes } => {
            arity(n, inputs, 1)?;
            check_axes_unique(n, "axes", axes, inputs[0].rank())?;
            single(Ok(inputs[0].clone()))
        }
        Op::Iota { shape, axis } => {
            arity(n, inputs, 0)?;
            single(iota(n, shape, *axis))
        }
        Op::DynamicShape => {
            arity(n, inputs, 1)?;
            single(Ok(Shape::new(DType::Int32, &[inputs[0].rank() as i64])))
        }
        Op::DynamicDimensionSize { axis } => {
            arity(n, inputs, 1)?;
            check_axis(n, "axis", *axis, inputs[0].rank())?;
            single(Ok(Shape::scalar(DType::Int32)))
        }
        Op::Reduce { kind, axes } => {
            arity(n, inputs, 1)?;
            single(reduce(n, *kind, inputs[0], axes))
        }
        Op::ArgMinMax { axis, out_dtype, .. } => {
            arity(n, inputs, 1)?;
            single(arg_min_max(n, inputs[0], *axis, *out_dtype))
        }
        Op::Cumulative { axis, .. } => {
            arity(n, inputs, 1)?;
            let x = inputs[0];
            check_dtype(n, "x", x.dtype, Group::Num)?;
            check_axis(n, "axis", *axis, x.rank())?;
            single(Ok(x.clone()))
        }
        Op::OptimizationBarrier => {
            if inputs.is_empty() {
                return Err(Error::invalid(n, "at least one operand is required"));
            }
            Ok(inputs.iter().map(|s| (*s).clone()).collect())
        }
        Op::SchedulingBarrier => match inputs.first() {
            Some(x) => Ok(vec![(*x).clone()]),
            None => Err(Error::invalid(n, "the operand to pass through is missing")),
        },
        other => Err(Error::invalid(n, format!("{:?} is not handled by the basic shape inference", other.op_type()))),
    }
}

// ------------------------------------------------------------------------------------------------
// Shared helpers.

/// A dtype group accepted by an op (§4.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Group {
    /// Any supported dtype, packed ones included.
    Any,
    /// Bool, non-packed ints, floats and complex.
    Unpacked,
    /// Non-packed ints, floats and complex.
    Num,
    /// Non-packed ints and floats.
    Ordered,
    /// Signed non-packed ints, floats and complex.
    Signed,
    /// F16, BF16, F32, F64.
    Float,
    /// Floats and complex.
    FloatOrComplex,
    /// Complex only.
    Complex,
    /// Non-packed integers.
    Int,
    /// Bool only.
    Bool,
}

impl Group {
    fn accepts(self, d: DType) -> bool {
        let int = d.is_int() && !d.is_packed();
        match self {
            Group::Any => d.is_supported(),
            Group::Unpacked => d.is_bool() || d.is_numeric(),
            Group::Num => d.is_numeric(),
            Group::Ordered => int || d.is_float(),
            Group::Signed => d.is_numeric() && !d.is_unsigned(),
            Group::Float => d.is_float(),
            Group::FloatOrComplex => d.is_float() || d.is_complex(),
            Group::Complex => d.is_complex(),
            Group::Int => int,
            Group::Bool => d.is_bool(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Group::Any => "a supported dtype",
            Group::Unpacked => "a non-packed dtype (Bool, integer, float or complex)",
            Group::Num => "a numeric dtype (non-packed integer, float or complex)",
            Group::Ordered => "an ordered numeric dtype (non-packed integer or float; no complex, no Bool)",
            Group::Signed => "a signed numeric dtype (signed integer, float or complex)",
            Group::Float => "a float dtype (Float16, BFloat16, Float32, Float64)",
            Group::FloatOrComplex => "a float or complex dtype",
            Group::Complex => "a complex dtype (Complex64, Complex128)",
            Group::Int => "a non-packed integer dtype",
            Group::Bool => "Bool",
        }
    }
}

/// Errors unless `d` is in group `g`; `what` names the operand.
pub(super) fn check_dtype(op: &str, what: &str, d: DType, g: Group) -> Result<()> {
    if g.accepts(d) {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("{what} has dtype {d}; expected {}", g.describe())))
    }
}

/// Errors unless `d` is a dtype a tensor can hold (F8/F4/Token/Invalid are names only).
pub(super) fn check_target_dtype(op: &str, d: DType) -> Result<()> {
    if d.is_supported() {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("target dtype {d} is declared only and cannot hold data")))
    }
}

/// Errors unless exactly `n` operands were given.
pub(super) fn arity(op: &str, inputs: &[&Shape], n: usize) -> Result<()> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("expects {n} operand(s), got {}", inputs.len())))
    }
}

/// Errors unless `axis < rank`.
pub(super) fn check_axis(op: &str, what: &str, axis: usize, rank: usize) -> Result<()> {
    if axis < rank { Ok(()) } else { Err(Error::invalid(op, format!("{what} {axis} is out of range for rank {rank}"))) }
}

/// Errors unless every axis is `< rank` and no axis repeats.
pub(super) fn check_axes_unique(op: &str, what: &str, axes: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    for &a in axes {
        check_axis(op, what, a, rank)?;
        if seen[a] {
            return Err(Error::invalid(op, format!("{what} {axes:?} list axis {a} more than once")));
        }
        seen[a] = true;
    }
    Ok(())
}

/// The axis names of `s` (`""` for unnamed axes).
pub(super) fn names(s: &Shape) -> Vec<String> {
    (0..s.rank()).map(|i| s.axis_name(i).to_string()).collect()
}

/// A shape from dims and names (names dropped when all empty).
pub(super) fn make(dtype: DType, dims: Vec<i64>, names: Vec<String>) -> Shape {
    let axis_names = if names.iter().all(|n| n.is_empty()) { None } else { Some(names) };
    Shape { dtype, dims, axis_names }
}

/// Unifies two axis names that meet (§2): `""+x → x`, `x+x → x`, `x+y` and `"?"+"?"` are errors.
pub(super) fn unify_names(op: &str, axis: usize, a: &str, b: &str) -> Result<String> {
    if a.is_empty() {
        return Ok(b.to_string());
    }
    if b.is_empty() {
        return Ok(a.to_string());
    }
    if a == b && a != "?" {
        return Ok(a.to_string());
    }
    Err(Error::invalid(op, format!("axis {axis}: axis names {a:?} and {b:?} cannot be unified")))
}

/// Merges one axis of two operands that must have equal dims (`bcast`: or one of them 1).
/// Returns the resulting dim and name.
pub(super) fn merge_axis(
    op: &str,
    axis: usize,
    (da, na): (i64, &str),
    (db, nb): (i64, &str),
    bcast: bool,
    labels: (&str, &str),
) -> Result<(i64, String)> {
    let name = unify_names(op, axis, na, nb)?;
    let dim = if da == db {
        da
    } else if bcast && da == 1 {
        db
    } else if bcast && db == 1 {
        da
    } else if da == DYNAMIC_DIM || db == DYNAMIC_DIM {
        return Err(Error::invalid(
            op,
            format!(
                "axis {axis}: dynamic axis {name:?} of {} cannot meet static dimension {} of {}",
                if da == DYNAMIC_DIM { labels.0 } else { labels.1 },
                if da == DYNAMIC_DIM { db } else { da },
                if da == DYNAMIC_DIM { labels.1 } else { labels.0 },
            ),
        ));
    } else {
        let how = if bcast { "neither equal nor 1" } else { "not equal" };
        return Err(Error::invalid(
            op,
            format!("axis {axis}: dimension {da} of {} and {db} of {} are {how}", labels.0, labels.1),
        ));
    };
    Ok((dim, name))
}

/// Merges two shapes axis by axis (equal ranks required); `bcast` allows dims of 1 to broadcast.
/// The result has `a`'s dtype.
fn merge_shapes(op: &str, a: &Shape, b: &Shape, bcast: bool, labels: (&str, &str)) -> Result<Shape> {
    if a.rank() != b.rank() {
        return Err(Error::invalid(
            op,
            format!("{} {a} and {} {b} have different ranks (only scalars broadcast across ranks)", labels.0, labels.1),
        ));
    }
    let mut dims = Vec::with_capacity(a.rank());
    let mut nm = Vec::with_capacity(a.rank());
    for i in 0..a.rank() {
        let (d, n) = merge_axis(op, i, (a.dims[i], a.axis_name(i)), (b.dims[i], b.axis_name(i)), bcast, labels)?;
        dims.push(d);
        nm.push(n);
    }
    Ok(make(a.dtype, dims, nm))
}

/// The binary broadcasting rule of §4.0 (dtypes are checked by the caller): a scalar takes the
/// other shape; otherwise equal ranks and per-axis dims equal or 1.
fn broadcast(op: &str, l: &Shape, r: &Shape, strict: bool) -> Result<Shape> {
    if l.is_scalar() {
        return Ok(r.with_dtype(l.dtype));
    }
    if r.is_scalar() {
        return Ok(l.clone());
    }
    merge_shapes(op, l, r, !strict, ("lhs", "rhs"))
}

/// Element count of static dims as i128, erroring on overflow.
pub(super) fn product(op: &str, dims: impl IntoIterator<Item = i64>) -> Result<i128> {
    let mut p: i128 = 1;
    for d in dims {
        p = p.checked_mul(d as i128).ok_or_else(|| Error::invalid(op, "element count overflows"))?;
    }
    Ok(p)
}

/// Converts an i128 dimension back to i64, erroring when it does not fit.
pub(super) fn to_dim(op: &str, axis: usize, d: i128) -> Result<i64> {
    i64::try_from(d).map_err(|_| Error::invalid(op, format!("axis {axis}: resulting dimension {d} overflows")))
}

// ------------------------------------------------------------------------------------------------
// Elementwise.

fn unary(op: &str, u: UnaryOp, x: &Shape) -> Result<Shape> {
    use UnaryOp::*;
    let d = x.dtype;
    let group = match u {
        Abs | Sign | IsNaN => Group::Num,
        Neg => Group::Signed,
        Ceil | Floor | Round | Erf | IsFinite => Group::Float,
        Exp | Expm1 | Log | Log1p | Sqrt | Rsqrt | Logistic | Cos | Sin | Tanh | Real | Imag => Group::FloatOrComplex,
        Conj => Group::Complex,
        LogicalNot => Group::Bool,
        BitwiseNot | BitCount | Clz => Group::Int,
        Identity => Group::Any,
    };
    check_dtype(op, "operand x", d, group)?;
    let out = match u {
        Abs | Real | Imag if d.is_complex() => d.real_dtype(),
        IsNaN | IsFinite => DType::Bool,
        _ => d,
    };
    Ok(x.with_dtype(out))
}

fn same_dtype(op: &str, l: &Shape, r: &Shape, labels: (&str, &str)) -> Result<()> {
    if l.dtype != r.dtype {
        return Err(Error::invalid(
            op,
            format!("{} dtype {} and {} dtype {} differ", labels.0, l.dtype, labels.1, r.dtype),
        ));
    }
    Ok(())
}

fn binary(op: &str, b: BinaryOp, l: &Shape, r: &Shape) -> Result<Shape> {
    use BinaryOp::*;
    same_dtype(op, l, r, ("lhs", "rhs"))?;
    if b == Complex {
        let out = match l.dtype {
            DType::Float32 => DType::Complex64,
            DType::Float64 => DType::Complex128,
            d => {
                return Err(Error::invalid(op, format!("operands have dtype {d}; expected Float32 or Float64")));
            }
        };
        return Ok(broadcast(op, l, r, true)?.with_dtype(out));
    }
    let group = match b {
        Add | Sub | Mul | Div | Pow | Max | Min => Group::Num,
        Rem => Group::Ordered,
        Atan2 => Group::Float,
        BitwiseAnd | BitwiseOr | BitwiseXor | ShiftLeft | ShiftRightArithmetic | ShiftRightLogical => Group::Int,
        LogicalAnd | LogicalOr | LogicalXor => Group::Bool,
        Complex => Group::Float,
    };
    check_dtype(op, "operands", l.dtype, group)?;
    broadcast(op, l, r, false)
}

fn compare(op: &str, dir: CompareOp, l: &Shape, r: &Shape) -> Result<Shape> {
    same_dtype(op, l, r, ("lhs", "rhs"))?;
    let group = match dir {
        CompareOp::Equal | CompareOp::NotEqual => Group::Num,
        _ => Group::Ordered,
    };
    check_dtype(op, "operands", l.dtype, group)?;
    Ok(broadcast(op, l, r, false)?.with_dtype(DType::Bool))
}

fn clamp(op: &str, lo: &Shape, x: &Shape, hi: &Shape) -> Result<Shape> {
    same_dtype(op, lo, x, ("min", "x"))?;
    same_dtype(op, hi, x, ("max", "x"))?;
    check_dtype(op, "x", x.dtype, Group::Ordered)?;
    let mut out = x.clone();
    for (label, bound) in [("min", lo), ("max", hi)] {
        if !bound.is_scalar() {
            out = merge_shapes(op, &out, bound, false, ("x", label))?;
        }
    }
    Ok(out)
}

fn where_(op: &str, cond: &Shape, t: &Shape, f: &Shape) -> Result<Shape> {
    check_dtype(op, "cond", cond.dtype, Group::Bool)?;
    same_dtype(op, t, f, ("on_true", "on_false"))?;
    check_dtype(op, "on_true", t.dtype, Group::Unpacked)?;
    let value = match (t.is_scalar(), f.is_scalar()) {
        (false, false) => Some(merge_shapes(op, t, f, false, ("on_true", "on_false"))?),
        (false, true) => Some(t.clone()),
        (true, false) => Some(f.clone()),
        (true, true) => None,
    };
    match value {
        Some(v) if cond.is_scalar() => Ok(v),
        Some(v) => Ok(merge_shapes(op, &v, cond, false, ("values", "cond"))?.with_dtype(t.dtype)),
        None => Ok(cond.with_dtype(t.dtype)),
    }
}

fn iota(op: &str, shape: &Shape, axis: usize) -> Result<Shape> {
    shape.validate_for(op, &format!("shape {shape}"))?;
    check_target_dtype(op, shape.dtype)?;
    check_dtype(op, "shape", shape.dtype, Group::Ordered)?;
    if shape.is_scalar() {
        return Err(Error::invalid(op, "shape must have rank ≥ 1, got a scalar"));
    }
    check_axis(op, "axis", axis, shape.rank())?;
    Ok(shape.clone())
}

// ------------------------------------------------------------------------------------------------
// Reductions.

/// Output of removing `axes` (sorted, unique, checked) from `x`.
fn remove_axes(x: &Shape, axes: &[usize], dtype: DType) -> Shape {
    let keep = |i: &usize| !axes.contains(i);
    let dims = (0..x.rank()).filter(keep).map(|i| x.dims[i]).collect();
    let nm = (0..x.rank()).filter(keep).map(|i| x.axis_name(i).to_string()).collect();
    make(dtype, dims, nm)
}

fn reduce(op: &str, kind: ReduceKind, x: &Shape, axes: &[usize]) -> Result<Shape> {
    use ReduceKind::*;
    let group = match kind {
        Sum | Product | Max | Min => Group::Num,
        BitwiseAnd | BitwiseOr | BitwiseXor => Group::Int,
        LogicalAnd | LogicalOr | LogicalXor => Group::Bool,
    };
    check_dtype(op, "x", x.dtype, group)?;
    check_axes_unique(op, "axes", axes, x.rank())?;
    if axes.windows(2).any(|w| w[0] > w[1]) {
        return Err(Error::invalid(op, format!("axes {axes:?} must be sorted in increasing order")));
    }
    Ok(remove_axes(x, axes, x.dtype))
}

fn arg_min_max(op: &str, x: &Shape, axis: usize, out_dtype: DType) -> Result<Shape> {
    check_dtype(op, "x", x.dtype, Group::Ordered)?;
    if x.is_scalar() {
        return Err(Error::invalid(op, "x must not be a scalar"));
    }
    check_axis(op, "axis", axis, x.rank())?;
    if x.dims[axis] == 0 {
        return Err(Error::invalid(op, format!("axis {axis} of x {x} is empty: there is no extreme to index")));
    }
    check_target_dtype(op, out_dtype)?;
    check_dtype(op, "out_dtype", out_dtype, Group::Int)?;
    Ok(remove_axes(x, &[axis], out_dtype))
}
