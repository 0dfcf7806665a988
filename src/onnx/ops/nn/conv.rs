//! Convolutions: `Conv` and `ConvTranspose` (NCHW, any number of spatial axes) onto `ConvGeneral`.

use crate::error::Result;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, ConvAxes, Op};

use super::{bin, channel_param, dims_of, require_float, reshape};
use crate::onnx::graph::{Ctx, Node};

/// `auto_pad` values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// Reads `auto_pad`.
pub(super) fn auto_pad(n: &Node<'_>) -> Result<AutoPad> {
    Ok(match n.attr_s("auto_pad")?.as_deref() {
        None | Some("NOTSET") | Some("") => AutoPad::NotSet,
        Some("SAME_UPPER") => AutoPad::SameUpper,
        Some("SAME_LOWER") => AutoPad::SameLower,
        Some("VALID") => AutoPad::Valid,
        Some(other) => return Err(n.invalid(format!("auto_pad {other:?}"))),
    })
}

/// Largest value accepted in a window attribute (kernel, stride, dilation, padding): keeps the
/// window arithmetic far from overflow.
pub(super) const MAX_WINDOW_ATTR: i64 = 1 << 31;

/// A per-spatial-axis integer attribute (`strides`, `dilations`...): `s` entries, each ≥ `min`.
pub(super) fn spatial_attr(n: &Node<'_>, name: &str, s: usize, default: i64, min: i64) -> Result<Vec<i64>> {
    match n.attr_ints(name)? {
        None => Ok(vec![default; s]),
        Some(v) if v.is_empty() => Ok(vec![default; s]),
        Some(v) if v.len() != s => Err(n.invalid(format!("{name} {v:?} must have {s} entries"))),
        Some(v) if v.iter().any(|&x| x < min || x > MAX_WINDOW_ATTR) => {
            Err(n.invalid(format!("{name} {v:?}: entries must be in [{min}, {MAX_WINDOW_ATTR}]")))
        }
        Some(v) => Ok(v),
    }
}

/// `pads` as (begin, end) per spatial axis (`[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`).
pub(super) fn pads_attr(n: &Node<'_>, s: usize) -> Result<Option<Vec<(i64, i64)>>> {
    match n.attr_ints("pads")? {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) if v.len() != 2 * s => Err(n.invalid(format!("pads {v:?} must have {} entries", 2 * s))),
        Some(v) if v.iter().any(|&x| !(0..=MAX_WINDOW_ATTR).contains(&x)) => {
            Err(n.invalid(format!("pads {v:?} must be in [0, {MAX_WINDOW_ATTR}]")))
        }
        Some(v) => Ok(Some((0..s).map(|i| (v[i], v[s + i])).collect())),
    }
}

/// The (begin, end) padding `SAME_UPPER`/`SAME_LOWER` give for `total` cells.
pub(super) fn split_same(mode: AutoPad, total: i64) -> (i64, i64) {
    let total = total.max(0);
    match mode {
        AutoPad::SameLower => (total - total / 2, total / 2),
        _ => (total / 2, total - total / 2),
    }
}

/// Checks `kernel_shape` (when given) against the weights' spatial dims.
fn check_kernel_shape(n: &Node<'_>, kernel: &[i64]) -> Result<()> {
    match n.attr_ints("kernel_shape")? {
        Some(k) if k != kernel => {
            Err(n.invalid(format!("kernel_shape {k:?} differs from the weights' spatial dims {kernel:?}")))
        }
        _ => Ok(()),
    }
}

/// NCHW dimension numbers for `s` spatial axes; the kernel's output channels on axis `kout`.
fn nchw_axes(s: usize, kout: usize) -> ConvAxes {
    let sp: Vec<usize> = (2..2 + s).collect();
    ConvAxes {
        input_batch: 0,
        input_channels: 1,
        input_spatial: sp.clone(),
        kernel_input_channels: 1 - kout,
        kernel_output_channels: kout,
        kernel_spatial: sp.clone(),
        output_batch: 0,
        output_channels: 1,
        output_spatial: sp,
    }
}

/// The common checks: X `[N, C, spatial...]`, W of the same rank, float types; returns their dims.
fn operands(ctx: &Ctx<'_>, n: &Node<'_>) -> Result<(ValueId, ValueId, Vec<i64>, Vec<i64>)> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let dt = require_float(ctx, n, x)?;
    if ctx.dtype(w) != dt {
        return Err(n.invalid(format!("W has type {}, X has {dt}", ctx.dtype(w))));
    }
    let (xd, wd) = (dims_of(ctx, n, x)?, dims_of(ctx, n, w)?);
    if xd.len() < 3 || wd.len() != xd.len() {
        return Err(
            n.unsupported(format!("X {xd:?} and W {wd:?} must have the same rank ≥ 3 (1-D to N-D convolution)"))
        );
    }
    Ok((x, w, xd, wd))
}

/// Adds the optional per-output-channel bias (input 2).
fn add_bias(ctx: &mut Ctx<'_>, n: &Node<'_>, y: ValueId, m: i64) -> Result<ValueId> {
    match n.opt_input(2) {
        None => Ok(y),
        Some(b) => {
            let dt = ctx.dtype(y);
            if ctx.dtype(b) != dt {
                return Err(n.invalid(format!("B has type {}, X has {dt}", ctx.dtype(b))));
            }
            let rank = ctx.rank(y);
            let b = channel_param(ctx, n, b, m, rank, dt, "B")?;
            bin(ctx, BinaryOp::Add, y, b)
        }
    }
}

/// `Conv(X, W, B?)`: cross-correlation with groups, strides, dilations and padding.
pub(super) fn conv(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (x, w, xd, wd) = operands(ctx, n)?;
    let s = xd.len() - 2;
    let group = n.attr_i_or("group", 1)?;
    let (c, m) = (xd[1], wd[0]);
    if group < 1 || c % group != 0 || m % group != 0 || wd[1] * group != c {
        return Err(n.invalid(format!("group {group}: X {xd:?} and W {wd:?} do not match")));
    }
    let kernel = wd[2..].to_vec();
    check_kernel_shape(n, &kernel)?;
    let strides = spatial_attr(n, "strides", s, 1, 1)?;
    let dilations = spatial_attr(n, "dilations", s, 1, 1)?;
    let mode = auto_pad(n)?;
    let pads = pads_attr(n, s)?;
    let padding: Vec<(i64, i64)> = (0..s)
        .map(|i| {
            let eff = (kernel[i] - 1) * dilations[i] + 1;
            match mode {
                AutoPad::NotSet => pads.as_ref().map_or((0, 0), |p| p[i]),
                AutoPad::Valid => (0, 0),
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let out = (xd[2 + i] + strides[i] - 1) / strides[i];
                    split_same(mode, (out - 1) * strides[i] + eff - xd[2 + i])
                }
            }
        })
        .collect();
    for i in 0..s {
        let eff = (kernel[i] - 1) * dilations[i] + 1;
        if xd[2 + i] + padding[i].0 + padding[i].1 < eff {
            return Err(n.invalid(format!("spatial axis {i}: the kernel is larger than the padded input (X {xd:?})")));
        }
    }
    let op = Op::ConvGeneral {
        axes: nchw_axes(s, 0),
        strides,
        padding,
        input_dilations: vec![1; s],
        kernel_dilations: dilations,
        channel_groups: group,
        batch_groups: 1,
    };
    let y = ctx.emit1(op, &[x, w])?;
    Ok(vec![add_bias(ctx, n, y, m)?])
}

/// `ConvTranspose(X, W, B?)`: the gradient of `Conv` with respect to its input — a convolution
/// of X dilated by the strides with the spatially flipped kernel, input/output channels swapped.
pub(super) fn conv_transpose(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (x, w, xd, wd) = operands(ctx, n)?;
    let s = xd.len() - 2;
    let group = n.attr_i_or("group", 1)?;
    let c = xd[1];
    if group < 1 || wd[0] != c || c % group != 0 {
        return Err(n.invalid(format!("group {group}: X {xd:?} and W {wd:?} do not match")));
    }
    let m = wd[1] * group;
    let kernel = wd[2..].to_vec();
    check_kernel_shape(n, &kernel)?;
    let strides = spatial_attr(n, "strides", s, 1, 1)?;
    let dilations = spatial_attr(n, "dilations", s, 1, 1)?;
    let out_pad = spatial_attr(n, "output_padding", s, 0, 0)?;
    let mode = auto_pad(n)?;
    let pads = pads_attr(n, s)?;
    let output_shape = n.attr_ints("output_shape")?.filter(|v| !v.is_empty());
    let output_shape = match output_shape {
        Some(v) if v.iter().any(|&d| !(0..=1 << 40).contains(&d)) => {
            return Err(n.invalid(format!("output_shape {v:?} out of range")));
        }
        Some(v) if v.len() == s => Some(v),
        // Some exporters write the full [N, C, spatial...] shape.
        Some(v) if v.len() == s + 2 => Some(v[2..].to_vec()),
        Some(v) => return Err(n.invalid(format!("output_shape {v:?} must have {s} entries"))),
        None => None,
    };
    // (begin, end) padding of the full transposed output, per axis; negative end = zero cells added.
    let mut crop = Vec::with_capacity(s);
    for i in 0..s {
        let eff = (kernel[i] - 1) * dilations[i] + 1;
        let full = strides[i]
            .checked_mul(xd[2 + i] - 1)
            .and_then(|v| v.checked_add(out_pad[i] + eff))
            .filter(|&v| v <= 1 << 40)
            .ok_or_else(|| n.invalid(format!("spatial axis {i}: the output is too large")))?;
        let target = match (&output_shape, mode) {
            (Some(o), _) => Some(o[i]),
            (None, AutoPad::SameUpper | AutoPad::SameLower) => Some(xd[2 + i] * strides[i]),
            _ => None,
        };
        let (b, e) = match target {
            Some(t) if t < 0 => return Err(n.invalid(format!("output_shape {t} < 0"))),
            Some(t) => {
                let total = full - t;
                if total >= 0 {
                    let same = if mode == AutoPad::SameUpper { AutoPad::SameUpper } else { AutoPad::SameLower };
                    split_same(same, total)
                } else {
                    (0, total)
                }
            }
            None if mode == AutoPad::Valid => (0, 0),
            None => pads.as_ref().map_or((0, 0), |p| p[i]),
        };
        if full - b - e < 0 {
            return Err(n.invalid(format!("spatial axis {i}: the pads are larger than the output")));
        }
        crop.push((eff, b, e));
    }
    // Kernel [C, M/g, k...] → [C/g, M, k...] with the spatial axes reversed.
    let cg = c / group;
    let mut w = w;
    if group > 1 {
        let mut d = vec![group, cg, wd[1]];
        d.extend(&kernel);
        w = reshape(ctx, w, &d)?;
        let mut perm = vec![1, 0, 2];
        perm.extend(3..3 + s);
        w = ctx.emit1(Op::Transpose { perm }, &[w])?;
        let mut d = vec![cg, m];
        d.extend(&kernel);
        w = reshape(ctx, w, &d)?;
    }
    w = ctx.emit1(Op::Reverse { axes: (2..2 + s).collect() }, &[w])?;
    let padding: Vec<(i64, i64)> =
        (0..s).map(|i| (crop[i].0 - 1 - crop[i].1, crop[i].0 - 1 - crop[i].2 + out_pad[i])).collect();
    let op = Op::ConvGeneral {
        axes: nchw_axes(s, 1),
        strides: vec![1; s],
        padding,
        input_dilations: strides,
        kernel_dilations: dilations,
        channel_groups: group,
        batch_groups: 1,
    };
    let y = ctx.emit1(op, &[x, w])?;
    Ok(vec![add_bias(ctx, n, y, m)?])
}
