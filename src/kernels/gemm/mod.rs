//! GEMM: `C = act(alpha·A·B + beta·C + bias)` for f32, f64, bf16/f16 (f32 accumulation) and
//! int8 (i32 accumulation), with packing, cache blocking, per-ISA microkernels (AVX-512,
//! AVX2+FMA, portable), a fused epilogue, small/skinny paths, threads and pre-packed weights.
//!
//! Entry points take a [`GemmArgs`] of named fields (strided A and B, so transposed layouts and
//! batch slices map without copies): [`gemm_f32`], [`gemm_f64`], [`gemm_bf16`], [`gemm_f16`],
//! [`gemm_i8`], and the row-major convenience [`matmul_f32`]. [`PackedB`] packs a constant
//! right-hand side once. `docs/gemm.md` describes blocking, dispatch, environment variables and
//! measured performance.
//!
//! A call's scratch (packed A and B blocks, the padded bias row, column sums, the edge tile)
//! comes from a per-thread pool (at most 8 buffers and 16 MiB a thread), so a warm call
//! allocates nothing; [`Scratch`] hands the same pool to kernels built on the GEMM.
//!
//! ```
//! use tensorjit::kernels::gemm::{gemm_f32, GemmArgs, MatMut, MatRef};
//! let a = [1.0f32, 2.0, 3.0, 4.0]; // 2x2 row-major
//! let b = [5.0f32, 6.0, 7.0, 8.0];
//! let mut c = [0.0f32; 4];
//! gemm_f32(GemmArgs::new(2, 2, 2, MatRef::row_major(&a, 2), MatRef::row_major(&b, 2), MatMut::row_major(&mut c, 2)))
//!     .unwrap();
//! assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
//! ```

#[macro_use]
mod tile;
mod amx;
pub mod blocking;
mod driver;
pub mod epilogue;
mod gemv;
pub mod isa;
mod kernel;
#[cfg(target_arch = "aarch64")]
mod neon;
mod pack;
#[cfg(target_arch = "aarch64")]
mod sme;
#[cfg(target_arch = "x86_64")]
mod x86;

use half::{bf16, f16};

pub use blocking::{Blocking, cache_sizes};
pub use epilogue::{Activation, Bias, Epilogue, Finish, Region, Scalar};
// `dispatch_summary`: the path the crate's own tests use (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use isa::{Isa, dispatch_summary, hardware_features, isa_supported, selected_isa};

use crate::error::{Error, Result};
use driver::{BSource, Job, PackedPanels, RawMat, RawMatMut};
use kernel::{Family, PackFrom};
// `Scratch`: for the convolution kernels' im2col and tile buffers (and the crate's tests).
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use kernel::Scratch;

const OP: &str = "gemm";

/// A read-only strided matrix: element (r, c) is `data[r * rs + c * cs]`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a, T> {
    /// The elements (at least up to the last addressed one).
    pub data: &'a [T],
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// A strided view.
    pub fn new(data: &'a [T], rs: usize, cs: usize) -> Self {
        MatRef { data, rs, cs }
    }
    /// A row-major matrix with `cols` columns.
    pub fn row_major(data: &'a [T], cols: usize) -> Self {
        MatRef { data, rs: cols, cs: 1 }
    }
    /// A column-major matrix with `rows` rows.
    // Only unit tests use it.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn col_major(data: &'a [T], rows: usize) -> Self {
        MatRef { data, rs: 1, cs: rows }
    }
    /// The transpose (same data, strides swapped).
    // Only unit tests use it.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn t(self) -> Self {
        MatRef { data: self.data, rs: self.cs, cs: self.rs }
    }
}

/// A writable strided matrix: element (r, c) is `data[r * rs + c * cs]`. Distinct (r, c) must
/// address distinct elements.
#[derive(Debug)]
pub struct MatMut<'a, T> {
    /// The elements.
    pub data: &'a mut [T],
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

impl<'a, T> MatMut<'a, T> {
    /// A strided view.
    pub fn new(data: &'a mut [T], rs: usize, cs: usize) -> Self {
        MatMut { data, rs, cs }
    }
    /// A row-major matrix with `cols` columns.
    pub fn row_major(data: &'a mut [T], cols: usize) -> Self {
        MatMut { data, rs: cols, cs: 1 }
    }
}

/// The right-hand side: a strided matrix or weights packed once with [`PackedB`] (f32, bf16 and f16 inputs).
#[derive(Clone, Copy, Debug)]
pub enum Rhs<'a, T> {
    /// A strided k x n matrix.
    Mat(MatRef<'a, T>),
    /// Pre-packed k x n panels.
    Packed(&'a PackedB),
}

impl<'a, T> From<MatRef<'a, T>> for Rhs<'a, T> {
    fn from(m: MatRef<'a, T>) -> Self {
        Rhs::Mat(m)
    }
}

/// The algorithm, normally chosen by shape ([`Path::Auto`]); tests force each one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Path {
    /// Choose by shape and layout.
    #[default]
    Auto,
    /// Unblocked triple loop (tiny problems, k = 0).
    Naive,
    /// Matrix-vector (m = 1 or n = 1; f32/f64).
    Gemv,
    /// Pack A only; tiles read B in place (f32/f64 with unit column stride in B): small M.
    Direct,
    /// Pack A and B blocks (the general blocked path).
    Packed,
}

/// Which tile geometry of the ISA (AVX2 f32: 6x16 / 4x24; AVX-512 f32: 14x32 / 8x48).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
// The jit always picks `Auto`; the crate's own tests and tools force the others (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub enum Geometry {
    /// Cheapest for the shape by the cost model.
    #[default]
    Auto,
    /// The tall tile for large squares.
    Large,
    /// The wide tile for small M (when the ISA has one; else the large one).
    Wide,
}

/// Tuning and testing knobs; the defaults choose everything from the hardware and the shape.
#[derive(Clone, Copy, Debug, Default)]
pub struct GemmOptions {
    /// Force an instruction set (must be supported by this CPU); `None`: [`selected_isa`].
    pub isa: Option<Isa>,
    /// Force an algorithm.
    pub path: Path,
    /// Force a tile geometry.
    pub geometry: Geometry,
    /// Block sizes; zeros are derived from the caches (or `TENSORJIT_GEMM_KC/_MC/_NC`).
    pub blocking: Blocking,
}

/// The arguments of one GEMM: `C (m x n) = act(alpha·A (m x k)·B (k x n) + beta·C + bias)`.
#[derive(Debug)]
pub struct GemmArgs<'a, TI, TO> {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Left operand.
    pub a: MatRef<'a, TI>,
    /// Right operand.
    pub b: Rhs<'a, TI>,
    /// Output.
    pub c: MatMut<'a, TO>,
    /// Scale, accumulate, bias, activation.
    pub epilogue: Epilogue<'a, TO>,
    /// Threads to use: of the current rayon pool when called from one of its threads (run
    /// inside `pool.install` to pick a pool), else of tensorjit's shared pool
    /// ([`crate::threads::shared_pool`]; never rayon's global pool). 0 means all of that pool,
    /// 1 runs on the calling thread.
    pub threads: usize,
    /// Tuning/testing knobs.
    pub options: GemmOptions,
    /// Where finished regions of C go (see [`Finish`]); none by default.
    pub finish: Option<&'a dyn Finish<TO>>,
}

impl<'a, TI, TO: Scalar> GemmArgs<'a, TI, TO> {
    /// `C = A·B` on one thread with automatic choices.
    pub fn new(m: usize, n: usize, k: usize, a: MatRef<'a, TI>, b: impl Into<Rhs<'a, TI>>, c: MatMut<'a, TO>) -> Self {
        GemmArgs {
            m,
            n,
            k,
            a,
            b: b.into(),
            c,
            epilogue: Epilogue::default(),
            threads: 1,
            options: GemmOptions::default(),
            finish: None,
        }
    }
    /// With an epilogue.
    pub fn epilogue(mut self, e: Epilogue<'a, TO>) -> Self {
        self.epilogue = e;
        self
    }
    /// With a thread count (0 = the whole pool it runs in; see [`GemmArgs::threads`]).
    pub fn threads(mut self, t: usize) -> Self {
        self.threads = t;
        self
    }
    /// With options.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn options(mut self, o: GemmOptions) -> Self {
        self.options = o;
        self
    }
    /// With a consumer of the finished regions of C.
    pub fn finish(mut self, f: Option<&'a dyn Finish<TO>>) -> Self {
        self.finish = f;
        self
    }
}

/// Checks that every (r < rows, c < cols) of a strided view lies in `len` elements.
fn check_extent(what: &str, rows: usize, cols: usize, rs: usize, cs: usize, len: usize) -> Result<()> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let last = (rows - 1).checked_mul(rs).and_then(|r| (cols - 1).checked_mul(cs).and_then(|c| r.checked_add(c)));
    match last {
        Some(l) if l < len => Ok(()),
        _ => Err(Error::invalid(
            OP,
            format!("operand {what}: {rows}x{cols} with strides ({rs}, {cs}) needs more than the {len} elements given"),
        )),
    }
}

/// A validated problem plus the resolved ISA.
struct Checked<'a, TI, T> {
    job: Job<'a, TI, T>,
    packed: Option<&'a PackedB>,
    isa: Isa,
    options: GemmOptions,
    threads: usize,
}

fn check<'a, TI, T: Scalar>(args: GemmArgs<'a, TI, T>) -> Result<Checked<'a, TI, T>> {
    let GemmArgs { m, n, k, a, b, c, epilogue, threads, options, finish } = args;
    check_extent("A", m, k, a.rs, a.cs, a.data.len())?;
    let (bview, packed) = match b {
        Rhs::Mat(bm) => {
            check_extent("B", k, n, bm.rs, bm.cs, bm.data.len())?;
            (RawMat { ptr: bm.data.as_ptr(), rs: bm.rs, cs: bm.cs }, None)
        }
        Rhs::Packed(p) => {
            if p.k != k || p.n != n {
                return Err(Error::invalid(
                    OP,
                    format!("operand B: packed {}x{} does not match k x n = {k}x{n}", p.k, p.n),
                ));
            }
            (RawMat { ptr: std::ptr::null(), rs: 0, cs: 0 }, Some(p))
        }
    };
    check_extent("C", m, n, c.rs, c.cs, c.data.len())?;
    let injective = m == 0
        || n == 0
        || m == 1 && n == 1
        || m == 1 && c.cs > 0
        || n == 1 && c.rs > 0
        || (c.cs > 0 && c.rs > 0 && (c.cs * (n - 1) < c.rs || c.rs * (m - 1) < c.cs));
    if !injective {
        return Err(Error::invalid(
            OP,
            format!("operand C: strides ({}, {}) make distinct elements of the {m}x{n} output overlap", c.rs, c.cs),
        ));
    }
    let (bias_row, bias_col) = match epilogue.bias {
        Bias::None => (None, None),
        Bias::PerRow(b) if b.len() == m => (Some(b), None),
        Bias::PerColumn(b) if b.len() == n => (None, Some(b)),
        Bias::PerRow(b) => return Err(Error::invalid(OP, format!("bias per row has {} values, m = {m}", b.len()))),
        Bias::PerColumn(b) => {
            return Err(Error::invalid(OP, format!("bias per column has {} values, n = {n}", b.len())));
        }
    };
    let isa = match options.isa {
        Some(i) if !isa_supported(i) => {
            return Err(Error::invalid(OP, format!("isa {}: not supported by this CPU", i.name())));
        }
        Some(i) => i,
        None => selected_isa(),
    };
    // `threads` was resolved against the pool this runs in by `in_pool` (1 when called alone).
    let job = Job {
        m,
        n,
        k,
        a: RawMat { ptr: a.data.as_ptr(), rs: a.rs, cs: a.cs },
        b: bview,
        c: RawMatMut { ptr: c.data.as_mut_ptr(), rs: c.rs, cs: c.cs },
        alpha: epilogue.alpha,
        beta: epilogue.beta,
        bias_row,
        bias_col,
        act: epilogue.activation,
        finish,
    };
    Ok(Checked { job, packed, isa, options, threads })
}

/// Lanes per vector of the accumulator for a family (for the cost model).
fn lanes<PA, PB, T>(f: &Family<PA, PB, T>) -> usize {
    let bytes = std::mem::size_of::<T>();
    match f.isa {
        Isa::Avx512 => 64 / bytes,
        Isa::Avx2 => 32 / bytes,
        _ => f.nr,
    }
}

/// Picks the family with the lowest estimated cost for m x n (or as `geometry` forces).
fn choose_family<PA, PB, T>(
    fams: &[&'static Family<PA, PB, T>],
    m: usize,
    n: usize,
    geometry: Geometry,
) -> &'static Family<PA, PB, T> {
    match geometry {
        Geometry::Large => return fams[0],
        Geometry::Wide => return fams.get(1).copied().unwrap_or(fams[0]),
        Geometry::Auto => {}
    }
    let cost = |f: &Family<PA, PB, T>| f.rows_cost(m, lanes(f)) * n.div_ceil(f.nr) as f64;
    let mut best = fams[0];
    for &f in &fams[1..] {
        if cost(f) < cost(best) * 0.97 {
            best = f;
        }
    }
    best
}

/// Whether an `m`-row problem with B rows `row_bytes` apart suits the direct path (B read in
/// place) rather than packing, on a core with `l2` bytes of L2 and tiles of `mr` rows.
///
/// - Rows a page or more apart with more than one row tile: the first row tile copies each
///   panel to scratch as it goes, a kc-line walk a row stride apart; packing the block row by
///   row instead streams B. The direct path paid only with a large L2 (Xeon, 2 MiB:
///   128x1536x1536 138 vs 132 GFLOP/s packed, with a separate copy pass). On Zen 3 (512 KiB
///   L2; 1 thread, best of three alternating rounds, direct vs packed) it is at best even:
///   8x384x1536 56 vs 57, 16x384x1536 69 vs 69, 16x1536x1536 66 vs 64, 48x1536x1536 77 vs 75,
///   but 16x768x3072 54 vs 64, 64x768x3072 72.5 vs 82, 128x1536x1536 78 vs 85.
/// - Up to 64 rows otherwise (A in place or packed once, B straight from its rows).
/// - 65 to 192 rows where B's rows spread over the L1 sets: on the Xeon (direct vs packed)
///   128x64x64 145 vs 118, 128^3 160 vs 138, 192^3 164 vs 153, 128x1536x384 156 vs 142; but
///   128x64x256 137 vs 141 and 512x64x512 143 vs 150 (rows 1 and 2 KiB apart), and from 256
///   rows packing pays (256x384x384 161 vs 166). Zen 3, three alternating rounds: 96^3 93 vs
///   84, 72x384x384 94.5 vs 89, 128x384x384 92.5 vs 91, 160x384x384 93.5 vs 92.5, 192^3 91 vs
///   91, 128x1536x384 90 vs 92.
fn direct_suits(m: usize, mr: usize, row_bytes: usize, l2: usize) -> bool {
    let copies = driver::copies_b_panels(m, mr, row_bytes);
    if copies && l2 < 1 << 20 {
        return false;
    }
    m <= 64 || (m <= 192 && (copies || !row_bytes.is_multiple_of(1024)))
}

/// A matrix-vector routine for one input/output type.
type GemvFn<TI, T> = fn(&Job<'_, TI, T>, Isa, usize);
/// Pre-packed B with the family it was packed for.
type Prepacked<'p, PA, PB, T> = (&'static Family<PA, PB, T>, &'p PackedPanels<PB>);

/// The shared dispatcher: path choice, then the chosen algorithm.
fn execute<TI, PA, PB, T>(
    ck: Checked<'_, TI, T>,
    fams: &[&'static Family<PA, PB, T>],
    gemv: Option<GemvFn<TI, T>>,
    prepacked: Option<Prepacked<'_, PA, PB, T>>,
) -> Result<()>
where
    TI: Copy + Send + Sync,
    PA: PackFrom<TI>,
    PB: PackFrom<TI>,
    T: Scalar + PackFrom<TI>,
{
    let Checked { job, packed, isa, options, threads } = ck;
    let (m, n, k) = (job.m, job.n, job.k);
    if m == 0 || n == 0 {
        return Ok(());
    }
    let fam = choose_family(fams, m, n, options.geometry);
    let direct_ok = PB::IDENTITY && fam.g == 1 && packed.is_none() && job.b.cs == 1;
    let path = match options.path {
        Path::Auto => {
            if k == 0 || (m * n * k <= 512 && packed.is_none()) {
                Path::Naive
            } else if (m == 1 || n == 1) && gemv.is_some() && packed.is_none() {
                Path::Gemv
            } else if direct_ok && direct_suits(m, fam.mr, job.b.rs * size_of::<TI>(), blocking::cache_sizes().l2) {
                Path::Direct
            } else {
                Path::Packed
            }
        }
        p => p,
    };
    let need = |ok: bool, why: &str| {
        if ok { Ok(()) } else { Err(Error::invalid(OP, format!("path {path:?} cannot run this problem: {why}"))) }
    };
    match path {
        Path::Auto => unreachable!("resolved above"),
        Path::Naive => {
            need(packed.is_none() || k == 0, "B is pre-packed")?;
            driver::naive(&job, isa);
        }
        Path::Gemv => {
            let g = gemv.ok_or_else(|| Error::invalid(OP, "path Gemv: only f32 and f64"))?;
            need(packed.is_none(), "B is pre-packed")?;
            need(m == 1 || n == 1, "needs m = 1 or n = 1")?;
            if k == 0 {
                driver::naive(&job, isa);
            } else {
                if m == 1 {
                    g(&job, isa, threads);
                } else {
                    g(&job.transposed(), isa, threads);
                }
                finish_whole(&job);
            }
        }
        Path::Direct => {
            need(direct_ok, "needs an f32/f64 B with unit column stride")?;
            if k == 0 {
                driver::naive(&job, isa);
            } else {
                let blk =
                    blocking::block_sizes(fam.mr, fam.nr, fam.g, size_of::<PA>(), size_of::<PB>(), options.blocking);
                driver::run(fam, &job, &BSource::Direct, blk, threads);
            }
        }
        Path::Packed => {
            if k == 0 {
                driver::naive(&job, isa);
            } else if let Some((pf, pp)) = prepacked {
                // MC follows the depth the panels were packed with.
                let over = Blocking { kc: pp.kc, ..options.blocking };
                let blk = blocking::block_sizes(pf.mr, pf.nr, pf.g, size_of::<PA>(), size_of::<PB>(), over);
                driver::run(pf, &job, &BSource::Prepacked(pp), blk, threads);
            } else {
                // Packed B blocks as deep as pre-packed ones (MC follows).
                let kc = blocking::packed_kc(fam.nr, fam.g, size_of::<PB>(), options.blocking);
                let over = Blocking { kc, ..options.blocking };
                let blk = blocking::block_sizes(fam.mr, fam.nr, fam.g, size_of::<PA>(), size_of::<PB>(), over);
                driver::run(fam, &job, &BSource::Pack, blk, threads);
            }
        }
    }
    Ok(())
}

/// Hands the whole of C to the job's finisher after a matrix-vector product (C is one row or
/// column; the gemv kernels hand nothing over themselves).
fn finish_whole<TI, T>(job: &Job<'_, TI, T>) {
    if let Some(f) = job.finish {
        // SAFETY: the whole of the validated C, final, in one call.
        unsafe { f.finish(&Region::in_place(job.c.ptr, job.c.rs, job.c.cs, job.m, job.n)) };
    }
}

type F32Fam = &'static Family<f32, f32, f32>;
type F64Fam = &'static Family<f64, f64, f64>;
#[cfg(target_arch = "x86_64")]
static F32_AVX512: [F32Fam; 2] = [&x86::AVX512_F32, &x86::AVX512_F32_WIDE];
#[cfg(target_arch = "x86_64")]
static F32_AVX2: [F32Fam; 2] = [&x86::AVX2_F32, &x86::AVX2_F32_WIDE];
static F32_GENERIC: [F32Fam; 1] = [&kernel::GENERIC_F32];
#[cfg(target_arch = "x86_64")]
static F64_AVX512: [F64Fam; 1] = [&x86::AVX512_F64];
#[cfg(target_arch = "x86_64")]
static F64_AVX2: [F64Fam; 1] = [&x86::AVX2_F64];
static F64_GENERIC: [F64Fam; 1] = [&kernel::GENERIC_F64];
#[cfg(target_arch = "aarch64")]
static F32_NEON: [F32Fam; 2] = [&neon::NEON_F32, &neon::NEON_F32_WIDE];
#[cfg(target_arch = "aarch64")]
static F64_NEON: [F64Fam; 1] = [&neon::NEON_F64];

fn f32_families(isa: Isa) -> &'static [F32Fam] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => &F32_AVX512,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => &F32_AVX2,
        #[cfg(target_arch = "aarch64")]
        Isa::Sme => sme::f32_families().unwrap_or(&F32_NEON),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => &F32_NEON,
        _ => &F32_GENERIC,
    }
}

fn f64_families(isa: Isa) -> &'static [F64Fam] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => &F64_AVX512,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => &F64_AVX2,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::Sme => &F64_NEON,
        _ => &F64_GENERIC,
    }
}

/// f32 GEMM.
pub fn gemm_f32(args: GemmArgs<'_, f32, f32>) -> Result<()> {
    crate::threads::in_pool(args.threads, |threads| gemm_f32_in_pool(args.threads(threads)))?
}

fn gemm_f32_in_pool(args: GemmArgs<'_, f32, f32>) -> Result<()> {
    let ck = check(args)?;
    let fams = f32_families(ck.isa);
    match ck.packed {
        Some(p) => {
            p.expect_from(PackedFrom::F32)?;
            let Panels::F32(panels, pf) = &p.panels else {
                return Err(Error::invalid(OP, "operand B: f32 weights packed as bf16 pairs (internal error)"));
            };
            let pf = *pf;
            let j = &ck.job;
            if j.m == 1 && j.n > 0 && j.k > 0 && ck.options.path == Path::Auto && pf.g == 1 {
                // Batch-1 products with constant weights: a matrix-vector pass over the panels.
                // SAFETY: `check` validated the job against these panels (same k and n).
                unsafe { gemv::gemv_prepacked(j, panels, pf.nr, ck.isa, ck.threads) };
                finish_whole(j);
                return Ok(());
            }
            execute(ck, &[pf], Some(gemv::gemv::<f32>), Some((pf, panels)))
        }
        None => execute(ck, fams, Some(gemv::gemv::<f32>), None),
    }
}

fn no_prepack<TI, T: Scalar>(ck: &Checked<'_, TI, T>, dtype: &str) -> Result<()> {
    if ck.packed.is_some() {
        return Err(Error::not_implemented(OP, format!("pre-packed B with {dtype} inputs (f32, bf16 and f16 only)")));
    }
    Ok(())
}

/// f64 GEMM.
pub fn gemm_f64(args: GemmArgs<'_, f64, f64>) -> Result<()> {
    crate::threads::in_pool(args.threads, |threads| gemm_f64_in_pool(args.threads(threads)))?
}

fn gemm_f64_in_pool(args: GemmArgs<'_, f64, f64>) -> Result<()> {
    let ck = check(args)?;
    no_prepack(&ck, "f64")?;
    let fams = f64_families(ck.isa);
    execute(ck, fams, Some(gemv::gemv::<f64>), None)
}

/// The bf16-pair family when `isa` is AVX-512: the AMX-BF16 tiles where the CPU has them and
/// the OS granted their state (unless `TENSORJIT_DISABLE_AMX=1`), else the AVX512-BF16 tiles
/// where the CPU has AVX512-BF16 and they are the faster choice ([`isa::bf16_dot_preferred`]:
/// not on Intel CPUs, which then convert to f32 panels).
fn bf16_pair_family(isa: Isa) -> Option<&'static Family<bf16, bf16, f32>> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa::amx_enabled() && hardware_features().amx_bf16 {
        return Some(&amx::AMX_BF16);
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && hardware_features().avx512_bf16 && isa::bf16_dot_preferred() {
        return Some(&x86::AVX512_BF16);
    }
    let _ = isa;
    None
}

/// Runs a half-precision product on the f32 tiles (A and B converted to f32 while packing, f32
/// FMAs), with pre-packed f32 panels when B was packed from `from`.
fn half_on_f32_tiles<TI>(ck: Checked<'_, TI, f32>, from: PackedFrom) -> Result<()>
where
    TI: Copy + Send + Sync,
    f32: PackFrom<TI>,
{
    match ck.packed {
        Some(p) => {
            p.expect_from(from)?;
            match &p.panels {
                Panels::F32(panels, pf) => execute(ck, &[*pf], None, Some((*pf, panels))),
                Panels::Bf16Pairs(..) => {
                    Err(Error::invalid(OP, "operand B: bf16 pairs need the AVX512-BF16 tiles (internal error)"))
                }
            }
        }
        None => {
            let fams = f32_families(ck.isa);
            execute(ck, fams, None, None)
        }
    }
}

/// bf16 inputs, f32 accumulation and output: with the AVX-512 ISA, AMX-BF16 tiles where the CPU
/// has them, else AVX512-BF16 `vdpbf16ps` tiles where they are faster than f32 (not on Intel
/// CPUs); otherwise bf16 → f32 conversion while packing and the f32 tiles (also the AVX2 path,
/// or any ISA forced through [`GemmOptions::isa`]). B may be pre-packed
/// ([`PackedB::new_bf16`]).
pub fn gemm_bf16(args: GemmArgs<'_, bf16, f32>) -> Result<()> {
    crate::threads::in_pool(args.threads, |threads| gemm_bf16_in_pool(args.threads(threads)))?
}

fn gemm_bf16_in_pool(args: GemmArgs<'_, bf16, f32>) -> Result<()> {
    let ck = check(args)?;
    if let Some(p) = ck.packed
        && let Panels::Bf16Pairs(panels, pf) = &p.panels
    {
        p.expect_from(PackedFrom::Bf16)?;
        return execute(ck, &[*pf], None, Some((*pf, panels)));
    }
    if ck.packed.is_none()
        && let Some(fam) = bf16_pair_family(ck.isa)
    {
        return execute(ck, &[fam], None, None);
    }
    half_on_f32_tiles(ck, PackedFrom::Bf16)
}

/// f16 inputs, f32 accumulation and output: f16 → f32 conversion while packing (F16C vector
/// conversions where the CPU has them) and the f32 tiles. B may be pre-packed
/// ([`PackedB::new_f16`]).
pub fn gemm_f16(args: GemmArgs<'_, f16, f32>) -> Result<()> {
    crate::threads::in_pool(args.threads, |threads| gemm_f16_in_pool(args.threads(threads)))?
}

fn gemm_f16_in_pool(args: GemmArgs<'_, f16, f32>) -> Result<()> {
    let ck = check(args)?;
    half_on_f32_tiles(ck, PackedFrom::F16)
}

/// int8 x int8 → int32 (wrapping). AMX-INT8 `tdpbssd` tiles where the CPU has them and the OS
/// granted their state (with the AVX-512 ISA, unless `TENSORJIT_DISABLE_AMX=1`), else
/// AVX512-VNNI `vpdpbusd` tiles where present (A offset by +128 to unsigned, corrected by the
/// column sums of B), else the portable i32 tiles. The
/// epilogue supports alpha, beta, bias and [`Activation::Relu`] only.
pub fn gemm_i8(args: GemmArgs<'_, i8, i32>) -> Result<()> {
    crate::threads::in_pool(args.threads, |threads| gemm_i8_in_pool(args.threads(threads)))?
}

/// Errors unless `act` is one the int32 epilogue supports (None, Relu).
fn i8_activation(act: Activation) -> Result<()> {
    if !matches!(act, Activation::None | Activation::Relu) {
        return Err(Error::not_implemented(OP, format!("activation {act:?} on int32 output (only None and Relu)")));
    }
    Ok(())
}

fn gemm_i8_in_pool(args: GemmArgs<'_, i8, i32>) -> Result<()> {
    i8_activation(args.epilogue.activation)?;
    let ck = check(args)?;
    no_prepack(&ck, "i8")?;
    #[cfg(target_arch = "x86_64")]
    if ck.isa == Isa::Avx512 && isa::amx_enabled() && hardware_features().amx_int8 {
        return execute(ck, &[&amx::AMX_I8], None, None);
    }
    #[cfg(target_arch = "x86_64")]
    if ck.isa == Isa::Avx512 && hardware_features().avx512_vnni {
        return execute(ck, &[&x86::AVX512_VNNI], None, None);
    }
    execute(ck, &[&kernel::GENERIC_I32], None, None)
}

/// [`gemm_bf16`] on the software model of the AMX-BF16 tiles (any CPU; slow): the AMX path of
/// the driver (A in 64-byte row groups, B in pairs, 32 x 32 tiles, k tails, edges, threads,
/// epilogue) without the hardware, for tests. B may not be pre-packed.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub fn gemm_bf16_amx_model(args: GemmArgs<'_, bf16, f32>) -> Result<()> {
    crate::threads::in_pool(args.threads, |threads| {
        let ck = check(args.threads(threads))?;
        no_prepack(&ck, "bf16 (AMX model)")?;
        execute(ck, &[&amx::MODEL_AMX_BF16], None, None)
    })?
}

/// [`gemm_i8`] on the software model of the AMX-INT8 tiles (any CPU; slow), for tests.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub fn gemm_i8_amx_model(args: GemmArgs<'_, i8, i32>) -> Result<()> {
    i8_activation(args.epilogue.activation)?;
    crate::threads::in_pool(args.threads, |threads| {
        let ck = check(args.threads(threads))?;
        no_prepack(&ck, "i8")?;
        execute(ck, &[&amx::MODEL_AMX_I8], None, None)
    })?
}

/// The tile family the f32 entry point would use for an m x n problem on `isa` (for logs and
/// benchmarks), e.g. `avx512-f32-14x32`.
// Only the crate's own tests and benches use it (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn f32_kernel_name(isa: Isa, m: usize, n: usize, geometry: Geometry) -> &'static str {
    choose_family(f32_families(isa), m, n, geometry).name
}

/// The source element type a [`PackedB`] was packed from (the entry point must match it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackedFrom {
    /// f32 weights ([`gemm_f32`]).
    F32,
    /// bf16 weights ([`gemm_bf16`]).
    Bf16,
    /// f16 weights ([`gemm_f16`]).
    F16,
}

/// The panels of a [`PackedB`]: f32 (converted exactly from bf16/f16 sources where the tiles
/// compute in f32) or bf16 pairs for the AVX512-BF16 tiles.
enum Panels {
    F32(PackedPanels<f32>, &'static Family<f32, f32, f32>),
    Bf16Pairs(PackedPanels<bf16>, &'static Family<bf16, bf16, f32>),
}

/// A constant right-hand side (f32, bf16 or f16) packed once into the tile layout of one ISA
/// (its large geometry), so repeated products skip packing B; the source can be dropped
/// afterwards. bf16 weights are packed as bf16 pairs for the AVX512-BF16 tiles (when the ISA is
/// AVX-512 and the CPU has them), else converted to f32 panels (exact) like f16 weights.
pub struct PackedB {
    panels: Panels,
    from: PackedFrom,
    k: usize,
    n: usize,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedB({}x{} {:?}, {}, kc={})", self.k, self.n, self.from, self.kernel_name(), self.kc())
    }
}

/// The ISA a packing call resolves to (`options.isa`, which must be supported, or the selected one).
fn pack_isa(options: &GemmOptions) -> Result<Isa> {
    match options.isa {
        Some(i) if !isa_supported(i) => {
            Err(Error::invalid("PackedB", format!("isa {}: not supported by this CPU", i.name())))
        }
        Some(i) => Ok(i),
        None => Ok(selected_isa()),
    }
}

/// The family of `fams` that `geometry` asks for (the large one unless Wide).
fn packing_family<PA, PB, T>(fams: &[&'static Family<PA, PB, T>], geometry: Geometry) -> &'static Family<PA, PB, T> {
    match geometry {
        Geometry::Wide => fams.get(1).copied().unwrap_or(fams[0]),
        _ => fams[0],
    }
}

/// Packs a k x n source of `TI` into f32 panels of the f32 family for `options`.
fn pack_f32_panels<TI: Copy>(
    k: usize,
    n: usize,
    b: MatRef<'_, TI>,
    options: &GemmOptions,
    from: PackedFrom,
) -> Result<PackedB>
where
    f32: PackFrom<TI>,
{
    pack_f32_blocks(k, &[(n, b)], options, from)
}

/// The column blocks `blocks` (`(n_i, k x n_i view)`) as raw views after checking their extents,
/// or, when a block other than the last does not fill whole panels of width `nr`, one row-major
/// copy of their concatenation (returned beside its view, which points into it).
#[allow(clippy::type_complexity)]
fn block_views<TI: Copy>(
    k: usize,
    blocks: &[(usize, MatRef<'_, TI>)],
    nr: usize,
) -> Result<(Vec<(RawMat<TI>, usize)>, Option<Vec<TI>>)> {
    for &(nb, b) in blocks {
        check_extent("B", k, nb, b.rs, b.cs, b.data.len())?;
    }
    let aligned = blocks.iter().rev().skip(1).all(|&(nb, _)| nb % nr == 0);
    if aligned {
        let views = blocks.iter().map(|&(nb, b)| (RawMat { ptr: b.data.as_ptr(), rs: b.rs, cs: b.cs }, nb)).collect();
        return Ok((views, None));
    }
    let n: usize = blocks.iter().map(|b| b.0).sum();
    let mut all = Vec::with_capacity(k * n);
    for r in 0..k {
        for &(nb, b) in blocks {
            all.extend((0..nb).map(|c| b.data[r * b.rs + c * b.cs]));
        }
    }
    let view = RawMat { ptr: all.as_ptr(), rs: n, cs: 1 };
    Ok((vec![(view, n)], Some(all)))
}

/// Packs the column blocks `blocks` side by side into f32 panels of the f32 family for `options`.
fn pack_f32_blocks<TI: Copy>(
    k: usize,
    blocks: &[(usize, MatRef<'_, TI>)],
    options: &GemmOptions,
    from: PackedFrom,
) -> Result<PackedB>
where
    f32: PackFrom<TI>,
{
    let family = packing_family(f32_families(pack_isa(options)?), options.geometry);
    let kc = blocking::packed_kc(family.nr, family.g, 4, options.blocking);
    let (views, _copy) = block_views(k, blocks, family.nr)?;
    let n = blocks.iter().map(|b| b.0).sum();
    // SAFETY: `block_views` checked each view's extent (or made the one copy it points into,
    // alive until the end of this function), and every view but the last fills whole panels.
    let panels = unsafe { PackedPanels::pack_blocks::<TI, f32>(family, &views, k, kc) };
    Ok(PackedB { panels: Panels::F32(panels, family), from, k, n })
}

/// Packs bf16 column blocks side by side: bf16 pairs where [`gemm_bf16`] uses the AVX512-BF16
/// tiles, else f32 panels.
fn pack_bf16_blocks(k: usize, blocks: &[(usize, MatRef<'_, bf16>)], options: &GemmOptions) -> Result<PackedB> {
    let isa = pack_isa(options)?;
    if let Some(family) = bf16_pair_family(isa) {
        let kc = blocking::packed_kc(family.nr, family.g, 2, options.blocking);
        let (views, _copy) = block_views(k, blocks, family.nr)?;
        let n = blocks.iter().map(|b| b.0).sum();
        // SAFETY: as in `pack_f32_blocks`.
        let panels = unsafe { PackedPanels::pack_blocks::<bf16, bf16>(family, &views, k, kc) };
        return Ok(PackedB { panels: Panels::Bf16Pairs(panels, family), from: PackedFrom::Bf16, k, n });
    }
    pack_f32_blocks(k, blocks, options, PackedFrom::Bf16)
}

impl PackedB {
    /// Packs the k x n matrix `b` for the selected ISA.
    pub fn new(k: usize, n: usize, b: MatRef<'_, f32>) -> Result<PackedB> {
        Self::with_options(k, n, b, &GemmOptions::default())
    }

    /// Packs for `options.isa` (must be supported), `options.geometry` and `options.blocking.kc`.
    pub fn with_options(k: usize, n: usize, b: MatRef<'_, f32>, options: &GemmOptions) -> Result<PackedB> {
        pack_f32_panels(k, n, b, options, PackedFrom::F32)
    }

    /// Packs bf16 weights for [`gemm_bf16`] on the selected ISA.
    pub fn new_bf16(k: usize, n: usize, b: MatRef<'_, bf16>) -> Result<PackedB> {
        Self::bf16_with_options(k, n, b, &GemmOptions::default())
    }

    /// Packs bf16 weights for `options` (as [`PackedB::with_options`]): bf16 pairs for the
    /// AVX512-BF16 tiles where [`gemm_bf16`] would use them, else f32 panels.
    pub fn bf16_with_options(k: usize, n: usize, b: MatRef<'_, bf16>, options: &GemmOptions) -> Result<PackedB> {
        pack_bf16_blocks(k, &[(n, b)], options)
    }

    /// Packs the k x (n_1 + … + n_j) f32 matrix made of the column blocks `blocks` (`(n_i, k x
    /// n_i view)`) side by side, as [`PackedB::new`] packs their concatenation, without
    /// materialising it (each block goes straight into its panels; a block that would start
    /// inside a panel costs one copy of the whole matrix instead): for layers that share an
    /// input and are run as one product.
    pub fn from_blocks(k: usize, blocks: &[(usize, MatRef<'_, f32>)]) -> Result<PackedB> {
        Self::blocks_with_options(k, blocks, &GemmOptions::default())
    }

    /// [`PackedB::from_blocks`] for `options` (as [`PackedB::with_options`]).
    pub fn blocks_with_options(
        k: usize,
        blocks: &[(usize, MatRef<'_, f32>)],
        options: &GemmOptions,
    ) -> Result<PackedB> {
        pack_f32_blocks(k, blocks, options, PackedFrom::F32)
    }

    /// [`PackedB::from_blocks`] for bf16 weights (packed as [`PackedB::new_bf16`] packs).
    pub fn from_blocks_bf16(k: usize, blocks: &[(usize, MatRef<'_, bf16>)]) -> Result<PackedB> {
        pack_bf16_blocks(k, blocks, &GemmOptions::default())
    }

    /// [`PackedB::from_blocks`] for f16 weights (packed as [`PackedB::new_f16`] packs).
    pub fn from_blocks_f16(k: usize, blocks: &[(usize, MatRef<'_, f16>)]) -> Result<PackedB> {
        pack_f32_blocks(k, blocks, &GemmOptions::default(), PackedFrom::F16)
    }

    /// Packs f16 weights for [`gemm_f16`] on the selected ISA (f32 panels).
    pub fn new_f16(k: usize, n: usize, b: MatRef<'_, f16>) -> Result<PackedB> {
        Self::f16_with_options(k, n, b, &GemmOptions::default())
    }

    /// Packs f16 weights for `options` (as [`PackedB::with_options`]).
    pub fn f16_with_options(k: usize, n: usize, b: MatRef<'_, f16>, options: &GemmOptions) -> Result<PackedB> {
        pack_f32_panels(k, n, b, options, PackedFrom::F16)
    }

    /// Rows (the contraction size).
    pub fn k(&self) -> usize {
        self.k
    }
    /// Columns.
    pub fn n(&self) -> usize {
        self.n
    }
    /// The source element type.
    // Only the crate's own tests read it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn packed_from(&self) -> PackedFrom {
        self.from
    }
    /// Bytes held by the packed panels.
    pub fn size_bytes(&self) -> usize {
        match &self.panels {
            Panels::F32(p, _) => p.buf.len() * 4,
            Panels::Bf16Pairs(p, _) => p.buf.len() * 2,
        }
    }
    /// The tile family it was packed for.
    pub fn kernel_name(&self) -> &'static str {
        match &self.panels {
            Panels::F32(_, f) => f.name,
            Panels::Bf16Pairs(_, f) => f.name,
        }
    }
    fn kc(&self) -> usize {
        match &self.panels {
            Panels::F32(p, _) => p.kc,
            Panels::Bf16Pairs(p, _) => p.kc,
        }
    }

    /// Errors unless this was packed from `want` (the entry point's input type).
    fn expect_from(&self, want: PackedFrom) -> Result<()> {
        if self.from != want {
            return Err(Error::invalid(
                OP,
                format!("operand B: packed from {:?} weights, this product takes {want:?}", self.from),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what a GEMM hands to its [`Finish`]: per element of C, how often and the value.
    #[derive(Debug)]
    struct Recorder {
        base: usize,
        seen: Vec<std::sync::Mutex<(u32, f32)>>,
    }

    impl Finish<f32> for Recorder {
        unsafe fn finish(&self, r: &Region<f32>) {
            for i in 0..r.rows {
                for j in 0..r.cols {
                    let p = r.at.wrapping_add(i * r.rs + j * r.cs);
                    let off = (p as usize - self.base) / 4;
                    // SAFETY: the `Finish` contract: the values are readable.
                    let v = unsafe { *r.vals.add(i * r.vrs + j * r.vcs) };
                    let mut e = self.seen[off].lock().unwrap();
                    *e = (e.0 + 1, v);
                }
            }
        }
    }

    /// Every path hands every element of C to the finisher exactly once, with its final value
    /// (after the last K block, the bias and the activation; from C or a tile buffer): tiny (naive), m = 1 (gemv), small M
    /// (direct), packed with several K, M and N blocks and edge tiles, pre-packed, 1 and 2
    /// threads, bf16 tiles too.
    #[test]
    fn the_finisher_sees_every_element_once_and_final() {
        let shapes = [(3, 5, 7), (1, 300, 70), (37, 1, 40), (9, 100, 64), (61, 75, 300), (130, 97, 129), (70, 64, 192)];
        for &(m, n, k) in &shapes {
            let a: Vec<f32> = (0..m * k).map(|x| ((x * 13 % 31) as f32 - 15.0) / 16.0).collect();
            let b: Vec<f32> = (0..k * n).map(|x| ((x * 7 % 29) as f32 - 14.0) / 16.0).collect();
            let bias: Vec<f32> = (0..n).map(|j| j as f32 / 8.0 - 2.0).collect();
            let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
            let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
            let packed = PackedB::new(k, n, MatRef::row_major(&b, n)).unwrap();
            let packed_bf16 = PackedB::new_bf16(k, n, MatRef::row_major(&bb, n)).unwrap();
            for path in [Path::Auto, Path::Naive, Path::Gemv, Path::Direct, Path::Packed] {
                if path == Path::Gemv && m != 1 && n != 1 {
                    continue;
                }
                for threads in [1, 2] {
                    for kind in 0..4 {
                        // Pre-packed B (kinds 1, 3) on the automatic choice only; bf16 (2, 3)
                        // has no gemv or direct path.
                        let skip = match kind {
                            1 | 3 => path != Path::Auto,
                            2 => path != Path::Auto && path != Path::Packed && path != Path::Naive,
                            _ => false,
                        };
                        if skip {
                            continue;
                        }
                        let mut c = vec![f32::NAN; m * n];
                        let rec = Recorder {
                            base: c.as_ptr() as usize,
                            seen: (0..m * n).map(|_| std::sync::Mutex::new((0, 0.0))).collect(),
                        };
                        let opts =
                            GemmOptions { path, blocking: Blocking { kc: 48, mc: 28, nc: 64 }, ..Default::default() };
                        let epi = Epilogue::dense(&bias, Activation::Relu);
                        let cm = MatMut::row_major(&mut c, n);
                        let r = if kind < 2 {
                            let rhs = if kind == 1 { Rhs::Packed(&packed) } else { MatRef::row_major(&b, n).into() };
                            let args = GemmArgs::new(m, n, k, MatRef::row_major(&a, k), rhs, cm);
                            gemm_f32(args.epilogue(epi).threads(threads).options(opts).finish(Some(&rec)))
                        } else {
                            let rhs =
                                if kind == 3 { Rhs::Packed(&packed_bf16) } else { MatRef::row_major(&bb, n).into() };
                            let args = GemmArgs::new(m, n, k, MatRef::row_major(&ab, k), rhs, cm);
                            gemm_bf16(args.epilogue(epi).threads(threads).options(opts).finish(Some(&rec)))
                        };
                        r.unwrap_or_else(|e| panic!("{m}x{n}x{k} {path:?} kind {kind}: {e}"));
                        for (i, e) in rec.seen.iter().enumerate() {
                            let (count, v) = *e.lock().unwrap();
                            let what = format!("{m}x{n}x{k} {path:?} {threads}T kind {kind} element {i}");
                            assert_eq!(count, 1, "{what}: handed over {count} times");
                            // The product of these sixteenths is exact: relu(a·b + bias). (C
                            // itself need not hold it: tiles finished from the tile buffer are
                            // not written back.)
                            let (r, col) = (i / n, i % n);
                            let want = (0..k).map(|p| a[r * k + p] * b[p * n + col]).sum::<f32>() + bias[col];
                            assert_eq!(v, want.max(0.0), "{what}: handed over");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn direct_path_choice_follows_the_l2() {
        let (zen3, xeon) = (512 << 10, 2 << 20);
        // B rows 6 KiB apart, several row tiles: copied panels pay only with a large L2.
        assert!(!direct_suits(16, 6, 6144, zen3));
        assert!(direct_suits(16, 6, 6144, xeon));
        // One row tile reads B in place at any row stride.
        assert!(direct_suits(6, 6, 6144, zen3));
        assert!(direct_suits(128, 6, 1536, zen3));
        assert!(!direct_suits(128, 6, 6144, zen3));
        assert!(direct_suits(128, 6, 6144, xeon));
        // Rows a multiple of 1 KiB apart crowd the L1 sets beyond 64 rows.
        assert!(direct_suits(64, 6, 1024, xeon));
        assert!(!direct_suits(128, 6, 1024, xeon));
        assert!(!direct_suits(193, 6, 1536, xeon));
    }

    /// Runs an i8 problem through the scalar model of the VNNI layout (packing in quads,
    /// +128 offset, column-sum correction, k blocks not multiple of 4) and checks it exactly.
    #[test]
    fn vnni_layout_model_is_exact() {
        for &(m, n, k, kc) in &[(1, 1, 1, 4), (5, 33, 7, 4), (7, 65, 30, 8), (13, 40, 129, 12), (4, 3, 2, 0)] {
            let a: Vec<i8> = (0..m * k).map(|x| if x % 3 == 0 { -128 } else { (x % 255) as i8 }).collect();
            let b: Vec<i8> =
                (0..k * n).map(|x| if x % 5 == 0 { 127 } else { ((x % 200) as i32 - 100) as i8 }).collect();
            let bias: Vec<i32> = (0..n as i32).collect();
            let mut c = vec![3i32; m * n];
            let args = GemmArgs::new(
                m,
                n,
                k,
                MatRef::row_major(&a, k),
                MatRef::row_major(&b, n),
                MatMut::row_major(&mut c, n),
            )
            .epilogue(Epilogue { alpha: 1, beta: 1, bias: Bias::PerColumn(&bias), activation: Activation::Relu })
            .options(GemmOptions {
                path: Path::Packed,
                blocking: Blocking { kc, mc: 6, nc: 64 },
                ..Default::default()
            });
            let ck = check(args).unwrap();
            execute(ck, &[&kernel::MODEL_VNNI], None, None).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let s: i32 = (0..k).map(|p| a[i * k + p] as i32 * b[p * n + j] as i32).sum();
                    assert_eq!(c[i * n + j], (s + 3 + j as i32).max(0), "{m}x{n}x{k} kc={kc} ({i},{j})");
                }
            }
        }
    }

    /// The bf16-pair layout (odd k, odd k blocks) through its scalar model.
    #[test]
    fn bf16_pair_layout_model_matches() {
        for &(m, n, k, kc) in &[(1, 1, 1, 2), (5, 33, 7, 4), (7, 65, 31, 10), (2, 3, 9, 0)] {
            let v = |x: usize| bf16::from_f32(((x * 7 % 17) as f32 - 8.0) / 8.0);
            let a: Vec<bf16> = (0..m * k).map(v).collect();
            let b: Vec<bf16> = (0..k * n).map(|x| v(x + 3)).collect();
            let mut c = vec![0.0f32; m * n];
            let args = GemmArgs::new(
                m,
                n,
                k,
                MatRef::row_major(&a, k),
                MatRef::row_major(&b, n),
                MatMut::row_major(&mut c, n),
            )
            .options(GemmOptions {
                path: Path::Packed,
                blocking: Blocking { kc, mc: 6, nc: 64 },
                ..Default::default()
            });
            let ck = check(args).unwrap();
            execute(ck, &[&kernel::MODEL_BF16], None, None).unwrap();
            for i in 0..m {
                for j in 0..n {
                    // Products of multiples of 1/8 below 1 are exact in f32, so the sum is exact.
                    let s: f32 = (0..k).map(|p| a[i * k + p].to_f32() * b[p * n + j].to_f32()).sum();
                    assert_eq!(c[i * n + j], s, "{m}x{n}x{k} kc={kc} ({i},{j})");
                }
            }
        }
    }

    #[test]
    fn rejects_short_operands_and_overlapping_output() {
        let a = [0.0f32; 5];
        let b = [0.0f32; 6];
        let mut c = [0.0f32; 4];
        let e = gemm_f32(GemmArgs::new(
            2,
            2,
            3,
            MatRef::row_major(&a, 3),
            MatRef::row_major(&b, 2),
            MatMut::row_major(&mut c, 2),
        ));
        assert!(matches!(e, Err(Error::Invalid { .. })), "{e:?}");
        let a = [0.0f32; 6];
        let e = gemm_f32(GemmArgs::new(
            2,
            2,
            3,
            MatRef::row_major(&a, 3),
            MatRef::row_major(&b, 2),
            MatMut::new(&mut c, 1, 1),
        ));
        assert!(format!("{e:?}").contains("overlap"), "{e:?}");
    }

    #[test]
    fn cost_model_prefers_wide_tiles_for_small_m() {
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(f32_kernel_name(Isa::Avx512, 4096, 4096, Geometry::Auto), "avx512-f32-14x32");
            assert_eq!(f32_kernel_name(Isa::Avx512, 16, 1536, Geometry::Auto), "avx512-f32-8x48");
            assert_eq!(f32_kernel_name(Isa::Avx2, 1024, 1024, Geometry::Auto), "avx2-f32-6x16");
        }
    }
}
