//! Lowering from the IR to executable pieces: clusters of elementwise nodes fused into loop
//! kernels ([`cluster`]) and the loop-kernel program itself ([`loop_kernel`]).

pub mod cluster;
pub mod loop_kernel;

pub use cluster::{Cluster, Clustering, Item, cluster_function};
pub use loop_kernel::{Access, ElemTy, Inst, Lit, LoopKernel, Reduction, Ty};
