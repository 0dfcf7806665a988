//! Shared test support for convolution modules written as text: deterministic values and their
//! literal form.

/// Deterministic values in [-scale, scale).
pub fn floats(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0) * scale).collect()
}

/// `v` as a constant literal (`[a, b, …]`).
pub fn list(v: &[f32]) -> String {
    let s: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", s.join(", "))
}
