//! Runtime: aligned storage, the finalizable executable state, the interp and jit backends, CLI run.

pub mod aligned;
pub mod cli_run;
pub mod interp;
pub mod jit;
mod signature;
pub mod slot;
