//! The execution backends: `interp` (the reference interpreter) and `jit` (compiled plans of
//! generated loops and native kernels), plus the state they share (signatures, finalization).

pub mod interp;
#[cfg(feature = "jit")]
pub mod jit;
#[cfg(feature = "mpi")]
pub mod mpi;
mod signature;
pub mod slot;
