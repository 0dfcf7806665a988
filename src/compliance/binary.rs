//! Compliance cases for binary elementwise ops and comparisons (ops.md §4.0–§4.2, §9, §11).

use std::f64::consts::{FRAC_PI_2, FRAC_PI_4, PI, SQRT_2};
use std::sync::Arc;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use super::*;

type BinFn = fn(&Function, Value, Value) -> crate::Result<Value>;

fn bin<T: TestElem>(
    b: &Arc<dyn Backend>,
    op: BinFn,
    x: &[T],
    xd: &[usize],
    y: &[T],
    yd: &[usize],
) -> Result<Buffer, String> {
    exec1(b, &[t(x, xd), t(y, yd)], |f, p| op(f, p[0], p[1]))
}

fn bin1<T: TestElem>(b: &Arc<dyn Backend>, op: BinFn, x: &[T], y: &[T]) -> Result<Buffer, String> {
    bin(b, op, x, &[x.len()], y, &[y.len()])
}

const I32MIN: i32 = i32::MIN;
const I32MAX: i32 = i32::MAX;

/// BF16 scalars: 7 + 11 = 18.
pub fn add_bf16_scalars(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [BFloat16]);
    let out = bin(b, Function::add, &[bf16::from_f32(7.0)], &[], &[bf16::from_f32(11.0)], &[])?;
    expect("bf16 7+11", &out, &[], &[bf16::from_f32(18.0)])
}

/// I32 `[-1,2] + [1]`: a shape-`[1]` operand broadcasts per axis.
pub fn add_shape1_broadcast(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Int32]);
    let out = bin(b, Function::add, &[-1i32, 2], &[2], &[1i32], &[1])?;
    expect("[-1,2]+[1]", &out, &[2], &[0i32, 3])
}

/// I32 `[[-1],[2]] + (-1)` with a scalar operand, on either side.
pub fn add_scalar_broadcast(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Int32]);
    let out = bin(b, Function::add, &[-1i32, 2], &[2, 1], &[-1i32], &[])?;
    expect("[[-1],[2]] + -1", &out, &[2, 1], &[-2i32, 1])?;
    let out = bin(b, Function::add, &[-1i32], &[], &[-1i32, 2], &[2, 1])?;
    expect("-1 + [[-1],[2]]", &out, &[2, 1], &[-2i32, 1])
}

/// U64 2×2 + 2×2.
pub fn add_u64_same_shape(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Uint64]);
    let out = bin(b, Function::add, &[1u64, 2, 3, 4], &[2, 2], &[10u64, 20, 30, 1 << 40], &[2, 2])?;
    expect("u64 2x2", &out, &[2, 2], &[11u64, 22, 33, (1 << 40) + 4])
}

/// `[3,1] + [1,2]` → `[3,2]`: both sides broadcast.
pub fn add_two_sided_broadcast(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Float32]);
    let out = bin(b, Function::add, &[1f32, 2., 3.], &[3, 1], &[10f32, 20.], &[1, 2])?;
    expect("[3,1]+[1,2]", &out, &[3, 2], &[11f32, 21., 12., 22., 13., 23.])
}

fn add_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = bin1(b, Function::add, &vals::<T>(&[1., 2., 3.]), &vals::<T>(&[4., 5., 6.]))?;
    expect("[1,2,3]+[4,5,6]", &out, &[3], &vals::<T>(&[5., 7., 9.]))
}

/// `[1,2,3] + [4,5,6]` in every numeric dtype, complex included.
pub fn add_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add]);
    for_types!(b, add_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

/// Integer addition wraps (two's complement).
pub fn add_int_overflow_wraps(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add]);
    if has_dtype(b, DType::Int8) {
        let out = bin1(b, Function::add, &[127i8, -128], &[1i8, -1])?;
        expect("i8 wrap", &out, &[2], &[-128i8, 127])?;
    }
    if has_dtype(b, DType::Uint8) {
        let out = bin1(b, Function::add, &[255u8], &[1u8])?;
        expect("u8 wrap", &out, &[1], &[0u8])?;
    }
    if has_dtype(b, DType::Int16) {
        let out = bin1(b, Function::add, &[i16::MAX], &[1i16])?;
        expect("i16 wrap", &out, &[1], &[i16::MIN])?;
    }
    if has_dtype(b, DType::Int32) {
        let out = bin1(b, Function::add, &[I32MAX, I32MIN], &[1i32, -1])?;
        expect("i32 wrap", &out, &[2], &[I32MIN, I32MAX])?;
    }
    if has_dtype(b, DType::Int64) {
        let out = bin1(b, Function::add, &[i64::MAX], &[1i64])?;
        expect("i64 wrap", &out, &[1], &[i64::MIN])?;
    }
    if has_dtype(b, DType::Uint64) {
        let out = bin1(b, Function::add, &[u64::MAX], &[2u64])?;
        expect("u64 wrap", &out, &[1], &[1u64])?;
    }
    Ok(())
}

/// Size-0 operands give size-0 results (also against a scalar).
pub fn add_empty_tensors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Float32]);
    let out = bin(b, Function::add, &[] as &[f32], &[0], &[] as &[f32], &[0])?;
    expect::<f32>("[0]+[0]", &out, &[0], &[])?;
    let out = bin(b, Function::add, &[] as &[f32], &[2, 0], &[1f32], &[])?;
    expect::<f32>("[2,0]+scalar", &out, &[2, 0], &[])
}

/// IEEE specials: Inf−Inf = NaN, NaN propagates, −0 + −0 = −0, −0 + +0 = +0.
pub fn add_float_specials(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Float32]);
    let inf = f32::INFINITY;
    let out = bin1(b, Function::add, &[inf, inf, 1., f32::NAN], &[-inf, 1., f32::NAN, 1.])?;
    expect("specials", &out, &[4], &[f32::NAN, inf, f32::NAN, f32::NAN])?;
    let out = bin1(b, Function::add, &[-0.0f32, -0.0], &[-0.0f32, 0.0])?;
    expect_bits("signed zeros", &out, &[2], &[-0.0f32, 0.0])
}

fn sub_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = bin1(b, Function::sub, &vals::<T>(&[5., 7., 9.]), &vals::<T>(&[4., 5., 6.]))?;
    expect("[5,7,9]-[4,5,6]", &out, &[3], &vals::<T>(&[1., 2., 3.]))
}

/// `[5,7,9] − [4,5,6]` in every numeric dtype, plus the Go case BF16 7 − 11 = −4.
pub fn sub_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sub]);
    if has_dtype(b, DType::BFloat16) {
        let out = bin(b, Function::sub, &[bf16::from_f32(7.0)], &[], &[bf16::from_f32(11.0)], &[])?;
        expect("bf16 7-11", &out, &[], &[bf16::from_f32(-4.0)])?;
    }
    for_types!(b, sub_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

/// Unsigned subtraction wraps: 0 − 1 = MAX; i8 −128 − 1 = 127.
pub fn sub_unsigned_wraps(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sub], [Uint8, Uint32, Int8]);
    expect("u8", &bin1(b, Function::sub, &[0u8], &[1u8])?, &[1], &[255u8])?;
    expect("u32", &bin1(b, Function::sub, &[0u32], &[1u32])?, &[1], &[u32::MAX])?;
    expect("i8", &bin1(b, Function::sub, &[-128i8], &[1i8])?, &[1], &[127i8])
}

/// F32 `[1,2,3] · 2` → `[2,4,6]`.
pub fn mul_broadcast_scalar(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Mul], [Float32]);
    let out = bin(b, Function::mul, &[1f32, 2., 3.], &[3], &[2f32], &[])?;
    expect("[1,2,3]*2", &out, &[3], &[2f32, 4., 6.])
}

/// F64 8×8 `x·x` with x = k/8 (exact in binary).
pub fn mul_f64_8x8(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Mul], [Float64]);
    let x: Vec<f64> = (0..64).map(|k| k as f64 / 8.0 - 3.0).collect();
    let want: Vec<f64> = x.iter().map(|v| v * v).collect();
    let out = exec1(b, &[t(&x, &[8, 8])], |f, p| f.mul(p[0], p[0]))?;
    expect("x*x", &out, &[8, 8], &want)
}

/// Integer multiplication wraps.
pub fn mul_int_overflow_wraps(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Mul], [Int32, Int8, Uint8, Int64]);
    let out = bin1(b, Function::mul, &[65536i32, 46341], &[65536i32, 46341])?;
    expect("i32", &out, &[2], &[0i32, -2147479015])?;
    expect("i8", &bin1(b, Function::mul, &[16i8, -128], &[16i8, -1])?, &[2], &[0i8, -128])?;
    expect("u8", &bin1(b, Function::mul, &[16u8], &[17u8])?, &[1], &[16u8])?;
    expect("i64", &bin1(b, Function::mul, &[1i64 << 32], &[1i64 << 32])?, &[1], &[0i64])
}

/// Integer division truncates toward zero.
pub fn div_i32_truncates(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Div], [Int32]);
    let out = bin(b, Function::div, &[-6i32, 9, 12, 15], &[2, 2], &[2i32, 3, 4, 5], &[2, 2])?;
    expect("2x2", &out, &[2, 2], &[-3i32, 3, 3, 3])?;
    let out = bin1(b, Function::div, &[7i32, -7, 7, -7], &[-2i32, 2, 2, -2])?;
    expect("signs", &out, &[4], &[-3i32, -3, 3, 3])
}

/// Integer ÷ 0 = −1 (signed) / all ones (unsigned); MIN ÷ −1 = MIN (§9).
pub fn div_int_by_zero(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Div], [Int32, Uint32]);
    let out = bin1(b, Function::div, &[7i32, -7, 0, I32MIN], &[0i32, 0, 0, -1])?;
    expect("i32", &out, &[4], &[-1i32, -1, -1, I32MIN])?;
    let out = bin1(b, Function::div, &[7u32, 0], &[0u32, 0])?;
    expect("u32", &out, &[2], &[u32::MAX, u32::MAX])?;
    if has_dtype(b, DType::Int8) {
        expect("i8", &bin1(b, Function::div, &[-128i8, 5], &[-1i8, 0])?, &[2], &[-128i8, -1])?;
    }
    if has_dtype(b, DType::Uint8) {
        expect("u8", &bin1(b, Function::div, &[9u8], &[0u8])?, &[1], &[255u8])?;
    }
    if has_dtype(b, DType::Int64) {
        expect("i64", &bin1(b, Function::div, &[i64::MIN, 5], &[-1i64, 0])?, &[2], &[i64::MIN, -1])?;
    }
    Ok(())
}

/// Float division follows IEEE: ±Inf, NaN for 0/0, 1/−0 = −Inf.
pub fn div_float_ieee(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Div], [Float32]);
    let inf = f32::INFINITY;
    let out = bin1(b, Function::div, &[1f32, -1., 0., 1., 7.], &[0f32, 0., 0., -0.0, 2.])?;
    expect("ieee", &out, &[5], &[inf, -inf, f32::NAN, -inf, 3.5])
}

fn div_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = bin1(b, Function::div, &vals::<T>(&[8., 9., 20.]), &vals::<T>(&[2., 3., 4.]))?;
    expect("[8,9,20]/[2,3,4]", &out, &[3], &vals::<T>(&[4., 3., 5.]))
}

/// `[8,9,20] / [2,3,4]` in every numeric dtype.
pub fn div_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Div]);
    for_types!(b, div_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

/// I32 rem: sign follows the dividend.
pub fn rem_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Rem], [Int32]);
    let out = bin(b, Function::rem, &[7i32, 9], &[2], &[4i32], &[1])?;
    expect("[7,9] rem [4]", &out, &[2], &[3i32, 1])?;
    let out = bin1(b, Function::rem, &[-7i32, 7, -7, 7], &[4i32, -4, -4, 4])?;
    expect("signs", &out, &[4], &[-3i32, 3, -3, 3])
}

/// Integer rem 0 returns the dividend; MIN rem −1 = 0 (§9).
pub fn rem_int_by_zero(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Rem], [Int32, Uint32]);
    let out = bin1(b, Function::rem, &[7i32, -7, I32MIN], &[0i32, 0, -1])?;
    expect("i32", &out, &[3], &[7i32, -7, 0])?;
    expect("u32", &bin1(b, Function::rem, &[7u32], &[0u32])?, &[1], &[7u32])?;
    if has_dtype(b, DType::Int8) {
        expect("i8", &bin1(b, Function::rem, &[-128i8, 5], &[-1i8, 0])?, &[2], &[0i8, 5])?;
    }
    Ok(())
}

/// Float rem is C `fmod`: x rem 0 = NaN, Inf rem y = NaN, x rem Inf = x, −0 rem 1 = −0.
pub fn rem_float_fmod(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Rem], [Float32]);
    let inf = f32::INFINITY;
    let out = bin1(b, Function::rem, &[5f32, inf, 5., 5.5, -5.5, 5.5], &[0f32, 2., inf, 2., 2., -2.])?;
    expect("fmod", &out, &[6], &[f32::NAN, f32::NAN, 5., 1.5, -1.5, 1.5])?;
    let out = bin1(b, Function::rem, &[-0.0f32, 4.0], &[1f32, 2.0])?;
    expect_bits("signed zero", &out, &[2], &[-0.0f32, 0.0])
}

fn rem_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = bin1(b, Function::rem, &vals::<T>(&[7., 9., 20.]), &vals::<T>(&[4., 3., 6.]))?;
    expect("[7,9,20] rem [4,3,6]", &out, &[3], &vals::<T>(&[3., 0., 2.]))
}

/// `[7,9,20] rem [4,3,6]` in every non-complex numeric dtype.
pub fn rem_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Rem]);
    for_types!(b, rem_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

/// I32 `[2,3] ^ [2]` = `[4,9]`.
pub fn pow_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pow], [Int32]);
    let out = bin(b, Function::pow, &[2i32, 3], &[2], &[2i32], &[1])?;
    expect("[2,3]^[2]", &out, &[2], &[4i32, 9])
}

/// Integer Pow with negative exponents is 0 except bases ±1; 0^0 = 1; 3^40 wraps (§9, §11).
pub fn pow_int_negative_exponent(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pow], [Int32]);
    let base = [2i32, 1, -1, -1, -1, 0, 0, 5, 3];
    let exp = [-1i32, -1, -1, -2, -3, -1, 0, -2, 40];
    let out = bin1(b, Function::pow, &base, &exp)?;
    expect("int pow", &out, &[9], &[0i32, 1, -1, 1, -1, 0, 1, 0, 689956897])
}

/// C `pow` rules: x^0 = 1 even for NaN, 1^y = 1, negative^non-integer = NaN, 0^−1 = +Inf,
/// (−0)^−1 = −Inf, (−Inf)^3 = −Inf, (−1)^Inf = 1.
pub fn pow_float_specials(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pow], [Float32]);
    let inf = f32::INFINITY;
    let base = [f32::NAN, 1., -8., 0., -0.0, -inf, -1., 2., 2., 4.];
    let exp = [0f32, f32::NAN, 1. / 3., -1., -1., 3., inf, 10., 0.5, -0.5];
    let out = bin1(b, Function::pow, &base, &exp)?;
    let want = [1.0, 1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY, 1.0, 1024.0, SQRT_2, 0.5];
    expect_close::<f32>("pow specials", &out, &[10], &want, 0.0, 1e-6)
}

fn pow_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = bin1(b, Function::pow, &vals::<T>(&[2., 3., 1., 5.]), &vals::<T>(&[3., 2., 5., 0.]))?;
    expect("[2,3,1,5]^[3,2,5,0]", &out, &[4], &vals::<T>(&[8., 9., 1., 1.]))
}

/// Small exact powers in every non-complex numeric dtype.
pub fn pow_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pow]);
    for_types!(b, pow_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

/// Atan2(y, x) quadrants and signed zeros (§11).
pub fn atan2_quadrants(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Atan2], [Float32, Float64]);
    let inf = f64::INFINITY;
    let y = [0.0, -0.0, 0.0, -0.0, inf, inf, 1., 1., -1., -1.];
    let x = [0.0, 0.0, -0.0, -0.0, inf, -inf, 0., 1., -1., 1.];
    let want = [0.0, -0.0, PI, -PI, FRAC_PI_4, 3. * FRAC_PI_4, FRAC_PI_2, FRAC_PI_4, -3. * FRAC_PI_4, -FRAC_PI_4];
    let out = bin1(b, Function::atan2, &y, &x)?;
    expect_close::<f64>("f64", &out, &[10], &want, 0.0, 1e-15)?;
    let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let out = bin1(b, Function::atan2, &y32, &x32)?;
    expect_close::<f32>("f32", &out, &[10], &want, 0.0, 1e-6)?;
    let out = bin1(b, Function::atan2, &[0.0f32, -0.0], &[0.0f32, 0.0])?;
    expect_bits("signed zero", &out, &[2], &[0.0f32, -0.0])
}

fn atan2_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = bin1(b, Function::atan2, &vals::<T>(&[1., -1.]), &vals::<T>(&[1., 0.]))?;
    expect_close::<T>("atan2", &out, &[2], &[FRAC_PI_4, -FRAC_PI_2], 0.0, tol_for::<T>())
}

/// Atan2 on F16 and BF16 (computed in f32, rounded once).
pub fn atan2_half_types(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Atan2]);
    for_types!(b, atan2_typed, [f16, bf16])
}

/// I32 `[-1,2]` Max/Min `[0]`.
pub fn max_min_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Max, Min], [Int32]);
    let out = bin(b, Function::max, &[-1i32, 2], &[2], &[0i32], &[1])?;
    expect("max", &out, &[2], &[0i32, 2])?;
    let out = bin(b, Function::min, &[-1i32, 2], &[2], &[0i32], &[1])?;
    expect("min", &out, &[2], &[-1i32, 0])
}

/// Max(−0,+0) = +0 and Min = −0 in either order; NaN in either operand gives NaN.
pub fn max_min_signed_zero_and_nan(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Max, Min], [Float32]);
    let x = [-0.0f32, 0.0, f32::NAN, 1.];
    let y = [0.0f32, -0.0, 1., f32::NAN];
    expect("max nan", &bin1(b, Function::max, &x, &y)?, &[4], &[0.0f32, 0.0, f32::NAN, f32::NAN])?;
    expect("min nan", &bin1(b, Function::min, &x, &y)?, &[4], &[0.0f32, 0.0, f32::NAN, f32::NAN])?;
    expect_bits("max zeros", &bin1(b, Function::max, &x[..2], &y[..2])?, &[2], &[0.0f32, 0.0])?;
    expect_bits("min zeros", &bin1(b, Function::min, &x[..2], &y[..2])?, &[2], &[-0.0f32, -0.0])
}

fn max_min_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[1., 5., 3.]);
    let y = vals::<T>(&[4., 2., 3.]);
    expect("max", &bin1(b, Function::max, &x, &y)?, &[3], &vals::<T>(&[4., 5., 3.]))?;
    expect("min", &bin1(b, Function::min, &x, &y)?, &[3], &vals::<T>(&[1., 2., 3.]))
}

/// Max/Min in every real numeric dtype.
pub fn max_min_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Max, Min]);
    for_types!(b, max_min_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

/// Complex Max/Min are lexicographic: real part, then imaginary part.
pub fn max_min_complex_lexicographic(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Max, Min], [Complex64]);
    let c = Complex32::new;
    let x = [c(1., 5.), c(1., 2.), c(3., -1.)];
    let y = [c(2., 0.), c(1., 3.), c(3., -2.)];
    expect("max", &bin1(b, Function::max, &x, &y)?, &[3], &[c(2., 0.), c(1., 3.), c(3., -1.)])?;
    expect("min", &bin1(b, Function::min, &x, &y)?, &[3], &[c(1., 5.), c(1., 2.), c(3., -2.)])
}

/// U8 scalars `0b11110000` and `0b10101010`.
pub fn bitwise_u8(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BitwiseAnd, BitwiseOr, BitwiseXor], [Uint8]);
    let run = |op: BinFn| bin(b, op, &[0b1111_0000u8], &[], &[0b1010_1010u8], &[]);
    expect("and", &run(Function::bitwise_and)?, &[], &[0b1010_0000u8])?;
    expect("or", &run(Function::bitwise_or)?, &[], &[0b1111_1010u8])?;
    expect("xor", &run(Function::bitwise_xor)?, &[], &[0b0101_1010u8])
}

fn bitwise_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[12., 10.]);
    let y = vals::<T>(&[10., 6.]);
    expect("and", &bin1(b, Function::bitwise_and, &x, &y)?, &[2], &vals::<T>(&[8., 2.]))?;
    expect("or", &bin1(b, Function::bitwise_or, &x, &y)?, &[2], &vals::<T>(&[14., 14.]))?;
    expect("xor", &bin1(b, Function::bitwise_xor, &x, &y)?, &[2], &vals::<T>(&[6., 12.]))
}

/// Bitwise And/Or/Xor in every integer dtype; signed operands act on two's complement bits.
pub fn bitwise_every_int_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BitwiseAnd, BitwiseOr, BitwiseXor]);
    if has_dtype(b, DType::Int8) {
        expect("i8 -1&5", &bin1(b, Function::bitwise_and, &[-1i8, -128], &[5i8, 127])?, &[2], &[5i8, 0])?;
    }
    for_types!(b, bitwise_typed, [i8, i16, i32, i64, u8, u16, u32, u64])
}

/// Logical And/Or/Xor truth tables (Go case `[T,F]` op `[T,T]` included).
pub fn logical_ops(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [LogicalAnd, LogicalOr, LogicalXor], [Bool]);
    let x = [false, false, true, true];
    let y = [false, true, false, true];
    expect("and", &bin1(b, Function::logical_and, &x, &y)?, &[4], &[false, false, false, true])?;
    expect("or", &bin1(b, Function::logical_or, &x, &y)?, &[4], &[false, true, true, true])?;
    expect("xor", &bin1(b, Function::logical_xor, &x, &y)?, &[4], &[false, true, true, false])?;
    expect("go and", &bin1(b, Function::logical_and, &[true, false], &[true, true])?, &[2], &[true, false])
}

/// I32 ShiftLeft: 1 by [31,32,33,−1] = [MIN,0,0,0]; −1 << 1 = −2.
pub fn shift_left_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ShiftLeft], [Int32]);
    let out = bin1(b, Function::shift_left, &[1i32, 1, 1, 1, -1], &[31i32, 32, 33, -1, 1])?;
    expect("shl", &out, &[5], &[I32MIN, 0, 0, 0, -2])
}

/// U8 ShiftLeft: 1 by [7,8,255] = [128,0,0].
pub fn shift_left_u8(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ShiftLeft], [Uint8]);
    let out = bin1(b, Function::shift_left, &[1u8, 1, 1], &[7u8, 8, 255])?;
    expect("shl u8", &out, &[3], &[128u8, 0, 0])
}

/// I32 ShiftRightArithmetic: amounts ≥ width or negative fill with the sign.
pub fn shift_right_arithmetic_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ShiftRightArithmetic], [Int32]);
    let out = bin1(b, Function::shift_right_arithmetic, &[-8i32, 8, -8, 8, -2, -8], &[32i32, 32, -1, -1, 1, 1])?;
    expect("sra", &out, &[6], &[-1i32, 0, -1, 0, -1, -4])
}

/// ShiftRightArithmetic on unsigned dtypes fills with the top bit (§9).
pub fn shift_right_arithmetic_unsigned(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ShiftRightArithmetic], [Uint8]);
    let out = bin1(b, Function::shift_right_arithmetic, &[0x80u8, 0x80, 0x40, 0x40], &[1u8, 8, 1, 8])?;
    expect("sra u8", &out, &[4], &[0xC0u8, 0xFF, 0x20, 0x00])
}

/// ShiftRightLogical zero-fills on the raw bits; amounts ≥ width or negative give 0.
pub fn shift_right_logical(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ShiftRightLogical], [Int32, Uint8]);
    let out = bin1(b, Function::shift_right_logical, &[-8i32, -8, -8], &[1i32, 32, -1])?;
    expect("srl i32", &out, &[3], &[2147483644i32, 0, 0])?;
    let out = bin1(b, Function::shift_right_logical, &[0x80u8, 0x80], &[1u8, 8])?;
    expect("srl u8", &out, &[2], &[0x40u8, 0])
}

fn shift_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = bin1(b, Function::shift_left, &vals::<T>(&[1., 32.]), &vals::<T>(&[3., 1.]))?;
    expect("shl", &out, &[2], &vals::<T>(&[8., 64.]))?;
    let out = bin1(b, Function::shift_right_logical, &vals::<T>(&[64., 8.]), &vals::<T>(&[3., 1.]))?;
    expect("srl", &out, &[2], &vals::<T>(&[8., 4.]))?;
    let out = bin1(b, Function::shift_right_arithmetic, &vals::<T>(&[64., 8.]), &vals::<T>(&[3., 1.]))?;
    expect("sra", &out, &[2], &vals::<T>(&[8., 4.]))
}

/// Shifts of small positive values in every integer dtype.
pub fn shift_every_int_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ShiftLeft, ShiftRightLogical, ShiftRightArithmetic]);
    for_types!(b, shift_typed, [i8, i16, i32, i64, u8, u16, u32, u64])
}

/// Complex(re, im): F32 → C64, F64 → C128, with a scalar operand broadcast.
pub fn complex_from_parts(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Complex], [Float32, Complex64]);
    let out = bin1(b, Function::complex, &[1f32, 2.], &[3f32, 4.])?;
    expect("c64", &out, &[2], &[Complex32::new(1., 3.), Complex32::new(2., 4.)])?;
    let out = bin(b, Function::complex, &[1f32, 2.], &[2], &[5f32], &[])?;
    expect("scalar im", &out, &[2], &[Complex32::new(1., 5.), Complex32::new(2., 5.)])?;
    if has_dtype(b, DType::Complex128) && has_dtype(b, DType::Float64) {
        let out = bin1(b, Function::complex, &[1f64], &[-2f64])?;
        expect("c128", &out, &[1], &[Complex64::new(1., -2.)])?;
    }
    Ok(())
}

/// Complex Add, Sub, Mul, Div: (1+2i)(3+4i) = −5+10i, (1+2i)/(3+4i) = 0.44+0.08i.
pub fn complex_arithmetic(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add, Sub, Mul, Div], [Complex64]);
    let c = Complex32::new;
    let x = [c(1., 2.), c(3., -1.)];
    let y = [c(3., 4.), c(1., 1.)];
    expect("add", &bin1(b, Function::add, &x, &y)?, &[2], &[c(4., 6.), c(4., 0.)])?;
    expect("sub", &bin1(b, Function::sub, &x, &y)?, &[2], &[c(-2., -2.), c(2., -2.)])?;
    expect("mul", &bin1(b, Function::mul, &x, &y)?, &[2], &[c(-5., 10.), c(4., 2.)])?;
    expect_complex::<Complex32>("div", &bin1(b, Function::div, &x, &y)?, &[2], &[(0.44, 0.08), (1., -2.)], 1e-6, 1e-6)?;
    if has_dtype(b, DType::Complex128) {
        let c = Complex64::new;
        let out = bin1(b, Function::mul, &[c(0., 1.)], &[c(0., 1.)])?;
        expect("c128 i*i", &out, &[1], &[c(-1., 0.)])?;
    }
    Ok(())
}

/// Incompatible shapes are rejected: `[2]+[3]`, rank mismatch `[2]+[1,2]` (no rank extension),
/// and different dtypes.
pub fn binary_shape_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Float32, Int32]);
    expect_error1(b, "[2]+[3]", &[v(&[1f32, 2.]), v(&[1f32, 2., 3.])], |f, p| f.add(p[0], p[1]))?;
    expect_error1(b, "[2]+[1,2]", &[v(&[1f32, 2.]), t(&[1f32, 2.], &[1, 2])], |f, p| f.add(p[0], p[1]))?;
    expect_error1(b, "f32+i32", &[v(&[1f32]), v(&[1i32])], |f, p| f.add(p[0], p[1]))
}

/// Dtype groups: logical ops need Bool, bitwise/shift need ints, Rem rejects complex, Atan2
/// needs floats, arithmetic rejects Bool.
pub fn binary_dtype_group_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add, LogicalAnd, BitwiseAnd, ShiftLeft], [Float32, Bool, Int32]);
    let ff = || vec![v(&[1f32]), v(&[2f32])];
    expect_error1(b, "logical_and f32", &ff(), |f, p| f.logical_and(p[0], p[1]))?;
    expect_error1(b, "bitwise_and f32", &ff(), |f, p| f.bitwise_and(p[0], p[1]))?;
    expect_error1(b, "shift_left f32", &ff(), |f, p| f.shift_left(p[0], p[1]))?;
    expect_error1(b, "add bool", &[v(&[true]), v(&[false])], |f, p| f.add(p[0], p[1]))?;
    if has_op(b, OpType::Atan2) {
        expect_error1(b, "atan2 i32", &[v(&[1i32]), v(&[2i32])], |f, p| f.atan2(p[0], p[1]))?;
    }
    if has_op(b, OpType::Rem) && has_dtype(b, DType::Complex64) {
        let c = Complex32::new(1., 1.);
        expect_error1(b, "rem c64", &[v(&[c]), v(&[c])], |f, p| f.rem(p[0], p[1]))?;
    }
    Ok(())
}

/// F32 scalar pairs, each comparison true (Go case), and their negations.
pub fn compare_f32_scalars(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Equal, NotEqual, GreaterOrEqual, GreaterThan, LessOrEqual, LessThan], [Float32]);
    let cases: [(BinFn, f32, f32, bool); 8] = [
        (Function::equal, 1.5, 1.5, true),
        (Function::not_equal, 1.0, 2.0, true),
        (Function::greater_or_equal, 2.0, 2.0, true),
        (Function::greater_than, 3.0, 2.0, true),
        (Function::less_or_equal, 2.0, 2.0, true),
        (Function::less_than, 1.0, 2.0, true),
        (Function::greater_than, 2.0, 2.0, false),
        (Function::less_than, 2.0, 2.0, false),
    ];
    for (i, (op, x, y, want)) in cases.into_iter().enumerate() {
        let out = bin(b, op, &[x], &[], &[y], &[])?;
        expect(&format!("comparison #{i} ({x} vs {y})"), &out, &[], &[want])?;
    }
    Ok(())
}

/// NaN compares false (NotEqual true); −0 == +0.
pub fn compare_nan_and_signed_zero(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Equal, NotEqual, GreaterOrEqual, GreaterThan, LessOrEqual, LessThan], [Float32]);
    let nan = f32::NAN;
    let x = [nan, nan, nan, -0.0, 1.];
    let y = [nan, 1., 1., 0.0, nan];
    let (f, t_) = (false, true);
    expect("eq", &bin1(b, Function::equal, &x, &y)?, &[5], &[f, f, f, t_, f])?;
    expect("ne", &bin1(b, Function::not_equal, &x, &y)?, &[5], &[t_, t_, t_, f, t_])?;
    expect("lt", &bin1(b, Function::less_than, &x, &y)?, &[5], &[f, f, f, f, f])?;
    expect("le", &bin1(b, Function::less_or_equal, &x, &y)?, &[5], &[f, f, f, t_, f])?;
    expect("gt", &bin1(b, Function::greater_than, &x, &y)?, &[5], &[f, f, f, f, f])?;
    expect("ge", &bin1(b, Function::greater_or_equal, &x, &y)?, &[5], &[f, f, f, t_, f])
}

fn compare_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let x = vals::<T>(&[1., 5., 3.]);
    let y = vals::<T>(&[4., 2., 3.]);
    let (f, t_) = (false, true);
    expect("eq", &bin1(b, Function::equal, &x, &y)?, &[3], &[f, f, t_])?;
    expect("ne", &bin1(b, Function::not_equal, &x, &y)?, &[3], &[t_, t_, f])?;
    expect("lt", &bin1(b, Function::less_than, &x, &y)?, &[3], &[t_, f, f])?;
    expect("le", &bin1(b, Function::less_or_equal, &x, &y)?, &[3], &[t_, f, t_])?;
    expect("gt", &bin1(b, Function::greater_than, &x, &y)?, &[3], &[f, t_, f])?;
    expect("ge", &bin1(b, Function::greater_or_equal, &x, &y)?, &[3], &[f, t_, t_])
}

/// All six comparisons in every real numeric dtype, plus signed/unsigned ordering.
pub fn compare_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Equal, NotEqual, GreaterOrEqual, GreaterThan, LessOrEqual, LessThan, LessThan], [Bool]);
    if has_dtype(b, DType::Uint8) {
        let out = bin1(b, Function::less_than, &[200u8, 1], &[100u8, 255])?;
        expect("u8 order", &out, &[2], &[false, true])?;
    }
    if has_dtype(b, DType::Int8) {
        let out = bin1(b, Function::less_than, &[-1i8, -128], &[1i8, 127])?;
        expect("i8 order", &out, &[2], &[true, true])?;
    }
    for_types!(b, compare_typed, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

/// Comparisons broadcast like arithmetic: scalar and size-1 axes.
pub fn compare_broadcast(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [GreaterOrEqual, Equal], [Int32]);
    let out = bin(b, Function::greater_or_equal, &[1i32, 2, 3], &[3], &[2i32], &[])?;
    expect(">= scalar", &out, &[3], &[false, true, true])?;
    let out = bin(b, Function::equal, &[1i32, 2], &[2, 1], &[1i32, 2, 3], &[1, 3])?;
    expect("[2,1]==[1,3]", &out, &[2, 3], &[true, false, false, false, true, false])
}

/// Total order on F32: −NaN < −Inf < −1 < −0 < +0 < 1 < Inf < +NaN; −0 ≠ +0; NaN = NaN.
pub fn compare_total_order_f32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(
        b,
        [
            EqualTotalOrder,
            NotEqualTotalOrder,
            LessThanTotalOrder,
            LessOrEqualTotalOrder,
            GreaterThanTotalOrder,
            GreaterOrEqualTotalOrder
        ],
        [Float32]
    );
    let neg_nan = f32::from_bits(0xFFC0_0000);
    let pos_nan = f32::from_bits(0x7FC0_0000);
    let inf = f32::INFINITY;
    let s = [neg_nan, -inf, -1., -0.0, 0.0, 1., inf, pos_nan];
    let (lo, hi) = (&s[..7], &s[1..]);
    let all = |x: bool| vec![x; 7];
    expect("lt", &bin1(b, Function::less_than_total_order, lo, hi)?, &[7], &all(true))?;
    expect("le", &bin1(b, Function::less_or_equal_total_order, lo, hi)?, &[7], &all(true))?;
    expect("gt", &bin1(b, Function::greater_than_total_order, lo, hi)?, &[7], &all(false))?;
    expect("ge", &bin1(b, Function::greater_or_equal_total_order, lo, hi)?, &[7], &all(false))?;
    expect("gt rev", &bin1(b, Function::greater_than_total_order, hi, lo)?, &[7], &all(true))?;
    expect("ne", &bin1(b, Function::not_equal_total_order, lo, hi)?, &[7], &all(true))?;
    expect("eq self", &bin1(b, Function::equal_total_order, &s, &s)?, &[8], &[true; 8])?;
    expect("ge self", &bin1(b, Function::greater_or_equal_total_order, &s, &s)?, &[8], &[true; 8])?;
    expect("lt self", &bin1(b, Function::less_than_total_order, &s, &s)?, &[8], &[false; 8])
}

/// Total order on F64 (signed zeros, NaN) and on integers (= plain comparisons).
pub fn compare_total_order_f64_and_ints(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [EqualTotalOrder, LessThanTotalOrder], [Float64, Int32]);
    let out = bin1(b, Function::less_than_total_order, &[-0.0f64, f64::NAN, 1.0], &[0.0f64, f64::INFINITY, f64::NAN])?;
    expect("f64 lt", &out, &[3], &[true, false, true])?;
    let out = bin1(b, Function::equal_total_order, &[-0.0f64, f64::NAN], &[0.0f64, f64::NAN])?;
    expect("f64 eq", &out, &[2], &[false, true])?;
    let out = bin1(b, Function::less_than_total_order, &[-1i32, 5, 7], &[0i32, 5, 6])?;
    expect("i32 lt", &out, &[3], &[true, false, false])?;
    if has_dtype(b, DType::Uint8) {
        let out = bin1(b, Function::less_than_total_order, &[200u8], &[100u8])?;
        expect("u8 lt", &out, &[1], &[false])?;
    }
    Ok(())
}

/// Equal/NotEqual accept complex operands.
pub fn compare_complex_equality(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Equal, NotEqual], [Complex64]);
    let c = Complex32::new;
    let x = [c(1., 2.), c(1., 2.), c(0., 0.)];
    let y = [c(1., 2.), c(1., -2.), c(-0.0, 0.)];
    expect("eq", &bin1(b, Function::equal, &x, &y)?, &[3], &[true, false, true])?;
    expect("ne", &bin1(b, Function::not_equal, &x, &y)?, &[3], &[false, true, false])
}

/// Ordered comparisons reject complex; comparisons reject Bool and mismatched shapes.
pub fn compare_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [LessThan, Equal], [Bool, Float32]);
    expect_error1(b, "equal bool", &[v(&[true]), v(&[true])], |f, p| f.equal(p[0], p[1]))?;
    expect_error1(b, "lt [2] vs [3]", &[v(&[1f32, 2.]), v(&[1f32, 2., 3.])], |f, p| f.less_than(p[0], p[1]))?;
    if has_dtype(b, DType::Complex64) {
        let c = Complex32::new(1., 1.);
        expect_error1(b, "lt c64", &[v(&[c]), v(&[c])], |f, p| f.less_than(p[0], p[1]))?;
    }
    Ok(())
}
