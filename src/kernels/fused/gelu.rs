//! Fused GELU, exact (`x·Φ(x)` through an erfc approximation of 1.2e-7 fractional error) or the
//! tanh form (`x / (1 + e^(−2u))`, the identity `½(1 + tanh u) = 1/(1 + e^(−2u))`).

use super::vmath::{gelu_erf_scalar, gelu_tanh_scalar};
use super::{FusedIsa, for_units};

/// Elements per parallel unit.
const UNIT: usize = 1024;

/// GELU of every element of `x` into `y` (same length).
pub fn gelu_f32(isa: FusedIsa, x: &[f32], y: &mut [f32], exact: bool, pool: Option<&rayon::ThreadPool>) {
    let n = x.len().min(y.len());
    let isa = isa.checked();
    let y = &mut y[..n];
    let full = n / UNIT * UNIT;
    let (head, tail) = y.split_at_mut(full);
    for_units(pool, head, UNIT, 24 * UNIT, |first, ys| {
        let start = first * UNIT;
        chunk(isa, &x[start..start + ys.len()], ys, exact);
    });
    chunk(isa, &x[full..n], tail, exact);
}

fn chunk(isa: FusedIsa, x: &[f32], y: &mut [f32], exact: bool) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        use super::vmath::avx512;
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F.
        unsafe {
            if exact {
                avx512::map(x, y, |v| avx512::gelu_erf(v));
            } else {
                avx512::map(x, y, |v| avx512::gelu_tanh(v));
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
        unsafe { avx2::chunk(x, y, exact) };
        return;
    }
    let _ = isa;
    if exact {
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = gelu_erf_scalar(v));
    } else {
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = gelu_tanh_scalar(v));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::super::vmath::avx2::{gelu_erf, gelu_tanh};
    use super::super::vmath::{gelu_erf_scalar, gelu_tanh_scalar};

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn chunk(x: &[f32], y: &mut [f32], exact: bool) {
        let n = x.len().min(y.len());
        let mut i = 0;
        if exact {
            while i + 8 <= n {
                // SAFETY: i + 8 ≤ n, the length of both slices.
                unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(i), gelu_erf(_mm256_loadu_ps(x.as_ptr().add(i)))) };
                i += 8;
            }
            for j in i..n {
                y[j] = gelu_erf_scalar(x[j]);
            }
        } else {
            while i + 8 <= n {
                // SAFETY: as above.
                unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(i), gelu_tanh(_mm256_loadu_ps(x.as_ptr().add(i)))) };
                i += 8;
            }
            for j in i..n {
                y[j] = gelu_tanh_scalar(x[j]);
            }
        }
    }
}
