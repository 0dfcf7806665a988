//! The blocked GEMM driver (BLIS loop order jc → pc → ic → jr → ir): packs B blocks (or reads
//! them in place, or takes them pre-packed), packs A blocks, calls a tile per MR x NR block of
//! C, runs the activation on each finished tile while it is in L1 (and hands it to the job's
//! [`Finish`], e.g. the rounding of a half-precision output), and splits the work over threads
//! by M or N blocks.

use rayon::prelude::*;

use super::blocking::{Blocking, round_up};
use super::epilogue::{Activation, Finish, Region, Scalar};
use super::kernel::{AlignedBuf, Family, PackFrom, PanelBuf, TileArgs};
use super::pack::{colsum_correction, pack_panels};

/// A read-only strided matrix view by raw pointer (validated by the public entry points).
pub(crate) struct RawMat<T> {
    pub ptr: *const T,
    pub rs: usize,
    pub cs: usize,
}

impl<T> RawMat<T> {
    /// The view starting at element (r, c).
    pub fn offset(self, r: usize, c: usize) -> Self {
        // SAFETY (wrapping_add): only computes an address; it is dereferenced only for indices
        // inside the validated extent.
        RawMat { ptr: self.ptr.wrapping_add(r * self.rs + c * self.cs), ..self }
    }
}

/// A writable strided matrix view by raw pointer.
pub(crate) struct RawMatMut<T> {
    pub ptr: *mut T,
    pub rs: usize,
    pub cs: usize,
}

impl<T> RawMatMut<T> {
    /// The view starting at element (r, c).
    pub fn offset(self, r: usize, c: usize) -> Self {
        RawMatMut { ptr: self.ptr.wrapping_add(r * self.rs + c * self.cs), ..self }
    }
}

impl<T> Clone for RawMat<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RawMat<T> {}
impl<T> Clone for RawMatMut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RawMatMut<T> {}

/// One GEMM problem after validation: `C = act(alpha·A·B + beta·C + bias)`.
pub(crate) struct Job<'a, TI, T> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: RawMat<TI>,
    pub b: RawMat<TI>,
    pub c: RawMatMut<T>,
    pub alpha: T,
    pub beta: T,
    pub bias_row: Option<&'a [T]>,
    pub bias_col: Option<&'a [T]>,
    pub act: Activation,
    /// Takes each finished region of C ([`Finish`]).
    pub finish: Option<&'a dyn Finish<T>>,
}

impl<TI, T: Copy> Clone for Job<'_, TI, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<TI, T: Copy> Copy for Job<'_, TI, T> {}

// SAFETY: a Job is shared between threads only by `run`, which hands each thread a disjoint
// block of C (the entry points check C's layout is injective); A, B and biases are read-only.
unsafe impl<TI: Sync, T: Send + Sync> Send for Job<'_, TI, T> {}
// SAFETY: as above.
unsafe impl<TI: Sync, T: Send + Sync> Sync for Job<'_, TI, T> {}

impl<TI, T: Copy> Job<'_, TI, T> {
    /// The sub-problem of rows [r0, r0+m) and columns [c0, c0+n).
    pub fn sub(&self, r0: usize, m: usize, c0: usize, n: usize) -> Self {
        Job {
            m,
            n,
            a: self.a.offset(r0, 0),
            b: self.b.offset(0, c0),
            c: self.c.offset(r0, c0),
            bias_row: self.bias_row.map(|b| &b[r0..r0 + m]),
            bias_col: self.bias_col.map(|b| &b[c0..c0 + n]),
            ..*self
        }
    }

    /// The transposed problem `Cᵀ = Bᵀ·Aᵀ` (row and column biases swap).
    pub fn transposed(&self) -> Self {
        Job {
            m: self.n,
            n: self.m,
            a: RawMat { ptr: self.b.ptr, rs: self.b.cs, cs: self.b.rs },
            b: RawMat { ptr: self.a.ptr, rs: self.a.cs, cs: self.a.rs },
            c: RawMatMut { ptr: self.c.ptr, rs: self.c.cs, cs: self.c.rs },
            bias_row: self.bias_col,
            bias_col: self.bias_row,
            ..*self
        }
    }
}

/// B panels packed once for a family (see `PackedB`): for each KC block, all column panels.
pub(crate) struct PackedPanels<PB> {
    pub buf: PanelBuf<PB>,
    pub kc: usize,
    /// `n` rounded up to `nr`.
    pub n_pad: usize,
    /// Per KC block, `n_pad` VNNI corrections (empty for other families).
    pub colsum: Vec<i32>,
}

impl<PB: Copy> PackedPanels<PB> {
    /// Packs all of `b` (k x n) for `fam` with depth blocks of `kc` (one block of
    /// [`Self::pack_blocks`]; the tests' shorthand).
    ///
    /// # Safety
    /// `b` is readable over k x n.
    #[cfg(test)]
    pub unsafe fn pack<TI: Copy, PA>(
        fam: &Family<PA, PB, impl Sized>,
        b: RawMat<TI>,
        k: usize,
        n: usize,
        kc: usize,
    ) -> Self
    where
        PB: PackFrom<TI>,
    {
        // SAFETY: forwarded contract (one block of all n columns).
        unsafe { Self::pack_blocks(fam, &[(b, n)], k, kc) }
    }

    /// Packs the k x (n_1 + … + n_j) matrix whose columns are the blocks `blocks` (`(view,
    /// n_i)`) side by side, as [`Self::pack`] packs their concatenation, without materialising
    /// it: each block is packed into its own panels.
    ///
    /// # Safety
    /// Each view is readable over k x n_i, and every block but the last has a multiple of
    /// `fam.nr` columns (so that each block starts a panel).
    pub unsafe fn pack_blocks<TI: Copy, PA>(
        fam: &Family<PA, PB, impl Sized>,
        blocks: &[(RawMat<TI>, usize)],
        k: usize,
        kc: usize,
    ) -> Self
    where
        PB: PackFrom<TI>,
    {
        let nr = fam.nr;
        let n: usize = blocks.iter().map(|b| b.1).sum();
        // Depth blocks are whole A groups (the B groups divide them).
        let g = fam.g;
        let kc = balanced(k, kc, fam.ga());
        let n_pad = round_up(n, nr);
        let nblocks = k.div_ceil(kc);
        let mut buf = PanelBuf::<PB>::zeroed((nblocks * kc * n_pad).max(1));
        let mut colsum = if fam.needs_colsum { vec![0i32; nblocks * n_pad] } else { Vec::new() };
        for (bi, pc) in (0..k).step_by(kc).enumerate() {
            let kcb = kc.min(k - pc);
            // A panel of this depth block holds ceil(kcb/g)*g*nr elements.
            let panel = kcb.div_ceil(g) * g * nr;
            let mut col = 0;
            for &(b, nb) in blocks {
                debug_assert!(col % nr == 0, "a block starts inside a panel");
                // SAFETY: block bi starts at pc * n_pad (earlier blocks are full) and holds
                // ceil(kcb/g)*g*n_pad <= kc*n_pad elements, its panels in column order, so the
                // panels of columns col.. start at panel (col / nr) (col is a multiple of nr);
                // the source block lies inside b.
                unsafe {
                    let dst = buf.as_mut_ptr().add(pc * n_pad + col / nr * panel);
                    let src = b.offset(pc, 0);
                    pack_panels::<TI, PB>(src.ptr, src.cs, src.rs, nb, kcb, nr, g, dst, fam.isa);
                    if fam.needs_colsum {
                        colsum_correction(
                            dst.cast::<i8>(),
                            nb,
                            kcb.div_ceil(g),
                            nr,
                            g,
                            &mut colsum[bi * n_pad + col..bi * n_pad + col + nb.next_multiple_of(nr)],
                        );
                    }
                }
                col += nb;
            }
        }
        PackedPanels { buf, kc, n_pad, colsum }
    }
}

/// Where the tiles read B from.
pub(crate) enum BSource<'p, PB> {
    /// Pack each KC x NC block.
    Pack,
    /// Read full NR-column panels in place (B has unit column stride and needs no conversion);
    /// only a partial last panel is packed.
    Direct,
    /// Pre-packed panels.
    Prepacked(&'p PackedPanels<PB>),
}

const TMP_TILE: usize = 1024;

/// The Direct path copies each B panel to scratch when B's rows are at least this many bytes
/// apart and the panel serves several row tiles. Measured (M = 16, 1 thread, GFLOP/s, in place
/// vs copied): N = 384 f32 rows (1.5 KB) 81 vs 68, N = 768 (3 KB) 76 vs 69, N = 1536 (6 KB) 57 vs
/// 66, N = 3072 (12 KB) 31-35 vs 47-52.
const REPACK_MIN_ROW_BYTES: usize = 4096;

/// Whether the Direct path copies each B panel to scratch: B's rows `row_bytes` apart are at
/// least [`REPACK_MIN_ROW_BYTES`] and the `rows` rows of the A block span several `mr`-row tiles.
pub(crate) fn copies_b_panels(rows: usize, mr: usize, row_bytes: usize) -> bool {
    rows > mr && row_bytes >= REPACK_MIN_ROW_BYTES
}

/// Rows of C up to which a product with pre-packed B splits its columns over the threads (below
/// it a row split leaves each thread two tiles or fewer).
const FEW_ROWS: usize = 64;

/// Runs `job` with `fam`, on up to `threads` threads of the current rayon pool.
pub(crate) fn run<TI, PA, PB, T>(
    fam: &Family<PA, PB, T>,
    job: &Job<'_, TI, T>,
    bsrc: &BSource<'_, PB>,
    blocking: Blocking,
    threads: usize,
) where
    TI: Copy + Send + Sync,
    PA: PackFrom<TI>,
    PB: PackFrom<TI>,
    T: Scalar,
{
    let (m, n) = (job.m, job.n);
    let prepacked = matches!(bsrc, BSource::Prepacked(_));
    let flops = 2.0 * m as f64 * n as f64 * job.k as f64;
    let parts = if flops < 4.0e6 { 1 } else { threads.max(1) };
    // Few rows against pre-packed weights: each thread takes a block of columns, so the weights
    // are read once in all instead of once per thread, and every thread reads all the rows of A
    // (packing them where they are not read in place; they were always packed when the limit
    // below was measured).
    // Up to 256 rows this was measured faster (Zen 5, 2 threads: BERT-base 1 × 128 55.1-56.5 →
    // 53.5-54.4 ms), but later on the same CPU the rows split won from 128 rows on, where every
    // thread packing all of A costs more than the weights read twice (alternated, medians of
    // four runs: BERT-base 1 × 128 46.9-51.2 → 44.3-48.3 ms, MiniLM 1 × 128 7.36-7.53 →
    // 6.82-7.19 ms, 2 × 128 14.0-14.4 → 13.2-13.9 ms; ResNet-18 batch 1, whose 3×3/2 128 → 256
    // layer is 196 rows, min 6.61-6.71 → 6.43-6.56 ms). Only with at least four column panels
    // per thread.
    let few_rows = prepacked && m <= FEW_ROWS && n >= parts * fam.nr * 4;
    let mut split_m = m >= parts * fam.mr * 2 && !few_rows && (m >= n || prepacked || n < parts * fam.nr);
    let mut split_n = !split_m && n >= parts * fam.nr;
    // Column panels that do not split evenly over the threads (MobileNetV2's 960 → 160 1×1 at
    // 7×7, one image: 49 rows, 5 panels, 3 against 2): the rows instead, when the slowest
    // thread's estimated share is smaller that way (25 + 24 rows: 5 × 25 against 3 × 49 row
    // steps).
    let panels = n.div_ceil(fam.nr);
    let mut rows = None;
    if split_n && !few_rows && m >= parts * fam.mr && !panels.is_multiple_of(parts) {
        let lanes = super::lanes(fam);
        let by_cols = panels.div_ceil(parts) as f64 * fam.rows_cost(m, lanes);
        let split = split_rows(fam, m, parts);
        let by_rows = panels as f64 * split.pieces().map(|(_, l)| fam.rows_cost(l, lanes)).fold(0.0, f64::max);
        if by_rows < by_cols {
            (split_m, split_n, rows) = (true, false, Some(split));
        }
    }
    if parts <= 1 || !(split_m || split_n) {
        // SAFETY: the job was validated by the entry point.
        unsafe { run_serial(fam, job, bsrc, 0, blocking) };
        return;
    }
    let split = match rows {
        Some(split) => split,
        None if split_m => split_rows(fam, m, parts),
        None => Split::even(n, parts, fam.nr),
    };
    (0..split.count()).into_par_iter().for_each(|i| {
        let (s, l) = split.piece(i);
        let sub = if split_m { job.sub(s, l, 0, n) } else { job.sub(0, m, s, l) };
        let col0 = if split_m { 0 } else { s };
        // SAFETY: the pieces cover disjoint rows (or columns) of C; the job was validated.
        unsafe { run_serial(fam, &sub, bsrc, col0, blocking) };
    });
}

/// `len` split into pieces `(start, length)` of `chunk` (the last one shorter); computed per
/// piece, so that a split allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Split {
    len: usize,
    chunk: usize,
}

impl Split {
    /// `len` in `parts` pieces at multiples of `unit`, as even as that allows.
    fn even(len: usize, parts: usize, unit: usize) -> Split {
        Split { len, chunk: round_up(len.div_ceil(parts.max(1)), unit).max(1) }
    }

    fn count(self) -> usize {
        self.len.div_ceil(self.chunk)
    }

    /// Piece `i < count()`.
    fn piece(self, i: usize) -> (usize, usize) {
        let s = i * self.chunk;
        (s, self.chunk.min(self.len - s))
    }

    fn pieces(self) -> impl Iterator<Item = (usize, usize)> {
        (0..self.count()).map(move |i| self.piece(i))
    }
}

/// The rows of C split over `parts` threads: at multiples of `mr` (each piece whole tiles but
/// the last), or in equal pieces each ending in a shorter tile, whichever gives the slowest
/// piece the lower cost by [`Family::rows_cost`]. With few tiles per thread, multiples of `mr`
/// can leave one thread a whole tile more: M = 128 on the 14-row AVX512-BF16 tiles splits as
/// 70 + 58 rows (5 tiles vs 4 tiles and a 2-row one), where 64 + 64 (4 tiles and an 8-row one
/// each) costs 64 against 70 row steps; the 8-row f32 tiles split 64 + 64 either way.
fn split_rows<PA, PB, T>(fam: &Family<PA, PB, T>, m: usize, parts: usize) -> Split {
    let lanes = super::lanes(fam);
    let worst = |p: Split| p.pieces().map(|(_, l)| fam.rows_cost(l, lanes)).fold(0.0, f64::max);
    let tiled = Split::even(m, parts, fam.mr);
    let even = Split::even(m, parts, 1);
    if worst(even) < worst(tiled) { even } else { tiled }
}

/// The block size for `len` elements with blocks of at most `blk` (rounded up to `unit`): the
/// blocks are balanced, so a length just above `blk` gives two half blocks instead of a full
/// block and a sliver (a short last K block would halve the work per C update).
pub(crate) fn balanced(len: usize, blk: usize, unit: usize) -> usize {
    let blk = round_up(blk.max(1), unit);
    let len = round_up(len, unit);
    if len <= blk {
        return len;
    }
    round_up(len.div_ceil(len.div_ceil(blk)), unit).min(blk)
}

/// Prefetches the `rows` x `cols` tile at `c` (row stride `rs`) into L1.
#[inline(always)]
fn prefetch_tile<T>(c: *mut T, rs: usize, rows: usize, cols: usize) {
    #[cfg(target_arch = "x86_64")]
    for i in 0..rows {
        let row = c.wrapping_add(i * rs);
        // SAFETY: prefetch is a hint that never faults; the addresses are those of the tile.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(row.cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(cols - 1).cast::<i8>());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (c, rs, rows, cols);
}

/// The single-threaded blocked loop. `b_col0` is the job's first column inside pre-packed B
/// (a multiple of `nr`).
///
/// # Safety
/// The job's views are valid for its extents and C's layout is injective.
unsafe fn run_serial<TI, PA, PB, T>(
    fam: &Family<PA, PB, T>,
    job: &Job<'_, TI, T>,
    bsrc: &BSource<'_, PB>,
    b_col0: usize,
    blocking: Blocking,
) where
    TI: Copy,
    PA: PackFrom<TI>,
    PB: PackFrom<TI>,
    T: Scalar,
{
    let (m, n, k) = (job.m, job.n, job.k);
    let (mr, nr, g) = (fam.mr, fam.nr, fam.g);
    assert!(mr * nr <= TMP_TILE, "gemm: tile {mr}x{nr} exceeds the edge buffer");
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let ga = fam.ga();
    let kc_blk = match bsrc {
        BSource::Prepacked(p) => p.kc,
        _ => balanced(k, blocking.kc, ga),
    };
    let mc_blk = balanced(m, blocking.mc, mr);
    let nc_blk = balanced(n, blocking.nc, nr);
    // The column bias padded to whole panels (tiles read nr of it), on the thread's pool.
    let bias_col: Option<AlignedBuf<T>> = job.bias_col.map(|b| {
        let mut v = AlignedBuf::<T>::zeroed(round_up(n, nr));
        // SAFETY: `v` holds round_up(n, nr) >= n elements; `b` holds at least n (the entry
        // point checked the bias length).
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr(), n);
            for j in n..v.len() {
                v.as_mut_ptr().add(j).write(T::ZERO);
            }
        }
        v
    });
    // A row-major A on the direct and pre-packed paths is read in place: packing it cost a fifth
    // of a 64^3 product. Not when its rows are a multiple of 4 KiB apart (then a tile's 14 rows
    // share one L1 set of 12 ways) unless all of A fits half of L1. Measured (1 thread, GFLOP/s,
    // in place vs packed): 64^3 153 vs 112, 64x384x384 164-169 vs 160, M = 16 shapes within the
    // noise. Against pre-packed weights (Zen 5, alternated, medians of three runs): MiniLM 8 ×
    // 128 one core 99.0-103.8 → 94.9-97.8 ms, two 49.8-52.4 → 48.4-49.5; BERT-base 8 × 128 one
    // core 700-722 → 692-706 ms; ResNet-18 (im2col rows) batch 1 11.2-11.9 → 10.7-11.2 ms,
    // batch 8 71.3-73.4 → 68.3-69.0 ms.
    let l1d = super::blocking::cache_sizes().l1d;
    let a_in_place = matches!(bsrc, BSource::Direct | BSource::Prepacked(_))
        && fam.reads_a_in_place()
        && PA::IDENTITY
        && job.a.cs == 1
        && (!(job.a.rs * size_of::<PA>()).is_multiple_of(4096) || m * k * size_of::<PA>() <= l1d / 2);
    // The AMX tiles load A as 16 rows of one 64-byte group each, at any row stride: a row-major
    // A is read in place by every whole (mr-row) tile when every depth step is whole (k and the
    // depth blocks multiples of the group: a step past k would read past the row); only the
    // block's last partial tile of rows is packed. Packing A was a tenth of a bf16 MiniLM
    // forward on AMX.
    let a_rows_in_place = !a_in_place
        && fam.a_group != 0
        && PA::IDENTITY
        && job.a.cs == 1
        && k.is_multiple_of(ga)
        && kc_blk.is_multiple_of(ga);
    // A tile reading A in place steps to the next k (or, on AMX, the next group of k values).
    let in_place_kstride = if a_in_place { 1 } else { ga };
    let mut apack = AlignedBuf::<PA>::zeroed(if a_in_place { 0 } else { mc_blk * round_up(kc_blk, ga) });
    // Direct: the edge panel, then one panel of scratch (see the jr loop).
    let mut bpack = AlignedBuf::<PB>::zeroed(match bsrc {
        BSource::Pack => nc_blk * kc_blk,
        BSource::Direct => 2 * nr * kc_blk,
        BSource::Prepacked(_) => 0,
    });
    // Scratch from the thread's pool (no allocation in steady state): the column sums are
    // written by `colsum_correction` before they are read.
    let mut colsum = AlignedBuf::<i32>::zeroed(if fam.needs_colsum { nc_blk } else { 0 });
    // The edge-tile buffer, taken at the first edge tile (its stale contents outside the valid
    // mr_eff x nr_eff part only feed lanes that are discarded).
    let mut tmp: Option<AlignedBuf<T>> = None;
    let prefetch_c = m * n * size_of::<T>() > l1d / 2;

    for jc in (0..n).step_by(nc_blk) {
        let nc = nc_blk.min(n - jc);
        for (bi, pc) in (0..k).step_by(kc_blk).enumerate() {
            let kc = kc_blk.min(k - pc);
            let kg = kc.div_ceil(g);
            // Elements of one packed A row's k groups (`kg * g` unless A's groups are wider).
            let a_row = kc.div_ceil(ga) * ga;
            let (first, last) = (pc == 0, pc + kc >= k);
            let bsrc_blk = job.b.offset(pc, jc);
            // SAFETY: the source block lies inside B; the buffers were sized for one block.
            unsafe {
                match bsrc {
                    BSource::Pack => {
                        pack_panels::<TI, PB>(
                            bsrc_blk.ptr,
                            bsrc_blk.cs,
                            bsrc_blk.rs,
                            nc,
                            kc,
                            nr,
                            g,
                            bpack.as_mut_ptr(),
                            fam.isa,
                        );
                        if fam.needs_colsum {
                            colsum_correction(bpack.as_ptr().cast::<i8>(), nc, kg, nr, g, colsum.as_mut_slice());
                        }
                    }
                    BSource::Direct => {
                        if nc % nr != 0 {
                            let j0 = nc - nc % nr;
                            let s = bsrc_blk.offset(0, j0);
                            pack_panels::<TI, PB>(s.ptr, s.cs, s.rs, nc - j0, kc, nr, 1, bpack.as_mut_ptr(), fam.isa);
                        }
                    }
                    BSource::Prepacked(_) => {}
                }
            }
            for ic in (0..m).step_by(mc_blk) {
                let mc = mc_blk.min(m - ic);
                let asrc = job.a.offset(ic, pc);
                // Rows from `packed_from` on are packed (all of them unless A is read in place).
                let packed_from = if a_in_place {
                    mc
                } else if a_rows_in_place {
                    mc / mr * mr
                } else {
                    0
                };
                if packed_from < mc {
                    let s = asrc.offset(packed_from, 0);
                    // SAFETY: the rows lie inside A; apack holds mc_blk x kc_blk elements, the
                    // panels from row `packed_from` (a multiple of mr) at their usual place.
                    unsafe {
                        let dst = apack.as_mut_ptr().add(packed_from * a_row);
                        pack_panels::<TI, PA>(s.ptr, s.rs, s.cs, mc - packed_from, kc, mr, ga, dst, fam.isa)
                    };
                }
                // Direct with several row tiles per panel and B rows a page or more apart: each
                // full panel is copied into L1 scratch once and every tile reads it contiguously
                // from there, instead of each tile walking B a row stride apart (a cache line and
                // a page per k, which the hardware prefetchers do not follow across pages). The
                // first row tile makes the copy from the B vectors it loads (`b_copy`), so the
                // copy's misses overlap its FMAs; Zen 3, 1 thread, direct path, GFLOP/s with the
                // copy in the tile vs a copy pass before it: 16x1536x1536 61-66 vs 55,
                // 32x1536x1536 74-78 vs 69-71, 16x384x1536 67 vs 58, 16x768x3072 52 vs 47.
                let repack = matches!(bsrc, BSource::Direct) && copies_b_panels(mc, mr, job.b.rs * size_of::<TI>());
                for jr in (0..nc).step_by(nr) {
                    let nr_eff = nr.min(nc - jr);
                    let copy_panel = repack && nr_eff == nr;
                    // The first row tile makes the copy itself where the family's tiles can.
                    let fuse = copy_panel && fam.copies_b_in_tile();
                    if copy_panel && !fuse {
                        let s = bsrc_blk.offset(0, jr);
                        // SAFETY: the kc x nr panel lies inside B; the scratch half of bpack holds
                        // nr * kc_blk elements.
                        unsafe {
                            pack_panels::<TI, PB>(
                                s.ptr,
                                s.cs,
                                s.rs,
                                nr,
                                kc,
                                nr,
                                1,
                                bpack.as_mut_ptr().add(nr * kc_blk),
                                fam.isa,
                            )
                        };
                    }
                    // SAFETY: panel pointers stay inside the packed buffers / B (see BSource).
                    let (bptr, bks, cs_ptr): (*const PB, usize, *const i32) = unsafe {
                        match bsrc {
                            BSource::Pack => (
                                bpack.as_ptr().add(jr * kg * g),
                                nr * g,
                                if fam.needs_colsum { colsum.as_ptr().add(jr) } else { std::ptr::null() },
                            ),
                            BSource::Direct => {
                                if nr_eff == nr && repack {
                                    (bpack.as_ptr().add(nr * kc_blk), nr, std::ptr::null())
                                } else if nr_eff == nr {
                                    (bsrc_blk.offset(0, jr).ptr.cast::<PB>(), job.b.rs, std::ptr::null())
                                } else {
                                    (bpack.as_ptr(), nr, std::ptr::null())
                                }
                            }
                            BSource::Prepacked(p) => {
                                let col = b_col0 + jc + jr;
                                (
                                    p.buf.as_ptr().add(pc * p.n_pad + col * kg * g),
                                    nr * g,
                                    if fam.needs_colsum {
                                        p.colsum.as_ptr().add(bi * p.n_pad + col)
                                    } else {
                                        std::ptr::null()
                                    },
                                )
                            }
                        }
                    };
                    // Prepacked B (constant weights, which a model's other layers evict from the
                    // caches between its calls): each row tile fetches its share of the next
                    // panel into L2, a line per k step of its loop, so the next panel's first
                    // tile does not stall on memory (at small M few tiles share each panel). On
                    // a 2-vCPU Intel Xeon (Sapphire Rapids class), alternated with and without:
                    // ResNet-18 batch 1 18.4–18.8 against 23.5–24.3 ms on one thread, 11.4–11.5
                    // against 13.7–13.9 on two; MiniLM 1 × 128 20.3 against 23.7–23.8 ms on
                    // one; 8 × 128 150–152 against 161–170 ms. Hot in L2 (`tjgemm`, the same
                    // weights call after call) small M loses a little: 16 × 384 × 1536 145–148
                    // against 155–159 GFLOP/s, 49 × 160 × 960 177–181 against 192.
                    let next_panel = match bsrc {
                        BSource::Prepacked(p) if jr + nr < nc => {
                            let col = b_col0 + jc + jr + nr;
                            let panel = p.buf.as_ptr().wrapping_add(pc * p.n_pad + col * kg * g);
                            Some((panel.cast::<u8>(), nr * kg * g * size_of::<PB>()))
                        }
                        _ => None,
                    };
                    let row_tiles = mc.div_ceil(mr).max(1);
                    for ir in (0..mc).step_by(mr) {
                        let mr_eff = mr.min(mc - ir);
                        // This tile's share of the next panel, prefetched inside its k loop.
                        let (pf, pf_lines) = match next_panel {
                            Some((panel, bytes)) => {
                                let share = bytes.div_ceil(row_tiles).next_multiple_of(64);
                                let from = (ir / mr * share).min(bytes);
                                (panel.wrapping_add(from), share.min(bytes - from).div_ceil(64))
                            }
                            None => (std::ptr::null(), 0),
                        };
                        let copies_here = fuse && ir == 0;
                        let in_place = ir < packed_from;
                        let mut t = TileArgs {
                            kgroups: kg,
                            // Row ir of the A block in place (PA is TI there), or panel ir/mr of
                            // the packed A block.
                            a: if in_place {
                                asrc.offset(ir, 0).ptr.cast::<PA>()
                            } else {
                                apack.as_ptr().wrapping_add(ir * a_row)
                            },
                            a_kstride: if in_place { in_place_kstride } else { mr * ga },
                            a_rs: if in_place { job.a.rs } else { ga },
                            b: if copies_here { bsrc_blk.offset(0, jr).ptr.cast::<PB>() } else { bptr },
                            b_kstride: if copies_here { job.b.rs } else { bks },
                            b_copy: if copies_here {
                                bpack.as_mut_ptr().wrapping_add(nr * kc_blk)
                            } else {
                                std::ptr::null_mut()
                            },
                            c: std::ptr::null_mut(),
                            rsc: 0,
                            alpha: job.alpha,
                            beta: if first { job.beta } else { T::ONE },
                            read_c: !first || job.beta != T::ZERO,
                            bias_row: match (last, job.bias_row) {
                                (true, Some(b)) => b[ic + ir..].as_ptr(),
                                _ => std::ptr::null(),
                            },
                            bias_col: match (last, &bias_col) {
                                (true, Some(b)) => b.as_ptr().wrapping_add(jc + jr),
                                _ => std::ptr::null(),
                            },
                            colsum: cs_ptr,
                            pf,
                            pf_lines,
                        };
                        let tile = fam.tiles[mr_eff - 1];
                        let cblk = job.c.offset(ic + ir, jc + jr);
                        let act = if last { job.act } else { Activation::None };
                        // A tile finished in its only depth block (C not read) goes from the
                        // tile buffer straight to the finisher: C is never written.
                        let finished = if last { job.finish } else { None };
                        if nr_eff == nr && job.c.cs == 1 && (finished.is_none() || t.read_c) {
                            t.c = cblk.ptr;
                            t.rsc = job.c.rs;
                            // The tile reads or writes C only after its k loop: fetching the
                            // rows now hides the cache misses behind the FMAs (a C that fits
                            // half of L1 is there already: 28 prefetches a tile were 2% of 64^3).
                            if prefetch_c {
                                prefetch_tile(cblk.ptr, job.c.rs, mr_eff, nr);
                            }
                            // SAFETY: the full mr_eff x nr tile of C is in bounds; the CPU has
                            // the family's features (checked when the family was chosen).
                            unsafe {
                                tile(&t);
                                // The whole tile in one call (its rows in L1): row by row, the
                                // erf GELU waited on each row's two vectors in turn.
                                T::activate_block(fam.isa, act, cblk.ptr, job.c.rs, mr_eff, nr);
                                if let Some(f) = finished {
                                    // The tile is final after its last K block; each tile of C
                                    // has one last block.
                                    f.finish(&Region::in_place(cblk.ptr, job.c.rs, 1, mr_eff, nr));
                                }
                            }
                        } else {
                            let tmp = tmp.get_or_insert_with(|| AlignedBuf::zeroed(TMP_TILE)).as_mut_ptr();
                            // SAFETY: only the mr_eff x nr_eff valid part of C is read and
                            // written; the kernel works on the local tile buffer of TMP_TILE >=
                            // mr * nr elements (asserted above), whose rows are written by the
                            // tile before they are read back (and, where it reads C, by the copy).
                            unsafe {
                                if t.read_c {
                                    // The columns past nr_eff are zeroed: the tile reads them
                                    // too, and stale values could overflow an integer tile.
                                    for i in 0..mr_eff {
                                        for j in 0..nr {
                                            *tmp.add(i * nr + j) = if j < nr_eff {
                                                *cblk.ptr.add(i * job.c.rs + j * job.c.cs)
                                            } else {
                                                T::ZERO
                                            };
                                        }
                                    }
                                }
                                t.c = tmp;
                                t.rsc = nr;
                                tile(&t);
                                T::activate_block(fam.isa, act, tmp, nr, mr_eff, nr_eff);
                                for i in 0..mr_eff {
                                    let row = std::slice::from_raw_parts_mut(tmp.add(i * nr), nr_eff);
                                    if finished.is_none() {
                                        for (j, v) in row.iter().enumerate() {
                                            *cblk.ptr.add(i * job.c.rs + j * job.c.cs) = *v;
                                        }
                                    }
                                }
                                if let Some(f) = finished {
                                    // The mr_eff x nr_eff part is final: to the finisher from
                                    // the buffer (C is not written).
                                    let (rs, cs) = (job.c.rs, job.c.cs);
                                    let at = cblk.ptr.cast_const();
                                    f.finish(&Region {
                                        at,
                                        rs,
                                        cs,
                                        rows: mr_eff,
                                        cols: nr_eff,
                                        vals: tmp,
                                        vrs: nr,
                                        vcs: 1,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The unblocked reference loop (also the path for tiny problems and k = 0): accumulates in
/// `T` in k order, then applies the epilogue.
pub(crate) fn naive<TI: Copy, T: Scalar + PackFrom<TI>>(job: &Job<'_, TI, T>, isa: super::isa::Isa) {
    let mut buf = AlignedBuf::<T>::zeroed(job.n);
    // SAFETY: `buf` holds n elements, each written below before it is read.
    let row = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), job.n) };
    for i in 0..job.m {
        for (j, out) in row.iter_mut().enumerate() {
            let mut acc = T::ZERO;
            for p in 0..job.k {
                // SAFETY: (i, p) and (p, j) are inside the validated A and B.
                let (x, y) = unsafe {
                    (*job.a.ptr.add(i * job.a.rs + p * job.a.cs), *job.b.ptr.add(p * job.b.rs + j * job.b.cs))
                };
                acc = T::mul_add(T::cvt(x), T::cvt(y), acc);
            }
            let cij = job.c.ptr.wrapping_add(i * job.c.rs + j * job.c.cs);
            let mut v = T::mul_add(acc, job.alpha, T::ZERO);
            if job.beta != T::ZERO {
                // SAFETY: (i, j) is inside the validated C.
                v = T::mul_add(job.beta, unsafe { *cij }, v);
            }
            if let Some(b) = job.bias_row {
                v = T::add(v, b[i]);
            }
            if let Some(b) = job.bias_col {
                v = T::add(v, b[j]);
            }
            *out = v;
        }
        T::activate(isa, job.act, row);
        for (j, v) in row.iter().enumerate() {
            // SAFETY: (i, j) is inside the validated C.
            unsafe { *job.c.ptr.add(i * job.c.rs + j * job.c.cs) = *v };
        }
        if let Some(f) = job.finish {
            // SAFETY: row i of the validated C, final, handed over once.
            unsafe { f.finish(&Region::in_place(job.c.ptr.wrapping_add(i * job.c.rs), job.c.rs, job.c.cs, 1, job.n)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_split_covers_m_and_balances_short_tiles() {
        #[cfg(target_arch = "x86_64")]
        {
            // 14-row tiles: 128 rows as 64 + 64 (4 tiles and an 8-row one each), not 70 + 58.
            assert_eq!(
                split_rows(&super::super::x86::AVX512_BF16, 128, 2).pieces().collect::<Vec<_>>(),
                vec![(0, 64), (64, 64)]
            );
            // 1024 rows: 512 + 512 (36 tiles and 8 rows each) beats 518 + 506.
            assert_eq!(
                split_rows(&super::super::x86::AVX512_BF16, 1024, 2).pieces().collect::<Vec<_>>(),
                vec![(0, 512), (512, 512)]
            );
            // Whole tiles when they divide evenly.
            assert_eq!(
                split_rows(&super::super::x86::AVX512_BF16, 56, 2).pieces().collect::<Vec<_>>(),
                vec![(0, 28), (28, 28)]
            );
        }
        for m in 1..200 {
            for parts in 1..5 {
                let p: Vec<_> = split_rows(&super::super::kernel::GENERIC_F32, m, parts).pieces().collect();
                assert!(p.len() <= parts, "{m} {parts}: {p:?}");
                let mut next = 0;
                for &(s, l) in &p {
                    assert_eq!(s, next, "{m} {parts}: {p:?}");
                    assert!(l > 0, "{m} {parts}: {p:?}");
                    next = s + l;
                }
                assert_eq!(next, m, "{m} {parts}: {p:?}");
            }
        }
    }
}
