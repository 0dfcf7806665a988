//! The import context: walks an ONNX graph in order, maps each node through its operator's
//! handler onto IR nodes, folds nodes whose operands are all constants (shape subgraphs) at
//! import, and tracks the ONNX names in scope (including the outer scopes of `If`/`Loop` bodies).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::api::Executable;
use crate::backends::interp::InterpExecutable;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, ValueDef, ValueId};
use crate::ir::op::{ConstData, Op};
use crate::ir::shape::Shape;

use super::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, attribute_proto::AttributeType};
use super::tensor::take_tensor_bytes;

/// Results of a node whose operands are all constants are computed at import when each holds
/// at most this many bytes (shape arithmetic, small masks), so that shape subgraphs fold into
/// the constants that `Reshape`, `Expand`, `Slice`... need.
pub const FOLD_MAX_BYTES: usize = 1 << 16;

/// Maps one node; returns one value per output the node names (in order).
pub(crate) type Handler = fn(&mut Ctx<'_>, &Node<'_>) -> Result<Vec<ValueId>>;

/// Finds the handler of an op type (the operator table of `onnx::ops`, passed in so that this
/// module does not depend on the handlers that depend on it).
pub(crate) type Lookup = fn(&str) -> Option<Handler>;

/// What imports a node before its handler when its value can be tracked symbolically
/// (`super::symbolic::import_node`, set by the importer; `Ok(None)`: not tracked).
pub(crate) type Symbolic = for<'c, 'p> fn(&mut Ctx<'c>, &Node<'p>) -> Result<Option<Vec<ValueId>>>;

fn no_symbolic(_: &mut Ctx<'_>, _: &Node<'_>) -> Result<Option<Vec<ValueId>>> {
    Ok(None)
}

/// Import state for one model.
pub struct Ctx<'a> {
    /// The module being built.
    pub m: Module,
    /// The function nodes are added to (the main graph or an `If`/`Loop` body).
    pub func: FuncId,
    /// The default-domain opset the model imports.
    pub opset: i64,
    /// ONNX names in scope, innermost last.
    scopes: Vec<HashMap<String, ValueId>>,
    /// Folder of the model file (for external data); `None` when loaded from bytes.
    pub(crate) base_dir: Option<&'a Path>,
    /// Fold constant nodes at import (on by default).
    pub(crate) fold: bool,
    /// The `value` tensors of the main graph's `Constant` nodes, moved out of the model before
    /// its nodes are imported ([`Ctx::take_constant_values`]), by the node's output name: the
    /// handler moves each payload into the module instead of copying it.
    constant_values: HashMap<String, TensorProto>,
    /// The operator table.
    lookup_op: Lookup,
    /// Imports the nodes whose values are tracked symbolically, before `lookup_op`.
    symbolic: Symbolic,
    /// Values of the main function computed from dynamic sizes, tracked element by element
    /// ([`super::symbolic`]).
    pub(crate) sym: HashMap<ValueId, super::poly::SymVal>,
    /// A value and axis of the main function holding each dynamic axis name seen, to read its
    /// size from at run time.
    pub(crate) axis_sources: HashMap<String, (ValueId, usize)>,
}

/// One ONNX node being mapped: its proto, resolved operands and attribute accessors.
pub struct Node<'p> {
    /// The node.
    pub proto: &'p NodeProto,
    /// Operand values; `None` for omitted optional inputs (empty names).
    pub inputs: Vec<Option<ValueId>>,
    /// The default-domain opset in effect.
    pub opset: i64,
    /// Attributes read by the handler (the rest are reported as unsupported).
    used: RefCell<HashSet<String>>,
}

impl<'p> Node<'p> {
    fn new(proto: &'p NodeProto, inputs: Vec<Option<ValueId>>, opset: i64) -> Node<'p> {
        Node { proto, inputs, opset, used: RefCell::new(HashSet::new()) }
    }

    /// `onnx node "name" (OpType)`: the prefix of every error about this node.
    pub fn label(&self) -> String {
        label(self.proto)
    }

    /// An error naming this node: invalid model.
    pub fn invalid(&self, msg: impl Into<String>) -> Error {
        Error::invalid(self.label(), msg)
    }

    /// An error naming this node: a form of the operator tensorjit does not implement.
    pub fn unsupported(&self, msg: impl Into<String>) -> Error {
        Error::not_implemented(self.label(), msg)
    }

    /// Number of operands given (trailing omitted ones included if named empty).
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Operand `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<ValueId> {
        self.inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| self.invalid(format!("input {i} is required ({} given)", self.inputs.len())))
    }

    /// Operand `i` when present.
    pub fn opt_input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    /// All present operands, in order.
    pub fn present_inputs(&self) -> Vec<ValueId> {
        self.inputs.iter().flatten().copied().collect()
    }

    /// Number of outputs the node names (trailing empty names are omitted outputs).
    pub fn num_outputs(&self) -> usize {
        self.proto.output.len()
    }

    /// Whether output `i` is wanted (named).
    pub fn output_wanted(&self, i: usize) -> bool {
        self.proto.output.get(i).is_some_and(|n| !n.is_empty())
    }

    /// Marks attributes as handled without reading them (their values do not change the result,
    /// e.g. `Dropout`'s `seed`).
    pub fn ignore_attrs(&self, names: &[&str]) {
        let mut used = self.used.borrow_mut();
        for n in names {
            used.insert((*n).to_string());
        }
    }

    /// The attribute `name`, marking it as read.
    pub fn attr(&self, name: &str) -> Option<&'p AttributeProto> {
        self.used.borrow_mut().insert(name.to_string());
        self.proto.attribute.iter().find(|a| a.name() == name)
    }

    fn typed(&self, name: &str, want: AttributeType) -> Result<Option<&'p AttributeProto>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if !a.ref_attr_name().is_empty() => {
                Err(self.unsupported(format!("attribute {name:?} refers to a function attribute")))
            }
            Some(a) if a.r#type() == want || a.r#type() == AttributeType::Undefined => Ok(Some(a)),
            Some(a) => Err(self.invalid(format!(
                "attribute {name:?} has type {}, expected {}",
                a.r#type().as_str_name(),
                want.as_str_name()
            ))),
        }
    }

    /// Integer attribute.
    pub fn attr_i(&self, name: &str) -> Result<Option<i64>> {
        Ok(self.typed(name, AttributeType::Int)?.map(|a| a.i()))
    }

    /// Integer attribute with a default.
    pub fn attr_i_or(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.attr_i(name)?.unwrap_or(default))
    }

    /// Float attribute.
    pub fn attr_f(&self, name: &str) -> Result<Option<f32>> {
        Ok(self.typed(name, AttributeType::Float)?.map(|a| a.f()))
    }

    /// Float attribute with a default.
    pub fn attr_f_or(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.attr_f(name)?.unwrap_or(default))
    }

    /// String attribute (UTF-8).
    pub fn attr_s(&self, name: &str) -> Result<Option<String>> {
        match self.typed(name, AttributeType::String)? {
            None => Ok(None),
            Some(a) => String::from_utf8(a.s().to_vec())
                .map(Some)
                .map_err(|_| self.invalid(format!("attribute {name:?} is not UTF-8"))),
        }
    }

    /// Integer-list attribute.
    pub fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        Ok(self.typed(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    /// Float-list attribute.
    pub fn attr_floats(&self, name: &str) -> Result<Option<Vec<f32>>> {
        Ok(self.typed(name, AttributeType::Floats)?.map(|a| a.floats.clone()))
    }

    /// Tensor attribute.
    pub fn attr_tensor(&self, name: &str) -> Result<Option<&'p TensorProto>> {
        Ok(self.typed(name, AttributeType::Tensor)?.and_then(|a| a.t.as_ref()))
    }

    /// Graph attribute (the bodies of `If` and `Loop`).
    pub fn attr_graph(&self, name: &str) -> Result<Option<&'p GraphProto>> {
        Ok(self.typed(name, AttributeType::Graph)?.and_then(|a| a.g.as_ref()))
    }

    /// The first attribute the handler did not read, if any.
    fn unread_attr(&self) -> Option<&'p str> {
        let used = self.used.borrow();
        self.proto.attribute.iter().map(|a| a.name()).find(|n| !used.contains(*n))
    }
}

/// `onnx node "name" (OpType)`.
pub fn label(n: &NodeProto) -> String {
    if n.name().is_empty() {
        let out = n.output.first().map(String::as_str).unwrap_or("");
        format!("onnx node producing {out:?} ({})", n.op_type())
    } else {
        format!("onnx node {:?} ({})", n.name(), n.op_type())
    }
}

/// Prefixes an error with the node it came from, keeping its kind.
pub fn in_node(e: Error, n: &NodeProto) -> Error {
    let at = label(n);
    if let Error::Invalid { op, .. } | Error::NotImplemented { op, .. } = &e
        && op.starts_with("onnx node")
    {
        return e;
    }
    match e {
        Error::Invalid { op, msg } => Error::Invalid { op: at, msg: format!("{op}: {msg}") },
        Error::NotImplemented { op, msg } => Error::NotImplemented { op: at, msg: format!("{op}: {msg}") },
        Error::Limit { what, msg } => Error::Limit { what: format!("{at}: {what}"), msg },
        Error::OutOfMemory { op, bytes } => Error::OutOfMemory { op: format!("{at}: {op}"), bytes },
        Error::Verify(v) => Error::Invalid { op: at, msg: v.join("; ") },
        Error::Execution(msg) => Error::Invalid { op: at, msg: format!("while folding constants: {msg}") },
        other => other,
    }
}

impl<'a> Ctx<'a> {
    /// A context building into a fresh module named `name`, whose `main` is the current function.
    pub(crate) fn new(name: &str, opset: i64, base_dir: Option<&'a Path>, lookup_op: Lookup) -> Ctx<'a> {
        let m = Module::new(name);
        let func = m.main;
        Ctx {
            m,
            func,
            opset,
            scopes: vec![HashMap::new()],
            base_dir,
            fold: true,
            lookup_op,
            symbolic: no_symbolic,
            constant_values: HashMap::new(),
            sym: HashMap::new(),
            axis_sources: HashMap::new(),
        }
    }

    /// This context with `f` importing the nodes whose values it tracks symbolically.
    pub(crate) fn with_symbolic(mut self, f: Symbolic) -> Ctx<'a> {
        self.symbolic = f;
        self
    }

    /// Moves the `value` tensors out of the default-domain `Constant` nodes of `g` (the main
    /// graph, owned by the importer), so that [`Ctx::constant_value`] hands them over instead of
    /// the handler copying them from the borrowed node.
    pub(crate) fn take_constant_values(&mut self, g: &mut GraphProto) {
        for node in &mut g.node {
            if node.op_type() != "Constant" || !(node.domain().is_empty() || node.domain() == "ai.onnx") {
                continue;
            }
            let Some(out) = node.output.first().filter(|o| !self.constant_values.contains_key(*o)) else { continue };
            if let Some(t) = node.attribute.iter_mut().find(|a| a.name() == "value").and_then(|a| a.t.take()) {
                self.constant_values.insert(out.clone(), t);
            }
        }
    }

    /// The `value` tensor that [`Ctx::take_constant_values`] moved out of `Constant` node `n`.
    pub(crate) fn constant_value(&mut self, n: &Node<'_>) -> Option<TensorProto> {
        self.constant_values.remove(n.proto.output.first()?)
    }

    /// The shape of a value.
    pub fn shape(&self, v: ValueId) -> &Shape {
        self.m.shape(v)
    }

    /// The dtype of a value.
    pub fn dtype(&self, v: ValueId) -> DType {
        self.m.shape(v).dtype
    }

    /// The rank of a value.
    pub fn rank(&self, v: ValueId) -> usize {
        self.m.shape(v).rank()
    }

    /// The value an ONNX name refers to in the current scope chain.
    pub fn lookup(&self, name: &str) -> Option<ValueId> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    /// Binds an ONNX name in the innermost scope.
    pub fn bind(&mut self, name: &str, v: ValueId) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name.to_string(), v);
        }
    }

    /// Records the dynamic axes of `v` (a value of the main function) as places to read their
    /// sizes from ([`super::symbolic`]); the first value seen with a name keeps it.
    pub(crate) fn note_axes(&mut self, v: ValueId) {
        let s = self.m.shape(v);
        for i in (0..s.rank()).filter(|&i| s.dims[i] == crate::ir::shape::DYNAMIC_DIM) {
            self.axis_sources.entry(s.axis_name(i).to_string()).or_insert((v, i));
        }
    }

    /// The constant bytes of `v` when it is defined by a `Constant` node.
    pub fn known(&self, v: ValueId) -> Option<&[u8]> {
        self.m.constant_data(v).map(|d| d.as_slice())
    }

    /// The graph inputs (parameters of `main`: name and value) that `v` is computed from, in
    /// parameter order: the input itself for an input, none for a constant. Follows operands
    /// and the values that `If`/`Loop` bodies read.
    pub(crate) fn graph_inputs_of(&self, v: ValueId) -> Vec<(String, ValueId)> {
        let main = self.m.main;
        let mut seen = HashSet::new();
        let mut stack = vec![v];
        let mut params = std::collections::BTreeSet::new();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            let vd = self.m.value(x);
            match vd.def {
                ValueDef::Param(k) if vd.func == main => {
                    params.insert(k);
                }
                ValueDef::Param(_) => {}
                ValueDef::Node { node, .. } => {
                    let node = self.m.node(node);
                    stack.extend(&node.inputs);
                    for f in node.op.callees() {
                        let f = self.m.func(f);
                        stack.extend(f.body.iter().flat_map(|&b| self.m.node(b).inputs.iter().copied()));
                        stack.extend(f.outputs.iter().flatten());
                    }
                }
            }
        }
        let f = self.m.func(main);
        params.into_iter().filter_map(|k| Some((f.param_names.get(k)?.clone(), *f.params.get(k)?))).collect()
    }

    /// The elements of a constant integer tensor (any integer dtype) as `i64`.
    pub fn known_i64s(&self, v: ValueId) -> Option<Vec<i64>> {
        let bytes = self.known(v)?;
        let dt = self.dtype(v);
        let w = dt.size();
        if !dt.is_int() || dt.is_packed() {
            return None;
        }
        let signed = dt.is_signed_int();
        Some(
            bytes
                .chunks_exact(w)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..w].copy_from_slice(c);
                    if signed && c[w - 1] & 0x80 != 0 {
                        b[w..].fill(0xff);
                    }
                    i64::from_le_bytes(b)
                })
                .collect(),
        )
    }

    /// The elements of a constant float tensor (f16, bf16, f32, f64) as `f64`.
    pub fn known_f64s(&self, v: ValueId) -> Option<Vec<f64>> {
        let bytes = self.known(v)?;
        Some(match self.dtype(v) {
            DType::Float32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            DType::Float64 => bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            DType::Float16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            DType::BFloat16 => {
                bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect()
            }
            _ => return None,
        })
    }

    /// Adds a constant with `shape` and little-endian `bytes` (moved into the module).
    pub fn constant(&mut self, shape: Shape, bytes: Vec<u8>) -> Result<ValueId> {
        crate::api::Buffer::check_bytes(&shape, &bytes).map_err(|e| Error::invalid("constant", e.to_string()))?;
        let n = self.m.add_node(self.func, Op::Constant(ConstData(Arc::new(bytes))), vec![], vec![shape]);
        Ok(self.m.node(n).outputs[0])
    }

    /// An `i64` constant with `dims`.
    pub fn const_i64(&mut self, data: &[i64], dims: &[i64]) -> Result<ValueId> {
        let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(Shape::new(DType::Int64, dims), bytes)
    }

    /// A scalar of `dtype` holding `value` (rounded to the dtype; integers truncate).
    pub fn scalar(&mut self, dtype: DType, value: f64) -> Result<ValueId> {
        let bytes = scalar_bytes(dtype, value)
            .ok_or_else(|| Error::not_implemented("onnx", format!("a {dtype} scalar constant")))?;
        self.constant(Shape::scalar(dtype), bytes)
    }

    /// Adds `op` on `inputs` to the current function (shapes inferred) and returns its outputs.
    /// When every operand is a constant and each result is small, the op is evaluated now by
    /// the reference interpreter and its results become constants.
    pub fn emit(&mut self, op: Op, inputs: &[ValueId]) -> Result<Vec<ValueId>> {
        let in_shapes: Vec<&Shape> = inputs.iter().map(|&v| self.m.shape(v)).collect();
        let shapes = crate::ir::infer::infer_shapes(&self.m, &op, &in_shapes)?;
        for (k, s) in shapes.iter().enumerate() {
            s.validate_for(&op.op_type().to_string(), &format!("output {k}"))?;
        }
        if self.fold
            && !matches!(op, Op::Constant(_))
            && op.callees().is_empty()
            && inputs.iter().all(|&v| self.known(v).is_some())
            && shapes.iter().all(|s| s.byte_size().is_some_and(|b| b <= FOLD_MAX_BYTES))
        {
            return self.fold_now(op, inputs, shapes);
        }
        let n = self.m.add_node(self.func, op, inputs.to_vec(), shapes);
        Ok(self.m.node(n).outputs.clone())
    }

    /// [`Ctx::emit`] for single-output ops.
    pub fn emit1(&mut self, op: Op, inputs: &[ValueId]) -> Result<ValueId> {
        let outs = self.emit(op, inputs)?;
        outs.into_iter().next().ok_or_else(|| Error::invalid("onnx", "op produced no output"))
    }

    fn fold_now(&mut self, op: Op, inputs: &[ValueId], shapes: Vec<Shape>) -> Result<Vec<ValueId>> {
        let mut mini = Module::new("fold");
        let main = mini.main;
        let mut ins = Vec::with_capacity(inputs.len());
        for &v in inputs {
            let data = ConstData(Arc::new(self.known(v).unwrap_or_default().to_vec()));
            let n = mini.add_node(main, Op::Constant(data), vec![], vec![self.m.shape(v).clone()]);
            ins.push(mini.node(n).outputs[0]);
        }
        let n = mini.add_node(main, op, ins, shapes.clone());
        let outs = mini.node(n).outputs.clone();
        mini.func_mut(main).outputs = Some(outs);
        let exe = InterpExecutable::new(mini)?;
        let results = exe.execute(&[], &[])?;
        let mut ids = Vec::with_capacity(results.len());
        for (b, s) in results.iter().zip(shapes) {
            ids.push(self.constant(s, b.to_bytes()?)?);
        }
        Ok(ids)
    }

    /// Imports the initializers, nodes and outputs of `g` into the current function, with
    /// `params` bound to the graph's inputs first (in order). Returns the graph's outputs.
    pub fn import_body(&mut self, g: &GraphProto, params: &[(String, ValueId)]) -> Result<Vec<ValueId>> {
        self.scopes.push(HashMap::new());
        let r = self.import_body_inner(g, params);
        self.scopes.pop();
        r
    }

    fn import_body_inner(&mut self, g: &GraphProto, params: &[(String, ValueId)]) -> Result<Vec<ValueId>> {
        for (name, v) in params {
            self.bind(name, *v);
        }
        let bound: HashSet<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        for init in &g.initializer {
            if bound.contains(init.name()) {
                continue;
            }
            let mut t = init.clone();
            let v = self.initializer(&mut t)?;
            self.bind(init.name(), v);
        }
        self.import_nodes(g)?;
        g.output
            .iter()
            .map(|o| {
                self.lookup(o.name()).ok_or_else(|| {
                    Error::invalid(
                        "onnx",
                        format!("graph {:?}: output {:?} is not produced by any node", g.name(), o.name()),
                    )
                })
            })
            .collect()
    }

    /// A constant from an initializer, its payload moved out of `t`.
    pub(crate) fn initializer(&mut self, t: &mut TensorProto) -> Result<ValueId> {
        let (shape, bytes) = take_tensor_bytes(t, self.base_dir)?;
        self.constant(shape, bytes)
    }

    /// Maps every node of `g` in order.
    pub(crate) fn import_nodes(&mut self, g: &GraphProto) -> Result<()> {
        for n in &g.node {
            self.import_node(n).map_err(|e| in_node(e, n))?;
        }
        Ok(())
    }

    fn import_node(&mut self, n: &NodeProto) -> Result<()> {
        if !(n.domain().is_empty() || n.domain() == "ai.onnx") {
            return Err(Error::not_implemented(label(n), format!("operator domain {:?}", n.domain())));
        }
        let handler = (self.lookup_op)(n.op_type())
            .ok_or_else(|| Error::not_implemented(label(n), format!("operator {} is not supported", n.op_type())))?;
        let mut inputs = Vec::with_capacity(n.input.len());
        for name in &n.input {
            if name.is_empty() {
                inputs.push(None);
            } else {
                let v = self.lookup(name).ok_or_else(|| {
                    Error::invalid(label(n), format!("input {name:?} is not defined before the node"))
                })?;
                inputs.push(Some(v));
            }
        }
        let node = Node::new(n, inputs, self.opset);
        let outs = match (self.symbolic)(self, &node)? {
            Some(outs) => outs,
            None => handler(self, &node)?,
        };
        if let Some(a) = node.unread_attr() {
            return Err(node.unsupported(format!("attribute {a:?} is not supported")));
        }
        if outs.len() < n.output.iter().filter(|o| !o.is_empty()).count() && outs.len() < n.output.len() {
            return Err(node.unsupported(format!("{} outputs requested, {} produced", n.output.len(), outs.len())));
        }
        for (name, v) in n.output.iter().zip(outs) {
            if !name.is_empty() {
                self.bind(name, v);
            }
        }
        Ok(())
    }
}

/// Little-endian bytes of `value` as one element of `dtype`.
pub fn scalar_bytes(dtype: DType, value: f64) -> Option<Vec<u8>> {
    Some(match dtype {
        DType::Float32 => (value as f32).to_le_bytes().to_vec(),
        DType::Float64 => value.to_le_bytes().to_vec(),
        DType::Float16 => half::f16::from_f64(value).to_le_bytes().to_vec(),
        DType::BFloat16 => half::bf16::from_f64(value).to_le_bytes().to_vec(),
        DType::Int8 => (value as i8).to_le_bytes().to_vec(),
        DType::Int16 => (value as i16).to_le_bytes().to_vec(),
        DType::Int32 => (value as i32).to_le_bytes().to_vec(),
        DType::Int64 => (value as i64).to_le_bytes().to_vec(),
        DType::Uint8 => (value as u8).to_le_bytes().to_vec(),
        DType::Uint16 => (value as u16).to_le_bytes().to_vec(),
        DType::Uint32 => (value as u32).to_le_bytes().to_vec(),
        DType::Uint64 => (value as u64).to_le_bytes().to_vec(),
        DType::Bool => vec![u8::from(value != 0.0)],
        _ => return None,
    })
}
