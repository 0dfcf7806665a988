//! Reference kernels of ConvertDType (every pair of supported dtypes, packed ones included) and
//! Bitcast (raw little-endian reinterpretation), §4.4 and §9.

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::shape::Shape;
use crate::kernels::reference::common::{f64_to_f16, make_tensor, pack_ints, packed_range, unpack_ints, with_storage};
use crate::kernels::tensor::Tensor;

/// One element on its way between dtypes: its exact value in the widest form of its class.
#[derive(Clone, Copy, Debug)]
enum Val {
    B(bool),
    I(i128),
    F(f64),
    C(f64, f64),
}

trait ToVal: Element {
    fn to_val(self) -> Val;
}
trait FromVal: Element {
    fn from_val(v: Val) -> Self;
}

impl ToVal for bool {
    fn to_val(self) -> Val {
        Val::B(self)
    }
}
impl FromVal for bool {
    /// x ≠ 0 (NaN → true); complex: the imaginary part is dropped first.
    fn from_val(v: Val) -> bool {
        match v {
            Val::B(b) => b,
            Val::I(i) => i != 0,
            Val::F(f) | Val::C(f, _) => f != 0.0,
        }
    }
}

macro_rules! int_val {
    ($($t:ty),*) => {$(
        impl ToVal for $t {
            fn to_val(self) -> Val { Val::I(self as i128) }
        }
        impl FromVal for $t {
            /// int → int wraps; float → int truncates then saturates, NaN → 0 (Rust's `as`).
            fn from_val(v: Val) -> $t {
                match v {
                    Val::B(b) => b as $t,
                    Val::I(i) => i as $t,
                    Val::F(f) | Val::C(f, _) => f as $t,
                }
            }
        }
    )*};
}
int_val!(i8, i16, i32, i64, u8, u16, u32, u64);

impl ToVal for f32 {
    fn to_val(self) -> Val {
        Val::F(self as f64)
    }
}
impl FromVal for f32 {
    /// Round to nearest even (int → f32 `as` is correctly rounded).
    fn from_val(v: Val) -> f32 {
        match v {
            Val::B(b) => b as u8 as f32,
            Val::I(i) => i as f32,
            Val::F(f) | Val::C(f, _) => f as f32,
        }
    }
}
impl ToVal for f64 {
    fn to_val(self) -> Val {
        Val::F(self)
    }
}
impl FromVal for f64 {
    fn from_val(v: Val) -> f64 {
        match v {
            Val::B(b) => b as u8 as f64,
            Val::I(i) => i as f64,
            Val::F(f) | Val::C(f, _) => f,
        }
    }
}
impl ToVal for f16 {
    fn to_val(self) -> Val {
        Val::F(self.to_f64())
    }
}
impl FromVal for f16 {
    /// Rounded once from the source value (F64 → F16 direct). Ints beyond 2⁵³ round twice, but
    /// those overflow F16 to ±Inf either way.
    fn from_val(v: Val) -> f16 {
        f64_to_f16(f64::from_val(v))
    }
}
impl ToVal for bf16 {
    fn to_val(self) -> Val {
        Val::F(self.to_f64())
    }
}
impl FromVal for bf16 {
    /// Through F32, as XLA does (F64 and int sources may round twice).
    fn from_val(v: Val) -> bf16 {
        bf16::from_f32(f32::from_val(v))
    }
}
impl ToVal for Complex32 {
    fn to_val(self) -> Val {
        Val::C(self.re as f64, self.im as f64)
    }
}
impl FromVal for Complex32 {
    fn from_val(v: Val) -> Complex32 {
        match v {
            Val::C(re, im) => Complex32::new(re as f32, im as f32),
            other => Complex32::new(f32::from_val(other), 0.0),
        }
    }
}
impl ToVal for Complex64 {
    fn to_val(self) -> Val {
        Val::C(self.re, self.im)
    }
}
impl FromVal for Complex64 {
    fn from_val(v: Val) -> Complex64 {
        match v {
            Val::C(re, im) => Complex64::new(re, im),
            other => Complex64::new(f64::from_val(other), 0.0),
        }
    }
}

/// A value converted to a packed integer dtype with range `[lo, hi]`: ints wrap (low bits kept by
/// packing), floats truncate then saturate (NaN → 0), Bool → 0/1.
fn packed_from_val(v: Val, lo: i64, hi: i64) -> i64 {
    match v {
        Val::B(b) => b as i64,
        Val::I(i) => i as i64,
        Val::F(f) | Val::C(f, _) => {
            if f.is_nan() {
                0
            } else {
                (f.trunc().clamp(lo as f64, hi as f64)) as i64
            }
        }
    }
}

fn load_vals(x: &Tensor) -> Result<Vec<Val>> {
    let dt = x.shape.dtype;
    if dt.is_packed() {
        return Ok(unpack_ints(dt, x.bytes(), x.len())?.into_iter().map(|i| Val::I(i as i128)).collect());
    }
    with_storage!(dt, T => Ok(x.typed::<T>().iter().map(|v| ToVal::to_val(*v)).collect()),
        _ => Err(Error::invalid("ConvertDType", format!("source dtype {dt} is not supported"))))
}

fn store_vals(vals: &[Val], out: &Shape) -> Result<Tensor> {
    let dt = out.dtype;
    if dt.is_packed() {
        let (lo, hi) = packed_range(dt);
        let ints: Vec<i64> = vals.iter().map(|&v| packed_from_val(v, lo, hi)).collect();
        let mut t = Tensor::try_zeros(out.clone())?;
        let bytes = pack_ints(dt, &ints);
        if t.bytes().len() != bytes.len() {
            return Err(Error::invalid(
                "ConvertDType",
                format!("output shape {out} does not hold {} values", vals.len()),
            ));
        }
        t.bytes_mut().copy_from_slice(&bytes);
        return Ok(t);
    }
    with_storage!(dt, T => {
        let v: Vec<T> = vals.iter().map(|&v| FromVal::from_val(v)).collect();
        make_tensor(out, &v)
    }, _ => Err(Error::invalid("ConvertDType", format!("target dtype {dt} is not supported"))))
}

/// ConvertDType of `x` to `out.dtype`.
pub(super) fn convert(x: &Tensor, out: &Shape) -> Result<Tensor> {
    if x.shape.dtype == out.dtype {
        return Ok(Tensor { shape: out.clone(), data: x.data.clone() });
    }
    if x.shape.dims != out.dims {
        return Err(Error::invalid(
            "ConvertDType",
            format!("operand dims {:?} differ from output dims {:?}", x.shape.dims, out.dims),
        ));
    }
    let vals = load_vals(x)?;
    store_vals(&vals, out)
}

/// Bitcast of `x` to the shape `out`: the same little-endian bytes reinterpreted. A Bool target
/// maps every non-zero byte to `true` (1) so that Bool storage only ever holds 0/1.
pub(super) fn bitcast(x: &Tensor, out: &Shape) -> Result<Tensor> {
    let (src, dst) = (x.shape.dtype, out.dtype);
    if !src.is_supported() || !dst.is_supported() {
        return Err(Error::invalid("Bitcast", format!("{src} → {dst}: dtype not supported")));
    }
    let n = out.byte_size().unwrap_or(usize::MAX);
    if n != x.bytes().len() {
        return Err(Error::invalid(
            "Bitcast",
            format!("{} bytes of {} cannot be reinterpreted as {out}", x.bytes().len(), x.shape),
        ));
    }
    if dst == DType::Bool && src != DType::Bool {
        let v: Vec<bool> = x.bytes().iter().map(|&b| b != 0).collect();
        return make_tensor(out, &v);
    }
    Ok(Tensor { shape: out.clone(), data: x.data.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t<T: Element>(dims: &[i64], v: &[T]) -> Tensor {
        Tensor::from_vec(Shape::new(T::DTYPE, dims), v).unwrap()
    }
    fn conv<U: Element>(x: &Tensor) -> Vec<U> {
        convert(x, &x.shape.with_dtype(U::DTYPE)).unwrap().typed::<U>().to_vec()
    }

    #[test]
    fn float_to_int_saturates() {
        let x = t(&[8], &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e9, -3e9, -1.5, 2.7, -2.7]);
        assert_eq!(conv::<i32>(&x), vec![0, i32::MAX, i32::MIN, i32::MAX, i32::MIN, -1, 2, -2]);
        assert_eq!(conv::<u8>(&x), vec![0, 255, 0, 255, 0, 0, 2, 0]);
        assert_eq!(conv::<i64>(&t(&[2], &[1e19f64, f64::NAN])), vec![i64::MAX, 0]);
        assert_eq!(conv::<i32>(&t(&[1], &[bf16::from_f32(7.8)])), vec![7]);
    }

    #[test]
    fn int_to_float_and_half() {
        assert_eq!(conv::<f32>(&t(&[3], &[16777217i32, 16777219, 16777221])), vec![16777216.0, 16777220.0, 16777220.0]);
        assert_eq!(conv::<f32>(&t(&[1], &[42i32])), vec![42.0]);
        assert_eq!(conv::<f16>(&t(&[1], &[100000i64]))[0], f16::INFINITY);
        // f64 1+2⁻¹¹+2⁻⁴⁰ → f16 = 1+2⁻¹⁰ (single rounding).
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(conv::<f16>(&t(&[1], &[v]))[0].to_f64(), 1.0 + 2f64.powi(-10));
        // f64 1+2⁻⁸+2⁻⁴⁰ → bf16 = 1.0 (via f32); int32 2²⁴+2¹⁶+1 → bf16 2²⁴; f32 1+2⁻⁸ → bf16 1.0.
        let v = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(conv::<bf16>(&t(&[1], &[v]))[0].to_f64(), 1.0);
        assert_eq!(conv::<bf16>(&t(&[1], &[(1i32 << 24) + (1 << 16) + 1]))[0].to_f64(), 16777216.0);
        assert_eq!(conv::<bf16>(&t(&[1], &[1.0f32 + 2f32.powi(-8)]))[0].to_f64(), 1.0);
        assert!((conv::<bf16>(&t(&[1], &[3.25f32 + 1e-3]))[0].to_f32() - 3.25).abs() < 0.02);
        assert_eq!(conv::<f64>(&t(&[1], &[f16::from_f32(0.5)])), vec![0.5]);
    }

    #[test]
    fn bool_and_complex() {
        assert_eq!(conv::<bool>(&t(&[3], &[f32::NAN, -0.0, 1.0])), vec![true, false, true]);
        assert_eq!(conv::<bool>(&t(&[2], &[Complex32::new(0.0, 0.0), Complex32::new(0.0, 1.0)])), vec![false, false]);
        assert_eq!(conv::<f32>(&t(&[1], &[Complex32::new(1.0, 2.0)])), vec![1.0]);
        assert_eq!(conv::<i32>(&t(&[2], &[true, false])), vec![1, 0]);
        assert_eq!(conv::<Complex64>(&t(&[1], &[2.5f32])), vec![Complex64::new(2.5, 0.0)]);
        assert_eq!(conv::<Complex32>(&t(&[1], &[Complex64::new(1.5, -2.0)])), vec![Complex32::new(1.5, -2.0)]);
        // int → int wraps / sign-extends.
        assert_eq!(conv::<u8>(&t(&[2], &[300i32, -1])), vec![44, 255]);
        assert_eq!(conv::<i64>(&t(&[1], &[-5i8])), vec![-5]);
        assert_eq!(conv::<i32>(&t(&[1], &[u32::MAX])), vec![-1]);
    }

    #[test]
    fn packed_sources_and_targets() {
        let mut x = Tensor::zeros(Shape::new(DType::Int4, &[3]));
        x.bytes_mut().copy_from_slice(&[0xF1, 0x08]);
        assert_eq!(conv::<i32>(&x), vec![1, -1, -8]);
        assert_eq!(conv::<f32>(&x), vec![1.0, -1.0, -8.0]);
        let mut u = Tensor::zeros(Shape::new(DType::Uint2, &[4]));
        u.bytes_mut().copy_from_slice(&[0b11_10_01_00]);
        assert_eq!(conv::<u8>(&u), vec![0, 1, 2, 3]);
        // f32 → Int4 truncates and saturates to [−8, 7]; i32 → Int4 wraps.
        let y = convert(&t(&[4], &[9.5f32, -20.0, -1.7, f32::NAN]), &Shape::new(DType::Int4, &[4])).unwrap();
        assert_eq!(y.bytes(), &[0x87, 0x0F]);
        let y = convert(&t(&[2], &[17i32, -1]), &Shape::new(DType::Int4, &[2])).unwrap();
        assert_eq!(y.bytes(), &[0xF1]);
    }

    #[test]
    fn bitcasts() {
        let x = t(&[1], &[0xDEADBEEFu32]);
        let y = bitcast(&x, &Shape::new(DType::Uint16, &[1, 2])).unwrap();
        assert_eq!(y.typed::<u16>(), &[0xBEEF, 0xDEAD]);
        let z = bitcast(&y, &Shape::new(DType::Uint32, &[1])).unwrap();
        assert_eq!(z.typed::<u32>(), &[0xDEADBEEF]);
        let f = bitcast(&t(&[], &[0x3F800000u32]), &Shape::scalar(DType::Float32)).unwrap();
        assert_eq!(f.typed::<f32>(), &[1.0]);
        let b = bitcast(&t(&[], &[1.0f32]), &Shape::new(DType::Uint8, &[4])).unwrap();
        assert_eq!(b.typed::<u8>(), &[0, 0, 128, 63]);
        let i4 = bitcast(&t(&[1], &[0x21u8]), &Shape::new(DType::Int4, &[1, 2])).unwrap();
        assert_eq!(unpack_ints(DType::Int4, i4.bytes(), 2).unwrap(), vec![1, 2]);
        let bb = bitcast(&t(&[2], &[0u8, 7]), &Shape::new(DType::Bool, &[2])).unwrap();
        assert_eq!(bb.typed::<bool>(), &[false, true]);
        assert!(bitcast(&t(&[1], &[1u32]), &Shape::new(DType::Uint16, &[1])).is_err());
    }
}
