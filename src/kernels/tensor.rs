//! `Tensor`: an immutable, shareable host tensor value (shape + 64-byte aligned data) used by kernels.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::dtype::Element;
use crate::ir::shape::Shape;
use crate::memory::AlignedBytes;

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

    /// A zero-filled tensor, or [`Error::OutOfMemory`] (naming the shape) if the allocator
    /// refuses its storage.
    pub fn try_zeros(shape: Shape) -> Result<Tensor> {
        let n = shape.byte_size().unwrap_or(0);
        let data = AlignedBytes::try_zeroed(n).map_err(|_| Error::out_of_memory(format!("tensor {shape}"), n))?;
        Ok(Tensor { shape, data: Arc::new(data) })
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
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dtype::DType;

    #[test]
    fn try_zeros_allocates_or_reports_out_of_memory() {
        // [3, 5] i16: 15 elements of 2 bytes.
        let t = Tensor::try_zeros(Shape::new(DType::Int16, &[3, 5])).unwrap();
        assert_eq!((t.len(), t.bytes().len()), (15, 30));
        assert!(t.typed::<i16>().iter().all(|&x| x == 0));
        // 2^43 f32 elements are 2^45 bytes (32 TiB): refused by the allocator, not an abort.
        match Tensor::try_zeros(Shape::new(DType::Float32, &[1 << 43])) {
            Err(Error::OutOfMemory { bytes, .. }) => assert_eq!(bytes, 1 << 45),
            other => panic!("{other:?}"),
        }
    }
}
