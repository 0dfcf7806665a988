//! What the MPI examples (data_parallel, tensor_parallel) share: deterministic data, the same
//! on every rank, and the comparison with the single-process result.

use tensorjit::Error;

/// `n` values in about [-0.5, 0.5), a pattern chosen by `seed`.
pub fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 31 + seed * 17) % 53) as f32 - 26.0) / 50.0).collect()
}

/// The largest relative difference of `got` from `want` (the single-process result), or an `Err`
/// naming `what` when the lengths differ or it exceeds float rounding.
pub fn check(what: &str, got: &[f32], want: &[f32]) -> tensorjit::Result<f32> {
    let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0f32, f32::max);
    if got.len() != want.len() || diff > 1e-4 {
        return Err(Error::invalid(
            what,
            format!("differs from one process by {diff:e} (relative; lengths {} and {})", got.len(), want.len()),
        ));
    }
    Ok(diff)
}
