//! XXH64 (seed 0), the content hash of constants printed by reference to a side file
//! (`hash="xxh64:…"` in the IR text). It is the 64-bit hash of the xxHash family: fast (several
//! GB/s, so checking a model's weights costs little next to reading them) and easy to
//! recompute outside tensorjit (`xxhsum -H1`, Python's `xxhash.xxh64`). It detects a wrong or
//! damaged side file; it is not a defence against a file crafted to collide.

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

fn read64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn read32(b: &[u8]) -> u64 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a) as u64
}

fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}

fn merge(acc: u64, v: u64) -> u64 {
    (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

/// The XXH64 hash of `data` with seed 0.
pub fn xxh64(data: &[u8]) -> u64 {
    let len = data.len() as u64;
    let mut rest = data;
    let mut h = if data.len() >= 32 {
        let mut v = [P1.wrapping_add(P2), P2, 0, 0u64.wrapping_sub(P1)];
        let mut stripes = rest.chunks_exact(32);
        for s in &mut stripes {
            for (k, acc) in v.iter_mut().enumerate() {
                *acc = round(*acc, read64(&s[8 * k..]));
            }
        }
        rest = stripes.remainder();
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for acc in v {
            h = merge(h, acc);
        }
        h
    } else {
        P5
    };
    h = h.wrapping_add(len);
    while rest.len() >= 8 {
        h = (h ^ round(0, read64(rest))).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        h = (h ^ read32(rest).wrapping_mul(P1)).rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        h = (h ^ (b as u64).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
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
