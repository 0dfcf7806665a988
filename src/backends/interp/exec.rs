//! `InterpExecutable` and the evaluator: runs a function node by node over an environment of
//! tensors indexed by value id, dropping each tensor after its last use.
//!
//! Constants, control flow (Call, While, If, Sort), barriers, AllReduce (`crate::api::collective`) and the
//! zero-copy shape ops (Reshape, DynamicReshape, Identity) are handled here; every other op goes
//! to [`crate::kernels::reference::eval`]. Tensor data is shared (`Arc`) and never written while
//! shared, so a non-donated input is never modified; a donated input's storage is owned by the
//! execution and may be written in place or returned as an output.

use std::borrow::Cow;
use std::sync::Arc;

use super::dynamic::{self, Bindings};
use super::plan::Plan;
use crate::api::backend::{ExecOptions, Executable};
use crate::api::buffer::Buffer;
use crate::api::profile::EventKind;
use crate::backends::signature::Signature;
use crate::backends::slot::FinalizeSlot;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, NodeId, ValueId};
use crate::ir::op::{Op, ReshapeDim, UnaryOp};
use crate::ir::optype::OpType;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

/// Nesting limit for calls and closures (guards against call cycles in unverified modules).
const MAX_DEPTH: usize = 200;

/// A module compiled by the "interp" backend. `Send + Sync`: every execution has its own
/// environment, the plan is shared read-only.
pub struct InterpExecutable {
    plan: FinalizeSlot<Plan>,
    sig: Signature,
    /// Most iterations one `while` may run (`while_limit=N`); `None`: unbounded.
    while_limit: Option<u64>,
}

impl InterpExecutable {
    /// Prepares `module` (verified, `main` returned) for execution.
    pub fn new(module: crate::ir::module::Module) -> Result<InterpExecutable> {
        let plan = Plan::new(module)?;
        let sig = Signature::of(&plan.module)?;
        Ok(InterpExecutable { plan: FinalizeSlot::new(plan), sig, while_limit: None })
    }

    /// Caps every `while` of this executable at `limit` iterations (the `while_limit` backend
    /// option): one more is an [`Error::Limit`] naming the while node.
    pub fn with_while_limit(mut self, limit: Option<u64>) -> InterpExecutable {
        self.while_limit = limit;
        self
    }

    fn plan(&self) -> Result<Arc<Plan>> {
        self.plan.get()
    }
}

impl Executable for InterpExecutable {
    fn input_names(&self) -> &[String] {
        &self.sig.input_names
    }

    fn input_shapes(&self) -> &[Shape] {
        &self.sig.input_shapes
    }

    fn output_shapes(&self) -> &[Shape] {
        &self.sig.output_shapes
    }

    fn execute_with(&self, inputs: &[&Buffer], donate: &[bool], opts: &ExecOptions) -> Result<Vec<Buffer>> {
        let plan = self.plan()?;
        // The dynamic axes are bound before any buffer is taken, so a rejected call donates
        // nothing.
        let mut bindings = Bindings::new();
        let args = self.sig.take_inputs(inputs, donate, |i, buf| {
            let want = &self.sig.input_shapes[i];
            if want.is_dynamic() {
                let what = format!("parameter {i} ({:?})", self.sig.input_names[i]);
                dynamic::bind(want, buf.shape(), &what, &mut bindings)?;
            }
            Ok(())
        })?;
        let mut ctx = Ctx {
            plan: &plan,
            env: vec![None; plan.module.values.len()],
            bindings,
            depth: 0,
            opts,
            bounded: !opts.is_unbounded(),
            while_limit: self.while_limit,
        };
        let outs = ctx.run_function(plan.module.main, args)?;
        outs.into_iter().map(|t| Buffer::from_storage(t.shape, t.data)).collect()
    }

    fn finalize(&self) {
        self.plan.take();
    }
}

/// How a location starts in an error message.
const AT: &str = " (at node ";

/// Adds where an error happened to its message, keeping its kind and a bounded length: the
/// innermost node `n` of function `f`, `nesting` levels below main, is recorded once (with that
/// depth); the node of main it was reached from is added at the outermost level; the levels in
/// between add nothing (an error raised 200 closures deep stays one short line).
pub(crate) fn locate(e: Error, m: &Module, f: FuncId, n: NodeId, nesting: usize) -> Error {
    let add = |msg: String| {
        if !msg.contains(AT) {
            let depth = if nesting == 0 { String::new() } else { format!(", {nesting} levels below main") };
            format!("{msg}{AT}{n} in {}{depth})", m.func_label(f))
        } else if nesting == 0 {
            format!("{msg} (reached from node {n} in {})", m.func_label(f))
        } else {
            msg
        }
    };
    match e {
        Error::Invalid { op, msg } => Error::Invalid { op, msg: add(msg) },
        Error::NotImplemented { op, msg } => Error::NotImplemented { op, msg: add(msg) },
        Error::Execution(msg) => Error::Execution(add(msg)),
        other => other,
    }
}

/// Counts one more iteration of the while node `n` (in `f`) against `limit`.
pub(crate) fn count_iteration(
    iterations: &mut u64,
    limit: Option<u64>,
    m: &Module,
    f: FuncId,
    n: NodeId,
) -> Result<()> {
    *iterations += 1;
    match limit {
        Some(max) if *iterations > max => Err(Error::limit(
            format!("while (node {n} in {})", m.func_label(f)),
            format!("more than {max} iterations (while_limit={max})"),
        )),
        _ => Ok(()),
    }
}

fn internal(msg: String) -> Error {
    Error::Execution(format!("internal error: {msg}"))
}

/// Reads a scalar Bool tensor.
pub(crate) fn scalar_bool(op: OpType, what: &str, t: &Tensor) -> Result<bool> {
    if t.shape.dtype != DType::Bool || t.len() != 1 {
        return Err(Error::invalid(op.to_string(), format!("{what} must be a scalar Bool, got {}", t.shape)));
    }
    Ok(t.bytes()[0] != 0)
}

/// The state of one execution.
struct Ctx<'p> {
    /// Deadline and cancellation of this execution.
    opts: &'p ExecOptions,
    /// Whether `opts` sets anything (checked between nodes and at every iteration).
    bounded: bool,
    /// Most iterations per `while`.
    while_limit: Option<u64>,
    plan: &'p Plan,
    /// Live tensors by value id (values of every function on the current call path).
    env: Vec<Option<Tensor>>,
    /// Dynamic axis sizes.
    bindings: Bindings,
    /// Current call nesting.
    depth: usize,
}

impl Ctx<'_> {
    fn get(&self, v: ValueId) -> Result<Tensor> {
        self.env.get(v.index()).and_then(|t| t.clone()).ok_or_else(|| internal(format!("value {v} is not available")))
    }

    /// Runs function `f` with `args` bound to its parameters and returns its outputs.
    fn run_function(&mut self, f: FuncId, args: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let plan = self.plan;
        let m = &plan.module;
        let fd = m.func(f);
        let fp = &plan.funcs[f.index()];
        if args.len() != fd.params.len() {
            return Err(Error::invalid(
                m.func_label(f),
                format!("{} arguments for {} parameters", args.len(), fd.params.len()),
            ));
        }
        if self.bounded {
            self.opts.check()?;
        }
        if self.depth >= MAX_DEPTH {
            return Err(Error::Execution(format!(
                "calls nested deeper than {MAX_DEPTH} levels in {} (recursive functions?)",
                m.func_label(f)
            )));
        }
        self.depth += 1;
        // A named function's dynamic axis names are its own scope; closures share their parent's.
        let saved = if fp.dynamic_params {
            let mut local = Bindings::new();
            for (i, (&p, t)) in fd.params.iter().zip(&args).enumerate() {
                let what = format!("{} parameter {i} ({:?})", m.func_label(f), fd.param_names[i]);
                dynamic::bind(m.shape(p), &t.shape, &what, &mut local)?;
            }
            let saved = (!fd.is_closure()).then(|| self.bindings.clone());
            self.bindings.extend(local);
            saved
        } else {
            None
        };
        for ((&p, t), &used) in fd.params.iter().zip(args).zip(&fp.param_used) {
            if used {
                self.env[p.index()] = Some(t);
            }
        }
        let nesting = self.depth - 1;
        for (pos, &n) in fd.body.iter().enumerate() {
            if self.bounded {
                self.opts.check()?;
            }
            if !plan.nodes[n.index()].live {
                // Nothing reads its results (every op is pure): not run, as the jit's DCE would
                // remove it. Its operands' last uses are elsewhere, so nothing is dropped here.
                continue;
            }
            let started = self.opts.profiler.as_ref().map(|_| std::time::Instant::now());
            self.run_node(f, pos, n).map_err(|e| locate(e, m, f, n, nesting))?;
            if let (Some(p), Some(t)) = (&self.opts.profiler, started) {
                p.record(EventKind::Interp, t, || node_label(m, n));
            }
        }
        let outputs = fd.outputs.as_deref().unwrap_or(&[]);
        let result = outputs.iter().map(|&v| self.get(v)).collect::<Result<Vec<_>>>()?;
        for &v in outputs.iter().chain(&fd.params) {
            if m.value(v).func == f {
                self.env[v.index()] = None;
            }
        }
        if let Some(s) = saved {
            self.bindings = s;
        }
        self.depth -= 1;
        Ok(result)
    }

    fn drop_dead(&mut self, f: FuncId, pos: usize, after: bool) {
        let fp = &self.plan.funcs[f.index()];
        for v in if after { &fp.drops_after[pos] } else { &fp.drops_before[pos] } {
            self.env[v.index()] = None;
        }
    }

    /// Runs node `n` at body position `pos` of function `f`.
    fn run_node(&mut self, f: FuncId, pos: usize, n: NodeId) -> Result<()> {
        let plan = self.plan;
        let m = &plan.module;
        let node = m.node(n);
        let np = &plan.nodes[n.index()];
        let name = node.op.op_type();
        let inputs = node.inputs.iter().map(|&v| self.get(v)).collect::<Result<Vec<_>>>()?;
        // Operands dying here are released before the op runs, so `inputs` may hold the only
        // reference (which in-place ops use); values captured by a callee live until it is done.
        self.drop_dead(f, pos, false);
        let outs = match &node.op {
            Op::Constant(_) => {
                let data = np.constant.clone().ok_or_else(|| internal(format!("constant {n} has no data")))?;
                let shape = np.out_shapes.first().cloned().ok_or_else(|| internal(format!("constant {n}")))?;
                vec![Tensor { shape, data }]
            }
            Op::Call { func } => self.run_function(*func, inputs)?,
            Op::While { cond, body } => {
                let mut state = inputs;
                let mut iterations = 0;
                loop {
                    if self.bounded {
                        self.opts.check()?;
                    }
                    let c = self.run_function(*cond, state.clone())?;
                    let go = c.first().ok_or_else(|| Error::invalid(name.to_string(), "condition returned nothing"))?;
                    if !scalar_bool(name, "the condition's result", go)? {
                        break;
                    }
                    count_iteration(&mut iterations, self.while_limit, m, f, n)?;
                    state = self.run_function(*body, state)?;
                }
                state
            }
            Op::If { then_branch, else_branch } => {
                let pred = inputs.first().ok_or_else(|| Error::invalid(name.to_string(), "missing operand pred"))?;
                let branch = if scalar_bool(name, "pred", pred)? { *then_branch } else { *else_branch };
                self.run_function(branch, vec![])?
            }
            Op::Sort { comparator, axis, .. } => super::sort::sort(*comparator, *axis, &inputs, |c, args| {
                let r = self.run_function(c, args)?;
                let r =
                    r.first().ok_or_else(|| Error::invalid(OpType::Sort.to_string(), "comparator returned nothing"))?;
                scalar_bool(OpType::Sort, "the comparator's result", r)
            })?,
            Op::OptimizationBarrier | Op::Unary(UnaryOp::Identity) => inputs,
            Op::SchedulingBarrier => {
                vec![inputs.into_iter().next().ok_or_else(|| Error::invalid(name.to_string(), "missing operand"))?]
            }
            Op::AllReduce { kind, replica_groups } => {
                let comm = self.opts.communicator.as_deref();
                crate::api::collective::all_reduce_tensors(&name.to_string(), comm, *kind, replica_groups, inputs)?
            }
            Op::DynamicShape => {
                let x = inputs.first().ok_or_else(|| Error::invalid(name.to_string(), "missing operand x"))?;
                let dims: Vec<i32> = x.shape.dims.iter().map(|&d| d as i32).collect();
                vec![Tensor::from_vec(Shape::new(DType::Int32, &[dims.len() as i64]), &dims)?]
            }
            Op::DynamicDimensionSize { axis } => {
                let x = inputs.first().ok_or_else(|| Error::invalid(name.to_string(), "missing operand x"))?;
                let d = *x.shape.dims.get(*axis).ok_or_else(|| {
                    Error::invalid(name.to_string(), format!("axis {axis} out of range for operand {}", x.shape))
                })?;
                vec![Tensor::from_vec(Shape::scalar(DType::Int32), &[d as i32])?]
            }
            Op::DynamicReshape { specs } => vec![self.dynamic_reshape(&name.to_string(), specs, inputs)?],
            Op::Reshape { dims } => {
                let x =
                    inputs.into_iter().next().ok_or_else(|| Error::invalid(name.to_string(), "missing operand x"))?;
                let static_in: Vec<&Shape> = node.inputs.iter().map(|&v| m.shape(v)).collect();
                let static_out: Vec<&Shape> = node.outputs.iter().map(|&v| m.shape(v)).collect();
                let op =
                    dynamic::resolve_op(&node.op, &static_in, std::slice::from_ref(&x), &static_out, &self.bindings)?;
                // `resolve_op` keeps the op kind; only the dims may change.
                let dims = if let Op::Reshape { dims } = op.as_ref() { dims.clone() } else { dims.clone() };
                vec![reshape(&name.to_string(), x, &dims)?]
            }
            Op::DynamicUpdateSlice => {
                super::inplace::dynamic_update_slice(&name.to_string(), inputs, |inputs| self.kernel(node, np, inputs))?
            }
            _ => self.kernel(node, np, &inputs)?,
        };
        self.drop_dead(f, pos, true);
        if outs.len() != node.outputs.len() {
            return Err(internal(format!("{name} produced {} results for {} outputs", outs.len(), node.outputs.len())));
        }
        for (k, t) in outs.into_iter().enumerate() {
            if !np.dynamic {
                let want = &np.out_shapes[k];
                if t.shape.dtype != want.dtype || t.shape.dims != want.dims {
                    return Err(internal(format!("{name} output {k} is {}, expected {want}", t.shape)));
                }
            }
            if np.keep[k] {
                self.env[node.outputs[k].index()] = Some(t);
            }
        }
        Ok(())
    }

    /// Runs a reference kernel, with run-time shapes when the node is dynamic.
    fn kernel(
        &self,
        node: &crate::ir::module::Node,
        np: &super::plan::NodePlan,
        inputs: &[Tensor],
    ) -> Result<Vec<Tensor>> {
        let m = &self.plan.module;
        let (op, out_shapes): (Cow<'_, Op>, Cow<'_, [Shape]>) = if np.dynamic {
            let static_in: Vec<&Shape> = node.inputs.iter().map(|&v| m.shape(v)).collect();
            let static_out: Vec<&Shape> = node.outputs.iter().map(|&v| m.shape(v)).collect();
            let op = dynamic::resolve_op(&node.op, &static_in, inputs, &static_out, &self.bindings)?;
            let shapes = dynamic::output_shapes(m, &op, inputs, &static_out, &self.bindings)?;
            (op, Cow::Owned(shapes))
        } else {
            (Cow::Borrowed(&node.op), Cow::Borrowed(np.out_shapes.as_slice()))
        };
        crate::memory::check_outputs(op.op_type(), &out_shapes)?;
        let outs = crate::kernels::reference::eval(&op, inputs, &out_shapes)?;
        if outs.len() != out_shapes.len() {
            return Err(internal(format!(
                "{} kernel returned {} results for {} outputs",
                op.op_type(),
                outs.len(),
                out_shapes.len()
            )));
        }
        for (k, (t, s)) in outs.iter().zip(out_shapes.iter()).enumerate() {
            if t.shape.dtype != s.dtype || t.shape.dims != s.dims || Some(t.data.len()) != s.byte_size() {
                return Err(internal(format!("{} kernel output {k} is {}, expected {s}", op.op_type(), t.shape)));
            }
        }
        Ok(outs)
    }

    /// DynamicReshape: sizes come from scalar operands (`Dynamic`), constants (`Static`) or the
    /// element count (`Inferred`); the new names are bound for later ops. Zero-copy.
    fn dynamic_reshape(&mut self, name: &str, specs: &[ReshapeDim], inputs: Vec<Tensor>) -> Result<Tensor> {
        let mut it = inputs.into_iter();
        let x = it.next().ok_or_else(|| Error::invalid(name, "missing operand x"))?;
        let mut values = Vec::with_capacity(specs.len());
        for (t, spec) in it.zip(specs.iter().filter(|s| matches!(s, ReshapeDim::Dynamic(_)))) {
            let ReshapeDim::Dynamic(axis) = spec else { continue };
            values.push(dynamic::scalar_i64(name, &format!("size of axis {axis:?}"), &t)?);
        }
        let (dims, new_names) = dynamic::dynamic_reshape_dims(name, specs, &x.shape, &values)?;
        for (axis, j) in new_names {
            self.bindings.insert(axis, dims[j]);
        }
        reshape(name, x, &dims)
    }
}

/// Zero-copy reshape of `x` to `dims` (row-major data is unchanged); checks the element count.
fn reshape(name: &str, x: Tensor, dims: &[i64]) -> Result<Tensor> {
    let shape = Shape::new(x.shape.dtype, dims);
    if shape.dims.iter().any(|&d| d < 0) || shape.size() != Some(x.len()) || shape.check_limits().is_err() {
        return Err(Error::invalid(name, format!("cannot reshape {} ({} elements) to {shape}", x.shape, x.len())));
    }
    Ok(Tensor { shape, data: x.data })
}

/// The profile label of node `n`: its op and its first result's shape (`add f32[8,384]`).
fn node_label(m: &Module, n: NodeId) -> String {
    let node = m.node(n);
    let op = node.op.op_type().name();
    match node.outputs.first() {
        Some(&v) => format!("{op} {}", crate::ir::text::format_shape(m.shape(v))),
        None => op.to_string(),
    }
}
