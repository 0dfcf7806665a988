//! The subcommands of the `tensorjit` command as a library: each takes typed options and
//! returns a report (printed as text or as one JSON object by `src/bin/tensorjit.rs`, which only
//! parses arguments and dispatches) or a [`CliError`] naming the file, and the line and column
//! for IR text errors.
//!
//! - [`run`](run::run): execute `main` of an IR file or an ONNX model on `.npy` inputs, write
//!   the outputs.
//! - [`bench`](bench::bench): compile once, time many executions.
//! - [`check`](check::check): parse and verify, listing every error with its position.
//! - [`fmt`](fmt::fmt): the canonical text, large constants optionally moved to a side file.
//! - [`dump`](dump::dump): the jit backend's stages (IR after each pass, clusters, machine code,
//!   plan) without inputs.
//! - [`import`](import::import): an ONNX model as IR text plus a safetensors file of its weights.
//! - [`info`](info::info): what an ONNX model (or a weights file) holds, without importing it.
//!
//! Every command that reads a model takes IR text or ONNX ([`model`]). [`npy`] re-exports the
//! bounded `.npy` reader and writer of [`crate::weights::npy`]; [`read_text`] /
//! [`read_text_file`] are the bounded IR text readers. The command line is described in
//! `docs/cli.md`.

pub mod bench;
pub mod check;
pub mod dump;
pub mod fmt;
pub mod import;
pub mod info;
pub mod model;
pub mod npy;
pub mod run;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use model::{ModelFormat, model_format};
pub use npy::{MAX_NPY_HEADER_BYTES, NpyArray, Storage, read_npy, read_npy_bytes, write_output};
pub use run::{
    MAX_REPEAT, ModelOptions, OutputFile, RepeatStats, RunOptions, RunReport, prepare_out_dir, print_report, run,
    run_with,
};

use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::text::{ParseOptions, SourceMap, parse_module_with_options};

/// A failed command: what went wrong, and the file (with the line and column, for errors in IR
/// text) it concerns. Displays as `FILE:LINE:COLUMN: message` (or `FILE: message`).
#[derive(Clone, Debug, PartialEq)]
pub struct CliError {
    /// The file concerned, as given on the command line.
    pub file: Option<String>,
    /// 1-based line in that file.
    pub line: Option<usize>,
    /// 1-based column in that file.
    pub column: Option<usize>,
    /// What went wrong.
    pub message: String,
}

impl CliError {
    /// An error not tied to a file.
    pub fn new(message: impl Into<String>) -> CliError {
        CliError { file: None, line: None, column: None, message: message.into() }
    }

    /// An error about `file`: a parse error keeps its line and column; a message that starts
    /// by naming the file does not name it twice.
    pub fn in_file(file: &Path, e: Error) -> CliError {
        let name = display_name(file);
        let (line, column, message) = match e {
            Error::Parse { line, column, msg } => (Some(line), Some(column), msg),
            other => {
                let m = other.to_string();
                let prefix = format!("{name}: ");
                let m = match m.find(&prefix) {
                    Some(i) => format!("{}{}", &m[..i], &m[i + prefix.len()..]),
                    None => m,
                };
                (None, None, m)
            }
        };
        CliError { file: Some(name), line, column, message }
    }

    /// `FILE:LINE:COLUMN`, `FILE`, or `None`.
    pub fn location(&self) -> Option<String> {
        let file = self.file.as_ref()?;
        Some(match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{file}:{l}:{c}"),
            (Some(l), None) => format!("{file}:{l}"),
            _ => file.clone(),
        })
    }

    /// The error as a JSON object `{"message", "line", "column"}` (the file is reported beside
    /// it, see [`CliError::to_json`]).
    pub fn detail_json(&self) -> serde_json::Value {
        serde_json::json!({ "message": self.message, "line": self.line, "column": self.column })
    }

    /// The whole failed result of `command` as JSON: `{"command", "file", "ok": false,
    /// "error": {"message", "line", "column"}}`.
    pub fn to_json(&self, command: &str) -> serde_json::Value {
        serde_json::json!({ "command": command, "file": self.file, "ok": false, "error": self.detail_json() })
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.location() {
            Some(loc) => write!(f, "{loc}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CliError {}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        CliError::new(e.to_string())
    }
}

/// How a file is named in messages (`-` is `<stdin>`).
pub fn display_name(path: &Path) -> String {
    if path == Path::new("-") { "<stdin>".to_string() } else { path.display().to_string() }
}

/// Milliseconds, for reports.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The directory in which the side files of `path`'s `file(…)` constants are looked up: the
/// file's own directory (the current directory for standard input).
pub fn constants_dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if path != Path::new("-") && !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Reads (bounded, see [`read_text_file`]) and parses the IR file `path`, resolving side-file
/// constants next to it; an ONNX model ([`model_format`]) is imported instead, its symbolic
/// dimensions left dynamic. Errors name the file, with the line and column of a parse error.
pub fn load_module(path: &Path) -> std::result::Result<(Module, SourceMap), CliError> {
    load_module_with_dims(path, &[])
}

/// [`load_module`], binding the named symbolic dimensions of an ONNX model (`--dim NAME=SIZE`);
/// an error for an IR file when `dims` is not empty.
pub fn load_module_with_dims(
    path: &Path,
    dims: &[(String, i64)],
) -> std::result::Result<(Module, SourceMap), CliError> {
    if model_format(path) == ModelFormat::Onnx {
        let opts = crate::onnx::ImportOptions { dims: dims.iter().cloned().collect(), ..Default::default() };
        let m = model::import_file(path, &opts)?;
        return Ok((m.module, SourceMap::default()));
    }
    if let Some((name, _)) = dims.first() {
        return Err(CliError::in_file(
            path,
            Error::invalid("--dim", format!("{name}: only ONNX models have symbolic dimensions")),
        ));
    }
    let text = read_text_file(path).map_err(|e| CliError::in_file(path, e))?;
    let opts = ParseOptions { constants_dir: Some(constants_dir_of(path)) };
    parse_module_with_options(&text, &opts).map_err(|e| CliError::in_file(path, e))
}

/// Reads a whole IR text from `r` (`name` names it in errors), in chunks: stops with an error
/// at the first NUL byte, past [`crate::limits::MAX_INPUT_FILE_BYTES`] bytes, or on invalid
/// UTF-8.
pub fn read_text(r: impl Read, name: &str) -> Result<String> {
    const CHUNK: usize = 64 << 10;
    let max = crate::limits::MAX_INPUT_FILE_BYTES;
    let mut r = r.take(max + 1);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let k = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Io(format!("{name}: {e}"))),
        };
        if let Some(i) = chunk[..k].iter().position(|&b| b == 0) {
            return Err(Error::invalid(name, format!("NUL byte at offset {}: not an IR text file", buf.len() + i)));
        }
        if (buf.len() + k) as u64 > max {
            return Err(Error::limit(name, format!("larger than {max} bytes")));
        }
        buf.try_reserve(k).map_err(|_| Error::out_of_memory(name, buf.len() + k))?;
        buf.extend_from_slice(&chunk[..k]);
    }
    String::from_utf8(buf).map_err(|e| {
        Error::invalid(name, format!("not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to()))
    })
}

/// Reads the IR text file `path` with [`read_text`] (`-` is standard input).
pub fn read_text_file(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        return read_text(std::io::stdin().lock(), "<stdin>");
    }
    let f = File::open(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    if f.metadata().map_err(|e| Error::Io(format!("{}: {e}", path.display())))?.is_dir() {
        return Err(Error::Io(format!("{}: is a directory", path.display())));
    }
    read_text(f, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_once() {
        let e = CliError::in_file(Path::new("m.tjir"), Error::Parse { line: 3, column: 7, msg: "bad".into() });
        assert_eq!(e.to_string(), "m.tjir:3:7: bad");
        let e = CliError::in_file(Path::new("m.tjir"), Error::Io("m.tjir: No such file".into()));
        assert_eq!(e.to_string(), "m.tjir: io: No such file");
        let e = CliError::in_file(Path::new("m.tjir"), Error::Config("no backend".into()));
        assert_eq!(e.to_string(), "m.tjir: config: no backend");
        assert_eq!(constants_dir_of(Path::new("m.tjir")), PathBuf::from("."));
        assert_eq!(constants_dir_of(Path::new("d/m.tjir")), PathBuf::from("d"));
        assert_eq!(constants_dir_of(Path::new("-")), PathBuf::from("."));
    }
}
