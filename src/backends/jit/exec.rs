//! `JitExecutable`: runs a [`Plan`] (compiled loops split across the backend's thread pool,
//! reference kernels for the other nodes), or hands a module the plan cannot express to the
//! interpreter.

use std::sync::Arc;
use std::time::Instant;

use crate::backends::signature::Signature;
use crate::backends::slot::FinalizeSlot;

use super::loops::run_loop;
use super::plan::{AliasStep, CallStep, FuncPlan, KernelStep, Plan, Step};
use crate::api::backend::{ExecOptions, Executable};
use crate::api::buffer::Buffer;
use crate::api::profile::EventKind;
use crate::backends::interp::InterpExecutable;
use crate::backends::interp::{count_iteration, locate, scalar_bool};
use crate::backends::signature::unnamed;
use crate::error::{Error, Result};
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::ir::text::format_shape;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;

/// What an executable runs.
pub(crate) enum Runner {
    /// The flat plan, with the pool used to split large loops (`None`: one thread; a pool of
    /// one thread runs everything on the calling thread too).
    Plan { plan: Arc<Plan>, pool: Option<Arc<rayon::ThreadPool>> },
    /// The interpreter (closures, control flow, dynamic shapes).
    Interp(InterpExecutable),
}

/// A module compiled by the "jit" backend. `Send + Sync`: the plan is shared read-only and every
/// execution has its own value slots.
pub struct JitExecutable {
    runner: FinalizeSlot<Runner>,
    sig: Signature,
    /// Most iterations one `while` may run (`while_limit=N`); `None`: unbounded.
    while_limit: Option<u64>,
}

impl JitExecutable {
    /// `while_limit` applies to the plan; an interpreter runner carries its own.
    pub(crate) fn new(runner: Runner, sig: Signature, while_limit: Option<u64>) -> Self {
        JitExecutable { runner: FinalizeSlot::new(runner), sig, while_limit }
    }

    /// Whether this executable runs on the flat plan of compiled loops (`false`: it was handed
    /// to the interpreter, see the backend's docs for when).
    pub fn uses_compiled_plan(&self) -> bool {
        matches!(self.runner().as_deref(), Ok(Runner::Plan { .. }))
    }

    /// Number of compiled loop steps in the plan (0 when delegated to the interpreter).
    pub fn num_loop_steps(&self) -> usize {
        self.sum_over_loops(|_| 1)
    }

    /// Number of loop steps that write their outputs with non-temporal stores when their output
    /// buffers are 16-byte aligned (the `streaming_stores` option).
    pub fn num_streaming_loops(&self) -> usize {
        self.sum_over_loops(|l| usize::from(l.streaming.is_some()))
    }

    /// Number of reductions computed inside compiled loops (fused at the end of a cluster).
    pub fn num_fused_reductions(&self) -> usize {
        self.sum_over_loops(|l| l.outputs.len() - l.n_plain)
    }

    /// Σ `f` over the loop steps of every function's plan (0 when delegated to the interpreter).
    fn sum_over_loops(&self, f: impl Fn(&super::loops::LoopStep) -> usize) -> usize {
        match self.runner().as_deref() {
            Ok(Runner::Plan { plan, .. }) => {
                plan.funcs.iter().flat_map(|fp| &fp.steps).map(|s| if let Step::Loop(l) = s { f(l) } else { 0 }).sum()
            }
            _ => 0,
        }
    }

    /// The thread pool the plan's parallel steps run on (the backend's: the shared pool unless
    /// it was given its own); `None` with `parallelism=1`, when delegated to the interpreter, or
    /// once finalized.
    pub fn thread_pool(&self) -> Option<Arc<rayon::ThreadPool>> {
        match self.runner().as_deref() {
            Ok(Runner::Plan { pool, .. }) => pool.clone(),
            _ => None,
        }
    }

    fn runner(&self) -> Result<Arc<Runner>> {
        self.runner.get()
    }
}

impl Executable for JitExecutable {
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
        let runner = self.runner()?;
        let (plan, pool) = match &*runner {
            Runner::Interp(e) => return e.execute_with(inputs, donate, opts),
            Runner::Plan { plan, pool } => (plan, pool.as_deref().filter(|p| p.current_num_threads() > 1)),
        };
        let args = self.sig.take_inputs(inputs, donate, |_, _| Ok(()))?;
        let mut env: Vec<Option<Tensor>> = vec![None; plan.num_values];
        for (v, t) in &plan.constants {
            env[v.index()] = Some(t.clone());
        }
        let main = plan.main();
        for (t, &(p, used)) in args.into_iter().zip(&main.params) {
            if used {
                env[p.index()] = Some(t);
            }
        }
        let mut ex =
            Exec { plan, env, pool, depth: 0, opts, bounded: !opts.is_unbounded(), while_limit: self.while_limit };
        ex.run_steps(main)?;
        main.outputs
            .iter()
            .map(|&v| {
                let t = ex.env[v.index()].clone().ok_or_else(|| internal(format!("output {v} was not computed")))?;
                Buffer::from_storage(t.shape, t.data)
            })
            .collect()
    }

    fn finalize(&self) {
        if let Some(r) = self.runner.take()
            && let Runner::Interp(e) = &*r
        {
            e.finalize();
        }
    }
}

/// Deepest nesting of Call/While/If/Sort bodies (recursive named functions stop here).
const MAX_DEPTH: usize = 200;

/// The state of one execution: a slot per value of the module (closures read their ancestors'
/// values by id), the pool, and the call depth.
struct Exec<'p> {
    plan: &'p Plan,
    env: Vec<Option<Tensor>>,
    pool: Option<&'p rayon::ThreadPool>,
    depth: usize,
    /// Deadline and cancellation of this execution.
    opts: &'p ExecOptions,
    /// Whether `opts` sets anything (checked between steps and at every iteration).
    bounded: bool,
    /// Most iterations per `while`.
    while_limit: Option<u64>,
}

/// Whether `v` is the result of a Constant node (loaded once per execution, never released).
fn is_constant(m: &Module, v: ValueId) -> bool {
    matches!(m.value(v).def, ValueDef::Node { node, .. } if matches!(m.node(node).op, Op::Constant(_)))
}

impl<'p> Exec<'p> {
    /// Runs the steps of `fp`, releasing values after their last use.
    fn run_steps(&mut self, fp: &'p FuncPlan) -> Result<()> {
        let plan = self.plan;
        for (i, step) in fp.steps.iter().enumerate() {
            if self.bounded {
                self.opts.check()?;
            }
            let started = self.opts.profiler.as_ref().map(|_| Instant::now());
            match step {
                Step::Loop(s) => run_loop(s, &mut self.env, self.pool)?,
                Step::Kernel(s) => run_kernel(plan, s, &mut self.env, self.pool, self.depth)?,
                Step::Alias(s) => run_alias(s, &mut self.env)?,
                Step::Call(s) => self.run_call(s)?,
            }
            if let (Some(p), Some(t)) = (&self.opts.profiler, started) {
                p.record(step_kind(step), t, || step_label(plan, fp, step));
            }
            for v in &fp.drops[i] {
                self.env[v.index()] = None;
            }
        }
        Ok(())
    }

    /// Runs function `f` on `args` and returns its outputs.
    fn run_function(&mut self, f: FuncId, args: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let plan = self.plan;
        let m = &plan.module;
        let fp = plan.funcs.get(f.index()).ok_or_else(|| internal(format!("no plan for {f}")))?;
        if args.len() != fp.params.len() {
            return Err(Error::invalid(
                m.func_label(f),
                format!("{} arguments for {} parameters", args.len(), fp.params.len()),
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
        for (&(p, used), t) in fp.params.iter().zip(args) {
            if used {
                self.env[p.index()] = Some(t);
            }
        }
        let r = self.run_steps(fp);
        self.depth -= 1;
        r?;
        let mut outs = Vec::with_capacity(fp.outputs.len());
        for &v in &fp.outputs {
            let t = self.env[v.index()].clone().ok_or_else(|| internal(format!("output {v} was not computed")))?;
            outs.push(t);
        }
        // The callee's own values are done; releasing them lets the caller hold the only
        // reference (a While state is then updated in place by the next iteration's loops).
        // Its constants stay: they are loaded once per execution and the callee may run again.
        for &v in &fp.outputs {
            if m.value(v).func == f && !is_constant(m, v) {
                self.env[v.index()] = None;
            }
        }
        for &(p, _) in &fp.params {
            self.env[p.index()] = None;
        }
        Ok(outs)
    }

    fn run_call(&mut self, s: &CallStep) -> Result<()> {
        let plan = self.plan;
        let m = &plan.module;
        let name = m.node(s.node).op.op_type();
        let inputs = s.inputs.iter().map(|&v| slot(&self.env, v)).collect::<Result<Vec<_>>>()?;
        let nesting = self.depth;
        let at = |e: Error| annotate(e, m, s.node, nesting);
        let outs = match m.node(s.node).op {
            Op::Call { func } => self.run_function(func, inputs),
            Op::While { cond, body } => (|| {
                let mut state = inputs;
                let mut iterations = 0;
                loop {
                    if self.bounded {
                        self.opts.check()?;
                    }
                    let c = self.run_function(cond, state.clone())?;
                    let go = c.first().ok_or_else(|| Error::invalid(name.to_string(), "condition returned nothing"))?;
                    if !scalar_bool(name, "the condition's result", go)? {
                        break;
                    }
                    count_iteration(&mut iterations, self.while_limit, m, node_func(m, s.node), s.node)?;
                    state = self.run_function(body, state)?;
                }
                Ok(state)
            })(),
            Op::If { then_branch, else_branch } => (|| {
                let pred = inputs.first().ok_or_else(|| Error::invalid(name.to_string(), "missing operand pred"))?;
                let branch = if scalar_bool(name, "pred", pred)? { then_branch } else { else_branch };
                self.run_function(branch, vec![])
            })(),
            Op::Sort { comparator, axis, .. } => crate::backends::interp::sort(comparator, axis, &inputs, |c, args| {
                let r = self.run_function(c, args)?;
                let r = r.first().ok_or_else(|| Error::invalid(name.to_string(), "comparator returned nothing"))?;
                scalar_bool(name, "the comparator's result", r)
            }),
            _ => Err(internal(format!("node {} ({name}) is not control flow", s.node))),
        }
        .map_err(at)?;
        if outs.len() != s.outputs.len() {
            return Err(internal(format!("{name} returned {} results for {} outputs", outs.len(), s.outputs.len())));
        }
        for (k, (t, want)) in outs.into_iter().zip(&s.out_shapes).enumerate() {
            if t.shape.dtype != want.dtype || t.shape.dims != want.dims {
                return Err(internal(format!("{name} output {k} is {}, expected {want}", t.shape)));
            }
            self.env[s.outputs[k].index()] = Some(t);
        }
        Ok(())
    }
}

fn internal(msg: String) -> Error {
    Error::Execution(format!("internal error: {msg}"))
}

fn slot(env: &[Option<Tensor>], v: crate::ir::module::ValueId) -> Result<Tensor> {
    env.get(v.index()).and_then(|t| t.clone()).ok_or_else(|| internal(format!("value {v} is not available")))
}

fn run_kernel(
    plan: &Plan,
    s: &KernelStep,
    env: &mut [Option<Tensor>],
    pool: Option<&rayon::ThreadPool>,
    nesting: usize,
) -> Result<()> {
    let packed = s.fast.as_ref().map_or(&[][..], |f| f.prepacked_operands());
    let inputs = s
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if packed.contains(&i) {
                // Captured by the fast kernel at compile time: shape only, no data.
                Ok(Tensor { shape: unnamed(plan.module.shape(v)), data: Arc::new(AlignedBytes::zeroed(0)) })
            } else {
                slot(env, v)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let at = |e: Error| annotate(e, &plan.module, s.node, nesting);
    crate::memory::check_outputs(s.op.op_type(), &s.out_shapes).map_err(at)?;
    let outs = match &s.fast {
        Some(k) => k.run(&inputs, &s.out_shapes, pool),
        None => crate::kernels::reference::eval(&s.op, &inputs, &s.out_shapes),
    }
    .map_err(at)?;
    drop(inputs);
    if outs.len() != s.outputs.len() {
        return Err(internal(format!(
            "{} kernel returned {} results for {} outputs",
            s.op.op_type(),
            outs.len(),
            s.outputs.len()
        )));
    }
    for (k, (t, want)) in outs.into_iter().zip(&s.out_shapes).enumerate() {
        if t.shape.dtype != want.dtype || t.shape.dims != want.dims || Some(t.data.len()) != want.byte_size() {
            return Err(internal(format!("{} kernel output {k} is {}, expected {want}", s.op.op_type(), t.shape)));
        }
        env[s.outputs[k].index()] = Some(t);
    }
    Ok(())
}

fn run_alias(s: &AliasStep, env: &mut [Option<Tensor>]) -> Result<()> {
    for (k, &(x, o)) in s.pairs.iter().enumerate() {
        let t = slot(env, x)?;
        let shape = s.out_shapes[k].clone();
        if shape.byte_size() != Some(t.data.len()) {
            return Err(internal(format!("alias {o} of {x}: {} bytes for shape {shape}", t.data.len())));
        }
        env[o.index()] = Some(Tensor { shape, data: t.data });
    }
    Ok(())
}

/// The function of `node`.
fn node_func(m: &Module, node: NodeId) -> FuncId {
    m.node(node).outputs.first().or(m.node(node).inputs.first()).map_or(m.main, |&v| m.value(v).func)
}

/// Adds the node (`nesting` levels below main) to an error message, keeping its kind and a
/// bounded length (see [`locate`]).
fn annotate(e: Error, m: &Module, node: NodeId, nesting: usize) -> Error {
    locate(e, m, node_func(m, node), node, nesting)
}

/// The profile kind of a plan step.
fn step_kind(step: &Step) -> EventKind {
    match step {
        Step::Loop(_) => EventKind::Loop,
        Step::Kernel(s) if s.fast.is_some() => EventKind::Kernel,
        Step::Kernel(_) => EventKind::Reference,
        Step::Alias(_) => EventKind::Alias,
        Step::Call(_) => EventKind::Control,
    }
}

/// The profile label of a plan step: what it runs and on what shape, so that steps doing the
/// same work on the same shapes add up in the profile's summary.
fn step_label(plan: &Plan, fp: &FuncPlan, step: &Step) -> String {
    let m = &plan.module;
    match step {
        Step::Loop(s) => {
            let Some(c) = fp.clustering.clusters.get(s.cluster) else { return format!("loop {}", s.cluster) };
            let mut ops: Vec<&str> = Vec::new();
            for &n in &c.nodes {
                let name = m.node(n).op.op_type().name();
                if !ops.contains(&name) {
                    ops.push(name);
                }
            }
            let shown = ops.len().min(6);
            let more = if ops.len() > shown { ", …" } else { "" };
            format!("loop: {}{more} {}", ops[..shown].join(", "), format_shape(&Shape::new(c.dtype, &c.dims)))
        }
        Step::Kernel(s) => match &s.fast {
            Some(f) => f.describe(),
            None => {
                let out = s.out_shapes.first().map(format_shape).unwrap_or_default();
                format!("{} {out}", s.op.op_type().name())
            }
        },
        Step::Alias(s) => format!("alias {}", m.node(s.node).op.op_type().name()),
        Step::Call(s) => m.node(s.node).op.op_type().name().to_string(),
    }
}
