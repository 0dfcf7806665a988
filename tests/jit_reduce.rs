//! Tests of reductions fused at the end of "jit" loop clusters: row, column and middle-axis
//! reductions of fused chains, every reduce kind with its identity on empty axes, NaN and signed
//! zeros, half types accumulating in f32, wrapping integer sums on the vectorised path, threads,
//! several reductions in one loop, the `reductions=fast|ordered` option, and the shapes that stay
//! on the reference kernel. Expected values are worked by hand or from the math.
//!
//! Run with `cargo test --test jit_reduce`.

#[path = "common/jit.rs"]
mod jit_support;

use half::{bf16, f16};
use jit_support::{backend, compile, run};
use tensorjit::ir::op::{CompareOp, ReduceKind};
use tensorjit::{Buffer, DType, Function, Shape, Value};

/// `len` deterministic values in [-scale, scale).
fn pattern(len: usize, scale: f32) -> Vec<f32> {
    (0..len).map(|i| (((i * 7919) % 2003) as f32 / 1001.0 - 1.0) * scale).collect()
}

fn param(f: &Function, name: &str, d: DType, dims: &[i64]) -> Value {
    f.parameter(name, Shape::new(d, dims)).expect("parameter")
}

#[test]
fn row_sum_of_a_fused_chain_with_its_elementwise_output() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[2, 3]);
        let two = f.scalar(2f32)?;
        let y = f.mul(x, two)?;
        Ok(vec![f.reduce(ReduceKind::Sum, y, &[1])?, y])
    });
    assert_eq!(e.num_loop_steps(), 1);
    assert_eq!(e.num_fused_reductions(), 1);
    let x = Buffer::from_slice(&[1f32, 2., 3., 4., 5., 6.], &[2, 3]).unwrap();
    let out = run(&e, &[x]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![12., 30.]);
    assert_eq!(out[0].shape().dims, vec![2]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![2., 4., 6., 8., 10., 12.]);
}

#[test]
fn leading_middle_and_trailing_blocks_of_axes() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Int32, &[2, 3, 4]);
        let one = f.scalar(1i32)?;
        let y = f.mul(x, one)?; // keeps the reductions' operand inside a cluster
        let z = f.add(y, f.scalar(0i32)?)?;
        Ok(vec![
            f.reduce(ReduceKind::Sum, z, &[1])?,
            f.reduce(ReduceKind::Sum, z, &[0])?,
            f.reduce(ReduceKind::Max, z, &[1, 2])?,
            f.reduce(ReduceKind::Min, z, &[0, 1, 2])?,
        ])
    });
    assert_eq!(e.num_fused_reductions(), 4);
    let x = Buffer::from_slice(&(0..24).collect::<Vec<i32>>(), &[2, 3, 4]).unwrap();
    let out = run(&e, &[x]);
    // Axis 1: out[o][n] = Σ_r (12·o + 4·r + n) = 3·(12·o + n) + 12.
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![12, 15, 18, 21, 48, 51, 54, 57]);
    assert_eq!(out[0].shape().dims, vec![2, 4]);
    // Axis 0: k + (k + 12).
    assert_eq!(out[1].to_vec::<i32>().unwrap(), (0..12).map(|k| 2 * k + 12).collect::<Vec<i32>>());
    assert_eq!(out[2].to_vec::<i32>().unwrap(), vec![11, 23]);
    assert_eq!(out[3].to_vec::<i32>().unwrap(), vec![0]);
}

#[test]
fn non_adjacent_axes_stay_on_the_reference_kernel() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[2, 3, 2]);
        let y = f.add(x, f.scalar(1f32)?)?;
        Ok(vec![f.reduce(ReduceKind::Sum, y, &[0, 2])?])
    });
    assert_eq!(e.num_fused_reductions(), 0);
    let x = Buffer::from_slice(&(0..12).map(|v| v as f32).collect::<Vec<_>>(), &[2, 3, 2]).unwrap();
    // Σ_{a,c} (6a + 2b + c + 1) = 8b + 14 + 4.
    assert_eq!(run(&e, &[x])[0].to_vec::<f32>().unwrap(), vec![18., 26., 34.]);
}

#[test]
fn max_and_min_propagate_nan_and_order_signed_zeros() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[3, 4]);
        let y = f.mul(x, f.scalar(1f32)?)?;
        Ok(vec![f.reduce(ReduceKind::Max, y, &[1])?, f.reduce(ReduceKind::Min, y, &[1])?])
    });
    assert_eq!(e.num_fused_reductions(), 2);
    let x =
        Buffer::from_slice(&[1f32, f32::NAN, 3., -2., -0.0, 0.0, -0.0, -7., -0.0, -0.0, -0.0, -0.0], &[3, 4]).unwrap();
    let out = run(&e, &[x]);
    let (mx, mn) = (out[0].to_vec::<f32>().unwrap(), out[1].to_vec::<f32>().unwrap());
    assert!(mx[0].is_nan() && mn[0].is_nan());
    assert_eq!(mx[1].to_bits(), 0f32.to_bits(), "max(-0, +0) is +0");
    assert_eq!(mn[1], -7.);
    assert_eq!(mx[2].to_bits(), (-0f32).to_bits());
    assert_eq!(mn[2].to_bits(), (-0f32).to_bits());
}

#[test]
fn empty_reduced_axes_give_each_kinds_identity() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[3, 0]);
        let i = param(f, "i", DType::Int16, &[2, 0]);
        let y = f.add(x, f.scalar(1f32)?)?;
        let j = f.add(i, f.scalar(1i16)?)?;
        Ok(vec![
            f.reduce(ReduceKind::Sum, y, &[1])?,
            f.reduce(ReduceKind::Product, y, &[1])?,
            f.reduce(ReduceKind::Max, y, &[1])?,
            f.reduce(ReduceKind::Min, y, &[1])?,
            f.reduce(ReduceKind::Max, j, &[1])?,
            f.reduce(ReduceKind::Min, j, &[1])?,
            f.reduce(ReduceKind::BitwiseAnd, j, &[1])?,
        ])
    });
    assert_eq!(e.num_fused_reductions(), 7);
    let x = Buffer::from_slice::<f32>(&[], &[3, 0]).unwrap();
    let i = Buffer::from_slice::<i16>(&[], &[2, 0]).unwrap();
    let out = run(&e, &[x, i]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![0.; 3]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![1.; 3]);
    assert_eq!(out[2].to_vec::<f32>().unwrap(), vec![f32::NEG_INFINITY; 3]);
    assert_eq!(out[3].to_vec::<f32>().unwrap(), vec![f32::INFINITY; 3]);
    assert_eq!(out[4].to_vec::<i16>().unwrap(), vec![i16::MIN; 2]);
    assert_eq!(out[5].to_vec::<i16>().unwrap(), vec![i16::MAX; 2]);
    assert_eq!(out[6].to_vec::<i16>().unwrap(), vec![-1; 2]);
}

#[test]
fn half_types_accumulate_in_f32_and_round_once() {
    let b = backend("");
    let e = compile(&b, |f| {
        let h = param(f, "h", DType::Float16, &[1, 3]);
        let g = param(f, "g", DType::BFloat16, &[1, 3]);
        let h1 = f.mul(h, f.scalar(f16::from_f32(1.0))?)?;
        let g1 = f.mul(g, f.scalar(bf16::from_f32(1.0))?)?;
        Ok(vec![f.reduce(ReduceKind::Sum, h1, &[1])?, f.reduce(ReduceKind::Sum, g1, &[1])?])
    });
    assert_eq!(e.num_fused_reductions(), 2);
    let h = Buffer::from_slice(&[2048f32, 1., 1.].map(f16::from_f32), &[1, 3]).unwrap();
    let g = Buffer::from_slice(&[256f32, 1., 1.].map(bf16::from_f32), &[1, 3]).unwrap();
    let out = run(&e, &[h, g]);
    // Rounding after every step would give 2048 (2049 ties to even) and 256; once: 2050, 258.
    assert_eq!(out[0].to_vec::<f16>().unwrap(), vec![f16::from_f32(2050.)]);
    assert_eq!(out[1].to_vec::<bf16>().unwrap(), vec![bf16::from_f32(258.)]);
}

#[test]
fn integer_and_bool_reductions_wrap_and_vectorise_over_long_rows() {
    let b = backend("");
    let n = 1003usize; // not a multiple of the vector step: exercises the tail
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Int32, &[2, n as i64]);
        let u = param(f, "u", DType::Uint8, &[2, n as i64]);
        let y = f.add(x, f.scalar(0i32)?)?;
        let v = f.add(u, f.scalar(0u8)?)?;
        let pos = f.compare(CompareOp::GreaterThan, false, y, f.scalar(0i32)?)?;
        Ok(vec![
            f.reduce(ReduceKind::Sum, y, &[1])?,
            f.reduce(ReduceKind::BitwiseXor, y, &[1])?,
            f.reduce(ReduceKind::Max, v, &[1])?,
            f.reduce(ReduceKind::BitwiseOr, v, &[1])?,
            f.reduce(ReduceKind::LogicalAnd, pos, &[1])?,
            f.reduce(ReduceKind::LogicalOr, pos, &[1])?,
            f.reduce(ReduceKind::LogicalXor, pos, &[1])?,
        ])
    });
    assert!(e.num_fused_reductions() >= 4, "{}", e.num_fused_reductions());
    // Row 0: i32::MAX then 1002 ones; row 1: 0, 1, …, 1002.
    let mut xs = vec![1i32; n];
    xs[0] = i32::MAX;
    xs.extend(0..n as i32);
    let mut us = vec![0u8; 2 * n];
    us[5] = 0x10;
    us[700] = 0x81;
    us[n + 17] = 0x02;
    let out = run(&e, &[Buffer::from_slice(&xs, &[2, n]).unwrap(), Buffer::from_slice(&us, &[2, n]).unwrap()]);
    // MAX + 1002 wraps to MIN + 1001; Σ 0..1002 = 1002·1003/2 = 502503.
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![i32::MIN + 1001, 502_503]);
    // Row 0: MAX ^ (1002 ones, an even count) = MAX. Row 1: xor of 0..=1002; 0..=n xor is n when
    // n % 4 == 0, so 0..=1000 gives 1000, then ^1001 ^1002 = 1000 ^ 1001 ^ 1002.
    assert_eq!(out[1].to_vec::<i32>().unwrap(), vec![i32::MAX, 1000 ^ 1001 ^ 1002]);
    assert_eq!(out[2].to_vec::<u8>().unwrap(), vec![0x81, 0x02]);
    assert_eq!(out[3].to_vec::<u8>().unwrap(), vec![0x91, 0x02]);
    // Row 0 all positive; row 1 has one 0 (the first) and 1002 positives.
    assert_eq!(out[4].to_vec::<bool>().unwrap(), vec![true, false]);
    assert_eq!(out[5].to_vec::<bool>().unwrap(), vec![true, true]);
    assert_eq!(out[6].to_vec::<bool>().unwrap(), vec![true, false]); // 1003 odd, 1002 even
}

/// `reductions=ordered` accumulates in element order: the sum equals a sequential f32 fold
/// bit for bit. The default may reassociate: it must lie within the classic bound
/// `(n − 1)·ε·Σ|xᵢ|` of the exact sum (computed here in f64 from the same f32 terms).
#[test]
fn fast_and_ordered_float_sums() {
    let (rows, n) = (37usize, 1013usize);
    let xs: Vec<f32> = pattern(rows * n, 1.37);
    let build = |f: &Function| -> tensorjit::Result<Vec<Value>> {
        let x = param(f, "x", DType::Float32, &[rows as i64, n as i64]);
        let sq = f.mul(x, x)?;
        let t = f.add(sq, x)?;
        Ok(vec![f.reduce(ReduceKind::Sum, t, &[1])?])
    };
    let input = || Buffer::from_slice(&xs, &[rows, n]).unwrap();
    let ordered = compile(&backend("reductions=ordered"), build);
    let fast = compile(&backend(""), build);
    assert_eq!((ordered.num_fused_reductions(), fast.num_fused_reductions()), (1, 1));
    let o = run(&ordered, &[input()])[0].to_vec::<f32>().unwrap();
    let q = run(&fast, &[input()])[0].to_vec::<f32>().unwrap();
    for r in 0..rows {
        let terms: Vec<f32> = xs[r * n..(r + 1) * n].iter().map(|&v| v * v + v).collect();
        let seq = terms.iter().fold(0f32, |a, &t| a + t);
        assert_eq!(o[r].to_bits(), seq.to_bits(), "row {r}: ordered {} vs sequential {seq}", o[r]);
        let exact: f64 = terms.iter().map(|&t| t as f64).sum();
        let bound = (n as f64 - 1.0) * f32::EPSILON as f64 * terms.iter().map(|&t| (t as f64).abs()).sum::<f64>();
        assert!(((q[r] as f64) - exact).abs() <= bound, "row {r}: fast {} vs exact {exact} (bound {bound})", q[r]);
    }
}

#[test]
fn two_reductions_share_one_loop() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float64, &[2, 3]);
        let d = f.mul(x, f.scalar(2f64)?)?;
        let sq = f.mul(x, x)?;
        Ok(vec![f.reduce(ReduceKind::Sum, d, &[1])?, f.reduce(ReduceKind::Sum, sq, &[1])?])
    });
    assert_eq!((e.num_loop_steps(), e.num_fused_reductions()), (1, 2));
    let x = Buffer::from_slice(&[1f64, 2., 3., -1., 0., 4.], &[2, 3]).unwrap();
    let out = run(&e, &[x]);
    assert_eq!(out[0].to_vec::<f64>().unwrap(), vec![12., 6.]);
    assert_eq!(out[1].to_vec::<f64>().unwrap(), vec![14., 17.]);
}

#[test]
fn large_reductions_split_across_threads() {
    let b = backend("parallelism=2");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[600, 500]);
        let h = f.mul(x, f.scalar(0.5f32)?)?;
        Ok(vec![f.reduce(ReduceKind::Sum, h, &[1])?, f.reduce(ReduceKind::Sum, h, &[0])?])
    });
    assert_eq!(e.num_fused_reductions(), 2);
    let x = Buffer::from_slice(&vec![1f32; 300_000], &[600, 500]).unwrap();
    let out = run(&e, &[x]);
    // Every partial sum is a multiple of 0.5 below 2^24: exact in any order.
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![250.; 600]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![300.; 500]);
}

/// Softmax from standard ops with the egg pass off: max and sum are fused into loops, and the
/// result is exp(x − max) / Σ exp(x − max).
#[test]
fn decomposed_softmax_runs_its_reductions_in_loops() {
    let b = backend("fusion=off");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[2, 2]);
        let m = f.reduce(ReduceKind::Max, x, &[1])?;
        let mb = f.broadcast_in_dim(m, &Shape::new(DType::Float32, &[2, 2]), &[0])?;
        let ex = f.exp(f.sub(x, mb)?)?;
        let s = f.reduce(ReduceKind::Sum, ex, &[1])?;
        let sb = f.broadcast_in_dim(s, &Shape::new(DType::Float32, &[2, 2]), &[0])?;
        Ok(vec![f.div(ex, sb)?])
    });
    assert_eq!(e.num_fused_reductions(), 2);
    let l3 = 3f32.ln();
    let x = Buffer::from_slice(&[0f32, l3, 5., 5.], &[2, 2]).unwrap();
    let y = run(&e, &[x])[0].to_vec::<f32>().unwrap();
    for (a, want) in y.iter().zip([0.25f32, 0.75, 0.5, 0.5]) {
        assert!((a - want).abs() <= 1e-6, "{y:?}");
    }
}

/// Reductions over leading or middle axes whose kept trailing axes hold whole vectors (a
/// channels-last global average pool: `[N, H, W, C]` summed over H and W) run a vector of
/// consecutive outputs at a time; each output still accumulates in element order, so fast and
/// ordered sums are bit-identical to the sequential f32 sum, on one and two threads, including a
/// trailing extent that is no whole number of vectors (the scalar path) and a broadcast bias.
#[test]
fn channels_last_pooling_sums_vectorise_across_outputs() {
    for (n, h, w, c, cfg) in [
        (3usize, 5usize, 7usize, 20usize, ""),
        (3, 5, 7, 18, ""),
        (2, 4, 3, 12, "reductions=ordered"),
        (2, 40, 50, 516, "parallelism=2"),
        (2, 40, 50, 516, "parallelism=2,reductions=ordered"),
    ] {
        let xs: Vec<f32> = pattern(n * h * w * c, 1.37);
        let bias: Vec<f32> = (0..c).map(|i| (i as f32 * 0.37).sin()).collect();
        let e = compile(&backend(cfg), |f| {
            let x = param(f, "x", DType::Float32, &[n as i64, h as i64, w as i64, c as i64]);
            let b = f.constant(&bias, &[1, 1, 1, c])?;
            let t = f.max(f.add(x, b)?, f.scalar(0f32)?)?;
            Ok(vec![f.reduce(ReduceKind::Sum, t, &[1, 2])?, f.reduce(ReduceKind::Max, t, &[0, 1, 2])?])
        });
        assert_eq!(e.num_fused_reductions(), 2, "{cfg}");
        let out = run(&e, &[Buffer::from_slice(&xs, &[n, h, w, c]).unwrap()]);
        let (sums, maxes) = (out[0].to_vec::<f32>().unwrap(), out[1].to_vec::<f32>().unwrap());
        assert_eq!(out[0].shape().dims, vec![n as i64, c as i64]);
        let t = |img: usize, p: usize, ch: usize| (xs[(img * h * w + p) * c + ch] + bias[ch]).max(0.0);
        for ch in 0..c {
            for img in 0..n {
                let seq = (0..h * w).fold(0f32, |a, p| a + t(img, p, ch));
                let got = sums[img * c + ch];
                assert_eq!(got.to_bits(), seq.to_bits(), "{cfg} {c}: image {img} channel {ch}: {got} vs {seq}");
            }
            let max =
                (0..n).flat_map(|img| (0..h * w).map(move |p| (img, p))).fold(0f32, |a, (img, p)| a.max(t(img, p, ch)));
            assert_eq!(maxes[ch], max, "{cfg} {c}: channel {ch}");
        }
    }
}

/// One reduction across outputs runs four vectors of outputs side by side (independent sums),
/// then the vectors past the last group of four one at a time; groups that straddle two images
/// (36 channels: nine vectors of f32 per image) and the chunk boundaries of two threads must
/// not mix their sums. Each output is still its channel's sequential sum, bit for bit: f32 (four
/// lanes), f64 (two) and i32 (wrapping) sums over H and W of channels-last inputs, including
/// MobileNetV2's global average pool (7 × 7 × 1280).
#[test]
fn single_reductions_across_outputs_run_vectors_in_groups() {
    for (n, h, w, c, cfg) in [
        (3usize, 2usize, 3usize, 36usize, ""),
        (1, 7, 7, 1280, ""),
        (1, 7, 7, 1280, "parallelism=2"),
        (5, 3, 2, 52, "parallelism=2"),
    ] {
        let dims = [n as i64, h as i64, w as i64, c as i64];
        let xs: Vec<f32> = pattern(n * h * w * c, 1.37);
        let xd: Vec<f64> = xs.iter().map(|&v| f64::from(v) * 1.0e-3 + 1.0).collect();
        let xi: Vec<i32> = (0..n * h * w * c).map(|i| ((i * 2_654_435_761) % 4_294_967_291) as i32).collect();
        let e = compile(&backend(cfg), |f| {
            let x = param(f, "x", DType::Float32, &dims);
            let t = f.max(x, f.scalar(0f32)?)?;
            Ok(vec![f.reduce(ReduceKind::Sum, t, &[1, 2])?])
        });
        assert_eq!(e.num_fused_reductions(), 1, "{cfg}");
        let sums = run(&e, &[Buffer::from_slice(&xs, &[n, h, w, c]).unwrap()])[0].to_vec::<f32>().unwrap();
        let ed = compile(&backend(cfg), |f| {
            let x = param(f, "x", DType::Float64, &dims);
            Ok(vec![f.reduce(ReduceKind::Sum, f.mul(x, f.scalar(2f64)?)?, &[1, 2])?])
        });
        let sd = run(&ed, &[Buffer::from_slice(&xd, &[n, h, w, c]).unwrap()])[0].to_vec::<f64>().unwrap();
        let ei = compile(&backend(cfg), |f| {
            let x = param(f, "x", DType::Int32, &dims);
            Ok(vec![f.reduce(ReduceKind::Sum, f.add(x, f.scalar(3i32)?)?, &[1, 2])?])
        });
        let si = run(&ei, &[Buffer::from_slice(&xi, &[n, h, w, c]).unwrap()])[0].to_vec::<i32>().unwrap();
        for img in 0..n {
            for ch in 0..c {
                let at = |p: usize| (img * h * w + p) * c + ch;
                let want = (0..h * w).fold(0f32, |a, p| a + xs[at(p)].max(0.0));
                let got = sums[img * c + ch];
                assert_eq!(got.to_bits(), want.to_bits(), "{cfg} {c}: image {img} channel {ch}: {got} vs {want}");
                let want = (0..h * w).fold(0f64, |a, p| a + xd[at(p)] * 2.0);
                assert_eq!(sd[img * c + ch].to_bits(), want.to_bits(), "{cfg} {c} f64: image {img} channel {ch}");
                let want = (0..h * w).fold(0i32, |a, p| a.wrapping_add(xi[at(p)].wrapping_add(3)));
                assert_eq!(si[img * c + ch], want, "{cfg} {c} i32: image {img} channel {ch}");
            }
        }
    }
}

/// Strided inputs of a reduction across outputs: a bias broadcast over the pixels (its offset
/// steps by 0 from one reduced position to the next), a transposed operand summed over one axis
/// (steps by a constant: the transposed axis' stride), and one summed over two axes whose
/// offsets do not step evenly (computed from the element index at every position). Each output
/// is its sequential sum, bit for bit.
#[test]
fn strided_inputs_of_reductions_across_outputs() {
    let (n, h, w, c) = (3usize, 5usize, 4usize, 24usize);
    let p: Vec<f32> = pattern(n * w * h * c, 0.73);
    let bias: Vec<f32> = (0..c).map(|i| (i as f32 * 0.37).sin()).collect();
    // p is [n, w, h, c]; t = transpose(p) is [n, h, w, c].
    let tp = |img: usize, y: usize, x: usize, ch: usize| p[((img * w + x) * h + y) * c + ch];
    for (axes, cfg) in [(vec![1usize], ""), (vec![1, 2], ""), (vec![1], "parallelism=2")] {
        let e = compile(&backend(cfg), |f| {
            let x = param(f, "p", DType::Float32, &[n as i64, w as i64, h as i64, c as i64]);
            let t = f.transpose(x, &[0, 2, 1, 3])?;
            let b = f.constant(&bias, &[1, 1, 1, c])?;
            Ok(vec![f.reduce(ReduceKind::Sum, f.add(t, b)?, &axes)?])
        });
        assert_eq!(e.num_fused_reductions(), 1, "{axes:?}");
        let got = run(&e, &[Buffer::from_slice(&p, &[n, w, h, c]).unwrap()])[0].to_vec::<f32>().unwrap();
        for img in 0..n {
            for ch in 0..c {
                if axes.len() == 1 {
                    for x in 0..w {
                        let want = (0..h).fold(0f32, |a, y| a + (tp(img, y, x, ch) + bias[ch]));
                        let g = got[(img * w + x) * c + ch];
                        assert_eq!(g.to_bits(), want.to_bits(), "{axes:?} {cfg}: {img} {x} {ch}: {g} vs {want}");
                    }
                } else {
                    let want = (0..h * w).fold(0f32, |a, q| a + (tp(img, q / w, q % w, ch) + bias[ch]));
                    let g = got[img * c + ch];
                    assert_eq!(g.to_bits(), want.to_bits(), "{axes:?}: {img} {ch}: {g} vs {want}");
                }
            }
        }
    }
}

/// Half types reduced over a leading axis with trailing axes of whole vectors (the path that
/// computes a vector of outputs at a time): accumulated in f32, rounded once per output.
#[test]
fn half_types_reduced_across_outputs_round_once() {
    let e = compile(&backend(""), |f| {
        let h = param(f, "h", DType::Float16, &[3, 8]);
        let g = param(f, "g", DType::BFloat16, &[3, 8]);
        let h1 = f.mul(h, f.scalar(f16::from_f32(1.0))?)?;
        let g1 = f.mul(g, f.scalar(bf16::from_f32(1.0))?)?;
        Ok(vec![f.reduce(ReduceKind::Sum, h1, &[0])?, f.reduce(ReduceKind::Sum, g1, &[0])?])
    });
    assert_eq!(e.num_fused_reductions(), 2);
    // Column j: 2048 + 1 + 1 (f16) and 256 + 1 + 1 (bf16), plus j in the first row.
    let hv: Vec<f16> = (0..24).map(|i| f16::from_f32(if i < 8 { 2048.0 + 2.0 * i as f32 } else { 1.0 })).collect();
    let gv: Vec<bf16> = (0..24).map(|i| bf16::from_f32(if i < 8 { 256.0 + 2.0 * i as f32 } else { 1.0 })).collect();
    let out = run(&e, &[Buffer::from_slice(&hv, &[3, 8]).unwrap(), Buffer::from_slice(&gv, &[3, 8]).unwrap()]);
    // Rounded after every step, 2048 + 2j + 1 would tie back to 2048 + 2j; once: 2050 + 2j.
    let want_h: Vec<f16> = (0..8).map(|j| f16::from_f32(2050.0 + 2.0 * j as f32)).collect();
    let want_g: Vec<bf16> = (0..8).map(|j| bf16::from_f32(258.0 + 2.0 * j as f32)).collect();
    assert_eq!(out[0].to_vec::<f16>().unwrap(), want_h);
    assert_eq!(out[1].to_vec::<bf16>().unwrap(), want_g);
}
