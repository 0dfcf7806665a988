//! Hand-written fused kernels (Softmax, LayerNorm, GELU, flash attention) used by the "jit"
//! backend in place of the reference kernels.
//!
//! Every kernel works on f32 slices (callers convert half types through f32), has an AVX2+FMA
//! path and a portable one, selected by [`FusedIsa`], and splits its rows over a rayon pool when
//! the work is large enough. Every kernel also has an AVX-512 path (16 lanes, masked tails;
//! attention with wider micro-kernels; layer norm over leading axes is its portable body compiled
//! with AVX-512 enabled, as its AVX2 path is with AVX2). See `docs/fused.md`.
// Targets without SIMD paths (wasm32) leave parts of the SIMD scaffolding unused.
#![cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]

pub mod attention;
pub mod gelu;
pub mod layer_norm;
pub mod softmax;
pub mod vmath;

// The paths the crate's own tests and benches use (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use attention::{AttentionLayout, AttentionMask, AttentionParams, attention_f32};
pub use gelu::gelu_f32;
pub use layer_norm::{layer_norm_f32, layer_norm_residual_f32, layer_norm_strided_f32};
pub use softmax::softmax_f32;

use rayon::prelude::*;

use crate::kernels::gemm::{Isa, selected_isa};

/// The code path a fused kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedIsa {
    /// Portable Rust (whatever the compiler vectorises for the baseline target).
    Generic,
    /// x86-64 AVX2 + FMA, 8 f32 lanes. Only selected on CPUs that have both.
    Avx2,
    /// x86-64 AVX-512F (with AVX2 + FMA), 16 f32 lanes where a kernel has such a path, its AVX2
    /// path elsewhere. Only selected on CPUs that have all three.
    Avx512,
}

impl FusedIsa {
    /// The path used by default, following the GEMM dispatch (so the same environment
    /// overrides apply: `TENSORJIT_DISABLE_AVX512=1` forces AVX2, `TENSORJIT_DISABLE_AVX2=1` the
    /// portable path): AVX-512 when it selected AVX-512, AVX2 when it selected AVX2, else generic.
    pub fn selected() -> FusedIsa {
        match selected_isa() {
            Isa::Avx512 if Self::avx512_available() => FusedIsa::Avx512,
            Isa::Avx2 | Isa::Avx512 if Self::avx2_available() => FusedIsa::Avx2,
            _ => FusedIsa::Generic,
        }
    }

    /// Whether this CPU can run the AVX2 path.
    pub fn avx2_available() -> bool {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        {
            std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(all(feature = "simd", target_arch = "x86_64")))]
        {
            false
        }
    }

    /// Whether this CPU can run the AVX-512 path (AVX-512F, AVX2 and FMA).
    pub fn avx512_available() -> bool {
        #[cfg(all(feature = "simd", target_arch = "x86_64"))]
        {
            Self::avx2_available() && std::arch::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(all(feature = "simd", target_arch = "x86_64")))]
        {
            false
        }
    }

    /// `self`, lowered to the best path at or below it that the CPU can run.
    pub(crate) fn checked(self) -> FusedIsa {
        match self {
            FusedIsa::Avx512 if Self::avx512_available() => FusedIsa::Avx512,
            FusedIsa::Avx512 | FusedIsa::Avx2 if Self::avx2_available() => FusedIsa::Avx2,
            _ => FusedIsa::Generic,
        }
    }

    /// Whether the AVX2 code may run (AVX2 or AVX-512 after [`FusedIsa::checked`]); only the
    /// x86-64 paths ask.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(crate) fn avx2(self) -> bool {
        matches!(self, FusedIsa::Avx2 | FusedIsa::Avx512)
    }

    /// A short lower-case name (`generic`, `avx2`, `avx512`).
    pub fn name(self) -> &'static str {
        match self {
            FusedIsa::Generic => "generic",
            FusedIsa::Avx2 => "avx2",
            FusedIsa::Avx512 => "avx512",
        }
    }
}

/// Work (in rough element-operations) below which a kernel stays on the calling thread.
const PAR_MIN_WORK: usize = 1 << 15;

/// Splits `y` into chunks of whole `unit`-sized pieces and runs `f(first_unit, chunk)` on each,
/// over `pool` when the total work (`cost_per_unit` per unit) is large enough, else in one call.
pub(crate) fn for_units<F>(pool: Option<&rayon::ThreadPool>, y: &mut [f32], unit: usize, cost_per_unit: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    match units_per_task(pool, y.len(), unit, cost_per_unit) {
        Some((p, per)) => p.install(|| y.par_chunks_mut(per * unit).enumerate().for_each(|(i, c)| f(i * per, c))),
        None => f(0, y),
    }
}

/// [`for_units`] over two outputs of the same length, split alike: `f(first_unit, y_chunk,
/// z_chunk)`.
pub(crate) fn for_unit_pairs<F>(
    pool: Option<&rayon::ThreadPool>,
    y: &mut [f32],
    z: &mut [f32],
    unit: usize,
    cost_per_unit: usize,
    f: F,
) where
    F: Fn(usize, &mut [f32], &mut [f32]) + Sync + Send,
{
    let len = y.len().min(z.len());
    let (y, z) = (&mut y[..len], &mut z[..len]);
    match units_per_task(pool, len, unit, cost_per_unit) {
        Some((p, per)) => p.install(|| {
            y.par_chunks_mut(per * unit).zip(z.par_chunks_mut(per * unit)).enumerate().for_each(|(i, (a, b))| {
                f(i * per, a, b);
            })
        }),
        None => f(0, y, z),
    }
}

/// The pool and units per task when `len` values in `unit`-sized pieces are worth splitting
/// over `pool` (`None`: run in one call).
fn units_per_task(
    pool: Option<&rayon::ThreadPool>,
    len: usize,
    unit: usize,
    cost_per_unit: usize,
) -> Option<(&rayon::ThreadPool, usize)> {
    let units = len.checked_div(unit).unwrap_or(0);
    let threads = pool.map_or(1, |p| p.current_num_threads());
    let work = units.saturating_mul(cost_per_unit.max(1));
    match pool {
        Some(p) if threads > 1 && units > 1 && work >= PAR_MIN_WORK => {
            // About 4 tasks per thread, each with at least PAR_MIN_WORK / 4 work.
            let by_threads = units.div_ceil(threads * 4);
            let by_work = (PAR_MIN_WORK / 4).div_ceil(cost_per_unit.max(1));
            Some((p, by_threads.max(by_work).max(1)))
        }
        _ => None,
    }
}
