//! Matrix-vector products (M = 1, or N = 1 by transposition) for f32 and f64: no packing;
//! B is streamed once, row by row (`axpy` form, unit column stride) or column by column
//! (dot-product form, unit row stride). Compiled per ISA so the loops vectorise.

use super::driver::Job;
use super::epilogue::Scalar;
use super::isa::Isa;

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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_avx2<T: Scalar>(job: &Job<'_, T, T>, out: &mut [T], abuf: &mut Vec<T>) {
    // SAFETY: forwarded contract.
    unsafe { gemv_body(job, out, abuf) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
unsafe fn gemv_avx512<T: Scalar>(job: &Job<'_, T, T>, out: &mut [T], abuf: &mut Vec<T>) {
    // SAFETY: forwarded contract.
    unsafe { gemv_body(job, out, abuf) }
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

/// The product and epilogue for all of `job`'s columns on the calling thread.
fn gemv_serial<T: Scalar>(job: &Job<'_, T, T>, isa: Isa) {
    let mut out = vec![T::ZERO; job.n];
    let mut abuf = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use super::isa::isa_supported;
        // SAFETY: the job was validated; the features are checked before each call.
        unsafe {
            if isa == Isa::Avx512 && isa_supported(Isa::Avx512) {
                gemv_avx512(job, &mut out, &mut abuf);
            } else if matches!(isa, Isa::Avx2 | Isa::Avx512) && isa_supported(Isa::Avx2) {
                gemv_avx2(job, &mut out, &mut abuf);
            } else {
                gemv_body(job, &mut out, &mut abuf);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the job was validated.
    unsafe {
        gemv_body(job, &mut out, &mut abuf)
    };
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
    T::activate(isa, job.act, &mut out);
    for (j, o) in out.iter().enumerate() {
        // SAFETY: (0, j) is inside the validated C.
        unsafe { *c.ptr.add(j * c.cs) = *o };
    }
}
