//! Compliance cases for reductions, ArgMinMax and cumulative ops (ops.md §4.6, §9, §10, §11).

use std::sync::Arc;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use super::*;

type RedFn = fn(&Function, Value, &[usize]) -> crate::Result<Value>;

fn red<T: TestElem>(
    b: &Arc<dyn Backend>,
    op: RedFn,
    x: &[T],
    dims: &[usize],
    axes: &[usize],
) -> Result<Buffer, String> {
    exec1(b, &[t(x, dims)], |f, p| op(f, p[0], axes))
}

type CumFn = fn(&Function, Value, usize, bool, bool) -> crate::Result<Value>;

fn cum<T: TestElem>(b: &Arc<dyn Backend>, op: CumFn, x: &[T], excl: bool, rev: bool) -> Result<Buffer, String> {
    exec1(b, &[v(x)], |f, p| op(f, p[0], 0, excl, rev))
}

fn argmm<T: TestElem>(
    b: &Arc<dyn Backend>,
    x: &[T],
    dims: &[usize],
    axis: usize,
    is_min: bool,
) -> Result<Buffer, String> {
    exec1(b, &[t(x, dims)], |f, p| f.arg_min_max(p[0], axis, DType::Int32, is_min))
}

/// F32 `[[1,2,3],[4,5,6]]` reduced over axis 1 with Sum, Max, Min, Product.
pub fn reduce_axis1_f32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum, ReduceMax, ReduceMin, ReduceProduct], [Float32]);
    let x = [1f32, 2., 3., 4., 5., 6.];
    expect("sum", &red(b, Function::reduce_sum, &x, &[2, 3], &[1])?, &[2], &[6f32, 15.])?;
    expect("max", &red(b, Function::reduce_max, &x, &[2, 3], &[1])?, &[2], &[3f32, 6.])?;
    expect("min", &red(b, Function::reduce_min, &x, &[2, 3], &[1])?, &[2], &[1f32, 4.])?;
    expect("product", &red(b, Function::reduce_product, &x, &[2, 3], &[1])?, &[2], &[6f32, 120.])
}

/// F64 ReduceMax of `[-1e8,-1e6,-1e16]` over all axes = −1e6.
pub fn reduce_max_f64(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceMax], [Float64]);
    expect("max", &red(b, Function::reduce_max, &[-1e8f64, -1e6, -1e16], &[3], &[])?, &[], &[-1e6f64])
}

/// U32 iota `[2,2,2,2,2]` summed over axes (1,3): `out[a,c,e] = 64a + 16c + 4e + 20`.
pub fn reduce_sum_u32_two_axes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum], [Uint32]);
    let x: Vec<u32> = (0..32).collect();
    let out = red(b, Function::reduce_sum, &x, &[2, 2, 2, 2, 2], &[1, 3])?;
    let mut want = Vec::new();
    for a in 0..2u32 {
        for c in 0..2 {
            for e in 0..2 {
                want.push(64 * a + 16 * c + 4 * e + 20);
            }
        }
    }
    expect("axes (1,3)", &out, &[2, 2, 2], &want)
}

/// No axes means all axes: I32 iota `[2,3]` sums to 15.
pub fn reduce_all_axes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum, ReduceMax], [Int32]);
    let x = [0i32, 1, 2, 3, 4, 5];
    expect("sum []", &red(b, Function::reduce_sum, &x, &[2, 3], &[])?, &[], &[15i32])?;
    expect("sum [0,1]", &red(b, Function::reduce_sum, &x, &[2, 3], &[0, 1])?, &[], &[15i32])?;
    expect("max []", &red(b, Function::reduce_max, &x, &[2, 3], &[])?, &[], &[5i32])?;
    expect("sum axis 0", &red(b, Function::reduce_sum, &x, &[2, 3], &[0])?, &[3], &[3i32, 5, 7])
}

/// F32 product of `[0.5, 2, 1.25, 0.8]` = 1.
pub fn reduce_product_f32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceProduct], [Float32]);
    let out = red(b, Function::reduce_product, &[0.5f32, 2., 1.25, 0.8], &[4], &[0])?;
    expect_close::<f32>("product", &out, &[], &[1.0], 1e-6, 0.0)
}

/// Integer reductions wrap: I8 sum `[100,100]` = −56, product `[16,16]` = 0.
pub fn reduce_int_wraps(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum, ReduceProduct], [Int8, Int32]);
    expect("i8 sum", &red(b, Function::reduce_sum, &[100i8, 100], &[2], &[])?, &[], &[-56i8])?;
    expect("i8 product", &red(b, Function::reduce_product, &[16i8, 16], &[2], &[])?, &[], &[0i8])?;
    expect("i32 sum", &red(b, Function::reduce_sum, &[i32::MAX, 1], &[2], &[])?, &[], &[i32::MIN])
}

/// BF16 min `[-17,3,5]` = −17; BF16 sum over (0,1) of `[[0.5,0.25],[0.125,0.125]]` = 1.
pub fn reduce_bf16(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceMin, ReduceSum], [BFloat16]);
    let out = red(b, Function::reduce_min, &vals::<bf16>(&[-17., 3., 5.]), &[3], &[0])?;
    expect("min", &out, &[], &vals::<bf16>(&[-17.]))?;
    let out = red(b, Function::reduce_sum, &vals::<bf16>(&[0.5, 0.25, 0.125, 0.125]), &[2, 2], &[0, 1])?;
    expect("sum", &out, &[], &vals::<bf16>(&[1.]))
}

/// Empty F32 reductions (axis of size 0): sum 0, product 1, max −Inf, min +Inf.
pub fn reduce_empty_identities_float(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum, ReduceProduct, ReduceMax, ReduceMin], [Float32]);
    let x: [f32; 0] = [];
    let inf = f32::INFINITY;
    expect("sum", &red(b, Function::reduce_sum, &x, &[0, 3], &[0])?, &[3], &[0f32; 3])?;
    expect("product", &red(b, Function::reduce_product, &x, &[0, 3], &[0])?, &[3], &[1f32; 3])?;
    expect("max", &red(b, Function::reduce_max, &x, &[0, 3], &[0])?, &[3], &[-inf; 3])?;
    expect("min", &red(b, Function::reduce_min, &x, &[0, 3], &[0])?, &[3], &[inf; 3])
}

/// Empty integer reductions: I32 max MIN / min MAX; U8 max 0, min 255, and 255, or 0, xor 0.
pub fn reduce_empty_identities_int(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceMax, ReduceMin, ReduceSum, ReduceProduct], [Int32]);
    let x: [i32; 0] = [];
    expect("i32 max", &red(b, Function::reduce_max, &x, &[0, 2], &[0])?, &[2], &[i32::MIN; 2])?;
    expect("i32 min", &red(b, Function::reduce_min, &x, &[0, 2], &[0])?, &[2], &[i32::MAX; 2])?;
    expect("i32 sum", &red(b, Function::reduce_sum, &x, &[0, 2], &[0])?, &[2], &[0i32; 2])?;
    expect("i32 product", &red(b, Function::reduce_product, &x, &[0, 2], &[0])?, &[2], &[1i32; 2])?;
    if has_dtype(b, DType::Uint8) {
        let u: [u8; 0] = [];
        expect("u8 max", &red(b, Function::reduce_max, &u, &[0], &[0])?, &[], &[0u8])?;
        expect("u8 min", &red(b, Function::reduce_min, &u, &[0], &[0])?, &[], &[255u8])?;
        if has_op(b, OpType::ReduceBitwiseAnd)
            && has_op(b, OpType::ReduceBitwiseOr)
            && has_op(b, OpType::ReduceBitwiseXor)
        {
            expect("u8 and", &red(b, Function::reduce_bitwise_and, &u, &[0], &[0])?, &[], &[255u8])?;
            expect("u8 or", &red(b, Function::reduce_bitwise_or, &u, &[0], &[0])?, &[], &[0u8])?;
            expect("u8 xor", &red(b, Function::reduce_bitwise_xor, &u, &[0], &[0])?, &[], &[0u8])?;
        }
    }
    Ok(())
}

/// Empty Bool reductions: and = true, or = false, xor = false.
pub fn reduce_empty_identities_bool(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceLogicalAnd, ReduceLogicalOr, ReduceLogicalXor], [Bool]);
    let x: [bool; 0] = [];
    expect("and", &red(b, Function::reduce_logical_and, &x, &[0], &[0])?, &[], &[true])?;
    expect("or", &red(b, Function::reduce_logical_or, &x, &[0], &[0])?, &[], &[false])?;
    expect("xor", &red(b, Function::reduce_logical_xor, &x, &[0], &[0])?, &[], &[false])
}

/// Max/Min/Sum propagate NaN: ReduceMax `[1,NaN,3]` = NaN.
pub fn reduce_nan_propagates(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceMax, ReduceMin, ReduceSum], [Float32]);
    let x = [1f32, f32::NAN, 3.];
    expect("max", &red(b, Function::reduce_max, &x, &[3], &[])?, &[], &[f32::NAN])?;
    expect("min", &red(b, Function::reduce_min, &x, &[3], &[])?, &[], &[f32::NAN])?;
    expect("sum", &red(b, Function::reduce_sum, &x, &[3], &[])?, &[], &[f32::NAN])?;
    let y = [f32::NAN, 1., 5.];
    expect("max nan first", &red(b, Function::reduce_max, &y, &[3], &[])?, &[], &[f32::NAN])
}

/// I32 And `[7,3,2]` = 2; U8 Or `[[3],[12],[17]]` axis 0 = `[31]`; I64 Xor `[[10],[20]]` = `[30]`.
pub fn reduce_bitwise(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceBitwiseAnd, ReduceBitwiseOr, ReduceBitwiseXor]);
    if has_dtype(b, DType::Int32) {
        expect("i32 and", &red(b, Function::reduce_bitwise_and, &[7i32, 3, 2], &[3], &[])?, &[], &[2i32])?;
    }
    if has_dtype(b, DType::Uint8) {
        let out = red(b, Function::reduce_bitwise_or, &[3u8, 12, 17], &[3, 1], &[0])?;
        expect("u8 or", &out, &[1], &[31u8])?;
    }
    if has_dtype(b, DType::Int64) {
        expect("i64 xor", &red(b, Function::reduce_bitwise_xor, &[10i64, 20], &[2, 1], &[0])?, &[1], &[30i64])?;
    }
    if has_dtype(b, DType::Int8) {
        expect("i8 and", &red(b, Function::reduce_bitwise_and, &[-1i8, -2], &[2], &[])?, &[], &[-2i8])?;
    }
    Ok(())
}

/// Bool And/Or/Xor along axis 1; Xor is parity (`[T,T,T]` = T).
pub fn reduce_logical(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceLogicalAnd, ReduceLogicalOr, ReduceLogicalXor], [Bool]);
    let x = [true, false, true, true, false, false];
    expect("and", &red(b, Function::reduce_logical_and, &x, &[3, 2], &[1])?, &[3], &[false, true, false])?;
    expect("or", &red(b, Function::reduce_logical_or, &x, &[3, 2], &[1])?, &[3], &[true, true, false])?;
    expect("xor", &red(b, Function::reduce_logical_xor, &x, &[3, 2], &[1])?, &[3], &[true, false, false])?;
    expect("xor TTT", &red(b, Function::reduce_logical_xor, &[true; 3], &[3], &[])?, &[], &[true])
}

fn sum_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = red(b, Function::reduce_sum, &vals::<T>(&[1., 2., 3., 4.]), &[2, 2], &[0])?;
    expect("sum axis 0", &out, &[2], &vals::<T>(&[4., 6.]))?;
    let out = red(b, Function::reduce_sum, &vals::<T>(&[1., 2., 3., 4.]), &[2, 2], &[])?;
    expect("sum all", &out, &[], &vals::<T>(&[10.]))
}

/// ReduceSum in every numeric dtype, complex included.
pub fn reduce_sum_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum]);
    for_types!(b, sum_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

/// Duplicate or out-of-range axes are rejected.
pub fn reduce_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum], [Float32]);
    let x = || vec![t(&[1f32; 4], &[2, 2])];
    expect_error1(b, "axis 2", &x(), |f, p| f.reduce_sum(p[0], &[2]))?;
    expect_error1(b, "duplicate", &x(), |f, p| f.reduce_sum(p[0], &[0, 0]))
}

/// Ties pick the lowest index: ArgMin `[3,1,4,1,5]` = 1, ArgMax `[3,1,3]` = 0, I32 `[5,7,7]` = 1.
pub fn argminmax_first_of_ties(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ArgMinMax], [Float32, Int32]);
    expect("argmin", &argmm(b, &[3f32, 1., 4., 1., 5.], &[5], 0, true)?, &[], &[1i32])?;
    expect("argmax", &argmm(b, &[3f32, 1., 3.], &[3], 0, false)?, &[], &[0i32])?;
    expect("argmax i32", &argmm(b, &[5i32, 7, 7], &[3], 0, false)?, &[], &[1i32])
}

/// I32 `[[1,2,3],[9,5,4],[0,8,2]]`: ArgMax along axis 1 = `[2,0,1]`, ArgMin = `[0,2,0]`, ArgMax
/// along axis 0 = `[1,2,1]`.
pub fn argminmax_axis1_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ArgMinMax], [Int32]);
    let x = [1i32, 2, 3, 9, 5, 4, 0, 8, 2];
    expect("argmax axis 1", &argmm(b, &x, &[3, 3], 1, false)?, &[3], &[2i32, 0, 1])?;
    expect("argmin axis 1", &argmm(b, &x, &[3, 3], 1, true)?, &[3], &[0i32, 2, 0])?;
    expect("argmax axis 0", &argmm(b, &x, &[3, 3], 0, false)?, &[3], &[1i32, 2, 1])
}

/// NaN is the extreme and the first NaN wins: `[1,NaN,3,NaN,3]` → 1 for both (also F64, BF16).
pub fn argminmax_nan_first(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ArgMinMax], [Float32, Int32]);
    let x = [1f32, f32::NAN, 3., f32::NAN, 3.];
    expect("argmax", &argmm(b, &x, &[5], 0, false)?, &[], &[1i32])?;
    expect("argmin", &argmm(b, &x, &[5], 0, true)?, &[], &[1i32])?;
    if has_dtype(b, DType::Float64) {
        let y = [5f64, 7., f64::NAN, f64::NAN];
        expect("f64 argmax", &argmm(b, &y, &[4], 0, false)?, &[], &[2i32])?;
    }
    if has_dtype(b, DType::BFloat16) {
        let y = vals::<bf16>(&[5., f64::NAN, 7., f64::NAN]);
        expect("bf16 argmin", &argmm(b, &y, &[4], 0, true)?, &[], &[1i32])?;
    }
    Ok(())
}

/// −0 and +0 tie: ArgMax `[−0,+0]` = 0, ArgMin `[+0,−0]` = 0.
pub fn argminmax_signed_zero_tie(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ArgMinMax], [Float32, Int32]);
    expect("argmax", &argmm(b, &[-0.0f32, 0.0], &[2], 0, false)?, &[], &[0i32])?;
    expect("argmin", &argmm(b, &[0.0f32, -0.0], &[2], 0, true)?, &[], &[0i32])
}

/// The output dtype may be any integer dtype.
pub fn argminmax_output_dtypes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ArgMinMax], [Float32]);
    let x = || vec![v(&[2f32, 9., -1., 9.])];
    if has_dtype(b, DType::Int64) {
        let out = exec1(b, &x(), |f, p| f.arg_min_max(p[0], 0, DType::Int64, false))?;
        expect("i64", &out, &[], &[1i64])?;
    }
    if has_dtype(b, DType::Uint8) {
        let out = exec1(b, &x(), |f, p| f.arg_min_max(p[0], 0, DType::Uint8, true))?;
        expect("u8", &out, &[], &[2u8])?;
    }
    if has_dtype(b, DType::Int16) {
        let out = exec1(b, &[t(&[1f32, 0., 0., 1.], &[2, 2])], |f, p| f.arg_min_max(p[0], 1, DType::Int16, false))?;
        expect("i16", &out, &[2], &[0i16, 1])?;
    }
    Ok(())
}

/// An empty reduced axis, a scalar operand and a float output dtype are rejected.
pub fn argminmax_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ArgMinMax], [Float32, Int32]);
    expect_error1(b, "empty axis", &[t::<f32>(&[], &[2, 0])], |f, p| f.arg_min_max(p[0], 1, DType::Int32, false))?;
    expect_error1(b, "scalar", &[sc(1f32)], |f, p| f.arg_min_max(p[0], 0, DType::Int32, false))?;
    expect_error1(b, "f32 out", &[v(&[1f32, 2.])], |f, p| f.arg_min_max(p[0], 0, DType::Float32, false))
}

/// CumSum `[1,2,3,4]`: inclusive, exclusive, reverse, reverse exclusive.
pub fn cumsum_variants(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumSum], [Float32]);
    let x = [1f32, 2., 3., 4.];
    expect("inclusive", &cum(b, Function::cum_sum, &x, false, false)?, &[4], &[1f32, 3., 6., 10.])?;
    expect("exclusive", &cum(b, Function::cum_sum, &x, true, false)?, &[4], &[0f32, 1., 3., 6.])?;
    expect("reverse", &cum(b, Function::cum_sum, &x, false, true)?, &[4], &[10f32, 9., 7., 4.])?;
    expect("reverse exclusive", &cum(b, Function::cum_sum, &x, true, true)?, &[4], &[9f32, 7., 4., 0.])
}

/// CumProd `[1,2,3,4]` in the four modes.
pub fn cumprod_variants(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumProd], [Int32]);
    let x = [1i32, 2, 3, 4];
    expect("inclusive", &cum(b, Function::cum_prod, &x, false, false)?, &[4], &[1i32, 2, 6, 24])?;
    expect("exclusive", &cum(b, Function::cum_prod, &x, true, false)?, &[4], &[1i32, 1, 2, 6])?;
    expect("reverse", &cum(b, Function::cum_prod, &x, false, true)?, &[4], &[24i32, 24, 12, 4])?;
    expect("reverse exclusive", &cum(b, Function::cum_prod, &x, true, true)?, &[4], &[24i32, 12, 4, 1])
}

/// CumMax propagates NaN from its position on: `[3,1,NaN,4,2]` → `[3,3,NaN,NaN,NaN]`; reverse.
pub fn cummax_nan(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumMax], [Float32]);
    let nan = f32::NAN;
    let out = cum(b, Function::cum_max, &[3f32, 1., nan, 4., 2.], false, false)?;
    expect("nan", &out, &[5], &[3f32, 3., nan, nan, nan])?;
    let out = cum(b, Function::cum_max, &[3f32, 1., 4., 0., 2.], false, true)?;
    expect("reverse", &out, &[5], &[4f32, 4., 4., 2., 2.])
}

/// CumMin, and the exclusive identities: lowest for CumMax, highest for CumMin.
pub fn cummin_and_exclusive_identities(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumMin, CumMax], [Float32, Int32]);
    let out = cum(b, Function::cum_min, &[3f32, 1., 4., 0., 2.], false, false)?;
    expect("cummin", &out, &[5], &[3f32, 1., 1., 0., 0.])?;
    let out = cum(b, Function::cum_max, &[3i32, 1, 4], true, false)?;
    expect("cummax exclusive", &out, &[3], &[i32::MIN, 3, 3])?;
    let out = cum(b, Function::cum_min, &[3f32, 1., 4.], true, false)?;
    expect("cummin exclusive", &out, &[3], &[f32::INFINITY, 3., 1.])?;
    if has_dtype(b, DType::Uint8) {
        expect("u8", &cum(b, Function::cum_min, &[3u8, 1], true, false)?, &[2], &[255u8, 3])?;
    }
    Ok(())
}

/// Integer CumSum wraps: I8 `[100,100]` → `[100,−56]`.
pub fn cumsum_int_wraps(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumSum], [Int8]);
    expect("i8", &cum(b, Function::cum_sum, &[100i8, 100], false, false)?, &[2], &[100i8, -56])
}

/// 2-D CumSum along axis 0 and axis 1.
pub fn cum_2d_axes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumSum], [Int32]);
    let x = || vec![t(&[1i32, 2, 3, 4, 5, 6], &[2, 3])];
    let out = exec1(b, &x(), |f, p| f.cum_sum(p[0], 0, false, false))?;
    expect("axis 0", &out, &[2, 3], &[1i32, 2, 3, 5, 7, 9])?;
    let out = exec1(b, &x(), |f, p| f.cum_sum(p[0], 1, false, false))?;
    expect("axis 1", &out, &[2, 3], &[1i32, 3, 6, 4, 9, 15])
}

/// Cumulative ops reject Bool operands and out-of-range axes.
pub fn cum_bool_rejected(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumSum], [Bool, Float32]);
    expect_error1(b, "bool", &[v(&[true, false])], |f, p| f.cum_sum(p[0], 0, false, false))?;
    expect_error1(b, "axis 1", &[v(&[1f32, 2.])], |f, p| f.cum_sum(p[0], 1, false, false))
}

fn cum_half_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = cum(b, Function::cum_sum, &vals::<T>(&[1., 2., 3.]), false, false)?;
    expect("cumsum", &out, &[3], &vals::<T>(&[1., 3., 6.]))
}

/// CumSum in F16 and BF16.
pub fn cum_half(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [CumSum]);
    for_types!(b, cum_half_typed, [f16, bf16])
}
