//! 64-byte aligned scratch buffers for packed panels, recycled through a per-thread pool.

use crate::memory::AnyBits;

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

/// Most buffers one thread's pool keeps: a blocked product holds up to five at once (packed A
/// and B, the column sums, the bias row and the edge tile), a bf16 attention step seven (its
/// widened operands, mask and result, the f32 kernel's blocks), and the buffers of the other
/// steps of a model must survive those: with 8, a bf16 attention + layer norm graph evicted one
/// buffer per execution and allocated it again at the next (`tests/steady_alloc.rs`).
const POOL_BUFFERS: usize = 16;
/// Most bytes one thread's pool keeps, and the largest buffer it keeps: a one-off huge product
/// frees its scratch instead of pinning it for the thread's life.
const POOL_MAX_BYTES: usize = 16 << 20;
const POOL_MAX_BUFFER: usize = 8 << 20;

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
        let mut blocks = POOL
            .try_with(|p| {
                let mut p = p.borrow_mut();
                // The smallest buffer that fits, so a small request does not take the big one
                // the next request needs (which would then be allocated and zeroed afresh).
                let fit = p.iter().enumerate().filter(|(_, v)| v.len() >= lines).min_by_key(|(_, v)| v.len());
                match fit {
                    Some((i, _)) => p.swap_remove(i),
                    None => Vec::new(),
                }
            })
            .unwrap_or_default();
        if blocks.len() < lines {
            // Grows the buffer (zeroing only the new part: Vec<Line> holds initialised bytes).
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

impl<T: AnyBits> AlignedBuf<T> {
    /// The elements (stale values where recycled storage was not written yet).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the lines hold at least `len * size_of::<T>()` initialised bytes (`zeroed`
        // sizes them so), aligned to 64 >= align_of::<T>() (asserted there), every bit pattern
        // is a valid T (`AnyBits`), and the slice borrows `self` mutably.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.len) }
    }

    /// The elements, read-only (stale values where recycled storage was not written yet).
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: as for `as_mut_slice`; the slice borrows `self` immutably.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }
}

impl<T> Drop for AlignedBuf<T> {
    fn drop(&mut self) {
        let blocks = std::mem::take(&mut self.blocks);
        let bytes = blocks.len() * 64;
        if blocks.capacity() == 0 || bytes > POOL_MAX_BUFFER {
            return;
        }
        let _ = POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            if p.capacity() < POOL_BUFFERS {
                // Once per thread: the pool's own list is not allocated again.
                p.reserve_exact(POOL_BUFFERS);
            }
            p.push(blocks);
            // Over a limit: drop the smallest buffers (the larger ones are the expensive ones to
            // allocate and zero again), keeping the one just returned if it alone fits.
            loop {
                let held: usize = p.iter().map(|v| v.len() * 64).sum();
                if p.len() <= POOL_BUFFERS && held <= POOL_MAX_BYTES {
                    break;
                }
                let Some((i, _)) = p.iter().enumerate().min_by_key(|(_, v)| v.len()) else { break };
                drop(p.swap_remove(i));
            }
        });
    }
}

/// The storage of packed weights: from the compile's huge-page arena
/// ([`crate::memory::arena`]) when one is installed and the panels are large, else an
/// [`AlignedBuf`]. Zeroed when freshly allocated (as [`AlignedBuf::zeroed`]: recycled pool
/// storage keeps stale values; packing writes every element the tiles read).
pub(crate) enum PanelBuf<T> {
    Own(AlignedBuf<T>),
    Arena(crate::memory::arena::ArenaBuf, usize, std::marker::PhantomData<T>),
}

impl<T: Copy> PanelBuf<T> {
    /// `len` zeroed elements (64-byte aligned).
    pub fn zeroed(len: usize) -> Self {
        assert!(std::mem::align_of::<T>() <= 64, "PanelBuf: element alignment above 64");
        match len.checked_mul(std::mem::size_of::<T>()).and_then(crate::memory::arena::take) {
            Some(b) => PanelBuf::Arena(b, len, std::marker::PhantomData),
            None => PanelBuf::Own(AlignedBuf::zeroed(len)),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            PanelBuf::Own(b) => b.len(),
            PanelBuf::Arena(_, len, _) => *len,
        }
    }
    pub fn as_ptr(&self) -> *const T {
        match self {
            PanelBuf::Own(b) => b.as_ptr(),
            PanelBuf::Arena(b, _, _) => b.as_ptr().cast(),
        }
    }
    pub fn as_mut_ptr(&mut self) -> *mut T {
        match self {
            PanelBuf::Own(b) => b.as_mut_ptr(),
            PanelBuf::Arena(b, _, _) => b.as_mut_ptr().cast(),
        }
    }
}

/// Growable f32 scratch on the per-thread pool, for kernels built on the GEMM (im2col patches,
/// output tiles): hold one per task or per rayon split and call [`Scratch::get`] per use; after
/// the first executions it allocates nothing. Contents are stale: write before reading.
#[derive(Default)]
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub struct Scratch(Option<AlignedBuf<f32>>);

#[cfg_attr(not(feature = "internals"), allow(dead_code))]
impl Scratch {
    /// The most f32 elements a scratch can hold and still go back to the pool when dropped.
    pub const MAX_POOLED: usize = POOL_MAX_BUFFER / 4;

    /// No storage yet (nothing allocated).
    pub fn new() -> Self {
        Scratch(None)
    }

    /// `len` elements of scratch, from the buffer held (when large enough) or the pool.
    pub fn get(&mut self, len: usize) -> &mut [f32] {
        if self.0.as_ref().is_none_or(|b| b.len() < len) {
            // The smaller buffer goes back to the pool before the larger one is taken.
            self.0 = None;
            self.0 = Some(AlignedBuf::zeroed(len));
        }
        match &mut self.0 {
            Some(b) => &mut b.as_mut_slice()[..len],
            None => &mut [],
        }
    }

    /// The first `len` elements [`Scratch::get`] gave out, read-only (fewer when it holds
    /// fewer).
    pub fn view(&self, len: usize) -> &[f32] {
        self.0.as_ref().map_or(&[], |b| &b.as_slice()[..len.min(b.len())])
    }
}

// SAFETY: AlignedBuf owns plain data (only used with Send + Sync element types).
unsafe impl<T: Send> Send for AlignedBuf<T> {}
// SAFETY: as above; shared access is read-only.
unsafe impl<T: Sync> Sync for AlignedBuf<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes this thread's pool holds.
    fn pooled() -> usize {
        POOL.with(|p| p.borrow().iter().map(|v| v.len() * 64).sum())
    }

    #[test]
    fn scratch_reuses_its_storage_and_the_pool_is_capped() {
        POOL.with(|p| p.borrow_mut().clear());
        let mut s = Scratch::new();
        let first = s.get(1000);
        assert_eq!(first.len(), 1000);
        first.fill(2.5);
        let ptr = first.as_ptr();
        // A smaller request is served by the same storage, stale values and all.
        let again = s.get(10);
        assert_eq!((again.len(), again.as_ptr(), again[9]), (10, ptr, 2.5));
        drop(s);
        // Its buffer went back to the pool, and the next request of that size takes it.
        assert_eq!(pooled(), 4000usize.div_ceil(64) * 64);
        assert_eq!(Scratch::new().get(1000).as_ptr(), ptr);

        // A buffer above POOL_MAX_BUFFER is freed, not kept.
        POOL.with(|p| p.borrow_mut().clear());
        drop(AlignedBuf::<f32>::zeroed(POOL_MAX_BUFFER / 4 + 16));
        assert_eq!(pooled(), 0);
        // Three 6 MiB buffers: the pool keeps two (at most POOL_MAX_BYTES).
        let bufs: Vec<AlignedBuf<f32>> = (0..3).map(|_| AlignedBuf::zeroed((6 << 20) / 4)).collect();
        drop(bufs);
        assert_eq!(pooled(), 12 << 20);
        // More than POOL_BUFFERS small ones: the pool keeps POOL_BUFFERS.
        POOL.with(|p| p.borrow_mut().clear());
        let bufs: Vec<AlignedBuf<f32>> = (0..POOL_BUFFERS + 3).map(|i| AlignedBuf::zeroed(16 * (i + 1))).collect();
        drop(bufs);
        assert_eq!(POOL.with(|p| p.borrow().len()), POOL_BUFFERS);
    }
}
