//! `tensorjit info FILE`: what an ONNX model holds — inputs, outputs, opset, producer,
//! initializers, operator counts and the operators the importer does not support — without
//! importing it; or, for a weights file (`.safetensors`, `.npz`, `.npy`), its tensors.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::model::{ModelFormat, model_format, read_onnx_file};
use crate::cli::{CliError, display_name};
use crate::onnx::ModelInfo;
use crate::weights::Weights;

/// What [`info`] found.
#[derive(Debug)]
#[non_exhaustive]
pub enum InfoReport {
    /// An ONNX model.
    Onnx {
        /// The file.
        file: PathBuf,
        /// What the model holds.
        info: ModelInfo,
    },
    /// A weights file.
    Weights {
        /// The file.
        file: PathBuf,
        /// `safetensors`, `npz` or `npy`.
        kind: &'static str,
        /// Its tensors.
        weights: Weights,
    },
}

fn weights_kind(path: &Path) -> Option<&'static str> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => Some("safetensors"),
        Some("npz") => Some("npz"),
        Some("npy") => Some("npy"),
        _ => None,
    }
}

/// Describes the ONNX model or weights file `path` (the kind by extension, or for a model by
/// content: see [`model_format`]).
pub fn info(path: &Path) -> Result<InfoReport, CliError> {
    if let Some(kind) = weights_kind(path) {
        let weights = crate::weights::load(path).map_err(|e| CliError::in_file(path, e))?;
        return Ok(InfoReport::Weights { file: path.to_path_buf(), kind, weights });
    }
    if model_format(path) != ModelFormat::Onnx {
        return Err(CliError::in_file(
            path,
            crate::error::Error::invalid(
                "info",
                "not an ONNX model or a weights file (.onnx, .safetensors, .npz, .npy); for IR text use `tensorjit check`",
            ),
        ));
    }
    let bytes = read_onnx_file(path)?;
    let info = crate::onnx::info_bytes(&bytes).map_err(|e| CliError::in_file(path, e))?;
    Ok(InfoReport::Onnx { file: path.to_path_buf(), info })
}

fn list(v: &[(String, String)]) -> Vec<serde_json::Value> {
    v.iter().map(|(n, t)| serde_json::json!({ "name": n, "type": t })).collect()
}

impl InfoReport {
    /// As one JSON object. ONNX: `{"command": "info", "file", "ok": true, "kind": "onnx",
    /// "ir_version", "opset", "producer", "inputs": [{"name", "type"}], "outputs",
    /// "initializers": {"count", "bytes"}, "nodes", "operators": {"OP": count}, "unsupported":
    /// ["OP"]}`. Weights: `{"command": "info", "file", "ok": true, "kind": "safetensors" |
    /// "npz" | "npy", "mapped", "bytes", "tensors": [{"name", "type", "bytes"}]}`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            InfoReport::Onnx { file, info } => serde_json::json!({
                "command": "info",
                "file": display_name(file),
                "ok": true,
                "kind": "onnx",
                "ir_version": info.ir_version,
                "opset": info.opset,
                "producer": info.producer,
                "inputs": list(&info.inputs),
                "outputs": list(&info.outputs),
                "initializers": { "count": info.initializers.0, "bytes": info.initializers.1 },
                "nodes": info.op_counts.values().sum::<usize>(),
                "operators": info.op_counts,
                "unsupported": info.unsupported,
            }),
            InfoReport::Weights { file, kind, weights } => {
                let tensors: Vec<serde_json::Value> = weights
                    .tensors()
                    .iter()
                    .map(|t| serde_json::json!({ "name": t.name, "type": type_text(t), "bytes": t.bytes }))
                    .collect();
                serde_json::json!({
                    "command": "info",
                    "file": display_name(file),
                    "ok": true,
                    "kind": kind,
                    "mapped": weights.is_mapped(),
                    "bytes": weights.total_bytes(),
                    "tensors": tensors,
                })
            }
        }
    }

    /// The human description.
    pub fn write_human(&self, w: &mut impl Write) -> std::io::Result<()> {
        match self {
            InfoReport::Onnx { file, info } => {
                writeln!(w, "model: {}", display_name(file))?;
                writeln!(w, "ir version: {}, opset: {}", info.ir_version, info.opset)?;
                if !info.producer.is_empty() {
                    writeln!(w, "producer: {}", info.producer)?;
                }
                writeln!(w, "inputs:")?;
                for (n, t) in &info.inputs {
                    writeln!(w, "  {n:?}: {t}")?;
                }
                writeln!(w, "outputs:")?;
                for (n, t) in &info.outputs {
                    writeln!(w, "  {n:?}: {t}")?;
                }
                writeln!(w, "initializers: {} ({})", info.initializers.0, bytes_text(info.initializers.1))?;
                let nodes: usize = info.op_counts.values().sum();
                writeln!(w, "operators: {nodes} nodes, {} types", info.op_counts.len())?;
                for (op, n) in &info.op_counts {
                    let mark = if info.unsupported.contains(op) { "  (unsupported)" } else { "" };
                    writeln!(w, "  {op}: {n}{mark}")?;
                }
                if info.unsupported.is_empty() {
                    writeln!(w, "unsupported operators: none")
                } else {
                    writeln!(w, "unsupported operators: {}", info.unsupported.join(", "))
                }
            }
            InfoReport::Weights { file, kind, weights } => {
                let mapped = if weights.is_mapped() { ", memory-mapped" } else { "" };
                writeln!(
                    w,
                    "weights: {} ({kind}, {} tensors, {}{mapped})",
                    display_name(file),
                    weights.len(),
                    bytes_text(weights.total_bytes())
                )?;
                for t in weights.tensors() {
                    writeln!(w, "  {:?}: {} ({} bytes)", t.name, type_text(t), t.bytes)?;
                }
                Ok(())
            }
        }
    }
}

fn type_text(t: &crate::weights::WeightInfo) -> String {
    match &t.shape {
        Some(s) => crate::ir::text::format_shape(s),
        None => {
            let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
            format!("{}[{}]", t.file_dtype, dims.join(","))
        }
    }
}

fn bytes_text(b: u64) -> String {
    if b >= 1 << 20 { format!("{b} bytes, {:.1} MiB", b as f64 / (1u64 << 20) as f64) } else { format!("{b} bytes") }
}
