//! Packing: copies a strided block into the panel layout the microkernels read (converting the
//! element type on the way: bf16/f16 → f32, i8 → u8 + 128, …). Strides are absorbed here, so
//! transposed operands never need a materialised transpose.

use super::isa::Isa;
use super::kernel::PackFrom;

/// `$call` (which names the width `$W`) with `$W` the compile-time constant equal to `$w` when
/// `$w` is one of the listed widths, giving `true`; `false` (nothing called) otherwise. The
/// copy loops are instantiated for the panel widths the kernels use.
macro_rules! dispatch_width {
    ($w:expr, [$($n:literal),*], |$W:ident| $call:expr) => {
        match $w {
            $($n => {
                const $W: usize = $n;
                $call;
                true
            })*
            _ => false,
        }
    };
}

/// Packs `rows` x `kc` of a strided matrix (`src[r * rs + k * cs]`) into panels of `w` rows:
/// panel `p` starts at `dst + p * ceil(kc/g) * w * g` and holds, for each group of `g` k values,
/// `w` rows of `g` consecutive k values. Rows past `rows` and k past `kc` are `PA::PAD`.
///
/// A is packed with `(rs, cs) = (rsa, csa)`; B with its transpose view `(csb, rsb)`. With
/// `isa` AVX-512, f32 sources with unit k stride (row-major A, column-major B) are transposed in
/// registers 16 x 16 at a time instead of gathered element by element.
///
/// # Safety
/// `src` is readable at every `r * rs + k * cs` for `r < rows`, `k < kc`; `dst` is writable for
/// `ceil(rows/w) * ceil(kc/g) * w * g` elements.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pack_panels<TI: Copy, PA: PackFrom<TI>>(
    src: *const TI,
    rs: usize,
    cs: usize,
    rows: usize,
    kc: usize,
    w: usize,
    g: usize,
    dst: *mut PA,
    isa: Isa,
) {
    let kgroups = kc.div_ceil(g);
    // bf16 pairs (AVX512-BF16 tiles) packed with vector shuffles.
    // SAFETY: forwarded contract.
    if g == 2 && unsafe { pair_pack::<TI, PA>(isa, src, rs, cs, rows, kc, w, dst) } {
        return;
    }
    // SAFETY: every read is at r * rs + k * cs with r < rows and k < kc; every write is inside
    // the panel extent stated in the contract.
    unsafe {
        // Several full panels of contiguous rows (B row-major): walk the source row by row.
        let full =
            if g == 1 && rs == 1 && rows >= 2 * w { pack_cols_rowwise::<TI, PA>(src, cs, rows, kc, w, dst) } else { 0 };
        // Scratch of `convert_panel`: the thread's, kept between calls (a warm call allocates
        // nothing).
        let mut conv = ConvertScratch(CONVERT_SCRATCH.with(|c| c.take()));
        for p in full..rows.div_ceil(w) {
            let r0 = p * w;
            let rw = w.min(rows - r0);
            let pd = dst.add(p * kgroups * w * g);
            let s0 = src.add(r0 * rs);
            if g == 1 {
                if rs == 1 && rw == w && pack_cols_fixed::<TI, PA>(s0, cs, kc, w, pd) {
                    // Full panel of a common width: done with the unrolled copy.
                } else if rs == 1 {
                    for k in 0..kc {
                        let s = s0.add(k * cs);
                        let d = pd.add(k * w);
                        for i in 0..rw {
                            *d.add(i) = PA::cvt(*s.add(i));
                        }
                        for i in rw..w {
                            *d.add(i) = PA::PAD;
                        }
                    }
                } else if transpose_panel::<TI, PA>(isa, s0, rs, cs, kc, w, rw, pd) {
                    // Rows with unit k stride: transposed in vector registers.
                } else if convert_panel::<TI, PA>(isa, s0, rs, cs, kc, w, rw, pd, &mut conv) {
                    // Rows with unit k stride needing a conversion: converted in runs, then
                    // transposed.
                } else if rw == w && pack_rows_fixed::<TI, PA>(s0, rs, cs, kc, w, pd) {
                    // Full panel of a common width: done with the unrolled copy.
                } else {
                    for i in 0..w {
                        if i < rw {
                            let s = s0.add(i * rs);
                            for k in 0..kc {
                                *pd.add(k * w + i) = PA::cvt(*s.add(k * cs));
                            }
                        } else {
                            for k in 0..kc {
                                *pd.add(k * w + i) = PA::PAD;
                            }
                        }
                    }
                }
            } else {
                for kg in 0..kgroups {
                    for i in 0..w {
                        for q in 0..g {
                            let k = kg * g + q;
                            let v = if i < rw && k < kc { PA::cvt(*s0.add(i * rs + k * cs)) } else { PA::PAD };
                            *pd.add((kg * w + i) * g + q) = v;
                        }
                    }
                }
            }
        }
    }
}

/// [`pack_panels`] for `g == 2` with 2-byte elements copied as they are (bf16 → bf16 pairs) on
/// AVX-512 (the ISA of the AVX512-BF16 tiles): B rows (`rs == 1`, each k a contiguous source
/// row) are interleaved two k rows at a time with `vpermt2w`, walking the source row by row;
/// A rows with unit k stride (`cs == 1`, an even row stride) hold each pair as one 32-bit value,
/// so the pairs are transposed like f32 by [`x86_transpose::panel_f32`]. Returns false (nothing
/// written) for other layouts, types or ISAs; the generic element loop then packs.
///
/// # Safety
/// As [`pack_panels`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pair_pack<TI: Copy, PA: PackFrom<TI>>(
    isa: Isa,
    src: *const TI,
    rs: usize,
    cs: usize,
    rows: usize,
    kc: usize,
    w: usize,
    dst: *mut PA,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let copy16 = PA::IDENTITY && size_of::<TI>() == 2 && size_of::<PA>() == 2;
        if isa == Isa::Avx512 && copy16 && rows > 0 && kc > 0 && super::isa::hardware_features().avx512 {
            if rs == 1 && w == 32 {
                // SAFETY: AVX-512 F/BW are present (checked); the extents are the caller's.
                unsafe { x86_pairs::interleave_rows(src.cast::<u16>(), cs, rows, kc, dst.cast::<u16>()) };
                return true;
            }
            if cs == 1 && rs.is_multiple_of(2) && rs != 1 {
                let kg = kc.div_ceil(2);
                let full = kc / 2;
                for p in 0..rows.div_ceil(w) {
                    let r0 = p * w;
                    let rw = w.min(rows - r0);
                    // SAFETY: panel p holds kg * w pairs (the contract's extent); the pairs of row
                    // r0 + i < rows at k < 2·full lie inside the source; the odd last k (if any)
                    // is read element-wise below.
                    unsafe {
                        let pd = dst.add(p * kg * w * 2);
                        let s0 = src.add(r0 * rs);
                        if full > 0 {
                            x86_transpose::panel_f32(s0.cast::<f32>(), rs / 2, full, w, rw, pd.cast::<f32>());
                        }
                        if kc % 2 == 1 {
                            let d = pd.add(full * w * 2);
                            for i in 0..w {
                                *d.add(2 * i) = if i < rw { PA::cvt(*s0.add(i * rs + kc - 1)) } else { PA::PAD };
                                *d.add(2 * i + 1) = PA::PAD;
                            }
                        }
                    }
                }
                return true;
            }
        }
    }
    let _ = (isa, src, rs, cs, rows, kc, w, dst);
    false
}

/// The AVX-512 pair interleave for bf16 B panels.
#[cfg(target_arch = "x86_64")]
mod x86_pairs {
    use std::arch::x86_64::*;

    /// Packs `rows` columns (unit stride) x `kc` k rows (`cs` apart) of 16-bit values into
    /// panels of 32 columns: panel `p` (at `dst + p * ceil(kc/2) * 64`) holds, per pair of k rows,
    /// the 32 columns' (k, k+1) values interleaved; columns past `rows` and the k past `kc` are 0.
    /// Pairs of rows are walked in order, each panel's 32 columns loaded (masked at the edge) and
    /// interleaved by two `vpermt2w`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW; `src[c + k * cs]` is readable for `c < rows`, `k < kc`;
    /// `dst` is writable for `ceil(rows/32) * ceil(kc/2) * 64` values.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn interleave_rows(src: *const u16, cs: usize, rows: usize, kc: usize, dst: *mut u16) {
        let kg = kc.div_ceil(2);
        let np = rows.div_ceil(32);
        let lo_idx: [u16; 32] = std::array::from_fn(|x| (x / 2 + (x % 2) * 32) as u16);
        let hi_idx: [u16; 32] = std::array::from_fn(|x| (16 + x / 2 + (x % 2) * 32) as u16);
        // SAFETY: loads are masked to columns < rows of rows k < kc; stores stay in panel p < np,
        // group g < kg (64 values each), inside the extent of the contract.
        unsafe {
            let lo = _mm512_loadu_si512(lo_idx.as_ptr().cast());
            let hi = _mm512_loadu_si512(hi_idx.as_ptr().cast());
            for g in 0..kg {
                let (k0, k1) = (2 * g, 2 * g + 1);
                let (s0, s1) = (src.add(k0 * cs), src.wrapping_add(k1 * cs));
                // The next pair of rows, a few pairs ahead (a strided stream).
                let ahead = 2 * g + 8;
                for p in 0..np {
                    let c0 = p * 32;
                    let m: __mmask32 = if rows - c0 >= 32 { !0 } else { (1u32 << (rows - c0)) - 1 };
                    if ahead < kc {
                        super::super::tile::prefetch_span(
                            src.wrapping_add(ahead * cs + c0).cast::<u8>(),
                            64.min((rows - c0) * 2),
                        );
                    }
                    let r0 = _mm512_maskz_loadu_epi16(m, s0.add(c0).cast());
                    let r1 =
                        if k1 < kc { _mm512_maskz_loadu_epi16(m, s1.add(c0).cast()) } else { _mm512_setzero_si512() };
                    let d = dst.add((p * kg + g) * 64);
                    _mm512_storeu_si512(d.cast(), _mm512_permutex2var_epi16(r0, lo, r1));
                    _mm512_storeu_si512(d.add(32).cast(), _mm512_permutex2var_epi16(r0, hi, r1));
                }
            }
        }
    }
}

/// One panel of `rw <= w` source rows `rs` apart, each with unit k stride (row-major A,
/// column-major B), for f32 on AVX-512: see [`x86_transpose::panel_f32`]. Returns false
/// (nothing written) for other types, strides or ISAs.
///
/// # Safety
/// As [`pack_panels`] for one panel of `rw` rows.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn transpose_panel<TI: Copy, PA: PackFrom<TI>>(
    isa: Isa,
    s0: *const TI,
    rs: usize,
    cs: usize,
    kc: usize,
    w: usize,
    rw: usize,
    pd: *mut PA,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // IDENTITY with 4-byte elements is f32 -> f32 (a bit copy, padding 0.0 = all zero bits).
        let f32_copy = PA::IDENTITY && size_of::<TI>() == 4 && size_of::<PA>() == 4;
        if isa == Isa::Avx512 && f32_copy && cs == 1 && rs != 1 && rw > 0 {
            // SAFETY: Avx512 is chosen only on CPUs with AVX-512F; the extents are the caller's.
            unsafe { x86_transpose::panel_f32(s0.cast::<f32>(), rs, kc, w, rw, pd.cast::<f32>()) };
            return true;
        }
    }
    let _ = (isa, s0, rs, cs, kc, w, rw, pd);
    false
}

/// One panel of `rw <= w` source rows with unit k stride (row-major A) whose elements need a
/// conversion to 4-byte packed values (bf16/f16 → f32): chunks of [`CONVERT_RUN`] k values of
/// each row are converted as runs ([`PackFrom::cvt_run`]: F16C for f16) into a scratch block,
/// which is then transposed into the panel (in AVX-512 registers, or by an unrolled copy of
/// fixed width). `tmp` is the scratch, grown to `w · CONVERT_RUN` values at the first use.
/// Returns false (nothing written) for other layouts and types.
///
/// # Safety
/// As [`pack_panels`] for one panel of `rw` rows.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn convert_panel<TI: Copy, PA: PackFrom<TI>>(
    isa: Isa,
    s0: *const TI,
    rs: usize,
    cs: usize,
    kc: usize,
    w: usize,
    rw: usize,
    pd: *mut PA,
    scratch: &mut ConvertScratch,
) -> bool {
    if PA::IDENTITY
        || size_of::<PA>() != 4
        || align_of::<PA>() > align_of::<f32>()
        || cs != 1
        || rs == 1
        || rw == 0
        || rw > w
    {
        return false;
    }
    if scratch.0.len() < w * CONVERT_RUN {
        scratch.0.resize(w * CONVERT_RUN, 0.0);
    }
    // SAFETY: the f32 storage is initialised and PA has the size of f32 and at most its
    // alignment (checked above); PA is a plain 4-byte number (f32 or i32: any bit pattern is a
    // value), and the view borrows the storage mutably for its whole use.
    let tmp: &mut [PA] =
        unsafe { std::slice::from_raw_parts_mut(scratch.0.as_mut_ptr().cast::<PA>(), scratch.0.len()) };
    for k0 in (0..kc).step_by(CONVERT_RUN) {
        let kk = CONVERT_RUN.min(kc - k0);
        // SAFETY: row i < rw, k0 + kk <= kc lie in the source; the panel holds kc * w values
        // and this chunk writes k0..k0+kk of them.
        unsafe {
            for i in 0..rw {
                let src = std::slice::from_raw_parts(s0.add(i * rs + k0), kk);
                PA::cvt_run(src, &mut tmp[i * CONVERT_RUN..i * CONVERT_RUN + kk]);
            }
            let d = pd.add(k0 * w);
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx512 {
                // 4-byte values moved bit for bit (f32 after the conversion).
                x86_transpose::panel_f32(tmp.as_ptr().cast::<f32>(), CONVERT_RUN, kk, w, rw, d.cast::<f32>());
                continue;
            }
            let t = tmp.as_ptr();
            let fixed = rw == w
                && dispatch_width!(w, [4, 6, 8, 14, 16, 24, 32, 48], |W| {
                    for k in 0..kk {
                        let v: [PA; W] = std::array::from_fn(|i| *t.add(i * CONVERT_RUN + k));
                        std::ptr::write_unaligned(d.add(k * W).cast::<[PA; W]>(), v);
                    }
                });
            if !fixed {
                for k in 0..kk {
                    for i in 0..w {
                        *d.add(k * w + i) = if i < rw { tmp[i * CONVERT_RUN + k] } else { PA::PAD };
                    }
                }
            }
        }
    }
    let _ = isa;
    true
}

/// k values per converted run of [`convert_panel`].
const CONVERT_RUN: usize = 64;

/// The storage of [`convert_panel`]'s runs on this thread (4-byte values), taken for one
/// [`pack_panels`] call and put back when it ends.
pub(crate) struct ConvertScratch(Vec<f32>);

thread_local! {
    static CONVERT_SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Drop for ConvertScratch {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        CONVERT_SCRATCH.with(|c| c.set(v));
    }
}

/// The AVX-512 transposing pack.
#[cfg(target_arch = "x86_64")]
mod x86_transpose {
    use std::arch::x86_64::*;

    /// Packs a panel of `w` rows (`rw` of them read, `rs` apart, unit k stride; the rest 0.0)
    /// k-major into `pd` (`kc * w` values): 16 rows x 16 k at a time are loaded as 16 vectors
    /// (masked past `kc`, so nothing past the source is touched), transposed in registers and
    /// stored as 16 vectors of one k each, masked to the panel's width.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `s0[i * rs + k]` is readable for `i < rw`, `k < kc`; `pd` is
    /// writable for `kc * w` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn panel_f32(s0: *const f32, rs: usize, kc: usize, w: usize, rw: usize, pd: *mut f32) {
        for c0 in (0..w).step_by(16) {
            let rows = rw.saturating_sub(c0).min(16);
            let lanes = (w - c0).min(16);
            let store_mask = ((1u32 << lanes) - 1) as __mmask16;
            for k0 in (0..kc).step_by(16) {
                let kn = (kc - k0).min(16);
                let load_mask = ((1u32 << kn) - 1) as __mmask16;
                // SAFETY: row c0 + i < rw and k0 + lane < kc for every unmasked lane (masked
                // lanes are neither read nor faulted on); stores cover k < kc and lanes < w - c0.
                unsafe {
                    let r: [__m512; 16] = std::array::from_fn(|i| {
                        if i < rows {
                            _mm512_maskz_loadu_ps(load_mask, s0.add((c0 + i) * rs + k0))
                        } else {
                            _mm512_setzero_ps()
                        }
                    });
                    let o = transpose16(r);
                    for (k, v) in o.iter().enumerate().take(kn) {
                        _mm512_mask_storeu_ps(pd.add((k0 + k) * w + c0), store_mask, *v);
                    }
                }
            }
        }
    }

    /// The 16 x 16 transpose: `o[k]` lane `i` = `r[i]` lane `k`. Pairs of rows interleave by
    /// 32 bits, then pairs of pairs by 64 bits (giving, in each 128-bit lane `l`, rows 4q..4q+3
    /// at one k of 4l..4l+3), then the 128-bit lanes of four such vectors are transposed.
    #[inline(always)]
    fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
        // SAFETY: register-only shuffles; the enclosing function enables AVX-512F.
        unsafe {
            let t: [__m512; 16] = std::array::from_fn(|x| {
                let (a, b) = (r[x & !1], r[x | 1]);
                if x % 2 == 0 { _mm512_unpacklo_ps(a, b) } else { _mm512_unpackhi_ps(a, b) }
            });
            // u[4q + j]: lane l holds rows 4q..4q+3 at k = 4l + j.
            let u: [__m512; 16] = std::array::from_fn(|x| {
                let (q, j) = (x / 4, x % 4);
                let a = _mm512_castps_pd(t[4 * q + j / 2]);
                let b = _mm512_castps_pd(t[4 * q + 2 + j / 2]);
                _mm512_castpd_ps(if j % 2 == 0 { _mm512_unpacklo_pd(a, b) } else { _mm512_unpackhi_pd(a, b) })
            });
            let mut o = [_mm512_setzero_ps(); 16];
            for j in 0..4 {
                let (a, b, c, d) = (u[j], u[4 + j], u[8 + j], u[12 + j]);
                let v0 = _mm512_shuffle_f32x4::<0x44>(a, b);
                let v1 = _mm512_shuffle_f32x4::<0xEE>(a, b);
                let v2 = _mm512_shuffle_f32x4::<0x44>(c, d);
                let v3 = _mm512_shuffle_f32x4::<0xEE>(c, d);
                o[j] = _mm512_shuffle_f32x4::<0x88>(v0, v2);
                o[4 + j] = _mm512_shuffle_f32x4::<0xDD>(v0, v2);
                o[8 + j] = _mm512_shuffle_f32x4::<0x88>(v1, v3);
                o[12 + j] = _mm512_shuffle_f32x4::<0xDD>(v1, v3);
            }
            o
        }
    }
}

/// A full panel of `w` strided rows, k-major, with `w` a compile-time constant (the row loop
/// unrolls into `w` loads from `w` streams and one contiguous run of stores per k). Returns
/// false (nothing written) for widths without a specialisation.
///
/// # Safety
/// As [`pack_panels`] for one full panel.
#[inline(always)]
unsafe fn pack_rows_fixed<TI: Copy, PA: PackFrom<TI>>(
    s0: *const TI,
    rs: usize,
    cs: usize,
    kc: usize,
    w: usize,
    pd: *mut PA,
) -> bool {
    /// # Safety: as `pack_rows_fixed` with `w == W`.
    #[inline(always)]
    unsafe fn go<TI: Copy, PA: PackFrom<TI>, const W: usize>(
        s0: *const TI,
        rs: usize,
        cs: usize,
        kc: usize,
        pd: *mut PA,
    ) {
        // SAFETY: rows < W and k < kc lie in the source block; the panel holds kc * W elements.
        unsafe {
            for k in 0..kc {
                let s = s0.add(k * cs);
                let v: [PA; W] = std::array::from_fn(|i| PA::cvt(*s.add(i * rs)));
                std::ptr::write_unaligned(pd.add(k * W).cast::<[PA; W]>(), v);
            }
        }
    }
    // SAFETY: forwarded contract.
    unsafe { dispatch_width!(w, [4, 6, 8, 14, 16, 24, 32], |W| go::<TI, PA, W>(s0, rs, cs, kc, pd)) }
}

/// A full panel of `w` contiguous elements per k (B's rows), with `w` a compile-time constant
/// (the copy of each k becomes a few vector moves); the source rows, `cs` apart, are
/// prefetched a few k ahead (a strided stream the hardware prefetcher may miss). Returns false
/// (nothing written) for widths without a specialisation.
///
/// # Safety
/// As [`pack_panels`] for one full panel with `rs == 1`.
#[inline(always)]
unsafe fn pack_cols_fixed<TI: Copy, PA: PackFrom<TI>>(
    s0: *const TI,
    cs: usize,
    kc: usize,
    w: usize,
    pd: *mut PA,
) -> bool {
    /// # Safety: as `pack_cols_fixed` with `w == W`.
    #[inline(always)]
    unsafe fn go<TI: Copy, PA: PackFrom<TI>, const W: usize>(s0: *const TI, cs: usize, kc: usize, pd: *mut PA) {
        const AHEAD: usize = 16;
        // SAFETY: k < kc and i < W lie in the source panel; the panel holds kc * W elements.
        unsafe {
            for k in 0..kc {
                let s = s0.add(k * cs);
                // Every line of the row a few k ahead (first and last element cover a misaligned
                // start).
                super::tile::prefetch_span(s.wrapping_add(AHEAD * cs).cast::<u8>(), W * size_of::<TI>());
                // Whole-row values: one block read and one block write (no aliasing question
                // between source and panel, so the copy becomes vector moves).
                copy_row::<TI, PA, W>(s, pd.add(k * W));
            }
        }
    }
    // SAFETY: forwarded contract.
    unsafe { dispatch_width!(w, [8, 16, 24, 32, 48], |W| go::<TI, PA, W>(s0, cs, kc, pd)) }
}

/// `W` contiguous elements from `s`, converted, to `d`: a plain copy when no conversion is
/// needed (moving them through an array value makes the compiler stage it on the stack).
///
/// # Safety
/// `s` is readable and `d` writable for `W` elements, each aligned for its type; they do not
/// overlap.
#[inline(always)]
unsafe fn copy_row<TI: Copy, PA: PackFrom<TI>, const W: usize>(s: *const TI, d: *mut PA) {
    // SAFETY: the caller's contract; with IDENTITY, TI and PA are the same type.
    unsafe {
        if PA::IDENTITY {
            std::ptr::copy_nonoverlapping(s.cast::<PA>(), d, W);
        } else {
            PA::cvt_run(std::slice::from_raw_parts(s, W), std::slice::from_raw_parts_mut(d, W));
        }
    }
}

/// The full panels of [`pack_panels`] for `g == 1` and `rs == 1` (each k is a contiguous source
/// row), walked k-major: every source row is read front to back, so the hardware prefetchers
/// follow it, where walking panel by panel jumps a row stride (often pages) per k and stalls on
/// each miss. The writes go to `rows / w` panels in turn, `w` contiguous elements each. Returns
/// the number of full panels written (0 for widths without a specialisation).
///
/// # Safety
/// As [`pack_panels`] with `g == 1` and `rs == 1`.
#[inline(always)]
unsafe fn pack_cols_rowwise<TI: Copy, PA: PackFrom<TI>>(
    src: *const TI,
    cs: usize,
    rows: usize,
    kc: usize,
    w: usize,
    dst: *mut PA,
) -> usize {
    /// Source rows read together: each panel then receives `KB · W` contiguous elements at a
    /// time, which bounds the partly written lines per L1 set when panels lie a multiple of
    /// 4 KiB apart (measured as fast as one row at a time on the AVX-512 Xeon of session 8).
    const KB: usize = 8;
    /// # Safety: as `pack_cols_rowwise` with `w == W`.
    #[inline(always)]
    unsafe fn go<TI: Copy, PA: PackFrom<TI>, const W: usize>(
        src: *const TI,
        cs: usize,
        np: usize,
        kc: usize,
        dst: *mut PA,
    ) {
        // SAFETY: panel p < np covers source columns p*W..(p+1)*W ≤ rows of row k < kc, and
        // destination p*kc*W + k*W + W ≤ np*kc*W, inside the extent of the contract.
        unsafe {
            for k0 in (0..kc).step_by(KB) {
                let kb = KB.min(kc - k0);
                for p in 0..np {
                    let d = dst.add(p * kc * W + k0 * W);
                    let s = src.add(k0 * cs + p * W);
                    for kk in 0..kb {
                        copy_row::<TI, PA, W>(s.add(kk * cs), d.add(kk * W));
                    }
                }
            }
        }
    }
    let np = rows / w;
    // SAFETY: forwarded contract.
    unsafe { if dispatch_width!(w, [8, 16, 24, 32, 48], |W| go::<TI, PA, W>(src, cs, np, kc, dst)) { np } else { 0 } }
}

/// `-128 ×` the column sums of packed i8 B panels (`cols` columns padded to panels of `w`, each
/// `kgroups` groups of `g`), written to `out[0..ceil(cols/w)*w]`: the correction for VNNI's
/// unsigned A (`Σ (a+128)·b - 128·Σ b = Σ a·b`).
///
/// # Safety
/// `panels` holds the packed panels described.
pub(crate) unsafe fn colsum_correction(
    panels: *const i8,
    cols: usize,
    kgroups: usize,
    w: usize,
    g: usize,
    out: &mut [i32],
) {
    let np = cols.div_ceil(w);
    for p in 0..np {
        for j in 0..w {
            let mut s = 0i32;
            for kg in 0..kgroups {
                for q in 0..g {
                    // SAFETY: inside panel p of the extent in the contract.
                    s += unsafe { *panels.add(p * kgroups * w * g + (kg * w + j) * g + q) } as i32;
                }
            }
            out[p * w + j] = -128 * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_row_major_into_k_major_panels_with_padding() {
        // A 3x2 row-major [[1,2],[3,4],[5,6]] into panels of 2 rows: panel 0 = k0:(1,3) k1:(2,4),
        // panel 1 = k0:(5,0) k1:(6,0).
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut d = [9.0f32; 8];
        // SAFETY: 3 rows x 2 k at strides (2, 1) lie in `a`; 2 panels of 2x2 fit `d`.
        unsafe { pack_panels::<f32, f32>(a.as_ptr(), 2, 1, 3, 2, 2, 1, d.as_mut_ptr(), Isa::Generic) };
        assert_eq!(d, [1.0, 3.0, 2.0, 4.0, 5.0, 0.0, 6.0, 0.0]);
    }

    #[test]
    fn packs_pairs_and_unsigned_offset() {
        // 1 row, k = 3, g = 2: groups (x0, x1), (x2, pad).
        let a = [1i8, -2, 3];
        let mut d = [7u8; 4];
        // SAFETY: 1 row x 3 k at strides (3, 1) lie in `a`; 1 panel of 2 groups x 1 x 2 fits `d`.
        unsafe { pack_panels::<i8, u8>(a.as_ptr(), 3, 1, 1, 3, 1, 2, d.as_mut_ptr(), Isa::Generic) };
        assert_eq!(d, [129, 126, 131, 0]);
    }

    /// The AVX-512 bf16 pair packs against the element loop of the definition: B rows (unit
    /// column stride, panels of 32) and A rows (unit k stride, even and odd row strides), odd
    /// and even k, partial panels. Each value encodes its (row, k).
    #[test]
    fn pair_packs_match_the_definition() {
        use half::bf16;
        if !super::super::isa::isa_supported(Isa::Avx512) {
            return;
        }
        let code = |r: usize, k: usize| bf16::from_bits((r * 64 + k) as u16 + 1);
        for w in [14usize, 32] {
            for rows in [1usize, 13, w, 2 * w + 5, 70] {
                for kc in [1usize, 2, 7, 16, 33] {
                    // (rs, cs) = (1, stride) is B's transposed view; (stride, 1) is A.
                    for (rs, cs) in [(1usize, rows + 3), (kc + 1, 1), (kc + 2, 1), (2 * kc.div_ceil(2) + 4, 1)] {
                        let len = (rows - 1) * rs + (kc - 1) * cs + 1;
                        let mut src = vec![bf16::from_bits(0xFFFF); len];
                        for r in 0..rows {
                            for k in 0..kc {
                                src[r * rs + k * cs] = code(r, k);
                            }
                        }
                        let kg = kc.div_ceil(2);
                        let size = rows.div_ceil(w) * kg * w * 2;
                        let mut got = vec![bf16::from_bits(0x7777); size];
                        // SAFETY: rows x kc at (rs, cs) lie in `src`; `got` holds the panels.
                        unsafe {
                            pack_panels::<bf16, bf16>(
                                src.as_ptr(),
                                rs,
                                cs,
                                rows,
                                kc,
                                w,
                                2,
                                got.as_mut_ptr(),
                                Isa::Avx512,
                            )
                        };
                        for p in 0..rows.div_ceil(w) {
                            for g in 0..kg {
                                for i in 0..w {
                                    for q in 0..2 {
                                        let (r, k) = (p * w + i, 2 * g + q);
                                        let want = if r < rows && k < kc { code(r, k) } else { bf16::ZERO };
                                        let at = p * kg * w * 2 + (g * w + i) * 2 + q;
                                        assert_eq!(
                                            got[at].to_bits(),
                                            want.to_bits(),
                                            "w {w} rows {rows} kc {kc} rs {rs} cs {cs}: row {r} k {k}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The converting A pack (f16 → f32 runs, then transposed) against the element loop, on
    /// every ISA this CPU runs, with k across several runs and partial panels.
    #[test]
    fn converting_pack_matches_the_definition() {
        use half::f16;
        for isa in [Isa::Generic, Isa::Avx2, Isa::Avx512] {
            if !super::super::isa::isa_supported(isa) {
                continue;
            }
            for w in [6usize, 14, 16, 13] {
                for rows in [1usize, w - 1, w, 2 * w + 3] {
                    for kc in [1usize, 63, 64, 65, 130] {
                        let rs = kc + 5;
                        let src: Vec<f16> =
                            (0..rows * rs).map(|x| f16::from_f32(((x / rs) * 200 + x % rs) as f32)).collect();
                        let mut got = vec![-1.0f32; rows.div_ceil(w) * kc * w];
                        // SAFETY: rows x kc at strides (rs, 1) lie in `src`; `got` holds the panels.
                        unsafe { pack_panels::<f16, f32>(src.as_ptr(), rs, 1, rows, kc, w, 1, got.as_mut_ptr(), isa) };
                        for p in 0..rows.div_ceil(w) {
                            for k in 0..kc {
                                for i in 0..w {
                                    let r = p * w + i;
                                    let want = if r < rows { src[r * rs + k].to_f32() } else { 0.0 };
                                    assert_eq!(
                                        got[(p * kc + k) * w + i],
                                        want,
                                        "{isa:?} w {w} rows {rows} kc {kc} row {r} k {k}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The AVX-512 transposing pack against the definition: every panel width the kernels use
    /// (and odd ones), partial panels, k tails of every length mod 16, and a row stride that
    /// is not a multiple of 16. Each value encodes its (row, k), so a misplaced one is named.
    #[test]
    fn transposing_pack_matches_the_definition() {
        if !super::super::isa::isa_supported(Isa::Avx512) {
            return;
        }
        for w in [1usize, 4, 8, 13, 14, 16, 17, 24, 32, 48] {
            for rows in [1, w.saturating_sub(1).max(1), w, 2 * w + 3] {
                for kc in [1usize, 2, 15, 16, 17, 31, 33, 64] {
                    let rs = kc + 3;
                    let src: Vec<f32> = (0..rows * rs).map(|x| ((x / rs) * 1000 + x % rs) as f32).collect();
                    let panels = rows.div_ceil(w);
                    let mut got = vec![-1.0f32; panels * kc * w];
                    // SAFETY: rows x kc at strides (rs, 1) lie in `src`; `got` holds the panels.
                    unsafe {
                        pack_panels::<f32, f32>(src.as_ptr(), rs, 1, rows, kc, w, 1, got.as_mut_ptr(), Isa::Avx512)
                    };
                    for p in 0..panels {
                        for k in 0..kc {
                            for i in 0..w {
                                let r = p * w + i;
                                let want = if r < rows { (r * 1000 + k) as f32 } else { 0.0 };
                                assert_eq!(got[(p * kc + k) * w + i], want, "w {w} rows {rows} kc {kc} row {r} k {k}");
                            }
                        }
                    }
                }
            }
        }
    }
}
