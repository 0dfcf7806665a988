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
//!
//! ```
//! use tensorjit::ir::text::{parse_module, print_module};
//!
//! let text = "module @m\n\nfunc @main(%0 \"x\": f32[2]) {\n  %1 = exp %0 : f32[2]\n  return %1\n}\n";
//! let module = parse_module(text)?;
//! assert_eq!(print_module(&module), text);
//! // Errors carry the line and column.
//! let e = parse_module("module @m\nfunc @main( {").unwrap_err();
//! assert!(e.to_string().contains("line 2, column 13"), "{e}");
//! # Ok::<(), tensorjit::Error>(())
//! ```
//!
//! Dumps of models print large constants as a summary (shape,
//! hash, first values) and, to stay replayable, put their data in a side file
//! ([`print_module_with_side_file`], [`parse_module_with_constants`], [`sidefile`]): raw blobs
//! (`file(…)`) or a safetensors file whose tensors the text names (`safetensors("FILE",
//! "TENSOR")`, [`safetensors`]).

mod lexer;
mod literal;
mod names;
mod parse;
mod print;
pub mod safetensors;
pub mod sidefile;
pub mod xxh64;

pub use names::format_shape;
pub use parse::{
    ParseOptions, SourceMap, parse_module, parse_module_with_constants, parse_module_with_locations,
    parse_module_with_options,
};
pub(crate) use print::Names;
pub use print::{
    DEFAULT_DUMP_CONSTANT_ELEMENTS, DEFAULT_PREVIEW_ELEMENTS, PrintOptions, format_f32, format_f64, function_order,
    print_module, print_module_with, print_module_with_side_file,
};
pub use sidefile::{SideFile, SideFileReader, SideFormat};
