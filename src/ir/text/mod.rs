//! The IR text format: a readable, exactly round-tripping printer and parser (grammar in `docs/ir.md`).
//!
//! ```text
//! module @example
//!
//! func @main(%0 "x": f32[2,3], %1: f32[3]) {
//!   %2 = broadcast_in_dim %1, shape=f32[2,3], axes=[1] : f32[2,3]
//!   %3 = add %0, %2 : f32[2,3]
//!   return %3
//! }
//! ```
//!
//! [`print_module`] numbers values canonically, so `print_module(&parse_module(t)?) == t` for
//! every text the printer produces.

mod lexer;
mod literal;
mod names;
mod parse;
mod print;

pub use names::format_shape;
pub use parse::{SourceMap, parse_module, parse_module_with_locations};
pub(crate) use print::Names;
pub use print::{PrintOptions, format_f32, format_f64, function_order, print_module, print_module_with};
