//! Kernels: the reference implementation of every op (plain safe Rust) and, later, the
//! per-ISA microkernels.

pub mod gemm;
pub mod reference;
pub mod tensor;

pub use tensor::Tensor;
