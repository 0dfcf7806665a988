//! The AMX GEMM path (bf16 `TDPBF16PS`, int8 `TDPBSSD` tiles) on the software model of the tile
//! unit, against naive loops written here: random and awkward shapes (M, N, K off the 16/32/64
//! multiples, K = 1, zero sizes), depth, row and column blocks, strided and transposed operands,
//! the epilogue and two threads. The hardware tiles are chosen only where CPUID and the OS say
//! yes; this checks the dispatch line and the force-off switch.

use half::bf16;
use tensorjit::kernels::gemm::*;

#[path = "common/gemm.rs"]
mod common;
use common::run_child;

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Shapes (m, n, k): edges of the 32 x 32 tiles and the 32 / 64 k steps, K = 1, zeros.
const SHAPES: &[(usize, usize, usize)] = &[
    (0, 5, 3),
    (5, 0, 3),
    (4, 3, 0),
    (1, 1, 1),
    (7, 3, 1),
    (16, 16, 32),
    (32, 32, 64),
    (33, 33, 33),
    (31, 17, 65),
    (17, 96, 31),
    (65, 70, 130),
    (100, 40, 257),
    (48, 1, 100),
    (1, 48, 100),
];

/// Blockings: the defaults, then small blocks (several depth, row and column blocks).
const BLOCKINGS: &[Blocking] =
    &[Blocking { kc: 0, mc: 0, nc: 0 }, Blocking { kc: 40, mc: 32, nc: 32 }, Blocking { kc: 64, mc: 64, nc: 64 }];

/// Layout of A: row-major, column-major, or rows 3 apart with a padded row stride.
#[derive(Clone, Copy, Debug)]
enum Lay {
    Row,
    Col,
    Padded,
}

/// (data length, row stride, column stride) of a rows x cols operand in layout `l`.
fn strides(rows: usize, cols: usize, l: Lay) -> (usize, usize, usize) {
    match l {
        Lay::Row => (rows * cols, cols, 1),
        Lay::Col => (rows * cols, 1, rows.max(1)),
        Lay::Padded => (rows * (cols + 5), cols + 5, 1),
    }
}

#[test]
fn amx_model_bf16_matches_naive() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
        for (bi, &blocking) in BLOCKINGS.iter().enumerate() {
            let lay = [Lay::Row, Lay::Col, Lay::Padded][(si + bi) % 3];
            let threads = 1 + (si + bi) % 2;
            // Multiples of 1/8 in [-2, 2): products are multiples of 1/64 and every partial sum
            // (below 2^10 in size) is exact in f32, so the result is exact in any order.
            let mut val = || bf16::from_f32((rng.below(32) as f32 - 16.0) / 8.0);
            let (alen, ars, acs) = strides(m, k, lay);
            let a: Vec<bf16> = (0..alen).map(|_| val()).collect();
            let (blen, brs, bcs) = strides(k, n, [Lay::Row, Lay::Col, Lay::Padded][(si + bi + 1) % 3]);
            let b: Vec<bf16> = (0..blen).map(|_| val()).collect();
            let c0: Vec<f32> = (0..m * n).map(|_| val().to_f32()).collect();
            let bias: Vec<f32> = (0..n).map(|_| val().to_f32()).collect();
            let (alpha, beta, act) = match (si + bi) % 3 {
                0 => (1.0, 0.0, Activation::None),
                1 => (0.5, 1.0, Activation::Relu),
                _ => (2.0, -0.5, Activation::None),
            };
            let mut c = c0.clone();
            let bias_arg = if (si + bi) % 2 == 0 { Bias::PerColumn(&bias) } else { Bias::None };
            let opts = GemmOptions { path: Path::Packed, blocking, ..Default::default() };
            gemm_bf16_amx_model(
                GemmArgs::new(
                    m,
                    n,
                    k,
                    MatRef::new(&a, ars, acs),
                    MatRef::new(&b, brs, bcs),
                    MatMut::row_major(&mut c, n),
                )
                .epilogue(Epilogue { alpha, beta, bias: bias_arg, activation: act })
                .threads(threads)
                .options(opts),
            )
            .unwrap_or_else(|e| panic!("{m}x{n}x{k} {blocking:?}: {e}"));
            for i in 0..m {
                for j in 0..n {
                    let s: f64 = (0..k).map(|p| a[i * ars + p * acs].to_f64() * b[p * brs + j * bcs].to_f64()).sum();
                    let mut want = alpha as f64 * s;
                    if beta != 0.0 {
                        want += beta as f64 * c0[i * n + j] as f64;
                    }
                    if (si + bi) % 2 == 0 {
                        want += bias[j] as f64;
                    }
                    if act == Activation::Relu {
                        want = want.max(0.0);
                    }
                    assert_eq!(c[i * n + j] as f64, want, "{m}x{n}x{k} {lay:?} {blocking:?} t{threads} ({i},{j})");
                }
            }
        }
    }
}

#[test]
fn amx_model_i8_is_exact() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
        for (bi, &blocking) in BLOCKINGS.iter().enumerate() {
            let threads = 1 + (si + bi) % 2;
            // Full int8 range, the extremes often (-128 · -128 is the largest product).
            let mut val = || match rng.below(8) {
                0 => -128i8,
                1 => 127,
                _ => rng.below(256) as u8 as i8,
            };
            let (alen, ars, acs) = strides(m, k, [Lay::Row, Lay::Col, Lay::Padded][(si + bi) % 3]);
            let a: Vec<i8> = (0..alen).map(|_| val()).collect();
            let b: Vec<i8> = (0..k * n).map(|_| val()).collect();
            let c0: Vec<i32> = (0..m * n).map(|x| x as i32 - 40).collect();
            let bias: Vec<i32> = (0..m).map(|x| 7 - x as i32).collect();
            let relu = (si + bi) % 2 == 1;
            let mut c = c0.clone();
            let opts = GemmOptions { path: Path::Packed, blocking, ..Default::default() };
            gemm_i8_amx_model(
                GemmArgs::new(
                    m,
                    n,
                    k,
                    MatRef::new(&a, ars, acs),
                    MatRef::row_major(&b, n),
                    MatMut::row_major(&mut c, n),
                )
                .epilogue(Epilogue {
                    alpha: 1,
                    beta: 1,
                    bias: Bias::PerRow(&bias),
                    activation: if relu { Activation::Relu } else { Activation::None },
                })
                .threads(threads)
                .options(opts),
            )
            .unwrap_or_else(|e| panic!("{m}x{n}x{k} {blocking:?}: {e}"));
            for i in 0..m {
                for j in 0..n {
                    let s: i64 = (0..k).map(|p| a[i * ars + p * acs] as i64 * b[p * n + j] as i64).sum();
                    let mut want = s + c0[i * n + j] as i64 + bias[i] as i64;
                    if relu {
                        want = want.max(0);
                    }
                    assert_eq!(c[i * n + j] as i64, want, "{m}x{n}x{k} {blocking:?} t{threads} ({i},{j})");
                }
            }
        }
    }
}

/// Bad input through the model entry points is an error naming the operand, not a panic.
#[test]
fn amx_model_rejects_bad_operands() {
    let a = [0i8; 5];
    let b = [0i8; 6];
    let mut c = [0i32; 4];
    let e = gemm_i8_amx_model(GemmArgs::new(
        2,
        2,
        3,
        MatRef::row_major(&a, 3),
        MatRef::row_major(&b, 2),
        MatMut::row_major(&mut c, 2),
    ))
    .unwrap_err();
    assert!(e.to_string().contains("operand A"), "{e}");
    let a = [0i8; 6];
    let e = gemm_i8_amx_model(
        GemmArgs::new(2, 2, 3, MatRef::row_major(&a, 3), MatRef::row_major(&b, 2), MatMut::row_major(&mut c, 2))
            .epilogue(Epilogue { activation: Activation::GeluErf, ..Epilogue::default() }),
    )
    .unwrap_err();
    assert!(e.to_string().contains("activation"), "{e}");
}

/// The dispatch line reports AMX, and `TENSORJIT_DISABLE_AMX=1` marks it disabled (checked in
/// a child process: the switch is read once).
#[test]
fn amx_dispatch_is_reported_and_can_be_disabled() {
    let line = dispatch_summary();
    let f = hardware_features();
    assert!(line.contains(&format!("amx-bf16={} amx-int8={}", f.amx_bf16, f.amx_int8)), "{line}");
    if !f.amx_bf16 {
        // No AMX here: gemm_bf16 takes another path and still computes (1·2 + 3·4 = 14).
        let a = [bf16::from_f32(1.0), bf16::from_f32(3.0)];
        let b = [bf16::from_f32(2.0), bf16::from_f32(4.0)];
        let mut c = [0.0f32];
        gemm_bf16(GemmArgs::new(
            1,
            1,
            2,
            MatRef::row_major(&a, 2),
            MatRef::row_major(&b, 1),
            MatMut::row_major(&mut c, 1),
        ))
        .unwrap();
        assert_eq!(c, [14.0]);
    }
    match std::env::var("TJ_AMX_CHILD").ok().as_deref() {
        Some("disabled") => assert!(line.contains(" disabled"), "{line}"),
        Some(other) => panic!("unknown child mode {other}"),
        None => run_child(
            "amx_dispatch_is_reported_and_can_be_disabled",
            "TJ_AMX_CHILD",
            "disabled",
            &[("TENSORJIT_DISABLE_AMX", "1")],
            &[],
        ),
    }
}

/// On a CPU with AMX (and the tiles not switched off), the hardware path of `gemm_bf16` /
/// `gemm_i8`: int8 gives the software model's results exactly; bf16 (full-precision inputs: all
/// 8 significant bits, signs, magnitudes 2⁻⁸..2⁸, so the f32 sums round) stays within the f32
/// accumulation bound (k + 3)·2⁻²⁴·(|alpha|·Σ|a·b| + |beta·c| + |bias|) of the exact product.
/// Not bit for bit with the model: the hardware does not round like the SDM's pseudocode
/// (measured on a Xeon with AMX: single 32-deep dot products matched the pseudocode's sequential
/// rounding in 700 of 2000 cases, and were up to ~7 ulp from the exact sum, inside the bound).
/// Every shape and blocking above, alpha/beta/bias/Relu, 1 and 2 threads. Without AMX there is
/// no hardware to run, and the test says so and returns.
#[test]
fn amx_hardware_agrees_with_the_model_and_the_exact_product() {
    let f = hardware_features();
    if !(f.amx_bf16 && f.amx_int8) || dispatch_summary().contains(" disabled") {
        eprintln!("no AMX here ({}): nothing to run", dispatch_summary());
        return;
    }
    let mut rng = Rng(0x853c_49e6_748f_ea9b);
    let mut compared = 0usize;
    for (si, &(m, n, k)) in SHAPES.iter().chain(&[(64, 96, 384), (100, 64, 1100)]).enumerate() {
        for (bi, &blocking) in BLOCKINGS.iter().enumerate() {
            let threads = 1 + (si + bi) % 2;
            let opts = GemmOptions { path: Path::Packed, blocking, ..Default::default() };
            let (alpha, beta, act) = match (si + bi) % 3 {
                0 => (1.0f32, 0.0f32, Activation::None),
                1 => (0.5, 1.0, Activation::Relu),
                _ => (2.0, -0.5, Activation::None),
            };
            let mut val = || {
                let mant = 128 + rng.below(128) as i32;
                let exp = rng.below(17) as i32 - 8 - 7;
                let sign = if rng.below(2) == 0 { 1.0 } else { -1.0 };
                bf16::from_f32(sign * mant as f32 * 2f32.powi(exp))
            };
            let a: Vec<bf16> = (0..m * k).map(|_| val()).collect();
            let b: Vec<bf16> = (0..k * n).map(|_| val()).collect();
            let c0: Vec<f32> = (0..m * n).map(|_| val().to_f32()).collect();
            // A bias per column, or per row (alternating).
            let per_row = (si + bi) % 2 == 1;
            let bias: Vec<f32> = (0..if per_row { m } else { n }).map(|_| val().to_f32()).collect();
            let bias_arg = if per_row { Bias::PerRow(&bias) } else { Bias::PerColumn(&bias) };
            let mut c = c0.clone();
            gemm_bf16(
                GemmArgs::new(
                    m,
                    n,
                    k,
                    MatRef::row_major(&a, k),
                    MatRef::row_major(&b, n),
                    MatMut::row_major(&mut c, n),
                )
                .epilogue(Epilogue { alpha, beta, bias: bias_arg, activation: act })
                .threads(threads)
                .options(opts),
            )
            .unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (mut s, mut mag) = (0f64, 0f64);
                    for p in 0..k {
                        let x = a[i * k + p].to_f64() * b[p * n + j].to_f64();
                        s += x;
                        mag += x.abs();
                    }
                    let cij = c0[i * n + j] as f64;
                    let bij = bias[if per_row { i } else { j }] as f64;
                    let mut want = alpha as f64 * s + beta as f64 * cij + bij;
                    if act == Activation::Relu {
                        want = want.max(0.0);
                    }
                    let bound = (k + 3) as f64
                        * 2f64.powi(-24)
                        * (alpha.abs() as f64 * mag + (beta as f64 * cij).abs() + bij.abs());
                    let got = c[i * n + j] as f64;
                    assert!(
                        (got - want).abs() <= bound,
                        "bf16 {m}x{n}x{k} {blocking:?} t{threads} ({i},{j}): {got} vs {want} (bound {bound})"
                    );
                }
            }
            let a8: Vec<i8> = (0..m * k).map(|_| rng.below(256) as u8 as i8).collect();
            let b8: Vec<i8> = (0..k * n).map(|_| rng.below(256) as u8 as i8).collect();
            let c8: Vec<i32> = (0..m * n).map(|x| x as i32 - 40).collect();
            let run8 = |model: bool| {
                let mut c = c8.clone();
                let args = GemmArgs::new(
                    m,
                    n,
                    k,
                    MatRef::row_major(&a8, k),
                    MatRef::row_major(&b8, n),
                    MatMut::row_major(&mut c, n),
                )
                .epilogue(Epilogue { alpha: 1, beta: 1, bias: Bias::None, activation: Activation::Relu })
                .threads(threads)
                .options(opts);
                if model { gemm_i8_amx_model(args) } else { gemm_i8(args) }.unwrap();
                c
            };
            assert_eq!(run8(false), run8(true), "i8 {m}x{n}x{k} {blocking:?} t{threads}");
            compared += 1;
        }
    }
    assert_eq!(compared, (SHAPES.len() + 2) * BLOCKINGS.len());
}
