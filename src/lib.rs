//! tensorjit: build, compile and run tensor computation graphs on the CPU.
//!
//! The API follows gomlx/compute: pick a [`Backend`] (by name, or from `TENSORJIT_BACKEND`),
//! get a [`Builder`], add ops to its `main` [`Function`], `compile()` it into an
//! [`Executable`] and `execute` it on [`Buffer`]s.
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod backends;
pub mod cli;
pub mod codegen;
#[cfg(feature = "compliance")]
pub mod compliance;
pub mod config;
pub mod error;
pub mod ir;
pub mod kernels;
pub mod limits;
pub mod lower;
pub mod memory;
pub mod passes;
pub mod threads;

pub use api::{
    Backend, BackendOptions, Buffer, Builder, CancelToken, Capabilities, ExecOptions, Executable, Function, Value,
    list, new, new_with_config, new_with_options, register,
};
pub use backends::interp::InterpOptions;
pub use backends::jit::JitOptions;
pub use error::{Error, Result};
pub use ir::{DType, Element, OpType, Shape};

/// The backends compiled into the crate, registered at first use of the registry.
fn builtin_backends() -> Vec<(String, api::registry::Constructor)> {
    vec![
        (
            backends::interp::NAME.to_string(),
            backends::interp::InterpBackend::constructor as api::registry::Constructor,
        ),
        (backends::jit::NAME.to_string(), backends::jit::JitBackend::constructor as api::registry::Constructor),
    ]
}
