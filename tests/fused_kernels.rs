//! Tests of the hand-written fused kernels (`tensorjit::kernels::fused`) and of their use by the
//! "jit" backend: hand-computed values, special cases, and random shapes against the reference
//! kernels (the project's oracle), on both the AVX2 and the portable path, plus end-to-end graphs
//! compared with the "interp" backend (also in a child process with `TENSORJIT_DISABLE_AVX2=1`).
//!
//! Run with `cargo test --test fused_kernels` (add `--release` for speed).

use std::sync::Arc;

use half::{bf16, f16};
use tensorjit::api::AttentionConfig;
use tensorjit::ir::op::{Activation, AttentionLayout, BinaryOp, DenseLayout, Op};
use tensorjit::kernels::Tensor;
use tensorjit::kernels::fused::attention::{AttentionMask, AttentionParams, broadcast_strides};
use tensorjit::kernels::fused::vmath::exp_f32;
use tensorjit::kernels::fused::{
    FusedIsa, attention_f32, gelu_f32, layer_norm_f32, layer_norm_residual_f32, layer_norm_strided_f32, softmax_f32,
};
use tensorjit::kernels::reference;
use tensorjit::{Backend, Buffer, DType, Shape};

#[path = "common/fused.rs"]
mod common;
use common::{Rng, isas, take_plans, tensor};

// ------------------------------------------------------------------------------------------------
// Helpers.

/// The reference kernel's f32 result for `op` on `inputs`.
fn reference_f32(op: &Op, inputs: &[Tensor], out_dims: &[usize]) -> Vec<f32> {
    let d: Vec<i64> = out_dims.iter().map(|&x| x as i64).collect();
    let out = Shape::new(inputs[0].shape.dtype, &d);
    reference::eval(op, inputs, &[out]).expect("reference")[0].typed::<f32>().to_vec()
}

/// Asserts `|got − want| ≤ abs + rel·|want|` element-wise (NaN matches NaN, ∞ matches itself).
#[track_caller]
fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32, abs: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w.is_infinite() || g.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= abs + rel * w.abs()
        };
        assert!(ok, "{what}: element {i}: got {g:e}, want {w:e}");
    }
}

// ------------------------------------------------------------------------------------------------
// exp.

/// Maximum relative error of the vectorised exp against f64 `exp`, over every 64th f32 in
/// [−87.3, 88.7] (normal results), on each path. Documented in docs/fused.md.
#[test]
fn exp_max_error() {
    let mut xs = Vec::new();
    for lo in [-87.3f32, 0.0] {
        let hi = if lo < 0.0 { -0.0f32 } else { 88.7f32 };
        // Walk the bit patterns of [0, |bound|] and add the sign.
        let end = if lo < 0.0 { lo.abs().to_bits() } else { hi.to_bits() };
        let mut b = 0u32;
        while b <= end {
            let v = f32::from_bits(b);
            xs.push(if lo < 0.0 { -v } else { v });
            b += 64;
        }
    }
    for isa in isas() {
        let mut y = vec![0f32; xs.len()];
        exp_f32(isa, &xs, &mut y);
        let mut worst = 0f64;
        let mut worst_ulp = 0f64;
        for (&x, &e) in xs.iter().zip(&y) {
            let t = (x as f64).exp();
            let rel = ((e as f64) - t).abs() / t;
            worst = worst.max(rel);
            let ulp = f32::from_bits((t as f32).to_bits() + 1) as f64 - (t as f32) as f64;
            worst_ulp = worst_ulp.max(((e as f64) - t).abs() / ulp);
        }
        eprintln!("exp {}: {} points, max rel error {worst:.3e}, {worst_ulp:.2} ulp", isa.name(), xs.len());
        assert!(worst < 2.5e-7, "{}: max relative error {worst:e}", isa.name());
        // Special values.
        let sp = [0.0f32, 1.0, f32::NEG_INFINITY, f32::INFINITY, f32::NAN, -200.0, 100.0, 88.8, -0.0, -87.4, -87.3];
        let mut out = [0f32; 11];
        exp_f32(isa, &sp, &mut out);
        assert_eq!(out[0], 1.0);
        assert!((out[1] - std::f32::consts::E).abs() <= 2.0 * f32::EPSILON * std::f32::consts::E);
        assert_eq!(out[2], 0.0);
        assert_eq!(out[3], f32::INFINITY);
        assert!(out[4].is_nan());
        assert_eq!(out[5], 0.0);
        assert_eq!(out[6], f32::INFINITY);
        assert_eq!(out[7], f32::INFINITY);
        assert_eq!(out[8], 1.0);
        // Results below 2⁻¹²⁶ are flushed to 0 (no subnormal result or operand downstream);
        // e^−87.3 = 1.2e-38 is just above it.
        assert_eq!(out[9], 0.0, "{}", isa.name());
        let want = (-87.3f32 as f64).exp();
        assert!((out[10] as f64 - want).abs() <= 2e-7 * want, "{}: {:e}", isa.name(), out[10]);
    }
}

// ------------------------------------------------------------------------------------------------
// Softmax.

fn softmax_via(isa: FusedIsa, x: &[f32], dims: &[usize], axis: usize) -> Vec<f32> {
    let outer = dims[..axis].iter().product();
    let inner = dims[axis + 1..].iter().product();
    let mut y = vec![0f32; x.len()];
    softmax_f32(isa, x, &mut y, outer, dims[axis], inner, None);
    y
}

#[test]
fn softmax_down_columns_is_shifted_by_each_column_max() {
    // Softmax over axis 0 of [3, 19] (19 columns: a full 16-lane vector and a partial one):
    // column j holds (j, 100 + j, −∞), its maximum in the second row; shifted by anything less
    // than 12 + j below that maximum, e^(100 + j − shift) would overflow. Expected:
    // e^−100/(1 + e^−100) ≈ 3.7e−44, 1/(1 + e^−100) = 1 in f32, 0.
    let cols = 19;
    let mut x = vec![0f32; 3 * cols];
    for j in 0..cols {
        x[j] = j as f32;
        x[cols + j] = 100.0 + j as f32;
        x[2 * cols + j] = f32::NEG_INFINITY;
    }
    for isa in isas() {
        let y = softmax_via(isa, &x, &[3, cols], 0);
        for j in 0..cols {
            let got = [y[j], y[cols + j], y[2 * cols + j]];
            assert!(
                (0.0..=1e-40).contains(&got[0]) && got[1] == 1.0 && got[2] == 0.0,
                "{} column {j}: {got:?}",
                isa.name()
            );
        }
    }
}

#[test]
fn softmax_hand_values_and_specials() {
    // softmax(1, 2, 3) = e^k/(e + e² + e³) = 0.09003057317, 0.24472847105, 0.66524095577; shifting by
    // 1000 changes nothing (stability).
    let e = [0.090_030_57f32, 0.244_728_47, 0.665_240_96];
    for isa in isas() {
        let x = [1.0f32, 2.0, 3.0, 1000.0, 1001.0, 1002.0];
        let y = softmax_via(isa, &x, &[2, 3], 1);
        assert_close("softmax rows", &y, &[e, e].concat(), 3e-7, 0.0);
        // Shifted by −1000, in a row of 19 and in columns of 3 × 19 (every vector loop's partial
        // tail): the maximum must come from the values, not from the padding lanes.
        let x: Vec<f32> = (0..19).map(|j| [-999.0, -998.0, -997.0][j % 3]).collect();
        let s19 = 7.0 * 0.090_030_57 + 6.0 * 0.244_728_47 + 6.0 * 0.665_240_96;
        let want: Vec<f32> = (0..19).map(|j| e[j % 3] / s19).collect();
        assert_close("softmax row of 19 at −1000", &softmax_via(isa, &x, &[19], 0), &want, 3e-7, 0.0);
        let cols: Vec<f32> = (0..3).flat_map(|k| [-999.0f32, -998.0, -997.0][k..k + 1].repeat(19)).collect();
        let want: Vec<f32> = (0..3).flat_map(|k| [e[k]].repeat(19)).collect();
        assert_close("softmax columns at −1000", &softmax_via(isa, &cols, &[3, 19], 0), &want, 3e-7, 0.0);
        // Axis 0 of [[0, 0], [1, 1]]: each column is softmax(0, 1) = (1/(1+e), e/(1+e)).
        let s = 1.0 / (1.0 + std::f32::consts::E);
        let y = softmax_via(isa, &[0.0, 0.0, 1.0, 1.0], &[2, 2], 0);
        assert_close("softmax axis 0", &y, &[s, s, 1.0 - s, 1.0 - s], 3e-7, 0.0);
        // −∞ entries get 0; a lone finite value gets 1.
        let y = softmax_via(isa, &[f32::NEG_INFINITY, 5.0, f32::NEG_INFINITY], &[3], 0);
        assert_eq!(y, vec![0.0, 1.0, 0.0]);
        // A row of only −∞, a row with NaN and a row with +∞ are NaN (as the reference: exp(NaN)).
        for row in [[f32::NEG_INFINITY; 3], [1.0, f32::NAN, 2.0], [1.0, f32::INFINITY, 2.0]] {
            let y = softmax_via(isa, &row, &[1, 3], 1);
            assert!(y.iter().all(|v| v.is_nan()), "{row:?} → {y:?}");
            let y = softmax_via(isa, &row, &[3, 1], 0);
            assert!(y.iter().all(|v| v.is_nan()), "column {row:?} → {y:?}");
        }
        // Large equal values: uniform 1/n for a 17-long row (crosses the 8/16-lane loops).
        let y = softmax_via(isa, &[3.0e38f32; 17], &[17], 0);
        assert_close("uniform", &y, &[1.0 / 17.0; 17], 3e-7, 0.0);
    }
}

#[test]
fn softmax_random_vs_reference() {
    let mut rng = Rng(1);
    let shapes: &[(&[usize], usize)] = &[
        (&[1], 0),
        (&[7], 0),
        (&[3, 8], 1),
        (&[5, 13], 1),
        (&[4, 33], 1),
        (&[2, 1537], 1),
        (&[6, 5], 0),
        (&[3, 17, 9], 1),
        (&[2, 3, 4, 5], 2),
        (&[4, 8, 31], 0),
        (&[1, 1, 1], 1),
    ];
    for (dims, axis) in shapes {
        let n: usize = dims.iter().product();
        let x = rng.vec(n, -30.0, 30.0);
        let want = reference_f32(&Op::FusedSoftmax { axis: *axis }, &[tensor(dims, &x)], dims);
        for isa in isas() {
            let got = softmax_via(isa, &x, dims, *axis);
            // exp ≤ 2 ulp, the sum of ≤ 1537 terms in f32 (8–16 lanes) and one division, plus the
            // f32 rounding of x − max (half an ulp of |x − max| ≈ |ln y|, relative in exp).
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let tol = w * (2e-6 + 6e-8 * w.ln().abs());
                assert!((g - w).abs() <= tol, "softmax {dims:?} axis {axis} {} [{i}]: {g:e} vs {w:e}", isa.name());
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// LayerNorm.

#[allow(clippy::too_many_arguments)]
fn layer_norm_via(
    isa: FusedIsa,
    x: &[f32],
    rows: usize,
    n: usize,
    eps: f64,
    g: Option<&[f32]>,
    b: Option<&[f32]>,
) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    layer_norm_f32(isa, x, &mut y, rows, n, eps, g, b, None);
    y
}

#[test]
fn layer_norm_hand_values() {
    // Row [1, 2, 3, 4]: mean 2.5, var 1.25; y = (x − 2.5)/√(1.25 + 1e-5)·2 + 1. A constant row
    // gives beta.
    let s = (1.25f64 + 1e-5).sqrt();
    let row: Vec<f32> = [-1.5f64, -0.5, 0.5, 1.5].iter().map(|d| (1.0 + 2.0 * d / s) as f32).collect();
    for isa in isas() {
        let y = layer_norm_via(
            isa,
            &[1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0],
            2,
            4,
            1e-5,
            Some(&[2.0; 4]),
            Some(&[1.0; 4]),
        );
        assert_close("ln", &y[..4], &row, 2e-7, 0.0);
        assert_eq!(&y[4..], &[1.0; 4]);
        // Large mean: 1e4 + [−1, 1] has mean 1e4, var 1 → (−1, 1) with eps 0.
        let y = layer_norm_via(isa, &[9999.0, 10001.0], 1, 2, 0.0, None, None);
        assert_eq!(y, vec![-1.0, 1.0]);
        // NaN in a row makes that row NaN.
        let y = layer_norm_via(isa, &[1.0, f32::NAN, 3.0], 1, 3, 1e-5, None, None);
        assert!(y.iter().all(|v| v.is_nan()));
    }
}

#[test]
fn layer_norm_random_vs_reference() {
    let mut rng = Rng(2);
    // (dims, number of trailing normalised axes, gamma, beta, offset of the data)
    let cases: &[(&[usize], usize, bool, bool, f32)] = &[
        (&[1, 1], 1, true, true, 0.0),
        (&[3, 7], 1, true, true, 0.0),
        (&[5, 768], 1, true, true, 0.0),
        (&[2, 13], 1, false, true, 3.0),
        (&[4, 31], 1, true, false, -50.0),
        (&[2, 3, 5], 2, true, true, 0.0),
        (&[3, 2, 9, 2], 3, false, false, 1000.0),
        (&[9], 1, true, true, 0.0),
    ];
    for &(dims, k, hg, hb, off) in cases {
        let n: usize = dims[dims.len() - k..].iter().product();
        let len: usize = dims.iter().product();
        let x: Vec<f32> = rng.vec(len, -2.0, 2.0).iter().map(|v| v + off).collect();
        let g = rng.vec(n, -2.0, 2.0);
        let b = rng.vec(n, -1.0, 1.0);
        let pd: Vec<usize> = dims[dims.len() - k..].to_vec();
        let mut inputs = vec![tensor(dims, &x)];
        if hg {
            inputs.push(tensor(&pd, &g));
        }
        if hb {
            inputs.push(tensor(&pd, &b));
        }
        let axes: Vec<usize> = (dims.len() - k..dims.len()).collect();
        let op = Op::FusedLayerNorm { axes, epsilon: 1e-5, has_gamma: hg, has_beta: hb };
        let want = reference_f32(&op, &inputs, dims);
        for isa in isas() {
            let got = layer_norm_via(isa, &x, len / n, n, 1e-5, hg.then_some(&g[..]), hb.then_some(&b[..]));
            // |y| ≲ 2·√n; a few f32 roundings of values of that size.
            assert_close(&format!("ln {dims:?} {}", isa.name()), &got, &want, 1e-6, 2e-6);
        }
    }
}

/// The layer norm of row `x` in f64 (two-pass mean and biased variance), then gamma and beta.
fn layer_norm_row_f64(x: &[f32], eps: f64, g: Option<&[f32]>, b: Option<&[f32]>) -> Vec<f32> {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = x.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    (0..x.len())
        .map(|i| {
            let gv = g.map_or(1.0, |g| f64::from(g[i]));
            let bv = b.map_or(0.0, |b| f64::from(b[i]));
            ((f64::from(x[i]) - mean) * rstd * gv + bv) as f32
        })
        .collect()
}

/// LayerNorm of a residual sum (the jit's merged adds + LayerNorm): `a + r`, and `(a + r) + p`
/// with `p` one row block repeated (position embeddings), against the f32 sum (added in that
/// order) normalised in f64; with and without the sum as a result, on one thread and split over
/// a 2-thread pool, rows longer than the kernel's block of rows and shorter ones.
#[test]
fn layer_norm_residual_vs_f64() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    let mut rng = Rng(31);
    for &(rows, n, three) in
        &[(1usize, 1usize, false), (3, 7, true), (36, 129, true), (70, 768, false), (9, 5000, true)]
    {
        let a = rng.vec(rows * n, -2.0, 2.0);
        let r: Vec<f32> = rng.vec(rows * n, -2.0, 2.0).iter().map(|v| v + 10.0).collect();
        // A third term of rows/3 rows (or 1), repeated down the rows.
        let p_rows = if rows % 3 == 0 { rows / 3 } else { 1 };
        let p = rng.vec(p_rows * n, -1.0, 1.0);
        let g = rng.vec(n, 0.5, 1.5);
        let b = rng.vec(n, -0.5, 0.5);
        let mut sum: Vec<f32> = a.iter().zip(&r).map(|(x, y)| x + y).collect();
        let mut terms: Vec<&[f32]> = vec![&a, &r];
        if three {
            for (i, s) in sum.iter_mut().enumerate() {
                *s += p[i % (p_rows * n)];
            }
            terms.push(&p);
        }
        let want: Vec<f32> = sum.chunks(n).flat_map(|row| layer_norm_row_f64(row, 1e-5, Some(&g), Some(&b))).collect();
        for isa in isas() {
            for pool_or in [None, Some(&pool)] {
                for keep in [false, true] {
                    let mut y = vec![f32::NAN; rows * n];
                    let mut s = vec![f32::NAN; rows * n];
                    let sv = keep.then_some(&mut s[..]);
                    layer_norm_residual_f32(isa, &terms, sv, &mut y, rows, n, 1e-5, Some(&g), Some(&b), pool_or);
                    let what = format!("residual ln {rows}x{n} {} pool={} keep={keep}", isa.name(), pool_or.is_some());
                    assert_close(&what, &y, &want, 1e-6, 2e-6);
                    if keep {
                        assert_eq!(s, sum, "{what}: the sum");
                    }
                }
            }
        }
    }
}

/// LayerNorm over a block of axes that is not trailing (x viewed as `[outer, n, inner]`, rows
/// strided by `inner`), against the reference; also through "jit" vs "interp" below.
#[test]
fn layer_norm_strided_vs_reference() {
    let mut rng = Rng(12);
    /// (dims, first normalised axis, number of axes, gamma, beta, offset)
    type Case = (&'static [usize], usize, usize, bool, bool, f32);
    let cases: &[Case] = &[
        (&[2, 3], 0, 1, true, true, 0.0),
        (&[4, 5, 3], 1, 1, true, true, 0.0),
        (&[2, 7, 300], 1, 1, true, false, 100.0),
        (&[3, 4, 5, 6], 1, 2, false, true, -20.0),
        (&[5, 2, 17], 0, 2, true, true, 0.0),
        (&[2, 64, 9], 1, 1, true, true, 1000.0),
        (&[1, 1, 1], 1, 1, true, true, 0.0),
    ];
    for &(dims, first, k, hg, hb, off) in cases {
        let n: usize = dims[first..first + k].iter().product();
        let inner: usize = dims[first + k..].iter().product();
        let len: usize = dims.iter().product();
        let x: Vec<f32> = rng.vec(len, -2.0, 2.0).iter().map(|v| v + off).collect();
        let g = rng.vec(n, -2.0, 2.0);
        let b = rng.vec(n, -1.0, 1.0);
        let pd: Vec<usize> = dims[first..first + k].to_vec();
        let mut inputs = vec![tensor(dims, &x)];
        if hg {
            inputs.push(tensor(&pd, &g));
        }
        if hb {
            inputs.push(tensor(&pd, &b));
        }
        let axes: Vec<usize> = (first..first + k).collect();
        let op = Op::FusedLayerNorm { axes, epsilon: 1e-5, has_gamma: hg, has_beta: hb };
        let want = reference_f32(&op, &inputs, dims);
        for isa in isas() {
            let mut got = vec![0f32; len];
            let (gg, bb) = (hg.then_some(&g[..]), hb.then_some(&b[..]));
            layer_norm_strided_f32(isa, &x, &mut got, len / (n * inner), n, inner, 1e-5, gg, bb, None);
            assert_close(&format!("strided ln {dims:?} from {first} {}", isa.name()), &got, &want, 1e-6, 2e-6);
        }
    }
    // By hand: x [2, 2] over axis 0 (columns (1, 3) and (2, 6)): means 2, 4; variances 1, 4;
    // y = (x − mean)/√(var + ε) → (−1, 1) and (−1, 1) up to ε.
    for isa in isas() {
        let mut y = [0f32; 4];
        layer_norm_strided_f32(isa, &[1.0, 2.0, 3.0, 6.0], &mut y, 1, 2, 2, 0.0, None, None, None);
        assert_eq!(y, [-1.0, -1.0, 1.0, 1.0]);
    }
}

// ------------------------------------------------------------------------------------------------
// GELU.

fn gelu_via(isa: FusedIsa, x: &[f32], exact: bool) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    gelu_f32(isa, x, &mut y, exact, None);
    y
}

#[test]
fn gelu_hand_values_and_specials() {
    for isa in isas() {
        // Φ(1) = 0.8413447460685429, Φ(−1) = 0.15865525393145707; Φ(−3) = 0.0013498980316301;
        // tanh form at 1: ½(1 + tanh(√(2/π)·1.044715)) = 0.8411919906082768.
        let y = gelu_via(isa, &[1.0, 0.0, -1.0, -3.0, 2.0, 3.0, -2.0, -0.5, 0.5], true);
        let want = [
            0.841_344_7f32,
            0.0,
            -0.158_655_25,
            -3.0 * 0.001_349_898,
            2.0 * 0.977_249_87,
            3.0 * 0.998_650_1,
            -2.0 * 0.022_750_132,
            -0.5 * 0.308_537_54,
            0.5 * 0.691_462_46,
        ];
        assert_close("gelu erf", &y, &want, 4e-7, 0.0);
        let y = gelu_via(isa, &[1.0, 0.0], false);
        assert_close("gelu tanh", &y, &[0.841_192, 0.0], 3e-7, 0.0);
        for exact in [true, false] {
            let y = gelu_via(isa, &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -100.0, 100.0, 1e30, -13.0], exact);
            assert_eq!(y[0], f32::INFINITY);
            assert!(y[1].is_nan() && y[2].is_nan(), "−∞·0 and NaN give NaN: {y:?}");
            assert_eq!(y[3], 0.0);
            assert_eq!(y[4], 100.0);
            assert_eq!(y[5], 1e30);
            // −13·Φ(−13) = −7.9e-38 and the tanh form's −13/(1 + e^{2u}) ≈ −1e-70: flushed to 0.
            assert_eq!(y[6], 0.0, "{} exact={exact}", isa.name());
        }
    }
}

#[test]
fn gelu_random_vs_reference() {
    let mut rng = Rng(3);
    for n in [1usize, 7, 8, 13, 1000, 4099] {
        let mut x = rng.vec(n, -12.0, 12.0);
        if n > 3 {
            x[0] = 0.0;
            x[1] = -5.5;
            x[2] = 7.0;
        }
        for exact in [true, false] {
            let want = reference_f32(&Op::FusedGelu { exact }, &[tensor(&[n], &x)], &[n]);
            for isa in isas() {
                let got = gelu_via(isa, &x, exact);
                // Relative accuracy ≲ 2e-6 where the reference is representable (below 1e-17 the
                // reference's 1 + erf(x/√2) rounds to 0 in f64, so allow that absolutely). The
                // tanh form rounds its exp argument 2u ≈ 0.07·x³ in f32: relative ≈ 6e-8·|2u|.
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    let xi = x[i];
                    let two_u = 1.6 * (xi + 0.044715 * xi * xi * xi);
                    let rel = if exact { 2e-6 } else { 2e-6 + 1.2e-7 * two_u.abs() };
                    let ok = (g - w).abs() <= 1e-15 + rel * w.abs();
                    assert!(ok, "gelu x={xi} exact={exact} {}: {g:e} vs {w:e}", isa.name());
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Attention.

#[derive(Clone, Debug)]
struct AttCase {
    layout: AttentionLayout,
    b: usize,
    h: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    dv: usize,
    scale: f64,
    causal: bool,
    /// 0: none, 1: bool [Sq, Skv], 2: bool [B, H, Sq, Skv], 3: additive [B, Sq, Skv], 4: additive
    /// [Sq, Skv] with −∞ holes, 5: additive [B, 1, Sq, Skv] `Where(j ≤ i ∧ key kept, 0, f32::MIN)`
    /// (GPT-2's exported mask), 6: the same as a Bool mask; the kept keys per batch (b mod 3):
    /// the first two thirds (right padding), all but the first 5 (left padding: rows 0..5 see no
    /// kept key), all.
    mask: u8,
    /// 0: none, 1: [H, Sq, Skv], 2: [Sq, Skv]
    bias: u8,
    lens: Option<Vec<(usize, usize)>>,
}

impl AttCase {
    fn dims(&self, heads: usize, seq: usize, dim: usize) -> Vec<usize> {
        match self.layout {
            AttentionLayout::Bhsd => vec![self.b, heads, seq, dim],
            AttentionLayout::Bshd => vec![self.b, seq, heads, dim],
        }
    }
}

/// Runs the case through the fused kernel (on `isa`) and the reference kernel; returns both.
fn attention_pair(c: &AttCase, isa: FusedIsa, rng: &mut Rng, amp: f32) -> (Vec<f32>, Vec<f32>) {
    let (qd, kd, vd) = (c.dims(c.h, c.sq, c.d), c.dims(c.hkv, c.skv, c.d), c.dims(c.hkv, c.skv, c.dv));
    let q = rng.vec(qd.iter().product(), -amp, amp);
    let k = rng.vec(kd.iter().product(), -amp, amp);
    let v = rng.vec(vd.iter().product(), -1.0, 1.0);
    let mut inputs = vec![tensor(&qd, &q), tensor(&kd, &k), tensor(&vd, &v)];
    let full = [c.b, c.h, c.sq, c.skv];
    let (mut bool_m, mut add_m, mut mdims4) = (Vec::new(), Vec::new(), [1usize; 4]);
    match c.mask {
        0 => {}
        1 | 2 => {
            let md: Vec<usize> = if c.mask == 1 { vec![c.sq, c.skv] } else { vec![c.b, c.h, c.sq, c.skv] };
            mdims4 = if c.mask == 1 { [1, 1, c.sq, c.skv] } else { full };
            bool_m = (0..md.iter().product()).map(|_| rng.below(4) != 0).collect();
            inputs.push(tensor(&md, &bool_m));
        }
        3 => {
            mdims4 = [c.b, 1, c.sq, c.skv];
            add_m = rng.vec(c.b * c.sq * c.skv, -3.0, 3.0);
            inputs.push(tensor(&[c.b, c.sq, c.skv], &add_m));
        }
        5 | 6 => {
            mdims4 = [c.b, 1, c.sq, c.skv];
            let kept = |b: usize, i: usize, j: usize| {
                let key = match b % 3 {
                    0 => j < c.skv * 2 / 3,
                    1 => j >= 5,
                    _ => true,
                };
                j <= i && key
            };
            let all = (0..c.b).flat_map(|b| (0..c.sq).flat_map(move |i| (0..c.skv).map(move |j| (b, i, j))));
            if c.mask == 5 {
                add_m = all.map(|(b, i, j)| if kept(b, i, j) { 0.0 } else { f32::MIN }).collect();
                inputs.push(tensor(&[c.b, 1, c.sq, c.skv], &add_m));
            } else {
                bool_m = all.map(|(b, i, j)| kept(b, i, j)).collect();
                inputs.push(tensor(&[c.b, 1, c.sq, c.skv], &bool_m));
            }
        }
        _ => {
            mdims4 = [1, 1, c.sq, c.skv];
            add_m = (0..c.sq * c.skv).map(|_| if rng.below(3) == 0 { f32::NEG_INFINITY } else { 0.0 }).collect();
            // Row 0 fully masked.
            add_m[..c.skv].fill(f32::NEG_INFINITY);
            inputs.push(tensor(&[c.sq, c.skv], &add_m));
        }
    }
    let (mut bias, mut bdims4) = (Vec::new(), [1usize; 4]);
    if c.bias != 0 {
        let bd: Vec<usize> = if c.bias == 1 { vec![c.h, c.sq, c.skv] } else { vec![c.sq, c.skv] };
        bdims4 = if c.bias == 1 { [1, c.h, c.sq, c.skv] } else { [1, 1, c.sq, c.skv] };
        bias = rng.vec(bd.iter().product(), -2.0, 2.0);
        inputs.push(tensor(&bd, &bias));
    }
    if let Some(l) = &c.lens {
        let ql: Vec<i32> = l.iter().map(|p| p.0 as i32).collect();
        let kl: Vec<i32> = l.iter().map(|p| p.1 as i32).collect();
        inputs.push(tensor(&[c.b], &ql));
        inputs.push(tensor(&[c.b], &kl));
    }
    let op = Op::FusedScaledDotProductAttention {
        layout: c.layout,
        scale: c.scale,
        causal: c.causal,
        has_mask: c.mask != 0,
        has_bias: c.bias != 0,
        has_seq_lens: c.lens.is_some(),
        quantized_matmuls: false,
    };
    let od = c.dims(c.h, c.sq, c.dv);
    let want = reference_f32(&op, &inputs, &od);
    let ms = broadcast_strides(mdims4, full).expect("mask strides");
    let mask = match c.mask {
        0 => AttentionMask::None,
        1 | 2 | 6 => AttentionMask::Bool(&bool_m, ms),
        _ => AttentionMask::Additive(&add_m, ms),
    };
    let p = AttentionParams {
        layout: c.layout,
        batch: c.b,
        heads: c.h,
        kv_heads: c.hkv,
        seq_q: c.sq,
        seq_kv: c.skv,
        head_dim: c.d,
        v_dim: c.dv,
        scale: if c.scale == 0.0 { 1.0 / (c.d as f32).sqrt() } else { c.scale as f32 },
        causal: c.causal,
        mask,
        bias: (c.bias != 0).then(|| (&bias[..], broadcast_strides(bdims4, full).expect("bias strides"))),
        seq_lens: c.lens.as_deref(),
        qkv_row_strides: None,
    };
    // NaN before: the kernel must write every value, padded and fully masked rows included.
    let mut got = vec![f32::NAN; od.iter().product()];
    assert!(attention_f32(isa, &p, &q, &k, &v, &mut got, None), "attention_f32 rejected {c:?}");
    (got, want)
}

fn base_case() -> AttCase {
    AttCase {
        layout: AttentionLayout::Bhsd,
        b: 1,
        h: 1,
        hkv: 1,
        sq: 1,
        skv: 1,
        d: 1,
        dv: 1,
        scale: 1.0,
        causal: false,
        mask: 0,
        bias: 0,
        lens: None,
    }
}

#[test]
fn attention_hand_values() {
    for isa in isas() {
        let run = |c: &AttCase, q: &[f32], k: &[f32], v: &[f32], mask: AttentionMask<'_>| -> Vec<f32> {
            let p = AttentionParams {
                layout: c.layout,
                batch: c.b,
                heads: c.h,
                kv_heads: c.hkv,
                seq_q: c.sq,
                seq_kv: c.skv,
                head_dim: c.d,
                v_dim: c.dv,
                scale: c.scale as f32,
                causal: c.causal,
                mask,
                bias: None,
                seq_lens: c.lens.as_deref(),
                qkv_row_strides: None,
            };
            let mut out = vec![0f32; c.b * c.h * c.sq * c.dv];
            assert!(attention_f32(isa, &p, q, k, v, &mut out, None));
            out
        };
        // q = k = 1, v = (10, 20), scale 1, causal → (10, 15) in both layouts (spec §7).
        for layout in [AttentionLayout::Bhsd, AttentionLayout::Bshd] {
            let c = AttCase { layout, sq: 2, skv: 2, causal: true, ..base_case() };
            assert_eq!(run(&c, &[1.0, 1.0], &[1.0, 1.0], &[10.0, 20.0], AttentionMask::None), vec![10.0, 15.0]);
        }
        // Bool mask [T, F] → 10; all-false → 0 (fully masked row).
        let c = AttCase { skv: 2, ..base_case() };
        let st = broadcast_strides([1, 1, 1, 2], [1, 1, 1, 2]).unwrap();
        assert_eq!(run(&c, &[1.0], &[1.0, 1.0], &[10.0, 20.0], AttentionMask::Bool(&[true, false], st)), vec![10.0]);
        assert_eq!(run(&c, &[1.0], &[1.0, 1.0], &[10.0, 20.0], AttentionMask::Bool(&[false, false], st)), vec![0.0]);
        let ninf = [f32::NEG_INFINITY; 2];
        assert_eq!(run(&c, &[1.0], &[1.0, 1.0], &[10.0, 20.0], AttentionMask::Additive(&ninf, st)), vec![0.0]);
        // Sequence lengths: batch 0 (q_len 1, kv_len 1), batch 1 (2, 2) → [10, 0, 40, 40].
        let c = AttCase { b: 2, sq: 2, skv: 2, lens: Some(vec![(1, 1), (2, 2)]), ..base_case() };
        assert_eq!(
            run(&c, &[1.0; 4], &[1.0; 4], &[10.0, 20.0, 30.0, 50.0], AttentionMask::None),
            vec![10.0, 0.0, 40.0, 40.0]
        );
        // GQA: 2 query heads share 1 kv head, scale 1/√2: head 0 scores (1/√2, 0), p0 = 1/(1+e^(−1/√2)).
        let c = AttCase { h: 2, hkv: 1, skv: 2, d: 2, dv: 2, scale: std::f64::consts::FRAC_1_SQRT_2, ..base_case() };
        let out = run(&c, &[1.0, 0.0, 0.0, 1.0], &[1.0, 0.0, 0.0, 1.0], &[1.0, 0.0, 0.0, 1.0], AttentionMask::None);
        let p = (1.0 / (1.0 + (-std::f64::consts::FRAC_1_SQRT_2).exp())) as f32;
        assert_close("gqa", &out, &[p, 1.0 - p, 1.0 - p, p], 3e-7, 0.0);
        // Causal with Sq = 3 > Skv = 2 (top-left): rows see keys {0}, {0, 1}, {0, 1}.
        let c = AttCase { sq: 3, skv: 2, causal: true, ..base_case() };
        assert_eq!(run(&c, &[0.0; 3], &[0.0; 2], &[2.0, 4.0], AttentionMask::None), vec![2.0, 3.0, 3.0]);
        // An infinite value on an excluded key (Bool mask, causal) does not reach the output:
        // row 0 sees key 0 only → 10; row 1 sees keys 0, 1 with equal scores → 15.
        let c = AttCase { skv: 3, ..base_case() };
        let st = broadcast_strides([1, 1, 1, 3], [1, 1, 1, 3]).unwrap();
        let v = [10.0, 20.0, f32::INFINITY];
        assert_eq!(run(&c, &[1.0], &[1.0; 3], &v, AttentionMask::Bool(&[true, true, false], st)), vec![15.0]);
        let c = AttCase { sq: 2, skv: 3, causal: true, ..base_case() };
        assert_eq!(run(&c, &[0.0; 2], &[0.0; 3], &v, AttentionMask::None), vec![10.0, 15.0]);
        // 40 query rows × 80 keys, d = 16, q = k = 0: every visible key weighs the same, so
        // causal row i averages v_0..v_i, v_j = (j, −j): row i outputs (i/2, −i/2).
        let (sq, skv) = (40, 80);
        let c = AttCase { sq, skv, d: 16, dv: 2, causal: true, ..base_case() };
        let v: Vec<f32> = (0..skv).flat_map(|j| [j as f32, -(j as f32)]).collect();
        let out = run(&c, &vec![0.0; sq * 16], &vec![0.0; skv * 16], &v, AttentionMask::None);
        let want: Vec<f32> = (0..sq).flat_map(|i| [i as f32 / 2.0, -(i as f32) / 2.0]).collect();
        assert_close("causal averages", &out, &want, 1e-6, 1e-6);
    }
}

#[test]
fn attention_random_vs_reference() {
    let mut rng = Rng(4);
    let l = |layout| AttCase { layout, ..base_case() };
    let mut cases = Vec::new();
    for layout in [AttentionLayout::Bhsd, AttentionLayout::Bshd] {
        cases.extend([
            AttCase { b: 2, h: 3, hkv: 3, sq: 5, skv: 7, d: 8, dv: 8, ..l(layout) },
            AttCase { b: 1, h: 4, hkv: 2, sq: 13, skv: 13, d: 16, dv: 5, scale: 0.0, causal: true, ..l(layout) },
            AttCase { b: 2, h: 6, hkv: 2, sq: 37, skv: 70, d: 12, dv: 12, causal: true, mask: 1, ..l(layout) },
            AttCase { b: 2, h: 2, hkv: 1, sq: 70, skv: 37, d: 9, dv: 11, causal: true, bias: 1, ..l(layout) },
            AttCase { b: 3, h: 2, hkv: 2, sq: 33, skv: 130, d: 64, dv: 64, mask: 3, bias: 2, scale: 0.0, ..l(layout) },
            AttCase { b: 2, h: 3, hkv: 1, sq: 40, skv: 150, d: 7, dv: 3, mask: 2, ..l(layout) },
            AttCase { b: 1, h: 2, hkv: 2, sq: 67, skv: 67, d: 31, dv: 17, mask: 4, causal: true, ..l(layout) },
            AttCase {
                b: 3,
                h: 2,
                hkv: 1,
                sq: 45,
                skv: 90,
                d: 20,
                dv: 20,
                lens: Some(vec![(45, 90), (10, 3), (0, 50)]),
                mask: 1,
                ..l(layout)
            },
            AttCase { b: 1, h: 1, hkv: 1, sq: 1, skv: 1, d: 1, dv: 1, ..l(layout) },
        ]);
    }
    for c in &cases {
        for isa in isas() {
            for amp in [1.0f32, 4.0] {
                let (got, want) = attention_pair(c, isa, &mut rng, amp);
                // Outputs are weighted means of v ∈ [−1, 1]: their error follows the f32 error of
                // the scores (d products of size amp², summed in f32).
                let abs = 2e-6 + 5e-8 * amp * amp * c.d as f32;
                assert_close(&format!("attention {c:?} {} amp {amp}", isa.name()), &got, &want, 2e-5, abs);
            }
        }
    }
}

#[test]
fn attention_long_sequence_online_softmax() {
    // 513 keys (9 key tiles), large scores (amp 6, d 64, scale 1: |s| up to ~2000) so the running
    // max moves between tiles, plus causal.
    let mut rng = Rng(5);
    for isa in isas() {
        for causal in [false, true] {
            let c = AttCase { b: 1, h: 2, hkv: 1, sq: 65, skv: 513, d: 64, dv: 64, causal, ..base_case() };
            let (got, want) = attention_pair(&c, isa, &mut rng, 6.0);
            assert_close(&format!("long {causal} {}", isa.name()), &got, &want, 1e-4, 1e-4);
        }
        // Causal over 300 positions: query blocks past the first key tile see whole tiles
        // before the diagonal (no per-score masking) and the diagonal tile (masked); alone, and
        // with a per-score Bool mask (which keeps every tile masked).
        for mask in [0, 1] {
            let c = AttCase { b: 2, h: 2, hkv: 1, sq: 300, skv: 300, d: 32, dv: 32, causal: true, mask, ..base_case() };
            let (got, want) = attention_pair(&c, isa, &mut rng, 4.0);
            assert_close(&format!("causal 300 mask {mask} {}", isa.name()), &got, &want, 1e-4, 1e-4);
        }
        // A causal and a padding mask combined into one `[B, 1, S, S]` tensor, additive with
        // f32::MIN fills (GPT-2's export) and Bool, with and without the op's own causal flag:
        // per query block, keys hidden from every row are skipped (rows 0..5 of the left-padded
        // batch see no kept key: the additive form weighs every key alike there, the Bool form
        // gives 0), and tiles neutral for every row skip the per-score pass.
        for mask in [5, 6] {
            for causal in [false, true] {
                for s in [40, 300] {
                    let c = AttCase { b: 3, h: 2, hkv: 1, sq: s, skv: s, d: 16, dv: 16, causal, mask, ..base_case() };
                    let (got, want) = attention_pair(&c, isa, &mut rng, 4.0);
                    assert_close(
                        &format!("combined mask {mask} causal {causal} s {s} {}", isa.name()),
                        &got,
                        &want,
                        1e-4,
                        1e-4,
                    );
                }
            }
        }
    }
}

#[test]
fn attention_large_bshd_operands_prefetched() {
    // BSHD operands of 2 MiB and more are prefetched a work item ahead (query rows) and a head
    // ahead (key and value rows, a share per query block), and head widths 32 and 64 are copied
    // by fixed-size moves: grouped heads (the next head often shares its kv head), per-batch
    // lengths (a batch with no query or no key), causal and a padding mask.
    let mut rng = Rng(6);
    let bshd = AttCase { layout: AttentionLayout::Bshd, ..base_case() };
    let cases = [
        AttCase { b: 4, h: 12, hkv: 4, sq: 200, skv: 200, d: 64, dv: 32, causal: true, ..bshd.clone() },
        AttCase {
            b: 3,
            h: 12,
            hkv: 12,
            sq: 160,
            skv: 170,
            d: 32,
            dv: 32,
            mask: 1,
            lens: Some(vec![(160, 170), (0, 20), (33, 0)]),
            ..bshd.clone()
        },
        AttCase { b: 4, h: 8, hkv: 4, sq: 256, skv: 257, d: 40, dv: 64, mask: 3, ..bshd },
    ];
    for c in &cases {
        let bytes = 4 * (c.b * c.sq * c.h * c.d + c.b * c.skv * c.hkv * (c.d + c.dv));
        assert!(bytes >= 2 << 20, "{c:?} is below the prefetch threshold");
        for isa in isas() {
            let (got, want) = attention_pair(c, isa, &mut rng, 2.0);
            assert_close(&format!("large {c:?} {}", isa.name()), &got, &want, 2e-5, 1e-5);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// End to end on "jit" vs "interp".

fn backends() -> &'static (Arc<dyn Backend>, Arc<dyn Backend>) {
    static B: std::sync::OnceLock<(Arc<dyn Backend>, Arc<dyn Backend>)> = std::sync::OnceLock::new();
    B.get_or_init(|| {
        let jit = tensorjit::backends::jit::JitBackend::constructor("parallelism=2").expect("jit");
        let interp = tensorjit::new_with_config("interp").expect("interp");
        (jit, interp)
    })
}

type Graph = dyn Fn(&tensorjit::Function, &[tensorjit::Value]) -> tensorjit::Result<Vec<tensorjit::Value>>;

/// Builds `graph` over parameters of `shapes` on both backends, runs it on `inputs`, returns the
/// (jit, interp) outputs as f32.
fn both(shapes: &[Shape], inputs: &[Buffer], graph: &Graph) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let (jit, interp) = backends();
    let run = |b: &Arc<dyn Backend>| -> Vec<Vec<f32>> {
        let builder = b.builder("fused");
        let f = builder.main();
        let params: Vec<tensorjit::Value> =
            shapes.iter().enumerate().map(|(i, s)| f.parameter(&format!("p{i}"), s.clone()).expect("param")).collect();
        let outs = graph(&f, &params).expect("graph");
        f.return_(&outs).expect("return");
        let e = builder.compile().expect("compile");
        let refs: Vec<&Buffer> = inputs.iter().collect();
        e.execute(&refs, &[])
            .expect("execute")
            .iter()
            .map(|o| match o.shape().dtype {
                DType::Float32 => o.to_vec::<f32>().expect("f32"),
                DType::BFloat16 => o.to_vec::<bf16>().expect("bf16").iter().map(|v| v.to_f32()).collect(),
                DType::Float16 => o.to_vec::<f16>().expect("f16").iter().map(|v| v.to_f32()).collect(),
                d => panic!("unexpected dtype {d}"),
            })
            .collect()
    };
    (run(jit), run(interp))
}

fn buf_f32(v: &[f32], dims: &[usize], dt: DType) -> Buffer {
    match dt {
        DType::Float32 => Buffer::from_slice(v, dims).expect("buffer"),
        DType::BFloat16 => {
            Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(), dims).expect("buffer")
        }
        _ => Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(), dims).expect("buffer"),
    }
}

fn shape(dt: DType, dims: &[usize]) -> Shape {
    Shape::new(dt, &dims.iter().map(|&d| d as i64).collect::<Vec<_>>())
}

/// Tolerance of one result: f32 as the kernel tests, half types one rounding step apart.
fn tol(dt: DType) -> (f32, f32) {
    match dt {
        DType::Float32 => (2e-5, 2e-6),
        DType::BFloat16 => (1.0 / 128.0, 1e-6),
        _ => (1.0 / 1024.0, 1e-6),
    }
}

#[test]
fn jit_end_to_end_matches_interp() {
    let mut rng = Rng(6);
    for dt in [DType::Float32, DType::BFloat16, DType::Float16] {
        let (rel, abs) = tol(dt);
        // Softmax (last axis and axis 0), GELU both forms, LayerNorm with gamma/beta.
        let dims = [37usize, 129];
        let x = rng.vec(37 * 129, -8.0, 8.0);
        let g = rng.vec(129, 0.5, 1.5);
        let bt = rng.vec(129, -0.5, 0.5);
        let inputs = [buf_f32(&x, &dims, dt), buf_f32(&g, &[129], dt), buf_f32(&bt, &[129], dt)];
        let shapes = [shape(dt, &dims), shape(dt, &[129]), shape(dt, &[129])];
        // Every fused op takes the half types too (computed in f32, rounded once, §9).
        let (a, b) = both(&shapes, &inputs, &|f, p| {
            Ok(vec![
                f.fused_gelu(p[0], true)?,
                f.fused_gelu(p[0], false)?,
                f.fused_softmax(p[0], 1)?,
                f.fused_softmax(p[0], 0)?,
                f.fused_layer_norm(p[0], &[-1], 1e-5, Some(p[1]), Some(p[2]))?,
                f.fused_layer_norm(p[0], &[1], 1e-3, None, None)?,
                // Over axis 0: the strided kernel (37 rows of 129 columns, stride 129).
                f.fused_layer_norm(p[0], &[0], 1e-5, None, None)?,
            ])
        });
        assert_eq!(a.len(), 7);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_close(&format!("{dt} output {i}"), x, y, rel, abs);
        }
        // Attention: BSHD, GQA, causal, bool mask, per-batch lengths.
        let (bb, s, h, hkv, d) = (2usize, 40usize, 4usize, 2usize, 16usize);
        let q = rng.vec(bb * s * h * d, -1.0, 1.0);
        let k = rng.vec(bb * s * hkv * d, -1.0, 1.0);
        let v = rng.vec(bb * s * hkv * d, -1.0, 1.0);
        let mask: Vec<bool> = (0..s * s).map(|_| rng.below(5) != 0).collect();
        let inputs = [
            buf_f32(&q, &[bb, s, h, d], dt),
            buf_f32(&k, &[bb, s, hkv, d], dt),
            buf_f32(&v, &[bb, s, hkv, d], dt),
            Buffer::from_slice(&mask, &[s, s]).expect("mask"),
            Buffer::from_slice(&[40i32, 17], &[2]).expect("ql"),
            Buffer::from_slice(&[40i32, 23], &[2]).expect("kl"),
        ];
        let shapes = [
            shape(dt, &[bb, s, h, d]),
            shape(dt, &[bb, s, hkv, d]),
            shape(dt, &[bb, s, hkv, d]),
            shape(DType::Bool, &[s, s]),
            shape(DType::Int32, &[2]),
            shape(DType::Int32, &[2]),
        ];
        let (a, b) = both(&shapes, &inputs, &|f, p| {
            let cfg = AttentionConfig {
                scale: 0.0,
                causal: true,
                mask: Some(p[3]),
                bias: None,
                seq_lens: Some((p[4], p[5])),
                quantized_matmuls: false,
            };
            Ok(vec![f.fused_scaled_dot_product_attention(p[0], p[1], p[2], AttentionLayout::Bshd, &cfg)?.0])
        });
        assert_close(&format!("{dt} attention"), &a[0], &b[0], rel, abs);
        // BHSD with an additive mask that has a batch axis (the `[B, 1, 1, S]` padding form,
        // some keys pushed far down) and a bias per batch element and head: the half types run
        // one batch element at a time, each with its own part of the mask and the bias: two
        // elements on two threads one element per thread, three with each element split.
        for bb in [2usize, 3] {
            let q = rng.vec(bb * h * s * d, -1.0, 1.0);
            let k = rng.vec(bb * hkv * s * d, -1.0, 1.0);
            let v = rng.vec(bb * hkv * s * d, -1.0, 1.0);
            let add: Vec<f32> = (0..bb * s).map(|i| if i % 7 == 3 { -1e4 } else { 0.25 * (i % 3) as f32 }).collect();
            let bias = rng.vec(bb * h * s * s, -0.5, 0.5);
            let inputs = [
                buf_f32(&q, &[bb, h, s, d], dt),
                buf_f32(&k, &[bb, hkv, s, d], dt),
                buf_f32(&v, &[bb, hkv, s, d], dt),
                buf_f32(&add, &[bb, 1, 1, s], dt),
                buf_f32(&bias, &[bb, h, s, s], dt),
            ];
            let shapes = [
                shape(dt, &[bb, h, s, d]),
                shape(dt, &[bb, hkv, s, d]),
                shape(dt, &[bb, hkv, s, d]),
                shape(dt, &[bb, 1, 1, s]),
                shape(dt, &[bb, h, s, s]),
            ];
            let (a, b) = both(&shapes, &inputs, &|f, p| {
                let cfg = AttentionConfig {
                    scale: 0.3,
                    causal: false,
                    mask: Some(p[3]),
                    bias: Some(p[4]),
                    seq_lens: None,
                    quantized_matmuls: false,
                };
                Ok(vec![f.fused_scaled_dot_product_attention(p[0], p[1], p[2], AttentionLayout::Bhsd, &cfg)?.0])
            });
            assert_close(
                &format!("{dt} attention, BHSD, additive mask and bias per batch, batch {bb}"),
                &a[0],
                &b[0],
                rel,
                abs,
            );
        }
    }
}

/// The plan of a compiled fused graph names the fast kernels (and the path from the environment).
#[test]
fn jit_plan_uses_fused_kernels() {
    let dir = std::env::temp_dir().join(format!("tensorjit-fused-plan-{}", std::process::id()));
    let jit = tensorjit::backends::jit::JitBackend::constructor(&format!("dump={}", dir.display())).expect("jit");
    let builder = jit.builder("plan");
    let f = builder.main();
    let x = f.parameter("x", Shape::new(DType::Float32, &[4, 16])).expect("x");
    let q = f.parameter("q", Shape::new(DType::Float32, &[1, 2, 8, 4])).expect("q");
    let outs = vec![
        f.fused_softmax(x, 1).expect("softmax"),
        f.fused_gelu(x, true).expect("gelu"),
        f.fused_layer_norm(x, &[1], 1e-5, None, None).expect("ln"),
        f.fused_layer_norm(x, &[0], 1e-5, None, None).expect("ln axis 0"),
        f.fused_scaled_dot_product_attention(q, q, q, AttentionLayout::Bhsd, &AttentionConfig::default())
            .expect("att")
            .0,
    ];
    f.return_(&outs).expect("return");
    builder.compile().expect("compile");
    let plan = take_plans(&dir);
    let env_set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
    let want_isa = if env_set("TENSORJIT_DISABLE_AVX2") || !FusedIsa::avx2_available() {
        "generic"
    } else if env_set("TENSORJIT_DISABLE_AVX512") || !FusedIsa::avx512_available() {
        "avx2"
    } else {
        "avx512"
    };
    for what in [
        "fused softmax",
        "fused gelu erf",
        "fused layer norm over axes 1..2",
        "fused layer norm over axes 0..1",
        "fused flash attention",
    ] {
        assert!(plan.contains(what), "plan lacks {what:?}:\n{plan}");
    }
    assert!(plan.contains(&format!("Float32 {want_isa}")), "plan does not use the {want_isa} path:\n{plan}");
}

/// The plan's merges (jit `merge`): a dense followed by the tanh GELU runs as one GEMM with the
/// GELU in its epilogue; a residual add feeding a LayerNorm runs inside the LayerNorm step (with
/// the sum kept when another op reads it). The results against the f64 formulas written here.
#[test]
fn jit_merges_tanh_gelu_into_dense_and_residual_add_into_layer_norm() {
    let dir = std::env::temp_dir().join(format!("tensorjit-fused-merge-{}", std::process::id()));
    let jit = tensorjit::backends::jit::JitBackend::constructor(&format!("dump={},parallelism=2", dir.display()))
        .expect("jit");
    let (m, k, n) = (33usize, 40usize, 96usize);
    let mut rng = Rng(41);
    let x = rng.vec(m * k, -2.0, 2.0);
    let w = rng.vec(k * n, -0.4, 0.4);
    let bias = rng.vec(n, -0.5, 0.5);
    let r = rng.vec(m * n, -1.0, 1.0);
    let g = rng.vec(n, 0.5, 1.5);
    let bt = rng.vec(n, -0.5, 0.5);
    let builder = jit.builder("merge");
    let f = builder.main();
    let xp = f.parameter("x", shape(DType::Float32, &[m, k])).expect("x");
    let rp = f.parameter("r", shape(DType::Float32, &[m, n])).expect("r");
    let wc = f.constant(&w, &[k, n]).expect("w");
    let bc = f.constant(&bias, &[n]).expect("bias");
    let gc = f.constant(&g, &[n]).expect("gamma");
    let btc = f.constant(&bt, &[n]).expect("beta");
    let dense = f.fused_dense(xp, wc, Some(bc), Activation::None, DenseLayout::InputOutputs).expect("dense");
    let gelu = f.fused_gelu(dense, false).expect("gelu");
    // The sum also feeds a later add, so the LayerNorm step keeps it.
    let sum = f.binary(BinaryOp::Add, gelu, rp).expect("add");
    let ln = f.fused_layer_norm(sum, &[-1], 1e-5, Some(gc), Some(btc)).expect("ln");
    let out = f.binary(BinaryOp::Add, ln, sum).expect("add 2");
    f.return_(&[out]).expect("return");
    let exe = builder.compile().expect("compile");
    let plan = take_plans(&dir);
    assert!(plan.contains("+bias gelutanh"), "the GELU is not in the GEMM epilogue:\n{plan}");
    assert!(
        plan.contains("of a residual add (2 terms, sum kept)"),
        "the add is not merged into the LayerNorm:\n{plan}"
    );
    assert!(!plan.contains("fused gelu"), "a separate GELU step is left:\n{plan}");
    let ins = [Buffer::from_slice(&x, &[m, k]).expect("x"), Buffer::from_slice(&r, &[m, n]).expect("r")];
    let got = exe.execute(&[&ins[0], &ins[1]], &[]).expect("execute")[0].to_vec::<f32>().expect("f32");
    // f64: y = gelu_tanh(x·w + b) + r; z = LN(y)·g + beta + y.
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let mut want = vec![0f32; m * n];
    for i in 0..m {
        let y: Vec<f64> = (0..n)
            .map(|j| {
                let d =
                    (0..k).map(|t| f64::from(x[i * k + t]) * f64::from(w[t * n + j])).sum::<f64>() + f64::from(bias[j]);
                0.5 * d * (1.0 + (c * (d + 0.044715 * d * d * d)).tanh()) + f64::from(r[i * n + j])
            })
            .collect();
        let mean = y.iter().sum::<f64>() / n as f64;
        let var = y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        for j in 0..n {
            let z = (y[j] - mean) / (var + 1e-5).sqrt() * f64::from(g[j]) + f64::from(bt[j]) + y[j];
            want[i * n + j] = z as f32;
        }
    }
    assert_close("dense + tanh gelu + residual ln", &got, &want, 1e-4, 1e-4);
}

/// The residual-add merge in BF16 and F16: `((x + r) + r2)` feeding a LayerNorm, the sum also
/// returned. The sum must equal the per-add rounded half sums bit for bit (each add rounds once,
/// §9), and y the f64 LayerNorm of that sum within one half-type rounding; checked for the jit
/// step (which must be the merged one) and the interpreter.
#[test]
fn jit_merges_residual_add_into_half_layer_norm() {
    let dir = std::env::temp_dir().join(format!("tensorjit-fused-merge-half-{}", std::process::id()));
    let jit = tensorjit::backends::jit::JitBackend::constructor(&format!("dump={},parallelism=2", dir.display()))
        .expect("jit");
    let interp = tensorjit::new_with_config("interp").expect("interp");
    // 300 rows of 96: several row blocks, so both threads take some.
    let (m, n) = (300usize, 96usize);
    let mut rng = Rng(77);
    let x = rng.vec(m * n, -2.0, 2.0);
    let r = rng.vec(m * n, -1.0, 1.0);
    let r2 = rng.vec(m * n, -0.5, 0.5);
    let g = rng.vec(n, 0.5, 1.5);
    let bt = rng.vec(n, -0.5, 0.5);
    for dt in [DType::BFloat16, DType::Float16] {
        // The half value of an f32 (round to nearest even), back in f32.
        let q = |v: f32| if dt == DType::BFloat16 { bf16::from_f32(v).to_f32() } else { f16::from_f32(v).to_f32() };
        let qv = |v: &[f32]| -> Vec<f32> { v.iter().map(|&e| q(e)).collect() };
        let (xq, rq, r2q, gq, bq) = (qv(&x), qv(&r), qv(&r2), qv(&g), qv(&bt));
        let want_sum: Vec<f32> = (0..m * n).map(|i| q(q(xq[i] + rq[i]) + r2q[i])).collect();
        let mut want_y = vec![0f32; m * n];
        for (row, out) in want_sum.chunks_exact(n).zip(want_y.chunks_exact_mut(n)) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
            let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n as f64;
            for j in 0..n {
                let z = (f64::from(row[j]) - mean) / (var + 1e-5).sqrt() * f64::from(gq[j]) + f64::from(bq[j]);
                out[j] = z as f32;
            }
        }
        let ins = [buf_f32(&x, &[m, n], dt), buf_f32(&r, &[m, n], dt), buf_f32(&r2, &[m, n], dt)];
        let (gb, bb) = (buf_f32(&g, &[n], dt), buf_f32(&bt, &[n], dt));
        for (label, b) in [("jit", &jit), ("interp", &interp)] {
            let builder = b.builder("merge_half");
            let f = builder.main();
            let p: Vec<tensorjit::Value> =
                ["x", "r", "r2"].iter().map(|name| f.parameter(name, shape(dt, &[m, n])).expect("param")).collect();
            let gp = f.parameter("g", shape(dt, &[n])).expect("g");
            let bp = f.parameter("b", shape(dt, &[n])).expect("b");
            let s1 = f.binary(BinaryOp::Add, p[0], p[1]).expect("add");
            let sum = f.binary(BinaryOp::Add, s1, p[2]).expect("add 2");
            let ln = f.fused_layer_norm(sum, &[-1], 1e-5, Some(gp), Some(bp)).expect("ln");
            f.return_(&[ln, sum]).expect("return");
            let exe = builder.compile().expect("compile");
            if label == "jit" {
                let plan = take_plans(&dir);
                assert!(
                    plan.contains("of a residual add (3 terms, sum kept)") && plan.contains(&format!("{dt:?}")),
                    "the {dt} adds are not merged into the LayerNorm:\n{plan}"
                );
            }
            let outs = exe.execute(&[&ins[0], &ins[1], &ins[2], &gb, &bb], &[]).expect("execute");
            let to_f32 = |o: &Buffer| -> Vec<f32> {
                match dt {
                    DType::BFloat16 => o.to_vec::<bf16>().expect("bf16").iter().map(|v| v.to_f32()).collect(),
                    _ => o.to_vec::<f16>().expect("f16").iter().map(|v| v.to_f32()).collect(),
                }
            };
            let (y, sum) = (to_f32(&outs[0]), to_f32(&outs[1]));
            for (i, (a, b)) in sum.iter().zip(&want_sum).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{label} {dt} sum element {i}: {a} vs {b}");
            }
            let (rel, abs) = tol(dt);
            assert_close(&format!("{label} {dt} residual layer norm"), &y, &want_y, rel, abs);
        }
    }
}

/// Reruns the end-to-end tests in a child process with `TENSORJIT_DISABLE_AVX2=1` (portable path).
#[test]
fn jit_generic_path_in_child_process() {
    if std::env::var_os("TENSORJIT_DISABLE_AVX2").is_some() {
        return; // already the child
    }
    let exe = std::env::current_exe().expect("test binary");
    for test in [
        "jit_end_to_end_matches_interp",
        "jit_plan_uses_fused_kernels",
        "jit_merges_tanh_gelu_into_dense_and_residual_add_into_layer_norm",
        "jit_merges_residual_add_into_half_layer_norm",
    ] {
        let out = std::process::Command::new(&exe)
            .args(["--exact", test, "--test-threads=1"])
            .env("TENSORJIT_DISABLE_AVX2", "1")
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child {test} failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("1 passed"), "child did not run {test}:\n{text}");
    }
}

/// A LayerNorm output of more than 4 MiB (the AVX2 path then writes y with non-temporal
/// stores), into a y that is not 32-byte aligned, rows of 1503 values (not a multiple of 8 or
/// of the 256-value blocks), split over a 2-thread pool: against the two-pass f64 formula.
#[test]
fn layer_norm_large_output_vs_f64() {
    let (rows, n) = (700usize, 1503usize);
    let mut rng = Rng(21);
    let x: Vec<f32> = rng.vec(rows * n, -2.0, 2.0).iter().map(|v| v + 100.0).collect();
    let g = rng.vec(n, -2.0, 2.0);
    let b = rng.vec(n, -1.0, 1.0);
    let mut want = vec![0f32; rows * n];
    for (xr, wr) in x.chunks_exact(n).zip(want.chunks_exact_mut(n)) {
        let mean = xr.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
        let var = xr.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n as f64;
        let r = 1.0 / (var + 1e-5).sqrt();
        for (((w, &xv), &gv), &bv) in wr.iter_mut().zip(xr).zip(&g).zip(&b) {
            *w = ((f64::from(xv) - mean) * r * f64::from(gv) + f64::from(bv)) as f32;
        }
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    for isa in isas() {
        let mut buf = vec![0f32; rows * n + 8];
        // Start y one float past a 32-byte boundary (Vec<f32> is only 4-byte aligned).
        let off = buf.as_ptr().align_offset(32) + 1;
        let y = &mut buf[off..off + rows * n];
        layer_norm_f32(isa, &x, y, rows, n, 1e-5, Some(&g), Some(&b), Some(&pool));
        assert_close(&format!("large ln {}", isa.name()), y, &want, 1e-6, 2e-6);
    }
}

/// Runs one head of attention (`sq` query rows, keys/values from `k` and v_j[c] = j + c, head
/// dim 16, value dim 9, scale 0.25, no causal) with `mask` on every ISA and checks each row:
/// NaN for `nan_rows`, 0 for `zero_rows`, else the mean of v over the keys, (skv − 1)/2 + c
/// (q·k is 0 there, so the weights are uniform).
fn check_uniform_rows(
    q: &[f32],
    k: &[f32],
    skv: usize,
    mask: AttentionMask<'_>,
    nan_rows: &[usize],
    zero_rows: &[usize],
) {
    let (d, dv) = (16, 9);
    let sq = q.len() / d;
    let v: Vec<f32> = (0..skv).flat_map(|j| (0..dv).map(move |c| (j + c) as f32)).collect();
    let p = AttentionParams {
        layout: AttentionLayout::Bhsd,
        batch: 1,
        heads: 1,
        kv_heads: 1,
        seq_q: sq,
        seq_kv: skv,
        head_dim: d,
        v_dim: dv,
        scale: 0.25,
        causal: false,
        mask,
        bias: None,
        seq_lens: None,
        qkv_row_strides: None,
    };
    for isa in isas() {
        let mut out = vec![-7f32; sq * dv];
        assert!(attention_f32(isa, &p, q, k, &v, &mut out, None));
        for i in 0..sq {
            for c in 0..dv {
                let got = out[i * dv + c];
                if nan_rows.contains(&i) {
                    assert!(got.is_nan(), "{} row {i} col {c}: {got} is not NaN", isa.name());
                } else if zero_rows.contains(&i) {
                    assert_eq!(got, 0.0, "{} fully masked row {i} col {c}", isa.name());
                } else {
                    let want = (skv - 1) as f32 / 2.0 + c as f32;
                    assert!((got - want).abs() <= 1e-5 * want, "{} row {i} col {c}: {got} vs {want}", isa.name());
                }
            }
        }
    }
}

#[test]
fn attention_nan_and_infinite_scores_stay_in_their_rows() {
    // 40 query rows, 20 keys, q = k = 0 (all scores 0, uniform weights): every row outputs the
    // mean 9.5 + c, except row 5 (a NaN in q → NaN scores → NaN row), row 9 (an additive +∞ on
    // key 2 → ∞ − ∞ in the softmax → NaN row) and row 33 (every key −∞ → 0).
    let (sq, skv, d) = (40, 20, 16);
    let mut q = vec![0.0f32; sq * d];
    q[5 * d + 3] = f32::NAN;
    let k = vec![0.0f32; skv * d];
    let mut add = vec![0.0f32; sq * skv];
    add[9 * skv + 2] = f32::INFINITY;
    add[33 * skv..34 * skv].fill(f32::NEG_INFINITY);
    let st = broadcast_strides([1, 1, sq, skv], [1, 1, sq, skv]).unwrap();
    check_uniform_rows(&q, &k, skv, AttentionMask::Additive(&add, st), &[5, 9], &[33]);
}

#[test]
fn attention_nan_and_overflow_without_mask_across_tiles() {
    // No mask (the AVX2 path takes each tile's maximum from the Q·Kᵀ micro-kernel), 300 keys
    // (three tiles), 40 query rows, q = k = 0 except: row 5 has a NaN in q (every score NaN);
    // row 11 scores +∞ on key 150 only (1e30·1e30 overflows; tile 2); row 13 scores ±∞ or NaN
    // on key 50 only (1e30·1e30 + 1e30·(−1e30): ∞ − ∞ with separate roundings, +∞ through a
    // fused multiply-add; tile 1, later tiles normal). Those rows are NaN; every other row
    // outputs the mean 149.5 + c.
    let (sq, skv, d) = (40, 300, 16);
    let mut q = vec![0.0f32; sq * d];
    q[5 * d + 3] = f32::NAN;
    q[11 * d] = 1e30;
    q[13 * d + 1] = 1e30;
    q[13 * d + 2] = 1e30;
    let mut k = vec![0.0f32; skv * d];
    k[150 * d] = 1e30;
    k[50 * d + 1] = 1e30;
    k[50 * d + 2] = -1e30;
    check_uniform_rows(&q, &k, skv, AttentionMask::None, &[5, 11, 13], &[]);
}

#[test]
fn attention_nan_score_among_excluded_keys_is_a_nan_row() {
    // 8 query rows, 20 keys, q = k = 0, Bool mask: row 3 has a NaN in q (NaN scores) and sees
    // key 4 only (the others are −∞, so a maximum that skips NaN finds only −∞ and would take
    // the row for fully masked): NaN row; row 6 sees no key: 0; the other rows see every key.
    let (sq, skv, d) = (8, 20, 16);
    let mut q = vec![0.0f32; sq * d];
    q[3 * d + 3] = f32::NAN;
    let k = vec![0.0f32; skv * d];
    let mut keep = vec![true; sq * skv];
    keep[3 * skv..4 * skv].fill(false);
    keep[3 * skv + 4] = true;
    keep[6 * skv..7 * skv].fill(false);
    let st = broadcast_strides([1, 1, sq, skv], [1, 1, sq, skv]).unwrap();
    check_uniform_rows(&q, &k, skv, AttentionMask::Bool(&keep, st), &[3], &[6]);
}

/// Half-type attention over an empty batch returns an empty result (no division by the batch).
#[test]
fn half_attention_of_an_empty_batch_is_empty() {
    for dt in [DType::BFloat16, DType::Float16] {
        let dims = [0usize, 2, 8, 4];
        let shapes = [shape(dt, &dims), shape(dt, &dims), shape(dt, &dims)];
        let inputs = [buf_f32(&[], &dims, dt), buf_f32(&[], &dims, dt), buf_f32(&[], &dims, dt)];
        let (a, b) = both(&shapes, &inputs, &|f, p| {
            let cfg = AttentionConfig {
                scale: 0.0,
                causal: false,
                mask: None,
                bias: None,
                seq_lens: None,
                quantized_matmuls: false,
            };
            Ok(vec![f.fused_scaled_dot_product_attention(p[0], p[1], p[2], AttentionLayout::Bhsd, &cfg)?.0])
        });
        assert!(a[0].is_empty() && b[0].is_empty(), "{dt}: {} / {} values", a[0].len(), b[0].len());
    }
}
