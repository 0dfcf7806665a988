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
//!   second result, provided all those readers come after the LayerNorm step. F32, BF16 and
//!   F16 (the half types add in f32 with one rounding per add, as the adds' loop does, and
//!   normalise in f32 with one rounding, as the LayerNorm step does).
//!
//! - **Q, K, V read in place.** A BSHD `FusedScaledDotProductAttention` whose q, k and v are
//!   `Reshape`s of `Slice`s of the last axis of one product `y` (the merged projection of
//!   `passes::egraph::qkv`, or an exporter's own fused QKV projection): the attention reads the
//!   three column blocks straight from y's rows (`fused::prepare_attention_slices`); the slices
//!   and reshapes go, so q, k and v are never copied out.
//!
//! - **Convolution epilogues.** A ConvGeneral the conv fast kernel runs, whose result feeds only
//!   an elementwise loop computing nothing but `clamp(act((conv + bias) + residual))`: the conv
//!   step computes the loop's result itself (`conv::Tail`) and the loop goes. `bias` is a constant
//!   that varies only along the output-channel axis (a `[1, C, 1, 1]` or `[C]` operand of
//!   implicit broadcasting, or a `BroadcastInDim` of one), added first; `residual` any value of
//!   the output's shape computed before the conv step (read where it lies, not copied), added
//!   second; `act` Sigmoid (`Logistic`), `Tanh` or SiLU (`x · Logistic(x)`); the clamp a `Max`
//!   and/or `Min` with scalar constants or a `Clamp` (ReLU is `Max(x, 0)`, ReLU6 `Min(Max(x, 0),
//!   6)`; the kernel applies the catalogue's Max/Min, so ±0 and NaN come out as the loop made
//!   them, except that a lone `Max(x, +0)` runs as the GEMM epilogue's vectorised ReLU, which
//!   keeps a −0 sum −0, as the egg pass's dense-relu rule does). When the residual is itself `conv' + bias'` of an earlier conv read only there
//!   (ResNet's downsampling block: `(conv2 + b2) + (down + b3)`), that conv's step writes the sum
//!   with its bias as its epilogue and the later conv reads it as its residual. Other operand
//!   orders (`(conv + residual) + bias`), GELU and HardSwish forms stay in their loop. The adds
//!   happen in the loop's order, so the results are the unmerged plan's bit for bit, except that
//!   the activations are the GEMM epilogue's (`kernels::gemm::act_f32`, within a few ulps of the
//!   compiled loop's). BF16/F16 outputs merge the bias, the residual, the ReLU and the clamp (not
//!   the other activations, which a half-typed loop rounds inside): the conv step rounds to the
//!   half type wherever the loop does (after the convolution and after each add), so those
//!   results are the unmerged plan's bit for bit too (with the same lone-ReLU exception for a
//!   −0 sum as f32). Such a tail reaches this pass as a loop of its own even when a reduction
//!   reads it (a convnet's global average pool): the clustering closes it before the reduction
//!   (`lower::cluster`'s `Open::conv_tail`, whose op list mirrors the forms accepted here).
//!
//! A merge happens only when the merged fast kernel exists (otherwise the reference kernel would
//! run the first op alone) and the intermediate value is used by no other function and, for the
//! GELU merge, by nothing else at all.

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{Activation, BinaryOp, Op, UnaryOp};
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
    // The schedule position of the item writing each value (for the convolution epilogues).
    let mut written = HashMap::new();
    for (p, &it) in c.schedule.iter().enumerate() {
        let vs: &[ValueId] = match it {
            Item::Cluster(k) => &c.clusters[k].outputs,
            Item::Node(n) => &m.node(n).outputs,
        };
        written.extend(vs.iter().map(|&v| (v, p)));
    }
    let mut out = Merges::default();
    for &item in &c.schedule {
        if let Item::Cluster(ci) = item {
            epilogue_into_conv(m, f, c, ci, &uses, &written, packed, &mut out);
        }
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
    if cl.kernel.reduce.is_some() || !cl.absorbed.is_empty() || out.skips(Item::Cluster(ci)) {
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

/// One cluster's nodes seen by the convolution-epilogue match (module docs): what each value is,
/// and the nodes the match used so far.
struct EpilogueMatch<'a> {
    m: &'a Module,
    f: FuncId,
    members: HashSet<NodeId>,
    uses: &'a HashMap<ValueId, Uses>,
    /// The schedule position of the item writing each value of `f`.
    written: &'a HashMap<ValueId, usize>,
    used: Vec<NodeId>,
    /// The output's dims, and its channel axis and channel count once a convolution is known.
    dims: Vec<i64>,
    /// The output's element type (F32, BF16 or F16; a residual must have it too).
    dtype: DType,
}

/// A convolution term of the sum: the conv node, its bias and the add that applies it.
#[derive(Clone)]
struct ConvTerm {
    conv: NodeId,
    bias: Option<Vec<f32>>,
    /// The value of `conv + bias` (the conv's own result without a bias).
    value: ValueId,
    /// Schedule position of the conv step.
    pos: usize,
}

impl EpilogueMatch<'_> {
    /// The cluster member defining `v`, with its op and operands.
    fn member(&self, v: ValueId) -> Option<(NodeId, &Op, &[ValueId])> {
        let n = producer(self.m, self.f, v)?;
        self.members.contains(&n).then(|| (n, &self.m.node(n).op, &self.m.node(n).inputs[..]))
    }

    /// `v` as a constant (or a member `BroadcastInDim` of one) whose axes other than `keep`
    /// (an axis of the output) have size 1 after broadcasting: its data, and the broadcast.
    fn along(&self, v: ValueId, keep: Option<usize>) -> Option<(Vec<f32>, Option<NodeId>)> {
        let (data, b) = crate::passes::conv_bn::constant_along(self.m, v, &self.dims, keep)?;
        b.is_none_or(|b| self.members.contains(&b)).then_some((data, b))
    }

    /// `v` as a scalar constant (every element equal, broadcast along every axis).
    fn scalar(&self, v: ValueId) -> Option<(f32, Option<NodeId>)> {
        let (data, b) = self.along(v, None)?;
        let x = *data.first()?;
        data.iter().all(|y| y.to_bits() == x.to_bits()).then_some((x, b))
    }

    /// `v` as a per-channel bias of `c` channels on output axis `axis`: one value per channel.
    fn bias(&self, v: ValueId, axis: usize, c: usize) -> Option<(Vec<f32>, Option<NodeId>)> {
        let (data, b) = self.along(v, Some(axis))?;
        match data.len() {
            n if n == c => Some((data, b)),
            1 => Some((vec![data[0]; c], b)),
            _ => None,
        }
    }

    /// Uses `v`'s defining member (and the broadcast `b`, if any).
    fn take(&mut self, n: NodeId, b: Option<NodeId>) {
        self.used.push(n);
        self.used.extend(b);
    }

    /// The schedule position of the ConvGeneral step defining `v`, when it is a conv the fast
    /// kernel runs with the output's dims, and `v` is read only by this cluster.
    fn conv(&self, v: ValueId, taken: &HashMap<NodeId, Merged>) -> Option<(NodeId, usize)> {
        let n = producer(self.m, self.f, v)?;
        let u = self.uses.get(&v)?;
        let ok = matches!(self.m.node(n).op, Op::ConvGeneral { .. })
            && !self.members.contains(&n)
            && u.positions.len() == 1
            && !u.returned
            && !u.external
            && self.m.shape(v).dims == self.dims
            && !taken.contains_key(&n)
            && super::conv::runs(self.m, n);
        ok.then(|| self.written.get(&v).map(|&p| (n, p))).flatten()
    }

    /// The output-channel axis and channel count of conv node `n`.
    fn channels(&self, n: NodeId) -> Option<(usize, usize)> {
        let Op::ConvGeneral { axes, .. } = &self.m.node(n).op else { return None };
        let c = usize::try_from(*self.dims.get(axes.output_channels)?).ok()?;
        Some((axes.output_channels, c))
    }

    /// `v` as a conv term: the conv's result, or a member `conv + bias` (either order).
    fn conv_term(&mut self, v: ValueId, taken: &HashMap<NodeId, Merged>) -> Option<ConvTerm> {
        if let Some((conv, pos)) = self.conv(v, taken) {
            return Some(ConvTerm { conv, bias: None, value: v, pos });
        }
        let (add, op, ins) = self.member(v)?;
        if *op != Op::Binary(BinaryOp::Add) || ins.len() != 2 {
            return None;
        }
        let (a, b) = (ins[0], ins[1]);
        for (c, k) in [(a, b), (b, a)] {
            let Some((conv, pos)) = self.conv(c, taken) else { continue };
            let (axis, ch) = self.channels(conv)?;
            if let Some((bias, bc)) = self.bias(k, axis, ch) {
                self.take(add, bc);
                return Some(ConvTerm { conv, bias: Some(bias), value: v, pos });
            }
        }
        None
    }

    /// Whether `v` (not computed by the cluster) is ready before schedule position `pos`.
    fn ready_before(&self, v: ValueId, pos: usize) -> bool {
        if self.m.value(v).func != self.f || self.m.constant_data(v).is_some() {
            return true;
        }
        match self.m.value(v).def {
            ValueDef::Node { node, .. } => {
                !self.members.contains(&node) && self.written.get(&v).is_some_and(|&p| p < pos)
            }
            _ => true,
        }
    }
}

/// What a matched cluster becomes: its main conv's tail and residual, and an earlier conv
/// writing that residual with its bias.
struct ConvMerge {
    main: ConvTerm,
    residual: Option<ValueId>,
    inner: Option<ConvTerm>,
    activation: GemmActivation,
    clamp: Option<(f32, f32)>,
}

/// Matches cluster `ci` against `clamp(act((conv + bias) + residual))` (module docs).
fn match_conv_epilogue(em: &mut EpilogueMatch<'_>, y: ValueId, taken: &HashMap<NodeId, Merged>) -> Option<ConvMerge> {
    let mut cur = y;
    // The clamp: Min(Max(x, lo), hi), either alone, or Clamp(lo, x, hi), scalar bounds.
    let (mut lo, mut hi) = (f32::NEG_INFINITY, f32::INFINITY);
    let mut clamped = false;
    let bound = |em: &EpilogueMatch<'_>, ins: &[ValueId]| -> Option<(ValueId, f32, Option<NodeId>)> {
        let &[a, b] = ins else { return None };
        if let Some((k, bc)) = em.scalar(b) {
            return Some((a, k, bc));
        }
        em.scalar(a).map(|(k, bc)| (b, k, bc))
    };
    if let Some((n, Op::Binary(BinaryOp::Min), ins)) = em.member(cur)
        && let Some((x, k, bc)) = bound(em, ins)
    {
        (hi, cur, clamped) = (k, x, true);
        em.take(n, bc);
    }
    if let Some((n, Op::Binary(BinaryOp::Max), ins)) = em.member(cur)
        && let Some((x, k, bc)) = bound(em, ins)
    {
        (lo, cur, clamped) = (k, x, true);
        em.take(n, bc);
    }
    if !clamped
        && let Some((n, Op::Clamp, &[l, x, h])) = em.member(cur)
        && let (Some((l, lb)), Some((h, hb))) = (em.scalar(l), em.scalar(h))
    {
        (lo, hi, cur, clamped) = (l, h, x, true);
        em.take(n, lb);
        em.used.extend(hb);
    }
    // The activation.
    let mut activation = GemmActivation::None;
    match em.member(cur) {
        Some((n, Op::Unary(UnaryOp::Logistic), &[x])) => {
            (activation, cur) = (GemmActivation::Sigmoid, x);
            em.take(n, None);
        }
        Some((n, Op::Unary(UnaryOp::Tanh), &[x])) => {
            (activation, cur) = (GemmActivation::Tanh, x);
            em.take(n, None);
        }
        Some((n, Op::Binary(BinaryOp::Mul), &[a, b])) => {
            let logistic_of = |v: ValueId, of: ValueId| match em.member(v) {
                Some((s, Op::Unary(UnaryOp::Logistic), &[x])) if x == of => Some(s),
                _ => None,
            };
            let (s, x) = logistic_of(b, a).map(|s| (s, a)).or_else(|| logistic_of(a, b).map(|s| (s, b)))?;
            (activation, cur) = (GemmActivation::Silu, x);
            em.take(n, Some(s));
        }
        _ => {}
    }
    // `Max(x, +0)` alone is the GEMM epilogue's ReLU, vectorised (as the egg pass's dense-relu
    // rule has it): the same but for the sign of a −0 sum, which it keeps.
    if activation == GemmActivation::None && clamped && lo.to_bits() == 0 && hi == f32::INFINITY {
        (activation, clamped) = (GemmActivation::Relu, false);
    }
    // The sum: a conv term alone, or plus a residual (another conv term, or any value).
    if let Some(main) = em.conv_term(cur, taken) {
        return Some(ConvMerge { main, residual: None, inner: None, activation, clamp: clamped.then_some((lo, hi)) });
    }
    let (add, Op::Binary(BinaryOp::Add), &[a, b]) = em.member(cur)? else { return None };
    em.take(add, None);
    let full = |em: &EpilogueMatch<'_>, v: ValueId| em.m.shape(v).dims == em.dims && em.m.shape(v).dtype == em.dtype;
    let (ta, tb) = (em.conv_term(a, taken), em.conv_term(b, taken));
    let (main, residual, inner) = match (ta, tb) {
        // Two conv terms: the later one is the main conv, the earlier one writes its sum.
        (Some(x), Some(y)) => {
            let (main, other) = if x.pos > y.pos { (x, y) } else { (y, x) };
            if other.conv == main.conv {
                return None;
            }
            // A biased one is a member sum, which only that conv's merged step can compute in
            // time; a bare one is ready, its conv running before the main one.
            let value = other.value;
            (main, Some(value), other.bias.is_some().then_some(other))
        }
        (Some(t), None) => (t, Some(b), None),
        (None, Some(t)) => (t, Some(a), None),
        (None, None) => return None,
    };
    let r = residual?;
    if !full(em, r) || (inner.is_none() && !em.ready_before(r, main.pos)) || r == main.value {
        return None;
    }
    Some(ConvMerge { main, residual: Some(r), inner, activation, clamp: clamped.then_some((lo, hi)) })
}

/// The convolution-epilogue merge for cluster `ci` (module docs).
#[allow(clippy::too_many_arguments)]
fn epilogue_into_conv(
    m: &Module,
    f: FuncId,
    c: &Clustering,
    ci: usize,
    uses: &HashMap<ValueId, Uses>,
    written: &HashMap<ValueId, usize>,
    packed: &Packed,
    out: &mut Merges,
) {
    let cl = &c.clusters[ci];
    let [y] = cl.outputs[..] else { return };
    if cl.kernel.reduce.is_some() || !cl.absorbed.is_empty() || out.skips(Item::Cluster(ci)) {
        return;
    }
    let dtype = m.shape(y).dtype;
    if !matches!(dtype, DType::Float32 | DType::BFloat16 | DType::Float16) || m.shape(y).is_dynamic() {
        return;
    }
    let mut em = EpilogueMatch {
        dtype,
        m,
        f,
        members: cl.nodes.iter().copied().collect(),
        uses,
        written,
        used: vec![],
        dims: m.shape(y).dims.clone(),
    };
    let Some(mg) = match_conv_epilogue(&mut em, y, &out.steps) else { return };
    // A half-typed loop rounds after every op; the conv step reproduces that for the adds, the
    // ReLU and the clamp (`conv::Tail` on BF16/F16), not for the other activations.
    if dtype != DType::Float32 && !matches!(mg.activation, GemmActivation::None | GemmActivation::Relu) {
        return;
    }
    // Every member is part of the match (nothing else is computed), each once.
    let used: HashSet<NodeId> = em.used.iter().copied().collect();
    if used.len() != em.used.len() || used != em.members {
        return;
    }
    let inner = match &mg.inner {
        Some(t) => {
            let tail = super::conv::Tail { bias: t.bias.clone(), ..Default::default() };
            let Some(fast) = super::conv::prepare_with(m, t.conv, packed, tail) else { return };
            let node = m.node(t.conv);
            Some((t.conv, Merged { inputs: node.inputs.clone(), outputs: vec![t.value], fast }))
        }
        None => None,
    };
    let tail = super::conv::Tail {
        bias: mg.main.bias.clone(),
        residual: mg.residual.is_some(),
        activation: mg.activation,
        clamp: mg.clamp,
    };
    let Some(fast) = super::conv::prepare_with(m, mg.main.conv, packed, tail) else { return };
    let mut inputs = m.node(mg.main.conv).inputs.clone();
    inputs.extend(mg.residual);
    out.steps.insert(mg.main.conv, Merged { inputs, outputs: vec![y], fast });
    if let Some((n, step)) = inner {
        out.steps.insert(n, step);
    }
    out.skip.insert(key(Item::Cluster(ci)));
}
