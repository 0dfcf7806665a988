//! `tensorjit import model.onnx -o model.tjir`: an ONNX model as IR text plus a safetensors
//! file of its weights next to it (`model.safetensors` by default). Constants with more than
//! [`ImportCommand::max_constant_elements`] elements go to the safetensors file, named after the
//! ONNX initializers they come from (constants the importer computed get generated names
//! `c0`, `c1`, …); the text refers to them as `constant safetensors("model.safetensors",
//! "NAME") : TYPE`, so that `tensorjit run model.tjir` replays the model.

use std::path::{Path, PathBuf};

use crate::cli::fmt::ConstantsFileReport;
use crate::cli::model::{decode_onnx, import_bytes, read_onnx_file};
use crate::cli::{CliError, constants_dir_of, display_name};
use crate::error::Error;
use crate::ir::text::{DEFAULT_DUMP_CONSTANT_ELEMENTS, PrintOptions, SideFile, print_module_with_side_file};
use crate::onnx::ImportOptions;

/// Options of [`import`].
#[derive(Clone, Debug, PartialEq)]
pub struct ImportCommand {
    /// The ONNX model.
    pub file: PathBuf,
    /// The IR text file to write.
    pub out: PathBuf,
    /// The safetensors file to write the weights to: a file name, or a path in the IR file's
    /// directory. `None`: `out` with the extension `.safetensors`.
    pub weights: Option<PathBuf>,
    /// Sizes of symbolic dimensions (`--dim NAME=SIZE`); the others stay dynamic.
    pub dims: Vec<(String, i64)>,
    /// Constants with more elements than this go to the weights file.
    pub max_constant_elements: usize,
}

impl Default for ImportCommand {
    fn default() -> ImportCommand {
        ImportCommand {
            file: PathBuf::new(),
            out: PathBuf::new(),
            weights: None,
            dims: Vec::new(),
            max_constant_elements: DEFAULT_DUMP_CONSTANT_ELEMENTS,
        }
    }
}

/// What [`import`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportReport {
    /// The ONNX model.
    pub file: PathBuf,
    /// The IR text file written.
    pub out: PathBuf,
    /// Its size in bytes.
    pub text_bytes: usize,
    /// The weights file written.
    pub weights: ConstantsFileReport,
    /// The model's inputs: name and IR type.
    pub inputs: Vec<(String, String)>,
    /// The model's outputs: name and IR type.
    pub outputs: Vec<(String, String)>,
    /// The default-domain opset.
    pub opset: i64,
    /// `producer_name producer_version`.
    pub producer: String,
}

impl ImportReport {
    /// As one JSON object: `{"command": "import", "file", "ok": true, "out", "text_bytes",
    /// "weights": {"path", "bytes", "constants"}, "inputs": [{"name", "type"}], "outputs",
    /// "opset", "producer"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let list = |v: &[(String, String)]| -> Vec<serde_json::Value> {
            v.iter().map(|(n, t)| serde_json::json!({ "name": n, "type": t })).collect()
        };
        serde_json::json!({
            "command": "import",
            "file": display_name(&self.file),
            "ok": true,
            "out": self.out.display().to_string(),
            "text_bytes": self.text_bytes,
            "weights": self.weights.to_json(),
            "inputs": list(&self.inputs),
            "outputs": list(&self.outputs),
            "opset": self.opset,
            "producer": self.producer,
        })
    }

    /// The human summary.
    pub fn write_human(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        writeln!(w, "imported {} (opset {}{})", display_name(&self.file), self.opset, producer_note(&self.producer))?;
        for (n, t) in &self.inputs {
            writeln!(w, "input {n:?}: {t}")?;
        }
        for (n, t) in &self.outputs {
            writeln!(w, "output {n:?}: {t}")?;
        }
        writeln!(w, "wrote {} ({} bytes)", self.out.display(), self.text_bytes)?;
        writeln!(
            w,
            "wrote {} ({} bytes, {} tensors)",
            self.weights.path.display(),
            self.weights.bytes,
            self.weights.constants
        )
    }
}

fn producer_note(p: &str) -> String {
    if p.is_empty() { String::new() } else { format!(", produced by {p}") }
}

/// The weights file's name as the text will write it (a file name: the file lies in the IR
/// file's directory) and its path.
fn weights_location(out: &Path, weights: Option<&Path>) -> Result<(String, PathBuf), CliError> {
    let dir = constants_dir_of(out);
    let chosen = match weights {
        Some(w) => w.to_path_buf(),
        None => out.with_extension(crate::ir::text::safetensors::EXTENSION),
    };
    let next_to_out = match chosen.parent() {
        None => true,
        Some(p) => p.as_os_str().is_empty() || constants_dir_of(&chosen) == dir,
    };
    let name = chosen.file_name().and_then(|n| n.to_str()).filter(|_| next_to_out).ok_or_else(|| {
        CliError::new(format!(
            "--weights {}: must be a file name in the IR file's directory (the text names it relative to itself)",
            chosen.display()
        ))
    })?;
    if chosen.file_name() == out.file_name() {
        return Err(CliError::new(format!("--weights {}: the same file as --out", chosen.display())));
    }
    Ok((name.to_string(), dir.join(name)))
}

/// Imports `opts.file` and writes the IR text and the weights file.
pub fn import(opts: &ImportCommand) -> Result<ImportReport, CliError> {
    if opts.out.as_os_str().is_empty() || opts.out == Path::new("-") {
        return Err(CliError::new("--out: the IR file to write must be a file name"));
    }
    let (name, weights_path) = weights_location(&opts.out, opts.weights.as_deref())?;
    let mut side = SideFile::safetensors(&name).map_err(|e| CliError::new(format!("--weights {name}: {e}")))?;

    let bytes = read_onnx_file(&opts.file)?;
    // Name the weights after the initializers they come from.
    {
        let mut proto = decode_onnx(&bytes, &opts.file)?;
        let base = constants_dir_of(&opts.file);
        if let Some(g) = proto.graph.as_mut() {
            for t in g.initializer.iter_mut() {
                let tname = t.name().to_string();
                if let Ok((_, data)) = crate::onnx::tensor::take_tensor_bytes(t, Some(&base)) {
                    side.suggest_name(&data, &tname);
                }
            }
        }
    }
    let iopts = ImportOptions { dims: opts.dims.iter().cloned().collect(), ..ImportOptions::default() };
    let model = import_bytes(&bytes, &opts.file, &iopts)?;
    drop(bytes);

    let print = PrintOptions { max_constant_elements: Some(opts.max_constant_elements), ..PrintOptions::default() };
    let body = print_module_with_side_file(&model.module, &print, &mut side);
    let typ = |s: &crate::ir::shape::Shape| crate::ir::text::format_shape(s);
    let inputs: Vec<(String, String)> = model.inputs.iter().map(|t| (t.name.clone(), typ(&t.shape))).collect();
    let outputs: Vec<(String, String)> = model.outputs.iter().map(|t| (t.name.clone(), typ(&t.shape))).collect();
    let mut text = format!(
        ";; imported from {} (opset {}{})\n",
        opts.file.file_name().map_or_else(|| display_name(&opts.file), |n| n.to_string_lossy().into_owned()),
        model.opset,
        producer_note(&model.producer)
    );
    for (i, (n, t)) in outputs.iter().enumerate() {
        text.push_str(&format!(";; output {i}: {n:?} {t}\n"));
    }
    text.push_str(&body);

    side.write_file(&weights_path).map_err(|e| CliError::in_file(&weights_path, e))?;
    std::fs::write(&opts.out, &text)
        .map_err(|e| CliError::in_file(&opts.out, Error::Io(format!("{}: {e}", opts.out.display()))))?;
    let wbytes = std::fs::metadata(&weights_path).map(|m| m.len()).unwrap_or(0);
    Ok(ImportReport {
        file: opts.file.clone(),
        out: opts.out.clone(),
        text_bytes: text.len(),
        weights: ConstantsFileReport { path: weights_path, bytes: wbytes, constants: side.blob_count() },
        inputs,
        outputs,
        opset: model.opset,
        producer: model.producer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_go_next_to_the_text() {
        let (n, p) = weights_location(Path::new("d/m.tjir"), None).unwrap();
        assert_eq!((n.as_str(), p), ("m.safetensors", PathBuf::from("d/m.safetensors")));
        let (n, p) = weights_location(Path::new("d/m.tjir"), Some(Path::new("w.safetensors"))).unwrap();
        assert_eq!((n.as_str(), p), ("w.safetensors", PathBuf::from("d/w.safetensors")));
        let (n, _) = weights_location(Path::new("d/m.tjir"), Some(Path::new("d/w.safetensors"))).unwrap();
        assert_eq!(n, "w.safetensors");
        assert!(weights_location(Path::new("d/m.tjir"), Some(Path::new("e/w.safetensors"))).is_err());
        assert!(weights_location(Path::new("m.tjir"), Some(Path::new("m.tjir"))).is_err());
        let (n, p) = weights_location(Path::new("m.tjir"), None).unwrap();
        assert_eq!((n.as_str(), p), ("m.safetensors", PathBuf::from("./m.safetensors")));
    }
}
