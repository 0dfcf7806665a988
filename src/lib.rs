//! tensorjit: build, compile and run tensor computation graphs on the CPU.
//!
//! The API follows gomlx/compute: pick a [`Backend`] (by name, or from `TENSORJIT_BACKEND`),
//! get a [`Builder`], add ops to its `main` [`Function`], `compile()` it into an
//! [`Executable`] and `execute` it on [`Buffer`]s.
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod backends;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "jit")]
pub mod codegen;
#[cfg(feature = "compliance")]
pub mod compliance;
pub mod config;
pub mod env;
pub mod error;
pub mod ir;
pub mod kernels;
pub mod limits;
#[cfg(feature = "jit")]
pub mod lower;
pub mod memory;
pub mod passes;
pub mod registry;
pub mod threads;

pub use api::{Backend, Buffer, Builder, CancelToken, Capabilities, ExecOptions, Executable, Function, Value};
pub use backends::interp::InterpOptions;
#[cfg(feature = "jit")]
pub use backends::jit::JitOptions;
pub use error::{Error, Result};
pub use ir::{DType, Element, OpType, Shape};
pub use registry::{BackendOptions, list, new, new_with_config, new_with_options, register};
