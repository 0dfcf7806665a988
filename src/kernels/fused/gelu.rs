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
    {
        use super::vmath::{avx2, avx512};
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F, and `avx2()` holds
        // only after `checked()` confirmed AVX2 and FMA.
        unsafe {
            match (isa, exact) {
                (FusedIsa::Avx512, true) => return avx512::map(x, y, |v| avx512::gelu_erf(v)),
                (FusedIsa::Avx512, false) => return avx512::map(x, y, |v| avx512::gelu_tanh(v)),
                (FusedIsa::Avx2, true) => return avx2::map(x, y, |v| avx2::gelu_erf(v)),
                (FusedIsa::Avx2, false) => return avx2::map(x, y, |v| avx2::gelu_tanh(v)),
                (FusedIsa::Generic, _) => {}
            }
        }
    }
    let _ = isa;
    if exact {
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = gelu_erf_scalar(v));
    } else {
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = gelu_tanh_scalar(v));
    }
}
