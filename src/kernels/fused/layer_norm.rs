//! Fused layer normalisation over the trailing `n` values of each row:
//! `y = (x − mean)/√(var + ε)·gamma + beta` with the biased variance; and over a block of
//! normalised axes followed by other axes ([`layer_norm_strided_f32`]: x viewed as
//! `[outer, n, inner]`, each of the `outer·inner` rows strided by `inner`).
//!
//! Trailing rows ([`layer_norm_f32`]) take three passes over each row, the first streaming it
//! from memory and the other two running from L1:
//! 1. Σx, giving a first mean `m` (f32 partial sums, see below);
//! 2. Σd and Σd² of the shifted values `d = x − m` (f32), so that `mean = m + Σd/n` and
//!    `var = Σd²/n − (Σd/n)²` (f64) lose nothing to cancellation (`Σd/n` is tiny);
//! 3. `y = ((x − mean_hi) − mean_lo)·(rstd·gamma) + beta` in f32, the mean split in two f32
//!    parts so that large means do not cost accuracy; meanwhile the next row is prefetched.
//!
//! The sums are f32 partial sums of at most 8 terms per lane (a few more roundings to fold the
//! accumulators together), added into f64: the relative error of Σd² is ≲ 1e-6 worst case
//! (≈ 1e-7 typically), so `rstd` is within ≲ 5e-7 relative of the exact value, below the
//! f32 roundings of the last pass for rows with |y| of a few units. Outputs of at least
//! `STREAM_MIN_BYTES` (4 MiB) are written with non-temporal stores on the AVX2 path: skipping the
//! read-for-ownership of y and the write-back of dirty lines through the caches measured
//! 1.1–1.5× faster for outputs of 6–24 MiB on a 2-core Zen 3 (32 MiB L3, shared); smaller
//! outputs use ordinary stores, so that the consumer finds them in cache.

use super::{FusedIsa, for_units};

/// Bytes of output from which the AVX2 path writes y with non-temporal stores (eight
/// times a 512 KiB L2: such an output mostly leaves the private caches before it is read).
const STREAM_MIN_BYTES: usize = 4 << 20;

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
    let stream = total * size_of::<f32>() >= STREAM_MIN_BYTES;
    let p = RowParams { n, eps: epsilon, g, b };
    let x = &x[..total];
    for_units(pool, &mut y[..total], n, 8 * n, |first, ys| {
        let xs = &x[first * n..first * n + ys.len()];
        #[cfg(target_arch = "x86_64")]
        if isa == FusedIsa::Avx512 {
            // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F.
            unsafe { avx512::rows(&p, xs, ys, stream) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if isa.avx2() {
            // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
            unsafe { avx2::rows(&p, xs, ys, stream) };
            return;
        }
        let _ = (isa, stream);
        for (xr, yr) in xs.chunks_exact(n).zip(ys.chunks_exact_mut(n)) {
            generic_row(&p, xr, yr);
        }
    });
}

/// What normalising a trailing row needs besides the data.
struct RowParams<'a> {
    n: usize,
    eps: f64,
    /// Gamma and beta, `n` each.
    g: &'a [f32],
    b: &'a [f32],
}

/// Lanes of the portable partial sums (the compiler maps them onto its vector registers).
const LANES: usize = 8;
/// Values per lane summed in f32 before the partial sums are added into f64.
const PER_LANE: usize = 8;

/// (Σd, Σd²) with `d = x − m` rounded to f32, portable: f32 lane sums of [`PER_LANE`] values
/// added into f64 (with `m = 0`, Σd is the first pass's Σx: `x − 0` is exact).
fn generic_shifted_sums(x: &[f32], m: f32) -> (f64, f64) {
    let (mut sa, mut qa) = ([0f64; LANES], [0f64; LANES]);
    let mut blocks = x.chunks_exact(LANES * PER_LANE);
    for blk in &mut blocks {
        let (mut s, mut q) = ([0f32; LANES], [0f32; LANES]);
        for c in blk.chunks_exact(LANES) {
            for k in 0..LANES {
                let d = c[k] - m;
                s[k] += d;
                q[k] += d * d;
            }
        }
        for k in 0..LANES {
            sa[k] += f64::from(s[k]);
            qa[k] += f64::from(q[k]);
        }
    }
    let (mut s, mut q): (f64, f64) = (sa.iter().sum(), qa.iter().sum());
    for &v in blocks.remainder() {
        let d = f64::from(v - m);
        s += d;
        q += d * d;
    }
    (s, q)
}

/// The final statistics from the first mean `m` and the shifted sums: (mean_hi, mean_lo, rstd).
fn finish_stats(m: f32, sd: f64, qd: f64, n: usize, eps: f64) -> (f32, f32, f32) {
    let nf = n as f64;
    let dm = sd / nf;
    let mean = f64::from(m) + dm;
    let var = (qd / nf - dm * dm).max(0.0);
    let rstd = 1.0 / (var + eps).sqrt();
    let mh = mean as f32;
    let ml = (mean - f64::from(mh)) as f32;
    (mh, ml, rstd as f32)
}

/// One row on the portable path.
fn generic_row(p: &RowParams, x: &[f32], y: &mut [f32]) {
    let n = p.n;
    let m = (generic_shifted_sums(x, 0.0).0 / n as f64) as f32;
    let (sd, qd) = generic_shifted_sums(x, m);
    let (mh, ml, rstd) = finish_stats(m, sd, qd, n, p.eps);
    for (((yv, &xv), &gv), &bv) in y.iter_mut().zip(x).zip(p.g).zip(p.b) {
        *yv = ((xv - mh) - ml) * (rstd * gv) + bv;
    }
}

/// Columns of a `[n, inner]` slab normalised together (their f64 sums stay in L1 and each pass
/// reads `COLS` contiguous floats per normalised index).
const COLS: usize = 256;

/// Layer norm of x viewed as `[outer, n, inner]` over its middle axis: every `(o, c)` row
/// `x[o, 0..n, c]` (stride `inner`) is normalised on its own, with `gamma`/`beta` (n values,
/// `None`: 1 / 0) indexed by the position in the row. f64 Σx and Σx² per column (exact squares
/// of the f32 inputs, so `var = Σx²/n − mean²` only loses ~1e-16·mean²/var relative accuracy),
/// the mean split in two f32 parts as in [`layer_norm_f32`]; each `[n, inner]` slab is processed
/// in chunks of up to 256 columns, vectorised across the columns (no transposition). Slabs are
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
    if isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F, AVX2 and FMA.
        unsafe { strided_slab_avx512(norm, x, y) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
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

/// The portable body compiled with AVX-512F enabled (the column loops may use 16-lane vectors).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn strided_slab_avx512(norm: &Norm, x: &[f32], y: &mut [f32]) {
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{RowParams, finish_stats};

    /// Floats per block of the sums: 4 accumulators of 8 lanes, 8 values per lane.
    const BLOCK: usize = 256;

    /// Adds the 8 f32 lanes of `v` into the 4 f64 lanes of `acc`.
    #[inline(always)]
    fn widen_add(acc: __m256d, v: __m256) -> __m256d {
        // SAFETY: register-only intrinsics; the callers are compiled with AVX2+FMA enabled.
        unsafe {
            let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
            _mm256_add_pd(acc, _mm256_add_pd(lo, hi))
        }
    }

    /// The sum of the 4 lanes of `v`.
    #[inline(always)]
    fn hsum(v: __m256d) -> f64 {
        let mut a = [0f64; 4];
        // SAFETY: `a` holds 4 doubles; AVX is enabled in every caller.
        unsafe { _mm256_storeu_pd(a.as_mut_ptr(), v) };
        (a[0] + a[1]) + (a[2] + a[3])
    }

    /// Σx of a row.
    #[target_feature(enable = "avx2,fma")]
    fn sum(x: &[f32]) -> f64 {
        let n = x.len();
        let p = x.as_ptr();
        let mut acc = _mm256_setzero_pd();
        let mut i = 0;
        while i + BLOCK <= n {
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            let end = i + BLOCK;
            while i < end {
                // SAFETY: i + 32 ≤ end ≤ n.
                unsafe {
                    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p.add(i)));
                    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p.add(i + 8)));
                    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p.add(i + 16)));
                    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p.add(i + 24)));
                }
                i += 32;
            }
            acc = widen_add(acc, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        }
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n.
            acc = widen_add(acc, unsafe { _mm256_loadu_ps(p.add(i)) });
            i += 8;
        }
        let mut s = hsum(acc);
        for &v in &x[i..] {
            s += f64::from(v);
        }
        s
    }

    /// (Σd, Σd²) with `d = x − m` rounded to f32.
    #[target_feature(enable = "avx2,fma")]
    fn shifted_sums(x: &[f32], m: f32) -> (f64, f64) {
        let n = x.len();
        let p = x.as_ptr();
        let vm = _mm256_set1_ps(m);
        let (mut sacc, mut qacc) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let mut i = 0;
        while i + BLOCK <= n {
            let z = _mm256_setzero_ps();
            let (mut s0, mut s1, mut s2, mut s3) = (z, z, z, z);
            let (mut q0, mut q1, mut q2, mut q3) = (z, z, z, z);
            let end = i + BLOCK;
            while i < end {
                // SAFETY: i + 32 ≤ end ≤ n.
                let (d0, d1, d2, d3) = unsafe {
                    (
                        _mm256_sub_ps(_mm256_loadu_ps(p.add(i)), vm),
                        _mm256_sub_ps(_mm256_loadu_ps(p.add(i + 8)), vm),
                        _mm256_sub_ps(_mm256_loadu_ps(p.add(i + 16)), vm),
                        _mm256_sub_ps(_mm256_loadu_ps(p.add(i + 24)), vm),
                    )
                };
                s0 = _mm256_add_ps(s0, d0);
                s1 = _mm256_add_ps(s1, d1);
                s2 = _mm256_add_ps(s2, d2);
                s3 = _mm256_add_ps(s3, d3);
                q0 = _mm256_fmadd_ps(d0, d0, q0);
                q1 = _mm256_fmadd_ps(d1, d1, q1);
                q2 = _mm256_fmadd_ps(d2, d2, q2);
                q3 = _mm256_fmadd_ps(d3, d3, q3);
                i += 32;
            }
            sacc = widen_add(sacc, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
            qacc = widen_add(qacc, _mm256_add_ps(_mm256_add_ps(q0, q1), _mm256_add_ps(q2, q3)));
        }
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n.
            let d = _mm256_sub_ps(unsafe { _mm256_loadu_ps(p.add(i)) }, vm);
            sacc = widen_add(sacc, d);
            qacc = widen_add(qacc, _mm256_mul_ps(d, d));
            i += 8;
        }
        let (mut s, mut q) = (hsum(sacc), hsum(qacc));
        for &v in &x[i..] {
            let d = f64::from(v - m);
            s += d;
            q += d * d;
        }
        (s, q)
    }

    /// `y = ((x − mh) − ml)·(rstd·g) + b` for one row, prefetching `next` (the next row's
    /// input, same length or shorter) into L1 meanwhile; `stream`: non-temporal stores.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    fn normalise(
        p: &RowParams,
        x: &[f32],
        y: &mut [f32],
        next: Option<&[f32]>,
        mh: f32,
        ml: f32,
        rstd: f32,
        stream: bool,
    ) {
        let (g, b) = (p.g, p.b);
        let n = x.len().min(y.len()).min(g.len()).min(b.len());
        let scalar = |y: &mut [f32], j: usize| y[j] = ((x[j] - mh) - ml) * (rstd * g[j]) + b[j];
        // Scalar head up to a 32-byte aligned y when streaming (the streaming store needs it).
        let head = if stream { (y.as_ptr().align_offset(32)).min(n) } else { 0 };
        for j in 0..head {
            scalar(y, j);
        }
        let (vh, vl, vr) = (_mm256_set1_ps(mh), _mm256_set1_ps(ml), _mm256_set1_ps(rstd));
        let (xp, gp, bp, yp) = (x.as_ptr(), g.as_ptr(), b.as_ptr(), y.as_mut_ptr());
        let np = next.map_or(std::ptr::null(), |s| s.as_ptr());
        let nlen = next.map_or(0, |s| s.len());
        let mut i = head;
        while i + 16 <= n {
            // SAFETY: i + 16 ≤ n, the smallest of the four lengths; `np + i` is only prefetched
            // (never dereferenced) and lies inside the next row when i < nlen; with `stream`,
            // yp + i is 32-byte aligned (i − head is a multiple of 16 floats).
            unsafe {
                if i < nlen {
                    _mm_prefetch::<_MM_HINT_T0>(np.add(i).cast());
                }
                let d0 = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xp.add(i)), vh), vl);
                let d1 = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xp.add(i + 8)), vh), vl);
                let s0 = _mm256_mul_ps(_mm256_loadu_ps(gp.add(i)), vr);
                let s1 = _mm256_mul_ps(_mm256_loadu_ps(gp.add(i + 8)), vr);
                let r0 = _mm256_fmadd_ps(d0, s0, _mm256_loadu_ps(bp.add(i)));
                let r1 = _mm256_fmadd_ps(d1, s1, _mm256_loadu_ps(bp.add(i + 8)));
                if stream {
                    _mm256_stream_ps(yp.add(i), r0);
                    _mm256_stream_ps(yp.add(i + 8), r1);
                } else {
                    _mm256_storeu_ps(yp.add(i), r0);
                    _mm256_storeu_ps(yp.add(i + 8), r1);
                }
            }
            i += 16;
        }
        // The rest of the next row's prefetch (its length may exceed what the loop covered).
        let mut k = i;
        while k < nlen {
            // SAFETY: k < nlen: inside the next row; a prefetch never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(np.add(k).cast()) };
            k += 16;
        }
        for j in i..n {
            scalar(y, j);
        }
    }

    /// The rows of `x` (whole rows of `p.n`) into `y`; `stream`: non-temporal stores for y,
    /// fenced before returning.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn rows(p: &RowParams, x: &[f32], y: &mut [f32], stream: bool) {
        let n = p.n;
        let count = x.len().min(y.len()) / n;
        for r in 0..count {
            let xr = &x[r * n..(r + 1) * n];
            let next = if r + 1 < count { Some(&x[(r + 1) * n..(r + 2) * n]) } else { None };
            let m = (sum(xr) / n as f64) as f32;
            let (sd, qd) = shifted_sums(xr, m);
            let (mh, ml, rstd) = finish_stats(m, sd, qd, n, p.eps);
            normalise(p, xr, &mut y[r * n..(r + 1) * n], next, mh, ml, rstd, stream);
        }
        if stream {
            // Orders the non-temporal stores before the task ends.
            _mm_sfence();
        }
    }
}

/// The trailing-row passes on 16 lanes (AVX-512F): the same three passes and f32-then-f64
/// summation as the AVX2 path (at most 8 f32 terms per lane before widening), partial vectors
/// through masked loads and stores.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::vmath::avx512::lanes;
    use super::{RowParams, finish_stats};

    /// Floats per block of the main sums: 4 accumulators of 16 lanes, 4 values per lane.
    const BLOCK: usize = 256;
    /// Floats per block of the remainder: 1 accumulator of 16 lanes, 8 values per lane.
    const TAIL_BLOCK: usize = 128;

    /// Adds the 16 f32 lanes of `v` into the 8 f64 lanes of `acc`.
    #[inline(always)]
    fn widen_add(acc: __m512d, v: __m512) -> __m512d {
        // SAFETY: register-only intrinsics; the callers are compiled with AVX-512F enabled.
        unsafe {
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
            _mm512_add_pd(acc, _mm512_add_pd(lo, hi))
        }
    }

    /// (Σd, Σd²) with `d = x − m` rounded to f32 (with `m = 0`, Σd is Σx: `x − 0` is exact).
    #[target_feature(enable = "avx512f")]
    fn shifted_sums(x: &[f32], m: f32) -> (f64, f64) {
        let n = x.len();
        let p = x.as_ptr();
        let vm = _mm512_set1_ps(m);
        let (mut sacc, mut qacc) = (_mm512_setzero_pd(), _mm512_setzero_pd());
        let z = _mm512_setzero_ps();
        let mut i = 0;
        while i + BLOCK <= n {
            let (mut s0, mut s1, mut s2, mut s3) = (z, z, z, z);
            let (mut q0, mut q1, mut q2, mut q3) = (z, z, z, z);
            let end = i + BLOCK;
            while i < end {
                // SAFETY: i + 64 ≤ end ≤ n.
                let (d0, d1, d2, d3) = unsafe {
                    (
                        _mm512_sub_ps(_mm512_loadu_ps(p.add(i)), vm),
                        _mm512_sub_ps(_mm512_loadu_ps(p.add(i + 16)), vm),
                        _mm512_sub_ps(_mm512_loadu_ps(p.add(i + 32)), vm),
                        _mm512_sub_ps(_mm512_loadu_ps(p.add(i + 48)), vm),
                    )
                };
                s0 = _mm512_add_ps(s0, d0);
                s1 = _mm512_add_ps(s1, d1);
                s2 = _mm512_add_ps(s2, d2);
                s3 = _mm512_add_ps(s3, d3);
                q0 = _mm512_fmadd_ps(d0, d0, q0);
                q1 = _mm512_fmadd_ps(d1, d1, q1);
                q2 = _mm512_fmadd_ps(d2, d2, q2);
                q3 = _mm512_fmadd_ps(d3, d3, q3);
                i += 64;
            }
            sacc = widen_add(sacc, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
            qacc = widen_add(qacc, _mm512_add_ps(_mm512_add_ps(q0, q1), _mm512_add_ps(q2, q3)));
        }
        while i < n {
            let end = (i + TAIL_BLOCK).min(n);
            let (mut s, mut q) = (z, z);
            while i < end {
                let k = lanes(i, end);
                // SAFETY: the mask covers lanes i.. below end ≤ n; the others are 0 (d too).
                let d = _mm512_maskz_sub_ps(k, unsafe { _mm512_maskz_loadu_ps(k, p.add(i)) }, vm);
                s = _mm512_add_ps(s, d);
                q = _mm512_fmadd_ps(d, d, q);
                i += 16;
            }
            sacc = widen_add(sacc, s);
            qacc = widen_add(qacc, q);
        }
        (_mm512_reduce_add_pd(sacc), _mm512_reduce_add_pd(qacc))
    }

    /// `y = ((x − mh) − ml)·(rstd·g) + b` for one row, prefetching `next` (the next row's
    /// input) into L1 meanwhile; `stream`: non-temporal stores for the 64-byte aligned vectors.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    fn normalise(
        p: &RowParams,
        x: &[f32],
        y: &mut [f32],
        next: Option<&[f32]>,
        mh: f32,
        ml: f32,
        rstd: f32,
        stream: bool,
    ) {
        let n = x.len().min(y.len()).min(p.g.len()).min(p.b.len());
        let (vh, vl, vr) = (_mm512_set1_ps(mh), _mm512_set1_ps(ml), _mm512_set1_ps(rstd));
        let (xp, gp, bp, yp) = (x.as_ptr(), p.g.as_ptr(), p.b.as_ptr(), y.as_mut_ptr());
        let at = |i: usize, k: __mmask16| {
            // SAFETY: every call passes a mask of lanes i.. below n, the smallest of the lengths
            // of x, g and b; masked-off lanes are not read.
            unsafe {
                let d = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xp.add(i)), vh), vl);
                let s = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, gp.add(i)), vr);
                _mm512_fmadd_ps(d, s, _mm512_maskz_loadu_ps(k, bp.add(i)))
            }
        };
        let (np, nlen) = next.map_or((std::ptr::null(), 0), |s| (s.as_ptr(), s.len()));
        // With `stream`, a masked head up to a 64-byte aligned y (the streaming store needs it).
        let head = if stream { y.as_ptr().align_offset(64).min(n) } else { 0 };
        if head > 0 {
            let k = lanes(0, head);
            // SAFETY: lanes 0..head < n of y.
            unsafe { _mm512_mask_storeu_ps(yp, k, at(0, k)) };
        }
        let mut i = head;
        while i + 16 <= n {
            // SAFETY: i + 16 ≤ n; `np + i` is only prefetched and lies in the next row when
            // i < nlen; with `stream`, yp + i is 64-byte aligned (i − head is a multiple of 16).
            unsafe {
                if i < nlen {
                    _mm_prefetch::<_MM_HINT_T0>(np.add(i).cast());
                }
                let r = at(i, !0);
                if stream {
                    _mm512_stream_ps(yp.add(i), r);
                } else {
                    _mm512_storeu_ps(yp.add(i), r);
                }
            }
            i += 16;
        }
        if i < n {
            let k = lanes(i, n);
            // SAFETY: the masked lanes i.. below n of y.
            unsafe { _mm512_mask_storeu_ps(yp.add(i), k, at(i, k)) };
        }
        // The rest of the next row's prefetch (its length may exceed what the loop covered).
        let mut j = i;
        while j < nlen {
            // SAFETY: j < nlen: inside the next row; a prefetch never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(np.add(j).cast()) };
            j += 16;
        }
    }

    /// The rows of `x` (whole rows of `p.n`) into `y`; `stream`: non-temporal stores for y,
    /// fenced before returning.
    #[target_feature(enable = "avx512f")]
    pub(super) fn rows(p: &RowParams, x: &[f32], y: &mut [f32], stream: bool) {
        let n = p.n;
        let count = x.len().min(y.len()) / n;
        for r in 0..count {
            let xr = &x[r * n..(r + 1) * n];
            let next = if r + 1 < count { Some(&x[(r + 1) * n..(r + 2) * n]) } else { None };
            let m = (shifted_sums(xr, 0.0).0 / n as f64) as f32;
            let (sd, qd) = shifted_sums(xr, m);
            let (mh, ml, rstd) = finish_stats(m, sd, qd, n, p.eps);
            normalise(p, xr, &mut y[r * n..(r + 1) * n], next, mh, ml, rstd, stream);
        }
        if stream {
            // Orders the non-temporal stores before the task ends.
            _mm_sfence();
        }
    }
}
