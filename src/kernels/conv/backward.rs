//! Convolution backward kernels (f32, one or two spatial axes): the input gradient / transposed
//! convolution (a convolution with input dilation and possibly negative padding) and the filter
//! gradient (a reduction over images and output pixels), both on the GEMM microkernels.
//!
//! **Transposed convolution** ([`DilatedConv`]). Dilating the input by `s` inserts `s − 1` zeros
//! between its elements; a dense convolution over it would spend `(s² − 1)/s²` of its work on
//! them. Instead the output is split into `s × s` phases (output positions `r + s·j`): in phase
//! `r` only the taps `q` with `r + q·k_dil − lo ≡ 0 (mod s)` meet input elements, and they form a
//! strided sub-kernel, so every phase is a small dense convolution of the undilated input with that
//! sub-kernel (a view of the original filter: an offset and scaled strides), writing the output
//! with its strides scaled by `s`. Each phase runs on [`conv2d_f32`] (implicit GEMM or depthwise),
//! which brings every layout, channel groups, kernel dilation and the thread pool. Negative low
//! padding crops: the phase's input view starts further in. The phase form was chosen over
//! "GEMM + col2im" (one GEMM of the input pixels against all taps, then a scatter-add of the taps
//! into the output) because it writes each output element once (no scatter-add, so no
//! synchronisation between threads and no second pass) and reuses the forward kernels unchanged.
//!
//! **Filter gradient** ([`filter_grad_f32`]): `dW[o, i, ty, tx] = Σ_n Σ_p x[n, g·cin_g + i,
//! p·stride + t·dil − lo] · dy[n, o, p]` — the form jax/XLA emit as a ConvGeneral whose "kernel" is
//! `dy`. Per block of output pixels of one image, the input patches are gathered into a
//! `[taps × cin_g, pixels]` matrix and `dy` into `[pixels, cout_g]`, and one GEMM accumulates their
//! product into a per-thread `[taps × cin_g, cout_g]` sum (split-K over images and pixels); the
//! threads' sums are added at the end. Groups (XLA's batch groups) run per group; depthwise filters
//! (one channel per group) use a direct loop instead, vectorised along the channels when they are
//! innermost, else along the rows.

use rayon::prelude::*;

use super::{ConvEpilogue, ConvFilter, ConvGeom, conv2d_f32, extent, reach_fits};
use crate::error::{Error, Result};
use crate::kernels::gemm::{Epilogue, GemmArgs, MatMut, MatRef, gemm_f32};

const OP: &str = "conv_general";

/// Target size of one gathered patch block of the filter gradient, in f32 elements (512 KiB).
const GRAD_BLOCK_ELEMS: usize = 128 * 1024;

/// A convolution with input dilation and signed low padding (the input-gradient / transposed
/// convolution form), tensors described by element strides in (batch, channel, row, column) order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DilatedConv {
    /// Images.
    pub batch: usize,
    /// Input channels (all groups).
    pub in_channels: usize,
    /// Input height and width (undilated).
    pub in_hw: [usize; 2],
    /// Output channels (all groups).
    pub out_channels: usize,
    /// Output height and width.
    pub out_hw: [usize; 2],
    /// Kernel height and width.
    pub kernel_hw: [usize; 2],
    /// Stride per spatial axis; an axis with input dilation > 1 needs stride 1.
    pub stride: [usize; 2],
    /// Low padding of the dilated input per spatial axis (negative crops).
    pub pad: [i64; 2],
    /// Input dilation per spatial axis (≥ 1).
    pub input_dilation: [usize; 2],
    /// Kernel dilation per spatial axis (≥ 1).
    pub dilation: [usize; 2],
    /// Channel groups.
    pub groups: usize,
    /// Input strides (batch, channel, row, column) in elements.
    pub x_strides: [usize; 4],
    /// Output strides (batch, channel, row, column) in elements.
    pub y_strides: [usize; 4],
}

/// One phase of a [`DilatedConv`]: a dense convolution of a view of the input with a view of the
/// filter, writing a strided subset of the output.
#[derive(Clone, Debug)]
struct Phase {
    geom: ConvGeom,
    /// Element offsets of the input view and the output subset.
    x_at: usize,
    y_at: usize,
    /// First tap of the sub-kernel and the step between its taps (row, column).
    tap0: [usize; 2],
    tap_step: [usize; 2],
}

/// One axis of a phase.
#[derive(Clone, Copy, Debug)]
struct AxisPhase {
    /// First output position and the step between the phase's outputs.
    out0: usize,
    out_step: usize,
    outs: usize,
    /// Input positions cropped from the start, and the positions left.
    crop: usize,
    inputs: usize,
    pad: usize,
    stride: usize,
    /// First tap, step between taps, number of taps, and the sub-kernel's dilation.
    tap0: usize,
    tap_step: usize,
    taps: usize,
    dilation: usize,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl DilatedConv {
    /// Input channels per group.
    fn cin_g(&self) -> usize {
        self.in_channels / self.groups.max(1)
    }

    /// The phases of axis `a` (None: a form the phases do not cover, e.g. stride and input
    /// dilation both above 1, or sizes that overflow).
    fn axis_phases(&self, a: usize) -> Option<Vec<AxisPhase>> {
        let (d, s, kd, k) = (self.input_dilation[a], self.stride[a], self.dilation[a], self.kernel_hw[a]);
        let (inp, out, lo) = (self.in_hw[a], self.out_hw[a], self.pad[a]);
        if d == 0 || s == 0 || kd == 0 || (d > 1 && s > 1) {
            return None;
        }
        let id = i64::try_from(d).ok()?;
        let mut v = Vec::with_capacity(d);
        for r in 0..d {
            // Taps whose input position r + q·kd − lo (for output r + d·j) is on the dilation grid.
            let tap0 = (0..k.min(d)).find(|&q| (r as i64 + (q * kd) as i64 - lo).rem_euclid(id) == 0);
            let step = d / gcd(kd, d);
            let (tap0, taps) = match tap0 {
                Some(q) => (q, (k - q).div_ceil(step)),
                None => (0, 0),
            };
            // Input position of (phase output j, sub-tap t): j·stride + base + t·kd/g.
            let base = (r as i64 + (tap0 * kd) as i64 - lo).div_euclid(id);
            let (crop, pad) =
                if base >= 0 { (usize::try_from(base).ok()?, 0) } else { (0, usize::try_from(-base).ok()?) };
            v.push(AxisPhase {
                out0: r,
                out_step: d,
                outs: if r < out { (out - r).div_ceil(d) } else { 0 },
                crop: crop.min(inp),
                inputs: inp.saturating_sub(crop),
                pad,
                stride: s,
                tap0,
                tap_step: step,
                taps,
                dilation: kd * step / d,
            });
        }
        Some(v)
    }

    /// The phases, each a dense convolution; `None` when this form is not covered.
    fn phases(&self) -> Option<Vec<Phase>> {
        let (rows, cols) = (self.axis_phases(0)?, self.axis_phases(1)?);
        let [_, _, xh, xw] = self.x_strides;
        let [yn, yc, yh, yw] = self.y_strides;
        let mut v = Vec::with_capacity(rows.len() * cols.len());
        for pr in &rows {
            for pc in &cols {
                let geom = ConvGeom {
                    batch: self.batch,
                    in_channels: self.in_channels,
                    in_hw: [pr.inputs, pc.inputs],
                    out_channels: self.out_channels,
                    out_hw: [pr.outs, pc.outs],
                    kernel_hw: [pr.taps, pc.taps],
                    stride: [pr.stride, pc.stride],
                    pad: [pr.pad, pc.pad],
                    dilation: [pr.dilation, pc.dilation],
                    groups: self.groups,
                    x_strides: self.x_strides,
                    y_strides: [yn, yc, yh.checked_mul(pr.out_step)?, yw.checked_mul(pc.out_step)?],
                };
                v.push(Phase {
                    geom,
                    x_at: pr.crop * xh + pc.crop * xw,
                    y_at: pr.out0 * yh + pc.out0 * yw,
                    tap0: [pr.tap0, pc.tap0],
                    tap_step: [pr.tap_step, pc.tap_step],
                });
            }
        }
        Some(v)
    }

    /// Checks that the form is covered and every phase fits buffers of `x_len` and `y_len`
    /// elements.
    pub fn validate(&self, x_len: usize, y_len: usize) -> Result<()> {
        let phases = self.phases().ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "stride {:?} with input dilation {:?} (one of them must be 1 per axis) or dilation 0",
                    self.stride, self.input_dilation
                ),
            )
        })?;
        if self.groups == 0 || !self.in_channels.is_multiple_of(self.groups) {
            return Err(Error::invalid(OP, format!("{} input channels in {} groups", self.in_channels, self.groups)));
        }
        for p in &phases {
            if p.geom.out_hw.contains(&0) || self.batch == 0 || self.out_channels == 0 {
                continue;
            }
            p.geom.validate(x_len.saturating_sub(p.x_at), y_len.saturating_sub(p.y_at))?;
        }
        Ok(())
    }
}

/// The filter of a [`DilatedConv`] prepared for each phase (`None` for phases without taps).
#[derive(Debug)]
pub struct DilatedFilter {
    conv: DilatedConv,
    phases: Vec<(Phase, Option<ConvFilter>)>,
}

impl DilatedFilter {
    /// Prepares `w` (element (o, i, kh, kw) at `w[o*s[0] + i*s[1] + kh*s[2] + kw*s[3]]`, `i` the
    /// channel within the group) for `conv`.
    pub fn new(conv: &DilatedConv, w: &[f32], s: [usize; 4]) -> Result<DilatedFilter> {
        let phases = conv.phases().ok_or_else(|| Error::invalid(OP, "input dilation together with a stride"))?;
        let mut v = Vec::with_capacity(phases.len());
        for p in phases {
            let empty = p.geom.kernel_hw.contains(&0) || p.geom.in_hw.contains(&0) || conv.cin_g() == 0;
            let filter = if empty {
                None
            } else {
                let sub = [s[0], s[1], s[2] * p.tap_step[0], s[3] * p.tap_step[1]];
                let at = p.tap0[0] * s[2] + p.tap0[1] * s[3];
                let w = w.get(at..).ok_or_else(|| Error::invalid(OP, "kernel offset outside its buffer"))?;
                Some(ConvFilter::new(&p.geom, w, sub)?)
            };
            v.push((p, filter));
        }
        Ok(DilatedFilter { conv: conv.clone(), phases: v })
    }

    /// Bytes held by the phases' filters.
    pub fn size_bytes(&self) -> usize {
        self.phases.iter().filter_map(|(_, f)| f.as_ref()).map(ConvFilter::size_bytes).sum()
    }
}

/// `y = conv(x, filter)` for a [`DilatedConv`]: every phase is a dense convolution written into
/// its strided part of `y` (phases without taps are zero-filled).
pub fn dilated_conv_f32(
    conv: &DilatedConv,
    x: &[f32],
    filter: &DilatedFilter,
    y: &mut [f32],
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    if filter.conv != *conv {
        return Err(Error::invalid(OP, "the filter was prepared for another convolution geometry"));
    }
    conv.validate(x.len(), y.len())?;
    if conv.batch == 0 || conv.out_channels == 0 || conv.out_hw.contains(&0) {
        return Ok(());
    }
    if filter.phases.iter().any(|(p, f)| f.is_none() && !p.geom.out_hw.contains(&0)) {
        y.fill(0.0);
    }
    for (p, f) in &filter.phases {
        let Some(f) = f else { continue };
        if p.geom.out_hw.contains(&0) {
            continue;
        }
        let (Some(x), Some(y)) = (x.get(p.x_at..), y.get_mut(p.y_at..)) else {
            return Err(Error::invalid(OP, "phase offset outside the buffers"));
        };
        conv2d_f32(&p.geom, x, f, &ConvEpilogue::default(), y, pool)?;
    }
    Ok(())
}

/// The filter gradient of a convolution: `dw[o, i, ty, tx] = Σ_n Σ_(oy,ox) x[n, g·cin_g + i,
/// oy·stride + ty·dilation − pad, …] · dy[n, o, oy, ox]` with `g` the group of `o`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterGrad {
    /// Images (summed over).
    pub batch: usize,
    /// Input channels (all groups).
    pub in_channels: usize,
    /// Input height and width.
    pub in_hw: [usize; 2],
    /// Output-gradient channels (all groups).
    pub out_channels: usize,
    /// Output-gradient height and width.
    pub out_hw: [usize; 2],
    /// Filter height and width (the result's spatial size).
    pub kernel_hw: [usize; 2],
    /// The forward convolution's stride.
    pub stride: [usize; 2],
    /// The forward convolution's low padding (negative crops).
    pub pad: [i64; 2],
    /// The forward convolution's kernel dilation.
    pub dilation: [usize; 2],
    /// Groups (divides both channel counts).
    pub groups: usize,
    /// Input strides (batch, channel, row, column).
    pub x_strides: [usize; 4],
    /// Output-gradient strides (batch, channel, row, column).
    pub dy_strides: [usize; 4],
    /// Result strides (output channel, input channel within the group, row, column).
    pub dw_strides: [usize; 4],
}

impl FilterGrad {
    fn cin_g(&self) -> usize {
        self.in_channels / self.groups.max(1)
    }

    fn cout_g(&self) -> usize {
        self.out_channels / self.groups.max(1)
    }

    /// Checks the group split, strides, that accesses stay inside buffers of the given lengths
    /// and that window positions fit in `i64`.
    pub fn validate(&self, x_len: usize, dy_len: usize, dw_len: usize) -> Result<()> {
        let g = self.groups;
        if g == 0 || !self.in_channels.is_multiple_of(g) || !self.out_channels.is_multiple_of(g) {
            return Err(Error::invalid(
                OP,
                format!("{} input and {} output channels in {g} groups", self.in_channels, self.out_channels),
            ));
        }
        if self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(Error::invalid(
                OP,
                format!("strides {:?} / dilations {:?} must be ≥ 1", self.stride, self.dilation),
            ));
        }
        let xd = [self.batch, self.in_channels, self.in_hw[0], self.in_hw[1]];
        let yd = [self.batch, self.out_channels, self.out_hw[0], self.out_hw[1]];
        let wd = [self.out_channels, self.cin_g(), self.kernel_hw[0], self.kernel_hw[1]];
        let fits = |d, s, len| extent(d, s).is_some_and(|e| e <= len);
        if !fits(xd, self.x_strides, x_len) || !fits(yd, self.dy_strides, dy_len) || !fits(wd, self.dw_strides, dw_len)
        {
            return Err(Error::invalid(
                OP,
                format!("input {xd:?}, output gradient {yd:?} or filter {wd:?} exceed their buffers"),
            ));
        }
        for a in 0..2 {
            let (out, k, pad) = (self.out_hw[a], self.kernel_hw[a], self.pad[a].unsigned_abs());
            if !reach_fits(out, self.stride[a], k, self.dilation[a], pad, i64::MAX as u64 / 4) {
                return Err(Error::invalid(OP, format!("spatial axis {a}: window reach overflows")));
            }
        }
        Ok(())
    }

    /// The output positions `lo..hi` (of `outs`) whose input position `o·stride + off` lies in
    /// `0..len` on axis `a`.
    fn inside(&self, a: usize, off: i64) -> (usize, usize) {
        let (s, len, outs) = (self.stride[a] as i64, self.in_hw[a] as i64, self.out_hw[a] as i64);
        let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
        let hi = if len - 1 - off < 0 { 0 } else { ((len - 1 - off) / s + 1).min(outs) };
        (lo.min(outs) as usize, hi.max(lo.min(outs)) as usize)
    }

    /// Input offset of tap `t` on axis `a` (input position of output `o` is `o·stride + off`).
    fn off(&self, a: usize, t: usize) -> i64 {
        (t * self.dilation[a]) as i64 - self.pad[a]
    }
}

/// Computes the filter gradient into `dw` (every element written). `pool`: the threads to split
/// the images and pixels over (`None`: the calling thread).
pub fn filter_grad_f32(
    geom: &FilterGrad,
    x: &[f32],
    dy: &[f32],
    dw: &mut [f32],
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    geom.validate(x.len(), dy.len(), dw.len())?;
    let (cin_g, cout_g, taps) = (geom.cin_g(), geom.cout_g(), geom.kernel_hw[0] * geom.kernel_hw[1]);
    if geom.out_channels == 0 || cin_g == 0 || taps == 0 {
        return Ok(());
    }
    let m = taps * cin_g;
    let acc_len = geom.groups * m * cout_g;
    let pixels = geom.out_hw[0] * geom.out_hw[1];
    let sum = if geom.batch == 0 || pixels == 0 {
        vec![0.0; acc_len]
    } else {
        // One input and one output channel per group: a direct kernel, not per-group GEMVs.
        let depthwise = geom.groups > 1 && cin_g == 1 && cout_g == 1;
        let rows = (GRAD_BLOCK_ELEMS / m.max(1)).clamp(64, 2048).next_multiple_of(16).min(pixels);
        let blocks = pixels.div_ceil(rows);
        let tasks = geom.batch * blocks;
        let run = || -> Result<Vec<f32>> {
            // One accumulator per chunk of consecutive tasks, one chunk per thread.
            let chunks = rayon::current_num_threads().clamp(1, tasks);
            let partial: Result<Vec<Vec<f32>>> = (0..chunks)
                .into_par_iter()
                .map(|c| {
                    let mut acc = vec![0.0f32; acc_len];
                    let tasks = tasks * c / chunks..tasks * (c + 1) / chunks;
                    if depthwise {
                        // Direct: [taps][channels] sums, then into acc's [channel][tap].
                        let mut d = vec![0.0f32; acc_len];
                        for t in tasks {
                            let (img, p0) = (t / blocks, (t % blocks) * rows);
                            depthwise_grad(geom, x, dy, img, p0, rows.min(pixels - p0), &mut d);
                        }
                        for (tap, row) in d.chunks_exact(geom.groups).enumerate() {
                            for (ch, &v) in row.iter().enumerate() {
                                acc[ch * taps + tap] = v;
                            }
                        }
                        return Ok(acc);
                    }
                    let (mut patches, mut grads) = (Vec::new(), Vec::new());
                    for t in tasks {
                        let (img, p0) = (t / blocks, (t % blocks) * rows);
                        let mb = rows.min(pixels - p0);
                        for g in 0..geom.groups {
                            patches.resize(m * mb, 0.0);
                            grads.resize(mb * cout_g, 0.0);
                            let channels_inner = geom.x_strides[1] == 1 && cin_g > 1;
                            gather_patches(geom, x, img, g, p0, mb, channels_inner, &mut patches);
                            gather_grads(geom, dy, img, g, p0, mb, &mut grads);
                            // Patches are [pixels][taps × cin_g] (channels inner) or [taps × cin_g][pixels].
                            let a = if channels_inner {
                                MatRef::new(&patches, 1, m)
                            } else {
                                MatRef::row_major(&patches, mb)
                            };
                            let c = MatMut::row_major(&mut acc[g * m * cout_g..][..m * cout_g], cout_g);
                            let e = Epilogue { beta: 1.0, ..Epilogue::default() };
                            gemm_f32(
                                GemmArgs::new(m, cout_g, mb, a, MatRef::row_major(&grads, cout_g), c).epilogue(e),
                            )?;
                        }
                    }
                    Ok(acc)
                })
                .collect();
            let mut partial = partial?;
            let mut sum = partial.pop().unwrap_or_else(|| vec![0.0; acc_len]);
            for p in &partial {
                add(&mut sum, p);
            }
            Ok(sum)
        };
        match pool {
            Some(p) => p.install(run)?,
            None => run()?,
        }
    };
    // sum[g][(tap, i)][o'] → dw[g·cout_g + o', i, ty, tx].
    let [so, si, sh, sw] = geom.dw_strides;
    let kw = geom.kernel_hw[1];
    for g in 0..geom.groups {
        for tap in 0..taps {
            for i in 0..cin_g {
                let row = &sum[(g * m + tap * cin_g + i) * cout_g..][..cout_g];
                let base = i * si + (tap / kw) * sh + (tap % kw) * sw + g * cout_g * so;
                for (o, &v) in row.iter().enumerate() {
                    dw[base + o * so] = v;
                }
            }
        }
    }
    Ok(())
}

/// `acc[i] += v[i]`.
fn add(acc: &mut [f32], v: &[f32]) {
    for (a, &b) in acc.iter_mut().zip(v) {
        *a += b;
    }
}

/// `acc[i] += x[i] * y[i]`.
#[inline]
fn add_mul(acc: &mut [f32], x: &[f32], y: &[f32]) {
    for ((a, &u), &v) in acc.iter_mut().zip(x).zip(y) {
        *a += u * v;
    }
}

/// `Σ_j x[j·sx] · y[j·sy]` for `j < n`, in eight partial sums (so unit steps vectorise).
fn dot(x: &[f32], sx: usize, y: &[f32], sy: usize, n: usize) -> f32 {
    let mut part = [0.0f32; 8];
    if sx == 1 && sy == 1 {
        let (x, y) = (&x[..n], &y[..n]);
        for (cx, cy) in x.chunks_exact(8).zip(y.chunks_exact(8)) {
            for l in 0..8 {
                part[l] += cx[l] * cy[l];
            }
        }
        for j in n / 8 * 8..n {
            part[0] += x[j] * y[j];
        }
    } else {
        for j in 0..n {
            part[j % 8] += x[j * sx] * y[j * sy];
        }
    }
    part.iter().sum()
}

/// Depthwise filter gradient of pixels `p0..p0+mb` of image `img`, added to `acc`
/// (`[taps][channels]`): per tap, the output columns whose input column is inside, vectorised
/// along the channels when they are innermost in both tensors, else along the row.
fn depthwise_grad(geom: &FilterGrad, x: &[f32], dy: &[f32], img: usize, p0: usize, mb: usize, acc: &mut [f32]) {
    let [xn, xc, xh, xw] = geom.x_strides;
    let [yn, yc, yh, yw] = geom.dy_strides;
    let ([kh, kw], ow, s, c) = (geom.kernel_hw, geom.out_hw[1], geom.stride[1], geom.in_channels);
    let inner = xc == 1 && yc == 1;
    let mut r = 0;
    while r < mb {
        let (oy, ox0) = ((p0 + r) / ow, (p0 + r) % ow);
        let run = (ow - ox0).min(mb - r);
        r += run;
        for ty in 0..kh {
            let iy = (oy * geom.stride[0]) as i64 + geom.off(0, ty);
            if iy < 0 || iy >= geom.in_hw[0] as i64 {
                continue;
            }
            for tx in 0..kw {
                let (lo, hi) = geom.inside(1, geom.off(1, tx));
                let (a, b) = (lo.clamp(ox0, ox0 + run), hi.clamp(ox0, ox0 + run));
                if a >= b {
                    continue;
                }
                let tap = ty * kw + tx;
                // Input column of output column a (inside, so non-negative).
                let ix = ((a * s) as i64 + geom.off(1, tx)) as usize;
                let (xr, yr) = (img * xn + iy as usize * xh + ix * xw, img * yn + oy * yh + a * yw);
                if inner {
                    let dst = &mut acc[tap * c..][..c];
                    for j in 0..b - a {
                        add_mul(dst, &x[xr + j * s * xw..][..c], &dy[yr + j * yw..][..c]);
                    }
                } else {
                    for ch in 0..c {
                        acc[tap * c + ch] += dot(&x[xr + ch * xc..], s * xw, &dy[yr + ch * yc..], yw, b - a);
                    }
                }
            }
        }
    }
}

/// Gathers the input patches of pixels `p0..p0+mb` of image `img`, group `g`: element
/// ((tap, i), r) at `r·m + tap·cin_g + i` when `channels_inner`, else at `(tap·cin_g + i)·mb + r`
/// (zero where the window reads padding).
#[allow(clippy::too_many_arguments)]
fn gather_patches(
    geom: &FilterGrad,
    x: &[f32],
    img: usize,
    g: usize,
    p0: usize,
    mb: usize,
    channels_inner: bool,
    out: &mut [f32],
) {
    let [sn, sc, sh, sw] = geom.x_strides;
    let (cin_g, [kh, kw], ow, s) = (geom.cin_g(), geom.kernel_hw, geom.out_hw[1], geom.stride[1]);
    let m = kh * kw * cin_g;
    let base = img * sn + g * cin_g * sc;
    for ty in 0..kh {
        for tx in 0..kw {
            let tap = ty * kw + tx;
            let (lo, hi) = geom.inside(1, geom.off(1, tx));
            let mut r = 0;
            while r < mb {
                let (oy, ox0) = ((p0 + r) / ow, (p0 + r) % ow);
                let run = (ow - ox0).min(mb - r);
                let iy = (oy * geom.stride[0]) as i64 + geom.off(0, ty);
                let row_in = iy >= 0 && iy < geom.in_hw[0] as i64;
                // Columns ox0+a..ox0+b of this run read the input; the rest is padding.
                let (a, b) = if row_in {
                    let (a, b) = (lo.clamp(ox0, ox0 + run) - ox0, hi.clamp(ox0, ox0 + run) - ox0);
                    (a, b.max(a))
                } else {
                    (run, run)
                };
                let first = |j: usize| {
                    let ix = ((ox0 + j) * s) as i64 + geom.off(1, tx);
                    base + iy as usize * sh + ix as usize * sw
                };
                if channels_inner {
                    for j in 0..run {
                        let dst = &mut out[(r + j) * m + tap * cin_g..][..cin_g];
                        if j < a || j >= b {
                            dst.fill(0.0);
                        } else {
                            dst.copy_from_slice(&x[first(j)..][..cin_g]);
                        }
                    }
                } else {
                    for i in 0..cin_g {
                        let dst = &mut out[(tap * cin_g + i) * mb + r..][..run];
                        dst[..a].fill(0.0);
                        dst[b..].fill(0.0);
                        if a < b {
                            let src = &x[first(a) + i * sc..];
                            let step = s * sw;
                            if step == 1 {
                                dst[a..b].copy_from_slice(&src[..b - a]);
                            } else {
                                for (j, d) in dst[a..b].iter_mut().enumerate() {
                                    *d = src[j * step];
                                }
                            }
                        }
                    }
                }
                r += run;
            }
        }
    }
}

/// Gathers `dy` of pixels `p0..p0+mb` of image `img`, group `g` as a row-major `[mb][cout_g]`.
fn gather_grads(geom: &FilterGrad, dy: &[f32], img: usize, g: usize, p0: usize, mb: usize, out: &mut [f32]) {
    let [sn, sc, sh, sw] = geom.dy_strides;
    let (cout_g, ow) = (geom.cout_g(), geom.out_hw[1]);
    let base = img * sn + g * cout_g * sc;
    for (r, row) in out.chunks_exact_mut(cout_g).take(mb).enumerate() {
        let p = p0 + r;
        let at = base + (p / ow) * sh + (p % ow) * sw;
        if sc == 1 {
            row.copy_from_slice(&dy[at..][..cout_g]);
        } else {
            for (o, v) in row.iter_mut().enumerate() {
                *v = dy[at + o * sc];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dilated(stride: [usize; 2], input_dilation: [usize; 2], pad: [i64; 2]) -> DilatedConv {
        DilatedConv {
            batch: 1,
            in_channels: 2,
            in_hw: [3, 3],
            out_channels: 2,
            out_hw: [5, 5],
            kernel_hw: [3, 3],
            stride,
            pad,
            input_dilation,
            dilation: [1, 1],
            groups: 1,
            x_strides: [18, 9, 3, 1],
            y_strides: [50, 25, 5, 1],
        }
    }

    /// Direct loop over the dilated input in f64 (positions off the dilation grid are zero).
    fn naive(c: &DilatedConv, x: &[f32], w: &[f32], ws: [usize; 4]) -> Vec<f64> {
        let mut y = vec![0.0f64; c.batch * c.out_channels * c.out_hw[0] * c.out_hw[1]];
        let (cin_g, cout_g) = (c.cin_g(), c.out_channels / c.groups);
        let src = |a: usize, o: usize, t: usize| {
            let v = (o * c.stride[a] + t * c.dilation[a]) as i64 - c.pad[a];
            let d = c.input_dilation[a] as i64;
            (v >= 0 && v % d == 0 && v / d < c.in_hw[a] as i64).then_some((v / d) as usize)
        };
        for n in 0..c.batch {
            for o in 0..c.out_channels {
                for oy in 0..c.out_hw[0] {
                    for ox in 0..c.out_hw[1] {
                        let mut s = 0.0;
                        for i in 0..cin_g {
                            for ty in 0..c.kernel_hw[0] {
                                for tx in 0..c.kernel_hw[1] {
                                    let (Some(iy), Some(ix)) = (src(0, oy, ty), src(1, ox, tx)) else { continue };
                                    let xs = c.x_strides;
                                    let ci = (o / cout_g) * cin_g + i;
                                    let xv = x[n * xs[0] + ci * xs[1] + iy * xs[2] + ix * xs[3]];
                                    s += xv as f64 * w[o * ws[0] + i * ws[1] + ty * ws[2] + tx * ws[3]] as f64;
                                }
                            }
                        }
                        let ys = c.y_strides;
                        y[n * ys[0] + o * ys[1] + oy * ys[2] + ox * ys[3]] = s;
                    }
                }
            }
        }
        y
    }

    #[test]
    fn phases_match_the_dilated_loop() {
        let w: Vec<f32> = (0..2 * 2 * 9).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
        let x: Vec<f32> = (0..18).map(|i| ((i * 5 % 13) as f32 - 6.0) / 4.0).collect();
        let ws = [18, 9, 3, 1];
        for (input_dilation, pad) in [([2, 2], [2, 1]), ([2, 1], [-1, 0]), ([3, 2], [0, 3]), ([1, 1], [-1, -2])] {
            let c = dilated([1, 1], input_dilation, pad);
            let f = DilatedFilter::new(&c, &w, ws).unwrap();
            let mut y = vec![f32::NAN; 50];
            dilated_conv_f32(&c, &x, &f, &mut y, None).unwrap();
            for (g, v) in y.iter().zip(naive(&c, &x, &w, ws)) {
                assert!((*g as f64 - v).abs() < 1e-5, "{c:?}: {g} vs {v}");
            }
        }
    }

    #[test]
    fn bad_geometries_and_buffers_are_errors() {
        let w = vec![0.0f32; 36];
        // Stride and input dilation on one axis is not a phase form.
        let both = dilated([2, 1], [2, 1], [0, 0]);
        assert!(both.validate(18, 50).is_err());
        assert!(DilatedFilter::new(&both, &w, [18, 9, 3, 1]).is_err());
        let c = dilated([1, 1], [2, 2], [1, 1]);
        assert!(c.validate(17, 50).is_err());
        assert!(DilatedFilter::new(&c, &w[..20], [18, 9, 3, 1]).is_err());
        let f = DilatedFilter::new(&c, &w, [18, 9, 3, 1]).unwrap();
        let mut y = vec![0.0; 50];
        assert!(dilated_conv_f32(&c, &[0.0; 10], &f, &mut y, None).is_err());
        let other = DilatedConv { pad: [0, 0], ..c.clone() };
        assert!(dilated_conv_f32(&other, &[0.0; 18], &f, &mut y, None).is_err());
        let g = FilterGrad {
            batch: 1,
            in_channels: 2,
            in_hw: [3, 3],
            out_channels: 3,
            out_hw: [3, 3],
            kernel_hw: [3, 3],
            stride: [1, 1],
            pad: [1, 1],
            dilation: [1, 1],
            groups: 1,
            x_strides: [18, 9, 3, 1],
            dy_strides: [27, 9, 3, 1],
            dw_strides: [18, 9, 3, 1],
        };
        assert!(g.validate(18, 27, 54).is_ok());
        assert!(FilterGrad { groups: 2, ..g.clone() }.validate(18, 27, 54).is_err());
        assert!(FilterGrad { stride: [0, 1], ..g.clone() }.validate(18, 27, 54).is_err());
        assert!(FilterGrad { pad: [i64::MIN, 0], ..g.clone() }.validate(18, 27, 54).is_err());
        let mut dw = vec![0.0; 53];
        assert!(filter_grad_f32(&g, &[0.0; 18], &[0.0; 27], &mut dw, None).is_err());
        let mut dw = vec![f32::NAN; 54];
        filter_grad_f32(&g, &[1.0; 18], &[1.0; 27], &mut dw, None).unwrap();
        // Centre tap: all 9 pixels meet the input; corner taps 4 of them.
        assert_eq!((dw[4], dw[0]), (9.0, 4.0));
    }
}
