//! Vectorised conversions between f32 and bf16 slices, the widening and the one rounding of
//! every kernel that computes a bf16 op in f32: bit-identical to `half`'s scalar conversions
//! (widening exact, rounding to nearest even, a NaN kept NaN with its sign and the quiet bit set
//! both ways), in branch-free lane arithmetic that the compiler vectorises, built for AVX2 as
//! well and chosen at run time. Large slices are split over the calling rayon pool.

use half::bf16;
use rayon::prelude::*;

/// Elements below which a conversion stays on the calling thread.
const PAR_MIN: usize = 1 << 16;
/// Elements per parallel piece.
const PIECE: usize = 1 << 14;

/// The bf16 bits of `x` rounded to nearest even (a NaN keeps its sign and top mantissa bits,
/// with the quiet bit set), as `half::bf16::from_f32`.
#[inline(always)]
fn round_bits(x: u32) -> u16 {
    let nan = (x & 0x7FFF_FFFF) > 0x7F80_0000;
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    let quiet = (x >> 16) | 0x40;
    (if nan { quiet } else { rounded }) as u16
}

#[inline(always)]
fn round_portable(src: &[f32], dst: &mut [bf16]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = bf16::from_bits(round_bits(s.to_bits()));
    }
}

#[inline(always)]
fn widen_portable(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        let b = u32::from(s.to_bits());
        let nan = (b & 0x7FFF) > 0x7F80;
        *d = f32::from_bits((if nan { b | 0x40 } else { b }) << 16);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn round_avx2(src: &[f32], dst: &mut [bf16]) {
    round_portable(src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn widen_avx2(src: &[bf16], dst: &mut [f32]) {
    widen_portable(src, dst)
}

/// The AVX2 builds (the portable ones elsewhere, never chosen there: `use_avx2` is false).
#[cfg(target_arch = "x86_64")]
const ROUND_FAST: unsafe fn(&[f32], &mut [bf16]) = round_avx2;
#[cfg(target_arch = "x86_64")]
const WIDEN_FAST: unsafe fn(&[bf16], &mut [f32]) = widen_avx2;
#[cfg(not(target_arch = "x86_64"))]
const ROUND_FAST: unsafe fn(&[f32], &mut [bf16]) = round_portable;
#[cfg(not(target_arch = "x86_64"))]
const WIDEN_FAST: unsafe fn(&[bf16], &mut [f32]) = widen_portable;

/// Whether the AVX2 builds may run (AVX2 present and not disabled for testing the fallback).
fn use_avx2(allow: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        allow && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = allow;
        false
    }
}

/// Converts `src` into `dst` (the same length) here: with `fast` (the AVX2 build) when `simd`
/// allows it and AVX2 is present, else with `portable`.
fn serial<S, D>(src: &[S], dst: &mut [D], simd: bool, fast: unsafe fn(&[S], &mut [D]), portable: fn(&[S], &mut [D])) {
    if use_avx2(simd) {
        // SAFETY: `fast` needs only AVX2, detected at run time by `use_avx2`.
        unsafe { fast(src, dst) };
    } else {
        portable(src, dst)
    }
}

/// Converts over the common length, split over the current pool when [`splits`] says so.
fn convert<S: Sync, D: Send>(
    src: &[S],
    dst: &mut [D],
    parallel: bool,
    simd: bool,
    fast: unsafe fn(&[S], &mut [D]),
    portable: fn(&[S], &mut [D]),
) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    if splits(parallel, n) {
        src.par_chunks(PIECE).zip(dst.par_chunks_mut(PIECE)).for_each(|(s, d)| serial(s, d, simd, fast, portable));
    } else {
        serial(src, dst, simd, fast, portable)
    }
}

/// Whether a conversion of `n` elements asked to run in parallel splits: only on a thread of a
/// pool of several (never onto rayon's global pool from outside one).
fn splits(parallel: bool, n: usize) -> bool {
    parallel && n >= PAR_MIN && rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1
}

/// `dst[i] = bf16(src[i])` over the common length, rounded to nearest even; split over the
/// current rayon pool when `parallel`, called on one of its threads, and the slices are large.
pub fn f32_to_bf16(src: &[f32], dst: &mut [bf16], parallel: bool) {
    f32_to_bf16_with(src, dst, parallel, true)
}

/// `dst[i] = f32(src[i])` (exact; a signalling NaN comes out quiet, as with `half`) over the
/// common length; split as [`f32_to_bf16`].
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32], parallel: bool) {
    bf16_to_f32_with(src, dst, parallel, true)
}

/// [`f32_to_bf16`], with `simd` false forcing the portable build (tests of the fallback).
pub fn f32_to_bf16_with(src: &[f32], dst: &mut [bf16], parallel: bool, simd: bool) {
    convert(src, dst, parallel, simd, ROUND_FAST, round_portable)
}

/// [`bf16_to_f32`], with `simd` false forcing the portable build (tests of the fallback).
pub fn bf16_to_f32_with(src: &[bf16], dst: &mut [f32], parallel: bool, simd: bool) {
    convert(src, dst, parallel, simd, WIDEN_FAST, widen_portable)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit patterns: every special class (zeros, subnormals, the rounding boundaries around
    /// ties, the largest finite values, infinities, signalling and quiet NaNs of both signs)
    /// and a spread of others from a fixed-seed LCG.
    fn patterns() -> Vec<u32> {
        let mut v = vec![
            0x0000_0000,
            0x8000_0000,
            0x0000_0001,
            0x0000_8000,
            0x0000_8001,
            0x0001_8000,
            0x007F_FFFF,
            0x3F80_7FFF,
            0x3F80_8000,
            0x3F81_8000,
            0x3F80_8001,
            0x7F7F_7FFF,
            0x7F7F_8000,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x7F80_0000,
            0xFF80_0000,
            0x7F80_0001,
            0x7FBF_FFFF,
            0x7FC0_0000,
            0xFF80_0001,
            0xFFFF_FFFF,
        ];
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..200_000 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            v.push((s >> 32) as u32);
        }
        v
    }

    #[test]
    fn rounding_matches_half_bit_for_bit_on_every_path() {
        let x: Vec<f32> = patterns().into_iter().map(f32::from_bits).collect();
        let want: Vec<u16> = x.iter().map(|&f| bf16::from_f32(f).to_bits()).collect();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for simd in [false, true] {
            for parallel in [false, true] {
                let mut got = vec![bf16::from_bits(0x1234); x.len()];
                pool.install(|| f32_to_bf16_with(&x, &mut got, parallel, simd));
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), *w, "simd {simd} parallel {parallel}: {:#010x}", x[i].to_bits());
                }
            }
        }
    }

    #[test]
    fn widening_is_exact_on_every_path() {
        let h: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        for simd in [false, true] {
            let mut got = vec![0f32; h.len()];
            bf16_to_f32_with(&h, &mut got, true, simd);
            for (g, s) in got.iter().zip(&h) {
                assert_eq!(g.to_bits(), s.to_f32().to_bits(), "simd {simd}: {:#06x}", s.to_bits());
            }
        }
    }

    #[test]
    fn only_the_common_length_is_written() {
        let mut dst = vec![bf16::from_bits(7); 4];
        f32_to_bf16(&[1.0, 2.0], &mut dst, false);
        assert_eq!(dst.iter().map(|b| b.to_bits()).collect::<Vec<_>>(), vec![0x3F80, 0x4000, 7, 7]);
        let mut w = vec![9f32; 3];
        bf16_to_f32(&[bf16::from_bits(0xC000)], &mut w, false);
        assert_eq!(w, vec![-2.0, 9.0, 9.0]);
    }
}
