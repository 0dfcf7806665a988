//! The model files the commands take: IR text (`.tjir`) or ONNX (`.onnx`), told apart by the
//! extension or, failing that, by the first byte; and ONNX import with the model's symbolic
//! dimensions bound from the given inputs' shapes and from `--dim NAME=SIZE`.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use prost::Message;

use crate::cli::{CliError, constants_dir_of};
use crate::error::Error;
use crate::ir::dtype::DType;
use crate::onnx::proto::{ModelProto, tensor_shape_proto::dimension::Value as DimValue, type_proto};
use crate::onnx::{ImportOptions, OnnxModel, load_bytes_with};

/// The kind of a model file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelFormat {
    /// IR text.
    Ir,
    /// An ONNX `ModelProto`.
    Onnx,
}

/// The format of `path`: ONNX for a `.onnx` extension, IR text for `.tjir` and for standard
/// input (`-`); otherwise ONNX when the path is a regular file whose first byte is `0x08` (the
/// protobuf tag of `ModelProto.ir_version`, which every exporter writes first), IR text else.
pub fn model_format(path: &Path) -> ModelFormat {
    if path == Path::new("-") {
        return ModelFormat::Ir;
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("onnx") => return ModelFormat::Onnx,
        Some("tjir") => return ModelFormat::Ir,
        _ => {}
    }
    let first = File::open(path).ok().filter(|f| f.metadata().is_ok_and(|m| m.is_file())).and_then(|f| {
        let mut b = [0u8; 1];
        f.take(1).read_exact(&mut b).ok().map(|_| b[0])
    });
    if first == Some(0x08) { ModelFormat::Onnx } else { ModelFormat::Ir }
}

/// Opens an ONNX file and checks it is a regular file of at most
/// [`crate::limits::MAX_INPUT_FILE_BYTES`] bytes; returns it with its length.
pub fn check_onnx_file(path: &Path) -> Result<(File, u64), CliError> {
    let in_file = |e: Error| CliError::in_file(path, e);
    let f = File::open(path).map_err(|e| in_file(Error::Io(format!("{}: {e}", path.display()))))?;
    let meta = f.metadata().map_err(|e| in_file(Error::Io(format!("{}: {e}", path.display()))))?;
    if !meta.is_file() {
        return Err(in_file(Error::Io(format!("{}: not a regular file", path.display()))));
    }
    let max = crate::limits::MAX_INPUT_FILE_BYTES;
    if meta.len() > max {
        return Err(in_file(Error::limit("onnx", format!("{} bytes; model files may have at most {max}", meta.len()))));
    }
    Ok((f, meta.len()))
}

/// Reads an ONNX file: a regular file of at most [`crate::limits::MAX_INPUT_FILE_BYTES`] bytes.
pub fn read_onnx_file(path: &Path) -> Result<Vec<u8>, CliError> {
    let in_file = |e: Error| CliError::in_file(path, e);
    let (f, file_len) = check_onnx_file(path)?;
    let max = crate::limits::MAX_INPUT_FILE_BYTES;
    let len = usize::try_from(file_len)
        .map_err(|_| in_file(Error::limit("onnx", format!("{file_len} bytes do not fit in memory"))))?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| in_file(Error::out_of_memory("onnx", len)))?;
    f.take(max).read_to_end(&mut bytes).map_err(|e| in_file(Error::Io(format!("{}: {e}", path.display()))))?;
    Ok(bytes)
}

/// Decodes an ONNX model (errors name the file).
pub fn decode_onnx(bytes: &[u8], path: &Path) -> Result<ModelProto, CliError> {
    ModelProto::decode(bytes)
        .map_err(|e| CliError::in_file(path, Error::invalid("onnx", format!("not an ONNX model: {e}"))))
}

/// One axis of a graph input as the model declares it.
#[derive(Clone, Debug, PartialEq)]
pub enum DeclaredDim {
    /// A fixed size.
    Fixed(i64),
    /// A symbolic dimension (`dim_param`).
    Named(String),
    /// Unknown (neither).
    Unknown,
}

/// A graph input (initializers excluded) as the model declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredInput {
    /// Its name.
    pub name: String,
    /// Its element type, when tensorjit has it.
    pub dtype: Option<DType>,
    /// Its axes; `None` when the model gives no shape.
    pub dims: Option<Vec<DeclaredDim>>,
}

/// The graph inputs of a decoded model, initializers excluded, in order.
pub fn declared_inputs(model: &ModelProto) -> Vec<DeclaredInput> {
    let Some(g) = &model.graph else { return Vec::new() };
    let init: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
    g.input
        .iter()
        .filter(|vi| !init.contains(vi.name()))
        .map(|vi| {
            let tensor = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(type_proto::Value::TensorType(t)) => Some(t),
                _ => None,
            };
            let dtype = tensor.and_then(|t| crate::onnx::tensor::dtype_from_onnx(t.elem_type()));
            let dims = tensor.and_then(|t| t.shape.as_ref()).map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(DimValue::DimValue(v)) => DeclaredDim::Fixed(*v),
                        Some(DimValue::DimParam(p)) if !p.is_empty() => DeclaredDim::Named(p.clone()),
                        _ => DeclaredDim::Unknown,
                    })
                    .collect()
            });
            DeclaredInput { name: vi.name().to_string(), dtype, dims }
        })
        .collect()
}

/// The import options that bind the model's symbolic dimensions: each `--dim NAME=SIZE`, then
/// the dims of each given input (`given`: input name → the `.npy` file's dims), checked
/// against what the model declares (rank, fixed sizes, and one size per symbolic name across
/// inputs and flags). Inputs of packed dtypes (whose `.npy` holds bytes) bind nothing. Names
/// in `given` that are not graph inputs are left for the caller to report.
pub fn bind_dims(
    inputs: &[DeclaredInput],
    given: &BTreeMap<String, Vec<usize>>,
    flags: &[(String, i64)],
) -> Result<ImportOptions, CliError> {
    let mut opts = ImportOptions::default();
    // Where each symbolic size came from, for messages.
    let mut source: HashMap<String, String> = HashMap::new();
    for (name, size) in flags {
        if let Some(&old) = opts.dims.get(name)
            && old != *size
        {
            return Err(CliError::new(format!("--dim {name}: given twice ({old} and {size})")));
        }
        opts.dims.insert(name.clone(), *size);
        source.insert(name.clone(), format!("--dim {name}={size}"));
    }
    for input in inputs {
        let Some(dims) = given.get(&input.name) else { continue };
        if input.dtype.is_some_and(|d| d.is_packed()) {
            continue;
        }
        let what = format!("--input {}", input.name);
        if let Some(decl) = &input.dims {
            let text = declared_text(decl);
            if decl.len() != dims.len() {
                return Err(CliError::new(format!(
                    "{what}: the file has shape {dims:?} but the model declares {text} (rank {})",
                    decl.len()
                )));
            }
            for (axis, (d, &got)) in decl.iter().zip(dims).enumerate() {
                let got = got as i64;
                match d {
                    DeclaredDim::Fixed(v) if *v != got => {
                        return Err(CliError::new(format!(
                            "{what}: axis {axis} has size {got} but the model declares {text}"
                        )));
                    }
                    DeclaredDim::Named(p) => match opts.dims.get(p) {
                        Some(&v) if v != got => {
                            return Err(CliError::new(format!(
                                "{what}: axis {axis} ({p}) has size {got}, but {p} is {v} from {}",
                                source.get(p).map_or("another input", String::as_str)
                            )));
                        }
                        Some(_) => {}
                        None => {
                            opts.dims.insert(p.clone(), got);
                            source.insert(p.clone(), what.clone());
                        }
                    },
                    _ => {}
                }
            }
        }
        opts.input_dims.insert(input.name.clone(), dims.iter().map(|&d| d as i64).collect());
    }
    Ok(opts)
}

fn declared_text(dims: &[DeclaredDim]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| match d {
            DeclaredDim::Fixed(v) => v.to_string(),
            DeclaredDim::Named(p) => p.clone(),
            DeclaredDim::Unknown => "?".to_string(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Imports the ONNX model in `bytes` (read from `path`, whose folder holds its external data).
/// Errors name the file.
pub fn import_bytes(bytes: &[u8], path: &Path, opts: &ImportOptions) -> Result<OnnxModel, CliError> {
    let dir: PathBuf = constants_dir_of(path);
    load_bytes_with(bytes, Some(&dir), opts).map_err(|e| CliError::in_file(path, e))
}

/// Reads and imports the ONNX file `path` with `opts`.
pub fn import_file(path: &Path, opts: &ImportOptions) -> Result<OnnxModel, CliError> {
    let bytes = read_onnx_file(path)?;
    import_bytes(&bytes, path, opts)
}

/// Parses `--dim NAME=SIZE` (a non-negative size).
pub fn parse_dim(s: &str) -> Result<(String, i64), String> {
    match s.split_once('=') {
        Some((name, size)) if !name.is_empty() => match size.parse::<i64>() {
            Ok(v) if v >= 0 => Ok((name.to_string(), v)),
            _ => Err(format!("expected NAME=SIZE with a non-negative integer SIZE, got {s:?}")),
        },
        _ => Err(format!("expected NAME=SIZE, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_flags_parse() {
        assert_eq!(parse_dim("batch=8"), Ok(("batch".to_string(), 8)));
        assert!(parse_dim("batch").is_err());
        assert!(parse_dim("=3").is_err());
        assert!(parse_dim("b=-1").is_err());
        assert!(parse_dim("b=x").is_err());
    }

    #[test]
    fn symbolic_dims_bind_once() {
        let inputs = vec![
            DeclaredInput {
                name: "a".into(),
                dtype: Some(DType::Float32),
                dims: Some(vec![DeclaredDim::Named("n".into()), DeclaredDim::Fixed(3)]),
            },
            DeclaredInput {
                name: "b".into(),
                dtype: Some(DType::Float32),
                dims: Some(vec![DeclaredDim::Named("n".into())]),
            },
        ];
        let mut given = BTreeMap::new();
        given.insert("a".to_string(), vec![2, 3]);
        given.insert("b".to_string(), vec![2]);
        let o = bind_dims(&inputs, &given, &[]).unwrap();
        assert_eq!(o.dims.get("n"), Some(&2));
        given.insert("b".to_string(), vec![5]);
        let e = bind_dims(&inputs, &given, &[]).unwrap_err().to_string();
        assert!(e.contains("--input b") && e.contains("from --input a"), "{e}");
        given.insert("a".to_string(), vec![2, 4]);
        let e = bind_dims(&inputs, &given, &[]).unwrap_err().to_string();
        assert!(e.contains("axis 1 has size 4") && e.contains("[n, 3]"), "{e}");
        let e = bind_dims(&inputs, &BTreeMap::from([("b".to_string(), vec![2])]), &[("n".to_string(), 7)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--dim n=7"), "{e}");
    }
}
