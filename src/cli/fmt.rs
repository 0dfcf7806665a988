//! `tensorjit fmt FILE`: the canonical text of an IR file (what the printer writes; it parses
//! back to the same module). Large constants may be summarised (`--max-constant-elements`) and
//! their data moved to a side file (`--constants-file`: raw blobs, or a safetensors file when
//! its name ends in `.safetensors`), so that the text stays small and still replays.

use std::path::{Path, PathBuf};

use crate::cli::{CliError, display_name, load_module};
use crate::ir::module::Module;
use crate::ir::text::{
    DEFAULT_DUMP_CONSTANT_ELEMENTS, PrintOptions, SideFile, print_module_with, print_module_with_side_file,
};

/// Options of [`fmt`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FmtOptions {
    /// The IR file (`-`: standard input).
    pub file: PathBuf,
    /// How constants are printed: `max_constant_elements` (`None`: in full, unless
    /// `constants_file` is given: then [`DEFAULT_DUMP_CONSTANT_ELEMENTS`]) and the number of
    /// leading values shown.
    pub print: PrintOptions,
    /// Write the data of the summarised constants to this file; the text names it by its file
    /// name, so keep it next to the text. A name ending in `.safetensors` gives a safetensors
    /// file (constants written `safetensors("NAME", "c0")`), any other raw blobs (`file(…)`).
    /// Without it, summarised constants are `elided(…)` (readable, but they do not parse).
    pub constants_file: Option<PathBuf>,
}

/// The side file a command wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstantsFileReport {
    /// Where it was written.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Distinct constants in it.
    pub constants: usize,
}

impl ConstantsFileReport {
    /// As JSON: `{"path", "bytes", "constants"}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "path": self.path.display().to_string(), "bytes": self.bytes, "constants": self.constants })
    }
}

/// The result of [`fmt`].
#[derive(Clone, Debug, PartialEq)]
pub struct FmtReport {
    /// The IR file.
    pub file: String,
    /// The canonical text.
    pub text: String,
    /// The side file, when one was asked for.
    pub constants_file: Option<ConstantsFileReport>,
}

impl FmtReport {
    /// As one JSON object: `{"command": "fmt", "file", "ok": true, "text", "constants_file"}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "command": "fmt",
            "file": self.file,
            "ok": true,
            "text": self.text,
            "constants_file": self.constants_file.as_ref().map(|c| c.to_json()),
        })
    }
}

/// A printer for one or more modules that share a side file: [`Printer::print`] each, then
/// [`Printer::finish`] writes the side file.
pub struct Printer {
    opts: PrintOptions,
    side: Option<(PathBuf, SideFile)>,
}

impl Printer {
    /// A printer with `opts`, writing summarised constants to `constants_file` when given
    /// (named in the text by its file name; `opts.max_constant_elements` defaults to
    /// [`DEFAULT_DUMP_CONSTANT_ELEMENTS`] then).
    pub fn new(mut opts: PrintOptions, constants_file: Option<&Path>) -> Result<Printer, CliError> {
        let side = match constants_file {
            None => None,
            Some(path) => {
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| CliError::new(format!("--constants-file {}: not a file name", path.display())))?;
                let side = SideFile::for_name(name).map_err(|e| CliError::in_file(path, e))?;
                opts.max_constant_elements.get_or_insert(DEFAULT_DUMP_CONSTANT_ELEMENTS);
                Some((path.to_path_buf(), side))
            }
        };
        Ok(Printer { opts, side })
    }

    /// The text of `m`.
    pub fn print(&mut self, m: &Module) -> String {
        match &mut self.side {
            Some((_, side)) => print_module_with_side_file(m, &self.opts, side),
            None => print_module_with(m, &self.opts),
        }
    }

    /// Writes the side file (even when empty, so that a script finds it); says what it wrote.
    pub fn finish(self) -> Result<Option<ConstantsFileReport>, CliError> {
        let Some((path, side)) = self.side else { return Ok(None) };
        side.write_file(&path).map_err(|e| CliError::in_file(&path, e))?;
        let bytes =
            if side.is_safetensors() { std::fs::metadata(&path).map_or(side.len(), |m| m.len()) } else { side.len() };
        Ok(Some(ConstantsFileReport { path, bytes, constants: side.blob_count() }))
    }
}

/// Reads and parses `opts.file` (side-file constants are looked up next to it) and prints it.
pub fn fmt(opts: &FmtOptions) -> Result<FmtReport, CliError> {
    let (m, _) = load_module(&opts.file)?;
    let mut p = Printer::new(opts.print.clone(), opts.constants_file.as_deref())?;
    let text = p.print(&m);
    let constants_file = p.finish()?;
    Ok(FmtReport { file: display_name(&opts.file), text, constants_file })
}
