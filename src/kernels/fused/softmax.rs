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

/// The vector paths, written once over `vmath`'s lane vocabulary and instantiated per ISA.
#[cfg(target_arch = "x86_64")]
macro_rules! softmax_simd {
    ($isa:ident, $feat:literal) => {
        mod $isa {
            use super::super::vmath::$isa::{exp, exp_shift_sum, load_n, map_in_place, ops::*, store_n};
            use super::nan_max;

            /// `f(i, n − i)` for `i` = 0, LANES, 2·LANES, … below `n`.
            #[inline(always)]
            fn vectors(n: usize, mut f: impl FnMut(usize, usize)) {
                let mut i = 0;
                while i < n {
                    f(i, n - i);
                    i += LANES;
                }
            }

            /// NaN-propagating maximum of the lanes.
            #[inline]
            #[target_feature(enable = $feat)]
            fn hmax(v: V) -> f32 {
                let mut a = [0f32; LANES];
                // SAFETY: `a` holds LANES floats.
                unsafe { store(a.as_mut_ptr(), v) };
                a.iter().fold(f32::NEG_INFINITY, |m, &x| nan_max(m, x))
            }

            /// One last-axis row: maximum, `e^(x − max)` stored and summed, scaled by the
            /// reciprocal sum; the last partial vector through masked loads and stores. The lane
            /// maximum (`max`) may drop a NaN: its `exp`, the sum and so every output are NaN
            /// anyway, as for a maximum of ±∞.
            #[target_feature(enable = $feat)]
            pub(super) fn row(x: &[f32], y: &mut [f32]) {
                let n = x.len().min(y.len());
                let xp = x.as_ptr();
                let ninf = splat(f32::NEG_INFINITY);
                let mut m = ninf;
                let mut i = 0;
                while i < n {
                    // SAFETY: the lanes i..min(i + LANES, n) lie inside x.
                    m = max(m, unsafe { load_n(xp.add(i), n - i, ninf) });
                    i += LANES;
                }
                let iv = splat(1.0 / exp_shift_sum(&x[..n], &mut y[..n], hmax(m)));
                map_in_place(&mut y[..n], |v| mul(v, iv));
            }

            /// Softmax down the columns of an `[n, inner]` slab (see `super::columns`), LANES
            /// columns at a time.
            #[target_feature(enable = $feat)]
            pub(super) fn columns(x: &[f32], y: &mut [f32], n: usize, inner: usize, m: &mut [f32], s: &mut [f32]) {
                assert!(x.len() >= n * inner && y.len() >= n * inner && m.len() >= inner && s.len() >= inner);
                let (xp, yp, mp, sp) = (x.as_ptr(), y.as_mut_ptr(), m.as_mut_ptr(), s.as_mut_ptr());
                m[..inner].copy_from_slice(&x[..inner]);
                s[..inner].fill(0.0);
                // SAFETY (every block below): x and y hold n·inner values, m and s at least
                // inner (asserted); each access covers the lanes i..min(i + LANES, inner) of a
                // row.
                for k in 1..n {
                    let xr = xp.wrapping_add(k * inner);
                    // SAFETY: see above.
                    vectors(inner, |i, kk| unsafe {
                        let v = max(load_n(mp.add(i), kk, zero()), load_n(xr.add(i), kk, zero()));
                        store_n(mp.add(i), kk, v);
                    });
                }
                for k in 0..n {
                    let (xr, yr) = (xp.wrapping_add(k * inner), yp.wrapping_add(k * inner));
                    // SAFETY: see above.
                    vectors(inner, |i, kk| unsafe {
                        let e = exp(sub(load_n(xr.add(i), kk, zero()), load_n(mp.add(i), kk, zero())));
                        store_n(yr.add(i), kk, e);
                        store_n(sp.add(i), kk, add(load_n(sp.add(i), kk, zero()), e));
                    });
                }
                // SAFETY: see above.
                vectors(inner, |i, kk| unsafe {
                    store_n(sp.add(i), kk, div(splat(1.0), load_n(sp.add(i), kk, splat(1.0))));
                });
                for k in 0..n {
                    let yr = yp.wrapping_add(k * inner);
                    // SAFETY: see above.
                    vectors(inner, |i, kk| unsafe {
                        store_n(yr.add(i), kk, mul(load_n(yr.add(i), kk, zero()), load_n(sp.add(i), kk, zero())));
                    });
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
softmax_simd!(avx2, "avx2,fma");
#[cfg(target_arch = "x86_64")]
softmax_simd!(avx512, "avx512f");
