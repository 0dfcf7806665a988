//! Matrix-vector products (M = 1, or N = 1 by transposition) for f32 and f64: no packing;
//! B is streamed once, row by row (`axpy` form, unit column stride) or column by column
//! (dot-product form, unit row stride). Compiled per ISA so the loops vectorise; the f32/f64 row
//! form has explicit AVX2 FMA code (the generic body's `a * b + c` is not contracted to FMAs).

use super::driver::{Job, PackedPanels};
use super::epilogue::Scalar;
use super::isa::Isa;
use super::kernel::AlignedBuf;

/// Lanes of partial sums in the dot-product form (keeps several vectors of independent sums).
const LANES: usize = 32;

/// `out[j] = Σ_p a[p]·B[p, j]` for the 1 x n product.
///
/// # Safety
/// The job's views are valid; `job.m == 1`; `out.len() == job.n`.
#[inline(always)]
unsafe fn gemv_body<T: Scalar>(job: &Job<'_, T, T>, out: &mut [T], abuf: &mut Vec<T>) {
    let (n, k) = (job.n, job.k);
    let (a, b) = (job.a, job.b);
    // SAFETY: every index is (0, p) of A or (p, j) of B with p < k, j < n.
    unsafe {
        if b.cs == 1 {
            // Eight rows of B per pass over `out` (an eighth of the loads/stores of `out`; eight
            // read streams keep the memory system busy).
            let row = |p: usize| std::slice::from_raw_parts(b.ptr.add(p * b.rs), n);
            let k8 = k / 8 * 8;
            for p in (0..k8).step_by(8) {
                let s: [T; 8] = std::array::from_fn(|q| *a.ptr.add((p + q) * a.cs));
                let r: [&[T]; 8] = std::array::from_fn(|q| row(p + q));
                for j in 0..n {
                    let mut v = out[j];
                    for q in 0..8 {
                        v = T::mul_add(s[q], r[q][j], v);
                    }
                    out[j] = v;
                }
            }
            for p in k8..k {
                let s = *a.ptr.add(p * a.cs);
                for (o, &x) in out.iter_mut().zip(row(p)) {
                    *o = T::mul_add(s, x, *o);
                }
            }
        } else if b.rs == 1 {
            abuf.clear();
            abuf.extend((0..k).map(|p| *a.ptr.add(p * a.cs)));
            let full = k / LANES * LANES;
            for (j, o) in out.iter_mut().enumerate() {
                let col = std::slice::from_raw_parts(b.ptr.add(j * b.cs), k);
                let mut acc = [T::ZERO; LANES];
                for (ac, bc) in abuf[..full].chunks_exact(LANES).zip(col[..full].chunks_exact(LANES)) {
                    for q in 0..LANES {
                        acc[q] = T::mul_add(ac[q], bc[q], acc[q]);
                    }
                }
                let mut s = T::ZERO;
                for x in acc {
                    s = T::add(s, x);
                }
                for p in full..k {
                    s = T::mul_add(abuf[p], col[p], s);
                }
                *o = s;
            }
        } else {
            for p in 0..k {
                let s = *a.ptr.add(p * a.cs);
                for (j, o) in out.iter_mut().enumerate() {
                    *o = T::mul_add(s, *b.ptr.add(p * b.rs + j * b.cs), *o);
                }
            }
        }
    }
}

/// `out[j] += Σ_p a[p·a_cs]·B[p·rs + j]` over `p < k`, `j < out.len()`, with AVX2 and fused
/// multiply-adds: eight rows of B per pass over `out`, each output vector summed in two
/// interleaved chains (even and odd rows) so consecutive FMAs do not wait on each other.
macro_rules! rows_avx2 {
    ($name:ident, $t:ty, $lanes:expr, $vec:ty, $set1:ident, $load:ident, $store:ident, $fma:ident, $mul:ident, $add:ident) => {
        /// # Safety
        /// AVX2 and FMA are available; `a` holds `k` elements at stride `a_cs`, `b` holds
        /// `out.len()` elements of each of `k` rows `rs` apart.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $name(out: &mut [$t], a: *const $t, a_cs: usize, b: *const $t, rs: usize, k: usize) {
            use std::arch::x86_64::*;
            const L: usize = $lanes;
            let n = out.len();
            let o = out.as_mut_ptr();
            // SAFETY: every pointer below is row p < k of B at a column j < n, element p of A,
            // or element j < n of out (loads and stores of L lanes only where j + L <= n).
            unsafe {
                let mut p = 0;
                while p + 8 <= k {
                    let s: [$vec; 8] = std::array::from_fn(|q| $set1(*a.add((p + q) * a_cs)));
                    let r: [*const $t; 8] = std::array::from_fn(|q| b.add((p + q) * rs));
                    let vec8 = |j: usize| {
                        let x = $fma(s[0], $load(r[0].add(j)), $load(o.add(j)));
                        let y = $mul(s[1], $load(r[1].add(j)));
                        let x = $fma(s[2], $load(r[2].add(j)), x);
                        let y = $fma(s[3], $load(r[3].add(j)), y);
                        let x = $fma(s[4], $load(r[4].add(j)), x);
                        let y = $fma(s[5], $load(r[5].add(j)), y);
                        let x = $fma(s[6], $load(r[6].add(j)), x);
                        let y = $fma(s[7], $load(r[7].add(j)), y);
                        $store(o.add(j), $add(x, y));
                    };
                    let mut j = 0;
                    while j + 4 * L <= n {
                        for u in 0..4 {
                            vec8(j + u * L);
                        }
                        j += 4 * L;
                    }
                    while j + L <= n {
                        vec8(j);
                        j += L;
                    }
                    for j in j..n {
                        let mut v = *o.add(j);
                        for q in 0..8 {
                            v = (*a.add((p + q) * a_cs)).mul_add(*r[q].add(j), v);
                        }
                        *o.add(j) = v;
                    }
                    p += 8;
                }
                for p in p..k {
                    let sv = *a.add(p * a_cs);
                    let s = $set1(sv);
                    let r = b.add(p * rs);
                    let mut j = 0;
                    while j + L <= n {
                        $store(o.add(j), $fma(s, $load(r.add(j)), $load(o.add(j))));
                        j += L;
                    }
                    for j in j..n {
                        *o.add(j) = sv.mul_add(*r.add(j), *o.add(j));
                    }
                }
            }
        }
    };
}

rows_avx2!(
    rows_f32_avx2,
    f32,
    8,
    __m256,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps,
    _mm256_mul_ps,
    _mm256_add_ps
);
rows_avx2!(
    rows_f64_avx2,
    f64,
    4,
    __m256d,
    _mm256_set1_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_fmadd_pd,
    _mm256_mul_pd,
    _mm256_add_pd
);

/// The f32 and f64 row (axpy) form with explicit AVX2 FMAs; `false` for other types and layouts
/// (the generic body then runs).
///
/// # Safety
/// As [`gemv_body`]; AVX2 and FMA are available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_rows_fma<T: Scalar>(job: &Job<'_, T, T>, out: &mut [T]) -> bool {
    use std::any::TypeId;
    let (a, b, k) = (job.a, job.b, job.k);
    if b.cs != 1 {
        return false;
    }
    // SAFETY: T is the same type as the one cast to (checked by TypeId), so the casts only
    // rename it; the views hold (0, p) of A and (p, j) of B for p < k, j < n = out.len().
    unsafe {
        if TypeId::of::<T>() == TypeId::of::<f32>() {
            let o = std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len());
            rows_f32_avx2(o, a.ptr.cast::<f32>(), a.cs, b.ptr.cast::<f32>(), b.rs, k);
            return true;
        }
        if TypeId::of::<T>() == TypeId::of::<f64>() {
            let o = std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f64>(), out.len());
            rows_f64_avx2(o, a.ptr.cast::<f64>(), a.cs, b.ptr.cast::<f64>(), b.rs, k);
            return true;
        }
    }
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_avx2<T: Scalar>(job: &Job<'_, T, T>, out: &mut [T], abuf: &mut Vec<T>) {
    // SAFETY: forwarded contract; this function's features are those gemv_rows_fma needs.
    unsafe {
        if !gemv_rows_fma(job, out) {
            gemv_body(job, out, abuf)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
unsafe fn gemv_avx512<T: Scalar>(job: &Job<'_, T, T>, out: &mut [T], abuf: &mut Vec<T>) {
    // SAFETY: forwarded contract; AVX-512 implies AVX2 and FMA here (all enabled above).
    unsafe {
        if !gemv_rows_fma(job, out) {
            gemv_body(job, out, abuf)
        }
    }
}

/// Below this many multiply-adds (k·n) a product runs on one thread.
const PARALLEL_MIN: usize = 1 << 16;

/// Runs a job with `m == 1` (callers transpose `n == 1` jobs first), epilogue included, split by
/// columns over up to `threads` threads of the current rayon pool.
pub(crate) fn gemv<T: Scalar>(job: &Job<'_, T, T>, isa: Isa, threads: usize) {
    debug_assert_eq!(job.m, 1);
    let parts = if job.n.saturating_mul(job.k) < PARALLEL_MIN { 1 } else { threads.clamp(1, job.n.div_ceil(16)) };
    if parts > 1 {
        use rayon::prelude::*;
        // Column blocks of a multiple of 16 (whole cache lines of f32 output and of B's rows).
        let chunk = job.n.div_ceil(parts).next_multiple_of(16);
        (0..job.n.div_ceil(chunk)).into_par_iter().for_each(|i| {
            let c0 = i * chunk;
            gemv_serial(&job.sub(0, 1, c0, chunk.min(job.n - c0)), isa);
        });
        return;
    }
    gemv_serial(job, isa);
}

/// `m == 1` with B pre-packed for a family of panel width `nr` (f32, no k grouping), epilogue
/// included: each KC block's panels (`nr` columns × the block's rows, row-major) are read in
/// turn, so B streams once, contiguously. Columns are split over up to `threads` threads of the
/// current rayon pool in whole panels, like [`gemv`].
///
/// # Safety
/// `job` was validated for these panels: `panels` packs the job's k x n B with width `nr`.
pub(crate) unsafe fn gemv_prepacked(
    job: &Job<'_, f32, f32>,
    panels: &PackedPanels<f32>,
    nr: usize,
    isa: Isa,
    threads: usize,
) {
    debug_assert_eq!(job.m, 1);
    let (n, k) = (job.n, job.k);
    let npanels = n.div_ceil(nr);
    let parts = if n.saturating_mul(k) < PARALLEL_MIN { 1 } else { threads.clamp(1, npanels) };
    let per = npanels.div_ceil(parts);
    let run = |i: usize| {
        let (p0, p1) = (i * per, ((i + 1) * per).min(npanels));
        let (c0, c1) = (p0 * nr, (p1 * nr).min(n));
        // Accumulators on the thread's scratch pool (no allocation once warm).
        let mut acc = AlignedBuf::<f32>::zeroed((p1 - p0) * nr);
        let out = acc.as_mut_slice();
        out.fill(0.0);
        // SAFETY: panels p0..p1 of every KC block lie inside the packed buffer (it holds
        // k.div_ceil(kc) blocks of n_pad columns); A holds k elements at stride a.cs.
        unsafe { panels_dot(job.a.ptr, job.a.cs, panels, nr, k, p0, p1, isa, out) };
        let sub = Job { b: job.b, ..job.sub(0, 1, c0, c1 - c0) };
        finish(&sub, isa, &mut out[..c1 - c0]);
    };
    if parts > 1 {
        use rayon::prelude::*;
        (0..npanels.div_ceil(per)).into_par_iter().for_each(run);
    } else {
        run(0);
    }
}

/// `out[(p − p0)·nr + c] = Σ_q a[q·a_cs]·B[q, p·nr + c]` for the panels `p0..p1` of `panels`.
///
/// # Safety
/// As [`gemv_prepacked`]; `out.len() == (p1 − p0)·nr`.
#[allow(clippy::too_many_arguments)]
unsafe fn panels_dot(
    a: *const f32,
    a_cs: usize,
    panels: &PackedPanels<f32>,
    nr: usize,
    k: usize,
    p0: usize,
    p1: usize,
    isa: Isa,
    out: &mut [f32],
) {
    // The AVX2 panel kernel for the AVX2 and AVX-512 f32 families' panel widths, chosen once.
    type PanelFn = unsafe fn(*const f32, usize, *const f32, usize, &mut [f32]);
    #[cfg(target_arch = "x86_64")]
    let fast: Option<PanelFn> = match (isa, nr) {
        (Isa::Avx2 | Isa::Avx512, 16) => Some(panel_dot_avx2::<2, 4>),
        (Isa::Avx2 | Isa::Avx512, 24) => Some(panel_dot_avx2::<3, 4>),
        (Isa::Avx2 | Isa::Avx512, 32) => Some(panel_dot_avx2::<4, 3>),
        (Isa::Avx2 | Isa::Avx512, 48) => Some(panel_dot_avx2::<6, 2>),
        _ => None,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let fast: Option<PanelFn> = {
        let _ = isa;
        None
    };
    let kc = panels.kc;
    let base = panels.buf.as_ptr();
    for pc in (0..k).step_by(kc) {
        let kcb = kc.min(k - pc);
        // SAFETY: block pc starts at pc·n_pad (earlier blocks are full) and its panel p at
        // p·kcb·nr, holding kcb rows of nr elements; rows pc.. of A exist; `fast` is only set
        // for an ISA this CPU runs (AVX2 and FMA) and its own panel width.
        unsafe {
            let block = base.add(pc * panels.n_pad);
            let ablk = a.add(pc * a_cs);
            for p in p0..p1 {
                let panel = block.add(p * kcb * nr);
                let o = &mut out[(p - p0) * nr..(p - p0 + 1) * nr];
                if let Some(f) = fast {
                    f(ablk, a_cs, panel, kcb, o);
                    continue;
                }
                for q in 0..kcb {
                    let s = *ablk.add(q * a_cs);
                    let row = std::slice::from_raw_parts(panel.add(q * nr), nr);
                    for (o, &b) in o.iter_mut().zip(row) {
                        *o += s * b;
                    }
                }
            }
        }
    }
}

/// Elements ahead of the row being read that the panel kernel prefetches (8 KiB).
#[cfg(target_arch = "x86_64")]
const PF_AHEAD: usize = 2048;

/// One panel of `8·V` columns: `out[c] += Σ_q a[q·a_cs]·panel[q·8V + c]` with AVX2 FMAs, `PH`
/// interleaved sets of `V` accumulators (rows q mod PH) so the FMAs of consecutive rows are
/// independent. `V` and `PH` are constants so the accumulators stay in registers.
///
/// # Safety
/// AVX2 and FMA are available (the selected ISA is AVX2 or AVX-512, checked at dispatch); the
/// panel holds `kcb` rows of `8·V`; `out.len() == 8·V`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_dot_avx2<const V: usize, const PH: usize>(
    a: *const f32,
    a_cs: usize,
    panel: *const f32,
    kcb: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let nr = 8 * V;
    // SAFETY: reads rows q < kcb of the panel (nr elements each) and elements q < kcb of A;
    // out has nr elements.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); V]; PH];
        let mut q = 0;
        while q + PH <= kcb {
            for (ph, acc) in acc.iter_mut().enumerate() {
                let s = _mm256_set1_ps(*a.add((q + ph) * a_cs));
                let row = panel.add((q + ph) * nr);
                // The panels of a depth block are one contiguous stream; weights too large for
                // the caches (a classifier's 5 MB) arrive faster fetched well ahead of the
                // hardware prefetcher's distance. A hint: never faults, past the end harmless.
                let ahead = row.wrapping_add(PF_AHEAD).cast::<i8>();
                for line in (0..nr * 4).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
                }
                for (u, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_fmadd_ps(s, _mm256_loadu_ps(row.add(8 * u)), *acc);
                }
            }
            q += PH;
        }
        for q in q..kcb {
            let s = _mm256_set1_ps(*a.add(q * a_cs));
            let row = panel.add(q * nr);
            for (u, acc) in acc[0].iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(s, _mm256_loadu_ps(row.add(8 * u)), *acc);
            }
        }
        for (u, o) in out.chunks_exact_mut(8).enumerate() {
            let mut sum = acc[0][u];
            for set in &acc[1..] {
                sum = _mm256_add_ps(sum, set[u]);
            }
            _mm256_storeu_ps(o.as_mut_ptr(), _mm256_add_ps(_mm256_loadu_ps(o.as_ptr()), sum));
        }
    }
}

/// The product and epilogue for all of `job`'s columns on the calling thread.
fn gemv_serial<T: Scalar>(job: &Job<'_, T, T>, isa: Isa) {
    // The row of results on the thread's scratch pool (no allocation once warm).
    let mut acc = AlignedBuf::<T>::zeroed(job.n);
    // SAFETY: `acc` holds n initialised elements of a plain number type, borrowed mutably here.
    let out = unsafe { std::slice::from_raw_parts_mut(acc.as_mut_ptr(), job.n) };
    out.fill(T::ZERO);
    let mut abuf = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use super::isa::isa_supported;
        // SAFETY: the job was validated; the features are checked before each call.
        unsafe {
            if isa == Isa::Avx512 && isa_supported(Isa::Avx512) {
                gemv_avx512(job, out, &mut abuf);
            } else if matches!(isa, Isa::Avx2 | Isa::Avx512) && isa_supported(Isa::Avx2) {
                gemv_avx2(job, out, &mut abuf);
            } else {
                gemv_body(job, out, &mut abuf);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the job was validated.
    unsafe {
        gemv_body(job, out, &mut abuf)
    };
    finish(job, isa, out);
}

/// `C[0, j] = act(alpha·out[j] + beta·C[0, j] + bias)` for the job's columns.
fn finish<T: Scalar>(job: &Job<'_, T, T>, isa: Isa, out: &mut [T]) {
    let c = job.c;
    for (j, o) in out.iter_mut().enumerate() {
        let mut v = T::mul_add(*o, job.alpha, T::ZERO);
        if job.beta != T::ZERO {
            // SAFETY: (0, j) is inside the validated C.
            v = T::mul_add(job.beta, unsafe { *c.ptr.add(j * c.cs) }, v);
        }
        if let Some(b) = job.bias_row {
            v = T::add(v, b[0]);
        }
        if let Some(b) = job.bias_col {
            v = T::add(v, b[j]);
        }
        *o = v;
    }
    T::activate(isa, job.act, out);
    for (j, o) in out.iter().enumerate() {
        // SAFETY: (0, j) is inside the validated C.
        unsafe { *c.ptr.add(j * c.cs) = *o };
    }
}
