//! Software vector vocabularies for the tile template (tests only): 16 lanes of plain arrays,
//! written to the documented semantics of the AVX-512 instructions the x86 vocabularies use
//! (`vfmadd231ps/pd`, `vbroadcastss`, `vdpbf16ps`, `vpdpbusd`, `vpmulld`, `vpaddd`). Stamped
//! with the same template, geometries and packing (G = 2 pairs, G = 4 quads, column-sum
//! correction) as the AVX-512 families, they let a CPU without AVX-512 run those code paths
//! (everything but the instructions themselves) against the naive loop.

use super::{Family, Isa, TileArgs};
use crate::kernels::gemm::epilogue::Scalar;
use half::bf16;

/// Lanes of one 512-bit f32 / i32 vector.
pub const L: usize = 16;

/// Lane-wise `f(a[l], b[l])`.
#[inline(always)]
pub fn zip<T: Copy, const N: usize>(a: [T; N], b: [T; N], f: impl Fn(T, T) -> T) -> [T; N] {
    std::array::from_fn(|l| f(a[l], b[l]))
}

/// `vfmadd231ps` / `vfmadd231pd`: `a·b + c` per lane with one rounding.
#[inline(always)]
pub fn fmadd_f32(a: [f32; L], b: [f32; L], c: [f32; L]) -> [f32; L] {
    std::array::from_fn(|l| a[l].mul_add(b[l], c[l]))
}

/// As [`fmadd_f32`] for 8 f64 lanes.
#[inline(always)]
pub fn fmadd_f64(a: [f64; 8], b: [f64; 8], c: [f64; 8]) -> [f64; 8] {
    std::array::from_fn(|l| a[l].mul_add(b[l], c[l]))
}

/// `make_fp32` of the BF16 instructions: the bf16 bits as the top half of an f32, with
/// denormals treated as zero (the instructions ignore MXCSR: DAZ, FTZ, round to nearest).
fn make_fp32(x: bf16) -> f32 {
    let bits = (x.to_bits() as u32) << 16;
    if bits & 0x7f80_0000 == 0 { f32::from_bits(bits & 0x8000_0000) } else { f32::from_bits(bits) }
}

/// Flush-to-zero of a denormal result.
fn ftz(x: f32) -> f32 {
    if x.to_bits() & 0x7f80_0000 == 0 { f32::from_bits(x.to_bits() & 0x8000_0000) } else { x }
}

/// `vdpbf16ps src, a, b` (`_mm512_dpbf16_ps(src, a, b)`), per Intel's pseudocode: for each
/// lane j, `src[j] += a[2j+1]·b[2j+1]`, then `src[j] += a[2j]·b[2j]` (odd element first;
/// products of bf16 are exact in f32; DAZ/FTZ, round to nearest even).
pub fn dpbf16ps(src: [f32; L], a: [bf16; 2 * L], b: [bf16; 2 * L]) -> [f32; L] {
    std::array::from_fn(|j| {
        let t = ftz(src[j] + make_fp32(a[2 * j + 1]) * make_fp32(b[2 * j + 1]));
        ftz(t + make_fp32(a[2 * j]) * make_fp32(b[2 * j]))
    })
}

/// `vpdpbusd src, a, b` (`_mm512_dpbusd_epi32(src, a, b)`): for each lane j, the four
/// products of the zero-extended bytes of `a` with the sign-extended bytes of `b` are added
/// to `src[j]` with wrap-around (no saturation).
pub fn dpbusd(src: [i32; L], a: [u8; 4 * L], b: [i8; 4 * L]) -> [i32; L] {
    std::array::from_fn(|j| {
        let dot: i32 = (0..4).map(|q| a[4 * j + q] as i32 * b[4 * j + q] as i32).sum();
        src[j].wrapping_add(dot)
    })
}

/// `vpbroadcastd` of the 32-bit group at `p` (two bf16 or four bytes) over 16 lanes.
///
/// # Safety
/// `p` is readable for `G` elements.
#[inline(always)]
pub unsafe fn bcast_group<E: Copy, const G: usize, const N: usize>(p: *const E) -> [E; N] {
    // SAFETY: forwarded contract.
    let q: [E; G] = unsafe { std::ptr::read_unaligned(p.cast()) };
    std::array::from_fn(|x| q[x % G])
}

/// An unaligned vector load of `N` elements.
///
/// # Safety
/// `p` is readable for `N` elements.
#[inline(always)]
pub unsafe fn load<E: Copy, const N: usize>(p: *const E) -> [E; N] {
    // SAFETY: forwarded contract.
    unsafe { std::ptr::read_unaligned(p.cast()) }
}

/// An unaligned vector store.
///
/// # Safety
/// `p` is writable for `N` elements.
#[inline(always)]
pub unsafe fn store<E: Copy, const N: usize>(p: *mut E, v: [E; N]) {
    // SAFETY: forwarded contract.
    unsafe { std::ptr::write_unaligned(p.cast(), v) }
}

macro_rules! v_soft_f32 {
    (W) => {
        16
    };
    (G) => {
        1
    };
    (zero) => {
        [0.0f32; 16]
    };
    (zero_b) => {
        [0.0f32; 16]
    };
    (load_b, $p:expr) => {
        load::<f32, 16>($p)
    };
    (bcast_a, $p:expr) => {
        [*$p; 16]
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        fmadd_f32($a, $b, $acc)
    };
    (splat, $x:expr) => {
        [$x; 16]
    };
    (mul, $a:expr, $b:expr) => {
        zip($a, $b, |x, y| x * y)
    };
    (add, $a:expr, $b:expr) => {
        zip($a, $b, |x, y| x + y)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        fmadd_f32($a, $b, $c)
    };
    (load_c, $p:expr) => {
        load::<f32, 16>($p)
    };
    (store_c, $p:expr, $v:expr) => {
        store::<f32, 16>($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        [0.0f32; 16]
    }};
}

macro_rules! v_soft_f64 {
    (W) => {
        8
    };
    (G) => {
        1
    };
    (zero) => {
        [0.0f64; 8]
    };
    (zero_b) => {
        [0.0f64; 8]
    };
    (load_b, $p:expr) => {
        load::<f64, 8>($p)
    };
    (bcast_a, $p:expr) => {
        [*$p; 8]
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        fmadd_f64($a, $b, $acc)
    };
    (splat, $x:expr) => {
        [$x; 8]
    };
    (mul, $a:expr, $b:expr) => {
        zip($a, $b, |x, y| x * y)
    };
    (add, $a:expr, $b:expr) => {
        zip($a, $b, |x, y| x + y)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        fmadd_f64($a, $b, $c)
    };
    (load_c, $p:expr) => {
        load::<f64, 8>($p)
    };
    (store_c, $p:expr, $v:expr) => {
        store::<f64, 8>($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        [0.0f64; 8]
    }};
}

macro_rules! v_soft_bf16 {
    (W) => {
        16
    };
    (G) => {
        2
    };
    (zero) => {
        [0.0f32; 16]
    };
    (zero_b) => {
        [bf16::ZERO; 32]
    };
    (load_b, $p:expr) => {
        load::<bf16, 32>($p)
    };
    (bcast_a, $p:expr) => {
        bcast_group::<bf16, 2, 32>($p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        dpbf16ps($acc, $a, $b)
    };
    (splat, $x:expr) => {
        [$x; 16]
    };
    (mul, $a:expr, $b:expr) => {
        zip($a, $b, |x, y| x * y)
    };
    (add, $a:expr, $b:expr) => {
        zip($a, $b, |x, y| x + y)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        fmadd_f32($a, $b, $c)
    };
    (load_c, $p:expr) => {
        load::<f32, 16>($p)
    };
    (store_c, $p:expr, $v:expr) => {
        store::<f32, 16>($p, $v)
    };
    (load_colsum, $p:expr) => {{
        let _ = $p;
        [0.0f32; 16]
    }};
}

macro_rules! v_soft_vnni {
    (W) => {
        16
    };
    (G) => {
        4
    };
    (zero) => {
        [0i32; 16]
    };
    (zero_b) => {
        [0i8; 64]
    };
    (load_b, $p:expr) => {
        load::<i8, 64>($p)
    };
    (bcast_a, $p:expr) => {
        bcast_group::<u8, 4, 64>($p)
    };
    (madd, $acc:expr, $a:expr, $b:expr) => {
        dpbusd($acc, $a, $b)
    };
    (splat, $x:expr) => {
        [$x; 16]
    };
    (mul, $a:expr, $b:expr) => {
        zip($a, $b, i32::wrapping_mul)
    };
    (add, $a:expr, $b:expr) => {
        zip($a, $b, i32::wrapping_add)
    };
    (fma, $a:expr, $b:expr, $c:expr) => {
        zip(zip($a, $b, i32::wrapping_mul), $c, i32::wrapping_add)
    };
    (load_c, $p:expr) => {
        load::<i32, 16>($p)
    };
    (store_c, $p:expr, $v:expr) => {
        store::<i32, 16>($p, $v)
    };
    (load_colsum, $p:expr) => {
        load::<i32, 16>($p)
    };
}

simd_tile!(@soft tile_soft_f32, v_soft_f32, f32, f32, f32);
simd_tile!(@soft tile_soft_f64, v_soft_f64, f64, f64, f64);
simd_tile!(@soft tile_soft_bf16, v_soft_bf16, bf16, bf16, f32);
simd_tile!(@soft tile_soft_vnni, v_soft_vnni, u8, i8, i32);

/// The geometry of `AVX512_F32` (14 x 32) on the software vocabulary.
pub(crate) static SOFT_F32: Family<f32, f32, f32> = Family {
    name: "soft512-f32-14x32",
    isa: Isa::Generic,
    mr: 14,
    nr: 32,
    g: 1,
    tiles: tiles!(tile_soft_f32, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: false,
};

/// The geometry of `AVX512_F32_WIDE` (8 x 48).
pub(crate) static SOFT_F32_WIDE: Family<f32, f32, f32> = Family {
    name: "soft512-f32-8x48",
    isa: Isa::Generic,
    mr: 8,
    nr: 48,
    g: 1,
    tiles: tiles!(tile_soft_f32, 3; 1 2 3 4 5 6 7 8),
    a_group: 0,
    needs_colsum: false,
};

/// The geometry of `AVX512_F64` (14 x 16).
pub(crate) static SOFT_F64: Family<f64, f64, f64> = Family {
    name: "soft512-f64-14x16",
    isa: Isa::Generic,
    mr: 14,
    nr: 16,
    g: 1,
    tiles: tiles!(tile_soft_f64, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: false,
};

/// The geometry and pair packing of `AVX512_BF16` (14 x 32, G = 2).
pub(crate) static SOFT_BF16: Family<bf16, bf16, f32> = Family {
    name: "soft512-bf16-14x32",
    isa: Isa::Generic,
    mr: 14,
    nr: 32,
    g: 2,
    tiles: tiles!(tile_soft_bf16, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: false,
};

/// The geometry, quad packing and column-sum correction of `AVX512_VNNI` (14 x 32, G = 4).
pub(crate) static SOFT_VNNI: Family<u8, i8, i32> = Family {
    name: "soft512-vnni-i8-14x32",
    isa: Isa::Generic,
    mr: 14,
    nr: 32,
    g: 4,
    tiles: tiles!(tile_soft_vnni, 2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
    a_group: 0,
    needs_colsum: true,
};

/// The AVX-512 geometries run through the real driver (path choice, packing, blocking,
/// edge tiles, epilogue, threads) on the software vocabularies, against a naive f64 loop.
mod families {
    use super::*;
    use crate::kernels::gemm::driver::{PackedPanels, RawMat};
    use crate::kernels::gemm::{
        Activation, Bias, Blocking, Epilogue, GemmArgs, GemmOptions, MatMut, MatRef, Path, check, execute,
    };

    /// Deterministic values in [-1, 1] with a few exact zeros.
    fn val(seed: usize, i: usize) -> f64 {
        let x = (i.wrapping_mul(2_654_435_761).wrapping_add(seed * 97)) % 1999;
        (x as f64 - 999.0) / 999.0
    }

    /// m, n, k covering 1, tile remainders (rows 14/8, columns 32/48, groups 2/4) and primes.
    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (1, 33, 5),
        (2, 31, 3),
        (13, 32, 7),
        (14, 48, 9),
        (15, 47, 17),
        (8, 49, 4),
        (9, 96, 2),
        (29, 65, 31),
        (33, 97, 40),
        (57, 130, 66),
    ];

    #[derive(Clone, Copy, Debug)]
    struct Ep {
        alpha: f64,
        beta: f64,
        /// 0 none, 1 per row, 2 per column.
        bias: usize,
        act: Activation,
    }

    const EPS: &[Ep] = &[
        Ep { alpha: 1.0, beta: 0.0, bias: 0, act: Activation::None },
        Ep { alpha: 0.5, beta: 0.25, bias: 2, act: Activation::Relu },
        Ep { alpha: -2.0, beta: 1.0, bias: 1, act: Activation::None },
        Ep { alpha: 1.0, beta: 0.0, bias: 2, act: Activation::Sigmoid },
    ];

    /// The expected C (row-major) in f64: act(alpha·A·B + beta·C0 + bias).
    fn expect(mnk: (usize, usize, usize), a: &[f64], b: &[f64], c0: &[f64], bias: &[f64], ep: Ep) -> Vec<f64> {
        let (m, n, k) = mnk;
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                let mut v = ep.alpha * s + ep.beta * c0[i * n + j];
                v += match ep.bias {
                    1 => bias[i],
                    2 => bias[j],
                    _ => 0.0,
                };
                out[i * n + j] = match ep.act {
                    Activation::Relu => v.max(0.0),
                    Activation::Sigmoid => 1.0 / (1.0 + (-v).exp()),
                    _ => v,
                };
            }
        }
        out
    }

    fn bias_of<'a, T>(ep: Ep, row: &'a [T], col: &'a [T]) -> Bias<'a, T> {
        match ep.bias {
            1 => Bias::PerRow(row),
            2 => Bias::PerColumn(col),
            _ => Bias::None,
        }
    }

    /// Every shape x epilogue x path (packed with small blocks, packed with default
    /// blocks, direct, pre-packed) for one f32 family; A is column-major every other case.
    fn run_f32(fam: &'static Family<f32, f32, f32>) {
        for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
            for (ei, &ep) in EPS.iter().enumerate() {
                let a64: Vec<f64> = (0..m * k).map(|i| val(1 + si, i)).collect();
                let b64: Vec<f64> = (0..k * n).map(|i| val(2 + ei, i)).collect();
                let c64: Vec<f64> = (0..m * n).map(|i| val(3, i)).collect();
                let bias64: Vec<f64> = (0..m.max(n)).map(|i| val(4, i)).collect();
                let want = expect((m, n, k), &a64, &b64, &c64, &bias64, ep);
                let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
                let (b, bias) = (f(&b64), f(&bias64));
                // A column-major (rs = 1, cs = m) on odd cases: the packing absorbs it.
                let col_major = (si + ei) % 2 == 1;
                let a: Vec<f32> =
                    if col_major { (0..m * k).map(|x| a64[(x % m) * k + x / m] as f32).collect() } else { f(&a64) };
                let aview = if col_major { MatRef::col_major(&a, m) } else { MatRef::row_major(&a, k) };
                for (pi, (path, blocking)) in [
                    (Path::Packed, Blocking { kc: 8, mc: 2 * fam.mr, nc: 2 * fam.nr }),
                    (Path::Packed, Blocking::default()),
                    (Path::Direct, Blocking { kc: 16, mc: 0, nc: 0 }),
                    (Path::Packed, Blocking { kc: 6, mc: 0, nc: 0 }),
                ]
                .into_iter()
                .enumerate()
                {
                    let mut c = f(&c64);
                    let args = GemmArgs::new(m, n, k, aview, MatRef::row_major(&b, n), MatMut::row_major(&mut c, n))
                        .epilogue(Epilogue {
                            alpha: ep.alpha as f32,
                            beta: ep.beta as f32,
                            bias: bias_of(ep, &bias[..m], &bias[..n]),
                            activation: ep.act,
                        })
                        .options(GemmOptions { path, blocking, ..Default::default() });
                    let ck = check(args).unwrap();
                    let bview = RawMat { ptr: b.as_ptr(), rs: n, cs: 1 };
                    // The last variant runs on B pre-packed for the family.
                    let panels = (pi == 3).then(|| {
                        // SAFETY: b is k x n row-major.
                        unsafe { PackedPanels::pack::<f32, f32>(fam, bview, k, n, blocking.kc) }
                    });
                    execute(ck, &[fam], None, panels.as_ref().map(|p| (fam, p))).unwrap();
                    for (x, (&got, &w)) in c.iter().zip(&want).enumerate() {
                        let tol = 1e-5 * (1.0 + w.abs()) + 4e-6 * k as f64;
                        assert!(
                            (got as f64 - w).abs() <= tol,
                            "{} {m}x{n}x{k} {ep:?} {path:?} variant {pi} col_major={col_major} \
                             ({}, {}): got {got}, want {w}",
                            fam.name,
                            x / n,
                            x % n
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn soft_avx512_f32_14x32_matches_naive() {
        run_f32(&SOFT_F32);
    }

    #[test]
    fn soft_avx512_f32_8x48_matches_naive() {
        run_f32(&SOFT_F32_WIDE);
    }

    #[test]
    fn soft_avx512_f64_14x16_matches_naive() {
        for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
            for &ep in EPS {
                let a: Vec<f64> = (0..m * k).map(|i| val(1 + si, i)).collect();
                let b: Vec<f64> = (0..k * n).map(|i| val(2, i)).collect();
                let c0: Vec<f64> = (0..m * n).map(|i| val(3, i)).collect();
                let bias: Vec<f64> = (0..m.max(n)).map(|i| val(4, i)).collect();
                let want = expect((m, n, k), &a, &b, &c0, &bias, ep);
                // B transposed in memory (n x k row-major read as k x n): packed path only.
                let bt: Vec<f64> = (0..n * k).map(|x| b[(x % k) * n + x / k]).collect();
                for bview in [MatRef::row_major(&b, n), MatRef::row_major(&bt, k).t()] {
                    let mut c = c0.clone();
                    let args = GemmArgs::new(m, n, k, MatRef::row_major(&a, k), bview, MatMut::row_major(&mut c, n))
                        .epilogue(Epilogue {
                            alpha: ep.alpha,
                            beta: ep.beta,
                            bias: bias_of(ep, &bias[..m], &bias[..n]),
                            activation: ep.act,
                        })
                        .options(GemmOptions {
                            path: Path::Packed,
                            blocking: Blocking { kc: 5, mc: 14, nc: 32 },
                            ..Default::default()
                        });
                    execute(check(args).unwrap(), &[&SOFT_F64], None, None).unwrap();
                    for (x, (&got, &w)) in c.iter().zip(&want).enumerate() {
                        assert!((got - w).abs() <= 1e-12 * (1.0 + k as f64), "{m}x{n}x{k} {ep:?} {x}: {got} vs {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn soft_avx512_bf16_pairs_match_naive() {
        for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
            for &ep in &EPS[..3] {
                for kc in [2, 3, 8, 0] {
                    // Inputs rounded to bf16; the reference multiplies the rounded values in f64.
                    let a: Vec<bf16> = (0..m * k).map(|i| bf16::from_f64(val(1 + si, i))).collect();
                    let b: Vec<bf16> = (0..k * n).map(|i| bf16::from_f64(val(2, i))).collect();
                    let a64: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
                    let b64: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
                    let c0: Vec<f64> = (0..m * n).map(|i| val(3, i)).collect();
                    let bias: Vec<f64> = (0..m.max(n)).map(|i| val(4, i)).collect();
                    let want = expect((m, n, k), &a64, &b64, &c0, &bias, ep);
                    let mut c: Vec<f32> = c0.iter().map(|&x| x as f32).collect();
                    let bias32: Vec<f32> = bias.iter().map(|&x| x as f32).collect();
                    let args = GemmArgs::new(
                        m,
                        n,
                        k,
                        MatRef::row_major(&a, k),
                        MatRef::row_major(&b, n),
                        MatMut::row_major(&mut c, n),
                    )
                    .epilogue(Epilogue {
                        alpha: ep.alpha as f32,
                        beta: ep.beta as f32,
                        bias: bias_of(ep, &bias32[..m], &bias32[..n]),
                        activation: ep.act,
                    })
                    .options(GemmOptions {
                        path: Path::Packed,
                        blocking: Blocking { kc, mc: 28, nc: 64 },
                        ..Default::default()
                    });
                    execute(check(args).unwrap(), &[&SOFT_BF16], None, None).unwrap();
                    for (x, (&got, &w)) in c.iter().zip(&want).enumerate() {
                        let tol = 1e-5 * (1.0 + w.abs()) + 4e-6 * k as f64;
                        assert!((got as f64 - w).abs() <= tol, "{m}x{n}x{k} kc={kc} {ep:?} {x}: {got} vs {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn soft_avx512_vnni_quads_are_exact() {
        for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
            for (alpha, beta, bias_kind, act) in
                [(1, 0, 0, Activation::None), (2, 1, 2, Activation::Relu), (-3, 2, 1, Activation::None)]
            {
                for kc in [4, 5, 12, 0] {
                    // Extremes included: -128 and 127 in both operands.
                    let a: Vec<i8> =
                        (0..m * k).map(|i| if i % 7 == 0 { -128 } else { (val(1 + si, i) * 127.0) as i8 }).collect();
                    let b: Vec<i8> = (0..k * n)
                        .map(|i| if i % 5 == 0 { 127 } else { (val(2, i) * 128.0).max(-128.0) as i8 })
                        .collect();
                    let c0: Vec<i32> = (0..m * n).map(|i| (val(3, i) * 1000.0) as i32).collect();
                    let bias: Vec<i32> = (0..m.max(n) as i32).map(|i| 7 * i - 50).collect();
                    let mut c = c0.clone();
                    let args = GemmArgs::new(
                        m,
                        n,
                        k,
                        MatRef::row_major(&a, k),
                        MatRef::row_major(&b, n),
                        MatMut::row_major(&mut c, n),
                    )
                    .epilogue(Epilogue {
                        alpha,
                        beta,
                        bias: match bias_kind {
                            1 => Bias::PerRow(&bias[..m]),
                            2 => Bias::PerColumn(&bias[..n]),
                            _ => Bias::None,
                        },
                        activation: act,
                    })
                    .options(GemmOptions {
                        path: Path::Packed,
                        blocking: Blocking { kc, mc: 28, nc: 64 },
                        ..Default::default()
                    });
                    execute(check(args).unwrap(), &[&SOFT_VNNI], None, None).unwrap();
                    for i in 0..m {
                        for j in 0..n {
                            let s: i32 = (0..k).map(|p| a[i * k + p] as i32 * b[p * n + j] as i32).sum();
                            let mut v = alpha * s + beta * c0[i * n + j];
                            v += match bias_kind {
                                1 => bias[i],
                                2 => bias[j],
                                _ => 0,
                            };
                            if act == Activation::Relu {
                                v = v.max(0);
                            }
                            assert_eq!(c[i * n + j], v, "{m}x{n}x{k} kc={kc} alpha={alpha} ({i},{j})");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dpbf16ps_adds_odd_pair_then_even_with_daz() {
    let h = bf16::from_f32;
    let mut a = [bf16::ZERO; 32];
    let mut b = [bf16::ZERO; 32];
    // Lane 0: 1 + 3·2 + 0.5·4 = 9. Lane 1: src 1, odd product 2^24, even product 1: odd
    // first, 1 + 2^24 rounds to 2^24 (tie to even) and + 1 again, so 2^24; even first would
    // give 2 + 2^24 exactly.
    (a[0], b[0], a[1], b[1]) = (h(0.5), h(4.0), h(3.0), h(2.0));
    (a[2], b[2], a[3], b[3]) = (h(1.0), h(1.0), h(4096.0), h(4096.0));
    // Lane 2: a denormal bf16 (1e-39) is read as zero.
    (a[4], b[4]) = (bf16::from_bits(0x0001), h(1.0e30));
    let mut src = [0.0f32; L];
    (src[0], src[1]) = (1.0, 1.0);
    let r = dpbf16ps(src, a, b);
    assert_eq!(r[0], 9.0);
    assert_eq!(r[1], 16_777_216.0);
    assert_eq!(r[2], 0.0);
    // Products are exact: 255/128 · 255/128 needs 16 bits of mantissa.
    let x = h(255.0 / 128.0);
    let (mut a, mut b) = ([bf16::ZERO; 32], [bf16::ZERO; 32]);
    (a[0], b[0]) = (x, x);
    assert_eq!(dpbf16ps([0.0; L], a, b)[0], 65025.0 / 16384.0);
}

#[test]
fn dpbusd_is_unsigned_times_signed_and_wraps() {
    let mut a = [0u8; 64];
    let mut b = [0i8; 64];
    // Lane 0: 255·(-128) + 1·127 + 0 + 2·(-1) = -32640 + 127 - 2 = -32515.
    a[..4].copy_from_slice(&[255, 1, 9, 2]);
    b[..4].copy_from_slice(&[-128, 127, 0, -1]);
    // Lane 1: 4 · 255·127 = 129540 added to i32::MAX wraps.
    a[4..8].copy_from_slice(&[255; 4]);
    b[4..8].copy_from_slice(&[127; 4]);
    let mut src = [0i32; L];
    src[1] = i32::MAX;
    let r = dpbusd(src, a, b);
    assert_eq!(r[0], -32515);
    assert_eq!(r[1], i32::MAX.wrapping_add(129_540));
    assert_eq!(r[2..], [0; 14]);
}
