//! Winograd F(4×4, 3×3) convolution for 3×3, stride 1, dilation 1, single-group f32
//! convolutions: 2.25 multiplications per output instead of 9, at a small cost in accuracy.
//!
//! Each 4×4 output tile is computed from the 6×6 input patch `d` around it as
//! `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`, with the interpolation points 0, ±1, ±2 and ∞ (Lavin &
//! Gray). The filter transform `U = G g Gᵀ` runs once, in f64, when the filter is prepared: 36
//! matrices `[cin × cout]`, each packed for the GEMM. A call splits the tiles (across images,
//! tile rows and tile columns) into blocks; per block the input transform writes 36 matrices
//! `V[ξ] = [tiles × cin]`, 36 GEMMs give `M[ξ] = V[ξ]·U[ξ]`, and the output transform, the bias
//! and the rest of the epilogue write each tile straight to the output (a call with few tiles
//! under a large transformed filter runs as one block whose 36 GEMMs, not its tiles, are split
//! over the threads: [`split_gemms`]). The transforms run on
//! 16 channels at a time (one vector), whatever the layout: the gather of a patch reads the
//! input through its strides (NCHW, NHWC, …) and gives zeros for the convolution's padding;
//! output pixels of edge tiles past the output are computed on zeros and not written.
//!
//! Measured error against an f64 direct convolution on ResNet-18's 3×3 shapes
//! (`tests::error_on_resnet_shapes`, docs/configuration.md): at most about 1e-5 of the output's
//! largest magnitude and 2.3e-6 of Σ|x·w| per output, 15–30× the implicit GEMM's.

use rayon::prelude::*;

use super::{ConvEpilogue, ConvGeom, OP, OutPtr, even_split, for_chunks, try_for_units};
use crate::error::{Error, Result};
use crate::kernels::fused::FusedIsa;
use crate::kernels::gemm::{GemmArgs, MatMut, MatRef, PackedB, Rhs, Scratch, gemm_f32};

/// Channels transformed at once (one AVX-512 vector; two AVX2 ones).
const L: usize = 16;
/// Lanes of one transform value.
type Lanes = [f32; L];

/// Target f32 elements of one block's transformed input and products (`36·T·(cin + cout)`):
/// about 768 KiB, most of a Zen 4 core's 1 MiB L2 (on several threads, [`block_elems`]).
const BLOCK_ELEMS: usize = 192 * 1024;

/// [`BLOCK_ELEMS`], or 3/4 of this CPU's L2 where that is more (2 MiB on the Xeons with AMX);
/// for blocks split over several threads.
fn block_elems() -> usize {
    BLOCK_ELEMS.max(crate::kernels::gemm::cache_sizes().l2 * 3 / 16)
}

/// Tiles per block when `tiles` tiles in blocks of at most `small` split over `threads > 1`
/// threads: the block count a multiple of the thread count, the blocks as even as whole tiles
/// allow. Blocks of a multiple of 14 (the AVX-512 microkernel's rows) left the threads unequal
/// shares: ResNet's 64 channels at 56², one image, 196 tiles in blocks of 42 (three on one
/// thread, two on the other) took 0.55–0.62 ms on two threads of a Xeon (2 MiB L2) where four
/// blocks of 49 take 0.49–0.50 (six of 33: 0.52). Smaller blocks cost more than they balance
/// (each block's 36 GEMMs read the whole transformed filter): its 128 channels at 28², 49 tiles,
/// 0.34–0.35 ms in two blocks of 25, 0.38–0.41 in four of 13, 0.57–0.58 in seven of 7.
fn even_blocks(tiles: usize, small: usize, threads: usize) -> usize {
    even_split(tiles, tiles.div_ceil(small.max(1)).max(threads), 1, threads)
}

/// Tiles per block on one thread: a multiple of the AVX-512 microkernel's 14 rows, within these
/// bounds (on several threads, [`even_blocks`] cuts them evenly).
const MIN_TILES: usize = 28;
const MAX_TILES: usize = 14 * 16;

/// Transformed filters larger than this (bytes) are [`wide`].
const WIDE_FILTER: usize = 4 << 20;
/// Transformed filters larger than this (bytes) run one block at a time on several threads.
const WIDE_FILTER_SERIAL: usize = 16 << 20;
/// Most f32 elements of one block's V and M for wide filters: 7 MiB, within the 8 MiB a
/// buffer of the per-thread scratch pool may hold (a larger one would be allocated per call).
const WIDE_ELEMS: usize = 7 << 18;

/// Most tiles per thread for which a call under a large transformed filter (not [`Wide::No`])
/// runs as one block with its 36 GEMMs split over the threads ([`split_gemms`]) instead of a
/// block per thread: with so few tiles, blocks per thread are small or uneven (ResNet-18's 256
/// channels at 14², one image: 16 tiles, cut 14 + 2) and each reads the whole filter. On a
/// 2-vCPU Intel Xeon (Sapphire Rapids class), two threads, alternated: ResNet-18 at batch 1
/// 13.05–13.46 ms against 13.87–14.77 with blocks per thread (its 256-channel 14² layers 0.83–0.88
/// against 1.17–1.35 ms each), at batch 8 74.3–75.1 against 79.5–80.3 ms (the 512-channel 7²
/// layers: 32 tiles).
const SPLIT_TILES: usize = 16;

/// How a convolution's tiles are blocked, by the size of its transformed filter ([`wide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wide {
    /// Blocks sized for L2, split over the threads.
    No,
    /// Blocks as large as [`WIDE_ELEMS`] allows, one per thread at most.
    PerThread,
    /// Blocks as large as [`WIDE_ELEMS`] allows, one after the other, each GEMM split over the
    /// threads.
    Serial,
}

/// How to block a convolution of `cin` × `cout` channels on `threads` threads. A transformed
/// filter too large for the caches to keep between blocks (ResNet's 256- and 512-channel layers:
/// 9.4 and 37.7 MB) would be read from L3 or memory again by every block (at 8 × 7² × 512
/// channels, 37.7 MB per 28 tiles), so such convolutions run in blocks as large as
/// [`WIDE_ELEMS`] allows. On one Zen 5 core, 8 images: 512 channels at 7² 5.25 → 4.0 ms, 256 at
/// 14² 5.0 → 4.4 ms. On two cores one block at a time with the GEMMs split took 512 channels
/// 3.5 → 2.8 ms but 256 channels 2.5 → 3.5 ms (the transforms of the one block ran on one
/// thread), so filters up to [`WIDE_FILTER_SERIAL`] take a block per thread instead.
fn wide(cin: usize, cout: usize, threads: usize) -> Wide {
    let bytes = 36usize.saturating_mul(cin).saturating_mul(cout).saturating_mul(4);
    match bytes {
        b if b <= WIDE_FILTER => Wide::No,
        b if threads > 1 && b <= WIDE_FILTER_SERIAL => Wide::PerThread,
        _ => Wide::Serial,
    }
}

/// Whether the Winograd kernel can run `geom` at all (3×3, stride 1, dilation 1, one group).
pub(super) fn applies(geom: &ConvGeom) -> bool {
    geom.kernel_hw == [3, 3] && geom.stride == [1, 1] && geom.dilation == [1, 1] && geom.groups == 1
}

/// Whether the Winograd kernel is the faster choice for `geom` (measured on Zen 4 against the
/// implicit GEMM): enough channels for the 36 GEMMs to run near the microkernel's speed, at
/// least one full output tile, and at least [`MIN_CALL_TILES`] tiles in all.
pub(super) fn qualifies(geom: &ConvGeom) -> bool {
    let tiles = geom.batch * geom.out_hw[0].div_ceil(4) * geom.out_hw[1].div_ceil(4);
    applies(geom)
        && geom.in_channels >= 16
        && geom.out_channels >= 16
        && geom.out_hw[0] >= 4
        && geom.out_hw[1] >= 4
        && tiles >= MIN_CALL_TILES
}

/// Fewest output tiles (all images) a call should have for the Winograd kernel: its transformed
/// filter is four times the implicit GEMM's, read for every block of tiles. ResNet-18's
/// 512-channel 7×7 layers at one image (4 tiles, a 37.7 MB filter), one thread of a 2-vCPU Intel
/// Xeon (Sapphire Rapids class): 3.7 ms on the Winograd kernel, 2.3 on the implicit GEMM; its
/// 256-channel 14×14 ones (16 tiles): 1.6 against 1.8.
const MIN_CALL_TILES: usize = 16;

/// The transformed filter: `U[ξ]` (`[cin × cout]`) packed for the GEMM, ξ = 6·row + column of
/// the 6×6 transform.
#[derive(Debug)]
pub struct WinogradFilter {
    u: Vec<PackedB>,
}

impl WinogradFilter {
    /// Transforms the 3×3 filter `at(o, i, y, x)` of `cout` output and `cin` input channels.
    pub(super) fn new(cin: usize, cout: usize, at: impl Fn(usize, usize, usize, usize) -> f32) -> Result<Self> {
        let mut mats = vec![0.0f32; 36 * cin * cout];
        for o in 0..cout {
            for i in 0..cin {
                // G g Gᵀ in f64: first along the kernel's columns, then its rows.
                let g = |y: usize, x: usize| at(o, i, y, x) as f64;
                let cols: [[f64; 6]; 3] = std::array::from_fn(|x| filter_1d([g(0, x), g(1, x), g(2, x)]));
                let t: [[f64; 3]; 6] = std::array::from_fn(|r| cols.map(|c| c[r]));
                for (r, row) in t.iter().enumerate() {
                    for (c, v) in filter_1d(*row).into_iter().enumerate() {
                        mats[((r * 6 + c) * cin + i) * cout + o] = v as f32;
                    }
                }
            }
        }
        let u = mats
            .chunks_exact((cin * cout).max(1))
            .take(36)
            .map(|m| PackedB::new(cin, cout, MatRef::row_major(m, cout)))
            .collect::<Result<Vec<_>>>()?;
        Ok(WinogradFilter { u })
    }

    /// Bytes held by the packed matrices.
    pub fn size_bytes(&self) -> usize {
        self.u.iter().map(PackedB::size_bytes).sum()
    }
}

/// `G·g` for one column of the kernel (6 values from 3).
fn filter_1d([g0, g1, g2]: [f64; 3]) -> [f64; 6] {
    [
        g0 / 4.0,
        -(g0 + g1 + g2) / 6.0,
        -(g0 - g1 + g2) / 6.0,
        g0 / 24.0 + g1 / 12.0 + g2 / 6.0,
        g0 / 24.0 - g1 / 12.0 + g2 / 6.0,
        g2,
    ]
}

/// The [`L`] values of `src` as one value (element by element: no call to `memcpy`).
#[inline(always)]
fn load_lanes(src: &[f32]) -> Lanes {
    let src: &Lanes = src.try_into().expect("L values");
    std::array::from_fn(|l| src[l])
}

/// `v` into the [`L`] values of `dst` (a fixed-size copy: no call to `memcpy`).
#[inline(always)]
fn store_lanes(dst: &mut [f32], v: &Lanes) {
    let dst: &mut Lanes = dst.try_into().expect("L values");
    *dst = *v;
}

/// `Bᵀ·d` lane-wise: the 6 values at `d[at(0)] … d[at(5)]` into `r[to(0)] … r[to(5)]`
/// (written in place, no array returned by value: that would be a call to `memcpy`).
#[inline(always)]
fn input_1d(d: &[Lanes], at: impl Fn(usize) -> usize, r: &mut [Lanes], to: impl Fn(usize) -> usize) {
    for l in 0..L {
        let [d0, d1, d2, d3, d4, d5] = std::array::from_fn(|k| d[at(k)][l]);
        r[to(0)][l] = 4.0 * d0 - 5.0 * d2 + d4;
        r[to(1)][l] = -4.0 * (d1 + d2) + d3 + d4;
        r[to(2)][l] = 4.0 * (d1 - d2) - d3 + d4;
        r[to(3)][l] = 2.0 * (d3 - d1) - d2 + d4;
        r[to(4)][l] = 2.0 * (d1 - d3) - d2 + d4;
        r[to(5)][l] = 4.0 * d1 - 5.0 * d3 + d5;
    }
}

/// `Aᵀ·m` lane-wise: the 6 values at `m[at(0)] … m[at(5)]` into `r[to(0)] … r[to(3)]`.
#[inline(always)]
fn output_1d(m: &[Lanes], at: impl Fn(usize) -> usize, r: &mut [Lanes], to: impl Fn(usize) -> usize) {
    for l in 0..L {
        let [m0, m1, m2, m3, m4, m5] = std::array::from_fn(|k| m[at(k)][l]);
        let (a, b) = (m1 + m2, m3 + m4);
        let (c, d) = (m1 - m2, m3 - m4);
        r[to(0)][l] = m0 + a + b;
        r[to(1)][l] = c + 2.0 * d;
        r[to(2)][l] = a + 4.0 * b;
        r[to(3)][l] = c + 8.0 * d + m5;
    }
}

/// `Bᵀ d B` of a patch (`d[6·row + column]`), into `v` in the same order; `t` is scratch.
#[inline(always)]
fn input_2d(d: &[Lanes; 36], t: &mut [Lanes; 36], v: &mut [Lanes; 36]) {
    for r in 0..6 {
        input_1d(d, |c| r * 6 + c, t, |c| r * 6 + c);
    }
    for c in 0..6 {
        input_1d(t, |r| r * 6 + c, v, |r| r * 6 + c);
    }
}

/// `Aᵀ m A` of a product tile (`m[6·row + column]`), into `y[4·row + column]`; `t` is scratch.
#[inline(always)]
fn output_2d(m: &[Lanes; 36], t: &mut [Lanes; 24], y: &mut [Lanes; 16]) {
    for r in 0..6 {
        output_1d(m, |c| r * 6 + c, t, |c| r * 4 + c);
    }
    for c in 0..4 {
        output_1d(t, |r| r * 4 + c, y, |r| r * 4 + c);
    }
}

/// The tiling of one call: tiles per row and column, and per block.
struct Tiling {
    rows: usize,
    cols: usize,
    per_block: usize,
}

impl Tiling {
    /// (image, first output row, first output column) of tile `t`.
    fn origin(&self, t: usize) -> (usize, usize, usize) {
        let per_image = self.rows * self.cols;
        let (img, r) = (t / per_image, t % per_image);
        (img, (r / self.cols) * 4, (r % self.cols) * 4)
    }
}

/// `y = clamp(act(conv(x, filter) + bias + residual))` for a geometry that [`applies`] (the
/// caller, `conv2d_f32`, validated the rest), on the current rayon pool.
pub(super) fn conv(
    geom: &ConvGeom,
    x: &[f32],
    f: &WinogradFilter,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    if !applies(geom) || f.u.len() != 36 {
        return Err(Error::invalid(OP, "a Winograd filter needs a 3x3, stride 1, dilation 1, one-group convolution"));
    }
    let (cin, cout) = (geom.in_channels, geom.out_channels);
    let (rows, cols) = (geom.out_hw[0].div_ceil(4), geom.out_hw[1].div_ceil(4));
    let tiles = geom.batch * rows * cols;
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    let wide = wide(cin, cout, threads);
    // Wide filters: every block streams the whole transformed filter through the GEMMs, so as
    // few blocks as the scratch allows (one per thread, or one at a time with each GEMM split
    // over the threads); others: blocks sized for L2, enough to keep every thread busy.
    let fit = |elems: usize| (elems / (36 * (cin + cout))).clamp(MIN_TILES, MAX_TILES) / 14 * 14;
    let small = fit(BLOCK_ELEMS);
    let large = (WIDE_ELEMS / (36 * (cin + cout))).max(MIN_TILES) / 14 * 14;
    let per_block = match wide {
        // Several threads: blocks up to 3/4 of a larger L2 where that evens the shares (one
        // thread measured no faster with them: ResNet-18's Winograd layers 7.2–7.3 ms against
        // 6.8–7.5 on a Xeon with 2 MiB of L2).
        Wide::No if threads > 1 => even_blocks(tiles, fit(block_elems()), threads),
        Wide::No => small,
        Wide::PerThread => large.min(tiles.div_ceil(threads).next_multiple_of(14)),
        Wide::Serial => large,
    };
    let tiling = Tiling { rows, cols, per_block: per_block.min(tiles) };
    let blocks = tiles.div_ceil(tiling.per_block);
    // One block at a time: the GEMMs on the whole pool (none: this thread).
    let (blocks_parallel, gemm_threads) =
        if wide == Wide::Serial { (false, if parallel { 0 } else { 1 }) } else { (parallel, 1) };
    // V, M and the output tile come from the GEMM's per-thread pool (no allocation once warm);
    // every element is written before it is read.
    let isa = FusedIsa::selected().checked();
    // Channels-first input with dense rows: copied channels-last once (a 16-channel vector per
    // pixel), so that each patch gathers whole vectors instead of transposing 6 values of 16
    // planes per row, 2.25 times per input value.
    let mut staged = Scratch::new();
    let (x, geom) = if geom.x_strides[1] != 1 && geom.x_strides[3] == 1 {
        let [h, w] = geom.in_hw;
        let cp = cin.next_multiple_of(L);
        let xs = staged.get(geom.batch * h * w * cp);
        stage(isa, geom, x, xs, parallel);
        (&*xs, &ConvGeom { x_strides: [h * w * cp, 1, w * cp, cp], ..geom.clone() })
    } else {
        (x, geom)
    };
    if wide != Wide::No && threads > 1 && tiles <= large && tiles <= SPLIT_TILES * threads {
        let args = Block { isa, geom, x, f, epi, out, tiling: &tiling, t0: 0, n: tiles, gemm_threads: 1 };
        return split_gemms(&args, threads);
    }
    try_for_units(blocks_parallel, blocks, Scratch::new, |buf, b| {
        let t0 = b * tiling.per_block;
        let n = tiling.per_block.min(tiles - t0);
        block(&Block { isa, geom, x, f, epi, out, tiling: &tiling, t0, n, gemm_threads }, buf)
    })
}

/// Copies the channels-first input `x` (rows dense: column stride 1) channels-last into `xs`:
/// `xs[((n·H + row)·W + column)·cp + channel]`, `cp` = the channels rounded up to [`L`], the
/// padding channels zero. One task per input row of an image.
fn stage(isa: FusedIsa, geom: &ConvGeom, x: &[f32], xs: &mut [f32], parallel: bool) {
    let [h, w] = geom.in_hw;
    let cin = geom.in_channels;
    let cp = cin.next_multiple_of(L);
    let [sn, sc, sh, _] = geom.x_strides;
    let row = |(r, dst): (usize, &mut [f32])| {
        let at = (r / h) * sn + (r % h) * sh;
        #[cfg(target_arch = "x86_64")]
        if isa == FusedIsa::Avx512 {
            // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F; `conv2d_f32`
            // validated that every (image, channel, row, column) of the input lies inside `x`.
            unsafe { stage_row_avx512(x, at, sc, cin, w, dst) };
            return;
        }
        let _ = isa;
        for (col, px) in dst.chunks_exact_mut(cp).enumerate() {
            for (c, v) in px.iter_mut().enumerate() {
                *v = if c < cin { x[at + c * sc + col] } else { 0.0 };
            }
        }
    };
    for_chunks(parallel, xs, w * cp, row);
}

/// One input row of [`stage`] by 16 × 16 register transposes: 16 channels of 16 columns loaded
/// (masked past the row's end, zero for padding channels), transposed, stored per column.
///
/// # Safety
/// The CPU has AVX-512F; `x` holds channels `0..cin` at `at + c·sc`, each `w` values long, and
/// `dst` holds `w · cin.next_multiple_of(16)` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stage_row_avx512(x: &[f32], at: usize, sc: usize, cin: usize, w: usize, dst: &mut [f32]) {
    use super::depthwise::blocked::Transpose;
    use std::arch::x86_64::*;
    let cp = cin.next_multiple_of(L);
    debug_assert!(dst.len() >= w * cp && (cin == 0 || at + (cin - 1) * sc + w <= x.len()));
    let mut v = [_mm512_setzero_ps(); 16];
    for c0 in (0..cin).step_by(L) {
        for col0 in (0..w).step_by(L) {
            let cols = L.min(w - col0);
            let mask = ((1u32 << cols) - 1) as u16;
            for (i, r) in v.iter_mut().enumerate() {
                *r = if c0 + i < cin {
                    // SAFETY: channel c0 + i < cin, columns col0..col0 + cols of its row: inside
                    // `x` (the function's contract); masked lanes are not read.
                    unsafe { _mm512_maskz_loadu_ps(mask, x.as_ptr().add(at + (c0 + i) * sc + col0)) }
                } else {
                    _mm512_setzero_ps()
                };
            }
            // SAFETY: AVX-512F is there (the function's contract).
            unsafe { __m512::transpose(&mut v) };
            for (j, r) in v.iter().enumerate().take(cols) {
                // SAFETY: pixel col0 + j < w, channels c0..c0 + 16 ≤ cp: inside `dst`.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr().add((col0 + j) * cp + c0), *r) };
            }
        }
    }
}

/// One block's work: tiles `t0..t0 + n` of a call.
struct Block<'a> {
    isa: FusedIsa,
    geom: &'a ConvGeom,
    x: &'a [f32],
    f: &'a WinogradFilter,
    epi: &'a ConvEpilogue<'a>,
    out: OutPtr,
    tiling: &'a Tiling,
    t0: usize,
    n: usize,
    /// Threads of each GEMM ([`GemmArgs::threads`]).
    gemm_threads: usize,
}

/// One block: tiles `t0..t0 + n`: the input transform, the 36 GEMMs one after the other (each on
/// `gemm_threads`), the output transform.
fn block(args: &Block<'_>, buf: &mut Scratch) -> Result<()> {
    let (cin, cout, n) = (args.geom.in_channels, args.geom.out_channels, args.n);
    let (v_len, m_len) = (36 * skewed(n * cin), 36 * skewed(n * cout));
    let (v, rest) = buf.get(v_len + m_len + ytile_len(args.geom)).split_at_mut(v_len);
    let (m, ytile) = rest.split_at_mut(m_len);
    run_phase(args, Phase::In(VOut::new(v), 0..n));
    for (xi, mc) in m.chunks_exact_mut(skewed(n * cout)).take(36).enumerate() {
        product(args, v, xi, &mut mc[..n * cout], args.gemm_threads)?;
    }
    run_phase(args, Phase::Out(m, ytile, 0..n));
    Ok(())
}

/// `M[ξ] = V[ξ]·U[ξ]` for the block's `n` tiles into `mc` (`n × cout`), on `threads`
/// ([`GemmArgs::threads`]).
fn product(args: &Block<'_>, v: &[f32], xi: usize, mc: &mut [f32], threads: usize) -> Result<()> {
    let (cin, cout, n) = (args.geom.in_channels, args.geom.out_channels, args.n);
    let a = MatRef::row_major(&v[xi * skewed(n * cin)..][..n * cin], cin);
    gemm_f32(GemmArgs::new(n, cout, cin, a, Rhs::Packed(&args.f.u[xi]), MatMut::row_major(mc, cout)).threads(threads))
}

/// Whether the output is channels-first with dense rows: each tile's 16 channels are then
/// transposed and written as rows of 4 pixels per channel ([`store_planes`]); other layouts go
/// through a tile buffer of [`ytile_len`] values.
fn planes(geom: &ConvGeom) -> bool {
    geom.y_strides[1] != 1 && geom.y_strides[3] == 1
}

/// The distance between consecutive matrices `V[ξ]` (`len = n·cin` values) or `M[ξ]`
/// (`n·cout`): their length and one cache line. The transforms read or write one vector in each
/// of the 36 matrices per tile; at lengths that are multiples of 4 KiB (ResNet-18's 256 channels
/// at 14²: 16 tiles, 16 KiB) those 36 vectors all fall in one L1 set, which holds 12 lines.
fn skewed(len: usize) -> usize {
    len + L
}

/// Values of the output tile buffer ([`planes`]).
fn ytile_len(geom: &ConvGeom) -> usize {
    if planes(geom) { 0 } else { 16 * geom.out_channels.next_multiple_of(L) }
}

/// The transformed input `V` (`[36][n][cin]`) as several tasks write it at once, each the rows
/// of its own tiles (interleaved with the others' in every `V[ξ]`, so not a slice per task).
#[derive(Clone, Copy)]
struct VOut {
    ptr: *mut f32,
    len: usize,
}
// SAFETY: tasks write disjoint rows through it (`transform_in` writes only its tiles' rows) and
// nothing reads through it while they run.
unsafe impl Send for VOut {}
// SAFETY: as above.
unsafe impl Sync for VOut {}

impl VOut {
    fn new(v: &mut [f32]) -> Self {
        VOut { ptr: v.as_mut_ptr(), len: v.len() }
    }

    /// Elements `at..at + n`, which no other task accesses while the slice lives.
    ///
    /// # Safety
    /// The caller's task is the only one using those elements (its own tile's row).
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, at: usize, n: usize) -> &mut [f32] {
        assert!(at.checked_add(n).is_some_and(|e| e <= self.len), "winograd V row {at}+{n} past {}", self.len);
        // SAFETY: in bounds (asserted); exclusive to the caller's task (the contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), n) }
    }
}

/// The input transform of the block's tiles `t0 + j`, j in `js`, into `v` (`[36][n][cin]`).
#[inline(always)]
fn transform_in(&Block { geom, x, tiling, t0, n, .. }: &Block<'_>, v: VOut, js: std::ops::Range<usize>) {
    let cin = geom.in_channels;
    let vs = skewed(n * cin);
    let mut d = [[0.0f32; L]; 36];
    let mut t = [[0.0f32; L]; 36];
    let mut tmp = [[0.0f32; L]; 36];
    for j in js {
        let (img, oy, ox) = tiling.origin(t0 + j);
        for c0 in (0..cin).step_by(L) {
            let lanes = L.min(cin - c0);
            gather(geom, x, img, oy, ox, c0, lanes, &mut d);
            input_2d(&d, &mut tmp, &mut t);
            // The test outside the loops: with it inside, LLVM merges both copies into one
            // call to `memcpy` of a selected length.
            if lanes == L {
                for (xi, tv) in t.iter().enumerate() {
                    // SAFETY: row j of each V[ξ] belongs to the task transforming tile j.
                    store_lanes(unsafe { v.row(xi * vs + j * cin + c0, L) }, tv);
                }
            } else {
                for (xi, tv) in t.iter().enumerate() {
                    // SAFETY: as above.
                    unsafe { v.row(xi * vs + j * cin + c0, lanes) }.copy_from_slice(&tv[..lanes]);
                }
            }
        }
    }
}

/// The output transform, bias and epilogue of the block's tiles `t0 + j`, j in `js`, from `m`
/// (`[36][n][cout]`) into the output (`ytile`: [`ytile_len`] values of scratch).
#[inline(always)]
fn transform_out(
    &Block { isa, geom, epi, out, tiling, t0, n, .. }: &Block<'_>,
    m: &[f32],
    ytile: &mut [f32],
    js: std::ops::Range<usize>,
) {
    let cout = geom.out_channels;
    let ms = skewed(n * cout);
    let cout_pad = cout.next_multiple_of(L);
    let planes = planes(geom);
    let mut mt = [[0.0f32; L]; 36];
    let mut yt = [[0.0f32; L]; 16];
    let mut tmp_out = [[0.0f32; L]; 24];
    for j in js {
        let (img, oy, ox) = tiling.origin(t0 + j);
        for o0 in (0..cout).step_by(L) {
            let lanes = L.min(cout - o0);
            if lanes == L {
                for (xi, mv) in mt.iter_mut().enumerate() {
                    *mv = load_lanes(&m[xi * ms + j * cout + o0..][..L]);
                }
            } else {
                for (xi, mv) in mt.iter_mut().enumerate() {
                    mv[..lanes].copy_from_slice(&m[xi * ms + j * cout + o0..][..lanes]);
                }
            }
            output_2d(&mt, &mut tmp_out, &mut yt);
            for (p, yv) in yt.iter_mut().enumerate() {
                if let Some(b) = epi.bias {
                    for (y, &bv) in yv.iter_mut().zip(&b[o0..o0 + lanes]) {
                        *y += bv;
                    }
                }
                if !planes {
                    ytile[p * cout_pad + o0..][..L].copy_from_slice(yv);
                }
            }
            if planes {
                store_planes(isa, geom, epi, out, &mut yt, [img, oy, ox], o0, lanes);
            }
        }
        if !planes {
            store(geom, epi, out, ytile, cout_pad, img, oy, ox);
        }
    }
}

/// One transform of a block: the input transform into `v`, or the output transform from `m` with
/// the tile buffer `ytile`, of the block's tiles in the range. The transforms are separate
/// multiplies and adds (never fused), so every ISA's body gives the same bits.
enum Phase<'b> {
    In(VOut, std::ops::Range<usize>),
    Out(&'b [f32], &'b mut [f32], std::ops::Range<usize>),
}

#[inline(always)]
fn phase(args: &Block<'_>, p: Phase<'_>) {
    match p {
        Phase::In(v, js) => transform_in(args, v, js),
        Phase::Out(m, ytile, js) => transform_out(args, m, ytile, js),
    }
}

/// [`phase`] compiled with AVX-512F enabled: the transforms' 16-lane values are one register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn phase_avx512(args: &Block<'_>, p: Phase<'_>) {
    phase(args, p)
}

/// [`phase`] compiled with AVX2 and FMA enabled (two 8-lane registers per value).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn phase_avx2(args: &Block<'_>, p: Phase<'_>) {
    phase(args, p)
}

/// [`phase`] on the block's ISA.
fn run_phase(args: &Block<'_>, p: Phase<'_>) {
    #[cfg(target_arch = "x86_64")]
    if args.isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F, AVX2 and FMA.
        return unsafe { phase_avx512(args, p) };
    }
    #[cfg(target_arch = "x86_64")]
    if args.isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
        return unsafe { phase_avx2(args, p) };
    }
    phase(args, p)
}

/// All of a call's tiles as one block whose 36 GEMMs, not its tiles, are split over the threads
/// (few tiles under a large transformed filter; see [`SPLIT_TILES`]): the input transform with
/// the tiles split over the threads, the GEMMs `M[ξ] = V[ξ]·U[ξ]` one per task (each thread
/// reads its share of the filter), then the output transform with the tiles split again. (The
/// input transform ran on the calling thread: ResNet-18's 256 channels at 14², one image, two
/// Zen 5 cores, 58 µs of a 259 µs call with the other thread idle.)
fn split_gemms(args: &Block<'_>, threads: usize) -> Result<()> {
    let (cin, cout, n) = (args.geom.in_channels, args.geom.out_channels, args.n);
    let mut buf = Scratch::new();
    let (v, m) = buf.get(36 * (skewed(n * cin) + skewed(n * cout))).split_at_mut(36 * skewed(n * cin));
    let per = n.div_ceil(threads).max(1);
    let vo = VOut::new(v);
    (0..n.div_ceil(per)).into_par_iter().with_max_len(1).for_each(|k| {
        run_phase(args, Phase::In(vo, k * per..n.min((k + 1) * per)));
    });
    let v = &*v;
    m.par_chunks_mut(skewed(n * cout))
        .take(36)
        .enumerate()
        .with_max_len(1)
        .try_for_each(|(xi, mc)| product(args, v, xi, &mut mc[..n * cout], 1))?;
    let m = &*m;
    (0..n.div_ceil(per)).into_par_iter().with_max_len(1).for_each_init(Scratch::new, |ys, k| {
        let ytile = ys.get(ytile_len(args.geom));
        run_phase(args, Phase::Out(m, ytile, k * per..n.min((k + 1) * per)));
    });
    Ok(())
}

/// `v` (16 rows of 16 lanes) transposed in place: lane `j` of row `i` swaps with lane `i` of row
/// `j`, by register shuffles on AVX-512.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn transpose16(isa: FusedIsa, v: &mut [Lanes; 16]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        use super::depthwise::blocked::Transpose;
        use std::arch::x86_64::*;
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F; each row is 16
        // values, loaded and stored whole.
        unsafe {
            let mut r: [__m512; 16] = std::array::from_fn(|i| _mm512_loadu_ps(v[i].as_ptr()));
            __m512::transpose(&mut r);
            for (row, x) in v.iter_mut().zip(r) {
                _mm512_storeu_ps(row.as_mut_ptr(), x);
            }
        }
        return;
    }
    let _ = isa;
    for i in 0..L {
        for j in i + 1..L {
            let t = v[i][j];
            v[i][j] = v[j][i];
            v[j][i] = t;
        }
    }
}

/// Finishes and writes output channels `o0..o0 + lanes` of the tile at `[img, oy, ox]` to a
/// channels-first output whose rows are dense: `yt[pixel][channel]` (the bias added) is
/// transposed to `[channel][4·row + column]`, the residual added, the activation and clamp
/// applied to all of it at once, and each channel written as up to 4 rows of up to 4 values.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn store_planes(
    isa: FusedIsa,
    geom: &ConvGeom,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    yt: &mut [Lanes; 16],
    [img, oy, ox]: [usize; 3],
    o0: usize,
    lanes: usize,
) {
    transpose16(isa, yt);
    let [sn, sc, sh, _] = geom.y_strides;
    let (ph, pw) = ((geom.out_hw[0] - oy).min(4), (geom.out_hw[1] - ox).min(4));
    let at = |c: usize, py: usize| img * sn + (o0 + c) * sc + (oy + py) * sh + ox;
    if let Some(r) = epi.residual {
        for (c, ch) in yt.iter_mut().enumerate().take(lanes) {
            for py in 0..ph {
                let res = &r[at(c, py)..][..pw];
                ch[py * 4..][..pw].iter_mut().zip(res).for_each(|(v, &rv)| *v += rv);
            }
        }
    }
    epi.activate_slice(yt.as_flattened_mut());
    // SAFETY (both loops): `conv2d_f32` validated that every (image, channel, row, column) of
    // the output lies inside `y`, and the row is dense (column stride 1), so the pw values from
    // column ox of row oy + py of channel o0 + c are inside it; they belong to this tile only,
    // and each tile to one block (one task). The width test stays outside the loops (inside,
    // LLVM merges both copies into one call to `memcpy` of a selected length).
    if pw == 4 {
        for (c, ch) in yt.iter().enumerate().take(lanes) {
            for py in 0..ph {
                let row: [f32; 4] = ch[py * 4..py * 4 + 4].try_into().expect("4 values");
                // SAFETY: see above.
                unsafe { out.0.add(at(c, py)).cast::<[f32; 4]>().write_unaligned(row) };
            }
        }
    } else {
        for (c, ch) in yt.iter().enumerate().take(lanes) {
            for py in 0..ph {
                // SAFETY: see above.
                unsafe { std::ptr::copy_nonoverlapping(ch[py * 4..].as_ptr(), out.0.add(at(c, py)), pw) };
            }
        }
    }
}

/// Gathers the 6×6 input patch of the tile at output (`oy`, `ox`) of image `img`, channels
/// `c0..c0 + lanes`, into `d` (zero outside the input and in unused lanes). Channels-first input
/// with dense rows never gets here: [`conv`] stages it channels-last first.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gather(geom: &ConvGeom, x: &[f32], img: usize, oy: usize, ox: usize, c0: usize, lanes: usize, d: &mut [Lanes; 36]) {
    let [sn, sc, sh, sw] = geom.x_strides;
    // The patch's rows and columns that lie inside the input.
    let span = |a: usize, o: usize| {
        let first = o as isize - geom.pad[a] as isize;
        let lo = (-first).clamp(0, 6) as usize;
        let hi = (geom.in_hw[a] as isize - first).clamp(lo as isize, 6) as usize;
        (first, lo, hi)
    };
    let ((fy, ylo, yhi), (fx, xlo, xhi)) = (span(0, oy), span(1, ox));
    if lanes < L {
        *d = [[0.0; L]; 36];
    } else if ylo > 0 || yhi < 6 || xlo > 0 || xhi < 6 {
        // Only the patch values outside the input (the rest are overwritten below).
        for (r, row) in d.chunks_exact_mut(6).enumerate() {
            let (a, b) = if (ylo..yhi).contains(&r) { (xlo, xhi) } else { (6, 6) };
            let (head, tail) = row.split_at_mut(b);
            head[..a].iter_mut().chain(tail).for_each(|v| *v = [0.0; L]);
        }
    }
    let base = img * sn + c0 * sc;
    for r in ylo..yhi {
        let row = base + (fy + r as isize) as usize * sh;
        let first = row + (fx + xlo as isize) as usize * sw;
        for c in xlo..xhi {
            let at = first + (c - xlo) * sw;
            let dv = &mut d[r * 6 + c];
            if sc == 1 && lanes == L {
                // A whole vector (a fixed-size copy, no call).
                *dv = load_lanes(&x[at..at + L]);
            } else if sc == 1 {
                dv[..lanes].copy_from_slice(&x[at..at + lanes]);
            } else {
                for (l, v) in dv[..lanes].iter_mut().enumerate() {
                    *v = x[at + l * sc];
                }
            }
        }
    }
}

/// Applies the rest of the epilogue to a tile's outputs (`ytile[pixel][channel]`, the bias
/// added) and writes the pixels that lie inside the output: the residual is added first, so
/// that the activation and the clamp run as vector passes over the whole tile.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn store(
    geom: &ConvGeom,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    ytile: &mut [f32],
    cout_pad: usize,
    img: usize,
    oy: usize,
    ox: usize,
) {
    let cout = geom.out_channels;
    let [sn, sc, sh, sw] = geom.y_strides;
    let (ph, pw) = ((geom.out_hw[0] - oy).min(4), (geom.out_hw[1] - ox).min(4));
    let pixel = |py: usize, px: usize| img * sn + (oy + py) * sh + (ox + px) * sw;
    if let Some(r) = epi.residual {
        for py in 0..ph {
            for px in 0..pw {
                let at = pixel(py, px);
                let dst = &mut ytile[(py * 4 + px) * cout_pad..][..cout];
                if sc == 1 {
                    dst.iter_mut().zip(&r[at..at + cout]).for_each(|(v, &rv)| *v += rv);
                } else {
                    dst.iter_mut().enumerate().for_each(|(o, v)| *v += r[at + o * sc]);
                }
            }
        }
    }
    epi.activate_slice(ytile);
    for py in 0..ph {
        for px in 0..pw {
            let at = pixel(py, px);
            let src = &ytile[(py * 4 + px) * cout_pad..][..cout];
            for (o, &v) in src.iter().enumerate() {
                // SAFETY: `conv2d_f32` validated that every (image, channel, row, column) of the
                // output lies inside `y`; pixel (oy + py, ox + px) of image `img` belongs to this
                // tile only, and each tile to one block (one task).
                unsafe { out.write(at + o * sc, v) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Lcg;
    use super::super::{ConvFilter, conv2d_f32};
    use super::*;
    use crate::kernels::gemm::Activation;

    /// A 3×3 stride-1 geometry over NCHW or NHWC tensors with "same"-style output size for `pad`.
    fn geometry(batch: usize, cin: usize, cout: usize, hw: [usize; 2], pad: usize, nhwc: bool) -> ConvGeom {
        let out_hw = hw.map(|v| (v + 2 * pad).saturating_sub(2));
        let st = |c: usize, [h, w]: [usize; 2]| {
            if nhwc { [h * w * c, 1, w * c, c] } else { [c * h * w, h * w, w, 1] }
        };
        ConvGeom {
            batch,
            in_channels: cin,
            in_hw: hw,
            out_channels: cout,
            out_hw,
            kernel_hw: [3, 3],
            stride: [1, 1],
            pad: [pad, pad],
            dilation: [1, 1],
            groups: 1,
            x_strides: st(cin, hw),
            y_strides: st(cout, out_hw),
        }
    }

    /// The f64 direct convolution (OIHW filter `w`) at every output index: (index, sum, Σ|x·w|).
    fn direct(geom: &ConvGeom, x: &[f32], w: &[f32]) -> Vec<(usize, f64, f64)> {
        let (cin, [ih, iw], [oh, ow]) = (geom.in_channels, geom.in_hw, geom.out_hw);
        let (xs, ys) = (geom.x_strides, geom.y_strides);
        let mut out = Vec::new();
        for n in 0..geom.batch {
            for o in 0..geom.out_channels {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut s, mut a) = (0.0f64, 0.0f64);
                        for i in 0..cin {
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    let (iy, ix) =
                                        ((oy + ky) as i64 - geom.pad[0] as i64, (ox + kx) as i64 - geom.pad[1] as i64);
                                    if iy < 0 || ix < 0 || iy >= ih as i64 || ix >= iw as i64 {
                                        continue;
                                    }
                                    let xv =
                                        x[n * xs[0] + i * xs[1] + iy as usize * xs[2] + ix as usize * xs[3]] as f64;
                                    let p = xv * w[((o * cin + i) * 3 + ky) * 3 + kx] as f64;
                                    s += p;
                                    a += p.abs();
                                }
                            }
                        }
                        out.push((n * ys[0] + o * ys[1] + oy * ys[2] + ox * ys[3], s, a));
                    }
                }
            }
        }
        out
    }

    /// Runs `geom` through the filter `winograd` picks and returns the output.
    fn run(
        geom: &ConvGeom,
        x: &[f32],
        w: &[f32],
        epi: &ConvEpilogue<'_>,
        winograd: bool,
        pool: Option<&rayon::ThreadPool>,
    ) -> Vec<f32> {
        let cin = geom.in_channels;
        let f = ConvFilter::with_winograd(geom, w, [cin * 9, 9, 3, 1], winograd).unwrap();
        assert_eq!(f.describe() == "winograd f(4,3)", winograd && qualifies(geom), "{geom:?}");
        let mut y = vec![f32::NAN; geom.batch * geom.out_channels * geom.out_hw[0] * geom.out_hw[1]];
        conv2d_f32(geom, x, &f, epi, &mut y, pool).unwrap();
        y
    }

    /// Errors of a plain convolution against the f64 one: the largest absolute error, it over
    /// the largest output magnitude, and the largest error relative to Σ|x·w| of its output.
    fn errors(geom: &ConvGeom, x: &[f32], w: &[f32], winograd: bool) -> [f64; 3] {
        let y = run(geom, x, w, &ConvEpilogue::default(), winograd, None);
        let want = direct(geom, x, w);
        let scale = want.iter().map(|&(_, s, _)| s.abs()).fold(f64::MIN_POSITIVE, f64::max);
        let (mut abs, mut rel) = (0.0f64, 0.0f64);
        for (i, s, a) in want {
            let e = (y[i] as f64 - s).abs();
            abs = abs.max(e);
            rel = rel.max(e / a.max(f64::MIN_POSITIVE));
        }
        [abs, abs / scale, rel]
    }

    /// Relative error bound per output, against Σ|x·w| + |bias| + |residual| (the measured worst
    /// case is about 2e-6; see `error_on_resnet_shapes`).
    const TOL: f64 = 1e-5;

    #[test]
    fn few_tiles_stay_on_the_implicit_gemm() {
        // One image at 7×7 (4 tiles): the 512-channel filter transformed is read for too few
        // tiles; eight images (32 tiles), or one at 14×14 (16), take the Winograd kernel.
        let g = |batch: usize, hw: usize| ConvGeom {
            batch,
            in_channels: 512,
            in_hw: [hw, hw],
            out_channels: 512,
            out_hw: [hw, hw],
            kernel_hw: [3, 3],
            stride: [1, 1],
            pad: [1, 1],
            dilation: [1, 1],
            groups: 1,
            x_strides: [512 * hw * hw, hw * hw, hw, 1],
            y_strides: [512 * hw * hw, hw * hw, hw, 1],
        };
        assert!(!qualifies(&g(1, 7)));
        assert!(!qualifies(&g(3, 7)));
        assert!(qualifies(&g(4, 7)));
        assert!(qualifies(&g(8, 7)));
        assert!(qualifies(&g(1, 14)));
    }

    #[test]
    fn staging_copies_every_channel_of_every_pixel_on_each_isa() {
        // Images 1000 values apart (more than one image's 37·3·35), rows 40 apart (> 35 columns).
        let (batch, cin, [h, w]) = (2, 37, [3, 35]);
        let mut geom = geometry(batch, cin, 16, [h, w], 1, false);
        geom.x_strides = [cin * 3 * 40 + 1000, 3 * 40, 40, 1];
        let x: Vec<f32> = (0..batch * geom.x_strides[0]).map(|i| i as f32).collect();
        let cp = 48;
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            for parallel in [false, true] {
                let mut xs = vec![f32::NAN; batch * h * w * cp];
                stage(isa.checked(), &geom, &x, &mut xs, parallel);
                for (i, &v) in xs.iter().enumerate() {
                    let (c, col, row, n) = (i % cp, (i / cp) % w, (i / cp / w) % h, i / cp / w / h);
                    let want = if c < cin { (n * geom.x_strides[0] + c * 120 + row * 40 + col) as f32 } else { 0.0 };
                    assert_eq!(v, want, "{isa:?} at n {n} row {row} col {col} channel {c}");
                }
            }
        }
    }

    #[test]
    fn tiles_transpose_on_each_isa() {
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            let mut v: [Lanes; 16] = std::array::from_fn(|i| std::array::from_fn(|j| (i * 100 + j) as f32));
            transpose16(isa.checked(), &mut v);
            for (i, row) in v.iter().enumerate() {
                for (j, &x) in row.iter().enumerate() {
                    assert_eq!(x, (j * 100 + i) as f32, "{isa:?} row {i} lane {j}");
                }
            }
        }
    }

    #[test]
    fn matches_direct_loop_on_random_geometries() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(11);
        for case in 0..80 {
            let batch = [0, 1, 1, 3][rng.below(4)];
            // Widths past 16: channels-first rows staged in whole and partial 16-column blocks.
            let hw = [1 + rng.below(17), 1 + rng.below(24)];
            let pad = rng.below(3);
            // Mostly enough channels to take the Winograd path; some below (the implicit GEMM).
            let (cin, cout) = if case % 8 == 7 {
                (1 + rng.below(15), 1 + rng.below(40))
            } else {
                (16 + rng.below(25), 16 + rng.below(25))
            };
            let geom = geometry(batch, cin, cout, hw, pad, case % 2 == 0);
            let x: Vec<f32> = (0..batch * cin * hw[0] * hw[1]).map(|_| rng.next()).collect();
            let w: Vec<f32> = (0..cout * cin * 9).map(|_| rng.next()).collect();
            let len = batch * cout * geom.out_hw[0] * geom.out_hw[1];
            let bias: Vec<f32> = (0..cout).map(|_| rng.next()).collect();
            let res: Vec<f32> = (0..len).map(|_| rng.next() * 4.0).collect();
            let parts = rng.below(16);
            let act = if parts & 4 != 0 { Activation::Relu } else { Activation::None };
            let epi = ConvEpilogue {
                bias: (parts & 1 != 0).then_some(&bias[..]),
                residual: (parts & 2 != 0).then_some(&res[..]),
                activation: act,
                clamp: (parts & 8 != 0).then_some((-0.5, 0.7)),
            };
            let y = run(&geom, &x, &w, &epi, true, (case % 3 == 0).then_some(&pool));
            for (i, s, a) in direct(&geom, &x, &w) {
                let o = channel(&geom, i);
                let b = epi.bias.map_or(0.0, |b| b[o] as f64);
                let r = epi.residual.map_or(0.0, |r| r[i] as f64);
                let mut v = s + b + r;
                if act == Activation::Relu {
                    v = v.max(0.0);
                }
                if let Some((lo, hi)) = epi.clamp {
                    v = v.clamp(lo as f64, hi as f64);
                }
                let tol = TOL * (a + b.abs() + r.abs()) + 1e-30;
                assert!((y[i] as f64 - v).abs() <= tol, "{geom:?} parts {parts} at {i}: {} vs {v}", y[i]);
            }
        }
    }

    #[test]
    fn blocks_split_evenly_over_the_threads() {
        // (tiles, most tiles per block, threads) -> tiles per block, worked by hand: the block
        // count is a multiple of the threads, at least one block each.
        for (tiles, small, threads, per) in [
            (196, 84, 2, 49),  // 3 blocks of 84 -> 4 of 49
            (196, 42, 2, 33),  // 5 of 42 -> 6 of 33 (the last 31)
            (49, 42, 2, 25),   // 2 blocks: 25 and 24
            (1568, 84, 2, 79), // 19 -> 20
            (7, 28, 2, 4),     // 1 -> 2 blocks: 4 and 3
            (3, 28, 4, 1),     // fewer tiles than threads: one tile each
        ] {
            assert_eq!(even_blocks(tiles, small, threads), per, "{tiles} tiles, {small}, {threads} threads");
        }
    }

    /// Filters too large for the caches ([`wide`]): on one thread (two blocks of tiles one after
    /// the other, each GEMM on this thread) and on two (a block per thread; one block with each
    /// GEMM split over the pool; few tiles: one block with its 36 GEMMs spread over the pool,
    /// [`split_gemms`]), against the f64 loop.
    #[test]
    fn wide_filters_match_direct_loop() {
        let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(29);
        // (batch, channels, input size, pool, blocking, blocks: None for `split_gemms`, NHWC).
        let cases = [
            (3, 172, [28, 28], None, Wide::Serial, Some(2), false),
            (2, 200, [28, 28], Some(&two), Wide::PerThread, Some(2), false),
            (2, 352, [20, 20], Some(&two), Wide::Serial, Some(1), false),
            // Few tiles: one block, its GEMMs split over the threads (channels not a multiple
            // of 16, edge tiles, both layouts).
            (2, 200, [10, 10], Some(&two), Wide::PerThread, None, false),
            (1, 180, [13, 9], Some(&two), Wide::PerThread, None, true),
            (1, 352, [6, 6], Some(&two), Wide::Serial, None, false),
        ];
        for (batch, c, hw, pool, how, blocks, nhwc) in cases {
            let threads = if pool.is_some() { 2 } else { 1 };
            assert_eq!(wide(c, c, threads), how);
            let geom = geometry(batch, c, c, hw, 1, nhwc);
            let tiles = batch * geom.out_hw[0].div_ceil(4) * geom.out_hw[1].div_ceil(4);
            let mut per_block = WIDE_ELEMS / (36 * 2 * c) / 14 * 14;
            if how == Wide::PerThread {
                per_block = per_block.min(tiles.div_ceil(threads).next_multiple_of(14));
            }
            match blocks {
                Some(b) => {
                    assert!(threads == 1 || tiles > SPLIT_TILES * threads, "{geom:?}");
                    assert_eq!(tiles.div_ceil(per_block), b, "{geom:?}");
                }
                None => {
                    let large = WIDE_ELEMS / (36 * 2 * c) / 14 * 14;
                    assert!(threads > 1 && tiles <= SPLIT_TILES * threads && tiles <= large, "{geom:?}");
                }
            }
            let x: Vec<f32> = (0..batch * c * hw[0] * hw[1]).map(|_| rng.next()).collect();
            let w: Vec<f32> = (0..c * c * 9).map(|_| rng.next()).collect();
            let len = batch * c * geom.out_hw[0] * geom.out_hw[1];
            let bias: Vec<f32> = (0..c).map(|_| rng.next()).collect();
            let res: Vec<f32> = (0..len).map(|_| rng.next()).collect();
            let epi =
                ConvEpilogue { bias: Some(&bias), residual: Some(&res), activation: Activation::Relu, clamp: None };
            let y = run(&geom, &x, &w, &epi, true, pool);
            for (i, s, a) in direct(&geom, &x, &w) {
                let (b, r) = (bias[channel(&geom, i)] as f64, res[i] as f64);
                let v = (s + b + r).max(0.0);
                let tol = TOL * (a + b.abs() + r.abs());
                assert!((y[i] as f64 - v).abs() <= tol, "{geom:?} at {i}: {} vs {v}", y[i]);
            }
        }
    }

    /// Output channel of output element `i` (the strides of [`geometry`] are dense).
    fn channel(geom: &ConvGeom, i: usize) -> usize {
        let [_, sc, _, _] = geom.y_strides;
        let pixels = geom.out_hw[0] * geom.out_hw[1];
        if sc == 1 { i % geom.out_channels } else { (i / pixels) % geom.out_channels }
    }

    /// The errors documented in docs/configuration.md (`cargo test --release --lib
    /// error_on_resnet_shapes -- --ignored --nocapture`): ResNet-18's 3×3 stride-1 shapes (batch 1),
    /// uniform[-1, 1] data and weights, and BN-folded-like magnitudes (post-ReLU activations,
    /// weights of scale 1/sqrt(9·cin) times per-channel factors from 0.1 to 3).
    #[test]
    #[ignore = "measurement, slow in debug builds"]
    fn error_on_resnet_shapes() {
        let mut rng = Lcg(5);
        for (c, hw) in [(64, 56), (128, 28), (256, 14), (512, 7)] {
            let geom = geometry(1, c, c, [hw, hw], 1, false);
            for realistic in [false, true] {
                let x: Vec<f32> =
                    (0..c * hw * hw).map(|_| if realistic { rng.next().max(0.0) * 2.0 } else { rng.next() }).collect();
                let s = 1.0 / (9.0 * c as f32).sqrt();
                let gain: Vec<f32> = (0..c).map(|_| 0.1 + 1.45 * (rng.next() + 1.0)).collect();
                let w: Vec<f32> = (0..c * c * 9)
                    .map(|k| if realistic { rng.next() * s * gain[k / (c * 9)] } else { rng.next() })
                    .collect();
                let [wa, ws, wr] = errors(&geom, &x, &w, true);
                let [ga, gs, gr] = errors(&geom, &x, &w, false);
                println!(
                    "{c}x{hw}x{hw} {}: winograd abs {wa:.2e} /scale {ws:.2e} /sum|xw| {wr:.2e}; implicit gemm abs {ga:.2e} /scale {gs:.2e} /sum|xw| {gr:.2e}",
                    if realistic { "bn-like" } else { "uniform" }
                );
                assert!(wr <= TOL && gr <= TOL);
            }
        }
    }
}
