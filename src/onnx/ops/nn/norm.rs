//! Normalisations: `BatchNormalization`, `InstanceNormalization`, `LayerNormalization`,
//! `GroupNormalization`, `LRN` and `MeanVarianceNormalization`, as reductions and elementwise ops.

use crate::error::Result;
use crate::ir::module::ValueId;
use crate::ir::op::{ArithReduce, BinaryOp, Op, UnaryOp};

use super::super::common::{axes as norm_axes, axis as norm_axis, broadcast_dims, cast, extend_rank};
use super::{bin, channel_param, dims_of, float_dtype_attr, mean_keep, require_dims, require_float, reshape, un};
use crate::onnx::graph::{Ctx, Node};

/// `x − mean` and the biased variance of `x` over `axes` (both with the axes kept).
fn centered_var(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, axes: &[usize]) -> Result<(ValueId, ValueId, ValueId)> {
    let mean = mean_keep(ctx, n, x, axes)?;
    let d = bin(ctx, BinaryOp::Sub, x, mean)?;
    let dd = bin(ctx, BinaryOp::Mul, d, d)?;
    let var = mean_keep(ctx, n, dd, axes)?;
    Ok((mean, d, var))
}

/// `1 / sqrt(var + eps)`.
fn inv_std(ctx: &mut Ctx<'_>, var: ValueId, eps: f64) -> Result<ValueId> {
    let e = ctx.scalar(ctx.dtype(var), eps)?;
    let ve = bin(ctx, BinaryOp::Add, var, e)?;
    let sd = un(ctx, UnaryOp::Sqrt, ve)?;
    let one = ctx.scalar(ctx.dtype(var), 1.0)?;
    bin(ctx, BinaryOp::Div, one, sd)
}

/// `BatchNormalization(X, scale, B, mean, var)`: inference with the given statistics, or
/// (`training_mode` = 1) with the batch statistics, also returning the updated running ones.
pub(super) fn batch_norm(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = require_float(ctx, n, x)?;
    let xd = dims_of(ctx, n, x)?;
    if xd.len() < 2 {
        return Err(n.invalid(format!("X {xd:?} must be [N, C, ...]")));
    }
    let (c, rank) = (xd[1], xd.len());
    let eps = n.attr_f_or("epsilon", 1e-5)? as f64;
    let momentum = n.attr_f_or("momentum", 0.9)? as f64;
    n.ignore_attrs(&["consumed_inputs"]);
    if n.attr_i_or("spatial", 1)? == 0 {
        return Err(n.unsupported("spatial = 0"));
    }
    if n.attr_i_or("is_test", 1)? == 0 {
        return Err(n.unsupported("is_test = 0 (training mode of opset 6)"));
    }
    let training = n.attr_i_or("training_mode", 0)? != 0;
    let extra_outputs = (1..n.num_outputs()).any(|i| n.output_wanted(i));
    if training && n.opset < 14 {
        return Err(n.invalid("training_mode exists from opset 14"));
    }
    if !training && extra_outputs {
        return Err(n.unsupported("the training-mode outputs (mean, var, saved statistics) outside training_mode = 1"));
    }
    let mut p = Vec::new();
    for (i, what) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
        let v = n.input(i)?;
        require_float(ctx, n, v)?;
        p.push(channel_param(ctx, n, v, c, rank, dt, what)?);
    }
    let (scale, bias, mean, var) = (p[0], p[1], p[2], p[3]);
    if !training {
        let inv = inv_std(ctx, var, eps)?;
        let k = bin(ctx, BinaryOp::Mul, scale, inv)?;
        let d = bin(ctx, BinaryOp::Sub, x, mean)?;
        let y = bin(ctx, BinaryOp::Mul, d, k)?;
        return Ok(vec![bin(ctx, BinaryOp::Add, y, bias)?]);
    }
    let axes: Vec<usize> = (0..rank).filter(|&a| a != 1).collect();
    let (bmean, d, bvar) = centered_var(ctx, n, x, &axes)?;
    let inv = inv_std(ctx, bvar, eps)?;
    let k = bin(ctx, BinaryOp::Mul, scale, inv)?;
    let y = bin(ctx, BinaryOp::Mul, d, k)?;
    let y = bin(ctx, BinaryOp::Add, y, bias)?;
    // running = input · momentum + batch · (1 − momentum), in the statistics' type.
    let mut outs = vec![y];
    for (i, batch) in [(3, bmean), (4, bvar)] {
        let input = n.input(i)?;
        let st = ctx.dtype(input);
        let batch = reshape(ctx, batch, &[c])?;
        let batch = cast(ctx, batch, st)?;
        let m = ctx.scalar(st, momentum)?;
        let m1 = ctx.scalar(st, 1.0 - momentum)?;
        let a = bin(ctx, BinaryOp::Mul, input, m)?;
        let b = bin(ctx, BinaryOp::Mul, batch, m1)?;
        outs.push(bin(ctx, BinaryOp::Add, a, b)?);
    }
    Ok(outs)
}

/// `InstanceNormalization(X, scale, B)`: per instance and channel over the spatial axes.
pub(super) fn instance_norm(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = require_float(ctx, n, x)?;
    let xd = dims_of(ctx, n, x)?;
    if xd.len() < 3 {
        return Err(n.invalid(format!("X {xd:?} must be [N, C, spatial...]")));
    }
    let eps = n.attr_f_or("epsilon", 1e-5)? as f64;
    let rank = xd.len();
    let scale = channel_param(ctx, n, n.input(1)?, xd[1], rank, dt, "scale")?;
    let bias = channel_param(ctx, n, n.input(2)?, xd[1], rank, dt, "B")?;
    let axes: Vec<usize> = (2..rank).collect();
    let (_, d, var) = centered_var(ctx, n, x, &axes)?;
    let inv = inv_std(ctx, var, eps)?;
    let y = bin(ctx, BinaryOp::Mul, d, inv)?;
    let y = bin(ctx, BinaryOp::Mul, y, scale)?;
    Ok(vec![bin(ctx, BinaryOp::Add, y, bias)?])
}

/// Multiplies `y` by operand `i` (and adds operand `j` when present), each unidirectionally
/// broadcast to `y`'s dims.
fn scale_shift(ctx: &mut Ctx<'_>, n: &Node<'_>, y: ValueId, i: usize, j: usize) -> Result<ValueId> {
    // Parameters broadcast against the static (normalised) axes; dynamic ones stay as they are.
    let yd = ctx.shape(y).dims.clone();
    let mut y = y;
    for (k, op) in [(i, BinaryOp::Mul), (j, BinaryOp::Add)] {
        let Some(p) = n.opt_input(k) else { continue };
        if ctx.dtype(p) != ctx.dtype(y) {
            return Err(n.invalid(format!("input {k} has type {}, X has {}", ctx.dtype(p), ctx.dtype(y))));
        }
        let pd = dims_of(ctx, n, p)?;
        if pd.len() > yd.len() || broadcast_dims(n, &[yd.clone(), pd.clone()])? != yd {
            return Err(n.invalid(format!("input {k} {pd:?} does not broadcast to X {yd:?}")));
        }
        let p = extend_rank(ctx, n, p, yd.len())?;
        y = bin(ctx, op, y, p)?;
    }
    Ok(y)
}

/// `LayerNormalization(X, Scale, B?)` over axes `axis..`; outputs `Y`, `Mean`, `InvStdDev`
/// (the statistics in `stash_type`).
pub(super) fn layer_norm(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    n.input(1)?;
    let dt = require_float(ctx, n, x)?;
    let rank = ctx.rank(x);
    if rank == 0 {
        return Err(n.invalid("X must have rank ≥ 1"));
    }
    let a = norm_axis(n, n.attr_i_or("axis", -1)?, rank)?;
    let eps = n.attr_f_or("epsilon", 1e-5)? as f64;
    let stash = float_dtype_attr(n, n.attr_i_or("stash_type", 1)?, "stash_type")?;
    let axes: Vec<usize> = (a..rank).collect();
    let xs = cast(ctx, x, stash)?;
    let (mean, d, var) = centered_var(ctx, n, xs, &axes)?;
    let inv = inv_std(ctx, var, eps)?;
    let norm = bin(ctx, BinaryOp::Mul, d, inv)?;
    let norm = cast(ctx, norm, dt)?;
    let y = scale_shift(ctx, n, norm, 1, 2)?;
    Ok(vec![y, mean, inv])
}

/// `GroupNormalization(X, scale, bias)`: statistics per instance and group of channels; scale
/// and bias per channel (opset 21) or per group (opset 18).
pub(super) fn group_norm(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = require_float(ctx, n, x)?;
    let xd = dims_of(ctx, n, x)?;
    if xd.len() < 2 {
        return Err(n.invalid(format!("X {xd:?} must be [N, C, ...]")));
    }
    let (nb, c) = (xd[0], xd[1]);
    let g = n.attr_i("num_groups")?.ok_or_else(|| n.invalid("attribute \"num_groups\" is required"))?;
    if g < 1 || c % g != 0 {
        return Err(n.invalid(format!("num_groups {g} does not divide the {c} channels")));
    }
    let eps = n.attr_f_or("epsilon", 1e-5)? as f64;
    let stash = if n.opset >= 21 { float_dtype_attr(n, n.attr_i_or("stash_type", 1)?, "stash_type")? } else { dt };
    let (scale, bias) = (n.input(1)?, n.input(2)?);
    for (v, what) in [(scale, "scale"), (bias, "bias")] {
        if ctx.dtype(v) != dt {
            return Err(n.invalid(format!("{what} has type {}, X has {dt}", ctx.dtype(v))));
        }
    }
    let sd = dims_of(ctx, n, scale)?;
    let per_group = n.opset < 21 && sd == [g];
    let rest: i64 = xd[1..].iter().product::<i64>() / g;
    let xs = cast(ctx, x, stash)?;
    let xs = reshape(ctx, xs, &[nb, g, rest])?;
    let (_, d, var) = centered_var(ctx, n, xs, &[2])?;
    let inv = inv_std(ctx, var, eps)?;
    let norm = bin(ctx, BinaryOp::Mul, d, inv)?;
    let norm = cast(ctx, norm, dt)?;
    let y = if per_group {
        require_dims(ctx, n, bias, &[g], "bias")?;
        let s = reshape(ctx, scale, &[1, g, 1])?;
        let b = reshape(ctx, bias, &[1, g, 1])?;
        let y = bin(ctx, BinaryOp::Mul, norm, s)?;
        let y = bin(ctx, BinaryOp::Add, y, b)?;
        reshape(ctx, y, &xd)?
    } else {
        let y = reshape(ctx, norm, &xd)?;
        let s = channel_param(ctx, n, scale, c, xd.len(), dt, "scale")?;
        let b = channel_param(ctx, n, bias, c, xd.len(), dt, "bias")?;
        let y = bin(ctx, BinaryOp::Mul, y, s)?;
        bin(ctx, BinaryOp::Add, y, b)?
    };
    Ok(vec![y])
}

/// `LRN(X)`: `x / (bias + alpha/size · Σ x²)^beta`, the sum over `size` neighbouring channels.
pub(super) fn lrn(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = require_float(ctx, n, x)?;
    let rank = ctx.rank(x);
    if rank < 2 {
        return Err(n.invalid(format!("X of rank {rank} must be [N, C, ...]")));
    }
    let size = n.attr_i("size")?.ok_or_else(|| n.invalid("attribute \"size\" is required"))?;
    if !(1..=1 << 31).contains(&size) {
        return Err(n.invalid(format!("size {size} must be in [1, 2^31]")));
    }
    let alpha = n.attr_f_or("alpha", 1e-4)? as f64;
    let beta = n.attr_f_or("beta", 0.75)? as f64;
    let bias = n.attr_f_or("bias", 1.0)? as f64;
    let sq = bin(ctx, BinaryOp::Mul, x, x)?;
    let mut window = vec![1; rank];
    window[1] = size;
    let mut padding = vec![(0, 0); rank];
    let lo = (size - 1) / 2;
    padding[1] = (lo, size - 1 - lo);
    let op = Op::ReduceWindow {
        kind: ArithReduce::Sum,
        window,
        strides: vec![1; rank],
        input_dilations: vec![1; rank],
        window_dilations: vec![1; rank],
        padding,
    };
    let s = ctx.emit1(op, &[sq])?;
    let k = ctx.scalar(dt, alpha / size as f64)?;
    let s = bin(ctx, BinaryOp::Mul, s, k)?;
    let b = ctx.scalar(dt, bias)?;
    let t = bin(ctx, BinaryOp::Add, s, b)?;
    let e = ctx.scalar(dt, beta)?;
    let t = bin(ctx, BinaryOp::Pow, t, e)?;
    Ok(vec![bin(ctx, BinaryOp::Div, x, t)?])
}

/// `MeanVarianceNormalization(X)`: `(x − E[x]) / (sqrt(E[x²] − E[x]²) + 1e-9)` over `axes`.
pub(super) fn mean_variance_norm(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = require_float(ctx, n, x)?;
    let rank = ctx.rank(x);
    let list = n.attr_ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let axes = norm_axes(n, &list, rank)?;
    let mean = mean_keep(ctx, n, x, &axes)?;
    let sq = bin(ctx, BinaryOp::Mul, x, x)?;
    let ex2 = mean_keep(ctx, n, sq, &axes)?;
    let m2 = bin(ctx, BinaryOp::Mul, mean, mean)?;
    let var = bin(ctx, BinaryOp::Sub, ex2, m2)?;
    let sd = un(ctx, UnaryOp::Sqrt, var)?;
    let e = ctx.scalar(dt, 1e-9)?;
    let sd = bin(ctx, BinaryOp::Add, sd, e)?;
    let d = bin(ctx, BinaryOp::Sub, x, mean)?;
    Ok(vec![bin(ctx, BinaryOp::Div, d, sd)?])
}
