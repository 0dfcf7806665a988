//! Compliance cases for unary elementwise ops (ops.md §4.3, §9, §11).

use std::f64::consts::{E, FRAC_PI_2, FRAC_PI_3, FRAC_PI_6, LN_2, PI, SQRT_2};
use std::sync::Arc;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use super::*;

type UnFn = fn(&Function, Value) -> crate::Result<Value>;
type Reference = (&'static str, UnFn, fn(f64) -> f64);

fn un<T: TestElem>(b: &Arc<dyn Backend>, op: UnFn, x: &[T]) -> Result<Buffer, String> {
    exec1(b, &[v(x)], |f, p| op(f, p[0]))
}

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

/// F32 Neg: 7 → −7.
pub fn neg_f32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let out = exec1(b, &[sc(7f32)], |f, p| f.neg(p[0]))?;
    expect("neg 7", &out, &[], &[-7f32])
}

/// I32 Neg `[-1,2]`.
pub fn neg_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Int32]);
    expect("neg", &un(b, Function::neg, &[-1i32, 2])?, &[2], &[1i32, -2])
}

fn neg_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = un(b, Function::neg, &vals::<T>(&[-7., 13., 0.]))?;
    expect("neg [-7,13,0]", &out, &[3], &vals::<T>(&[7., -13., 0.]))
}

/// BF16 and F16 Neg `[-7,13,0]`.
pub fn neg_half(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg]);
    for_types!(b, neg_typed, [bf16, f16])
}

/// Neg(MIN) = MIN; Neg(+0.0) = −0.0 and Neg(−0.0) = +0.0 (bits).
pub fn neg_int_min_and_zero_sign(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Int32, Float32]);
    expect("i32 min", &un(b, Function::neg, &[i32::MIN])?, &[1], &[i32::MIN])?;
    if has_dtype(b, DType::Int8) {
        expect("i8 min", &un(b, Function::neg, &[i8::MIN, 127])?, &[2], &[i8::MIN, -127])?;
    }
    expect_bits("zeros", &un(b, Function::neg, &[0.0f32, -0.0])?, &[2], &[-0.0f32, 0.0])
}

/// F32 Abs(−7) = 7; I32 Abs `[-1,0,2]`.
pub fn abs_f32_i32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Abs], [Float32, Int32]);
    expect("f32", &exec1(b, &[sc(-7f32)], |f, p| f.abs(p[0]))?, &[], &[7f32])?;
    expect("i32", &un(b, Function::abs, &[-1i32, 0, 2])?, &[3], &[1i32, 0, 2])
}

/// Abs(−0.0) = +0.0 (XLA), Abs(−Inf) = Inf, Abs(NaN) is NaN.
pub fn abs_negative_zero(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Abs], [Float32]);
    expect_bits("zeros", &un(b, Function::abs, &[-0.0f32, 0.0, -1.5])?, &[3], &[0.0f32, 0.0, 1.5])?;
    expect("specials", &un(b, Function::abs, &[-INF, NAN])?, &[2], &[INF, NAN])?;
    if has_dtype(b, DType::Float64) {
        expect_bits("f64", &un(b, Function::abs, &[-0.0f64])?, &[1], &[0.0f64])?;
    }
    Ok(())
}

/// Abs(MIN) = MIN (wraps).
pub fn abs_int_min(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Abs], [Int32]);
    expect("i32", &un(b, Function::abs, &[i32::MIN, -5])?, &[2], &[i32::MIN, 5])?;
    if has_dtype(b, DType::Int8) {
        expect("i8", &un(b, Function::abs, &[i8::MIN])?, &[1], &[i8::MIN])?;
    }
    if has_dtype(b, DType::Int64) {
        expect("i64", &un(b, Function::abs, &[i64::MIN])?, &[1], &[i64::MIN])?;
    }
    Ok(())
}

fn abs_signed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    expect("abs", &un(b, Function::abs, &vals::<T>(&[-3., 2.]))?, &[2], &vals::<T>(&[3., 2.]))
}

fn abs_unsigned<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    expect("abs", &un(b, Function::abs, &vals::<T>(&[3., 200.]))?, &[2], &vals::<T>(&[3., 200.]))
}

/// Abs in every real numeric dtype (identity on unsigned).
pub fn abs_every_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Abs]);
    let r: CaseResult = for_types!(b, abs_signed, [i8, i16, i32, i64, f16, bf16, f32, f64]);
    r?;
    for_types!(b, abs_unsigned, [u8, u16, u32, u64])
}

/// Abs of complex is the real magnitude: C64 3+4i → F32 5, C128 → F64.
pub fn abs_complex_magnitude(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Abs], [Complex64, Float32]);
    let c = Complex32::new;
    let out = un(b, Function::abs, &[c(3., 4.), c(0., 0.), c(-5., 12.)])?;
    expect("c64", &out, &[3], &[5f32, 0., 13.])?;
    if has_dtype(b, DType::Complex128) && has_dtype(b, DType::Float64) {
        let out = un(b, Function::abs, &[Complex64::new(-3., -4.)])?;
        expect("c128", &out, &[1], &[5f64])?;
    }
    Ok(())
}

/// Sign on floats: NaN → NaN, −0 → −0, +0 → +0, ±x → ±1, ±Inf → ±1 (§9).
pub fn sign_float(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sign], [Float32]);
    let out = un(b, Function::sign, &[NAN, -0.0, 0.0, -3., 2., INF, -INF])?;
    expect("sign", &out, &[7], &[NAN, 0.0, 0.0, -1., 1., 1., -1.])?;
    expect_bits("zeros", &un(b, Function::sign, &[-0.0f32, 0.0])?, &[2], &[-0.0f32, 0.0])
}

/// Sign on ints `[-1,0,2]` → `[-1,0,1]`; unsigned `[0,5]` → `[0,1]`.
pub fn sign_int_uint(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sign], [Int32]);
    expect("i32", &un(b, Function::sign, &[-1i32, 0, 2, i32::MIN])?, &[4], &[-1i32, 0, 1, -1])?;
    if has_dtype(b, DType::Uint32) {
        expect("u32", &un(b, Function::sign, &[0u32, 5])?, &[2], &[0u32, 1])?;
    }
    Ok(())
}

/// Sign of complex = x/|x|, 0 → 0: 3+4i → 0.6+0.8i.
pub fn sign_complex(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sign], [Complex64]);
    let c = Complex32::new;
    let out = un(b, Function::sign, &[c(3., 4.), c(0., 0.)])?;
    expect_complex::<Complex32>("c64", &out, &[2], &[(0.6, 0.8), (0., 0.)], 1e-6, 0.0)
}

fn sign_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    expect("sign", &un(b, Function::sign, &vals::<T>(&[-2., 0., 3.]))?, &[3], &vals::<T>(&[-1., 0., 1.]))
}

/// Sign on F16, BF16, F64 and the other signed ints.
pub fn sign_half(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sign]);
    for_types!(b, sign_typed, [f16, bf16, f64, i8, i16, i64])
}

/// Ceil/Floor/Round of 1.6 → 2, 1, 2 (Go case) and of −1.6.
pub fn ceil_floor_round(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Ceil, Floor, Round], [Float32]);
    let x = [1.6f32, -1.6, 3.0];
    expect("ceil", &un(b, Function::ceil, &x)?, &[3], &[2f32, -1., 3.])?;
    expect("floor", &un(b, Function::floor, &x)?, &[3], &[1f32, -2., 3.])?;
    expect("round", &un(b, Function::round, &x)?, &[3], &[2f32, -2., 3.])?;
    if has_dtype(b, DType::Float64) {
        expect("f64 floor", &un(b, Function::floor, &[-0.5f64, 2.999])?, &[2], &[-1f64, 2.])?;
    }
    Ok(())
}

fn round_half_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = un(b, Function::round, &vals::<T>(&[0.5, 1.5, 2.5, -2.5]))?;
    expect("round", &out, &[4], &vals::<T>(&[0., 2., 2., -2.]))
}

/// Round ties to even: [0.5,1.5,2.5,−0.5,−2.5] → [0,2,2,−0,−2] (bits), also in half types.
pub fn round_ties_to_even(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Round], [Float32]);
    let out = un(b, Function::round, &[0.5f32, 1.5, 2.5, -0.5, -2.5, 3.5, -1.5, 2.4999])?;
    expect_bits("round", &out, &[8], &[0.0f32, 2., 2., -0.0, -2., 4., -2., 2.])?;
    if has_dtype(b, DType::Float64) {
        let out = un(b, Function::round, &[0.5f64, 2.5, -3.5, 1e300])?;
        expect_bits("f64", &out, &[4], &[0.0f64, 2., -4., 1e300])?;
    }
    for_types!(b, round_half_typed, [f16, bf16])
}

/// Ceil(−0.5) = −0, Floor(0.5) = +0, Floor(−0) = −0 (bits).
pub fn ceil_floor_signed_zero(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Ceil, Floor], [Float32]);
    expect_bits("ceil", &un(b, Function::ceil, &[-0.5f32, -0.0])?, &[2], &[-0.0f32, -0.0])?;
    expect_bits("floor", &un(b, Function::floor, &[0.5f32, -0.0])?, &[2], &[0.0f32, -0.0])
}

/// Exp(1) = e, Expm1(1) = e−1, Log(e) = 1, Log1p(e−1) = 1 (Go tolerances), plus exact points.
pub fn exp_log_family(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Exp, Expm1, Log, Log1p], [Float32]);
    let e = E as f32;
    expect_close::<f32>("exp", &un(b, Function::exp, &[1f32, 0., LN_2 as f32])?, &[3], &[E, 1., 2.], 0.0, 1e-6)?;
    expect_close::<f32>("expm1", &un(b, Function::expm1, &[1f32, 0.])?, &[2], &[E - 1., 0.], 1e-6, 1e-6)?;
    expect_close::<f32>("log", &un(b, Function::log, &[e, 1., 8.])?, &[3], &[1., 0., 3. * LN_2], 1e-7, 1e-6)?;
    expect_close::<f32>("log1p", &un(b, Function::log1p, &[e - 1., 0.])?, &[2], &[1., 0.], 1e-7, 1e-6)
}

/// Log(±0) = −Inf, Log(−1) = NaN, Exp(±Inf) = Inf/0, Log1p(−1) = −Inf, Expm1(−Inf) = −1.
pub fn exp_log_specials(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Exp, Expm1, Log, Log1p], [Float32]);
    expect("log", &un(b, Function::log, &[0.0f32, -0.0, -1., INF])?, &[4], &[-INF, -INF, NAN, INF])?;
    expect("exp", &un(b, Function::exp, &[-INF, INF, NAN, 0.])?, &[4], &[0f32, INF, NAN, 1.])?;
    expect("log1p", &un(b, Function::log1p, &[-1f32, -2., INF])?, &[3], &[-INF, NAN, INF])?;
    expect("expm1", &un(b, Function::expm1, &[-INF, INF])?, &[2], &[-1f32, INF])
}

/// Expm1 and Log1p are accurate near 0 (1e−10 stays 1e−10, not 0).
pub fn expm1_log1p_small(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Expm1, Log1p], [Float32]);
    expect_close::<f32>("expm1", &un(b, Function::expm1, &[1e-10f32, -1e-7])?, &[2], &[1e-10, -1e-7], 0.0, 1e-5)?;
    expect_close::<f32>("log1p", &un(b, Function::log1p, &[1e-10f32, -1e-7])?, &[2], &[1e-10, -1e-7], 0.0, 1e-5)?;
    if has_dtype(b, DType::Float64) {
        expect_close::<f64>("f64 expm1", &un(b, Function::expm1, &[1e-20f64])?, &[1], &[1e-20], 0.0, 1e-12)?;
        expect_close::<f64>("f64 log1p", &un(b, Function::log1p, &[1e-20f64])?, &[1], &[1e-20], 0.0, 1e-12)?;
    }
    Ok(())
}

/// Rsqrt(4) = 0.5, Sqrt(4) = 2, Sqrt(2) = √2.
pub fn sqrt_rsqrt(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sqrt, Rsqrt], [Float32]);
    expect("sqrt", &un(b, Function::sqrt, &[4f32, 0., 2.25])?, &[3], &[2f32, 0., 1.5])?;
    expect_close::<f32>("sqrt 2", &un(b, Function::sqrt, &[2f32])?, &[1], &[SQRT_2], 0.0, 1e-7)?;
    expect_close::<f32>("rsqrt", &un(b, Function::rsqrt, &[4f32, 0.25, 2.])?, &[3], &[0.5, 2., 1. / SQRT_2], 0.0, 1e-6)
}

/// Rsqrt [0,−0,−1,4,Inf] = [Inf,−Inf,NaN,0.5,0]; Sqrt(−0) = −0, Sqrt(−1) = NaN, Sqrt(Inf) = Inf.
pub fn sqrt_rsqrt_specials(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sqrt, Rsqrt], [Float32]);
    let out = un(b, Function::rsqrt, &[0.0f32, -0.0, -1., 4., INF])?;
    expect("rsqrt", &out, &[5], &[INF, -INF, NAN, 0.5, 0.])?;
    expect("sqrt", &un(b, Function::sqrt, &[-1f32, INF])?, &[2], &[NAN, INF])?;
    expect_bits("sqrt -0", &un(b, Function::sqrt, &[-0.0f32])?, &[1], &[-0.0f32])
}

/// Cos(0) = 1, Sin(π/2) = 1, Tanh(0) = 0 (Go cases) and a few more points.
pub fn trig_tanh(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Cos, Sin, Tanh], [Float32]);
    let x = [0f32, FRAC_PI_2 as f32, FRAC_PI_6 as f32, FRAC_PI_3 as f32];
    expect_close::<f32>("cos", &un(b, Function::cos, &x)?, &[4], &[1., 0., 3f64.sqrt() / 2., 0.5], 1e-6, 1e-6)?;
    expect_close::<f32>("sin", &un(b, Function::sin, &x)?, &[4], &[0., 1., 0.5, 3f64.sqrt() / 2.], 1e-6, 1e-6)?;
    let out = un(b, Function::tanh, &[0f32, 0.5, -0.5])?;
    expect_close::<f32>("tanh", &out, &[3], &[0., 0.46211715726000974, -0.46211715726000974], 1e-7, 1e-6)
}

/// Tanh saturates to ±1 and keeps NaN.
pub fn tanh_saturates(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Tanh], [Float32]);
    let out = un(b, Function::tanh, &[20f32, -20., INF, -INF, NAN, 100.])?;
    expect_close::<f32>("tanh", &out, &[6], &[1., -1., 1., -1., f64::NAN, 1.], 1e-7, 0.0)
}

/// Logistic at 0, ±1, −20 and 100.
pub fn logistic_points(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Logistic], [Float32]);
    let out = un(b, Function::logistic, &[0f32, 1., -1., -20., 100.])?;
    let want = [0.5, 0.7310585786300049, 0.2689414213699951, 2.0611536181902037e-09, 1.0];
    expect_close::<f32>("logistic", &out, &[5], &want, 0.0, 1e-5)
}

/// Logistic tails: F32 −100 is 0 (or a subnormal), F64 −100 = 3.72e−44, ±Inf → 0/1, NaN stays.
pub fn logistic_tails(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Logistic], [Float32]);
    let out = un(b, Function::logistic, &[-100f32, -INF, INF, NAN])?;
    expect_close::<f32>("f32 tails", &out, &[4], &[0., 0., 1., f64::NAN], 1e-37, 0.0)?;
    if has_dtype(b, DType::Float64) {
        let out = un(b, Function::logistic, &[-100f64])?;
        expect_close::<f64>("f64 -100", &out, &[1], &[3.720075976020836e-44], 0.0, 1e-10)?;
    }
    Ok(())
}

/// Erf at 0, ±0.5, ±1, 3 and Inf (erf(1) = 0.8427008).
pub fn erf_points(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Erf], [Float32]);
    let out = un(b, Function::erf, &[0f32, 0.5, 1., -1., 3., INF])?;
    let want = [0., 0.5204998778130465, 0.8427007929497149, -0.8427007929497149, 0.9999779095030014, 1.];
    expect_close::<f32>("erf", &out, &[6], &want, 2e-6, 0.0)?;
    if has_dtype(b, DType::Float64) {
        let out = un(b, Function::erf, &[1f64, -0.5])?;
        expect_close::<f64>("erf f64", &out, &[2], &[0.8427007929497149, -0.5204998778130465], 1e-13, 0.0)?;
    }
    Ok(())
}

/// F64 Exp, Log, Sin, Cos, Tanh, Sqrt, Logistic against the platform libm.
pub fn transcendental_f64_against_libm(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Exp, Log, Sin, Cos, Tanh, Sqrt], [Float64]);
    let x = [0.1f64, 0.5, 1.3, 2.7, 7.25, 30.0];
    let table: [Reference; 6] = [
        ("exp", Function::exp, f64::exp),
        ("log", Function::log, f64::ln),
        ("sin", Function::sin, f64::sin),
        ("cos", Function::cos, f64::cos),
        ("tanh", Function::tanh, f64::tanh),
        ("sqrt", Function::sqrt, f64::sqrt),
    ];
    for (name, op, reference) in table {
        let want: Vec<f64> = x.iter().map(|&v| reference(v)).collect();
        expect_close::<f64>(name, &un(b, op, &x)?, &[6], &want, 1e-15, 1e-14)?;
    }
    Ok(())
}

fn half_round_once<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    // Exact values are far from rounding ties in both half formats, so computing in f32 and
    // rounding once gives the correctly rounded half value.
    let exp = un(b, Function::exp, &vals::<T>(&[1.0]))?;
    expect("exp(1)", &exp, &[1], &vals::<T>(&[E]))?;
    let sqrt = un(b, Function::sqrt, &vals::<T>(&[2.0]))?;
    expect("sqrt(2)", &sqrt, &[1], &vals::<T>(&[SQRT_2]))?;
    let log = un(b, Function::log, &vals::<T>(&[3.0]))?;
    expect("log(3)", &log, &[1], &vals::<T>(&[3f64.ln()]))?;
    let tanh = un(b, Function::tanh, &vals::<T>(&[0.5]))?;
    expect("tanh(0.5)", &tanh, &[1], &vals::<T>(&[0.5f64.tanh()]))
}

/// F16/BF16 Exp, Sqrt, Log, Tanh: computed in f32 and rounded once to the half type.
pub fn unary_half_types_round_once(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Exp, Sqrt, Log, Tanh]);
    for_types!(b, half_round_once, [f16, bf16])
}

/// Complex Exp(iπ) = −1, Log(i) = iπ/2, Log(−1) = iπ, Sqrt(−4) = 2i.
pub fn unary_complex_exp_log_sqrt(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Exp, Log, Sqrt], [Complex64]);
    let c = Complex32::new;
    let out = un(b, Function::exp, &[c(0., PI as f32), c(1., 0.)])?;
    expect_complex::<Complex32>("exp", &out, &[2], &[(-1., 0.), (E, 0.)], 1e-6, 1e-6)?;
    let out = un(b, Function::log, &[c(0., 1.), c(-1., 0.)])?;
    expect_complex::<Complex32>("log", &out, &[2], &[(0., FRAC_PI_2), (0., PI)], 1e-6, 1e-6)?;
    let out = un(b, Function::sqrt, &[c(-4., 0.), c(3., 4.)])?;
    expect_complex::<Complex32>("sqrt", &out, &[2], &[(0., 2.), (2., 1.)], 1e-6, 1e-6)
}

/// IsFinite: false for ±Inf and NaN; output Bool.
pub fn is_finite(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [IsFinite], [Float32, Bool]);
    let out = un(b, Function::is_finite, &[1f32, INF, -INF, NAN, -0.0])?;
    expect("f32", &out, &[5], &[true, false, false, false, true])?;
    if has_dtype(b, DType::BFloat16) {
        let out = un(b, Function::is_finite, &[bf16::INFINITY, bf16::ONE])?;
        expect("bf16", &out, &[2], &[false, true])?;
    }
    Ok(())
}

/// IsNaN on floats; always false on ints.
pub fn is_nan(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [IsNaN], [Float32, Bool]);
    expect("f32", &un(b, Function::is_nan, &[1f32, NAN, INF])?, &[3], &[false, true, false])?;
    if has_dtype(b, DType::Int32) {
        expect("i32", &un(b, Function::is_nan, &[1i32, -1])?, &[2], &[false, false])?;
    }
    Ok(())
}

/// LogicalNot on a Bool vector.
pub fn logical_not(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [LogicalNot], [Bool]);
    expect("not", &un(b, Function::logical_not, &[true, false, true])?, &[3], &[false, true, false])
}

/// BitwiseNot: I32 7 → −8, U8 0 → 255, I64 0 → −1.
pub fn bitwise_not(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BitwiseNot], [Int32]);
    expect("i32", &exec1(b, &[sc(7i32)], |f, p| f.bitwise_not(p[0]))?, &[], &[-8i32])?;
    if has_dtype(b, DType::Uint8) {
        expect("u8", &un(b, Function::bitwise_not, &[0u8, 0x0F])?, &[2], &[255u8, 0xF0])?;
    }
    if has_dtype(b, DType::Int64) {
        expect("i64", &un(b, Function::bitwise_not, &[0i64])?, &[1], &[-1i64])?;
    }
    Ok(())
}

/// BitCount: I8 [7,−1,−128] = [3,8,1]; U64 MAX = 64; I32 −1 = 32.
pub fn bit_count(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BitCount], [Int8]);
    expect("i8", &un(b, Function::bit_count, &[7i8, -1, -128, 0])?, &[4], &[3i8, 8, 1, 0])?;
    if has_dtype(b, DType::Uint64) {
        expect("u64", &un(b, Function::bit_count, &[u64::MAX, 0])?, &[2], &[64u64, 0])?;
    }
    if has_dtype(b, DType::Int32) {
        expect("i32", &un(b, Function::bit_count, &[-1i32, 0x0F0F])?, &[2], &[32i32, 8])?;
    }
    Ok(())
}

/// Clz: I8 [7,0,−1,1] = [5,8,0,7]; U32 [0,1] = [32,31]; I64 1 = 63.
pub fn clz(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Clz], [Int8]);
    expect("i8", &un(b, Function::clz, &[7i8, 0, -1, 1])?, &[4], &[5i8, 8, 0, 7])?;
    if has_dtype(b, DType::Uint32) {
        expect("u32", &un(b, Function::clz, &[0u32, 1])?, &[2], &[32u32, 31])?;
    }
    if has_dtype(b, DType::Int64) {
        expect("i64", &un(b, Function::clz, &[1i64])?, &[1], &[63i64])?;
    }
    Ok(())
}

/// Real, Imag, Conj of complex values (C64 → F32).
pub fn real_imag_conj(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Real, Imag, Conj], [Complex64, Float32]);
    let c = Complex32::new;
    let x = [c(1., 2.), c(-3., -4.)];
    expect("real", &un(b, Function::real, &x)?, &[2], &[1f32, -3.])?;
    expect("imag", &un(b, Function::imag, &x)?, &[2], &[2f32, -4.])?;
    expect("conj", &un(b, Function::conj, &x)?, &[2], &[c(1., -2.), c(-3., 4.)])?;
    if has_dtype(b, DType::Complex128) && has_dtype(b, DType::Float64) {
        expect("real c128", &un(b, Function::real, &[Complex64::new(5., 6.)])?, &[1], &[5f64])?;
    }
    Ok(())
}

/// Real/Imag on real floats: Real = x, Imag = zeros (§9).
pub fn real_imag_on_floats(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Real, Imag], [Float32]);
    expect("real", &un(b, Function::real, &[1.5f32, -2.])?, &[2], &[1.5f32, -2.])?;
    expect("imag", &un(b, Function::imag, &[1.5f32, -2.])?, &[2], &[0f32, 0.])
}

/// Identity on BF16 (Go case) and on Bool.
pub fn identity(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Identity], [BFloat16]);
    let x = vals::<bf16>(&[1.5, -2., 0.]);
    expect("bf16", &un(b, Function::identity, &x)?, &[3], &x)?;
    if has_dtype(b, DType::Bool) {
        expect("bool", &un(b, Function::identity, &[true, false])?, &[2], &[true, false])?;
    }
    Ok(())
}

/// Unary ops on scalars and on size-0 tensors.
pub fn unary_scalar_and_empty(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg, Exp, Abs], [Float32]);
    expect("scalar", &exec1(b, &[sc(2.5f32)], |f, p| f.neg(p[0]))?, &[], &[-2.5f32])?;
    expect::<f32>("empty exp", &exec1(b, &[t::<f32>(&[], &[0])], |f, p| f.exp(p[0]))?, &[0], &[])?;
    expect::<f32>("empty abs", &exec1(b, &[t::<f32>(&[], &[2, 0])], |f, p| f.abs(p[0]))?, &[2, 0], &[])
}

/// Dtype groups: Erf/Logistic need floats, Neg rejects unsigned, Ceil rejects complex, IsFinite
/// rejects ints, LogicalNot needs Bool, BitwiseNot needs ints, Real/Imag reject ints.
pub fn unary_dtype_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Erf, Neg, IsFinite, LogicalNot, BitwiseNot], [Int32, Uint32, Float32]);
    expect_error1(b, "erf i32", &[v(&[1i32])], |f, p| f.erf(p[0]))?;
    expect_error1(b, "neg u32", &[v(&[1u32])], |f, p| f.neg(p[0]))?;
    expect_error1(b, "is_finite i32", &[v(&[1i32])], |f, p| f.is_finite(p[0]))?;
    expect_error1(b, "logical_not i32", &[v(&[1i32])], |f, p| f.logical_not(p[0]))?;
    expect_error1(b, "bitwise_not f32", &[v(&[1f32])], |f, p| f.bitwise_not(p[0]))?;
    if has_op(b, OpType::Ceil) && has_dtype(b, DType::Complex64) {
        expect_error1(b, "ceil c64", &[v(&[Complex32::new(1., 1.)])], |f, p| f.ceil(p[0]))?;
    }
    if has_op(b, OpType::Real) {
        expect_error1(b, "real i32", &[v(&[1i32])], |f, p| f.real(p[0]))?;
    }
    Ok(())
}
