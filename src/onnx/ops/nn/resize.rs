//! `Resize` (opsets 10–19) and the deprecated `Upsample`: separable interpolation with the
//! scales or sizes known at import. Each resized axis becomes a `Gather` of the source taps
//! (indices computed here with the ONNX coordinate rules) and, for linear and cubic modes, a
//! weighted sum of them.

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, Op, ReduceKind, UnaryOp};
use crate::ir::shape::Shape;

use super::super::common::{axes as norm_axes, cast, not_constant};
use super::{bin, const_of, dims_of, reshape};
use crate::onnx::graph::{Ctx, Node};

/// Interpolation modes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// `coordinate_transformation_mode`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// `nearest_mode`; `Simple` is the rule of `Upsample` and `Resize`-10 (floor when enlarging,
/// ceil when shrinking).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    Simple,
}

/// Everything that decides the taps and weights of one axis.
struct Config {
    mode: Mode,
    coord: Coord,
    nearest: Nearest,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
    extrapolation: f64,
}

/// The source position of output index `y` on one axis.
fn source_coord(c: Coord, y: f64, scale: f64, in_w: i64, out_w: i64, roi: (f64, f64)) -> f64 {
    let in_f = in_w as f64;
    let out_f = scale * in_f;
    match c {
        Coord::HalfPixel => (y + 0.5) / scale - 0.5,
        Coord::HalfPixelSymmetric => {
            let adjustment = out_w as f64 / out_f;
            let offset = in_f / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
        Coord::PytorchHalfPixel => {
            if out_f == 1.0 {
                -0.5
            } else {
                (y + 0.5) / scale - 0.5
            }
        }
        Coord::AlignCorners => {
            if out_f == 1.0 {
                0.0
            } else {
                y * (in_f - 1.0) / (out_f - 1.0)
            }
        }
        Coord::Asymmetric => y / scale,
        Coord::TfHalfPixelForNn => (y + 0.5) / scale,
        Coord::TfCropAndResize => {
            let x = if out_f == 1.0 {
                (roi.1 - roi.0) * (in_f - 1.0) / 2.0
            } else {
                y * (roi.1 - roi.0) * (in_f - 1.0) / (out_f - 1.0)
            };
            x + roi.0 * (in_f - 1.0)
        }
    }
}

/// The cubic convolution kernel with coefficient `a`.
fn cubic_kernel(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// The filter weights for fractional position `ratio` ∈ (0, 1] (taps from `floor − (n/2 − 1)`).
fn coeffs(cfg: &Config, ratio: f64, scale: f64) -> Vec<f64> {
    let s = scale.min(1.0);
    match (cfg.mode, cfg.antialias) {
        (Mode::Linear, false) => vec![1.0 - ratio, ratio],
        (Mode::Linear, true) => {
            let start = (-1.0 / s).floor() as i64 + 1;
            let c: Vec<f64> =
                (start..2 - start).map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0)).collect();
            let sum: f64 = c.iter().sum();
            c.iter().map(|v| v / sum).collect()
        }
        (Mode::Cubic, false) => {
            [ratio + 1.0, ratio, 1.0 - ratio, 2.0 - ratio].iter().map(|&x| cubic_kernel(x, cfg.cubic_a)).collect()
        }
        (Mode::Cubic, true) => {
            let start = (-2.0 / s).floor() as i64 + 1;
            let c: Vec<f64> = (start..2 - start).map(|i| cubic_kernel(s * (i as f64 - ratio), cfg.cubic_a)).collect();
            let sum: f64 = c.iter().sum();
            c.iter().map(|v| v / sum).collect()
        }
        (Mode::Nearest, _) => vec![1.0],
    }
}

/// The index nearest mode picks for source position `x`.
fn nearest_index(m: Nearest, x: f64, scale: f64) -> i64 {
    let f = x.floor();
    let frac = x - f;
    let i = f as i64;
    if frac == 0.0 {
        return i;
    }
    match m {
        Nearest::RoundPreferFloor => i + i64::from(frac > 0.5),
        Nearest::RoundPreferCeil => i + i64::from(frac >= 0.5),
        Nearest::Floor => i,
        Nearest::Ceil => i + 1,
        Nearest::Simple => {
            if scale < 1.0 {
                i + 1
            } else {
                // C++ truncation toward zero.
                x.trunc() as i64
            }
        }
    }
}

/// Taps (`out × n` clamped indices), weights and extrapolated outputs of one axis.
struct AxisPlan {
    taps: usize,
    idx: Vec<i64>,
    w: Vec<f64>,
    extrapolated: Vec<bool>,
}

fn plan_axis(cfg: &Config, in_w: i64, out_w: i64, scale: f64, roi: (f64, f64)) -> AxisPlan {
    let mut idx = Vec::new();
    let mut w = Vec::new();
    let mut extrapolated = Vec::new();
    let mut taps = 1;
    for y in 0..out_w {
        let x = source_coord(cfg.coord, y as f64, scale, in_w, out_w, roi);
        extrapolated.push(cfg.coord == Coord::TfCropAndResize && (x < 0.0 || x > (in_w - 1) as f64));
        if cfg.mode == Mode::Nearest {
            idx.push(nearest_index(cfg.nearest, x, scale).clamp(0, in_w - 1));
            w.push(1.0);
            continue;
        }
        let xi = x.floor();
        let ratio = if x == xi { 1.0 } else { x - xi };
        let mut c = coeffs(cfg, ratio, scale);
        let nt = c.len();
        taps = nt;
        // The n source positions nearest to x, ties to the smaller ones.
        let pad = nt.div_ceil(2) as i64;
        let xp = x + pad as f64;
        let p = xp.floor();
        let frac = xp - p;
        let p = p as i64;
        let half = (nt / 2) as i64;
        let start = if nt.is_multiple_of(2) {
            p + if frac == 0.0 { -half } else { -half + 1 }
        } else {
            let base = -((nt as i64 - 1) / 2);
            p + if frac <= 0.5 { base } else { base + 1 }
        };
        let first = start - pad;
        if cfg.exclude_outside {
            for (k, v) in c.iter_mut().enumerate() {
                let i = first + k as i64;
                if i < 0 || i >= in_w {
                    *v = 0.0;
                }
            }
            let sum: f64 = c.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            c.iter_mut().for_each(|v| *v /= sum);
        }
        for (k, v) in c.into_iter().enumerate() {
            idx.push((first + k as i64).clamp(0, in_w - 1));
            w.push(v);
        }
    }
    AxisPlan { taps, idx, w, extrapolated }
}

/// Resamples axis `axis` of `x` with `plan`.
fn apply_axis(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    x: ValueId,
    axis: usize,
    out_w: i64,
    plan: &AxisPlan,
    cfg: &Config,
) -> Result<ValueId> {
    let xd = dims_of(ctx, n, x)?;
    let r = xd.len();
    let t = plan.taps as i64;
    let (nb, idx_dims) = if plan.taps == 1 { (1, vec![out_w, 1]) } else { (2, vec![out_w, t, 1]) };
    let idx = ctx.const_i64(&plan.idx, &idx_dims)?;
    let mut slice_sizes = xd.clone();
    slice_sizes[axis] = 1;
    let offset_output_axes: Vec<usize> = (0..r + nb - 1).filter(|&p| p < axis || p >= axis + nb).collect();
    let op = Op::Gather {
        index_vector_axis: nb,
        offset_output_axes,
        collapsed_slice_axes: vec![axis],
        start_index_map: vec![axis],
        slice_sizes,
        indices_are_sorted: true,
    };
    let mut y = ctx.emit1(op, &[x, idx])?;
    let dt = ctx.dtype(x);
    if plan.taps > 1 {
        let mut wd = vec![1i64; r + 1];
        wd[axis] = out_w;
        wd[axis + 1] = t;
        let w = const_of(ctx, n, dt, &wd, &plan.w)?;
        y = bin(ctx, BinaryOp::Mul, y, w)?;
        y = ctx.emit1(Op::Reduce { kind: ReduceKind::Sum, axes: vec![axis + 1] }, &[y])?;
    }
    if plan.extrapolated.iter().any(|&e| e) {
        let mask: Vec<u8> = plan.extrapolated.iter().map(|&e| u8::from(e)).collect();
        let mask = ctx.constant(Shape::new(DType::Bool, &[out_w]), mask)?;
        let yd = dims_of(ctx, n, y)?;
        let mask = ctx.emit1(Op::BroadcastInDim { shape: Shape::new(DType::Bool, &yd), axes: vec![axis] }, &[mask])?;
        let e = ctx.scalar(ctx.dtype(y), cfg.extrapolation)?;
        y = ctx.emit1(Op::Where, &[mask, e, y])?;
    }
    Ok(y)
}

/// Resizes `x` to `out` (full rank) with per-axis `scales`, visiting `order`.
#[allow(clippy::too_many_arguments)]
fn resample(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    x: ValueId,
    cfg: &Config,
    out: &[i64],
    scales: &[f64],
    roi: &[(f64, f64)],
    order: &[usize],
) -> Result<ValueId> {
    let xd = dims_of(ctx, n, x)?;
    let dt = ctx.dtype(x);
    let interpolating = cfg.mode != Mode::Nearest;
    if interpolating && !(dt.is_float() || (dt.is_int() && !dt.is_packed())) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    if !interpolating && (dt.is_packed() || dt.is_complex()) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    // Linear and cubic modes compute in f32 (f64 for f64) and round once at the end.
    Shape::new(dt, out).check_limits().map_err(|e| n.invalid(format!("output shape {out:?}: {e}")))?;
    let work = if dt == DType::Float64 { DType::Float64 } else { DType::Float32 };
    let mut y = if interpolating { cast(ctx, x, work)? } else { x };
    for &a in order {
        if out[a] < 0 {
            return Err(n.invalid(format!("output size {} on axis {a}", out[a])));
        }
        let identity = (scales[a] - 1.0).abs() <= 1e-9
            && out[a] == xd[a]
            && (cfg.coord != Coord::TfCropAndResize || (roi[a].0.abs() <= 1e-9 && (roi[a].1 - 1.0).abs() <= 1e-9));
        if identity {
            continue;
        }
        if xd[a] == 0 {
            return Err(n.unsupported(format!("resizing the empty axis {a}")));
        }
        if cfg.antialias && scales[a] < 1.0 && 4.0 / scales[a] > (4 * xd[a] + 8) as f64 {
            return Err(n.unsupported(format!("an antialias filter wider than axis {a} (scale {})", scales[a])));
        }
        let plan = plan_axis(cfg, xd[a], out[a], scales[a], roi[a]);
        y = apply_axis(ctx, n, y, a, out[a], &plan, cfg)?;
    }
    if interpolating && ctx.dtype(y) != dt {
        if dt.is_int() {
            y = ctx.emit1(Op::Unary(UnaryOp::Round), &[y])?;
        }
        y = cast(ctx, y, dt)?;
    }
    // A resize that changes nothing still yields its own value.
    reshape(ctx, y, out)
}

/// Reads a constant float operand (`None` when absent or empty).
fn const_floats(ctx: &Ctx<'_>, n: &Node<'_>, i: usize, what: &str) -> Result<Option<Vec<f64>>> {
    let Some(v) = n.opt_input(i) else { return Ok(None) };
    let vals = ctx.known_f64s(v).ok_or_else(|| not_constant(ctx, n, i, what, "a constant float tensor"))?;
    Ok(if vals.is_empty() { None } else { Some(vals) })
}

/// Reads a constant integer operand (`None` when absent or empty).
fn const_sizes(ctx: &Ctx<'_>, n: &Node<'_>, i: usize) -> Result<Option<Vec<i64>>> {
    let Some(v) = n.opt_input(i) else { return Ok(None) };
    let vals = ctx.known_i64s(v).ok_or_else(|| not_constant(ctx, n, i, "sizes", "a constant integer tensor"))?;
    Ok(if vals.is_empty() { None } else { Some(vals) })
}

/// `Resize(X, roi?, scales?, sizes?)`.
pub(super) fn resize(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let xd = dims_of(ctx, n, x)?;
    let r = xd.len();
    let legacy = n.opset < 11;
    let mode = match n.attr_s("mode")?.as_deref() {
        None | Some("nearest") => Mode::Nearest,
        Some("linear") => Mode::Linear,
        Some("cubic") if !legacy => Mode::Cubic,
        Some(m) => return Err(n.invalid(format!("mode {m:?}"))),
    };
    let coord = if legacy {
        Coord::Asymmetric
    } else {
        match n.attr_s("coordinate_transformation_mode")?.as_deref() {
            None | Some("half_pixel") => Coord::HalfPixel,
            Some("half_pixel_symmetric") => Coord::HalfPixelSymmetric,
            Some("pytorch_half_pixel") => Coord::PytorchHalfPixel,
            Some("align_corners") => Coord::AlignCorners,
            Some("asymmetric") => Coord::Asymmetric,
            Some("tf_half_pixel_for_nn") => Coord::TfHalfPixelForNn,
            Some("tf_crop_and_resize") => Coord::TfCropAndResize,
            Some(m) => return Err(n.invalid(format!("coordinate_transformation_mode {m:?}"))),
        }
    };
    let nearest = if legacy {
        Nearest::Simple
    } else {
        match n.attr_s("nearest_mode")?.as_deref() {
            None | Some("round_prefer_floor") => Nearest::RoundPreferFloor,
            Some("round_prefer_ceil") => Nearest::RoundPreferCeil,
            Some("floor") => Nearest::Floor,
            Some("ceil") => Nearest::Ceil,
            Some(m) => return Err(n.invalid(format!("nearest_mode {m:?}"))),
        }
    };
    let cfg = Config {
        mode,
        coord,
        nearest,
        cubic_a: n.attr_f_or("cubic_coeff_a", -0.75)? as f64,
        exclude_outside: n.attr_i_or("exclude_outside", 0)? != 0,
        antialias: n.attr_i_or("antialias", 0)? != 0 && mode != Mode::Nearest,
        extrapolation: n.attr_f_or("extrapolation_value", 0.0)? as f64,
    };
    let axes = match n.attr_ints("axes")? {
        Some(a) => norm_axes(n, &a, r)?,
        None => (0..r).collect(),
    };
    let policy = n.attr_s("keep_aspect_ratio_policy")?.unwrap_or_else(|| "stretch".to_string());
    let (scales_in, sizes_in) = if legacy {
        (const_floats(ctx, n, 1, "scales")?, None)
    } else {
        (const_floats(ctx, n, 2, "scales")?, const_sizes(ctx, n, 3)?)
    };
    let mut out = xd.clone();
    let mut scales = vec![1.0f64; r];
    match (scales_in, sizes_in) {
        (Some(_), Some(_)) => return Err(n.invalid("only one of scales and sizes may be given")),
        (None, None) => return Err(n.invalid("one of scales and sizes is required")),
        (Some(s), None) => {
            if s.len() != axes.len() {
                return Err(n.invalid(format!("scales {s:?} must have {} entries", axes.len())));
            }
            for (&a, &v) in axes.iter().zip(&s) {
                if !(v > 0.0 && v.is_finite()) {
                    return Err(n.invalid(format!("scale {v} must be > 0")));
                }
                scales[a] = v;
                out[a] = (v * xd[a] as f64).floor() as i64;
            }
        }
        (None, Some(s)) => {
            if s.len() != axes.len() {
                return Err(n.invalid(format!("sizes {s:?} must have {} entries", axes.len())));
            }
            if s.iter().any(|&v| v < 0) || axes.iter().any(|&a| xd[a] == 0) {
                return Err(n.invalid(format!("sizes {s:?} for input {xd:?}")));
            }
            let ratios: Vec<f64> = axes.iter().zip(&s).map(|(&a, &v)| v as f64 / xd[a] as f64).collect();
            let keep = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some(ratios.iter().copied().fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some(ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
                p => return Err(n.invalid(format!("keep_aspect_ratio_policy {p:?}"))),
            };
            for (i, &a) in axes.iter().enumerate() {
                match keep {
                    None => {
                        scales[a] = ratios[i];
                        out[a] = s[i];
                    }
                    Some(k) => {
                        scales[a] = k;
                        out[a] = (k * xd[a] as f64 + 0.5) as i64;
                    }
                }
            }
        }
    }
    let mut roi = vec![(0.0, 1.0); r];
    if coord == Coord::TfCropAndResize {
        let vals = const_floats(ctx, n, 1, "roi")?.ok_or_else(|| n.invalid("tf_crop_and_resize needs roi"))?;
        if vals.len() != 2 * axes.len() {
            return Err(n.invalid(format!("roi {vals:?} must have {} entries", 2 * axes.len())));
        }
        for (i, &a) in axes.iter().enumerate() {
            roi[a] = (vals[i], vals[axes.len() + i]);
        }
    }
    Ok(vec![resample(ctx, n, x, &cfg, &out, &scales, &roi, &axes)?])
}

/// `Upsample(X, scales)` (opsets 7–9): `Resize` with asymmetric coordinates.
pub(super) fn upsample(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let xd = dims_of(ctx, n, x)?;
    if n.opset < 7 {
        n.ignore_attrs(&["width_scale", "height_scale"]);
        return Err(n.unsupported("Upsample before opset 7"));
    }
    let mode = match n.attr_s("mode")?.as_deref() {
        None | Some("nearest") => Mode::Nearest,
        Some("linear") | Some("bilinear") => Mode::Linear,
        Some(m) => return Err(n.invalid(format!("mode {m:?}"))),
    };
    let scales = match n.attr_floats("scales")? {
        Some(s) => s.iter().map(|&v| v as f64).collect(),
        None => const_floats(ctx, n, 1, "scales")?.ok_or_else(|| n.invalid("scales are required"))?,
    };
    if scales.len() != xd.len() || scales.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
        return Err(n.invalid(format!("scales {scales:?} for input {xd:?}")));
    }
    let out: Vec<i64> = xd.iter().zip(&scales).map(|(&d, &s)| (d as f64 * s).floor() as i64).collect();
    let cfg = Config {
        mode,
        coord: Coord::Asymmetric,
        nearest: Nearest::Simple,
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
        extrapolation: 0.0,
    };
    let order: Vec<usize> = (0..xd.len()).collect();
    let roi = vec![(0.0, 1.0); xd.len()];
    Ok(vec![resample(ctx, n, x, &cfg, &out, &scales, &roi, &order)?])
}
