//! 64-byte aligned byte storage for tensor data, with typed views, and the process-wide pool
//! that recycles large allocations.
//!
//! # The pool
//! Dropping an [`AlignedBytes`] made by [`AlignedBytes::zeroed`] or [`AlignedBytes::recycled`]
//! (the runtime's allocations; copies made by `from_bytes`/`from_slice`, such as a caller's input
//! or a builder's constant, are freed normally) of at least [`POOL_MIN_BYTES`] hands its allocation to a
//! process-wide pool (up to `TENSORJIT_POOL_MB` megabytes in all, default 1024, or what
//! [`set_pool_cap`] sets; `0` disables it) instead of freeing it; over the cap, the least
//! recently returned allocations are freed first. [`pool_stats`] tells what it holds and how
//! often it was hit, missed and evicted. [`AlignedBytes::zeroed`] and [`AlignedBytes::recycled`] of the same
//! size take it back, so an executable run in a loop reuses warm, already-mapped pages rather
//! than paying the operating system's page faults on every fresh output. `recycled` skips the
//! zeroing: for a kernel that overwrites every byte.
//!
//! # Huge pages
//! Allocations of at least [`HUGE_MIN_BYTES`] are advised to the kernel as candidates for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)`, Linux) before their first touch: a loop
//! streaming through a 64 MB tensor then takes 32 page faults and TLB entries instead of 16,384
//! (measured: a 16M-element f32 stream runs ~10% faster). Where the system disables huge pages
//! the advice is ignored.

pub(crate) mod arena;
pub use arena::live_bytes as arena_bytes;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::ir::dtype::Element;
use crate::ir::shape::Shape;

/// The alignment of every tensor allocation, in bytes (a cache line; enough for AVX-512).
pub const ALIGN: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; ALIGN]);

/// Allocations of at least this many bytes are advised to use transparent huge pages.
pub const HUGE_MIN_BYTES: usize = 4 << 20;

/// `n` zeroed lines. The allocation is made zeroed by the allocator (fresh pages from the
/// operating system, untouched), so large ones can still be advised to use huge pages.
/// `None` when the allocator refuses (or `n` lines exceed `isize::MAX` bytes).
fn try_zeroed_lines(n: usize) -> Option<Vec<Line>> {
    let layout = std::alloc::Layout::array::<Line>(n).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Line>();
    if p.is_null() {
        return None;
    }
    if layout.size() >= HUGE_MIN_BYTES {
        advise_huge_pages(p.cast::<u8>(), layout.size());
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `n` `Line`s (the
    // layout `Vec<Line>` uses for capacity `n`), and all its bytes are zero, a valid `Line`.
    Some(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// [`try_zeroed_lines`] for infallible callers: a refused allocation aborts the process (as
/// `Vec` does). The runtime uses the `try_` constructors instead.
fn zeroed_lines(n: usize) -> Vec<Line> {
    try_zeroed_lines(n).unwrap_or_else(|| match std::alloc::Layout::array::<Line>(n) {
        Ok(layout) => std::alloc::handle_alloc_error(layout),
        Err(_) => panic!("AlignedBytes: {n} lines of {ALIGN} bytes exceed isize::MAX bytes"),
    })
}

/// Whether an allocation of `bytes` bytes (64-byte aligned) is possible now: the allocator is
/// asked for it and it is freed at once, untouched (on Linux a large request is an address
/// space reservation; an impossible one, larger than the system can ever map, is refused).
pub(crate) fn can_allocate(bytes: usize) -> bool {
    let Ok(layout) = std::alloc::Layout::from_size_align(bytes, ALIGN) else {
        return false;
    };
    if bytes == 0 {
        return true;
    }
    // SAFETY: `layout` has a non-zero size. `black_box` keeps the optimiser from eliding the
    // unused allocation (which would make every probe succeed).
    let p = std::hint::black_box(unsafe { std::alloc::alloc(layout) });
    if p.is_null() {
        return false;
    }
    // SAFETY: `p` was just allocated by the global allocator with `layout` and is not used.
    unsafe { std::alloc::dealloc(p, layout) };
    true
}

/// The output size from which [`check_outputs`] probes the allocator before a kernel runs.
pub(crate) const PROBE_MIN_BYTES: usize = 64 << 20;

/// Checks, before a kernel of `op` builds outputs of `shapes`, that each shape is within the
/// limits of [`crate::limits`] and, when they total at least [`PROBE_MIN_BYTES`], that the
/// allocator can provide that much ([`can_allocate`]), so that kernels which build their
/// outputs in ordinary `Vec`s do not abort the process: [`Error::Limit`] or
/// [`Error::OutOfMemory`] naming `op`. `op` is only formatted on failure: this runs before
/// every kernel step of every execution.
pub(crate) fn check_outputs(op: impl std::fmt::Display, shapes: &[Shape]) -> Result<()> {
    let mut total = 0usize;
    for s in shapes {
        s.check_limits().map_err(|e| match e {
            Error::Limit { msg, .. } => Error::limit(op.to_string(), format!("output {msg}")),
            other => other,
        })?;
        total = total.saturating_add(s.byte_size().unwrap_or(0));
    }
    if total >= PROBE_MIN_BYTES && !can_allocate(total) {
        return Err(Error::out_of_memory(op.to_string(), total));
    }
    Ok(())
}

/// Returns the allocator's free heap memory to the system where it can (glibc: `malloc_trim`,
/// which also releases free pages inside the heap, not only at its top). Large constants freed
/// during a compile would otherwise stay resident in the allocator's free lists.
pub(crate) fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only releases memory the allocator holds free; it takes no pointer
        // and is safe to call from any thread at any time.
        unsafe { malloc_trim(0) };
    }
}

/// Advises the kernel that the 2 MiB-aligned pages inside `[p, p + len)` may be backed by
/// transparent huge pages (a hint; failures are ignored).
#[cfg(target_os = "linux")]
fn advise_huge_pages(p: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    const MADV_HUGEPAGE: i32 = 14;
    unsafe extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    let head = p.align_offset(HUGE);
    if head >= len {
        return;
    }
    let span = (len - head) / HUGE * HUGE;
    if span > 0 {
        // SAFETY: `[p + head, p + head + span)` lies inside the live allocation `[p, p + len)`
        // and is page aligned; MADV_HUGEPAGE changes no contents, only how pages are backed.
        unsafe { madvise(p.add(head).cast(), span, MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_p: *mut u8, _len: usize) {}

/// Allocations smaller than this are freed normally (the allocator serves them fast).
pub const POOL_MIN_BYTES: usize = 1 << 16;

/// The environment variable capping the pool, in megabytes (`0` disables pooling); read when
/// the pool is first used. [`set_pool_cap`] changes the cap at run time.
pub use crate::env::POOL_ENV;

/// The pool's cap when `TENSORJIT_POOL_MB` is unset: 1 GiB.
pub const DEFAULT_POOL_CAP: usize = 1 << 30;

/// Counters and sizes of the buffer pool ([`pool_stats`]). The counters cover the whole process
/// since it started (or since [`reset_pool_stats`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of free allocations the pool holds now.
    pub held_bytes: usize,
    /// Number of free allocations the pool holds now.
    pub held_buffers: usize,
    /// Most bytes the pool has held at once.
    pub peak_held_bytes: usize,
    /// The cap: most bytes the pool may hold (0: pooling disabled).
    pub cap_bytes: usize,
    /// Allocations served from the pool (an allocation of the same size reused).
    pub hits: u64,
    /// Poolable allocations (at least [`POOL_MIN_BYTES`], pooling enabled) that found no free
    /// allocation of their size and went to the system allocator.
    pub misses: u64,
    /// Allocations handed back to the pool when their buffer was dropped.
    pub returned: u64,
    /// Held allocations freed to stay within the cap: the least recently returned ones, to make
    /// room for a newer one or when [`set_pool_cap`] lowered the cap.
    pub evictions: u64,
    /// Bytes of those evictions.
    pub evicted_bytes: u64,
    /// Dropped buffers freed at once because they alone exceed the cap (or pooling is off).
    pub over_cap: u64,
}

struct Pool {
    /// Free allocations by number of lines, each with its return sequence number; oldest first.
    /// A size's bin stays (empty) when its last allocation is taken, so that the steady state
    /// of an executable (the same sizes taken and returned each run) allocates no bins; bins
    /// of sizes no longer used are dropped once there are [`MAX_EMPTY_BINS`] empty ones.
    free: HashMap<usize, Vec<(u64, Vec<Line>)>>,
    /// The sequence numbers of every free allocation, oldest first, with their number of lines
    /// (the eviction order: least recently returned first).
    /// Sorted by sequence number (returns push at the back); its capacity is kept.
    order: VecDeque<(u64, usize)>,
    next_seq: u64,
    /// Counters; `held_bytes`, `held_buffers`, `peak_held_bytes` and `cap_bytes` kept current.
    stats: PoolStats,
}

impl Pool {
    /// Frees the least recently returned allocations until `held_bytes + room <= cap`; the
    /// evicted allocations go to `out` (freed by the caller, outside the lock).
    fn evict_for(&mut self, room: usize, out: &mut Vec<Vec<Line>>) {
        while self.stats.held_bytes + room > self.stats.cap_bytes {
            let Some((seq, lines)) = self.order.pop_front() else { break };
            let Some(bin) = self.free.get_mut(&lines) else { break };
            let Some(i) = bin.iter().position(|(s, _)| *s == seq) else { break };
            let (_, v) = bin.remove(i);
            if bin.is_empty() {
                self.free.remove(&lines);
            }
            let bytes = lines * ALIGN;
            self.stats.held_bytes -= bytes;
            self.stats.held_buffers -= 1;
            self.stats.evictions += 1;
            self.stats.evicted_bytes += bytes as u64;
            out.push(v);
        }
    }
}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cap = match crate::env::env_usize(POOL_ENV, 0, usize::MAX) {
            Ok(mb) => mb.map_or(DEFAULT_POOL_CAP, |mb| mb.saturating_mul(1 << 20)),
            Err(e) => {
                tracing::warn!(target: "tensorjit::memory", "{e}; using the default cap of 1024 MB");
                DEFAULT_POOL_CAP
            }
        };
        Mutex::new(Pool {
            free: HashMap::new(),
            order: VecDeque::new(),
            next_seq: 0,
            stats: PoolStats { cap_bytes: cap, ..PoolStats::default() },
        })
    })
}

/// Bins the pool holds before a new size drops the empty ones (see `Pool::free`).
const MAX_EMPTY_BINS: usize = 256;

fn lock_pool() -> std::sync::MutexGuard<'static, Pool> {
    pool().lock().unwrap_or_else(|e| e.into_inner())
}

/// A pooled allocation of exactly `lines` lines, if one is free.
fn take_pooled(lines: usize) -> Option<Vec<Line>> {
    if lines.saturating_mul(ALIGN) < POOL_MIN_BYTES {
        return None;
    }
    let mut p = lock_pool();
    if p.stats.cap_bytes == 0 {
        return None;
    }
    let Some((seq, v)) = p.free.get_mut(&lines).and_then(Vec::pop) else {
        p.stats.misses += 1;
        return None;
    };
    if let Ok(i) = p.order.binary_search_by_key(&seq, |&(s, _)| s) {
        p.order.remove(i);
    }
    p.stats.held_bytes -= lines * ALIGN;
    p.stats.held_buffers -= 1;
    p.stats.hits += 1;
    Some(v)
}

/// Hands a dropped allocation of `n` lines to the pool, evicting older ones to stay within the
/// cap; frees it instead when it alone exceeds the cap.
fn give_back(lines: Vec<Line>) {
    let n = lines.len();
    let bytes = n * ALIGN;
    let mut evicted = Vec::new();
    {
        let mut p = lock_pool();
        if bytes > p.stats.cap_bytes {
            p.stats.over_cap += 1;
            drop(p);
            drop(lines);
            return;
        }
        p.evict_for(bytes, &mut evicted);
        let seq = p.next_seq;
        p.next_seq += 1;
        p.order.push_back((seq, n));
        if !p.free.contains_key(&n) && p.free.len() >= MAX_EMPTY_BINS {
            p.free.retain(|_, bin| !bin.is_empty());
        }
        p.free.entry(n).or_default().push((seq, lines));
        p.stats.held_bytes += bytes;
        p.stats.held_buffers += 1;
        p.stats.returned += 1;
        p.stats.peak_held_bytes = p.stats.peak_held_bytes.max(p.stats.held_bytes);
    }
    if !evicted.is_empty() {
        tracing::trace!(target: "tensorjit::memory", evicted = evicted.len(), "buffer pool over its cap: evicted the oldest");
    }
}

/// The pool's sizes and counters.
pub fn pool_stats() -> PoolStats {
    lock_pool().stats
}

/// Zeroes the pool's counters (the peak restarts from what it holds now); sizes and the cap
/// are kept.
pub fn reset_pool_stats() {
    let mut p = lock_pool();
    let s = p.stats;
    p.stats = PoolStats {
        held_bytes: s.held_bytes,
        held_buffers: s.held_buffers,
        peak_held_bytes: s.held_bytes,
        cap_bytes: s.cap_bytes,
        ..PoolStats::default()
    };
}

/// The most bytes the pool may hold (`TENSORJIT_POOL_MB` megabytes, default 1 GiB, or what
/// [`set_pool_cap`] set).
pub fn pool_cap() -> usize {
    lock_pool().stats.cap_bytes
}

/// Sets the most bytes the pool may hold and returns the previous cap. Lowering it evicts the
/// least recently returned allocations at once; 0 frees everything and disables pooling (every
/// buffer is then freed when dropped).
pub fn set_pool_cap(bytes: usize) -> usize {
    let mut evicted = Vec::new();
    let prev = {
        let mut p = lock_pool();
        let prev = p.stats.cap_bytes;
        p.stats.cap_bytes = bytes;
        p.evict_for(0, &mut evicted);
        prev
    };
    tracing::debug!(target: "tensorjit::memory", cap = bytes, previous = prev, evicted = evicted.len(), "buffer pool cap set");
    prev
}

/// Bytes currently held by the pool (for tests and diagnostics; also in [`pool_stats`]).
pub fn pooled_bytes() -> usize {
    lock_pool().stats.held_bytes
}

/// Frees everything the pool holds (not counted as evictions).
pub fn release_pool() {
    let free = {
        let mut p = lock_pool();
        p.order.clear();
        p.stats.held_bytes = 0;
        p.stats.held_buffers = 0;
        std::mem::take(&mut p.free)
    };
    drop(free);
}

/// The little-endian bytes of a slice of elements, without copying (every target this crate
/// supports is little-endian).
pub(crate) fn element_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: every `Element` type is plain old data without padding (bool is one byte 0/1,
    // complex types are two packed floats), so its memory is `size_of_val(data)` initialised
    // bytes; the returned slice borrows `data` immutably for the same lifetime.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// Plain number types for which every bit pattern is a valid value.
pub(crate) trait AnyBits: Copy {}
impl AnyBits for f32 {}
impl AnyBits for u16 {}
impl AnyBits for i32 {}

/// `bytes` viewed as little-endian elements of `T` without copying, when the slice is aligned
/// for `T` and a whole number of elements (every target this crate supports is little-endian);
/// `None` otherwise (the caller decodes a copy instead).
pub(crate) fn view_as<T: AnyBits>(bytes: &[u8]) -> Option<&[T]> {
    // SAFETY: `align_to` returns a middle slice that is aligned for `T` and lies inside `bytes`
    // (borrowed immutably for the same lifetime); every bit pattern is a valid `T` (`AnyBits`
    // is implemented only for f32, u16 and i32), so reading the bytes as `T` is sound.
    let (head, mid, tail) = unsafe { bytes.align_to::<T>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}

/// `bytes` as little-endian f32 values: a view ([`view_as`]) when aligned, else a decoded copy.
pub(crate) fn f32s(bytes: &[u8]) -> std::borrow::Cow<'_, [f32]> {
    match view_as::<f32>(bytes) {
        Some(v) => std::borrow::Cow::Borrowed(v),
        None => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    }
}

/// Alignment a shared buffer's start must have to be viewed without a copy
/// ([`AlignedBytes::from_shared`]): at least the alignment of every element type.
const SHARED_ALIGN: usize = 16;

/// A 64-byte aligned byte buffer of a fixed length, or a read-only view of a shared byte buffer
/// aligned to at least 16 bytes (a module's constant: [`AlignedBytes::from_shared`]),
/// copied into aligned storage at the first mutable access.
#[derive(Clone)]
pub struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
    /// Whether dropping hands the allocation to the pool.
    pooled: bool,
    /// The shared bytes this views instead of `lines` (`lines` is then empty).
    shared: Option<Arc<Vec<u8>>>,
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        let n = self.lines.len();
        if !self.pooled || n * ALIGN < POOL_MIN_BYTES || self.lines.capacity() != n {
            return;
        }
        give_back(std::mem::take(&mut self.lines));
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBytes({} bytes)", self.len)
    }
}

impl AlignedBytes {
    /// `len` zero bytes (aborts the process if the allocator refuses; see [`Self::try_zeroed`]).
    pub fn zeroed(len: usize) -> AlignedBytes {
        let n = len.div_ceil(ALIGN);
        match take_pooled(n) {
            Some(mut lines) => {
                lines.fill(Line([0; ALIGN]));
                AlignedBytes { lines, len, pooled: true, shared: None }
            }
            None => AlignedBytes { lines: zeroed_lines(n), len, pooled: true, shared: None },
        }
    }

    /// `len` zero bytes, or [`Error::OutOfMemory`] if the allocator refuses (pooled and advised
    /// to use huge pages like [`Self::zeroed`]).
    pub fn try_zeroed(len: usize) -> Result<AlignedBytes> {
        let n = len.div_ceil(ALIGN);
        match take_pooled(n) {
            Some(mut lines) => {
                lines.fill(Line([0; ALIGN]));
                Ok(AlignedBytes { lines, len, pooled: true, shared: None })
            }
            None => try_zeroed_lines(n)
                .map(|lines| AlignedBytes { lines, len, pooled: true, shared: None })
                .ok_or_else(|| Error::out_of_memory("tensor buffer", len)),
        }
    }

    /// [`Self::recycled`], or [`Error::OutOfMemory`] if the allocator refuses.
    pub fn try_recycled(len: usize) -> Result<AlignedBytes> {
        let n = len.div_ceil(ALIGN);
        match take_pooled(n) {
            Some(lines) => Ok(AlignedBytes { lines, len, pooled: true, shared: None }),
            None => try_zeroed_lines(n)
                .map(|lines| AlignedBytes { lines, len, pooled: true, shared: None })
                .ok_or_else(|| Error::out_of_memory("tensor buffer", len)),
        }
    }

    /// `len` zero bytes that are freed normally when dropped (never pooled).
    fn unpooled(len: usize) -> AlignedBytes {
        AlignedBytes { lines: zeroed_lines(len.div_ceil(ALIGN)), len, pooled: false, shared: None }
    }

    /// `len` bytes of unspecified (but initialised) content: a pooled allocation as its last
    /// user left it, or fresh zeroes. For outputs a kernel overwrites entirely.
    pub fn recycled(len: usize) -> AlignedBytes {
        let n = len.div_ceil(ALIGN);
        match take_pooled(n) {
            Some(lines) => AlignedBytes { lines, len, pooled: true, shared: None },
            None => AlignedBytes { lines: zeroed_lines(n), len, pooled: true, shared: None },
        }
    }

    /// A copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> AlignedBytes {
        let mut a = AlignedBytes::unpooled(bytes.len());
        a.as_bytes_mut().copy_from_slice(bytes);
        a
    }

    /// A copy of a typed slice.
    pub fn from_slice<T: Element>(data: &[T]) -> AlignedBytes {
        let mut a = AlignedBytes::unpooled(std::mem::size_of_val(data));
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

    /// A view of `bytes` without a copy when its start is aligned to 16 bytes (so
    /// [`Self::typed`] holds for every element type), else a copy. Read-only: the first
    /// mutable access copies the bytes into storage of its own.
    pub fn from_shared(bytes: &Arc<Vec<u8>>) -> AlignedBytes {
        if (bytes.as_ptr() as usize).is_multiple_of(SHARED_ALIGN) {
            AlignedBytes { lines: Vec::new(), len: bytes.len(), pooled: false, shared: Some(bytes.clone()) }
        } else {
            AlignedBytes::from_bytes(bytes)
        }
    }

    /// Whether this views a shared buffer ([`Self::from_shared`]) instead of owning its bytes.
    pub fn is_shared_view(&self) -> bool {
        self.shared.is_some()
    }

    /// Copies viewed shared bytes into storage of its own (before a mutable access).
    fn own(&mut self) {
        if let Some(b) = self.shared.take() {
            let mut a = AlignedBytes::unpooled(b.len());
            a.as_bytes_mut().copy_from_slice(&b);
            self.lines = std::mem::take(&mut a.lines);
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        if let Some(b) = &self.shared {
            return &b[..self.len];
        }
        // SAFETY: `lines` is a contiguous allocation of `lines.len() * ALIGN >= len` initialised
        // bytes (`Line` is a plain byte array with no padding), borrowed immutably for `&self`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.own();
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
        // SAFETY: the bytes start 64-byte aligned (`lines`) or SHARED_ALIGN-aligned (a shared
        // view, checked by `from_shared`), ≥ align_of::<T>() for every Element type; they are
        // `n * size_of::<T>()` initialised bytes borrowed for `&self`, and every Element type
        // except bool is plain old data valid for any bit pattern; bool buffers only ever hold
        // 0/1 bytes (checked where bytes enter from outside, and kernels write bool values).
        unsafe { std::slice::from_raw_parts(self.as_ptr().cast::<T>(), n) }
    }

    /// The data viewed mutably as elements of `T`.
    pub fn typed_mut<T: Element>(&mut self) -> &mut [T] {
        let n = self.len / std::mem::size_of::<T>();
        assert_eq!(
            n * std::mem::size_of::<T>(),
            self.len,
            "AlignedBytes::typed_mut: length not a multiple of the element size"
        );
        self.own();
        // SAFETY: as in `typed` (`lines`, after `own`), with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), n) }
    }

    /// Pointer to the first byte (for kernels).
    pub fn as_ptr(&self) -> *const u8 {
        match &self.shared {
            Some(b) => b.as_ptr(),
            None => self.lines.as_ptr().cast(),
        }
    }

    /// Mutable pointer to the first byte (for kernels; a shared view is copied first).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.own();
        self.lines.as_mut_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_view_reads_without_copying_and_copies_on_write() {
        // The allocator returns 16-aligned storage on the usual targets: a view (elsewhere a
        // copy; the results are the same).
        let src: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let shared = Arc::new(src.clone());
        let mut a = AlignedBytes::from_shared(&shared);
        if (shared.as_ptr() as usize).is_multiple_of(SHARED_ALIGN) {
            assert!(a.is_shared_view());
            assert_eq!(a.as_ptr(), shared.as_ptr());
        }
        assert_eq!(a.as_bytes(), &src[..]);
        assert_eq!(a.typed::<u32>()[1], u32::from_le_bytes([src[4], src[5], src[6], src[7]]));
        a.as_bytes_mut()[0] = 77;
        assert!(!a.is_shared_view());
        assert_eq!(a.as_bytes()[0], 77);
        assert_eq!(a.as_bytes()[1..], src[1..]);
        assert_eq!(shared[0], src[0], "the shared bytes are never written");
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
    }

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

    #[test]
    fn huge_page_sized_allocations_are_zeroed_aligned_and_usable() {
        // Sizes above HUGE_MIN_BYTES take the zeroed-allocation + madvise path; an odd number of
        // lines so the advised span does not cover the whole allocation.
        let len = HUGE_MIN_BYTES + 2 * (2 << 20) + 13 * ALIGN + 5;
        let mut a = AlignedBytes::unpooled(len);
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        assert_eq!(a.len(), len);
        assert!(a.as_bytes().iter().all(|&b| b == 0));
        a.as_bytes_mut()[len - 1] = 7;
        a.as_bytes_mut()[0] = 9;
        assert_eq!((a.as_bytes()[0], a.as_bytes()[len / 2], a.as_bytes()[len - 1]), (9, 0, 7));
        let data: Vec<u32> = (0..(HUGE_MIN_BYTES / 4 + 3) as u32).collect();
        let b = AlignedBytes::from_slice(&data);
        assert_eq!(b.typed::<u32>(), &data[..]);
    }

    #[test]
    fn impossible_allocations_are_errors() {
        // 2^45 bytes (32 TiB) is more than any machine here can map; isize::MAX + 1 is more
        // than any Rust allocation can describe.
        for len in [1usize << 45, (isize::MAX as usize) + 1, usize::MAX] {
            assert!(matches!(AlignedBytes::try_zeroed(len), Err(Error::OutOfMemory { bytes, .. }) if bytes == len));
            assert!(matches!(AlignedBytes::try_recycled(len), Err(Error::OutOfMemory { .. })));
            assert!(!can_allocate(len));
        }
        let a = AlignedBytes::try_zeroed(100).unwrap();
        assert_eq!((a.len(), a.as_ptr() as usize % ALIGN), (100, 0));
        assert!(a.as_bytes().iter().all(|&b| b == 0));
        assert!(can_allocate(0) && can_allocate(4096));
        let big = Shape::new(crate::ir::dtype::DType::Float32, &[1 << 43]);
        match check_outputs("pad", &[big]) {
            Err(Error::OutOfMemory { op, bytes }) => assert_eq!((op.as_str(), bytes), ("pad", 1 << 45)),
            other => panic!("{other:?}"),
        }
        let over = Shape::new(crate::ir::dtype::DType::Float32, &[1 << 62]);
        assert!(matches!(check_outputs("iota", &[over]), Err(Error::Limit { what, .. }) if what == "iota"));
        assert!(check_outputs("add", &[Shape::new(crate::ir::dtype::DType::Float32, &[1 << 20])]).is_ok());
    }

    #[test]
    fn large_allocations_are_recycled_and_zeroed_on_request() {
        // A size no other test uses, so concurrent tests do not take this allocation.
        let len = POOL_MIN_BYTES * 3 + 7 * ALIGN;
        let mut a = AlignedBytes::zeroed(len);
        a.as_bytes_mut().fill(0xAB);
        let p = a.as_ptr();
        drop(a);
        let b = AlignedBytes::recycled(len);
        assert_eq!(b.as_ptr(), p, "the released allocation is reused");
        assert_eq!(b.as_bytes()[len - 1], 0xAB, "recycled keeps the old content");
        assert_eq!(b.len(), len);
        drop(b);
        let c = AlignedBytes::zeroed(len);
        assert_eq!(c.as_ptr(), p);
        assert!(c.as_bytes().iter().all(|&x| x == 0), "zeroed clears a pooled allocation");
    }
}
