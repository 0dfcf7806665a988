//! 64-byte aligned byte storage for tensor data, with typed views.

use crate::ir::dtype::Element;

/// The alignment of every tensor allocation, in bytes (a cache line; enough for AVX-512).
pub const ALIGN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// A zero-initialised, 64-byte aligned byte buffer of a fixed length.
#[derive(Clone)]
pub struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBytes({} bytes)", self.len)
    }
}

impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> AlignedBytes {
        AlignedBytes { lines: vec![Line([0; ALIGN]); len.div_ceil(ALIGN)], len }
    }

    /// A copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> AlignedBytes {
        let mut a = AlignedBytes::zeroed(bytes.len());
        a.as_bytes_mut().copy_from_slice(bytes);
        a
    }

    /// A copy of a typed slice.
    pub fn from_slice<T: Element>(data: &[T]) -> AlignedBytes {
        let mut a = AlignedBytes::zeroed(std::mem::size_of_val(data));
        a.typed_mut::<T>().copy_from_slice(data);
        a
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `lines` is a contiguous allocation of `lines.len() * ALIGN >= len` initialised
        // bytes (`Line` is a plain byte array with no padding), borrowed immutably for `&self`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len) }
    }

    /// The data viewed as elements of `T` (the length must be a multiple of `size_of::<T>()`).
    ///
    /// For `bool` the caller must only have stored 0 or 1 bytes; every constructor of tensor
    /// buffers checks this ([`crate::api::Buffer::from_bytes`]).
    pub fn typed<T: Element>(&self) -> &[T] {
        let n = self.len / std::mem::size_of::<T>();
        assert_eq!(
            n * std::mem::size_of::<T>(),
            self.len,
            "AlignedBytes::typed: length not a multiple of the element size"
        );
        // SAFETY: the allocation is 64-byte aligned (≥ align_of::<T>() for every Element type),
        // holds `n * size_of::<T>()` initialised bytes, and every Element type except bool is
        // plain old data valid for any bit pattern; bool buffers only ever hold 0/1 bytes
        // (checked where bytes enter from outside, and kernels write bool values).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), n) }
    }

    /// The data viewed mutably as elements of `T`.
    pub fn typed_mut<T: Element>(&mut self) -> &mut [T] {
        let n = self.len / std::mem::size_of::<T>();
        assert_eq!(
            n * std::mem::size_of::<T>(),
            self.len,
            "AlignedBytes::typed_mut: length not a multiple of the element size"
        );
        // SAFETY: as in `typed`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), n) }
    }

    /// Pointer to the first byte (for kernels).
    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr().cast()
    }

    /// Mutable pointer to the first byte (for kernels).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_typed() {
        let a = AlignedBytes::from_slice(&[1.0f32, 2.0, 3.0]);
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        assert_eq!(a.len(), 12);
        assert_eq!(a.typed::<f32>(), &[1.0, 2.0, 3.0]);
        let z = AlignedBytes::zeroed(0);
        assert!(z.is_empty());
        assert_eq!(z.typed::<f64>().len(), 0);
    }
}
