//! Reference kernels of the unary elementwise ops (§4.3): ints, floats (half types computed in
//! f32 and rounded once, Logistic rounded per step), complex (XLA semantics) and Bool.

use num_complex::Complex;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::UnaryOp;
use crate::ir::shape::Shape;
use crate::kernels::reference::common::{
    ComplexElem, FloatElem, IntElem, Real, make_tensor, unpack_ints, with_complex, with_float, with_int,
};
use crate::kernels::tensor::Tensor;

fn unsupported(op: UnaryOp, dt: DType) -> Error {
    Error::invalid(format!("{op:?}"), format!("operand dtype {dt} is not supported"))
}

/// Evaluates the unary op `op` on `x`; `out` is the (inferred) output shape.
pub(super) fn unary(op: UnaryOp, x: &Tensor, out: &Shape) -> Result<Tensor> {
    let dt = x.shape.dtype;
    if op == UnaryOp::Identity {
        return Ok(Tensor { shape: out.clone(), data: x.data.clone() });
    }
    if dt == DType::Bool {
        let v = x.typed::<bool>();
        return match op {
            UnaryOp::LogicalNot => make_tensor(out, &v.iter().map(|b| !b).collect::<Vec<_>>()),
            UnaryOp::IsNaN => make_tensor(out, &vec![false; v.len()]),
            _ => Err(unsupported(op, dt)),
        };
    }
    if dt.is_packed() {
        // Only the value-preserving IsNaN makes sense on storage-only dtypes.
        if op == UnaryOp::IsNaN {
            let n = x.len();
            unpack_ints(dt, x.bytes(), n)?;
            return make_tensor(out, &vec![false; n]);
        }
        return Err(unsupported(op, dt));
    }
    with_int!(dt, T => return int_unary::<T>(op, x.typed::<T>(), out), _ => ());
    with_float!(dt, T => return float_unary::<T>(op, x.typed::<T>(), out), _ => ());
    with_complex!(dt, T => return complex_unary::<T>(op, x.typed::<T>(), out), _ => ());
    Err(unsupported(op, dt))
}

fn map<T: Copy, U: crate::ir::dtype::Element>(out: &Shape, x: &[T], f: impl Fn(T) -> U) -> Result<Tensor> {
    let v: Vec<U> = x.iter().map(|&e| f(e)).collect();
    make_tensor(out, &v)
}

fn int_unary<T: IntElem>(op: UnaryOp, x: &[T], out: &Shape) -> Result<Tensor> {
    match op {
        UnaryOp::Abs => map(out, x, T::abs_wrap),
        UnaryOp::Neg => map(out, x, T::neg_wrap),
        UnaryOp::Sign => map(out, x, T::sign),
        UnaryOp::BitwiseNot => map(out, x, T::not),
        UnaryOp::BitCount => map(out, x, T::popcount),
        UnaryOp::Clz => map(out, x, T::clz),
        UnaryOp::IsNaN => map(out, x, |_| false),
        _ => Err(unsupported(op, T::DTYPE)),
    }
}

/// Applies `f` in the compute type and rounds once.
fn fmap<T: FloatElem>(out: &Shape, x: &[T], f: impl Fn(T::C) -> T::C) -> Result<Tensor> {
    map(out, x, |e| T::from_c(f(e.to_c())))
}

fn sign_real<R: Real>(v: R) -> R {
    if v.is_nan() || v == R::ZERO {
        v
    } else if v > R::ZERO {
        R::ONE
    } else {
        -R::ONE
    }
}

fn float_unary<T: FloatElem>(op: UnaryOp, x: &[T], out: &Shape) -> Result<Tensor> {
    match op {
        UnaryOp::Abs => fmap(out, x, |v| v.abs()),
        UnaryOp::Neg => fmap(out, x, |v| -v),
        UnaryOp::Sign => fmap(out, x, sign_real),
        UnaryOp::Ceil => fmap(out, x, |v| v.ceil()),
        UnaryOp::Floor => fmap(out, x, |v| v.floor()),
        UnaryOp::Round => fmap(out, x, |v| v.round_ties_even()),
        UnaryOp::Exp => fmap(out, x, |v| v.exp()),
        UnaryOp::Expm1 => fmap(out, x, |v| v.exp_m1()),
        UnaryOp::Log => fmap(out, x, |v| v.ln()),
        UnaryOp::Log1p => fmap(out, x, |v| v.ln_1p()),
        UnaryOp::Logistic => {
            if T::HALF {
                // XLA rounds every step to the half type: r(1 / r(1 + r(exp(−x)))).
                let r = |c: T::C| T::from_c(c).to_c();
                fmap(out, x, |v| r(T::C::ONE / r(T::C::ONE + r((-v).exp()))))
            } else {
                fmap(out, x, |v| T::C::ONE / (T::C::ONE + (-v).exp()))
            }
        }
        UnaryOp::Sqrt => fmap(out, x, |v| v.sqrt()),
        UnaryOp::Rsqrt => fmap(out, x, |v| T::C::ONE / v.sqrt()),
        UnaryOp::Cos => fmap(out, x, |v| v.cos()),
        UnaryOp::Sin => fmap(out, x, |v| v.sin()),
        UnaryOp::Tanh => fmap(out, x, |v| v.tanh()),
        UnaryOp::Erf => fmap(out, x, |v| v.erf()),
        UnaryOp::IsFinite => map(out, x, |v| v.to_c().is_finite()),
        UnaryOp::IsNaN => map(out, x, |v| v.to_c().is_nan()),
        // §9: Real/Imag on real floats are x and zeros; the conjugate of a real is itself.
        UnaryOp::Real | UnaryOp::Conj => map(out, x, |v| v),
        UnaryOp::Imag => map(out, x, |_| T::from_c(T::C::ZERO)),
        _ => Err(unsupported(op, T::DTYPE)),
    }
}

fn complex_unary<T: ComplexElem + ComplexFns>(op: UnaryOp, x: &[T], out: &Shape) -> Result<Tensor> {
    let f = |g: fn(T) -> T| map(out, x, g);
    match op {
        UnaryOp::Abs => map(out, x, |v| v.re().hypot(v.im())),
        UnaryOp::Real => map(out, x, |v| v.re()),
        UnaryOp::Imag => map(out, x, |v| v.im()),
        UnaryOp::Conj => f(|z| T::from_parts(z.re(), -z.im())),
        UnaryOp::Neg => f(|z| T::from_parts(-z.re(), -z.im())),
        UnaryOp::Sign => f(ComplexFns::csign),
        UnaryOp::Exp => f(ComplexFns::cexp),
        UnaryOp::Expm1 => f(ComplexFns::cexpm1),
        UnaryOp::Log => f(ComplexFns::cln),
        UnaryOp::Log1p => f(ComplexFns::clog1p),
        UnaryOp::Sqrt => f(ComplexFns::csqrt),
        UnaryOp::Rsqrt => f(ComplexFns::crsqrt),
        UnaryOp::Sin => f(ComplexFns::csin),
        UnaryOp::Cos => f(ComplexFns::ccos),
        UnaryOp::Tanh => f(ComplexFns::ctanh),
        UnaryOp::Logistic => f(ComplexFns::clogistic),
        UnaryOp::IsNaN => map(out, x, |v| v.re().is_nan() || v.im().is_nan()),
        _ => Err(unsupported(op, T::DTYPE)),
    }
}

/// tanh(x + iy) in f64, accurate near the poles (y near ±π/2, x near 0) and for large |x|:
/// tanh z = (sinh x·cosh x + i·sin y·cos y) / (sinh² x + cos² y), the textbook
/// (sinh 2x + i·sin 2y) / (cosh 2x + cos 2y) with the cancelling 1 + (−1) removed from the
/// denominator (cosh 2x = 1 + 2 sinh² x, cos 2y = 1 − 2 sin² y). Every term is a product of
/// accurately computed factors and the denominator a sum of non-negative terms, so each part is
/// within a few f64 ulp; complex64 rounds that once (≤ 1 f32 ulp). For |x| > 22, re = ±1 exactly
/// in f64 and im = 4·sin y·cos y·e^(−2|x|) (no overflow of sinh²). Special values follow C99
/// `ctanh`: tanh(±∞ + iy) = ±1 + i·0·sin 2y; a non-finite y with finite x gives NaN.
pub(super) fn ctanh_f64(x: f64, y: f64) -> (f64, f64) {
    if x.is_infinite() {
        let im = if y.is_finite() { 0f64.copysign((2.0 * y).sin()) } else { 0f64.copysign(y) };
        return (1f64.copysign(x), im);
    }
    if x.is_nan() {
        return (f64::NAN, if y == 0.0 { y } else { f64::NAN });
    }
    if !y.is_finite() {
        return (f64::NAN, f64::NAN);
    }
    let (s, c) = y.sin_cos();
    if x.abs() > 22.0 {
        return (1f64.copysign(x), 4.0 * s * c * (-2.0 * x.abs()).exp());
    }
    let (sh, ch) = (x.sinh(), x.cosh());
    let d = sh * sh + c * c;
    (sh * ch / d, s * c / d)
}

/// The complex functions (num-complex's, plus accurate expm1/log1p/tanh), per concrete complex
/// type.
pub(super) trait ComplexFns: Sized {
    fn cexp(self) -> Self;
    fn cln(self) -> Self;
    fn csqrt(self) -> Self;
    fn csin(self) -> Self;
    fn ccos(self) -> Self;
    fn ctanh(self) -> Self;
    /// z/|z|, 0 → 0.
    fn csign(self) -> Self;
    /// exp(z) − 1, accurate near 0: re = expm1(a)·cos b − 2 sin²(b/2), im = eᵃ·sin b.
    fn cexpm1(self) -> Self;
    /// ln(1 + z), accurate near 0: re = ½·log1p(2a + a² + b²), im = atan2(b, 1 + a).
    fn clog1p(self) -> Self;
    /// 1/√z.
    fn crsqrt(self) -> Self;
    /// 1/(1 + e^−z).
    fn clogistic(self) -> Self;
}

macro_rules! impl_complex_fns {
    ($($r:ty),*) => {$(
        impl ComplexFns for Complex<$r> {
            fn cexp(self) -> Self { self.exp() }
            fn cln(self) -> Self { self.ln() }
            fn csqrt(self) -> Self { self.sqrt() }
            fn csin(self) -> Self { self.sin() }
            fn ccos(self) -> Self { self.cos() }
            fn ctanh(self) -> Self {
                let (re, im) = ctanh_f64(f64::from(self.re), f64::from(self.im));
                Complex::new(re as $r, im as $r)
            }
            fn csign(self) -> Self {
                let n = self.re.hypot(self.im);
                if n == 0.0 { self } else { Complex::new(self.re / n, self.im / n) }
            }
            fn cexpm1(self) -> Self {
                let (a, b) = (self.re, self.im);
                let h = (b / 2.0).sin();
                Complex::new(a.exp_m1() * b.cos() - 2.0 * h * h, a.exp() * b.sin())
            }
            fn clog1p(self) -> Self {
                let (a, b) = (self.re, self.im);
                Complex::new((2.0 * a + a * a + b * b).ln_1p() / 2.0, b.atan2(1.0 + a))
            }
            fn crsqrt(self) -> Self { Complex::new(1.0, 0.0) / self.sqrt() }
            fn clogistic(self) -> Self {
                let one = Complex::new(1.0, 0.0);
                one / (one + (-self).exp())
            }
        }
    )*};
}
impl_complex_fns!(f32, f64);

#[cfg(test)]
mod tests {
    use half::{bf16, f16};
    use num_complex::{Complex32, Complex64};

    use super::*;

    fn t<T: crate::ir::dtype::Element>(dims: &[i64], v: &[T]) -> Tensor {
        Tensor::from_vec(Shape::new(T::DTYPE, dims), v).unwrap()
    }
    fn run<T: crate::ir::dtype::Element>(op: UnaryOp, x: &Tensor, out_dt: DType) -> Vec<T> {
        unary(op, x, &x.shape.with_dtype(out_dt)).unwrap().typed::<T>().to_vec()
    }

    #[test]
    fn abs_neg_sign_ints() {
        let x = t(&[4], &[i32::MIN, -3, 0, 5]);
        assert_eq!(run::<i32>(UnaryOp::Abs, &x, DType::Int32), vec![i32::MIN, 3, 0, 5]);
        assert_eq!(run::<i32>(UnaryOp::Neg, &x, DType::Int32), vec![i32::MIN, 3, 0, -5]);
        assert_eq!(run::<i32>(UnaryOp::Sign, &x, DType::Int32), vec![-1, -1, 0, 1]);
        let u = t(&[2], &[0u32, 5]);
        assert_eq!(run::<u32>(UnaryOp::Sign, &u, DType::Uint32), vec![0, 1]);
        assert_eq!(run::<u32>(UnaryOp::Abs, &u, DType::Uint32), vec![0, 5]);
    }

    #[test]
    fn bit_ops() {
        // §11: population_count int8 [7,−1,−128] = [3,8,1]; clz int8 [7,0,−1,1] = [5,8,0,7].
        let x = t(&[3], &[7i8, -1, -128]);
        assert_eq!(run::<i8>(UnaryOp::BitCount, &x, DType::Int8), vec![3, 8, 1]);
        let x = t(&[4], &[7i8, 0, -1, 1]);
        assert_eq!(run::<i8>(UnaryOp::Clz, &x, DType::Int8), vec![5, 8, 0, 7]);
        let u = t(&[2], &[0u32, 1]);
        assert_eq!(run::<u32>(UnaryOp::Clz, &u, DType::Uint32), vec![32, 31]);
        let x = t(&[1], &[7i32]);
        assert_eq!(run::<i32>(UnaryOp::BitwiseNot, &x, DType::Int32), vec![-8]);
    }

    #[test]
    fn float_sign_abs_round() {
        // §11: sign f32 [NaN,−0,+0,−3,2,Inf] = [NaN,−0,+0,−1,1,1].
        let x = t(&[6], &[f32::NAN, -0.0, 0.0, -3.0, 2.0, f32::INFINITY]);
        let s = run::<f32>(UnaryOp::Sign, &x, DType::Float32);
        assert!(s[0].is_nan());
        assert!(s[1] == 0.0 && s[1].is_sign_negative());
        assert!(s[2] == 0.0 && s[2].is_sign_positive());
        assert_eq!(&s[3..], &[-1.0, 1.0, 1.0]);
        let a = run::<f32>(UnaryOp::Abs, &t(&[1], &[-0.0f32]), DType::Float32);
        assert!(a[0].is_sign_positive());
        // Round ties to even: [0.5,1.5,2.5,−0.5,−2.5] → [0,2,2,−0,−2].
        let r = run::<f64>(UnaryOp::Round, &t(&[5], &[0.5f64, 1.5, 2.5, -0.5, -2.5]), DType::Float64);
        assert_eq!(r, vec![0.0, 2.0, 2.0, -0.0, -2.0]);
        assert!(r[3].is_sign_negative());
        let c = run::<f32>(UnaryOp::Ceil, &t(&[2], &[-0.5f32, 1.6]), DType::Float32);
        assert!(c[0] == 0.0 && c[0].is_sign_negative());
        assert_eq!(c[1], 2.0);
        assert_eq!(run::<f32>(UnaryOp::Floor, &t(&[1], &[1.6f32]), DType::Float32), vec![1.0]);
    }

    #[test]
    fn float_transcendentals() {
        // log [0,−0,−1] = [−Inf,−Inf,NaN]; rsqrt [0,−0,−1,4,Inf] = [Inf,−Inf,NaN,0.5,0]; sqrt(−0) = −0.
        let l = run::<f32>(UnaryOp::Log, &t(&[3], &[0.0f32, -0.0, -1.0]), DType::Float32);
        assert_eq!(&l[..2], &[f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert!(l[2].is_nan());
        let r = run::<f32>(UnaryOp::Rsqrt, &t(&[5], &[0.0f32, -0.0, -1.0, 4.0, f32::INFINITY]), DType::Float32);
        assert_eq!(r[0], f32::INFINITY);
        assert_eq!(r[1], f32::NEG_INFINITY);
        assert!(r[2].is_nan());
        assert_eq!(&r[3..], &[0.5, 0.0]);
        let s = run::<f32>(UnaryOp::Sqrt, &t(&[2], &[-0.0f32, 4.0]), DType::Float32);
        assert!(s[0] == 0.0 && s[0].is_sign_negative());
        assert_eq!(s[1], 2.0);
        // erf(1) = 0.8427007929497149; logistic f32 −20 = 2.0612e−9, −100 = 0; f64 −100 = 3.72e−44.
        let e = run::<f64>(UnaryOp::Erf, &t(&[1], &[1.0f64]), DType::Float64);
        assert!((e[0] - 0.8427007929497149).abs() < 1e-15);
        let g = run::<f32>(UnaryOp::Logistic, &t(&[3], &[-20.0f32, -100.0, 0.0]), DType::Float32);
        assert!((g[0] - 2.0611537e-9).abs() < 1e-15);
        assert_eq!(&g[1..], &[0.0, 0.5]);
        let g = run::<f64>(UnaryOp::Logistic, &t(&[1], &[-100.0f64]), DType::Float64);
        assert!((g[0] / 3.720075976020836e-44 - 1.0).abs() < 1e-12);
        let v = run::<f64>(UnaryOp::Exp, &t(&[1], &[1.0f64]), DType::Float64);
        assert!((v[0] - std::f64::consts::E).abs() < 1e-15);
        let v = run::<f64>(UnaryOp::Expm1, &t(&[1], &[1e-20f64]), DType::Float64);
        assert_eq!(v[0], 1e-20);
        let v = run::<f64>(UnaryOp::Log1p, &t(&[1], &[1e-20f64]), DType::Float64);
        assert_eq!(v[0], 1e-20);
        let v = run::<f32>(UnaryOp::Cos, &t(&[1], &[0.0f32]), DType::Float32);
        assert_eq!(v[0], 1.0);
        let v = run::<f64>(UnaryOp::Sin, &t(&[1], &[std::f64::consts::FRAC_PI_2]), DType::Float64);
        assert_eq!(v[0], 1.0);
        let v = run::<f64>(UnaryOp::Tanh, &t(&[1], &[0.5f64]), DType::Float64);
        assert!((v[0] - 0.46211715726000974).abs() < 1e-15);
    }

    #[test]
    fn half_types() {
        let x = t(&[3], &[f16::from_f32(-7.0), f16::from_f32(13.0), f16::from_f32(0.0)]);
        let n = run::<f16>(UnaryOp::Neg, &x, DType::Float16);
        assert_eq!(n.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), vec![7.0, -13.0, -0.0]);
        let x = t(&[1], &[bf16::from_f32(4.0)]);
        assert_eq!(run::<bf16>(UnaryOp::Sqrt, &x, DType::BFloat16)[0].to_f32(), 2.0);
        // Logistic(0) = 0.5 exactly in every scheme; Logistic(20) rounds to 1.
        let x = t(&[2], &[f16::from_f32(0.0), f16::from_f32(20.0)]);
        let l = run::<f16>(UnaryOp::Logistic, &x, DType::Float16);
        assert_eq!(l[0].to_f32(), 0.5);
        assert_eq!(l[1].to_f32(), 1.0);
        // Per-step rounding: exp(−1) in bf16 is 0.3671875 (0.36787944 rounded to 8 bits);
        // 1 + 0.3671875 = 1.3671875 (exact in bf16); 1/1.3671875 = 0.731428… → bf16 0.73046875.
        let x = t(&[1], &[bf16::from_f32(1.0)]);
        assert_eq!(run::<bf16>(UnaryOp::Logistic, &x, DType::BFloat16)[0].to_f32(), 0.73046875);
    }

    #[test]
    fn predicates_and_real_imag() {
        let x = t(&[3], &[1.0f32, f32::INFINITY, f32::NAN]);
        assert_eq!(run::<bool>(UnaryOp::IsFinite, &x, DType::Bool), vec![true, false, false]);
        assert_eq!(run::<bool>(UnaryOp::IsNaN, &x, DType::Bool), vec![false, false, true]);
        assert_eq!(run::<bool>(UnaryOp::IsNaN, &t(&[1], &[3i32]), DType::Bool), vec![false]);
        assert_eq!(run::<bool>(UnaryOp::LogicalNot, &t(&[2], &[true, false]), DType::Bool), vec![false, true]);
        assert_eq!(run::<f32>(UnaryOp::Real, &t(&[1], &[2.5f32]), DType::Float32), vec![2.5]);
        assert_eq!(run::<f32>(UnaryOp::Imag, &t(&[1], &[2.5f32]), DType::Float32), vec![0.0]);
        assert!(unary(UnaryOp::Exp, &t(&[1], &[1i32]), &Shape::new(DType::Int32, &[1])).is_err());
        assert!(unary(UnaryOp::Clz, &t(&[1], &[1.0f32]), &Shape::new(DType::Float32, &[1])).is_err());
    }

    #[test]
    fn complex_ops() {
        let x = t(&[2], &[Complex32::new(3.0, 4.0), Complex32::new(0.0, 0.0)]);
        assert_eq!(run::<f32>(UnaryOp::Abs, &x, DType::Float32), vec![5.0, 0.0]);
        assert_eq!(
            run::<Complex32>(UnaryOp::Sign, &x, DType::Complex64),
            vec![Complex32::new(0.6, 0.8), Complex32::new(0.0, 0.0)]
        );
        assert_eq!(run::<f32>(UnaryOp::Real, &x, DType::Float32), vec![3.0, 0.0]);
        assert_eq!(run::<f32>(UnaryOp::Imag, &x, DType::Float32), vec![4.0, 0.0]);
        assert_eq!(run::<Complex32>(UnaryOp::Conj, &x, DType::Complex64)[0], Complex32::new(3.0, -4.0));
        // exp(iπ) = −1; log(−1) = iπ; sqrt(−4) = 2i; expm1/log1p near 0 keep the small value.
        let z = t(&[1], &[Complex64::new(0.0, std::f64::consts::PI)]);
        let e = run::<Complex64>(UnaryOp::Exp, &z, DType::Complex128)[0];
        assert!((e.re + 1.0).abs() < 1e-15 && e.im.abs() < 1e-15);
        let z = t(&[2], &[Complex64::new(-1.0, 0.0), Complex64::new(-4.0, 0.0)]);
        let l = run::<Complex64>(UnaryOp::Log, &z, DType::Complex128)[0];
        assert!(l.re.abs() < 1e-15 && (l.im - std::f64::consts::PI).abs() < 1e-15);
        let s = run::<Complex64>(UnaryOp::Sqrt, &z, DType::Complex128)[1];
        assert!(s.re.abs() < 1e-15 && (s.im - 2.0).abs() < 1e-15);
        let z = t(&[1], &[Complex64::new(1e-20, 1e-20)]);
        let m = run::<Complex64>(UnaryOp::Expm1, &z, DType::Complex128)[0];
        assert!((m.re - 1e-20).abs() < 1e-34 && (m.im - 1e-20).abs() < 1e-34);
        let p = run::<Complex64>(UnaryOp::Log1p, &z, DType::Complex128)[0];
        assert!((p.re - 1e-20).abs() < 1e-34 && (p.im - 1e-20).abs() < 1e-34);
        let z = t(&[1], &[Complex64::new(0.0, 0.0)]);
        assert_eq!(run::<Complex64>(UnaryOp::Logistic, &z, DType::Complex128)[0], Complex64::new(0.5, 0.0));
        assert!(unary(UnaryOp::Erf, &z, &z.shape).is_err());
    }
}
