//! Process-wide sharing of compiled constants: executables compiled from the same weights (one
//! model compiled for several shape buckets, or loaded twice) hold one copy of each large
//! constant and of each pre-packed GEMM operand instead of one per executable.
//!
//! Entries are found by the length of the constant's bytes, a tag naming the compiled form
//! (dtype, dims, packing geometry) and a fingerprint of a few sampled kilobytes of the bytes
//! (cheap: distinct weights of the same shape almost never share one), then matched in two
//! ways:
//! - by identity: the same source buffer (the `Arc` a module's Constant holds: a module compiled
//!   again, or cloned for another shape) is the same bytes, with no hashing at all;
//! - by content: the BLAKE3 hash of the bytes (a cryptographic hash: no crafted model can make
//!   its weights collide with another's). It is computed only when an entry of the same length,
//!   form and fingerprint already exists; an entry's own hash is computed on a background
//!   thread (holding its source until then), so that a first compile never waits for hashing.
//!   That thread starts on a job only once no compile is in progress ([`Compiling`]; or after
//!   [`HASH_PATIENCE`] at most): on a machine with one free core, hashing the weights beside
//!   the compile that packed them took as long again out of that compile. A source whose
//!   compiled form is a copy (a packed operand) is held by that thread only while such sources
//!   waiting add up to at most [`PENDING_MAX`]; past it the compile hashes the source itself, so
//!   that the source is freed once packed instead of living beside its packed copy until the
//!   compile ends.
//!
//! A compiled constant may also be made from several source buffers read as one (the weights of
//! dense layers merged into one product, packed side by side, [`shared_blocks`]): its length and
//! fingerprint cover them all, identity means the same buffers in the same order, and its
//! content hash is of their bytes one after the other (the tag names how they are put together).
//!
//! Entries are held weakly: an entry lives as long as some executable uses it, and the cache
//! never keeps memory alive by itself. Constants smaller than [`MIN_SHARED_BYTES`] are copied
//! (sharing them costs more than it saves).

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::memory::AlignedBytes;

/// Constants at least this large are shared.
pub const MIN_SHARED_BYTES: usize = 64 * 1024;

/// The tag of a constant's own bytes as its compiled form ([`constant`]): a view of the source,
/// not a copy of it.
const RAW: &str = "raw";

/// Where entries are looked up: the source's length, the tag naming the compiled form ([`RAW`],
/// or the packing geometry) and the source's [`fingerprint`].
type Key = (usize, String, u64);

/// A hash of 64 evenly spaced 64-byte samples of `b` and its last 64 bytes (not of every byte:
/// a pre-filter, equal bytes have equal fingerprints; matches are confirmed by BLAKE3).
fn fingerprint_all(parts: &[Arc<Vec<u8>>]) -> u64 {
    match parts {
        [one] => fingerprint(one),
        _ => {
            let mut h = xxhash_rust::xxh64::Xxh64::new(parts.len() as u64);
            for p in parts {
                h.update(&fingerprint(p).to_le_bytes());
            }
            h.digest()
        }
    }
}

fn fingerprint(b: &[u8]) -> u64 {
    const CHUNK: usize = 64;
    const SAMPLES: usize = 64;
    let mut h = xxhash_rust::xxh64::Xxh64::new(b.len() as u64);
    let step = (b.len() / SAMPLES).max(1);
    for i in 0..SAMPLES {
        let o = (i * step).min(b.len());
        h.update(&b[o..(o + CHUNK).min(b.len())]);
    }
    h.update(&b[b.len().saturating_sub(CHUNK)..]);
    h.digest()
}

/// The content hash of an entry's source: pending until the background hasher (or a lookup
/// that needed it) sets it; `None` once set means it could not be computed.
#[derive(Default)]
pub(crate) struct Digest {
    value: Mutex<Option<Option<[u8; 32]>>>,
    ready: Condvar,
}

impl Digest {
    fn known(d: [u8; 32]) -> Arc<Digest> {
        Arc::new(Digest { value: Mutex::new(Some(Some(d))), ready: Condvar::new() })
    }

    /// The hash if it is set (`Some(None)`: could not be computed), without waiting.
    fn peek(&self) -> Option<Option<[u8; 32]>> {
        *self.value.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, d: Option<[u8; 32]>) {
        let mut v = self.value.lock().unwrap_or_else(|e| e.into_inner());
        if v.is_none() {
            *v = Some(d);
        }
        self.ready.notify_all();
    }

    /// The hash, waiting for the background hasher when it is still pending.
    fn wait(&self) -> Option<[u8; 32]> {
        let mut v = self.value.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(d) = *v {
                return d;
            }
            v = self.ready.wait(v).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The sources of an entry, held weakly.
type Sources = Vec<Weak<Vec<u8>>>;

struct Entry {
    value: Weak<dyn Any + Send + Sync>,
    /// The sources the entry was made from: a lookup with the same live sources is a hit.
    sources: Sources,
    digest: Arc<Digest>,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<Key, Vec<Entry>>,
    /// Entries stored since the last sweep of dead ones.
    since_sweep: usize,
    hits: u64,
    misses: u64,
    /// Bytes of compiled constants served from the cache instead of being made again.
    bytes_saved: u64,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Cache::default()))
}

/// Counters of the process-wide constant cache (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConstantCacheStats {
    /// Entries some executable still uses.
    pub live_entries: usize,
    /// Compiled constants served from the cache.
    pub hits: u64,
    /// Compiled constants made and added to the cache.
    pub misses: u64,
    /// Bytes not allocated thanks to the hits.
    pub bytes_saved: u64,
}

/// The cache's counters now.
pub fn constant_cache_stats() -> ConstantCacheStats {
    let c = cache().lock().unwrap_or_else(|e| e.into_inner());
    ConstantCacheStats {
        live_entries: c.entries.values().flatten().filter(|e| e.value.strong_count() > 0).count(),
        hits: c.hits,
        misses: c.misses,
        bytes_saved: c.bytes_saved,
    }
}

/// What [`shared`] calls cost one compile: time spent hashing, and the compiled constants'
/// bytes made by it (`owned_bytes`) or served by the cache (`shared_bytes`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Accounting {
    pub hashing: Duration,
    pub owned_bytes: usize,
    pub shared_bytes: usize,
    pub buffers: usize,
}

impl Accounting {
    /// Adds `other`'s figures to these.
    pub(crate) fn add(&mut self, other: &Accounting) {
        self.hashing += other.hashing;
        self.owned_bytes += other.owned_bytes;
        self.shared_bytes += other.shared_bytes;
        self.buffers += other.buffers;
    }
}

/// The compiled form `tag` of the constant `source`, shared with every other executable that
/// asked for the same form of the same bytes and still holds it; `make` builds it on a miss
/// (called without the cache's lock held, so two threads may build the same entry at once: both
/// are used, and the later one is the one found afterwards). `size` gives an entry's bytes.
pub(crate) fn shared<T, E>(
    source: &Arc<Vec<u8>>,
    tag: String,
    size: impl Fn(&T) -> usize,
    make: impl FnOnce() -> Result<T, E>,
    acct: &mut Accounting,
) -> Result<Arc<T>, E>
where
    T: Any + Send + Sync,
{
    shared_blocks(std::slice::from_ref(source), tag, size, make, acct)
}

/// [`shared`] for a compiled form made from several sources read as one (`tag` must say how
/// they are put together: the sizes of the parts, the axis): found again from the same
/// buffers in the same order, or from equal bytes split the same way.
pub(crate) fn shared_blocks<T, E>(
    sources: &[Arc<Vec<u8>>],
    tag: String,
    size: impl Fn(&T) -> usize,
    make: impl FnOnce() -> Result<T, E>,
    acct: &mut Accounting,
) -> Result<Arc<T>, E>
where
    T: Any + Send + Sync,
{
    let (v, hit) = shared_inner(sources, tag, &size, make, acct)?;
    acct.buffers += 1;
    if hit {
        acct.shared_bytes += size(&v);
    } else {
        acct.owned_bytes += size(&v);
    }
    Ok(v)
}

fn lock() -> std::sync::MutexGuard<'static, Cache> {
    cache().lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a hit on `found`.
fn hit<T: Any + Send + Sync>(c: &mut Cache, found: Arc<T>, size: &impl Fn(&T) -> usize) -> (Arc<T>, bool) {
    c.hits += 1;
    c.bytes_saved += size(&found) as u64;
    (found, true)
}

/// The live entry of `key` made from these very `sources`, if any (an entry's `Weak`s keep the
/// addresses of its sources' `Arc`s from being reused, so equal pointers are the same buffers).
fn by_identity<T: Any + Send + Sync>(c: &Cache, key: &Key, sources: &[Arc<Vec<u8>>]) -> Option<Arc<T>> {
    c.entries.get(key)?.iter().find_map(|e| {
        let same = e.sources.len() == sources.len()
            && e.sources.iter().zip(sources).all(|(w, s)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(s)));
        if !same {
            return None;
        }
        e.value.upgrade()?.downcast::<T>().ok()
    })
}

/// [`shared`]'s lookup: the entry, and whether it came from the cache.
fn shared_inner<T, E>(
    sources: &[Arc<Vec<u8>>],
    tag: String,
    size: &impl Fn(&T) -> usize,
    make: impl FnOnce() -> Result<T, E>,
    acct: &mut Accounting,
) -> Result<(Arc<T>, bool), E>
where
    T: Any + Send + Sync,
{
    let len: usize = sources.iter().map(|s| s.len()).sum();
    if len < MIN_SHARED_BYTES {
        return make().map(|v| (Arc::new(v), false));
    }
    let key: Key = (len, tag, fingerprint_all(sources));
    // Candidates by content: the digests (and sources) of live entries of the same key.
    let candidates: Vec<(Arc<Digest>, Sources)> = {
        let mut c = lock();
        if let Some(found) = by_identity::<T>(&c, &key, sources) {
            return Ok(hit(&mut c, found, size));
        }
        let live = c.entries.get(&key).into_iter().flatten().filter(|e| e.value.strong_count() > 0);
        live.map(|e| (e.digest.clone(), e.sources.clone())).collect()
    };
    let mut digest = None;
    if !candidates.is_empty() {
        let d = timed_hash(sources, acct);
        digest = Some(d);
        for (cand, cand_sources) in &candidates {
            // A candidate's hash: known, or computed here while its sources are alive (its own
            // compile may still be running), else the background hasher's (which holds the
            // sources until it is done).
            let alive: Option<Vec<Arc<Vec<u8>>>> = cand_sources.iter().map(Weak::upgrade).collect();
            let theirs = match (cand.peek(), alive) {
                (Some(h), _) => h,
                (None, Some(src)) => {
                    let h = timed_hash(&src, acct);
                    cand.set(Some(h));
                    Some(h)
                }
                (None, None) => cand.wait(),
            };
            if theirs != Some(d) {
                continue;
            }
            let mut c = lock();
            let found =
                c.entries.get(&key).into_iter().flatten().find_map(|e| {
                    Arc::ptr_eq(&e.digest, cand).then(|| e.value.upgrade()?.downcast::<T>().ok()).flatten()
                });
            if let Some(found) = found {
                return Ok(hit(&mut c, found, size));
            }
        }
    }
    let raw = key.1 == RAW;
    let made = Arc::new(make()?);
    // A compiled form other than the raw bytes is a copy: the background hasher would keep its
    // source alive beside it until the compile ends. Past PENDING_MAX of such sources waiting,
    // the hash is taken here, so that each source can be freed once compiled (BERT-base: peak
    // RSS of the compile 0.8 GB, sources and packed operands together, instead of one of them).
    let digest = match digest {
        None if !raw && !reserve_pending(len) => Some(timed_hash(sources, acct)),
        d => d,
    };
    let mut c = lock();
    c.misses += 1;
    let as_any: Arc<dyn Any + Send + Sync> = made.clone();
    let d = match digest {
        Some(d) => Digest::known(d),
        None => {
            let d = Arc::new(Digest::default());
            hash_in_background(sources.to_vec(), d.clone(), if raw { 0 } else { len });
            d
        }
    };
    c.entries.entry(key).or_default().push(Entry {
        value: Arc::downgrade(&as_any),
        sources: sources.iter().map(Arc::downgrade).collect(),
        digest: d,
    });
    // Forget entries nobody uses any more, every 64 new entries.
    c.since_sweep += 1;
    if c.since_sweep >= 64 {
        c.since_sweep = 0;
        c.entries.retain(|_, es| {
            es.retain(|e| e.value.strong_count() > 0);
            !es.is_empty()
        });
    }
    Ok((made, false))
}

fn timed_hash(parts: &[Arc<Vec<u8>>], acct: &mut Accounting) -> [u8; 32] {
    let t = Instant::now();
    let d = hash_all(parts);
    acct.hashing += t.elapsed();
    d
}

/// The BLAKE3 hash of the bytes of `parts` one after the other.
fn hash_all(parts: &[Arc<Vec<u8>>]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
    }
    *h.finalize().as_bytes()
}

/// The longest the background hasher waits for compiles in progress before hashing anyway
/// (its jobs hold their sources' bytes: they must not wait without end).
pub(crate) const HASH_PATIENCE: Duration = Duration::from_millis(500);

/// The number of compiles in progress, and its changes.
fn compiles() -> &'static (Mutex<usize>, Condvar) {
    static COMPILES: OnceLock<(Mutex<usize>, Condvar)> = OnceLock::new();
    COMPILES.get_or_init(|| (Mutex::new(0), Condvar::new()))
}

/// Marks a compile in progress while it lives (see the module doc): the background hasher
/// waits for none to be before its next job.
pub(crate) struct Compiling(());

impl Compiling {
    pub(crate) fn start() -> Compiling {
        let (n, _) = compiles();
        *n.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Compiling(())
    }
}

impl Drop for Compiling {
    fn drop(&mut self) {
        let (n, changed) = compiles();
        let mut n = n.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        changed.notify_all();
    }
}

/// Waits until no compile is in progress, or [`HASH_PATIENCE`] has passed.
fn wait_for_compiles() {
    let (n, changed) = compiles();
    let deadline = Instant::now() + HASH_PATIENCE;
    let mut n = n.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        n = changed.wait_timeout(n, left).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// Most bytes of copied sources (see `shared_inner`) the background hasher may hold at once.
const PENDING_MAX: usize = 64 << 20;

/// Bytes of copied sources the background hasher holds.
static PENDING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Reserves `bytes` of [`PENDING_MAX`] for a background hash; false when they do not fit.
fn reserve_pending(bytes: usize) -> bool {
    use std::sync::atomic::Ordering;
    PENDING
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| p.checked_add(bytes).filter(|&t| t <= PENDING_MAX))
        .is_ok()
}

/// A source waiting for its hash, and the bytes it reserved of [`PENDING_MAX`]; dropped unhashed
/// (the hasher stopped), it marks the hash unknown so that no lookup waits for it forever.
struct HashJob(Vec<Arc<Vec<u8>>>, Arc<Digest>, usize);

impl Drop for HashJob {
    fn drop(&mut self) {
        self.1.set(None);
        PENDING.fetch_sub(self.2, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Hashes `sources` into `digest` on the process's background hashing thread (started at the
/// first call, idle while there is nothing to hash), which holds the sources until then; inline
/// when no thread can be started.
fn hash_in_background(sources: Vec<Arc<Vec<u8>>>, digest: Arc<Digest>, reserved: usize) {
    static HASHER: OnceLock<Option<Mutex<std::sync::mpsc::Sender<HashJob>>>> = OnceLock::new();
    let sender = HASHER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<HashJob>();
        let spawned = std::thread::Builder::new().name("tensorjit-hash".into()).spawn(move || {
            for job in rx {
                wait_for_compiles();
                job.1.set(Some(hash_all(&job.0)));
                drop(job);
                queued(-1);
            }
        });
        spawned.ok().map(|_| Mutex::new(tx))
    });
    let job = HashJob(sources, digest, reserved);
    let job = match sender {
        Some(tx) => {
            queued(1);
            match tx.lock().unwrap_or_else(|e| e.into_inner()).send(job) {
                Ok(()) => return,
                Err(e) => {
                    queued(-1);
                    e.0
                }
            }
        }
        None => job,
    };
    job.1.set(Some(hash_all(&job.0)));
}

/// The number of sources waiting for the background hasher, and its changes.
fn queue() -> &'static (Mutex<usize>, Condvar) {
    static QUEUE: OnceLock<(Mutex<usize>, Condvar)> = OnceLock::new();
    QUEUE.get_or_init(|| (Mutex::new(0), Condvar::new()))
}

fn queued(delta: isize) {
    let (n, changed) = queue();
    let mut n = n.lock().unwrap_or_else(|e| e.into_inner());
    *n = n.saturating_add_signed(delta);
    changed.notify_all();
}

/// Waits until the background hasher of the constant cache is idle: every cache entry made so
/// far has its hash, and the hasher holds no constant's bytes any more (for memory figures
/// taken right after a compile; see the module doc).
pub fn wait_for_constant_hashing() {
    let (n, changed) = queue();
    let mut n = n.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        n = changed.wait(n).unwrap_or_else(|e| e.into_inner());
    }
}

/// A constant's bytes as tensor storage (a view of `bytes` when aligned, else a copy), shared
/// with other executables (see [`shared`]).
pub(crate) fn constant(bytes: &Arc<Vec<u8>>, acct: &mut Accounting) -> Arc<AlignedBytes> {
    let made: Result<Arc<AlignedBytes>, std::convert::Infallible> =
        shared(bytes, RAW.to_string(), AlignedBytes::len, || Ok(AlignedBytes::from_shared(bytes)), acct);
    match made {
        Ok(a) => a,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Accounting, MIN_SHARED_BYTES, PENDING_MAX, constant, shared, shared_blocks};

    #[test]
    fn equal_bytes_share_one_copy_while_someone_holds_it() {
        // Bytes no other test uses (the cache is process-wide).
        let a: Arc<Vec<u8>> = Arc::new((0..MIN_SHARED_BYTES + 7).map(|i| (i * 31 % 251) as u8).collect());
        let mut b: Vec<u8> = a.to_vec();
        let mut acct = Accounting::default();
        let x = constant(&a, &mut acct);
        assert_eq!((acct.owned_bytes, acct.shared_bytes, acct.buffers), (a.len(), 0, 1));
        // The same source again: found by identity, without hashing (the first entry of its
        // size is hashed in the background).
        let again = constant(&a, &mut acct);
        assert!(Arc::ptr_eq(&x, &again));
        assert_eq!(acct.hashing, std::time::Duration::ZERO);
        // Equal bytes from another buffer: found by content.
        let y = constant(&Arc::new(b.clone()), &mut acct);
        assert_eq!((acct.owned_bytes, acct.shared_bytes, acct.buffers), (a.len(), 2 * a.len(), 3));
        assert!(Arc::ptr_eq(&x, &y));
        assert_eq!(x.as_bytes(), &a[..]);
        // One byte differs: another entry.
        b[MIN_SHARED_BYTES / 2] ^= 1;
        let z = constant(&Arc::new(b.clone()), &mut acct);
        assert!(!Arc::ptr_eq(&x, &z));
        assert_eq!(z.as_bytes(), &b[..]);
        // Another compiled form of the same bytes is another entry.
        let reversed = || Ok::<_, ()>(a.iter().rev().copied().collect::<Vec<u8>>());
        let packed: Arc<Vec<u8>> = shared(&a, "reversed".into(), Vec::len, reversed, &mut acct).unwrap();
        assert_eq!(packed[0], a[a.len() - 1]);
        // The cache holds no strong reference: once every holder is gone the copy is freed, and
        // asking again makes a new one.
        let weak = Arc::downgrade(&x);
        drop((x, y, again));
        assert!(weak.upgrade().is_none());
        let w = constant(&a, &mut acct);
        assert_eq!(w.as_bytes(), &a[..]);
    }

    #[test]
    fn a_copied_form_past_the_pending_budget_lets_go_of_its_source() {
        // More source bytes than the background hasher may hold: the hash is taken inline, the
        // source's only holder afterwards is its owner (it can be freed once compiled), and the
        // entry is found by content at once.
        let a: Arc<Vec<u8>> = Arc::new((0..PENDING_MAX + 5).map(|i| (i * 37 % 241) as u8).collect());
        let mut acct = Accounting::default();
        let copy = || Ok::<_, ()>(a.iter().map(|v| v ^ 0x5a).collect::<Vec<u8>>());
        let x: Arc<Vec<u8>> = shared(&a, "xor".into(), Vec::len, copy, &mut acct).unwrap();
        assert_eq!(Arc::strong_count(&a), 1, "no hashing job holds the source");
        assert!(acct.hashing > std::time::Duration::ZERO, "hashed inline");
        let b = Arc::new(a.to_vec());
        let copy_b = || Ok::<_, ()>(b.iter().map(|v| v ^ 0x5a).collect::<Vec<u8>>());
        let y: Arc<Vec<u8>> = shared(&b, "xor".into(), Vec::len, copy_b, &mut acct).unwrap();
        assert!(Arc::ptr_eq(&x, &y));
    }

    #[test]
    fn forms_made_of_several_sources() {
        // Bytes no other test uses (the cache is process-wide).
        let part = |seed: usize| -> Arc<Vec<u8>> {
            Arc::new((0..MIN_SHARED_BYTES / 2 + 11).map(|i| ((i * 7 + seed * 13) % 253) as u8).collect())
        };
        let (a, b) = (part(1), part(2));
        let joined = |p: &[Arc<Vec<u8>>]| Ok::<_, ()>(p.iter().flat_map(|x| x.iter().copied()).collect::<Vec<u8>>());
        let mut acct = Accounting::default();
        let both = [a.clone(), b.clone()];
        let x: Arc<Vec<u8>> = shared_blocks(&both, "joined".into(), Vec::len, || joined(&both), &mut acct).unwrap();
        assert_eq!(x.len(), a.len() + b.len());
        assert_eq!(acct.owned_bytes, x.len());
        // The same buffers: found by identity, without hashing.
        let again = shared_blocks(&both, "joined".into(), Vec::len, || joined(&both), &mut acct).unwrap();
        assert!(Arc::ptr_eq(&x, &again));
        assert_eq!(acct.hashing, std::time::Duration::ZERO);
        // Equal bytes in other buffers, split the same way: found by content.
        let copies = [Arc::new(a.to_vec()), Arc::new(b.to_vec())];
        let y = shared_blocks(&copies, "joined".into(), Vec::len, || joined(&copies), &mut acct).unwrap();
        assert!(Arc::ptr_eq(&x, &y));
        // The same buffers in the other order, or one part changed: other entries.
        let swapped = [b.clone(), a.clone()];
        let z = shared_blocks(&swapped, "joined".into(), Vec::len, || joined(&swapped), &mut acct).unwrap();
        assert!(!Arc::ptr_eq(&x, &z));
        assert_eq!(&z[..b.len()], &b[..]);
        let mut changed = b.to_vec();
        changed[5] ^= 1;
        let other = [a.clone(), Arc::new(changed)];
        let w = shared_blocks(&other, "joined".into(), Vec::len, || joined(&other), &mut acct).unwrap();
        assert!(!Arc::ptr_eq(&x, &w));
        assert_eq!(w[a.len() + 5], b[5] ^ 1);
        // The first part alone is another source.
        let first: Arc<Vec<u8>> =
            shared(&a, "joined".into(), Vec::len, || joined(std::slice::from_ref(&a)), &mut acct).unwrap();
        assert_eq!(first.len(), a.len());
    }

    #[test]
    fn small_constants_are_copied() {
        let a = Arc::new(vec![7u8; 100]);
        let mut acct = Accounting::default();
        assert!(!Arc::ptr_eq(&constant(&a, &mut acct), &constant(&a, &mut acct)));
        assert_eq!((acct.owned_bytes, acct.shared_bytes), (200, 0));
    }
}
