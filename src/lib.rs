//! tensorjit: build, compile and run tensor computation graphs on the CPU.
//!
//! The API follows gomlx/compute: pick a [`Backend`] (by name, or from `TENSORJIT_BACKEND`),
//! get a [`Builder`], add ops to its `main` [`Function`], `compile()` it into an
//! [`Executable`] and `execute` it on [`Buffer`]s.
//!
//! ```
//! use tensorjit::{DType, Shape};
//!
//! // `jit` compiles to native code; `interp` is the reference interpreter.
//! let backend = tensorjit::new_with_config("jit")?;
//! let builder = backend.builder("example");
//! let main = builder.main();
//! let x = main.parameter("x", Shape::new(DType::Float32, &[3]))?;
//! let y = main.parameter("y", Shape::new(DType::Float32, &[3]))?;
//! let sum = main.add(x, y)?;
//! let out = main.exp(sum)?;
//! main.return_(&[out])?;
//! let exe = builder.compile()?;
//!
//! let a = tensorjit::Buffer::from_slice(&[0.0f32, 1.0, -1.0], &[3])?;
//! let b = tensorjit::Buffer::from_slice(&[0.0f32, 0.0, 1.0], &[3])?;
//! let result = exe.execute(&[&a, &b], &[])?;
//! assert_eq!(result[0].to_vec::<f32>()?, [1.0, std::f32::consts::E, 1.0]);
//! # Ok::<(), tensorjit::Error>(())
//! ```
//!
//! The layers of the crate, lowest first (each imports only from those below it; checked by
//! `tests/layers.rs`, described in docs/architecture.md): [`error`], [`env`](mod@env) → [`limits`] →
//! [`config`], [`threads`] → [`ir`] → [`memory`] → `kernels` → `codegen` → `lower`, `passes` →
//! [`api`] (the contract: [`Backend`], [`Builder`], [`Buffer`], [`Executable`]) → [`backends`]
//! (`interp`, `jit`), [`weights`] (safetensors, `.npz`, `.npy`) → [`onnx`](mod@onnx) (model
//! import) → [`registry`], [`cli`].
//!
//! `kernels`, `codegen`, `lower` and `passes` are internal (the first, second and last are
//! public only under the `internals` feature, which exists for this crate's own tests, benches
//! and tools and has no stability promise).
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod backends;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "compliance")]
pub mod compliance;
pub mod config;
pub mod env;
pub mod error;
pub mod ir;
pub mod limits;
pub mod memory;
#[cfg(feature = "onnx")]
pub mod onnx;
pub mod registry;
pub mod threads;
pub mod weights;

// The internal layers: crate-private for users; public (hidden from the docs, no stability
// promise) under the `internals` feature, which only this crate's own tests, benches and tools
// turn on. Items they alone use are allowed to be dead in the plain build.
#[cfg(all(feature = "jit", feature = "internals"))]
#[doc(hidden)]
pub mod codegen;
#[cfg(all(feature = "jit", not(feature = "internals")))]
mod codegen;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod kernels;
#[cfg(not(feature = "internals"))]
mod kernels;
// Nothing outside the crate uses the lowering, so it stays private even under `internals`.
#[cfg(feature = "jit")]
mod lower;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod passes;
// Used by the jit backend and by the ONNX importer (dead-code elimination).
#[cfg(all(any(feature = "jit", feature = "onnx"), not(feature = "internals")))]
mod passes;

pub use api::{
    Backend, Buffer, Builder, CancelToken, Capabilities, ExecOptions, Executable, Function, Profiler, Value,
};
pub use backends::interp::InterpOptions;
#[cfg(feature = "jit")]
pub use backends::jit::JitOptions;
pub use error::{Error, Result};
pub use ir::{DType, Element, OpType, Shape};
pub use registry::{BackendOptions, list, new, new_with_config, new_with_options, register};
