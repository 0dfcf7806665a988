//! Runtime support shared by the backends: aligned storage, (later) memory plans and thread pools.

pub mod aligned;
pub mod cli_run;
pub mod interp;
pub mod jit;
