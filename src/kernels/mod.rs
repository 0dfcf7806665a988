//! Kernels: the reference implementation of every op (plain safe Rust), the GEMM microkernels
//! and the hand-written fused kernels (Softmax, LayerNorm, GELU, attention).

pub mod fused;
pub mod gemm;
pub mod reference;
pub mod tensor;

pub use tensor::Tensor;
