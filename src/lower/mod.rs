//! Lowering from the IR to executable pieces: fused loop kernels (and, later, the execution plan).

pub mod loop_kernel;

pub use loop_kernel::{Access, ElemTy, Inst, LoopKernel};
