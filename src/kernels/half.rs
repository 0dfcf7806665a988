//! Slice conversions between f32 and the half types, the widening and the one rounding of every
//! kernel that computes a BF16 or F16 op in f32 ([`HalfFloat`]): bit-identical to `half`'s
//! scalar conversions (widening exact, rounding to nearest even, a NaN kept NaN with its sign and
//! the quiet bit set both ways). BF16 in branch-free lane arithmetic that the compiler
//! vectorises, built for AVX2 and AVX-512 as well and chosen by `FusedIsa`, rounding with
//! `vcvtneps2bf16` where the CPU has AVX512-BF16; F16 by `half` (F16C). Large slices are split
//! over the calling rayon pool.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

use super::fused::FusedIsa;
use super::gemm::{Finish, Region};

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

/// The 16-lane build of the widening (the lane arithmetic vectorised for AVX-512).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn widen_avx512(src: &[bf16], dst: &mut [f32]) {
    widen_portable(src, dst)
}

/// Rounding with `vcvtneps2bf16` (16 lanes, round to nearest even, a NaN made quiet as
/// `half` does). The instruction flushes denormal inputs to zero where `half` rounds them: a
/// vector holding one is rounded by the lane arithmetic instead, as is the tail.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn round_avx512bf16(src: &[f32], dst: &mut [bf16]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let (exp, mant) = (_mm512_set1_epi32(0x7F80_0000), _mm512_set1_epi32(0x007F_FFFF));
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i + 16 are inside both slices (i + 16 <= n); unaligned access.
        let x = unsafe { _mm512_loadu_ps(src.as_ptr().add(i)) };
        let bits = _mm512_castps_si512(x);
        let denormal = _mm512_testn_epi32_mask(bits, exp) & _mm512_test_epi32_mask(bits, mant);
        if denormal != 0 {
            round_portable(&src[i..i + 16], &mut dst[i..i + 16]);
        } else {
            // SAFETY: __m256bh and __m256i are the same 32 bytes; the store writes elements
            // i..i + 16 of `dst`, inside it.
            unsafe {
                let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(x));
                _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), h);
            }
        }
        i += 16;
    }
    round_portable(&src[i..n], &mut dst[i..n]);
}

/// Runs `piece` over `src` and `dst` (cut to their common length), in pieces split over the
/// current pool when `parallel` is asked, the call is on a thread of a pool of several (never
/// onto rayon's global pool from outside one) and the slices are large.
fn split<S: Sync, D: Send>(src: &[S], dst: &mut [D], parallel: bool, piece: impl Fn(&[S], &mut [D]) + Sync) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    if parallel && n >= PAR_MIN && rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1 {
        src.par_chunks(PIECE).zip(dst.par_chunks_mut(PIECE)).for_each(|(s, d)| piece(s, d));
    } else {
        piece(src, dst)
    }
}

/// A half type with its slice conversions to and from f32, bit-identical to `half`'s scalar
/// ones, split over the current pool when `parallel` (see [`split`]).
pub trait HalfFloat: Copy + Send + Sync + 'static {
    /// `dst[i] = f32(src[i])` over the common length (exact; a signalling NaN comes out quiet).
    fn widen(src: &[Self], dst: &mut [f32], parallel: bool);
    /// `dst[i] = round(src[i])` over the common length, to nearest even.
    fn round(src: &[f32], dst: &mut [Self], parallel: bool);
    /// The rounding [`HalfFloat::round`] runs on this CPU, on the calling thread, as a function
    /// (chosen once, for callers that round many short pieces).
    fn serial_rounding() -> fn(&[f32], &mut [Self]);
    /// One value rounded to the type and widened back (`f32(round(v))`, as the slice
    /// conversions compute it), for loops that round between ops in f32 lanes.
    fn round_f32(v: f32) -> f32;
    /// The value of `v`, which [`HalfFloat::round_f32`] has rounded (exact).
    fn from_rounded(v: f32) -> Self;
    /// One value widened (as [`HalfFloat::widen`]).
    fn widen1(self) -> f32;
}

/// BF16: the branch-free lane arithmetic above, its AVX2 build on the path `FusedIsa` selects.
impl HalfFloat for bf16 {
    fn widen(src: &[bf16], dst: &mut [f32], parallel: bool) {
        bf16_to_f32_with(src, dst, parallel, FusedIsa::selected())
    }
    fn round(src: &[f32], dst: &mut [bf16], parallel: bool) {
        f32_to_bf16_with(src, dst, parallel, FusedIsa::selected())
    }
    fn serial_rounding() -> fn(&[f32], &mut [bf16]) {
        bf16_rounding(FusedIsa::selected())
    }
    #[inline(always)]
    fn round_f32(v: f32) -> f32 {
        // Branch-free, so loops over it vectorise.
        f32::from_bits(u32::from(round_bits(v.to_bits())) << 16)
    }
    #[inline(always)]
    fn from_rounded(v: f32) -> bf16 {
        bf16::from_bits((v.to_bits() >> 16) as u16)
    }
    #[inline(always)]
    fn widen1(self) -> f32 {
        let b = u32::from(self.to_bits());
        let nan = (b & 0x7FFF) > 0x7F80;
        f32::from_bits((if nan { b | 0x40 } else { b }) << 16)
    }
}

/// F16: `half`'s slice conversions (F16C where the CPU has it).
impl HalfFloat for f16 {
    fn widen(src: &[f16], dst: &mut [f32], parallel: bool) {
        split(src, dst, parallel, |s, d| s.convert_to_f32_slice(d))
    }
    fn round(src: &[f32], dst: &mut [f16], parallel: bool) {
        split(src, dst, parallel, |s, d| d.convert_from_f32_slice(s))
    }
    fn serial_rounding() -> fn(&[f32], &mut [f16]) {
        |s, d| {
            let n = s.len().min(d.len());
            d[..n].convert_from_f32_slice(&s[..n])
        }
    }
    #[inline(always)]
    fn round_f32(v: f32) -> f32 {
        f16::from_f32(v).to_f32()
    }
    #[inline(always)]
    fn from_rounded(v: f32) -> f16 {
        f16::from_f32(v)
    }
    #[inline(always)]
    fn widen1(self) -> f32 {
        self.to_f32()
    }
}

/// The little-endian values of `dtype` stored in `bytes` (a constant's data) as f32: F32 viewed
/// where aligned ([`crate::memory::f32s`]), BF16 and F16 widened exactly; `None` for other dtypes.
pub(crate) fn f32_values(bytes: &[u8], dtype: crate::ir::dtype::DType) -> Option<std::borrow::Cow<'_, [f32]>> {
    use crate::ir::dtype::DType;
    fn widened<H: HalfFloat>(bytes: &[u8], from_bits: fn(u16) -> H) -> std::borrow::Cow<'static, [f32]> {
        bytes.chunks_exact(2).map(|b| from_bits(u16::from_le_bytes([b[0], b[1]])).widen1()).collect()
    }
    match dtype {
        DType::Float32 => Some(crate::memory::f32s(bytes)),
        DType::BFloat16 => Some(widened(bytes, bf16::from_bits)),
        DType::Float16 => Some(widened(bytes, f16::from_bits)),
        _ => None,
    }
}

/// Rounds the finished regions of an f32 product into a half-typed output of the same layout
/// (the [`Finish`] of a bf16/f16 GEMM): a region at element offset `o` of the f32 buffer goes to
/// offset `o` of the output, rounded as [`HalfFloat::round`], while the GEMM has it in cache.
pub struct RoundInto<'a, H> {
    /// Start of the f32 buffer the GEMM writes (only compared with, never read through).
    base: usize,
    dst: *mut H,
    len: usize,
    round: fn(&[f32], &mut [H]),
    _out: std::marker::PhantomData<&'a mut [H]>,
}

impl<H> std::fmt::Debug for RoundInto<'_, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RoundInto({} elements of {})", self.len, std::any::type_name::<H>())
    }
}

// SAFETY: the GEMM hands disjoint regions to concurrent `finish` calls (the `Finish` contract),
// so the threads write disjoint elements of `dst`, which this value borrows mutably.
unsafe impl<H: Send> Sync for RoundInto<'_, H> {}

impl<'a, H: HalfFloat> RoundInto<'a, H> {
    /// Rounds regions of `src` (the buffer the GEMM writes) into `dst`, element for element.
    pub fn new(src: &[f32], dst: &'a mut [H]) -> Self {
        assert!(dst.len() >= src.len(), "RoundInto: output of {} elements for {}", dst.len(), src.len());
        RoundInto {
            base: src.as_ptr() as usize,
            dst: dst.as_mut_ptr(),
            len: src.len(),
            round: H::serial_rounding(),
            _out: std::marker::PhantomData,
        }
    }
}

impl<H: HalfFloat> Finish<f32> for RoundInto<'_, H> {
    unsafe fn finish(&self, r: &Region<f32>) {
        if r.rows == 0 || r.cols == 0 {
            return;
        }
        let off = (r.at as usize).wrapping_sub(self.base) / size_of::<f32>();
        let last = off + (r.rows - 1) * r.rs + (r.cols - 1) * r.cs;
        assert!(r.at as usize >= self.base && last < self.len, "RoundInto: region outside the product");
        for i in 0..r.rows {
            let row = off + i * r.rs;
            // SAFETY: every element (i, j) of the region is at `row + j * cs <= last < len`
            // (asserted above), inside `dst` (`new` checked it is as long as the product); the
            // values are readable over the region (the `Finish` contract); no other call writes
            // these elements of `dst`.
            unsafe {
                let v = r.vals.add(i * r.vrs);
                if r.cs == 1 && r.vcs == 1 {
                    let s = std::slice::from_raw_parts(v, r.cols);
                    (self.round)(s, std::slice::from_raw_parts_mut(self.dst.add(row), r.cols));
                } else {
                    for j in 0..r.cols {
                        let s = std::slice::from_raw_parts(v.add(j * r.vcs), 1);
                        (self.round)(s, std::slice::from_raw_parts_mut(self.dst.add(row + j * r.cs), 1));
                    }
                }
            }
        }
    }
}

/// [`HalfFloat::round`] for BF16 on `isa` (lowered to what the CPU runs; the AVX2 build for
/// AVX2 and AVX-512, the portable one otherwise).
pub fn f32_to_bf16_with(src: &[f32], dst: &mut [bf16], parallel: bool, isa: FusedIsa) {
    split(src, dst, parallel, bf16_rounding(isa))
}

/// The bf16 rounding for `isa` (lowered to what the CPU runs), over the common length.
fn bf16_rounding(isa: FusedIsa) -> fn(&[f32], &mut [bf16]) {
    #[cfg(target_arch = "x86_64")]
    if isa.checked() == FusedIsa::Avx512
        && std::arch::is_x86_feature_detected!("avx512bf16")
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        // SAFETY: `checked` confirmed AVX-512F; AVX512-BF16 and AVX512-BW checked just above.
        return |s, d| unsafe { round_avx512bf16(s, d) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa.checked().avx2() {
        // SAFETY: `checked` confirmed AVX2 at run time.
        return |s, d| unsafe { round_avx2(s, d) };
    }
    let _ = isa;
    round_portable
}

/// [`HalfFloat::widen`] for BF16 on `isa` (as [`f32_to_bf16_with`]).
pub fn bf16_to_f32_with(src: &[bf16], dst: &mut [f32], parallel: bool, isa: FusedIsa) {
    #[cfg(target_arch = "x86_64")]
    if isa.checked() == FusedIsa::Avx512 && std::arch::is_x86_feature_detected!("avx512bw") {
        // SAFETY: `checked` confirmed AVX-512F; AVX512-BW checked just above.
        return split(src, dst, parallel, |s, d| unsafe { widen_avx512(s, d) });
    }
    #[cfg(target_arch = "x86_64")]
    if isa.checked().avx2() {
        // SAFETY: `checked` confirmed AVX2 at run time.
        return split(src, dst, parallel, |s, d| unsafe { widen_avx2(s, d) });
    }
    let _ = isa;
    split(src, dst, parallel, widen_portable)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `RoundInto` rounds exactly the regions it is handed (unit and non-unit column strides),
    /// to the same bits as `half`'s scalar conversion, and leaves the rest of the output alone.
    #[test]
    fn round_into_rounds_each_region_in_place() {
        let bits = patterns();
        let src: Vec<f32> = bits.iter().take(12 * 40).map(|&b| f32::from_bits(b)).collect();
        let mut b16 = vec![bf16::from_bits(0x1234); src.len()];
        let mut h16 = vec![f16::from_bits(0x1234); src.len()];
        let (rb, rh) = (RoundInto::new(&src, &mut b16), RoundInto::new(&src, &mut h16));
        // Rows 2..7, columns 3..35 of the 12 x 40 matrix; then columns 36..40 of rows 0..4 read
        // as a transposed view (row stride 1, column stride 40).
        let regions = [(2 * 40 + 3, 40, 1, 5, 32), (36, 1, 40, 4, 4)];
        let mut covered = vec![false; src.len()];
        for &(off, rs, cs, rows, cols) in &regions {
            // SAFETY: the regions lie inside `src` and do not overlap.
            unsafe {
                let r = Region::in_place(src.as_ptr().add(off), rs, cs, rows, cols);
                rb.finish(&r);
                rh.finish(&r);
            }
            for i in 0..rows {
                for j in 0..cols {
                    covered[off + i * rs + j * cs] = true;
                }
            }
        }
        // Rows 8..10, columns 0..8 with the values in another buffer (a tile buffer, rows 8
        // apart): the output takes those, not `src`'s.
        let tile: Vec<f32> = (0..16).map(|i| i as f32 * 1.001 - 7.3).collect();
        let mut want = src.clone();
        for i in 0..2 {
            for j in 0..8 {
                want[(8 + i) * 40 + j] = tile[i * 8 + j];
                covered[(8 + i) * 40 + j] = true;
            }
        }
        let r =
            Region { at: src[8 * 40..].as_ptr(), rs: 40, cs: 1, rows: 2, cols: 8, vals: tile.as_ptr(), vrs: 8, vcs: 1 };
        // SAFETY: inside `src`, disjoint from the regions above; `tile` holds 2 rows of 8.
        unsafe {
            rb.finish(&r);
            rh.finish(&r);
        }
        for (i, &x) in want.iter().enumerate() {
            let (wb, wh) = if covered[i] {
                (bf16::from_f32(x), f16::from_f32(x))
            } else {
                (bf16::from_bits(0x1234), f16::from_bits(0x1234))
            };
            assert_eq!(b16[i].to_bits(), wb.to_bits(), "bf16 element {i} ({x:e}, covered {})", covered[i]);
            assert_eq!(h16[i].to_bits(), wh.to_bits(), "f16 element {i} ({x:e}, covered {})", covered[i]);
        }
    }

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
        let specials = v.clone();
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..200_000 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            v.push((s >> 32) as u32);
        }
        // Each special value filling a whole 16-lane vector (aligned to 16 elements from the
        // start), so the vector instruction paths meet every class, not only the lane fallback
        // a denormal neighbour would send them to.
        v.resize(v.len().next_multiple_of(16), 0x3F80_0000);
        for p in specials {
            v.extend([p; 16]);
        }
        v
    }

    #[test]
    fn rounding_matches_half_bit_for_bit_on_every_path() {
        let x: Vec<f32> = patterns().into_iter().map(f32::from_bits).collect();
        let want: Vec<u16> = x.iter().map(|&f| bf16::from_f32(f).to_bits()).collect();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            for parallel in [false, true] {
                let mut got = vec![bf16::from_bits(0x1234); x.len()];
                pool.install(|| f32_to_bf16_with(&x, &mut got, parallel, isa));
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), *w, "{isa:?} parallel {parallel}: {:#010x}", x[i].to_bits());
                }
            }
        }
    }

    #[test]
    fn one_value_conversions_match_half() {
        for x in patterns().into_iter().map(f32::from_bits) {
            let (b, h) = (bf16::from_f32(x), f16::from_f32(x));
            assert_eq!(bf16::round_f32(x).to_bits(), b.to_f32().to_bits(), "bf16 {:#010x}", x.to_bits());
            assert_eq!(f16::round_f32(x).to_bits(), h.to_f32().to_bits(), "f16 {:#010x}", x.to_bits());
            assert_eq!(bf16::from_rounded(bf16::round_f32(x)).to_bits(), b.to_bits(), "bf16 {:#010x}", x.to_bits());
            assert_eq!(f16::from_rounded(f16::round_f32(x)).to_bits(), h.to_bits(), "f16 {:#010x}", x.to_bits());
        }
        for bits in 0..=u16::MAX {
            let (b, h) = (bf16::from_bits(bits), f16::from_bits(bits));
            assert_eq!(b.widen1().to_bits(), b.to_f32().to_bits(), "bf16 {bits:#06x}");
            assert_eq!(h.widen1().to_bits(), h.to_f32().to_bits(), "f16 {bits:#06x}");
        }
    }

    #[test]
    fn widening_is_exact_on_every_path() {
        let h: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            let mut got = vec![0f32; h.len()];
            bf16_to_f32_with(&h, &mut got, true, isa);
            for (g, s) in got.iter().zip(&h) {
                assert_eq!(g.to_bits(), s.to_f32().to_bits(), "{isa:?}: {:#06x}", s.to_bits());
            }
        }
    }

    #[test]
    fn only_the_common_length_is_written() {
        let mut dst = vec![bf16::from_bits(7); 4];
        bf16::round(&[1.0, 2.0], &mut dst, false);
        assert_eq!(dst.iter().map(|b| b.to_bits()).collect::<Vec<_>>(), vec![0x3F80, 0x4000, 7, 7]);
        let mut w = vec![9f32; 3];
        bf16::widen(&[bf16::from_bits(0xC000)], &mut w, false);
        assert_eq!(w, vec![-2.0, 9.0, 9.0]);
    }
}
