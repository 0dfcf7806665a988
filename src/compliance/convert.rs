//! Compliance cases for ConvertDType and Bitcast (ops.md §4.4, §9, §11).

use std::sync::Arc;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use super::*;

fn cvt<S: TestElem>(b: &Arc<dyn Backend>, x: &[S], to: DType) -> Result<Buffer, String> {
    exec1(b, &[v(x)], |f, p| f.convert_dtype(p[0], to))
}

fn bitcast(b: &Arc<dyn Backend>, x: Buffer, to: DType) -> Result<Buffer, String> {
    exec1(b, &[x], |f, p| f.bitcast(p[0], to))
}

/// I32 42 → F32 42.0 (and −7, 0).
pub fn int32_to_float32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Int32, Float32]);
    expect("i32->f32", &cvt(b, &[42i32, -7, 0], DType::Float32)?, &[3], &[42f32, -7., 0.])
}

/// F32 3.3 → BF16 3.296875 (nearest), within 0.02 of 3.3.
pub fn float32_to_bfloat16(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float32, BFloat16]);
    let out = cvt(b, &[3.3f32], DType::BFloat16)?;
    expect_close::<bf16>("3.3", &out, &[1], &[3.3], 0.02, 0.0)?;
    expect("3.3 exact", &out, &[1], &[bf16::from_f64(3.296875)])
}

/// BF16 7.8 → I32 7 (truncation toward zero), −7.8 → −7.
pub fn bfloat16_to_int32_truncates(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [BFloat16, Int32]);
    let out = cvt(b, &[bf16::from_f32(7.8), bf16::from_f32(-7.8)], DType::Int32)?;
    expect("bf16->i32", &out, &[2], &[7i32, -7])
}

/// Bool → I32: true → 1, false → 0.
pub fn bool_to_int32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Bool, Int32]);
    expect("bool->i32", &cvt(b, &[true, false], DType::Int32)?, &[2], &[1i32, 0])
}

/// F32 → Bool: x ≠ 0, so NaN → true and −0 → false.
pub fn float32_to_bool(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Bool, Float32]);
    let out = cvt(b, &[1f32, 0., f32::NAN, -0.0, -2.5], DType::Bool)?;
    expect("f32->bool", &out, &[5], &[true, false, true, false, true])
}

/// Float → int truncates then saturates; NaN → 0; ±Inf → MAX/MIN (§9, §11).
pub fn float_to_int_saturates(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float32, Int32]);
    let inf = f32::INFINITY;
    let x = [f32::NAN, inf, -inf, 3e9, -3e9, -1.5, 2.7, -2.7];
    let out = cvt(b, &x, DType::Int32)?;
    expect("f32->i32", &out, &[8], &[0i32, i32::MAX, i32::MIN, i32::MAX, i32::MIN, -1, 2, -2])?;
    if has_dtype(b, DType::Uint8) {
        expect("f32->u8", &cvt(b, &x, DType::Uint8)?, &[8], &[0u8, 255, 0, 255, 0, 0, 2, 0])?;
    }
    if has_dtype(b, DType::Int8) {
        expect("f32->i8", &cvt(b, &[200f32, -200.], DType::Int8)?, &[2], &[127i8, -128])?;
    }
    Ok(())
}

/// F64 → I64: 1e19 → MAX, −1e19 → MIN, NaN → 0, 2^62 exact.
pub fn float64_to_int64_saturates(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float64, Int64]);
    let out = cvt(b, &[1e19f64, -1e19, f64::NAN, 4611686018427387904.0], DType::Int64)?;
    expect("f64->i64", &out, &[4], &[i64::MAX, i64::MIN, 0, 1i64 << 62])
}

/// Float → unsigned: negatives → 0, too large → MAX, fractions truncated.
pub fn float_to_unsigned_saturates(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float64, Uint64]);
    let out = cvt(b, &[-1f64, 9223372036854775808.0, 1e20, 4294967295.9], DType::Uint64)?;
    expect("f64->u64", &out, &[4], &[0u64, 1u64 << 63, u64::MAX, 4294967295])?;
    if has_dtype(b, DType::Float32) && has_dtype(b, DType::Uint32) {
        expect("f32->u32", &cvt(b, &[-0.5f32, 5e9, 7.9], DType::Uint32)?, &[3], &[0u32, u32::MAX, 7])?;
    }
    Ok(())
}

/// Int → float rounds to nearest, ties to even: 2^24+1 → 2^24, 2^24+3 → 2^24+4,
/// 2^24+5 → 2^24+4; I64 100000 → F16 Inf.
pub fn int_to_float_ties_to_even(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Int32, Float32]);
    let out = cvt(b, &[16777217i32, 16777219, 16777221], DType::Float32)?;
    expect("i32->f32", &out, &[3], &[16777216f32, 16777220., 16777220.])?;
    if has_dtype(b, DType::Int64) && has_dtype(b, DType::Float16) {
        expect("i64->f16", &cvt(b, &[100000i64], DType::Float16)?, &[1], &[f16::INFINITY])?;
    }
    if has_dtype(b, DType::Int64) && has_dtype(b, DType::Float64) {
        let out = cvt(b, &[(1i64 << 53) + 1, (1i64 << 53) + 3], DType::Float64)?;
        expect("i64->f64", &out, &[2], &[9007199254740992f64, 9007199254740996.])?;
    }
    Ok(())
}

/// Int → int wraps (truncates high bits) and sign-extends.
pub fn int_to_int_wraps(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Int32, Int8, Uint32, Uint8, Int64]);
    expect("i32->i8", &cvt(b, &[300i32, -1, 128], DType::Int8)?, &[3], &[44i8, -1, -128])?;
    expect("i32->u32", &cvt(b, &[-1i32], DType::Uint32)?, &[1], &[u32::MAX])?;
    expect("u8->i8", &cvt(b, &[200u8], DType::Int8)?, &[1], &[-56i8])?;
    expect("i8->i64", &cvt(b, &[-1i8], DType::Int64)?, &[1], &[-1i64])?;
    expect("u32->i64", &cvt(b, &[u32::MAX], DType::Int64)?, &[1], &[4294967295i64])?;
    expect("i64->i32", &cvt(b, &[(1i64 << 40) + 5], DType::Int32)?, &[1], &[5i32])
}

/// Any → Bool is x ≠ 0.
pub fn to_bool_nonzero(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Int32, Bool]);
    expect("i32", &cvt(b, &[0i32, 2, -1], DType::Bool)?, &[3], &[false, true, true])?;
    if has_dtype(b, DType::Uint8) {
        expect("u8", &cvt(b, &[0u8, 255], DType::Bool)?, &[2], &[false, true])?;
    }
    Ok(())
}

fn from_bool<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = cvt(b, &[true, false], T::DTYPE)?;
    expect("bool->T", &out, &[2], &vals::<T>(&[1., 0.]))
}

/// Bool → every numeric dtype: 1 and 0.
pub fn bool_to_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Bool]);
    for_types!(b, from_bool, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, Complex32, Complex64])
}

/// Half rounding: F64 → F16 rounds once; F64 and ints → BF16 go through F32 (double rounding).
pub fn half_double_rounding(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType]);
    let p = |e: i32| 2f64.powi(e);
    if has_dtype(b, DType::Float64) && has_dtype(b, DType::Float16) {
        let out = cvt(b, &[1. + p(-11) + p(-40), 1. + p(-11)], DType::Float16)?;
        expect_bits("f64->f16", &out, &[2], &[f16::from_f64(1. + p(-10)), f16::ONE])?;
    }
    if has_dtype(b, DType::Float64) && has_dtype(b, DType::BFloat16) {
        let out = cvt(b, &[1. + p(-8) + p(-40)], DType::BFloat16)?;
        expect_bits("f64->bf16", &out, &[1], &[bf16::ONE])?;
    }
    if has_dtype(b, DType::Int32) && has_dtype(b, DType::BFloat16) {
        let out = cvt(b, &[(1i32 << 24) + (1 << 16) + 1], DType::BFloat16)?;
        expect_bits("i32->bf16", &out, &[1], &[bf16::from_f64(p(24))])?;
    }
    if has_dtype(b, DType::Float32) && has_dtype(b, DType::BFloat16) {
        let x = [(1. + p(-8)) as f32, (1. + p(-8) + p(-9)) as f32, (1. + 3. * p(-8)) as f32];
        let out = cvt(b, &x, DType::BFloat16)?;
        let want = [bf16::ONE, bf16::from_f64(1. + p(-7)), bf16::from_f64(1. + 2. * p(-7))];
        expect_bits("f32->bf16 ties", &out, &[3], &want)?;
    }
    Ok(())
}

/// F32 → F16: 65504 stays, 70000 → Inf, −1e6 → −Inf, NaN stays NaN; F32 NaN → BF16 NaN.
pub fn float_to_half_overflow(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float32, Float16]);
    let out = cvt(b, &[65504f32, 70000., -1e6, f32::NAN], DType::Float16)?;
    expect("f32->f16", &out, &[4], &[f16::MAX, f16::INFINITY, f16::NEG_INFINITY, f16::NAN])?;
    if has_dtype(b, DType::BFloat16) {
        let out = cvt(b, &[f32::NAN, f32::INFINITY], DType::BFloat16)?;
        expect("f32->bf16", &out, &[2], &[bf16::NAN, bf16::INFINITY])?;
    }
    Ok(())
}

/// F16/BF16 → F32/F64 are exact: F16 0x3555 = 0.333251953125, BF16 0x3EAB = 0.333984375.
pub fn half_to_float_exact(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float16, Float32]);
    let out = cvt(b, &[f16::from_bits(0x7BFF), f16::from_bits(0x3555)], DType::Float32)?;
    expect("f16->f32", &out, &[2], &[65504f32, 1365. / 4096.])?;
    if has_dtype(b, DType::BFloat16) && has_dtype(b, DType::Float64) {
        let out = cvt(b, &[bf16::from_bits(0x3EAB)], DType::Float64)?;
        expect("bf16->f64", &out, &[1], &[0.333984375f64])?;
    }
    Ok(())
}

/// Complex → real/int/Bool drops the imaginary part first: 1+2i → 1, [0, i, 2] → [F, F, T].
pub fn complex_to_real_drops_imag(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Complex64, Float32, Bool]);
    let c = Complex32::new;
    expect("c64->f32", &cvt(b, &[c(1., 2.)], DType::Float32)?, &[1], &[1f32])?;
    expect("c64->bool", &cvt(b, &[c(0., 0.), c(0., 1.), c(2., 0.)], DType::Bool)?, &[3], &[false, false, true])?;
    if has_dtype(b, DType::Int32) {
        expect("c64->i32", &cvt(b, &[c(3.7, -5.)], DType::Int32)?, &[1], &[3i32])?;
    }
    Ok(())
}

/// Real → complex: imaginary part 0.
pub fn real_to_complex(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float32, Complex64]);
    expect("f32->c64", &cvt(b, &[1.5f32], DType::Complex64)?, &[1], &[Complex32::new(1.5, 0.)])?;
    if has_dtype(b, DType::Int32) && has_dtype(b, DType::Complex128) {
        expect("i32->c128", &cvt(b, &[3i32], DType::Complex128)?, &[1], &[Complex64::new(3., 0.)])?;
    }
    Ok(())
}

/// U8 `[0x21, 0xF7]` bitcast to Int4 `[2,2]` = `[[1,2],[7,−1]]` (low nibble first), then
/// converted to I32 and F32.
pub fn packed_int4_from_u8(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast, ConvertDType], [Uint8, Int4, Int32]);
    let run = |to: DType| exec1(b, &[v(&[0x21u8, 0xF7])], |f, p| f.convert_dtype(f.bitcast(p[0], DType::Int4)?, to));
    expect("int4->i32", &run(DType::Int32)?, &[2, 2], &[1i32, 2, 7, -1])?;
    if has_dtype(b, DType::Float32) {
        expect("int4->f32", &run(DType::Float32)?, &[2, 2], &[1f32, 2., 7., -1.])?;
    }
    Ok(())
}

/// U8 0xE4 = 0b11_10_01_00 as Int2 = [0,1,−2,−1] and as Uint2 = [0,1,2,3]; U8 0xF7 as Uint4 =
/// [7,15].
pub fn packed_int2_and_uint_from_u8(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast, ConvertDType], [Uint8]);
    let run = |x: u8, via: DType, to: DType| exec1(b, &[v(&[x])], |f, p| f.convert_dtype(f.bitcast(p[0], via)?, to));
    if has_dtype(b, DType::Int2) && has_dtype(b, DType::Int8) {
        expect("int2->i8", &run(0xE4, DType::Int2, DType::Int8)?, &[1, 4], &[0i8, 1, -2, -1])?;
    }
    if has_dtype(b, DType::Uint2) {
        expect("uint2->u8", &run(0xE4, DType::Uint2, DType::Uint8)?, &[1, 4], &[0u8, 1, 2, 3])?;
    }
    if has_dtype(b, DType::Uint4) {
        expect("uint4->u8", &run(0xF7, DType::Uint4, DType::Uint8)?, &[1, 2], &[7u8, 15])?;
    }
    Ok(())
}

/// Converting to the same dtype keeps the bits (NaN payload, −0).
pub fn convert_same_dtype_noop(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType], [Float32]);
    let x = [f32::from_bits(0x7FC0_1234), -0.0, 1.5];
    expect_bits("f32->f32", &cvt(b, &x, DType::Float32)?, &[3], &x)
}

fn convert_pair<S: TestElem, D: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    if !has_dtype(b, D::DTYPE) {
        return Ok(());
    }
    let out = cvt(b, &vals::<S>(&[0., 1., 5., 100.]), D::DTYPE)?;
    expect(&format!("{} -> {}", S::DTYPE, D::DTYPE), &out, &[4], &vals::<D>(&[0., 1., 5., 100.]))
}

fn convert_from<S: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    convert_pair::<S, i8>(b)?;
    convert_pair::<S, i16>(b)?;
    convert_pair::<S, i32>(b)?;
    convert_pair::<S, i64>(b)?;
    convert_pair::<S, u8>(b)?;
    convert_pair::<S, u16>(b)?;
    convert_pair::<S, u32>(b)?;
    convert_pair::<S, u64>(b)?;
    convert_pair::<S, f16>(b)?;
    convert_pair::<S, bf16>(b)?;
    convert_pair::<S, f32>(b)?;
    convert_pair::<S, f64>(b)?;
    convert_pair::<S, Complex32>(b)?;
    convert_pair::<S, Complex64>(b)
}

/// Every (source, target) pair of numeric dtypes on [0, 1, 5, 100] (exact everywhere).
pub fn convert_every_pair_small_values(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvertDType]);
    for_types!(b, convert_from, [i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64])
}

/// U32 0x3F800000 → F32 1.0.
pub fn bitcast_u32_to_f32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast], [Uint32, Float32]);
    expect("u32->f32", &bitcast(b, sc(0x3F80_0000u32), DType::Float32)?, &[], &[1f32])
}

/// Narrower target adds a trailing axis: U32 `[1]{0xDEADBEEF}` → U16 `[1,2]{0xBEEF,0xDEAD}`,
/// a scalar → `[2]`, F32 1.0 → U8 `[0,0,128,63]`.
pub fn bitcast_narrower(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast], [Uint32, Uint16]);
    expect("[1]", &bitcast(b, v(&[0xDEAD_BEEFu32]), DType::Uint16)?, &[1, 2], &[0xBEEFu16, 0xDEAD])?;
    expect("scalar", &bitcast(b, sc(0xDEAD_BEEFu32), DType::Uint16)?, &[2], &[0xBEEFu16, 0xDEAD])?;
    if has_dtype(b, DType::Float32) && has_dtype(b, DType::Uint8) {
        expect("f32->u8", &bitcast(b, sc(1f32), DType::Uint8)?, &[4], &[0u8, 0, 128, 63])?;
    }
    Ok(())
}

/// Wider target removes the trailing axis: U16 `[1,2]` → U32 `[1]`, U8 `[4]` → F32 scalar.
pub fn bitcast_wider(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast], [Uint32, Uint16]);
    let out = bitcast(b, t(&[0xBEEFu16, 0xDEAD], &[1, 2]), DType::Uint32)?;
    expect("u16->u32", &out, &[1], &[0xDEAD_BEEFu32])?;
    if has_dtype(b, DType::Float32) && has_dtype(b, DType::Uint8) {
        expect("u8->f32", &bitcast(b, v(&[0u8, 0, 128, 63]), DType::Float32)?, &[], &[1f32])?;
    }
    Ok(())
}

/// Float bit patterns: F64 1.0 = 0x3FF0…, F16 1.0 = 0x3C00, BF16 1.0 = 0x3F80.
pub fn bitcast_float_bits(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast]);
    if has_dtype(b, DType::Float64) && has_dtype(b, DType::Int64) {
        expect("f64", &bitcast(b, v(&[1f64, -0.0]), DType::Int64)?, &[2], &[0x3FF0_0000_0000_0000i64, i64::MIN])?;
    }
    if has_dtype(b, DType::Float16) && has_dtype(b, DType::Uint16) {
        expect("f16", &bitcast(b, v(&[f16::ONE]), DType::Uint16)?, &[1], &[0x3C00u16])?;
    }
    if has_dtype(b, DType::BFloat16) && has_dtype(b, DType::Uint16) {
        expect("bf16", &bitcast(b, v(&[bf16::ONE]), DType::Uint16)?, &[1], &[0x3F80u16])?;
    }
    if has_dtype(b, DType::Float32) && has_dtype(b, DType::Uint32) {
        let x = f32::from_bits(0x7FC0_1234);
        expect("nan payload", &bitcast(b, v(&[x]), DType::Uint32)?, &[1], &[0x7FC0_1234u32])?;
    }
    Ok(())
}

/// U8 `[0x21]` → Int4 `[1,2]` with the same packed byte.
pub fn bitcast_u8_to_int4(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast], [Uint8, Int4]);
    let out = bitcast(b, v(&[0x21u8]), DType::Int4)?;
    check(out.dtype() == DType::Int4 && out.dims() == [1, 2], || format!("u8->int4: shape {}", out.shape()))?;
    let bytes = out.to_bytes().map_err(|e| e.to_string())?;
    check(bytes == [0x21], || format!("u8->int4: bytes {bytes:?}, expected [0x21]"))
}

/// Same width, other signedness: I32 −1 → U32 MAX, I8 −128 → U8 128.
pub fn bitcast_signed_unsigned(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast], [Int32, Uint32]);
    expect("i32->u32", &bitcast(b, v(&[-1i32, 5]), DType::Uint32)?, &[2], &[u32::MAX, 5])?;
    if has_dtype(b, DType::Int8) && has_dtype(b, DType::Uint8) {
        expect("i8->u8", &bitcast(b, v(&[-128i8]), DType::Uint8)?, &[1], &[128u8])?;
    }
    Ok(())
}

/// Wider target with a last dim that does not match the ratio is rejected.
pub fn bitcast_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Bitcast], [Uint8, Uint32, Uint16]);
    expect_error1(b, "u8[3]->u32", &[v(&[1u8, 2, 3])], |f, p| f.bitcast(p[0], DType::Uint32))?;
    expect_error1(b, "u16[2,3]->u32", &[t(&[1u16; 6], &[2, 3])], |f, p| f.bitcast(p[0], DType::Uint32))?;
    expect_error1(b, "u8 scalar->u32", &[sc(1u8)], |f, p| f.bitcast(p[0], DType::Uint32))
}
