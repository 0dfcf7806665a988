//! Arenas of fresh, huge-page-advised memory for buffers that live as long as a compiled
//! executable (the packed GEMM and convolution weights).
//!
//! Packing a model's weights writes tens of megabytes into new memory. Allocated buffer by
//! buffer, each buffer is smaller than a huge page and lands at an arbitrary address, so every
//! 4 KiB page of it costs the kernel a page fault, a page allocation and a clear: on the 2-vCPU
//! virtual machines this project is measured on that was ~0.8 ms per MiB, more than half of
//! MiniLM's compile time, against ~0.2 ms per MiB for the same bytes in 2 MiB huge pages.
//! An [`Arena`] maps chunks of at least [`CHUNK_BYTES`], 2 MiB aligned and advised to use
//! transparent huge pages, and carves 64-byte aligned [`ArenaBuf`]s out of them; a chunk is
//! unmapped when its last buffer is dropped. The pages of an anonymous map are zero until first
//! written, so an arena buffer is zeroed without a pass over it.
//!
//! A compile installs its arena for the packing jobs it runs ([`with_arena`]); code that
//! allocates panels asks [`take`] and falls back to its own allocation when no arena is
//! installed or the request is small.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of arena buffers alive in the process (64-byte rounded).
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of arena buffers (packed weights of compiled executables) alive in the process: memory
/// mapped outside the global allocator, so an allocation counter does not see it.
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Bytes of one chunk (more when a single request is larger).
pub(crate) const CHUNK_BYTES: usize = 32 << 20;

/// Requests smaller than this are left to the caller's own allocator (they would not fill a
/// huge page, and small packs are cheap anyway).
pub(crate) const MIN_REQUEST_BYTES: usize = 64 << 10;

/// The huge-page size whose alignment chunks get.
const HUGE: usize = 2 << 20;

/// One mapping that buffers are carved from.
struct Chunk {
    /// Keeps the mapping alive (unmapped on drop); never accessed through after creation.
    _storage: Storage,
    /// The 2 MiB-aligned start of the usable part.
    base: *mut u8,
    /// Usable bytes from `base`.
    len: usize,
}

/// What a chunk's bytes live in (held only to be freed with the chunk).
#[allow(dead_code)]
enum Storage {
    Map(memmap2::MmapMut),
    /// Where anonymous maps are unavailable (wasm): zeroed heap lines.
    Heap(Vec<super::Line>),
}

// SAFETY: a chunk owns its storage; the raw `base` pointer is only dereferenced through the
// disjoint `ArenaBuf` regions handed out under the arena's mutex, each owned by one buffer.
unsafe impl Send for Chunk {}
// SAFETY: as for `Send`: shared references to a chunk never access its bytes.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A zeroed chunk of at least `bytes` usable bytes, or `None` when memory is refused.
    fn new(bytes: usize) -> Option<Chunk> {
        let len = bytes.checked_next_multiple_of(HUGE)?;
        if let Ok(mut map) = memmap2::MmapOptions::new().len(len.checked_add(HUGE)?).map_anon() {
            let p = map.as_mut_ptr();
            // SAFETY: the map holds `len + HUGE` bytes and `align_offset(HUGE) < HUGE`, so
            // `base` and the `len` bytes after it lie inside it.
            let base = unsafe { p.add(p.align_offset(HUGE)) };
            super::advise_huge_pages(base, len);
            return Some(Chunk { _storage: Storage::Map(map), base, len });
        }
        let lines = len / super::ALIGN;
        let mut v = super::try_zeroed_lines(lines)?;
        let base = v.as_mut_ptr().cast::<u8>();
        Some(Chunk { _storage: Storage::Heap(v), base, len })
    }
}

#[derive(Default)]
struct State {
    chunk: Option<Arc<Chunk>>,
    /// Bytes of `chunk` handed out.
    used: usize,
    /// Bytes handed out by the arena over its life.
    total: usize,
}

/// A bump allocator over huge-page chunks (see the module docs). Thread-safe: the packing jobs
/// of one compile run on the thread pool and share it.
#[derive(Default)]
pub(crate) struct Arena {
    state: Mutex<State>,
}

impl Arena {
    pub(crate) fn new() -> Arena {
        Arena::default()
    }

    /// A zeroed, 64-byte aligned buffer of `bytes` bytes, or `None` when memory is refused.
    pub(crate) fn alloc(&self, bytes: usize) -> Option<ArenaBuf> {
        let want = bytes.max(1).checked_next_multiple_of(super::ALIGN)?;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let fits = st.chunk.as_ref().is_some_and(|c| c.len - st.used >= want);
        if !fits {
            st.chunk = Some(Arc::new(Chunk::new(want.max(CHUNK_BYTES))?));
            st.used = 0;
        }
        let chunk = st.chunk.clone()?;
        let offset = st.used;
        st.used += want;
        st.total += want;
        LIVE_BYTES.fetch_add(want, Ordering::Relaxed);
        Some(ArenaBuf { chunk, offset, bytes: want })
    }

    /// Bytes handed out so far (64-byte rounded).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn allocated(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// A region of an arena chunk (of the size asked of [`Arena::alloc`]), owned by one buffer; the
/// chunk lives while any of its buffers does.
pub(crate) struct ArenaBuf {
    chunk: Arc<Chunk>,
    offset: usize,
    /// The bytes it took from the chunk (counted in [`live_bytes`]).
    bytes: usize,
}

impl Drop for ArenaBuf {
    fn drop(&mut self) {
        LIVE_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl ArenaBuf {
    pub(crate) fn as_ptr(&self) -> *const u8 {
        // SAFETY: `offset + len <= chunk.len` (checked by `Arena::alloc`), so the pointer stays
        // inside the chunk's usable part.
        unsafe { self.chunk.base.add(self.offset) }
    }
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: as `as_ptr`; the region is this buffer's alone (regions never overlap: the
        // arena's bump offset only grows), so writing through `&mut self` aliases nothing.
        unsafe { self.chunk.base.add(self.offset) }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Arena>>> = const { RefCell::new(None) };
}

/// Runs `f` with `arena` installed on this thread (restoring what was installed before).
pub(crate) fn with_arena<R>(arena: &Arc<Arena>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<Arena>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            let _ = CURRENT.try_with(|c| *c.borrow_mut() = prev);
        }
    }
    let prev = CURRENT.with(|c| c.borrow_mut().replace(arena.clone()));
    let _restore = Restore(prev);
    f()
}

/// A zeroed buffer of `bytes` from the arena installed on this thread, if one is and the
/// request is at least [`MIN_REQUEST_BYTES`].
pub(crate) fn take(bytes: usize) -> Option<ArenaBuf> {
    if bytes < MIN_REQUEST_BYTES {
        return None;
    }
    let arena = CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()?;
    arena.alloc(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_disjoint_and_outlive_the_arena() {
        let arena = Arc::new(Arena::new());
        let sizes = [100usize, 1 << 20, 5, CHUNK_BYTES + 3, 70 << 10];
        let mut bufs: Vec<ArenaBuf> = sizes.iter().map(|&b| arena.alloc(b).expect("memory")).collect();
        assert_eq!(arena.allocated(), 128 + (1 << 20) + 64 + (CHUNK_BYTES + 64) + (70 << 10));
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.as_ptr() as usize % 64, 0);
            // SAFETY: the buffer was asked for `sizes[i]` bytes.
            let s = unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr(), sizes[i]) };
            assert!(s.iter().all(|&x| x == 0), "buffer {i} not zeroed");
            s.fill(i as u8 + 1);
        }
        drop(arena);
        for (i, b) in bufs.iter().enumerate() {
            // SAFETY: as above; the chunks live while their buffers do.
            let s = unsafe { std::slice::from_raw_parts(b.as_ptr(), sizes[i]) };
            assert!(s.iter().all(|&x| x == i as u8 + 1), "buffer {i} overwritten by another");
        }
    }

    #[test]
    fn take_uses_the_installed_arena_for_large_requests_only() {
        assert!(take(1 << 20).is_none(), "no arena installed");
        let arena = Arc::new(Arena::new());
        with_arena(&arena, || {
            assert!(take(MIN_REQUEST_BYTES - 1).is_none());
            assert!(take(MIN_REQUEST_BYTES).is_some());
        });
        assert_eq!(arena.allocated(), MIN_REQUEST_BYTES);
        assert!(take(1 << 20).is_none(), "arena uninstalled after the scope");
    }
}
