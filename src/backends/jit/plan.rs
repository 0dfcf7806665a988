//! The execution plan of the "jit" backend: a flat list of steps over the values of `main`
//! (compiled loops, reference kernels, zero-copy aliases), preloaded constants, and the
//! liveness facts the executor uses to release and reuse buffers.
//!
//! Memory plan: every value lives in a per-execution slot; after step `i` the values whose last
//! reader is step `i` are released (`drops[i]`), so an intermediate buffer lives exactly from
//! its producing step to its last use. A loop output may be written over a `Full` input of the
//! same size that dies at that step (`LoopStep::in_place`); the executor only does so when it
//! holds the only reference to that input's storage, which is never the case for a caller's
//! (non-donated) input or a constant, and is the case for a donated input.
//!
//! Across executions ([`Retain`], [`Arena`](super::loops::Arena)): every loop output of `main`,
//! and every result of a fast kernel that writes into given storage (GEMM:
//! [`FastKernel::writes_into`](super::fast::FastKernel::writes_into)), is planned into a
//! memory slot of its byte size, shared by values whose lifetimes (with their aliases') do not
//! overlap; an execution state keeps the slots' storage and the shapes of released values, so
//! that the next execution writes its loop outputs into the same memory without allocating.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fast::{PackJob, Packed};
use super::loops::{LoopStep, Retain};
use crate::backends::interp::captures;
use crate::error::{Error, Result};
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{Op, UnaryOp};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;
use crate::lower::cluster::{Clustering, Item, cluster_function};

/// One node run by its reference kernel.
pub(crate) struct KernelStep {
    /// The node (for error messages).
    pub node: NodeId,
    /// Its op.
    pub op: Op,
    /// Operands.
    pub inputs: Vec<ValueId>,
    /// Results.
    pub outputs: Vec<ValueId>,
    /// Result shapes (static, unnamed).
    pub out_shapes: Vec<Shape>,
    /// A specialised kernel for this node (GEMM, fused kernels), when one applies.
    pub fast: Option<Box<dyn super::fast::FastKernel>>,
}

/// Outputs that share their input's storage (Identity, Reshape, barriers).
pub(crate) struct AliasStep {
    /// The node.
    pub node: NodeId,
    /// `(input, output)` pairs.
    pub pairs: Vec<(ValueId, ValueId)>,
    /// Shape of each output.
    pub out_shapes: Vec<Shape>,
}

/// One step of the plan.
pub(crate) enum Step {
    /// A compiled loop.
    Loop(LoopStep),
    /// A kernel: a fast kernel when one was prepared, else the reference kernel.
    Kernel(KernelStep),
    /// A zero-copy alias.
    Alias(AliasStep),
    /// Control flow running nested plans.
    Call(CallStep),
}

impl Step {
    pub(crate) fn reads(&self) -> Vec<ValueId> {
        match self {
            Step::Loop(s) => s.inputs.clone(),
            Step::Kernel(s) => {
                let packed = s.fast.as_ref().map_or(&[][..], |f| f.prepacked_operands());
                s.inputs.iter().enumerate().filter(|(i, _)| !packed.contains(i)).map(|(_, &v)| v).collect()
            }
            Step::Alias(s) => s.pairs.iter().map(|p| p.0).collect(),
            Step::Call(s) => s.inputs.iter().chain(&s.captures).copied().collect(),
        }
    }

    fn writes(&self) -> Vec<ValueId> {
        match self {
            Step::Loop(s) => s.outputs.clone(),
            Step::Kernel(s) => s.outputs.clone(),
            Step::Alias(s) => s.pairs.iter().map(|p| p.1).collect(),
            Step::Call(s) => s.outputs.clone(),
        }
    }
}

/// A node whose semantics run other functions of the module (Call, While, If, Sort: what it
/// runs is its op in the plan's module); the callees run their own [`FuncPlan`]s.
pub(crate) struct CallStep {
    /// The node.
    pub node: NodeId,
    /// Operands.
    pub inputs: Vec<ValueId>,
    /// Values of enclosing functions the callees read (they must live until the step is done).
    pub captures: Vec<ValueId>,
    /// Results.
    pub outputs: Vec<ValueId>,
    /// Result shapes.
    pub out_shapes: Vec<Shape>,
}

/// The steps of one function of the module.
pub(crate) struct FuncPlan {
    /// The function.
    pub func: FuncId,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// `drops[i]`: values of this function released after step `i`.
    pub drops: Vec<Vec<ValueId>>,
    /// Parameters, and whether each is read or returned.
    pub params: Vec<(ValueId, bool)>,
    /// Returned values.
    pub outputs: Vec<ValueId>,
    /// The clusters and schedule the steps come from.
    pub clustering: Clustering,
    /// Whether some step is a call (control flow or a nested function: it recurses on the
    /// executing thread's stack).
    pub calls: bool,
}

/// A module lowered for the executor: one [`FuncPlan`] per function (main, named functions,
/// closures). Immutable; shared by every execution.
pub(crate) struct Plan {
    /// The optimised module (for dumps and error messages; constant payloads that the plan
    /// holds elsewhere or that a fast kernel captured are emptied).
    pub module: Module,
    /// Indexed by `FuncId`.
    pub funcs: Vec<FuncPlan>,
    /// Constants read by some step or returned, with their data (loaded once per execution).
    pub constants: Vec<(ValueId, Tensor)>,
    /// Size of the value arena (slots per execution; values are module-wide).
    pub num_values: usize,
    /// What an execution state keeps of each value when it is released (indexed by value).
    pub retain: Vec<Retain>,
    /// Number of memory slots of `main`'s loop outputs ([`Retain::Slot`]).
    pub num_slots: usize,
    /// Where planning spent its time.
    pub times: PlanTimes,
}

/// Time spent in each stage of [`build`] (for the `tracing` summary and the compile report).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PlanTimes {
    /// Clustering (deciding what fuses into loops).
    pub clustering: Duration,
    /// Cranelift code generation of the loops (cached kernels cost little).
    pub codegen: Duration,
    /// Packing constant GEMM operands ([`pack_constants`]).
    pub packing: Duration,
    /// Preparing fast kernels (GEMM geometry, fused-kernel selection).
    pub kernels: Duration,
    /// Loading the plan's constants into aligned storage.
    pub constants: Duration,
    /// The packed GEMM operands (bytes made or shared, time spent hashing).
    pub packed: super::shared::Accounting,
    /// The plan's constants (bytes made or shared, time spent hashing).
    pub loaded: super::shared::Accounting,
}

impl Plan {
    /// The plan of `main`.
    pub(crate) fn main(&self) -> &FuncPlan {
        &self.funcs[self.module.main.index()]
    }
}

use crate::backends::signature::unnamed;

fn internal(msg: String) -> Error {
    Error::invalid("jit compile", msg)
}

/// Why `m` cannot be planned (then the interpreter runs it), or `None`: only the dynamic shapes
/// `passes::specialize` cannot make static are left to the interpreter (collectives are planned,
/// `super::collective`).
pub(crate) fn needs_interpreter(m: &Module) -> Option<String> {
    crate::passes::specialize::unsupported(m)
}

/// Whether `m` has dynamic shapes or shape-computing ops (`DynamicShape`,
/// `DynamicDimensionSize`, `DynamicReshape`): the jit then plans one specialisation of it per
/// binding of its axes (`super::specialize`).
pub(crate) fn is_dynamic(m: &Module) -> bool {
    m.functions.iter().any(|f| {
        f.params.iter().any(|&p| m.shape(p).is_dynamic())
            || f.body.iter().any(|&n| {
                let node = m.node(n);
                matches!(node.op, Op::DynamicShape | Op::DynamicDimensionSize { .. } | Op::DynamicReshape { .. })
                    || node.outputs.iter().any(|&v| m.shape(v).is_dynamic())
            })
    })
}

/// How [`build`] compiles a module's loops.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PlanOptions {
    /// Record each kernel's disassembly (for dumps).
    pub disasm: bool,
    /// Fused float Sum/Product reductions accumulate in element order (bit-identical to the
    /// reference kernels) instead of in vector partial sums.
    pub ordered: bool,
    /// Loops whose outputs take at least this many bytes also get a variant writing them with
    /// non-temporal stores ([`crate::codegen::compile_streaming`]); `None`: never.
    pub stream_min_bytes: Option<usize>,
    /// Constant-filter 3×3 stride-1 convolutions may use the Winograd kernel (`winograd=on`).
    pub winograd: bool,
    /// Consecutive convolutions over large planes run as one step, image by image (`chain`).
    pub conv_chains: bool,
    /// Inverted residual blocks whose expanded image takes more than this many bytes run as one
    /// step, band by band (`block`); `None`: none do.
    pub conv_blocks: Option<usize>,
    /// Threads of the pool the plan runs on (set by [`build`]).
    pub threads: usize,
}

/// Lowers `module` (verified by `compile_jit`, so within the nesting limit; optimised, accepted
/// by [`needs_interpreter`]): clusters every function, compiles every cluster, prepares fast
/// kernels and computes liveness.
pub(crate) fn build(mut module: Module, opts: PlanOptions, pool: Option<&rayon::ThreadPool>) -> Result<Plan> {
    let mut times = PlanTimes::default();
    let opts = PlanOptions { threads: pool.map_or(1, |p| p.current_num_threads()), ..opts };
    let t = Instant::now();
    let packed = pack_constants(&mut module, pool, &mut times.packed, opts.winograd)?;
    times.packing = t.elapsed();
    let m = &module;
    if m.func(m.main).outputs.is_none() {
        return Err(Error::invalid("compile", "main has not returned"));
    }
    let nf = m.functions.len();
    let mut memo = vec![None; nf];
    let mut busy = vec![false; nf];
    let mut funcs = Vec::with_capacity(nf);
    // Values some step (of any function) reads, or some function returns.
    let mut needed = vec![false; m.values.len()];
    for fi in 0..nf {
        let f = FuncId(fi as u32);
        let fp = build_function(m, f, opts, &packed, &mut memo, &mut busy, &mut times)?;
        for s in &fp.steps {
            for v in s.reads() {
                needed[v.index()] = true;
            }
        }
        for &v in &fp.outputs {
            needed[v.index()] = true;
        }
        funcs.push(fp);
    }

    let t = Instant::now();
    let mut constants = vec![];
    let mut emptied = vec![];
    for f in &m.functions {
        for &n in &f.body {
            let node = m.node(n);
            if let Op::Constant(data) = &node.op {
                let v = *node.outputs.first().ok_or_else(|| internal(format!("constant {n} has no output")))?;
                emptied.push(n);
                if !needed[v.index()] {
                    continue;
                }
                let shape = unnamed(m.shape(v));
                if shape.byte_size() != Some(data.0.len()) {
                    return Err(internal(format!("constant {n}: {} bytes for shape {shape}", data.0.len())));
                }
                constants.push((v, Tensor { shape, data: super::shared::constant(&data.0, &mut times.loaded) }));
            }
        }
    }
    times.constants = t.elapsed();
    // The plan holds the constants it needs; the module keeps its structure for dumps and
    // messages but not a second copy of the payloads.
    for n in emptied {
        if let Op::Constant(data) = &mut module.nodes[n.index()].op {
            data.0 = Arc::new(Vec::new());
        }
    }
    let num_values = module.values.len();
    let mut retain = vec![Retain::Shell; num_values];
    for (v, _) in &constants {
        retain[v.index()] = Retain::Constant;
    }
    let num_slots = assign_slots(&funcs[module.main.index()], &mut retain);
    Ok(Plan { module, funcs, constants, num_values, retain, num_slots, times })
}

/// The memory plan of `main`'s loop outputs and write-into kernels' results: gives each a slot ([`Retain::Slot`]) of its byte
/// size, shared by values whose lifetimes do not overlap, and returns the number of slots.
///
/// A value's storage lives as long as the value and every alias of it (Reshape, Identity, …:
/// [`AliasStep`]s share their input's storage), so a slot is free again once the last member of
/// its alias group is released. A loop output written over a dying input (`in_place`) takes
/// that input's slot when the input is the last live member of its group (its storage is then
/// uniquely held at run time); over a kernel's result without a slot it gets none, as
/// the kernel provides fresh storage every execution; over a parameter or a constant (shared with the
/// caller or the plan, so never written in place) it gets its own slot. Slots of `main`'s
/// results are never freed. Other functions' values get no slot (their results flow back to
/// their callers, and a recursive function's values are live at several depths at once).
fn assign_slots(fp: &FuncPlan, retain: &mut [Retain]) -> usize {
    let mut slot_bytes: Vec<usize> = Vec::new();
    let mut free: HashMap<usize, Vec<u32>> = HashMap::new();
    // Alias groups: the value owning the storage (`root`) and the number of live members.
    let mut root: HashMap<ValueId, ValueId> = HashMap::new();
    let mut live: HashMap<ValueId, usize> = HashMap::new();
    fn take(free: &mut HashMap<usize, Vec<u32>>, slot_bytes: &mut Vec<usize>, bytes: usize) -> u32 {
        if let Some(s) = free.get_mut(&bytes).and_then(Vec::pop) {
            return s;
        }
        slot_bytes.push(bytes);
        (slot_bytes.len() - 1) as u32
    }
    for (i, step) in fp.steps.iter().enumerate() {
        match step {
            Step::Loop(ls) => {
                for (j, &v) in ls.outputs.iter().enumerate() {
                    let Some(bytes) = ls.out_shapes[j].byte_size() else { continue };
                    let over = ls.in_place[j].map(|k| ls.inputs[k]);
                    let inherited = over.and_then(|u| {
                        let r = *root.get(&u)?;
                        match retain[r.index()] {
                            Retain::Slot(s) if live.get(&r) == Some(&1) => Some((r, s)),
                            _ => None,
                        }
                    });
                    let over_kernel_result = over.is_some_and(|u| {
                        !root.contains_key(&u)
                            && !fp.params.iter().any(|&(p, _)| p == u)
                            && retain[u.index()] == Retain::Shell
                    });
                    match inherited {
                        // The dying input's group ends here; `v` continues it in the same slot.
                        Some((r, s)) => {
                            retain[v.index()] = Retain::Slot(s);
                            root.insert(v, r);
                            *live.entry(r).or_insert(0) += 1;
                        }
                        _ if over_kernel_result => {}
                        _ => {
                            let s = take(&mut free, &mut slot_bytes, bytes);
                            retain[v.index()] = Retain::Slot(s);
                            root.insert(v, v);
                            live.insert(v, 1);
                        }
                    }
                }
            }
            Step::Alias(a) => {
                for &(x, o) in &a.pairs {
                    if let Some(&r) = root.get(&x) {
                        root.insert(o, r);
                        *live.entry(r).or_insert(0) += 1;
                        if let Retain::Slot(s) = retain[r.index()] {
                            retain[o.index()] = Retain::AliasOf(s);
                        }
                    }
                }
            }
            // A kernel writing into given storage: each result gets a slot of its own.
            Step::Kernel(k) if k.fast.as_ref().is_some_and(|f| f.writes_into()) => {
                for (&v, shape) in k.outputs.iter().zip(&k.out_shapes) {
                    let Some(bytes) = shape.byte_size() else { continue };
                    let s = take(&mut free, &mut slot_bytes, bytes);
                    retain[v.index()] = Retain::Slot(s);
                    root.insert(v, v);
                    live.insert(v, 1);
                }
            }
            Step::Kernel(_) | Step::Call(_) => {}
        }
        for v in &fp.drops[i] {
            let Some(&r) = root.get(v) else { continue };
            let n = live.get_mut(&r).map_or(0, |n| {
                *n = n.saturating_sub(1);
                *n
            });
            if n == 0
                && let Retain::Slot(s) = retain[r.index()]
            {
                free.entry(slot_bytes[s as usize]).or_default().push(s);
            }
        }
    }
    slot_bytes.len()
}

fn build_function(
    m: &Module,
    f: FuncId,
    opts: PlanOptions,
    packed: &Packed,
    memo: &mut Vec<Option<BTreeSet<ValueId>>>,
    busy: &mut Vec<bool>,
    times: &mut PlanTimes,
) -> Result<FuncPlan> {
    let fd = m.func(f);
    let outputs: Vec<ValueId> = fd.outputs.clone().unwrap_or_default();
    let t = Instant::now();
    let mut clustering = cluster_function(m, f);
    times.clustering += t.elapsed();
    trace_clusters(m, f, &clustering);
    for c in &mut clustering.clusters {
        if let Some(r) = &mut c.kernel.reduce {
            r.ordered = opts.ordered;
        }
    }
    // Pairs of nodes run as one step (a tanh GELU in its dense's GEMM epilogue, a residual add
    // inside its LayerNorm: `merge`).
    let t = Instant::now();
    let mut merges = super::merge::find(m, f, &clustering, packed)?;
    times.kernels += t.elapsed();
    let mut steps = Vec::with_capacity(clustering.schedule.len());
    for item in &clustering.schedule {
        if merges.skips(*item) {
            continue;
        }
        if let Item::Node(n) = *item
            && let Some((x, o)) = merges.aliases.remove(&n)
        {
            steps.push(Step::Alias(AliasStep { node: n, pairs: vec![(x, o)], out_shapes: vec![unnamed(m.shape(o))] }));
            continue;
        }
        if let Item::Node(n) = *item
            && let Some(mg) = merges.steps.remove(&n)
        {
            tracing::debug!(target: "tensorjit::jit", node = %n, kernel = %mg.fast.describe(), "merged step");
            steps.push(Step::Kernel(KernelStep {
                node: n,
                op: m.node(n).op.clone(),
                out_shapes: mg.outputs.iter().map(|&v| unnamed(m.shape(v))).collect(),
                inputs: mg.inputs,
                outputs: mg.outputs,
                fast: Some(mg.fast),
            }));
            continue;
        }
        let step = match *item {
            Item::Cluster(ci) => {
                let c = &clustering.clusters[ci];
                let t = Instant::now();
                let code = if opts.disasm {
                    crate::codegen::compile_with_disasm(&c.kernel)?
                } else {
                    crate::codegen::compile(&c.kernel)?
                };
                let mut step = LoopStep::new(m, ci, c, code);
                let out_bytes: usize = step.out_shapes.iter().filter_map(Shape::byte_size).sum();
                if opts.stream_min_bytes.is_some_and(|min| out_bytes >= min && out_bytes > 0) {
                    step.streaming = crate::codegen::compile_streaming(&c.kernel, opts.disasm)?;
                }
                times.codegen += t.elapsed();
                Step::Loop(step)
            }
            Item::Node(n) => {
                let node = m.node(n);
                let out_shapes: Vec<Shape> = node.outputs.iter().map(|&v| unnamed(m.shape(v))).collect();
                let alias = |pairs: Vec<(ValueId, ValueId)>| {
                    Step::Alias(AliasStep { node: n, pairs, out_shapes: out_shapes.clone() })
                };
                let call = |memo: &mut Vec<Option<BTreeSet<ValueId>>>, busy: &mut Vec<bool>| {
                    let mut caps = BTreeSet::new();
                    for c in node.op.callees() {
                        caps.extend(captures(m, c, memo, busy));
                    }
                    Step::Call(CallStep {
                        node: n,
                        inputs: node.inputs.clone(),
                        captures: caps.into_iter().collect(),
                        outputs: node.outputs.clone(),
                        out_shapes: out_shapes.clone(),
                    })
                };
                match &node.op {
                    Op::Unary(UnaryOp::Identity) | Op::OptimizationBarrier | Op::Reshape { .. } => {
                        alias(node.inputs.iter().copied().zip(node.outputs.iter().copied()).collect())
                    }
                    Op::SchedulingBarrier => {
                        let x = *node.inputs.first().ok_or_else(|| internal(format!("node {n}: no operand")))?;
                        alias(node.outputs.iter().map(|&o| (x, o)).collect())
                    }
                    Op::Call { .. } | Op::While { .. } | Op::If { .. } | Op::Sort { .. } => call(memo, busy),
                    Op::Constant(_) => return Err(internal(format!("constant {n} scheduled as a step"))),
                    op => Step::Kernel(KernelStep {
                        node: n,
                        fast: {
                            let t = Instant::now();
                            let fast = prepare_fast(m, n, packed)?;
                            times.kernels += t.elapsed();
                            if let Some(k) = &fast {
                                tracing::debug!(
                                    target: "tensorjit::jit",
                                    node = %n,
                                    op = %op.op_type(),
                                    kernel = %k.describe(),
                                    "fast kernel selected"
                                );
                            }
                            fast
                        },
                        op: op.clone(),
                        inputs: node.inputs.clone(),
                        outputs: node.outputs.clone(),
                        out_shapes,
                    }),
                }
            }
        };
        steps.push(step);
    }

    let keep: HashSet<ValueId> = outputs.iter().copied().collect();
    let steps = match opts.conv_blocks {
        Some(min_bytes) => form_blocks(steps, &keep, min_bytes, opts.threads),
        None => steps,
    };
    let mut steps = if opts.conv_chains { form_chains(steps, &keep, opts.threads) } else { steps };

    // Liveness of this function's own values: the last step reading each; returned values are
    // never released, nor are constants of a closure (they are loaded once per execution and a
    // closure may run many times).
    let own = |v: ValueId| m.value(v).func == f;
    let keep: HashSet<ValueId> = outputs
        .iter()
        .copied()
        .chain(
            fd.body
                .iter()
                .filter(|&&n| f != m.main && matches!(m.node(n).op, Op::Constant(_)))
                .flat_map(|&n| m.node(n).outputs.iter().copied()),
        )
        .collect();
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        for v in s.reads() {
            if own(v) {
                last.insert(v, i);
            }
        }
    }
    let mut drops = vec![Vec::new(); steps.len()];
    for (i, s) in steps.iter().enumerate() {
        // Results nobody reads are released right after they are made.
        for v in s.writes() {
            if !last.contains_key(&v) && !keep.contains(&v) {
                drops[i].push(v);
            }
        }
    }
    let mut lasts: Vec<(ValueId, usize)> = last.iter().map(|(&v, &i)| (v, i)).collect();
    lasts.sort();
    for (v, i) in lasts {
        if !keep.contains(&v) {
            drops[i].push(v);
        }
    }
    for (i, s) in steps.iter_mut().enumerate() {
        if let Step::Loop(ls) = s {
            let kernel = &clustering.clusters[ls.cluster].kernel;
            ls.plan_memory(m, kernel, |v| last.get(&v) == Some(&i) && !keep.contains(&v));
        }
    }
    let params = fd.params.iter().map(|&p| (p, last.contains_key(&p) || keep.contains(&p))).collect();
    let calls = steps.iter().any(|s| matches!(s, Step::Call(_)));
    Ok(FuncPlan { func: f, steps, drops, params, outputs, clustering, calls })
}

/// Packed weights at least this large hand the heap their source leaves back to the system
/// (`memory::release_free_heap`); smaller ones are not worth the allocator's walk.
const TRIM_MIN_BYTES: usize = 1 << 20;

/// Prepares every constant operand the fast kernels take packed ([`PackJob`]: GEMM right-hand
/// sides, convolution filters), in parallel on `pool` when there is one. Constants
/// read only as packed operands leave the module first (the jobs hold their bytes), so that each
/// one's bytes are freed once packed rather than at the end of the compile.
pub(crate) fn pack_constants(
    module: &mut Module,
    pool: Option<&rayon::ThreadPool>,
    acct: &mut super::shared::Accounting,
    winograd: bool,
) -> Result<Packed> {
    use rayon::prelude::*;
    let m = &*module;
    let mut jobs = Vec::new();
    for f in &m.functions {
        for &n in &f.body {
            if let Some(j) = super::dot::pack_job(m, n)? {
                jobs.push(j);
            } else if let Some(j) = super::conv_backward::pack_job(m, n) {
                jobs.push(j);
            } else if let Some(j) = super::conv::pack_job(m, n, winograd) {
                jobs.push(j);
            }
        }
    }
    if jobs.is_empty() {
        return Ok(Packed::default());
    }
    let packers: HashSet<NodeId> = jobs.iter().map(|j| j.node).collect();
    // How often each value is read other than as a packed operand (returning it counts).
    let mut readers = vec![0u32; m.values.len()];
    for f in &m.functions {
        for &v in f.outputs.iter().flatten() {
            readers[v.index()] += 1;
        }
        for &n in &f.body {
            for (i, &v) in m.node(n).inputs.iter().enumerate() {
                if i != 1 || !packers.contains(&n) {
                    readers[v.index()] += 1;
                }
            }
        }
    }
    let mut released: Vec<NodeId> = jobs
        .iter()
        .filter_map(|j| {
            let v = m.node(j.node).inputs[1];
            match m.value(v).def {
                ValueDef::Node { node, .. } if readers[v.index()] == 0 => Some(node),
                _ => None,
            }
        })
        .collect();
    // A concatenation of constants packed block by block (`dot::weight_blocks`) is never
    // computed: it becomes a released constant too, and so do the constants only it read.
    let mut i = 0;
    while let Some(&c) = released.get(i) {
        i += 1;
        let node = &mut module.nodes[c.index()];
        match &mut node.op {
            Op::Constant(data) => data.0 = Arc::new(Vec::new()),
            Op::Concatenate { .. } => {
                node.op = Op::Constant(crate::ir::op::ConstData(Arc::new(Vec::new())));
                for v in std::mem::take(&mut node.inputs) {
                    readers[v.index()] -= 1;
                    match module.value(v).def {
                        ValueDef::Node { node, .. }
                            if readers[v.index()] == 0 && matches!(module.node(node).op, Op::Constant(_)) =>
                        {
                            released.push(node)
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // Constants outside every body (left behind by rewrites: the egg pass re-creates the
    // constants of its fused ops) are never executed: their bytes go too, so that a released
    // weight is held by its job alone.
    module.release_unreachable_constants();
    // Jobs whose source leaves with them, large enough to hand the freed heap back to the
    // system afterwards (so that a compile's peak is not every source beside every packed copy).
    let trim: HashSet<NodeId> = jobs
        .iter()
        .filter(|j| {
            let v = module.node(j.node).inputs[1];
            readers[v.index()] == 0 && module.shape(v).byte_size().is_some_and(|b| b >= TRIM_MIN_BYTES)
        })
        .map(|j| j.node)
        .collect();
    // The packed panels of this compile share huge-page chunks (`memory::arena`): fresh 4 KiB
    // pages cost more to fault in than the packing itself.
    let arena = Arc::new(crate::memory::arena::Arena::new());
    let run = |j: PackJob| {
        let mut a = super::shared::Accounting::default();
        let node = j.node;
        let r = crate::memory::arena::with_arena(&arena, || (j.run)(&mut a));
        if trim.contains(&node) {
            crate::memory::release_free_heap();
        }
        r.map(|r| ((node, r), a))
    };
    let done: Vec<_> = match pool {
        Some(p) if jobs.len() > 1 => p.install(|| jobs.into_par_iter().map(run).collect::<Result<Vec<_>>>())?,
        _ => jobs.into_iter().map(run).collect::<Result<Vec<_>>>()?,
    };
    let mut packed = Packed::default();
    for ((n, p), a) in done {
        acct.add(&a);
        packed.0.insert(n, p);
    }
    Ok(packed)
}

/// Reports the clusters formed in function `f` (debug: counts; trace: the listing).
fn trace_clusters(m: &Module, f: FuncId, c: &Clustering) {
    if !tracing::enabled!(target: "tensorjit::jit", tracing::Level::DEBUG) {
        return;
    }
    let nodes: usize = c.clusters.iter().map(|c| c.nodes.len()).sum();
    let reductions = c.clusters.iter().filter(|c| c.kernel.reduce.is_some()).count();
    tracing::debug!(
        target: "tensorjit::jit",
        function = %m.func_label(f),
        clusters = c.clusters.len(),
        fused_nodes = nodes,
        with_reduction = reductions,
        scheduled = c.schedule.len(),
        "clusters formed"
    );
    if tracing::enabled!(target: "tensorjit::jit", tracing::Level::TRACE) {
        tracing::trace!(target: "tensorjit::jit", function = %m.func_label(f), "clusters:\n{}", crate::lower::cluster::describe(m, c));
    }
}

impl Plan {
    /// Reports the plan (debug: step counts and planning times; trace: [`Plan::describe`]).
    pub(crate) fn trace_summary(&self, elapsed: Duration) {
        if !tracing::enabled!(target: "tensorjit::jit", tracing::Level::DEBUG) {
            return;
        }
        let (mut loops, mut kernels, mut fast, mut aliases, mut calls) = (0, 0, 0, 0, 0);
        for s in self.funcs.iter().flat_map(|f| &f.steps) {
            match s {
                Step::Loop(_) => loops += 1,
                Step::Kernel(k) => {
                    kernels += 1;
                    fast += usize::from(k.fast.is_some());
                }
                Step::Alias(_) => aliases += 1,
                Step::Call(_) => calls += 1,
            }
        }
        tracing::debug!(
            target: "tensorjit::jit",
            functions = self.funcs.len(),
            loops,
            kernels,
            fast_kernels = fast,
            aliases,
            calls,
            constants = self.constants.len(),
            clustering_ms = self.times.clustering.as_secs_f64() * 1e3,
            codegen_ms = self.times.codegen.as_secs_f64() * 1e3,
            packing_ms = self.times.packing.as_secs_f64() * 1e3,
            kernels_ms = self.times.kernels.as_secs_f64() * 1e3,
            constants_ms = self.times.constants.as_secs_f64() * 1e3,
            hashing_ms = (self.times.packed.hashing + self.times.loaded.hashing).as_secs_f64() * 1e3,
            planning_ms = elapsed.as_secs_f64() * 1e3,
            "plan built"
        );
        if tracing::enabled!(target: "tensorjit::jit", tracing::Level::TRACE) {
            tracing::trace!(target: "tensorjit::jit", "plan:\n{}", self.describe());
        }
    }

    /// Adds the planning phases to `report` (`planning`: the whole of [`build`]) and the plan's
    /// constant memory to `mem`.
    pub(crate) fn report(
        &self,
        planning: Duration,
        report: &mut crate::api::CompileReport,
        mem: &mut crate::api::ConstantMemory,
    ) {
        let t = &self.times;
        let phases = [
            ("plan: clustering", t.clustering),
            ("plan: codegen", t.codegen),
            ("plan: gemm packing", t.packing),
            ("plan: fast kernels", t.kernels),
            ("plan: constants", t.constants),
        ];
        let listed: Duration = phases.iter().map(|p| p.1).sum();
        report.phases.extend(phases.iter().map(|(n, d)| (n.to_string(), *d)));
        report.phases.push(("plan: other".to_string(), planning.saturating_sub(listed)));
        report.hashing += t.packed.hashing + t.loaded.hashing;
        let (p, l) = (&t.packed, &t.loaded);
        mem.packed_bytes += p.owned_bytes + p.shared_bytes;
        mem.plan_bytes += l.owned_bytes + l.shared_bytes;
        mem.owned_bytes += p.owned_bytes + l.owned_bytes;
        mem.shared_bytes += p.shared_bytes + l.shared_bytes;
        mem.buffers += p.buffers + l.buffers;
    }

    /// A listing of every function's steps with their buffers (for dumps).
    pub(crate) fn describe(&self) -> String {
        let m = &self.module;
        let mut s = String::new();
        let shape = |v: ValueId| crate::ir::text::format_shape(m.shape(v));
        let _ = writeln!(
            s,
            "constants (loaded per execution): {}",
            list(self.constants.iter().map(|(v, _)| format!("{v}: {}", shape(*v))))
        );
        let order = std::iter::once(m.main.index()).chain((0..self.funcs.len()).filter(|&i| i != m.main.index()));
        for fi in order {
            let fp = &self.funcs[fi];
            let _ = writeln!(s, "\n{} ({}):", m.func_label(fp.func), fp.func);
            let _ = writeln!(
                s,
                "params: {}",
                list(fp.params.iter().map(|(p, used)| format!(
                    "{p}: {}{}",
                    shape(*p),
                    if *used { "" } else { " (unused)" }
                )))
            );
            for (i, st) in fp.steps.iter().enumerate() {
                let _ = writeln!(s, "step {i}: {}", describe_step(m, st, &self.retain));
                if !fp.drops[i].is_empty() {
                    let _ =
                        writeln!(s, "  release after step {i}: {}", list(fp.drops[i].iter().map(|v| v.to_string())));
                }
            }
            let _ = writeln!(s, "outputs: {}", list(fp.outputs.iter().map(|v| v.to_string())));
        }
        s
    }
}

fn describe_step(m: &Module, st: &Step, retain: &[Retain]) -> String {
    let shape = |v: ValueId| crate::ir::text::format_shape(m.shape(v));
    let storage = |v: ValueId| match retain.get(v.index()) {
        Some(Retain::Slot(s)) => format!("slot {s}"),
        _ => "new buffer".to_string(),
    };
    match st {
        Step::Loop(l) => format!(
            "loop cluster{} over {} elements ({} bytes each){} reads [{}] writes [{}]",
            l.cluster,
            l.len,
            l.esize,
            if l.streaming.is_some() {
                format!(", non-temporal stores when aligned (kernel-{}.stream.*)", l.cluster)
            } else {
                String::new()
            },
            list(l.inputs.iter().zip(&l.input_dies).map(|(v, d)| format!("{v}{}", if *d { " (dies)" } else { "" }))),
            list(l.outputs.iter().zip(&l.in_place).enumerate().map(|(j, (v, ip))| match ip {
                Some(k) => format!("{v}: {} (may reuse {}, else {})", shape(*v), l.inputs[*k], storage(*v)),
                None if j >= l.n_plain => format!("{v}: {} (reduced, {})", shape(*v), storage(*v)),
                None => format!("{v}: {} ({})", shape(*v), storage(*v)),
            }))
        ),
        Step::Kernel(k) => format!(
            "kernel {}{} (node {}) reads [{}] writes [{}]",
            k.op.op_type(),
            k.fast.as_ref().map_or(String::new(), |f| format!(" via {}", f.describe())),
            k.node,
            list(k.inputs.iter().map(|v| v.to_string())),
            list(k.outputs.iter().map(|v| format!("{v}: {} ({})", shape(*v), storage(*v))))
        ),
        Step::Alias(a) => format!(
            "alias (node {}) {}",
            a.node,
            list(a.pairs.iter().map(|(x, o)| format!("{o} = {x} (shared buffer)")))
        ),
        Step::Call(c) => {
            let what = match &m.node(c.node).op {
                Op::Call { func } => format!("call {}", m.func_label(*func)),
                Op::While { cond, body } => format!("while cond {cond} body {body}"),
                Op::If { then_branch, else_branch } => format!("if then {then_branch} else {else_branch}"),
                Op::Sort { comparator, axis, .. } => format!("sort axis {axis} comparator {comparator}"),
                other => other.op_type().to_string(),
            };
            format!(
                "{what} (node {}) reads [{}]{} writes [{}]",
                c.node,
                list(c.inputs.iter().map(|v| v.to_string())),
                if c.captures.is_empty() {
                    String::new()
                } else {
                    format!(" captures [{}]", list(c.captures.iter().map(|v| v.to_string())))
                },
                list(c.outputs.iter().map(|v| format!("{v}: {}", shape(*v))))
            )
        }
    }
}

fn list(it: impl Iterator<Item = String>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

/// The fast kernel for node `n` of `m`'s main function, if one applies: GEMM first, then the
/// hand-written fused kernels, then convolution, then the data-movement kernel.
fn prepare_fast(m: &Module, n: NodeId, packed: &Packed) -> Result<Option<Box<dyn super::fast::FastKernel>>> {
    if let Some(k) = super::dot::prepare(m, n, packed)? {
        return Ok(Some(k));
    }
    if let Some(k) = super::fused::prepare(m, n)? {
        return Ok(Some(k));
    }
    if let Some(k) = super::conv_backward::prepare(m, n, packed) {
        return Ok(Some(k));
    }
    if let Some(k) = super::conv::prepare(m, n, packed) {
        return Ok(Some(k));
    }
    if let Some(k) = super::pool::prepare(m, n) {
        return Ok(Some(k));
    }
    super::movement::prepare(m, n)
}

/// The image kernels of the first `N` of `steps` when each reads the previous one's result, which
/// `private` says no other step reads (an inverted residual block, [`super::block::qualify`], or
/// a depthwise convolution and projection pair, [`super::block::qualify_pair`], when they
/// qualify).
fn chained_convs<const N: usize>(
    steps: &[Option<Step>],
    private: impl Fn(ValueId) -> bool,
) -> Option<[super::conv::ImageConv; N]> {
    let kernels = steps
        .get(..N)?
        .iter()
        .map(|s| match s {
            Some(Step::Kernel(k)) if k.outputs.len() == 1 => Some(k),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    // A kernel without operands (e.g. a constant's materialisation) chains to nothing.
    let chained = kernels.windows(2).all(|p| p[1].inputs.first() == p[0].outputs.first() && private(p[0].outputs[0]));
    if !chained {
        return None;
    }
    let image = |k: &KernelStep| k.fast.as_deref()?.as_any()?.downcast_ref::<super::conv::ConvKernel>()?.per_image();
    kernels.iter().map(|k| image(k)).collect::<Option<Vec<_>>>()?.try_into().ok()
}

/// Regroups `steps` (one function's, in order): each three consecutive convolutions that form an
/// inverted residual block ([`super::block`]) whose expanded image takes more than `min_bytes`
/// become one step, and each depthwise convolution and projection left that form a pair on
/// `threads` threads. `keep`: values the function returns (or keeps).
fn form_blocks(steps: Vec<Step>, keep: &HashSet<ValueId>, min_bytes: usize, threads: usize) -> Vec<Step> {
    // How many steps read each value (a block's intermediates must be read by the block alone).
    let mut readers: HashMap<ValueId, usize> = HashMap::new();
    for s in &steps {
        for v in s.reads() {
            *readers.entry(v).or_default() += 1;
        }
    }
    let private = |v: ValueId| readers.get(&v) == Some(&1) && !keep.contains(&v);
    let mut steps: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(steps.len());
    let mut i = 0;
    while i < steps.len() {
        use super::block::{qualify, qualify_pair};
        // A block of three steps, else a pair of two: its length and image kernels.
        let found = chained_convs(&steps[i..], private)
            .filter(|[a, b, c]| qualify(a, b, c, min_bytes))
            .map(|[a, b, c]| (3, Some(a), b, c))
            .or_else(|| {
                let [b, c] = chained_convs(&steps[i..], private)?;
                qualify_pair(&b, &c, threads).then_some((2, None, b, c))
            });
        let Some((n, ea, eb, ec)) = found else {
            out.push(steps[i].take().expect("each step is taken once"));
            i += 1;
            continue;
        };
        let Some(Step::Kernel(a)) = steps[i].take() else { unreachable!("checked above") };
        let Some(Step::Kernel(c)) = steps[i + n - 1].take() else { unreachable!("checked above") };
        steps[i + 1..i + n - 1].fill_with(|| None);
        // Run-time operands: the block's input and the projection's residual (filters prepared).
        let mut inputs = vec![a.inputs[0]];
        if ec.has_residual() {
            inputs.extend(c.inputs.get(2).copied());
        }
        // The block stands for its expansion (for error messages and profiles).
        out.push(Step::Kernel(KernelStep {
            node: a.node,
            op: a.op,
            inputs,
            outputs: c.outputs,
            out_shapes: c.out_shapes,
            fast: Some(super::block::build(ea, eb, ec)),
        }));
        i += n;
    }
    out
}

/// Regroups `steps` (one function's, in order): each run of consecutive convolutions that may
/// run image by image becomes one chain step ([`super::chain`]). `keep`: values the function
/// returns (or keeps); `threads`: the pool's.
fn form_chains(steps: Vec<Step>, keep: &HashSet<ValueId>, threads: usize) -> Vec<Step> {
    use super::chain;
    let convs: Vec<_> = steps
        .iter()
        .map(|s| match s {
            Step::Kernel(k) => chain::qualify(k.fast.as_deref()?, k.outputs.len(), threads),
            _ => None,
        })
        .collect();
    let runs = chain::runs(&convs);
    if runs.is_empty() {
        return steps;
    }
    let reads: Vec<Vec<ValueId>> = steps.iter().map(Step::reads).collect();
    let mut convs = convs;
    let mut steps: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(steps.len());
    let mut next = runs.into_iter().peekable();
    let mut i = 0;
    while i < steps.len() {
        let Some(&(a, b)) = next.peek().filter(|&&(a, _)| a == i) else {
            out.push(steps[i].take().expect("each step is taken once"));
            i += 1;
            continue;
        };
        next.next();
        let read_after: HashSet<ValueId> = reads
            .iter()
            .enumerate()
            .filter(|&(j, _)| !(a..b).contains(&j))
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        // The chain step stands for its first convolution (for error messages and profiles).
        let Some(Step::Kernel(head)) = &steps[a] else { unreachable!("a chain holds kernel steps") };
        let (node, op) = (head.node, head.op.clone());
        let mut group = Vec::with_capacity(b - a);
        for j in a..b {
            let Some(Step::Kernel(k)) = steps[j].take() else { unreachable!("a chain holds kernel steps") };
            // Run-time operands: the input and the residual (the filter, operand 1, is prepared).
            let mut operands = smallvec::SmallVec::new();
            operands.push(k.inputs[0]);
            operands.extend(k.inputs.get(2).copied());
            group.push(chain::Member {
                operands,
                output: k.outputs[0],
                out_shape: k.out_shapes[0].clone(),
                conv: convs[j].take().expect("qualified above"),
            });
        }
        let c = chain::build(group, |v| read_after.contains(&v) || keep.contains(&v));
        out.push(Step::Kernel(KernelStep {
            node,
            op,
            inputs: c.inputs,
            outputs: c.outputs,
            out_shapes: c.out_shapes,
            fast: Some(c.kernel),
        }));
        i = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::api::{Backend, Builder};
    use crate::ir::dtype::DType;
    use crate::ir::module::ValueDef;
    use crate::ir::op::Op;
    use crate::ir::shape::Shape;

    #[test]
    fn packed_constants_let_go_of_their_bytes_in_every_node() {
        let backend: Arc<dyn Backend> = super::super::JitBackend::new("").unwrap();
        let b = Builder::new(backend, "packed");
        let f = b.main();
        let x = f.parameter("x", Shape::new(DType::Float32, &[4, 64])).unwrap();
        let data: Vec<f32> = (0..64 * 96).map(|i| (i % 7) as f32 - 3.0).collect();
        let w = f.constant(&data, &[64, 96]).unwrap();
        let y = f.matmul(x, w).unwrap();
        f.return_(&[y]).unwrap();
        let mut m = b.module();
        drop((f, b));
        // The weights' bytes, also held by a constant node outside every body (as a rewrite leaves
        // one behind).
        let ValueDef::Node { node: wn, .. } = m.value(w.id()).def else { panic!("a node defines the weights") };
        let Op::Constant(cd) = &m.node(wn).op else { panic!("the weights are a constant") };
        let bytes = cd.0.clone();
        let main = m.main;
        let dead = m.add_node(main, Op::Constant(cd.clone()), vec![], vec![m.shape(w.id()).clone()]);
        m.functions[main.index()].body.retain(|&n| n != dead);
        assert_eq!(Arc::strong_count(&bytes), 3);
        let mut acct = super::super::shared::Accounting::default();
        let packed = super::pack_constants(&mut m, None, &mut acct, false).unwrap();
        assert_eq!(packed.0.len(), 1, "the product's weights are packed");
        // Packed, the weights are held by nothing in the module any more: not the live constant
        // node, not the one outside the body.
        assert_eq!(Arc::strong_count(&bytes), 1);
        for n in [wn, dead] {
            let Op::Constant(d) = &m.node(n).op else { panic!("still a constant") };
            assert!(d.0.is_empty(), "node {n:?} let go of the bytes");
        }
    }
}
