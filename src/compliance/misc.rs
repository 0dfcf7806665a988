//! Compliance cases across op families: every dtype class through data movement, reductions,
//! sorting and indexing; complex dot/product; subnormal bits; the caller's floating-point mode;
//! AllReduce on one device; attention with sequence lengths (ops.md §1, §4, §5, §9).

use std::sync::Arc;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use super::*;
use crate::api::{AttentionConfig, GatherDims};
use crate::ir::op::{ArithReduce, AttentionLayout, PadAxis};

fn movement_a<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[0., 1., 2., 3., 4., 5.]);
    let x23 = || t(&x, &[2, 3]);
    let out = exec1(b, &[x23()], |f, p| f.transpose(p[0], &[1, 0]))?;
    expect("transpose", &out, &[3, 2], &vals::<T>(&[0., 3., 1., 4., 2., 5.]))?;
    let out = exec1(b, &[x23()], |f, p| f.slice(p[0], &[0, 1], &[2, 3], &[1, 1]))?;
    expect("slice", &out, &[2, 2], &vals::<T>(&[1., 2., 4., 5.]))?;
    let out = exec1(b, &[x23(), x23()], |f, p| f.concatenate(1, &[p[0], p[1]]))?;
    expect("concatenate", &out, &[2, 6], &vals::<T>(&[0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.]))?;
    let out = exec1(b, &[x23()], |f, p| f.reshape(p[0], &[3, 2]))?;
    expect("reshape", &out, &[3, 2], &x)?;
    let out = exec1(b, &[t(&x[..2], &[2])], |f, p| f.broadcast_in_dim(p[0], &shape(T::DTYPE, &[2, 2]), &[0]))?;
    expect("broadcast", &out, &[2, 2], &vals::<T>(&[0., 0., 1., 1.]))
}

/// Transpose, Slice, Concatenate, Reshape, BroadcastInDim on every supported dtype (Bool and
/// complex included).
pub fn movement_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Transpose, Slice, Concatenate, Reshape, BroadcastInDim]);
    for_types!(b, movement_a, [bool, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

fn movement_b<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[0., 1., 2., 3., 4., 5.]);
    let x23 = || t(&x, &[2, 3]);
    let out = exec1(b, &[x23()], |f, p| f.reverse(p[0], &[1]))?;
    expect("reverse", &out, &[2, 3], &vals::<T>(&[2., 1., 0., 5., 4., 3.]))?;
    let fill = vals::<T>(&[7.])[0];
    let pad = [PadAxis { start: 1, end: 0, interior: 0 }, PadAxis { start: 0, end: 1, interior: 0 }];
    let out = exec1(b, &[x23(), sc(fill)], |f, p| f.pad(p[0], p[1], &pad))?;
    let want = vals::<T>(&[7., 7., 7., 7., 0., 1., 2., 7., 3., 4., 5., 7.]);
    expect("pad", &out, &[3, 4], &want)?;
    let cond = [true, false, true, false, true, false];
    let y = vals::<T>(&[6., 7., 8., 9., 10., 11.]);
    let out = exec1(b, &[t(&cond, &[2, 3]), x23(), t(&y, &[2, 3])], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect("where", &out, &[2, 3], &vals::<T>(&[0., 7., 2., 9., 4., 11.]))
}

/// Reverse, Pad and Where on every supported dtype.
pub fn movement_pad_reverse_where_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Reverse, Pad, Where], [Bool]);
    for_types!(b, movement_b, [bool, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

fn movement_c<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[0., 1., 2., 3., 4., 5.]);
    let d = GatherDims {
        index_vector_axis: 1,
        offset_output_axes: vec![1],
        collapsed_slice_axes: vec![0],
        start_index_map: vec![0],
        slice_sizes: vec![1, 3],
        indices_are_sorted: false,
    };
    let out = exec1(b, &[t(&x, &[2, 3]), t(&[1i32, 0, 1], &[3, 1])], |f, p| f.gather(p[0], p[1], &d))?;
    expect("gather", &out, &[3, 3], &vals::<T>(&[3., 4., 5., 0., 1., 2., 3., 4., 5.]))?;
    let out = exec1(b, &[t(&x, &[2, 3]), sc(1i32), sc(1i32)], |f, p| f.dynamic_slice(p[0], &[p[1], p[2]], &[1, 2]))?;
    expect("dynamic_slice", &out, &[1, 2], &vals::<T>(&[4., 5.]))?;
    let upd = vals::<T>(&[9., 9.]);
    let out = exec1(b, &[t(&x, &[2, 3]), t(&upd, &[1, 2]), sc(0i32), sc(0i32)], |f, p| {
        f.dynamic_update_slice(p[0], p[1], &[p[2], p[3]])
    })?;
    expect("dynamic_update_slice", &out, &[2, 3], &vals::<T>(&[9., 9., 2., 3., 4., 5.]))
}

/// Gather, DynamicSlice and DynamicUpdateSlice on every supported dtype.
pub fn indexing_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Gather, DynamicSlice, DynamicUpdateSlice], [Int32]);
    for_types!(b, movement_c, [bool, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

fn max_min_reduce<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[3., 1., 2., 5.]);
    expect("max", &exec1(b, &[v(&x)], |f, p| f.reduce_max(p[0], &[]))?, &[], &vals::<T>(&[5.]))?;
    expect("min", &exec1(b, &[v(&x)], |f, p| f.reduce_min(p[0], &[]))?, &[], &vals::<T>(&[1.]))?;
    expect("product", &exec1(b, &[v(&x)], |f, p| f.reduce_product(p[0], &[]))?, &[], &vals::<T>(&[30.]))
}

/// ReduceMax, ReduceMin and ReduceProduct on every real numeric dtype.
pub fn reduce_max_min_product_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceMax, ReduceMin, ReduceProduct]);
    for_types!(b, max_min_reduce, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

fn cum_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[3., 1., 2.]);
    let run = |op: fn(&Function, Value, usize, bool, bool) -> crate::Result<Value>| {
        exec1(b, &[v(&x)], |f, p| op(f, p[0], 0, false, false))
    };
    expect("cumsum", &run(Function::cum_sum)?, &[3], &vals::<T>(&[3., 4., 6.]))?;
    expect("cumprod", &run(Function::cum_prod)?, &[3], &vals::<T>(&[3., 3., 6.]))?;
    expect("cummax", &run(Function::cum_max)?, &[3], &vals::<T>(&[3., 3., 3.]))?;
    expect("cummin", &run(Function::cum_min)?, &[3], &vals::<T>(&[3., 1., 1.]))
}

/// The four cumulative ops on every real numeric dtype.
pub fn cumulative_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumSum, CumProd, CumMax, CumMin]);
    for_types!(b, cum_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

fn argminmax_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[3., 1., 5., 1., 5.]);
    let out = exec1(b, &[v(&x)], |f, p| f.arg_min_max(p[0], 0, DType::Int32, false))?;
    expect("argmax", &out, &[], &[2i32])?;
    let out = exec1(b, &[v(&x)], |f, p| f.arg_min_max(p[0], 0, DType::Int32, true))?;
    expect("argmin", &out, &[], &[1i32])
}

/// ArgMinMax (ties → first) on every integer and float dtype.
pub fn argminmax_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ArgMinMax], [Int32]);
    for_types!(b, argminmax_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

fn sort_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = exec(b, &[v(&vals::<T>(&[3., 1., 2., 0.]))], |f, p| {
        let c = f.closure()?;
        let l = c.parameter("l", shape(T::DTYPE, &[]))?;
        let r = c.parameter("r", shape(T::DTYPE, &[]))?;
        c.return_(&[c.less_than(l, r)?])?;
        f.sort(&c, 0, true, p)
    })?;
    expect("sort", &out[0], &[4], &vals::<T>(&[0., 1., 2., 3.]))
}

/// Sort with a `<` comparator on every real numeric dtype.
pub fn sort_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sort, LessThan], [Bool]);
    for_types!(b, sort_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

fn iota_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = exec1(b, &[], |f, _| f.iota(&shape(T::DTYPE, &[2, 3]), 1))?;
    expect("iota", &out, &[2, 3], &vals::<T>(&[0., 1., 2., 0., 1., 2.]))
}

/// Iota on every integer and float dtype.
pub fn iota_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Iota]);
    for_types!(b, iota_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

/// Complex DotGeneral and ReduceProduct: `[1+2i, 3]·[2, i]` = 2+7i; `(1+i)(1−i)` = 2.
pub fn complex_dot_and_product(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral, ReduceProduct], [Complex64]);
    let c = Complex32::new;
    let out = exec1(b, &[v(&[c(1., 2.), c(3., 0.)]), v(&[c(2., 0.), c(0., 1.)])], |f, p| {
        f.dot_general(p[0], &[0], &[], p[1], &[0], &[], Default::default())
    })?;
    expect("dot", &out, &[], &[c(2., 7.)])?;
    let out = exec1(b, &[v(&[c(1., 1.), c(1., -1.)])], |f, p| f.reduce_product(p[0], &[]))?;
    expect("product", &out, &[], &[c(2., 0.)])?;
    if has_dtype(b, DType::Complex128) {
        let out = exec1(b, &[v(&[Complex64::new(0., 1.); 2])], |f, p| f.reduce_product(p[0], &[]))?;
        expect("c128 i*i", &out, &[], &[Complex64::new(-1., 0.)])?;
    }
    Ok(())
}

/// A subnormal f32 (≈1e−40) keeps its bits through Reshape, Transpose, Concatenate, Pad, Where,
/// Neg, Abs and F32→BF16-free data movement (§9: these never flush).
pub fn subnormals_kept_by_data_movement(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Reshape, Transpose, Concatenate, Pad, Where, Neg, Abs], [Float32, Bool]);
    let s = f32::from_bits(0x0001_16C2);
    let ns = f32::from_bits(0x8001_16C2);
    let x = || t(&[s, ns], &[1, 2]);
    expect_bits("reshape", &exec1(b, &[x()], |f, p| f.reshape(p[0], &[2]))?, &[2], &[s, ns])?;
    expect_bits("transpose", &exec1(b, &[x()], |f, p| f.transpose(p[0], &[1, 0]))?, &[2, 1], &[s, ns])?;
    let out = exec1(b, &[x(), x()], |f, p| f.concatenate(0, &[p[0], p[1]]))?;
    expect_bits("concatenate", &out, &[2, 2], &[s, ns, s, ns])?;
    let pad = [PadAxis::default(), PadAxis { start: 1, end: 0, interior: 0 }];
    let out = exec1(b, &[x(), sc(s)], |f, p| f.pad(p[0], p[1], &pad))?;
    expect_bits("pad", &out, &[1, 3], &[s, s, ns])?;
    let out = exec1(b, &[t(&[true, false], &[1, 2]), x(), t(&[0f32, 0.], &[1, 2])], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect_bits("where", &out, &[1, 2], &[s, 0.])?;
    expect_bits("neg", &exec1(b, &[x()], |f, p| f.neg(p[0]))?, &[1, 2], &[ns, s])?;
    expect_bits("abs", &exec1(b, &[x()], |f, p| f.abs(p[0]))?, &[1, 2], &[s, s])
}

/// After `execute` returns, the caller's thread still computes with subnormals (no FTZ/DAZ
/// left behind, §9).
pub fn caller_fp_mode_unchanged(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Mul, Add], [Float32]);
    let x: Vec<f32> = (0..4096).map(|i| i as f32 * 1e-3).collect();
    let out = exec1(b, &[v(&x), v(&x)], |f, p| f.add(f.mul(p[0], p[1])?, p[0]))?;
    get::<f32>("run", &out, &[4096])?;
    let min_normal = std::hint::black_box(f32::MIN_POSITIVE);
    let half = std::hint::black_box(0.5f32);
    let product = min_normal * half;
    check(product.to_bits() == 0x0040_0000, || format!("caller thread flushes subnormal results: {product:e}"))?;
    let sub = std::hint::black_box(f32::from_bits(0x0040_0000));
    let sum = sub + std::hint::black_box(0.0f32);
    check(sum.to_bits() == 0x0040_0000, || format!("caller thread treats subnormal inputs as zero: {sum:e}"))
}

/// AllReduce on a single device with group `[[0]]` is the identity (Sum and Max).
pub fn all_reduce_single_device(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [AllReduce], [Float32]);
    for kind in [ArithReduce::Sum, ArithReduce::Max] {
        let out = exec(b, &[v(&[1.5f32, -2.])], |f, p| f.all_reduce(&[p[0]], kind, &[vec![0]]))?;
        expect(&format!("{kind:?}"), &out[0], &[2], &[1.5f32, -2.])?;
    }
    Ok(())
}

/// Attention with per-batch sequence lengths: batch 0 uses both keys (→ 15, 15); batch 1 has one
/// query and one key (→ 10) and its padded query row is 0.
pub fn attention_seq_lens(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32, Int32]);
    let d = [2, 1, 2, 1];
    let ins = [t(&[1f32; 4], &d), t(&[1f32; 4], &d), t(&[10f32, 20., 10., 20.], &d), v(&[2i32, 1]), v(&[2i32, 1])];
    let out = exec1(b, &ins, |f, p| {
        let cfg = AttentionConfig { scale: 1.0, seq_lens: Some((p[3], p[4])), ..Default::default() };
        Ok(f.fused_scaled_dot_product_attention(p[0], p[1], p[2], AttentionLayout::Bhsd, &cfg)?.0)
    })?;
    expect_close::<f32>("seq lens", &out, &d, &[15., 15., 10., 0.], 1e-5, 0.0)
}

/// BF16 reductions accumulate in f32 or (XLA) in BF16 in some order: sum of `[256,1,1,1,1]` is
/// 260 or 256 (§9, §11), never anything else.
pub fn half_reduction_tolerance(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum], [BFloat16]);
    let out = exec1(b, &[v(&vals::<bf16>(&[256., 1., 1., 1., 1.]))], |f, p| f.reduce_sum(p[0], &[]))?;
    let got = get::<bf16>("sum", &out, &[])?[0].to_f64();
    check(got == 260.0 || got == 256.0, || format!("bf16 sum of [256,1,1,1,1] = {got}, expected 260 or 256"))?;
    if has_dtype(b, DType::Float16) {
        let x = vec![f16::from_f64(0.1); 100];
        let out = exec1(b, &[v(&x)], |f, p| f.reduce_sum(p[0], &[]))?;
        expect_close::<f16>("f16 sum of 100×0.1", &out, &[], &[10.0], 0.2, 0.0)?;
    }
    Ok(())
}
