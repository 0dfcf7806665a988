//! Helpers shared by the reference kernels: dtype dispatch macros, row-major index/stride helpers,
//! broadcasting, packed sub-byte (un)packing, half-precision conversion and the numeric traits
//! (`Real`, `Arith`, `NumElem`, `FloatElem`, `IntElem`) that carry the exact semantics of §4/§9.
//!
//! Shared by every reference kernel file; some helpers exist for the files that are not using
//! them yet, hence the module-wide `dead_code` allowance.

#![allow(dead_code)]

use std::borrow::Cow;
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

// ---------------------------------------------------------------------------------------------
// Dtype dispatch macros.
// ---------------------------------------------------------------------------------------------

/// `dtype_match!(dt, T => body, [Int8: i8, …], _ => fallback)`: runs `body` with the type alias
/// `T` bound to the listed storage type of `dt`, or `fallback` for dtypes not listed.
macro_rules! dtype_match {
    ($dt:expr, $T:ident => $body:expr, [$($d:ident : $t:ty),* $(,)?], _ => $else:expr) => {
        match $dt {
            $( $crate::ir::dtype::DType::$d => {
                #[allow(dead_code)]
                type $T = $t;
                $body
            } )*
            #[allow(unreachable_patterns)]
            _ => $else,
        }
    };
}
pub(crate) use dtype_match;

/// Dispatch over every non-packed supported dtype (Bool, ints, floats, complex).
macro_rules! with_storage {
    ($dt:expr, $T:ident => $body:expr, _ => $else:expr) => {
        $crate::kernels::reference::common::dtype_match!($dt, $T => $body, [
            Bool: bool, Int8: i8, Int16: i16, Int32: i32, Int64: i64, Uint8: u8, Uint16: u16, Uint32: u32,
            Uint64: u64, Float16: half::f16, BFloat16: half::bf16, Float32: f32, Float64: f64,
            Complex64: num_complex::Complex32, Complex128: num_complex::Complex64,
        ], _ => $else)
    };
}
pub(crate) use with_storage;

/// Dispatch over the numeric dtypes: non-packed ints, floats and complex (implement [`NumElem`]).
macro_rules! with_numeric {
    ($dt:expr, $T:ident => $body:expr, _ => $else:expr) => {
        $crate::kernels::reference::common::dtype_match!($dt, $T => $body, [
            Int8: i8, Int16: i16, Int32: i32, Int64: i64, Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64,
            Float16: half::f16, BFloat16: half::bf16, Float32: f32, Float64: f64,
            Complex64: num_complex::Complex32, Complex128: num_complex::Complex64,
        ], _ => $else)
    };
}
pub(crate) use with_numeric;

/// Dispatch over the real numeric dtypes: non-packed ints and floats (implement [`NumElem`] and
/// [`Ordered`]).
macro_rules! with_real {
    ($dt:expr, $T:ident => $body:expr, _ => $else:expr) => {
        $crate::kernels::reference::common::dtype_match!($dt, $T => $body, [
            Int8: i8, Int16: i16, Int32: i32, Int64: i64, Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64,
            Float16: half::f16, BFloat16: half::bf16, Float32: f32, Float64: f64,
        ], _ => $else)
    };
}
pub(crate) use with_real;

/// Dispatch over the non-packed integer dtypes (implement [`IntElem`]).
macro_rules! with_int {
    ($dt:expr, $T:ident => $body:expr, _ => $else:expr) => {
        $crate::kernels::reference::common::dtype_match!($dt, $T => $body, [
            Int8: i8, Int16: i16, Int32: i32, Int64: i64, Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64,
        ], _ => $else)
    };
}
pub(crate) use with_int;

/// Dispatch over the float dtypes F16, BF16, F32, F64 (implement [`FloatElem`]).
macro_rules! with_float {
    ($dt:expr, $T:ident => $body:expr, _ => $else:expr) => {
        $crate::kernels::reference::common::dtype_match!($dt, $T => $body, [
            Float16: half::f16, BFloat16: half::bf16, Float32: f32, Float64: f64,
        ], _ => $else)
    };
}
pub(crate) use with_float;

/// Dispatch over the complex dtypes (implement [`ComplexElem`]).
macro_rules! with_complex {
    ($dt:expr, $T:ident => $body:expr, _ => $else:expr) => {
        $crate::kernels::reference::common::dtype_match!($dt, $T => $body, [
            Complex64: num_complex::Complex32, Complex128: num_complex::Complex64,
        ], _ => $else)
    };
}
pub(crate) use with_complex;

// ---------------------------------------------------------------------------------------------
// Index and stride helpers.
// ---------------------------------------------------------------------------------------------

/// Row-major strides (in elements) of `dims`.
pub(crate) fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The multi-index of the row-major `linear` position in `dims`.
pub(crate) fn unravel(mut linear: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0usize; dims.len()];
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = linear % dims[i];
            linear /= dims[i];
        }
    }
    idx
}

/// Advances the row-major multi-index `idx` within `dims`; returns false after the last index.
pub(crate) fn next_index(idx: &mut [usize], dims: &[usize]) -> bool {
    for i in (0..dims.len()).rev() {
        idx[i] += 1;
        if idx[i] < dims[i] {
            return true;
        }
        idx[i] = 0;
    }
    false
}

/// For each position of the row-major iteration over `dims`, the offset `Σ idx[i]·strides[i]`
/// (strides may be 0 to broadcast). Returns one offset per element of `dims`.
pub(crate) fn strided_offsets(dims: &[usize], strides: &[usize]) -> Vec<usize> {
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let mut idx = vec![0usize; dims.len()];
    let mut off = 0usize;
    loop {
        out.push(off);
        // Increment the index, updating the offset incrementally.
        let mut axis = dims.len();
        loop {
            if axis == 0 {
                return out;
            }
            axis -= 1;
            idx[axis] += 1;
            off += strides[axis];
            if idx[axis] < dims[axis] {
                break;
            }
            off -= strides[axis] * idx[axis];
            idx[axis] = 0;
        }
    }
}

/// Broadcast strides of an operand of dims `src` against the output `out` under the binary
/// broadcasting rule of §4.0: a scalar broadcasts everywhere; otherwise ranks must be equal and
/// each dim equals the output's or is 1.
pub(crate) fn broadcast_strides(op: &str, src: &[usize], out: &[usize]) -> Result<Vec<usize>> {
    if src.is_empty() {
        return Ok(vec![0; out.len()]);
    }
    if src.len() != out.len() {
        return Err(Error::invalid(op, format!("operand dims {src:?} do not broadcast to output dims {out:?}")));
    }
    let st = strides(src);
    src.iter()
        .zip(out)
        .zip(st)
        .map(|((&s, &o), stride)| {
            if s == o {
                Ok(if s == 1 { 0 } else { stride })
            } else if s == 1 {
                Ok(0)
            } else {
                Err(Error::invalid(op, format!("operand dims {src:?} do not broadcast to output dims {out:?}")))
            }
        })
        .collect()
}

/// The elements of `src` (dims `src_dims`) broadcast to `out_dims` (§4.0 rule), borrowed when no
/// broadcasting is needed.
pub(crate) fn broadcast_to<'a, T: Copy>(
    op: &str,
    src: &'a [T],
    src_dims: &[usize],
    out_dims: &[usize],
) -> Result<Cow<'a, [T]>> {
    if src_dims == out_dims {
        return Ok(Cow::Borrowed(src));
    }
    let n: usize = out_dims.iter().product();
    if src.len() == 1 {
        return Ok(Cow::Owned(vec![src[0]; n]));
    }
    let st = broadcast_strides(op, src_dims, out_dims)?;
    Ok(Cow::Owned(strided_offsets(out_dims, &st).into_iter().map(|o| src[o]).collect()))
}

/// A tensor of `shape` holding `data` (checks the dtype and element count).
pub(crate) fn make_tensor<T: Element>(shape: &Shape, data: &[T]) -> Result<Tensor> {
    Tensor::from_vec(shape.clone(), data)
}

/// Checks the number of inputs and outputs of an op.
pub(crate) fn check_arity(op: &str, inputs: &[Tensor], n_in: usize, out_shapes: &[Shape], n_out: usize) -> Result<()> {
    if inputs.len() != n_in {
        return Err(Error::invalid(op, format!("expected {n_in} operand(s), got {}", inputs.len())));
    }
    if out_shapes.len() != n_out {
        return Err(Error::invalid(op, format!("expected {n_out} output shape(s), got {}", out_shapes.len())));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Packed sub-byte dtypes.
// ---------------------------------------------------------------------------------------------

/// Unpacks `n` values of the packed dtype `dt` (Int4/Uint4/Int2/Uint2/Int1/Uint1) from `bytes`,
/// low bits first, sign-extending signed types.
pub(crate) fn unpack_ints(dt: DType, bytes: &[u8], n: usize) -> Result<Vec<i64>> {
    let bits = dt.bits();
    if !dt.is_packed() || bytes.len() * 8 < n * bits {
        return Err(Error::invalid("unpack", format!("{n} {dt} values from {} bytes", bytes.len())));
    }
    let per = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let signed = dt.is_signed_int();
    Ok((0..n)
        .map(|i| {
            let v = (bytes[i / per] >> ((i % per) * bits)) & mask;
            if signed && v & (1 << (bits - 1)) != 0 { v as i64 - (1i64 << bits) } else { v as i64 }
        })
        .collect())
}

/// Packs `values` into the packed dtype `dt`, keeping the low bits of each (two's complement wrap).
pub(crate) fn pack_ints(dt: DType, values: &[i64]) -> Vec<u8> {
    let bits = dt.bits();
    let per = 8 / bits.max(1);
    let mask = ((1u16 << bits) - 1) as u8;
    let mut out = vec![0u8; dt.size_for(values.len())];
    for (i, &v) in values.iter().enumerate() {
        out[i / per] |= ((v as u8) & mask) << ((i % per) * bits);
    }
    out
}

/// The smallest and largest value of a packed integer dtype.
pub(crate) fn packed_range(dt: DType) -> (i64, i64) {
    let bits = dt.bits() as u32;
    if dt.is_signed_int() { (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1) } else { (0, (1i64 << bits) - 1) }
}

// ---------------------------------------------------------------------------------------------
// Float values of whole tensors (for the fused ops and other f64-computed kernels).
// ---------------------------------------------------------------------------------------------

/// The elements of a float tensor (F16/BF16/F32/F64) as f64 (exact).
pub(crate) fn float_tensor_to_f64(op: &str, t: &Tensor) -> Result<Vec<f64>> {
    with_float!(t.shape.dtype, T => Ok(t.typed::<T>().iter().map(|&v| FloatElem::to_f64(v)).collect()),
        _ => Err(Error::not_implemented(op, format!("dtype {} (expected a float dtype)", t.shape.dtype))))
}

/// A float tensor of `shape` from f64 values, each rounded once to the dtype.
pub(crate) fn float_tensor_from_f64(op: &str, shape: &Shape, data: &[f64]) -> Result<Tensor> {
    with_float!(shape.dtype, T => {
        let v: Vec<T> = data.iter().map(|&x| <T as FloatElem>::from_f64(x)).collect();
        make_tensor(shape, &v)
    }, _ => Err(Error::not_implemented(op, format!("output dtype {} (expected a float dtype)", shape.dtype))))
}

// ---------------------------------------------------------------------------------------------
// Numeric traits.
// ---------------------------------------------------------------------------------------------

/// The IEEE compute types f32 and f64, with the libm functions the kernels need.
#[allow(missing_docs)]
pub(crate) trait Real:
    Copy
    + PartialOrd
    + Debug
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Rem<Output = Self>
    + Neg<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    const NAN: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn exp(self) -> Self;
    fn exp_m1(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tanh(self) -> Self;
    fn atan2(self, x: Self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_ties_even(self) -> Self;
    fn abs(self) -> Self;
    fn erf(self) -> Self;
    fn is_nan(self) -> bool;
    fn is_finite(self) -> bool;
    fn is_sign_negative(self) -> bool;
    fn hypot(self, o: Self) -> Self;
    /// Total-order key: sign-magnitude bits mapped to two's complement (§4.2).
    fn total_key(self) -> i64;
}

macro_rules! impl_real {
    ($t:ty, $bits:ty, $sbits:ty) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NAN: Self = <$t>::NAN;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn exp_m1(self) -> Self {
                <$t>::exp_m1(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn atan2(self, x: Self) -> Self {
                <$t>::atan2(self, x)
            }
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            fn round_ties_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn erf(self) -> Self {
                erf_f64(self as f64) as $t
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            fn is_sign_negative(self) -> bool {
                <$t>::is_sign_negative(self)
            }
            fn hypot(self, o: Self) -> Self {
                <$t>::hypot(self, o)
            }
            fn total_key(self) -> i64 {
                let b = self.to_bits() as $sbits;
                (if b < 0 { b ^ <$sbits>::MAX } else { b }) as i64
            }
        }
    };
}
impl_real!(f32, u32, i32);
impl_real!(f64, u64, i64);

/// The error function in f64 (relative error below 1e−15).
///
/// `|x| < 1.5`: the everywhere-positive series `erf(x) = 2/√π · e^(−x²) · Σₙ 2ⁿ x^(2n+1) / (1·3·…·(2n+1))`
/// (no cancellation); `1.5 ≤ |x| < 6`: `1 − erfc(x)` with the continued fraction
/// `erfc(x) = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …))))` (100 terms, evaluated backwards);
/// `|x| ≥ 6`: ±1. `e^(−x²)` is corrected for the rounding of `x²`.
pub(crate) fn erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax >= 6.0 {
        return if x < 0.0 { -1.0 } else { 1.0 };
    }
    let x2 = x * x;
    let x2_lo = x.mul_add(x, -x2); // x² = x2 + x2_lo exactly
    let e = (-x2).exp() * (1.0 - x2_lo);
    if ax >= 1.5 {
        let mut t = ax;
        for k in (1..=100).rev() {
            t = ax + (k as f64 / 2.0) / t;
        }
        let r = 1.0 - e / (std::f64::consts::PI.sqrt() * t);
        return if x < 0.0 { -r } else { r };
    }
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0f64;
    loop {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
        if term.abs() <= sum.abs() * 1e-17 {
            break;
        }
    }
    std::f64::consts::FRAC_2_SQRT_PI * e * sum
}

/// `x` rounded to f32 with round-to-odd (truncate, then set the last bit if inexact), so that a
/// second rounding to a type with at most 22 significand bits is a correct single rounding.
fn f64_to_f32_odd(x: f64) -> f32 {
    let f = x as f32;
    if !f.is_finite() || f as f64 == x {
        return f;
    }
    // Truncate toward zero: step back one ulp in magnitude if `as` rounded away from zero.
    let mut bits = f.to_bits();
    if (f as f64).abs() > x.abs() {
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// `x` rounded once (to nearest even) to F16.
pub(crate) fn f64_to_f16(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_odd(x))
}

/// `x` rounded once (to nearest even) to BF16.
pub(crate) fn f64_to_bf16(x: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_odd(x))
}

/// Arithmetic with the exact semantics of §4.1/§9: ints wrap, int ÷0 → −1 / all ones, int rem 0 →
/// dividend, int pow by squaring, floats IEEE with NaN-propagating Max/Min, complex lexicographic
/// Max/Min. Implemented for the native ints, f32, f64 and the complex types (the "compute" types).
#[allow(missing_docs)]
pub(crate) trait Arith: Copy + PartialEq + Debug {
    fn zero() -> Self;
    fn one() -> Self;
    /// Identity of Max: −Inf / MIN / 0.
    fn lowest() -> Self;
    /// Identity of Min: +Inf / MAX.
    fn highest() -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn rem(self, o: Self) -> Self;
    fn pow(self, e: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! impl_arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn zero() -> Self { 0 }
            fn one() -> Self { 1 }
            fn lowest() -> Self { <$t>::MIN }
            fn highest() -> Self { <$t>::MAX }
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[allow(unused_comparisons)]
            fn div(self, o: Self) -> Self {
                // ÷0: −1 for signed types, all ones for unsigned (both are `!0`); MIN/−1 wraps to MIN.
                if o == 0 { !0 } else { self.wrapping_div(o) }
            }
            fn rem(self, o: Self) -> Self {
                if o == 0 { self } else { self.wrapping_rem(o) }
            }
            #[allow(unused_comparisons)]
            fn pow(self, e: Self) -> Self {
                if e < 0 {
                    // Negative exponent: 0, except base 1 → 1 and base −1 → ±1 by parity.
                    let m1 = (0 as $t).wrapping_sub(1);
                    return if self == 1 { 1 } else if self == m1 { if e & 1 == 0 { 1 } else { m1 } } else { 0 };
                }
                let (mut base, mut e, mut acc) = (self, e, 1 as $t);
                while e != 0 {
                    if e & 1 == 1 { acc = acc.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            fn max(self, o: Self) -> Self { Ord::max(self, o) }
            fn min(self, o: Self) -> Self { Ord::min(self, o) }
            fn is_nan(self) -> bool { false }
        }
    )*};
}
impl_arith_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! impl_arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn zero() -> Self { 0.0 }
            fn one() -> Self { 1.0 }
            fn lowest() -> Self { <$t>::NEG_INFINITY }
            fn highest() -> Self { <$t>::INFINITY }
            fn add(self, o: Self) -> Self { self + o }
            fn sub(self, o: Self) -> Self { self - o }
            fn mul(self, o: Self) -> Self { self * o }
            fn div(self, o: Self) -> Self { self / o }
            fn rem(self, o: Self) -> Self { self % o }
            fn pow(self, e: Self) -> Self { self.powf(e) }
            fn max(self, o: Self) -> Self {
                if self.is_nan() { self } else if o.is_nan() { o }
                else if self == o { if self.is_sign_negative() { o } else { self } }
                else if self > o { self } else { o }
            }
            fn min(self, o: Self) -> Self {
                if self.is_nan() { self } else if o.is_nan() { o }
                else if self == o { if self.is_sign_negative() { self } else { o } }
                else if self < o { self } else { o }
            }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
        }
    )*};
}
impl_arith_float!(f32, f64);

macro_rules! impl_arith_complex {
    ($($c:ty : $r:ty),*) => {$(
        impl Arith for $c {
            fn zero() -> Self { <$c>::new(0.0, 0.0) }
            fn one() -> Self { <$c>::new(1.0, 0.0) }
            fn lowest() -> Self { <$c>::new(<$r>::NEG_INFINITY, <$r>::NEG_INFINITY) }
            fn highest() -> Self { <$c>::new(<$r>::INFINITY, <$r>::INFINITY) }
            fn add(self, o: Self) -> Self { self + o }
            fn sub(self, o: Self) -> Self { self - o }
            fn mul(self, o: Self) -> Self { self * o }
            fn div(self, o: Self) -> Self { self / o }
            /// Not defined for complex (rejected before dispatch); NaN.
            fn rem(self, _o: Self) -> Self { <$c>::new(<$r>::NAN, <$r>::NAN) }
            fn pow(self, e: Self) -> Self {
                if e.re == 0.0 && e.im == 0.0 {
                    <$c>::new(1.0, 0.0)
                } else if self.re == 0.0 && self.im == 0.0 && e.im == 0.0 && e.re > 0.0 {
                    <$c>::new(0.0, 0.0)
                } else {
                    self.powc(e)
                }
            }
            fn max(self, o: Self) -> Self {
                if Arith::is_nan(self) { self } else if Arith::is_nan(o) { o }
                else if (self.re, self.im) >= (o.re, o.im) { self } else { o }
            }
            fn min(self, o: Self) -> Self {
                if Arith::is_nan(self) { self } else if Arith::is_nan(o) { o }
                else if (self.re, self.im) <= (o.re, o.im) { self } else { o }
            }
            fn is_nan(self) -> bool { self.re.is_nan() || self.im.is_nan() }
        }
    )*};
}
impl_arith_complex!(Complex32: f32, Complex64: f64);

/// A numeric storage type and the type it is computed in (`Acc`): half types compute in f32,
/// every other type in itself.
pub(crate) trait NumElem: Element {
    /// The compute/accumulation type.
    type Acc: Arith;
    /// Widens to the compute type (exact).
    fn to_acc(self) -> Self::Acc;
    /// Rounds a compute value back (round to nearest even for half types).
    fn from_acc(a: Self::Acc) -> Self;
}

macro_rules! impl_num_self {
    ($($t:ty),*) => {$(
        impl NumElem for $t {
            type Acc = $t;
            fn to_acc(self) -> $t { self }
            fn from_acc(a: $t) -> $t { a }
        }
    )*};
}
impl_num_self!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64, Complex32, Complex64);

impl NumElem for f16 {
    type Acc = f32;
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    fn from_acc(a: f32) -> f16 {
        f16::from_f32(a)
    }
}

impl NumElem for bf16 {
    type Acc = f32;
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    fn from_acc(a: f32) -> bf16 {
        bf16::from_f32(a)
    }
}

/// Real (non-complex) numeric storage types: ordering and the f64 view.
pub(crate) trait Ordered: NumElem {
    /// The value as f64 (exact for every type but large 64-bit ints).
    fn as_f64(self) -> f64;
    /// NaN test (false for ints).
    fn is_nan_val(self) -> bool;
    /// `self < o` (IEEE: false with NaN).
    fn lt(self, o: Self) -> bool;
    /// Key for the total order of §4.2 (ints: the value itself).
    fn total_key(self) -> i128;
}

macro_rules! impl_ordered_int {
    ($($t:ty),*) => {$(
        impl Ordered for $t {
            fn as_f64(self) -> f64 { self as f64 }
            fn is_nan_val(self) -> bool { false }
            fn lt(self, o: Self) -> bool { self < o }
            fn total_key(self) -> i128 { self as i128 }
        }
    )*};
}
impl_ordered_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! impl_ordered_float {
    ($($t:ty => $bits:ty),*) => {$(
        impl Ordered for $t {
            fn as_f64(self) -> f64 { FloatElem::to_f64(self) }
            fn is_nan_val(self) -> bool { self.is_nan() }
            fn lt(self, o: Self) -> bool { self < o }
            fn total_key(self) -> i128 {
                let b = self.to_bits() as $bits;
                (if b < 0 { b ^ <$bits>::MAX } else { b }) as i128
            }
        }
    )*};
}
impl_ordered_float!(f16 => i16, bf16 => i16, f32 => i32, f64 => i64);

/// The float storage types F16, BF16, F32, F64 and their compute type (f32 for half types).
pub(crate) trait FloatElem: Ordered {
    /// Compute type.
    type C: Real;
    /// Widens to the compute type.
    fn to_c(self) -> Self::C;
    /// Rounds a compute value (once) to the storage type.
    fn from_c(c: Self::C) -> Self;
    /// Exact f64 value.
    fn to_f64(self) -> f64;
    /// Rounds an f64 value once to this type.
    fn from_f64(v: f64) -> Self;
    /// Whether the type is F16/BF16.
    const HALF: bool;
}

impl FloatElem for f16 {
    type C = f32;
    const HALF: bool = true;
    fn to_c(self) -> f32 {
        self.to_f32()
    }
    fn from_c(c: f32) -> f16 {
        f16::from_f32(c)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(v: f64) -> f16 {
        f64_to_f16(v)
    }
}

impl FloatElem for bf16 {
    type C = f32;
    const HALF: bool = true;
    fn to_c(self) -> f32 {
        self.to_f32()
    }
    fn from_c(c: f32) -> bf16 {
        bf16::from_f32(c)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(v: f64) -> bf16 {
        f64_to_bf16(v)
    }
}

impl FloatElem for f32 {
    type C = f32;
    const HALF: bool = false;
    fn to_c(self) -> f32 {
        self
    }
    fn from_c(c: f32) -> f32 {
        c
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}

impl FloatElem for f64 {
    type C = f64;
    const HALF: bool = false;
    fn to_c(self) -> f64 {
        self
    }
    fn from_c(c: f64) -> f64 {
        c
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> f64 {
        v
    }
}

/// The native integer storage types: bit operations with the semantics of §4.1/§4.3.
#[allow(missing_docs)]
pub(crate) trait IntElem: Ordered + Arith {
    const BITS: u32;
    const SIGNED: bool;
    fn not(self) -> Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    /// `self << amount`; amounts ≥ width (or negative) give 0.
    fn shl(self, amount: Self) -> Self;
    /// Sign-filling shift (unsigned types fill with their top bit); large amounts → 0 or −1.
    fn shr_arith(self, amount: Self) -> Self;
    /// Zero-filling shift; large amounts → 0.
    fn shr_logical(self, amount: Self) -> Self;
    fn popcount(self) -> Self;
    fn clz(self) -> Self;
    /// |x| (MIN → MIN; unsigned: identity).
    fn abs_wrap(self) -> Self;
    /// −x with wrap.
    fn neg_wrap(self) -> Self;
    /// −1 / 0 / 1 (unsigned: 0 / 1).
    fn sign(self) -> Self;
    /// The value as i128.
    fn to_i128(self) -> i128;
    /// The low bits of `v`.
    fn from_i128_wrap(v: i128) -> Self;
}

macro_rules! impl_int_elem {
    ($($t:ty : $s:ty : $u:ty : $signed:expr),*) => {$(
        impl IntElem for $t {
            const BITS: u32 = <$t>::BITS;
            const SIGNED: bool = $signed;
            fn not(self) -> Self { !self }
            fn and(self, o: Self) -> Self { self & o }
            fn or(self, o: Self) -> Self { self | o }
            fn xor(self, o: Self) -> Self { self ^ o }
            fn shl(self, amount: Self) -> Self {
                let s = amount as $u;
                if s as u64 >= <$t>::BITS as u64 { 0 } else { self << s }
            }
            fn shr_arith(self, amount: Self) -> Self {
                let s = amount as $u;
                let v = self as $s;
                if s as u64 >= <$t>::BITS as u64 { (if v < 0 { -1 } else { 0 }) as $t } else { (v >> s) as $t }
            }
            fn shr_logical(self, amount: Self) -> Self {
                let s = amount as $u;
                if s as u64 >= <$t>::BITS as u64 { 0 } else { ((self as $u) >> s) as $t }
            }
            fn popcount(self) -> Self { self.count_ones() as $t }
            fn clz(self) -> Self { self.leading_zeros() as $t }
            #[allow(unused_comparisons)]
            fn abs_wrap(self) -> Self { if self < 0 { (0 as $t).wrapping_sub(self) } else { self } }
            fn neg_wrap(self) -> Self { (0 as $t).wrapping_sub(self) }
            #[allow(unused_comparisons)]
            fn sign(self) -> Self {
                if self > 0 { 1 } else if self < 0 { (0 as $t).wrapping_sub(1) } else { 0 }
            }
            fn to_i128(self) -> i128 { self as i128 }
            fn from_i128_wrap(v: i128) -> Self { v as $t }
        }
    )*};
}
impl_int_elem!(
    i8: i8: u8: true, i16: i16: u16: true, i32: i32: u32: true, i64: i64: u64: true,
    u8: i8: u8: false, u16: i16: u16: false, u32: i32: u32: false, u64: i64: u64: false
);

/// The complex storage types and their real part type.
pub(crate) trait ComplexElem: NumElem<Acc = Self> + Arith {
    /// f32 for C64, f64 for C128.
    type R: Real + Element;
    /// Real part.
    fn re(self) -> Self::R;
    /// Imaginary part.
    fn im(self) -> Self::R;
    /// From parts.
    fn from_parts(re: Self::R, im: Self::R) -> Self;
}

macro_rules! impl_complex_elem {
    ($($c:ty : $r:ty),*) => {$(
        impl ComplexElem for $c {
            type R = $r;
            fn re(self) -> $r { self.re }
            fn im(self) -> $r { self.im }
            fn from_parts(re: $r, im: $r) -> Self { <$c>::new(re, im) }
        }
    )*};
}
impl_complex_elem!(Complex32: f32, Complex64: f64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_offsets() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
        // [2,1] broadcast to [2,3]: offsets 0,0,0,1,1,1.
        let st = broadcast_strides("t", &[2, 1], &[2, 3]).unwrap();
        assert_eq!(strided_offsets(&[2, 3], &st), vec![0, 0, 0, 1, 1, 1]);
        assert!(broadcast_strides("t", &[2], &[2, 3]).is_err());
        assert!(broadcast_strides("t", &[2, 2], &[2, 3]).is_err());
        let b = broadcast_to("t", &[1, 2, 3], &[1, 3], &[2, 3]).unwrap();
        assert_eq!(&*b, &[1, 2, 3, 1, 2, 3]);
        let mut idx = vec![0, 0];
        let mut n = 1;
        while next_index(&mut idx, &[2, 3]) {
            n += 1;
        }
        assert_eq!(n, 6);
    }

    #[test]
    fn packing() {
        // u8 0x21 → Int4 {1, 2}; 0xF8 → {−8, −1}.
        assert_eq!(unpack_ints(DType::Int4, &[0x21, 0xF8], 4).unwrap(), vec![1, 2, -8, -1]);
        assert_eq!(unpack_ints(DType::Uint4, &[0xF8], 2).unwrap(), vec![8, 15]);
        assert_eq!(unpack_ints(DType::Int2, &[0b11_10_01_00], 4).unwrap(), vec![0, 1, -2, -1]);
        assert_eq!(unpack_ints(DType::Int1, &[0b101], 3).unwrap(), vec![-1, 0, -1]);
        assert_eq!(pack_ints(DType::Int4, &[1, 2, -8]), vec![0x21, 0x08]);
        assert_eq!(pack_ints(DType::Uint2, &[3, 0, 1, 2, 1]), vec![0b10_01_00_11, 0b01]);
        assert_eq!(packed_range(DType::Int4), (-8, 7));
        assert_eq!(packed_range(DType::Uint2), (0, 3));
        assert!(unpack_ints(DType::Int4, &[0], 3).is_err());
    }

    #[test]
    fn erf_known_values() {
        // erf(1) = 0.8427007929497149, erf(0.5) = 0.5204998778130465, erf(2) = 0.9953222650189527,
        // erf(3) = 0.9999779095030014 (tables of the error function).
        assert!((erf_f64(1.0) - 0.8427007929497149).abs() < 1e-15);
        assert!((erf_f64(0.5) - 0.5204998778130465).abs() < 1e-15);
        assert!((erf_f64(-2.0) + 0.9953222650189527).abs() < 1e-15);
        assert!((erf_f64(3.0) - 0.9999779095030014).abs() < 1e-15);
        // erf(5) = 1 − 1.5374597944280e−12 = 0.9999999999984626.
        assert!((erf_f64(5.0) - 0.9999999999984626).abs() < 1e-15);
        assert_eq!(erf_f64(10.0), 1.0);
        assert!(erf_f64(-0.0).is_sign_negative());
        assert!(erf_f64(f64::NAN).is_nan());
        assert_eq!(erf_f64(f64::NEG_INFINITY), -1.0);
    }

    #[test]
    fn single_rounding_to_half() {
        // f64 1+2⁻¹¹+2⁻⁴⁰ → f16 = 1+2⁻¹⁰ (a rounding through f32 would give 1.0).
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f64_to_f16(v).to_f64(), 1.0 + 2f64.powi(-10));
        assert_eq!(f64_to_f16(-v).to_f64(), -1.0 - 2f64.powi(-10));
        // Exact ties still go to even; exact values stay.
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11)).to_f64(), 1.0);
        assert_eq!(f64_to_f16(0.5).to_f64(), 0.5);
        assert_eq!(f64_to_bf16(1.0 + 2f64.powi(-8) + 2f64.powi(-40)).to_f64(), 1.0 + 2f64.powi(-7));
        assert_eq!(f64_to_f16(1e6).to_f64(), f64::INFINITY);
        assert!(f64_to_f16(f64::NAN).is_nan());
    }

    #[test]
    fn int_arith_edge_cases() {
        // §11: lax.div int32 7/0 = −1, MIN/−1 = MIN; uint32 7/0 = MAX; rem 0 → dividend.
        assert_eq!(Arith::div(7i32, 0), -1);
        assert_eq!(Arith::div(i32::MIN, -1), i32::MIN);
        assert_eq!(Arith::div(7u32, 0), u32::MAX);
        assert_eq!(Arith::rem(-7i32, 0), -7);
        assert_eq!(Arith::rem(i32::MIN, -1), 0);
        assert_eq!(Arith::pow(3i32, 40), 689956897);
        assert_eq!(Arith::pow(-1i32, -3), -1);
        assert_eq!(Arith::pow(0i32, 0), 1);
    }

    #[test]
    fn float_max_min_zero_signs() {
        assert!(!Arith::max(-0.0f32, 0.0).is_sign_negative());
        assert!(!Arith::max(0.0f32, -0.0).is_sign_negative());
        assert!(Arith::min(0.0f64, -0.0).is_sign_negative());
        assert!(Arith::min(-0.0f64, 0.0).is_sign_negative());
        assert!(Arith::max(1.0f32, f32::NAN).is_nan());
    }
}
