//! Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin,
//! CumSum, TopK.
//!
//! Reduction axes come from the `axes` attribute (ReduceSum before opset 13, the others before
//! 18) or from the optional `axes` input (a constant); no axes means every axis, or none with
//! `noop_with_empty_axes` (the elementwise part of the reduction still applies then, as in the
//! ONNX function bodies: ReduceSumSquare squares, ReduceL2 takes |x|). Empty reductions give the
//! identity of the reduction (0 for sums, 1 for products, −inf / lowest for max, NaN for a
//! float mean, −inf for the log-sums). TopK sorts each lane with a stable comparator `Sort`
//! (NaN ranks above every number, as NumPy's sort places it; ties keep the lower index first).

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, ValueId};
use crate::ir::op::{ArithReduce, BinaryOp, CompareOp, Op, ReduceKind, UnaryOp};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

use super::Handler;
use super::common::{axes as norm_axes, axis as norm_axis, bin, cast, cmp, not_constant, static_dims, un};
use crate::onnx::graph::{Ctx, Node};

/// Op types mapped here.
pub(super) const OPS: &[&str] = &[
    "ArgMax",
    "ArgMin",
    "CumSum",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "TopK",
];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    Some(match op {
        "ReduceSum" => |c, n| reduce(c, n, Red::Sum),
        "ReduceMean" => |c, n| reduce(c, n, Red::Mean),
        "ReduceMax" => |c, n| reduce(c, n, Red::Max),
        "ReduceMin" => |c, n| reduce(c, n, Red::Min),
        "ReduceProd" => |c, n| reduce(c, n, Red::Prod),
        "ReduceL1" => |c, n| reduce(c, n, Red::L1),
        "ReduceL2" => |c, n| reduce(c, n, Red::L2),
        "ReduceLogSum" => |c, n| reduce(c, n, Red::LogSum),
        "ReduceLogSumExp" => |c, n| reduce(c, n, Red::LogSumExp),
        "ReduceSumSquare" => |c, n| reduce(c, n, Red::SumSquare),
        "ArgMax" => |c, n| arg_min_max(c, n, false),
        "ArgMin" => |c, n| arg_min_max(c, n, true),
        "CumSum" => cumsum,
        "TopK" => top_k,
        _ => return None,
    })
}

/// The ONNX reductions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

/// `Reduce` over `axes` (sorted); no node when there are none.
fn red(ctx: &mut Ctx<'_>, kind: ReduceKind, x: ValueId, axes: &[usize]) -> Result<ValueId> {
    if axes.is_empty() {
        return Ok(x);
    }
    ctx.emit1(Op::Reduce { kind, axes: axes.to_vec() }, &[x])
}

/// Re-inserts the reduced `axes` of `src` (a shape) as size-1 axes of `y` (`keepdims`).
fn keep_dims(ctx: &mut Ctx<'_>, y: ValueId, src: &Shape, axes: &[usize]) -> Result<ValueId> {
    if axes.is_empty() {
        return Ok(y);
    }
    let dims: Vec<i64> = (0..src.rank()).map(|i| if axes.contains(&i) { 1 } else { src.dims[i] }).collect();
    if !dims.contains(&DYNAMIC_DIM) {
        return ctx.emit1(Op::Reshape { dims }, &[y]);
    }
    // Dynamic axes keep their names: broadcast into the shape with size-1 reduced axes.
    let names = (0..src.rank()).map(|i| if axes.contains(&i) { String::new() } else { src.axis_name(i).to_string() });
    let shape = Shape { dtype: ctx.dtype(y), dims, axis_names: Some(names.collect()) };
    let kept: Vec<usize> = (0..src.rank()).filter(|i| !axes.contains(i)).collect();
    ctx.emit1(Op::BroadcastInDim { shape, axes: kept }, &[y])
}

/// The number of elements over `axes` of `x`, as a scalar of `dtype` (dynamic axes read at run
/// time).
fn count(ctx: &mut Ctx<'_>, x: ValueId, axes: &[usize], dtype: DType) -> Result<ValueId> {
    let dims = ctx.shape(x).dims.clone();
    let fixed: i64 = axes.iter().map(|&a| dims[a]).filter(|&d| d != DYNAMIC_DIM).product();
    let mut c = ctx.scalar(dtype, fixed as f64)?;
    for &a in axes.iter().filter(|&&a| dims[a] == DYNAMIC_DIM) {
        let d = ctx.emit1(Op::DynamicDimensionSize { axis: a }, &[x])?;
        let d = cast(ctx, d, dtype)?;
        c = bin(ctx, BinaryOp::Mul, c, d)?;
    }
    Ok(c)
}

/// The reduced axes of a Reduce* node (sorted), from its attribute or its input by opset.
fn reduce_axes(ctx: &Ctx<'_>, n: &Node<'_>, x: ValueId, kind: Red) -> Result<Vec<usize>> {
    let rank = ctx.rank(x);
    let noop = n.attr_i_or("noop_with_empty_axes", 0)? != 0;
    let input_from = if kind == Red::Sum { 13 } else { 18 };
    let list = if n.opset >= input_from {
        match n.opt_input(1) {
            None => None,
            Some(v) => match ctx.known_i64s(v) {
                Some(l) => Some(l),
                // Values known only at run time: fine when the count decides them (none, or
                // every axis once); otherwise the output shape would depend on them.
                None => match ctx.shape(v).dims[..] {
                    [0] => Some(vec![]),
                    [len] if len == rank as i64 && rank > 0 => Some((0..len).collect()),
                    _ => return Err(not_constant(ctx, n, 1, "axes", "a constant integer tensor")),
                },
            },
        }
    } else {
        if n.opt_input(1).is_some() {
            return Err(n.invalid(format!("an axes input needs opset ≥ {input_from} (the model imports {})", n.opset)));
        }
        n.attr_ints("axes")?
    };
    Ok(match list {
        Some(l) if !l.is_empty() => {
            let mut a = norm_axes(n, &l, rank)?;
            a.sort_unstable();
            a
        }
        _ if noop => vec![],
        _ => (0..rank).collect(),
    })
}

/// Any Reduce* op.
fn reduce(ctx: &mut Ctx<'_>, n: &Node<'_>, kind: Red) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let keepdims = n.attr_i_or("keepdims", 1)? != 0;
    let axes = reduce_axes(ctx, n, x, kind)?;
    let dt = ctx.dtype(x);
    let int = dt.is_int() && !dt.is_packed();
    let ok = match kind {
        Red::Max | Red::Min => int || dt.is_float() || dt.is_bool(),
        Red::LogSum | Red::LogSumExp => dt.is_float(),
        _ => int || dt.is_float(),
    };
    if !ok {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let src = ctx.shape(x).clone();
    let y = match kind {
        Red::Sum => red(ctx, ReduceKind::Sum, x, &axes)?,
        Red::Prod => red(ctx, ReduceKind::Product, x, &axes)?,
        Red::Max if dt.is_bool() => red(ctx, ReduceKind::LogicalOr, x, &axes)?,
        Red::Min if dt.is_bool() => red(ctx, ReduceKind::LogicalAnd, x, &axes)?,
        Red::Max => red(ctx, ReduceKind::Max, x, &axes)?,
        Red::Min => red(ctx, ReduceKind::Min, x, &axes)?,
        Red::Mean => {
            let s = red(ctx, ReduceKind::Sum, x, &axes)?;
            if axes.is_empty() {
                s
            } else {
                let c = count(ctx, x, &axes, dt)?;
                bin(ctx, BinaryOp::Div, s, c)?
            }
        }
        Red::L1 => {
            let a = un(ctx, UnaryOp::Abs, x)?;
            red(ctx, ReduceKind::Sum, a, &axes)?
        }
        Red::SumSquare => {
            let sq = bin(ctx, BinaryOp::Mul, x, x)?;
            red(ctx, ReduceKind::Sum, sq, &axes)?
        }
        Red::L2 => {
            let sq = bin(ctx, BinaryOp::Mul, x, x)?;
            let s = red(ctx, ReduceKind::Sum, sq, &axes)?;
            if int {
                // Integers: the root in f64, truncated back (NumPy's `astype`).
                let f = cast(ctx, s, DType::Float64)?;
                let r = un(ctx, UnaryOp::Sqrt, f)?;
                cast(ctx, r, dt)?
            } else {
                un(ctx, UnaryOp::Sqrt, s)?
            }
        }
        Red::LogSum => {
            let s = red(ctx, ReduceKind::Sum, x, &axes)?;
            un(ctx, UnaryOp::Log, s)?
        }
        Red::LogSumExp => {
            let wide = if dt.is_half() { DType::Float32 } else { dt };
            let xw = cast(ctx, x, wide)?;
            let r = log_sum_exp(ctx, xw, &src, &axes)?;
            cast(ctx, r, dt)?
        }
    };
    Ok(vec![if keepdims { keep_dims(ctx, y, &src, &axes)? } else { y }])
}

/// `m + ln Σ e^(x − m)` with `m` the maximum over `axes` (0 where it is infinite or the
/// reduction is empty, so that all −inf gives −inf and +inf gives +inf).
fn log_sum_exp(ctx: &mut Ctx<'_>, x: ValueId, src: &Shape, axes: &[usize]) -> Result<ValueId> {
    if axes.is_empty() {
        // ln e^x, elementwise.
        let e = un(ctx, UnaryOp::Exp, x)?;
        return un(ctx, UnaryOp::Log, e);
    }
    let m = red(ctx, ReduceKind::Max, x, axes)?;
    let finite = un(ctx, UnaryOp::IsFinite, m)?;
    let zero = ctx.scalar(ctx.dtype(x), 0.0)?;
    let m = ctx.emit1(Op::Where, &[finite, m, zero])?;
    let mk = keep_dims(ctx, m, src, axes)?;
    let d = bin(ctx, BinaryOp::Sub, x, mk)?;
    let e = un(ctx, UnaryOp::Exp, d)?;
    let s = red(ctx, ReduceKind::Sum, e, axes)?;
    let l = un(ctx, UnaryOp::Log, s)?;
    bin(ctx, BinaryOp::Add, l, m)
}

/// ArgMax / ArgMin (`axis`, `keepdims`, `select_last_index`): int64 indices; ties give the
/// first index (the last with `select_last_index`); a NaN counts as the extreme.
fn arg_min_max(ctx: &mut Ctx<'_>, n: &Node<'_>, is_min: bool) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = ctx.rank(x);
    let dt = ctx.dtype(x);
    if !(dt.is_float() || dt.is_int() && !dt.is_packed()) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    if rank == 0 {
        return Err(n.invalid("the input is a scalar (rank ≥ 1 required)"));
    }
    let axis = norm_axis(n, n.attr_i_or("axis", 0)?, rank)?;
    let keepdims = n.attr_i_or("keepdims", 1)? != 0;
    let last = n.attr_i_or("select_last_index", 0)? != 0;
    let src = ctx.shape(x).clone();
    if src.dims[axis] == 0 {
        return Err(n.invalid(format!("axis {axis} of the input {src} is empty")));
    }
    let op = Op::ArgMinMax { axis, out_dtype: DType::Int64, is_min };
    let y = if last {
        // The first extreme of the reversed axis, counted back from its end.
        let r = ctx.emit1(Op::Reverse { axes: vec![axis] }, &[x])?;
        let i = ctx.emit1(op, &[r])?;
        let top = count(ctx, x, &[axis], DType::Int64)?;
        let one = ctx.scalar(DType::Int64, 1.0)?;
        let top = bin(ctx, BinaryOp::Sub, top, one)?;
        bin(ctx, BinaryOp::Sub, top, i)?
    } else {
        ctx.emit1(op, &[x])?
    };
    Ok(vec![if keepdims { keep_dims(ctx, y, &src, &[axis])? } else { y }])
}

/// `CumSum(x, axis)` with `exclusive` and `reverse`. An axis known only at run time selects
/// among the sums along every axis (any other value than `0..rank` or `−rank..0` gives the sum
/// along the last axis).
fn cumsum(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = ctx.dtype(x);
    if !(dt.is_float() || dt.is_int() && !dt.is_packed()) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let rank = ctx.rank(x);
    if rank == 0 {
        return Err(n.invalid("the input is a scalar (rank ≥ 1 required)"));
    }
    let exclusive = n.attr_i_or("exclusive", 0)? != 0;
    let reverse = n.attr_i_or("reverse", 0)? != 0;
    let op = |axis| Op::Cumulative { kind: ArithReduce::Sum, axis, exclusive, reverse };
    let a = n.input(1)?;
    if ctx.shape(a).dims.iter().product::<i64>() != 1 || !ctx.dtype(a).is_int() || ctx.dtype(a).is_packed() {
        return Err(n.invalid(format!("axis must be one integer, got {}", ctx.shape(a))));
    }
    if let Some(v) = ctx.known_i64s(a) {
        let axis = norm_axis(n, v[0], rank)?;
        return Ok(vec![ctx.emit1(op(axis), &[x])?]);
    }
    // An axis known only at run time: the sum along each candidate axis, selected by the value
    // (`axis` or `axis − rank`).
    let a = if ctx.rank(a) > 0 { ctx.emit1(Op::Reshape { dims: vec![] }, &[a])? } else { a };
    let mut out = ctx.emit1(op(rank - 1), &[x])?;
    for axis in (0..rank - 1).rev() {
        let c = ctx.emit1(op(axis), &[x])?;
        let pos = ctx.scalar(ctx.dtype(a), axis as f64)?;
        let neg = ctx.scalar(ctx.dtype(a), axis as f64 - rank as f64)?;
        let is_pos = cmp(ctx, CompareOp::Equal, a, pos)?;
        let is_neg = cmp(ctx, CompareOp::Equal, a, neg)?;
        let hit = bin(ctx, BinaryOp::LogicalOr, is_pos, is_neg)?;
        out = ctx.emit1(Op::Where, &[hit, c, out])?;
    }
    Ok(vec![out])
}

/// `TopK(x, k)` (`k` an attribute before opset 10): the `k` largest (or smallest) elements
/// along `axis` in order, and their int64 indices; equal values keep the lower index first.
fn top_k(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = ctx.dtype(x);
    if !(dt.is_float() || dt.is_int() && !dt.is_packed()) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let k = if n.opset < 10 {
        n.attr_i("k")?.ok_or_else(|| n.invalid("attribute \"k\" is required"))?
    } else {
        let k = ctx.known_i64s(n.input(1)?).ok_or_else(|| not_constant(ctx, n, 1, "k", "a constant integer tensor"))?;
        let [k] = k[..] else { return Err(n.invalid(format!("k must hold one value, got {k:?}"))) };
        k
    };
    let dims = static_dims(ctx, n, x)?;
    if dims.is_empty() {
        return Err(n.invalid("the input is a scalar (rank ≥ 1 required)"));
    }
    let axis = norm_axis(n, n.attr_i_or("axis", -1)?, dims.len())?;
    let largest = n.attr_i_or("largest", 1)? != 0;
    // `sorted = 0` leaves the order unspecified: the sorted order is one of the allowed ones.
    n.ignore_attrs(&["sorted"]);
    if k < 0 || k > dims[axis] {
        return Err(n.invalid(format!("k = {k} is out of range for axis {axis} of size {}", dims[axis])));
    }
    let iota = ctx.emit1(Op::Iota { shape: Shape::new(DType::Int64, &dims), axis }, &[])?;
    let comparator = comparator(ctx, dt, largest)?;
    let sorted = ctx.emit(Op::Sort { comparator, axis, stable: true }, &[x, iota])?;
    let mut outs = Vec::with_capacity(2);
    for v in sorted.into_iter().take(2) {
        if k == dims[axis] {
            outs.push(v);
            continue;
        }
        let mut limits = dims.clone();
        limits[axis] = k;
        let op = Op::Slice { starts: vec![0; dims.len()], limits, strides: vec![1; dims.len()] };
        outs.push(ctx.emit1(op, &[v])?);
    }
    Ok(outs)
}

/// The comparator closure of [`top_k`]'s sort on (value, index) pairs: whether the left value
/// goes strictly first (greater, or smaller when `!largest`; NaN above every number).
fn comparator(ctx: &mut Ctx<'_>, dt: DType, largest: bool) -> Result<FuncId> {
    let f = ctx.m.add_function(None, Some(ctx.func));
    let lv = ctx.m.add_param(f, "lhs_value", Shape::scalar(dt));
    let rv = ctx.m.add_param(f, "rhs_value", Shape::scalar(dt));
    ctx.m.add_param(f, "lhs_index", Shape::scalar(DType::Int64));
    ctx.m.add_param(f, "rhs_index", Shape::scalar(DType::Int64));
    let outer = ctx.func;
    ctx.func = f;
    let body = comparator_body(ctx, lv, rv, largest);
    ctx.func = outer;
    let out = body?;
    ctx.m.func_mut(f).outputs = Some(vec![out]);
    Ok(f)
}

fn comparator_body(ctx: &mut Ctx<'_>, l: ValueId, r: ValueId, largest: bool) -> Result<ValueId> {
    let dir = if largest { CompareOp::GreaterThan } else { CompareOp::LessThan };
    let before = cmp(ctx, dir, l, r)?;
    if !ctx.dtype(l).is_float() {
        return Ok(before);
    }
    // NaN ranks above numbers: first for `largest`, last otherwise.
    let (nan_side, num_side) = if largest { (l, r) } else { (r, l) };
    let a = un(ctx, UnaryOp::IsNaN, nan_side)?;
    let b = un(ctx, UnaryOp::IsNaN, num_side)?;
    let nb = un(ctx, UnaryOp::LogicalNot, b)?;
    let nan_first = bin(ctx, BinaryOp::LogicalAnd, a, nb)?;
    bin(ctx, BinaryOp::LogicalOr, before, nan_first)
}
