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

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

pub(crate) use super::loops::LoopStep;
use crate::error::{Error, Result};
use crate::ir::module::{Module, NodeId, ValueId};
use crate::ir::op::{Op, UnaryOp};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;
use crate::lower::cluster::{Clustering, Item, cluster_function};
use crate::runtime::aligned::AlignedBytes;

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
}

impl Step {
    fn reads(&self) -> Vec<ValueId> {
        match self {
            Step::Loop(s) => s.inputs.clone(),
            Step::Kernel(s) => {
                let packed = s.fast.as_ref().map_or(&[][..], |f| f.prepacked_operands());
                s.inputs.iter().enumerate().filter(|(i, _)| !packed.contains(i)).map(|(_, &v)| v).collect()
            }
            Step::Alias(s) => s.pairs.iter().map(|p| p.0).collect(),
        }
    }

    fn writes(&self) -> Vec<ValueId> {
        match self {
            Step::Loop(s) => s.outputs.clone(),
            Step::Kernel(s) => s.outputs.clone(),
            Step::Alias(s) => s.pairs.iter().map(|p| p.1).collect(),
        }
    }
}

/// A module lowered for the flat executor. Immutable; shared by every execution.
pub(crate) struct Plan {
    /// The optimised module (for dumps and error messages).
    pub module: Module,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// `drops[i]`: values released after step `i`.
    pub drops: Vec<Vec<ValueId>>,
    /// Constants read by some step or returned, with their data.
    pub constants: Vec<(ValueId, Tensor)>,
    /// Parameters of `main`, and whether each is read or returned.
    pub params: Vec<(ValueId, bool)>,
    /// Returned values.
    pub outputs: Vec<ValueId>,
    /// Size of the value arena (slots per execution).
    pub num_values: usize,
    /// The clusters and schedule the steps come from.
    pub clustering: Clustering,
}

/// A shape with the same dtype and dims and no axis names.
pub(crate) fn unnamed(s: &Shape) -> Shape {
    Shape::new(s.dtype, &s.dims)
}

fn internal(msg: String) -> Error {
    Error::invalid("jit compile", msg)
}

/// Why `m` cannot use the flat plan (then the interpreter runs it), or `None`.
pub(crate) fn needs_interpreter(m: &Module) -> Option<String> {
    if m.functions.len() > 1 {
        return Some(format!(
            "the module has {} functions besides main (closures or named functions)",
            m.functions.len() - 1
        ));
    }
    let main = m.func(m.main);
    if let Some(&p) = main.params.iter().find(|&&p| m.shape(p).is_dynamic()) {
        return Some(format!("parameter {p} has a dynamic shape {}", m.shape(p)));
    }
    for &n in &main.body {
        let node = m.node(n);
        let dynamic = node.outputs.iter().chain(&node.inputs).any(|&v| m.shape(v).is_dynamic());
        let special = matches!(
            node.op,
            Op::Call { .. }
                | Op::While { .. }
                | Op::If { .. }
                | Op::Sort { .. }
                | Op::AllReduce { .. }
                | Op::DynamicReshape { .. }
                | Op::DynamicShape
                | Op::DynamicDimensionSize { .. }
        );
        if dynamic || special {
            let why = if dynamic { "has a dynamic shape" } else { "needs the interpreter's control flow" };
            return Some(format!("node {n} ({}) {why}", node.op.op_type()));
        }
    }
    None
}

/// Lowers `module` (verified, optimised, accepted by [`needs_interpreter`]): clusters `main`,
/// compiles every cluster (recording the disassembly when `disasm`) and computes liveness.
pub(crate) fn build(module: Module, disasm: bool) -> Result<Plan> {
    let m = &module;
    let main = m.func(m.main);
    let outputs: Vec<ValueId> =
        main.outputs.clone().ok_or_else(|| Error::invalid("compile", "main has not returned"))?;
    let clustering = cluster_function(m, m.main);
    let mut steps = Vec::with_capacity(clustering.schedule.len());
    for item in &clustering.schedule {
        let step = match *item {
            Item::Cluster(ci) => {
                let c = &clustering.clusters[ci];
                let code =
                    if disasm { crate::jit::compile_with_disasm(&c.kernel)? } else { crate::jit::compile(&c.kernel)? };
                Step::Loop(LoopStep::new(m, ci, c, code))
            }
            Item::Node(n) => {
                let node = m.node(n);
                let out_shapes: Vec<Shape> = node.outputs.iter().map(|&v| unnamed(m.shape(v))).collect();
                let alias = |pairs: Vec<(ValueId, ValueId)>| {
                    Step::Alias(AliasStep { node: n, pairs, out_shapes: out_shapes.clone() })
                };
                match &node.op {
                    Op::Unary(UnaryOp::Identity) | Op::OptimizationBarrier | Op::Reshape { .. } => {
                        alias(node.inputs.iter().copied().zip(node.outputs.iter().copied()).collect())
                    }
                    Op::SchedulingBarrier => {
                        let x = *node.inputs.first().ok_or_else(|| internal(format!("node {n}: no operand")))?;
                        alias(node.outputs.iter().map(|&o| (x, o)).collect())
                    }
                    Op::Constant(_) => return Err(internal(format!("constant {n} scheduled as a step"))),
                    op => Step::Kernel(KernelStep {
                        node: n,
                        fast: super::fast::prepare(m, n)?,
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

    // Liveness: the last step reading each value; returned values are never released.
    let returned: HashSet<ValueId> = outputs.iter().copied().collect();
    let mut last: Vec<Option<usize>> = vec![None; m.values.len()];
    for (i, s) in steps.iter().enumerate() {
        for v in s.reads() {
            last[v.index()] = Some(i);
        }
    }
    let mut drops = vec![Vec::new(); steps.len()];
    for (i, s) in steps.iter().enumerate() {
        // Results nobody reads are released right after they are made.
        for v in s.writes() {
            if last[v.index()].is_none() && !returned.contains(&v) {
                drops[i].push(v);
            }
        }
    }
    for (vi, l) in last.iter().enumerate() {
        let v = ValueId(vi as u32);
        if let Some(i) = *l
            && !returned.contains(&v)
        {
            drops[i].push(v);
        }
    }
    for (i, s) in steps.iter_mut().enumerate() {
        if let Step::Loop(ls) = s {
            let kernel = &clustering.clusters[ls.cluster].kernel;
            ls.plan_memory(m, kernel, |v| last[v.index()] == Some(i) && !returned.contains(&v));
        }
    }

    let mut constants = vec![];
    for &n in &main.body {
        let node = m.node(n);
        if let Op::Constant(data) = &node.op {
            let v = *node.outputs.first().ok_or_else(|| internal(format!("constant {n} has no output")))?;
            if last[v.index()].is_none() && !returned.contains(&v) {
                continue;
            }
            let shape = unnamed(m.shape(v));
            if shape.byte_size() != Some(data.0.len()) {
                return Err(internal(format!("constant {n}: {} bytes for shape {shape}", data.0.len())));
            }
            constants.push((v, Tensor { shape, data: Arc::new(AlignedBytes::from_bytes(&data.0)) }));
        }
    }
    let params = main.params.iter().map(|&p| (p, last[p.index()].is_some() || returned.contains(&p))).collect();
    let num_values = m.values.len();
    Ok(Plan { module, steps, drops, constants, params, outputs, num_values, clustering })
}

impl Plan {
    /// A listing of the steps with their buffers (for dumps).
    pub(crate) fn describe(&self) -> String {
        let m = &self.module;
        let mut s = String::new();
        let shape = |v: ValueId| crate::ir::text::format_shape(m.shape(v));
        let _ = writeln!(
            s,
            "params: {}",
            list(
                self.params
                    .iter()
                    .map(|(p, used)| { format!("{p}: {}{}", shape(*p), if *used { "" } else { " (unused)" }) })
            )
        );
        let _ = writeln!(
            s,
            "constants (preloaded): {}",
            list(self.constants.iter().map(|(v, _)| format!("{v}: {}", shape(*v))))
        );
        for (i, st) in self.steps.iter().enumerate() {
            match st {
                Step::Loop(l) => {
                    let _ = writeln!(
                        s,
                        "step {i}: loop cluster{} over {} elements ({} bytes each) reads [{}] writes [{}]",
                        l.cluster,
                        l.len,
                        l.esize,
                        list(
                            l.inputs
                                .iter()
                                .zip(&l.input_dies)
                                .map(|(v, d)| format!("{v}{}", if *d { " (dies)" } else { "" }))
                        ),
                        list(l.outputs.iter().zip(&l.in_place).map(|(v, ip)| match ip {
                            Some(k) => format!("{v}: {} (may reuse {})", shape(*v), l.inputs[*k]),
                            None => format!("{v}: {} (new buffer)", shape(*v)),
                        }))
                    );
                }
                Step::Kernel(k) => {
                    let _ = writeln!(
                        s,
                        "step {i}: kernel {}{} (node {}) reads [{}] writes [{}]",
                        k.op.op_type(),
                        k.fast.as_ref().map_or(String::new(), |f| format!(" via {}", f.describe())),
                        k.node,
                        list(k.inputs.iter().map(|v| v.to_string())),
                        list(k.outputs.iter().map(|v| format!("{v}: {} (new buffer)", shape(*v))))
                    );
                }
                Step::Alias(a) => {
                    let _ = writeln!(
                        s,
                        "step {i}: alias (node {}) {}",
                        a.node,
                        list(a.pairs.iter().map(|(x, o)| format!("{o} = {x} (shared buffer)")))
                    );
                }
            }
            if !self.drops[i].is_empty() {
                let _ = writeln!(s, "  release after step {i}: {}", list(self.drops[i].iter().map(|v| v.to_string())));
            }
        }
        let _ = writeln!(s, "outputs: {}", list(self.outputs.iter().map(|v| v.to_string())));
        s
    }
}

fn list(it: impl Iterator<Item = String>) -> String {
    it.collect::<Vec<_>>().join(", ")
}
