//! Elementwise operators: arithmetic, comparisons, logic, activations, casts.

use crate::error::Result;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, Op, UnaryOp};

use super::common::broadcastable;
use super::Handler;
use crate::onnx::graph::{Ctx, Node};

/// Op types mapped here.
pub(super) const OPS: &[&str] = &["Add", "Sub", "Mul", "Div", "Relu", "Identity"];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    Some(match op {
        "Add" => |c, n| binary(c, n, BinaryOp::Add),
        "Sub" => |c, n| binary(c, n, BinaryOp::Sub),
        "Mul" => |c, n| binary(c, n, BinaryOp::Mul),
        "Div" => |c, n| binary(c, n, BinaryOp::Div),
        "Relu" => relu,
        "Identity" => |_, n| Ok(vec![n.input(0)?]),
        _ => return None,
    })
}

/// A broadcasting binary op on operands of one dtype.
fn binary(ctx: &mut Ctx<'_>, n: &Node<'_>, op: BinaryOp) -> Result<Vec<ValueId>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    if ctx.dtype(a) != ctx.dtype(b) {
        return Err(n.invalid(format!("operand types differ: {} and {}", ctx.dtype(a), ctx.dtype(b))));
    }
    let v = broadcastable(ctx, n, &[a, b])?;
    Ok(vec![ctx.emit1(Op::Binary(op), &v)?])
}

/// `max(x, 0)`.
fn relu(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let zero = ctx.scalar(ctx.dtype(x), 0.0)?;
    let _ = UnaryOp::Abs;
    Ok(vec![ctx.emit1(Op::Binary(BinaryOp::Max), &[x, zero])?])
}
