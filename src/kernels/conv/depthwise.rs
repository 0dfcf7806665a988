//! Depthwise convolution (one input and one output channel per group, f32 forward), direct: no
//! im2col, every output written once with its whole epilogue applied.
//!
//! Channels not innermost (NCHW): one task per (image, channel) plane. The plane is first copied
//! into a zero-padded scratch split into its stride phases: phase (py, px) holds the padded
//! positions (i·sy + py, j·sx + px) as a dense `ph × pw` matrix, `pw` being the output width plus
//! the window's reach in phase columns. Output pixel (oy, ox) and tap (ty, tx) then read phase
//! (ty·dy mod sy, tx·dx mod sx) at (oy + ty·dy div sy, ox + tx·dx div sx): for the flat index
//! q = oy·pw + ox every tap is one fixed offset, and a vector of outputs along a row reads one
//! contiguous run per tap. Each output row is cut into vectors (the last one partial); [`N`]
//! adjacent vectors of a row form a register block, and the vectors left at the rows' ends
//! (narrow rows: all of them) are gathered across rows into blocks: N independent accumulator
//! chains, each tap one broadcast weight and N fused multiply-adds from memory. The
//! bias starts the accumulators and the ReLU and clamp are applied in registers before the one
//! store (a residual or another activation goes through a copy of the block). Stride 2 costs one
//! de-interleave of each input row. Any stride, dilation and padding take the same path, except
//! narrow stride-1 planes (MobileNet's 7-, 14-, 28-wide ones), which skip the copy: a register
//! block is N output rows × one vector, each tap reads its input row in place (a row of zeros in
//! the vertical padding) with masked loads for the lanes in the horizontal padding. 3×3
//! stride-1 planes with padding 1 (MobileNet's), of any width, take a path of their own
//! ([`Job::plane_s1_3x3`]): strips of two vectors of columns down the whole plane, each input row
//! loaded once as three shifted vectors per strip vector that feed the three output rows reading
//! it (the oldest of which is then finished and stored), compiled apart per ISA with the
//! epilogue as a constant so that the nine weights and six accumulators stay in registers.
//! 3×3 stride-2 planes (dilation 1, dense rows) skip the copy too ([`Job::plane_s2`]): one
//! vector of output columns down the plane, each input row loaded in place and split into its
//! even and odd columns in registers.
//!
//! Channels-first geometries with dense rows in and out take the channel-blocked path instead
//! ([`blocked`]; all but 3×3 stride-1 planes at least 9 or 17 columns wide and other stride-1
//! rows of 9 to 16 columns, see [`takes_blocks`]): 8 or 16
//! channels at a time transposed into a padded `[row][column][channel]` block, convolved with the
//! channels as the lanes, and transposed back. The plane paths below serve the rest (and NHWC
//! outputs).
//!
//! Channels innermost (NHWC): one task per (image, output row), accumulated in an `[ow][c]` row
//! vectorised along the channels, each tap over the output columns whose input column is inside.
//!
//! Both bodies are compiled for AVX-512F and AVX2+FMA and portably, selected at run time
//! ([`FusedIsa`]); the plane path's blocks ([`Lanes`]) and stride-2 de-interleave use explicit
//! vectors there (planes at most 8 wide take the AVX2 vectors on AVX-512 CPUs). Geometries whose
//! phases would dwarf the planes (huge dilations into the padding) take a plain per-output loop.

use std::cell::RefCell;

pub(super) mod blocked;

use super::{ConvEpilogue, ConvGeom, OutPtr, clamp_nan, copy_strided, for_units, uneven};
use crate::error::Result;
use crate::kernels::fused::FusedIsa;
use crate::kernels::gemm::Activation;

/// Vectors per register block of the plane path: as many independent accumulator chains (the
/// FMA latency times its throughput is 8 on current x86 cores).
const N: usize = 8;

/// Slack after the phases of the plane scratch: the widest vector read past the last position.
const SLACK: usize = 16;

/// The compiled bodies ([`Job::unit`]'s `ISA`).
const GENERIC: u8 = 0;
#[cfg(target_arch = "x86_64")]
const AVX2: u8 = 1;
#[cfg(target_arch = "x86_64")]
const AVX512: u8 = 2;

/// Work (multiply-adds) a parallel task should hold at least.
const TASK_WORK: usize = 1 << 15;

/// Depthwise convolution with the weights `w` as `[taps][channels]`, on the default ISA.
pub(super) fn depthwise(
    geom: &ConvGeom,
    x: &[f32],
    w: &[f32],
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    depthwise_on(FusedIsa::selected(), geom, x, w, epi, out, parallel, None, blocked::STRIP_BYTES);
    Ok(())
}

/// [`depthwise`] on `isa` (lowered to what the CPU runs); `blocked` forces the channel-blocked
/// path on or off where it applies (tests), else [`takes_blocks`] decides; `strip_bytes` bounds
/// that path's strips ([`blocked::STRIP_BYTES`] but in tests). The caller has
/// validated the geometry against `x` and the output, and the bias and residual lengths.
#[allow(clippy::too_many_arguments)]
fn depthwise_on(
    isa: FusedIsa,
    geom: &ConvGeom,
    x: &[f32],
    w: &[f32],
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
    blocked: Option<bool>,
    strip_bytes: usize,
) {
    let [oh, ow] = geom.out_hw;
    let c = geom.out_channels;
    // Planes (channels-first) or output rows (channels innermost) as units.
    let channels_inner = geom.x_strides[1] == 1;
    let s1 = !channels_inner
        && geom.stride == [1, 1]
        && geom.dilation == [1, 1]
        && geom.x_strides[3] == 1
        && geom.kernel_hw[0] <= S1_MAX_KH
        && ow <= S1_MAX_OW;
    let s2 = !channels_inner
        && geom.stride == [2, 2]
        && geom.dilation == [1, 1]
        && geom.kernel_hw == [3, 3]
        && geom.x_strides[3] == 1
        && !geom.in_hw.contains(&0);
    let s1k3 = !channels_inner
        && geom.stride == [1, 1]
        && geom.dilation == [1, 1]
        && geom.kernel_hw == [3, 3]
        && geom.pad == [1, 1]
        && geom.x_strides[3] == 1;
    let job = Job { geom, x, w, epi, out, lay: Phases::of(geom), s1, s1k3, s2, strip_bytes };
    let isa = isa.checked();
    // Channels-first planes with dense rows in and out, whose padded block stays near the
    // planes' size: the channel-blocked path where it is faster (or forced).
    let planes = geom.in_hw[0] * geom.in_hw[1] + oh * ow;
    // Channels-last outputs take the blocked path whenever it can: its blocks are their layout.
    let out_last = geom.y_strides[1] == 1 && c > 1;
    let can_block = !channels_inner
        && geom.x_strides[3] == 1
        && (geom.y_strides[3] == 1 || out_last)
        && blocked::extent(geom).is_some_and(|(ph, pw)| ph.saturating_mul(pw) <= 4 * planes + 4096);
    if can_block && blocked.unwrap_or_else(|| out_last || takes_blocks(geom, isa, s1k3)) {
        let l = if isa == FusedIsa::Avx512 { 16 } else { 8 };
        let nb = c.div_ceil(l);
        let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
        // Few blocks that do not split evenly over the threads (one image): each block's rows
        // cut into parts, a multiple of the threads units in all (MobileNetV2's 144 channels
        // at 56×56: 9 blocks, 5 against 4 per thread; now 18 half-planes).
        let units = geom.batch * nb;
        let parts = if uneven(units, threads) { threads.min(oh.max(1)) } else { 1 };
        let min_len = (TASK_WORK * parts / (oh * ow * geom.taps() * l).max(1)).max(1);
        for_units(parallel, units * parts, min_len, Kept::take, |scratch, u| {
            dispatch(isa, &job, Path::Blocked { blocks: nb, parts }, u, scratch);
        });
        return;
    }
    // Planes at most 8 wide fill AVX2 vectors better than AVX-512 ones.
    let isa = match isa {
        FusedIsa::Avx512 if !channels_inner && ow <= 8 => FusedIsa::Avx2,
        isa => isa,
    };
    // Phases far larger than the input and output planes (dilations reaching far into the
    // padding): the plane is computed by a plain loop instead.
    if !channels_inner && !s1 && !s1k3 && !s2 && job.lay.len().is_none_or(|l| l > 4 * planes + 4096) {
        for_units(parallel, geom.batch * c, 1, || (), |_, u| job.plane_direct(u / c, u % c));
        return;
    }
    let (units, work) =
        if channels_inner { (geom.batch * oh, ow * c * geom.taps()) } else { (geom.batch * c, oh * ow * geom.taps()) };
    let min_len = (TASK_WORK / work.max(1)).max(1);
    let path = if channels_inner { Path::Rows } else { Path::Planes };
    for_units(parallel, units, min_len, Kept::take, |scratch, u| {
        dispatch(isa, &job, path, u, scratch);
    });
}

/// Whether a channels-first geometry the blocked path can take runs faster on it than on the
/// plane paths. 3×3 stride-1 planes with padding 1 ([`Job::plane_s1_3x3`]) stay on the plane
/// path from 9 output columns with 16-lane vectors and from 17 with 8-lane ones. Measured on one
/// Zen 4 core (`tensorjit bench`, a lone depthwise convolution with a ReLU6, minimum of 400,
/// alternated), plane against blocked path, AVX-512: 32 channels at 112² 0.086 against 0.181 ms,
/// 144 at 56² 0.100 against 0.205, 192 at 28² 0.038 against 0.069, 576 at 14² 0.040 against
/// 0.058–0.079, at batch 8 1.13 against 2.05–2.10, 0.30 against 0.58–0.62 and 0.32 against 0.44;
/// 960 at 7² (one vector a row, three dependent chains) 0.128 against 0.028. AVX2 (forced):
/// 0.149 against 0.189 at 112², 0.147–0.180 against 0.218–0.225 at 56², a tie at 28² (0.080
/// both; 0.109–0.120 against 0.110–0.113 in a noisier hour), 0.080 against 0.073 at 14². The other geometries: all but stride-1 rows of 9 to 16 columns,
/// which one 16-lane vector of the plane path holds. Measured on MobileNetV2 at batch 8 (one
/// Zen 5 core, alternated, inside the model): blocked 3.23 against 3.39 ms at 96 channels 112²
/// stride 2, 0.35–0.42 against 0.36–0.43 on the 28² and 14² stride-2 layers. (One-op benchmarks
/// must use non-zero inputs: a zero-filled input is read from the kernel's shared zero page,
/// always in cache, which hid how memory-bound the plane path is.)
/// (`s1k3`: the geometry takes [`Job::plane_s1_3x3`] on the plane path.)
fn takes_blocks(geom: &ConvGeom, isa: FusedIsa, s1k3: bool) -> bool {
    let ow = geom.out_hw[1];
    if s1k3 {
        return ow < if isa == FusedIsa::Avx512 { 9 } else { 17 };
    }
    !(geom.stride[1] == 1 && (9..=16).contains(&ow))
}

/// The channel-blocked path of one ISA ([`Job::plane_block_avx512`]).
#[cfg(target_arch = "x86_64")]
type BlockFn<'j, 'a> = unsafe fn(&'j Job<'a>, usize, usize, std::ops::Range<usize>, &mut Scratch);

/// The 3×3 stride-1 plane path of one ISA ([`Job::plane_s1_3x3_avx512`]).
#[cfg(target_arch = "x86_64")]
type S3Fn<'j, 'a> = unsafe fn(&'j Job<'a>, usize, usize);

/// What a unit is.
#[derive(Clone, Copy)]
enum Path {
    /// An (image, output row), channels innermost.
    Rows,
    /// An (image, channel) plane.
    Planes,
    /// An (image, channel block) of the blocked path; the number of blocks per image.
    Blocked {
        /// Channel blocks per image.
        blocks: usize,
        /// Parts of each block's output rows (one unit each).
        parts: usize,
    },
}

/// A task's buffers, kept between its units.
#[derive(Default)]
struct Scratch {
    /// The padded phases of a plane, or the accumulators of a row.
    buf: Vec<f32>,
    /// (offset, weight) per tap of a plane.
    taps: Vec<(usize, f32)>,
    /// One padded input row (stride 2), before it is split into its two phases.
    row: Vec<f32>,
    /// Zeros only (never written): the input row that padding rows read (stride-1 planes).
    zeros: Vec<f32>,
    /// The channel-blocked path's places of a narrow run's pixels in its strip.
    places: blocked::Places,
    /// The channel-blocked path's weights, padded input strip and output block (no other path
    /// writes it), and the strip's address and layout when its padding was last written.
    blk: Vec<f32>,
    pad_key: [usize; 8],
}

/// Most task scratches one thread keeps, and the largest one it keeps.
const KEEP_MAX: usize = 4;
const KEEP_MAX_BYTES: usize = 8 << 20;

thread_local! {
    static KEPT: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
}

/// A task's [`Scratch`] from this thread's kept ones (or new), given back when dropped: a task
/// the thread pool splits off takes the buffers an earlier task on the same thread grew instead
/// of allocating them again.
struct Kept(Scratch);

impl Kept {
    fn take() -> Kept {
        Kept(KEPT.try_with(|p| p.borrow_mut().pop()).ok().flatten().unwrap_or_default())
    }
}

impl std::ops::Deref for Kept {
    type Target = Scratch;
    fn deref(&self) -> &Scratch {
        &self.0
    }
}

impl std::ops::DerefMut for Kept {
    fn deref_mut(&mut self) -> &mut Scratch {
        &mut self.0
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let s = &self.0;
        let bytes = (s.buf.capacity() + s.row.capacity() + s.zeros.capacity() + s.blk.capacity()) * 4
            + s.taps.capacity() * 16
            + s.places.bytes();
        if bytes <= KEEP_MAX_BYTES {
            let s = std::mem::take(&mut self.0);
            // During thread teardown the pool may be gone: the scratch is then simply freed.
            let _ = KEPT.try_with(|p| {
                if let Ok(mut p) = p.try_borrow_mut()
                    && p.len() < KEEP_MAX
                {
                    p.push(s);
                }
            });
        }
    }
}

/// One vector column of a stride-2 plane ([`Job::plane_s2`]).
struct Col {
    /// The input plane and a row of zeros (at least as wide as the input).
    plane: *const f32,
    zero: *const f32,
    /// Input column of lane 0 for kernel column 0 (negative in the padding).
    c0: isize,
    bias: f32,
    /// Output index of the vector's first column in output row 0, and its columns.
    at: usize,
    n: usize,
}

/// Everything a unit needs.
struct Job<'a> {
    geom: &'a ConvGeom,
    x: &'a [f32],
    w: &'a [f32],
    epi: &'a ConvEpilogue<'a>,
    out: OutPtr,
    lay: Phases,
    /// Whether planes read the input directly ([`Job::plane_s1`]): channels-first, stride and
    /// dilation 1, dense input rows, at most [`S1_MAX_KH`] kernel rows and [`S1_MAX_OW`] output
    /// columns.
    s1: bool,
    /// Whether planes take the 3×3 stride-1 path ([`Job::plane_s1_3x3`]): channels-first, 3×3
    /// kernel, stride and dilation 1, low padding 1, dense input rows, any width.
    s1k3: bool,
    /// Whether planes read the input directly through the stride-2 path ([`Job::plane_s2`]):
    /// channels-first, 3×3 kernel, stride 2, dilation 1, dense input rows, a non-empty input.
    s2: bool,
    /// Bytes a strip of the channel-blocked path may hold ([`blocked::STRIP_BYTES`]).
    strip_bytes: usize,
}

/// Vectors per strip of the 3×3 stride-1 plane path ([`Job::plane_s1_3x3`]): three output rows
/// of each are in progress, so two vectors keep six accumulator chains going.
const S3_STRIP: usize = 2;

/// One strip of [`Job::plane_s1_3x3`]: the plane, its weights (`[ty·3 + tx]`) and bias, the
/// output index of its first value, the strip's first column.
#[derive(Clone, Copy)]
struct Strip {
    plane: *const f32,
    k: [f32; 9],
    bias: f32,
    base: usize,
    ox0: usize,
}

/// The epilogues [`Job::plane_s1_3x3`] compiles into its strips (into dense output rows): none,
/// ReLU, a clamp from +0 to a positive bound (ReLU6); `S3_ANY`, anything else, goes through
/// [`Job::store_vec`] (whose calls, for a residual or another activation, spill the strip's
/// vectors around them).
const S3_NONE: u8 = 0;
const S3_RELU: u8 = 1;
const S3_CLAMP0: u8 = 2;
const S3_ANY: u8 = 3;

/// The lanes `lo..hi` of an `l`-lane vector whose lane 0 is column `start` that lie inside a row
/// of `width` columns (`lo == hi` when none does).
fn lanes_inside(start: isize, width: usize, l: usize) -> (usize, usize) {
    let lo = start.min(0).unsigned_abs().min(l);
    (lo, (width as isize - start).clamp(lo as isize, l as isize) as usize)
}

/// Whether `clamp` is from +0 to a positive bound (ReLU6), where a ReLU before it changes nothing.
pub(super) fn clamps_from_zero(clamp: Option<(f32, f32)>) -> bool {
    matches!(clamp, Some((lo, hi)) if lo == 0.0 && lo.is_sign_positive() && hi > 0.0)
}

/// Most kernel rows the direct stride-1 plane path takes (its row pointers live in an array).
const S1_MAX_KH: usize = 8;

/// Widest output plane the direct stride-1 path takes: on MobileNetV2's 7-, 14- and 28-wide
/// planes it ran 1.3-2.3× faster than the padded copy; at 56 and 112 no faster (Zen 3, 1 thread).
const S1_MAX_OW: usize = 32;

/// Runs unit `u` on the body compiled for `isa` (already [`FusedIsa::checked`]).
fn dispatch(isa: FusedIsa, job: &Job<'_>, path: Path, u: usize, scratch: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F, AVX2 and FMA.
        unsafe { unit_avx512(job, path, u, scratch) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
        unsafe { unit_avx2(job, path, u, scratch) };
        return;
    }
    let _ = isa;
    job.unit::<GENERIC>(path, u, scratch);
}

/// The unit body compiled with AVX-512F enabled (16-lane vectors).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn unit_avx512(job: &Job<'_>, path: Path, u: usize, scratch: &mut Scratch) {
    job.unit::<AVX512>(path, u, scratch);
}

/// The unit body compiled with AVX2+FMA enabled (8-lane vectors).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn unit_avx2(job: &Job<'_>, path: Path, u: usize, scratch: &mut Scratch) {
    job.unit::<AVX2>(path, u, scratch);
}

/// `a·b + c`, fused in the x86 bodies (compiled with FMA; elsewhere `mul_add` is a libm call).
#[inline(always)]
fn madd<const ISA: u8>(a: f32, b: f32, c: f32) -> f32 {
    if ISA == GENERIC { a * b + c } else { a.mul_add(b, c) }
}

/// The phase-split padded plane of the channels-first path (see the module doc).
#[derive(Clone, Copy, Debug)]
struct Phases {
    /// Strides (row, column): the number of phases per axis.
    s: [usize; 2],
    /// Rows and columns of each phase.
    ph: usize,
    pw: usize,
}

impl Phases {
    fn of(geom: &ConvGeom) -> Phases {
        let reach = |a: usize| (geom.kernel_hw[a].max(1) - 1) * geom.dilation[a] / geom.stride[a];
        Phases { s: geom.stride, ph: geom.out_hw[0] + reach(0), pw: geom.out_hw[1] + reach(1) }
    }

    /// Elements of the scratch: all phases plus the slack that the last vector of a row reads
    /// (into lanes it drops).
    fn len(&self) -> Option<usize> {
        let phases = self.s[0].checked_mul(self.s[1])?.checked_mul(self.ph)?.checked_mul(self.pw)?;
        phases.checked_add(SLACK)
    }

    /// Offset of tap (ty, tx) from the flat output index.
    fn offset(&self, geom: &ConvGeom, ty: usize, tx: usize) -> usize {
        let (dy, dx) = (ty * geom.dilation[0], tx * geom.dilation[1]);
        let phase = (dy % self.s[0]) * self.s[1] + dx % self.s[1];
        (phase * self.ph + dy / self.s[0]) * self.pw + dx / self.s[1]
    }
}

impl Job<'_> {
    #[inline(always)]
    fn unit<const ISA: u8>(&self, path: Path, u: usize, scratch: &mut Scratch) {
        match path {
            Path::Rows => {
                let oh = self.geom.out_hw[0];
                self.row::<ISA>(u / oh, u % oh, scratch);
            }
            Path::Planes => {
                let c = self.geom.out_channels;
                self.plane::<ISA>(u / c, u % c, scratch);
            }
            Path::Blocked { blocks, parts } => {
                // Unit u: part u % parts of block (u / parts) % blocks of image u / parts / blocks.
                let (img, cb, part) = (u / parts / blocks, u / parts % blocks, u % parts);
                let oh = self.geom.out_hw[0];
                let rows = part * oh / parts..(part + 1) * oh / parts;
                #[cfg(target_arch = "x86_64")]
                {
                    if ISA == AVX512 {
                        // SAFETY: the AVX512 body runs only on CPUs with AVX-512F (see
                        // `dispatch`); `depthwise_on` checked the blocked path's conditions.
                        // (Called through an opaque pointer: inlined here despite its
                        // `inline(never)`, the path shared the unit body's registers.)
                        let f: BlockFn<'_, '_> = std::hint::black_box(Self::plane_block_avx512);
                        // SAFETY: as above (`f` is `plane_block_avx512`).
                        return unsafe { f(self, img, cb, rows, scratch) };
                    }
                    if ISA == AVX2 {
                        // SAFETY: the AVX2 body runs only on CPUs with AVX2 and FMA.
                        let f: BlockFn<'_, '_> = std::hint::black_box(Self::plane_block_avx2);
                        // SAFETY: as above (`f` is `plane_block_avx2`).
                        return unsafe { f(self, img, cb, rows, scratch) };
                    }
                }
                // SAFETY: `Portable` needs no CPU feature.
                unsafe { self.plane_block::<Portable>(img, cb, rows, scratch) }
            }
        }
    }

    /// Copies plane `ch` of image `img` into `buf` split into its padded stride phases (`tmp`:
    /// room for a padded row).
    #[inline(always)]
    fn fill_phases<const ISA: u8>(&self, img: usize, ch: usize, buf: &mut [f32], tmp: &mut Vec<f32>) {
        let g = self.geom;
        let Phases { s: [sy, sx], ph, pw } = self.lay;
        let [sn, sc, sh, sw] = g.x_strides;
        let ([ih, iw], [py0, px0]) = (g.in_hw, g.pad);
        for py in 0..sy {
            for i in 0..ph {
                // Padded row i·sy + py is input row i·sy + py − pad.
                let iy = (i * sy + py).checked_sub(py0).filter(|&r| r < ih);
                let rows = &mut buf[(py * sx * ph + i) * pw..];
                let Some(iy) = iy else {
                    for px in 0..sx {
                        rows[px * ph * pw..][..pw].fill(0.0);
                    }
                    continue;
                };
                let line = &self.x[img * sn + ch * sc + iy * sh..];
                if sx == 2 {
                    // The padded row (2·pw positions), then its even and odd positions.
                    tmp.resize(2 * pw, 0.0);
                    let lo = px0.min(2 * pw);
                    let n = iw.min(2 * pw - lo);
                    tmp[..lo].fill(0.0);
                    copy_strided(&mut tmp[lo..lo + n], line, sw);
                    tmp[lo + n..].fill(0.0);
                    let (even, odd) = rows.split_at_mut(ph * pw);
                    deinterleave::<ISA, true>(tmp, &mut even[..pw], &mut odd[..pw]);
                    continue;
                }
                for px in 0..sx {
                    let dst = &mut rows[px * ph * pw..][..pw];
                    // Phase columns j whose input column j·sx + px − pad lies in 0..iw.
                    let lo = px0.saturating_sub(px).div_ceil(sx);
                    let hi = (iw + px0).saturating_sub(px).div_ceil(sx).min(pw);
                    if lo >= hi {
                        dst.fill(0.0);
                        continue;
                    }
                    dst[..lo].fill(0.0);
                    dst[hi..].fill(0.0);
                    copy_strided(&mut dst[lo..hi], &line[(lo * sx + px - px0) * sw..], sx * sw);
                }
            }
        }
    }

    /// Channel `ch` of image `img`, channels-first: the whole output plane, on the vectors of
    /// the body `ISA`.
    #[inline(always)]
    fn plane<const ISA: u8>(&self, img: usize, ch: usize, scratch: &mut Scratch) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m256, __m512};
            if self.s2 && ISA != GENERIC {
                // SAFETY: the AVX2 and AVX512 bodies run only on CPUs with AVX2 and FMA (see
                // `dispatch`; AVX-512 CPUs take the AVX2 vectors here); `s2` holds.
                return unsafe { self.plane_s2::<__m256>(img, ch, scratch) };
            }
            if self.s1k3 && ISA != GENERIC {
                // Called through an opaque pointer, compiled apart: inlined into the unit body,
                // the path's weights were spilled to the stack.
                let f: S3Fn<'_, '_> = if ISA == AVX512 {
                    std::hint::black_box(Self::plane_s1_3x3_avx512)
                } else {
                    std::hint::black_box(Self::plane_s1_3x3_avx2)
                };
                // SAFETY: the AVX2 and AVX512 bodies run only on CPUs with AVX2 and FMA, the
                // AVX512 one with AVX-512F too (see `dispatch`); `s1k3` holds.
                return unsafe { f(self, img, ch) };
            }
            if ISA == AVX512 {
                // SAFETY: the AVX512 body runs only on CPUs with AVX-512F (see `dispatch`).
                return unsafe { self.plane_on::<ISA, __m512>(img, ch, scratch) };
            }
            if ISA == AVX2 {
                // SAFETY: the AVX2 body runs only on CPUs with AVX2 and FMA (see `dispatch`).
                return unsafe { self.plane_on::<ISA, __m256>(img, ch, scratch) };
            }
        }
        if self.s2 {
            // SAFETY: `Portable` needs no CPU feature; `s2` holds.
            return unsafe { self.plane_s2::<Portable>(img, ch, scratch) };
        }
        // SAFETY: `Portable` needs no CPU feature.
        unsafe { self.plane_on::<ISA, Portable>(img, ch, scratch) }
    }

    /// [`Job::plane`] on the vectors `S`: the output rows are cut into vectors of `S::L`
    /// columns (the last one of a row partial); [`N`] adjacent vectors of a row form a register
    /// block, the rows' leftover vectors are gathered across rows into blocks.
    ///
    /// # Safety
    /// The CPU has `S`'s features.
    #[inline(always)]
    unsafe fn plane_on<const ISA: u8, S: Lanes>(&self, img: usize, ch: usize, scratch: &mut Scratch) {
        if self.s1k3 {
            // SAFETY: the caller's contract (features); `s1k3` was set for this geometry.
            return unsafe { self.plane_s1_3x3::<S>(img, ch) };
        }
        if self.s1 {
            // SAFETY: the caller's contract (features); `s1` was set for this geometry.
            return unsafe { self.plane_s1::<S>(img, ch, scratch) };
        }
        let g = self.geom;
        let ([kh, kw], [oh, ow], c) = (g.kernel_hw, g.out_hw, g.out_channels);
        let pw = self.lay.pw;
        let len = self.lay.len().expect("checked by `depthwise_on`");
        if scratch.buf.len() < len {
            scratch.buf.resize(len, 0.0);
        }
        let buf = &mut scratch.buf[..len];
        self.fill_phases::<ISA>(img, ch, buf, &mut scratch.row);
        let buf = &*buf;
        let taps = &mut scratch.taps;
        taps.clear();
        for ty in 0..kh {
            taps.extend((0..kw).map(|tx| (self.lay.offset(g, ty, tx), self.w[(ty * kw + tx) * c + ch])));
        }
        // The bounds of every load of `block`: the last vector of the last row starts at most at
        // (oh − 1)·pw + ow − 1 and reads S::L values past each tap offset.
        let reach = taps.iter().map(|t| t.0).max().unwrap_or(0) + S::L;
        assert!(oh == 0 || (oh - 1) * pw + ow - 1 + reach <= buf.len(), "depthwise scratch too short");
        // SAFETY: the CPU has S's features (the caller's contract).
        let fin = unsafe { Finish::<S>::of(self.epi) };
        // SAFETY: the CPU has S's features (the caller's contract).
        let bias = unsafe { S::splat(self.epi.bias.map_or(0.0, |b| b[ch])) };
        let [yn, yc, yh, yw] = g.y_strides;
        let base = img * yn + ch * yc;
        // Every block below: each start is at most (oh − 1)·pw + ow − 1, checked above with the
        // reach of the taps against `buf`; the CPU has S's features; `at`/`ns` are runs of this
        // unit's plane.
        let run = N * S::L;
        // Vectors left over by the rows (start in the scratch, output index, valid lanes),
        // gathered across rows until N make a block.
        let (mut qs, mut at, mut ns) = ([0; N], [0; N], [0; N]);
        let mut k = 0;
        for oy in 0..oh {
            let mut ox = 0;
            // Whole blocks inside the row: N adjacent full vectors.
            while ow - ox >= run {
                let (q0, a0) = (oy * pw + ox, base + oy * yh + ox * yw);
                let qs = std::array::from_fn(|v| q0 + v * S::L);
                let at = std::array::from_fn(|v| a0 + v * S::L * yw);
                // SAFETY: see above.
                unsafe { self.store_block(&fin, block::<S>(buf, &qs, taps, bias), &at, &[S::L; N]) };
                ox += run;
            }
            while ox < ow {
                (qs[k], at[k], ns[k]) = (oy * pw + ox, base + oy * yh + ox * yw, (ow - ox).min(S::L));
                (k, ox) = (k + 1, ox + S::L);
                if k == N {
                    // SAFETY: see above.
                    unsafe { self.store_block(&fin, block::<S>(buf, &qs, taps, bias), &at, &ns) };
                    k = 0;
                }
            }
        }
        if k > 0 {
            // The last block: the unused vectors repeat the first start and store nothing.
            for v in k..N {
                (qs[v], ns[v]) = (qs[0], 0);
            }
            // SAFETY: see above.
            unsafe { self.store_block(&fin, block::<S>(buf, &qs, taps, bias), &at, &ns) };
        }
    }

    /// [`Job::plane_on`] for stride 1 and dilation 1 over dense input rows, without the padded
    /// copy: a register block is [`N`] output rows × one vector of columns. Each tap reads the
    /// input row straight from the plane, or a row of zeros where it falls into the vertical
    /// padding; the vectors that reach into the horizontal padding (or past the row) load only
    /// their lanes inside the row, the others are zero. Rows past the plane's end are computed
    /// from valid or zero rows and not stored.
    ///
    /// # Safety
    /// The CPU has `S`'s features; `self.s1` holds.
    #[inline(always)]
    unsafe fn plane_s1<S: Lanes>(&self, img: usize, ch: usize, scratch: &mut Scratch) {
        let g = self.geom;
        let ([kh, kw], [oh, ow], [ih, iw], [py, px], c) = (g.kernel_hw, g.out_hw, g.in_hw, g.pad, g.out_channels);
        let [sn, sc, sh, _] = g.x_strides;
        // Zero row: lanes at columns −px − S::L .. iw + S::L of `zero` are inside `zeros`.
        let zlen = iw + px + 2 * S::L;
        if scratch.zeros.len() < zlen {
            scratch.zeros.resize(zlen, 0.0);
        }
        let zero = scratch.zeros[S::L + px..].as_ptr();
        let plane = self.x[img * sn + ch * sc..].as_ptr();
        let taps = &mut scratch.taps;
        taps.clear();
        taps.extend((0..kh * kw).map(|t| (t, self.w[t * c + ch])));
        // SAFETY: the CPU has S's features (the caller's contract).
        let fin = unsafe { Finish::<S>::of(self.epi) };
        // SAFETY: as above.
        let bias = unsafe { S::splat(self.epi.bias.map_or(0.0, |b| b[ch])) };
        let [yn, yc, yh, yw] = g.y_strides;
        let base = img * yn + ch * yc;
        for oy0 in (0..oh).step_by(N) {
            // Input row of block row i and kernel row 0: oy0 + i − py, the zero row outside.
            let rows: [*const f32; N + S1_MAX_KH] = std::array::from_fn(|i| {
                match (oy0 + i).checked_sub(py).filter(|&iy| iy < ih) {
                    // SAFETY: `validate` checked the plane's extent: row iy < ih starts inside `x`.
                    Some(iy) => unsafe { plane.add(iy * sh) },
                    None => zero,
                }
            });
            let ns: [usize; N] = std::array::from_fn(|r| if oy0 + r < oh { 1 } else { 0 });
            for ox0 in (0..ow).step_by(S::L) {
                let n = S::L.min(ow - ox0);
                let mut acc = [bias; N];
                for tx in 0..kw {
                    // Input column of lane 0; the lanes inside the row are lo..hi.
                    let ix0 = (ox0 + tx) as isize - px as isize;
                    let (lo, hi) = lanes_inside(ix0, iw, S::L);
                    if lo == hi {
                        continue;
                    }
                    let full = lo == 0 && hi == S::L;
                    // SAFETY: the caller's contract (features); every lane read (lo..hi) is a
                    // column inside its row, of the plane or of `zeros`; masked lanes are not read.
                    unsafe {
                        let m = S::mask(lo, hi);
                        for ty in 0..kh {
                            let kv = S::splat(taps[ty * kw + tx].1);
                            for (r, a) in acc.iter_mut().enumerate() {
                                let p = rows[r + ty].wrapping_offset(ix0);
                                let v = if full { S::load(p) } else { S::load_masked(p, m) };
                                *a = v.fmadd(kv, *a);
                            }
                        }
                    }
                }
                let at = std::array::from_fn(|r| base + (oy0 + r).min(oh - 1) * yh + ox0 * yw);
                // SAFETY: the stored rows (ns > 0) are rows oy0 + r < oh of this unit's plane,
                // n ≤ S::L columns from ox0 < ow; the caller's contract (features).
                unsafe { self.store_block(&fin, acc, &at, &ns.map(|v| v * n)) };
            }
        }
    }

    /// [`Job::plane_on`] for a 3×3 kernel with stride and dilation 1 and low padding 1 (MobileNet's
    /// depthwise layers) over dense input rows, without the padded copy: the plane's columns in
    /// strips of [`S3_STRIP`] vectors (one at the end of an odd count), each strip down the whole
    /// plane ([`Job::strip_s1_3x3`]). Per input row and strip vector: three loads (the row's
    /// columns under kernel columns 0, 1, 2: masked to the lanes inside the row at the plane's
    /// edges) and nine multiply-adds into three output rows, in `3·S3_STRIP` independent chains,
    /// with no reload of a weight or an accumulator (the `N`-row blocks this path had before kept
    /// their weights on the stack: 0.19 ms for 32 channels at 112² on one Zen 4 core in session
    /// 59, 0.076–0.086 now; see [`takes_blocks`]).
    ///
    /// # Safety
    /// The CPU has `S`'s features; `self.s1k3` holds.
    #[inline(always)]
    unsafe fn plane_s1_3x3<S: Lanes>(&self, img: usize, ch: usize) {
        let g = self.geom;
        let ([oh, ow], c) = (g.out_hw, g.out_channels);
        let [sn, sc, ..] = g.x_strides;
        let plane = self.x[img * sn + ch * sc..].as_ptr();
        let bias = self.epi.bias.map_or(0.0, |b| b[ch]);
        let k: [f32; 9] = std::array::from_fn(|t| self.w[t * c + ch]);
        if oh == 0 {
            return;
        }
        let [yn, yc, ..] = g.y_strides;
        let base = img * yn + ch * yc;
        let vectors = ow.div_ceil(S::L);
        // The epilogue as a constant of the strip's code (see `S3_ANY`).
        let epi = if g.y_strides[3] != 1 {
            S3_ANY
        } else {
            // SAFETY: the CPU has S's features (the caller's contract).
            match unsafe { Finish::<S>::of(self.epi) } {
                Finish::Registers { relu: false, clamp: None } => S3_NONE,
                Finish::Registers { relu: true, clamp: None } => S3_RELU,
                Finish::Registers { .. } if clamps_from_zero(self.epi.clamp) => S3_CLAMP0,
                _ => S3_ANY,
            }
        };
        let mut v = 0;
        while v < vectors {
            let st = Strip { plane, k, bias, base, ox0: v * S::L };
            // SAFETY: the caller's contract; the strip's vectors start inside the output rows.
            unsafe {
                if vectors - v >= S3_STRIP {
                    self.strip_s1_3x3::<S, S3_STRIP>(epi, &st);
                    v += S3_STRIP;
                } else {
                    self.strip_s1_3x3::<S, 1>(epi, &st);
                    v += 1;
                }
            }
        }
    }

    /// [`Job::plane_s1_3x3`] on AVX-512 vectors, a function of its own (see [`Job::plane`]).
    ///
    /// # Safety
    /// As [`Job::plane_s1_3x3`], on a CPU with AVX-512F, AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline(never)]
    unsafe fn plane_s1_3x3_avx512(&self, img: usize, ch: usize) {
        // SAFETY: the caller's contract.
        unsafe { self.plane_s1_3x3::<std::arch::x86_64::__m512>(img, ch) }
    }

    /// [`Job::plane_s1_3x3`] on AVX2 vectors, a function of its own (see [`Job::plane`]).
    ///
    /// # Safety
    /// As [`Job::plane_s1_3x3`], on a CPU with AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline(never)]
    unsafe fn plane_s1_3x3_avx2(&self, img: usize, ch: usize) {
        // SAFETY: the caller's contract.
        unsafe { self.plane_s1_3x3::<std::arch::x86_64::__m256>(img, ch) }
    }

    /// One strip of [`Job::plane_s1_3x3`]: `W` vectors of output columns from `ox0`, down the
    /// whole plane. Input row `iy` is loaded once, as three shifted vectors per strip vector,
    /// and feeds the three output rows that read it: kernel row 2 finishes output row `iy − 1`
    /// (stored at once), kernel row 1 continues row `iy`, kernel row 0 starts row `iy + 1`.
    /// Rows past the input (bottom padding) add nothing; lanes in the horizontal padding or
    /// past the row are loaded as zeros.
    ///
    /// `epi`: the epilogue (`S3_NONE` …), made a constant of the strip's code here.
    ///
    /// # Safety
    /// The CPU has `S`'s features; `self.s1k3` holds; `ox0 + (W − 1)·S::L < ow`; `epi` is the
    /// one [`Job::plane_s1_3x3`] chose for this convolution.
    #[inline(always)]
    unsafe fn strip_s1_3x3<S: Lanes, const W: usize>(&self, epi: u8, st: &Strip) {
        // SAFETY: the caller's contract.
        unsafe {
            match epi {
                S3_NONE => self.strip_masks::<S, W, S3_NONE>(st),
                S3_RELU => self.strip_masks::<S, W, S3_RELU>(st),
                S3_CLAMP0 => self.strip_masks::<S, W, S3_CLAMP0>(st),
                _ => self.strip_masks::<S, W, S3_ANY>(st),
            }
        }
    }

    /// [`Job::strip_s1_3x3`] with its epilogue `EPI`: the loads' lane masks, and whether any is
    /// partial.
    ///
    /// # Safety
    /// As [`Job::strip_s1_3x3`], with `EPI` for `epi`.
    #[inline(always)]
    unsafe fn strip_masks<S: Lanes, const W: usize, const EPI: u8>(&self, st: &Strip) {
        let (iw, ox0) = (self.geom.in_hw[1], st.ox0);
        // Kernel column tx of vector j reads input columns ox0 + j·L + tx − 1 ..: the lanes lo..hi
        // inside the row.
        let lanes: [[(usize, usize); 3]; W] = std::array::from_fn(|j| {
            std::array::from_fn(|tx| lanes_inside((ox0 + j * S::L + tx) as isize - 1, iw, S::L))
        });
        // SAFETY: the caller's contract.
        unsafe {
            // (Loops, not `map` closures: those would not inline the mask intrinsics.)
            let mut masks = [[S::mask(0, S::L); 3]; W];
            if lanes.iter().flatten().all(|&(lo, hi)| lo == 0 && hi == S::L) {
                self.strip_rows::<S, W, true, EPI>(st, masks);
            } else {
                for (m, l) in masks.iter_mut().zip(&lanes) {
                    for (m, &(lo, hi)) in m.iter_mut().zip(l) {
                        *m = S::mask(lo, hi);
                    }
                }
                self.strip_rows::<S, W, false, EPI>(st, masks);
            }
        }
    }

    /// The rows of [`Job::strip_s1_3x3`]; `FULL`: every load is whole (`masks` unused).
    ///
    /// # Safety
    /// As [`Job::strip_s1_3x3`]; `masks` are its lanes inside the row.
    #[inline(always)]
    unsafe fn strip_rows<S: Lanes, const W: usize, const FULL: bool, const EPI: u8>(
        &self,
        st: &Strip,
        masks: [[S::Mask; 3]; W],
    ) {
        let Strip { plane, k, bias, base, ox0 } = *st;
        let g = self.geom;
        let ([oh, ow], ih) = (g.out_hw, g.in_hw[0]);
        let sh = g.x_strides[2];
        let [_, _, yh, yw] = g.y_strides;
        let ns: [usize; W] = std::array::from_fn(|j| S::L.min(ow - (ox0 + j * S::L)));
        // Vectors are made in this body, not in closures (which do not inherit its target
        // features, so the intrinsics would not be inlined).
        // SAFETY: the CPU has S's features (the caller's contract).
        let (bias, fin) = unsafe { (S::splat(bias), Finish::<S>::of(self.epi)) };
        let fin = &fin;
        let mut kv = [bias; 9];
        for (v, &w) in kv.iter_mut().zip(&k) {
            // SAFETY: as above.
            *v = unsafe { S::splat(w) };
        }
        let k = kv;
        let at = |oy: usize| base + oy * yh + ox0 * yw;
        // SAFETY: every row read is a row iy < ih (`validate` checked the plane's extent); the
        // stored rows are rows oy < oh of this unit's plane, ns[j] ≤ S::L columns from
        // ox0 + j·L < ow; the caller's contract (features, masks).
        unsafe {
            // Output rows iy − 1 and iy, in progress.
            let (mut a, mut b) = ([bias; W], [bias; W]);
            let mut n = [bias; W];
            // Step 0: rows 0 (kernel row 1) and 1 (kernel row 0); row −1 is padding.
            if ih > 0 {
                self.s3_row::<S, W, FULL>(plane.wrapping_add(ox0), &k, &masks, &mut a, &mut b, &mut n);
            }
            (a, b) = (b, n);
            // Steps 1 ..= oh: step iy finishes output row iy − 1.
            let inside = ih.min(oh + 1);
            for iy in 1..inside {
                n = [bias; W];
                self.s3_row::<S, W, FULL>(plane.wrapping_add(iy * sh + ox0), &k, &masks, &mut a, &mut b, &mut n);
                self.s3_store::<S, W, FULL, EPI>(fin, &a, at(iy - 1), &ns);
                (a, b) = (b, n);
            }
            // The rows in the bottom padding.
            for iy in inside.max(1)..=oh {
                self.s3_store::<S, W, FULL, EPI>(fin, &a, at(iy - 1), &ns);
                (a, b) = (b, [bias; W]);
            }
        }
    }

    /// One input row of [`Job::strip_rows`] (at `start`, the strip's first column) into
    /// output rows `iy − 1` (`a`, kernel row 2), `iy` (`b`, row 1) and `iy + 1` (`n`, row 0).
    ///
    /// # Safety
    /// The CPU has `S`'s features; the row's columns under the strip (lanes `masks`, all when
    /// `FULL`, one column to each side) are inside `x`.
    #[inline(always)]
    unsafe fn s3_row<S: Lanes, const W: usize, const FULL: bool>(
        &self,
        start: *const f32,
        k: &[S; 9],
        masks: &[[S::Mask; 3]; W],
        a: &mut [S; W],
        b: &mut [S; W],
        n: &mut [S; W],
    ) {
        for j in 0..W {
            // Column ox0 + j·L − 1 of the row (before the row when it is −1: lane 0 is then
            // masked).
            let p = start.wrapping_add(j * S::L).wrapping_sub(1);
            // SAFETY: the caller's contract.
            unsafe {
                let x: [S; 3] = if FULL {
                    [S::load(p), S::load(p.wrapping_add(1)), S::load(p.wrapping_add(2))]
                } else {
                    [
                        S::load_masked(p, masks[j][0]),
                        S::load_masked(p.wrapping_add(1), masks[j][1]),
                        S::load_masked(p.wrapping_add(2), masks[j][2]),
                    ]
                };
                for (tx, xv) in x.into_iter().enumerate() {
                    a[j] = xv.fmadd(k[6 + tx], a[j]);
                    b[j] = xv.fmadd(k[3 + tx], b[j]);
                    n[j] = xv.fmadd(k[tx], n[j]);
                }
            }
        }
    }

    /// Stores the `W` vectors of a finished output row of [`Job::strip_rows`] at `at` (`ns`
    /// lanes each, all of them when `FULL`) with the epilogue `EPI` applied: in registers into
    /// dense output rows, or through [`Job::store_vec`] (`S3_ANY`).
    ///
    /// # Safety
    /// The CPU has `S`'s features; the runs lie in the plane this unit owns; `EPI` is the one
    /// [`Job::plane_s1_3x3`] chose for this convolution.
    #[inline(always)]
    unsafe fn s3_store<S: Lanes, const W: usize, const FULL: bool, const EPI: u8>(
        &self,
        fin: &Finish<S>,
        a: &[S; W],
        at: usize,
        ns: &[usize; W],
    ) {
        let yw = self.geom.y_strides[3];
        for j in 0..W {
            // SAFETY: the caller's contract; outside `S3_ANY` the output rows are dense (yw = 1).
            unsafe {
                if EPI == S3_ANY {
                    self.store_vec(fin, a[j], at + j * S::L * yw, ns[j]);
                    continue;
                }
                let v = match (EPI, fin) {
                    (S3_RELU, _) => a[j].relu(),
                    (S3_CLAMP0, Finish::Registers { clamp: Some((_, hi, ..)), .. }) => a[j].clamp_from_zero(*hi),
                    _ => a[j],
                };
                let p = self.out.0.add(at + j * S::L);
                if FULL { v.store(p) } else { v.store_first(p, ns[j]) }
            }
        }
    }

    /// [`Job::plane_on`] for a 3×3 kernel with stride 2 and dilation 1 over dense input rows,
    /// without the padded copy: one vector of output columns at a time, down the plane. Each
    /// input row under the vector is read by four loads, at the input columns of kernel columns
    /// 0 and 2 and a vector past each; [`Pairs`] splits them into the even and odd columns, so
    /// that each kernel column's inputs are one vector (in the lane order of the type, restored
    /// before the store). The three vectors of an input row serve the two output rows that read
    /// it (kernel rows 2 and 0). Rows in the vertical padding read a row of zeros; the vectors
    /// that reach into the horizontal padding or past the row load only their lanes inside it.
    ///
    /// # Safety
    /// The CPU has `S`'s features; `self.s2` holds.
    #[inline(always)]
    unsafe fn plane_s2<S: Pairs>(&self, img: usize, ch: usize, scratch: &mut Scratch) {
        let g = self.geom;
        let (ow, iw, c) = (g.out_hw[1], g.in_hw[1], g.out_channels);
        let [sn, sc, ..] = g.x_strides;
        // Zero row: only its columns 0..iw are read.
        if scratch.zeros.len() < iw {
            scratch.zeros.resize(iw, 0.0);
        }
        let zero = scratch.zeros.as_ptr();
        let plane = self.x[img * sn + ch * sc..].as_ptr();
        // The vector columns walk down the plane one after another: ask for the whole plane
        // first, row by row, so that the first column does not wait on each row in turn.
        let sh = g.x_strides[2];
        for iy in 0..g.in_hw[0] {
            for ix in (0..iw).step_by(16).chain([iw.saturating_sub(1)]) {
                // SAFETY: row iy < ih, column ix < iw of the plane (`validate` checked its
                // extent; `s2` excludes empty inputs); a prefetch has no effect on the values
                // read.
                unsafe { S::prefetch(plane.add(iy * sh + ix)) };
            }
        }
        // SAFETY: the CPU has S's features (the caller's contract).
        let mut k = [unsafe { S::splat(0.0) }; 9];
        for (t, kt) in k.iter_mut().enumerate() {
            // SAFETY: as above.
            *kt = unsafe { S::splat(self.w[t * c + ch]) };
        }
        // SAFETY: as above.
        let fin = unsafe { Finish::<S>::of(self.epi) };
        let bias = self.epi.bias.map_or(0.0, |b| b[ch]);
        let [yn, yc, _, yw] = g.y_strides;
        let base = img * yn + ch * yc;
        for ox0 in (0..ow).step_by(S::L) {
            let n = S::L.min(ow - ox0);
            // Input column of lane 0 of each load: kernel column 0 and 2, and a vector on.
            let c0 = (2 * ox0) as isize - g.pad[1] as isize;
            let starts = [c0, c0 + S::L as isize, c0 + 2, c0 + 2 + S::L as isize];
            // The lanes lo..hi of each load whose columns lie inside the row.
            let lanes = starts.map(|s| lanes_inside(s, iw, S::L));
            let col = Col { plane, zero, c0, bias, at: base + ox0 * yw, n };
            // SAFETY: the caller's contract (features, `s2`); the loads are unmasked only when
            // every lane's column lies inside the row, else masked to those that do.
            unsafe {
                if lanes.iter().all(|&(lo, hi)| lo == 0 && hi == S::L) {
                    self.s2_column::<S, false>(&col, &[S::mask(0, S::L); 4], &k, &fin);
                } else {
                    let [a, b, c, d] = lanes;
                    let masks = [S::mask(a.0, a.1), S::mask(b.0, b.1), S::mask(c.0, c.1), S::mask(d.0, d.1)];
                    self.s2_column::<S, true>(&col, &masks, &k, &fin);
                }
            }
        }
    }

    /// The inputs of kernel columns 0, 1 and 2 under `col`'s vector in padded row `i` of
    /// [`Job::s2_column`] (a method, not a closure: a closure is not compiled with the body's
    /// CPU features, and its vector intrinsics would then be calls).
    ///
    /// # Safety
    /// As [`Job::s2_column`].
    #[inline(always)]
    unsafe fn s2_taps<S: Pairs, const MASKED: bool>(&self, col: &Col, masks: &[S::Mask; 4], i: usize) -> (S, S, S) {
        let g = self.geom;
        let (ih, py, sh) = (g.in_hw[0], g.pad[0], g.x_strides[2]);
        // Input row i − py of the plane, or the zero row in the padding.
        let row = match i.checked_sub(py).filter(|&iy| iy < ih) {
            // SAFETY: `validate` checked the plane's extent: row iy < ih starts inside `x`.
            Some(iy) => unsafe { col.plane.add(iy * sh) },
            None => col.zero,
        };
        let p = row.wrapping_offset(col.c0);
        // SAFETY: the caller's contract: the lanes loaded (the mask's, or all) are columns
        // inside row i − py of the plane or inside the zero row; the CPU has S's features.
        unsafe {
            let (q0, q1, q2, q3) = (p, p.wrapping_add(S::L), p.wrapping_add(2), p.wrapping_add(2 + S::L));
            let (l0, l1, l2, l3) = if MASKED {
                (
                    S::load_masked(q0, masks[0]),
                    S::load_masked(q1, masks[1]),
                    S::load_masked(q2, masks[2]),
                    S::load_masked(q3, masks[3]),
                )
            } else {
                (S::load(q0), S::load(q1), S::load(q2), S::load(q3))
            };
            let (e0, o1) = S::split(l0, l1);
            (e0, o1, S::split_even(l2, l3))
        }
    }

    /// One vector column of [`Job::plane_s2`] down the whole plane; `MASKED`: loads through
    /// `masks` (one per load of a row, see there) instead of whole vectors.
    ///
    /// # Safety
    /// The CPU has `S`'s features; `self.s2` holds; `col` and `masks` are as `plane_s2` makes
    /// them: every lane a mask holds (all when not `MASKED`) is a column inside the row.
    #[inline(always)]
    unsafe fn s2_column<S: Pairs, const MASKED: bool>(
        &self,
        col: &Col,
        masks: &[S::Mask; 4],
        k: &[S; 9],
        fin: &Finish<S>,
    ) {
        let g = self.geom;
        let oh = g.out_hw[0];
        let yh = g.y_strides[2];
        // SAFETY: the caller's contract (features).
        let (bias, zero) = unsafe { (S::splat(col.bias), S::splat(0.0)) };
        // SAFETY: the caller's contract (features, `s2`, `col` and `masks` as `plane_s2` makes
        // them), which `s2_taps` shares.
        let mut top = unsafe { self.s2_taps::<S, MASKED>(col, masks, 0) };
        for oy in 0..oh {
            // SAFETY: as above.
            let (mid, bot) = unsafe {
                (self.s2_taps::<S, MASKED>(col, masks, 2 * oy + 1), self.s2_taps::<S, MASKED>(col, masks, 2 * oy + 2))
            };
            // SAFETY: the caller's contract (features); output row oy < oh, columns from the
            // vector's first on, `n` of them: in this unit's plane (checked by `validate`).
            unsafe {
                // One chain per kernel row, summed at the end.
                let a = top.2.fmadd(k[2], top.1.fmadd(k[1], top.0.fmadd(k[0], bias)));
                let b = mid.2.fmadd(k[5], mid.1.fmadd(k[4], mid.0.fmadd(k[3], zero)));
                let c = bot.2.fmadd(k[8], bot.1.fmadd(k[7], bot.0.fmadd(k[6], zero)));
                self.store_vec(fin, a.add(b).add(c).restore(), col.at + oy * yh, col.n);
            }
            top = bot;
        }
    }

    /// Stores a block's vectors: `ns[v]` lanes of `acc[v]` at output `at[v]` (columns `yw`
    /// apart), with the epilogue in registers when [`Finish`] allows it.
    ///
    /// # Safety
    /// The CPU has `S`'s features; each run lies in the plane this unit owns.
    #[inline(always)]
    unsafe fn store_block<S: Lanes>(&self, fin: &Finish<S>, acc: [S; N], at: &[usize; N], ns: &[usize; N]) {
        let yw = self.geom.y_strides[3];
        let Finish::Registers { relu, clamp } = fin else {
            let mut tmp = [0.0; N * SLACK];
            for (v, a) in acc.iter().enumerate() {
                // SAFETY: `tmp` holds N·SLACK ≥ N·S::L values; the caller guarantees the features.
                unsafe { a.store(tmp.as_mut_ptr().add(v * S::L)) };
            }
            if self.epi.residual.is_none() {
                self.epi.activate_slice(&mut tmp);
            }
            for v in 0..N {
                if ns[v] > 0 {
                    self.store(&mut tmp[v * S::L..][..ns[v]], at[v], yw);
                }
            }
            return;
        };
        for v in 0..N {
            if ns[v] > 0 {
                // SAFETY: the caller's contract.
                unsafe { self.store_registers(acc[v], *relu, *clamp, at[v], ns[v]) };
            }
        }
    }

    /// Stores the first `n` (1 ..= `S::L`) lanes of `a` at output `at` (columns `yw` apart) with
    /// the epilogue applied.
    ///
    /// # Safety
    /// The CPU has `S`'s features; the run lies in the plane this unit owns.
    #[inline(always)]
    unsafe fn store_vec<S: Lanes>(&self, fin: &Finish<S>, a: S, at: usize, n: usize) {
        match fin {
            // SAFETY: the caller's contract.
            Finish::Registers { relu, clamp } => unsafe { self.store_registers(a, *relu, *clamp, at, n) },
            Finish::Spill => {
                let mut tmp = [0.0; SLACK];
                // SAFETY: `tmp` holds SLACK ≥ S::L values; the caller guarantees the features.
                unsafe { a.store(tmp.as_mut_ptr()) };
                let vals = &mut tmp[..n];
                if self.epi.residual.is_none() {
                    self.epi.activate_slice(vals);
                }
                self.store(vals, at, self.geom.y_strides[3]);
            }
        }
    }

    /// [`Job::store_vec`] with the epilogue of [`Finish::Registers`].
    ///
    /// # Safety
    /// As for [`Job::store_vec`].
    #[inline(always)]
    unsafe fn store_registers<S: Lanes>(
        &self,
        a: S,
        relu: bool,
        clamp: Option<(S, S, bool, bool)>,
        at: usize,
        n: usize,
    ) {
        let yw = self.geom.y_strides[3];
        // SAFETY: the caller guarantees the features; the output run `at`, n values `yw` apart,
        // was checked by `validate` to lie in the output and belongs to this unit.
        unsafe {
            let a = a.relu_clamp(relu, clamp);
            if yw == 1 {
                a.store_first(self.out.0.add(at), n);
            } else {
                let mut tmp = [0.0; SLACK];
                a.store(tmp.as_mut_ptr());
                for (j, &t) in tmp[..n].iter().enumerate() {
                    self.out.write(at + j * yw, t);
                }
            }
        }
    }

    /// Channel `ch` of image `img` by a direct loop over the in-bounds taps of each output.
    fn plane_direct(&self, img: usize, ch: usize) {
        let g = self.geom;
        let ([kh, kw], [oh, ow], c) = (g.kernel_hw, g.out_hw, g.out_channels);
        let [sn, sc, sh, sw] = g.x_strides;
        let [yn, yc, yh, yw] = g.y_strides;
        for oy in 0..oh {
            for ox in 0..ow {
                let mut v = [self.epi.bias.map_or(0.0, |b| b[ch])];
                for ty in 0..kh {
                    let Some(iy) = g.src(0, oy, ty) else { continue };
                    for tx in 0..kw {
                        if let Some(ix) = g.src(1, ox, tx) {
                            v[0] += self.x[img * sn + ch * sc + iy * sh + ix * sw] * self.w[(ty * kw + tx) * c + ch];
                        }
                    }
                }
                if self.epi.residual.is_none() {
                    self.epi.activate_slice(&mut v);
                }
                self.store(&mut v, img * yn + ch * yc + oy * yh + ox * yw, 1);
            }
        }
    }

    /// Output row `oy` of image `img`, channels innermost.
    #[inline(always)]
    fn row<const ISA: u8>(&self, img: usize, oy: usize, scratch: &mut Scratch) {
        let g = self.geom;
        let [sn, _, sh, sw] = g.x_strides;
        let ([kh, kw], ow, c, s) = (g.kernel_hw, g.out_hw[1], g.out_channels, g.stride[1]);
        let acc = &mut scratch.buf;
        acc.clear();
        match self.epi.bias {
            Some(b) => (0..ow).for_each(|_| acc.extend_from_slice(b)),
            None => acc.resize(ow * c, 0.0),
        }
        for ty in 0..kh {
            let Some(iy) = g.src(0, oy, ty) else { continue };
            for tx in 0..kw {
                let wt = &self.w[(ty * kw + tx) * c..][..c];
                let (lo, hi, first) = g.inside_cols(tx);
                for ox in lo..hi {
                    let at = img * sn + iy * sh + (first + (ox - lo) * s) * sw;
                    for ((a, &v), &k) in acc[ox * c..][..c].iter_mut().zip(&self.x[at..][..c]).zip(wt) {
                        *a = madd::<ISA>(v, k, *a);
                    }
                }
            }
        }
        if self.epi.residual.is_none() {
            self.epi.activate_slice(acc);
        }
        let [yn, yc, yh, yw] = g.y_strides;
        for (ox, run) in acc.chunks_exact_mut(c).enumerate() {
            self.store(run, img * yn + oy * yh + ox * yw, yc);
        }
    }

    /// Writes `vals` to the output elements `at, at + step, …`, first adding the residual and
    /// applying the activation and clamp if the residual is there (else the caller has applied
    /// them).
    #[inline(always)]
    fn store(&self, vals: &mut [f32], at: usize, step: usize) {
        if let Some(r) = self.epi.residual {
            let n = vals.len();
            if step == 1 {
                for (v, &r) in vals.iter_mut().zip(&r[at..at + n]) {
                    *v += r;
                }
            } else {
                for (j, v) in vals.iter_mut().enumerate() {
                    *v += r[at + j * step];
                }
            }
            self.epi.activate_slice(vals);
        }
        if step == 1 {
            // SAFETY: `validate` checked that every output element (image, channel, row,
            // column) lies inside the output, and these are `vals.len()` consecutive ones of one
            // unit: this task alone owns its (image, channel) plane or (image, row).
            let dst = unsafe { std::slice::from_raw_parts_mut(self.out.0.add(at), vals.len()) };
            dst.copy_from_slice(vals);
        } else {
            for (j, &v) in vals.iter().enumerate() {
                // SAFETY: as above, element by element.
                unsafe { self.out.write(at + j * step, v) };
            }
        }
    }
}

/// Sums of the [`N`] vectors of outputs that start at the scratch positions `qs`:
/// `bias + Σ k·buf[q + off ..][..S::L]` over the taps (offset, weight), in registers.
///
/// # Safety
/// The CPU has `S`'s features; `q + off + S::L ≤ buf.len()` for every start and tap.
#[inline(always)]
unsafe fn block<S: Lanes>(buf: &[f32], qs: &[usize; N], taps: &[(usize, f32)], bias: S) -> [S; N] {
    let mut acc = [bias; N];
    let p = buf.as_ptr();
    for &(off, k) in taps {
        // SAFETY: the caller's contract (features, and every load inside `buf`).
        unsafe {
            let kv = S::splat(k);
            for (a, &q) in acc.iter_mut().zip(qs) {
                *a = S::load(p.add(q + off)).fmadd(kv, *a);
            }
        }
    }
    acc
}

/// How the plane path finishes a block before its stores.
enum Finish<S> {
    /// In registers: ReLU or nothing, then the clamp (bounds as vectors, and whether each bound
    /// is ±0).
    Registers { relu: bool, clamp: Option<(S, S, bool, bool)> },
    /// Through a copy of the block and the epilogue's slice functions: a residual, another
    /// activation, or a NaN bound.
    Spill,
}

impl<S: Lanes> Finish<S> {
    /// # Safety
    /// The CPU has `S`'s features.
    #[inline(always)]
    unsafe fn of(epi: &ConvEpilogue<'_>) -> Finish<S> {
        let relu = match epi.activation {
            Activation::None => false,
            Activation::Relu => true,
            _ => return Finish::Spill,
        };
        let clamp = match epi.clamp {
            _ if epi.residual.is_some() => return Finish::Spill,
            Some((lo, hi)) if lo.is_nan() || hi.is_nan() => return Finish::Spill,
            // SAFETY: the caller's contract.
            Some((lo, hi)) => Some(unsafe { (S::splat(lo), S::splat(hi), lo == 0.0, hi == 0.0) }),
            None => None,
        };
        Finish::Registers { relu, clamp }
    }
}

/// Runs `$body` for `$i` = 0..16, each copy written out, so that every `$i` is a constant: an
/// array of vectors read by a loop of variable length stays in memory (its copies become calls
/// to memcpy), one read at constant indices stays in registers. (A macro, not a function taking
/// a closure: the closure would be compiled apart, without the caller's target features.)
macro_rules! each16 {
    ($i:ident => $body:block) => {{
        {
            let $i = 0usize;
            $body
        }
        each16!(@ $i $body 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    }};
    (@ $i:ident $body:block $($n:literal)*) => {{
        $({
            let $i: usize = $n;
            $body
        })*
    }};
}
pub(super) use each16;

/// One input column of a 3-wide stride-1 window row feeding a tile of `R` output columns: column
/// `j` of the tile's `R + 2` input columns is tap `kx` of output column `j − kx`, so each input
/// vector `x` is loaded once and multiplied by every weight `w3[kx]` of the row that reads it
/// (the channels-last rows and the channel-blocked path both sum this way).
///
/// # Safety
/// The CPU has `S`'s features.
#[inline(always)]
pub(super) unsafe fn window3_column<S: Lanes, const R: usize>(acc: &mut [S; R], w3: &[S; 3], j: usize, x: S) {
    // SAFETY: the caller's contract.
    unsafe { window3_strided::<S, R, 1>(acc, w3, j, x) }
}

/// [`window3_column`] at column stride `ST`: column `j` of a tile's `ST·(R − 1) + 3` input
/// columns is tap `kx` of output column `(j − kx) / ST` where that divides.
///
/// # Safety
/// The CPU has `S`'s features.
#[inline(always)]
pub(super) unsafe fn window3_strided<S: Lanes, const R: usize, const ST: usize>(
    acc: &mut [S; R],
    w3: &[S; 3],
    j: usize,
    x: S,
) {
    for (kx, &wk) in w3.iter().enumerate() {
        if j >= kx && (j - kx).is_multiple_of(ST) && (j - kx) / ST < R {
            // SAFETY: the caller's contract.
            acc[(j - kx) / ST] = unsafe { x.fmadd(wk, acc[(j - kx) / ST]) };
        }
    }
}

/// The f32 vectors of the plane path: `__m256` (AVX2+FMA), `__m512` (AVX-512F) or
/// [`Portable`] lanes.
///
/// Safety of every method: the CPU has the type's features, and pointers are valid for the
/// lanes the method reads or writes.
pub(super) trait Lanes: Copy {
    /// Lanes per vector (at most [`SLACK`]).
    const L: usize;
    unsafe fn splat(v: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    /// `self·k + acc`.
    unsafe fn fmadd(self, k: Self, acc: Self) -> Self;
    /// `self + b` per lane.
    unsafe fn add(self, b: Self) -> Self;
    /// The lane mask of [`Lanes::load_masked`].
    type Mask: Copy;
    /// Lanes `lo..hi` (`lo ≤ hi ≤ L`).
    unsafe fn mask(lo: usize, hi: usize) -> Self::Mask;
    /// Loads the lanes of `m` from `p`, zero in the others, which are not read (`p` need only be
    /// valid for the lanes of `m`).
    unsafe fn load_masked(p: *const f32, m: Self::Mask) -> Self;
    /// `v < 0 ? 0 : v` per lane: NaN and −0 stay (as `ConvEpilogue::activate_slice`).
    unsafe fn relu(self) -> Self;
    /// `clamp_nan(v, lo, hi)` per lane for bounds that are not NaN; `zlo`, `zhi`: whether the
    /// bound is ±0 (equal values other than zeros have equal bits, so only then do ties matter).
    unsafe fn clamp(self, lo: Self, hi: Self, zlo: bool, zhi: bool) -> Self;
    /// [`Lanes::clamp`] from +0 to `hi` > 0 (ReLU6): `v > 0 or NaN ? min(hi, v) : +0` per lane.
    #[inline(always)]
    unsafe fn clamp_from_zero(self, hi: Self) -> Self {
        // SAFETY: the caller's contract.
        unsafe { self.clamp(Self::splat(0.0), hi, true, false) }
    }

    /// The ReLU (`relu`) and then the clamp (bounds, and whether each is ±0) of
    /// [`Finish::Registers`], applied to `self`.
    #[inline(always)]
    unsafe fn relu_clamp(self, relu: bool, clamp: Option<(Self, Self, bool, bool)>) -> Self {
        // SAFETY: the caller's contract.
        unsafe {
            let a = if relu { self.relu() } else { self };
            match clamp {
                Some((lo, hi, zlo, zhi)) => a.clamp(lo, hi, zlo, zhi),
                None => a,
            }
        }
    }

    /// The `N` vectors at `p`, `p + L`, …: a loop, not an `array::from_fn` closure (compiled
    /// apart where the inliner declines it, and then every call passes the vectors through
    /// memory, as `map` closures did in the stem's tile in one build).
    #[inline(always)]
    unsafe fn loads<const N: usize>(p: *const f32) -> [Self; N] {
        // SAFETY: the caller's contract: `p` is valid for N·L values.
        unsafe {
            let mut v = [Self::splat(0.0); N];
            for (i, v) in v.iter_mut().enumerate() {
                *v = Self::load(p.add(i * Self::L));
            }
            v
        }
    }

    /// Stores the first `n` (1 ..= L) lanes.
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        // SAFETY: the caller's contract: `p` is valid for `n` values.
        unsafe {
            if n == Self::L {
                self.store(p);
            } else {
                let mut t = [0.0; SLACK];
                self.store(t.as_mut_ptr());
                std::ptr::copy_nonoverlapping(t.as_ptr(), p, n);
            }
        }
    }
}

/// Eight lanes in plain Rust (`Lanes` for the generic body).
#[derive(Clone, Copy)]
pub(super) struct Portable([f32; 8]);

impl Lanes for Portable {
    const L: usize = 8;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        Portable([v; 8])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's contract: `p` is valid for 8 values.
        Portable(unsafe { std::ptr::read_unaligned(p.cast::<[f32; 8]>()) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's contract: `p` is valid for 8 values.
        unsafe { std::ptr::write_unaligned(p.cast::<[f32; 8]>(), self.0) }
    }
    #[inline(always)]
    unsafe fn fmadd(self, k: Self, acc: Self) -> Self {
        Portable(std::array::from_fn(|j| madd::<GENERIC>(self.0[j], k.0[j], acc.0[j])))
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Portable(std::array::from_fn(|j| self.0[j] + b.0[j]))
    }
    type Mask = (usize, usize);
    #[inline(always)]
    unsafe fn mask(lo: usize, hi: usize) -> (usize, usize) {
        (lo, hi)
    }
    #[inline(always)]
    unsafe fn load_masked(p: *const f32, (lo, hi): (usize, usize)) -> Self {
        Portable(std::array::from_fn(|j| {
            if (lo..hi).contains(&j) {
                // SAFETY: the caller's contract: `p` is valid for lanes lo..hi.
                unsafe { p.wrapping_add(j).read_unaligned() }
            } else {
                0.0
            }
        }))
    }
    #[inline(always)]
    unsafe fn relu(self) -> Self {
        Portable(self.0.map(|v| if v < 0.0 { 0.0 } else { v }))
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self, _: bool, _: bool) -> Self {
        Portable(self.0.map(|v| clamp_nan(v, lo.0[0], hi.0[0])))
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for std::arch::x86_64::__m256 {
    const L: usize = 8;
    // SAFETY (every block below): the caller's contract: AVX2 and FMA are there, pointers are
    // valid for 8 values.
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm256_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn fmadd(self, k: Self, acc: Self) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm256_fmadd_ps(self, k, acc) }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm256_add_ps(self, b) }
    }
    type Mask = std::arch::x86_64::__m256i;
    #[inline(always)]
    unsafe fn mask(lo: usize, hi: usize) -> Self::Mask {
        use std::arch::x86_64::*;
        // SAFETY: see above. Lane j is set when lo ≤ j < hi (both at most 8).
        unsafe {
            let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let above = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo as i32 - 1));
            let below = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi as i32), idx);
            _mm256_and_si256(above, below)
        }
    }
    #[inline(always)]
    unsafe fn load_masked(p: *const f32, m: Self::Mask) -> Self {
        // SAFETY: see above; masked-off lanes are not accessed (no fault).
        unsafe { std::arch::x86_64::_mm256_maskload_ps(p, m) }
    }
    #[inline(always)]
    unsafe fn relu(self) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: see above.
        unsafe { _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(self, _mm256_setzero_ps()), self) }
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self, zlo: bool, zhi: bool) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: see above.
        unsafe {
            // max(lo, v) is `lo > v ? lo : v` (a NaN v stays); ties of zeros: Max is the AND of
            // the bits (+0 unless both are −0), Min the OR.
            let mut m = _mm256_max_ps(lo, self);
            if zlo {
                m = _mm256_blendv_ps(m, _mm256_and_ps(self, lo), _mm256_cmp_ps::<_CMP_EQ_OQ>(self, lo));
            }
            let mut r = _mm256_min_ps(hi, m);
            if zhi {
                r = _mm256_blendv_ps(r, _mm256_or_ps(m, hi), _mm256_cmp_ps::<_CMP_EQ_OQ>(m, hi));
            }
            r
        }
    }
    #[inline(always)]
    unsafe fn clamp_from_zero(self, hi: Self) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: see above. As for `__m512`: the lanes not above +0 masked to +0.
        unsafe { _mm256_and_ps(_mm256_min_ps(hi, self), _mm256_cmp_ps::<_CMP_NLE_UQ>(self, _mm256_setzero_ps())) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for std::arch::x86_64::__m512 {
    const L: usize = 16;
    // SAFETY (every block below): the caller's contract: AVX-512F is there, pointers are valid
    // for 16 values (`store_first`: for `n`).
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm512_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        // SAFETY: see above; the mask holds the first `n` lanes only. A whole vector is a plain
        // store: masked stores cost several times more on AMD's cores, even with every lane set.
        unsafe {
            if n == 16 {
                std::arch::x86_64::_mm512_storeu_ps(p, self)
            } else {
                std::arch::x86_64::_mm512_mask_storeu_ps(p, (1u32 << n).wrapping_sub(1) as u16, self)
            }
        }
    }
    #[inline(always)]
    unsafe fn fmadd(self, k: Self, acc: Self) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm512_fmadd_ps(self, k, acc) }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        // SAFETY: see above.
        unsafe { std::arch::x86_64::_mm512_add_ps(self, b) }
    }
    type Mask = u16;
    #[inline(always)]
    unsafe fn mask(lo: usize, hi: usize) -> u16 {
        ((1u32 << hi) - (1u32 << lo)) as u16
    }
    #[inline(always)]
    unsafe fn load_masked(p: *const f32, m: u16) -> Self {
        // SAFETY: see above; masked-off lanes are not accessed (no fault).
        unsafe { std::arch::x86_64::_mm512_maskz_loadu_ps(m, p) }
    }
    #[inline(always)]
    unsafe fn relu(self) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: see above.
        unsafe {
            let z = _mm512_setzero_ps();
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(self, z), self, z)
        }
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self, zlo: bool, zhi: bool) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: see above. (No closure here: a closure is not compiled with the caller's
        // target features, so its intrinsics could become calls.)
        unsafe {
            // As for `__m256`.
            let mut m = _mm512_max_ps(lo, self);
            if zlo {
                let and = _mm512_and_si512(_mm512_castps_si512(self), _mm512_castps_si512(lo));
                m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self, lo), m, _mm512_castsi512_ps(and));
            }
            let mut r = _mm512_min_ps(hi, m);
            if zhi {
                let or = _mm512_or_si512(_mm512_castps_si512(m), _mm512_castps_si512(hi));
                r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(m, hi), r, _mm512_castsi512_ps(or));
            }
            r
        }
    }
    #[inline(always)]
    unsafe fn clamp_from_zero(self, hi: Self) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: see above. Lanes not above +0 (both zeros included: max(+0, −0) is +0) become
        // +0; the others (NaN among them: `min` returns its second operand then) min(hi, v).
        unsafe { _mm512_maskz_min_ps(_mm512_cmp_ps_mask::<_CMP_NLE_UQ>(self, _mm512_setzero_ps()), hi, self) }
    }
}

/// Vectors whose lanes split into the even and odd columns of two loads (the stride-2 plane
/// path): `__m256` (AVX2) and [`Portable`].
///
/// Safety of every method: the CPU has the type's features.
trait Pairs: Lanes {
    /// The even and the odd values of the 2·L values `a` then `b`, each in the type's lane order
    /// (the same for every call; [`Pairs::restore`] puts it back in column order).
    unsafe fn split(a: Self, b: Self) -> (Self, Self);
    /// The even values of [`Pairs::split`].
    unsafe fn split_even(a: Self, b: Self) -> Self;
    /// A [`Pairs::split`] result (or a lane-wise combination of some) in column order.
    unsafe fn restore(self) -> Self;
    /// Asks for the cache line of `p` (a hint; `p` points into a buffer).
    unsafe fn prefetch(p: *const f32);
}

impl Pairs for Portable {
    #[inline(always)]
    unsafe fn split(a: Self, b: Self) -> (Self, Self) {
        let pick = |j: usize| if j < 4 { a.0[2 * j] } else { b.0[2 * j - 8] };
        let odd = |j: usize| if j < 4 { a.0[2 * j + 1] } else { b.0[2 * j - 7] };
        (Portable(std::array::from_fn(pick)), Portable(std::array::from_fn(odd)))
    }
    #[inline(always)]
    unsafe fn split_even(a: Self, b: Self) -> Self {
        // SAFETY: no CPU feature needed.
        unsafe { Self::split(a, b).0 }
    }
    #[inline(always)]
    unsafe fn restore(self) -> Self {
        self
    }
    #[inline(always)]
    unsafe fn prefetch(_: *const f32) {}
}

#[cfg(target_arch = "x86_64")]
impl Pairs for std::arch::x86_64::__m256 {
    // Lane order: columns 0 1 4 5 | 2 3 6 7 (one in-lane shuffle of the two loads; the lane
    // permute that would sort them is left to `restore`, once per output vector).
    #[inline(always)]
    unsafe fn split(a: Self, b: Self) -> (Self, Self) {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract (AVX).
        unsafe { (_mm256_shuffle_ps::<0x88>(a, b), _mm256_shuffle_ps::<0xDD>(a, b)) }
    }
    #[inline(always)]
    unsafe fn split_even(a: Self, b: Self) -> Self {
        // SAFETY: the caller's contract (AVX).
        unsafe { std::arch::x86_64::_mm256_shuffle_ps::<0x88>(a, b) }
    }
    #[inline(always)]
    unsafe fn restore(self) -> Self {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract (AVX2). 64-bit lanes 0, 2, 1, 3.
        unsafe { _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(self))) }
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const f32) {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract (SSE, a pointer into a buffer); a prefetch never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
}

/// `even[j] = src[2j]`, `odd[j] = src[2j + 1]` for every `j` the outputs hold; with `ODD`
/// false only the even values (`odd` unused). `src` must reach the last value read.
#[inline(always)]
fn deinterleave<const ISA: u8, const ODD: bool>(src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let n = if ODD { even.len().min(odd.len()) } else { even.len() };
    // Whole pairs in `src` for the vector loops (the last even value may have no odd partner).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    let pairs = n.min(src.len() / 2);
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    {
        if ISA == AVX512 {
            // SAFETY: the AVX512 body runs only on CPUs with AVX-512F (see `dispatch`).
            done = unsafe { deinterleave_avx512::<ODD>(src, even, odd, pairs) };
        } else if ISA == AVX2 {
            // SAFETY: the AVX2 body runs only on CPUs with AVX2 (see `dispatch`).
            done = unsafe { deinterleave_avx2::<ODD>(src, even, odd, pairs) };
        }
    }
    for (j, e) in even.iter_mut().enumerate().take(n).skip(done) {
        *e = src[2 * j];
        if ODD {
            odd[j] = src[2 * j + 1];
        }
    }
}

/// `even[j] = src[2j]`, `odd[j] = src[2j + 1]` on `isa` (already [`FusedIsa::checked`]), for
/// every `j` both outputs hold: stride-2 pooling rows.
pub(crate) fn split_pairs(isa: FusedIsa, src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        FusedIsa::Avx512 => deinterleave::<AVX512, true>(src, even, odd),
        #[cfg(target_arch = "x86_64")]
        FusedIsa::Avx2 => deinterleave::<AVX2, true>(src, even, odd),
        _ => deinterleave::<GENERIC, true>(src, even, odd),
    }
}

/// `dst[j] = src[2j]` on the default ISA: stride-2 im2col rows.
pub(super) fn gather_even(dst: &mut [f32], src: &[f32]) {
    match FusedIsa::selected().checked() {
        #[cfg(target_arch = "x86_64")]
        FusedIsa::Avx512 => deinterleave::<AVX512, false>(src, dst, &mut []),
        #[cfg(target_arch = "x86_64")]
        FusedIsa::Avx2 => deinterleave::<AVX2, false>(src, dst, &mut []),
        _ => deinterleave::<GENERIC, false>(src, dst, &mut []),
    }
}

/// [`deinterleave`] of the first `n` pairs (`n` ≤ the pairs the slices hold) with two-source
/// permutes, the last fewer than 16 through masked loads and stores (stride-2 im2col runs are
/// often one 14- or 28-wide output row); returns `n`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn deinterleave_avx512<const ODD: bool>(src: &[f32], even: &mut [f32], odd: &mut [f32], n: usize) -> usize {
    use std::arch::x86_64::*;
    let ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    let full = n / 16 * 16;
    let r = n - full;
    if r > 0 {
        // Pairs full..n: source values 2·full .. 2·n (inside `src`: n pairs are whole there).
        let s = &src[2 * full..][..2 * r];
        let mask = |lanes: usize| ((1u32 << lanes.min(16)) - 1) as u16;
        // SAFETY: the masked loads read the 2r values of `s` only, the masked stores write r
        // values from `even[full]` (and `odd[full]`), which hold n ≥ full + r.
        unsafe {
            let a = _mm512_maskz_loadu_ps(mask(2 * r), s.as_ptr());
            let b = _mm512_maskz_loadu_ps(mask((2 * r).saturating_sub(16)), s.as_ptr().wrapping_add(16));
            _mm512_mask_storeu_ps(even[full..n].as_mut_ptr(), mask(r), _mm512_permutex2var_ps(a, ie, b));
            if ODD {
                _mm512_mask_storeu_ps(odd[full..n].as_mut_ptr(), mask(r), _mm512_permutex2var_ps(a, io, b));
            }
        }
    }
    let n = full;
    for j in (0..n).step_by(16) {
        let s = &src[2 * j..][..32];
        // SAFETY: `s` holds 32 values; `even` (and `odd` when ODD) hold n ≥ j + 16.
        unsafe {
            let (a, b) = (_mm512_loadu_ps(s.as_ptr()), _mm512_loadu_ps(s.as_ptr().add(16)));
            _mm512_storeu_ps(even[j..][..16].as_mut_ptr(), _mm512_permutex2var_ps(a, ie, b));
            if ODD {
                _mm512_storeu_ps(odd[j..][..16].as_mut_ptr(), _mm512_permutex2var_ps(a, io, b));
            }
        }
    }
    full + r
}

/// [`deinterleave`] of the first `n` pairs with in-lane shuffles and a lane permute, the last
/// fewer than 8 through masked loads and stores; returns `n`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn deinterleave_avx2<const ODD: bool>(src: &[f32], even: &mut [f32], odd: &mut [f32], n: usize) -> usize {
    use std::arch::x86_64::*;
    let full = n / 8 * 8;
    let r = n - full;
    if r > 0 {
        // As on AVX-512: the last fewer than 8 pairs through masked loads and stores.
        let s = &src[2 * full..][..2 * r];
        // Lane j is set when j < lanes.
        let mask = |lanes: usize| {
            _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes.min(8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
        };
        // SAFETY: the masked loads read the 2r values of `s` only, the masked stores write r
        // values from `even[full]` (and `odd[full]`), which hold n ≥ full + r.
        unsafe {
            let a = _mm256_maskload_ps(s.as_ptr(), mask(2 * r));
            let b = _mm256_maskload_ps(s.as_ptr().wrapping_add(8), mask((2 * r).saturating_sub(8)));
            let ev = _mm256_castps_pd(_mm256_shuffle_ps::<0x88>(a, b));
            let ev = _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(ev));
            _mm256_maskstore_ps(even[full..n].as_mut_ptr(), mask(r), ev);
            if ODD {
                let od = _mm256_castps_pd(_mm256_shuffle_ps::<0xDD>(a, b));
                _mm256_maskstore_ps(
                    odd[full..n].as_mut_ptr(),
                    mask(r),
                    _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(od)),
                );
            }
        }
    }
    let n = full;
    for j in (0..n).step_by(8) {
        let s = &src[2 * j..][..16];
        // SAFETY: `s` holds 16 values; `even` (and `odd` when ODD) hold n ≥ j + 8.
        unsafe {
            let (a, b) = (_mm256_loadu_ps(s.as_ptr()), _mm256_loadu_ps(s.as_ptr().add(8)));
            // [a0 a2 b0 b2 | a4 a6 b4 b6] → 64-bit lanes 0, 2, 1, 3.
            let ev = _mm256_castps_pd(_mm256_shuffle_ps::<0x88>(a, b));
            _mm256_storeu_ps(even[j..][..8].as_mut_ptr(), _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(ev)));
            if ODD {
                let od = _mm256_castps_pd(_mm256_shuffle_ps::<0xDD>(a, b));
                _mm256_storeu_ps(odd[j..][..8].as_mut_ptr(), _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(od)));
            }
        }
    }
    full + r
}

#[cfg(test)]
mod tests {
    use super::super::tests::strides;
    use super::super::{ConvFilter, FilterKind, conv2d_f32};
    use super::*;
    use crate::kernels::gemm::epilogue::act_f64;

    struct Lcg(u64);
    impl Lcg {
        fn step(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn value(&mut self) -> f32 {
            (self.step() as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        }
        fn below(&mut self, n: usize) -> usize {
            self.step() as usize % n
        }
    }

    /// A depthwise geometry: `c` channels, `win` = [stride, low padding, high padding,
    /// dilation], NHWC or NCHW input and output (`nhwc`) chosen independently.
    fn geom(
        batch: usize,
        c: usize,
        in_hw: [usize; 2],
        k: [usize; 2],
        win: [[usize; 2]; 4],
        nhwc: (bool, bool),
    ) -> ConvGeom {
        let [stride, pad, pad_hi, dil] = win;
        let (x_nhwc, y_nhwc) = nhwc;
        let out_hw: [usize; 2] = std::array::from_fn(|a| {
            let span = in_hw[a] + pad[a] + pad_hi[a];
            let win = (k[a] - 1) * dil[a] + 1;
            if span < win { 0 } else { (span - win) / stride[a] + 1 }
        });
        let order = |nhwc: bool| if nhwc { [0, 2, 3, 1] } else { [0, 1, 2, 3] };
        ConvGeom {
            batch,
            in_channels: c,
            in_hw,
            out_channels: c,
            out_hw,
            kernel_hw: k,
            stride,
            pad,
            dilation: dil,
            groups: c,
            x_strides: strides([batch, c, in_hw[0], in_hw[1]], order(x_nhwc)),
            y_strides: strides([batch, c, out_hw[0], out_hw[1]], order(y_nhwc)),
        }
    }

    /// The epilogue parts a case uses: bias, residual, activation, clamp (`CLAMP` or `RELU6`).
    #[derive(Clone, Copy, Debug)]
    struct Parts(bool, bool, Activation, Option<(f32, f32)>);

    /// A clamp below and above zero.
    const CLAMP: Option<(f32, f32)> = Some((-0.5, 0.7));
    /// A clamp from +0 (ReLU6's form, scaled to the test's values).
    const RELU6: Option<(f32, f32)> = Some((0.0, 0.6));

    /// Direct f64 loop: `clamp(act(Σ x·w + bias + residual))` at every output index.
    fn naive(g: &ConvGeom, x: &[f32], w: &[f32], bias: &[f32], res: &[f32], p: Parts) -> Vec<(usize, f64)> {
        let ([kh, kw], [oh, ow]) = (g.kernel_hw, g.out_hw);
        let (xs, ys) = (g.x_strides, g.y_strides);
        let mut out = Vec::new();
        for n in 0..g.batch {
            for ch in 0..g.out_channels {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = if p.0 { bias[ch] as f64 } else { 0.0 };
                        for ty in 0..kh {
                            for tx in 0..kw {
                                let iy = (oy * g.stride[0] + ty * g.dilation[0]) as i64 - g.pad[0] as i64;
                                let ix = (ox * g.stride[1] + tx * g.dilation[1]) as i64 - g.pad[1] as i64;
                                if iy < 0 || ix < 0 || iy >= g.in_hw[0] as i64 || ix >= g.in_hw[1] as i64 {
                                    continue;
                                }
                                let xv = x[n * xs[0] + ch * xs[1] + iy as usize * xs[2] + ix as usize * xs[3]];
                                s += xv as f64 * w[(ch * kh + ty) * kw + tx] as f64;
                            }
                        }
                        let i = n * ys[0] + ch * ys[1] + oy * ys[2] + ox * ys[3];
                        if p.1 {
                            s += res[i] as f64;
                        }
                        s = act_f64(p.2, s);
                        if let Some((lo, hi)) = p.3 {
                            s = s.clamp(lo as f64, hi as f64);
                        }
                        out.push((i, s));
                    }
                }
            }
        }
        out
    }

    /// Runs `g` through `conv2d_f32` and then through every ISA path on 1 thread, 2 threads and
    /// the global pool, each against the f64 loop.
    fn check(rng: &mut Lcg, g: &ConvGeom, p: Parts, pool: &rayon::ThreadPool) {
        let c = g.out_channels;
        let [kh, kw] = g.kernel_hw;
        let x: Vec<f32> = (0..g.batch * c * g.in_hw[0] * g.in_hw[1]).map(|_| rng.value()).collect();
        // OIHW weights (I = 1).
        let w: Vec<f32> = (0..c * kh * kw).map(|_| rng.value()).collect();
        let bias: Vec<f32> = (0..c).map(|_| rng.value()).collect();
        let len = g.batch * c * g.out_hw[0] * g.out_hw[1];
        let res: Vec<f32> = (0..len).map(|_| rng.value()).collect();
        let epi = ConvEpilogue {
            bias: p.0.then_some(&bias[..]),
            residual: p.1.then_some(&res[..]),
            activation: p.2,
            clamp: p.3,
        };
        let filter = ConvFilter::new(g, &w, [kh * kw, kh * kw, kw, 1]).unwrap();
        assert_eq!(filter.describe(), "depthwise direct");
        let FilterKind::Depthwise(wt) = &filter.kind else { unreachable!("depthwise filter") };
        let want = naive(g, &x, &w, &bias, &res, p);
        assert_eq!(want.len(), len);
        let compare = |y: &[f32], what: &str| {
            for &(i, v) in &want {
                let tol = 1e-5 * (kh * kw) as f64 + 1e-6 * v.abs();
                assert!((y[i] as f64 - v).abs() <= tol, "{what} {g:?} {p:?} at {i}: {} vs {v}", y[i]);
            }
        };
        let mut y = vec![f32::NAN; len];
        conv2d_f32(g, &x, &filter, &epi, &mut y, None).unwrap();
        compare(&y, "default");
        if len == 0 {
            return;
        }
        for (isa, blocked) in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512]
            .into_iter()
            .flat_map(|isa| [(isa, Some(false)), (isa, Some(true))])
        {
            // Blocked: also in strips of one or a few output rows.
            let strips: &[usize] = if blocked == Some(true) { &[blocked::STRIP_BYTES, 1, 6000] } else { &[0] };
            for (threads, parallel) in [(1, false), (1, true), (2, true)] {
                for &strip in strips {
                    let mut y = vec![f32::NAN; len];
                    let out = OutPtr(y.as_mut_ptr());
                    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
                    let p = if threads == 1 { &one } else { pool };
                    p.install(|| depthwise_on(isa, g, &x, wt, &epi, out, parallel, blocked, strip));
                    compare(&y, &format!("{} blocked {blocked:?} strips of {strip} bytes", isa.name()));
                }
            }
        }
    }

    #[test]
    fn deinterleave_matches_scalar_on_every_path() {
        let src: Vec<f32> = (0..200).map(|v| v as f32).collect();
        for n in 0..90 {
            let want_e: Vec<f32> = (0..n).map(|j| (2 * j) as f32).collect();
            let want_o: Vec<f32> = (0..n).map(|j| (2 * j + 1) as f32).collect();
            type Path = fn(&[f32], &mut [f32], &mut [f32]);
            let mut paths: Vec<Path> = vec![deinterleave::<GENERIC, true>];
            #[cfg(target_arch = "x86_64")]
            {
                if FusedIsa::avx2_available() {
                    paths.push(deinterleave::<AVX2, true>);
                }
                if FusedIsa::avx512_available() {
                    paths.push(deinterleave::<AVX512, true>);
                }
            }
            for f in paths {
                let (mut e, mut o) = (vec![-1.0; n], vec![-1.0; n]);
                f(&src[..2 * n], &mut e, &mut o);
                assert_eq!((&e, &o), (&want_e, &want_o), "n = {n}");
            }
            // Even values only, from a source that ends at the last one read.
            let mut d = vec![-1.0; n];
            gather_even(&mut d, &src[..(2 * n).saturating_sub(1)]);
            assert_eq!(d, want_e, "n = {n}");
        }
    }

    /// `relu`, `clamp` and `store_first` of every vector type against the scalar definitions
    /// (`clamp_nan`, `v < 0 ? 0 : v`) on signed zeros, NaN, infinities and the bounds.
    fn lanes_match_scalar<S: Lanes>() {
        let special = [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 6.0, -1.0, 2.0, 3.0, 0.5, -7.5, 1e-40];
        let vals: Vec<f32> = (0..S::L).map(|j| special[j % special.len()]).collect();
        let vals2: Vec<f32> = (0..S::L).map(|j| special[(j + 5) % special.len()]).collect();
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        for vals in [&vals, &vals2] {
            // SAFETY: each test runs a type only on CPUs that have its features (see below);
            // `vals` and `out` hold S::L values.
            unsafe {
                let v = S::load(vals.as_ptr());
                let mut out = vec![0.0; S::L];
                v.relu().store(out.as_mut_ptr());
                for (&o, &x) in out.iter().zip(vals) {
                    assert!(same(o, if x < 0.0 { 0.0 } else { x }), "relu({x}) = {o}");
                }
                for (lo, hi) in [(0.0, 6.0), (-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0), (-1.0, 2.0), (3.0, 1.0)] {
                    let c = v.clamp(S::splat(lo), S::splat(hi), lo == 0.0, hi == 0.0);
                    c.store(out.as_mut_ptr());
                    for (&o, &x) in out.iter().zip(vals) {
                        assert!(same(o, clamp_nan(x, lo, hi)), "clamp({x}, {lo}, {hi}) = {o}");
                    }
                }
                for n in 1..=S::L {
                    let mut out = vec![-9.0; S::L + 1];
                    v.store_first(out.as_mut_ptr(), n);
                    assert!(out[..n].iter().zip(vals).all(|(&o, &x)| same(o, x)), "store_first {n}");
                    assert!(out[n..].iter().all(|&o| o == -9.0), "store_first {n} wrote past");
                }
            }
        }
    }

    /// `Transpose::transpose` of every vector type: lane j of row i comes back as lane i of row j.
    fn transpose_moves_every_lane<S: blocked::Transpose>() {
        let l = S::L;
        let vals: Vec<f32> = (0..l * l).map(|v| v as f32).collect();
        // SAFETY: each test runs a type only on CPUs that have its features (see below); `vals`
        // and `out` hold L·L values.
        unsafe {
            let mut v: Vec<S> = (0..l).map(|i| S::load(vals[i * l..].as_ptr())).collect();
            S::transpose(&mut v);
            let mut out = vec![-1.0; l * l];
            for (i, r) in v.iter().enumerate() {
                r.store(out[i * l..].as_mut_ptr());
            }
            for i in 0..l {
                for j in 0..l {
                    assert_eq!(out[i * l + j], (j * l + i) as f32, "L = {l}, row {i}, lane {j}");
                }
            }
        }
    }

    #[test]
    fn transposes_move_every_lane_on_every_path() {
        transpose_moves_every_lane::<Portable>();
        #[cfg(target_arch = "x86_64")]
        {
            if FusedIsa::avx2_available() {
                transpose_moves_every_lane::<std::arch::x86_64::__m256>();
            }
            if FusedIsa::avx512_available() {
                transpose_moves_every_lane::<std::arch::x86_64::__m512>();
            }
        }
    }

    #[test]
    fn lanes_match_scalar_on_every_path() {
        lanes_match_scalar::<Portable>();
        #[cfg(target_arch = "x86_64")]
        {
            if FusedIsa::avx2_available() {
                lanes_match_scalar::<std::arch::x86_64::__m256>();
            }
            if FusedIsa::avx512_available() {
                lanes_match_scalar::<std::arch::x86_64::__m512>();
            }
        }
    }

    #[test]
    fn matches_naive_loop_on_fixed_shapes() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(3);
        let all = Parts(true, true, Activation::Relu, CLAMP);
        let clamp = Parts(true, false, Activation::Relu, CLAMP);
        let relu6 = Parts(true, false, Activation::None, RELU6);
        let relu = Parts(false, false, Activation::Relu, None);
        for (xl, yl) in [(false, false), (true, true), (false, true), (true, false)] {
            // MobileNetV2's shapes, shrunk: 3x3 stride 1 and 2, narrow planes, odd channel counts.
            let gs = [
                geom(2, 17, [15, 15], [3, 3], [[2, 2], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 33, [14, 14], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(3, 5, [7, 7], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 3, [40, 37], [3, 3], [[2, 2], [1, 1], [0, 0], [1, 1]], (xl, yl)),
                // 3x3 stride 1 padding 1 at every width class (one partial vector, one and a bit,
                // several), heights not a multiple of the block, high padding 0 and 2.
                geom(1, 3, [11, 20], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(2, 2, [17, 57], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 3, [9, 33], [3, 3], [[1, 1], [1, 1], [0, 2], [1, 1]], (xl, yl)),
                geom(1, 2, [2, 1], [3, 3], [[1, 1], [1, 1], [2, 0], [1, 1]], (xl, yl)),
                // Wide enough for whole two-vector strips with no lane in the padding, and a
                // last strip of one vector; bottom padding 3 and 0.
                geom(1, 3, [6, 100], [3, 3], [[1, 1], [1, 1], [3, 1], [1, 1]], (xl, yl)),
                geom(2, 2, [13, 70], [3, 3], [[1, 1], [1, 1], [0, 2], [1, 1]], (xl, yl)),
                // Stride 3, dilation, asymmetric padding, 5x5, 1x1 kernel.
                geom(1, 4, [11, 10], [3, 2], [[3, 3], [2, 0], [0, 2], [1, 1]], (xl, yl)),
                geom(2, 6, [9, 9], [3, 3], [[1, 2], [2, 1], [1, 2], [2, 3]], (xl, yl)),
                geom(1, 9, [8, 6], [5, 5], [[1, 1], [2, 2], [2, 2], [1, 1]], (xl, yl)),
                geom(1, 2, [6, 7], [1, 1], [[2, 1], [0, 0], [0, 0], [1, 1]], (xl, yl)),
                // 1x1 image, kernel larger than the input, zero batch, empty output.
                geom(3, 7, [1, 1], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 3, [2, 2], [5, 5], [[1, 1], [2, 2], [2, 2], [1, 1]], (xl, yl)),
                geom(0, 4, [4, 4], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 4, [2, 2], [5, 5], [[1, 1], [0, 0], [0, 0], [1, 1]], (xl, yl)),
                // Dilation reaching far into the padding (the plain loop).
                geom(2, 3, [3, 4], [3, 3], [[1, 2], [60, 55], [60, 50], [50, 45]], (xl, yl)),
            ];
            for g in &gs {
                for p in [all, clamp, relu6, relu] {
                    check(&mut rng, g, p, &pool);
                }
            }
        }
    }

    #[test]
    fn stride_2_planes_match_naive_loop() {
        // The direct stride-2 path (3×3, dilation 1, channels-first input): MobileNetV2's
        // shapes shrunk, odd and tiny planes, padding up to past the window, vectors masked at
        // one or both ends, channels not a multiple of 8, outputs in either layout.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(29);
        let all = Parts(true, true, Activation::Relu, CLAMP);
        let relu6 = Parts(true, false, Activation::Relu, RELU6);
        let plain = Parts(false, false, Activation::None, None);
        let s2 = |batch, c, in_hw, pad: [usize; 2], pad_hi: [usize; 2], yl| {
            geom(batch, c, in_hw, [3, 3], [[2, 2], pad, pad_hi, [1, 1]], (false, yl))
        };
        let gs = [
            s2(2, 9, [28, 28], [1, 1], [1, 1], false),
            s2(1, 3, [14, 14], [1, 1], [1, 1], true),
            s2(1, 5, [112, 36], [1, 1], [1, 1], false),
            s2(1, 4, [1, 1], [1, 1], [1, 1], false),
            s2(1, 3, [2, 3], [0, 0], [1, 0], false),
            s2(2, 7, [13, 35], [0, 0], [0, 0], false),
            s2(1, 6, [9, 17], [3, 4], [2, 5], true),
            s2(1, 2, [5, 40], [2, 0], [0, 3], false),
            s2(0, 4, [6, 6], [1, 1], [1, 1], false),
            s2(3, 2, [3, 3], [1, 1], [1, 1], false),
        ];
        for g in &gs {
            for p in [all, relu6, plain] {
                check(&mut rng, g, p, &pool);
            }
        }
        let acts = [Activation::None, Activation::Relu, Activation::Sigmoid, Activation::HardSwish];
        for _ in 0..60 {
            let c = 2 + rng.below(19);
            let in_hw = [1 + rng.below(24), 1 + rng.below(70)];
            let pad = [rng.below(4), rng.below(4)];
            let pad_hi = [rng.below(4), rng.below(4)];
            let batch = [0, 1, 1, 2][rng.below(4)];
            let g = s2(batch, c, in_hw, pad, pad_hi, rng.below(2) == 1);
            let p = Parts(rng.below(2) == 1, rng.below(2) == 1, acts[rng.below(4)], [None, CLAMP, RELU6][rng.below(3)]);
            check(&mut rng, &g, p, &pool);
        }
    }

    #[test]
    fn matches_naive_loop_on_random_shapes_and_epilogues() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(11);
        let acts = [Activation::None, Activation::Relu, Activation::Sigmoid, Activation::HardSwish];
        for _ in 0..150 {
            let c = 2 + rng.below(39);
            let in_hw = [1 + rng.below(20), 1 + rng.below(40)];
            let k = [1 + rng.below(4), 1 + rng.below(4)];
            let stride = [1 + rng.below(3), 1 + rng.below(3)];
            let dil = [1 + rng.below(2), 1 + rng.below(2)];
            let pad = [rng.below(3), rng.below(3)];
            let pad_hi = [rng.below(3), rng.below(3)];
            let batch = [0, 1, 1, 3][rng.below(4)];
            let (xl, yl) = (rng.below(2) == 1, rng.below(2) == 1);
            let g = geom(batch, c, in_hw, k, [stride, pad, pad_hi, dil], (xl, yl));
            let p = Parts(rng.below(2) == 1, rng.below(2) == 1, acts[rng.below(4)], [None, CLAMP, RELU6][rng.below(3)]);
            check(&mut rng, &g, p, &pool);
        }
    }
}
