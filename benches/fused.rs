//! Benchmarks of the fused kernels against their decomposed forms on "jit".

fn main() {}
