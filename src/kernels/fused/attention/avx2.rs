//! AVX2+FMA micro-kernels of the tiled attention: `Q·Kᵀ` and `P·V` of 16 query lanes against
//! up to [`ROWS`] broadcast rows, packing, stores, and the online-softmax update.

use std::arch::x86_64::*;

use super::Q_BLOCK;

/// Broadcast rows per micro-kernel call: keys of `Q·Kᵀ`, value columns of `P·V`
/// (6 rows × 16 query lanes = 12 accumulators).
pub(super) const ROWS: usize = 6;

/// Transposed scores of `R` (1..=6) key rows against 16 query lanes, plus `kadd[r]` for key r
/// when `kadd` is not null (a score of −∞ stays −∞); `mx` (16 lanes) becomes the maximum of
/// itself and the new scores (`max_ps` order: a NaN score may be dropped, see
/// `softmax_lanes`).
///
/// # Safety
/// AVX2+FMA; `qt` points at lane h of a `d × Q_BLOCK` packed block with h + 16 ≤ Q_BLOCK;
/// `k` holds `R` rows of `d` values `ks` apart; `st` points at lane h of `R` rows `Q_BLOCK`
/// apart; `kadd` is null or holds `R` values; `mx` points at 16 values.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn qk_r<const R: usize>(
    qt: *const f32,
    d: usize,
    k: *const f32,
    ks: usize,
    st: *mut f32,
    scale: f32,
    kadd: *const f32,
    mx: *mut f32,
) {
    let mut a = [[_mm256_setzero_ps(); 2]; R];
    let kp: [*const f32; R] = std::array::from_fn(|r| k.wrapping_add(r * ks));
    for c in 0..d {
        // SAFETY: c < d rows of qt with 16 lanes from qt; key row r < R has d values.
        unsafe {
            let q0 = _mm256_loadu_ps(qt.add(c * Q_BLOCK));
            let q1 = _mm256_loadu_ps(qt.add(c * Q_BLOCK + 8));
            for (ar, &kr) in a.iter_mut().zip(&kp) {
                let x = _mm256_broadcast_ss(&*kr.add(c));
                ar[0] = _mm256_fmadd_ps(x, q0, ar[0]);
                ar[1] = _mm256_fmadd_ps(x, q1, ar[1]);
            }
        }
    }
    let sc = _mm256_set1_ps(scale);
    // SAFETY: mx holds 16 values (the contract).
    let mut m = unsafe { [_mm256_loadu_ps(mx), _mm256_loadu_ps(mx.add(8))] };
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    for (r, ar) in a.iter().enumerate() {
        let mut s = [_mm256_mul_ps(ar[0], sc), _mm256_mul_ps(ar[1], sc)];
        if !kadd.is_null() {
            // SAFETY: kadd holds R values (the contract).
            let ka = unsafe { _mm256_broadcast_ss(&*kadd.add(r)) };
            for x in &mut s {
                *x = _mm256_blendv_ps(_mm256_add_ps(*x, ka), *x, _mm256_cmp_ps::<_CMP_EQ_OQ>(*x, ninf));
            }
        }
        m = [_mm256_max_ps(m[0], s[0]), _mm256_max_ps(m[1], s[1])];
        // SAFETY: row r < R of st has 16 writable lanes from st.
        unsafe {
            _mm256_storeu_ps(st.add(r * Q_BLOCK), s[0]);
            _mm256_storeu_ps(st.add(r * Q_BLOCK + 8), s[1]);
        }
    }
    // SAFETY: as for the loads of mx.
    unsafe {
        _mm256_storeu_ps(mx, m[0]);
        _mm256_storeu_ps(mx.add(8), m[1]);
    }
}

/// `accᵀ[c][·] = α·accᵀ[c][·] + Σ_{j<nk} pᵀ[j][·]·v_j[c]` for `R` (1..=6) value columns
/// and 16 query lanes (no `α` term when `first`).
///
/// # Safety
/// AVX2+FMA; `p` points at lane h of `nk` rows `Q_BLOCK` apart with h + 16 ≤ Q_BLOCK; `v`
/// holds `nk` rows `vs` apart with `R` values each; `acc` points at lane h of `R` rows
/// `Q_BLOCK` apart; `alpha` holds 16 values.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn pv_r<const R: usize>(
    p: *const f32,
    nk: usize,
    v: *const f32,
    vs: usize,
    acc: *mut f32,
    alpha: *const f32,
    first: bool,
) {
    let mut a = [[_mm256_setzero_ps(); 2]; R];
    if !first {
        // SAFETY: 16 alpha values; rows r < R of acc have 16 lanes (the caller's contract).
        unsafe {
            let al = [_mm256_loadu_ps(alpha), _mm256_loadu_ps(alpha.add(8))];
            for (r, ar) in a.iter_mut().enumerate() {
                ar[0] = _mm256_mul_ps(_mm256_loadu_ps(acc.add(r * Q_BLOCK)), al[0]);
                ar[1] = _mm256_mul_ps(_mm256_loadu_ps(acc.add(r * Q_BLOCK + 8)), al[1]);
            }
        }
    }
    for j in 0..nk {
        // SAFETY: row j < nk of p has 16 lanes; row j of v has R values (the caller's contract).
        unsafe {
            let p0 = _mm256_loadu_ps(p.add(j * Q_BLOCK));
            let p1 = _mm256_loadu_ps(p.add(j * Q_BLOCK + 8));
            let vr = v.add(j * vs);
            for (r, ar) in a.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*vr.add(r));
                ar[0] = _mm256_fmadd_ps(x, p0, ar[0]);
                ar[1] = _mm256_fmadd_ps(x, p1, ar[1]);
            }
        }
    }
    for (r, ar) in a.iter().enumerate() {
        // SAFETY: as for the loads of acc.
        unsafe {
            _mm256_storeu_ps(acc.add(r * Q_BLOCK), ar[0]);
            _mm256_storeu_ps(acc.add(r * Q_BLOCK + 8), ar[1]);
        }
    }
}

online_softmax!("avx2,fma", avx2);

/// Transposes an 8×8 block: lane i of row j of the result is lane j of row i of `r`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// Packs 8 rows of `d` values transposed: value c of `src[i]` goes to `dst[c·Q_BLOCK + i]`.
///
/// # Safety
/// AVX2+FMA; every `src[i]` holds `d` values and `dst` holds `(d − 1)·Q_BLOCK + 8`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn pack8(src: [&[f32]; 8], d: usize, dst: &mut [f32]) {
    debug_assert!(src.iter().all(|s| s.len() >= d) && dst.len() >= (d - 1) * Q_BLOCK + 8);
    let dp = dst.as_mut_ptr();
    let mut c = 0;
    while c + 8 <= d {
        // SAFETY: columns c..c+8 ≤ d of each source row; rows c..c+8 of dst (the contract).
        unsafe {
            let t = transpose8(std::array::from_fn(|i| _mm256_loadu_ps(src[i].as_ptr().add(c))));
            for (x, &tx) in t.iter().enumerate() {
                _mm256_storeu_ps(dp.add((c + x) * Q_BLOCK), tx);
            }
        }
        c += 8;
    }
    for cc in c..d {
        for (i, s) in src.iter().enumerate() {
            dst[cc * Q_BLOCK + i] = s[cc];
        }
    }
}

/// Writes 8 output rows: value c of row i is `acc[c·Q_BLOCK + i]·inv[i]`, for `c < vd`; rows
/// whose pointer is null are skipped.
///
/// # Safety
/// AVX2+FMA; `acc` holds `(vd − 1)·Q_BLOCK + 8` values, `inv` 8; every non-null `dst[i]`
/// points at `vd` writable values that no other thread accesses.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn store8(acc: &[f32], vd: usize, inv: &[f32], dst: [*mut f32; 8]) {
    debug_assert!(acc.len() >= (vd - 1) * Q_BLOCK + 8 && inv.len() >= 8);
    let ap = acc.as_ptr();
    // SAFETY: inv holds 8 values (the contract).
    let iv = unsafe { _mm256_loadu_ps(inv.as_ptr()) };
    let mut c = 0;
    while c + 8 <= vd {
        // SAFETY: rows c..c+8 < vd of acc, 8 lanes each; columns c..c+8 ≤ vd of each
        // non-null dst row (the contract).
        unsafe {
            let t = transpose8(std::array::from_fn(|x| _mm256_mul_ps(_mm256_loadu_ps(ap.add((c + x) * Q_BLOCK)), iv)));
            for (&o, &tx) in dst.iter().zip(&t) {
                if !o.is_null() {
                    _mm256_storeu_ps(o.add(c), tx);
                }
            }
        }
        c += 8;
    }
    for cc in c..vd {
        for (i, &o) in dst.iter().enumerate() {
            if !o.is_null() {
                // SAFETY: cc < vd values of the row (the contract).
                unsafe { *o.add(cc) = acc[cc * Q_BLOCK + i] * inv[i] };
            }
        }
    }
}

/// Whether the `nk` rows of `vd` values (`vs` apart) of `v` are all finite.
#[target_feature(enable = "avx2,fma")]
pub(super) fn all_finite(v: &[f32], nk: usize, vs: usize, vd: usize) -> bool {
    let zero = _mm256_setzero_ps();
    let mut acc = zero;
    let v8 = vd / 8 * 8;
    for j in 0..nk {
        let row = &v[j * vs..j * vs + vd];
        let mut c = 0;
        while c < v8 {
            // SAFETY: c + 8 ≤ vd = row.len(); x·0 is 0 for finite x, NaN otherwise.
            acc = _mm256_add_ps(acc, _mm256_mul_ps(unsafe { _mm256_loadu_ps(row.as_ptr().add(c)) }, zero));
            c += 8;
        }
        if !row[v8..].iter().all(|x| x.is_finite()) {
            return false;
        }
    }
    _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(acc, acc)) == 0
}
