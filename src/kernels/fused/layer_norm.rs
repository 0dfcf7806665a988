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
//! `STREAM_MIN_BYTES` (4 MiB) are written with non-temporal stores on the vector paths: skipping the
//! read-for-ownership of y and the write-back of dirty lines through the caches measured
//! 1.1–1.5× faster for outputs of 6–24 MiB on a 2-core Zen 3 (32 MiB L3, shared); smaller
//! outputs use ordinary stores, so that the consumer finds them in cache.

use super::{FusedIsa, for_unit_pairs, for_units};
use crate::kernels::gemm::Scratch;

/// Bytes of output from which the vector paths write y with non-temporal stores (eight
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
    let (mut gs, mut bs) = (Scratch::new(), Scratch::new());
    let (g, b) = (affine(gamma, n, 1.0, &mut gs), affine(beta, n, 0.0, &mut bs));
    let isa = isa.checked();
    let stream = total * size_of::<f32>() >= STREAM_MIN_BYTES;
    let p = RowParams { n, eps: epsilon, g, b };
    let x = &x[..total];
    for_units(pool, &mut y[..total], n, 8 * n, |first, ys| {
        let xs = &x[first * n..first * n + ys.len()];
        rows_on(isa, &p, xs, ys, stream);
    });
}

/// The first `n` values of a gamma or beta operand, or `n` copies of `default` without one (or
/// with a shorter one), written into `s` (the per-thread scratch pool: no allocation once warm,
/// where a GPT-2 export's layer norms without an operand allocated two rows per block).
fn affine<'a>(v: Option<&'a [f32]>, n: usize, default: f32, s: &'a mut Scratch) -> &'a [f32] {
    match v {
        Some(v) if v.len() >= n => &v[..n],
        _ => {
            let d = s.get(n);
            d.fill(default);
            d
        }
    }
}

/// Whole rows of `x` into `y` on the path `isa` (already [`FusedIsa::checked`]).
fn rows_on(isa: FusedIsa, p: &RowParams, xs: &[f32], ys: &mut [f32], stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` (done by every caller) only on CPUs with AVX-512F.
        unsafe { avx512::rows(p, xs, ys, stream) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` (done by every caller) confirmed AVX2 and FMA.
        unsafe { avx2::rows(p, xs, ys, stream) };
        return;
    }
    let _ = (isa, stream);
    for (xr, yr) in xs.chunks_exact(p.n).zip(ys.chunks_exact_mut(p.n)) {
        generic_row(p, xr, yr);
    }
}

/// `fn $name(isa, args…)`: runs `$body(args…)` compiled for `isa` (already
/// [`FusedIsa::checked`]): with AVX-512F (`$avx512`), with AVX2 and FMA (`$avx2`), or for the
/// baseline. The bodies are portable loops that the compiler vectorises to the enabled lanes.
macro_rules! compiled_per_isa {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $avx512:ident, $avx2:ident, $body:ident) => {
        $(#[$doc])*
        fn $name(isa: FusedIsa, $($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            if isa == FusedIsa::Avx512 {
                // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F, AVX2 and FMA.
                unsafe { $avx512($($arg),*) };
                return;
            }
            #[cfg(target_arch = "x86_64")]
            if isa.avx2() {
                // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
                unsafe { $avx2($($arg),*) };
                return;
            }
            let _ = isa;
            $body($($arg),*);
        }

        /// The body compiled with AVX-512F enabled.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn $avx512($($arg: $ty),*) {
            $body($($arg),*);
        }

        /// The body compiled with AVX2 and FMA enabled.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        fn $avx2($($arg: $ty),*) {
            $body($($arg),*);
        }
    };
}

/// Rows added and normalised per block of [`layer_norm_residual_f32`] (the sums of a block stay
/// in L1/L2 between the add and the normalisation).
const RESIDUAL_BLOCK_BYTES: usize = 32 << 10;

/// Layer norm of a sum of terms (a residual connection, an embedding sum): `rows` rows of `n`
/// values of `((t0 + t1) + t2) + …`, added in that order in f32, normalised as [`layer_norm_f32`]
/// does, without a pass over memory for the sum. A term may repeat along leading axes: its
/// length is a multiple of `n` dividing `rows·n`, and row `i` reads its row `i mod (len/n)`
/// (e.g. position embeddings `[1, S, D]` added to `[B, S, D]`). The sum is written to `sum` when
/// given (in blocks of rows, just before they are normalised), else into a small per-task
/// scratch block. Fewer than two terms, or slices that do not fit, leave `y` unchanged.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_residual_f32(
    isa: FusedIsa,
    terms: &[&[f32]],
    sum: Option<&mut [f32]>,
    y: &mut [f32],
    rows: usize,
    n: usize,
    epsilon: f64,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    pool: Option<&rayon::ThreadPool>,
) {
    let total = rows * n;
    let term_fits = |t: &&[f32]| !t.is_empty() && t.len().is_multiple_of(n) && total.is_multiple_of(t.len());
    if total == 0
        || terms.len() < 2
        || !terms.iter().all(term_fits)
        || y.len() < total
        || sum.as_ref().is_some_and(|s| s.len() < total)
    {
        return;
    }
    let (mut gs, mut bs) = (Scratch::new(), Scratch::new());
    let (g, b) = (affine(gamma, n, 1.0, &mut gs), affine(beta, n, 0.0, &mut bs));
    let isa = isa.checked();
    let p = RowParams { n, eps: epsilon, g, b };
    let block_rows = (RESIDUAL_BLOCK_BYTES / (n * size_of::<f32>())).max(1);
    // One task: its rows (starting at row `first`) in blocks: add into `s` (the sum's rows or
    // scratch), normalise from there while the block is in cache.
    let task = |first: usize, ys: &mut [f32], mut sums: Option<&mut [f32]>| {
        // The block's sum without a sum result goes to per-thread pooled scratch (written
        // before it is read; no allocation once warm).
        let mut pooled = Scratch::new();
        let scratch = if sums.is_none() { pooled.get((block_rows * n).min(ys.len())) } else { &mut [] };
        let mut done = 0;
        while done < ys.len() {
            let len = (block_rows * n).min(ys.len() - done);
            let s = match sums.as_deref_mut() {
                Some(sv) => &mut sv[done..done + len],
                None => &mut scratch[..len],
            };
            add_terms(isa, terms, s, first + done / n, n);
            rows_on(isa, &p, s, &mut ys[done..done + len], false);
            done += len;
        }
    };
    match sum {
        Some(sv) => {
            for_unit_pairs(pool, &mut y[..total], &mut sv[..total], n, 9 * n, |first, ys, ss| task(first, ys, Some(ss)))
        }
        None => for_units(pool, &mut y[..total], n, 9 * n, |first, ys| task(first, ys, None)),
    }
}

/// Row `i` of term `t` (a term repeats along leading axes: row `i mod (len/n)`).
fn row_of(t: &[f32], i: usize, n: usize) -> &[f32] {
    let at = (i * n) % t.len();
    &t[at..at + n]
}

compiled_per_isa! {
    /// The rows of `s` (rows `first..` of the result) as the sum of the terms' rows, added in the
    /// terms' order, on the ISA's vectors (built for the baseline, the loops ran on 4-lane SSE).
    fn add_terms(terms: &[&[f32]], s: &mut [f32], first: usize, n: usize) => add_terms_avx512, add_terms_avx2, add_terms_body
}

/// [`add_terms`]'s loops.
#[inline(always)]
fn add_terms_body(terms: &[&[f32]], s: &mut [f32], first: usize, n: usize) {
    for (r, sr) in s.chunks_exact_mut(n).enumerate() {
        let i = first + r;
        for ((sv, &av), &bv) in sr.iter_mut().zip(row_of(terms[0], i, n)).zip(row_of(terms[1], i, n)) {
            *sv = av + bv;
        }
        for t in &terms[2..] {
            for (sv, &tv) in sr.iter_mut().zip(row_of(t, i, n)) {
                *sv += tv;
            }
        }
    }
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
    let (mut gs, mut bs) = (Scratch::new(), Scratch::new());
    let (g, b) = (affine(gamma, n, 1.0, &mut gs), affine(beta, n, 0.0, &mut bs));
    let isa = isa.checked();
    let norm = Norm { n, inner, eps: epsilon, g, b };
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

compiled_per_isa! {
    /// Normalises one `[n, inner]` slab `x` into `y` (the ISA is chosen once per slab; the column
    /// loops vectorise to the ISA's lanes).
    fn strided_slab(norm: &Norm, x: &[f32], y: &mut [f32]) => strided_slab_avx512, strided_slab_avx2, strided_slab_body
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

/// The trailing-row passes, written once over `vmath`'s lane vocabulary and instantiated per
/// ISA: blocks of 4 accumulators x LANES lanes (8 values per lane on AVX2, 4 on AVX-512) and
/// tail blocks of 8 values per lane through masked loads, each widened into f64; the last pass
/// with a masked head (to a vector-aligned y when streaming) and tail.
#[cfg(target_arch = "x86_64")]
macro_rules! layer_norm_simd {
    ($isa:ident, $feat:literal) => {
        mod $isa {
            use super::super::vmath::$isa::{load_n, ops::*, store_n};
            use super::{RowParams, finish_stats};

            /// Floats per block of the main sums: 4 accumulators of LANES lanes.
            const BLOCK: usize = 256;
            /// Floats per block of the remainder: 1 accumulator, 8 values per lane.
            const TAIL_BLOCK: usize = 8 * LANES;

            /// (Σd, Σd²) with `d = x − m` rounded to f32 (with `m = 0`, Σd is Σx: `x − 0` is
            /// exact).
            #[target_feature(enable = $feat)]
            fn shifted_sums(x: &[f32], m: f32) -> (f64, f64) {
                let n = x.len();
                let p = x.as_ptr();
                let vm = splat(m);
                let (mut sacc, mut qacc) = (zero_d(), zero_d());
                let z = zero();
                let mut i = 0;
                while i + BLOCK <= n {
                    let (mut s, mut q) = ([z; 4], [z; 4]);
                    let end = i + BLOCK;
                    while i < end {
                        for u in 0..4 {
                            // SAFETY: i + 4·LANES ≤ end ≤ n.
                            let d = sub(unsafe { load(p.add(i + u * LANES)) }, vm);
                            s[u] = add(s[u], d);
                            q[u] = fmadd(d, d, q[u]);
                        }
                        i += 4 * LANES;
                    }
                    sacc = widen_add(sacc, add(add(s[0], s[1]), add(s[2], s[3])));
                    qacc = widen_add(qacc, add(add(q[0], q[1]), add(q[2], q[3])));
                }
                while i < n {
                    let end = (i + TAIL_BLOCK).min(n);
                    let (mut s, mut q) = (z, z);
                    while i < end {
                        let k = end - i;
                        // SAFETY: the lanes i..min(i + LANES, end) lie inside x; the others are
                        // m, so their d is 0.
                        let d = sub(unsafe { load_n(p.add(i), k, vm) }, vm);
                        s = add(s, d);
                        q = fmadd(d, d, q);
                        i += LANES;
                    }
                    sacc = widen_add(sacc, s);
                    qacc = widen_add(qacc, q);
                }
                (hsum_d(sacc), hsum_d(qacc))
            }

            /// `y = ((x − mh) − ml)·(rstd·g) + b` for one row, prefetching `next` (the next
            /// row's input) into L1 meanwhile; `stream`: non-temporal stores for the aligned
            /// vectors.
            #[target_feature(enable = $feat)]
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
                let (vh, vl, vr) = (splat(mh), splat(ml), splat(rstd));
                let (xp, gp, bp, yp) = (x.as_ptr(), p.g.as_ptr(), p.b.as_ptr(), y.as_mut_ptr());
                // The lanes i..min(i + LANES, i + k) of the result.
                let at = |i: usize, k: usize| {
                    // SAFETY: every call passes lanes i..i + min(k, LANES) below n, the smallest
                    // of the lengths of x, g and b.
                    unsafe {
                        let d = sub(sub(load_n(xp.add(i), k, zero()), vh), vl);
                        fmadd(d, mul(load_n(gp.add(i), k, zero()), vr), load_n(bp.add(i), k, zero()))
                    }
                };
                let (np, nlen) = next.map_or((std::ptr::null(), 0), |s| (s.as_ptr(), s.len()));
                // With `stream`, a partial head up to a vector-aligned y (the streaming store
                // needs it).
                let head = if stream { y.as_ptr().align_offset(4 * LANES).min(n) } else { 0 };
                if head > 0 {
                    // SAFETY: lanes 0..head < n of y.
                    unsafe { store_n(yp, head, at(0, head)) };
                }
                let mut i = head;
                while i + LANES <= n {
                    if i < nlen {
                        prefetch(np.wrapping_add(i));
                    }
                    let r = at(i, LANES);
                    // SAFETY: i + LANES ≤ n; with `stream`, yp + i is vector-aligned (i − head is
                    // a multiple of LANES).
                    unsafe {
                        if stream {
                            store_stream(yp.add(i), r);
                        } else {
                            store(yp.add(i), r);
                        }
                    }
                    i += LANES;
                }
                if i < n {
                    // SAFETY: the lanes i..n of y.
                    unsafe { store_n(yp.add(i), n - i, at(i, n - i)) };
                }
                // The rest of the next row's prefetch (its length may exceed what the loop
                // covered).
                let mut j = i;
                while j < nlen {
                    prefetch(np.wrapping_add(j));
                    j += 16;
                }
            }

            /// The rows of `x` (whole rows of `p.n`) into `y`; `stream`: non-temporal stores
            /// for y, fenced before returning.
            #[target_feature(enable = $feat)]
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
                    sfence();
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
layer_norm_simd!(avx2, "avx2,fma");
#[cfg(target_arch = "x86_64")]
layer_norm_simd!(avx512, "avx512f");
