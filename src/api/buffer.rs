//! Host buffers: tensor data with a shape, created from typed slices or bytes, donated or finalized.

use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::shape::Shape;
use crate::memory::AlignedBytes;

#[derive(Debug)]
enum State {
    Live(Arc<AlignedBytes>),
    Donated,
    Finalized,
}

#[derive(Debug)]
struct Inner {
    shape: Shape,
    state: RwLock<State>,
}

/// A tensor's data on the host (the only device of the CPU backends).
///
/// Cloning a `Buffer` clones the handle, not the data. A buffer donated to an execution or
/// finalized can no longer be read: every access then returns [`Error::UseAfterFree`].
#[derive(Clone, Debug)]
pub struct Buffer {
    inner: Arc<Inner>,
}

impl Buffer {
    /// A buffer holding a copy of `data` with dims `dims` (`data.len()` must equal their product).
    ///
    /// ```
    /// use tensorjit::{Buffer, DType};
    ///
    /// let b = Buffer::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(b.shape().dtype, DType::Int32);
    /// assert_eq!(b.to_vec::<i32>()?, [1, 2, 3, 4, 5, 6]);
    /// assert!(b.to_vec::<f32>().is_err()); // the dtype must match
    /// assert!(Buffer::from_slice(&[1.0f32; 5], &[2, 3]).is_err()); // 5 values for 6 elements
    /// # Ok::<(), tensorjit::Error>(())
    /// ```
    pub fn from_slice<T: Element>(data: &[T], dims: &[usize]) -> Result<Buffer> {
        if let Some(d) = dims.iter().find(|&&d| i64::try_from(d).is_err()) {
            return Err(Error::invalid("Buffer::from_slice", format!("dimension {d} of {dims:?} exceeds i64::MAX")));
        }
        let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(data.len()) {
            let n = n.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string());
            return Err(Error::invalid(
                "Buffer::from_slice",
                format!("{} elements given for dims {dims:?} ({n} elements)", data.len()),
            ));
        }
        let shape = Shape::from_usize(T::DTYPE, dims);
        shape.validate()?;
        Ok(Buffer::wrap(shape, Arc::new(AlignedBytes::from_slice(data))))
    }

    /// A scalar buffer.
    pub fn scalar<T: Element>(value: T) -> Buffer {
        Buffer::wrap(Shape::scalar(T::DTYPE), Arc::new(AlignedBytes::from_slice(&[value])))
    }

    /// A buffer from raw little-endian bytes (packed layout for sub-byte dtypes).
    pub fn from_bytes(shape: Shape, bytes: &[u8]) -> Result<Buffer> {
        Buffer::check_bytes(&shape, bytes)?;
        Ok(Buffer::wrap(shape, Arc::new(AlignedBytes::from_bytes(bytes))))
    }

    /// Checks that `bytes` can be the data of a buffer of `shape` (static, supported dtype,
    /// exact size, Bool bytes 0 or 1) without copying them.
    pub fn check_bytes(shape: &Shape, bytes: &[u8]) -> Result<()> {
        shape.validate()?;
        if !shape.dtype.is_supported() {
            return Err(Error::invalid("Buffer::from_bytes", format!("dtype {} cannot hold data", shape.dtype)));
        }
        let want = shape
            .byte_size()
            .ok_or_else(|| Error::invalid("Buffer::from_bytes", format!("shape {shape} is dynamic")))?;
        if bytes.len() != want {
            return Err(Error::invalid(
                "Buffer::from_bytes",
                format!("{} bytes given for shape {shape} ({want} bytes)", bytes.len()),
            ));
        }
        if shape.dtype == DType::Bool
            && let Some(i) = bytes.iter().position(|&b| b > 1)
        {
            return Err(Error::invalid("Buffer::from_bytes", format!("Bool element {i} is byte {}", bytes[i])));
        }
        Ok(())
    }

    /// Wraps existing storage (used by backends). Errors if the shape is invalid or dynamic, or
    /// the storage length is not the shape's byte size.
    pub fn from_storage(shape: Shape, data: Arc<AlignedBytes>) -> Result<Buffer> {
        shape.validate()?;
        if shape.byte_size() != Some(data.len()) {
            return Err(Error::invalid(
                "Buffer::from_storage",
                format!(
                    "{} bytes of storage for shape {shape} ({})",
                    data.len(),
                    shape.byte_size().map_or_else(|| "dynamic".to_string(), |b| format!("{b} bytes"))
                ),
            ));
        }
        Ok(Buffer::wrap(shape, data))
    }

    /// Wraps storage without checking that it matches `shape` (callers have checked; tests
    /// build mismatched buffers with it to exercise the backends' own checks).
    pub(crate) fn wrap(shape: Shape, data: Arc<AlignedBytes>) -> Buffer {
        Buffer { inner: Arc::new(Inner { shape, state: RwLock::new(State::Live(data)) }) }
    }

    /// The shape (always concrete).
    pub fn shape(&self) -> &Shape {
        &self.inner.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.inner.shape.dtype
    }

    /// Dims as `usize`.
    pub fn dims(&self) -> Vec<usize> {
        self.inner.shape.udims()
    }

    /// Whether the buffer can still be read (not donated or finalized).
    pub fn is_live(&self) -> bool {
        matches!(*self.read_state(), State::Live(_))
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn dead_error(state: &State) -> Error {
        let s = if matches!(state, State::Donated) { "donated" } else { "finalized" };
        Error::UseAfterFree { what: "buffer".into(), state: s.into() }
    }

    /// The storage (shared, not copied). Errors if donated or finalized.
    pub fn storage(&self) -> Result<Arc<AlignedBytes>> {
        match &*self.read_state() {
            State::Live(d) => Ok(d.clone()),
            s => Err(Buffer::dead_error(s)),
        }
    }

    /// Takes the storage out for a donating execution; the buffer becomes unusable.
    pub fn take_for_donation(&self) -> Result<Arc<AlignedBytes>> {
        let mut st = self.inner.state.write().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *st, State::Donated) {
            State::Live(d) => Ok(d),
            other => {
                let e = Buffer::dead_error(&other);
                *st = other;
                Err(e)
            }
        }
    }

    /// Puts `data` in place of the storage (the buffer's new contents; the caller has checked
    /// that it fits the shape) and returns the previous storage. Errors if donated or finalized.
    pub(crate) fn replace_storage(&self, data: Arc<AlignedBytes>) -> Result<Arc<AlignedBytes>> {
        let mut st = self.inner.state.write().unwrap_or_else(|e| e.into_inner());
        match &mut *st {
            State::Live(d) => Ok(std::mem::replace(d, data)),
            s => Err(Buffer::dead_error(s)),
        }
    }

    /// Whether `self` and `other` are handles of the same buffer (clones of one another).
    pub fn same_buffer(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A copy of the raw bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.storage()?.as_bytes().to_vec())
    }

    /// A copy of the elements; `T` must be the storage type of the buffer's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::invalid(
                "Buffer::to_vec",
                format!("buffer holds {} but {} was asked for", self.dtype(), T::DTYPE),
            ));
        }
        Ok(self.storage()?.typed::<T>().to_vec())
    }

    /// Copies the elements into `dst`, which must have exactly as many elements.
    pub fn copy_to<T: Element>(&self, dst: &mut [T]) -> Result<()> {
        let v = self.to_vec::<T>()?;
        if v.len() != dst.len() {
            return Err(Error::invalid(
                "Buffer::copy_to",
                format!("destination has {} elements, buffer {}", dst.len(), v.len()),
            ));
        }
        dst.copy_from_slice(&v);
        Ok(())
    }

    /// Frees the data now. Finalizing a donated or already finalized buffer succeeds silently.
    pub fn finalize(&self) {
        let mut st = self.inner.state.write().unwrap_or_else(|e| e.into_inner());
        if let State::Live(_) = *st {
            *st = State::Finalized;
        }
    }

    /// Address of the data (for tests of buffer reuse); `None` if not live.
    pub fn data_ptr(&self) -> Option<usize> {
        match &*self.read_state() {
            State::Live(d) => Some(d.as_ptr() as usize),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let b = Buffer::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
        assert_eq!(b.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4]);
        assert!(b.to_vec::<f32>().is_err());
        assert!(Buffer::from_slice(&[1i32, 2, 3], &[2, 2]).is_err());
        assert!(Buffer::from_bytes(Shape::new(DType::Bool, &[2]), &[0, 2]).is_err());
        assert!(Buffer::from_bytes(Shape::new(DType::Int4, &[3]), &[0x21, 0x03]).is_ok());
        b.finalize();
        assert!(matches!(b.to_vec::<i32>(), Err(Error::UseAfterFree { .. })));
        b.finalize();
    }

    #[test]
    fn sizes_are_checked_without_wrapping() {
        // f32[2^62] is 2^64 bytes: it used to wrap to 0 and accept an empty slice.
        let huge = Shape::new(DType::Float32, &[1 << 62]);
        assert!(matches!(Buffer::from_bytes(huge.clone(), &[]), Err(Error::Limit { .. })));
        assert!(matches!(Buffer::check_bytes(&huge, &[]), Err(Error::Limit { .. })));
        // 2^32 · 2^32 elements overflow usize: an error, not a panic.
        assert!(Buffer::from_slice::<f32>(&[], &[1 << 32, 1 << 32]).is_err());
        assert!(Buffer::from_slice::<f32>(&[], &[0, 1 << 63]).is_err());
        // Storage of 4 bytes cannot be an f32[4096] (16384 bytes).
        let four = Arc::new(AlignedBytes::from_bytes(&[0; 4]));
        let e = Buffer::from_storage(Shape::new(DType::Float32, &[4096]), four.clone()).unwrap_err();
        assert!(e.to_string().contains("4 bytes of storage") && e.to_string().contains("16384 bytes"), "{e}");
        let b = Buffer::from_storage(Shape::new(DType::Int16, &[2]), four).unwrap();
        assert_eq!(b.to_vec::<i16>().unwrap(), vec![0, 0]);
        // A 0-byte storage for f32[2^62] (byte size saturated, then rejected by the limit).
        assert!(Buffer::from_storage(huge, Arc::new(AlignedBytes::from_bytes(&[]))).is_err());
    }

    #[test]
    fn donation_invalidates() {
        let b = Buffer::scalar(1.5f64);
        let _d = b.take_for_donation().unwrap();
        assert!(!b.is_live());
        assert!(b.take_for_donation().is_err());
        b.finalize();
    }
}
