//! GEMM kernels against a naive f64 triple loop: every ISA this CPU runs, every path, every
//! dtype, tile remainders and primes, transposed and strided layouts, the fused epilogue,
//! blocking edges, threads, pre-packed B and the environment overrides.

use half::{bf16, f16};
use tensorjit::kernels::gemm::*;

#[path = "common/gemm.rs"]
mod common;
use common::{Case, Ep, PLAIN, check, epilogue, problem, run_child};

/// The ISAs this machine can run.
fn isas() -> Vec<Isa> {
    [Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sme].into_iter().filter(|&i| isa_supported(i)).collect()
}

/// Under emulation (aarch64 via qemu, ~50x slower) the tests use fewer shapes.
fn emulated() -> bool {
    cfg!(not(target_arch = "x86_64")) || std::env::var_os("TJ_GEMM_QUICK").is_some()
}

fn run_f32(cs: Case, ep: Ep, opts: GemmOptions, threads: usize) -> std::result::Result<(), String> {
    let p = problem(cs, ep);
    let a: Vec<f32> = p.a.0.iter().map(|&x| x as f32).collect();
    let b: Vec<f32> = p.b.0.iter().map(|&x| x as f32).collect();
    let mut c: Vec<f32> = p.c.0.iter().map(|&x| x as f32).collect();
    let bias: Vec<f32> = p.bias.iter().map(|&x| x as f32).collect();
    gemm_f32(
        GemmArgs::new(
            cs.m,
            cs.n,
            cs.k,
            MatRef::new(&a, p.a.1, p.a.2),
            MatRef::new(&b, p.b.1, p.b.2),
            MatMut::new(&mut c, p.c.1, p.c.2),
        )
        .epilogue(epilogue(ep, &bias, ep.alpha as f32, ep.beta as f32))
        .threads(threads)
        .options(opts),
    )
    .map_err(|e| e.to_string())?;
    let got: Vec<f64> = c.iter().map(|&x| x as f64).collect();
    check(&format!("f32 {opts:?} t{threads}"), cs, &got, &p, 2e-6);
    Ok(())
}

const SIZES: [usize; 13] = [0, 1, 2, 3, 5, 7, 13, 17, 31, 33, 64, 65, 127];

/// A deterministic selection of (m, n, k) from SIZES: all small combinations and a spread of
/// large ones (the full cube is 2197 problems per configuration).
fn shapes() -> Vec<(usize, usize, usize)> {
    if emulated() {
        return vec![(0, 3, 2), (1, 1, 1), (1, 13, 7), (13, 1, 5), (3, 17, 0), (9, 13, 17), (17, 31, 5), (33, 7, 64)];
    }
    let mut v = Vec::new();
    for (x, &m) in SIZES.iter().enumerate() {
        for (y, &n) in SIZES.iter().enumerate() {
            for (z, &k) in SIZES.iter().enumerate() {
                let small = m <= 17 && n <= 17 && k <= 17;
                if small && (x + y + z) % 2 == 0 || (x * 5 + y * 3 + z) % 11 == 0 {
                    v.push((m, n, k));
                }
            }
        }
    }
    v
}

fn forced_paths() -> [Path; 4] {
    [Path::Naive, Path::Gemv, Path::Direct, Path::Packed]
}

#[test]
fn f32_every_isa_path_and_size() {
    for isa in isas() {
        for path in forced_paths() {
            for geometry in [Geometry::Large, Geometry::Wide] {
                for (m, n, k) in shapes() {
                    if path == Path::Gemv && m != 1 && n != 1 {
                        continue;
                    }
                    let cs = Case { m, n, k, la: 0, lb: 0, lc: 0 };
                    let opts = GemmOptions { isa: Some(isa), path, geometry, ..Default::default() };
                    run_f32(cs, PLAIN, opts, 1).unwrap();
                }
            }
        }
    }
}

#[test]
fn f32_layouts_transposed_and_strided() {
    for isa in isas() {
        for path in [Path::Auto, Path::Packed, Path::Naive] {
            for la in 0..3 {
                for lb in 0..3 {
                    for lc in 0..3 {
                        for &(m, n, k) in &[(13, 33, 17), (1, 31, 7), (31, 1, 5), (65, 17, 64)] {
                            let cs = Case { m, n, k, la, lb, lc };
                            let opts = GemmOptions { isa: Some(isa), path, ..Default::default() };
                            run_f32(cs, PLAIN, opts, 1).unwrap();
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn f32_direct_path_rejects_column_major_b() {
    let cs = Case { m: 5, n: 7, k: 3, la: 0, lb: 1, lc: 0 };
    let opts = GemmOptions { path: Path::Direct, ..Default::default() };
    let e = run_f32(cs, PLAIN, opts, 1).unwrap_err();
    assert!(e.contains("Direct"), "{e}");
}

#[test]
fn f32_fused_epilogue() {
    let acts = Activation::ALL;
    for isa in isas() {
        for path in forced_paths() {
            for act in acts {
                for bias in 0..3 {
                    for &(alpha, beta) in &[(1.0, 0.0), (1.0, 1.0), (0.5, -2.0)] {
                        for &(m, n, k) in &[(1, 33, 17), (17, 1, 9), (13, 35, 31), (33, 65, 40)] {
                            if path == Path::Gemv && m != 1 && n != 1 {
                                continue;
                            }
                            let ep = Ep { alpha, beta, bias, act };
                            let cs = Case { m, n, k, la: 0, lb: 0, lc: if k == 40 { 2 } else { 0 } };
                            // Small blocks so bias/activation must wait for the last k block.
                            let blocking = Blocking { kc: 8, mc: 0, nc: 0 };
                            let opts = GemmOptions { isa: Some(isa), path, blocking, ..Default::default() };
                            run_f32(cs, ep, opts, 1).unwrap();
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn f32_k_zero_applies_epilogue_only() {
    // k = 0: C = act(beta·C + bias); with C = 2, beta = 0.5, bias = -3 → relu(-2) = 0, and
    // with bias = +3 → 4.
    for isa in isas() {
        for (bias_v, want) in [(-3.0f32, 0.0f32), (3.0, 4.0)] {
            let mut c = [2.0f32; 6];
            let bias = [bias_v; 3];
            let ep = Epilogue { alpha: 1.0, beta: 0.5, bias: Bias::PerColumn(&bias), activation: Activation::Relu };
            let opts = GemmOptions { isa: Some(isa), ..Default::default() };
            gemm_f32(
                GemmArgs::new(
                    2,
                    3,
                    0,
                    MatRef::row_major(&[], 0),
                    MatRef::row_major(&[], 3),
                    MatMut::row_major(&mut c, 3),
                )
                .epilogue(ep)
                .options(opts),
            )
            .unwrap();
            assert_eq!(c, [want; 6]);
        }
    }
}

#[test]
fn f32_blocking_edges_and_threads() {
    for isa in isas() {
        for &blocking in &[Blocking { kc: 8, mc: 12, nc: 48 }, Blocking { kc: 24, mc: 6, nc: 16 }, Blocking::default()]
        {
            for threads in [1, 2, 3] {
                let shapes: &[(usize, usize, usize)] = if emulated() {
                    &[(127, 65, 33), (7, 300, 100)]
                } else {
                    &[(127, 65, 33), (200, 150, 140), (7, 300, 100), (301, 9, 120)]
                };
                for &(m, n, k) in shapes {
                    for path in [Path::Packed, Path::Direct] {
                        let cs = Case { m, n, k, la: 0, lb: 0, lc: 0 };
                        let ep = Ep { alpha: 1.0, beta: 1.0, bias: 2, act: Activation::Silu };
                        let opts = GemmOptions { isa: Some(isa), path, blocking, ..Default::default() };
                        run_f32(cs, ep, opts, threads).unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn f32_direct_path_with_b_rows_a_page_apart() {
    // B rows ≥ 4 KiB apart and several row tiles: the Direct path copies each panel to scratch
    // (edge panels, several K blocks and both thread counts included).
    for isa in isas() {
        for &blocking in &[Blocking { kc: 8, mc: 0, nc: 0 }, Blocking::default()] {
            for threads in [1, 2] {
                for &(m, n, k) in &[(16, 1030, 33), (13, 1040, 9), (7, 1100, 20)] {
                    let cs = Case { m, n, k, la: 0, lb: 0, lc: 0 };
                    let ep = Ep { alpha: 1.0, beta: 1.0, bias: 2, act: Activation::Relu };
                    let opts = GemmOptions { isa: Some(isa), path: Path::Direct, blocking, ..Default::default() };
                    run_f32(cs, ep, opts, threads).unwrap();
                }
            }
        }
    }
}

#[test]
fn f32_gemv_split_over_threads() {
    // Large enough (k·n ≥ 65,536) that the matrix-vector path splits its columns over threads;
    // n = 33 gives column blocks of 16, 16 and 1.
    for isa in isas() {
        for threads in [2, 3] {
            for &(m, n, k) in &[(1, 1000, 300), (1, 33, 3000), (700, 1, 200)] {
                for lb in 0..2 {
                    let cs = Case { m, n, k, la: 0, lb, lc: 0 };
                    let ep = Ep { alpha: 0.5, beta: 1.0, bias: 2, act: Activation::Silu };
                    let opts = GemmOptions { isa: Some(isa), path: Path::Gemv, ..Default::default() };
                    run_f32(cs, ep, opts, threads).unwrap();
                }
            }
        }
    }
}

#[test]
fn f32_threads_on_a_custom_pool() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    pool.install(|| {
        let cs = Case { m: 256, n: 192, k: 96, la: 1, lb: 1, lc: 0 };
        run_f32(cs, PLAIN, GemmOptions::default(), 0).unwrap();
    });
}

/// Packs B once (`geometry`'s panels, KC = 32 so several depth blocks), drops the unpacked
/// copy, runs the product with `threads` on `isa` and checks it against the f64 reference.
fn run_prepacked(cs: Case, ep: Ep, isa: Isa, geometry: Geometry, threads: usize) {
    let p = problem(cs, ep);
    let a: Vec<f32> = p.a.0.iter().map(|&x| x as f32).collect();
    let b: Vec<f32> = p.b.0.iter().map(|&x| x as f32).collect();
    let bias: Vec<f32> = p.bias.iter().map(|&x| x as f32).collect();
    let opts =
        GemmOptions { isa: Some(isa), geometry, blocking: Blocking { kc: 32, mc: 0, nc: 0 }, ..Default::default() };
    let packed = PackedB::with_options(cs.k, cs.n, MatRef::new(&b, p.b.1, p.b.2), &opts).unwrap();
    drop(b);
    assert!(packed.size_bytes() >= cs.k * cs.n * 4);
    let mut c: Vec<f32> = p.c.0.iter().map(|&x| x as f32).collect();
    gemm_f32(
        GemmArgs::new(
            cs.m,
            cs.n,
            cs.k,
            MatRef::new(&a, p.a.1, p.a.2),
            Rhs::Packed(&packed),
            MatMut::new(&mut c, p.c.1, p.c.2),
        )
        .epilogue(epilogue(ep, &bias, ep.alpha as f32, ep.beta as f32))
        .threads(threads)
        .options(GemmOptions { isa: Some(isa), ..Default::default() }),
    )
    .unwrap();
    let got: Vec<f64> = c.iter().map(|&x| x as f64).collect();
    check(&format!("prepacked {isa:?} {geometry:?} t{threads}"), cs, &got, &p, 2e-6);
}

#[test]
fn f32_prepacked_b() {
    for isa in isas() {
        for geometry in [Geometry::Large, Geometry::Wide] {
            for &(m, n, k) in &[(1, 1, 1), (5, 33, 17), (64, 65, 127), (130, 70, 300), (3, 1000, 50)] {
                for lb in 0..3 {
                    for threads in [1, 2] {
                        let cs = Case { m, n, k, la: 0, lb, lc: 0 };
                        let ep = Ep { alpha: 2.0, beta: 0.0, bias: 2, act: Activation::Relu };
                        run_prepacked(cs, ep, isa, geometry, threads);
                    }
                }
            }
            // Few rows (≤ 256) and enough columns: the threads split the columns of pre-packed B,
            // evenly or not (3 threads), with a partial last panel.
            for threads in [2, 3] {
                let cs = Case { m: 200, n: 601, k: 90, la: 0, lb: 1, lc: 0 };
                let ep = Ep { alpha: 1.0, beta: 0.0, bias: 2, act: Activation::Relu };
                run_prepacked(cs, ep, isa, geometry, threads);
            }
            // Column panels that do not split evenly (5 of 32 on AVX-512) over a few rows: the
            // rows are split instead (25 + 24 on two threads), as MobileNetV2's 960 → 160 at 7×7.
            for threads in [2, 3] {
                let cs = Case { m: 49, n: 160, k: 300, la: 0, lb: 0, lc: 0 };
                let ep = Ep { alpha: 1.0, beta: 0.0, bias: 2, act: Activation::Relu };
                run_prepacked(cs, ep, isa, geometry, threads);
            }
        }
    }
}

#[test]
fn f32_prepacked_gemv() {
    // m = 1 with pre-packed B runs a matrix-vector pass over the panels: every panel width
    // (geometry), partial last panels (n not a multiple of 16 or 24), several KC blocks with a
    // short last one (kc = 32 and k up to 301), rows left over after groups of four, threads
    // splitting whole panels (k·n ≥ 65,536), and the epilogue.
    for isa in isas() {
        for geometry in [Geometry::Large, Geometry::Wide] {
            for &(n, k) in &[(1, 1), (5, 3), (16, 7), (17, 33), (24, 64), (47, 301), (1000, 70), (3000, 37)] {
                for threads in [1, 2, 3] {
                    for la in 0..2 {
                        let cs = Case { m: 1, n, k, la, lb: 0, lc: 0 };
                        let ep = Ep { alpha: 0.5, beta: 1.0, bias: 2, act: Activation::GeluErf };
                        run_prepacked(cs, ep, isa, geometry, threads);
                    }
                }
            }
        }
    }
}

/// `PackedB::from_blocks` packs column blocks side by side as `PackedB::new` packs their
/// concatenation: products against a naive f64 loop over the concatenated matrix, blocks
/// row-major ([K, N_i]) and column-major ([N_i, K] read transposed), widths that fill whole
/// panels and widths that do not (the copying path), several depth blocks (kc = 32), every ISA
/// and panel geometry; bf16 and f16 blocks through their entry points.
#[test]
fn prepacked_b_from_column_blocks() {
    let mut seed = 7u64;
    let mut rnd = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    };
    let widths: [&[usize]; 6] = [&[48, 48, 48], &[96, 32], &[5, 7, 3], &[48, 17], &[1], &[0, 48, 24]];
    for isa in isas() {
        for geometry in [Geometry::Large, Geometry::Wide] {
            for ws in widths {
                for &(m, k) in &[(1, 1), (7, 33), (20, 70)] {
                    for col_major in [false, true] {
                        let n: usize = ws.iter().sum();
                        let blocks: Vec<Vec<f32>> =
                            ws.iter().map(|&w| (0..k * w).map(|_| rnd() as f32).collect()).collect();
                        // element (r, c) of block i.
                        let at = |i: usize, r: usize, c: usize| {
                            if col_major { blocks[i][c * k + r] } else { blocks[i][r * ws[i] + c] }
                        };
                        let views: Vec<(usize, MatRef<'_, f32>)> = blocks
                            .iter()
                            .zip(ws.iter())
                            .map(|(b, &w)| (w, if col_major { MatRef::new(b, 1, k) } else { MatRef::row_major(b, w) }))
                            .collect();
                        let opts = GemmOptions {
                            isa: Some(isa),
                            geometry,
                            blocking: Blocking { kc: 32, mc: 0, nc: 0 },
                            ..Default::default()
                        };
                        let packed = PackedB::blocks_with_options(k, &views, &opts).unwrap();
                        assert_eq!((packed.k(), packed.n()), (k, n));
                        let a: Vec<f32> = (0..m * k).map(|_| rnd() as f32).collect();
                        let mut c = vec![0f32; m * n];
                        gemm_f32(
                            GemmArgs::new(
                                m,
                                n,
                                k,
                                MatRef::row_major(&a, k),
                                Rhs::Packed(&packed),
                                MatMut::row_major(&mut c, n),
                            )
                            .options(GemmOptions { isa: Some(isa), ..Default::default() }),
                        )
                        .unwrap();
                        for i in 0..m {
                            let mut col = 0;
                            for (bi, &w) in ws.iter().enumerate() {
                                for j in 0..w {
                                    let want: f64 = (0..k).map(|r| a[i * k + r] as f64 * at(bi, r, j) as f64).sum();
                                    let got = c[i * n + col + j] as f64;
                                    assert!(
                                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                        "{isa:?} {geometry:?} widths {ws:?} m{m} k{k} col_major {col_major}: c[{i}][{}] = {got}, want {want}",
                                        col + j
                                    );
                                }
                                col += w;
                            }
                        }
                    }
                }
            }
        }
    }
    // bf16 and f16 blocks (values exact in both types), against the f32 product.
    let (k, ws) = (40usize, [48usize, 16, 5]);
    let n: usize = ws.iter().sum();
    let vals: Vec<Vec<f32>> =
        ws.iter().map(|&w| (0..k * w).map(|i| ((i * 7 + w) % 13) as f32 - 6.0).collect()).collect();
    let a: Vec<f32> = (0..3 * k).map(|i| ((i * 5) % 11) as f32 - 5.0).collect();
    let mut want = vec![0f64; 3 * n];
    for i in 0..3 {
        let mut col = 0;
        for (bi, &w) in ws.iter().enumerate() {
            for j in 0..w {
                want[i * n + col + j] = (0..k).map(|r| a[i * k + r] as f64 * vals[bi][r * w + j] as f64).sum();
            }
            col += w;
        }
    }
    let bf: Vec<Vec<bf16>> = vals.iter().map(|v| v.iter().map(|&x| bf16::from_f32(x)).collect()).collect();
    let hf: Vec<Vec<f16>> = vals.iter().map(|v| v.iter().map(|&x| f16::from_f32(x)).collect()).collect();
    let bviews: Vec<(usize, MatRef<'_, bf16>)> = bf.iter().zip(ws).map(|(b, w)| (w, MatRef::row_major(b, w))).collect();
    let hviews: Vec<(usize, MatRef<'_, f16>)> = hf.iter().zip(ws).map(|(b, w)| (w, MatRef::row_major(b, w))).collect();
    let abf: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
    let ahf: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
    let pb = PackedB::from_blocks_bf16(k, &bviews).unwrap();
    let ph = PackedB::from_blocks_f16(k, &hviews).unwrap();
    let mut cb = vec![0f32; 3 * n];
    let mut ch = vec![0f32; 3 * n];
    gemm_bf16(GemmArgs::new(3, n, k, MatRef::row_major(&abf, k), Rhs::Packed(&pb), MatMut::row_major(&mut cb, n)))
        .unwrap();
    gemm_f16(GemmArgs::new(3, n, k, MatRef::row_major(&ahf, k), Rhs::Packed(&ph), MatMut::row_major(&mut ch, n)))
        .unwrap();
    for (i, w) in want.iter().enumerate() {
        assert_eq!(cb[i] as f64, *w, "bf16 blocks: element {i}");
        assert_eq!(ch[i] as f64, *w, "f16 blocks: element {i}");
    }
    // A block shorter than its declared extent is an error, not a read past its end.
    let short = vec![0f32; 10];
    let e = PackedB::from_blocks(4, &[(8, MatRef::row_major(&short, 8))]).unwrap_err().to_string();
    assert!(e.contains("4x8"), "{e}");
}

#[test]
fn prepacked_b_shape_mismatch_is_an_error() {
    let b = vec![1.0f32; 12];
    let packed = PackedB::new(3, 4, MatRef::row_major(&b, 4)).unwrap();
    let a = vec![1.0f32; 6];
    let mut c = vec![0.0f32; 8];
    let e =
        gemm_f32(GemmArgs::new(2, 4, 2, MatRef::row_major(&a, 2), Rhs::Packed(&packed), MatMut::row_major(&mut c, 4)));
    assert!(e.unwrap_err().to_string().contains("packed 3x4"));
}

/// Runs one f64 product with `opts` and checks it against the f64 reference.
fn run_f64(cs: Case, ep: Ep, opts: GemmOptions, what: &str) {
    let p = problem(cs, ep);
    let mut c = p.c.0.clone();
    gemm_f64(
        GemmArgs::new(
            cs.m,
            cs.n,
            cs.k,
            MatRef::new(&p.a.0, p.a.1, p.a.2),
            MatRef::new(&p.b.0, p.b.1, p.b.2),
            MatMut::new(&mut c, p.c.1, p.c.2),
        )
        .epilogue(epilogue(ep, &p.bias, ep.alpha, ep.beta))
        .options(opts),
    )
    .unwrap();
    check(what, cs, &c, &p, 1e-13);
}

#[test]
fn f64_every_isa_and_path() {
    for isa in isas() {
        for path in forced_paths() {
            for (m, n, k) in shapes() {
                if path == Path::Gemv && m != 1 && n != 1 {
                    continue;
                }
                for lb in [0, 1] {
                    if path == Path::Direct && lb == 1 {
                        continue;
                    }
                    let cs = Case { m, n, k, la: 1 - lb, lb, lc: 0 };
                    let ep = Ep { alpha: 0.5, beta: 1.0, bias: 1, act: Activation::GeluErf };
                    let opts = GemmOptions {
                        isa: Some(isa),
                        path,
                        blocking: Blocking { kc: 16, mc: 0, nc: 0 },
                        ..Default::default()
                    };
                    run_f64(cs, ep, opts, &format!("f64 {isa:?} {path:?}"));
                }
            }
        }
    }
}

#[test]
fn f64_direct_path_with_b_rows_a_page_apart() {
    // f64 rows of 520 and more are over 4 KiB apart: the first row tile of each panel copies it
    // for the others (several K blocks, an edge panel, row remainders).
    for isa in isas() {
        for &(m, n, k) in &[(13, 520, 21), (9, 530, 5)] {
            let cs = Case { m, n, k, la: 0, lb: 0, lc: 0 };
            let ep = Ep { alpha: 0.5, beta: 1.0, bias: 2, act: Activation::Tanh };
            let opts = GemmOptions {
                isa: Some(isa),
                path: Path::Direct,
                blocking: Blocking { kc: 8, mc: 0, nc: 0 },
                ..Default::default()
            };
            run_f64(cs, ep, opts, &format!("f64 {isa:?} direct"));
        }
    }
}

/// Runs a low-precision input type through every ISA and the paths that accept it.
macro_rules! lowp_test {
    ($name:ident, $T:ty, $from:expr, $entry:ident) => {
        #[test]
        fn $name() {
            for isa in isas() {
                for path in [Path::Auto, Path::Naive, Path::Packed] {
                    for (m, n, k) in shapes() {
                        for lb in [0, 1] {
                            let cs = Case { m, n, k, la: 0, lb, lc: 0 };
                            let ep = Ep { alpha: 1.0, beta: 1.0, bias: 2, act: Activation::None };
                            let p = problem(cs, ep);
                            let a: Vec<$T> = p.a.0.iter().map(|&x| $from(x)).collect();
                            let b: Vec<$T> = p.b.0.iter().map(|&x| $from(x)).collect();
                            let mut c: Vec<f32> = p.c.0.iter().map(|&x| x as f32).collect();
                            let bias: Vec<f32> = p.bias.iter().map(|&x| x as f32).collect();
                            let opts = GemmOptions {
                                isa: Some(isa),
                                path,
                                blocking: Blocking { kc: 10, mc: 0, nc: 0 },
                                ..Default::default()
                            };
                            $entry(
                                GemmArgs::new(
                                    m,
                                    n,
                                    k,
                                    MatRef::new(&a, p.a.1, p.a.2),
                                    MatRef::new(&b, p.b.1, p.b.2),
                                    MatMut::new(&mut c, p.c.1, p.c.2),
                                )
                                .epilogue(epilogue(ep, &bias, 1.0, 1.0))
                                .options(opts),
                            )
                            .unwrap();
                            let got: Vec<f64> = c.iter().map(|&x| x as f64).collect();
                            check(&format!("{} {isa:?} {path:?}", stringify!($T)), cs, &got, &p, 2e-6);
                        }
                    }
                }
            }
        }
    };
}

lowp_test!(bf16_inputs_f32_accumulation, bf16, |x: f64| bf16::from_f64(x), gemm_bf16);
lowp_test!(f16_inputs_f32_accumulation, f16, |x: f64| f16::from_f64(x), gemm_f16);

/// Pre-packed low-precision B (bf16 pairs for the AVX512-BF16 tiles, f32 panels elsewhere) on
/// every ISA, with A and B in every layout (row strides odd and even), odd k, several KC blocks,
/// partial panels, one and two threads, and the epilogue with GELU.
macro_rules! lowp_prepacked_test {
    ($name:ident, $T:ty, $from:expr, $entry:ident, $pack:ident) => {
        #[test]
        fn $name() {
            for isa in isas() {
                for &(m, n, k) in &[(1, 1, 1), (1, 70, 33), (5, 33, 17), (29, 65, 127), (130, 70, 301), (3, 100, 50)] {
                    for (la, lb) in [(0, 0), (1, 1), (2, 2), (0, 1), (2, 0)] {
                        for threads in [1, 2] {
                            let cs = Case { m, n, k, la, lb, lc: 0 };
                            let ep = Ep { alpha: 1.0, beta: 0.0, bias: 2, act: Activation::GeluErf };
                            let p = problem(cs, ep);
                            let a: Vec<$T> = p.a.0.iter().map(|&x| $from(x)).collect();
                            let b: Vec<$T> = p.b.0.iter().map(|&x| $from(x)).collect();
                            let bias: Vec<f32> = p.bias.iter().map(|&x| x as f32).collect();
                            let opts = GemmOptions {
                                isa: Some(isa),
                                blocking: Blocking { kc: 32, mc: 0, nc: 0 },
                                ..Default::default()
                            };
                            let packed = PackedB::$pack(k, n, MatRef::new(&b, p.b.1, p.b.2), &opts).unwrap();
                            drop(b);
                            let mut c: Vec<f32> = p.c.0.iter().map(|&x| x as f32).collect();
                            $entry(
                                GemmArgs::new(
                                    m,
                                    n,
                                    k,
                                    MatRef::new(&a, p.a.1, p.a.2),
                                    Rhs::Packed(&packed),
                                    MatMut::new(&mut c, p.c.1, p.c.2),
                                )
                                .epilogue(epilogue(ep, &bias, 1.0, 0.0))
                                .threads(threads)
                                .options(GemmOptions { isa: Some(isa), ..Default::default() }),
                            )
                            .unwrap();
                            let got: Vec<f64> = c.iter().map(|&x| x as f64).collect();
                            let what =
                                format!("prepacked {} {isa:?} {} t{threads}", stringify!($T), packed.kernel_name());
                            check(&what, cs, &got, &p, 2e-6);
                        }
                    }
                }
            }
        }
    };
}

lowp_prepacked_test!(bf16_prepacked_b, bf16, |x: f64| bf16::from_f64(x), gemm_bf16, bf16_with_options);
lowp_prepacked_test!(f16_prepacked_b, f16, |x: f64| f16::from_f64(x), gemm_f16, f16_with_options);

#[test]
fn prepacked_b_of_another_dtype_is_an_error() {
    let b = vec![bf16::ONE; 12];
    let packed = PackedB::new_bf16(3, 4, MatRef::row_major(&b, 4)).unwrap();
    assert_eq!(packed.packed_from(), PackedFrom::Bf16);
    let a = vec![f16::ONE; 6];
    let mut c = vec![0.0f32; 8];
    let e =
        gemm_f16(GemmArgs::new(2, 4, 3, MatRef::row_major(&a, 3), Rhs::Packed(&packed), MatMut::row_major(&mut c, 4)));
    assert!(e.unwrap_err().to_string().contains("packed from Bf16"));
    let a = vec![1.0f32; 6];
    let e =
        gemm_f32(GemmArgs::new(2, 4, 3, MatRef::row_major(&a, 3), Rhs::Packed(&packed), MatMut::row_major(&mut c, 4)));
    assert!(e.unwrap_err().to_string().contains("packed from Bf16"));
}

/// The bf16 product where it differs from an f32-rounded one: inputs with all 8 significant
/// bits used, k long enough that the f32 accumulation order matters, compared with the f64
/// product of the same bf16 values within the f32 accumulation bound (k · 2⁻²⁴ · Σ|a·b|), on
/// every ISA (AVX2 converts in packing; AVX-512 uses `vdpbf16ps` where present), packed per
/// call and pre-packed, sizes not a multiple of any vector width.
#[test]
fn bf16_and_f16_full_precision_values() {
    let (m, n, k) = (37, 45, 771);
    let v = |s: usize, i: usize| ((i * 2654435761 + s * 97) % 1000) as f64 / 500.0 - 1.0;
    let a64: Vec<f64> = (0..m * k).map(|i| v(1, i)).collect();
    let b64: Vec<f64> = (0..k * n).map(|i| v(2, i)).collect();
    let ab: Vec<bf16> = a64.iter().map(|&x| bf16::from_f64(x)).collect();
    let bb: Vec<bf16> = b64.iter().map(|&x| bf16::from_f64(x)).collect();
    let ah: Vec<f16> = a64.iter().map(|&x| f16::from_f64(x)).collect();
    let bh: Vec<f16> = b64.iter().map(|&x| f16::from_f64(x)).collect();
    let reference = |a: &dyn Fn(usize) -> f64, b: &dyn Fn(usize) -> f64| -> (Vec<f64>, Vec<f64>) {
        let mut want = vec![0.0; m * n];
        let mut mag = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    want[i * n + j] += a(i * k + p) * b(p * n + j);
                    mag[i * n + j] += (a(i * k + p) * b(p * n + j)).abs();
                }
            }
        }
        (want, mag)
    };
    let (wb, mb) = reference(&|i| ab[i].to_f64(), &|i| bb[i].to_f64());
    let (wh, mh) = reference(&|i| ah[i].to_f64(), &|i| bh[i].to_f64());
    let close = |what: &str, got: &[f32], want: &[f64], mag: &[f64]| {
        for (idx, (&g, (&w, &s))) in got.iter().zip(want.iter().zip(mag)).enumerate() {
            let tol = k as f64 * f64::from(f32::EPSILON) * s + 1e-30;
            assert!((g as f64 - w).abs() <= tol, "{what}: C[{idx}] = {g} want {w} (tol {tol:.3e})");
        }
    };
    for isa in isas() {
        let opts = GemmOptions { isa: Some(isa), ..Default::default() };
        for prepacked in [false, true] {
            let mut c = vec![0.0f32; m * n];
            let pb = PackedB::bf16_with_options(k, n, MatRef::row_major(&bb, n), &opts).unwrap();
            let rhs = if prepacked { Rhs::Packed(&pb) } else { Rhs::Mat(MatRef::row_major(&bb, n)) };
            gemm_bf16(
                GemmArgs::new(m, n, k, MatRef::row_major(&ab, k), rhs, MatMut::row_major(&mut c, n)).options(opts),
            )
            .unwrap();
            close(&format!("bf16 {isa:?} prepacked {prepacked}"), &c, &wb, &mb);
            let ph = PackedB::f16_with_options(k, n, MatRef::row_major(&bh, n), &opts).unwrap();
            let rhs = if prepacked { Rhs::Packed(&ph) } else { Rhs::Mat(MatRef::row_major(&bh, n)) };
            gemm_f16(
                GemmArgs::new(m, n, k, MatRef::row_major(&ah, k), rhs, MatMut::row_major(&mut c, n)).options(opts),
            )
            .unwrap();
            close(&format!("f16 {isa:?} prepacked {prepacked}"), &c, &wh, &mh);
        }
    }
}

#[test]
fn i8_gemm_is_exact_including_extremes() {
    for isa in isas() {
        for path in [Path::Auto, Path::Naive, Path::Packed] {
            for (m, n, k) in shapes() {
                for extremes in [false, true] {
                    // Extremes exercise the +128 offset and its correction: -128 and 127.
                    let av = |i: usize, p: usize| -> i8 {
                        if extremes {
                            if (i + p).is_multiple_of(2) { -128 } else { 127 }
                        } else {
                            ((i * 7 + p * 3) % 23) as i8 - 11
                        }
                    };
                    let bv = |p: usize, j: usize| -> i8 {
                        if extremes {
                            if (p * 3 + j).is_multiple_of(3) { -128 } else { 127 }
                        } else {
                            ((p * 5 + j * 11) % 19) as i8 - 9
                        }
                    };
                    let a: Vec<i8> = (0..m * k).map(|x| av(x / k.max(1), x % k.max(1))).collect();
                    let b: Vec<i8> = (0..k * n).map(|x| bv(x / n.max(1), x % n.max(1))).collect();
                    let bias: Vec<i32> = (0..n).map(|j| j as i32 - 3).collect();
                    let mut c = vec![5i32; m * n];
                    let ep = Epilogue { alpha: 1, beta: 1, bias: Bias::PerColumn(&bias), activation: Activation::None };
                    let opts = GemmOptions {
                        isa: Some(isa),
                        path,
                        blocking: Blocking { kc: 12, mc: 0, nc: 0 },
                        ..Default::default()
                    };
                    gemm_i8(
                        GemmArgs::new(
                            m,
                            n,
                            k,
                            MatRef::row_major(&a, k),
                            MatRef::row_major(&b, n),
                            MatMut::row_major(&mut c, n),
                        )
                        .epilogue(ep)
                        .options(opts),
                    )
                    .unwrap();
                    for i in 0..m {
                        for j in 0..n {
                            let s: i64 = (0..k).map(|p| av(i, p) as i64 * bv(p, j) as i64).sum();
                            assert_eq!(
                                c[i * n + j] as i64,
                                s + 5 + bias[j] as i64,
                                "i8 {isa:?} {path:?} {m}x{n}x{k} at ({i},{j})"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn i8_rejects_float_activations() {
    let mut c = [0i32; 1];
    let ep = Epilogue { activation: Activation::Tanh, ..Epilogue::default() };
    let e = gemm_i8(
        GemmArgs::new(
            1,
            1,
            1,
            MatRef::row_major(&[1i8], 1),
            MatRef::row_major(&[1i8], 1),
            MatMut::row_major(&mut c, 1),
        )
        .epilogue(ep),
    );
    assert!(e.unwrap_err().to_string().contains("Tanh"));
}

#[test]
fn worked_example_with_bias_and_relu() {
    // [[1,2],[3,4]]·[[1,-1],[0,1]] = [[1,1],[3,1]]; + bias (-2, 0) → [[-1,1],[1,1]]; relu → [[0,1],[1,1]].
    let a = [1.0f32, 2.0, 3.0, 4.0];
    let b = [1.0f32, -1.0, 0.0, 1.0];
    let bias = [-2.0f32, 0.0];
    for isa in isas() {
        for path in [Path::Naive, Path::Direct, Path::Packed] {
            let mut c = [f32::NAN; 4];
            let opts = GemmOptions { isa: Some(isa), path, ..Default::default() };
            gemm_f32(
                GemmArgs::new(
                    2,
                    2,
                    2,
                    MatRef::row_major(&a, 2),
                    MatRef::row_major(&b, 2),
                    MatMut::row_major(&mut c, 2),
                )
                .epilogue(Epilogue::dense(&bias, Activation::Relu))
                .options(opts),
            )
            .unwrap();
            assert_eq!(c, [0.0, 1.0, 1.0, 1.0], "{isa:?} {path:?}");
        }
    }
}

#[test]
fn unsupported_isa_is_an_error() {
    let missing = [Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sme].into_iter().find(|&i| !isa_supported(i));
    if let Some(isa) = missing {
        let mut c = [0.0f32; 1];
        let opts = GemmOptions { isa: Some(isa), ..Default::default() };
        let e = gemm_f32(
            GemmArgs::new(
                1,
                1,
                1,
                MatRef::row_major(&[1.0], 1),
                MatRef::row_major(&[1.0], 1),
                MatMut::row_major(&mut c, 1),
            )
            .options(opts),
        );
        assert!(e.unwrap_err().to_string().contains(isa.name()));
    }
}

/// The environment overrides, checked in child processes (they are read once per process).
#[test]
fn env_overrides_force_lower_isa() {
    if let Ok(want) = std::env::var("TJ_GEMM_CHILD_EXPECT") {
        assert_eq!(selected_isa().name(), want, "{}", dispatch_summary());
        let cs = Case { m: 37, n: 41, k: 29, la: 0, lb: 0, lc: 0 };
        let ep = Ep { alpha: 1.0, beta: 0.0, bias: 2, act: Activation::GeluTanh };
        run_f32(cs, ep, GemmOptions::default(), 1).unwrap();
        return;
    }
    let mut cases = vec![(vec![("TENSORJIT_DISABLE_AVX2", "1"), ("TENSORJIT_DISABLE_NEON", "1")], "generic")];
    if isa_supported(Isa::Avx512) {
        cases.push((vec![("TENSORJIT_DISABLE_AVX512", "1")], "avx2"));
    }
    for (vars, want) in cases {
        run_child("env_overrides_force_lower_isa", "TJ_GEMM_CHILD_EXPECT", want, &vars, &[]);
    }
}
