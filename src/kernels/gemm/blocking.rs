//! Cache blocking: the KC / MC / NC block sizes, derived from the detected cache sizes and
//! overridable with `TENSORJIT_GEMM_KC`, `TENSORJIT_GEMM_MC`, `TENSORJIT_GEMM_NC`.

use std::sync::OnceLock;

/// Data-cache sizes in bytes (per core for L1 and L2; the whole L3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSizes {
    /// Level-1 data cache.
    pub l1d: usize,
    /// Level-2 cache.
    pub l2: usize,
    /// Level-3 cache (0 when absent).
    pub l3: usize,
}

/// The cache sizes of cpu0, read once from `/sys/devices/system/cpu/cpu0/cache/index*/`;
/// 32 KiB / 512 KiB / 8 MiB when that is unavailable.
pub fn cache_sizes() -> CacheSizes {
    static C: OnceLock<CacheSizes> = OnceLock::new();
    *C.get_or_init(|| {
        let mut c = CacheSizes { l1d: 32 << 10, l2: 512 << 10, l3: 8 << 20 };
        for idx in 0..8 {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{idx}");
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok().map(|s| s.trim().to_string());
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size")) else {
                continue;
            };
            let Some(bytes) = parse_size(&size) else { continue };
            match (level.as_str(), kind.as_str()) {
                ("1", "Data") | ("1", "Unified") => c.l1d = bytes,
                ("2", _) => c.l2 = bytes,
                ("3", _) => c.l3 = bytes,
                _ => {}
            }
        }
        c
    })
}

/// Parses sysfs cache sizes such as `32K`, `1024K`, `32M`.
fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|n| n * mul)
}

/// Block sizes in elements: KC (depth of a packed panel), MC (rows of packed A), NC
/// (columns of packed B). Zero means "derive from the cache sizes".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Blocking {
    /// Depth of one packed block (k direction).
    pub kc: usize,
    /// Rows of one packed block of A.
    pub mc: usize,
    /// Columns of one packed block of B.
    pub nc: usize,
}

/// The largest block size the environment overrides accept (elements).
pub use crate::env::MAX_ENV_BLOCK;

/// An override, 0 when unset or invalid (an invalid value is reported by
/// [`crate::config::check_env`] when a backend is created).
fn env_usize(name: &str) -> usize {
    crate::env::env_usize(name, 0, MAX_ENV_BLOCK).ok().flatten().unwrap_or(0)
}

/// The environment overrides `TENSORJIT_GEMM_KC/_MC/_NC` (read once; 0 where unset).
pub fn env_blocking() -> Blocking {
    static B: OnceLock<Blocking> = OnceLock::new();
    *B.get_or_init(|| {
        let b = Blocking {
            kc: env_usize("TENSORJIT_GEMM_KC"),
            mc: env_usize("TENSORJIT_GEMM_MC"),
            nc: env_usize("TENSORJIT_GEMM_NC"),
        };
        if b.kc + b.mc + b.nc > 0 {
            tracing::debug!(target: "tensorjit::gemm", kc = b.kc, mc = b.mc, nc = b.nc, "GEMM block sizes overridden");
        }
        b
    })
}

/// The block sizes for a kernel of `mr` x `nr` tiles over packed elements of `a_bytes` /
/// `b_bytes` bytes with k grouped by `g`:
/// - KC: the B micro-panel (KC x nr), reused by every row panel of the A block, fills about
///   3/4 of L1 (the A micro-panel streams from L2 past it);
/// - MC: the packed A block (MC x KC) fills about a quarter of L2 (the rest holds the B
///   panels and C tiles passing through; half of L2 measured 5-15% slower on Zen 3);
/// - NC: the packed B block (KC x NC) fills about a quarter of L3 (at most 4096 columns).
///
/// Explicit non-zero values in `over` (then the environment) win; all are rounded to the
/// tile and group sizes.
pub fn block_sizes(mr: usize, nr: usize, g: usize, a_bytes: usize, b_bytes: usize, over: Blocking) -> Blocking {
    let c = cache_sizes();
    let env = env_blocking();
    let kc = round_up(pick(over.kc, env.kc, l1_depth(c.l1d * 3 / 4, nr, b_bytes)), g);
    let mc_def = (c.l2 / 4 / (kc * a_bytes).max(1)).clamp(mr, 4096);
    let mc = round_up(pick(over.mc, env.mc, mc_def), mr);
    let l3 = if c.l3 > 0 { c.l3 } else { c.l2 * 4 };
    let nc_def = (l3 / 4 / (kc * b_bytes).max(1)).clamp(nr, 4096);
    let nc = round_up(pick(over.nc, env.nc, nc_def), nr);
    Blocking { kc, mc, nc }
}

/// The depth of packed B blocks on the packed path, pre-packed ([`super::PackedB`]) or packed per
/// call: an explicit KC (in `over`, then the environment), else four times [`block_sizes`]' L1
/// rule for f32 panels and twice it for 16-bit ones, at most 1024. The panels are read from L2
/// at any depth, and deeper blocks halve the passes over C and the A packing. On Zen 5 (48 KiB
/// L1, AVX-512 f32 panels of 32 columns: 576 deep at twice the rule, 1024 at four times),
/// pre-packed, one core, `tensorjit bench` on `MatMul` + `Add`, best of 2 alternated runs:
/// 1024×768×3072 20.5 → 19.2–19.3 ms, 1024×3072×768 20.2–20.3 → 19.4–19.6, 1024×768×2304
/// 14.6–14.8 → 13.9–14.3; BERT-base 8 × 128 on one core 737–749 → 732–741 ms (medians of three
/// alternated runs); the 16-column AVX2 panels were already 1024 deep there. Earlier, twice
/// against once the rule: `tjgemm --cpu-time`, 1 thread, KC from the L1 rule vs twice it:
/// pre-packed on Zen 3 (four alternating rounds, KC 384 vs 768) 512x1536x384 94.4–96.5 vs
/// 95.9–97.9, 512x1536x1536 92.7–95.4 vs 94.3–97.9, 2048³ 92.9–95.0 vs 94.7–97.0,
/// 16x1536x1536 96.6–96.9 vs 99.0–99.3 GFLOP/s, K ≤ 384 unchanged; packed per call on a Xeon
/// with AVX-512 (48 KiB L1, 2 MiB L2; KC 288 vs 576) 1024³ 145 vs 151, 2048³ 139 vs 149,
/// 128x1536x1536 125 vs 133, 512x1536x1536 139 vs 147. The direct path keeps the L1 rule (its
/// re-packed panel lives in L1: KC 384 instead of 192 there cost 14% at 16x1536x1536).
pub fn packed_kc(nr: usize, g: usize, b_bytes: usize, over: Blocking) -> usize {
    let times = if b_bytes >= 4 { 4 } else { 2 };
    let deep = l1_depth(times * cache_sizes().l1d * 3 / 4, nr, b_bytes);
    round_up(pick(over.kc, env_blocking().kc, deep), g)
}

/// The depth at which a KC x `nr` B micro-panel of `b_bytes` elements fills `budget` bytes, in
/// 64..=1024, a multiple of 8.
fn l1_depth(budget: usize, nr: usize, b_bytes: usize) -> usize {
    (budget / (nr * b_bytes).max(1)).clamp(64, 1024) / 8 * 8
}

/// The first non-zero of an explicit value, the environment's, and the default.
fn pick(explicit: usize, env: usize, default: usize) -> usize {
    if explicit != 0 {
        explicit
    } else if env != 0 {
        env
    } else {
        default
    }
}

/// `x` rounded up to a multiple of `to` (`to` > 0); at least `to`.
pub(crate) fn round_up(x: usize, to: usize) -> usize {
    x.max(1).div_ceil(to) * to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sysfs_sizes() {
        assert_eq!(parse_size("32K"), Some(32 * 1024));
        assert_eq!(parse_size("32M"), Some(32 * 1024 * 1024));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn prepacked_depth_is_explicit_or_deeper_than_the_l1_rule() {
        assert_eq!(packed_kc(16, 2, 4, Blocking { kc: 7, mc: 0, nc: 0 }), 8);
        if env_blocking().kc == 0 {
            // 32-column panels: f32 four times the L1 rule's depth, 16-bit twice (at most 1024,
            // multiples of 8); with a 48 KiB L1, 1024 and 576.
            let depth = |times: usize, b_bytes: usize| {
                (times * cache_sizes().l1d * 3 / 4 / (32 * b_bytes)).clamp(64, 1024) / 8 * 8
            };
            assert_eq!(block_sizes(6, 32, 1, 4, 4, Blocking::default()).kc, depth(1, 4));
            assert_eq!(packed_kc(32, 1, 4, Blocking::default()), depth(4, 4));
            assert_eq!(packed_kc(32, 1, 2, Blocking::default()), depth(2, 2));
        }
    }

    #[test]
    fn explicit_blocking_is_rounded_to_tiles() {
        let b = block_sizes(6, 16, 2, 4, 4, Blocking { kc: 7, mc: 7, nc: 17 });
        assert_eq!(b, Blocking { kc: 8, mc: 12, nc: 32 });
    }
}
