//! `Tensor`: an immutable, shareable host tensor value (shape + 64-byte aligned data) used by kernels.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::dtype::Element;
use crate::ir::shape::Shape;
use crate::runtime::aligned::AlignedBytes;

/// A host tensor: a concrete shape and its data. Cloning shares the data.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Concrete shape.
    pub shape: Shape,
    /// Raw little-endian element bytes (packed for sub-byte dtypes).
    pub data: Arc<AlignedBytes>,
}

impl Tensor {
    /// A zero-filled tensor.
    pub fn zeros(shape: Shape) -> Tensor {
        let n = shape.byte_size().unwrap_or(0);
        Tensor { shape, data: Arc::new(AlignedBytes::zeroed(n)) }
    }

    /// A tensor from a typed vector (`T` must be the storage type of `shape.dtype`).
    pub fn from_vec<T: Element>(shape: Shape, data: &[T]) -> Result<Tensor> {
        if T::DTYPE != shape.dtype || shape.size() != Some(data.len()) {
            return Err(Error::invalid("Tensor", format!("{} {} elements for shape {shape}", data.len(), T::DTYPE)));
        }
        Ok(Tensor { shape, data: Arc::new(AlignedBytes::from_slice(data)) })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.num_elements()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as `T` (panics if `T` is not the dtype's storage type: an internal bug).
    pub fn typed<T: Element>(&self) -> &[T] {
        assert_eq!(T::DTYPE, self.shape.dtype, "Tensor::typed: wrong element type");
        self.data.typed::<T>()
    }

    /// Mutable elements (copies the data first if it is shared).
    pub fn typed_mut<T: Element>(&mut self) -> &mut [T] {
        assert_eq!(T::DTYPE, self.shape.dtype, "Tensor::typed_mut: wrong element type");
        Arc::make_mut(&mut self.data).typed_mut::<T>()
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &[u8] {
        self.data.as_bytes()
    }

    /// Mutable raw bytes (copies the data first if it is shared).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        Arc::make_mut(&mut self.data).as_bytes_mut()
    }
}
