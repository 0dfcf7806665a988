//! Direct 1×1 convolution over channels-first (NCHW) planes with few input channels (the
//! expansion and projection layers of MobileNet-style blocks): `Y[o, p] = Σ_i W[o, i]·X[i, p]`
//! read straight from the input planes and the plain `[cout][cin]` weights, with no packing of
//! either side.
//!
//! The pixels of each (image, group) are cut into chunks whose `K × chunk` input block stays in
//! L2; one parallel task per (image, group, chunk). Inside a task, blocks of up to [`MR`] output
//! channels sweep the chunk two vectors of pixels at a time: `MR × 2` accumulator chains
//! start from the bias, each input channel is two loads and one broadcast weight per row, and the
//! residual, ReLU and clamp are applied in registers before the one store (other activations go
//! through a copy of the tile). The commonest epilogues (bias only, a clamp such as ReLU6, the
//! residual alone) have a whole-block finish of their own, chosen once per task, so the tile's
//! finish is straight-line code on the accumulators with no test per vector. A task's pixels are
//! positions in the run of its group's planes one after another; a block of one image is read
//! in place, a block that ends the task short (or, folded, straddles two images) is first
//! copied into a zero-padded `[K][block]` scratch, so every load of the kernel is a full vector,
//! and stored image by image. Small planes that are not a whole number of blocks (7×7, 14×14)
//! are folded: the batch's planes form one run cut into tasks, instead of each plane ending in a
//! partial block. At
//! small K this avoids what the GEMM path pays per call: packing both operands, the per-tile
//! driver overhead and a second pass over the output for the clamp.
//!
//! The body is compiled for AVX-512F (blocks of 32 pixels: two 16-lane vectors), AVX2+FMA and
//! portably (16 pixels: two 8-lane vectors), selected at run time ([`FusedIsa`]). On CPUs with
//! full-width AVX-512 the 8-lane body reaches only half the FMA peak (Zen 5: MobileNetV2's
//! 1×1 layers ran at 97% of the 256-bit peak).

use super::depthwise::{Lanes, Portable};
use super::{ConvEpilogue, ConvGeom, OutPtr, for_units};
use crate::kernels::fused::FusedIsa;
use crate::kernels::gemm::{Activation, Scratch};

/// Output channels per register block.
const MR: usize = 6;

/// Most pixels per register block (two vectors of 16 lanes); a body's block is `2·S::L`.
const NB: usize = 32;

/// Largest input-channel count (K) this kernel takes on planes of more than [`SMALL_PLANE`]
/// pixels; deeper 1×1 convolutions over large planes amortise the GEMM's packing and keep it
/// (MobileNetV2's K = 144 at 56×56 was faster there, Zen 3 and Zen 5).
pub(super) const MAX_K: usize = 128;

/// Planes of at most this many pixels take this kernel at any K: the GEMM packs the few pixels
/// of each image again per call and fills its column tiles poorly (MobileNetV2's 7×7 layers,
/// K = 160..960, batch 8, one Zen 5 core: 0.38–1.67 ms direct against 0.44–2.56 ms as GEMM;
/// 14×14, K = 384, 576: equal or better).
pub(super) const SMALL_PLANE: usize = 256;

/// Target size in f32 elements of one task's `K × chunk` input block (64 KiB: a share of L2; at
/// large K the chunk's floor of four blocks makes it larger).
const CHUNK_ELEMS: usize = 16 * 1024;

/// Whether `geom` (a 1×1, stride-1, unpadded convolution whose pixels are dense in input and
/// output, see `Pointwise`, with the plain weights of a channels-first filter) takes this
/// kernel: pixels contiguous in input and output, and at most [`MAX_K`] input channels per group
/// or at most [`SMALL_PLANE`] pixels per plane.
pub(super) fn qualifies(geom: &ConvGeom, x_pixel: usize, y_pixel: usize) -> bool {
    let k = geom.cin_g();
    x_pixel == 1 && y_pixel == 1 && k >= 1 && (k <= MAX_K || geom.in_hw[0] * geom.in_hw[1] <= SMALL_PLANE)
}

/// The 1×1 convolution of `geom` (it [`qualifies`]) with the plain weights `w` (`[out_channels]
/// [cin_g]`), on the default ISA; `parallel`: split the tasks over the current rayon pool.
pub(super) fn conv(geom: &ConvGeom, x: &[f32], w: &[f32], epi: &ConvEpilogue<'_>, out: OutPtr, parallel: bool) {
    conv_on(FusedIsa::selected(), geom, x, w, epi, out, parallel);
}

/// [`conv`] on `isa` (lowered to what the CPU runs). The caller has validated the geometry against
/// `x` and the output, the bias and residual lengths, and `w.len() == out_channels · cin_g`.
fn conv_on(isa: FusedIsa, geom: &ConvGeom, x: &[f32], w: &[f32], epi: &ConvEpilogue<'_>, out: OutPtr, parallel: bool) {
    let k = geom.cin_g();
    let pixels = geom.in_hw[0] * geom.in_hw[1];
    assert!(w.len() >= geom.out_channels * k, "1x1 weights too short");
    let isa = isa.checked();
    let mut chunk = (CHUNK_ELEMS / k.max(1)).clamp(NB * 4, 4096) / NB * NB;
    // Planes that are not whole blocks but at least one block long: the images' pixels as one
    // run, so that blocks straddle images instead of ending each plane with a partial one.
    let nb = if isa == FusedIsa::Avx512 { NB } else { NB / 2 };
    let fold = fold_images(geom.batch, pixels, nb);
    let run = if fold { geom.batch * pixels } else { pixels };
    let mut chunks = run.div_ceil(chunk);
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    if fold {
        // A folded run is cut into a multiple of the pool's threads tasks of nearly equal whole
        // blocks (`Job::unit`): 8 images of 7×7 at the L2 chunk were 4 tasks of 4, 4, 4 and 1
        // blocks, 8 against 5 blocks per thread.
        chunks = chunks.div_ceil(threads) * threads;
    } else if geom.batch * geom.groups * chunks < 16 * threads {
        // Few tasks for the threads (one image): each plane cut into a multiple of the threads
        // chunks of nearly equal whole blocks, instead of L2-sized ones and a short last one
        // (MobileNetV2's 24 → 144 channels at 56×56: 5 tasks of 672 pixels or less, 3 against
        // 2 per thread; now 6 of 544 or less; 32 → 192 at 28×28: 512 and 272, now 416 and 368).
        chunk = pixels.div_ceil(chunks.div_ceil(threads) * threads).div_ceil(NB) * NB;
        chunks = pixels.div_ceil(chunk.max(1));
    }
    let units = if fold { geom.groups * chunks } else { geom.batch * geom.groups * chunks };
    let job = Job { geom, x, w, epi, out, chunk, chunks, fold };
    // The copied blocks' scratch comes from the per-thread pool (no allocation once warm).
    for_units(parallel, units, 1, Scratch::new, |scratch, u| dispatch(isa, &job, u, scratch));
}

/// Everything a task needs.
struct Job<'a> {
    geom: &'a ConvGeom,
    x: &'a [f32],
    w: &'a [f32],
    epi: &'a ConvEpilogue<'a>,
    out: OutPtr,
    /// Pixels per task (a multiple of [`NB`]) and tasks per (image, group); when `fold`, tasks
    /// per group, each with its share of the run's blocks.
    chunk: usize,
    chunks: usize,
    /// Whether the images' planes form one run of pixels per group ([`fold_images`]).
    fold: bool,
}

/// Whether `batch` planes of `pixels` take the folded order: more than one image, small planes
/// (at most [`SMALL_PLANE`] pixels) of at least one block of `nb` pixels (a block then straddles
/// at most two images) that are not a whole number of blocks. MobileNet's 7×7 planes filled 49
/// of 64 lanes; folded, 960 → 160 channels at batch 8 ran in 0.58 ms instead of 0.68 (one Zen 5
/// core). The blocks that straddle two images are copied once per task: loading their vectors
/// as two masked parts instead ran 1.6× slower per block there.
fn fold_images(batch: usize, pixels: usize, nb: usize) -> bool {
    batch > 1 && pixels >= nb && pixels <= SMALL_PLANE && !pixels.is_multiple_of(nb)
}

/// Whether the block at run position `q` (its task ends at `end`) is `nb` pixels of one image,
/// read in place; the others are copied first.
fn whole_block(q: usize, end: usize, pixels: usize, nb: usize) -> bool {
    q + nb <= end && q % pixels + nb <= pixels
}

/// Runs task `u` on the body compiled for `isa` (already [`FusedIsa::checked`]).
fn dispatch(isa: FusedIsa, job: &Job<'_>, u: usize, scratch: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        // SAFETY: `Avx512` holds only after `checked()` confirmed AVX-512F.
        unsafe { unit_avx512(job, u, scratch) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
        unsafe { unit_avx2(job, u, scratch) };
        return;
    }
    let _ = isa;
    // SAFETY: `Portable` needs no CPU feature.
    unsafe { job.unit::<Portable>(u, scratch) };
}

/// The task body compiled with AVX2+FMA enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn unit_avx2(job: &Job<'_>, u: usize, scratch: &mut Scratch) {
    // SAFETY: this function is only called on CPUs with AVX2 and FMA (see `dispatch`).
    unsafe { job.unit::<std::arch::x86_64::__m256>(u, scratch) };
}

/// The task body compiled with AVX-512F enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn unit_avx512(job: &Job<'_>, u: usize, scratch: &mut Scratch) {
    // SAFETY: this function is only called on CPUs with AVX-512F (see `dispatch`).
    unsafe { job.unit::<std::arch::x86_64::__m512>(u, scratch) };
}

/// How a tile is finished before its store.
#[derive(Clone, Copy)]
enum Finish<S> {
    /// In registers: the residual (if any) added, ReLU or nothing, then the clamp (bounds as
    /// vectors, and whether each bound is ±0).
    Registers { relu: bool, clamp: Option<(S, S, bool, bool)> },
    /// Through a copy of the tile and the epilogue's slice functions (another activation, or a
    /// NaN clamp bound).
    Spill,
}

impl Job<'_> {
    /// Task `u`: image, group and pixel chunk.
    ///
    /// # Safety
    /// The CPU has `S`'s features, and `2·S::L` divides [`NB`] (two vectors make a block).
    #[inline(always)]
    unsafe fn unit<S: Lanes>(&self, u: usize, scratch: &mut Scratch) {
        const { assert!(NB.is_multiple_of(S::L * 2)) };
        let nb = 2 * S::L;
        let g = self.geom;
        let k = g.cin_g();
        let pixels = g.in_hw[0] * g.in_hw[1];
        // Positions in the run of the group's planes one after another (image q / pixels, pixel
        // q % pixels): a folded task takes its share of the whole run's blocks (shares differ by
        // one block at most), another task a chunk of one image's plane.
        let (img, rest) = (u / (g.groups * self.chunks), u % (g.groups * self.chunks));
        let (grp, c) = (rest / self.chunks, rest % self.chunks);
        let (p0, p1) = if self.fold {
            let run = g.batch * pixels;
            let blocks = run.div_ceil(NB);
            ((c * blocks / self.chunks * NB).min(run), ((c + 1) * blocks / self.chunks * NB).min(run))
        } else {
            let at = img * pixels;
            (at + c * self.chunk, at + (c * self.chunk + self.chunk).min(pixels))
        };
        let [xn, xc, ..] = g.x_strides;
        let xbase = grp * k * xc;
        // Every block that is not `nb` pixels of one image (it straddles two images, or it ends
        // the task short), copied zero-padded, `[k][nb]` each, so that every load of the kernel
        // is a full vector.
        let copied = |q: &usize| !whole_block(*q, p1, pixels, nb);
        let buf = scratch.get((p0..p1).step_by(nb).filter(copied).count() * k * nb);
        for (slot, q) in buf.chunks_exact_mut(k * nb).zip((p0..p1).step_by(nb).filter(copied)) {
            let n = nb.min(p1 - q);
            let (img, p) = (q / pixels, q % pixels);
            let na = n.min(pixels - p);
            let (a, b) = (img * xn + xbase + p, (img + 1) * xn + xbase);
            for (i, row) in slot.chunks_exact_mut(nb).enumerate() {
                row[..na].copy_from_slice(&self.x[a + i * xc..][..na]);
                if n > na {
                    row[na..n].copy_from_slice(&self.x[b + i * xc..][..n - na]);
                }
                row[n..].fill(0.0);
            }
        }
        let parted: &[f32] = buf;
        let fin = match (self.epi.activation, self.epi.clamp) {
            (Activation::None | Activation::Relu, None) => {
                Finish::Registers { relu: self.epi.activation == Activation::Relu, clamp: None }
            }
            (Activation::None | Activation::Relu, Some((lo, hi))) if !lo.is_nan() && !hi.is_nan() => {
                Finish::Registers {
                    relu: self.epi.activation == Activation::Relu,
                    // SAFETY: the caller's contract (features).
                    clamp: Some(unsafe { (S::splat(lo), S::splat(hi), lo == 0.0, hi == 0.0) }),
                }
            }
            _ => Finish::Spill,
        };
        // SAFETY: the caller's contract (features).
        let zero = unsafe { S::splat(0.0) };
        let mut blk = Rows { grp, o0: 0, p0, p1, xbase, fin, lo: zero, hi: zero, fix: zero };
        let e = self.epi;
        let mode = match (e.activation, e.clamp, e.residual) {
            (Activation::None, None, None) => PLAIN,
            (Activation::None, None, Some(_)) => RESIDUAL,
            (Activation::None, Some((lo, hi)), None) if !lo.is_nan() && !hi.is_nan() && hi != 0.0 => {
                // SAFETY: the caller's contract (features).
                unsafe {
                    blk.lo = S::splat(lo);
                    blk.hi = S::splat(hi);
                    // max(+0, −0) must be +0 (`Lanes::clamp`); adding +0 makes it so and changes
                    // no other value; −0 (for any other lower bound) changes none.
                    blk.fix = S::splat(if lo.to_bits() == 0 { 0.0 } else { -0.0 });
                }
                CLAMP
            }
            _ => GENERAL,
        };
        // SAFETY: the caller's contract; `blk` describes this task's pixels.
        unsafe {
            match mode {
                PLAIN => self.channels::<S, PLAIN>(&mut blk, parted),
                CLAMP => self.channels::<S, CLAMP>(&mut blk, parted),
                RESIDUAL => self.channels::<S, RESIDUAL>(&mut blk, parted),
                _ => self.channels::<S, GENERAL>(&mut blk, parted),
            }
        }
    }

    /// The task's output channels, [`MR`] at a time, whole blocks finished as `MODE` says.
    ///
    /// # Safety
    /// As [`Job::rows`] for every block of rows; `MODE` only as [`Job::unit`] chooses it (with
    /// `b`'s clamp vectors).
    #[inline(always)]
    unsafe fn channels<S: Lanes, const MODE: u8>(&self, b: &mut Rows<S>, parted: &[f32]) {
        let cout_g = self.geom.cout_g();
        b.o0 = 0;
        while b.o0 < cout_g {
            let mr = MR.min(cout_g - b.o0);
            // SAFETY: the caller's contract; `b` describes rows and pixels of this task.
            unsafe {
                match mr {
                    6 => self.rows::<S, 6, MODE>(b, parted),
                    5 => self.rows::<S, 5, MODE>(b, parted),
                    4 => self.rows::<S, 4, MODE>(b, parted),
                    3 => self.rows::<S, 3, MODE>(b, parted),
                    2 => self.rows::<S, 2, MODE>(b, parted),
                    _ => self.rows::<S, 1, MODE>(b, parted),
                }
            }
            b.o0 += mr;
        }
    }

    /// Output channel `o` of group `grp`'s row `o0`, the weights of rows `o..o + R` and their
    /// bias (zero without one).
    #[inline(always)]
    fn row_block<const R: usize>(&self, grp: usize, o0: usize) -> (usize, &[f32], [f32; R]) {
        let (k, cout_g) = (self.geom.cin_g(), self.geom.cout_g());
        let o = grp * cout_g + o0;
        let mut bias = [0.0f32; R];
        if let Some(bs) = self.epi.bias {
            bias.copy_from_slice(&bs[o..o + R]);
        }
        (o, &self.w[o * k..][..R * k], bias)
    }

    /// Output channels `o0..o0 + R` of the group over the task's pixels `b.p0..b.p1`, positions
    /// of the run of the group's planes (image `q / pixels`, pixel `q % pixels`). A block of one
    /// image is read in place and finished as `MODE` says; a block that straddles two images or
    /// ends the task short is read from its copy in `parted` (in order) and stored image by image.
    ///
    /// # Safety
    /// The CPU has `S`'s features and `2·S::L` divides [`NB`]; `o0 + R ≤ cout_g`; the pixels
    /// `p0..p1` are this task's, and `parted` holds the `[k][2·S::L]` copy of every block of the
    /// task that is not [`whole_block`]. A block straddles at most two images (`fold` only takes
    /// planes of at least one block).
    #[inline(always)]
    unsafe fn rows<S: Lanes, const R: usize, const MODE: u8>(&self, b: &Rows<S>, parted: &[f32]) {
        let g = self.geom;
        let k = g.cin_g();
        let pixels = g.in_hw[0] * g.in_hw[1];
        let (o, wrow, bias) = self.row_block::<R>(b.grp, b.o0);
        let [xn, xc, _, _] = g.x_strides;
        let [yn, yc, _, _] = g.y_strides;
        let (nb, l) = (2 * S::L, S::L);
        let xp = self.x.as_ptr();
        let mut slot = 0;
        let mut q = b.p0;
        while q < b.p1 {
            let n = nb.min(b.p1 - q);
            let (img, p) = (q / pixels, q % pixels);
            let ybase = img * yn + o * yc;
            if whole_block(q, b.p1, pixels, nb) {
                // SAFETY: as in `rows`: pixels p..p + nb of image `img`'s planes of this group.
                unsafe {
                    let acc = tile::<S, R>(xp.add(img * xn + b.xbase + p), xc, wrow, k, &bias);
                    if MODE == GENERAL {
                        self.finish::<S, R>(&b.fin, acc, ybase + p, yc, nb);
                    } else {
                        self.finish_block::<S, R, MODE>(b, acc, ybase + p, yc);
                    }
                }
                q += nb;
                continue;
            }
            assert!((slot + 1) * k * nb <= parted.len(), "1x1 parted blocks too short");
            // SAFETY: the slot holds k rows of nb values (checked); the CPU has S's features.
            let acc = unsafe { tile::<S, R>(parted.as_ptr().add(slot * k * nb), nb, wrow, k, &bias) };
            slot += 1;
            let na = n.min(pixels - p);
            // SAFETY: output rows o..o + R, pixels p..p + na of image `img` and 0..n − na of the
            // next: inside the output and this task's.
            unsafe {
                self.finish::<S, R>(&b.fin, acc, ybase + p, yc, na);
                if n > na {
                    // The lanes from na on, moved down to lane 0.
                    let mut next = acc;
                    for (r, row) in acc.iter().enumerate() {
                        let mut t = [0.0f32; 2 * NB];
                        row[0].store(t.as_mut_ptr());
                        row[1].store(t.as_mut_ptr().add(l));
                        next[r] = [S::load(t.as_ptr().add(na)), S::load(t.as_ptr().add(na + l))];
                    }
                    self.finish::<S, R>(&b.fin, next, (img + 1) * yn + o * yc, yc, n - na);
                }
            }
            q += n;
        }
    }

    /// [`Job::finish`] of a whole block (`2·S::L` pixels per row) in one of the fixed modes
    /// ([`PLAIN`], [`CLAMP`], [`RESIDUAL`]): straight-line code on the accumulators in
    /// registers, with no test of the epilogue per vector.
    ///
    /// # Safety
    /// The CPU has `S`'s features; elements `at + r·yc + j` (r < R, j < 2·S::L) lie inside the output
    /// (and the residual, laid out like it) and belong to this task.
    // Indexing (not iterators over `acc`, which copied it to the stack) keeps the accumulators in
    // registers.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn finish_block<S: Lanes, const R: usize, const MODE: u8>(
        &self,
        b: &Rows<S>,
        acc: [[S; 2]; R],
        at: usize,
        yc: usize,
    ) {
        for r in 0..R {
            for v in 0..2 {
                let mut a = acc[r][v];
                let j = at + r * yc + v * S::L;
                // SAFETY: the caller's contract: elements j..j + S::L are inside the output (and
                // the residual) and this task's; the features are the caller's.
                unsafe {
                    if MODE == RESIDUAL
                        && let Some(res) = self.epi.residual
                    {
                        a = a.add(S::load(res[j..j + S::L].as_ptr()));
                    }
                    if MODE == CLAMP {
                        a = a.clamp(b.lo, b.hi, false, false).add(b.fix);
                    }
                    a.store(self.out.0.add(j));
                }
            }
        }
    }

    /// Applies the residual, the activation and the clamp to `acc` (rows `yc` apart, the first at
    /// output element `at`) and stores the first `n` pixels of each row.
    ///
    /// # Safety
    /// The CPU has `S`'s features; elements `at + r·yc + j` (r < R, j < n ≤ 2·S::L) lie inside the
    /// output (and the residual, which is laid out like it) and belong to this task.
    #[inline(always)]
    unsafe fn finish<S: Lanes, const R: usize>(
        &self,
        fin: &Finish<S>,
        acc: [[S; 2]; R],
        at: usize,
        yc: usize,
        n: usize,
    ) {
        let Finish::Registers { relu, clamp } = fin else {
            for (r, row) in acc.iter().enumerate() {
                let mut tmp = [0.0f32; NB];
                // SAFETY: `tmp` holds 2·S::L values; the features are the caller's.
                unsafe {
                    row[0].store(tmp.as_mut_ptr());
                    row[1].store(tmp.as_mut_ptr().add(S::L));
                }
                let vals = &mut tmp[..n];
                let i = at + r * yc;
                if let Some(res) = self.epi.residual {
                    vals.iter_mut().zip(&res[i..i + n]).for_each(|(v, &r)| *v += r);
                }
                self.epi.activate_slice(vals);
                // SAFETY: the caller's contract: these n elements are inside the output and ours.
                let dst = unsafe { std::slice::from_raw_parts_mut(self.out.0.add(i), n) };
                dst.copy_from_slice(vals);
            }
            return;
        };
        for (r, row) in acc.iter().enumerate() {
            let i = at + r * yc;
            for (v, &a) in row.iter().enumerate() {
                let lanes = n.saturating_sub(v * S::L).min(S::L);
                if lanes == 0 {
                    continue;
                }
                let j = i + v * S::L;
                // SAFETY: the caller's contract: elements j..j + lanes are inside the output (and
                // the residual) and this task's; the features are the caller's.
                unsafe {
                    let mut a = a;
                    if let Some(res) = self.epi.residual {
                        let rv = if lanes == S::L {
                            S::load(res[j..j + S::L].as_ptr())
                        } else {
                            let mut t = [0.0f32; NB];
                            t[..lanes].copy_from_slice(&res[j..j + lanes]);
                            S::load(t.as_ptr())
                        };
                        a = a.add(rv);
                    }
                    if *relu {
                        a = a.relu();
                    }
                    if let Some((lo, hi, zlo, zhi)) = *clamp {
                        a = a.clamp(lo, hi, zlo, zhi);
                    }
                    a.store_first(self.out.0.add(j), lanes);
                }
            }
        }
    }
}

/// One register block's rows and the task's pixels (see [`Job::rows`]).
struct Rows<S> {
    grp: usize,
    o0: usize,
    /// The task's positions in the run of the group's planes (see [`Job::rows`]).
    p0: usize,
    p1: usize,
    /// The group's first input channel, as an element offset in an image.
    xbase: usize,
    fin: Finish<S>,
    /// The bounds of a [`CLAMP`] finish, and the value added to fix the sign of a zero.
    lo: S,
    hi: S,
    fix: S,
}

/// Whole blocks finished by [`Job::finish`] (any epilogue).
const GENERAL: u8 = 0;
/// Whole blocks finished with the bias only.
const PLAIN: u8 = 1;
/// Whole blocks finished with a clamp whose bounds are not NaN and whose upper bound is not ±0
/// (no activation or residual).
const CLAMP: u8 = 2;
/// Whole blocks finished with the residual only.
const RESIDUAL: u8 = 3;

/// `bias[r] + Σ_i w[r·k + i]·x[i·xc ..][..2·S::L]` for the `R` rows, in registers.
///
/// # Safety
/// The CPU has `S`'s features, and `x` is valid for reads at `i·xc + j` for `i < k`,
/// `j < 2·S::L`; `w` holds `R·k` values.
#[inline(always)]
unsafe fn tile<S: Lanes, const R: usize>(
    x: *const f32,
    xc: usize,
    w: &[f32],
    k: usize,
    bias: &[f32; R],
) -> [[S; 2]; R] {
    // SAFETY: the caller's contract (features, and every load inside `x` and `w`).
    unsafe {
        let mut acc: [[S; 2]; R] = std::array::from_fn(|r| [S::splat(bias[r]); 2]);
        let wp = w.as_ptr();
        for i in 0..k {
            let row = x.add(i * xc);
            let (b0, b1) = (S::load(row), S::load(row.add(S::L)));
            for (r, a) in acc.iter_mut().enumerate() {
                let wv = S::splat(*wp.add(r * k + i));
                a[0] = b0.fmadd(wv, a[0]);
                a[1] = b1.fmadd(wv, a[1]);
            }
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Lcg, naive, strides};
    use super::super::{ConvFilter, conv2d_f32};
    use super::*;
    use crate::kernels::gemm::epilogue::act_f64;

    /// An NCHW 1×1 geometry (stride 1, no padding).
    fn geom(batch: usize, cin: usize, cout: usize, hw: [usize; 2], groups: usize) -> ConvGeom {
        ConvGeom {
            batch,
            in_channels: cin,
            in_hw: hw,
            out_channels: cout,
            out_hw: hw,
            kernel_hw: [1, 1],
            stride: [1, 1],
            pad: [0, 0],
            dilation: [1, 1],
            groups,
            x_strides: strides([batch, cin, hw[0], hw[1]], [0, 1, 2, 3]),
            y_strides: strides([batch, cout, hw[0], hw[1]], [0, 1, 2, 3]),
        }
    }

    /// Runs `g` through `conv2d_f32` and through every ISA path on 1 and 2 threads, each against
    /// the f64 loop with the epilogue `clamp(act(conv + bias + residual))`.
    fn check(
        rng: &mut Lcg,
        g: &ConvGeom,
        parts: (bool, bool, Activation, Option<(f32, f32)>),
        pool: &rayon::ThreadPool,
    ) {
        let (has_bias, has_res, act, clamp) = parts;
        let k = g.cin_g();
        let x: Vec<f32> = (0..g.batch * g.in_channels * g.in_hw[0] * g.in_hw[1]).map(|_| rng.next()).collect();
        let w: Vec<f32> = (0..g.out_channels * k).map(|_| rng.next()).collect();
        let bias: Vec<f32> = (0..g.out_channels).map(|_| rng.next()).collect();
        let len = g.batch * g.out_channels * g.out_hw[0] * g.out_hw[1];
        let res: Vec<f32> = (0..len).map(|_| rng.next()).collect();
        let epi = ConvEpilogue {
            bias: has_bias.then_some(&bias[..]),
            residual: has_res.then_some(&res[..]),
            activation: act,
            clamp,
        };
        let ws = [k, 1, 1, 1];
        let want: Vec<(usize, f64)> = naive(g, &x, &w, ws, has_bias.then_some(&bias[..]))
            .into_iter()
            .map(|(i, mut s)| {
                if has_res {
                    s += res[i] as f64;
                }
                s = act_f64(act, s);
                if let Some((lo, hi)) = clamp {
                    s = s.max(lo as f64).min(hi as f64);
                }
                (i, s)
            })
            .collect();
        assert_eq!(want.len(), len);
        let compare = |y: &[f32], what: &str| {
            for &(i, v) in &want {
                let tol = 1e-5 + 2e-6 * k as f64 + 1e-6 * v.abs();
                assert!((y[i] as f64 - v).abs() <= tol, "{what} {g:?} {parts:?} at {i}: {} vs {v}", y[i]);
            }
        };
        let filter = ConvFilter::new(g, &w, ws).unwrap();
        let mut y = vec![f32::NAN; len];
        conv2d_f32(g, &x, &filter, &epi, &mut y, Some(pool)).unwrap();
        compare(&y, "conv2d_f32");
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            for (threads, parallel) in [(1, false), (2, true)] {
                let mut y = vec![f32::NAN; len];
                let out = OutPtr(y.as_mut_ptr());
                let p = if threads == 1 { &one } else { pool };
                p.install(|| conv_on(isa, g, &x, &w, &epi, out, parallel));
                compare(&y, &format!("{} {threads} thread(s)", isa.name()));
            }
        }
    }

    #[test]
    fn matches_f64_loop_on_mobilenet_shapes_and_edges() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(5);
        let relu6 = (true, false, Activation::Relu, Some((0.0, 6.0)));
        let res = (true, true, Activation::None, None);
        // MobileNetV2's 1x1 layers, shrunk in space: 16→96, 24→144, 32→16, 96→24 (+ residual),
        // planes of 7x7 and 14x14 (pixels not a multiple of 16), and several chunks per plane.
        for (b, ci, co, hw, parts) in [
            (2, 16, 96, [12, 12], relu6),
            (1, 24, 144, [7, 7], relu6),
            (2, 32, 16, [14, 14], res),
            (1, 96, 24, [14, 14], res),
            (1, 128, 7, [33, 40], relu6),
            (1, 1, 1, [1, 1], relu6),
            (3, 3, 5, [1, 3], res),
            (0, 4, 4, [4, 4], relu6),
            (1, 5, 13, [5, 3], (false, true, Activation::Relu, Some((-0.0, 0.0)))),
            // Images folded into one run of pixels (blocks straddling two planes, the run's last
            // block partial): 7x7 and 5x7 planes, with each finish.
            (3, 40, 24, [7, 7], relu6),
            (4, 9, 14, [5, 7], res),
            (2, 17, 7, [7, 7], (true, true, Activation::Relu, Some((-0.5, 0.75)))),
            (3, 6, 5, [3, 11], (true, false, Activation::Sigmoid, None)),
        ] {
            check(&mut rng, &geom(b, ci, co, hw, 1), parts, &pool);
        }
        // Groups.
        check(&mut rng, &geom(2, 12, 18, [9, 4], 3), relu6, &pool);
    }

    #[test]
    fn matches_f64_loop_on_random_shapes_and_epilogues() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(17);
        let acts = [Activation::None, Activation::Relu, Activation::Sigmoid, Activation::HardSwish];
        for _ in 0..60 {
            let groups = 1 + rng.below(3);
            let ci = groups * (1 + rng.below(40));
            let co = groups * (1 + rng.below(20));
            let hw = [1 + rng.below(20), 1 + rng.below(30)];
            let clamp = match rng.below(3) {
                0 => None,
                1 => Some((0.0, 6.0)),
                _ => Some((-0.3, 0.4)),
            };
            let parts = (rng.below(2) == 0, rng.below(2) == 0, acts[rng.below(4)], clamp);
            let g = geom(1 + rng.below(3), ci, co, hw, groups);
            check(&mut rng, &g, parts, &pool);
        }
    }

    /// The sign of zero results under the whole-block finishes: every product is a zero of the
    /// sign of its input (weights +0) and the bias is −0, so each output is −0 when all inputs are
    /// negative and +0 when all are positive; clamp ties of zeros follow `Lanes::clamp` (max: the
    /// AND of the bits, so +0 unless both are −0). Planes of 21 pixels: a whole block and a tail.
    #[test]
    fn zero_signs_follow_the_clamp_rules() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let g = geom(2, 5, 13, [3, 7], 1);
        let len = 2 * 13 * 21;
        let w = vec![0.0f32; 13 * 5];
        let bias = vec![-0.0f32; 13];
        for (sign, clamp, want_negative) in [
            (-1.0f32, Some((0.0, 6.0)), false),
            (-1.0, Some((-0.0, 6.0)), true),
            (-1.0, Some((-1.0, 6.0)), true),
            (-1.0, None, true),
            (1.0, Some((-0.0, 6.0)), false),
            (1.0, None, false),
        ] {
            let x = vec![sign * 0.5; 2 * 5 * 21];
            let epi = ConvEpilogue { bias: Some(&bias), residual: None, activation: Activation::None, clamp };
            for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
                for (p, parallel) in [(&one, false), (&pool, true)] {
                    let mut y = vec![f32::NAN; len];
                    let out = OutPtr(y.as_mut_ptr());
                    p.install(|| conv_on(isa, &g, &x, &w, &epi, out, parallel));
                    for (i, v) in y.iter().enumerate() {
                        assert!(
                            *v == 0.0 && v.is_sign_negative() == want_negative,
                            "{} x {sign} clamp {clamp:?} at {i}: {v:?}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn qualifies_only_dense_pixels_and_small_k() {
        let g = geom(1, 16, 32, [4, 4], 1);
        assert!(qualifies(&g, 1, 1));
        assert!(qualifies(&geom(1, MAX_K + 1, 4, [16, 16], 1), 1, 1));
        assert!(!qualifies(&geom(1, MAX_K + 1, 4, [16, 17], 1), 1, 1));
        assert!(!qualifies(&g, 16, 1));
        assert!(!qualifies(&g, 1, 32));
        assert!(!qualifies(&geom(1, 0, 4, [4, 4], 1), 1, 1));
    }
}
