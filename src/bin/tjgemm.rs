//! `tjgemm`: GEMM throughput tables (GFLOP/s and % of the FMA peak measured in the same run)
//! for f32 squares, transformer shapes on 1 and 2 threads, and bf16 vs f32.
//!
//! Usage (it calls the crate's internal kernels, so it needs the `internals` feature):
//! `cargo build --release --features internals --bin tjgemm && target/release/tjgemm [--quick]
//! [--cpu-time] [--isa generic|avx2|avx512] [--geometry large|wide] [--path packed|direct|gemv|naive] [--m M]
//! [--prepacked] [--openblas LIB] [--shapes MxKxN,... [--threads T] [--reps R] [--half]]`.
//! `--prepacked` packs B once before timing (`PackedB`, as the jit does for constant weights;
//! bf16/f16 too). `--half` with `--shapes`: f32 vs bf16 vs f16 inputs on `--threads T` threads
//! (default 1), alternated round by round.
//! `--openblas LIB` (Linux) also times OpenBLAS's `cblas_sgemm` from that shared library (for
//! numpy's own copy: `python3 -c "import numpy, glob, os; print(glob.glob(os.path.dirname(
//! numpy.__file__) + '.libs/*openblas*'))"`) in the same harness and prints tensorjit / OpenBLAS.
//! Numbers are the best of several timed repetitions (the machine may be shared); with
//! `--cpu-time` single-thread runs are timed in the thread's CPU time, which excludes time the
//! thread was preempted by other processes (caches may still be disturbed).

use std::time::{Duration, Instant};

use half::{bf16, f16};
use tensorjit::kernels::gemm::*;

/// Register-only FMA loop (inline asm, so nothing but FMAs on independent registers): 12
/// ymm or 24 zmm accumulators; returns the GFLOP/s of one thread.
#[cfg(target_arch = "x86_64")]
fn fma_peak(isa: Isa) -> f64 {
    use std::arch::asm;
    const ITERS: usize = 2_000_000;
    fn avx2(iters: usize) {
        // SAFETY: only ymm0-ymm15 and a counter register are touched; the caller checked AVX2+FMA.
        unsafe {
            asm!(
                "vxorps ymm0, ymm0, ymm0", "vxorps ymm1, ymm1, ymm1", "vxorps ymm2, ymm2, ymm2",
                "vxorps ymm3, ymm3, ymm3", "vxorps ymm4, ymm4, ymm4", "vxorps ymm5, ymm5, ymm5",
                "vxorps ymm6, ymm6, ymm6", "vxorps ymm7, ymm7, ymm7", "vxorps ymm8, ymm8, ymm8",
                "vxorps ymm9, ymm9, ymm9", "vxorps ymm10, ymm10, ymm10", "vxorps ymm11, ymm11, ymm11",
                "vxorps ymm12, ymm12, ymm12", "vxorps ymm13, ymm13, ymm13",
                "2:",
                "vfmadd231ps ymm0, ymm12, ymm13", "vfmadd231ps ymm1, ymm12, ymm13",
                "vfmadd231ps ymm2, ymm12, ymm13", "vfmadd231ps ymm3, ymm12, ymm13",
                "vfmadd231ps ymm4, ymm12, ymm13", "vfmadd231ps ymm5, ymm12, ymm13",
                "vfmadd231ps ymm6, ymm12, ymm13", "vfmadd231ps ymm7, ymm12, ymm13",
                "vfmadd231ps ymm8, ymm12, ymm13", "vfmadd231ps ymm9, ymm12, ymm13",
                "vfmadd231ps ymm10, ymm12, ymm13", "vfmadd231ps ymm11, ymm12, ymm13",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _, out("ymm5") _,
                out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                out("ymm12") _, out("ymm13") _,
                options(nostack),
            );
        }
    }
    #[target_feature(enable = "avx512f")]
    fn avx512(iters: usize) {
        // SAFETY: only zmm0-zmm25 and a counter register are touched; the caller checked AVX-512F.
        unsafe {
            asm!(
                "vxorps xmm24, xmm24, xmm24", "vxorps xmm25, xmm25, xmm25",
                "2:",
                "vfmadd231ps zmm0, zmm24, zmm25", "vfmadd231ps zmm1, zmm24, zmm25",
                "vfmadd231ps zmm2, zmm24, zmm25", "vfmadd231ps zmm3, zmm24, zmm25",
                "vfmadd231ps zmm4, zmm24, zmm25", "vfmadd231ps zmm5, zmm24, zmm25",
                "vfmadd231ps zmm6, zmm24, zmm25", "vfmadd231ps zmm7, zmm24, zmm25",
                "vfmadd231ps zmm8, zmm24, zmm25", "vfmadd231ps zmm9, zmm24, zmm25",
                "vfmadd231ps zmm10, zmm24, zmm25", "vfmadd231ps zmm11, zmm24, zmm25",
                "vfmadd231ps zmm12, zmm24, zmm25", "vfmadd231ps zmm13, zmm24, zmm25",
                "vfmadd231ps zmm14, zmm24, zmm25", "vfmadd231ps zmm15, zmm24, zmm25",
                "vfmadd231ps zmm16, zmm24, zmm25", "vfmadd231ps zmm17, zmm24, zmm25",
                "vfmadd231ps zmm18, zmm24, zmm25", "vfmadd231ps zmm19, zmm24, zmm25",
                "vfmadd231ps zmm20, zmm24, zmm25", "vfmadd231ps zmm21, zmm24, zmm25",
                "vfmadd231ps zmm22, zmm24, zmm25", "vfmadd231ps zmm23, zmm24, zmm25",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _, out("zmm5") _,
                out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _, out("zmm16") _, out("zmm17") _,
                out("zmm18") _, out("zmm19") _, out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
                out("zmm24") _, out("zmm25") _,
                options(nostack),
            );
        }
    }
    let (flops, run): (f64, fn()) = match isa {
        Isa::Avx512 => ((ITERS / 2 * 24 * 16 * 2) as f64, || {
            // SAFETY: Isa::Avx512 is only chosen when AVX-512F is present.
            unsafe { avx512(ITERS / 2) }
        }),
        Isa::Avx2 => ((ITERS / 2 * 12 * 8 * 2) as f64, || avx2(ITERS / 2)),
        _ => return f64::NAN,
    };
    // Many short samples: the best one is the one no other process interrupted.
    let mut best = f64::MAX;
    for _ in 0..40 {
        let t = Instant::now();
        run();
        best = best.min(t.elapsed().as_secs_f64());
    }
    flops / best / 1e9
}

#[cfg(not(target_arch = "x86_64"))]
fn fma_peak(_isa: Isa) -> f64 {
    f64::NAN
}

fn data(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

#[cfg(target_os = "linux")]
mod cputime {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    /// CPU time of the calling thread in seconds (CLOCK_THREAD_CPUTIME_ID), so time spent
    /// preempted by other processes on a shared machine is not counted.
    pub fn thread_seconds() -> f64 {
        let mut t = Timespec { sec: 0, nsec: 0 };
        // SAFETY: clock_gettime writes one timespec to a valid pointer; 3 = CLOCK_THREAD_CPUTIME_ID.
        unsafe { clock_gettime(3, &mut t) };
        t.sec as f64 + t.nsec as f64 * 1e-9
    }
}

/// Wall-clock seconds, or the calling thread's CPU seconds with `cpu` (Linux only).
fn now(cpu: bool) -> f64 {
    #[cfg(target_os = "linux")]
    if cpu {
        return cputime::thread_seconds();
    }
    let _ = cpu;
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Best time of one call of `f` over samples lasting about `budget` in total (at least 3);
/// measured in thread CPU time when `cpu` (single-threaded runs), else wall time. Each sample
/// times a batch of calls lasting about 50 µs, so the clock's own cost (the thread CPU clock is
/// a system call, about 0.3 µs in this VM) stays near 1% of a 64^3 product.
fn best_time(budget: Duration, cpu: bool, mut f: impl FnMut()) -> f64 {
    f();
    let t = now(cpu);
    f();
    let once = now(cpu) - t;
    let batch = if once > 0.0 { ((50e-6 / once).ceil() as usize).clamp(1, 10_000) } else { 100 };
    let start = Instant::now();
    let mut best = f64::MAX;
    let mut runs = 0;
    while runs < 3 || (start.elapsed() < budget && runs < 1000) {
        let t = now(cpu);
        for _ in 0..batch {
            f();
        }
        // A zero (seen once in a VM's thread CPU clock) would read as infinite speed.
        let d = (now(cpu) - t) / batch as f64;
        if d > 0.0 {
            best = best.min(d);
        }
        runs += 1;
    }
    best
}

/// OpenBLAS's `cblas_sgemm`, loaded at run time (`--openblas LIB`) and timed in the same
/// harness as tensorjit (same data, batching, clocks and threads): the baseline without the
/// Python call overhead that numpy adds to small products (about 0.8 µs per call here).
#[cfg(target_os = "linux")]
mod openblas {
    use std::ffi::{CString, c_char, c_int, c_void};

    unsafe extern "C" {
        fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    }
    /// `cblas_sgemm` with 64-bit integers (OpenBLAS built with INTERFACE64, as numpy's is).
    type Sgemm64 = unsafe extern "C" fn(
        c_int,
        c_int,
        c_int,
        i64,
        i64,
        i64,
        f32,
        *const f32,
        i64,
        *const f32,
        i64,
        f32,
        *mut f32,
        i64,
    );
    /// `cblas_sgemm` with 32-bit integers (a distribution's libopenblas).
    type Sgemm32 = unsafe extern "C" fn(
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        f32,
        *const f32,
        c_int,
        *const f32,
        c_int,
        f32,
        *mut f32,
        c_int,
    );
    type SetThreads = unsafe extern "C" fn(c_int);
    /// `cblas_sgemv` with 64-bit integers (numpy's choice for a vector times a matrix).
    type Sgemv64 =
        unsafe extern "C" fn(c_int, c_int, i64, i64, f32, *const f32, i64, *const f32, i64, f32, *mut f32, i64);

    enum Sgemm {
        I64(Sgemm64),
        I32(Sgemm32),
    }

    pub struct Blas {
        sgemm: Sgemm,
        /// For M = 1 (as numpy calls it); the 64-bit-integer libraries only.
        sgemv: Option<Sgemv64>,
        set_threads: Option<SetThreads>,
        /// The symbol used, for the report.
        pub symbol: &'static str,
    }

    const ROW_MAJOR: c_int = 101;
    const NO_TRANS: c_int = 111;

    impl Blas {
        /// Loads `path` and finds its sgemm (numpy's `scipy_`-prefixed 64-bit names first).
        pub fn load(path: &str) -> Result<Blas, String> {
            let cpath = CString::new(path).map_err(|e| e.to_string())?;
            // SAFETY: dlopen with a valid C string; 2 = RTLD_NOW. A null handle is checked.
            let h = unsafe { dlopen(cpath.as_ptr(), 2) };
            if h.is_null() {
                return Err(format!("dlopen {path} failed"));
            }
            let sym = |name: &str| {
                let c = CString::new(name).expect("symbol name");
                // SAFETY: dlsym on a live handle with a valid C string; null when absent.
                let p = unsafe { dlsym(h, c.as_ptr()) };
                (!p.is_null()).then_some(p)
            };
            let set_threads =
                ["scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"]
                    .into_iter()
                    .find_map(sym)
                    // SAFETY: these OpenBLAS entry points take one int and return nothing.
                    .map(|p| unsafe { std::mem::transmute::<*mut c_void, SetThreads>(p) });
            for (name, gemv) in [("scipy_cblas_sgemm64_", "scipy_cblas_sgemv64_"), ("cblas_sgemm64_", "cblas_sgemv64_")]
            {
                if let Some(p) = sym(name) {
                    // SAFETY: the 64-bit-integer cblas_sgemm has the Sgemm64 signature.
                    let f = unsafe { std::mem::transmute::<*mut c_void, Sgemm64>(p) };
                    // SAFETY: the 64-bit-integer cblas_sgemv has the Sgemv64 signature.
                    let sgemv = sym(gemv).map(|p| unsafe { std::mem::transmute::<*mut c_void, Sgemv64>(p) });
                    return Ok(Blas { sgemm: Sgemm::I64(f), sgemv, set_threads, symbol: name });
                }
            }
            if let Some(p) = sym("cblas_sgemm") {
                // SAFETY: the standard cblas_sgemm has the Sgemm32 signature.
                let f = unsafe { std::mem::transmute::<*mut c_void, Sgemm32>(p) };
                return Ok(Blas { sgemm: Sgemm::I32(f), sgemv: None, set_threads, symbol: "cblas_sgemm" });
            }
            Err(format!("{path}: no cblas_sgemm"))
        }

        /// Sets OpenBLAS's thread count (1: it runs on the calling thread).
        pub fn threads(&self, n: usize) {
            if let Some(f) = self.set_threads {
                // SAFETY: OpenBLAS's set_num_threads with a positive count.
                unsafe { f(n as c_int) };
            }
        }

        /// C = A·B for row-major m x k, k x n and m x n (for m = 1, sgemv when the library has
        /// the 64-bit one: y = Bᵀ·x, as numpy computes a vector times a matrix).
        pub fn sgemm(&self, m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
            assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
            if let (1, Some(f)) = (m, self.sgemv) {
                const TRANS: c_int = 112;
                // SAFETY: B is k x n row-major (lda n), x holds k values, y holds n.
                unsafe {
                    f(
                        ROW_MAJOR,
                        TRANS,
                        k as i64,
                        n as i64,
                        1.0,
                        b.as_ptr(),
                        n as i64,
                        a.as_ptr(),
                        1,
                        0.0,
                        c.as_mut_ptr(),
                        1,
                    )
                };
                return;
            }
            // SAFETY: the slices cover the row-major extents given (checked above).
            unsafe {
                match self.sgemm {
                    Sgemm::I64(f) => f(
                        ROW_MAJOR,
                        NO_TRANS,
                        NO_TRANS,
                        m as i64,
                        n as i64,
                        k as i64,
                        1.0,
                        a.as_ptr(),
                        k as i64,
                        b.as_ptr(),
                        n as i64,
                        0.0,
                        c.as_mut_ptr(),
                        n as i64,
                    ),
                    Sgemm::I32(f) => f(
                        ROW_MAJOR,
                        NO_TRANS,
                        NO_TRANS,
                        m as c_int,
                        n as c_int,
                        k as c_int,
                        1.0,
                        a.as_ptr(),
                        k as c_int,
                        b.as_ptr(),
                        n as c_int,
                        0.0,
                        c.as_mut_ptr(),
                        n as c_int,
                    ),
                }
            }
        }
    }
}

/// Before a multi-thread measurement: a pause for the other library's idle workers (OpenBLAS
/// spin-waits ~0.1 s after a parallel call, rayon briefly) to go to sleep, so that they do not
/// hold one of the cores while this run's threads need both.
fn settle(threads: usize) {
    if threads > 1 {
        std::thread::sleep(Duration::from_millis(250));
    }
}

struct Bench {
    isa: Isa,
    geometry: Geometry,
    path: Path,
    budget: Duration,
    cpu: bool,
    /// B packed once outside the timed runs (constant weights).
    prepacked: bool,
    pool2: rayon::ThreadPool,
    #[cfg(target_os = "linux")]
    blas: Option<openblas::Blas>,
}

impl Bench {
    fn f32(&self, m: usize, n: usize, k: usize, threads: usize) -> f64 {
        let a = data(m * k, 1);
        let b = data(k * n, 2);
        let mut c = vec![0.0f32; m * n];
        let opts = GemmOptions { isa: Some(self.isa), geometry: self.geometry, path: self.path, ..Default::default() };
        let packed =
            self.prepacked.then(|| PackedB::with_options(k, n, MatRef::row_major(&b, n), &opts).expect("pack B"));
        let run = || {
            let rhs = match &packed {
                Some(p) => Rhs::Packed(p),
                None => Rhs::from(MatRef::row_major(&b, n)),
            };
            gemm_f32(
                GemmArgs::new(m, n, k, MatRef::row_major(&a, k), rhs, MatMut::row_major(&mut c, n))
                    .threads(threads)
                    .options(opts),
            )
            .expect("gemm_f32");
        };
        let t = self.time(threads, run);
        2.0 * (m * n * k) as f64 / t / 1e9
    }

    /// The best seconds per call of `run`: one thread runs on the calling thread (timed in its
    /// CPU time with --cpu-time); two threads run on a 2-thread pool, timed by the wall clock.
    fn time(&self, threads: usize, mut run: impl FnMut() + Send) -> f64 {
        settle(threads);
        if threads == 1 {
            best_time(self.budget, self.cpu, run)
        } else {
            self.pool2.install(|| best_time(self.budget, false, &mut run))
        }
    }

    fn has_openblas(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.blas.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// OpenBLAS's GFLOP/s for the same product on `threads` threads (None without `--openblas`).
    fn openblas(&self, m: usize, n: usize, k: usize, threads: usize) -> Option<f64> {
        #[cfg(target_os = "linux")]
        if let Some(blas) = &self.blas {
            let (a, b) = (data(m * k, 1), data(k * n, 2));
            let mut c = vec![0.0f32; m * n];
            blas.threads(threads);
            settle(threads);
            // One thread: OpenBLAS runs on the calling thread (its CPU time, as for tensorjit).
            let t = best_time(self.budget, self.cpu && threads == 1, || blas.sgemm(m, n, k, &a, &b, &mut c));
            blas.threads(1);
            return Some(2.0 * (m * n * k) as f64 / t / 1e9);
        }
        let _ = (m, n, k, threads);
        None
    }

    fn bf16(&self, m: usize, n: usize, k: usize, threads: usize) -> f64 {
        let a: Vec<bf16> = data(m * k, 1).into_iter().map(bf16::from_f32).collect();
        let b: Vec<bf16> = data(k * n, 2).into_iter().map(bf16::from_f32).collect();
        let opts = GemmOptions { isa: Some(self.isa), ..Default::default() };
        let packed =
            self.prepacked.then(|| PackedB::bf16_with_options(k, n, MatRef::row_major(&b, n), &opts).expect("pack B"));
        self.half(m, n, k, threads, &a, &b, packed.as_ref(), gemm_bf16)
    }

    fn f16(&self, m: usize, n: usize, k: usize, threads: usize) -> f64 {
        let a: Vec<f16> = data(m * k, 1).into_iter().map(f16::from_f32).collect();
        let b: Vec<f16> = data(k * n, 2).into_iter().map(f16::from_f32).collect();
        let opts = GemmOptions { isa: Some(self.isa), ..Default::default() };
        let packed =
            self.prepacked.then(|| PackedB::f16_with_options(k, n, MatRef::row_major(&b, n), &opts).expect("pack B"));
        self.half(m, n, k, threads, &a, &b, packed.as_ref(), gemm_f16)
    }

    /// GFLOP/s of a half-input product on `threads` threads (as [`Bench::f32`]), B packed per
    /// call or pre-packed.
    #[allow(clippy::too_many_arguments)]
    fn half<T: Copy + Sync>(
        &self,
        m: usize,
        n: usize,
        k: usize,
        threads: usize,
        a: &[T],
        b: &[T],
        packed: Option<&PackedB>,
        entry: fn(GemmArgs<'_, T, f32>) -> tensorjit::Result<()>,
    ) -> f64 {
        let mut c = vec![0.0f32; m * n];
        let opts = GemmOptions { isa: Some(self.isa), ..Default::default() };
        let run = || {
            let rhs = match packed {
                Some(p) => Rhs::Packed(p),
                None => Rhs::from(MatRef::row_major(b, n)),
            };
            entry(
                GemmArgs::new(m, n, k, MatRef::row_major(a, k), rhs, MatMut::row_major(&mut c, n))
                    .threads(threads)
                    .options(opts),
            )
            .expect("half gemm");
        };
        let t = self.time(threads, run);
        2.0 * (m * n * k) as f64 / t / 1e9
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let isa = match args.iter().position(|a| a == "--isa").and_then(|i| args.get(i + 1)) {
        Some(name) => match [Isa::Generic, Isa::Avx2, Isa::Avx512].into_iter().find(|i| i.name() == name) {
            Some(i) if isa_supported(i) => i,
            _ => {
                eprintln!("tjgemm: isa {name} is unknown or unsupported here");
                std::process::exit(2);
            }
        },
        None => selected_isa(),
    };
    let geometry = match args.iter().position(|a| a == "--geometry").and_then(|i| args.get(i + 1)).map(|s| s.as_str()) {
        Some("large") => Geometry::Large,
        Some("wide") => Geometry::Wide,
        _ => Geometry::Auto,
    };
    let only_m: Option<usize> = args.iter().position(|a| a == "--m").and_then(|i| args.get(i + 1)?.parse().ok());
    let path = match args.iter().position(|a| a == "--path").and_then(|i| args.get(i + 1)).map(|s| s.as_str()) {
        Some("packed") => Path::Packed,
        Some("direct") => Path::Direct,
        Some("naive") => Path::Naive,
        Some("gemv") => Path::Gemv,
        _ => Path::Auto,
    };
    let bench = Bench {
        isa,
        geometry,
        path,
        budget: Duration::from_millis(if quick { 150 } else { 600 }),
        cpu: args.iter().any(|a| a == "--cpu-time"),
        prepacked: args.iter().any(|a| a == "--prepacked"),
        pool2: rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool"),
        #[cfg(target_os = "linux")]
        blas: match args.iter().position(|a| a == "--openblas").and_then(|i| args.get(i + 1)) {
            Some(path) => match openblas::Blas::load(path) {
                Ok(b) => {
                    println!("# baseline: OpenBLAS {} from {path}, timed in this harness", b.symbol);
                    Some(b)
                }
                Err(e) => {
                    eprintln!("tjgemm: --openblas: {e}");
                    std::process::exit(2);
                }
            },
            None => None,
        },
    };
    println!("# {}", dispatch_summary());
    println!("# caches: {:?}", cache_sizes());
    println!(
        "# 1-thread times: {}; 2-thread times: wall clock; best of repeated runs",
        if bench.cpu { "thread CPU time (--cpu-time)" } else { "wall clock" }
    );
    if bench.prepacked {
        println!("# B pre-packed once before timing (PackedB, as for constant weights)");
    }
    let peak_isa = if isa == Isa::Generic { selected_isa() } else { isa };
    // The peak is the best of several samples (other processes may share the cores).
    let mut peak = (0..4).map(|_| fma_peak(peak_isa)).fold(0.0, f64::max);
    println!("# FMA peak (1 thread, register-only {} loop, best of 4): {peak:.1} GFLOP/s", peak_isa.name());

    // `--shapes MxKxN,MxKxN,...` (`--threads T`, `--reps R`): just those shapes, R times each
    // (and OpenBLAS R times, alternating with them).
    if let Some(list) = args.iter().position(|a| a == "--shapes").and_then(|i| args.get(i + 1)) {
        let threads: usize =
            args.iter().position(|a| a == "--threads").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(1);
        let reps: usize =
            args.iter().position(|a| a == "--reps").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(1);
        for shape in list.split(',') {
            let d: Vec<usize> = shape.split('x').filter_map(|x| x.parse().ok()).collect();
            let [m, k, n] = d[..] else {
                eprintln!("tjgemm: bad shape {shape} (want MxKxN)");
                std::process::exit(2);
            };
            if args.iter().any(|a| a == "--half") {
                // f32 vs bf16 vs f16 inputs (f32 accumulation) on T threads: R rounds, each
                // timing the three in turn (so a burst of load lands on all), best of each.
                let (mut f, mut b, mut h) = (0.0f64, 0.0f64, 0.0f64);
                for _ in 0..reps {
                    f = f.max(bench.f32(m, n, k, threads));
                    b = b.max(bench.bf16(m, n, k, threads));
                    h = h.max(bench.f16(m, n, k, threads));
                }
                println!(
                    "{m:>5} {k:>5} {n:>5} t{threads} f32 {f:>6.1} bf16 {b:>6.1} ({:.2}x) f16 {h:>6.1} ({:.2}x)",
                    b / f,
                    h / f
                );
                continue;
            }
            let name = if m == 1 { "gemv" } else { f32_kernel_name(isa, m, n, geometry) };
            // tensorjit and OpenBLAS alternate, so a burst of load from other processes
            // lands on both; each side reports its best run.
            let (mut runs, mut ob_best) = (Vec::new(), None::<f64>);
            for _ in 0..reps {
                runs.push(bench.f32(m, n, k, threads));
                if let Some(ob) = bench.openblas(m, n, k, threads) {
                    ob_best = Some(ob_best.map_or(ob, |b| b.max(ob)));
                }
            }
            let best = runs.iter().copied().fold(0.0, f64::max);
            let pct = 100.0 * best / peak / threads as f64;
            let base = match ob_best {
                Some(ob) => format!("  openblas {ob:.1} ratio {:.2}", best / ob),
                None => String::new(),
            };
            println!(
                "{m:>5} {k:>5} {n:>5} {name:>22} t{threads} best {best:>6.1} ({pct:.1}%) runs {}{base}",
                runs.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(" ")
            );
        }
        return;
    }
    if let Some(m) = only_m {
        for &k in &[384usize, 1536] {
            for &n in &[384usize, 1536] {
                let g = bench.f32(m, n, k, 1);
                let name = f32_kernel_name(isa, m, n, geometry);
                println!("{m:>5} {k:>5} {n:>5} {name:>22} {g:>9.1} {:>6.1}%", 100.0 * g / peak);
            }
        }
        return;
    }
    // With --openblas, each row ends with OpenBLAS's figures and tensorjit / OpenBLAS.
    let ob_head = if bench.has_openblas() {
        format!(" {:>9} {:>6} {:>9} {:>6}", "OB 1 thr", "ratio", "OB 2 thr", "ratio")
    } else {
        String::new()
    };
    let ob_cols =
        |m: usize, n: usize, k: usize, g1: f64, g2: f64| match (bench.openblas(m, n, k, 1), bench.openblas(m, n, k, 2))
        {
            (Some(o1), Some(o2)) => format!(" {o1:>9.1} {:>6.2} {o2:>9.1} {:>6.2}", g1 / o1, g2 / o2),
            _ => String::new(),
        };
    println!("\n## f32 squares (GFLOP/s; % of 1-thread peak, 2-thread % of 2x peak)");
    println!("{:>6} {:>22} {:>9} {:>7} {:>9} {:>7}{ob_head}", "size", "kernel", "1 thr", "%", "2 thr", "%");
    let squares: &[usize] = if quick { &[64, 256, 512, 1024] } else { &[64, 128, 256, 512, 1024, 2048] };
    for &s in squares {
        let g1 = bench.f32(s, s, s, 1);
        let g2 = bench.f32(s, s, s, 2);
        let name = f32_kernel_name(isa, s, s, Geometry::Auto);
        println!(
            "{s:>6} {name:>22} {g1:>9.1} {:>6.1}% {g2:>9.1} {:>6.1}%{}",
            100.0 * g1 / peak,
            50.0 * g2 / peak,
            ob_cols(s, s, s, g1, g2)
        );
    }

    println!("\n## f32 transformer shapes (GFLOP/s; % of 1-thread peak, 2-thread % of 2x peak)");
    println!(
        "{:>5} {:>5} {:>5} {:>22} {:>9} {:>7} {:>9} {:>7}{ob_head}",
        "M", "K", "N", "kernel", "1 thr", "%", "2 thr", "%"
    );
    let ms: &[usize] = if quick { &[1, 16, 128, 512] } else { &[1, 16, 128, 512, 4096] };
    for &m in ms {
        for &k in &[384usize, 1536] {
            for &n in &[384usize, 1536] {
                let g1 = bench.f32(m, n, k, 1);
                let g2 = bench.f32(m, n, k, 2);
                let name = if m == 1 { "gemv" } else { f32_kernel_name(isa, m, n, Geometry::Auto) };
                println!(
                    "{m:>5} {k:>5} {n:>5} {name:>22} {g1:>9.1} {:>6.1}% {g2:>9.1} {:>6.1}%{}",
                    100.0 * g1 / peak,
                    50.0 * g2 / peak,
                    ob_cols(m, n, k, g1, g2)
                );
            }
        }
    }

    println!("\n## bf16 inputs (f32 accumulation) vs f32, 1 thread");
    println!("{:>5} {:>5} {:>5} {:>10} {:>10} {:>7}", "M", "K", "N", "f32", "bf16", "ratio");
    let bf_shapes: &[(usize, usize, usize)] =
        &[(512, 512, 512), (128, 1536, 1536), (512, 1536, 384), (1024, 1024, 1024)];
    for &(m, k, n) in bf_shapes {
        let f = bench.f32(m, n, k, 1);
        let b = bench.bf16(m, n, k, 1);
        println!("{m:>5} {k:>5} {n:>5} {f:>10.1} {b:>10.1} {:>6.2}x", b / f);
    }
    let again = (0..4).map(|_| fma_peak(peak_isa)).fold(0.0, f64::max);
    peak = peak.max(again);
    println!(
        "\n# FMA peak re-measured at the end: {again:.1} GFLOP/s (best overall {peak:.1}); percentages above use the first."
    );
}
