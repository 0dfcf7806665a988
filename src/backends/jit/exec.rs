//! `JitExecutable`: runs a [`Plan`] (compiled loops split across the backend's thread pool,
//! reference kernels for the other nodes), or hands a module the plan cannot express to the
//! interpreter.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::backends::signature::Signature;
use crate::backends::slot::FinalizeSlot;

use super::loops::{Arena, LoopScratch, Retain, run_loop};
use super::plan::{AliasStep, CallStep, FuncPlan, KernelStep, Plan, Step};
use crate::api::backend::{CompileReport, ConstantMemory, ExecOptions, Executable, check_inputs, check_output_buffers};
use crate::api::buffer::Buffer;
use crate::api::profile::EventKind;
use crate::backends::interp::InterpExecutable;
use crate::backends::interp::{count_iteration, locate, scalar_bool};
use crate::error::{Error, Result};
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::ir::text::format_shape;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;

#[path = "collective.rs"]
mod collective;

/// What an executable runs.
pub(crate) enum Runner {
    /// The flat plan, with the pool used to split large loops (`None`: one thread; a pool of
    /// one thread runs everything on the calling thread too).
    Plan { plan: Arc<Plan>, pool: Option<Arc<rayon::ThreadPool>> },
    /// The interpreter (dynamic shapes the jit cannot specialise).
    Interp(InterpExecutable),
    /// One plan per binding of the module's dynamic axes.
    Dynamic(Box<super::specialize::Specializer>),
}

/// Most execution states an executable keeps between executions (one per execution running at
/// the same time, up to this many).
const MAX_KEPT_STATES: usize = 16;

/// A module compiled by the "jit" backend. `Send + Sync`: the plan is shared read-only and every
/// execution has its own value slots.
///
/// Executions reuse their memory: each runs on an execution state (value slots, the shapes of
/// released values, `main`'s memory slots for loop outputs, scratch vectors) taken from the
/// executable and handed back at the end, so that a steady-state execution of loop steps makes
/// no heap allocation ([`Executable::execute_into`] then allocates nothing at all; `execute`
/// allocates its results). The states keep the loop outputs' storage between executions (at
/// most the peak of one execution's live loop outputs per state); [`JitExecutable::release_memory`]
/// or `finalize` frees it.
pub struct JitExecutable {
    runner: FinalizeSlot<Runner>,
    sig: Signature,
    /// Most iterations one `while` may run (`while_limit=N`); `None`: unbounded.
    while_limit: Option<u64>,
    /// Whether an execution run inside its pool keeps the pool's other threads warm
    /// (`spin=on|off`).
    spin: bool,
    /// Execution states of finished executions, for the next ones.
    states: Mutex<Vec<ExecState>>,
    /// Where compilation spent its time.
    report: CompileReport,
    /// The constant memory the plan holds.
    constants: ConstantMemory,
}

/// The memory of one execution, kept from one execution to the next.
struct ExecState {
    /// A slot per value of the module (closures read their ancestors' values by id).
    env: Vec<Option<Tensor>>,
    /// Released values' shapes, constants, memory slots.
    arena: Arena,
    /// Scratch vectors of loop steps.
    loops: LoopScratch,
    /// Operands of a kernel step, moved out of `env` while it runs.
    kernel_inputs: Vec<Tensor>,
    /// Results of a kernel step that writes into given storage ([`FastKernel::writes_into`]).
    ///
    /// [`FastKernel::writes_into`]: super::fast::FastKernel::writes_into
    kernel_outputs: Vec<Tensor>,
    /// Tensors (shape, no data) that stood for an operand a kernel step reads twice (q, k and
    /// v read from one projection), kept so that the next execution clones no shape.
    repeated: Vec<Tensor>,
}

impl ExecState {
    fn new(plan: &Plan) -> ExecState {
        ExecState {
            env: vec![None; plan.num_values],
            arena: Arena::new(plan.num_values, plan.num_slots),
            loops: LoopScratch::default(),
            kernel_inputs: Vec::new(),
            kernel_outputs: Vec::new(),
            repeated: Vec::new(),
        }
    }

    /// Releases every value still held (results, constants, what a failed run left) as the plan
    /// says, so that the next execution starts from empty value slots.
    fn sweep(&mut self, plan: &Plan) {
        self.loops.clear();
        self.kernel_inputs.clear();
        self.kernel_outputs.clear();
        for (i, slot) in self.env.iter_mut().enumerate() {
            if let Some(t) = slot.take() {
                let v = ValueId(i as u32);
                self.arena.release(v, t, plan.retain.get(i).copied().unwrap_or(Retain::Shell));
            }
        }
    }
}

/// Where the results of an execution go.
enum Results<'a> {
    /// New buffers, returned.
    New(&'a mut Vec<Buffer>),
    /// The caller's buffers (checked), whose storage is exchanged with the results'.
    Into(&'a [&'a Buffer]),
}

impl JitExecutable {
    /// `while_limit` and `spin` apply to the plan; an interpreter runner carries its own limit.
    pub(crate) fn new(runner: Runner, sig: Signature, while_limit: Option<u64>, spin: bool) -> Self {
        JitExecutable {
            runner: FinalizeSlot::new(runner),
            sig,
            while_limit,
            spin,
            states: Mutex::new(Vec::new()),
            report: CompileReport::default(),
            constants: ConstantMemory::default(),
        }
    }

    /// Attaches the compile report and the constant memory the plan holds.
    pub(crate) fn with_report(mut self, report: CompileReport, constants: ConstantMemory) -> Self {
        self.report = report;
        self.constants = constants;
        self
    }

    /// Frees the memory kept between executions (the loop outputs' storage and the shapes of
    /// the execution states; see the type's docs). The next execution allocates it again.
    pub fn release_memory(&self) {
        let states = std::mem::take(&mut *self.states.lock().unwrap_or_else(|e| e.into_inner()));
        drop(states);
        if let Ok(r) = self.runner()
            && let Runner::Dynamic(s) = &*r
        {
            s.release_memory();
        }
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
            Runner::Dynamic(s) => return s.execute_with(inputs, donate, opts),
            Runner::Plan { plan, pool } => (plan, pool.as_deref().filter(|p| p.current_num_threads() > 1)),
        };
        let mut out = Vec::with_capacity(plan.main().outputs.len());
        self.run_plan(plan, pool, inputs, donate, opts, Results::New(&mut out))?;
        Ok(out)
    }

    fn execute_into(&self, inputs: &[&Buffer], donate: &[bool], outputs: &[&Buffer], opts: &ExecOptions) -> Result<()> {
        let runner = self.runner()?;
        let (plan, pool) = match &*runner {
            Runner::Interp(e) => return e.execute_into(inputs, donate, outputs, opts),
            Runner::Dynamic(s) => return s.execute_into(inputs, donate, outputs, opts),
            Runner::Plan { plan, pool } => (plan, pool.as_deref().filter(|p| p.current_num_threads() > 1)),
        };
        check_output_buffers(&self.sig.output_shapes, outputs)?;
        self.run_plan(plan, pool, inputs, donate, opts, Results::Into(outputs))
    }

    fn compile_report(&self) -> Option<CompileReport> {
        let mut r = self.report.clone();
        if let Ok(runner) = self.runner()
            && let Runner::Dynamic(s) = &*runner
        {
            r.execution = s.report();
        }
        Some(r)
    }

    fn specialization_stats(&self) -> Option<crate::api::SpecializationStats> {
        match self.runner().as_deref() {
            Ok(Runner::Dynamic(s)) => Some(s.stats()),
            _ => None,
        }
    }

    /// The plan's constants and packed GEMM operands (zero when delegated to the interpreter,
    /// whose module holds its constants, or once finalized).
    fn constant_memory(&self) -> Option<ConstantMemory> {
        Some(if self.runner.get().is_ok() { self.constants } else { ConstantMemory::default() })
    }

    fn finalize(&self) {
        self.release_memory();
        if let Some(r) = self.runner.take() {
            match &*r {
                Runner::Interp(e) => e.finalize(),
                Runner::Dynamic(s) => s.finalize(),
                Runner::Plan { .. } => {}
            }
        }
    }
}

impl JitExecutable {
    /// Runs `plan` on a kept execution state (or a new one) and hands the state back.
    fn run_plan(
        &self,
        plan: &Plan,
        pool: Option<&rayon::ThreadPool>,
        inputs: &[&Buffer],
        donate: &[bool],
        opts: &ExecOptions,
        results: Results<'_>,
    ) -> Result<()> {
        let kept = self.states.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut st = kept.filter(|s| s.env.len() == plan.num_values).unwrap_or_else(|| ExecState::new(plan));
        let r = self.run_on(plan, pool, &mut st, inputs, donate, opts, results);
        st.sweep(plan);
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if states.len() < MAX_KEPT_STATES {
            states.push(st);
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn run_on(
        &self,
        plan: &Plan,
        pool: Option<&rayon::ThreadPool>,
        st: &mut ExecState,
        inputs: &[&Buffer],
        donate: &[bool],
        opts: &ExecOptions,
        results: Results<'_>,
    ) -> Result<()> {
        self.bind_inputs(plan, st, inputs, donate)?;
        for (v, t) in &plan.constants {
            let t = st.arena.take_kept(*v).unwrap_or_else(|| t.clone());
            st.env[v.index()] = Some(t);
        }
        let main = plan.main();
        let mut ex =
            Exec { plan, st, pool, depth: 0, opts, bounded: !opts.is_unbounded(), while_limit: self.while_limit };
        // The whole step sequence runs on one of the pool's threads: each kernel's parallel
        // split then starts from inside the pool (its pieces pushed where the idle workers steal
        // them) instead of crossing from the caller's thread into the pool and back once per step
        // (MiniLM 1 x 128 on 2 threads: a layer norm of 128 x 384 took 33 µs that way against 17
        // µs on one thread; 12 µs from inside). See [`WholeInPool`] for when.
        match pool
            .filter(|_| !main.calls && opts.communicator.is_none())
            .and_then(|p| WholeInPool::claim().map(|g| (p, g)))
        {
            Some((p, _claim)) => p.install(|| {
                // The other threads wait for this execution's splits awake (`threads::KeepWarm`).
                let _warm = if self.spin { crate::threads::KeepWarm::start() } else { None };
                ex.run_steps(main)
            })?,
            None => ex.run_steps(main)?,
        }
        let missing = |v: ValueId| internal(format!("output {v} was not computed"));
        match results {
            Results::New(out) => {
                for (k, &v) in main.outputs.iter().enumerate() {
                    // A value returned twice is shared by its buffers.
                    let env = &mut ex.st.env;
                    let t =
                        if main.outputs[k + 1..].contains(&v) { env[v.index()].clone() } else { env[v.index()].take() };
                    let t = t.ok_or_else(|| missing(v))?;
                    out.push(Buffer::from_storage(t.shape, t.data)?);
                }
            }
            Results::Into(bufs) => {
                for (k, (&v, buf)) in main.outputs.iter().zip(bufs).enumerate() {
                    let t = ex.st.env[v.index()].as_mut().ok_or_else(|| missing(v))?;
                    let old = buf.replace_storage(t.data.clone())?;
                    if main.outputs[k + 1..].contains(&v) {
                        continue;
                    }
                    // The caller's previous storage (of the same size, checked) goes where the
                    // next execution writes this result: a loop output's own storage (the sweep
                    // after the run puts it in its memory slot), or the slot an alias reads.
                    match plan.retain[v.index()] {
                        Retain::Slot(_) => t.data = old,
                        Retain::AliasOf(s) => ex.st.arena.fill_slot(s, old),
                        Retain::Shell | Retain::Constant => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks `inputs` (count, dtypes, shapes, `donate` flags, every buffer live) and only then
    /// stores their storage in `main`'s parameters' value slots: shared reads first, then the
    /// donated buffers moved out (a buffer passed twice, once donated, stays readable by the
    /// shared use), as [`Signature::take_inputs`] does, without allocating.
    fn bind_inputs(&self, plan: &Plan, st: &mut ExecState, inputs: &[&Buffer], donate: &[bool]) -> Result<()> {
        let sig = &self.sig;
        check_inputs(&sig.input_names, &sig.input_shapes, inputs, donate)?;
        let params = &plan.main().params;
        if params.len() != inputs.len() {
            return Err(internal(format!("{} parameters planned for {} inputs", params.len(), inputs.len())));
        }
        let donated = |i: usize| donate.get(i).copied().unwrap_or(false);
        for (i, buf) in inputs.iter().enumerate() {
            if !buf.is_live() {
                buf.storage().map_err(|e| self.name_param(e, i))?;
            }
        }
        for pass_donated in [false, true] {
            for (i, buf) in inputs.iter().enumerate() {
                if donated(i) != pass_donated {
                    continue;
                }
                let data = if pass_donated { buf.take_for_donation() } else { buf.storage() };
                let data = data.map_err(|e| self.name_param(e, i))?;
                let (p, used) = params[i];
                if used {
                    st.env[p.index()] = Some(st.arena.tensor(p, buf.shape(), data));
                }
            }
        }
        Ok(())
    }

    /// Adds "given as parameter i (name)" to a buffer-state error, keeping its kind.
    fn name_param(&self, e: Error, i: usize) -> Error {
        match e {
            Error::UseAfterFree { what, state } => Error::UseAfterFree {
                what: format!("{what} given as parameter {i} ({:?})", self.sig.input_names[i]),
                state,
            },
            other => other,
        }
    }
}

/// The claim of the one execution in the process that may run its whole step sequence inside
/// its pool ([`JitExecutable::run_on`]); released when dropped. Only one at a time: a pool
/// thread waiting for the pieces of a parallel split runs other queued pool jobs meanwhile, so
/// whole executions queued together would stack on one thread (each waiting for the one above it
/// and piling up its stack: `tests/onnx_node.rs`, executing on many threads, overflowed 2 MiB
/// pool stacks in debug builds). The others run each step from the caller's thread, where a
/// stolen job is one kernel. Also not for plans with calls (control flow and nested functions
/// recurse on the stack: they stay on the caller's thread, whose stack size the caller chose)
/// nor with a communicator (a collective step waits for the other ranks' executions, which must
/// not queue behind it for the pool's threads).
struct WholeInPool;

static WHOLE_IN_POOL: AtomicBool = AtomicBool::new(false);

impl WholeInPool {
    fn claim() -> Option<WholeInPool> {
        WHOLE_IN_POOL.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).ok().map(|_| WholeInPool)
    }
}

impl Drop for WholeInPool {
    fn drop(&mut self) {
        WHOLE_IN_POOL.store(false, Ordering::Release);
    }
}

/// Deepest nesting of Call/While/If/Sort bodies (recursive named functions stop here).
const MAX_DEPTH: usize = 200;

/// The state of one execution: a slot per value of the module (closures read their ancestors'
/// values by id), the pool, and the call depth.
struct Exec<'p> {
    plan: &'p Plan,
    st: &'p mut ExecState,
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
            let st = &mut *self.st;
            match step {
                Step::Loop(s) => run_loop(s, &mut st.env, &mut st.arena, &plan.retain, &mut st.loops, self.pool)?,
                Step::Kernel(s) if matches!(s.op, Op::AllReduce { .. }) => {
                    collective::run(s, &mut st.env, self.opts)
                        .map_err(|e| annotate(e, &plan.module, s.node, self.depth))?
                }
                Step::Kernel(s) => run_kernel(plan, s, st, self.pool, self.depth, &fp.drops[i])?,
                Step::Alias(s) => run_alias(s, st)?,
                Step::Call(s) => self.run_call(s)?,
            }
            if let (Some(p), Some(t)) = (&self.opts.profiler, started) {
                p.record(step_kind(step), t, || step_label(plan, fp, step));
            }
            let st = &mut *self.st;
            for v in &fp.drops[i] {
                if let Some(t) = st.env[v.index()].take() {
                    st.arena.release(*v, t, plan.retain[v.index()]);
                }
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
                self.st.env[p.index()] = Some(t);
            }
        }
        let r = self.run_steps(fp);
        self.depth -= 1;
        r?;
        let mut outs = Vec::with_capacity(fp.outputs.len());
        for &v in &fp.outputs {
            let t = self.st.env[v.index()].clone().ok_or_else(|| internal(format!("output {v} was not computed")))?;
            outs.push(t);
        }
        // The callee's own values are done; releasing them lets the caller hold the only
        // reference (a While state is then updated in place by the next iteration's loops).
        // Its constants stay: they are loaded once per execution and the callee may run again.
        for &v in &fp.outputs {
            if m.value(v).func == f && !is_constant(m, v) {
                self.st.env[v.index()] = None;
            }
        }
        for &(p, _) in &fp.params {
            self.st.env[p.index()] = None;
        }
        Ok(outs)
    }

    fn run_call(&mut self, s: &CallStep) -> Result<()> {
        let plan = self.plan;
        let m = &plan.module;
        let name = m.node(s.node).op.op_type();
        let inputs = s.inputs.iter().map(|&v| slot(&self.st.env, v)).collect::<Result<Vec<_>>>()?;
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
            self.st.env[s.outputs[k].index()] = Some(t);
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
    st: &mut ExecState,
    pool: Option<&rayon::ThreadPool>,
    nesting: usize,
    dying: &[ValueId],
) -> Result<()> {
    let packed = s.fast.as_ref().map_or(&[][..], |f| f.prepacked_operands());
    // A DynamicUpdateSlice whose operand dies here may write over the operand's storage (when
    // nothing else holds it: a donated input or an intermediate), so that a KV cache threaded
    // through a decode step is not copied per token.
    let in_place = matches!(s.op, Op::DynamicUpdateSlice)
        && s.fast.is_some()
        && s.inputs.first().is_some_and(|x| dying.contains(x) && !s.inputs[1..].contains(x));
    let ExecState { env, arena, kernel_inputs: ins, kernel_outputs: into, repeated, .. } = st;
    ins.clear();
    // The operands are moved out of their value slots while the kernel runs (and back after),
    // so that no tensor is copied.
    let mut gathered = Ok(());
    for (i, &v) in s.inputs.iter().enumerate() {
        let t = if packed.contains(&i) {
            // Captured by the fast kernel at compile time: shape only, no data.
            let empty = arena.empty();
            Some(arena.tensor(v, plan.module.shape(v), empty))
        } else if let Some(first) = s.inputs[..i].iter().position(|&u| u == v) {
            let src = &ins[first];
            Some(match repeated.iter().position(|t| t.shape == src.shape) {
                Some(j) => {
                    let mut t = repeated.swap_remove(j);
                    t.data = src.data.clone();
                    t
                }
                None => src.clone(),
            })
        } else {
            env.get_mut(v.index()).and_then(Option::take)
        };
        match t {
            Some(t) => ins.push(t),
            None => {
                gathered = Err(internal(format!("value {v} is not available")));
                break;
            }
        }
    }
    let at = |e: Error| annotate(e, &plan.module, s.node, nesting);
    let outs = gathered.and_then(|()| {
        crate::memory::check_outputs(s.op.op_type(), &s.out_shapes).map_err(at)?;
        match &s.fast {
            // Results written into their memory slots' storage (kept from the previous
            // execution), or new storage the first time.
            Some(k) if k.writes_into() => {
                into.clear();
                for (&v, shape) in s.outputs.iter().zip(&s.out_shapes) {
                    let bytes = shape.byte_size().ok_or_else(|| internal(format!("result {v} has a dynamic shape")))?;
                    let data = match arena.slot_storage(plan.retain[v.index()], bytes) {
                        Some(d) => d,
                        None => Arc::new(AlignedBytes::try_recycled(bytes).map_err(at)?),
                    };
                    into.push(arena.tensor(v, shape, data));
                }
                k.run_into(ins, into, pool).map(|()| None)
            }
            Some(_) if in_place && super::movement::update_slice_in_place(ins).map_err(at)? => {
                // The result is the operand's storage; its value slot gets an empty shell.
                let empty = arena.empty();
                let shell = arena.tensor(s.inputs[0], &s.out_shapes[0], empty);
                Ok(Some(vec![std::mem::replace(&mut ins[0], shell)]))
            }
            Some(k) => k.run(ins, &s.out_shapes, pool).map(Some),
            None => crate::kernels::reference::eval(&s.op, ins, &s.out_shapes).map(Some),
        }
        .map_err(at)
    });
    for (i, t) in ins.drain(..).enumerate() {
        let v = s.inputs[i];
        if packed.contains(&i) {
            arena.release_shell(v, t);
        } else if !s.inputs[..i].contains(&v) {
            env[v.index()] = Some(t);
        } else {
            let mut t = t;
            t.data = arena.empty();
            repeated.push(t);
        }
    }
    let Some(outs) = outs? else {
        for (t, &v) in into.drain(..).zip(&s.outputs) {
            env[v.index()] = Some(t);
        }
        return Ok(());
    };
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

/// Runs alias step `s`: each output shares its input's storage, in the output's kept shape.
fn run_alias(s: &AliasStep, st: &mut ExecState) -> Result<()> {
    for (k, &(x, o)) in s.pairs.iter().enumerate() {
        let data = st.env.get(x.index()).and_then(Option::as_ref).map(|t| t.data.clone());
        let data = data.ok_or_else(|| internal(format!("value {x} is not available")))?;
        let shape = &s.out_shapes[k];
        if shape.byte_size() != Some(data.len()) {
            return Err(internal(format!("alias {o} of {x}: {} bytes for shape {shape}", data.len())));
        }
        st.env[o.index()] = Some(st.arena.tensor(o, shape, data));
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
pub(super) fn step_kind(step: &Step) -> EventKind {
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
pub(super) fn step_label(plan: &Plan, fp: &FuncPlan, step: &Step) -> String {
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
