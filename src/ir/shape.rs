//! Tensor shapes (catalogue §2): dtype + dims, with named dynamic axes.

use std::fmt;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::limits;

/// The sentinel for a dynamic dimension; such an axis must be named.
pub const DYNAMIC_DIM: i64 = -1;

/// A tensor shape: element type, dimensions (row-major) and optional axis names.
///
/// Rank 0 is a scalar. A dimension of [`DYNAMIC_DIM`] is dynamic and its axis must be named.
#[derive(Clone, Debug, Eq)]
pub struct Shape {
    /// Element type.
    pub dtype: DType,
    /// Dimensions; `-1` marks a dynamic axis.
    pub dims: Vec<i64>,
    /// Axis names; `None` means all unnamed (equivalent to all `""`).
    pub axis_names: Option<Vec<String>>,
}

impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        self.dtype == other.dtype
            && self.dims == other.dims
            && (0..self.rank()).all(|i| self.axis_name(i) == other.axis_name(i))
    }
}

impl std::hash::Hash for Shape {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dtype.hash(state);
        self.dims.hash(state);
        for i in 0..self.rank() {
            self.axis_name(i).hash(state);
        }
    }
}

impl Shape {
    /// A static shape.
    pub fn new(dtype: DType, dims: &[i64]) -> Shape {
        Shape { dtype, dims: dims.to_vec(), axis_names: None }
    }

    /// A static shape from `usize` dims.
    pub fn from_usize(dtype: DType, dims: &[usize]) -> Shape {
        Shape { dtype, dims: dims.iter().map(|&d| d as i64).collect(), axis_names: None }
    }

    /// A scalar (rank 0).
    pub fn scalar(dtype: DType) -> Shape {
        Shape::new(dtype, &[])
    }

    /// A shape with axis names (use `""` for unnamed axes). Errors if lengths differ, a dynamic
    /// axis is unnamed, or a dim is below −1.
    pub fn with_names(dtype: DType, dims: &[i64], names: &[&str]) -> Result<Shape> {
        if names.len() != dims.len() {
            return Err(Error::invalid("Shape", format!("{} axis names for rank {}", names.len(), dims.len())));
        }
        let s = Shape {
            dtype,
            dims: dims.to_vec(),
            axis_names: if names.iter().all(|n| n.is_empty()) {
                None
            } else {
                Some(names.iter().map(|s| s.to_string()).collect())
            },
        };
        s.validate()?;
        Ok(s)
    }

    /// Checks the shape's own invariants: dims ≥ 0 or dynamic, dynamic axes named, names length,
    /// and the limits of [`Shape::check_limits`].
    pub fn validate(&self) -> Result<()> {
        if let Some(n) = &self.axis_names
            && n.len() != self.dims.len()
        {
            return Err(Error::invalid("Shape", format!("{} axis names for rank {}", n.len(), self.dims.len())));
        }
        for (i, &d) in self.dims.iter().enumerate() {
            if d < DYNAMIC_DIM {
                return Err(Error::invalid("Shape", format!("dimension {i} is {d}")));
            }
            if d == DYNAMIC_DIM && self.axis_name(i).is_empty() {
                return Err(Error::invalid("Shape", format!("dynamic axis {i} must be named")));
            }
        }
        self.check_limits()
    }

    /// [`Shape::validate`] with errors attributed to `op` and prefixed by `what` (e.g.
    /// `"output 0"`), keeping the kind: [`Error::Limit`] stays a limit, anything else becomes
    /// [`Error::Invalid`].
    pub fn validate_for(&self, op: &str, what: &str) -> Result<()> {
        self.validate().map_err(|e| match e {
            Error::Limit { msg, .. } => Error::limit(op, format!("{what}: {msg}")),
            e => Error::invalid(op, format!("{what}: {e}")),
        })
    }

    /// Checks the resource limits of [`crate::limits`]: rank at most [`limits::MAX_RANK`], and
    /// the bytes of the product of the dims (zero-sized and dynamic dims counted as 1, so every
    /// stride and partial product of any shape with the same nonzero dims fits as well) at most
    /// [`limits::max_tensor_bytes`]. Errors are [`Error::Limit`] naming the shape.
    pub fn check_limits(&self) -> Result<()> {
        if self.rank() > limits::MAX_RANK {
            return Err(Error::limit(
                "Shape",
                format!("rank {} exceeds the maximum rank {}", self.rank(), limits::MAX_RANK),
            ));
        }
        let max = limits::max_tensor_bytes();
        let bytes = self
            .dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).unwrap_or(0).max(1)))
            .and_then(|n| {
                if self.dtype.is_packed() {
                    Some(n.div_ceil(self.dtype.values_per_byte()))
                } else {
                    n.checked_mul(self.dtype.size().max(1))
                }
            });
        match bytes {
            Some(b) if b <= max => Ok(()),
            Some(b) => Err(Error::limit(
                "Shape",
                format!(
                    "shape {self} needs {b} bytes (zero dims counted as 1), more than the limit of {max} bytes per tensor"
                ),
            )),
            None => Err(Error::limit(
                "Shape",
                format!("shape {self}: its byte size overflows usize (limit {max} bytes per tensor)"),
            )),
        }
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Whether rank is 0.
    pub fn is_scalar(&self) -> bool {
        self.dims.is_empty()
    }

    /// Name of axis `i` (`""` when unnamed).
    pub fn axis_name(&self, i: usize) -> &str {
        self.axis_names.as_ref().and_then(|n| n.get(i)).map(|s| s.as_str()).unwrap_or("")
    }

    /// Whether any axis is dynamic.
    pub fn is_dynamic(&self) -> bool {
        self.dims.contains(&DYNAMIC_DIM)
    }

    /// Number of elements; `None` if dynamic. Saturates at `usize::MAX` instead of wrapping
    /// (exact for every shape [`Shape::validate`] accepts).
    pub fn size(&self) -> Option<usize> {
        if self.is_dynamic() {
            None
        } else {
            Some(self.dims.iter().fold(1usize, |acc, &d| acc.saturating_mul(usize::try_from(d).unwrap_or(0))))
        }
    }

    /// Number of elements of a shape known to be static (0 if dynamic).
    pub fn num_elements(&self) -> usize {
        self.size().unwrap_or(0)
    }

    /// Storage bytes (packed dtypes use their packed size); `None` if dynamic. Saturates at
    /// `usize::MAX` instead of wrapping (exact for every shape [`Shape::validate`] accepts).
    pub fn byte_size(&self) -> Option<usize> {
        self.size().map(|n| self.dtype.size_for(n))
    }

    /// Dims as `usize` (dynamic dims become 0).
    pub fn udims(&self) -> Vec<usize> {
        self.dims.iter().map(|&d| d.max(0) as usize).collect()
    }

    /// Dim `i` as `usize` (a dynamic dim, or an axis past the rank, is 0); no allocation.
    pub fn udim(&self, i: usize) -> usize {
        self.dims.get(i).map_or(0, |&d| d.max(0) as usize)
    }

    /// The product of the dims of axes `axes` as `usize` (dynamic dims count as 0, axes past
    /// the rank as 1, saturating); no allocation.
    pub fn uproduct(&self, axes: std::ops::Range<usize>) -> usize {
        let end = axes.end.min(self.dims.len());
        self.dims
            .get(axes.start.min(end)..end)
            .unwrap_or(&[])
            .iter()
            .fold(1usize, |a, &d| a.saturating_mul(d.max(0) as usize))
    }

    /// Same dims, ignoring dtype and names.
    pub fn equal_dimensions(&self, other: &Shape) -> bool {
        self.dims == other.dims
    }

    /// The same dims and names with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Shape {
        Shape { dtype, ..self.clone() }
    }
}

impl fmt::Display for Shape {
    /// `(Float32)[batch=?, 512]`; scalar `(Float32)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({})", self.dtype)?;
        if self.is_scalar() {
            return Ok(());
        }
        f.write_str("[")?;
        for (i, &d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            let name = self.axis_name(i);
            if !name.is_empty() {
                write!(f, "{name}=")?;
            }
            if d == DYNAMIC_DIM { f.write_str("?")? } else { write!(f, "{d}")? }
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_size() {
        let s = Shape::with_names(DType::Float32, &[-1, 512], &["batch", ""]).unwrap();
        assert_eq!(s.to_string(), "(Float32)[batch=?, 512]");
        assert_eq!(s.size(), None);
        assert_eq!(Shape::scalar(DType::Float32).to_string(), "(Float32)");
        assert_eq!(Shape::scalar(DType::Int8).size(), Some(1));
        assert_eq!(Shape::new(DType::Int4, &[3]).byte_size(), Some(2));
        assert_eq!(Shape::new(DType::Float32, &[2, 0, 3]).size(), Some(0));
    }

    #[test]
    fn single_dims_and_products_without_allocating() {
        let s = Shape::new(DType::Float32, &[2, 3, -1, 5]);
        assert_eq!((s.udim(0), s.udim(1), s.udim(2), s.udim(3), s.udim(4)), (2, 3, 0, 5, 0));
        assert_eq!(s.uproduct(0..2), 6);
        assert_eq!(s.uproduct(1..2), 3);
        assert_eq!(s.uproduct(3..4), 5);
        assert_eq!(s.uproduct(1..1), 1);
        assert_eq!(s.uproduct(0..4), 0, "a dynamic dim counts as 0");
        assert_eq!(s.uproduct(3..9), 5, "axes past the rank count as 1");
        assert_eq!(s.uproduct(7..9), 1);
        assert_eq!(Shape::new(DType::Float32, &[1 << 40, 1 << 40]).uproduct(0..2), usize::MAX);
    }

    #[test]
    fn sizes_saturate_instead_of_wrapping() {
        // 2^62 f32 elements are 2^64 bytes: one more than usize::MAX, so the byte size saturates
        // (it used to wrap to 0).
        let s = Shape::new(DType::Float32, &[1 << 62]);
        assert_eq!(s.size(), Some(1 << 62));
        assert_eq!(s.byte_size(), Some(usize::MAX));
        // 2^32 · 2^32 = 2^64 elements.
        let s = Shape::new(DType::Float32, &[1 << 32, 1 << 32]);
        assert_eq!(s.size(), Some(usize::MAX));
        // A zero dim makes the product 0 even after a saturated partial product.
        assert_eq!(Shape::new(DType::Float32, &[1 << 40, 1 << 40, 0]).size(), Some(0));
        assert_eq!(Shape::new(DType::Float32, &[1 << 40, 1 << 40, 0]).byte_size(), Some(0));
        // Exact where it fits: 3·5·7 f64 = 105 elements, 840 bytes.
        assert_eq!(Shape::new(DType::Float64, &[3, 5, 7]).byte_size(), Some(840));
    }

    #[test]
    fn validate_rejects_shapes_over_the_byte_limit() {
        // Default limit isize::MAX = 2^63 − 1 bytes.
        let ok = |dt, dims: &[i64]| Shape::new(dt, dims).validate().is_ok();
        let limit = |dt, dims: &[i64]| matches!(Shape::new(dt, dims).validate(), Err(Error::Limit { .. }));
        // (2^61 − 1)·4 = 2^63 − 4 bytes fit, 2^61·4 = 2^63 do not.
        assert!(ok(DType::Float32, &[(1 << 61) - 1]));
        assert!(limit(DType::Float32, &[1 << 61]));
        assert!(limit(DType::Float32, &[1 << 62]));
        assert!(limit(DType::Float32, &[1 << 32, 1 << 32]));
        // u8: exactly 2^63 − 1 bytes is the limit itself.
        assert!(ok(DType::Uint8, &[i64::MAX]));
        assert!(limit(DType::Uint8, &[i64::MAX, 2]));
        // Int4 packs two per byte: ceil((2^63 − 1)/2) = 2^62 bytes.
        assert!(ok(DType::Int4, &[i64::MAX]));
        // Zero dims count as 1: [0, 2^62] f32 holds nothing but its strides would overflow.
        assert!(limit(DType::Float32, &[0, 1 << 62]));
        assert!(ok(DType::Float32, &[0, 1 << 40]));
        // Dynamic dims count as 1 too.
        assert!(Shape::with_names(DType::Float32, &[-1, 1 << 62], &["b", ""]).is_err());
        // Rank: 64 axes of size 1 are fine, 65 are not.
        assert!(ok(DType::Float32, &[1; 64]));
        assert!(limit(DType::Float32, &[1; 65]));
        let e = Shape::new(DType::Float32, &[1 << 62]).validate().unwrap_err().to_string();
        assert!(e.contains("(Float32)[4611686018427387904]"), "{e}");
    }

    #[test]
    fn dynamic_axes_must_be_named() {
        assert!(Shape::with_names(DType::Float32, &[-1], &[""]).is_err());
        assert!(Shape::with_names(DType::Float32, &[-2], &["a"]).is_err());
    }

    #[test]
    fn equality_treats_missing_names_as_empty() {
        let a = Shape::new(DType::Float32, &[2]);
        let b = Shape { axis_names: Some(vec![String::new()]), ..a.clone() };
        assert_eq!(a, b);
    }
}
