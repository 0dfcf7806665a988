//! Kernels: the reference implementation of every op (plain safe Rust), the GEMM microkernels,
//! the convolution kernels (implicit GEMM, depthwise), the pooling kernels (ReduceWindow, SelectAndScatter),
//! the hand-written fused kernels (Softmax, LayerNorm, GELU, attention) and the data-movement
//! kernel (strided copies: transposes, broadcasts, slices).

// The GEMM and fused kernels serve the jit backend (and this crate's own tests and benches):
// builds without either leave them out.
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod conv;
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod fused;
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod gemm;
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod half;
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod movement;
#[cfg(any(feature = "jit", feature = "internals"))]
pub mod pool;
pub mod reference;
pub mod tensor;

// The path the crate's own tests use (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use tensor::Tensor;
