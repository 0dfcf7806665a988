//! Convolution kernels (f32, forward, one or two spatial axes): implicit GEMM over im2col row
//! blocks on the GEMM microkernels, and a direct depthwise kernel. Any memory layout of input and
//! output (NCHW, NHWC, …) is described by element strides, so the layout is a compile-time choice
//! of the caller, not a copy.
//!
//! The general path splits the output pixels of each (image, group) into row blocks. A block's
//! patches are gathered into a thread-local `[rows, K]` matrix (K = kernel taps × input channels
//! of the group, zero where the window leaves the padded input) in the order that reads the input
//! contiguously: taps-then-channels when channels are the innermost input axis, else
//! channels-then-taps with the pixels contiguous. The block is then one GEMM against the filter,
//! which is packed once (for constant filters, at compile time) in the same K order, with the bias
//! and activation in the GEMM epilogue, into a thread-local tile that is scattered to the output.
//! Blocks run in parallel on the caller's rayon pool. A 1×1 convolution is the same path with
//! K = channels.
//!
//! Depthwise convolutions (one input and one output channel per group) use the direct kernel of
//! the `depthwise` module; convolutions with few input channels (convnet stems) the direct kernel
//! of the `stem` module; strided windows over many channels-first input channels (ResNet's
//! stride-2 3×3 layers) the direct kernel of the `direct` module.

pub mod backward;
mod depthwise;
mod direct;
pub mod half;
mod nhwc;
pub(crate) use depthwise::split_pairs;
mod smallk;
mod stem;
mod winograd;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::kernels::gemm::epilogue::{Finish, Region, act_f32, act_f32_slice};
use crate::kernels::gemm::{Activation, Bias, Epilogue, GemmArgs, MatMut, MatRef, PackedB, Rhs, Scratch, gemm_f32};

/// Runs `f(scratch, u)` for every unit `u` of `0..units`: split over the current thread pool
/// when `parallel` (tasks of at least `min_len` units, each with a scratch from `init`), else in
/// order on the calling thread with one scratch (a backend configured for one thread passes no
/// pool, and the kernels must then not use rayon's global pool behind its back).
pub(super) fn for_units<S>(
    parallel: bool,
    units: usize,
    min_len: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize) + Sync + Send,
) {
    if parallel {
        (0..units).into_par_iter().with_min_len(min_len.max(1)).for_each_init(init, f);
    } else {
        let mut s = init();
        (0..units).for_each(|u| f(&mut s, u));
    }
}

/// Whether `units` tasks are few and do not split evenly over `threads` (fewer than 16 per
/// thread and not a multiple of them): the kernels then cut their work finer so that each
/// thread gets an equal share (batch 1 on two threads).
pub(super) fn uneven(units: usize, threads: usize) -> bool {
    !units.is_multiple_of(threads) && units < 16 * threads
}

/// The block length that cuts `len` items into at least `blocks` nearly equal blocks whose count
/// times `per` (tasks per block index: images, groups) is a multiple of `threads`, at most `len`
/// blocks: every thread gets as many blocks.
pub(super) fn even_split(len: usize, blocks: usize, per: usize, threads: usize) -> usize {
    let mut b = blocks.max(1);
    while !(per * b).is_multiple_of(threads.max(1)) && b < len {
        b += 1;
    }
    len.div_ceil(b).max(1)
}

/// `f((i, chunk))` on every `len`-value chunk of `xs` (the last may be shorter), over the
/// current rayon pool when `parallel`.
pub(super) fn for_chunks(parallel: bool, xs: &mut [f32], len: usize, f: impl Fn((usize, &mut [f32])) + Sync + Send) {
    if parallel {
        xs.par_chunks_mut(len.max(1)).enumerate().for_each(f);
    } else {
        xs.chunks_mut(len.max(1)).enumerate().for_each(f);
    }
}

/// [`for_units`] for fallible units: the first error is returned.
pub(super) fn try_for_units<S>(
    parallel: bool,
    units: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize) -> Result<()> + Sync + Send,
) -> Result<()> {
    if parallel {
        (0..units).into_par_iter().try_for_each_init(init, f)
    } else {
        let mut s = init();
        (0..units).try_for_each(|u| f(&mut s, u))
    }
}

const OP: &str = "conv_general";

/// Target size of one im2col block in f32 elements (about 256 KiB: the L2 share of a core).
const BLOCK_ELEMS: usize = 64 * 1024;

/// Filters (bytes per group, as the implicit GEMM packs them) from which its blocks grow to
/// whole images: larger than a core's L2, such a filter is read from memory by every block.
/// ResNet-18's 512-channel 3×3 layers (9.4 MB) at 7×7, one image, one thread of a 2-vCPU Intel
/// Xeon (Sapphire Rapids class): four blocks of 16 pixels read it four times, 3.4 ms a layer.
const LARGE_FILTER_BYTES: usize = 1 << 20;

/// Most im2col elements of one block for a large filter (2 MiB).
const LARGE_BLOCK_ELEMS: usize = 1 << 19;

/// A two-dimensional convolution (a one-dimensional one has height 1), with every tensor described
/// by element strides in (batch, channel, row, column) order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    /// Images.
    pub batch: usize,
    /// Input channels (all groups).
    pub in_channels: usize,
    /// Input height and width.
    pub in_hw: [usize; 2],
    /// Output channels (all groups).
    pub out_channels: usize,
    /// Output height and width.
    pub out_hw: [usize; 2],
    /// Kernel height and width.
    pub kernel_hw: [usize; 2],
    /// Stride per spatial axis (≥ 1).
    pub stride: [usize; 2],
    /// Low padding per spatial axis (the high padding is implied by the output size).
    pub pad: [usize; 2],
    /// Kernel dilation per spatial axis (≥ 1).
    pub dilation: [usize; 2],
    /// Channel groups (divides both channel counts).
    pub groups: usize,
    /// Input strides (batch, channel, row, column) in elements.
    pub x_strides: [usize; 4],
    /// Output strides (batch, channel, row, column) in elements.
    pub y_strides: [usize; 4],
}

impl ConvGeom {
    /// Input channels per group.
    pub fn cin_g(&self) -> usize {
        self.in_channels / self.groups.max(1)
    }

    /// Output channels per group.
    pub fn cout_g(&self) -> usize {
        self.out_channels / self.groups.max(1)
    }

    /// Kernel taps (height × width).
    pub fn taps(&self) -> usize {
        self.kernel_hw[0] * self.kernel_hw[1]
    }

    /// Depth of each group's GEMM: taps × input channels per group.
    pub fn depth(&self) -> usize {
        self.taps() * self.cin_g()
    }

    /// True when the direct depthwise kernel applies: one input and one output channel per group.
    pub fn is_depthwise(&self) -> bool {
        self.groups > 1 && self.cin_g() == 1 && self.cout_g() == 1
    }

    /// True when the channels are the innermost input axis (the im2col order is taps-then-channels).
    fn channels_last(&self) -> bool {
        self.x_strides[1] == 1 && self.cin_g() > 1
    }

    /// True when the direct few-input-channel kernel applies (convnet stems, see `stem`).
    pub fn is_stem(&self) -> bool {
        stem::qualifies(self)
    }

    /// True when the direct strided kernel applies (many channels-first input channels, stride
    /// of at least 2, see `direct`; never a stem: it needs more input channels).
    pub fn is_strided_direct(&self) -> bool {
        direct::qualifies(self)
    }

    /// Checks the sizes, the group split and that every strided access stays inside buffers of
    /// `x_len` and `y_len` elements.
    pub fn validate(&self, x_len: usize, y_len: usize) -> Result<()> {
        let g = self.groups;
        if g == 0 || !self.in_channels.is_multiple_of(g) || !self.out_channels.is_multiple_of(g) {
            return Err(Error::invalid(
                OP,
                format!(
                    "{} input and {} output channels do not split into {g} groups",
                    self.in_channels, self.out_channels
                ),
            ));
        }
        if self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(Error::invalid(
                OP,
                format!("strides {:?} and dilations {:?} must be ≥ 1", self.stride, self.dilation),
            ));
        }
        let xd = [self.batch, self.in_channels, self.in_hw[0], self.in_hw[1]];
        let yd = [self.batch, self.out_channels, self.out_hw[0], self.out_hw[1]];
        match (extent(xd, self.x_strides), extent(yd, self.y_strides)) {
            (Some(xe), Some(ye)) if xe <= x_len && ye <= y_len => {}
            _ => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "input {xd:?} / output {yd:?} with strides {:?} / {:?} exceed buffers of {x_len} / {y_len} elements",
                        self.x_strides, self.y_strides
                    ),
                ));
            }
        }
        // Every (output pixel, tap) input coordinate must fit in isize arithmetic.
        for a in 0..2 {
            let (out, k) = (self.out_hw[a], self.kernel_hw[a]);
            let limit = isize::MAX as u64 / 2;
            if !reach_fits(out, self.stride[a], k, self.dilation[a], self.pad[a] as u64, limit) {
                return Err(Error::invalid(OP, format!("spatial axis {a}: window reach overflows")));
            }
        }
        Ok(())
    }

    /// What a filter prepared for this geometry depends on ([`ConvFilter::new`] records it,
    /// [`conv2d_f32`] checks it).
    fn filter_key(&self) -> FilterKey {
        (self.in_channels, self.out_channels, self.kernel_hw, self.groups, self.channels_last())
    }

    /// The output columns `lo..hi` whose input column for kernel column `tx` lies inside the
    /// input (the others read padding), and that input column for `lo` (meaningless when empty).
    fn inside_cols(&self, tx: usize) -> (usize, usize, usize) {
        let (s, iw) = (self.stride[1], self.in_hw[1]);
        // Input column of output column ox: ox·s + off, with off = tx·d − pad.
        let off = (tx * self.dilation[1]) as isize - self.pad[1] as isize;
        let lo = if off >= 0 { 0 } else { off.unsigned_abs().div_ceil(s) };
        let hi = match (iw as isize - 1).checked_sub(off) {
            Some(r) if r >= 0 => (r as usize / s + 1).min(self.out_hw[1]),
            _ => 0,
        };
        let first = ((lo * s) as isize + off).max(0) as usize;
        (lo, hi.max(lo), first)
    }

    /// Input row (or column) of output position `o` and tap `t` on axis `a`, if inside the input.
    #[inline]
    fn src(&self, a: usize, o: usize, t: usize) -> Option<usize> {
        let i = (o * self.stride[a] + t * self.dilation[a]) as isize - self.pad[a] as isize;
        (i >= 0 && (i as usize) < self.in_hw[a]).then_some(i as usize)
    }
}

/// Whether the farthest window offset on one axis, `(out − 1)·stride + (kernel − 1)·dilation`,
/// and the padding `pad` both stay within `limit`, so that window positions computed in signed
/// arithmetic cannot overflow.
fn reach_fits(out: usize, stride: usize, kernel: usize, dilation: usize, pad: u64, limit: u64) -> bool {
    (out.max(1) - 1)
        .checked_mul(stride)
        .and_then(|r| r.checked_add((kernel.max(1) - 1).checked_mul(dilation)?))
        .is_some_and(|r| r as u64 <= limit && pad <= limit)
}

/// The element span of a tensor of `dims` with element `strides` (0 when empty; `None` on
/// overflow): the buffer length its strided accesses need.
fn extent(dims: [usize; 4], strides: [usize; 4]) -> Option<usize> {
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter().zip(strides).try_fold(1usize, |acc, (&d, s)| acc.checked_add((d - 1).checked_mul(s)?))
}

/// What a prepared filter must match: channels, kernel size, groups, im2col order.
type FilterKey = (usize, usize, [usize; 2], usize, bool);

/// A filter rearranged for [`conv2d_f32`]: per group a K × (output channels per group) matrix in
/// the im2col order of the geometry, packed for the GEMM; or, for depthwise convolutions, the
/// taps × channels weights.
#[derive(Debug)]
pub struct ConvFilter {
    geom_key: FilterKey,
    kind: FilterKind,
}

/// Which kernel runs a [`FilterKind::Gemm`] filter, decided for its geometry when it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GemmPath {
    /// im2col blocks on the GEMM ([`implicit_gemm`]).
    Implicit,
    /// A 1×1 stride-1 convolution as one GEMM per image and group ([`pointwise`]).
    Pointwise,
    /// The direct small-K 1×1 kernel ([`smallk`]), reading the plain weights only.
    PointwiseDirect,
    /// A strided 1×1 convolution over channels-first input ([`subsampled`]).
    Subsampled,
}

#[derive(Debug)]
enum FilterKind {
    /// One packed K × cout_g matrix per group; for a 1×1 kernel over channels-first input, also
    /// the plain `[group][cout_g][cin_g]` weights ([`pointwise`] multiplies them from the left);
    /// and the kernel that runs them.
    Gemm(Vec<PackedB>, Vec<f32>, GemmPath),
    /// `[taps][channels]`.
    Depthwise(LineAligned),
    /// The 36 transformed matrices of a 3×3 stride-1 filter ([`winograd`]).
    Winograd(winograd::WinogradFilter),
    /// Channel blocks of taps for the direct few-input-channel kernel ([`stem`]).
    Stem(stem::StemFilter),
    /// 64-channel blocks of taps for the direct strided kernel ([`direct`]).
    Direct(direct::DirectFilter),
    /// 64-channel blocks of a 1×1 filter for the channels-last kernel ([`nhwc`]).
    Pointwise(nhwc::PointwiseFilter),
}

impl ConvFilter {
    /// Rearranges `w` (element (o, i, kh, kw) at `w[o*s[0] + i*s[1] + kh*s[2] + kw*s[3]]`, with
    /// `i` the channel within the group) for `geom`.
    pub fn new(geom: &ConvGeom, w: &[f32], s: [usize; 4]) -> Result<ConvFilter> {
        ConvFilter::with_winograd(geom, w, s, false)
    }

    /// [`ConvFilter::new`], transformed for the Winograd F(4×4, 3×3) kernel when `winograd` allows
    /// it and the geometry is one where it is faster (3×3, stride 1, at least 16 channels each
    /// way; its error is a few times the implicit GEMM's, see docs/configuration.md).
    pub fn with_winograd(geom: &ConvGeom, w: &[f32], s: [usize; 4], winograd: bool) -> Result<ConvFilter> {
        let (cin_g, cout_g, [kh, kw]) = (geom.cin_g(), geom.cout_g(), geom.kernel_hw);
        let wd = [geom.out_channels, cin_g, kh, kw];
        if extent(wd, s).is_none_or(|e| e > w.len()) {
            return Err(Error::invalid(
                OP,
                format!("kernel {wd:?} with strides {s:?} exceeds its {} elements", w.len()),
            ));
        }
        let at = |o: usize, i: usize, y: usize, x: usize| w[o * s[0] + i * s[1] + y * s[2] + x * s[3]];
        let key = geom.filter_key();
        if winograd && winograd::qualifies(geom) {
            let f = winograd::WinogradFilter::new(cin_g, cout_g, at)?;
            return Ok(ConvFilter { geom_key: key, kind: FilterKind::Winograd(f) });
        }
        if geom.is_depthwise() {
            let mut d = LineAligned::zeros(kh * kw * geom.out_channels);
            for y in 0..kh {
                for x in 0..kw {
                    for (c, v) in d[(y * kw + x) * geom.out_channels..][..geom.out_channels].iter_mut().enumerate() {
                        *v = at(c, 0, y, x);
                    }
                }
            }
            return Ok(ConvFilter { geom_key: key, kind: FilterKind::Depthwise(d) });
        }
        if nhwc::pointwise_qualifies(geom) && !gemm_pointwise(geom) {
            let f = nhwc::PointwiseFilter::new(cin_g, geom.out_channels, |o, i| at(o, i, 0, 0));
            return Ok(ConvFilter { geom_key: key, kind: FilterKind::Pointwise(f) });
        }
        if stem::qualifies(geom) {
            let f = stem::StemFilter::new(cin_g, geom.out_channels, kh, kw, at).laid_out_for(geom);
            return Ok(ConvFilter { geom_key: key, kind: FilterKind::Stem(f) });
        }
        if direct::qualifies(geom) {
            let f = direct::DirectFilter::new(cin_g, geom.out_channels, kh, kw, at).laid_out_for(geom);
            return Ok(ConvFilter { geom_key: key, kind: FilterKind::Direct(f) });
        }
        let mut plain = Vec::new();
        if kh * kw == 1 && !geom.channels_last() {
            plain.reserve(geom.out_channels * cin_g);
            for o in 0..geom.out_channels {
                plain.extend((0..cin_g).map(|i| at(o, i, 0, 0)));
            }
        }
        let pw = Pointwise::of(geom);
        let small_k = !plain.is_empty() && pw.as_ref().is_some_and(|p| smallk::qualifies(geom, p.x_pixel, p.y_pixel));
        // The direct 1×1 kernel reads the plain weights only (`pointwise`): nothing is packed for
        // the GEMM then.
        let mut packed = Vec::new();
        if !small_k {
            let k = geom.depth();
            let mut mat = vec![0.0f32; k * cout_g];
            for g in 0..geom.groups {
                for (row, r) in mat.chunks_exact_mut(cout_g.max(1)).enumerate().take(k) {
                    let (i, y, x) = k_index(geom, row);
                    for (o, v) in r.iter_mut().enumerate() {
                        *v = at(g * cout_g + o, i, y, x);
                    }
                }
                packed.push(PackedB::new(k, cout_g, MatRef::row_major(&mat, cout_g))?);
            }
        }
        let path = match pw {
            _ if small_k => GemmPath::PointwiseDirect,
            Some(_) => GemmPath::Pointwise,
            // A strided 1×1 filter without padding over channels-first input.
            None if !plain.is_empty() && geom.pad == [0, 0] => GemmPath::Subsampled,
            None => GemmPath::Implicit,
        };
        Ok(ConvFilter { geom_key: key, kind: FilterKind::Gemm(packed, plain, path) })
    }

    /// Bytes held by the rearranged filter.
    pub fn size_bytes(&self) -> usize {
        match &self.kind {
            FilterKind::Gemm(p, plain, _) => p.iter().map(PackedB::size_bytes).sum::<usize>() + plain.len() * 4,
            FilterKind::Depthwise(d) => d.len() * 4,
            FilterKind::Winograd(f) => f.size_bytes(),
            FilterKind::Stem(f) => f.size_bytes(),
            FilterKind::Direct(f) => f.size_bytes(),
            FilterKind::Pointwise(f) => f.size_bytes(),
        }
    }

    /// A short description for plan dumps.
    pub fn describe(&self) -> &'static str {
        match &self.kind {
            FilterKind::Gemm(.., GemmPath::PointwiseDirect) => "pointwise direct",
            FilterKind::Gemm(.., GemmPath::Pointwise) => "pointwise gemm",
            FilterKind::Gemm(.., GemmPath::Subsampled) => "subsampled pointwise",
            FilterKind::Gemm(.., GemmPath::Implicit) => "implicit gemm",
            FilterKind::Depthwise(_) => "depthwise direct",
            FilterKind::Winograd(_) => "winograd f(4,3)",
            FilterKind::Stem(_) => "stem direct",
            FilterKind::Direct(_) => "strided direct",
            FilterKind::Pointwise(_) => "pointwise channels-last",
        }
    }
}

/// Whether a channels-last 1×1 convolution runs as one GEMM over its pixels ([`pointwise`], its
/// tail applied tile by tile) rather than on the direct channels-last kernel
/// ([`nhwc::pointwise`]): stride 1 and at least [`GEMM_POINTWISE_CHANNELS`] channels both ways.
pub(super) fn gemm_pointwise(geom: &ConvGeom) -> bool {
    let min = GEMM_POINTWISE_CHANNELS;
    Pointwise::of(geom).is_some() && geom.in_channels >= min && geom.out_channels >= min
}

/// Channels (in and out) from which a channels-last 1×1 convolution runs on the GEMM. The
/// direct kernel streams the whole filter for every six pixels; the GEMM blocks it for the cache.
/// On a 2-vCPU Intel Xeon (Sapphire Rapids class), one thread, best of 4 alternated rounds with
/// ReLU6: MobileNetV2's 7×7 layers at batch 8 ran 6–13% faster on the GEMM (160→960 177 against
/// 159 GFLOP/s, 576→160 174 against 154), its 14×14 layers with 64 or 96 channels on one side
/// 8–14% slower (384→96 153 against 175, 384→64 142 against 155); the model went from 50.7–52.1
/// to 48.3–48.9 ms on one thread (two threads: unchanged, 25.8–26.7 against 25.8–26.2).
const GEMM_POINTWISE_CHANNELS: usize = 128;

/// (input channel, kernel row, kernel column) of im2col column `row` of the filter matrix.
#[inline]
fn k_index(geom: &ConvGeom, row: usize) -> (usize, usize, usize) {
    let (cin_g, kw, taps) = (geom.cin_g(), geom.kernel_hw[1], geom.taps());
    if geom.channels_last() {
        let (tap, i) = (row / cin_g, row % cin_g);
        (i, tap / kw, tap % kw)
    } else {
        let (i, tap) = (row / taps, row % taps);
        (i, tap / kw, tap % kw)
    }
}

/// Values that start on a cache line (packed filters, the scratch of a band-by-band block), so
/// that a kernel's whole-vector loads of them never split two lines (a split load costs two
/// accesses: MobileNetV2's 576 → 96 channel 1×1 convolution ran 16% faster with its filter
/// aligned; a large `Vec` from the allocator starts 16 bytes past a page, so that every 64-byte
/// vector of a scratch read that way spans two lines). Dereferences to the values.
#[derive(Debug, Default)]
pub(crate) struct LineAligned {
    /// The values from `buf[skew]` on (`skew` < 16 extra values in front).
    buf: Vec<f32>,
    skew: usize,
    len: usize,
}

impl LineAligned {
    /// `len` zeros.
    pub(crate) fn zeros(len: usize) -> Self {
        let buf = vec![0.0f32; len + 15];
        // A Vec's buffer does not move unless it grows, and this one never grows.
        let skew = buf.as_ptr().align_offset(64).min(15);
        LineAligned { buf, skew, len }
    }
}

impl std::ops::Deref for LineAligned {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[self.skew..][..self.len]
    }
}

impl std::ops::DerefMut for LineAligned {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[self.skew..][..self.len]
    }
}

/// Raw output pointer shared by the blocks of one call; each block writes a disjoint set of
/// elements.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the pointer is only written through at indices that partition the output between
// tasks (each task owns one (image, group, pixel block) or one depthwise plane or row); see
// `scatter` and `depthwise`.
unsafe impl Send for OutPtr {}
// SAFETY: as above: no two tasks write the same element, and nothing reads through it.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Stores `v` at element `i`.
    ///
    /// # Safety
    /// `i` must lie inside the output buffer and no other task may access element `i`.
    #[inline]
    unsafe fn write(&self, i: usize, v: f32) {
        // SAFETY: the caller guarantees that `i` is in bounds and exclusively owned.
        unsafe { *self.0.add(i) = v }
    }

    /// Loads element `i`.
    ///
    /// # Safety
    /// As for [`OutPtr::write`].
    #[inline]
    unsafe fn read(&self, i: usize) -> f32 {
        // SAFETY: the caller guarantees that `i` is in bounds and exclusively owned.
        unsafe { *self.0.add(i) }
    }
}

/// What happens to each convolution sum before it is stored:
/// `y = clamp(act(conv + bias + residual))`, each part optional.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvEpilogue<'a> {
    /// One value per output channel.
    pub bias: Option<&'a [f32]>,
    /// A tensor laid out like the output (the output's strides index it), added before the
    /// activation: a residual connection.
    pub residual: Option<&'a [f32]>,
    /// Applied after the bias and the residual.
    pub activation: Activation,
    /// `Min(Max(v, lo), hi)` with the catalogue's Max/Min (NaN stays NaN), applied last: ReLU6
    /// and other clips.
    pub clamp: Option<(f32, f32)>,
}

impl ConvEpilogue<'_> {
    /// The part after the GEMM's own epilogue (bias, and the activation when no residual comes
    /// between): the residual, the activation behind it, the clamp.
    #[inline]
    fn finish(&self, v: f32, at: usize) -> f32 {
        let v = match self.residual {
            Some(r) => act_f32(self.activation, v + r[at]),
            None => v,
        };
        match self.clamp {
            Some((lo, hi)) => clamp_nan(v, lo, hi),
            None => v,
        }
    }

    /// The activation and the clamp over `vals` (outputs with the bias and the residual already
    /// added): one vectorised pass each (inlined, so fixed-length blocks unroll fully).
    #[inline(always)]
    pub(crate) fn activate_slice(&self, vals: &mut [f32]) {
        match self.activation {
            Activation::None => {}
            // As `act_f32`: NaN and −0 stay.
            Activation::Relu => vals.iter_mut().for_each(|v| *v = if *v < 0.0 { 0.0 } else { *v }),
            act => act_f32_slice(act, vals),
        }
        if let Some((lo, hi)) = self.clamp {
            clamp_slice(vals, lo, hi);
        }
    }

    /// The tail over a run of outputs that the GEMM wrote with the bias and the early activation:
    /// `res` (the residual run, if any) added, then the activation and the clamp; without a
    /// residual only the clamp is left.
    fn finish_run(&self, vals: &mut [f32], res: Option<&[f32]>) {
        match res {
            Some(r) => {
                vals.iter_mut().zip(r).for_each(|(v, &r)| *v += r);
                self.activate_slice(vals);
            }
            None => {
                if let Some((lo, hi)) = self.clamp {
                    clamp_slice(vals, lo, hi);
                }
            }
        }
    }

    /// Whether [`ConvEpilogue::finish`] changes anything.
    fn has_tail(&self) -> bool {
        self.residual.is_some() || self.clamp.is_some()
    }

    /// The activation the GEMM (or the depthwise row) applies itself.
    fn early_activation(&self) -> Activation {
        if self.residual.is_some() { Activation::None } else { self.activation }
    }
}

/// `Min(Max(v, lo), hi)` as the catalogue's Max and Min compute them: NaN in → NaN out, and
/// Max(−0, +0) = +0, Min(−0, +0) = −0. Written as selects, so that loops over it vectorise (the
/// bound test is loop-invariant).
#[inline]
fn clamp_nan(v: f32, lo: f32, hi: f32) -> f32 {
    if lo.is_nan() || hi.is_nan() {
        return f32::NAN;
    }
    // Max(v, lo): a NaN v fails both tests and stays.
    let m = if v < lo || (v == lo && v.is_sign_negative()) { lo } else { v };
    // Min(m, hi).
    if m > hi || (m == hi && hi.is_sign_negative()) { hi } else { m }
}

/// [`clamp_nan`] over a slice.
fn clamp_slice(xs: &mut [f32], lo: f32, hi: f32) {
    for v in xs {
        *v = clamp_nan(*v, lo, hi);
    }
}

/// `y = clamp(act(conv(x, filter) + bias + residual))` for f32 (see [`ConvEpilogue`]). `pool`:
/// the thread pool to split blocks over (`None`: the calling thread).
pub fn conv2d_f32(
    geom: &ConvGeom,
    x: &[f32],
    filter: &ConvFilter,
    epi: &ConvEpilogue<'_>,
    y: &mut [f32],
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    geom.validate(x.len(), y.len())?;
    if filter.geom_key != geom.filter_key() {
        return Err(Error::invalid(OP, "the filter was prepared for another convolution geometry"));
    }
    if let Some(b) = epi.bias
        && b.len() != geom.out_channels
    {
        return Err(Error::invalid(
            OP,
            format!("bias has {} values for {} output channels", b.len(), geom.out_channels),
        ));
    }
    if let Some(r) = epi.residual {
        let yd = [geom.batch, geom.out_channels, geom.out_hw[0], geom.out_hw[1]];
        if extent(yd, geom.y_strides).is_none_or(|e| e > r.len()) {
            return Err(Error::invalid(OP, format!("residual has {} values for an output {yd:?}", r.len())));
        }
    }
    let pixels = geom.out_hw[0] * geom.out_hw[1];
    if geom.batch == 0 || geom.out_channels == 0 || pixels == 0 {
        return Ok(());
    }
    // No pool: one thread, the caller's (not rayon's global pool).
    let parallel = pool.is_some();
    let threads = if parallel { 0 } else { 1 };
    let mut run = move || match &filter.kind {
        FilterKind::Depthwise(w) if nhwc::depthwise_qualifies(geom) => {
            nhwc::depthwise(geom, x, w, epi, OutPtr(y.as_mut_ptr()), parallel)
        }
        FilterKind::Depthwise(w) => depthwise::depthwise(geom, x, w, epi, OutPtr(y.as_mut_ptr()), parallel),
        FilterKind::Pointwise(f) => nhwc::pointwise(geom, x, f, epi, OutPtr(y.as_mut_ptr()), parallel),
        FilterKind::Winograd(f) => winograd::conv(geom, x, f, epi, OutPtr(y.as_mut_ptr()), parallel),
        FilterKind::Stem(f) => stem::conv(geom, x, f, epi, OutPtr(y.as_mut_ptr()), parallel),
        FilterKind::Direct(f) => direct::conv(geom, x, f, epi, OutPtr(y.as_mut_ptr()), parallel),
        FilterKind::Gemm(packed, plain, path) => match Pointwise::of(geom) {
            Some(pw) => pointwise(geom, &pw, x, packed, plain, epi, y, threads),
            None if *path == GemmPath::Subsampled => subsampled(geom, x, packed, plain, epi, y, parallel),
            None => implicit_gemm(geom, x, packed, epi, OutPtr(y.as_mut_ptr()), parallel),
        },
    };
    match pool {
        Some(p) => p.install(run),
        None => run(),
    }
}

/// A 1×1 convolution with stride 1 and no padding whose pixels are evenly spaced in the input
/// and the output (dense rows): each (image, group) is one GEMM straight on the tensors, no
/// im2col copy and no scatter.
struct Pointwise {
    /// Element distance between consecutive pixels of the input and of the output.
    x_pixel: usize,
    y_pixel: usize,
    /// Images per GEMM: all of them when images are evenly spaced too (channels-last), else 1.
    images: usize,
}

impl Pointwise {
    fn of(geom: &ConvGeom) -> Option<Pointwise> {
        let [h, w] = geom.in_hw;
        if geom.kernel_hw != [1, 1] || geom.stride != [1, 1] || geom.pad != [0, 0] || geom.out_hw != geom.in_hw {
            return None;
        }
        let pixel = |s: [usize; 4]| (h == 1 || s[2] == w * s[3]).then_some(s[3]);
        let (x_pixel, y_pixel) = (pixel(geom.x_strides)?, pixel(geom.y_strides)?);
        // Channels-last on both sides with images one after the other: M runs over the batch.
        let whole = |s: [usize; 4], px: usize| geom.batch == 1 || s[0] == h * w * px;
        let images = if geom.channels_last()
            && geom.y_strides[1] == 1
            && whole(geom.x_strides, x_pixel)
            && whole(geom.y_strides, y_pixel)
        {
            geom.batch
        } else {
            1
        };
        Some(Pointwise { x_pixel, y_pixel, images })
    }
}

/// The part of a convolution's epilogue that the GEMM's own does not cover (the residual, the
/// activation behind it, the clamp: [`ConvEpilogue::finish`]), applied to each region of the
/// output as the GEMM finishes it, while it is in L1, instead of in a pass over the whole output.
#[derive(Debug)]
struct TailFinish<'a> {
    epi: &'a ConvEpilogue<'a>,
    /// Address of the output's first element: a region's offset from it indexes the residual.
    y: usize,
}

/// Values a [`TailFinish`] gathers at a time from a region whose columns are the output's runs.
const TRANSPOSED: usize = 512;

impl Finish<f32> for TailFinish<'_> {
    unsafe fn finish(&self, r: &Region<f32>) {
        let at = r.at.cast_mut();
        let off = (at as usize - self.y) / size_of::<f32>();
        // SAFETY: the region lies inside the GEMM's C, which is this convolution's output from
        // `self.y` on (the residual is laid out like it, and `conv2d_f32` checked that it covers
        // the output's extent), and no other call covers its elements; `vals` is readable over
        // the region (the `Finish` contract).
        unsafe {
            if r.cs == 1 && r.vcs == 1 {
                let res = self.epi.residual.map(|res| res.as_ptr().add(off));
                let rows = nhwc::Rows { rows: r.rows, n: r.cols, src: r.vals, srs: r.vrs, dst: at, drs: r.rs, res };
                nhwc::finish_rows(self.epi, &rows);
                return;
            }
            if r.rs == 1 && (1..=TRANSPOSED).contains(&r.rows) {
                // Columns are the runs (a channels-first input's product stored channels-last:
                // rows are channels, columns pixels): a few columns at a time gathered into runs
                // and finished as rows. Value by value along the rows, every store was a pixel
                // apart (a 24 → 144 → 24 channel MobileNetV2 block read from channels-first input
                // spent 2.5 of its 2.8 ms there).
                let mut tmp = [std::mem::MaybeUninit::<f32>::uninit(); TRANSPOSED];
                let per = TRANSPOSED / r.rows;
                for j0 in (0..r.cols).step_by(per) {
                    let n = per.min(r.cols - j0);
                    for j in 0..n {
                        for i in 0..r.rows {
                            tmp[j * r.rows + i].write(*r.vals.add(i * r.vrs + (j0 + j) * r.vcs));
                        }
                    }
                    let res = self.epi.residual.map(|res| res.as_ptr().add(off + j0 * r.cs));
                    let (src, dst) = (tmp.as_ptr().cast::<f32>(), at.add(j0 * r.cs));
                    let rows = nhwc::Rows { rows: n, n: r.rows, src, srs: r.rows, dst, drs: r.cs, res };
                    nhwc::finish_rows(self.epi, &rows);
                }
                return;
            }
            for i in 0..r.rows {
                for j in 0..r.cols {
                    let v = *r.vals.add(i * r.vrs + j * r.vcs);
                    let o = i * r.rs + j * r.cs;
                    *at.add(o) = self.epi.finish(v, off + o);
                }
            }
        }
    }
}

/// The 1×1 path ([`Pointwise`]). Channels-last input: `Y[pixels, cout_g] = X[pixels, cin_g] ·
/// W_g` against the packed filter; channels-first: `Y[cout_g, pixels] = W_g · X[cin_g,
/// pixels]` with the plain weights on the left, so each output channel's plane is written
/// along its pixels. Threads split each GEMM; the residual and clamp (if any) are applied tile
/// by tile as the GEMM finishes them ([`TailFinish`]), on the thread that computed the tile.
/// (Dense channels-first planes used to take the tail in a pass over each chunk of pixels after
/// its GEMM, on the calling thread alone: at batch 1 on two threads MobileNetV2's 144 → 24
/// projection at 56×56 ran no faster than on one.)
#[allow(clippy::too_many_arguments)]
fn pointwise(
    geom: &ConvGeom,
    pw: &Pointwise,
    x: &[f32],
    packed: &[PackedB],
    plain: &[f32],
    epi: &ConvEpilogue<'_>,
    y: &mut [f32],
    threads: usize,
) -> Result<()> {
    let (cin_g, cout_g) = (geom.cin_g(), geom.cout_g());
    let [xn, xc, _, _] = geom.x_strides;
    let [yn, yc, _, _] = geom.y_strides;
    let pixels = geom.in_hw[0] * geom.in_hw[1] * pw.images;
    let channels_last = geom.channels_last();
    if !plain.is_empty() && smallk::qualifies(geom, pw.x_pixel, pw.y_pixel) {
        // Few input channels over channels-first planes: the direct kernel, epilogue in registers.
        smallk::conv(geom, x, plain, epi, OutPtr(y.as_mut_ptr()), threads != 1);
        return Ok(());
    }
    let dense_planes = !channels_last && !plain.is_empty() && pw.x_pixel == 1 && pw.y_pixel == 1 && epi.has_tail();
    // Dense planes with a tail over several images and threads: whole images in parallel, each
    // GEMM and its tail on one thread (no split of a small GEMM, each thread its own planes).
    let whole_images = geom.batch > 1 && y.len() == geom.batch * yn && yn == geom.out_channels * pixels;
    if dense_planes && threads != 1 && whole_images {
        return y.par_chunks_mut(yn).enumerate().try_for_each(|(img, ys)| {
            let one = ConvGeom { batch: 1, ..geom.clone() };
            let res = epi.residual.map(|r| &r[img * yn..][..yn]);
            let epi = ConvEpilogue { residual: res, ..*epi };
            pointwise(&one, pw, &x[img * xn..], packed, plain, &epi, ys, 1)
        });
    }
    let tail = TailFinish { epi, y: y.as_ptr() as usize };
    let finish: Option<&dyn Finish<f32>> = epi.has_tail().then_some(&tail);
    for img in (0..geom.batch).step_by(pw.images) {
        for g in 0..geom.groups {
            let xs = &x[img * xn + g * cin_g * xc..];
            let ys = &mut y[img * yn + g * cout_g * yc..];
            let bias = epi.bias.map(|b| &b[g * cout_g..][..cout_g]);
            let mut e = Epilogue { activation: epi.early_activation(), ..Epilogue::default() };
            let args = if channels_last || plain.is_empty() {
                // X rows are pixels (channels at stride xc, 1 when channels-last).
                e.bias = bias.map_or(Bias::None, Bias::PerColumn);
                let a = MatRef::new(xs, pw.x_pixel, xc);
                let c = MatMut::new(ys, pw.y_pixel, yc);
                GemmArgs::new(pixels, cout_g, cin_g, a, Rhs::Packed(&packed[g]), c)
            } else {
                e.bias = bias.map_or(Bias::None, Bias::PerRow);
                let a = MatRef::row_major(&plain[g * cout_g * cin_g..][..cout_g * cin_g], cin_g);
                let b = MatRef::new(xs, xc, pw.x_pixel);
                let c = MatMut::new(ys, yc, pw.y_pixel);
                GemmArgs::new(cout_g, pixels, cin_g, a, b, c)
            };
            gemm_f32(args.epilogue(e).threads(threads).finish(finish))?;
        }
    }
    Ok(())
}

/// A strided (or dilated-away) 1×1 convolution without padding over channels-first input
/// (ResNet's downsampling shortcuts): the pixels it reads are first gathered into dense planes
/// `[batch, cin, out_h, out_w]` (a quarter of the input at stride 2), then the stride-1
/// [`pointwise`] path runs on them, its epilogue (bias, residual, clamp) vectorised. The
/// implicit GEMM would copy the same pixels into patches and then scatter its tile, finishing
/// the output one element at a time.
#[allow(clippy::too_many_arguments)]
fn subsampled(
    geom: &ConvGeom,
    x: &[f32],
    packed: &[PackedB],
    plain: &[f32],
    epi: &ConvEpilogue<'_>,
    y: &mut [f32],
    parallel: bool,
) -> Result<()> {
    let [oh, ow] = geom.out_hw;
    let (plane, cin) = (oh * ow, geom.in_channels);
    let [sn, sc, sh, sw] = geom.x_strides;
    let [s0, s1] = geom.stride;
    let dense = ConvGeom {
        in_hw: geom.out_hw,
        stride: [1, 1],
        dilation: [1, 1],
        x_strides: [cin * plane, plane, ow, 1],
        ..geom.clone()
    };
    let Some(pw) = Pointwise::of(&dense) else {
        return implicit_gemm(geom, x, packed, epi, OutPtr(y.as_mut_ptr()), parallel);
    };
    let mut buf = Scratch::new();
    let xs = buf.get(geom.batch * cin * plane);
    // Output pixel (oy, ox) reads input pixel (oy·s0, ox·s1): no padding, one tap.
    let gather = |(i, dst): (usize, &mut [f32])| {
        let (img, c) = (i / cin, i % cin);
        for (oy, row) in dst.chunks_exact_mut(ow).enumerate() {
            copy_strided(row, &x[img * sn + c * sc + oy * s0 * sh..], s1 * sw);
        }
    };
    for_chunks(parallel, xs, plane, gather);
    pointwise(&dense, &pw, xs, packed, plain, epi, y, if parallel { 0 } else { 1 })
}

/// The general path: im2col blocks × packed filter per (image, group, block).
fn implicit_gemm(
    geom: &ConvGeom,
    x: &[f32],
    packed: &[PackedB],
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    let (k, cout_g) = (geom.depth(), geom.cout_g());
    let pixels = geom.out_hw[0] * geom.out_hw[1];
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    let per_image_tasks = geom.batch * geom.groups;
    // Every block's GEMM reads the whole filter of its group: a filter larger than L2 comes from
    // memory again for each block, so its blocks grow to whole images (up to LARGE_BLOCK_ELEMS
    // of im2col), and with fewer such tasks than threads each GEMM is split over the threads.
    let large_filter = k * cout_g * size_of::<f32>() > LARGE_FILTER_BYTES;
    let mut rows;
    if large_filter {
        rows = (LARGE_BLOCK_ELEMS / k.max(1)).clamp(16, 4096).min(pixels.next_multiple_of(16)) / 16 * 16;
    } else {
        // About BLOCK_ELEMS of im2col, a multiple of 16, and enough blocks for the threads.
        rows = (BLOCK_ELEMS / k.max(1)).clamp(16, 4096) / 16 * 16;
        if per_image_tasks < threads * 4 {
            let want_blocks = (threads * 4).div_ceil(per_image_tasks);
            rows = rows.min(pixels.div_ceil(want_blocks).next_multiple_of(16)).max(16);
        }
    }
    let mut blocks = pixels.div_ceil(rows);
    if !large_filter && uneven(per_image_tasks * blocks, threads) {
        // Few tasks that do not split evenly over the threads: a few more, shorter blocks so
        // that every thread gets as many (ResNet-18's 3×3/2 64 → 128 layer at batch 1: 784 pixels
        // in 7 blocks of 112, 4 against 3 per thread on two; now 8 of 98).
        rows = even_split(pixels, blocks, per_image_tasks, threads);
        blocks = pixels.div_ceil(rows);
    }
    let tasks = geom.batch * geom.groups * blocks;
    // Large filters with too few tasks for the threads: the tasks in turn, each GEMM on them all.
    let (parallel, gemm_threads) = if large_filter && parallel && tasks < threads { (false, 0) } else { (parallel, 1) };
    // A dense channels-last output of one group: each block's GEMM writes its pixel rows in
    // place (pixel stride px), with no tile and no scatter.
    let [yn, yc, yh, yw] = geom.y_strides;
    let direct_rows = (geom.groups == 1
        && yc == 1
        && yw >= cout_g
        && (geom.out_hw[0] == 1 || yh == geom.out_hw[1] * yw)
        && (geom.batch == 1 || yn >= pixels * yw))
        .then_some(yw);
    let tail = TailFinish { epi, y: out.0 as usize };
    try_for_units(
        parallel,
        tasks,
        // Per-thread pooled scratch (no allocation once warm); im2col writes every element of
        // its block and the GEMM every element of its tile, so stale contents never show.
        || (Scratch::new(), Scratch::new()),
        |(cols, tile), t| {
            let (img, rest) = (t / (geom.groups * blocks), t % (geom.groups * blocks));
            let (g, blk) = (rest / blocks, rest % blocks);
            let p0 = blk * rows;
            let mb = rows.min(pixels - p0);
            let cols = cols.get(mb * k);
            let tile = tile.get(if direct_rows.is_none() { mb * cout_g } else { 0 });
            // Row-major patches for channels-last inputs, column-major (pixels contiguous) otherwise.
            let a = if geom.channels_last() {
                if gemm_threads == 0 && mb > 1 {
                    // The GEMM runs on every thread: so does its im2col, rows split over them
                    // (ResNet-18's 512-channel 7×7 layers at batch 1 read 49 × 4608 values).
                    let per = mb.div_ceil(threads);
                    cols[..mb * k].par_chunks_mut(per * k).enumerate().for_each(|(i, c)| {
                        im2col_rows(geom, x, img, g, p0 + i * per, c.len() / k, c);
                    });
                } else {
                    im2col_rows(geom, x, img, g, p0, mb, cols);
                }
                MatRef::row_major(cols, k)
            } else {
                im2col_cols(geom, x, img, g, p0, mb, cols);
                MatRef::new(cols, 1, mb)
            };
            let mut e = Epilogue { activation: epi.early_activation(), ..Epilogue::default() };
            if let Some(b) = epi.bias {
                e.bias = Bias::PerColumn(&b[g * cout_g..][..cout_g]);
            }
            if let Some(px) = direct_rows {
                let at = img * geom.y_strides[0] + p0 * px;
                let len = (mb - 1) * px + cout_g;
                // SAFETY: `validate` checked that the output's extent lies inside `y`, and
                // `direct_rows` that the output is dense channels-last with one group, so this
                // span (pixels p0..p0+mb of image img, all channels) is this task's alone: the
                // next block of the image starts mb pixels of px ≥ cout_g elements further, and
                // the next image after all pixels.
                let c = unsafe { std::slice::from_raw_parts_mut(out.0.add(at), len) };
                let args = GemmArgs::new(mb, cout_g, k, a, Rhs::Packed(&packed[g]), MatMut::new(c, px, 1));
                // The tail per finished tile, as on the 1×1 path.
                let finish: Option<&dyn Finish<f32>> = epi.has_tail().then_some(&tail);
                return gemm_f32(args.epilogue(e).threads(gemm_threads).finish(finish));
            }
            // The tile's layout follows the output's: channel-contiguous or pixel-contiguous.
            let out_channels_inner = geom.y_strides[1] <= geom.y_strides[3];
            let c = if out_channels_inner { MatMut::row_major(tile, cout_g) } else { MatMut::new(tile, 1, mb) };
            gemm_f32(GemmArgs::new(mb, cout_g, k, a, Rhs::Packed(&packed[g]), c).epilogue(e).threads(gemm_threads))?;
            scatter(geom, tile, out_channels_inner, img, g, p0, mb, epi, out);
            Ok(())
        },
    )
}

/// Writes a block's `mb × cout_g` tile to the output.
#[allow(clippy::too_many_arguments)]
fn scatter(
    geom: &ConvGeom,
    tile: &[f32],
    channels_inner: bool,
    img: usize,
    g: usize,
    p0: usize,
    mb: usize,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
) {
    let [sn, sc, sh, sw] = geom.y_strides;
    let (ow, cout_g) = (geom.out_hw[1], geom.cout_g());
    let base = img * sn + g * cout_g * sc;
    if !channels_inner {
        // Channel by channel, along runs of pixels in one output row: contiguous on both sides
        // for channels-first outputs.
        for (o, src) in tile.chunks_exact(mb).enumerate().take(cout_g) {
            let mut r = 0;
            while r < mb {
                let p = p0 + r;
                let (oy, ox0) = (p / ow, p % ow);
                let run = (ow - ox0).min(mb - r);
                let at = base + o * sc + oy * sh + ox0 * sw;
                for (j, &v) in src[r..r + run].iter().enumerate() {
                    let i = at + j * sw;
                    let v = if epi.has_tail() { epi.finish(v, i) } else { v };
                    // SAFETY: `validate` checked that (img, channel, oy, ox0 + j) lies inside `y`;
                    // this task alone owns image `img`, group `g`'s channels and pixels p0..p0+mb.
                    unsafe { out.write(i, v) };
                }
                r += run;
            }
        }
        return;
    }
    for r in 0..mb {
        let p = p0 + r;
        let at = base + (p / ow) * sh + (p % ow) * sw;
        for o in 0..cout_g {
            let v = if channels_inner { tile[r * cout_g + o] } else { tile[o * mb + r] };
            let v = if epi.has_tail() { epi.finish(v, at + o * sc) } else { v };
            // SAFETY: `validate` checked that every (image, channel, row, column) index of the
            // output lies inside `y`; this task alone owns image `img`, group `g`'s channels and
            // pixels p0..p0+mb, so no other task writes this element.
            unsafe { out.write(at + o * sc, v) };
        }
    }
}

/// im2col for channels-last inputs: row r (pixel p0 + r) holds taps × channels.
fn im2col_rows<T: Copy + Default>(
    geom: &ConvGeom,
    x: &[T],
    img: usize,
    g: usize,
    p0: usize,
    mb: usize,
    cols: &mut [T],
) {
    let [sn, _, sh, sw] = geom.x_strides;
    let (cin_g, [kh, kw], ow) = (geom.cin_g(), geom.kernel_hw, geom.out_hw[1]);
    let base = img * sn + g * cin_g;
    for (r, row) in cols.chunks_exact_mut(kh * kw * cin_g).take(mb).enumerate() {
        let p = p0 + r;
        let (oy, ox) = (p / ow, p % ow);
        for ty in 0..kh {
            let iy = geom.src(0, oy, ty);
            for tx in 0..kw {
                let dst = &mut row[(ty * kw + tx) * cin_g..][..cin_g];
                match (iy, geom.src(1, ox, tx)) {
                    (Some(iy), Some(ix)) => dst.copy_from_slice(&x[base + iy * sh + ix * sw..][..cin_g]),
                    _ => dst.fill(T::default()),
                }
            }
        }
    }
}

/// im2col for other layouts: column r of each K row (pixel p0 + r); the K rows are
/// channels × taps and each row's pixels are read along the input row, the padding columns of
/// each tap ([`ConvGeom::inside_cols`]) zero-filled and the rest copied.
fn im2col_cols(geom: &ConvGeom, x: &[f32], img: usize, g: usize, p0: usize, mb: usize, cols: &mut [f32]) {
    let [sn, sc, sh, sw] = geom.x_strides;
    let (cin_g, [kh, kw], ow, s) = (geom.cin_g(), geom.kernel_hw, geom.out_hw[1], geom.stride[1]);
    for i in 0..cin_g {
        let plane = img * sn + (g * cin_g + i) * sc;
        for ty in 0..kh {
            for tx in 0..kw {
                let (lo, hi, first) = geom.inside_cols(tx);
                let row = &mut cols[((i * kh + ty) * kw + tx) * mb..][..mb];
                let mut r = 0;
                while r < mb {
                    let p = p0 + r;
                    let (oy, ox0) = (p / ow, p % ow);
                    let run = (ow - ox0).min(mb - r);
                    let dst = &mut row[r..r + run];
                    r += run;
                    let Some(iy) = geom.src(0, oy, ty) else {
                        dst.fill(0.0);
                        continue;
                    };
                    // Output columns ox0..ox0+run: padding before lo and from hi on.
                    let (a, b) = (lo.clamp(ox0, ox0 + run) - ox0, hi.clamp(ox0, ox0 + run) - ox0);
                    dst[..a].fill(0.0);
                    dst[b.max(a)..].fill(0.0);
                    if a < b {
                        let start = plane + iy * sh + (first + (ox0 + a - lo) * s) * sw;
                        copy_strided(&mut dst[a..b], &x[start..], s * sw);
                    }
                }
            }
        }
    }
}

/// `dst[j] = src[j * step]`, a plain copy when `step` is 1, vector permutes when it is 2
/// (stride-2 windows).
#[inline]
fn copy_strided(dst: &mut [f32], src: &[f32], step: usize) {
    match step {
        1 => dst.copy_from_slice(&src[..dst.len()]),
        2 => depthwise::gather_even(dst, src),
        _ => {
            for (j, d) in dst.iter_mut().enumerate() {
                *d = src[j * step];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::epilogue::act_f64;

    /// Direct six-deep loop in f64, independent of the kernels above.
    pub(super) fn naive(
        geom: &ConvGeom,
        x: &[f32],
        w: &[f32],
        ws: [usize; 4],
        bias: Option<&[f32]>,
    ) -> Vec<(usize, f64)> {
        let mut outv = Vec::new();
        let (cin_g, cout_g) = (geom.cin_g(), geom.cout_g());
        for n in 0..geom.batch {
            for o in 0..geom.out_channels {
                let g = o / cout_g;
                for oy in 0..geom.out_hw[0] {
                    for ox in 0..geom.out_hw[1] {
                        let mut s = bias.map_or(0.0, |b| b[o] as f64);
                        for i in 0..cin_g {
                            for ty in 0..geom.kernel_hw[0] {
                                for tx in 0..geom.kernel_hw[1] {
                                    let iy = (oy * geom.stride[0] + ty * geom.dilation[0]) as i64 - geom.pad[0] as i64;
                                    let ix = (ox * geom.stride[1] + tx * geom.dilation[1]) as i64 - geom.pad[1] as i64;
                                    if iy < 0 || ix < 0 || iy >= geom.in_hw[0] as i64 || ix >= geom.in_hw[1] as i64 {
                                        continue;
                                    }
                                    let xs = geom.x_strides;
                                    let xv = x[n * xs[0]
                                        + (g * cin_g + i) * xs[1]
                                        + iy as usize * xs[2]
                                        + ix as usize * xs[3]];
                                    let wv = w[o * ws[0] + i * ws[1] + ty * ws[2] + tx * ws[3]];
                                    s += xv as f64 * wv as f64;
                                }
                            }
                        }
                        let ys = geom.y_strides;
                        outv.push((n * ys[0] + o * ys[1] + oy * ys[2] + ox * ys[3], s));
                    }
                }
            }
        }
        outv
    }

    pub(super) fn strides(dims: [usize; 4], order: [usize; 4]) -> [usize; 4] {
        // `order` lists the axes from outermost to innermost.
        let mut s = [0; 4];
        let mut acc = 1;
        for &a in order.iter().rev() {
            s[a] = acc;
            acc *= dims[a];
        }
        s
    }

    /// Which epilogue parts a kernel test applies: bias, residual, activation, clamp.
    pub(super) type Parts = (bool, bool, Activation, Option<(f32, f32)>);

    /// A convolution's random operands for the kernel tests (input, filter in IHWO order — a
    /// layout no kernel packs to —, bias, residual) and the outputs the f64 loop gives them with
    /// an epilogue of `parts`.
    pub(super) struct Operands {
        pub(super) x: Vec<f32>,
        pub(super) w: Vec<f32>,
        pub(super) ws: [usize; 4],
        bias: Vec<f32>,
        res: Vec<f32>,
        parts: Parts,
        want: Vec<(usize, f64)>,
        /// Terms per output (the tolerance grows with them).
        terms: f64,
    }

    impl Operands {
        pub(super) fn new(rng: &mut Lcg, g: &ConvGeom, parts: Parts) -> Operands {
            let (cin_g, cout, [kh, kw]) = (g.cin_g(), g.out_channels, g.kernel_hw);
            let x: Vec<f32> = (0..g.batch * g.in_channels * g.in_hw[0] * g.in_hw[1]).map(|_| rng.next()).collect();
            let ws = strides([cout, cin_g, kh, kw], [1, 2, 3, 0]);
            let w: Vec<f32> = (0..cout * cin_g * kh * kw).map(|_| rng.next()).collect();
            let bias: Vec<f32> = (0..cout).map(|_| rng.next()).collect();
            let len = g.batch * cout * g.out_hw[0] * g.out_hw[1];
            let res: Vec<f32> = (0..len).map(|_| rng.next()).collect();
            let want: Vec<(usize, f64)> = naive(g, &x, &w, ws, parts.0.then_some(&bias[..]))
                .into_iter()
                .map(|(i, v)| {
                    let v = act_f64(parts.2, if parts.1 { v + res[i] as f64 } else { v });
                    let v = parts
                        .3
                        .map_or(v, |(lo, hi)| if lo.is_nan() { f64::NAN } else { v.clamp(lo as f64, hi as f64) });
                    (i, v)
                })
                .collect();
            assert_eq!(want.len(), len);
            Operands { x, w, ws, bias, res, parts, want, terms: (cin_g * kh * kw) as f64 }
        }

        /// The epilogue of `parts`.
        pub(super) fn epilogue(&self) -> ConvEpilogue<'_> {
            ConvEpilogue {
                bias: self.parts.0.then_some(&self.bias[..]),
                residual: self.parts.1.then_some(&self.res[..]),
                activation: self.parts.2,
                clamp: self.parts.3,
            }
        }

        /// Element (o, i, y, x) of the filter.
        pub(super) fn at(&self, o: usize, i: usize, y: usize, x: usize) -> f32 {
            let ws = self.ws;
            self.w[o * ws[0] + i * ws[1] + y * ws[2] + x * ws[3]]
        }

        /// Checks the output `y` (`what` and `case` name the run in a failure).
        pub(super) fn check(&self, y: &[f32], what: &str, case: &dyn std::fmt::Debug) {
            for &(i, v) in &self.want {
                let tol = 2e-6 * self.terms + 1e-6 * v.abs();
                let ok = if v.is_nan() { y[i].is_nan() } else { (y[i] as f64 - v).abs() <= tol };
                assert!(ok, "{what} {case:?} {:?} at {i}: {} vs {v}", self.parts, y[i]);
            }
        }
    }

    /// Deterministic pseudo-random values (also for the Winograd tests).
    pub(super) struct Lcg(pub(super) u64);
    impl Lcg {
        pub(super) fn next(&mut self) -> f32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
        pub(super) fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        rng: &mut Lcg,
        batch: usize,
        groups: usize,
        cin_g: usize,
        cout_g: usize,
        in_hw: [usize; 2],
        k: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
        dil: [usize; 2],
        nhwc: bool,
        pool: Option<&rayon::ThreadPool>,
    ) {
        let (cin, cout) = (cin_g * groups, cout_g * groups);
        let out_hw: [usize; 2] = std::array::from_fn(|a| {
            let span = in_hw[a] + 2 * pad[a];
            let win = (k[a] - 1) * dil[a] + 1;
            if span < win { 0 } else { (span - win) / stride[a] + 1 }
        });
        let order = if nhwc { [0, 2, 3, 1] } else { [0, 1, 2, 3] };
        let geom = ConvGeom {
            batch,
            in_channels: cin,
            in_hw,
            out_channels: cout,
            out_hw,
            kernel_hw: k,
            stride,
            pad,
            dilation: dil,
            groups,
            x_strides: strides([batch, cin, in_hw[0], in_hw[1]], order),
            y_strides: strides([batch, cout, out_hw[0], out_hw[1]], order),
        };
        let x: Vec<f32> = (0..batch * cin * in_hw[0] * in_hw[1]).map(|_| rng.next()).collect();
        // Filter as [kh, kw, in, out] (HWIO), another layout than either activation order.
        let wd = [cout, cin_g, k[0], k[1]];
        let ws = strides(wd, [2, 3, 1, 0]);
        let w: Vec<f32> = (0..cout * cin_g * k[0] * k[1]).map(|_| rng.next()).collect();
        let bias: Vec<f32> = (0..cout).map(|_| rng.next()).collect();
        let filter = ConvFilter::new(&geom, &w, ws).unwrap();
        if k == [1, 1] && stride == [1, 1] && pad == [0, 0] && !geom.is_depthwise() {
            // Pixels dense on both sides and few input channels: the direct kernel.
            let small_k = (cin_g <= smallk::MAX_K || in_hw[0] * in_hw[1] <= smallk::SMALL_PLANE)
                && if nhwc { cin == 1 && cout == 1 } else { cin_g == 1 || in_hw != [1, 1] };
            let want = match () {
                _ if nhwc::pointwise_qualifies(&geom) && !gemm_pointwise(&geom) => "pointwise channels-last",
                _ if small_k => "pointwise direct",
                _ => "pointwise gemm",
            };
            assert_eq!(filter.describe(), want, "{geom:?}");
        }
        if k == [1, 1] && stride != [1, 1] && pad == [0, 0] && !geom.channels_last() && !geom.is_depthwise() {
            assert_eq!(filter.describe(), "subsampled pointwise", "{geom:?}");
        }
        let len = batch * cout * out_hw[0] * out_hw[1];
        let mut y = vec![f32::NAN; len];
        // Every other case adds a residual, applies ReLU and clamps to [-0.5, 0.7].
        let res: Vec<f32> = (0..len).map(|_| rng.next()).collect();
        let full = rng.below(2) == 1;
        let epi = if full {
            ConvEpilogue {
                bias: Some(&bias),
                residual: Some(&res),
                activation: Activation::Relu,
                clamp: Some((-0.5, 0.7)),
            }
        } else {
            ConvEpilogue { bias: Some(&bias), ..ConvEpilogue::default() }
        };
        conv2d_f32(&geom, &x, &filter, &epi, &mut y, pool).unwrap();
        let want = naive(&geom, &x, &w, ws, Some(&bias));
        assert_eq!(want.len(), y.len(), "{geom:?}");
        let scale = (cin_g * k[0] * k[1]) as f64;
        for (i, v) in want {
            let v = if full { (v + res[i] as f64).max(0.0).clamp(-0.5, 0.7) } else { v };
            assert!((y[i] as f64 - v).abs() <= 1e-5 * scale.max(1.0), "{geom:?} at {i}: {} vs {v}", y[i]);
        }
    }

    #[test]
    fn line_aligned_values_start_on_a_cache_line() {
        // Sizes the allocator serves from its bins and from fresh pages (which start 16 bytes
        // past a page boundary: the case that split every vector load of a block's scratch).
        for len in [1, 17, 1000, 1 << 16, 1 << 20, 3 << 20] {
            let mut v = LineAligned::zeros(len);
            assert_eq!(v.len(), len);
            assert_eq!(v.as_ptr() as usize % 64, 0, "{len} values");
            assert!(v.iter().all(|&x| x == 0.0));
            v[len - 1] = 1.0;
            assert_eq!(v[len - 1], 1.0);
        }
        assert!(LineAligned::zeros(0).is_empty());
    }

    #[test]
    fn matches_naive_loop_on_fixed_shapes() {
        let mut rng = Lcg(7);
        for nhwc in [true, false] {
            // 3x3 same padding, 1x1, stride 2 7x7, dilation, groups, depthwise, 1-D (height 1).
            check(&mut rng, 2, 1, 5, 7, [6, 5], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, None);
            check(&mut rng, 1, 1, 8, 3, [4, 4], [1, 1], [1, 1], [0, 0], [1, 1], nhwc, None);
            check(&mut rng, 1, 1, 3, 4, [11, 9], [7, 7], [2, 2], [3, 3], [1, 1], nhwc, None);
            check(&mut rng, 1, 1, 2, 2, [7, 7], [3, 3], [1, 1], [2, 2], [2, 2], nhwc, None);
            check(&mut rng, 2, 3, 2, 2, [5, 4], [3, 2], [2, 1], [1, 0], [1, 1], nhwc, None);
            check(&mut rng, 2, 6, 1, 1, [5, 6], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, None);
            check(&mut rng, 1, 4, 1, 1, [9, 9], [3, 3], [2, 2], [1, 1], [1, 1], nhwc, None);
            check(&mut rng, 1, 2, 1, 3, [5, 5], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, None);
            check(&mut rng, 3, 1, 4, 5, [1, 9], [1, 3], [1, 2], [0, 1], [1, 1], nhwc, None);
            // 1×1 stride 1 (the pointwise path): batches, groups, one-row images, threads.
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            check(&mut rng, 3, 1, 7, 5, [4, 6], [1, 1], [1, 1], [0, 0], [1, 1], nhwc, None);
            check(&mut rng, 2, 3, 4, 2, [3, 5], [1, 1], [1, 1], [0, 0], [1, 1], nhwc, Some(&pool));
            check(&mut rng, 2, 1, 17, 33, [1, 9], [1, 1], [1, 1], [0, 0], [1, 1], nhwc, Some(&pool));
            check(&mut rng, 4, 1, 1, 6, [5, 3], [1, 1], [1, 1], [0, 0], [1, 1], nhwc, None);
            // Strided 1×1 without padding (downsampling shortcuts): odd sizes, strides 2 and 3,
            // rows strided differently from columns, a plane folded by the direct kernel.
            check(&mut rng, 2, 1, 6, 9, [7, 9], [1, 1], [2, 2], [0, 0], [1, 1], nhwc, None);
            check(&mut rng, 3, 1, 40, 24, [14, 13], [1, 1], [2, 2], [0, 0], [1, 1], nhwc, Some(&pool));
            check(&mut rng, 2, 2, 5, 3, [10, 11], [1, 1], [3, 2], [0, 0], [2, 1], nhwc, Some(&pool));
            check(&mut rng, 2, 1, 300, 20, [8, 8], [1, 1], [2, 2], [0, 0], [1, 1], nhwc, None);
            // Several pixel chunks of the channels-first 1×1 path; wide stride-2 stem rows.
            check(&mut rng, 2, 1, 3, 300, [20, 21], [1, 1], [1, 1], [0, 0], [1, 1], nhwc, Some(&pool));
            check(&mut rng, 2, 1, 3, 5, [9, 75], [3, 3], [2, 2], [1, 1], [1, 1], nhwc, None);
            // A filter larger than LARGE_FILTER_BYTES (128 × 9 × 256 floats) on the implicit
            // GEMM (too few tiles for Winograd): whole-image blocks, each GEMM and (channels-last)
            // its im2col on both threads (one image) or the images over the threads (three).
            check(&mut rng, 1, 1, 128, 256, [5, 6], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, Some(&pool));
            // Pixels that do not split evenly over the threads' im2col rows (18 + 17).
            check(&mut rng, 1, 1, 128, 256, [5, 7], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, Some(&pool));
            check(&mut rng, 3, 1, 128, 256, [3, 4], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, Some(&pool));
            check(&mut rng, 1, 1, 128, 256, [5, 6], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, None);
            // A 3×3/2 layer on the implicit GEMM at batch 1 whose 7 blocks of 32 pixels become
            // 8 of 25 for the two threads (channels-last; channels-first may take another path).
            check(&mut rng, 1, 1, 16, 24, [28, 28], [3, 3], [2, 2], [1, 1], [1, 1], nhwc, Some(&pool));
            // Kernel larger than the input with padding; 1x1 image; zero batch; empty output.
            check(&mut rng, 1, 1, 3, 2, [2, 2], [5, 5], [1, 1], [2, 2], [1, 1], nhwc, None);
            check(&mut rng, 2, 1, 3, 2, [1, 1], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, None);
            check(&mut rng, 0, 1, 3, 2, [4, 4], [3, 3], [1, 1], [1, 1], [1, 1], nhwc, None);
            check(&mut rng, 1, 1, 3, 2, [2, 2], [5, 5], [1, 1], [0, 0], [1, 1], nhwc, None);
        }
    }

    #[test]
    fn channels_first_pointwise_tail_splits_images_over_threads() {
        // More input channels than the direct 1×1 kernel takes, on planes larger than its small
        // ones: the GEMM path over dense planes, with a tail (residual, ReLU, clamp) that runs
        // whole images in parallel on two threads (one image: the GEMM split over the threads,
        // each finishing the tiles it computed).
        // Also with a channels-last output: each tile's rows (channels) are a pixel's run, taken
        // a few columns at a time, 14-row tiles of 144 channels among them.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(5);
        for (batch, cout, y_order) in [
            (1, 24, [0, 1, 2, 3]),
            (3, 24, [0, 1, 2, 3]),
            (4, 24, [0, 1, 2, 3]),
            (1, 144, [0, 2, 3, 1]),
            (2, 37, [0, 2, 3, 1]),
        ] {
            let (cin, hw) = (smallk::MAX_K + 12, [17, 18]);
            let geom = ConvGeom {
                batch,
                in_channels: cin,
                in_hw: hw,
                out_channels: cout,
                out_hw: hw,
                kernel_hw: [1, 1],
                stride: [1, 1],
                pad: [0, 0],
                dilation: [1, 1],
                groups: 1,
                x_strides: strides([batch, cin, hw[0], hw[1]], [0, 1, 2, 3]),
                y_strides: strides([batch, cout, hw[0], hw[1]], y_order),
            };
            let ops = Operands::new(&mut rng, &geom, (true, true, Activation::Relu, Some((-0.5, 0.7))));
            let filter = ConvFilter::new(&geom, &ops.w, ops.ws).unwrap();
            assert_eq!(filter.describe(), "pointwise gemm");
            for threads in [None, Some(&pool)] {
                let mut y = vec![f32::NAN; batch * cout * hw[0] * hw[1]];
                conv2d_f32(&geom, &ops.x, &filter, &ops.epilogue(), &mut y, threads).unwrap();
                ops.check(&y, "pointwise", &(batch, threads.is_some()));
            }
        }
    }

    #[test]
    fn matches_naive_loop_on_random_shapes_with_threads() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let mut rng = Lcg(42);
        for case in 0..60 {
            let groups = [1, 1, 2, 3][rng.below(4)];
            let depthwise = case % 5 == 0;
            let (cin_g, cout_g) = if depthwise { (1, 1) } else { (1 + rng.below(20), 1 + rng.below(20)) };
            let groups = if depthwise { 2 + rng.below(30) } else { groups };
            let k = [1 + rng.below(4), 1 + rng.below(4)];
            let in_hw = [1 + rng.below(12), 1 + rng.below(12)];
            let stride = [1 + rng.below(3), 1 + rng.below(3)];
            let dil = [1 + rng.below(2), 1 + rng.below(2)];
            let pad = [rng.below(3), rng.below(3)];
            let batch = 1 + rng.below(3);
            let pool = if case % 2 == 0 { Some(&pool) } else { None };
            check(&mut rng, batch, groups, cin_g, cout_g, in_hw, k, stride, pad, dil, case % 3 == 0, pool);
        }
    }

    #[test]
    fn rejects_inconsistent_geometry() {
        let geom = ConvGeom {
            batch: 1,
            in_channels: 4,
            in_hw: [3, 3],
            out_channels: 4,
            out_hw: [3, 3],
            kernel_hw: [3, 3],
            stride: [1, 1],
            pad: [1, 1],
            dilation: [1, 1],
            groups: 1,
            x_strides: [36, 9, 3, 1],
            y_strides: [36, 9, 3, 1],
        };
        assert!(geom.validate(36, 36).is_ok());
        assert!(geom.validate(35, 36).is_err());
        assert!(ConvGeom { groups: 3, ..geom.clone() }.validate(36, 36).is_err());
        assert!(ConvGeom { stride: [0, 1], ..geom.clone() }.validate(36, 36).is_err());
        let w = vec![0.0; 4 * 4 * 9];
        assert!(ConvFilter::new(&geom, &w[1..], [36, 9, 3, 1]).is_err());
        let f = ConvFilter::new(&geom, &w, [36, 9, 3, 1]).unwrap();
        let (x, mut y) = (vec![0.0; 36], vec![0.0; 36]);
        let bad_bias = ConvEpilogue { bias: Some(&[0.0; 3]), ..ConvEpilogue::default() };
        assert!(conv2d_f32(&geom, &x, &f, &bad_bias, &mut y, None).is_err());
        let short = ConvEpilogue { residual: Some(&x[..35]), ..ConvEpilogue::default() };
        assert!(conv2d_f32(&geom, &x, &f, &short, &mut y, None).is_err());
        let other = ConvGeom { kernel_hw: [1, 1], pad: [0, 0], ..geom.clone() };
        assert!(conv2d_f32(&other, &x, &f, &ConvEpilogue::default(), &mut y, None).is_err());
    }

    #[test]
    fn clamp_follows_the_catalogue_max_and_min() {
        assert_eq!(clamp_nan(7.0, 0.0, 6.0), 6.0);
        assert_eq!(clamp_nan(-1.0, 0.0, 6.0), 0.0);
        assert!(clamp_nan(f32::NAN, 0.0, 6.0).is_nan());
        assert!(clamp_nan(1.0, f32::NAN, 6.0).is_nan());
        // Max(−0, +0) = +0, Min(−0, +0) = −0.
        assert!(clamp_nan(-0.0, 0.0, 6.0).is_sign_positive());
        assert!(clamp_nan(0.0, -1.0, -0.0).is_sign_negative());
        // The slice form agrees with the scalar one, signed zeros and NaN included.
        let xs = [7.0, -1.0, f32::NAN, -0.0, 0.0, 3.0, f32::INFINITY, f32::NEG_INFINITY];
        for (lo, hi) in [(0.0, 6.0), (-0.0, 0.0), (0.0, -0.0), (-1.0, 1.0), (f32::NAN, 1.0)] {
            let want: Vec<f32> = xs.iter().map(|&v| clamp_nan(v, lo, hi)).collect();
            let mut got = xs;
            clamp_slice(&mut got, lo, hi);
            for (g, w) in got.iter().zip(&want) {
                assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{lo} {hi}: {g} vs {w}");
            }
        }
    }
}
