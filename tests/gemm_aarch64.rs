//! The aarch64 GEMM microkernels (NEON f32 8x12 / 4x16, NEON f64 8x6, SME f32 FMOPA tiles)
//! against a naive f64 triple loop: every row and column remainder of each tile, 0, 1, primes,
//! transposed and padded layouts, the epilogue across K blocks, threads, pre-packed B, and the
//! environment overrides (child processes). Run under qemu with
//! `../shared/tools/aarch64-test --test gemm_aarch64`; for SVL 512 set
//! `QEMU_CPU="max,sme-default-vector-length=64"`. On other architectures this compiles to nothing.
#![cfg(target_arch = "aarch64")]

use tensorjit::kernels::gemm::*;

#[path = "common/gemm.rs"]
mod common;
use common::{Case, Ep, PLAIN, check, epilogue, problem, run_child};

/// The element types under test.
trait El: Scalar + Copy + std::fmt::Debug {
    /// Relative tolerance against the f64 reference (times Σ|terms| + 1).
    const TOL: f64;
    fn of(x: f64) -> Self;
    fn to(self) -> f64;
    fn gemm(args: GemmArgs<'_, Self, Self>) -> Result<(), String>;
}

impl El for f32 {
    const TOL: f64 = 2e-6;
    fn of(x: f64) -> f32 {
        x as f32
    }
    fn to(self) -> f64 {
        self as f64
    }
    fn gemm(args: GemmArgs<'_, f32, f32>) -> Result<(), String> {
        gemm_f32(args).map_err(|e| e.to_string())
    }
}

impl El for f64 {
    const TOL: f64 = 1e-13;
    fn of(x: f64) -> f64 {
        x
    }
    fn to(self) -> f64 {
        self
    }
    fn gemm(args: GemmArgs<'_, f64, f64>) -> Result<(), String> {
        gemm_f64(args).map_err(|e| e.to_string())
    }
}

/// Runs one case through the public entry point of `T` and checks it.
fn run<T: El>(cs: Case, ep: Ep, opts: GemmOptions, threads: usize) {
    let p = problem(cs, ep);
    let conv = |v: &[f64]| v.iter().map(|&x| T::of(x)).collect::<Vec<T>>();
    let (a, b, bias) = (conv(&p.a.0), conv(&p.b.0), conv(&p.bias));
    let mut c = conv(&p.c.0);
    let what = format!("{} {opts:?} threads={threads}", std::any::type_name::<T>());
    T::gemm(
        GemmArgs::new(
            cs.m,
            cs.n,
            cs.k,
            MatRef::new(&a, p.a.1, p.a.2),
            MatRef::new(&b, p.b.1, p.b.2),
            MatMut::new(&mut c, p.c.1, p.c.2),
        )
        .epilogue(epilogue(ep, &bias, T::of(ep.alpha), T::of(ep.beta)))
        .threads(threads)
        .options(opts),
    )
    .unwrap_or_else(|e| panic!("{what} {cs:?}: {e}"));
    let got: Vec<f64> = c.iter().map(|&x| x.to()).collect();
    check(&what, cs, &got, &p, T::TOL);
}

/// `(mr, nr)` parsed from a kernel name such as `neon-f32-8x12` or `sme-f32-16x16`.
fn tile_of(name: &str) -> (usize, usize) {
    let geo = name.rsplit('-').next().unwrap();
    let (r, c) = geo.split_once('x').unwrap();
    (r.parse().unwrap(), c.parse().unwrap())
}

/// The shapes that reach every row remainder (m over 1..=mr+1 and two panels ± 1, with a
/// column remainder of 3) and every column remainder (n over 1..=nr+1 and two panels ± 1).
fn remainder_shapes(mr: usize, nr: usize) -> Vec<(usize, usize)> {
    let mut v: Vec<(usize, usize)> = (1..=mr + 1).chain([2 * mr - 1, 2 * mr + 1]).map(|m| (m, nr + 3)).collect();
    v.extend((1..=nr + 1).chain([2 * nr - 1, 2 * nr + 1]).map(|n| (mr + 3, n)));
    v
}

/// Every remainder of one tile family on the Packed and Direct paths, for k = 1 and a prime k.
fn sweep<T: El>(isa: Isa, geometry: Geometry, mr: usize, nr: usize) {
    for path in [Path::Packed, Path::Direct] {
        let opts = GemmOptions { isa: Some(isa), path, geometry, ..Default::default() };
        for (m, n) in remainder_shapes(mr, nr) {
            for k in [1, 17] {
                run::<T>(Case::plain(m, n, k), PLAIN, opts, 1);
            }
        }
    }
}

/// The SME family's tile side for this CPU (`None` without SME).
fn sme_side() -> Option<usize> {
    isa_supported(Isa::Sme).then(|| {
        let name = f32_kernel_name(Isa::Sme, 512, 512, Geometry::Auto);
        assert!(name.starts_with("sme-f32-"), "{name}");
        let (mr, nr) = tile_of(name);
        assert_eq!(mr, nr, "{name}");
        mr
    })
}

/// Under `aarch64-test` (qemu `-cpu max`), SME must be detected and its tile must follow the
/// streaming vector length: side = 2·SVL/32 bits, capped at 32.
#[test]
fn sme_detected_with_the_vector_length_of_the_cpu() {
    let cpu = std::env::var("QEMU_CPU").unwrap_or_default();
    if !cpu.starts_with("max") {
        eprintln!("not under qemu -cpu max; SME supported: {}", isa_supported(Isa::Sme));
        return;
    }
    assert!(isa_supported(Isa::Neon) && isa_supported(Isa::Sme), "{}", dispatch_summary());
    let side = sme_side().unwrap();
    eprintln!("{} / {}", dispatch_summary(), f32_kernel_name(Isa::Sme, 512, 512, Geometry::Auto));
    // qemu's sme-default-vector-length is in bytes.
    if let Some(bytes) = cpu.split(',').find_map(|p| p.strip_prefix("sme-default-vector-length=")) {
        let bytes: usize = bytes.parse().unwrap();
        assert_eq!(side, (2 * bytes / 4).min(32), "QEMU_CPU={cpu}");
    }
    assert!([8, 16, 32].contains(&side), "{side}");
}

#[test]
fn neon_f32_every_tile_remainder() {
    if !isa_supported(Isa::Neon) {
        return;
    }
    for geometry in [Geometry::Large, Geometry::Wide] {
        let name = f32_kernel_name(Isa::Neon, 64, 64, geometry);
        assert!(name.starts_with("neon-f32-"), "{name}");
        let (mr, nr) = tile_of(name);
        sweep::<f32>(Isa::Neon, geometry, mr, nr);
    }
}

#[test]
fn neon_f64_every_tile_remainder() {
    if !isa_supported(Isa::Neon) {
        return;
    }
    // NEON f64 is one 8 x 6 family (src/kernels/gemm/neon.rs).
    sweep::<f64>(Isa::Neon, Geometry::Auto, 8, 6);
}

#[test]
fn sme_f32_every_tile_remainder() {
    let Some(side) = sme_side() else {
        eprintln!("no SME on this CPU: skipped");
        return;
    };
    sweep::<f32>(Isa::Sme, Geometry::Auto, side, side);
}

/// The aarch64 ISAs this CPU runs (f64 has NEON kernels only).
fn kernels() -> Vec<Isa> {
    [Isa::Neon, Isa::Sme].into_iter().filter(|&i| isa_supported(i)).collect()
}

#[test]
fn zero_one_and_prime_sizes() {
    for isa in kernels() {
        for path in [Path::Auto, Path::Packed] {
            let opts = GemmOptions { isa: Some(isa), path, ..Default::default() };
            for &(m, n, k) in &[(0, 5, 3), (5, 0, 3), (5, 3, 0), (1, 1, 1), (1, 7, 13), (13, 1, 7), (37, 41, 29)] {
                let ep = Ep { beta: 0.5, ..PLAIN };
                run::<f32>(Case::plain(m, n, k), ep, opts, 1);
                if isa == Isa::Neon {
                    run::<f64>(Case::plain(m, n, k), ep, opts, 1);
                }
            }
        }
    }
}

/// Transposed and padded A, B and C, with alpha, beta, bias per row or column and an
/// activation, over K blocks of 8 (so C is re-read between blocks and the epilogue waits for
/// the last one).
#[test]
fn layouts_and_epilogue_across_k_blocks() {
    for isa in kernels() {
        let opts = GemmOptions {
            isa: Some(isa),
            path: Path::Packed,
            blocking: Blocking { kc: 8, mc: 0, nc: 0 },
            ..Default::default()
        };
        for la in 0..3 {
            for lb in 0..3 {
                for lc in 0..3 {
                    for (bias, act) in [(1, Activation::Relu), (2, Activation::GeluTanh)] {
                        let cs = Case { la, lb, lc, ..Case::plain(19, 23, 29) };
                        let ep = Ep { alpha: 0.5, beta: 1.0, bias, act };
                        run::<f32>(cs, ep, opts, 1);
                        if isa == Isa::Neon {
                            run::<f64>(cs, ep, opts, 1);
                        }
                    }
                }
            }
        }
    }
}

/// Two threads (the problem is above the 4 MFLOP threshold) and a pre-packed right-hand side.
#[test]
fn threads_and_prepacked_b() {
    for isa in kernels() {
        let opts = GemmOptions { isa: Some(isa), ..Default::default() };
        run::<f32>(Case::plain(130, 70, 250), Ep { bias: 2, ..PLAIN }, opts, 2);

        let cs = Case { lb: 1, ..Case::plain(45, 37, 40) };
        let p = problem(cs, Ep { alpha: 2.0, bias: 2, act: Activation::Relu, ..PLAIN });
        let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let (a, b, bias) = (f(&p.a.0), f(&p.b.0), f(&p.bias));
        let popts = GemmOptions { blocking: Blocking { kc: 16, mc: 0, nc: 0 }, ..opts };
        let packed = PackedB::with_options(cs.k, cs.n, MatRef::new(&b, p.b.1, p.b.2), &popts).unwrap();
        assert!(packed.kernel_name().starts_with(isa.name()), "{}", packed.kernel_name());
        drop(b);
        for threads in [1, 2] {
            let mut c = f(&p.c.0);
            gemm_f32(
                GemmArgs::new(
                    cs.m,
                    cs.n,
                    cs.k,
                    MatRef::new(&a, p.a.1, p.a.2),
                    Rhs::Packed(&packed),
                    MatMut::new(&mut c, p.c.1, p.c.2),
                )
                .epilogue(Epilogue {
                    alpha: 2.0,
                    beta: 0.0,
                    bias: Bias::PerColumn(&bias),
                    activation: Activation::Relu,
                })
                .threads(threads),
            )
            .unwrap();
            let got: Vec<f64> = c.iter().map(|&x| x as f64).collect();
            check(&format!("prepacked {isa:?} threads={threads}"), cs, &got, &p, 2e-6);
        }
    }
}

/// The default choice and the environment overrides, in child processes (the overrides are
/// read once per process): each child checks the selected ISA, the dispatch summary, the f32
/// kernel the default path picks, and a default-options product against the reference.
#[test]
fn env_overrides_select_each_kernel() {
    if let Ok(want) = std::env::var("TJ_GEMM_A64_EXPECT") {
        assert_eq!(selected_isa().name(), want, "{}", dispatch_summary());
        assert!(dispatch_summary().starts_with(&format!("gemm isa={want} ")), "{}", dispatch_summary());
        let name = f32_kernel_name(selected_isa(), 64, 64, Geometry::Auto);
        assert!(name.starts_with(&format!("{want}-f32-")), "{name}");
        let ep = Ep { bias: 2, act: Activation::Silu, ..PLAIN };
        run::<f32>(Case::plain(37, 41, 29), ep, GemmOptions::default(), 1);
        run::<f64>(Case::plain(37, 41, 29), ep, GemmOptions::default(), 1);
        return;
    }
    let mut cases = vec![(vec![("TENSORJIT_DISABLE_NEON", "1")], "generic")];
    if isa_supported(Isa::Neon) {
        cases.push((vec![("TENSORJIT_DISABLE_SME", "1")], "neon"));
    }
    if isa_supported(Isa::Sme) {
        cases.push((vec![], "sme"));
    }
    for (vars, want) in cases {
        let clear = ["TENSORJIT_DISABLE_SME", "TENSORJIT_DISABLE_NEON"];
        run_child("env_overrides_select_each_kernel", "TJ_GEMM_A64_EXPECT", want, &vars, &clear);
    }
}
