//! DotGeneral and FusedDense on the "jit" backend's GEMM kernels: results against a naive f64
//! triple loop written here (every axis arrangement: transposed operands, contraction on axis 0,
//! several batch and contracting axes, sizes 0, 1 and primes, every supported dtype), FusedDense
//! in both weight layouts with each activation against the formulas of §5, the plan dump naming
//! the GEMM kernel, and constant weights packed at compile time staying right across repeated and
//! concurrent executions.
//!
//! Run with `cargo test --test jit_dot`.

use std::sync::Arc;

#[path = "common/jit.rs"]
mod jit_support;

use half::{bf16, f16};
use jit_support::{backend, compile, run};
use tensorjit::api::DotConfig;
use tensorjit::backends::jit::{JitBackend, JitExecutable};
use tensorjit::ir::op::{Activation, DenseLayout};
use tensorjit::{Buffer, DType, Function, Shape, Value};

/// Deterministic values, multiples of 1/4 in [-2, 2]: exact in bf16 and f16, and every product and
/// every sum here is exact in f32, so f32/f64 results must match the f64 loop exactly.
fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 37 + seed * 11 + 5) % 17) as f64 / 4.0 - 2.0).collect()
}

fn buffer(dt: DType, v: &[f64], dims: &[usize]) -> Buffer {
    match dt {
        DType::Float32 => Buffer::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), dims),
        DType::Float64 => Buffer::from_slice(v, dims),
        DType::BFloat16 => Buffer::from_slice(&v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>(), dims),
        DType::Float16 => Buffer::from_slice(&v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>(), dims),
        DType::Int8 => Buffer::from_slice(&v.iter().map(|&x| x as i8).collect::<Vec<_>>(), dims),
        d => panic!("no buffer for {d}"),
    }
    .expect("buffer")
}

fn to_f64(b: &Buffer) -> Vec<f64> {
    match b.dtype() {
        DType::Float32 => b.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect(),
        DType::Float64 => b.to_vec::<f64>().unwrap(),
        DType::BFloat16 => b.to_vec::<bf16>().unwrap().into_iter().map(f64::from).collect(),
        DType::Float16 => b.to_vec::<f16>().unwrap().into_iter().map(f64::from).collect(),
        DType::Int8 => b.to_vec::<i8>().unwrap().into_iter().map(f64::from).collect(),
        DType::Int16 => b.to_vec::<i16>().unwrap().into_iter().map(f64::from).collect(),
        DType::Int32 => b.to_vec::<i32>().unwrap().into_iter().map(f64::from).collect(),
        d => panic!("no conversion for {d}"),
    }
}

/// One DotGeneral configuration.
#[derive(Clone, Debug)]
struct Case {
    ld: Vec<usize>,
    lc: Vec<usize>,
    lb: Vec<usize>,
    rd: Vec<usize>,
    rc: Vec<usize>,
    rb: Vec<usize>,
}

fn case(ld: &[usize], lc: &[usize], lb: &[usize], rd: &[usize], rc: &[usize], rb: &[usize]) -> Case {
    Case { ld: ld.to_vec(), lc: lc.to_vec(), lb: lb.to_vec(), rd: rd.to_vec(), rc: rc.to_vec(), rb: rb.to_vec() }
}

/// Row-major flat index of `idx` in `dims`.
fn flat(dims: &[usize], idx: &[usize]) -> usize {
    dims.iter().zip(idx).fold(0, |acc, (&d, &i)| acc * d + i)
}

/// Every index tuple of `dims` in row-major order.
fn all_indices(dims: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for &d in dims {
        out = out.into_iter().flat_map(|p: Vec<usize>| (0..d).map(move |i| [p.clone(), vec![i]].concat())).collect();
    }
    out
}

/// The naive definition (spec §4.8): output `[batch…, lhs free…, rhs free…]`, each element the sum
/// over all contracting index tuples. Returns (output dims, values).
fn naive(c: &Case, l: &[f64], r: &[f64]) -> (Vec<usize>, Vec<f64>) {
    let lfree: Vec<usize> = (0..c.ld.len()).filter(|a| !c.lc.contains(a) && !c.lb.contains(a)).collect();
    let rfree: Vec<usize> = (0..c.rd.len()).filter(|a| !c.rc.contains(a) && !c.rb.contains(a)).collect();
    let bdims: Vec<usize> = c.lb.iter().map(|&a| c.ld[a]).collect();
    let lfd: Vec<usize> = lfree.iter().map(|&a| c.ld[a]).collect();
    let rfd: Vec<usize> = rfree.iter().map(|&a| c.rd[a]).collect();
    let cdims: Vec<usize> = c.lc.iter().map(|&a| c.ld[a]).collect();
    let out_dims = [bdims.clone(), lfd.clone(), rfd.clone()].concat();
    let mut out = Vec::new();
    for bi in all_indices(&bdims) {
        for li in all_indices(&lfd) {
            for ri in all_indices(&rfd) {
                let mut s = 0.0;
                for ci in all_indices(&cdims) {
                    let mut lidx = vec![0; c.ld.len()];
                    let mut ridx = vec![0; c.rd.len()];
                    for (j, &a) in c.lb.iter().enumerate() {
                        lidx[a] = bi[j];
                    }
                    for (j, &a) in c.rb.iter().enumerate() {
                        ridx[a] = bi[j];
                    }
                    for (j, &a) in lfree.iter().enumerate() {
                        lidx[a] = li[j];
                    }
                    for (j, &a) in rfree.iter().enumerate() {
                        ridx[a] = ri[j];
                    }
                    for (j, &a) in c.lc.iter().enumerate() {
                        lidx[a] = ci[j];
                    }
                    for (j, &a) in c.rc.iter().enumerate() {
                        ridx[a] = ci[j];
                    }
                    s += l[flat(&c.ld, &lidx)] * r[flat(&c.rd, &ridx)];
                }
                out.push(s);
            }
        }
    }
    (out_dims, out)
}

/// Runs `c` on the jit backend with inputs of dtype `dt` (output `out` if given) and returns the
/// output dims and values.
fn run_dot(
    b: &Arc<JitBackend>,
    c: &Case,
    dt: DType,
    out: Option<DType>,
    l: &[f64],
    r: &[f64],
) -> (Vec<usize>, Vec<f64>) {
    let e = compile(b, |f| {
        let ld: Vec<i64> = c.ld.iter().map(|&d| d as i64).collect();
        let rd: Vec<i64> = c.rd.iter().map(|&d| d as i64).collect();
        let x = f.parameter("l", Shape::new(dt, &ld))?;
        let y = f.parameter("r", Shape::new(dt, &rd))?;
        let cfg = DotConfig { accumulator_dtype: None, output_dtype: out };
        Ok(vec![f.dot_general(x, &c.lc, &c.lb, y, &c.rc, &c.rb, cfg)?])
    });
    let res = run(&e, &[buffer(dt, l, &c.ld), buffer(dt, r, &c.rd)]);
    assert_eq!(res[0].dtype(), out.unwrap_or(dt), "{c:?}");
    (res[0].dims(), to_f64(&res[0]))
}

/// The arrangements tested for each size triple (m, k, n).
fn arrangements(m: usize, k: usize, n: usize) -> Vec<Case> {
    vec![
        // [m,k]·[k,n]
        case(&[m, k], &[1], &[], &[k, n], &[0], &[]),
        // transposed lhs [k,m] (contracting on axis 0) and transposed rhs [n,k]
        case(&[k, m], &[0], &[], &[n, k], &[1], &[]),
        // batch first: [2,m,k]·[2,k,n]
        case(&[2, m, k], &[2], &[0], &[2, k, n], &[1], &[0]),
        // batch last on lhs, middle on rhs: [k,m,3]·[n,3,k]
        case(&[k, m, 3], &[0], &[2], &[n, 3, k], &[2], &[1]),
    ]
}

fn check_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: element {i}: got {g}, want {w}");
    }
}

#[test]
fn f32_and_f64_match_naive_loop_for_every_arrangement_and_size() {
    let sizes =
        [(0, 3, 2), (2, 0, 3), (3, 2, 0), (1, 1, 1), (1, 7, 13), (13, 7, 1), (7, 13, 5), (17, 31, 19), (67, 129, 71)];
    for par in ["parallelism=1", "parallelism=2"] {
        let b = backend(par);
        for &(m, k, n) in &sizes {
            for c in arrangements(m, k, n) {
                let l = values(c.ld.iter().product(), 1);
                let r = values(c.rd.iter().product(), 2);
                let (want_dims, want) = naive(&c, &l, &r);
                for dt in [DType::Float32, DType::Float64] {
                    let (dims, got) = run_dot(&b, &c, dt, None, &l, &r);
                    assert_eq!(dims, want_dims, "{c:?} {dt}");
                    // Exact: every partial sum of these values is representable in f32.
                    check_close(&got, &want, 0.0, &format!("{c:?} {dt} {par}"));
                }
            }
        }
    }
}

#[test]
fn spec_example_and_multiple_batch_and_contracting_axes() {
    let b = backend("parallelism=2");
    let cases = [
        // §4.8: lhs [2,3,4,5] contract [1] batch [3,0]; rhs [5,1,2,3] contract [3] batch [0,2] -> [5,2,4,1].
        case(&[2, 3, 4, 5], &[1], &[3, 0], &[5, 1, 2, 3], &[3], &[0, 2]),
        // §4.8: lhs [3,2,4] contract [1]; rhs [5,2] contract [1] -> [3,4,5] (lhs free axes not adjacent).
        case(&[3, 2, 4], &[1], &[], &[5, 2], &[1], &[]),
        // two contracting axes, nesting on lhs, reversed on rhs: [3,4,5]·[5,4,6] contract (1,2)/(1,0).
        case(&[3, 4, 5], &[1, 2], &[], &[5, 4, 6], &[1, 0], &[]),
        // two contracting axes in reversed order on lhs: contract (2,0) with (0,1).
        case(&[5, 3, 7], &[2, 0], &[], &[7, 5, 4], &[0, 1], &[]),
        // two batch axes and two free axes per side: [2,3,4,5,6] batch (0,2), contract 4; rhs [2,6,4,7] batch (0,2), contract 1.
        case(&[2, 3, 4, 5, 6], &[4], &[0, 2], &[2, 6, 4, 7], &[1], &[0, 2]),
        // batch axes in swapped order between the operands.
        case(&[3, 2, 5, 4], &[3], &[1, 0], &[2, 4, 3, 6], &[1], &[0, 2]),
        // vector · vector -> scalar; matrix · vector.
        case(&[11], &[0], &[], &[11], &[0], &[]),
        case(&[5, 11], &[1], &[], &[11], &[0], &[]),
        // attention-like: many small batches, [2,3,13,8]·[2,3,13,8] contract 3/3 batch (0,1).
        case(&[2, 3, 13, 8], &[3], &[0, 1], &[2, 3, 13, 8], &[3], &[0, 1]),
    ];
    for c in &cases {
        let l = values(c.ld.iter().product(), 3);
        let r = values(c.rd.iter().product(), 4);
        let (want_dims, want) = naive(c, &l, &r);
        for dt in [DType::Float32, DType::Float64] {
            let (dims, got) = run_dot(&b, c, dt, None, &l, &r);
            assert_eq!(dims, want_dims, "{c:?}");
            check_close(&got, &want, 0.0, &format!("{c:?} {dt}"));
        }
    }
    assert_eq!(naive(&cases[0], &values(120, 0), &values(30, 0)).0, vec![5, 2, 4, 1]);
}

#[test]
fn half_inputs_accumulate_in_f32_and_round_once() {
    let b = backend("parallelism=2");
    for &(m, k, n) in &[(1, 1, 1), (7, 13, 5), (33, 65, 17)] {
        for c in arrangements(m, k, n) {
            let l = values(c.ld.iter().product(), 5);
            let r = values(c.rd.iter().product(), 6);
            let (_, want) = naive(&c, &l, &r);
            for dt in [DType::BFloat16, DType::Float16] {
                // F32 output: the exact sum (every partial sum is exact in f32).
                let (_, got) = run_dot(&b, &c, dt, Some(DType::Float32), &l, &r);
                check_close(&got, &want, 0.0, &format!("{c:?} {dt}->f32"));
                // Same-dtype output: the exact sum rounded once to the half type.
                let (_, got) = run_dot(&b, &c, dt, None, &l, &r);
                let rounded: Vec<f64> =
                    want.iter()
                        .map(|&w| {
                            if dt == DType::BFloat16 {
                                f64::from(bf16::from_f64(w))
                            } else {
                                f64::from(f16::from_f64(w))
                            }
                        })
                        .collect();
                check_close(&got, &rounded, 0.0, &format!("{c:?} {dt}"));
            }
        }
    }
    // §11: BF16 [256,1,1,1,1]·ones = 260 with f32 accumulation and one rounding (260 is a bf16 value).
    let l = [256.0, 1.0, 1.0, 1.0, 1.0];
    let c = case(&[5], &[0], &[], &[5], &[0], &[]);
    let (_, got) = run_dot(&b, &c, DType::BFloat16, None, &l, &[1.0; 5]);
    assert_eq!(got, vec![260.0]);
}

/// A half-output product larger than the GEMM's pooled f32 scratch (1100 x 1000 f32 values)
/// runs in row blocks: every block lands in its own rows, with a row-major and a transposed lhs.
#[test]
fn large_half_outputs_are_computed_in_row_blocks() {
    let b = backend("parallelism=2");
    let (m, k, n) = (1100, 9, 1000);
    for c in arrangements(m, k, n).into_iter().take(2) {
        let l = values(c.ld.iter().product(), 7);
        let r = values(c.rd.iter().product(), 8);
        let (_, want) = naive(&c, &l, &r);
        for dt in [DType::BFloat16, DType::Float16] {
            let (_, got) = run_dot(&b, &c, dt, None, &l, &r);
            let rounded: Vec<f64> = want
                .iter()
                .map(
                    |&w| if dt == DType::BFloat16 { f64::from(bf16::from_f64(w)) } else { f64::from(f16::from_f64(w)) },
                )
                .collect();
            check_close(&got, &rounded, 0.0, &format!("{:?} {dt}", c.ld));
        }
    }
}

#[test]
fn int8_wraps_like_the_output_dtype() {
    let b = backend("parallelism=2");
    let iv = |n: usize, seed: usize| -> Vec<f64> { (0..n).map(|i| ((i * 29 + seed * 7) % 23) as f64 - 11.0).collect() };
    for &(m, k, n) in &[(1, 1, 1), (5, 7, 3), (17, 33, 13)] {
        for c in arrangements(m, k, n) {
            let l = iv(c.ld.iter().product(), 1);
            let r = iv(c.rd.iter().product(), 2);
            let (_, want) = naive(&c, &l, &r);
            let (_, got) = run_dot(&b, &c, DType::Int8, Some(DType::Int32), &l, &r);
            check_close(&got, &want, 0.0, &format!("{c:?} i8->i32"));
            let (_, got) = run_dot(&b, &c, DType::Int8, None, &l, &r);
            let wrapped: Vec<f64> = want.iter().map(|&w| f64::from(w as i64 as i8)).collect();
            check_close(&got, &wrapped, 0.0, &format!("{c:?} i8"));
        }
    }
    // [100,100]·[1,1] = 200: -56 as Int8, 200 as Int32; (-128)·(-128)·2 = 32768: 0 as Int8, 32768 as Int32.
    let c = case(&[2], &[0], &[], &[2], &[0], &[]);
    assert_eq!(run_dot(&b, &c, DType::Int8, None, &[100.0, 100.0], &[1.0, 1.0]).1, vec![-56.0]);
    assert_eq!(run_dot(&b, &c, DType::Int8, Some(DType::Int32), &[100.0, 100.0], &[1.0, 1.0]).1, vec![200.0]);
    assert_eq!(run_dot(&b, &c, DType::Int8, None, &[-128.0, -128.0], &[-128.0, -128.0]).1, vec![0.0]);
    assert_eq!(run_dot(&b, &c, DType::Int8, Some(DType::Int16), &[-128.0, 127.0], &[-128.0, 2.0]).1, vec![16638.0]);
}

/// erf: the Maclaurin series for |x| < 2, else 1 − erfc with erfc's continued fraction
/// `e^{−x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …))))` evaluated from the back.
fn erf(x: f64) -> f64 {
    let ax = x.abs();
    let r = if ax < 2.0 {
        let mut term = ax;
        let mut sum = ax;
        for n in 1..200 {
            term *= -ax * ax / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-18 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let mut f = ax;
        for n in (1..120).rev() {
            f = ax + (n as f64 / 2.0) / f;
        }
        1.0 - (-ax * ax).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    if x < 0.0 { -r } else { r }
}

/// The activations of §5, written from their definitions.
fn activation(a: Activation, x: f64) -> f64 {
    match a {
        Activation::None => x,
        Activation::Gelu => x * 0.5 * (1.0 + erf(x / 2f64.sqrt())),
        Activation::Relu => x.max(0.0),
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        Activation::Tanh => x.tanh(),
        other => panic!("no reference formula for {other:?}"),
    }
}

const ACTS: [Activation; 6] =
    [Activation::None, Activation::Gelu, Activation::Relu, Activation::Silu, Activation::HardSwish, Activation::Tanh];

#[test]
fn erf_series_matches_known_values() {
    // erf(1) = 0.8427007929497149, erf(0.5) = 0.5204998778130465, GELU(1) = 0.8413447460685429.
    assert!((erf(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
    assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
    assert!((activation(Activation::Gelu, 1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
    // erf(2.5) = 0.9995930479825550, erf(-3) = -0.9999779095030014 (continued-fraction side).
    assert!((erf(2.5) - 0.999_593_047_982_555).abs() < 1e-15);
    assert!((erf(-3.0) + 0.999_977_909_503_001_4).abs() < 1e-15);
}

/// x `[2,3,k]` (leading batch dims), w in `layout` with outputs `[n1, n2]`, optional bias `[n1, n2]`.
fn dense_case(b: &Arc<JitBackend>, dt: DType, layout: DenseLayout, act: Activation, with_bias: bool, k: usize) {
    let (n1, n2) = (3, 5);
    let n = n1 * n2;
    let xd = [2, 3, k];
    let wd: Vec<usize> = match layout {
        DenseLayout::InputOutputs => vec![k, n1, n2],
        DenseLayout::OutputsInput => vec![n1, n2, k],
    };
    let x = values(6 * k, 7);
    let w: Vec<f64> = values(k * n, 8).iter().map(|v| v / 4.0).collect();
    let bias = values(n, 9);
    let e = compile(b, |f| {
        let xv = f.parameter("x", Shape::new(dt, &[2, 3, k as i64]))?;
        let wdims: Vec<i64> = wd.iter().map(|&d| d as i64).collect();
        let wv = f.parameter("w", Shape::new(dt, &wdims))?;
        let bv = if with_bias { Some(f.parameter("b", Shape::new(dt, &[n1 as i64, n2 as i64]))?) } else { None };
        Ok(vec![f.fused_dense(xv, wv, bv, act, layout)?])
    });
    let mut inputs = vec![buffer(dt, &x, &xd), buffer(dt, &w, &wd)];
    if with_bias {
        inputs.push(buffer(dt, &bias, &[n1, n2]));
    }
    let out = run(&e, &inputs);
    assert_eq!(out[0].dims(), vec![2, 3, n1, n2]);
    let got = to_f64(&out[0]);
    for r in 0..6 {
        for c in 0..n {
            let mut s = 0.0;
            for kk in 0..k {
                let wv = match layout {
                    DenseLayout::InputOutputs => w[kk * n + c],
                    DenseLayout::OutputsInput => w[c * k + kk],
                };
                s += x[r * k + kk] * wv;
            }
            if with_bias {
                s += bias[c];
            }
            let want = activation(act, s);
            let tol = if dt == DType::Float64 { 1e-13 } else { 2e-6 };
            let g = got[r * n + c];
            assert!(
                (g - want).abs() <= tol * (1.0 + want.abs()),
                "{dt} {layout:?} {act:?} bias={with_bias} k={k} ({r},{c}): got {g}, want {want} (pre-activation {s})"
            );
        }
    }
}

#[test]
fn fused_dense_layouts_bias_and_activations() {
    let b = backend("parallelism=2");
    for dt in [DType::Float32, DType::Float64] {
        for layout in [DenseLayout::InputOutputs, DenseLayout::OutputsInput] {
            for act in ACTS {
                for with_bias in [false, true] {
                    for k in [1, 7, 37] {
                        dense_case(&b, dt, layout, act, with_bias, k);
                    }
                }
            }
        }
    }
}

#[test]
fn fused_dense_hand_values() {
    // x = [[1, 2]], w (InputOutputs) = [[1, -1], [0.5, -2]], bias = [0.5, 1]:
    // x·w = [2, -5]; + bias = [2.5, -4]; relu -> [2.5, 0]; hard-swish(2.5) = 2.5·(2.5/6+0.5) = 2.2916…,
    // hard-swish(-4) = 0; tanh(2.5) = 0.9866142981514303.
    let b = backend("");
    for (act, want) in [
        (Activation::Relu, [2.5, 0.0]),
        (Activation::HardSwish, [2.5 * (2.5 / 6.0 + 0.5), 0.0]),
        (Activation::Tanh, [0.986_614_298_151_430_3, -0.999_329_299_739_067]),
    ] {
        let e = compile(&b, |f| {
            let x = f.parameter("x", Shape::new(DType::Float64, &[1, 2]))?;
            let w = f.constant(&[1f64, -1.0, 0.5, -2.0], &[2, 2])?;
            let bias = f.constant(&[0.5f64, 1.0], &[2])?;
            Ok(vec![f.fused_dense(x, w, Some(bias), act, DenseLayout::InputOutputs)?])
        });
        let out = run(&e, &[Buffer::from_slice(&[1f64, 2.0], &[1, 2]).unwrap()])[0].to_vec::<f64>().unwrap();
        for (g, w) in out.iter().zip(want) {
            assert!((g - w).abs() < 1e-15, "{act:?}: got {out:?}, want {want:?}");
        }
    }
}

/// The plan dump of a module built by `f` (compiled with `dump=DIR`).
fn plan_text(tag: &str, config: &str, f: impl FnOnce(&Function) -> tensorjit::Result<Vec<Value>>) -> String {
    let dir = std::env::temp_dir().join(format!("tensorjit-jit-dot-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let b = backend(&format!("dump={}{config}", dir.display()));
    let e = compile(&b, f);
    assert!(e.uses_compiled_plan());
    let sub: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|d| d.unwrap().path()).collect();
    assert_eq!(sub.len(), 1, "{sub:?}");
    let text = std::fs::read_to_string(sub[0].join("plan.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    text
}

#[test]
fn plan_runs_dot_and_dense_on_gemm() {
    let plan = plan_text("plan", ",fusion=off", |f| {
        let x = f.parameter("x", Shape::new(DType::Float32, &[4, 6]))?;
        let y = f.parameter("y", Shape::new(DType::Float32, &[5, 6]))?;
        let bias = f.parameter("b", Shape::new(DType::Float32, &[5]))?;
        let d = f.dot_general(x, &[1], &[], y, &[1], &[], DotConfig::default())?;
        let h = f.fused_dense(x, y, Some(bias), Activation::Gelu, DenseLayout::OutputsInput)?;
        Ok(vec![d, h])
    });
    let dot = plan.lines().find(|l| l.contains("kernel DotGeneral")).unwrap_or_else(|| panic!("{plan}"));
    assert!(dot.contains("via gemm float32 [4x6]·[6x5]") || dot.contains("via gemm f32 [4x6]·[6x5]"), "{dot}");
    let dense = plan.lines().find(|l| l.contains("kernel FusedDense")).unwrap_or_else(|| panic!("{plan}"));
    assert!(dense.contains("via gemm") && dense.contains("+bias") && dense.contains("geluerf"), "{dense}");
    // Non-nesting contracting axes are gathered.
    let plan = plan_text("gather", "", |f| {
        let x = f.parameter("x", Shape::new(DType::Float64, &[3, 4, 5]))?;
        let y = f.parameter("y", Shape::new(DType::Float64, &[5, 4, 6]))?;
        Ok(vec![f.dot_general(x, &[1, 2], &[], y, &[1, 0], &[], DotConfig::default())?])
    });
    let dot = plan.lines().find(|l| l.contains("kernel DotGeneral")).unwrap_or_else(|| panic!("{plan}"));
    assert!(dot.contains("via gemm") && dot.contains("[3x20]·[20x6]") && dot.contains("rhs-gathered"), "{dot}");
}

#[test]
fn constant_weights_are_prepacked_and_stay_right_across_executions() {
    let (m, k, n) = (9, 37, 21);
    let w = values(n * k, 10); // OutputsInput [n, k]
    let wd = values(k * n, 11); // DotGeneral rhs [k, n]
    let build = |f: &Function| -> tensorjit::Result<Vec<Value>> {
        let x = f.parameter("x", Shape::new(DType::Float32, &[m as i64, k as i64]))?;
        let wf: Vec<f32> = w.iter().map(|&v| v as f32).collect();
        let wdf: Vec<f32> = wd.iter().map(|&v| v as f32).collect();
        let wc = f.constant(&wf, &[n, k])?;
        let wdc = f.constant(&wdf, &[k, n])?;
        let h = f.fused_dense(x, wc, None, Activation::Relu, DenseLayout::OutputsInput)?;
        let d = f.dot_general(x, &[1], &[], wdc, &[0], &[], DotConfig::default())?;
        Ok(vec![h, d])
    };
    let plan = plan_text("packed", "", build);
    let packed = plan.lines().filter(|l| l.contains("via gemm") && l.contains("packed")).count();
    assert_eq!(packed, 2, "{plan}");

    let b = backend("parallelism=2");
    let e = compile(&b, build);
    let expect = |x: &[f64]| -> (Vec<f64>, Vec<f64>) {
        let mut h = vec![0.0; m * n];
        let mut d = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0.0, 0.0);
                for p in 0..k {
                    s += x[i * k + p] * w[j * k + p];
                    t += x[i * k + p] * wd[p * n + j];
                }
                h[i * n + j] = s.max(0.0);
                d[i * n + j] = t;
            }
        }
        (h, d)
    };
    let check = |e: &JitExecutable, seed: usize| {
        let x = values(m * k, seed);
        let out = run(e, &[buffer(DType::Float32, &x, &[m, k])]);
        let (h, d) = expect(&x);
        check_close(&to_f64(&out[0]), &h, 0.0, &format!("dense seed {seed}"));
        check_close(&to_f64(&out[1]), &d, 0.0, &format!("dot seed {seed}"));
    };
    for seed in 0..4 {
        check(&e, seed);
    }
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (e, check) = (&e, &check);
            sc.spawn(move || {
                for i in 0..5 {
                    check(e, 100 + t * 10 + i);
                }
            });
        }
    });
}
