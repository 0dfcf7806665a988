//! Private helpers shared by the data-movement, indexing, linear-algebra, window and misc reference kernels:
//! operand access, row-major index iteration, scalar index reads, dtype conversions (§9 rules) and the
//! [`Arith`] element trait with its dtype dispatch macro.

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

/// Operand `i` of `op`, or an error naming the missing operand.
pub(crate) fn arg<'a>(op: &str, inputs: &'a [Tensor], i: usize) -> Result<&'a Tensor> {
    inputs.get(i).ok_or_else(|| Error::invalid(op, format!("missing operand #{i} (got {} operands)", inputs.len())))
}

/// Output shape `i` of `op` (concrete), or an error.
pub(crate) fn out_shape<'a>(op: &str, out_shapes: &'a [Shape], i: usize) -> Result<&'a Shape> {
    let s = out_shapes
        .get(i)
        .ok_or_else(|| Error::invalid(op, format!("missing output shape #{i} (got {})", out_shapes.len())))?;
    if s.is_dynamic() {
        return Err(Error::invalid(op, format!("output shape {s} is not concrete")));
    }
    Ok(s)
}

/// Row-major strides (in elements) of `dims`.
pub(crate) fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Advances the row-major multi-index `idx` within `dims`; false once it wrapped around.
pub(crate) fn advance(idx: &mut [usize], dims: &[usize]) -> bool {
    for a in (0..dims.len()).rev() {
        idx[a] += 1;
        if idx[a] < dims[a] {
            return true;
        }
        idx[a] = 0;
    }
    false
}

/// Calls `f` on every multi-index of `dims` in row-major order (once for a scalar, never if a dim is 0).
pub(crate) fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    if dims.contains(&0) {
        return;
    }
    let mut idx = vec![0; dims.len()];
    loop {
        f(&idx);
        if !advance(&mut idx, dims) {
            return;
        }
    }
}

/// Flat offsets (with `strides`) of every combination of the listed `axes`, row-major in the list order.
/// An empty list gives `[0]`.
pub(crate) fn axis_offsets(dims: &[usize], strides: &[usize], axes: &[usize]) -> Vec<usize> {
    let sub: Vec<usize> = axes.iter().map(|&a| dims[a]).collect();
    let mut out = Vec::with_capacity(sub.iter().product());
    for_each_index(&sub, |idx| out.push(idx.iter().zip(axes).map(|(&i, &a)| i * strides[a]).sum()));
    out
}

/// Size (after dilation by `dil`) of an axis of `n` elements: `(n−1)·dil+1`, or 0 when `n = 0`.
pub(crate) fn dilated(n: i64, dil: i64) -> i64 {
    if n <= 0 { 0 } else { (n - 1) * dil + 1 }
}

/// Number of windows of extent `window` (already dilated) sliding with `stride` over `padded` cells (0 if the
/// window does not fit).
pub(crate) fn window_count(padded: i64, window: i64, stride: i64) -> i64 {
    if padded < window { 0 } else { (padded - window) / stride + 1 }
}

/// Element size in bytes for byte-moving kernels; packed and storage-less dtypes are rejected.
pub(crate) fn elem_size(op: &str, dtype: DType) -> Result<usize> {
    if dtype.is_packed() {
        return Err(Error::not_implemented(op, format!("packed dtype {dtype}")));
    }
    if !dtype.is_supported() {
        return Err(Error::invalid(op, format!("dtype {dtype} has no storage")));
    }
    Ok(dtype.size())
}

/// Checks that `shape` has the dims `dims`.
pub(crate) fn expect_dims(op: &str, what: &str, shape: &Shape, dims: &[usize]) -> Result<()> {
    if shape.udims() != dims || shape.is_dynamic() {
        return Err(Error::invalid(op, format!("{what} has shape {shape}, expected dims {dims:?}")));
    }
    Ok(())
}

/// All values of an integer tensor (any non-packed int dtype) as `i64`; uint64 values above `i64::MAX` saturate.
pub(crate) fn int_values(op: &str, what: &str, t: &Tensor) -> Result<Vec<i64>> {
    Ok(match t.shape.dtype {
        DType::Int8 => t.typed::<i8>().iter().map(|&v| v as i64).collect(),
        DType::Int16 => t.typed::<i16>().iter().map(|&v| v as i64).collect(),
        DType::Int32 => t.typed::<i32>().iter().map(|&v| v as i64).collect(),
        DType::Int64 => t.typed::<i64>().to_vec(),
        DType::Uint8 => t.typed::<u8>().iter().map(|&v| v as i64).collect(),
        DType::Uint16 => t.typed::<u16>().iter().map(|&v| v as i64).collect(),
        DType::Uint32 => t.typed::<u32>().iter().map(|&v| v as i64).collect(),
        DType::Uint64 => t.typed::<u64>().iter().map(|&v| i64::try_from(v).unwrap_or(i64::MAX)).collect(),
        d => return Err(Error::invalid(op, format!("{what} must have an integer dtype, got {d}"))),
    })
}

/// The value of a scalar (one-element) integer tensor.
pub(crate) fn scalar_index(op: &str, what: &str, t: &Tensor) -> Result<i64> {
    if t.len() != 1 {
        return Err(Error::invalid(op, format!("{what} must be a scalar, got shape {}", t.shape)));
    }
    Ok(int_values(op, what, t)?[0])
}

/// Values of a real tensor (Bool, ints, floats) as `f64`.
pub(crate) fn to_f64_vec(op: &str, t: &Tensor) -> Result<Vec<f64>> {
    Ok(match t.shape.dtype {
        DType::Bool => t.typed::<bool>().iter().map(|&v| v as u8 as f64).collect(),
        DType::Float16 => t.typed::<f16>().iter().map(|v| v.to_f64()).collect(),
        DType::BFloat16 => t.typed::<bf16>().iter().map(|v| v.to_f64()).collect(),
        DType::Float32 => t.typed::<f32>().iter().map(|&v| v as f64).collect(),
        DType::Float64 => t.typed::<f64>().to_vec(),
        DType::Uint64 => t.typed::<u64>().iter().map(|&v| v as f64).collect(),
        d if d.is_int() && !d.is_packed() => int_values(op, "operand", t)?.iter().map(|&v| v as f64).collect(),
        d => return Err(Error::not_implemented(op, format!("dtype {d} as a real value"))),
    })
}

/// Values of an F16/BF16/F32 tensor as `f32` (exact).
pub(crate) fn to_f32_vec(op: &str, t: &Tensor) -> Result<Vec<f32>> {
    Ok(match t.shape.dtype {
        DType::Float16 => t.typed::<f16>().iter().map(|v| v.to_f32()).collect(),
        DType::BFloat16 => t.typed::<bf16>().iter().map(|v| v.to_f32()).collect(),
        DType::Float32 => t.typed::<f32>().to_vec(),
        d => return Err(Error::invalid(op, format!("dtype {d} is not exactly representable in f32"))),
    })
}

/// Values of an integer or Bool tensor as `i64` (unsigned values zero-extended, uint64 reinterpreted).
pub(crate) fn to_i64_vec(op: &str, t: &Tensor) -> Result<Vec<i64>> {
    Ok(match t.shape.dtype {
        DType::Bool => t.typed::<bool>().iter().map(|&v| v as i64).collect(),
        DType::Uint64 => t.typed::<u64>().iter().map(|&v| v as i64).collect(),
        _ => int_values(op, "operand", t)?,
    })
}

/// Values of any numeric tensor as `Complex<f64>` (real dtypes get a zero imaginary part).
pub(crate) fn to_c64_vec(op: &str, t: &Tensor) -> Result<Vec<Complex64>> {
    Ok(match t.shape.dtype {
        DType::Complex64 => t.typed::<Complex32>().iter().map(|c| Complex64::new(c.re as f64, c.im as f64)).collect(),
        DType::Complex128 => t.typed::<Complex64>().to_vec(),
        _ => to_f64_vec(op, t)?.into_iter().map(|v| Complex64::new(v, 0.0)).collect(),
    })
}

fn build<T: Element>(op: &str, shape: &Shape, n: usize, f: impl Fn(usize) -> T) -> Result<Tensor> {
    if shape.size() != Some(n) || T::DTYPE != shape.dtype {
        return Err(Error::invalid(op, format!("{n} {} result values for output shape {shape}", T::DTYPE)));
    }
    // Written in place: the output is the only allocation, at the dtype's own size.
    let mut t = Tensor::try_zeros(shape.clone())?;
    for (i, x) in t.typed_mut::<T>().iter_mut().enumerate() {
        *x = f(i);
    }
    Ok(t)
}

/// Converts `f64` values to a tensor of `shape` (§9: floats→ints saturate with NaN→0, BF16 via f32, F16 rounded
/// once, →Bool is `x ≠ 0`, →complex has zero imaginary part).
pub(crate) fn from_f64_vec(op: &str, shape: &Shape, v: &[f64]) -> Result<Tensor> {
    let n = v.len();
    match shape.dtype {
        DType::Bool => build(op, shape, n, |i| v[i] != 0.0),
        DType::Int8 => build(op, shape, n, |i| v[i] as i8),
        DType::Int16 => build(op, shape, n, |i| v[i] as i16),
        DType::Int32 => build(op, shape, n, |i| v[i] as i32),
        DType::Int64 => build(op, shape, n, |i| v[i] as i64),
        DType::Uint8 => build(op, shape, n, |i| v[i] as u8),
        DType::Uint16 => build(op, shape, n, |i| v[i] as u16),
        DType::Uint32 => build(op, shape, n, |i| v[i] as u32),
        DType::Uint64 => build(op, shape, n, |i| v[i] as u64),
        DType::Float16 => build(op, shape, n, |i| f16::from_f64(v[i])),
        DType::BFloat16 => build(op, shape, n, |i| bf16::from_f32(v[i] as f32)),
        DType::Float32 => build(op, shape, n, |i| v[i] as f32),
        DType::Float64 => build(op, shape, n, |i| v[i]),
        DType::Complex64 => build(op, shape, n, |i| Complex32::new(v[i] as f32, 0.0)),
        DType::Complex128 => build(op, shape, n, |i| Complex64::new(v[i], 0.0)),
        d => Err(Error::not_implemented(op, format!("output dtype {d}"))),
    }
}

/// Converts `f32` values to a tensor of `shape` (half types rounded once from f32).
pub(crate) fn from_f32_vec(op: &str, shape: &Shape, v: &[f32]) -> Result<Tensor> {
    let n = v.len();
    match shape.dtype {
        DType::Float16 => build(op, shape, n, |i| f16::from_f32(v[i])),
        DType::BFloat16 => build(op, shape, n, |i| bf16::from_f32(v[i])),
        DType::Float32 => build(op, shape, n, |i| v[i]),
        _ => from_f64_vec(op, shape, &v.iter().map(|&x| x as f64).collect::<Vec<_>>()),
    }
}

/// Converts integer values to a tensor of `shape`: ints wrap (two's complement truncation), floats round to
/// nearest (BF16 via f32). `unsigned` says whether the `i64`s hold `u64` bit patterns.
pub(crate) fn from_i64_vec(op: &str, shape: &Shape, v: &[i64], unsigned: bool) -> Result<Tensor> {
    from_i64_fn(op, shape, v.len(), |i| v[i], unsigned)
}

/// [`from_i64_vec`] of the `n` values `g(0..n)`, computed while the output is written (no
/// intermediate vector).
pub(crate) fn from_i64_fn(
    op: &str,
    shape: &Shape,
    n: usize,
    g: impl Fn(usize) -> i64,
    unsigned: bool,
) -> Result<Tensor> {
    let f = |i: usize| if unsigned { g(i) as u64 as f64 } else { g(i) as f64 };
    let f32_of = |i: usize| if unsigned { g(i) as u64 as f32 } else { g(i) as f32 };
    match shape.dtype {
        DType::Bool => build(op, shape, n, |i| g(i) != 0),
        DType::Int8 => build(op, shape, n, |i| g(i) as i8),
        DType::Int16 => build(op, shape, n, |i| g(i) as i16),
        DType::Int32 => build(op, shape, n, |i| g(i) as i32),
        DType::Int64 => build(op, shape, n, &g),
        DType::Uint8 => build(op, shape, n, |i| g(i) as u8),
        DType::Uint16 => build(op, shape, n, |i| g(i) as u16),
        DType::Uint32 => build(op, shape, n, |i| g(i) as u32),
        DType::Uint64 => build(op, shape, n, |i| g(i) as u64),
        DType::Float16 => build(op, shape, n, |i| f16::from_f64(f(i))),
        DType::BFloat16 => build(op, shape, n, |i| bf16::from_f32(f32_of(i))),
        DType::Float32 => build(op, shape, n, f32_of),
        DType::Float64 => build(op, shape, n, f),
        DType::Complex64 => build(op, shape, n, |i| Complex32::new(f32_of(i), 0.0)),
        DType::Complex128 => build(op, shape, n, |i| Complex64::new(f(i), 0.0)),
        d => Err(Error::not_implemented(op, format!("output dtype {d}"))),
    }
}

/// Converts complex values to a tensor of `shape` (real targets drop the imaginary part first).
pub(crate) fn from_c64_vec(op: &str, shape: &Shape, v: &[Complex64]) -> Result<Tensor> {
    let n = v.len();
    match shape.dtype {
        DType::Complex64 => build(op, shape, n, |i| Complex32::new(v[i].re as f32, v[i].im as f32)),
        DType::Complex128 => build(op, shape, n, |i| v[i]),
        _ => from_f64_vec(op, shape, &v.iter().map(|c| c.re).collect::<Vec<_>>()),
    }
}

/// Arithmetic on one element type, for the typed reference kernels (scatter, windows). Half types compute in
/// an `f32` accumulator; ints wrap; floats follow IEEE with NaN-propagating max/min (`max(−0,+0) = +0`);
/// complex max/min are lexicographic (real part, then imaginary).
pub(crate) trait Arith: Element {
    /// The type values are combined in.
    type Acc: Copy;
    /// Widens to the accumulator (exact).
    fn to_acc(self) -> Self::Acc;
    /// Rounds an accumulator back to the element type.
    fn from_acc(a: Self::Acc) -> Self;
    /// Sum identity.
    fn zero() -> Self::Acc;
    /// Product identity.
    fn one() -> Self::Acc;
    /// Max identity (−Inf, MIN, 0 for unsigned).
    fn lowest() -> Self::Acc;
    /// Min identity (+Inf, MAX).
    fn highest() -> Self::Acc;
    /// Sum.
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Product.
    fn mul(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Maximum.
    fn max(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Minimum.
    fn min(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// `a ≥ b` (false if either is NaN).
    fn ge(a: Self, b: Self) -> bool;
    /// `a ≤ b` (false if either is NaN).
    fn le(a: Self, b: Self) -> bool;
}

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            type Acc = $t;
            fn to_acc(self) -> $t { self }
            fn from_acc(a: $t) -> $t { a }
            fn zero() -> $t { 0 }
            fn one() -> $t { 1 }
            fn lowest() -> $t { <$t>::MIN }
            fn highest() -> $t { <$t>::MAX }
            fn add(a: $t, b: $t) -> $t { a.wrapping_add(b) }
            fn mul(a: $t, b: $t) -> $t { a.wrapping_mul(b) }
            fn max(a: $t, b: $t) -> $t { Ord::max(a, b) }
            fn min(a: $t, b: $t) -> $t { Ord::min(a, b) }
            fn ge(a: $t, b: $t) -> bool { a >= b }
            fn le(a: $t, b: $t) -> bool { a <= b }
        }
    )*};
}
arith_int!(i8, i16, i32, i64, u8, u16, u32, u64);

/// IEEE max with NaN propagation and `max(−0, +0) = +0`.
fn fmax<F: Copy + PartialOrd>(a: F, b: F, a_nan: bool, b_nan: bool, a_neg: bool) -> F {
    if a_nan {
        a
    } else if b_nan || b > a || (a == b && a_neg) {
        b
    } else {
        a
    }
}

/// IEEE min with NaN propagation and `min(−0, +0) = −0`.
fn fmin<F: Copy + PartialOrd>(a: F, b: F, a_nan: bool, b_nan: bool, a_neg: bool) -> F {
    if a_nan {
        a
    } else if b_nan || b < a || (a == b && !a_neg) {
        b
    } else {
        a
    }
}

macro_rules! arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            type Acc = $t;
            fn to_acc(self) -> $t { self }
            fn from_acc(a: $t) -> $t { a }
            fn zero() -> $t { 0.0 }
            fn one() -> $t { 1.0 }
            fn lowest() -> $t { <$t>::NEG_INFINITY }
            fn highest() -> $t { <$t>::INFINITY }
            fn add(a: $t, b: $t) -> $t { a + b }
            fn mul(a: $t, b: $t) -> $t { a * b }
            fn max(a: $t, b: $t) -> $t { fmax(a, b, a.is_nan(), b.is_nan(), a.is_sign_negative()) }
            fn min(a: $t, b: $t) -> $t { fmin(a, b, a.is_nan(), b.is_nan(), a.is_sign_negative()) }
            fn ge(a: $t, b: $t) -> bool { a >= b }
            fn le(a: $t, b: $t) -> bool { a <= b }
        }
    )*};
}
arith_float!(f32, f64);

macro_rules! arith_half {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            type Acc = f32;
            fn to_acc(self) -> f32 { self.to_f32() }
            fn from_acc(a: f32) -> $t { <$t>::from_f32(a) }
            fn zero() -> f32 { 0.0 }
            fn one() -> f32 { 1.0 }
            fn lowest() -> f32 { f32::NEG_INFINITY }
            fn highest() -> f32 { f32::INFINITY }
            fn add(a: f32, b: f32) -> f32 { a + b }
            fn mul(a: f32, b: f32) -> f32 { a * b }
            fn max(a: f32, b: f32) -> f32 { <f32 as Arith>::max(a, b) }
            fn min(a: f32, b: f32) -> f32 { <f32 as Arith>::min(a, b) }
            fn ge(a: $t, b: $t) -> bool { a.to_f32() >= b.to_f32() }
            fn le(a: $t, b: $t) -> bool { a.to_f32() <= b.to_f32() }
        }
    )*};
}
arith_half!(f16, bf16);

/// Lexicographic `a ≥ b` on complex numbers.
fn complex_ge<F: PartialOrd>(a_re: F, a_im: F, b_re: F, b_im: F) -> bool {
    a_re > b_re || (a_re == b_re && a_im >= b_im)
}

macro_rules! arith_complex {
    ($($t:ty => $f:ty),*) => {$(
        impl Arith for $t {
            type Acc = $t;
            fn to_acc(self) -> $t { self }
            fn from_acc(a: $t) -> $t { a }
            fn zero() -> $t { <$t>::new(0.0, 0.0) }
            fn one() -> $t { <$t>::new(1.0, 0.0) }
            fn lowest() -> $t { <$t>::new(<$f>::NEG_INFINITY, <$f>::NEG_INFINITY) }
            fn highest() -> $t { <$t>::new(<$f>::INFINITY, <$f>::INFINITY) }
            fn add(a: $t, b: $t) -> $t { a + b }
            fn mul(a: $t, b: $t) -> $t { a * b }
            fn max(a: $t, b: $t) -> $t { if complex_ge(a.re, a.im, b.re, b.im) { a } else { b } }
            fn min(a: $t, b: $t) -> $t { if complex_ge(b.re, b.im, a.re, a.im) { a } else { b } }
            fn ge(a: $t, b: $t) -> bool { complex_ge(a.re, a.im, b.re, b.im) }
            fn le(a: $t, b: $t) -> bool { complex_ge(b.re, b.im, a.re, a.im) }
        }
    )*};
}
arith_complex!(Complex32 => f32, Complex64 => f64);

/// Runs `$body` with the type alias `$T` bound to the storage type of `$dtype` (every numeric dtype; others give
/// a NotImplemented error naming `$op`). `$body` must evaluate to a `Result`.
macro_rules! with_arith_type {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {{
        use $crate::ir::dtype::DType as D;
        match $dtype {
            D::Int8 => {
                type $T = i8;
                $body
            }
            D::Int16 => {
                type $T = i16;
                $body
            }
            D::Int32 => {
                type $T = i32;
                $body
            }
            D::Int64 => {
                type $T = i64;
                $body
            }
            D::Uint8 => {
                type $T = u8;
                $body
            }
            D::Uint16 => {
                type $T = u16;
                $body
            }
            D::Uint32 => {
                type $T = u32;
                $body
            }
            D::Uint64 => {
                type $T = u64;
                $body
            }
            D::Float16 => {
                type $T = ::half::f16;
                $body
            }
            D::BFloat16 => {
                type $T = ::half::bf16;
                $body
            }
            D::Float32 => {
                type $T = f32;
                $body
            }
            D::Float64 => {
                type $T = f64;
                $body
            }
            D::Complex64 => {
                type $T = ::num_complex::Complex32;
                $body
            }
            D::Complex128 => {
                type $T = ::num_complex::Complex64;
                $body
            }
            d => Err($crate::error::Error::not_implemented($op, format!("dtype {d}"))),
        }
    }};
}
pub(crate) use with_arith_type;

/// A typed test tensor (test helper).
#[cfg(test)]
pub(crate) fn tensor<T: Element>(dims: &[i64], data: &[T]) -> Tensor {
    Tensor::from_vec(Shape::new(T::DTYPE, dims), data).expect("test tensor")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_iteration() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
        let mut seen = vec![];
        for_each_index(&[2, 2], |i| seen.push(i.to_vec()));
        assert_eq!(seen, vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
        let mut n = 0;
        for_each_index(&[], |_| n += 1);
        assert_eq!(n, 1);
        for_each_index(&[3, 0], |_| n += 1);
        assert_eq!(n, 1);
        assert_eq!(axis_offsets(&[2, 3, 4], &[12, 4, 1], &[2, 0]), vec![0, 12, 1, 13, 2, 14, 3, 15]);
        assert_eq!(axis_offsets(&[2, 3], &[3, 1], &[]), vec![0]);
    }

    #[test]
    fn conversions_follow_section_9() {
        let s = Shape::new(DType::Int32, &[4]);
        let t = from_f64_vec("t", &s, &[f64::NAN, 3e9, -2.7, f64::NEG_INFINITY]).unwrap();
        assert_eq!(t.typed::<i32>(), &[0, i32::MAX, -2, i32::MIN]);
        let s = Shape::new(DType::BFloat16, &[1]);
        let t = from_i64_vec("t", &s, &[(1 << 24) + (1 << 16) + 1], false).unwrap();
        assert_eq!(t.typed::<bf16>()[0].to_f32(), 16777216.0);
        let s = Shape::new(DType::Int8, &[2]);
        let t = from_i64_vec("t", &s, &[200, -129], false).unwrap();
        assert_eq!(t.typed::<i8>(), &[-56, 127]);
        let u = tensor::<u64>(&[1], &[u64::MAX]);
        assert_eq!(int_values("t", "u", &u).unwrap(), vec![i64::MAX]);
        assert_eq!(scalar_index("t", "s", &tensor::<u8>(&[], &[7])).unwrap(), 7);
        assert!(scalar_index("t", "s", &tensor::<f32>(&[], &[7.0])).is_err());
    }

    #[test]
    fn float_max_min_rules() {
        assert!(<f32 as Arith>::max(f32::NAN, 1.0).is_nan());
        assert!(<f32 as Arith>::max(1.0, f32::NAN).is_nan());
        assert!(<f32 as Arith>::max(-0.0, 0.0).is_sign_positive());
        assert!(<f32 as Arith>::max(0.0, -0.0).is_sign_positive());
        assert!(<f32 as Arith>::min(-0.0, 0.0).is_sign_negative());
        assert!(<f32 as Arith>::min(0.0, -0.0).is_sign_negative());
        assert_eq!(<f32 as Arith>::max(2.0, 3.0), 3.0);
        assert_eq!(<f64 as Arith>::min(2.0, 3.0), 2.0);
        assert_eq!(<i8 as Arith>::add(100, 100), -56);
    }
}
