//! Packing: copies a strided block into the panel layout the microkernels read (converting the
//! element type on the way: bf16/f16 → f32, i8 → u8 + 128, …). Strides are absorbed here, so
//! transposed operands never need a materialised transpose.

use super::kernel::PackFrom;

/// Packs `rows` x `kc` of a strided matrix (`src[r * rs + k * cs]`) into panels of `w` rows:
/// panel `p` starts at `dst + p * ceil(kc/g) * w * g` and holds, for each group of `g` k values,
/// `w` rows of `g` consecutive k values. Rows past `rows` and k past `kc` are `PA::PAD`.
///
/// A is packed with `(rs, cs) = (rsa, csa)`; B with its transpose view `(csb, rsb)`.
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
) {
    let kgroups = kc.div_ceil(g);
    // SAFETY: every read is at r * rs + k * cs with r < rows and k < kc; every write is inside
    // the panel extent stated in the contract.
    unsafe {
        // Several full panels of contiguous rows (B row-major): walk the source row by row.
        let full =
            if g == 1 && rs == 1 && rows >= 2 * w { pack_cols_rowwise::<TI, PA>(src, cs, rows, kc, w, dst) } else { 0 };
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
    unsafe {
        match w {
            4 => go::<TI, PA, 4>(s0, rs, cs, kc, pd),
            6 => go::<TI, PA, 6>(s0, rs, cs, kc, pd),
            8 => go::<TI, PA, 8>(s0, rs, cs, kc, pd),
            14 => go::<TI, PA, 14>(s0, rs, cs, kc, pd),
            16 => go::<TI, PA, 16>(s0, rs, cs, kc, pd),
            24 => go::<TI, PA, 24>(s0, rs, cs, kc, pd),
            32 => go::<TI, PA, 32>(s0, rs, cs, kc, pd),
            _ => return false,
        }
    }
    true
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
                let ahead = s.wrapping_add(AHEAD * cs);
                for off in (0..W).step_by(64 / size_of::<TI>().max(1)) {
                    super::tile::prefetch_read(ahead.wrapping_add(off));
                }
                super::tile::prefetch_read(ahead.wrapping_add(W - 1));
                // Whole-row values: one block read and one block write (no aliasing question
                // between source and panel, so the copy becomes vector moves).
                copy_row::<TI, PA, W>(s, pd.add(k * W));
            }
        }
    }
    // SAFETY: forwarded contract.
    unsafe {
        match w {
            8 => go::<TI, PA, 8>(s0, cs, kc, pd),
            16 => go::<TI, PA, 16>(s0, cs, kc, pd),
            24 => go::<TI, PA, 24>(s0, cs, kc, pd),
            32 => go::<TI, PA, 32>(s0, cs, kc, pd),
            48 => go::<TI, PA, 48>(s0, cs, kc, pd),
            _ => return false,
        }
    }
    true
}

/// `W` contiguous elements from `s`, converted, to `d`: a plain copy when no conversion is
/// needed (moving them through an array value makes the compiler stage it on the stack).
///
/// # Safety
/// `s` is readable and `d` writable for `W` elements; they do not overlap.
#[inline(always)]
unsafe fn copy_row<TI: Copy, PA: PackFrom<TI>, const W: usize>(s: *const TI, d: *mut PA) {
    // SAFETY: the caller's contract; with IDENTITY, TI and PA are the same type.
    unsafe {
        if PA::IDENTITY {
            std::ptr::copy_nonoverlapping(s.cast::<PA>(), d, W);
        } else {
            let v: [TI; W] = std::ptr::read_unaligned(s.cast());
            std::ptr::write_unaligned(d.cast::<[PA; W]>(), v.map(PA::cvt));
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
    unsafe {
        match w {
            8 => go::<TI, PA, 8>(src, cs, np, kc, dst),
            16 => go::<TI, PA, 16>(src, cs, np, kc, dst),
            24 => go::<TI, PA, 24>(src, cs, np, kc, dst),
            32 => go::<TI, PA, 32>(src, cs, np, kc, dst),
            48 => go::<TI, PA, 48>(src, cs, np, kc, dst),
            _ => return 0,
        }
    }
    np
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
        unsafe { pack_panels::<f32, f32>(a.as_ptr(), 2, 1, 3, 2, 2, 1, d.as_mut_ptr()) };
        assert_eq!(d, [1.0, 3.0, 2.0, 4.0, 5.0, 0.0, 6.0, 0.0]);
    }

    #[test]
    fn packs_pairs_and_unsigned_offset() {
        // 1 row, k = 3, g = 2: groups (x0, x1), (x2, pad).
        let a = [1i8, -2, 3];
        let mut d = [7u8; 4];
        // SAFETY: 1 row x 3 k at strides (3, 1) lie in `a`; 1 panel of 2 groups x 1 x 2 fits `d`.
        unsafe { pack_panels::<i8, u8>(a.as_ptr(), 3, 1, 1, 3, 1, 2, d.as_mut_ptr()) };
        assert_eq!(d, [129, 126, 131, 0]);
    }
}
