//! The execution backends: `interp` (the reference interpreter) and `jit` (compiled plans of
//! generated loops and native kernels), plus the state they share (signatures, finalization).

pub mod interp;
pub mod jit;
mod signature;
pub mod slot;
