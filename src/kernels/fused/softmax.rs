//! Fused softmax over one axis of an f32 tensor viewed as `[outer, n, inner]`:
//! `y = exp(x − max) / Σ exp(x − max)`, NaN-propagating max (a row holding NaN, or whose max is
//! ±∞, gives NaN everywhere, like the reference kernel).
//!
//! Last axis (`inner = 1`): three passes over each contiguous row (max; exp, store and sum;
//! scale), the row staying in L1 after the first. Other axes: the `[n, inner]` slab is processed
//! column-wise, vectorised across `inner` with per-column max and sum vectors.

use super::vmath::exp_scalar;
use super::{FusedIsa, for_units};

/// NaN-propagating maximum.
#[inline]
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }
}

/// Softmax of `x` (`outer · n · inner` values, axis of length `n`) into `y` (same length).
#[allow(clippy::too_many_arguments)]
pub fn softmax_f32(
    isa: FusedIsa,
    x: &[f32],
    y: &mut [f32],
    outer: usize,
    n: usize,
    inner: usize,
    pool: Option<&rayon::ThreadPool>,
) {
    let total = outer * n * inner;
    if total == 0 || x.len() < total || y.len() < total {
        return;
    }
    let isa = isa.checked();
    let y = &mut y[..total];
    let slab = n * inner;
    if inner == 1 {
        for_units(pool, y, n, 12 * n, |first, ys| {
            for (r, yr) in ys.chunks_exact_mut(n).enumerate() {
                let xr = &x[(first + r) * n..(first + r + 1) * n];
                row(isa, xr, yr);
            }
        });
    } else {
        for_units(pool, y, slab, 12 * slab, |first, ys| {
            let mut m = vec![0.0f32; inner];
            let mut s = vec![0.0f32; inner];
            for (o, yo) in ys.chunks_exact_mut(slab).enumerate() {
                let xo = &x[(first + o) * slab..(first + o + 1) * slab];
                columns(isa, xo, yo, n, inner, &mut m, &mut s);
            }
        });
    }
}

fn row(isa: FusedIsa, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F.
        unsafe { avx512::row(x, y) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
        unsafe { avx2::row(x, y) };
        return;
    }
    let _ = isa;
    let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| nan_max(m, v));
    let mut sum = 0.0f32;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = exp_scalar(v - m);
        sum += *o;
    }
    let inv = 1.0 / sum;
    y.iter_mut().for_each(|o| *o *= inv);
}

/// Softmax down the columns of an `[n, inner]` slab; `m` and `s` are `inner`-long scratch.
fn columns(isa: FusedIsa, x: &[f32], y: &mut [f32], n: usize, inner: usize, m: &mut [f32], s: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F.
        unsafe { avx512::columns(x, y, n, inner, m, s) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: as in `row`.
        unsafe { avx2::columns(x, y, n, inner, m, s) };
        return;
    }
    let _ = isa;
    m.copy_from_slice(&x[..inner]);
    for k in 1..n {
        for (mi, &v) in m.iter_mut().zip(&x[k * inner..(k + 1) * inner]) {
            *mi = nan_max(*mi, v);
        }
    }
    s.fill(0.0);
    for k in 0..n {
        let (xr, yr) = (&x[k * inner..(k + 1) * inner], &mut y[k * inner..(k + 1) * inner]);
        for i in 0..inner {
            yr[i] = exp_scalar(xr[i] - m[i]);
            s[i] += yr[i];
        }
    }
    s.iter_mut().for_each(|v| *v = 1.0 / *v);
    for yr in y.chunks_exact_mut(inner) {
        for (o, &iv) in yr.iter_mut().zip(s.iter()) {
            *o *= iv;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::super::vmath::avx2::{exp, hsum};
    use super::super::vmath::exp_scalar;
    use super::nan_max;

    /// NaN-propagating lane maximum (an all-ones lane is a NaN).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn vmax(a: __m256, b: __m256) -> __m256 {
        _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hmax(v: __m256) -> f32 {
        let mut a = [0f32; 8];
        // SAFETY: `a` holds 8 floats.
        unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
        a.iter().fold(f32::NEG_INFINITY, |m, &x| nan_max(m, x))
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn row(x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        let mut m0 = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut m1 = m0;
        let mut i = 0;
        // SAFETY: indices stay below n, the length of both slices.
        unsafe {
            while i + 16 <= n {
                m0 = vmax(m0, _mm256_loadu_ps(xp.add(i)));
                m1 = vmax(m1, _mm256_loadu_ps(xp.add(i + 8)));
                i += 16;
            }
            if i + 8 <= n {
                m0 = vmax(m0, _mm256_loadu_ps(xp.add(i)));
                i += 8;
            }
        }
        let mut m = hmax(vmax(m0, m1));
        for &v in &x[i..n] {
            m = nan_max(m, v);
        }
        let mv = _mm256_set1_ps(m);
        let mut s0 = _mm256_setzero_ps();
        let mut s1 = s0;
        i = 0;
        // SAFETY: as for the first unsafe block of this function (same bounds).
        unsafe {
            while i + 16 <= n {
                let e0 = exp(_mm256_sub_ps(_mm256_loadu_ps(xp.add(i)), mv));
                let e1 = exp(_mm256_sub_ps(_mm256_loadu_ps(xp.add(i + 8)), mv));
                _mm256_storeu_ps(yp.add(i), e0);
                _mm256_storeu_ps(yp.add(i + 8), e1);
                s0 = _mm256_add_ps(s0, e0);
                s1 = _mm256_add_ps(s1, e1);
                i += 16;
            }
            if i + 8 <= n {
                let e0 = exp(_mm256_sub_ps(_mm256_loadu_ps(xp.add(i)), mv));
                _mm256_storeu_ps(yp.add(i), e0);
                s0 = _mm256_add_ps(s0, e0);
                i += 8;
            }
        }
        let mut sum = hsum(_mm256_add_ps(s0, s1));
        for j in i..n {
            y[j] = exp_scalar(x[j] - m);
            sum += y[j];
        }
        let inv = 1.0 / sum;
        let iv = _mm256_set1_ps(inv);
        i = 0;
        // SAFETY: as for the first unsafe block of this function (same bounds).
        unsafe {
            while i + 8 <= n {
                _mm256_storeu_ps(yp.add(i), _mm256_mul_ps(_mm256_loadu_ps(yp.add(i)), iv));
                i += 8;
            }
        }
        y[i..n].iter_mut().for_each(|v| *v *= inv);
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn columns(x: &[f32], y: &mut [f32], n: usize, inner: usize, m: &mut [f32], s: &mut [f32]) {
        let v8 = inner / 8 * 8;
        let (xp, yp, mp, sp) = (x.as_ptr(), y.as_mut_ptr(), m.as_mut_ptr(), s.as_mut_ptr());
        m.copy_from_slice(&x[..inner]);
        s.fill(0.0);
        // SAFETY: x and y hold n·inner values, m and s hold inner; the vector loops stop at
        // v8 ≤ inner.
        unsafe {
            for k in 1..n {
                let xr = xp.add(k * inner);
                let mut i = 0;
                while i < v8 {
                    _mm256_storeu_ps(mp.add(i), vmax(_mm256_loadu_ps(mp.add(i)), _mm256_loadu_ps(xr.add(i))));
                    i += 8;
                }
                for j in v8..inner {
                    *mp.add(j) = nan_max(*mp.add(j), *xr.add(j));
                }
            }
            for k in 0..n {
                let (xr, yr) = (xp.add(k * inner), yp.add(k * inner));
                let mut i = 0;
                while i < v8 {
                    let e = exp(_mm256_sub_ps(_mm256_loadu_ps(xr.add(i)), _mm256_loadu_ps(mp.add(i))));
                    _mm256_storeu_ps(yr.add(i), e);
                    _mm256_storeu_ps(sp.add(i), _mm256_add_ps(_mm256_loadu_ps(sp.add(i)), e));
                    i += 8;
                }
                for j in v8..inner {
                    let e = exp_scalar(*xr.add(j) - *mp.add(j));
                    *yr.add(j) = e;
                    *sp.add(j) += e;
                }
            }
        }
        s.iter_mut().for_each(|v| *v = 1.0 / *v);
        // SAFETY: as for the first unsafe block of this function (same bounds).
        unsafe {
            for k in 0..n {
                let yr = yp.add(k * inner);
                let mut i = 0;
                while i < v8 {
                    _mm256_storeu_ps(yr.add(i), _mm256_mul_ps(_mm256_loadu_ps(yr.add(i)), _mm256_loadu_ps(sp.add(i))));
                    i += 8;
                }
                for j in v8..inner {
                    *yr.add(j) *= *sp.add(j);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::vmath::avx512::{exp, lanes};

    /// `f(i, mask)` for `i` = 0, 16, 32, … below `n`, the mask holding the lanes `i..min(i + 16, n)`.
    #[inline(always)]
    fn vectors(n: usize, mut f: impl FnMut(usize, __mmask16)) {
        let mut i = 0;
        while i < n {
            f(i, lanes(i, n));
            i += 16;
        }
    }

    /// One last-axis row: maximum (NaN-propagating), `e^(x − max)` stored and summed, scaled by
    /// the reciprocal sum; partial vectors through masked loads and stores.
    #[target_feature(enable = "avx512f")]
    pub(super) fn row(x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let (mut m, mut nan) = (ninf, 0u16);
        let mut i = 0;
        while i < n {
            let k = lanes(i, n);
            // SAFETY: the mask covers lanes i.. below n, inside x; the others read as −∞.
            let v = unsafe { _mm512_mask_loadu_ps(ninf, k, xp.add(i)) };
            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            m = _mm512_max_ps(m, v);
            i += 16;
        }
        let m = if nan != 0 { f32::NAN } else { _mm512_reduce_max_ps(m) };
        let mv = _mm512_set1_ps(m);
        let mut sum = _mm512_setzero_ps();
        i = 0;
        while i < n {
            let k = lanes(i, n);
            // SAFETY: as above, for x and y; masked-off lanes are neither read nor written.
            unsafe {
                let e = exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xp.add(i)), mv));
                _mm512_mask_storeu_ps(yp.add(i), k, e);
                sum = _mm512_mask_add_ps(sum, k, sum, e);
            }
            i += 16;
        }
        let iv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(sum));
        i = 0;
        while i < n {
            let k = lanes(i, n);
            // SAFETY: as above, for y.
            unsafe { _mm512_mask_storeu_ps(yp.add(i), k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yp.add(i)), iv)) };
            i += 16;
        }
    }

    /// NaN-propagating lane maximum.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn vmax(a: __m512, b: __m512) -> __m512 {
        _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b), _mm512_set1_ps(f32::NAN))
    }

    /// Softmax down the columns of an `[n, inner]` slab (see `super::columns`), 16 columns at a
    /// time.
    #[target_feature(enable = "avx512f")]
    pub(super) fn columns(x: &[f32], y: &mut [f32], n: usize, inner: usize, m: &mut [f32], s: &mut [f32]) {
        assert!(x.len() >= n * inner && y.len() >= n * inner && m.len() >= inner && s.len() >= inner);
        let (xp, yp, mp, sp) = (x.as_ptr(), y.as_mut_ptr(), m.as_mut_ptr(), s.as_mut_ptr());
        m[..inner].copy_from_slice(&x[..inner]);
        s[..inner].fill(0.0);
        // SAFETY: x and y hold n·inner values, m and s at least inner (asserted); every access
        // is masked to the lanes i.. below inner of a row (`vectors`).
        unsafe {
            for k in 1..n {
                let xr = xp.add(k * inner);
                vectors(inner, |i, km| {
                    let v = vmax(_mm512_maskz_loadu_ps(km, mp.add(i)), _mm512_maskz_loadu_ps(km, xr.add(i)));
                    _mm512_mask_storeu_ps(mp.add(i), km, v);
                });
            }
            for k in 0..n {
                let (xr, yr) = (xp.add(k * inner), yp.add(k * inner));
                vectors(inner, |i, km| {
                    let d = _mm512_sub_ps(_mm512_maskz_loadu_ps(km, xr.add(i)), _mm512_maskz_loadu_ps(km, mp.add(i)));
                    let e = exp(d);
                    _mm512_mask_storeu_ps(yr.add(i), km, e);
                    _mm512_mask_storeu_ps(sp.add(i), km, _mm512_add_ps(_mm512_maskz_loadu_ps(km, sp.add(i)), e));
                });
            }
            vectors(inner, |i, km| {
                let r = _mm512_div_ps(_mm512_set1_ps(1.0), _mm512_maskz_loadu_ps(km, sp.add(i)));
                _mm512_mask_storeu_ps(sp.add(i), km, r);
            });
            for k in 0..n {
                let yr = yp.add(k * inner);
                vectors(inner, |i, km| {
                    let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(km, yr.add(i)), _mm512_maskz_loadu_ps(km, sp.add(i)));
                    _mm512_mask_storeu_ps(yr.add(i), km, v);
                });
            }
        }
    }
}
