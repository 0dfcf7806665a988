//! Lowering from the IR to executable pieces: clusters of elementwise nodes fused into loop
//! kernels ([`cluster`]), whose programs ([`crate::codegen::loop_kernel`]) the code generator compiles.

pub mod cluster;
