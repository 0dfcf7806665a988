//! ONNX import: reads a `ModelProto` (a file, its external data, or bytes) into an IR [`Module`]
//! whose `main` takes the graph's inputs and returns its outputs, in the graph's order.
//!
//! ```no_run
//! let model = tensorjit::onnx::load("model.onnx")?;
//! let exe = tensorjit::new_with_config("jit")?.compile(model.module)?;
//! # Ok::<(), tensorjit::Error>(())
//! ```
//!
//! Each ONNX operator maps onto standard IR ops (`ops`); the fusion passes then find the fused
//! kernels. Nodes whose operands are all constants (the `Shape → Gather → Concat → Reshape`
//! subgraphs exporters emit) are evaluated at import, so that shapes are static whenever the
//! inputs' are. Symbolic dimensions (`dim_param`) become named dynamic axes unless bound by
//! [`ImportOptions::dims`]. Initializer payloads are moved into the module's constants, not
//! copied. Anything not supported (operator, opset, attribute, element type) is an error that
//! names the node and its op type. docs/onnx.md lists the operators and their limits.

pub(crate) mod graph;
pub(crate) mod ops;
pub(crate) mod poly;
#[allow(missing_docs)]
pub mod proto;
mod stream;
pub(crate) mod symbolic;
pub mod tensor;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use prost::Message;

use crate::api::Buffer;
use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::shape::Shape;

pub use tensor::{read_tensor_proto, write_tensor_proto};

use proto::{ModelProto, TypeProto, ValueInfoProto, type_proto};

/// The lowest and highest default-domain opset versions accepted.
pub const OPSET_RANGE: (i64, i64) = (7, 28);

/// Options for [`load_with`] and [`load_bytes_with`].
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Sizes for symbolic dimensions (`dim_param` names), e.g. `{"batch": 8, "sequence": 128}`.
    pub dims: HashMap<String, i64>,
    /// Full shapes for graph inputs by name, overriding the model's (dims only; the dtype stays).
    pub input_dims: HashMap<String, Vec<i64>>,
    /// Values for graph inputs by name: each becomes a constant holding that value, exactly like
    /// an initializer (folded at import, usable where an operator needs a constant: axes,
    /// `Resize` sizes and scales, pads, starts/ends, split, `k`, depth…), and is no longer an
    /// input of the module ([`OnnxModel::inputs`] lists the others). The buffer's dtype must be
    /// the input's element type and its dims must match the input's fixed dims (a symbolic or
    /// unknown dim takes any size); a name that is not a graph input is an error. An
    /// initializer that is also listed as a graph input (a default value) is replaced by the
    /// given value. An import error about an operand that must be constant names the graph
    /// inputs to freeze; [`inputs_to_freeze`] reads them back.
    pub constant_inputs: HashMap<String, Buffer>,
}

/// A graph input or output: its ONNX name and IR shape.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The ONNX name.
    pub name: String,
    /// Its shape; symbolic dimensions are named dynamic axes.
    pub shape: Shape,
}

/// An imported model.
#[derive(Clone, Debug)]
pub struct OnnxModel {
    /// The IR module: `main(inputs...) -> outputs...` in the graph's order.
    pub module: Module,
    /// The graph's inputs (initializers excluded), in order.
    pub inputs: Vec<TensorInfo>,
    /// The graph's outputs, in order.
    pub outputs: Vec<TensorInfo>,
    /// The default-domain opset version.
    pub opset: i64,
    /// `producer_name producer_version`.
    pub producer: String,
}

/// What [`info`] reports about a model without importing it.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// ONNX IR version.
    pub ir_version: i64,
    /// Default-domain opset version (0 when absent).
    pub opset: i64,
    /// `producer_name producer_version`.
    pub producer: String,
    /// Graph inputs (initializers excluded): name, element type and dims as text (`batch`, `3`).
    pub inputs: Vec<(String, String)>,
    /// Graph outputs, as for inputs.
    pub outputs: Vec<(String, String)>,
    /// Number of initializers and their total payload bytes.
    pub initializers: (usize, u64),
    /// Operator counts in the main graph and its subgraphs (`domain::op` for other domains).
    pub op_counts: BTreeMap<String, usize>,
    /// Operators among `op_counts` that the importer does not support.
    pub unsupported: Vec<String>,
    /// The op type of the main graph's last node.
    pub last_op: Option<String>,
}

/// Names of the default-domain operators the importer maps.
pub fn supported_ops() -> Vec<&'static str> {
    ops::supported()
}

/// Imports the model at `path` (external data is read relative to its folder).
pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel> {
    load_with(path, &ImportOptions::default())
}

/// [`load`] with options.
pub fn load_with(path: impl AsRef<Path>, opts: &ImportOptions) -> Result<OnnxModel> {
    let path = path.as_ref();
    let model = decode_file(path)?;
    let base = path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
    import(model, base, opts).map_err(|e| in_file(e, path))
}

/// Decodes the ONNX file `path` without importing it, one initializer at a time (the file's
/// bytes and the decoded model are never all in memory together); see [`import_proto`].
pub fn decode_path(path: impl AsRef<Path>) -> Result<ModelProto> {
    decode_file(path.as_ref())
}

/// Imports a decoded model ([`decode_path`]); external data is read from `base_dir`.
pub fn import_proto(model: ModelProto, base_dir: Option<&Path>, opts: &ImportOptions) -> Result<OnnxModel> {
    import(model, base_dir, opts)
}

/// Imports a serialized model. External data is refused (there is no folder to read it from).
pub fn load_bytes(bytes: &[u8]) -> Result<OnnxModel> {
    load_bytes_with(bytes, None, &ImportOptions::default())
}

/// [`load_bytes`] with options and the folder external data is read from.
pub fn load_bytes_with(bytes: &[u8], base_dir: Option<&Path>, opts: &ImportOptions) -> Result<OnnxModel> {
    let model = ModelProto::decode(bytes).map_err(|e| Error::invalid("onnx", format!("not an ONNX model: {e}")))?;
    import(model, base_dir, opts)
}

/// [`info`] for a serialized model.
pub fn info_bytes(bytes: &[u8]) -> Result<ModelInfo> {
    let model = ModelProto::decode(bytes).map_err(|e| Error::invalid("onnx", format!("not an ONNX model: {e}")))?;
    Ok(model_info(&model))
}

/// Lists a model's inputs, outputs, opset and operator counts, and which operators are not
/// supported, without importing it.
pub fn info(path: impl AsRef<Path>) -> Result<ModelInfo> {
    let path = path.as_ref();
    let model = decode_file(path)?;
    Ok(model_info(&model))
}

/// Decodes the file without holding all of it in memory beside the decoded model
/// ([`stream::decode_model`]).
fn decode_file(path: &Path) -> Result<ModelProto> {
    let file = std::fs::File::open(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    stream::decode_model(&mut std::io::BufReader::with_capacity(1 << 20, file)).map_err(|e| match e {
        Error::Invalid { op, msg } => Error::Invalid { op, msg: format!("{}: {msg}", path.display()) },
        Error::Io(msg) => Error::Io(format!("{}: {msg}", path.display())),
        other => other,
    })
}

fn in_file(e: Error, path: &Path) -> Error {
    let p = path.display();
    match e {
        Error::Invalid { op, msg } => Error::Invalid { op: format!("{p}: {op}"), msg },
        Error::NotImplemented { op, msg } => Error::NotImplemented { op: format!("{p}: {op}"), msg },
        Error::Limit { what, msg } => Error::Limit { what: format!("{p}: {what}"), msg },
        other => other,
    }
}

/// The default-domain opset of a model.
fn default_opset(model: &ModelProto) -> Option<i64> {
    model.opset_import.iter().find(|o| o.domain().is_empty() || o.domain() == "ai.onnx").map(|o| o.version())
}

fn producer(model: &ModelProto) -> String {
    format!("{} {}", model.producer_name(), model.producer_version()).trim().to_string()
}

fn import(mut model: ModelProto, base_dir: Option<&Path>, opts: &ImportOptions) -> Result<OnnxModel> {
    let opset = default_opset(&model).unwrap_or(1);
    if opset < OPSET_RANGE.0 || opset > OPSET_RANGE.1 {
        return Err(Error::not_implemented(
            "onnx",
            format!("opset {opset} (supported: {} to {})", OPSET_RANGE.0, OPSET_RANGE.1),
        ));
    }
    let producer = producer(&model);
    let mut g = model.graph.take().ok_or_else(|| Error::invalid("onnx", "the model has no graph"))?;
    let name = if g.name().is_empty() { "onnx".to_string() } else { g.name().to_string() };
    let mut ctx = graph::Ctx::new(&name, opset, base_dir, ops::handler).with_symbolic(symbolic::import_node);

    // Every frozen input must be a graph input.
    if let Some(name) = opts.constant_inputs.keys().find(|k| !g.input.iter().any(|vi| vi.name() == k.as_str())) {
        let names: Vec<&str> = g.input.iter().map(|vi| vi.name()).collect();
        return Err(Error::invalid(
            "onnx",
            format!("ImportOptions::constant_inputs names {name:?}, which is not a graph input (inputs: {names:?})"),
        ));
    }
    // Initializers first (payloads moved out of the proto; those overridden by a frozen input
    // are skipped), then the frozen inputs as constants and the others as parameters.
    let mut initializers = std::mem::take(&mut g.initializer);
    let init_names: std::collections::HashSet<String> = initializers.iter().map(|t| t.name().to_string()).collect();
    for t in initializers.iter_mut().filter(|t| !opts.constant_inputs.contains_key(t.name())) {
        let v = ctx.initializer(t).map_err(|e| in_tensor(e, t.name()))?;
        ctx.bind(t.name(), v);
    }
    drop(initializers);
    let mut inputs = Vec::new();
    for vi in &g.input {
        if let Some(value) = opts.constant_inputs.get(vi.name()) {
            let (shape, bytes) = frozen_input(vi, value)?;
            let v = ctx.constant(shape, bytes).map_err(|e| in_tensor(e, vi.name()))?;
            ctx.bind(vi.name(), v);
            continue;
        }
        if init_names.contains(vi.name()) {
            continue;
        }
        let shape = input_shape(vi, opts)?;
        let v = ctx.m.add_param(ctx.func, vi.name(), shape.clone());
        ctx.note_axes(v);
        ctx.bind(vi.name(), v);
        inputs.push(TensorInfo { name: vi.name().to_string(), shape });
    }
    ctx.take_constant_values(&mut g);
    ctx.import_nodes(&g)?;
    let mut outs = Vec::new();
    let mut outputs = Vec::new();
    for o in &g.output {
        let v = ctx.lookup(o.name()).ok_or_else(|| {
            Error::invalid("onnx", format!("graph output {:?} is not produced by any node", o.name()))
        })?;
        outputs.push(TensorInfo { name: o.name().to_string(), shape: ctx.shape(v).clone() });
        outs.push(v);
    }
    let func = ctx.func;
    ctx.m.func_mut(func).outputs = Some(outs);
    let mut module = ctx.m;
    crate::passes::dce::run(&mut module)?;
    crate::ir::verify::verify(&module)?;
    Ok(OnnxModel { module, inputs, outputs, opset, producer })
}

fn in_tensor(e: Error, name: &str) -> Error {
    match e {
        Error::Invalid { op, msg } => Error::Invalid { op: format!("{op}: initializer {name:?}"), msg },
        other => other,
    }
}

/// The constant for graph input `vi` frozen to `value` ([`ImportOptions::constant_inputs`]):
/// its shape and bytes, after checking the dtype and the fixed dims against the declaration.
fn frozen_input(vi: &ValueInfoProto, value: &Buffer) -> Result<(Shape, Vec<u8>)> {
    let what = || format!("input {:?} (ImportOptions::constant_inputs)", vi.name());
    let tensor = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t,
        _ => return Err(Error::not_implemented("onnx", format!("{}: only tensor inputs are supported", what()))),
    };
    let dtype = value.dtype();
    if tensor::dtype_from_onnx(tensor.elem_type()) != Some(dtype) {
        return Err(Error::invalid(
            "onnx",
            format!(
                "{}: the value is {dtype}, the input is declared {}",
                what(),
                tensor::onnx_type_name(tensor.elem_type())
            ),
        ));
    }
    let dims: Vec<i64> = value.dims().iter().map(|&d| d as i64).collect();
    if let Some(shape) = &tensor.shape {
        use proto::tensor_shape_proto::dimension::Value as D;
        let fits = shape.dim.len() == dims.len()
            && shape.dim.iter().zip(&dims).all(|(d, &n)| !matches!(d.value, Some(D::DimValue(v)) if v != n));
        if !fits {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "{}: the value has dims {dims:?}, the input is declared {}",
                    what(),
                    type_text(vi.r#type.as_ref())
                ),
            ));
        }
    }
    Ok((Shape::new(dtype, &dims), value.to_bytes()?))
}

/// The graph inputs that an import error asks to freeze: the names quoted after "graph input"
/// / "graph inputs" in the message of an operand that must be a constant known at import but
/// is (computed from) a graph input. Empty for any other error.
///
/// ```no_run
/// use tensorjit::onnx::{ImportOptions, inputs_to_freeze, load_with};
/// let opts = ImportOptions::default();
/// if let Err(e) = load_with("model.onnx", &opts) {
///     // e.g. ["axes"]: give their values in ImportOptions::constant_inputs and import again.
///     println!("{:?}", inputs_to_freeze(&e));
/// }
/// ```
pub fn inputs_to_freeze(e: &Error) -> Vec<String> {
    let msg = match e {
        Error::NotImplemented { msg, .. } => msg,
        _ => return vec![],
    };
    let marker = ops::common::FROM_GRAPH_INPUT;
    let Some(at) = msg.find(&format!(" is {marker} ")).or_else(|| msg.find(&format!(" from {marker}"))) else {
        return vec![];
    };
    let rest = &msg[at..];
    let rest = &rest[rest.find(marker).map_or(0, |i| i + marker.len())..];
    let mut chars = rest.strip_prefix('s').unwrap_or(rest).strip_prefix(' ').unwrap_or("").chars().peekable();
    let mut names = vec![];
    // A comma-separated list of Rust-quoted strings.
    while chars.next() == Some('"') {
        let mut name = String::new();
        loop {
            match chars.next() {
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => name.push('\n'),
                    Some('t') => name.push('\t'),
                    Some('r') => name.push('\r'),
                    Some('0') => name.push('\0'),
                    Some(c @ ('"' | '\\' | '\'')) => name.push(c),
                    // \u{…} and other escapes: not a name this parser can restore.
                    _ => return vec![],
                },
                Some(c) => name.push(c),
                None => return vec![],
            }
        }
        names.push(name);
        if chars.peek() != Some(&',') {
            break;
        }
        chars.next();
        if chars.next() != Some(' ') {
            break;
        }
    }
    names
}

/// The IR shape of a graph input: ONNX dims, with `dim_param` names bound by the options or
/// kept as named dynamic axes (unnamed unknown dims get `<input>_<axis>` names).
fn input_shape(vi: &ValueInfoProto, opts: &ImportOptions) -> Result<Shape> {
    let what = || format!("input {:?}", vi.name());
    let tensor = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t,
        _ => return Err(Error::not_implemented("onnx", format!("{}: only tensor inputs are supported", what()))),
    };
    let dtype = tensor::dtype_from_onnx(tensor.elem_type()).ok_or_else(|| {
        Error::not_implemented(
            "onnx",
            format!("{}: element type {} is not supported", what(), tensor::onnx_type_name(tensor.elem_type())),
        )
    })?;
    if let Some(dims) = opts.input_dims.get(vi.name()) {
        let s = Shape::new(dtype, dims);
        s.validate_for("onnx", &what())?;
        return Ok(s);
    }
    let Some(shape) = tensor.shape.as_ref() else {
        return Err(Error::invalid("onnx", format!("{}: no shape (give one with ImportOptions::input_dims)", what())));
    };
    let mut dims = Vec::new();
    let mut names = Vec::new();
    for (axis, d) in shape.dim.iter().enumerate() {
        use proto::tensor_shape_proto::dimension::Value as D;
        match &d.value {
            Some(D::DimValue(v)) if *v >= 0 => {
                dims.push(*v);
                names.push(String::new());
            }
            Some(D::DimParam(p)) if !p.is_empty() => match opts.dims.get(p) {
                Some(&v) => {
                    dims.push(v);
                    names.push(String::new());
                }
                None => {
                    dims.push(crate::ir::shape::DYNAMIC_DIM);
                    names.push(p.clone());
                }
            },
            Some(D::DimValue(v)) => {
                return Err(Error::invalid("onnx", format!("{}: negative dimension {v} on axis {axis}", what())));
            }
            _ => {
                dims.push(crate::ir::shape::DYNAMIC_DIM);
                names.push(format!("{}_{axis}", vi.name()));
            }
        }
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    Shape::with_names(dtype, &dims, &refs).map_err(|e| Error::invalid("onnx", format!("{}: {e}", what())))
}

fn type_text(t: Option<&TypeProto>) -> String {
    match t.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => {
            let ty = tensor::dtype_from_onnx(t.elem_type())
                .map(|d| d.to_string())
                .unwrap_or_else(|| tensor::onnx_type_name(t.elem_type()));
            let dims: Vec<String> = t
                .shape
                .as_ref()
                .map(|s| {
                    s.dim
                        .iter()
                        .map(|d| {
                            use proto::tensor_shape_proto::dimension::Value as D;
                            match &d.value {
                                Some(D::DimValue(v)) => v.to_string(),
                                Some(D::DimParam(p)) => p.clone(),
                                None => "?".to_string(),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!("{ty}[{}]", dims.join(", "))
        }
        Some(_) => "non-tensor".to_string(),
        None => "untyped".to_string(),
    }
}

fn model_info(model: &ModelProto) -> ModelInfo {
    let mut op_counts = BTreeMap::new();
    let (mut inputs, mut outputs, mut initializers) = (Vec::new(), Vec::new(), (0usize, 0u64));
    if let Some(g) = &model.graph {
        let init: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
        for vi in g.input.iter().filter(|vi| !init.contains(vi.name())) {
            inputs.push((vi.name().to_string(), type_text(vi.r#type.as_ref())));
        }
        for vi in &g.output {
            outputs.push((vi.name().to_string(), type_text(vi.r#type.as_ref())));
        }
        initializers.0 = g.initializer.len();
        initializers.1 = g
            .initializer
            .iter()
            .map(|t| {
                if let Some(raw) = &t.raw_data {
                    raw.len() as u64
                } else {
                    let n: u64 = t.dims.iter().map(|&d| d.max(0) as u64).product();
                    n * tensor::dtype_from_onnx(t.data_type()).map_or(0, |d| d.size() as u64)
                }
            })
            .sum();
        count_ops(g, &mut op_counts);
    }
    let supported = ops::supported();
    let unsupported = op_counts.keys().filter(|k| !supported.contains(&k.as_str())).cloned().collect();
    ModelInfo {
        ir_version: model.ir_version(),
        opset: default_opset(model).unwrap_or(0),
        producer: producer(model),
        inputs,
        outputs,
        initializers,
        op_counts,
        unsupported,
        last_op: model.graph.as_ref().and_then(|g| g.node.last()).map(|n| n.op_type().to_string()),
    }
}

fn count_ops(g: &proto::GraphProto, counts: &mut BTreeMap<String, usize>) {
    for n in &g.node {
        let key = if n.domain().is_empty() || n.domain() == "ai.onnx" {
            n.op_type().to_string()
        } else {
            format!("{}::{}", n.domain(), n.op_type())
        };
        *counts.entry(key).or_default() += 1;
        for a in &n.attribute {
            if let Some(sub) = &a.g {
                count_ops(sub, counts);
            }
            for sub in &a.graphs {
                count_ops(sub, counts);
            }
        }
    }
}
