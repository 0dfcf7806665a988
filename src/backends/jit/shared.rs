//! Process-wide sharing of compiled constants: executables compiled from the same weights (one
//! model compiled for several shape buckets, or loaded twice) hold one copy of each large
//! constant and of each pre-packed GEMM operand instead of one per executable.
//!
//! Entries are keyed by the BLAKE3 hash of the constant's bytes (a cryptographic hash: no crafted
//! model can make its weights collide with another's) plus what the compiled form depends on
//! (dtype, dims, packing geometry), and held weakly: an entry lives as long as some executable
//! uses it, and the cache never keeps memory alive by itself. Constants smaller than
//! [`MIN_SHARED_BYTES`] are copied (hashing them costs more than it saves).

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::memory::AlignedBytes;

/// Constants at least this large are shared.
pub const MIN_SHARED_BYTES: usize = 64 * 1024;

/// The key of a shared entry: the content hash of the source bytes, their length, and a tag
/// naming the compiled form (`"raw"`, or the packing geometry).
type Key = ([u8; 32], usize, String);

#[derive(Default)]
struct Cache {
    entries: HashMap<Key, Weak<dyn Any + Send + Sync>>,
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
        live_entries: c.entries.values().filter(|w| w.strong_count() > 0).count(),
        hits: c.hits,
        misses: c.misses,
        bytes_saved: c.bytes_saved,
    }
}

/// The compiled form `tag` of the constant `source`, shared with every other executable that
/// asked for the same form of the same bytes and still holds it; `make` builds it on a miss
/// (called without the cache's lock held, so two threads may build the same entry at once: the
/// first one stored wins, the other is used once and dropped). `size` gives an entry's bytes
/// for the statistics.
pub(crate) fn shared<T, E>(
    source: &[u8],
    tag: String,
    size: impl Fn(&T) -> usize,
    make: impl FnOnce() -> Result<T, E>,
) -> Result<Arc<T>, E>
where
    T: Any + Send + Sync,
{
    if source.len() < MIN_SHARED_BYTES {
        return make().map(Arc::new);
    }
    let key: Key = (*blake3::hash(source).as_bytes(), source.len(), tag);
    let lock = || cache().lock().unwrap_or_else(|e| e.into_inner());
    // A live entry of the key, counted as a hit.
    let hit = |c: &mut Cache| {
        let found = c.entries.get(&key).and_then(Weak::upgrade).and_then(|a| a.downcast::<T>().ok())?;
        c.hits += 1;
        c.bytes_saved += size(&found) as u64;
        Some(found)
    };
    if let Some(found) = hit(&mut lock()) {
        return Ok(found);
    }
    let made = Arc::new(make()?);
    let mut c = lock();
    // Another thread may have stored the same entry meanwhile: use it.
    if let Some(other) = hit(&mut c) {
        return Ok(other);
    }
    c.misses += 1;
    let as_any: Arc<dyn Any + Send + Sync> = made.clone();
    c.entries.insert(key, Arc::downgrade(&as_any));
    // Forget entries nobody uses any more, whenever the table has doubled since the last sweep.
    if c.entries.len().is_power_of_two() && c.entries.len() >= 64 {
        c.entries.retain(|_, w| w.strong_count() > 0);
    }
    Ok(made)
}

/// A constant's bytes in aligned storage, shared by content (see [`shared`]).
pub(crate) fn constant(bytes: &[u8]) -> Arc<AlignedBytes> {
    let made: Result<Arc<AlignedBytes>, std::convert::Infallible> =
        shared(bytes, "raw".to_string(), AlignedBytes::len, || Ok(AlignedBytes::from_bytes(bytes)));
    match made {
        Ok(a) => a,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{MIN_SHARED_BYTES, constant, shared};

    #[test]
    fn equal_bytes_share_one_copy_while_someone_holds_it() {
        // Bytes no other test uses (the cache is process-wide).
        let a: Vec<u8> = (0..MIN_SHARED_BYTES + 7).map(|i| (i * 31 % 251) as u8).collect();
        let mut b = a.clone();
        let x = constant(&a);
        let y = constant(&b);
        assert!(Arc::ptr_eq(&x, &y));
        assert_eq!(x.as_bytes(), &a[..]);
        // One byte differs: another entry.
        b[MIN_SHARED_BYTES / 2] ^= 1;
        let z = constant(&b);
        assert!(!Arc::ptr_eq(&x, &z));
        assert_eq!(z.as_bytes(), &b[..]);
        // Another compiled form of the same bytes is another entry.
        let packed: Arc<Vec<u8>> =
            shared(&a, "reversed".into(), Vec::len, || Ok::<_, ()>(a.iter().rev().copied().collect::<Vec<u8>>()))
                .unwrap();
        assert_eq!(packed[0], a[a.len() - 1]);
        // The cache holds no strong reference: once every holder is gone the copy is freed, and
        // asking again makes a new one.
        let weak = Arc::downgrade(&x);
        drop((x, y));
        assert!(weak.upgrade().is_none());
        let w = constant(&a);
        assert_eq!(w.as_bytes(), &a[..]);
    }

    #[test]
    fn small_constants_are_copied() {
        let a = vec![7u8; 100];
        assert!(!Arc::ptr_eq(&constant(&a), &constant(&a)));
    }
}
