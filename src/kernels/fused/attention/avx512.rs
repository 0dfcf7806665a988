//! AVX-512F micro-kernels: all query lanes of a block (16 or 32: one or two vectors) against up
//! to [`ROWS`] broadcast rows, and the online-softmax update of 16 lanes.

use std::arch::x86_64::*;

use super::Q_BLOCK;

/// f32 lanes of one vector.
pub(super) const LANES: usize = 16;
/// Broadcast rows per micro-kernel call (12 rows × 2 vectors = 24 accumulators).
pub(super) const ROWS: usize = 12;

/// Transposed scores of `R` key rows against `NV` vectors of query lanes, plus `kadd[r]` for
/// key r when `kadd` is not null (a score of −∞ stays −∞); `mx` (`NV` vectors) becomes the
/// maximum of itself and the new scores (see `avx2::qk_r`).
///
/// # Safety
/// AVX-512F; `qt` points at a `d × Q_BLOCK` packed block (`NV · 16 ≤ Q_BLOCK` lanes read);
/// `k` holds `R` rows of `d` values `ks` apart; `st` points at `R` rows `Q_BLOCK` apart of
/// `NV · 16` writable lanes; `kadd` is null or holds `R` values; `mx` at `NV · 16` values.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn qk<const NV: usize, const R: usize>(
    qt: *const f32,
    d: usize,
    k: *const f32,
    ks: usize,
    st: *mut f32,
    scale: f32,
    kadd: *const f32,
    mx: *mut f32,
) {
    let mut a = [[_mm512_setzero_ps(); NV]; R];
    let kp: [*const f32; R] = std::array::from_fn(|r| k.wrapping_add(r * ks));
    for c in 0..d {
        // SAFETY: c < d rows of qt with NV·16 lanes; key row r < R has d values.
        unsafe {
            let q: [__m512; NV] = std::array::from_fn(|v| _mm512_loadu_ps(qt.add(c * Q_BLOCK + v * LANES)));
            for (ar, &kr) in a.iter_mut().zip(&kp) {
                let x = _mm512_set1_ps(*kr.add(c));
                for (acc, &qv) in ar.iter_mut().zip(&q) {
                    *acc = _mm512_fmadd_ps(x, qv, *acc);
                }
            }
        }
    }
    let sc = _mm512_set1_ps(scale);
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    // SAFETY: mx holds NV·16 values; row r < R of st has NV·16 writable lanes; kadd, when not
    // null, holds R values (the contract).
    unsafe {
        let mut m: [__m512; NV] = std::array::from_fn(|v| _mm512_loadu_ps(mx.add(v * LANES)));
        for (r, ar) in a.iter().enumerate() {
            let ka = if kadd.is_null() { None } else { Some(_mm512_set1_ps(*kadd.add(r))) };
            for (v, (&acc, mv)) in ar.iter().zip(m.iter_mut()).enumerate() {
                let mut s = _mm512_mul_ps(acc, sc);
                if let Some(ka) = ka {
                    // The key's additive mask on every lane whose score is not −∞.
                    let finite = !_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(s, ninf);
                    s = _mm512_mask_add_ps(s, finite, s, ka);
                }
                *mv = _mm512_max_ps(*mv, s);
                _mm512_storeu_ps(st.add(r * Q_BLOCK + v * LANES), s);
            }
        }
        for (v, &mv) in m.iter().enumerate() {
            _mm512_storeu_ps(mx.add(v * LANES), mv);
        }
    }
}

/// [`qk`] over 16 query lanes.
///
/// # Safety
/// As [`qk`] with `NV = 1`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn qk1<const R: usize>(
    qt: *const f32,
    d: usize,
    k: *const f32,
    ks: usize,
    st: *mut f32,
    scale: f32,
    kadd: *const f32,
    mx: *mut f32,
) {
    // SAFETY: forwarded contract.
    unsafe { qk::<1, R>(qt, d, k, ks, st, scale, kadd, mx) }
}

/// [`qk`] over 32 query lanes.
///
/// # Safety
/// As [`qk`] with `NV = 2`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn qk2<const R: usize>(
    qt: *const f32,
    d: usize,
    k: *const f32,
    ks: usize,
    st: *mut f32,
    scale: f32,
    kadd: *const f32,
    mx: *mut f32,
) {
    // SAFETY: forwarded contract.
    unsafe { qk::<2, R>(qt, d, k, ks, st, scale, kadd, mx) }
}

/// `accᵀ[c][·] = α·accᵀ[c][·] + Σ_{j<nk} pᵀ[j][·]·v_j[c]` for `R` value columns and `NV`
/// vectors of query lanes (no `α` term when `first`).
///
/// # Safety
/// AVX-512F; `p` points at `nk` rows `Q_BLOCK` apart of `NV · 16` lanes; `v` holds `nk` rows
/// `vs` apart with `R` values each; `acc` points at `R` rows `Q_BLOCK` apart of `NV · 16`
/// lanes; `alpha` holds `NV · 16` values.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pv<const NV: usize, const R: usize>(
    p: *const f32,
    nk: usize,
    v: *const f32,
    vs: usize,
    acc: *mut f32,
    alpha: *const f32,
    first: bool,
) {
    let mut a = [[_mm512_setzero_ps(); NV]; R];
    if !first {
        // SAFETY: NV·16 alpha values; rows r < R of acc have NV·16 lanes (the contract).
        unsafe {
            let al: [__m512; NV] = std::array::from_fn(|x| _mm512_loadu_ps(alpha.add(x * LANES)));
            for (r, ar) in a.iter_mut().enumerate() {
                for (x, (acc_v, &alv)) in ar.iter_mut().zip(&al).enumerate() {
                    *acc_v = _mm512_mul_ps(_mm512_loadu_ps(acc.add(r * Q_BLOCK + x * LANES)), alv);
                }
            }
        }
    }
    for j in 0..nk {
        // SAFETY: row j < nk of p has NV·16 lanes; row j of v has R values (the contract).
        unsafe {
            let pj: [__m512; NV] = std::array::from_fn(|x| _mm512_loadu_ps(p.add(j * Q_BLOCK + x * LANES)));
            let vr = v.add(j * vs);
            for (r, ar) in a.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*vr.add(r));
                for (acc_v, &pv) in ar.iter_mut().zip(&pj) {
                    *acc_v = _mm512_fmadd_ps(x, pv, *acc_v);
                }
            }
        }
    }
    for (r, ar) in a.iter().enumerate() {
        for (x, &acc_v) in ar.iter().enumerate() {
            // SAFETY: as for the loads of acc.
            unsafe { _mm512_storeu_ps(acc.add(r * Q_BLOCK + x * LANES), acc_v) };
        }
    }
}

/// [`pv`] over 16 query lanes.
///
/// # Safety
/// As [`pv`] with `NV = 1`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pv1<const R: usize>(
    p: *const f32,
    nk: usize,
    v: *const f32,
    vs: usize,
    acc: *mut f32,
    alpha: *const f32,
    first: bool,
) {
    // SAFETY: forwarded contract.
    unsafe { pv::<1, R>(p, nk, v, vs, acc, alpha, first) }
}

/// [`pv`] over 32 query lanes.
///
/// # Safety
/// As [`pv`] with `NV = 2`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pv2<const R: usize>(
    p: *const f32,
    nk: usize,
    v: *const f32,
    vs: usize,
    acc: *mut f32,
    alpha: *const f32,
    first: bool,
) {
    // SAFETY: forwarded contract.
    unsafe { pv::<2, R>(p, nk, v, vs, acc, alpha, first) }
}

online_softmax!("avx512f", avx512);
