//! XXH64 (seed 0), the content hash of constants printed by reference to a side file
//! (`hash="xxh64:…"` in the IR text). It is the 64-bit hash of the xxHash family: fast (several
//! GB/s, so checking a model's weights costs little next to reading them) and easy to
//! recompute outside tensorjit (`xxhsum -H1`, Python's `xxhash.xxh64`). It detects a wrong or
//! damaged side file; it is not a defence against a file crafted to collide.

/// The XXH64 hash (seed 0) of `data`, by the `xxhash-rust` crate.
pub fn xxh64(data: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(data, 0)
}

#[cfg(test)]
mod tests {
    use super::xxh64;

    #[test]
    fn reference_values() {
        // Computed with `xxhsum -H1` (xxHash 0.8).
        assert_eq!(xxh64(b""), 0xef46_db37_51d8_e999);
        assert_eq!(xxh64(b"abc"), 0x44bc_2cf5_ad77_0999);
        assert_eq!(xxh64(b"abcdefghijklmnopqrstuvwxyz012345"), 0xbf2c_d639_b414_3b80);
        let hundred: Vec<u8> = (0..100u8).collect();
        assert_eq!(xxh64(&hundred), 0x6ac1_e580_3216_6597);
        let long: Vec<u8> = (0..1027u32).map(|i| ((i * 7) % 251) as u8).collect();
        assert_eq!(xxh64(&long), 0x8400_58f9_3a4e_80b2);
    }
}
