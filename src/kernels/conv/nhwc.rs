//! Direct channels-last (NHWC) kernels, f32 forward: 1×1 (pointwise) and depthwise
//! convolutions over dense channels-last tensors, output channels in the vector lanes, every
//! load and store a whole vector of consecutive channels.
//!
//! These are the kernels of a convnet whose activations stay channels-last (the jit's layout
//! pass, `passes::layout`): a 1×1 convolution is `Y[pixels, cout] = X[pixels, cin] · W`, read
//! straight from the input rows (no packing of the activations, whose K is often too small for
//! a GEMM's packing to pay; wide stride-1 ones run on the GEMM instead, their tail applied
//! tile by tile with [`finish_rows`]), and a depthwise convolution multiplies each tap's input pixel
//! vector by the tap's weight vector, with no masked lanes at the planes' edges (the lanes are
//! channels, not columns).
//!
//! A tile is a few output pixels × up to 64 channels, its sums in registers from the bias on
//! (about 24 on AVX-512, 12 on AVX2). Pointwise: 6 pixels × 4 AVX-512 vectors, 8 × 1–3 (AVX2:
//! 3–8 pixels × 1–4 vectors); per input channel, one load per weight vector (the filter packed
//! once, on a cache line, as `[64-channel block][cin][64]`) and one broadcast per pixel; 8, 24
//! or 40 output channels two pixels at a time on AVX-512 ([`PwRun::pairs`]), whole vectors.
//! Depthwise: [`R`] (then [`R4`]) pixels; per tap, one weight vector per 16 channels (the
//! `[taps][channels]` filter)
//! and one input vector per pixel; a tile's pixels are consecutive in one output row whose
//! windows stay inside the columns, the row's edge pixels one at a time with the taps outside
//! skipped, the rows outside the image skipped for the whole tile. Windows 3 columns wide at
//! stride 1 or 2 (MobileNet's 3×3) take [`DwRow3`] instead: tiles of 7 or 8 pixels × one or two
//! vectors in which each input vector is loaded once for the three taps that read it, the edge
//! pixels inside tiles. Channels past the last whole vector (a count that is no multiple of the
//! vector width) take a scalar loop.
//!
//! The residual, a ReLU and a clamp are applied in registers before the one store — for whole
//! tiles by straight-line code whose epilogue is a constant of the compiled tile loop
//! ([`Tail::mode`]) — other activations (and NaN clamp bounds) per value after it. Work is split
//! over the threads by pixel ranges (pointwise: chunks whose input rows stay in L2, each chunk's
//! channel blocks in turn, a block's tiles in one call; at least four units per thread where the
//! pixels allow) and by output rows (depthwise: a row's inside tiles in one call per channel
//! block).

use super::depthwise::{Lanes, Portable, clamps_from_zero, each16, window3_strided};
use super::{ConvEpilogue, ConvGeom, LineAligned, OP, OutPtr, for_units, uneven};
use crate::error::{Error, Result};
use crate::kernels::fused::FusedIsa;
use crate::kernels::gemm::Activation;
use crate::kernels::gemm::epilogue::act_f32;

/// Output channels per packed pointwise block and per tile (4 AVX-512 vectors).
const CB: usize = 64;

/// Where a pointwise filter strip holds the middle vector of a pixel pair ([`pairs_for`]).
const PAIR_MID: usize = 48;

/// Whether `cout` output channels run in pixel pairs on AVX-512 ([`PwRun::pairs`]): 16·q + 8
/// channels (8, 24, 40), whose last vector is half empty one pixel at a time, are 2·q + 1 whole
/// vectors two pixels at a time, and the middle one's weights fit the strip's padding.
fn pairs_for(cout: usize) -> bool {
    matches!(cout, 8 | 24 | 40)
}

/// Pixels per tile.
const R: usize = 6;

/// Pixels of a depthwise row's shorter tile (after its tiles of [`R`]).
const R4: usize = 4;

/// Input values a pointwise chunk of pixels should read (256 KiB, a quarter of a Zen core's L2).
const CHUNK_VALUES: usize = 1 << 16;

/// Multiply-adds a depthwise task should hold at least.
const TASK_WORK: usize = 1 << 16;

/// Whether `s` are the strides of a dense channels-last tensor with `c` channels and `hw` pixels
/// per image.
fn dense(s: [usize; 4], c: usize, [h, w]: [usize; 2]) -> bool {
    s[1] == 1 && s[3] == c && s[2] == w * c && s[0] == h * w * c
}

/// Whether input and output of `geom` are dense channels-last tensors.
fn channels_last(geom: &ConvGeom) -> bool {
    dense(geom.x_strides, geom.in_channels, geom.in_hw) && dense(geom.y_strides, geom.out_channels, geom.out_hw)
}

/// Whether the pointwise kernel takes `geom`: a 1×1 window (any stride), no padding, one
/// group, dense channels-last input and output.
pub(super) fn pointwise_qualifies(geom: &ConvGeom) -> bool {
    geom.kernel_hw == [1, 1] && geom.pad == [0, 0] && geom.groups == 1 && geom.in_channels > 0 && channels_last(geom)
}

/// Whether the depthwise kernel takes `geom`: a depthwise convolution (one channel per group)
/// over dense channels-last input and output.
pub(super) fn depthwise_qualifies(geom: &ConvGeom) -> bool {
    geom.is_depthwise() && channels_last(geom)
}

/// A filter packed for [`pointwise`]: `[ceil(cout / CB)][cin][CB]`, zero past the last channel.
#[derive(Debug)]
pub(super) struct PointwiseFilter {
    cin: usize,
    cout: usize,
    w: LineAligned,
}

impl PointwiseFilter {
    /// Packs the `cout` × `cin` filter whose element (o, i) is `at(o, i)`.
    pub(super) fn new(cin: usize, cout: usize, at: impl Fn(usize, usize) -> f32) -> Self {
        let mut w = LineAligned::zeros(cout.div_ceil(CB) * cin * CB);
        for (b, block) in w.chunks_exact_mut((cin * CB).max(1)).enumerate() {
            for (i, strip) in block.chunks_exact_mut(CB).enumerate() {
                for (c, v) in strip.iter_mut().enumerate().take(cout.saturating_sub(b * CB)) {
                    *v = at(b * CB + c, i);
                }
            }
        }
        if pairs_for(cout) {
            // The middle vector of a pixel pair's sums (see [`PwRun::pairs`]): the first pixel's
            // last 8 channels and the second's first 8, in lanes 48..64 of each input channel's
            // strip, which no other path reads (they read the first `cout` lanes, rounded up to
            // a vector of at most 16).
            for (i, strip) in w.chunks_exact_mut(CB).enumerate() {
                for l in 0..16 {
                    strip[PAIR_MID + l] = at(if l < 8 { cout - 8 + l } else { l - 8 }, i);
                }
            }
        }
        PointwiseFilter { cin, cout, w }
    }

    /// Bytes held.
    pub(super) fn size_bytes(&self) -> usize {
        self.w.len() * 4
    }
}

/// What is left of the epilogue after the bias, in registers or per value.
struct Tail<'a> {
    epi: &'a ConvEpilogue<'a>,
    /// Whether the residual, ReLU and clamp are applied in registers (else per value, after the
    /// store, with the whole activation).
    in_regs: bool,
    relu: bool,
}

impl<'a> Tail<'a> {
    fn of(epi: &'a ConvEpilogue<'a>) -> Self {
        let in_regs = matches!(epi.activation, Activation::None | Activation::Relu)
            && epi.clamp.is_none_or(|(lo, hi)| !lo.is_nan() && !hi.is_nan());
        Tail { epi, in_regs, relu: in_regs && epi.activation == Activation::Relu }
    }

    /// The epilogue applied in registers by the whole-tile store (see [`EPI_RES`]), or
    /// [`EPI_GENERAL`] for one that [`store`] applies.
    fn mode(&self) -> u8 {
        let t = self;
        if !t.in_regs {
            return EPI_GENERAL;
        }
        let act = match t.epi.clamp {
            _ if t.clamps_from_zero() => EPI_CLAMP0,
            Some(_) if t.relu => EPI_RELU_CLAMP,
            Some(_) => EPI_CLAMP,
            None if t.relu => EPI_RELU,
            None => EPI_NONE,
        };
        match t.epi.residual {
            None => act,
            Some(_) if act == EPI_NONE => EPI_RES,
            // The residual with an activation: one more constant each would double the code
            // for forms convnets rarely have (MobileNet's residual adds end a block without one).
            Some(_) => EPI_GENERAL,
        }
    }

    /// Whether the clamp is from +0 to a positive bound (ReLU6): [`Lanes::clamp_from_zero`], a
    /// ReLU before it changing nothing the clamp keeps.
    fn clamps_from_zero(&self) -> bool {
        clamps_from_zero(self.epi.clamp)
    }

    /// The per-value tail over `chans` channels from each index of `at` (stored sums).
    ///
    /// # Safety
    /// As for [`store`].
    #[inline(never)]
    unsafe fn per_value(&self, at: &[usize], chans: usize, out: OutPtr) {
        for &i in at {
            for k in i..i + chans {
                // SAFETY: the caller's contract: (i..i + chans) is inside the output and this
                // unit's alone.
                unsafe { out.write(k, self.value(out.read(k), k)) };
            }
        }
    }

    /// `clamp(act(v + residual))` of output element `i` (the per-value path).
    #[inline]
    fn value(&self, v: f32, i: usize) -> f32 {
        self.epi.finish(act_f32(self.epi.early_activation(), v), i)
    }
}

/// Stores tile sums `acc` (pixel r's vectors at `acc[r]`) of the first `rows` pixels, pixel r's
/// first channel at output index `at[r]`, `chans` channels (1 ..= NV·L), with the tail.
///
/// # Safety
/// The CPU has `V`'s features; every index `at[r] + c` (c < chans, r < rows) is inside the
/// output (and the residual) and written by this unit alone.
#[inline(always)]
unsafe fn store<V: Lanes, const NV: usize, const RR: usize>(
    acc: [[V; NV]; RR],
    rows: usize,
    at: &[usize],
    chans: usize,
    out: OutPtr,
    tail: &Tail<'_>,
) {
    // SAFETY: the caller's contract throughout.
    unsafe {
        let bounds = tail.epi.clamp.map(|(lo, hi)| (V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0));
        for (acc, &i) in acc.iter().zip(at).take(rows) {
            for (v, &s) in acc.iter().enumerate() {
                let c = v * V::L;
                if c >= chans {
                    break;
                }
                let n = V::L.min(chans - c);
                let p = out.0.add(i + c);
                if !tail.in_regs {
                    s.store_first(p, n);
                    continue;
                }
                let mut s = s;
                if let Some(r) = tail.epi.residual {
                    let rp = r.as_ptr().add(i + c);
                    let rv = if n == V::L { V::load(rp) } else { V::load_masked(rp, V::mask(0, n)) };
                    s = s.add(rv);
                }
                if tail.relu {
                    s = s.relu();
                }
                if let Some((lo, hi, zlo, zhi)) = bounds {
                    s = s.clamp(lo, hi, zlo, zhi);
                }
                s.store_first(p, n);
            }
        }
        if !tail.in_regs {
            // After the sums are stored (no call while they are in registers).
            tail.per_value(&at[..rows], chans, out);
        }
    }
}

/// Runs of outputs for [`finish_rows`]: row `i` (of `rows`, `n` values each) from `src + i·srs`
/// to `dst + i·drs`, its residual (if any) at `res + i·drs`.
#[derive(Clone, Copy)]
pub(super) struct Rows {
    pub(super) rows: usize,
    pub(super) n: usize,
    pub(super) src: *const f32,
    pub(super) srs: usize,
    pub(super) dst: *mut f32,
    pub(super) drs: usize,
    pub(super) res: Option<*const f32>,
}

/// [`ConvEpilogue::finish_run`] vectorised on the selected ISA, over runs of values that a GEMM
/// wrote with the bias and the early activation: the residual added, then the ReLU and the clamp
/// in registers (the general tail, per value, for other activations and NaN bounds).
///
/// # Safety
/// Every source row is readable and every destination row writable for `n` values (a source
/// row is its destination row or does not overlap any), and `res` (if any) is readable over the
/// destination rows' extent.
pub(super) unsafe fn finish_rows(epi: &ConvEpilogue<'_>, rows: &Rows) {
    // SAFETY: the caller's contract.
    unsafe { finish_rows_on(FusedIsa::selected(), epi, rows) }
}

/// [`finish_rows`] on `isa` (lowered to what the CPU runs).
///
/// # Safety
/// [`finish_rows`]' contract.
unsafe fn finish_rows_on(isa: FusedIsa, epi: &ConvEpilogue<'_>, rows: &Rows) {
    #[cfg(target_arch = "x86_64")]
    let tail = Tail::of(epi);
    let Rows { rows: count, n, src, srs, dst, drs, res } = *rows;
    // SAFETY: the caller's contract; the ISA is checked on this CPU.
    unsafe {
        match isa.checked() {
            #[cfg(target_arch = "x86_64")]
            FusedIsa::Avx512 if tail.in_regs => run_tail_avx512(&tail, rows),
            #[cfg(target_arch = "x86_64")]
            FusedIsa::Avx2 if tail.in_regs => run_tail_avx2(&tail, rows),
            _ => {
                for i in 0..count {
                    let (s, d) = (src.add(i * srs), dst.add(i * drs));
                    if s != d.cast_const() {
                        std::ptr::copy_nonoverlapping(s, d, n);
                    }
                    let r = res.map(|r| std::slice::from_raw_parts(r.add(i * drs), n));
                    epi.finish_run(std::slice::from_raw_parts_mut(d, n), r);
                }
            }
        }
    }
}

/// [`finish_rows`]' loop on AVX-512.
///
/// # Safety
/// As for [`run_tail`], with AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_tail_avx512(tail: &Tail<'_>, rows: &Rows) {
    // SAFETY: the caller's contract.
    unsafe { run_tail::<std::arch::x86_64::__m512>(tail, rows) }
}

/// [`finish_rows`]' loop on AVX2.
///
/// # Safety
/// As for [`run_tail`], with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_tail_avx2(tail: &Tail<'_>, rows: &Rows) {
    // SAFETY: the caller's contract.
    unsafe { run_tail::<std::arch::x86_64::__m256>(tail, rows) }
}

/// [`finish_rows`]' loop, a vector at a time (the last one of a row masked).
///
/// # Safety
/// The CPU has `V`'s features; [`finish_rows`]' contract; `tail` is [`Tail::in_regs`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn run_tail<V: Lanes>(tail: &Tail<'_>, r: &Rows) {
    // SAFETY: every access is to the first `n` values of a row of `src`, `dst` or `res` (the
    // caller's contract); each vector is read before it is stored.
    unsafe {
        let bounds = tail.epi.clamp.map(|(lo, hi)| (V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0));
        let clamp0 = tail.clamps_from_zero();
        for row in 0..r.rows {
            let (src, dst) = (r.src.add(row * r.srs), r.dst.add(row * r.drs));
            let res = r.res.map(|p| p.add(row * r.drs));
            for i in (0..r.n).step_by(V::L) {
                let m = V::L.min(r.n - i);
                let load = |q: *const f32| if m == V::L { V::load(q) } else { V::load_masked(q, V::mask(0, m)) };
                let mut v = load(src.add(i));
                if let Some(p) = res {
                    v = v.add(load(p.add(i)));
                }
                if let (true, Some((_, hi, _, _))) = (clamp0, bounds) {
                    v = v.clamp_from_zero(hi);
                } else {
                    if tail.relu {
                        v = v.relu();
                    }
                    if let Some((lo, hi, zlo, zhi)) = bounds {
                        v = v.clamp(lo, hi, zlo, zhi);
                    }
                }
                v.store_first(dst.add(i), m);
            }
        }
    }
}

/// The bias lanes of channels `c..c + L` of a tile with `chans` channels (zero past them, and
/// without a bias).
///
/// # Safety
/// The CPU has `V`'s features; `b` holds at least `chans` values.
#[inline(always)]
unsafe fn bias_vector<V: Lanes>(b: Option<&[f32]>, c: usize, chans: usize) -> V {
    // SAFETY: the caller's contract; only lanes below `chans` are read.
    unsafe {
        match b {
            Some(b) if c + V::L <= chans => V::load(b.as_ptr().add(c)),
            Some(b) if c < chans => V::load_masked(b.as_ptr().add(c), V::mask(0, chans - c)),
            _ => V::splat(0.0),
        }
    }
}

/// `y = clamp(act(conv(x, f) + bias + residual))` for a [`pointwise_qualifies`] geometry, on the
/// default ISA. The caller has validated the geometry against `x` and the output, and the bias
/// and residual lengths.
pub(super) fn pointwise(
    geom: &ConvGeom,
    x: &[f32],
    f: &PointwiseFilter,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    pointwise_on(FusedIsa::selected(), geom, x, f, epi, out, parallel)
}

/// [`pointwise`] on `isa` (lowered to what the CPU runs).
fn pointwise_on(
    isa: FusedIsa,
    geom: &ConvGeom,
    x: &[f32],
    f: &PointwiseFilter,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    if !pointwise_qualifies(geom) {
        return Err(Error::invalid(OP, format!("the channels-last 1×1 kernel does not take {geom:?}")));
    }
    let (cin, cout) = (geom.in_channels, geom.out_channels);
    if (f.cin, f.cout) != (cin, cout) || f.w.len() != cout.div_ceil(CB) * cin * CB {
        return Err(Error::invalid(OP, "the packed filter is not one for this convolution"));
    }
    let pixels = geom.batch * geom.out_hw[0] * geom.out_hw[1];
    // Every input pixel row read whole: the validated geometry's extents.
    let in_pixels = geom.batch * geom.in_hw[0] * geom.in_hw[1];
    if in_pixels * cin > x.len() {
        return Err(Error::invalid(OP, format!("input of {} values for {in_pixels} pixels × {cin}", x.len())));
    }
    let isa = isa.checked();
    let tail = Tail::of(epi);
    let blocks = cout.div_ceil(CB);
    let mut chunk = (CHUNK_VALUES / cin).max(1).div_ceil(R) * R;
    let mut chunks = pixels.div_ceil(chunk);
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    // Few chunks for the threads: (chunk, block) units, else whole chunks.
    let split_blocks = blocks > 1 && chunks < 4 * threads;
    if threads > 1 {
        // At least four units per thread where the pixels allow: with one unit each, a thread
        // that joins late (woken from sleep) delays the whole call by its lateness, where the
        // other threads take its units. ResNet-18's 1×1/2 shortcuts at batch 1 on two threads
        // of a Xeon (model 167), in the model: 64 → 128 channels 0.074–0.085 ms against
        // 0.122–0.125 (two units: one chunk, two channel blocks), 128 → 256 0.064–0.071 against
        // 0.076–0.084.
        // (Fewer than 16 per thread then: the chunks are evened out below.)
        let per = if split_blocks { blocks } else { 1 };
        chunks = chunks.max((4 * threads).div_ceil(per)).min(pixels.div_ceil(R).max(1));
    }
    let units = if split_blocks { chunks * blocks } else { chunks };
    if uneven(units, threads) {
        // Units that do not split evenly over the threads: the pixels cut into a multiple of the
        // threads chunks (MobileNetV2's 96 → 576 channels at 14×14, one image: 9 units, 5
        // against 4 per thread; now 18).
        chunks = chunks.div_ceil(threads) * threads;
    }
    if chunks < 16 * threads {
        // Few chunks: nearly equal ones rather than L2-sized ones and a short last one (384 → 64
        // channels at 14×14: 174 and 22 pixels; now 102 and 94).
        chunk = pixels.div_ceil(chunks.max(1)).div_ceil(R) * R;
        chunks = pixels.div_ceil(chunk.max(1));
    }
    let units = if split_blocks { chunks * blocks } else { chunks };
    let job = PwJob {
        geom,
        x,
        f,
        bias: epi.bias,
        out,
        tail: &tail,
        cin,
        cout,
        pixels,
        isa,
        // Pixel pairs where the input pixels are consecutive rows of `x` too.
        #[cfg(target_arch = "x86_64")]
        pairs: isa == FusedIsa::Avx512
            && pairs_for(cout)
            && tail.mode() != EPI_GENERAL
            && geom.stride == [1, 1]
            && geom.in_hw == geom.out_hw,
    };
    for_units(
        parallel,
        units,
        1,
        || (),
        |_, u| {
            let (ch, bs) = if split_blocks { (u / blocks, u % blocks..u % blocks + 1) } else { (u, 0..blocks) };
            let p0 = ch * chunk;
            job.tiles(p0..pixels.min(p0 + chunk), bs);
        },
    );
    Ok(())
}

/// Everything a pointwise unit needs.
struct PwJob<'a> {
    geom: &'a ConvGeom,
    x: &'a [f32],
    f: &'a PointwiseFilter,
    bias: Option<&'a [f32]>,
    out: OutPtr,
    tail: &'a Tail<'a>,
    cin: usize,
    cout: usize,
    pixels: usize,
    isa: FusedIsa,
    /// Whether whole tiles run in pixel pairs ([`PwRun::pairs`], AVX-512 only).
    #[cfg(target_arch = "x86_64")]
    pairs: bool,
}

impl PwJob<'_> {
    /// The tiles of pixels `ps` for channel blocks `bs`: each block's tiles in turn (the block's
    /// weights stay in L1 over the run of tiles; one dispatch per block).
    fn tiles(&self, ps: std::ops::Range<usize>, bs: std::ops::Range<usize>) {
        for b in bs {
            let c0 = b * CB;
            let run = PwRun { job: self, ps: ps.clone(), b, epi: self.tail.mode() };
            // Pixel pairs first where they apply; the pixels they leave go on below.
            #[cfg(target_arch = "x86_64")]
            let run = if self.pairs {
                // SAFETY: as below; `pairs` is set on AVX-512 only (checked on this CPU), for a
                // single block of a `pairs_for` width whose filter packs the middle vectors, and
                // input pixels `p·cin` apart.
                let from = unsafe { run.pairs() };
                PwRun { ps: from..ps.end, ..run }
            } else {
                run
            };
            // SAFETY: the reads are inside `x` (pixels < self.pixels, checked against x's length)
            // and `w` (block b's cin·CB values); the writes are these pixels' channels of block
            // b, this unit's alone.
            unsafe { dispatch(self.isa, &run, CB.min(self.cout - c0)) };
        }
    }

    /// The input pixel under output pixel `p` (image-major, raster order).
    #[inline]
    fn input_pixel(&self, p: usize) -> usize {
        let g = self.geom;
        let ([ih, iw], [oh, ow]) = (g.in_hw, g.out_hw);
        if g.stride == [1, 1] && g.in_hw == g.out_hw {
            return p;
        }
        let (img, q) = (p / (oh * ow), p % (oh * ow));
        (img * ih + q / ow * g.stride[0]) * iw + q % ow * g.stride[1]
    }
}

/// Whole-tile epilogue codes: the activation in the low bits (none, ReLU, clamp, clamp from +0
/// to a positive bound, ReLU then clamp) or [`EPI_RES`], the residual alone.
const EPI_NONE: u8 = 0;
const EPI_RELU: u8 = 1;
const EPI_CLAMP: u8 = 2;
const EPI_CLAMP0: u8 = 3;
const EPI_RELU_CLAMP: u8 = 4;
const EPI_RES: u8 = 8;
/// Any other epilogue: every tile through [`store`].
const EPI_GENERAL: u8 = 0xff;
/// Not an epilogue: "the one the run holds, chosen per tile" (a compiled-in `EPI_CLAMP0` where
/// the run has it).
const EPI_DYN: u8 = 0xfe;

/// One pointwise unit's tiles of one channel block.
struct PwRun<'a> {
    job: &'a PwJob<'a>,
    ps: std::ops::Range<usize>,
    /// The channel block.
    b: usize,
    /// The whole-tile epilogue ([`Tail::mode`]).
    epi: u8,
}

impl Body for PwRun<'_> {
    /// The run's tiles of 3 to 12 pixels × `NV` vectors from channel `h` of the block: sums in
    /// registers from the bias on, stored with the tail.
    ///
    /// # Safety
    /// The CPU has `V`'s features; `x` holds every pixel row of the run, the block's weights
    /// hold `h + (cin − 1)·CB + NV·L` values, `bias` (if any) the block's channels, and
    /// [`store`]'s contract holds for the run's pixels and the block's channels.
    #[inline(always)]
    unsafe fn run<V: Lanes, const NV: usize>(&self, h: usize, chans: usize) {
        // Pixels per tile: about 24 sums in registers (AVX-512 has 32, AVX2 16: 12 sums there),
        // the more pixels the fewer vectors, so a weight vector serves 6 to 12 pixels.
        // SAFETY: the caller's contract.
        unsafe {
            match (V::L >= 16, NV) {
                (true, 1 | 2) | (false, 1) => self.rows::<V, NV, 8>(h, chans),
                (true, 3) => self.rows::<V, NV, 8>(h, chans),
                (true, _) | (false, 2) => self.rows::<V, NV, 6>(h, chans),
                (false, 3) => self.rows::<V, NV, 4>(h, chans),
                (false, _) => self.rows::<V, NV, 3>(h, chans),
            }
        }
    }
}

impl PwRun<'_> {
    /// [`Body::run`] in tiles of `RR` pixels.
    ///
    /// # Safety
    /// As for [`Body::run`].
    #[inline(always)]
    unsafe fn rows<V: Lanes, const NV: usize, const RR: usize>(&self, h: usize, chans: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match self.epi {
                EPI_NONE => self.tiles::<V, NV, RR, EPI_NONE>(h, chans),
                EPI_RELU => self.tiles::<V, NV, RR, EPI_RELU>(h, chans),
                EPI_CLAMP => self.tiles::<V, NV, RR, EPI_CLAMP>(h, chans),
                EPI_CLAMP0 => self.tiles::<V, NV, RR, EPI_CLAMP0>(h, chans),
                EPI_RELU_CLAMP => self.tiles::<V, NV, RR, EPI_RELU_CLAMP>(h, chans),
                EPI_RES => self.tiles::<V, NV, RR, EPI_RES>(h, chans),
                _ => self.tiles::<V, NV, RR, EPI_GENERAL>(h, chans),
            }
        }
    }

    /// [`Body::run`] in tiles of `RR` pixels with the whole-tile epilogue `EPI` (a constant: no
    /// test per vector).
    ///
    /// # Safety
    /// As for [`Body::run`].
    #[inline(always)]
    unsafe fn tiles<V: Lanes, const NV: usize, const RR: usize, const EPI: u8>(&self, h: usize, chans: usize) {
        let j = self.job;
        let (cin, cout, pixels) = (j.cin, j.cout, j.pixels);
        let c0 = self.b * CB + h;
        // The whole-tile store applies this epilogue; any other goes through `store`.
        let whole = EPI != EPI_GENERAL;
        // Lanes of the last vector (a masked one when the block's channels end inside it).
        let last = chans - (NV - 1) * V::L;
        // SAFETY: the caller's contract throughout: every pixel index is below `pixels` (the
        // last one repeated past the end, loaded but not stored), every channel inside the
        // block.
        unsafe {
            let (x, w) = (j.x.as_ptr(), j.f.w.as_ptr().add(self.b * cin * CB + h));
            let bias = j.bias.map(|b| &b[c0..]);
            let bias: [V; NV] = std::array::from_fn(|v| bias_vector(bias, v * V::L, chans));
            let (lo, hi) = j.tail.epi.clamp.unwrap_or((0.0, 0.0));
            let bounds = (V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0);
            let res = j.tail.epi.residual.map_or(std::ptr::null(), |r| r.as_ptr());
            for p0 in self.ps.clone().step_by(RR) {
                let rows = RR.min(self.ps.end - p0);
                let xp: [*const f32; RR] =
                    std::array::from_fn(|r| x.add(j.input_pixel((p0 + r).min(pixels - 1)) * cin));
                let mut acc = [bias; RR];
                let mut i = 0;
                if NV == 1 {
                    // One vector a pixel: RR chains only, too few to cover the multiply-add's
                    // latency at two a cycle. Even and odd input channels go to two sets of
                    // sums, added at the end.
                    let mut odd = [[V::splat(0.0); NV]; RR];
                    while i + 2 <= cin {
                        let w0 = V::load(w.add(i * CB));
                        let w1 = V::load(w.add((i + 1) * CB));
                        for ((a, o), p) in acc.iter_mut().zip(odd.iter_mut()).zip(&xp) {
                            a[0] = w0.fmadd(V::splat(*p.add(i)), a[0]);
                            o[0] = w1.fmadd(V::splat(*p.add(i + 1)), o[0]);
                        }
                        i += 2;
                    }
                    for (a, o) in acc.iter_mut().zip(&odd) {
                        a[0] = a[0].add(o[0]);
                    }
                }
                for i in i..cin {
                    let wv: [V; NV] = V::loads(w.add(i * CB));
                    for (acc, p) in acc.iter_mut().zip(&xp) {
                        let b = V::splat(*p.add(i));
                        for (s, &k) in acc.iter_mut().zip(&wv) {
                            *s = k.fmadd(b, *s);
                        }
                    }
                }
                let yat: [usize; RR] = std::array::from_fn(|r| (p0 + r).min(pixels - 1) * cout + c0);
                if whole && rows == RR {
                    store_whole::<V, NV, RR, EPI>(&acc, &yat, last, j.out.0, res, bounds);
                } else {
                    store::<V, NV, RR>(acc, rows, &yat, chans, j.out, j.tail);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl PwRun<'_> {
    /// The run's whole tiles of pixel pairs on AVX-512, for a [`pairs_for`] width `16·q + 8`:
    /// the two pixels' channels are one run of `2·cout` outputs, `2·q + 1` whole vectors: `q` of
    /// the first pixel, a middle one of both (its input blended from the two pixels'), `q` of
    /// the second. One pixel at a time the last vector of each pixel would be half empty: 24
    /// channels took four multiply-adds a pair where this takes three. Returns the first pixel
    /// left (fewer than a tile), for the one-pixel tiles.
    ///
    /// # Safety
    /// As for [`Body::run`] with the whole block; AVX-512F is available; the run's input pixels
    /// are rows `p·cin` of `x` and the filter packs the middle vector at [`PAIR_MID`].
    #[target_feature(enable = "avx512f")]
    unsafe fn pairs(&self) -> usize {
        // SAFETY: the caller's contract.
        unsafe {
            match self.job.cout {
                8 => self.pairs_with::<1, 12>(),
                24 => self.pairs_with::<3, 8>(),
                _ => self.pairs_with::<5, 4>(),
            }
        }
    }

    /// [`Self::pairs`] with `PV` vectors a pair, `PR` pairs a tile, the epilogue compiled in.
    ///
    /// # Safety
    /// As for [`Self::pairs`]; `PV = 2·cout / 16`.
    #[inline(always)]
    unsafe fn pairs_with<const PV: usize, const PR: usize>(&self) -> usize {
        // SAFETY: the caller's contract.
        unsafe {
            match self.epi {
                EPI_NONE => self.pair_tiles::<PV, PR, EPI_NONE>(),
                EPI_RELU => self.pair_tiles::<PV, PR, EPI_RELU>(),
                EPI_CLAMP => self.pair_tiles::<PV, PR, EPI_CLAMP>(),
                EPI_CLAMP0 => self.pair_tiles::<PV, PR, EPI_CLAMP0>(),
                EPI_RELU_CLAMP => self.pair_tiles::<PV, PR, EPI_RELU_CLAMP>(),
                EPI_RES => self.pair_tiles::<PV, PR, EPI_RES>(),
                _ => self.ps.start,
            }
        }
    }

    /// [`Self::pairs_with`] for the epilogue `EPI`.
    ///
    /// # Safety
    /// As for [`Self::pairs_with`].
    #[inline(always)]
    unsafe fn pair_tiles<const PV: usize, const PR: usize, const EPI: u8>(&self) -> usize {
        use std::arch::x86_64::*;
        let j = self.job;
        let (cin, cout) = (j.cin, j.cout);
        // Vectors of the first pixel alone; the middle vector's lanes from 8 are the second's.
        let q = PV / 2;
        // The middle vector's lanes of the second pixel. Opaque to the compiler: with a constant
        // mask the blend of two broadcasts became a two-source permute, which shares the
        // multiply-adds' ports (144 → 24 channels at 56², one Zen 5 core: 99.7 µs against 86.8).
        let second: __mmask16 = std::hint::black_box(0xff00);
        // SAFETY: the caller's contract throughout: whole tiles of pixels below `ps.end` (each
        // pixel's input `cin` values from `p·cin`, its outputs `cout` from `p·cout`), the
        // weights of block 0 (cin strips of CB), the bias (cout values) read by lane.
        unsafe {
            let lane = |v: usize, l: usize| (16 * v + l) % cout;
            let bias: [__m512; PV] = std::array::from_fn(|v| {
                let b: [f32; 16] = std::array::from_fn(|l| j.bias.map_or(0.0, |b| b[lane(v, l)]));
                _mm512_loadu_ps(b.as_ptr())
            });
            let (lo, hi) = j.tail.epi.clamp.unwrap_or((0.0, 0.0));
            let bounds = (_mm512_set1_ps(lo), _mm512_set1_ps(hi), lo == 0.0, hi == 0.0);
            let res = j.tail.epi.residual.map_or(std::ptr::null(), |r| r.as_ptr());
            let (x, w) = (j.x.as_ptr(), j.f.w.as_ptr());
            let mut p0 = self.ps.start;
            while p0 + 2 * PR <= self.ps.end {
                let xb = x.add(p0 * cin);
                let mut acc = [bias; PR];
                for i in 0..cin {
                    let strip = w.add(i * CB);
                    // The first pixel's vectors from lane 0, the middle one from PAIR_MID, the
                    // second pixel's from lane 8 (its channel 0 is lane 8 of the middle one).
                    let wv: [__m512; PV] = std::array::from_fn(|v| match v {
                        v if v < q => _mm512_loadu_ps(strip.add(16 * v)),
                        v if v == q => _mm512_loadu_ps(strip.add(PAIR_MID)),
                        v => _mm512_loadu_ps(strip.add(8 + 16 * (v - q - 1))),
                    });
                    for (k, a) in acc.iter_mut().enumerate() {
                        let s0 = _mm512_set1_ps(*xb.add(2 * k * cin + i));
                        let s1 = _mm512_set1_ps(*xb.add((2 * k + 1) * cin + i));
                        let mid = _mm512_mask_blend_ps(second, s0, s1);
                        for (v, (a, &wk)) in a.iter_mut().zip(&wv).enumerate() {
                            let s = if v < q {
                                s0
                            } else if v == q {
                                mid
                            } else {
                                s1
                            };
                            *a = _mm512_fmadd_ps(s, wk, *a);
                        }
                    }
                }
                let at: [usize; PR] = std::array::from_fn(|k| (p0 + 2 * k) * cout);
                store_whole::<__m512, PV, PR, EPI>(&acc, &at, 16, j.out.0, res, bounds);
                p0 += 2 * PR;
            }
            p0
        }
    }
}

/// Stores a whole tile's sums (`RR` pixels, `NV` vectors each, the last one's first `last`
/// lanes) at `at` with the epilogue `EPI`: straight-line code, every sum used from its register.
///
/// # Safety
/// The CPU has `V`'s features; every index `at[r] + c` (c < (NV − 1)·L + last) is inside the
/// output (and the residual `res`, when `EPI` has [`EPI_RES`]) and written by this unit alone.
#[inline(always)]
unsafe fn store_whole<V: Lanes, const NV: usize, const RR: usize, const EPI: u8>(
    acc: &[[V; NV]; RR],
    at: &[usize; RR],
    last: usize,
    out: *mut f32,
    res: *const f32,
    (lo, hi, zlo, zhi): (V, V, bool, bool),
) {
    // SAFETY: the caller's contract.
    unsafe {
        for (sums, &at) in acc.iter().zip(at) {
            for (v, &sum) in sums.iter().enumerate() {
                let i = at + v * V::L;
                let n = if v + 1 == NV { last } else { V::L };
                let mut s = sum;
                if EPI == EPI_RES {
                    s = s.add(if n == V::L { V::load(res.add(i)) } else { V::load_masked(res.add(i), V::mask(0, n)) });
                }
                s = match EPI {
                    EPI_RELU => s.relu(),
                    EPI_CLAMP => s.clamp(lo, hi, zlo, zhi),
                    EPI_CLAMP0 => s.clamp_from_zero(hi),
                    EPI_RELU_CLAMP => s.relu().clamp(lo, hi, zlo, zhi),
                    _ => s,
                };
                s.store_first(out.add(i), n);
            }
        }
    }
}

/// A tile body compiled for each vector type: `run::<V, NV>(h, chans)` computes and stores
/// `chans` channels (at most `NV` vectors of `V`) from channel `h` of the tile on.
trait Body {
    /// # Safety
    /// The CPU has `V`'s features, and the implementation's bounds hold for channels
    /// `h..h + chans` of the tile.
    unsafe fn run<V: Lanes, const NV: usize>(&self, h: usize, chans: usize);
}

/// Runs `body` over `chans` (1 ..= [`CB`]) channels on `isa` (checked on this CPU): in one go
/// on AVX-512 (up to 4 vectors), in parts of 32 channels on AVX2 and 16 portably.
///
/// # Safety
/// `isa` was checked on this CPU; the body's bounds hold for all `chans` channels.
unsafe fn dispatch<B: Body>(isa: FusedIsa, body: &B, chans: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract (AVX-512F).
        FusedIsa::Avx512 => unsafe {
            match chans.div_ceil(16) {
                1 => on_avx512::<B, 1>(body, 0, chans),
                2 => on_avx512::<B, 2>(body, 0, chans),
                3 => on_avx512::<B, 3>(body, 0, chans),
                _ => on_avx512::<B, 4>(body, 0, chans),
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract (AVX2 and FMA); each part inside the tile's channels.
        FusedIsa::Avx2 => unsafe {
            for h in (0..chans).step_by(32) {
                let n = 32.min(chans - h);
                match n.div_ceil(8) {
                    1 => on_avx2::<B, 1>(body, h, n),
                    2 => on_avx2::<B, 2>(body, h, n),
                    3 => on_avx2::<B, 3>(body, h, n),
                    _ => on_avx2::<B, 4>(body, h, n),
                }
            }
        },
        _ => {
            for h in (0..chans).step_by(16) {
                let n = 16.min(chans - h);
                // SAFETY: the caller's contract; the portable body needs no CPU feature.
                unsafe { if n > 8 { body.run::<Portable, 2>(h, n) } else { body.run::<Portable, 1>(h, n) } }
            }
        }
    }
}

/// [`Body::run`] on AVX-512 (16 lanes, up to 4 vectors: 24 accumulators).
///
/// # Safety
/// As for [`Body::run`], with AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn on_avx512<B: Body, const NV: usize>(body: &B, h: usize, chans: usize) {
    // SAFETY: the caller's contract.
    unsafe { body.run::<std::arch::x86_64::__m512, NV>(h, chans) }
}

/// [`Body::run`] on AVX2 (8 lanes, up to 4 vectors).
///
/// # Safety
/// As for [`Body::run`], with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn on_avx2<B: Body, const NV: usize>(body: &B, h: usize, chans: usize) {
    // SAFETY: the caller's contract.
    unsafe { body.run::<std::arch::x86_64::__m256, NV>(h, chans) }
}

/// Depthwise convolution for a [`depthwise_qualifies`] geometry with the weights `w` as
/// `[taps][channels]`, on the default ISA. The caller has validated the geometry against `x` and
/// the output, and the bias and residual lengths.
pub(super) fn depthwise(
    geom: &ConvGeom,
    x: &[f32],
    w: &[f32],
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    depthwise_on(FusedIsa::selected(), geom, x, w, epi, out, parallel)
}

/// [`depthwise`] on `isa` (lowered to what the CPU runs).
fn depthwise_on(
    isa: FusedIsa,
    geom: &ConvGeom,
    x: &[f32],
    w: &[f32],
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    let c = geom.out_channels;
    if !depthwise_qualifies(geom) || w.len() != geom.taps() * c {
        return Err(Error::invalid(OP, format!("the channels-last depthwise kernel does not take {geom:?}")));
    }
    let [ih, iw] = geom.in_hw;
    if geom.batch * ih * iw * c > x.len() {
        return Err(Error::invalid(OP, format!("input of {} values for {geom:?}", x.len())));
    }
    let [oh, ow] = geom.out_hw;
    let isa = isa.checked();
    let tail = Tail::of(epi);
    // Output columns whose windows stay inside the input columns: lo ≤ ox < hi.
    let [kh, kw] = geom.kernel_hw;
    let (sx, dx, px) = (geom.stride[1], geom.dilation[1], geom.pad[1]);
    let reach = (kw.max(1) - 1) * dx;
    let lo = px.div_ceil(sx).min(ow);
    // ox·sx − px + reach < iw  ⇔  ox·sx < iw + px − reach.
    let hi = (iw + px).checked_sub(reach).map_or(0, |e| e.div_ceil(sx)).clamp(lo, ow);
    // Every whole-vector tile reads the kernel columns at these offsets from its pixels' first.
    let mut inner = Pairs::new();
    (0..kw).for_each(|kx| inner.push((kx, kx * dx * c)));
    let lanes = if isa == FusedIsa::Avx512 { 16 } else { 8 };
    let vec_c = c / lanes * lanes;
    let job = DwJob { geom, x, w, bias: epi.bias, out, tail: &tail, isa, cols: (lo, hi), inner, vec_c };
    let rows = geom.batch * oh;
    let per_row = ow * c * kh * kw;
    let mut per_task = TASK_WORK.div_ceil(per_row.max(1)).max(1);
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    let units = rows.div_ceil(per_task);
    // Channel parts per row, each a run of whole CB-channel blocks (the scalar channels past
    // the last vector with the last part).
    let blocks = vec_c.div_ceil(CB).max(1);
    let mut parts = 1;
    if uneven(units, threads) {
        // Few units that do not split evenly over the threads: fewer rows per unit (14 rows of
        // 384 channels at 14×14, one image: 7 units of 2 rows; now 14 of one).
        per_task = (rows / (units.div_ceil(threads) * threads)).max(1);
        // Still uneven (fewer rows than threads, or an odd number of rows): each row's channels
        // in parts too (7 rows of 960 channels at 7×7 split 4 against 3 rows on two threads,
        // 1.16× one thread; now 14 half rows).
        if !rows.div_ceil(per_task).is_multiple_of(threads) && blocks >= threads {
            parts = threads;
        }
    }
    let part = |k: usize| (blocks * k / parts * CB, if k + 1 == parts { c } else { blocks * (k + 1) / parts * CB });
    for_units(
        parallel,
        rows.div_ceil(per_task) * parts,
        1,
        || (),
        |_, u| {
            let (u, k) = (u / parts, u % parts);
            for row in u * per_task..rows.min((u + 1) * per_task) {
                job.row(row / oh, row % oh, part(k));
            }
        },
    );
    Ok(())
}

/// Everything a depthwise unit needs.
struct DwJob<'a> {
    geom: &'a ConvGeom,
    x: &'a [f32],
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    out: OutPtr,
    tail: &'a Tail<'a>,
    isa: FusedIsa,
    /// The output columns whose windows stay inside the input columns.
    cols: (usize, usize),
    /// Each kernel column's offset from an inside pixel's first window column.
    inner: Pairs,
    /// The channels in whole vectors (the rest take the scalar loop).
    vec_c: usize,
}

/// Up to 16 pairs on the stack (kernel rows or columns of a window; more go to a `Vec`), so
/// that a row of a warm execution allocates nothing.
struct Pairs {
    fixed: [(usize, usize); 16],
    n: usize,
    more: Vec<(usize, usize)>,
}

impl Pairs {
    fn new() -> Self {
        Pairs { fixed: [(0, 0); 16], n: 0, more: Vec::new() }
    }

    fn push(&mut self, p: (usize, usize)) {
        if self.n < self.fixed.len() {
            self.fixed[self.n] = p;
        } else {
            if self.n == self.fixed.len() {
                self.more.extend_from_slice(&self.fixed);
            }
            self.more.push(p);
        }
        self.n += 1;
    }

    fn as_slice(&self) -> &[(usize, usize)] {
        if self.n <= self.fixed.len() { &self.fixed[..self.n] } else { &self.more }
    }
}

/// One depthwise edge pixel's operands (the inside tiles run through [`DwRun`]): the image's
/// input rows under the window and the taps inside the columns.
struct DwTile<'a> {
    x: &'a [f32],
    /// Index of (image, input row, column 0, channel 0) for each window row inside the image,
    /// with its kernel row.
    rows: &'a [(usize, usize)],
    /// The window columns read: (kernel column, offset from a pixel's `cols` entry).
    taps: &'a [(usize, usize)],
    /// Kernel columns; channels per pixel.
    kw: usize,
    c: usize,
    /// The pixel's first window column × channels and its first output index, each plus the
    /// tile's first channel.
    col: usize,
    y: usize,
    /// Taps' weights from channel c0: tap t at `w[t·c..]`.
    w: &'a [f32],
    /// From channel c0 (at least the tile's channels).
    bias: Option<&'a [f32]>,
    out: OutPtr,
    tail: &'a Tail<'a>,
}

impl Body for DwTile<'_> {
    /// The pixel's `NV` vectors from channel `h` on, summed in registers and stored with the tail.
    ///
    /// # Safety
    /// The CPU has `V`'s features; every read `rows[j].0 + col + h + taps[k].1 + v·L` (+ L) is
    /// inside `x`, `w` holds `h + (taps − 1)·c + NV·L` values, `bias` (if any) `h + chans`, and
    /// [`store`]'s contract holds for channels `h..h + chans` of the pixel.
    #[inline(always)]
    unsafe fn run<V: Lanes, const NV: usize>(&self, h: usize, chans: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            let bias = self.bias.map(|b| &b[h..]);
            let bias: [V; NV] = std::array::from_fn(|v| bias_vector(bias, v * V::L, chans));
            let (x, w) = (self.x.as_ptr().add(h), self.w.as_ptr().add(h));
            let acc = dw_sums::<V, NV, 1>(x, w, bias, self.rows, self.taps, self.kw, self.c, self.col, 0);
            store::<V, NV, 1>(acc, 1, &[self.y + h], chans, self.out, self.tail);
        }
    }
}

impl DwJob<'_> {
    /// Output row `oy` of image `img`, channels `chans.0..chans.1` (`chans.0` a multiple of
    /// [`CB`], `chans.1` one too or `c`).
    fn row(&self, img: usize, oy: usize, chans: (usize, usize)) {
        let g = self.geom;
        let c = g.out_channels;
        let ([ih, iw], [kh, kw], [oh, ow]) = (g.in_hw, g.kernel_hw, g.out_hw);
        let (sy, dy, py) = (g.stride[0], g.dilation[0], g.pad[0]);
        let (sx, dx, px) = (g.stride[1], g.dilation[1], g.pad[1]);
        // The window rows inside the image: (index of their column 0, channel 0; kernel row).
        let mut rows = Pairs::new();
        for ky in 0..kh {
            let Some(iy) = (oy * sy + ky * dy).checked_sub(py).filter(|&iy| iy < ih) else { continue };
            rows.push(((img * ih + iy) * iw * c, ky));
        }
        let rows = rows.as_slice();
        let far = rows.iter().map(|&(i, _)| i).max().unwrap_or(0);
        let y0 = (img * oh + oy) * ow * c;
        let ((lo, hi), vec_c) = (self.cols, self.vec_c);
        if kw == 3 && dx == 1 && (sx == 1 || sx == 2) {
            let (from, to) = (chans.0, chans.1.min(c));
            // Every read: a window row inside the image, a column inside, a channel < c.
            assert!(far + iw * c <= self.x.len(), "depthwise row out of bounds");
            for c0 in (from..vec_c.min(to)).step_by(CB) {
                let n = CB.min(vec_c.min(to) - c0);
                let run = DwRow3 {
                    x: self.x,
                    rows,
                    c,
                    c0,
                    chans: n,
                    iw,
                    ow,
                    px,
                    sx,
                    y0,
                    w: &self.w[c0..],
                    bias: self.bias.map(|b| &b[c0..c0 + n]),
                    out: self.out,
                    tail: self.tail,
                    epi: self.tail.mode(),
                };
                // SAFETY: the reads were asserted inside `x` above (columns are checked against
                // the input width), the weights hold 3·kh × c values from channel c0 < c, and the
                // writes are this row's pixels (this unit's alone).
                unsafe { run.dispatch(self.isa) };
            }
            if vec_c.max(from) < to {
                for ox in 0..ow {
                    self.pixel(rows, far, ox, y0, (vec_c.max(from), to));
                }
            }
            return;
        }
        // Tiles of R inside columns, then one of R4 when that many are left (a 7-wide row's 5
        // inside columns): their whole vectors of channels one dispatch per channel block, the
        // other channels one value at a time; then the other columns one pixel at a time.
        let tiles_end = lo + (hi - lo) / R * R;
        let short = (hi - tiles_end >= R4).then_some(tiles_end);
        let inside = tiles_end + short.map_or(0, |_| R4);
        if inside > lo {
            let (from, to) = (chans.0, chans.1.min(c));
            let taps = self.inner.as_slice();
            // The last inside pixel's first window column; its last tap's offset.
            let reach = ((inside - 1) * sx - px) * c + taps.iter().map(|&(_, o)| o).max().unwrap_or(0);
            for c0 in (from..vec_c.min(to)).step_by(CB) {
                let chans = CB.min(vec_c.min(to) - c0);
                // Every read: a window row inside the image, a column inside, a channel < c.
                assert!(far + reach + c0 + chans <= self.x.len(), "depthwise row out of bounds");
                let run = DwRun {
                    x: self.x,
                    rows,
                    taps,
                    kw,
                    c,
                    c0,
                    tiles: (lo, tiles_end),
                    short,
                    step: sx * c,
                    first: lo * sx - px,
                    lo,
                    y0,
                    w: &self.w[c0..],
                    bias: self.bias.map(|b| &b[c0..c0 + chans]),
                    out: self.out,
                    tail: self.tail,
                    epi: self.tail.mode(),
                };
                // SAFETY: the reads were asserted inside `x` above, the weights hold taps × c
                // values from channel c0 < c, and the writes are this row's pixels (this unit's
                // alone).
                unsafe { dispatch(self.isa, &run, chans) };
            }
            if vec_c.max(from) < to {
                for ox in (lo..tiles_end).step_by(R).chain(short) {
                    let n = if ox + R <= hi { R } else { R4 };
                    let first: [usize; R] = std::array::from_fn(|r| ((ox + r.min(n - 1)) * sx - px) * c);
                    self.pixels(rows, far, taps, &first, n, y0 + ox * c, vec_c, (vec_c.max(from), to));
                }
            }
        }
        for ox in (0..lo).chain(inside..ow) {
            self.pixel(rows, far, ox, y0, chans);
        }
    }

    /// Output column `ox` of the row whose first output index is `y0`, alone ([`Self::pixels`]
    /// with the taps whose column is inside the input), channels `chans.0..chans.1`.
    fn pixel(&self, rows: &[(usize, usize)], far: usize, ox: usize, y0: usize, chans: (usize, usize)) {
        let g = self.geom;
        let (c, iw, kw) = (g.out_channels, g.in_hw[1], g.kernel_hw[1]);
        let (sx, dx, px) = (g.stride[1], g.dilation[1], g.pad[1]);
        // The taps whose column is inside, at their input column × channels.
        let mut taps = Pairs::new();
        for kx in 0..kw {
            if let Some(ix) = (ox * sx + kx * dx).checked_sub(px).filter(|&ix| ix < iw) {
                taps.push((kx, ix * c));
            }
        }
        self.pixels(rows, far, taps.as_slice(), &[0; R], 1, y0 + ox * c, self.vec_c, chans);
    }

    /// `n` (`R`, `R4` or 1) consecutive output pixels from output index `y` on, pixel r's window
    /// columns at `first[r]` plus each tap's offset in `taps` (kernel column, offset), over the
    /// window rows `rows` (the largest row index `far`), channels `chans.0..chans.1`: whole
    /// vectors of channels below `vec_c` (for an edge pixel, `n` = 1: the inside tiles' vectors
    /// run through [`DwRun`]), then the rest one value at a time.
    #[allow(clippy::too_many_arguments)]
    fn pixels(
        &self,
        rows: &[(usize, usize)],
        far: usize,
        taps: &[(usize, usize)],
        first: &[usize; R],
        n: usize,
        y: usize,
        vec_c: usize,
        chans: (usize, usize),
    ) {
        let c = self.geom.out_channels;
        let (from, to) = (chans.0, chans.1.min(c));
        let reach = taps.iter().map(|&(_, o)| o).max().unwrap_or(0) + first.iter().copied().max().unwrap_or(0);
        let yat: [usize; R] = std::array::from_fn(|r| y + r * c);
        debug_assert!(n == 1 || from >= vec_c.min(to), "depthwise vectors of one pixel only");
        for c0 in (from..vec_c.min(to)).step_by(CB) {
            let chans = CB.min(vec_c.min(to) - c0);
            // Every read: a window row inside the image, a column inside, a channel < c.
            assert!(far + reach + c0 + chans <= self.x.len(), "depthwise tile out of bounds");
            let t = DwTile {
                x: self.x,
                rows,
                taps,
                kw: self.geom.kernel_hw[1],
                c,
                col: first[0] + c0,
                y: yat[0] + c0,
                w: &self.w[c0..],
                bias: self.bias.map(|b| &b[c0..c0 + chans]),
                out: self.out,
                tail: self.tail,
            };
            // SAFETY: the reads were asserted inside `x` above, the weights hold taps × c values
            // from channel c0 < c, and the writes are this row's pixels (this unit's alone).
            unsafe { dispatch(self.isa, &t, chans) };
        }
        for (r, &f) in first.iter().enumerate().take(n) {
            for ch in vec_c.max(from)..to {
                let mut s = self.bias.map_or(0.0, |b| b[ch]);
                for &(row, ky) in rows {
                    for &(kx, off) in taps {
                        s += self.x[row + f + off + ch] * self.w[(ky * self.geom.kernel_hw[1] + kx) * c + ch];
                    }
                }
                let at = yat[r] + ch;
                let v = self.tail.value(s, at);
                // SAFETY: `validate` checked that every output element lies inside the output;
                // this pixel's channels belong to this unit's row alone.
                unsafe { self.out.write(at, v) };
            }
        }
    }
}

/// The inside tiles of one depthwise output row for one channel block: tiles of [`R`] pixels
/// from output column `tiles.0` to `tiles.1`, then one of [`R4`] at `short`, all in one dispatch.
struct DwRun<'a> {
    x: &'a [f32],
    /// As for [`DwTile`].
    rows: &'a [(usize, usize)],
    taps: &'a [(usize, usize)],
    kw: usize,
    c: usize,
    /// The block's first channel.
    c0: usize,
    tiles: (usize, usize),
    short: Option<usize>,
    /// Input values from one output column's window to the next (stride × channels), and the
    /// first window column of output column `lo`.
    step: usize,
    first: usize,
    lo: usize,
    /// The row's first output index.
    y0: usize,
    /// Taps' weights from channel c0: tap t at `w[t·c..]`.
    w: &'a [f32],
    /// From channel c0 (at least the block's channels).
    bias: Option<&'a [f32]>,
    out: OutPtr,
    tail: &'a Tail<'a>,
    /// The whole-tile epilogue ([`Tail::mode`]).
    epi: u8,
}

impl Body for DwRun<'_> {
    /// The run's tiles, `NV` vectors from channel `h` of the block.
    ///
    /// # Safety
    /// As for [`dw_tile`], for every tile of the run and channels `h..h + chans` of the block.
    #[inline(always)]
    unsafe fn run<V: Lanes, const NV: usize>(&self, h: usize, chans: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match self.epi {
                EPI_NONE => self.tiles::<V, NV, EPI_NONE>(h, chans),
                EPI_RELU => self.tiles::<V, NV, EPI_RELU>(h, chans),
                EPI_CLAMP => self.tiles::<V, NV, EPI_CLAMP>(h, chans),
                EPI_CLAMP0 => self.tiles::<V, NV, EPI_CLAMP0>(h, chans),
                EPI_RELU_CLAMP => self.tiles::<V, NV, EPI_RELU_CLAMP>(h, chans),
                EPI_RES => self.tiles::<V, NV, EPI_RES>(h, chans),
                _ => self.tiles::<V, NV, EPI_GENERAL>(h, chans),
            }
        }
    }
}

impl DwRun<'_> {
    /// [`Body::run`] with the whole-tile epilogue `EPI`.
    ///
    /// # Safety
    /// As for [`Body::run`].
    #[inline(always)]
    unsafe fn tiles<V: Lanes, const NV: usize, const EPI: u8>(&self, h: usize, chans: usize) {
        let (c, c0) = (self.c, self.c0 + h);
        // Lanes of the last vector (a masked one when the block's channels end inside it).
        let last = chans - (NV - 1) * V::L;
        let (lo, hi) = self.tail.epi.clamp.unwrap_or((0.0, 0.0));
        // SAFETY: the caller's contract throughout.
        unsafe {
            let bounds = (V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0);
            let res = self.tail.epi.residual.map_or(std::ptr::null(), |r| r.as_ptr());
            let bias = self.bias.map(|b| &b[h..]);
            let bias: [V; NV] = std::array::from_fn(|v| bias_vector(bias, v * V::L, chans));
            let (x, w) = (self.x.as_ptr().add(c0), self.w.as_ptr().add(h));
            // Output column `ox`'s first window column × channels, and its first output index.
            let col = |ox: usize| (self.first * c) + (ox - self.lo) * self.step;
            let yat = |ox: usize| self.y0 + ox * c + c0;
            for ox in (self.tiles.0..self.tiles.1).step_by(R) {
                let acc = dw_sums::<V, NV, R>(x, w, bias, self.rows, self.taps, self.kw, c, col(ox), self.step);
                let at: [usize; R] = std::array::from_fn(|r| yat(ox) + r * c);
                if EPI == EPI_GENERAL {
                    store::<V, NV, R>(acc, R, &at, chans, self.out, self.tail);
                } else {
                    store_whole::<V, NV, R, EPI>(&acc, &at, last, self.out.0, res, bounds);
                }
            }
            if let Some(ox) = self.short {
                let acc = dw_sums::<V, NV, R4>(x, w, bias, self.rows, self.taps, self.kw, c, col(ox), self.step);
                let at: [usize; R4] = std::array::from_fn(|r| yat(ox) + r * c);
                if EPI == EPI_GENERAL {
                    store::<V, NV, R4>(acc, R4, &at, chans, self.out, self.tail);
                } else {
                    store_whole::<V, NV, R4, EPI>(&acc, &at, last, self.out.0, res, bounds);
                }
            }
        }
    }
}

/// One output row of a depthwise convolution whose window is 3 columns wide (dilation 1, stride
/// 1 or 2), for one block of whole channel vectors: tiles of 8 (or 7: rows of 7, 14, 28 and
/// every stride-2 row), 4, 2 and 1 pixels × one or two vectors (about 16 sums on AVX-512, 8 on
/// AVX2), each input vector of a window row loaded once and multiplied by the (up to three) taps
/// that read it, so that a tile costs one load per FMA or less (one weight vector per tap and
/// window row, one input vector per column) where the generic tiles load every input once per
/// tap. Edge tiles (a window column outside the input) skip those columns, so a row needs no
/// single-pixel path. The sums add in the generic tiles' order. (MobileNetV2's 960 channels at
/// 7 × 7, one Zen 5 core: 14.3 → 7.1 µs, in tiles of 4, 2 and 1 pixels × one vector before;
/// 576 channels 14² → 7² at stride 2, through the generic tiles before: 6.9 → 6.2 µs.)
struct DwRow3<'a> {
    x: &'a [f32],
    /// As for [`DwTile`].
    rows: &'a [(usize, usize)],
    c: usize,
    /// The block's first channel and channel count (whole vectors).
    c0: usize,
    chans: usize,
    iw: usize,
    ow: usize,
    /// The left padding (input column of output column 0's first tap: −px).
    px: usize,
    /// The column stride: 1 or 2.
    sx: usize,
    /// The row's first output index.
    y0: usize,
    /// Taps' weights from channel c0: tap (ky, kx) at `w[(3·ky + kx)·c..]`.
    w: &'a [f32],
    /// From channel c0 (the block's channels).
    bias: Option<&'a [f32]>,
    out: OutPtr,
    tail: &'a Tail<'a>,
    /// The whole-tile epilogue ([`Tail::mode`]).
    epi: u8,
}

impl DwRow3<'_> {
    /// Runs the row on `isa` (checked on this CPU).
    ///
    /// # Safety
    /// Every input row in `rows` holds `iw · c` values from its index in `x`; `w` holds
    /// `3·kh·c` values past channel c0 (for `kh` window rows); the block's channels are whole
    /// vectors of `isa` (multiples of 16 on AVX-512, else 8); the row's outputs (and residual)
    /// from `y0` are inside the output and written by this unit alone.
    unsafe fn dispatch(&self, isa: FusedIsa) {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512(r: &DwRow3<'_>) {
            // SAFETY: the caller's contract.
            unsafe {
                if r.sx == 2 {
                    r.row::<std::arch::x86_64::__m512, 2, 7>()
                } else {
                    r.run::<std::arch::x86_64::__m512>()
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(r: &DwRow3<'_>) {
            // SAFETY: the caller's contract.
            unsafe {
                if r.sx == 2 {
                    r.row::<std::arch::x86_64::__m256, 2, 7>()
                } else {
                    r.run::<std::arch::x86_64::__m256>()
                }
            }
        }
        // SAFETY: the caller's contract; `isa` was checked on this CPU.
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                FusedIsa::Avx512 => avx512(self),
                #[cfg(target_arch = "x86_64")]
                FusedIsa::Avx2 => avx2(self),
                _ if self.sx == 2 => self.row::<Portable, 2, 7>(),
                _ => self.run::<Portable>(),
            }
        }
    }

    /// [`Self::dispatch`]'s body at stride 1 (stride 2 takes [`Self::row`] with tiles of 7: one
    /// of 8 would read 17 columns, one more than `sums` writes out), vectors `V`. (The stride
    /// tested here instead of in `dispatch`'s three arms was slower: 960 channels at 7² 6.3 →
    /// 6.9 µs, 576 at 14² stride 2 5.4 → 7.1, best of five alternated.)
    ///
    /// # Safety
    /// As for [`Self::dispatch`], with `V`'s features.
    #[inline(always)]
    unsafe fn run<V: Lanes>(&self) {
        // Rows of a multiple of 7 pixels but not of 8 (MobileNet's 7, 14 and 28) in tiles of 7:
        // no short tiles, whose few sums wait on the multiply-add's latency.
        // SAFETY: the caller's contract.
        unsafe {
            if self.ow.is_multiple_of(7) && !self.ow.is_multiple_of(8) {
                self.row::<V, 1, 7>()
            } else {
                self.row::<V, 1, 8>()
            }
        }
    }

    /// The row in tiles of `BIG` pixels, then of 4, 2 and 1.
    ///
    /// # Safety
    /// As for [`Self::run`].
    #[inline(always)]
    unsafe fn row<V: Lanes, const S: usize, const BIG: usize>(&self) {
        // ReLU6 (MobileNet's) compiled in; any other epilogue chosen per tile.
        // SAFETY: the caller's contract.
        unsafe {
            if self.epi == EPI_CLAMP0 {
                self.row_with::<V, S, BIG, EPI_CLAMP0>()
            } else {
                self.row_with::<V, S, BIG, EPI_DYN>()
            }
        }
    }

    /// [`Self::row`] with the whole-tile epilogue `E` ([`EPI_DYN`]: `self.epi`, per tile).
    ///
    /// # Safety
    /// As for [`Self::run`].
    #[inline(always)]
    unsafe fn row_with<V: Lanes, const S: usize, const BIG: usize, const E: u8>(&self) {
        let (lo, hi) = self.tail.epi.clamp.unwrap_or((0.0, 0.0));
        // SAFETY: the caller's contract throughout.
        unsafe {
            let bounds = (V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0);
            // Tile by tile along the row, each tile's vectors in turn (its pixels' channels are
            // one run of memory; vector by vector along the whole row was slower on inputs that
            // come from L3).
            let mut ox = 0;
            while ox < self.ow {
                ox += match self.ow - ox {
                    n if n >= BIG => self.tile::<V, S, BIG, E>(ox, bounds),
                    4.. => self.tile::<V, S, 4, E>(ox, bounds),
                    2.. => self.tile::<V, S, 2, E>(ox, bounds),
                    _ => self.tile::<V, S, 1, E>(ox, bounds),
                };
            }
        }
    }

    /// Output columns `ox..ox + RR`, the block's vectors one at a time, or two at a time in
    /// tiles of fewer than 8 pixels (about 16 sums on AVX-512, 8 on AVX2, so that the chains of
    /// multiply-adds cover their latency): summed, then stored with the tail. Returns `RR`.
    /// (Tiles of 8 pixels × two vectors ran MobileNet's 32-channel 112² layer at batch 8, whose
    /// rows come from memory, at 0.99 ms against 0.61 one vector at a time: a pixel's second
    /// line was loaded right after its first instead of a tile later.)
    ///
    /// # Safety
    /// As for [`Self::run`]; `ox + RR ≤ ow`.
    #[inline(always)]
    unsafe fn tile<V: Lanes, const S: usize, const RR: usize, const E: u8>(
        &self,
        ox: usize,
        bounds: (V, V, bool, bool),
    ) -> usize {
        // Input column of the tile's first window column (negative in the left padding).
        let first = (ox * S) as isize - self.px as isize;
        let last = first + (S * (RR - 1) + 2) as isize;
        // Which of the tile's columns lie outside the input ([`EDGE_ANY`] and its kin).
        let iw = self.iw as isize;
        let edge = match (first, last) {
            (0.., l) if l < iw => EDGE_NONE,
            (-1, l) if l < iw => EDGE_FIRST,
            (0.., l) if l == iw => EDGE_LAST,
            (-1, l) if l == iw => EDGE_BOTH,
            _ => EDGE_ANY,
        };
        let (vecs, sums) = (self.chans / V::L, if V::L >= 16 { 16 } else { 8 });
        let mut v = 0;
        // SAFETY: the caller's contract; each call's vectors are inside the block.
        unsafe {
            while v < vecs {
                v += match vecs - v {
                    2.. if 2 * RR <= sums && RR < 8 => {
                        self.vectors::<V, S, RR, 2, E>(ox, v * V::L, first, edge, bounds)
                    }
                    _ => self.vectors::<V, S, RR, 1, E>(ox, v * V::L, first, edge, bounds),
                };
            }
        }
        RR
    }

    /// [`Self::tile`]'s `NV` vectors from channel `v` of the block; returns `NV`.
    ///
    /// # Safety
    /// As for [`Self::tile`]; `inside` says whether the tile's window columns from `first` are
    /// all inside the input; channels `v..v + NV·L` are inside the block.
    #[inline(always)]
    unsafe fn vectors<V: Lanes, const S: usize, const RR: usize, const NV: usize, const E: u8>(
        &self,
        ox: usize,
        v: usize,
        first: isize,
        edge: u8,
        bounds: (V, V, bool, bool),
    ) -> usize {
        // SAFETY: the caller's contract throughout.
        unsafe {
            let bias: [V; NV] = std::array::from_fn(|k| bias_vector::<V>(self.bias, v + k * V::L, self.chans));
            let acc = match edge {
                EDGE_NONE => self.sums::<V, S, RR, NV, EDGE_NONE>(first, v, bias),
                EDGE_FIRST => self.sums::<V, S, RR, NV, EDGE_FIRST>(first, v, bias),
                EDGE_LAST => self.sums::<V, S, RR, NV, EDGE_LAST>(first, v, bias),
                EDGE_BOTH => self.sums::<V, S, RR, NV, EDGE_BOTH>(first, v, bias),
                _ => self.sums::<V, S, RR, NV, EDGE_ANY>(first, v, bias),
            };
            let c = self.c;
            let at: [usize; RR] = std::array::from_fn(|r| self.y0 + (ox + r) * c + self.c0 + v);
            let res = self.tail.epi.residual.map_or(std::ptr::null(), |r| r.as_ptr());
            let out = self.out.0;
            match if E == EPI_DYN { self.epi } else { E } {
                EPI_NONE => store_whole::<V, NV, RR, EPI_NONE>(&acc, &at, V::L, out, res, bounds),
                EPI_RELU => store_whole::<V, NV, RR, EPI_RELU>(&acc, &at, V::L, out, res, bounds),
                EPI_CLAMP => store_whole::<V, NV, RR, EPI_CLAMP>(&acc, &at, V::L, out, res, bounds),
                EPI_CLAMP0 => store_whole::<V, NV, RR, EPI_CLAMP0>(&acc, &at, V::L, out, res, bounds),
                EPI_RELU_CLAMP => store_whole::<V, NV, RR, EPI_RELU_CLAMP>(&acc, &at, V::L, out, res, bounds),
                EPI_RES => store_whole::<V, NV, RR, EPI_RES>(&acc, &at, V::L, out, res, bounds),
                _ => store::<V, NV, RR>(acc, RR, &at, NV * V::L, self.out, self.tail),
            }
        }
        NV
    }

    /// The sums of output columns from the one whose first window column is input column
    /// `first`, `RR` of them, `NV` (1 or 2) vectors from channel `v` of the block: from `bias`,
    /// window row by window row, each input column's vectors loaded once and multiplied by every
    /// tap reading them (column j of the tile is tap j − S·r of pixel r). `EDGE` says which
    /// columns to skip (outside the input): none, the first, the last, both, or any tested.
    ///
    /// # Safety
    /// As for [`Self::vectors`]; the columns `first ..= first + S·(RR − 1) + 2` that `EDGE` does
    /// not skip are inside the input.
    #[inline(always)]
    unsafe fn sums<V: Lanes, const S: usize, const RR: usize, const NV: usize, const EDGE: u8>(
        &self,
        first: isize,
        v: usize,
        bias: [V; NV],
    ) -> [[V; NV]; RR] {
        const { assert!(S * (RR - 1) + 3 <= 16, "a tile's columns are written out for up to 16") };
        let c = self.c;
        // One array per vector (a two-dimensional one stayed in memory, every sum stored back
        // after its multiply-add).
        let mut acc0 = [bias[0]; RR];
        let mut acc1 = [bias[NV - 1]; RR];
        // SAFETY: the caller's contract: every column read is inside the input row (checked
        // here for edge tiles), every channel below c; the weights as documented.
        unsafe {
            for &(row, ky) in self.rows {
                let wt = self.w.as_ptr().add(3 * ky * c + v);
                let w0 = [V::load(wt), V::load(wt.add(c)), V::load(wt.add(2 * c))];
                let w1 = if NV == 2 {
                    let wt = wt.add(V::L);
                    [V::load(wt), V::load(wt.add(c)), V::load(wt.add(2 * c))]
                } else {
                    w0
                };
                // Column `first` of the row, stepped one column on per tile column (one register
                // instead of an address per column); wrapping, as it starts a column before the
                // row in the left padding (only columns inside are read).
                let mut xc = self.x.as_ptr().wrapping_add(row + self.c0 + v).wrapping_offset(first * c as isize);
                // Written out column by column (`each16`), every index a constant.
                each16!(j => {
                    let col = first + j as isize;
                    let end = S * (RR - 1) + 2;
                    let outside = match EDGE {
                        EDGE_NONE => false,
                        EDGE_FIRST => j == 0,
                        EDGE_LAST => j == end,
                        EDGE_BOTH => j == 0 || j == end,
                        _ => col < 0 || col >= self.iw as isize,
                    };
                    if j <= end && !outside {
                        window3_strided::<V, RR, S>(&mut acc0, &w0, j, V::load(xc));
                        if NV == 2 {
                            window3_strided::<V, RR, S>(&mut acc1, &w1, j, V::load(xc.add(V::L)));
                        }
                    }
                    xc = xc.wrapping_add(c);
                });
            }
        }
        std::array::from_fn(|r| std::array::from_fn(|k| if k == 0 { acc0[r] } else { acc1[r] }))
    }
}

/// Which columns of a [`DwRow3`] tile lie outside the input: none, the first, the last, those
/// two, or any (tested column by column).
const EDGE_NONE: u8 = 0;
const EDGE_FIRST: u8 = 1;
const EDGE_LAST: u8 = 2;
const EDGE_BOTH: u8 = 3;
const EDGE_ANY: u8 = 4;

/// The sums of `RR` consecutive inside pixels × `NV` vectors from `bias`: pixel r's window
/// columns from `x + col + r·step` (plus each tap's offset), over the window rows `rows`.
///
/// # Safety
/// The CPU has `V`'s features; every read `rows[j].0 + col + r·step + taps[k].1 + v·L` (+ L)
/// from `x` is inside the input, and `w` holds `(taps − 1)·c + NV·L` values.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn dw_sums<V: Lanes, const NV: usize, const RR: usize>(
    x: *const f32,
    w: *const f32,
    bias: [V; NV],
    rows: &[(usize, usize)],
    taps: &[(usize, usize)],
    kw: usize,
    c: usize,
    col: usize,
    step: usize,
) -> [[V; NV]; RR] {
    let mut acc = [bias; RR];
    // SAFETY: the caller's contract.
    unsafe {
        for &(row, ky) in rows {
            let xr = x.add(row + col);
            for &(kx, off) in taps {
                let wt = w.add((ky * kw + kx) * c);
                let wv: [V; NV] = V::loads(wt);
                let xk = xr.add(off);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let p = xk.add(r * step);
                    for (v, (s, &k)) in acc.iter_mut().zip(&wv).enumerate() {
                        *s = V::load(p.add(v * V::L)).fmadd(k, *s);
                    }
                }
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Lcg, Operands, Parts, strides};
    use super::super::{ConvFilter, conv2d_f32};
    use super::*;
    use crate::kernels::gemm::epilogue::act_f64;

    /// One case: the geometry's free parameters (channels-last input and output).
    #[derive(Clone, Copy, Debug)]
    struct Case {
        batch: usize,
        cin: usize,
        cout: usize,
        /// Depthwise (groups = channels; `cout` is ignored).
        depthwise: bool,
        in_hw: [usize; 2],
        k: [usize; 2],
        stride: [usize; 2],
        /// Low and high padding per axis.
        pads: [[usize; 2]; 2],
        dil: [usize; 2],
    }

    impl Case {
        fn geom(&self) -> ConvGeom {
            let cout = if self.depthwise { self.cin } else { self.cout };
            let out_hw: [usize; 2] = std::array::from_fn(|a| {
                let span = self.in_hw[a] + self.pads[a][0] + self.pads[a][1];
                let reach = (self.k[a] - 1) * self.dil[a] + 1;
                span.checked_sub(reach).map_or(0, |r| r / self.stride[a] + 1)
            });
            let (n, [h, w], [oh, ow]) = (self.batch, self.in_hw, out_hw);
            ConvGeom {
                batch: n,
                in_channels: self.cin,
                in_hw: self.in_hw,
                out_channels: cout,
                out_hw,
                kernel_hw: self.k,
                stride: self.stride,
                pad: [self.pads[0][0], self.pads[1][0]],
                dilation: self.dil,
                groups: if self.depthwise { self.cin } else { 1 },
                x_strides: strides([n, self.cin, h, w], [0, 2, 3, 1]),
                y_strides: strides([n, cout, oh, ow], [0, 2, 3, 1]),
            }
        }
    }

    /// Runs `case` with the epilogue `parts` (bias, residual, activation, clamp) on every ISA,
    /// on one and two threads, through `conv2d_f32` too, against the f64 loop.
    fn check(rng: &mut Lcg, case: Case, parts: Parts, two: &rayon::ThreadPool) {
        let g = case.geom();
        let (cin, cout, [kh, kw]) = (g.in_channels, g.out_channels, case.k);
        let ops = Operands::new(rng, &g, parts);
        let (x, w, ws, epi) = (&ops.x, &ops.w, ops.ws, ops.epilogue());
        let len = g.batch * cout * g.out_hw[0] * g.out_hw[1];
        let compare = |y: &[f32], what: &str| ops.check(y, what, &case);
        let qualifies = if case.depthwise { depthwise_qualifies(&g) } else { pointwise_qualifies(&g) };
        if len == 0 || !qualifies {
            return;
        }
        let filter = ConvFilter::new(&g, w, ws).unwrap();
        let mut y = vec![f32::NAN; len];
        conv2d_f32(&g, x, &filter, &epi, &mut y, Some(two)).unwrap();
        compare(&y, "conv2d_f32");
        let at = |o: usize, i: usize, y: usize, x: usize| ops.at(o, i, y, x);
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let pw = PointwiseFilter::new(if case.depthwise { 0 } else { cin }, cout, |o, i| at(o, i, 0, 0));
        let mut dw = vec![0.0f32; kh * kw * cout];
        for t in 0..kh * kw {
            for c in 0..cout {
                dw[t * cout + c] = at(c, 0, t / kw, t % kw);
            }
        }
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            for (pool, parallel) in [(&one, false), (two, true)] {
                let mut y = vec![f32::NAN; len];
                let out = OutPtr(y.as_mut_ptr());
                let r = pool.install(|| {
                    if case.depthwise {
                        depthwise_on(isa, &g, x, &dw, &epi, out, parallel)
                    } else {
                        pointwise_on(isa, &g, x, &pw, &epi, out, parallel)
                    }
                });
                r.unwrap();
                compare(&y, isa.name());
            }
        }
    }

    fn two_threads() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap()
    }

    const ALL_PARTS: Parts = (true, true, Activation::Relu, Some((-0.5, 0.7)));

    /// Every whole-tile epilogue (ReLU then clamp, the clamp from +0 with and without the ReLU,
    /// the ReLU, the residual alone, nothing) and a general one (residual and clamp).
    const EPILOGUES: [Parts; 7] = [
        ALL_PARTS,
        (true, false, Activation::Relu, Some((0.0, 6.0))),
        (true, false, Activation::None, Some((0.0, 0.5))),
        (false, false, Activation::Relu, None),
        (true, true, Activation::None, None),
        (false, false, Activation::None, None),
        (true, true, Activation::None, Some((0.0, 6.0))),
    ];

    /// A MobileNetV2 14×14 layer, small; the other cases change a few fields.
    const PW: Case = Case {
        batch: 2,
        cin: 24,
        cout: 144,
        depthwise: false,
        in_hw: [14, 14],
        k: [1, 1],
        stride: [1, 1],
        pads: [[0, 0], [0, 0]],
        dil: [1, 1],
    };

    const DW: Case = Case { cin: 96, depthwise: true, k: [3, 3], pads: [[1, 1], [1, 1]], ..PW };

    #[test]
    fn pointwise_matches_naive_loop() {
        let (mut rng, two) = (Lcg(7), two_threads());
        for case in [
            PW,
            // Channel counts that are no multiple of a vector or block; one input channel.
            Case { cin: 1, cout: 3, ..PW },
            Case { cin: 5, cout: 24, ..PW },
            // Pixel pairs on AVX-512 (8, 24 and 40 channels), with pixels left past the tiles.
            Case { cin: 96, cout: 24, in_hw: [5, 7], ..PW },
            Case { cin: 3, cout: 8, ..PW },
            Case { cin: 17, cout: 40, in_hw: [3, 11], ..PW },
            Case { cin: 96, cout: 130, in_hw: [7, 7], ..PW },
            // Strided (ResNet's downsampling 1×1), a 1×1 image, one pixel row.
            Case { stride: [2, 2], in_hw: [7, 9], ..PW },
            Case { stride: [3, 1], ..PW },
            Case { in_hw: [1, 1], batch: 3, ..PW },
            Case { in_hw: [1, 13], ..PW },
            // No images.
            Case { batch: 0, ..PW },
        ] {
            for parts in EPILOGUES {
                check(&mut rng, case, parts, &two);
            }
        }
    }

    /// The ReLU6 clamp of the whole-tile store, bit for bit on special values: zeros of both
    /// signs and negatives to +0, NaN of both signs kept, the bound and above to the bound.
    #[test]
    fn clamp_from_zero_is_exact_on_every_isa() {
        let v = [
            -0.0f32,
            0.0,
            -3.0,
            0.5,
            7.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            6.0,
            1e-45,
            -1e-45,
            5.999,
            6.001,
            0.25,
            -0.25,
        ];
        let want = [0.0f32, 0.0, 0.0, 0.5, 6.0, 6.0, 0.0, f32::NAN, f32::NAN, 6.0, 1e-45, 0.0, 5.999, 6.0, 0.25, 0.0];
        let compare = |got: &[f32], what: &str| {
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let ok = if w.is_nan() { g.is_nan() } else { g.to_bits() == w.to_bits() };
                assert!(ok, "{what}: clamp_from_zero({}) = {g:?}, want {w:?}", v[i]);
            }
        };
        /// Clamps `v` a vector of `V` at a time.
        unsafe fn clamp_all<V: Lanes>(v: &[f32; 16]) -> [f32; 16] {
            let mut out = [0.0f32; 16];
            // SAFETY: the caller's contract (V's features); 16 values, whole vectors of them.
            unsafe {
                for c in (0..16).step_by(V::L) {
                    V::load(v.as_ptr().add(c)).clamp_from_zero(V::splat(6.0)).store(out.as_mut_ptr().add(c));
                }
            }
            out
        }
        // SAFETY: the portable lanes need no CPU feature.
        compare(&unsafe { clamp_all::<Portable>(&v) }, "portable");
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2(v: &[f32; 16]) -> [f32; 16] {
                // SAFETY: the caller checked AVX2 and FMA.
                unsafe { clamp_all::<std::arch::x86_64::__m256>(v) }
            }
            #[target_feature(enable = "avx512f")]
            unsafe fn avx512(v: &[f32; 16]) -> [f32; 16] {
                // SAFETY: the caller checked AVX-512F.
                unsafe { clamp_all::<std::arch::x86_64::__m512>(v) }
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                // SAFETY: checked just above.
                compare(&unsafe { avx2(&v) }, "avx2");
            }
            if is_x86_feature_detected!("avx512f") {
                // SAFETY: checked just above.
                compare(&unsafe { avx512(&v) }, "avx512");
            }
        }
    }

    #[test]
    fn wide_pointwise_runs_on_the_gemm_with_its_tail_per_tile() {
        // At least GEMM_POINTWISE_CHANNELS both ways: `conv2d_f32` runs the GEMM and finishes
        // each tile with the tail (one depth block: tiles from the GEMM's tile buffer; 700
        // input channels: several blocks, tiles finished in place), with edge tiles in both
        // directions; `check` also runs the direct kernel on every ISA.
        let (mut rng, two) = (Lcg(41), two_threads());
        for case in [
            Case { cin: 130, cout: 140, in_hw: [5, 3], ..PW },
            Case { cin: 700, cout: 136, batch: 3, in_hw: [3, 7], ..PW },
        ] {
            let g = case.geom();
            assert_eq!(
                ConvFilter::new(&g, &vec![0.0; g.in_channels * g.out_channels], [g.in_channels, 1, 1, 1])
                    .unwrap()
                    .describe(),
                "pointwise gemm"
            );
            for parts in [
                ALL_PARTS,
                (true, false, Activation::Relu, Some((0.0, 6.0))),
                (false, true, Activation::None, None),
                (true, true, Activation::HardSwish, Some((-0.25, 0.5))),
                (true, false, Activation::Sigmoid, Some((f32::NAN, 1.0))),
                (true, false, Activation::None, None),
            ] {
                check(&mut rng, case, parts, &two);
            }
        }
        // Narrower on either side: the direct kernel.
        for (cin, cout) in [(127, 300), (300, 96)] {
            let g = Case { cin, cout, ..PW }.geom();
            assert_eq!(
                ConvFilter::new(&g, &vec![0.0; cin * cout], [cin, 1, 1, 1]).unwrap().describe(),
                "pointwise channels-last"
            );
        }
    }

    #[test]
    fn finish_rows_applies_the_tail_on_every_isa() {
        // Rows of 37 values (two whole AVX-512 vectors and a masked one) at row strides of 40
        // (source) and 45 (destination), in place and from a separate buffer; expected values
        // from the definition in f64: act(v + residual), then clamp (NaN bounds give NaN).
        let mut rng = Lcg(3);
        let (rows, n, srs, drs) = (3, 37, 40, 45);
        let src: Vec<f32> = (0..rows * srs).map(|_| 4.0 * rng.next()).collect();
        let res: Vec<f32> = (0..rows * drs).map(|_| rng.next()).collect();
        let parts_list = [
            (true, Activation::Relu, Some((-0.5, 0.7))),
            (false, Activation::None, Some((0.0, 6.0))),
            (true, Activation::None, None),
            (true, Activation::Sigmoid, Some((0.1, 0.6))),
            (false, Activation::None, Some((f32::NAN, 1.0))),
        ];
        for (residual, activation, clamp) in parts_list {
            let epi = ConvEpilogue { bias: None, residual: residual.then_some(&res[..]), activation, clamp };
            for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
                for in_place in [false, true] {
                    let mut dst = vec![f32::NAN; rows * drs];
                    if in_place {
                        for i in 0..rows {
                            dst[i * drs..][..n].copy_from_slice(&src[i * srs..][..n]);
                        }
                    }
                    let (from, from_rs) = if in_place { (dst.as_ptr(), drs) } else { (src.as_ptr(), srs) };
                    let r = Rows {
                        rows,
                        n,
                        src: from,
                        srs: from_rs,
                        dst: dst.as_mut_ptr(),
                        drs,
                        res: residual.then_some(res.as_ptr()),
                    };
                    // SAFETY: every row lies inside `src`/`dst` (rows·stride values) and `res`.
                    unsafe { finish_rows_on(isa, &epi, &r) };
                    for i in 0..rows {
                        for j in 0..n {
                            let v = src[i * srs + j] as f64 + if residual { res[i * drs + j] as f64 } else { 0.0 };
                            // Without a residual the GEMM applied the activation already.
                            let v = if residual { act_f64(activation, v) } else { v };
                            let want =
                                clamp.map_or(
                                    v,
                                    |(lo, hi)| if lo.is_nan() { f64::NAN } else { v.clamp(lo as f64, hi as f64) },
                                );
                            let got = dst[i * drs + j];
                            let ok = if want.is_nan() {
                                got.is_nan()
                            } else {
                                (got as f64 - want).abs() <= 1e-6 * want.abs().max(1.0)
                            };
                            assert!(
                                ok,
                                "{} {activation:?} {clamp:?} in place {in_place} ({i}, {j}): {got} vs {want}",
                                isa.name()
                            );
                        }
                        // Past the run: untouched.
                        assert!(dst[i * drs + n..(i + 1) * drs].iter().all(|v| v.is_nan() || in_place));
                    }
                }
            }
        }
    }

    #[test]
    fn depthwise_matches_naive_loop() {
        let (mut rng, two) = (Lcg(11), two_threads());
        for case in [
            DW,
            // Stride 2 (MobileNet's), channel counts that are no multiple of a vector, few.
            Case { stride: [2, 2], ..DW },
            Case { cin: 40, in_hw: [7, 7], ..DW },
            Case { cin: 3, ..DW },
            Case { cin: 200, in_hw: [5, 19], ..DW },
            // Odd rows on two threads: each row's channels in two parts (whole blocks, the
            // scalar channels in the last).
            Case { cin: 130, in_hw: [7, 7], ..DW },
            // Kernel larger than the input with padding, a 1×1 image, no padding, dilation,
            // asymmetric padding, 5×5, 1-D rows.
            Case { in_hw: [2, 2], k: [5, 5], pads: [[2, 2], [2, 2]], ..DW },
            Case { in_hw: [1, 1], ..DW },
            Case { pads: [[0, 0], [0, 0]], ..DW },
            Case { dil: [2, 2], pads: [[2, 2], [2, 2]], ..DW },
            Case { pads: [[0, 2], [1, 0]], ..DW },
            Case { k: [5, 5], pads: [[2, 2], [2, 2]], in_hw: [9, 20], ..DW },
            Case { k: [1, 3], in_hw: [1, 30], pads: [[0, 0], [1, 1]], ..DW },
            Case { batch: 0, ..DW },
            // Channels ending inside a vector (a masked last vector in the whole-tile store), and
            // with scalar channels past the vectors; a row of exactly one short tile inside.
            Case { cin: 24, ..DW },
            Case { cin: 37, in_hw: [6, 7], ..DW },
            // 3-wide windows at stride 1 (`DwRow3`): two padding columns each side (edge tiles
            // whose first two or last two columns are outside) and every tile width (23 = 8 + 8
            // + 4 + 2 + 1); a row narrower than the window; rows dilated, columns not.
            Case { cin: 48, pads: [[1, 1], [2, 2]], in_hw: [4, 21], ..DW },
            Case { in_hw: [3, 2], ..DW },
            Case { dil: [2, 1], pads: [[2, 2], [1, 1]], in_hw: [6, 13], ..DW },
            // Rows of 7, 14 and 21 pixels in tiles of 7 (first column, last column, both and
            // neither outside), channels in pairs of vectors and a single one (48 = 3 × 16).
            Case { cin: 48, in_hw: [7, 7], ..DW },
            Case { cin: 48, in_hw: [3, 14], ..DW },
            Case { cin: 80, in_hw: [2, 21], ..DW },
            // Stride 2 on the 3-wide path: 14 → 7 and 28 → 14 columns (tiles of 7), odd widths
            // (the last window reaching the right padding), two padding columns, no padding,
            // asymmetric padding, a row shorter than a tile.
            Case { cin: 48, stride: [2, 2], in_hw: [14, 14], ..DW },
            Case { cin: 32, stride: [2, 2], in_hw: [4, 28], ..DW },
            Case { cin: 48, stride: [2, 2], in_hw: [5, 15], ..DW },
            Case { cin: 16, stride: [2, 2], in_hw: [5, 17], pads: [[2, 2], [2, 2]], ..DW },
            Case { cin: 32, stride: [2, 2], in_hw: [6, 16], pads: [[0, 0], [0, 0]], ..DW },
            Case { cin: 48, stride: [2, 2], in_hw: [6, 12], pads: [[1, 0], [0, 1]], ..DW },
            Case { cin: 64, stride: [2, 2], in_hw: [3, 5], ..DW },
        ] {
            for parts in EPILOGUES {
                check(&mut rng, case, parts, &two);
            }
        }
        // An activation applied after the store (`EPI_GENERAL`), on the 3-wide path.
        check(
            &mut rng,
            Case { cin: 40, in_hw: [5, 11], ..DW },
            (true, true, Activation::Sigmoid, Some((0.1, 0.6))),
            &two,
        );
    }

    #[test]
    fn random_shapes_and_epilogues() {
        let (mut rng, two) = (Lcg(29), two_threads());
        let acts = [Activation::None, Activation::Relu, Activation::Sigmoid, Activation::HardSwish];
        for t in 0..40 {
            let mut pick = |n: usize, from: usize| from + rng.below(n);
            let depthwise = t % 2 == 0;
            let k = if depthwise { [pick(5, 1), pick(5, 1)] } else { [1, 1] };
            let case = Case {
                batch: pick(3, 0),
                cin: pick(70, 1),
                cout: pick(150, 1),
                depthwise,
                in_hw: [pick(12, 1), pick(25, 1)],
                k,
                stride: [pick(3, 1), pick(3, 1)],
                pads: if depthwise { [[pick(3, 0), pick(3, 0)], [pick(3, 0), pick(3, 0)]] } else { [[0, 0], [0, 0]] },
                dil: [pick(2, 1), pick(2, 1)],
            };
            let clamp = [None, Some((-0.25, 0.5)), Some((f32::NAN, 1.0)), Some((0.0, 0.75))][pick(4, 0)];
            let parts = (pick(2, 0) == 1, pick(2, 0) == 1, acts[pick(4, 0)], clamp);
            check(&mut rng, case, parts, &two);
        }
    }

    #[test]
    fn takes_dense_channels_last_only() {
        let g = PW.geom();
        assert!(pointwise_qualifies(&g));
        assert_eq!(
            ConvFilter::new(&g, &vec![0.0; 144 * 24], [24, 1, 1, 1]).unwrap().describe(),
            "pointwise channels-last"
        );
        assert!(depthwise_qualifies(&DW.geom()));
        // Channels-first input or output, padding, a 3×3 window, groups.
        let nchw_in = ConvGeom { x_strides: strides([2, 24, 14, 14], [0, 1, 2, 3]), ..g.clone() };
        let nchw_out = ConvGeom { y_strides: strides([2, 144, 14, 14], [0, 1, 2, 3]), ..g.clone() };
        for other in [nchw_in, nchw_out, ConvGeom { pad: [1, 0], ..g.clone() }, ConvGeom { groups: 2, ..g.clone() }] {
            assert!(!pointwise_qualifies(&other));
        }
        assert!(!pointwise_qualifies(&Case { k: [3, 3], ..PW }.geom()));
        assert!(!depthwise_qualifies(&PW.geom()));
        let dw_nchw = ConvGeom { x_strides: strides([2, 96, 14, 14], [0, 1, 2, 3]), ..DW.geom() };
        assert!(!depthwise_qualifies(&dw_nchw));
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        let g = PW.geom();
        let (x, mut y) = (vec![0.0; 2 * 24 * 196], vec![0.0; 2 * 144 * 196]);
        let out = OutPtr(y.as_mut_ptr());
        let epi = ConvEpilogue::default();
        // A filter for other channel counts; a geometry the kernel does not take; a short input.
        let other = PointwiseFilter::new(24, 140, |_, _| 1.0);
        assert!(pointwise_on(FusedIsa::Generic, &g, &x, &other, &epi, out, false).is_err());
        let f = PointwiseFilter::new(24, 144, |_, _| 1.0);
        let padded = ConvGeom { pad: [1, 1], ..g.clone() };
        assert!(pointwise_on(FusedIsa::Generic, &padded, &x, &f, &epi, out, false).is_err());
        assert!(pointwise_on(FusedIsa::Generic, &g, &x[..100], &f, &epi, out, false).is_err());
        assert!(pointwise_on(FusedIsa::Generic, &g, &x, &f, &epi, out, false).is_ok());
        let d = DW.geom();
        let (xd, mut yd) = (vec![0.0; 2 * 96 * 196], vec![0.0; 2 * 96 * 196]);
        let outd = OutPtr(yd.as_mut_ptr());
        assert!(depthwise_on(FusedIsa::Generic, &d, &xd, &[0.0; 9 * 95], &epi, outd, false).is_err());
        assert!(depthwise_on(FusedIsa::Generic, &g, &xd, &[0.0; 9 * 96], &epi, outd, false).is_err());
        assert!(depthwise_on(FusedIsa::Generic, &d, &xd[..50], &[0.0; 9 * 96], &epi, outd, false).is_err());
        assert!(depthwise_on(FusedIsa::Generic, &d, &xd, &[0.0; 9 * 96], &epi, outd, false).is_ok());
    }
}
