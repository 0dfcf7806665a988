//! Fused layer normalisation over the trailing `n` values of each row:
//! `y = (x − mean)/√(var + ε)·gamma + beta` with the biased variance; and over a block of
//! normalised axes followed by other axes ([`layer_norm_strided_f32`]: x viewed as
//! `[outer, n, inner]`, each of the `outer·inner` rows strided by `inner`).
//!
//! One pass over the row gathers Σx and Σx² in f64 (exact squares of the f32 inputs, so
//! `var = Σx²/n − mean²` only loses ~1e-16·mean²/var relative accuracy); a second pass, on the
//! row now in L1, writes `((x − mean_hi) − mean_lo)·rstd·gamma + beta` in f32, the mean split in
//! two f32 parts so large means do not cost accuracy.

use super::{FusedIsa, for_units};

/// Layer norm of `rows` rows of `n` values of `x` into `y`; `gamma`/`beta` hold `n` values
/// (`None`: 1 / 0).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_f32(
    isa: FusedIsa,
    x: &[f32],
    y: &mut [f32],
    rows: usize,
    n: usize,
    epsilon: f64,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    pool: Option<&rayon::ThreadPool>,
) {
    let total = rows * n;
    if total == 0 || x.len() < total || y.len() < total {
        return;
    }
    let ones;
    let zeros;
    let g = match gamma {
        Some(g) if g.len() >= n => &g[..n],
        _ => {
            ones = vec![1.0f32; n];
            &ones[..]
        }
    };
    let b = match beta {
        Some(b) if b.len() >= n => &b[..n],
        _ => {
            zeros = vec![0.0f32; n];
            &zeros[..]
        }
    };
    let isa = isa.checked();
    for_units(pool, &mut y[..total], n, 8 * n, |first, ys| {
        for (r, yr) in ys.chunks_exact_mut(n).enumerate() {
            let xr = &x[(first + r) * n..(first + r + 1) * n];
            let (s, q) = sums(isa, xr);
            let mean = s / n as f64;
            let var = (q / n as f64 - mean * mean).max(0.0);
            let rstd = 1.0 / (var + epsilon).sqrt();
            let mh = mean as f32;
            let ml = (mean - mh as f64) as f32;
            normalise(isa, xr, yr, mh, ml, rstd as f32, g, b);
        }
    });
}

/// Columns of a `[n, inner]` slab normalised together (their f64 sums stay in L1 and each pass
/// reads `COLS` contiguous floats per normalised index).
const COLS: usize = 256;

/// Layer norm of x viewed as `[outer, n, inner]` over its middle axis: every `(o, c)` row
/// `x[o, 0..n, c]` (stride `inner`) is normalised on its own, with `gamma`/`beta` (n values,
/// `None`: 1 / 0) indexed by the position in the row. Same arithmetic as [`layer_norm_f32`]
/// (f64 Σx and Σx², the mean split in two f32 parts); each `[n, inner]` slab is processed in
/// chunks of up to 256 columns, vectorised across the columns (no transposition). Slabs are
/// split over `pool`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_strided_f32(
    isa: FusedIsa,
    x: &[f32],
    y: &mut [f32],
    outer: usize,
    n: usize,
    inner: usize,
    epsilon: f64,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    pool: Option<&rayon::ThreadPool>,
) {
    let slab = n * inner;
    let total = outer * slab;
    if total == 0 || x.len() < total || y.len() < total {
        return;
    }
    let g: Vec<f32> = match gamma {
        Some(g) if g.len() >= n => g[..n].to_vec(),
        _ => vec![1.0; n],
    };
    let b: Vec<f32> = match beta {
        Some(b) if b.len() >= n => b[..n].to_vec(),
        _ => vec![0.0; n],
    };
    let isa = isa.checked();
    let norm = Norm { n, inner, eps: epsilon, g: &g, b: &b };
    for_units(pool, &mut y[..total], slab, 8 * slab, |first, ys| {
        for (o, ya) in ys.chunks_exact_mut(slab).enumerate() {
            strided_slab(isa, &norm, &x[(first + o) * slab..(first + o + 1) * slab], ya);
        }
    });
}

/// What normalising a `[n, inner]` slab over its n rows needs besides the data.
struct Norm<'a> {
    n: usize,
    inner: usize,
    eps: f64,
    /// Gamma and beta, `n` each.
    g: &'a [f32],
    b: &'a [f32],
}

/// Normalises one `[n, inner]` slab `x` into `y` (the ISA is chosen once per slab).
fn strided_slab(isa: FusedIsa, norm: &Norm, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: FusedIsa::Avx2 is only used after `checked()` confirmed AVX2 and FMA.
        unsafe { strided_slab_avx2(norm, x, y) };
        return;
    }
    let _ = isa;
    strided_slab_body(norm, x, y);
}

/// The portable body compiled with AVX2+FMA enabled (the column loops vectorise to 4 f64 / 8
/// f32 lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn strided_slab_avx2(norm: &Norm, x: &[f32], y: &mut [f32]) {
    strided_slab_body(norm, x, y);
}

/// Normalises a slab in chunks of up to [`COLS`] columns over its n rows.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn strided_slab_body(norm: &Norm, x: &[f32], y: &mut [f32]) {
    let Norm { n, inner, eps, g, b } = *norm;
    let mut c0 = 0;
    while c0 < inner {
        let w = (inner - c0).min(COLS);
        let mut s = [0f64; COLS];
        let mut q = [0f64; COLS];
        for k in 0..n {
            let xr = &x[k * inner + c0..k * inner + c0 + w];
            for ((sc, qc), &v) in s[..w].iter_mut().zip(&mut q[..w]).zip(xr) {
                let v = f64::from(v);
                *sc += v;
                *qc += v * v;
            }
        }
        let mut mh = [0f32; COLS];
        let mut ml = [0f32; COLS];
        let mut rs = [0f32; COLS];
        for c in 0..w {
            let mean = s[c] / n as f64;
            let var = (q[c] / n as f64 - mean * mean).max(0.0);
            rs[c] = (1.0 / (var + eps).sqrt()) as f32;
            mh[c] = mean as f32;
            ml[c] = (mean - f64::from(mh[c])) as f32;
        }
        for k in 0..n {
            let (gk, bk) = (g[k], b[k]);
            let xr = &x[k * inner + c0..k * inner + c0 + w];
            let yr = &mut y[k * inner + c0..k * inner + c0 + w];
            for c in 0..w {
                yr[c] = ((xr[c] - mh[c]) - ml[c]) * (rs[c] * gk) + bk;
            }
        }
        c0 += w;
    }
}

/// (Σx, Σx²) of a row, in f64.
fn sums(isa: FusedIsa, x: &[f32]) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: FusedIsa::Avx2 is only used after `checked()` confirmed AVX2 and FMA.
        return unsafe { avx2::sums(x) };
    }
    let _ = isa;
    let (mut s, mut q) = ([0.0f64; 4], [0.0f64; 4]);
    let mut ch = x.chunks_exact(4);
    for c in &mut ch {
        for k in 0..4 {
            let v = c[k] as f64;
            s[k] += v;
            q[k] += v * v;
        }
    }
    for &v in ch.remainder() {
        s[0] += v as f64;
        q[0] += v as f64 * v as f64;
    }
    (s.iter().sum(), q.iter().sum())
}

#[allow(clippy::too_many_arguments)]
fn normalise(isa: FusedIsa, x: &[f32], y: &mut [f32], mh: f32, ml: f32, rstd: f32, g: &[f32], b: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: as in `sums`.
        unsafe { avx2::normalise(x, y, mh, ml, rstd, g, b) };
        return;
    }
    let _ = isa;
    for i in 0..x.len().min(y.len()) {
        y[i] = ((x[i] - mh) - ml) * rstd * g[i] + b[i];
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn sums(x: &[f32]) -> (f64, f64) {
        let n = x.len();
        let p = x.as_ptr();
        let (mut s0, mut s1, mut q0, mut q1) =
            (_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n.
            let v = unsafe { _mm256_loadu_ps(p.add(i)) };
            let a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            let b = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
            s0 = _mm256_add_pd(s0, a);
            s1 = _mm256_add_pd(s1, b);
            q0 = _mm256_fmadd_pd(a, a, q0);
            q1 = _mm256_fmadd_pd(b, b, q1);
            i += 8;
        }
        let mut sa = [0f64; 4];
        let mut qa = [0f64; 4];
        // SAFETY: both arrays hold 4 doubles.
        unsafe {
            _mm256_storeu_pd(sa.as_mut_ptr(), _mm256_add_pd(s0, s1));
            _mm256_storeu_pd(qa.as_mut_ptr(), _mm256_add_pd(q0, q1));
        }
        let (mut s, mut q) = (sa.iter().sum::<f64>(), qa.iter().sum::<f64>());
        for &v in &x[i..] {
            s += v as f64;
            q += v as f64 * v as f64;
        }
        (s, q)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn normalise(x: &[f32], y: &mut [f32], mh: f32, ml: f32, rstd: f32, g: &[f32], b: &[f32]) {
        let n = x.len().min(y.len()).min(g.len()).min(b.len());
        let (vh, vl, vr) = (_mm256_set1_ps(mh), _mm256_set1_ps(ml), _mm256_set1_ps(rstd));
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n, the smallest of the four lengths.
            unsafe {
                let d = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), vh), vl);
                let gs = _mm256_mul_ps(_mm256_loadu_ps(g.as_ptr().add(i)), vr);
                let r = _mm256_fmadd_ps(d, gs, _mm256_loadu_ps(b.as_ptr().add(i)));
                _mm256_storeu_ps(y.as_mut_ptr().add(i), r);
            }
            i += 8;
        }
        for j in i..n {
            y[j] = ((x[j] - mh) - ml) * rstd * g[j] + b[j];
        }
    }
}
