//! Kernels: the reference implementation of every op (plain safe Rust), the GEMM microkernels
//! and the hand-written fused kernels (Softmax, LayerNorm, GELU, attention).

// The GEMM and fused kernels serve the jit backend (and this crate's own tests and benches):
// builds without either leave them out.
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod fused;
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod gemm;
pub mod reference;
pub mod tensor;

// The path the crate's own tests use (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use tensor::Tensor;
