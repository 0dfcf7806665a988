//! Neural-network operators: MatMul, Gemm, Einsum, convolution, pooling, normalisations, softmax, resize.
//!
//! Each family lives in its own file; this one dispatches op types and holds the small graph
//! helpers they share (elementwise shorthands, reductions that keep their axes, constants of a
//! given float dtype).

mod conv;
mod matmul;
mod norm;
mod pool;
mod resize;
mod softmax;
#[cfg(test)]
mod tests;

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, Op, ReduceKind};
use crate::ir::shape::Shape;

use super::Handler;
use super::common::{bin, reshape_to as reshape, un};
use crate::onnx::graph::{Ctx, Node, scalar_bytes};

/// Op types mapped here.
pub(super) const OPS: &[&str] = &[
    "AveragePool",
    "BatchNormalization",
    "Conv",
    "ConvTranspose",
    "Einsum",
    "Gemm",
    "GlobalAveragePool",
    "GlobalLpPool",
    "GlobalMaxPool",
    "GroupNormalization",
    "Hardmax",
    "InstanceNormalization",
    "LRN",
    "LayerNormalization",
    "LogSoftmax",
    "LpPool",
    "MatMul",
    "MaxPool",
    "MeanVarianceNormalization",
    "Resize",
    "Softmax",
    "Upsample",
];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    Some(match op {
        "MatMul" => matmul::matmul,
        "Gemm" => matmul::gemm,
        "Einsum" => matmul::einsum,
        "Conv" => conv::conv,
        "ConvTranspose" => conv::conv_transpose,
        "MaxPool" => pool::max_pool,
        "AveragePool" => pool::average_pool,
        "LpPool" => pool::lp_pool,
        "GlobalAveragePool" => pool::global_average_pool,
        "GlobalMaxPool" => pool::global_max_pool,
        "GlobalLpPool" => pool::global_lp_pool,
        "BatchNormalization" => norm::batch_norm,
        "InstanceNormalization" => norm::instance_norm,
        "LayerNormalization" => norm::layer_norm,
        "GroupNormalization" => norm::group_norm,
        "LRN" => norm::lrn,
        "MeanVarianceNormalization" => norm::mean_variance_norm,
        "Softmax" => |c, n| softmax::softmax(c, n, softmax::Kind::Softmax),
        "LogSoftmax" => |c, n| softmax::softmax(c, n, softmax::Kind::LogSoftmax),
        "Hardmax" => |c, n| softmax::softmax(c, n, softmax::Kind::Hardmax),
        "Resize" => resize::resize,
        "Upsample" => resize::upsample,
        _ => return None,
    })
}

/// A constant of `dtype` and `dims` holding `data` (each element rounded to the dtype).
fn const_of(ctx: &mut Ctx<'_>, n: &Node<'_>, dtype: DType, dims: &[i64], data: &[f64]) -> Result<ValueId> {
    let mut bytes = Vec::with_capacity(data.len() * dtype.size());
    for &v in data {
        bytes.extend(scalar_bytes(dtype, v).ok_or_else(|| n.unsupported(format!("element type {dtype}")))?);
    }
    ctx.constant(Shape::new(dtype, dims), bytes)
}

/// Static dims of `v`, or an error naming the node.
fn dims_of(ctx: &Ctx<'_>, n: &Node<'_>, v: ValueId) -> Result<Vec<i64>> {
    super::common::static_dims(ctx, n, v)
}

/// Reduces `x` over the sorted `axes`, keeping them as size-1 axes.
fn reduce_keep(ctx: &mut Ctx<'_>, _n: &Node<'_>, x: ValueId, kind: ReduceKind, axes: &[usize]) -> Result<ValueId> {
    // Dynamic axes (reduced or not) keep their names through the Reshape, which maps them in
    // order.
    let mut dims = ctx.shape(x).dims.clone();
    let mut axes = axes.to_vec();
    axes.sort_unstable();
    axes.dedup();
    if axes.is_empty() {
        return Ok(x);
    }
    let r = ctx.emit1(Op::Reduce { kind, axes: axes.clone() }, &[x])?;
    for &a in &axes {
        dims[a] = 1;
    }
    reshape(ctx, r, &dims)
}

/// Mean of `x` over `axes`, keeping them as size-1 axes.
fn mean_keep(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, axes: &[usize]) -> Result<ValueId> {
    let dims = ctx.shape(x).dims.clone();
    if let Some(&a) = axes.iter().find(|&&a| dims[a] < 0) {
        return Err(n.unsupported(format!("a mean over the dynamic axis {a} of {}", ctx.shape(x))));
    }
    let count: i64 = axes.iter().map(|&a| dims[a]).product();
    let s = reduce_keep(ctx, n, x, ReduceKind::Sum, axes)?;
    let c = ctx.scalar(ctx.dtype(x), count as f64)?;
    bin(ctx, BinaryOp::Div, s, c)
}

/// Requires a float element type (f16, bf16, f32, f64).
fn require_float(ctx: &Ctx<'_>, n: &Node<'_>, v: ValueId) -> Result<DType> {
    let dt = ctx.dtype(v);
    if !dt.is_float() || dt.is_complex() {
        return Err(n.unsupported(format!("element type {dt} (float types only)")));
    }
    Ok(dt)
}

/// Requires operand `v` to have exactly `want` dims; `what` names it.
fn require_dims(ctx: &Ctx<'_>, n: &Node<'_>, v: ValueId, want: &[i64], what: &str) -> Result<()> {
    let got = dims_of(ctx, n, v)?;
    if got != want {
        return Err(n.invalid(format!("{what} has shape {got:?}, expected {want:?}")));
    }
    Ok(())
}

/// A per-channel vector `[C]` reshaped to `[1, C, 1, ...]` for an operand of rank `rank`, and
/// converted to `dtype`.
fn channel_param(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    v: ValueId,
    c: i64,
    rank: usize,
    dtype: DType,
    what: &str,
) -> Result<ValueId> {
    require_dims(ctx, n, v, &[c], what)?;
    let v = super::common::cast(ctx, v, dtype)?;
    let mut dims = vec![1i64; rank];
    dims[1] = c;
    reshape(ctx, v, &dims)
}

/// The ONNX dtype code of a `stash_type`/`to`-style attribute as a float dtype.
fn float_dtype_attr(n: &Node<'_>, code: i64, what: &str) -> Result<DType> {
    let dt = i32::try_from(code).ok().and_then(crate::onnx::tensor::dtype_from_onnx);
    match dt {
        Some(d) if d.is_float() && !d.is_complex() => Ok(d),
        _ => Err(n.unsupported(format!("{what} {code} (a float type is required)"))),
    }
}
