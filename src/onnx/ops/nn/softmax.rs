//! `Softmax`, `LogSoftmax` and `Hardmax`: along `axis` (opset ≥ 13), or over the flattened
//! axes `axis..` (opset < 13, the input coerced to 2-D).

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, CompareOp, Op, ReduceKind, UnaryOp};
use crate::ir::shape::Shape;

use super::super::common::axis as norm_axis;
use super::{bin, dims_of, reduce_keep, require_float, reshape, un};
use crate::onnx::graph::{Ctx, Node};

/// Which of the three ops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// Maps `Softmax`, `LogSoftmax` or `Hardmax`.
pub(super) fn softmax(ctx: &mut Ctx<'_>, n: &Node<'_>, kind: Kind) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = require_float(ctx, n, x)?;
    let rank = ctx.rank(x);
    if rank == 0 {
        return Err(n.invalid("input must have rank ≥ 1"));
    }
    let legacy = n.opset < 13;
    let a = norm_axis(n, n.attr_i_or("axis", if legacy { 1 } else { -1 })?, rank)?;
    let axes: Vec<usize> = if legacy { (a..rank).collect() } else { vec![a] };
    if kind == Kind::Hardmax {
        return Ok(vec![hardmax(ctx, n, x, a, legacy, dt)?]);
    }
    let m = reduce_keep(ctx, n, x, ReduceKind::Max, &axes)?;
    let d = bin(ctx, BinaryOp::Sub, x, m)?;
    let e = un(ctx, UnaryOp::Exp, d)?;
    let s = reduce_keep(ctx, n, e, ReduceKind::Sum, &axes)?;
    Ok(vec![match kind {
        Kind::Softmax => bin(ctx, BinaryOp::Div, e, s)?,
        _ => {
            let l = un(ctx, UnaryOp::Log, s)?;
            bin(ctx, BinaryOp::Sub, d, l)?
        }
    }])
}

/// One-hot of the first maximum along `a` (over the flattened axes `a..` when `legacy`).
fn hardmax(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, a: usize, legacy: bool, dt: DType) -> Result<ValueId> {
    let xd = dims_of(ctx, n, x)?;
    let (v, axis) = if legacy {
        let outer: i64 = xd[..a].iter().product();
        let inner: i64 = xd[a..].iter().product();
        (reshape(ctx, x, &[outer, inner])?, 1)
    } else {
        (x, a)
    };
    let vd = dims_of(ctx, n, v)?;
    if vd[axis] == 0 {
        return Ok(x);
    }
    let idx = ctx.emit1(Op::ArgMinMax { axis, out_dtype: DType::Int64, is_min: false }, &[v])?;
    let mut kd = vd.clone();
    kd[axis] = 1;
    let idx = reshape(ctx, idx, &kd)?;
    let iota = ctx.emit1(Op::Iota { shape: Shape::new(DType::Int64, &vd), axis }, &[])?;
    let hit = ctx.emit1(Op::Compare { dir: CompareOp::Equal, total_order: false }, &[iota, idx])?;
    let y = ctx.emit1(Op::ConvertDType { dtype: dt }, &[hit])?;
    reshape(ctx, y, &xd)
}
