//! Tensor shapes (catalogue §2): dtype + dims, with named dynamic axes.

use std::fmt;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;

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

    /// Checks the shape's own invariants: dims ≥ 0 or dynamic, dynamic axes named, names length.
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
        Ok(())
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

    /// Number of elements; `None` if dynamic.
    pub fn size(&self) -> Option<usize> {
        if self.is_dynamic() { None } else { Some(self.dims.iter().map(|&d| d as usize).product()) }
    }

    /// Number of elements of a shape known to be static (0 if dynamic).
    pub fn num_elements(&self) -> usize {
        self.size().unwrap_or(0)
    }

    /// Storage bytes (packed dtypes use their packed size); `None` if dynamic.
    pub fn byte_size(&self) -> Option<usize> {
        self.size().map(|n| self.dtype.size_for(n))
    }

    /// Dims as `usize` (dynamic dims become 0).
    pub fn udims(&self) -> Vec<usize> {
        self.dims.iter().map(|&d| d.max(0) as usize).collect()
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
