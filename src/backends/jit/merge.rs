//! Plan-level fusions below the IR: pairs of nodes the jit plan runs as one step although the
//! catalogue has no single op for them, so the optimised module keeps both catalogue ops (and the
//! interpreter and the dumps see them) while the plan does not pay for the value between them.
//!
//! - **Tanh GELU in the GEMM epilogue.** `FusedGelu{exact: false}(FusedDense{activation: None})`:
//!   the catalogue's FusedDense activations have only the erf GELU (§5), so the egg pass leaves
//!   GPT-2's tanh GELU as its own FusedGelu after the dense. When the dense result feeds only that
//!   GELU (directly or through reshapes), the plan runs the dense's GEMM with the tanh GELU in its
//!   epilogue (`dot::prepare_with`), and the GELU step becomes an alias of its operand.
//! - **Residual add before LayerNorm.** `FusedLayerNorm(x, gamma?, beta?)` where x is a sum
//!   `((t0 + t1) + t2) + …` computed by a loop of its own (a cluster made only of those adds; a
//!   term may be broadcast along leading axes, as position embeddings are): the LayerNorm step
//!   reads the terms and adds them row by row, in the same order, just before normalising
//!   (`fused::prepare_residual_layer_norm`); the adds' loop goes. When other steps also read the
//!   sum (pre-LN transformers reuse it for the next residual), the LayerNorm step writes it as a
//!   second result, provided all those readers come after the LayerNorm step.
//!
//! - **Q, K, V read in place.** A BSHD `FusedScaledDotProductAttention` whose q, k and v are
//!   `Reshape`s of `Slice`s of the last axis of one product `y` (the merged projection of
//!   `passes::egraph::qkv`, or an exporter's own fused QKV projection): the attention reads the
//!   three column blocks straight from y's rows (`fused::prepare_attention_slices`); the slices
//!   and reshapes go, so q, k and v are never copied out.
//!
//! A merge happens only when the merged fast kernel exists (otherwise the reference kernel would
//! run the first op alone) and the intermediate value is used by no other function and, for the
//! GELU merge, by nothing else at all.

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{Activation, BinaryOp, Op};
use crate::kernels::gemm::Activation as GemmActivation;
use crate::lower::cluster::{Clustering, Item};

use super::fast::{FastKernel, Packed};

/// A step replacing a node's own: its operands, results and kernel (the node keeps its op for
/// error messages and dumps).
pub(crate) struct Merged {
    /// Operands.
    pub inputs: Vec<ValueId>,
    /// Results.
    pub outputs: Vec<ValueId>,
    /// The kernel computing the merged pair.
    pub fast: Box<dyn FastKernel>,
}

/// The merges of one function's schedule.
#[derive(Default)]
pub(crate) struct Merges {
    /// Schedule items that no longer run (their work is part of a merged step), by [`key`].
    skip: HashSet<(bool, usize)>,
    /// Nodes whose step is a merged one.
    pub steps: HashMap<NodeId, Merged>,
    /// Nodes whose step becomes an alias `(input, output)` (a GELU computed by its dense).
    pub aliases: HashMap<NodeId, (ValueId, ValueId)>,
}

impl Merges {
    /// Whether schedule item `it` no longer runs.
    pub(crate) fn skips(&self, it: Item) -> bool {
        self.skip.contains(&key(it))
    }
}

/// A hashable key of a schedule item.
fn key(it: Item) -> (bool, usize) {
    match it {
        Item::Cluster(c) => (true, c),
        Item::Node(n) => (false, n.index()),
    }
}

/// How a value of function `f` is used: the schedule positions of the items reading it, and
/// whether a function's outputs or another function's nodes read it.
#[derive(Default)]
struct Uses {
    positions: Vec<usize>,
    returned: bool,
    external: bool,
}

fn uses(m: &Module, f: FuncId, c: &Clustering) -> HashMap<ValueId, Uses> {
    let mut u: HashMap<ValueId, Uses> = HashMap::new();
    for (pos, item) in c.schedule.iter().enumerate() {
        let reads: &[ValueId] = match *item {
            Item::Cluster(ci) => &c.clusters[ci].inputs,
            Item::Node(n) => &m.node(n).inputs,
        };
        for &v in reads {
            u.entry(v).or_default().positions.push(pos);
        }
    }
    for (fi, fd) in m.functions.iter().enumerate() {
        for &v in fd.outputs.iter().flatten() {
            u.entry(v).or_default().returned = true;
        }
        if fi == f.index() {
            continue;
        }
        for &n in &fd.body {
            for &v in &m.node(n).inputs {
                if m.value(v).func == f {
                    u.entry(v).or_default().external = true;
                }
            }
        }
    }
    u
}

/// The node defining `v` (as its only result) in function `f`.
fn producer(m: &Module, f: FuncId, v: ValueId) -> Option<NodeId> {
    match m.value(v).def {
        ValueDef::Node { node, output: 0 } if m.value(v).func == f && m.node(node).outputs.len() == 1 => Some(node),
        _ => None,
    }
}

/// The node behind `v` once `Reshape`s are stepped over, and the nodes of that chain (the
/// reshapes, then it), when every value of the chain (`v` included) has one reader and stays
/// in function `f`.
fn behind_reshapes(m: &Module, f: FuncId, v: ValueId, uses: &HashMap<ValueId, Uses>) -> Option<(NodeId, Vec<NodeId>)> {
    let mut nodes = vec![];
    let mut cur = v;
    loop {
        let u = uses.get(&cur)?;
        if u.positions.len() != 1 || u.returned || u.external {
            return None;
        }
        let n = producer(m, f, cur)?;
        nodes.push(n);
        match m.node(n).op {
            Op::Reshape { .. } => cur = *m.node(n).inputs.first()?,
            _ => return Some((n, nodes)),
        }
    }
}

/// Finds the merges of function `f`'s schedule.
pub(crate) fn find(m: &Module, f: FuncId, c: &Clustering, packed: &Packed) -> Result<Merges> {
    let uses = uses(m, f, c);
    let pos: HashMap<(bool, usize), usize> = c.schedule.iter().enumerate().map(|(i, &it)| (key(it), i)).collect();
    let mut out = Merges::default();
    for &item in &c.schedule {
        let Item::Node(n) = item else { continue };
        let node = m.node(n);
        match &node.op {
            Op::FusedGelu { exact: false } => gelu_into_dense(m, f, n, &uses, packed, &mut out)?,
            Op::FusedLayerNorm { .. } => residual_into_layer_norm(m, f, c, n, &uses, &pos, &mut out),
            Op::FusedScaledDotProductAttention { .. } => slices_into_attention(m, f, c, n, &uses, &mut out),
            _ => {}
        }
    }
    Ok(out)
}

/// The tanh-GELU merge for GELU node `g` (module docs): its operand is the dense's result, or
/// `Reshape`s of it (a dense over `[M, K]` reshaped back to `[B, S, N]`), each read once.
fn gelu_into_dense(
    m: &Module,
    f: FuncId,
    g: NodeId,
    uses: &HashMap<ValueId, Uses>,
    packed: &Packed,
    out: &mut Merges,
) -> Result<()> {
    let node = m.node(g);
    let (Some(&x), Some(&y)) = (node.inputs.first(), node.outputs.first()) else { return Ok(()) };
    let Some((d, _)) = behind_reshapes(m, f, x, uses) else { return Ok(()) };
    if !matches!(m.node(d).op, Op::FusedDense { activation: Activation::None, .. })
        || m.shape(x) != m.shape(y)
        || out.steps.contains_key(&d)
    {
        return Ok(());
    }
    let dense = m.node(d);
    if let Some(fast) = super::dot::prepare_with(m, d, packed, Some(GemmActivation::GeluTanh))? {
        out.steps.insert(d, Merged { inputs: dense.inputs.clone(), outputs: dense.outputs.clone(), fast });
        out.aliases.insert(g, (x, y));
    }
    Ok(())
}

/// The terms of the sum `x` made by the adds `nodes` (all of them, each used once inside):
/// `((t0 + t1) + t2) + …` in evaluation order, each add having at most one add of the set as an
/// operand (f32 addition commutes, so either side may be the inner sum).
fn sum_terms(m: &Module, x: ValueId, nodes: &[NodeId]) -> Option<Vec<ValueId>> {
    let inner = |v: ValueId| match m.value(v).def {
        ValueDef::Node { node, output: 0 } if nodes.contains(&node) => Some(node),
        _ => None,
    };
    let mut rev = vec![];
    let mut cur = inner(x)?;
    let mut seen = 1;
    loop {
        let n = m.node(cur);
        if n.op != Op::Binary(BinaryOp::Add) || n.inputs.len() != 2 {
            return None;
        }
        let (a, b) = (n.inputs[0], n.inputs[1]);
        match (inner(a), inner(b)) {
            (Some(_), Some(_)) => return None,
            (Some(i), None) | (None, Some(i)) => {
                rev.push(if inner(a).is_some() { b } else { a });
                cur = i;
                seen += 1;
            }
            (None, None) => {
                rev.extend([b, a]);
                break;
            }
        }
    }
    rev.reverse();
    (seen == nodes.len()).then_some(rev)
}

/// The residual-add merge for LayerNorm node `ln` (module docs).
fn residual_into_layer_norm(
    m: &Module,
    f: FuncId,
    c: &Clustering,
    ln: NodeId,
    uses: &HashMap<ValueId, Uses>,
    pos: &HashMap<(bool, usize), usize>,
    out: &mut Merges,
) {
    let node = m.node(ln);
    let Some(&x) = node.inputs.first() else { return };
    if producer(m, f, x).is_none() || node.inputs[1..].contains(&x) {
        return;
    }
    // The adds are a loop of their own.
    let Some(ci) = c.clusters.iter().position(|cl| cl.outputs == [x]) else { return };
    let cl = &c.clusters[ci];
    if cl.kernel.reduce.is_some() || !cl.absorbed.is_empty() {
        return;
    }
    let Some(terms) = sum_terms(m, x, &cl.nodes) else { return };
    let (Some(&ln_pos), Some(u)) = (pos.get(&key(Item::Node(ln))), uses.get(&x)) else { return };
    if u.external {
        return;
    }
    // Every other reader of the sum runs after the LayerNorm step (which then makes the sum).
    let others: Vec<usize> = u.positions.iter().copied().filter(|&p| p != ln_pos).collect();
    if others.iter().any(|&p| p < ln_pos) || u.positions.len() == others.len() {
        return;
    }
    let keep_sum = u.returned || !others.is_empty();
    let Some(fast) = super::fused::prepare_residual_layer_norm(m, ln, &terms, keep_sum) else { return };
    let mut inputs = terms;
    inputs.extend_from_slice(&node.inputs[1..]);
    let mut outputs = node.outputs.clone();
    if keep_sum {
        outputs.push(x);
    }
    out.steps.insert(ln, Merged { inputs, outputs, fast });
    out.skip.insert(key(Item::Cluster(ci)));
}

/// `(y, offset, nodes)` when `v` is `Reshape*(Slice(y))` with the slice taking a block of y's
/// last axis (every other axis whole, stride 1): the block's first column and the chain's nodes.
/// Every value of the chain (v included) must have one reader and stay in function `f`.
fn sliced_from(
    m: &Module,
    f: FuncId,
    v: ValueId,
    uses: &HashMap<ValueId, Uses>,
) -> Option<(ValueId, usize, Vec<NodeId>)> {
    let (n, nodes) = behind_reshapes(m, f, v, uses)?;
    let node = m.node(n);
    let Op::Slice { starts, limits, strides } = &node.op else { return None };
    let y = *node.inputs.first()?;
    let dims = &m.shape(y).dims;
    let last = dims.len().checked_sub(1)?;
    let whole = (0..last).all(|a| starts[a] == 0 && limits[a] == dims[a]);
    if !whole || strides.iter().any(|&s| s != 1) || m.shape(y).is_dynamic() {
        return None;
    }
    Some((y, usize::try_from(starts[last]).ok()?, nodes))
}

/// The q/k/v-in-place merge for attention node `att` (module docs).
fn slices_into_attention(
    m: &Module,
    f: FuncId,
    c: &Clustering,
    att: NodeId,
    uses: &HashMap<ValueId, Uses>,
    out: &mut Merges,
) {
    let node = m.node(att);
    if node.inputs.len() < 3 || node.inputs[0] == node.inputs[1] || node.inputs[1] == node.inputs[2] {
        return;
    }
    let mut y = None;
    let mut offsets = [0usize; 3];
    let mut chain: HashSet<NodeId> = HashSet::new();
    for (t, o) in offsets.iter_mut().enumerate() {
        let Some((yt, off, nodes)) = sliced_from(m, f, node.inputs[t], uses) else { return };
        if y.is_some_and(|y| y != yt) {
            return;
        }
        y = Some(yt);
        *o = off;
        chain.extend(nodes);
    }
    let Some(y) = y else { return };
    // The schedule items made of chain nodes only; none may mix chain and other nodes.
    let mut items = vec![];
    for &it in &c.schedule {
        let (inside, all) = match it {
            Item::Cluster(ci) => {
                let cl = &c.clusters[ci];
                let nodes = cl.nodes.iter().chain(&cl.absorbed);
                (nodes.clone().filter(|n| chain.contains(n)).count(), nodes.count())
            }
            Item::Node(n) => (chain.contains(&n) as usize, 1),
        };
        if inside == 0 {
            continue;
        }
        if inside != all || out.skips(it) {
            return;
        }
        items.push(it);
    }
    let Some(fast) = super::fused::prepare_attention_slices(m, att, y, offsets) else { return };
    let mut inputs = vec![y, y, y];
    inputs.extend_from_slice(&node.inputs[3..]);
    out.steps.insert(att, Merged { inputs, outputs: node.outputs.clone(), fast });
    for it in items {
        out.skip.insert(key(it));
    }
}
