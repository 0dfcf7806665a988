//! Compile-time analysis for the interpreter: last uses (so tensors are dropped early), which
//! nodes need run-time shapes, unused outputs, and constants turned into shared aligned storage.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::module::{FuncId, Module, ValueId};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::memory::AlignedBytes;

/// What the interpreter needs to know about one function.
#[derive(Debug, Default)]
pub(super) struct FuncPlan {
    /// `drops_before[i]`: values of this function last read by body position `i` as plain
    /// operands: released before that node runs (so its operands may hold the only reference).
    pub drops_before: Vec<Vec<ValueId>>,
    /// `drops_after[i]`: values last read at position `i` by a callee (closure captures):
    /// released once that node has run. Outputs of the function are never in either list.
    pub drops_after: Vec<Vec<ValueId>>,
    /// Whether each parameter is read at all (unused ones are not stored).
    pub param_used: Vec<bool>,
    /// Whether any parameter has a dynamic axis (its names are bound on entry).
    pub dynamic_params: bool,
}

/// What the interpreter needs to know about one node.
#[derive(Debug, Default)]
pub(super) struct NodePlan {
    /// Output shapes must be computed at run time (an operand, an output or an attribute has a
    /// dynamic axis).
    pub dynamic: bool,
    /// Static output shapes without axis names (meaningful when `!dynamic`).
    pub out_shapes: Vec<Shape>,
    /// Whether each output is read later (or returned); unread outputs are not stored.
    pub keep: Vec<bool>,
    /// Whether the node runs at all: some result is read by a node that runs or returned (every
    /// op is pure, so a node nothing reads is skipped, as the jit's dead-code elimination
    /// removes it; both backends then agree on a run-time error in dead code).
    pub live: bool,
    /// The payload of a Constant node, ready to share.
    pub constant: Option<Arc<AlignedBytes>>,
}

/// A module prepared for interpretation. Immutable and shared by every execution.
#[derive(Debug)]
pub(super) struct Plan {
    /// The module itself.
    pub module: Module,
    /// Indexed by `FuncId`.
    pub funcs: Vec<FuncPlan>,
    /// Indexed by `NodeId` (nodes outside every body have a default entry).
    pub nodes: Vec<NodePlan>,
}

pub(super) use crate::backends::signature::unnamed;

fn op_has_dynamic_attr(op: &Op) -> bool {
    match op {
        Op::BroadcastInDim { shape, .. } | Op::Iota { shape, .. } | Op::RngBitGenerator { shape } => shape.is_dynamic(),
        Op::Reshape { dims } => dims.iter().any(|&d| d < 0),
        Op::DynamicSlice { sizes } => sizes.iter().any(|&d| d < 0),
        Op::Slice { starts, limits, .. } => starts.iter().chain(limits).any(|&d| d < 0),
        Op::DynamicReshape { .. } => true,
        _ => false,
    }
}

fn internal(msg: String) -> Error {
    Error::invalid("interp compile", msg)
}

/// Checks that every id the interpreter will index with is in range, so that execution can
/// index the arenas directly.
fn check_ids(m: &Module) -> Result<()> {
    let nv = m.values.len();
    let nf = m.functions.len();
    if m.main.index() >= nf {
        return Err(internal(format!("main function {} does not exist", m.main)));
    }
    for (fi, f) in m.functions.iter().enumerate() {
        if f.params.len() != f.param_names.len() {
            return Err(internal(format!("function f{fi}: {} params, {} names", f.params.len(), f.param_names.len())));
        }
        for &v in f.params.iter().chain(f.outputs.iter().flatten()) {
            if v.index() >= nv {
                return Err(internal(format!("function f{fi} refers to missing value {v}")));
            }
        }
        for &n in &f.body {
            let node =
                m.nodes.get(n.index()).ok_or_else(|| internal(format!("function f{fi} refers to missing node {n}")))?;
            for &v in node.inputs.iter().chain(&node.outputs) {
                if v.index() >= nv {
                    return Err(internal(format!("node {n} refers to missing value {v}")));
                }
            }
            for c in node.op.callees() {
                let cf = m.functions.get(c.index()).ok_or_else(|| internal(format!("node {n} calls missing {c}")))?;
                if cf.outputs.is_none() {
                    return Err(internal(format!("node {n} calls {} which has not returned", m.func_label(c))));
                }
            }
        }
    }
    if m.func(m.main).outputs.is_none() {
        return Err(Error::invalid("compile", "main has not returned"));
    }
    Ok(())
}

/// Values used inside function `f` (and its callees, transitively) that `f` does not define:
/// what a node invoking `f` implicitly reads. Memoised per function in `memo`; the walk over
/// callees is iterative (an explicit stack), so a long chain of calls or nested closures cannot
/// overflow the stack. `busy` marks functions being expanded: a callee already on the path (a
/// call cycle, rejected by the verifier) is treated as capturing nothing.
pub(crate) fn captures(
    m: &Module,
    f: FuncId,
    memo: &mut [Option<BTreeSet<ValueId>>],
    busy: &mut [bool],
) -> BTreeSet<ValueId> {
    if let Some(c) = &memo[f.index()] {
        return c.clone();
    }
    // (function, whether its callees are already on the stack above it)
    let mut stack: Vec<(FuncId, bool)> = vec![(f, false)];
    while let Some((g, expanded)) = stack.pop() {
        if memo[g.index()].is_some() {
            continue;
        }
        let fd = m.func(g);
        if !expanded {
            if busy[g.index()] {
                continue;
            }
            busy[g.index()] = true;
            stack.push((g, true));
            for &n in &fd.body {
                for c in m.node(n).op.callees() {
                    if memo[c.index()].is_none() && !busy[c.index()] {
                        stack.push((c, false));
                    }
                }
            }
            continue;
        }
        let mut used = BTreeSet::new();
        for &n in &fd.body {
            let node = m.node(n);
            used.extend(node.inputs.iter().copied());
            for c in node.op.callees() {
                if let Some(inner) = &memo[c.index()] {
                    used.extend(inner.iter().copied());
                }
            }
        }
        used.extend(fd.outputs.iter().flatten().copied());
        used.retain(|&v| m.value(v).func != g);
        busy[g.index()] = false;
        memo[g.index()] = Some(used);
    }
    memo[f.index()].clone().unwrap_or_default()
}

impl Plan {
    /// Analyses `module` (which must be verified).
    pub(super) fn new(module: Module) -> Result<Plan> {
        check_ids(&module)?;
        // Nesting deeper than execution allows is rejected here, before any walk over it.
        crate::ir::verify::check_limits(&module)?;
        let m = &module;
        let nf = m.functions.len();
        let mut memo = vec![None; nf];
        let mut busy = vec![false; nf];
        let mut funcs = Vec::with_capacity(nf);
        let mut nodes: Vec<NodePlan> = (0..m.nodes.len()).map(|_| NodePlan::default()).collect();
        for fi in 0..nf {
            let f = FuncId(fi as u32);
            let fd = m.func(f);
            // Last body position reading each value of this function, and whether a callee
            // reads it there (then it must outlive the node); outputs are never dropped.
            let mut last: Vec<Option<(usize, bool)>> = Vec::new();
            let touch = |v: ValueId, pos: usize, captured: bool, last: &mut Vec<Option<(usize, bool)>>| {
                if m.value(v).func == f {
                    if last.len() <= v.index() {
                        last.resize(v.index() + 1, None);
                    }
                    let slot = &mut last[v.index()];
                    *slot = match *slot {
                        Some((p, c)) if p == pos => Some((pos, c || captured)),
                        _ => Some((pos, captured)),
                    };
                }
            };
            let outputs: BTreeSet<ValueId> = fd.outputs.iter().flatten().copied().collect();
            // Live nodes, from the end: a node is live when a live node (or a callee it runs)
            // reads one of its results or it is returned.
            let mut needed = outputs.clone();
            let mut live = vec![false; fd.body.len()];
            for (pos, &n) in fd.body.iter().enumerate().rev() {
                let node = m.node(n);
                if node.outputs.is_empty() || node.outputs.iter().any(|v| needed.contains(v)) {
                    live[pos] = true;
                    needed.extend(node.inputs.iter().copied());
                    for c in node.op.callees() {
                        needed.extend(captures(m, c, &mut memo, &mut busy));
                    }
                }
            }
            for (pos, &n) in fd.body.iter().enumerate() {
                if !live[pos] {
                    continue;
                }
                let node = m.node(n);
                for &v in &node.inputs {
                    touch(v, pos, false, &mut last);
                }
                for c in node.op.callees() {
                    for v in captures(m, c, &mut memo, &mut busy) {
                        touch(v, pos, true, &mut last);
                    }
                }
            }
            let used = |v: ValueId, last: &Vec<Option<(usize, bool)>>| {
                outputs.contains(&v) || last.get(v.index()).copied().flatten().is_some()
            };
            let mut drops_before = vec![Vec::new(); fd.body.len()];
            let mut drops_after = vec![Vec::new(); fd.body.len()];
            for (i, slot) in last.iter().enumerate() {
                let v = ValueId(i as u32);
                if let Some((pos, captured)) = *slot
                    && !outputs.contains(&v)
                {
                    let list = if captured { &mut drops_after } else { &mut drops_before };
                    list[pos].push(v);
                }
            }
            let param_used = fd.params.iter().map(|&p| used(p, &last)).collect();
            let dynamic_params = fd.params.iter().any(|&p| m.shape(p).is_dynamic());
            for (pos, &n) in fd.body.iter().enumerate() {
                let node = m.node(n);
                let np = &mut nodes[n.index()];
                np.live = live[pos];
                np.keep = node.outputs.iter().map(|&v| used(v, &last)).collect();
                np.out_shapes = node.outputs.iter().map(|&v| unnamed(m.shape(v))).collect();
                np.dynamic = node.inputs.iter().chain(&node.outputs).any(|&v| m.shape(v).is_dynamic())
                    || op_has_dynamic_attr(&node.op);
                if let Op::Constant(data) = &node.op {
                    let shape = np.out_shapes.first().ok_or_else(|| internal(format!("constant {n} has no output")))?;
                    if shape.byte_size() != Some(data.0.len()) {
                        return Err(internal(format!("constant {n}: {} bytes for shape {shape}", data.0.len())));
                    }
                    np.constant = Some(Arc::new(AlignedBytes::from_bytes(&data.0)));
                }
            }
            funcs.push(FuncPlan { drops_before, drops_after, param_used, dynamic_params });
        }
        Ok(Plan { module, funcs, nodes })
    }
}
