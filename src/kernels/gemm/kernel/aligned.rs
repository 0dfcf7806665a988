//! 64-byte aligned scratch buffers for packed panels, recycled through a per-thread pool.

/// A scratch buffer of plain-old-data elements aligned to 64 bytes (so packed panels start on
/// cache lines and full-width vector loads never split lines). Storage is recycled through a
/// per-thread pool, so repeated small products do not allocate; new storage is zeroed, recycled
/// storage keeps stale values (every user writes a region before reading it).
pub(crate) struct AlignedBuf<T> {
    blocks: Vec<Line>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

/// One cache line of storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

thread_local! {
    static POOL: std::cell::RefCell<Vec<Vec<Line>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<T: Copy> AlignedBuf<T> {
    /// A buffer of `len` elements (zeroed when freshly allocated; see the type's docs).
    pub fn zeroed(len: usize) -> Self {
        assert!(std::mem::align_of::<T>() <= 64, "AlignedBuf: element alignment above 64");
        let lines = (len * std::mem::size_of::<T>()).div_ceil(64);
        if lines == 0 {
            // Nothing to hold: leave the pooled buffers to the requests that need them.
            return AlignedBuf { blocks: Vec::new(), len, _t: std::marker::PhantomData };
        }
        let mut blocks = POOL.with(|p| {
            let mut p = p.borrow_mut();
            // The smallest buffer that fits, so a small request does not take the big one
            // the next request needs (which would then be allocated and zeroed afresh).
            let fit = p.iter().enumerate().filter(|(_, v)| v.len() >= lines).min_by_key(|(_, v)| v.len());
            match fit {
                Some((i, _)) => p.swap_remove(i),
                None => Vec::new(),
            }
        });
        if blocks.len() < lines {
            blocks.resize(lines, Line([0; 64]));
        }
        AlignedBuf { blocks, len, _t: std::marker::PhantomData }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn as_ptr(&self) -> *const T {
        self.blocks.as_ptr().cast()
    }
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.blocks.as_mut_ptr().cast()
    }
}

impl<T> Drop for AlignedBuf<T> {
    fn drop(&mut self) {
        let blocks = std::mem::take(&mut self.blocks);
        // Small pool (a few MiB per thread at most): large or surplus buffers are freed.
        if blocks.capacity() > 0 && blocks.len() <= (8 << 20) / 64 {
            let _ = POOL.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < 4 {
                    p.push(blocks);
                } else if let Some(small) = p.iter_mut().min_by_key(|v| v.len())
                    && small.len() < blocks.len()
                {
                    // Keep the larger buffers: they are the expensive ones to allocate.
                    *small = blocks;
                }
            });
        }
    }
}

// SAFETY: AlignedBuf owns plain data (only used with Send + Sync element types).
unsafe impl<T: Send> Send for AlignedBuf<T> {}
// SAFETY: as above; shared access is read-only.
unsafe impl<T: Sync> Sync for AlignedBuf<T> {}
