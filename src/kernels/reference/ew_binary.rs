//! Reference kernels of the binary elementwise ops (§4.1), `Complex` (§4.4) and the comparisons
//! (§4.2, IEEE and total order), with the broadcasting of §4.0.

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::op::{BinaryOp, CompareOp};
use crate::ir::shape::Shape;
use crate::kernels::reference::common::{
    Arith, ComplexElem, FloatElem, IntElem, NumElem, Ordered, broadcast_to, make_tensor, with_complex, with_float,
    with_int, with_numeric, with_real,
};
use crate::kernels::tensor::Tensor;

fn unsupported(op: impl std::fmt::Debug, dt: DType) -> Error {
    Error::invalid(format!("{op:?}"), format!("operand dtype {dt} is not supported"))
}

/// Two broadcast operands.
type Pair<'a, T> = (std::borrow::Cow<'a, [T]>, std::borrow::Cow<'a, [T]>);

/// Both operands broadcast to the output dims.
fn operands<'a, T: Element>(op: &str, a: &'a Tensor, b: &'a Tensor, out: &Shape) -> Result<Pair<'a, T>> {
    let od = out.udims();
    Ok((
        broadcast_to(op, a.typed::<T>(), &a.shape.udims(), &od)?,
        broadcast_to(op, b.typed::<T>(), &b.shape.udims(), &od)?,
    ))
}

fn zip_map<T: Element, U: Element>(
    op: impl std::fmt::Debug,
    a: &Tensor,
    b: &Tensor,
    out: &Shape,
    f: impl Fn(T, T) -> U,
) -> Result<Tensor> {
    let (x, y) = operands::<T>(&format!("{op:?}"), a, b, out)?;
    let v: Vec<U> = x.iter().zip(y.iter()).map(|(&p, &q)| f(p, q)).collect();
    make_tensor(out, &v)
}

/// Applies `f` in the compute type of `T` (f32 for half types) and rounds once.
fn arith<T: NumElem>(
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    out: &Shape,
    f: impl Fn(T::Acc, T::Acc) -> T::Acc,
) -> Result<Tensor> {
    zip_map(op, a, b, out, |p: T, q: T| T::from_acc(f(p.to_acc(), q.to_acc())))
}

/// Evaluates the binary op `op` on `a`, `b` (broadcast to `out`).
pub(super) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, out: &Shape) -> Result<Tensor> {
    let dt = a.shape.dtype;
    if b.shape.dtype != dt {
        return Err(Error::invalid(
            format!("{op:?}"),
            format!("operand dtypes differ: lhs {dt}, rhs {}", b.shape.dtype),
        ));
    }
    match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Pow => {
            let f = match op {
                BinaryOp::Add => 0,
                BinaryOp::Sub => 1,
                BinaryOp::Mul => 2,
                BinaryOp::Div => 3,
                _ => 4,
            };
            with_numeric!(dt, T => arith::<T>(op, a, b, out, |p, q| match f {
                0 => Arith::add(p, q),
                1 => Arith::sub(p, q),
                2 => Arith::mul(p, q),
                3 => Arith::div(p, q),
                _ => Arith::pow(p, q),
            }), _ => Err(unsupported(op, dt)))
        }
        BinaryOp::Rem => with_real!(dt, T => arith::<T>(op, a, b, out, Arith::rem), _ => Err(unsupported(op, dt))),
        BinaryOp::Max => with_numeric!(dt, T => arith::<T>(op, a, b, out, Arith::max), _ => Err(unsupported(op, dt))),
        BinaryOp::Min => with_numeric!(dt, T => arith::<T>(op, a, b, out, Arith::min), _ => Err(unsupported(op, dt))),
        BinaryOp::Atan2 => {
            with_float!(dt, T => zip_map(op, a, b, out, |y: T, x: T| T::from_c(y.to_c().atan2(x.to_c()))),
            _ => Err(unsupported(op, dt)))
        }
        BinaryOp::BitwiseAnd => with_int!(dt, T => zip_map(op, a, b, out, T::and), _ => Err(unsupported(op, dt))),
        BinaryOp::BitwiseOr => with_int!(dt, T => zip_map(op, a, b, out, T::or), _ => Err(unsupported(op, dt))),
        BinaryOp::BitwiseXor => with_int!(dt, T => zip_map(op, a, b, out, T::xor), _ => Err(unsupported(op, dt))),
        BinaryOp::ShiftLeft => with_int!(dt, T => zip_map(op, a, b, out, T::shl), _ => Err(unsupported(op, dt))),
        BinaryOp::ShiftRightArithmetic => {
            with_int!(dt, T => zip_map(op, a, b, out, T::shr_arith), _ => Err(unsupported(op, dt)))
        }
        BinaryOp::ShiftRightLogical => {
            with_int!(dt, T => zip_map(op, a, b, out, T::shr_logical), _ => Err(unsupported(op, dt)))
        }
        BinaryOp::LogicalAnd | BinaryOp::LogicalOr | BinaryOp::LogicalXor => {
            if dt != DType::Bool {
                return Err(unsupported(op, dt));
            }
            zip_map(op, a, b, out, |p: bool, q: bool| match op {
                BinaryOp::LogicalAnd => p && q,
                BinaryOp::LogicalOr => p || q,
                _ => p != q,
            })
        }
        BinaryOp::Complex => match (dt, out.dtype) {
            (DType::Float32, DType::Complex64) => complex_of::<num_complex::Complex32>(a, b, out),
            (DType::Float64, DType::Complex128) => complex_of::<num_complex::Complex64>(a, b, out),
            _ => Err(Error::invalid(
                "Complex",
                format!("operands {dt} with output {} (expected F32 → C64 or F64 → C128)", out.dtype),
            )),
        },
    }
}

fn complex_of<C: ComplexElem>(a: &Tensor, b: &Tensor, out: &Shape) -> Result<Tensor> {
    zip_map("Complex", a, b, out, |re: C::R, im: C::R| C::from_parts(re, im))
}

/// Evaluates a comparison (IEEE or total order) of `a` and `b`; the output is Bool.
pub(super) fn compare(dir: CompareOp, total_order: bool, a: &Tensor, b: &Tensor, out: &Shape) -> Result<Tensor> {
    let dt = a.shape.dtype;
    let name = format!("{dir:?}{}", if total_order { "TotalOrder" } else { "" });
    if b.shape.dtype != dt {
        return Err(Error::invalid(name, format!("operand dtypes differ: lhs {dt}, rhs {}", b.shape.dtype)));
    }
    let decide = move |o: Option<std::cmp::Ordering>| -> bool {
        use std::cmp::Ordering::*;
        match (dir, o) {
            (CompareOp::NotEqual, None) => true,
            (_, None) => false,
            (CompareOp::Equal, Some(o)) => o == Equal,
            (CompareOp::NotEqual, Some(o)) => o != Equal,
            (CompareOp::GreaterOrEqual, Some(o)) => o != Less,
            (CompareOp::GreaterThan, Some(o)) => o == Greater,
            (CompareOp::LessOrEqual, Some(o)) => o != Greater,
            (CompareOp::LessThan, Some(o)) => o == Less,
        }
    };
    if dt == DType::Bool {
        return zip_map(&name, a, b, out, |p: bool, q: bool| decide(Some(p.cmp(&q))));
    }
    with_real!(dt, T => {
        return if total_order {
            zip_map(&name, a, b, out, |p: T, q: T| decide(Some(Ordered::total_key(p).cmp(&Ordered::total_key(q)))))
        } else {
            zip_map(&name, a, b, out, |p: T, q: T| {
                decide(if Ordered::is_nan_val(p) || Ordered::is_nan_val(q) {
                    None
                } else if Ordered::lt(p, q) {
                    Some(std::cmp::Ordering::Less)
                } else if Ordered::lt(q, p) {
                    Some(std::cmp::Ordering::Greater)
                } else {
                    Some(std::cmp::Ordering::Equal)
                })
            })
        };
    }, _ => ());
    with_complex!(dt, T => {
        if total_order || !matches!(dir, CompareOp::Equal | CompareOp::NotEqual) {
            return Err(Error::invalid(name, format!("complex operands ({dt}) only support Equal / NotEqual")));
        }
        return zip_map(&name, a, b, out, |p: T, q: T| {
            let eq = p.re() == q.re() && p.im() == q.im();
            if dir == CompareOp::Equal { eq } else { !eq }
        });
    }, _ => ());
    Err(unsupported(name, dt))
}

/// `Min(Max(lo, x), hi)` with `lo`/`hi` scalar or of x's shape.
pub(super) fn clamp(lo: &Tensor, x: &Tensor, hi: &Tensor, out: &Shape) -> Result<Tensor> {
    let dt = x.shape.dtype;
    if lo.shape.dtype != dt || hi.shape.dtype != dt {
        return Err(Error::invalid(
            "Clamp",
            format!("operand dtypes differ: min {}, x {dt}, max {}", lo.shape.dtype, hi.shape.dtype),
        ));
    }
    let od = out.udims();
    with_numeric!(dt, T => {
        let l = broadcast_to("Clamp", lo.typed::<T>(), &lo.shape.udims(), &od)?;
        let v = broadcast_to("Clamp", x.typed::<T>(), &x.shape.udims(), &od)?;
        let h = broadcast_to("Clamp", hi.typed::<T>(), &hi.shape.udims(), &od)?;
        let r: Vec<T> = l.iter().zip(v.iter()).zip(h.iter())
            .map(|((&l, &v), &h)| T::from_acc(Arith::min(Arith::max(l.to_acc(), v.to_acc()), h.to_acc())))
            .collect();
        make_tensor(out, &r)
    }, _ => Err(unsupported("Clamp", dt)))
}

/// `cond ? on_true : on_false`, each operand scalar or of the output dims.
pub(super) fn select(cond: &Tensor, t: &Tensor, f: &Tensor, out: &Shape) -> Result<Tensor> {
    if cond.shape.dtype != DType::Bool {
        return Err(Error::invalid("Where", format!("condition dtype {} (expected Bool)", cond.shape.dtype)));
    }
    let dt = t.shape.dtype;
    if f.shape.dtype != dt || out.dtype != dt {
        return Err(Error::invalid("Where", format!("on_true {dt} and on_false {} differ", f.shape.dtype)));
    }
    let od = out.udims();
    let c = broadcast_to("Where", cond.typed::<bool>(), &cond.shape.udims(), &od)?;
    crate::kernels::reference::common::with_storage!(dt, T => {
        let a = broadcast_to("Where", t.typed::<T>(), &t.shape.udims(), &od)?;
        let b = broadcast_to("Where", f.typed::<T>(), &f.shape.udims(), &od)?;
        let r: Vec<T> = c.iter().zip(a.iter().zip(b.iter())).map(|(&c, (&a, &b))| if c { a } else { b }).collect();
        make_tensor(out, &r)
    }, _ => Err(unsupported("Where", dt)))
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};
    use num_complex::Complex32;

    use super::*;

    fn t<T: Element>(dims: &[i64], v: &[T]) -> Tensor {
        Tensor::from_vec(Shape::new(T::DTYPE, dims), v).unwrap()
    }
    fn bin<T: Element>(op: BinaryOp, a: &Tensor, b: &Tensor, out: &[i64]) -> Vec<T> {
        binary(op, a, b, &Shape::new(T::DTYPE, out)).unwrap().typed::<T>().to_vec()
    }
    fn cmp(dir: CompareOp, total: bool, a: &Tensor, b: &Tensor) -> Vec<bool> {
        let dims = a.shape.dims.clone();
        compare(dir, total, a, b, &Shape::new(DType::Bool, &dims)).unwrap().typed::<bool>().to_vec()
    }

    #[test]
    fn broadcasting() {
        // I32 [−1,2] + [1] (shape-[1] broadcast); [3,1] + [1,2] → [3,2]; scalar + [2,1].
        let r = bin::<i32>(BinaryOp::Add, &t(&[2], &[-1, 2]), &t(&[1], &[1]), &[2]);
        assert_eq!(r, vec![0, 3]);
        let r = bin::<i32>(BinaryOp::Add, &t(&[3, 1], &[1, 2, 3]), &t(&[1, 2], &[10, 20]), &[3, 2]);
        assert_eq!(r, vec![11, 21, 12, 22, 13, 23]);
        let r = bin::<i32>(BinaryOp::Sub, &t(&[], &[10]), &t(&[2, 1], &[1, 2]), &[2, 1]);
        assert_eq!(r, vec![9, 8]);
        let bad = binary(BinaryOp::Add, &t(&[2], &[1, 2]), &t(&[3], &[1, 2, 3]), &Shape::new(DType::Int32, &[3]));
        assert!(bad.is_err());
    }

    #[test]
    fn int_div_rem_pow() {
        let a = t(&[5], &[7i32, -7, i32::MIN, -6, 7]);
        let b = t(&[5], &[0i32, 0, -1, 2, -2]);
        assert_eq!(bin::<i32>(BinaryOp::Div, &a, &b, &[5]), vec![-1, -1, i32::MIN, -3, -3]);
        let a = t(&[5], &[7i32, -7, i32::MIN, -7, 7]);
        let b = t(&[5], &[0i32, 0, -1, 4, -4]);
        assert_eq!(bin::<i32>(BinaryOp::Rem, &a, &b, &[5]), vec![7, -7, 0, -3, 3]);
        assert_eq!(bin::<u32>(BinaryOp::Div, &t(&[1], &[7u32]), &t(&[1], &[0u32]), &[1]), vec![u32::MAX]);
        assert_eq!(bin::<u32>(BinaryOp::Rem, &t(&[1], &[7u32]), &t(&[1], &[0u32]), &[1]), vec![7]);
        // native power int32: 2^−1=0, 1^−1=1, (−1)^−1=−1, (−1)^−2=1, (−1)^−3=−1, 0^−1=0, 0^0=1, 5^−2=0, 3^40.
        let base = t(&[9], &[2i32, 1, -1, -1, -1, 0, 0, 5, 3]);
        let ex = t(&[9], &[-1i32, -1, -1, -2, -3, -1, 0, -2, 40]);
        assert_eq!(bin::<i32>(BinaryOp::Pow, &base, &ex, &[9]), vec![0, 1, -1, 1, -1, 0, 1, 0, 689956897]);
        // Add wraps.
        assert_eq!(bin::<i8>(BinaryOp::Add, &t(&[1], &[100i8]), &t(&[1], &[100i8]), &[1]), vec![-56]);
        assert_eq!(bin::<u64>(BinaryOp::Mul, &t(&[1], &[u64::MAX]), &t(&[1], &[2u64]), &[1]), vec![u64::MAX - 1]);
    }

    #[test]
    fn float_rem_pow_atan2_maxmin() {
        let r = bin::<f32>(
            BinaryOp::Rem,
            &t(&[4], &[5.0f32, f32::INFINITY, 5.0, -0.0]),
            &t(&[4], &[0.0f32, 2.0, f32::INFINITY, 1.0]),
            &[4],
        );
        assert!(r[0].is_nan() && r[1].is_nan());
        assert_eq!(r[2], 5.0);
        assert!(r[3] == 0.0 && r[3].is_sign_negative());
        // pow: NaN^0=1, 1^NaN=1, (−8)^(1/3)=NaN, 0^−1=+Inf, (−0)^−1=−Inf, (−Inf)^3=−Inf, (−1)^Inf=1.
        let p = bin::<f32>(
            BinaryOp::Pow,
            &t(&[7], &[f32::NAN, 1.0, -8.0, 0.0, -0.0, f32::NEG_INFINITY, -1.0]),
            &t(&[7], &[0.0f32, f32::NAN, 1.0 / 3.0, -1.0, -1.0, 3.0, f32::INFINITY]),
            &[7],
        );
        assert_eq!(p[0], 1.0);
        assert_eq!(p[1], 1.0);
        assert!(p[2].is_nan());
        assert_eq!(&p[3..], &[f32::INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY, 1.0]);
        // atan2: (+0,+0)=+0, (−0,+0)=−0, (+0,−0)=π, (−0,−0)=−π, (Inf,Inf)=π/4, (Inf,−Inf)=3π/4, (1,0)=π/2.
        let inf = f64::INFINITY;
        let a = bin::<f64>(
            BinaryOp::Atan2,
            &t(&[7], &[0.0f64, -0.0, 0.0, -0.0, inf, inf, 1.0]),
            &t(&[7], &[0.0f64, 0.0, -0.0, -0.0, inf, -inf, 0.0]),
            &[7],
        );
        use std::f64::consts::PI;
        assert!(a[0] == 0.0 && a[0].is_sign_positive());
        assert!(a[1] == 0.0 && a[1].is_sign_negative());
        assert_eq!(&a[2..], &[PI, -PI, PI / 4.0, 3.0 * PI / 4.0, PI / 2.0]);
        let mx = bin::<f32>(BinaryOp::Max, &t(&[3], &[-0.0f32, 0.0, 1.0]), &t(&[3], &[0.0f32, -0.0, f32::NAN]), &[3]);
        assert!(mx[0].is_sign_positive() && mx[1].is_sign_positive() && mx[2].is_nan());
        let mn = bin::<f32>(BinaryOp::Min, &t(&[3], &[-0.0f32, 0.0, f32::NAN]), &t(&[3], &[0.0f32, -0.0, 1.0]), &[3]);
        assert!(mn[0].is_sign_negative() && mn[1].is_sign_negative() && mn[2].is_nan());
        assert_eq!(bin::<i32>(BinaryOp::Max, &t(&[2], &[-1i32, 2]), &t(&[1], &[0i32]), &[2]), vec![0, 2]);
        assert!(
            binary(BinaryOp::Atan2, &t(&[1], &[1i32]), &t(&[1], &[1i32]), &Shape::new(DType::Int32, &[1])).is_err()
        );
    }

    #[test]
    fn half_arith() {
        // BF16 7+11 = 18, 7−11 = −4; f16 1 + 2⁻¹¹ rounds to 1 (ties to even).
        let a = t(&[], &[bf16::from_f32(7.0)]);
        let b = t(&[], &[bf16::from_f32(11.0)]);
        assert_eq!(bin::<bf16>(BinaryOp::Add, &a, &b, &[])[0].to_f32(), 18.0);
        assert_eq!(bin::<bf16>(BinaryOp::Sub, &a, &b, &[])[0].to_f32(), -4.0);
        let a = t(&[1], &[f16::from_f32(1.0)]);
        let b = t(&[1], &[f16::from_f32(2f32.powi(-11))]);
        assert_eq!(bin::<f16>(BinaryOp::Add, &a, &b, &[1])[0].to_f32(), 1.0);
    }

    #[test]
    fn complex_arith_and_max() {
        let a = t(&[2], &[Complex32::new(1.0, 2.0), Complex32::new(1.0, 5.0)]);
        let b = t(&[2], &[Complex32::new(3.0, -1.0), Complex32::new(1.0, 3.0)]);
        assert_eq!(bin::<Complex32>(BinaryOp::Mul, &a, &b, &[2])[0], Complex32::new(5.0, 5.0));
        let mx = bin::<Complex32>(BinaryOp::Max, &a, &b, &[2]);
        assert_eq!(mx, vec![Complex32::new(3.0, -1.0), Complex32::new(1.0, 5.0)]);
        let p = bin::<Complex32>(
            BinaryOp::Pow,
            &t(&[1], &[Complex32::new(0.0, 1.0)]),
            &t(&[1], &[Complex32::new(2.0, 0.0)]),
            &[1],
        );
        assert!((p[0].re + 1.0).abs() < 1e-6 && p[0].im.abs() < 1e-6);
        assert!(binary(BinaryOp::Rem, &a, &b, &Shape::new(DType::Complex64, &[2])).is_err());
        let c = binary(
            BinaryOp::Complex,
            &t(&[2], &[1.0f32, 2.0]),
            &t(&[], &[3.0f32]),
            &Shape::new(DType::Complex64, &[2]),
        )
        .unwrap();
        assert_eq!(c.typed::<Complex32>(), &[Complex32::new(1.0, 3.0), Complex32::new(2.0, 3.0)]);
    }

    #[test]
    fn shifts_and_bitwise() {
        // shift_left int32 1 by [31,32,33,−1] = [MIN,0,0,0]; −1<<1 = −2; uint8 1 by [7,8,255] = [128,0,0].
        let r = bin::<i32>(BinaryOp::ShiftLeft, &t(&[], &[1i32]), &t(&[4], &[31i32, 32, 33, -1]), &[4]);
        assert_eq!(r, vec![i32::MIN, 0, 0, 0]);
        assert_eq!(bin::<i32>(BinaryOp::ShiftLeft, &t(&[1], &[-1i32]), &t(&[1], &[1i32]), &[1]), vec![-2]);
        let r = bin::<u8>(BinaryOp::ShiftLeft, &t(&[], &[1u8]), &t(&[3], &[7u8, 8, 255]), &[3]);
        assert_eq!(r, vec![128, 0, 0]);
        // shift_right_arithmetic int32 [−8,8] by 32 = [−1,0], by −1 = [−1,0]; −2>>1 = −1.
        let r = bin::<i32>(BinaryOp::ShiftRightArithmetic, &t(&[3], &[-8i32, 8, -2]), &t(&[3], &[32i32, -1, 1]), &[3]);
        assert_eq!(r, vec![-1, 0, -1]);
        // uint8 0x80>>1 = 0xC0, 0x80>>8 = 0xFF, 0x40>>1 = 0x20.
        let r =
            bin::<u8>(BinaryOp::ShiftRightArithmetic, &t(&[3], &[0x80u8, 0x80, 0x40]), &t(&[3], &[1u8, 8, 1]), &[3]);
        assert_eq!(r, vec![0xC0, 0xFF, 0x20]);
        // shift_right_logical int32 −8 by [1,32,−1] = [2147483644,0,0]; uint8 0x80>>1 = 0x40.
        let r = bin::<i32>(BinaryOp::ShiftRightLogical, &t(&[], &[-8i32]), &t(&[3], &[1i32, 32, -1]), &[3]);
        assert_eq!(r, vec![2147483644, 0, 0]);
        assert_eq!(bin::<u8>(BinaryOp::ShiftRightLogical, &t(&[1], &[0x80u8]), &t(&[1], &[1u8]), &[1]), vec![0x40]);
        let r = bin::<u8>(BinaryOp::BitwiseAnd, &t(&[], &[0b1111_0000u8]), &t(&[], &[0b1010_1010u8]), &[]);
        assert_eq!(r, vec![0b1010_0000]);
        let r = bin::<u8>(BinaryOp::BitwiseOr, &t(&[], &[0b1111_0000u8]), &t(&[], &[0b1010_1010u8]), &[]);
        assert_eq!(r, vec![0b1111_1010]);
        let r = bin::<u8>(BinaryOp::BitwiseXor, &t(&[], &[0b1111_0000u8]), &t(&[], &[0b1010_1010u8]), &[]);
        assert_eq!(r, vec![0b0101_1010]);
        let a = t(&[2], &[true, false]);
        let b = t(&[2], &[true, true]);
        assert_eq!(bin::<bool>(BinaryOp::LogicalAnd, &a, &b, &[2]), vec![true, false]);
        assert_eq!(bin::<bool>(BinaryOp::LogicalOr, &a, &b, &[2]), vec![true, true]);
        assert_eq!(bin::<bool>(BinaryOp::LogicalXor, &a, &b, &[2]), vec![false, true]);
    }

    #[test]
    fn comparisons() {
        let nan = f32::NAN;
        let a = t(&[4], &[nan, nan, nan, -0.0f32]);
        let b = t(&[4], &[nan, nan, 1.0f32, 0.0]);
        assert_eq!(cmp(CompareOp::Equal, false, &a, &b), vec![false, false, false, true]);
        assert_eq!(cmp(CompareOp::NotEqual, false, &a, &b), vec![true, true, true, false]);
        assert_eq!(cmp(CompareOp::LessThan, false, &a, &b), vec![false, false, false, false]);
        assert_eq!(cmp(CompareOp::LessOrEqual, false, &a, &b), vec![false, false, false, true]);
        // Total order: −NaN < −Inf < −1 < −0 < +0 < 1 < Inf < +NaN.
        let seq = [-nan, f32::NEG_INFINITY, -1.0, -0.0, 0.0, 1.0, f32::INFINITY, nan];
        let lo = t(&[7], &seq[..7]);
        let hi = t(&[7], &seq[1..]);
        assert_eq!(cmp(CompareOp::LessThan, true, &lo, &hi), vec![true; 7]);
        assert_eq!(cmp(CompareOp::GreaterThan, true, &hi, &lo), vec![true; 7]);
        assert_eq!(cmp(CompareOp::Equal, true, &t(&[2], &[-0.0f32, nan]), &t(&[2], &[0.0f32, nan])), vec![false, true]);
        let h = |v: f32| f16::from_f32(v);
        let lo = t(&[3], &[h(-0.0), h(-1.0), h(2.0)]);
        let hi = t(&[3], &[h(0.0), h(-0.5), h(f32::NAN)]);
        assert_eq!(cmp(CompareOp::LessThan, true, &lo, &hi), vec![true, true, true]);
        assert_eq!(
            cmp(CompareOp::GreaterOrEqual, false, &t(&[2], &[3i32, 2]), &t(&[2], &[3i32, 5])),
            vec![true, false]
        );
        assert_eq!(cmp(CompareOp::LessThan, true, &t(&[2], &[-3i64, 2]), &t(&[2], &[3i64, 2])), vec![true, false]);
        let (p, q) = (t(&[2], &[false, true]), t(&[2], &[true, true]));
        assert_eq!(cmp(CompareOp::LessThan, false, &p, &q), vec![true, false]);
        assert_eq!(cmp(CompareOp::Equal, false, &p, &q), vec![false, true]);
        let c = t(&[1], &[Complex32::new(1.0, 2.0)]);
        assert_eq!(cmp(CompareOp::Equal, false, &c, &c), vec![true]);
        assert!(compare(CompareOp::LessThan, false, &c, &c, &Shape::new(DType::Bool, &[1])).is_err());
    }

    #[test]
    fn clamp_and_where() {
        // clamp(2, [0,1,3,NaN], 1) = [1,1,1,NaN]; int32 clamp(5,[0,7],3) = [3,3].
        let r = clamp(
            &t(&[], &[2.0f32]),
            &t(&[4], &[0.0f32, 1.0, 3.0, f32::NAN]),
            &t(&[], &[1.0f32]),
            &Shape::new(DType::Float32, &[4]),
        )
        .unwrap();
        let r = r.typed::<f32>();
        assert_eq!(&r[..3], &[1.0, 1.0, 1.0]);
        assert!(r[3].is_nan());
        let r =
            clamp(&t(&[], &[5i32]), &t(&[2], &[0i32, 7]), &t(&[], &[3i32]), &Shape::new(DType::Int32, &[2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[3, 3]);
        let r = clamp(
            &t(&[2], &[0.0f64, f64::NAN]),
            &t(&[2], &[5.0f64, 0.5]),
            &t(&[], &[1.0f64]),
            &Shape::new(DType::Float64, &[2]),
        )
        .unwrap();
        assert_eq!(r.typed::<f64>()[0], 1.0);
        assert!(r.typed::<f64>()[1].is_nan());
        // Where: scalar cond + u8 vectors; bool vector + i32 scalars.
        let w = select(&t(&[], &[false]), &t(&[2], &[1u8, 2]), &t(&[2], &[3u8, 4]), &Shape::new(DType::Uint8, &[2]));
        assert_eq!(w.unwrap().typed::<u8>(), &[3, 4]);
        let w =
            select(&t(&[3], &[true, false, true]), &t(&[], &[1i32]), &t(&[], &[0i32]), &Shape::new(DType::Int32, &[3]));
        assert_eq!(w.unwrap().typed::<i32>(), &[1, 0, 1]);
        let w = select(
            &t(&[], &[true]),
            &t(&[], &[bf16::from_f32(1.5)]),
            &t(&[], &[bf16::ZERO]),
            &Shape::scalar(DType::BFloat16),
        );
        assert_eq!(w.unwrap().typed::<bf16>()[0].to_f32(), 1.5);
        let w = select(
            &t(&[2], &[true, false]),
            &t(&[2], &[1.0f32, 2.0]),
            &t(&[2], &[3.0f32, 4.0]),
            &Shape::new(DType::Float32, &[2]),
        );
        assert_eq!(w.unwrap().typed::<f32>(), &[1.0, 4.0]);
    }
}
