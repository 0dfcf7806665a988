//! Fusion with egg: recognise FusedDense, FusedLayerNorm, FusedSoftmax, FusedGelu and
//! FusedScaledDotProductAttention in their exporter decompositions and rewrite each function of
//! the module to use them.
//!
//! [`run`] works one function at a time:
//! 1. **Convert** the function's data flow into an e-graph ([`lang`]): every single-result,
//!    closure-free op becomes an e-node holding the op with its attributes; parameters,
//!    constants, values captured from enclosing functions and outputs of opaque nodes
//!    (control flow, multi-result ops, barriers) become leaves carrying their shape (and, for
//!    constants, their data) in the [`analysis`].
//! 2. **Saturate** stage by stage ([`rules::stage_rules`]): normalisations (mean, broadcast back
//!    of a reduction, square, inverse square root), then GELU/softmax/LayerNorm, then dense and
//!    attention. Each stage is an egg `Runner` with the node, iteration and time limits of
//!    [`EggConfig`]; its statistics and stop reason go into the [`EggReport`].
//! 3. **Extract** greedily ([`extract`]) with [`FusionCost`]: fused ops cost 1, reshapes 2, other ops 10,
//!    leaves 1, internal idioms are never chosen. Limits of this extractor: it compares
//!    *tree* costs (a subexpression shared by two users is counted twice when choosing), so it
//!    does not see that keeping an intermediate that other users need anyway makes the unfused
//!    form cheaper; with these weights a fused op always wins its class, which may leave an
//!    intermediate (e.g. a mean that is also returned) computed both inside the fused op and
//!    on its own. The rebuilt body itself is a DAG: each e-class is materialised once.
//! 4. **Rebuild** the body: roots are the function's outputs, values used by other functions
//!    (closure captures) and the operands of opaque nodes, each materialised no later than its
//!    old position; unchanged nodes are reused as they are, new ones are added with
//!    [`Module::add_node`], nodes no root needs leave the body. Opaque nodes keep their place.
//!
//! 5. **Merge** dense layers with constant weights that share their input (the Q, K, V
//!    projections) into one over the concatenated weights, sliced back ([`qkv`]).
//!
//! A function in which no fusion rule fired is left untouched, and so is one in which the
//! rules merged values of different shapes into one e-class (the analysis flags it: a rule bug,
//! listed in [`EggReport::skipped`]). If a function cannot be
//! converted (it is not verified: an operand used before its definition, a recorded shape that
//! inference does not reproduce) it is left unchanged and the report says why.

pub mod analysis;
pub mod extract;
pub mod lang;
pub mod qkv;
pub mod rules;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use egg::{CostFunction, Id, Language, Runner, SimpleScheduler};

use crate::error::{Error, Result};
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::Op;
use crate::passes::egraph::analysis::{EG, LeafInfo, TAnalysis, splat_value};
use crate::passes::egraph::extract::Extraction;
use crate::passes::egraph::lang::TNode;
use crate::passes::rewrite::replace_all_uses;

/// Limits of each stage's egg `Runner`.
#[derive(Clone, Debug)]
pub struct EggConfig {
    /// Maximum e-nodes (per stage and function).
    pub node_limit: usize,
    /// Maximum iterations (per stage and function).
    pub iter_limit: usize,
    /// Maximum time (per stage and function).
    pub time_limit: Duration,
}

impl Default for EggConfig {
    fn default() -> EggConfig {
        EggConfig { node_limit: 200_000, iter_limit: 30, time_limit: Duration::from_secs(2) }
    }
}

/// Statistics of one stage on one function.
#[derive(Clone, Debug)]
pub struct StageStats {
    /// Function label (`main`, a name, or `closure fN`).
    pub function: String,
    /// Stage name.
    pub stage: String,
    /// E-nodes at the end of the stage.
    pub nodes: usize,
    /// E-classes at the end of the stage.
    pub classes: usize,
    /// Iterations run.
    pub iterations: usize,
    /// Why the runner stopped (`Saturated`, `IterationLimit(30)`, …).
    pub stop_reason: String,
    /// Wall time of the stage.
    pub time: Duration,
}

/// What the pass did.
#[derive(Clone, Debug, Default)]
pub struct EggReport {
    /// Per function and stage, in order.
    pub stages: Vec<StageStats>,
    /// How often each rule changed the e-graph (summed over functions and iterations).
    pub rules_fired: BTreeMap<String, usize>,
    /// Fused ops added to the module, by mnemonic.
    pub fused_ops: BTreeMap<String, usize>,
    /// Functions whose body was rewritten.
    pub rewritten: Vec<String>,
    /// Groups of dense layers sharing their input merged into one ([`qkv`]).
    pub merged_denses: usize,
    /// Functions left unchanged although rules fired, or whose e-graph is over the node limit
    /// from the start (no runner could search it), with the reason.
    pub skipped: Vec<String>,
    /// Time spent converting functions into e-graphs.
    pub convert_time: Duration,
    /// Time spent extracting (computing the best node of every class).
    pub extract_time: Duration,
    /// Time spent rebuilding function bodies.
    pub rebuild_time: Duration,
    /// Time spent merging dense layers that share their input ([`qkv`]).
    pub merge_time: Duration,
    /// Wall time of the whole pass.
    pub total_time: Duration,
}

impl EggReport {
    /// Whether any function was rewritten.
    pub fn changed(&self) -> bool {
        !self.rewritten.is_empty() || self.merged_denses > 0
    }

    /// How often rule `name` fired.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn fired(&self, name: &str) -> usize {
        self.rules_fired.get(name).copied().unwrap_or(0)
    }
}

impl fmt::Display for EggReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "egg fusion: {:.3} ms (convert {:.3} ms, extract {:.3} ms, rebuild {:.3} ms, merge {:.3} ms), rewritten: [{}]",
            ms(self.total_time),
            ms(self.convert_time),
            ms(self.extract_time),
            ms(self.rebuild_time),
            ms(self.merge_time),
            self.rewritten.join(", ")
        )?;
        for s in &self.stages {
            writeln!(
                f,
                "  {}/{}: {} iterations, {} e-nodes, {} e-classes, stop: {}, {:.3} ms",
                s.function,
                s.stage,
                s.iterations,
                s.nodes,
                s.classes,
                s.stop_reason,
                ms(s.time)
            )?;
        }
        let fired: Vec<String> = self.rules_fired.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
        writeln!(f, "  rules fired: {}", if fired.is_empty() { "none".to_string() } else { fired.join(", ") })?;
        let fused: Vec<String> = self.fused_ops.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
        writeln!(f, "  fused ops added: {}", if fused.is_empty() { "none".to_string() } else { fused.join(", ") })?;
        if self.merged_denses > 0 {
            writeln!(f, "  dense layers sharing their input merged: {} groups", self.merged_denses)?;
        }
        for s in &self.skipped {
            writeln!(f, "  skipped: {s}")?;
        }
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Extraction cost: `(uses an internal idiom, weighted size)`, compared lexicographically.
/// Fused ops weigh 1, other ops 10, leaves 1; sizes saturate at 1e300.
#[derive(Clone, Copy, Debug, Default)]
pub struct FusionCost;

impl CostFunction<TNode> for FusionCost {
    type Cost = (bool, f64);

    fn cost<C>(&mut self, enode: &TNode, mut costs: C) -> (bool, f64)
    where
        C: FnMut(Id) -> (bool, f64),
    {
        let (mut bad, mut total) = match enode {
            TNode::Leaf(_) => (false, 1.0),
            TNode::Internal(..) => (true, f64::INFINITY),
            TNode::Op(k, _) => (false, op_cost(k.op())),
        };
        for &c in enode.children() {
            let (b, v) = costs(c);
            bad |= b;
            total = (total + v).min(1e300);
        }
        (bad, total)
    }
}

/// The cost of one op node: fused ops 1, reshapes 2 (an alias at run time: a fused op that needs
/// its bias or gamma reshaped from the `[1,…,1,N]` form still wins), other ops 10.
fn op_cost(op: &Op) -> f64 {
    if is_fused(op) {
        1.0
    } else if matches!(op, Op::Reshape { .. }) {
        2.0
    } else {
        10.0
    }
}

fn is_fused(op: &Op) -> bool {
    op.op_type().name().starts_with("fused_")
}

/// Whether the pass models a node as an e-node (else it is opaque and kept in place).
fn modeled(op: &Op, outputs: usize) -> bool {
    outputs == 1
        && op.callees().is_empty()
        && !matches!(op, Op::Constant(_) | Op::OptimizationBarrier | Op::SchedulingBarrier | Op::RngBitGenerator { .. })
}

/// Runs the fusion pass on every function of `m`, rewriting bodies in place.
///
/// Errors only on a structurally broken module (a body entry or operand out of range); a
/// function that cannot be converted is left as it is and listed in [`EggReport::skipped`].
pub fn run(m: &mut Module, cfg: &EggConfig) -> Result<EggReport> {
    let start = Instant::now();
    check_ranges(m)?;
    let mut report = EggReport::default();
    let external = external_uses(m);
    // egg reads `quanta`'s clock for its statistics and time limit; the first read in a process
    // would calibrate the TSC (a spin of 0.6 ms to 200 ms, paid by the first compile). A mock
    // clock that stands still costs nothing: the stages' time limit is enforced by a runner hook
    // on `std`'s clock instead (`rewrite_function`), and egg's own per-iteration times read zero.
    let (clock, _) = quanta::Clock::mock();
    quanta::with_clock(&clock, || {
        for fi in 0..m.functions.len() {
            rewrite_function(m, FuncId(fi as u32), cfg, &external, &mut report);
        }
    });
    let t_merge = Instant::now();
    report.merged_denses = qkv::run(m);
    report.merge_time = t_merge.elapsed();
    report.total_time = start.elapsed();
    Ok(report)
}

/// Checks that every body entry, operand and output id is in range (so the pass can index).
fn check_ranges(m: &Module) -> Result<()> {
    for (fi, f) in m.functions.iter().enumerate() {
        for &n in &f.body {
            let Some(node) = m.nodes.get(n.index()) else {
                return Err(Error::invalid("egraph", format!("function f{fi}: body entry {n} is out of range")));
            };
            if let Some(v) = node.inputs.iter().chain(&node.outputs).find(|v| v.index() >= m.values.len()) {
                return Err(Error::invalid(
                    "egraph",
                    format!("function f{fi}: node {n} refers to value {v}, out of range"),
                ));
            }
        }
        if let Some(v) = f.outputs.iter().flatten().chain(&f.params).find(|v| v.index() >= m.values.len()) {
            return Err(Error::invalid("egraph", format!("function f{fi}: value {v} is out of range")));
        }
    }
    Ok(())
}

/// For every value: whether a function other than its own reads it (operand or output).
fn external_uses(m: &Module) -> Vec<bool> {
    let mut ext = vec![false; m.values.len()];
    for (fi, f) in m.functions.iter().enumerate() {
        let uses = f.body.iter().flat_map(|n| m.nodes[n.index()].inputs.iter()).chain(f.outputs.iter().flatten());
        for &v in uses {
            if m.values[v.index()].func.index() != fi {
                ext[v.index()] = true;
            }
        }
    }
    ext
}

/// The e-graph of one function with the maps back to the IR.
struct Converted {
    eg: EG,
    order: Vec<Id>,
    class_of: HashMap<ValueId, Id>,
    orig: HashMap<Id, Vec<NodeId>>,
}

fn add_leaf(eg: &mut EG, m: &Module, v: ValueId, data: Option<crate::ir::op::ConstData>) -> Id {
    let shape = m.shape(v).clone();
    let splat = data.as_ref().and_then(|d| splat_value(&shape, d));
    let i = eg.analysis.leaves.len() as u32;
    eg.analysis.leaves.push(LeafInfo { value: v, shape, data, splat });
    eg.add(TNode::Leaf(i))
}

fn convert(m: &Module, f: FuncId) -> std::result::Result<Converted, String> {
    let mut eg = EG::new(TAnalysis::new(vec![]));
    let mut class_of: HashMap<ValueId, Id> = HashMap::new();
    let mut orig: HashMap<Id, Vec<NodeId>> = HashMap::new();
    let mut order: Vec<Id> = vec![];
    for &p in &m.func(f).params {
        let id = add_leaf(&mut eg, m, p, None);
        class_of.insert(p, id);
        order.push(id);
    }
    for &n in &m.func(f).body {
        let node = &m.nodes[n.index()];
        let mut children = vec![];
        for &i in &node.inputs {
            let id = match class_of.get(&i) {
                Some(&id) => id,
                None if m.value(i).func != f => {
                    let id = add_leaf(&mut eg, m, i, None);
                    class_of.insert(i, id);
                    order.push(id);
                    id
                }
                None => return Err(format!("{} reads {} before its definition", node.op.op_type().name(), i)),
            };
            children.push(id);
        }
        match &node.op {
            Op::Constant(data) if node.outputs.len() == 1 => {
                let id = add_leaf(&mut eg, m, node.outputs[0], Some(data.clone()));
                class_of.insert(node.outputs[0], id);
                order.push(id);
            }
            op if modeled(op, node.outputs.len()) => {
                let out = node.outputs[0];
                let id = eg.add(TNode::op(op.clone(), &children));
                if eg[id].data.shape.as_ref() != Some(m.shape(out)) {
                    return Err(format!(
                        "{} {}: recorded shape {} is not what inference gives (run the verifier)",
                        op.op_type().name(),
                        out,
                        m.shape(out)
                    ));
                }
                class_of.insert(out, id);
                order.push(id);
                orig.entry(id).or_default().push(n);
            }
            _ => {
                for &o in &node.outputs {
                    let id = add_leaf(&mut eg, m, o, None);
                    class_of.insert(o, id);
                    order.push(id);
                }
            }
        }
    }
    Ok(Converted { eg, order, class_of, orig })
}

/// Rebuild state: which class became which value, which old nodes are placed.
struct Rebuild<'a> {
    f: FuncId,
    eg: &'a EG,
    ex: &'a Extraction,
    orig: HashMap<Id, Vec<NodeId>>,
    val: HashMap<Id, ValueId>,
    placed: HashSet<NodeId>,
    opaque_done: HashSet<ValueId>,
}

impl Rebuild<'_> {
    /// The value of class `root`, emitting (in dependency order) what it needs.
    fn materialize(&mut self, m: &mut Module, root: Id) -> std::result::Result<ValueId, String> {
        let mut stack = vec![(self.eg.find(root), false)];
        let mut on_path: HashSet<Id> = HashSet::new();
        while let Some((c, expanded)) = stack.pop() {
            let c = self.eg.find(c);
            if self.val.contains_key(&c) {
                continue;
            }
            let node = self.ex.node(c).ok_or_else(|| format!("class {c} has no extractable node"))?;
            if !expanded {
                if !on_path.insert(c) {
                    return Err("the extracted term has a cycle".to_string());
                }
                stack.push((c, true));
                for &ch in node.children().iter().rev() {
                    if !self.val.contains_key(&self.eg.find(ch)) {
                        stack.push((ch, false));
                    }
                }
                continue;
            }
            on_path.remove(&c);
            let v = self.place(m, c, node)?;
            self.val.insert(c, v);
        }
        self.val.get(&self.eg.find(root)).copied().ok_or_else(|| "root not materialised".to_string())
    }

    fn place(&mut self, m: &mut Module, c: Id, node: &TNode) -> std::result::Result<ValueId, String> {
        match node {
            TNode::Leaf(i) => {
                let info = &self.eg.analysis.leaves[*i as usize];
                let v = info.value;
                let vd = m.value(v);
                match vd.def {
                    ValueDef::Node { node: n, .. } if vd.func == self.f => {
                        if info.data.is_some() {
                            if self.placed.insert(n) {
                                m.func_mut(self.f).body.push(n);
                            }
                        } else if !self.opaque_done.contains(&v) {
                            return Err(format!("{v} is needed before the node defining it"));
                        }
                    }
                    _ => {}
                }
                Ok(v)
            }
            TNode::Internal(..) => Err("extraction chose an internal idiom".to_string()),
            TNode::Op(key, ch) => {
                let inputs: Vec<ValueId> = ch.iter().map(|&x| self.val[&self.eg.find(x)]).collect();
                let reuse = self.orig.get(&c).into_iter().flatten().copied().find(|&n0| {
                    !self.placed.contains(&n0)
                        && m.nodes[n0.index()].op == *key.op()
                        && m.nodes[n0.index()].inputs == inputs
                });
                if let Some(n0) = reuse {
                    self.placed.insert(n0);
                    m.func_mut(self.f).body.push(n0);
                    return Ok(m.nodes[n0.index()].outputs[0]);
                }
                let shape = self.eg[c].data.shape.clone().ok_or_else(|| format!("class {c} has no shape"))?;
                let n = m.add_node(self.f, key.op().clone(), inputs, vec![shape]);
                self.placed.insert(n);
                Ok(m.nodes[n.index()].outputs[0])
            }
        }
    }
}

fn fused_counts(m: &Module, body: &[NodeId]) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for &n in body {
        let op = &m.nodes[n.index()].op;
        if is_fused(op) {
            *c.entry(op.op_type().name().to_string()).or_insert(0) += 1;
        }
    }
    c
}

fn rewrite_function(m: &mut Module, f: FuncId, cfg: &EggConfig, external: &[bool], report: &mut EggReport) {
    let label = m.func_label(f);
    if m.func(f).outputs.is_none() || m.func(f).body.is_empty() {
        return;
    }
    // The e-graph has one e-node per parameter and at least one per body node with a result
    // (the usual case after CSE: nothing hash-conses together). Over the node limit no stage can
    // run (below), so skip the conversion too: it and dropping the e-graph cost most of the pass
    // on a 200,000-node chain.
    let lower_bound =
        m.func(f).params.len() + m.func(f).body.iter().filter(|n| !m.nodes[n.index()].outputs.is_empty()).count();
    if lower_bound > cfg.node_limit {
        report.skipped.push(format!("{label}: {lower_bound} e-nodes exceed the node limit {}", cfg.node_limit));
        return;
    }
    let t_convert = Instant::now();
    let conv = convert(m, f);
    report.convert_time += t_convert.elapsed();
    let conv = match conv {
        Ok(c) => c,
        Err(why) => {
            report.skipped.push(format!("{label}: {why}"));
            return;
        }
    };
    let Converted { mut eg, order, class_of, orig } = conv;
    // An e-graph over the node limit stops every runner before its first search (egg checks the
    // limits first): nothing can fire, so skip the stages instead of paying for each runner's
    // set-up and rebuild (seconds on a 200,000-node chain).
    if eg.total_size() > cfg.node_limit {
        report.skipped.push(format!("{label}: {} e-nodes exceed the node limit {}", eg.total_size(), cfg.node_limit));
        return;
    }
    let mut fusion_fired = false;
    for (stage_index, (stage, rules)) in rules::stage_rules().into_iter().enumerate() {
        let rewrites: Vec<_> = rules.into_iter().map(|r| r.rewrite()).collect();
        let t = Instant::now();
        let limit = cfg.time_limit;
        let mut runner: Runner<TNode, TAnalysis, ()> = Runner::new(TAnalysis::new(vec![]))
            .with_egraph(eg)
            .with_node_limit(cfg.node_limit)
            .with_iter_limit(cfg.iter_limit)
            // Checked before each iteration, as egg checks its own limit (whose clock is mocked
            // in `run`).
            .with_hook(move |_| match t.elapsed() {
                e if e > limit => Err(format!("time limit {limit:?} reached after {e:?}")),
                _ => Ok(()),
            })
            .with_scheduler(SimpleScheduler)
            .run(&rewrites);
        runner.egraph.rebuild();
        for it in &runner.iterations {
            for (name, n) in &it.applied {
                *report.rules_fired.entry(name.to_string()).or_insert(0) += n;
                fusion_fired |= stage_index > 0 && *n > 0;
            }
        }
        report.stages.push(StageStats {
            function: label.clone(),
            stage: stage.to_string(),
            nodes: runner.egraph.total_number_of_nodes(),
            classes: runner.egraph.number_of_classes(),
            iterations: runner.iterations.len(),
            stop_reason: runner.stop_reason.as_ref().map(|r| format!("{r:?}")).unwrap_or_else(|| "none".to_string()),
            time: t.elapsed(),
        });
        eg = runner.egraph;
    }
    if !fusion_fired {
        return;
    }
    // A class holding values of two shapes means a rule proved unequal values equal; whatever
    // extraction picks for it may not fit its users, so keep the function as it was.
    if let Some(c) = eg.classes().find(|c| c.data.shape_conflict) {
        report.skipped.push(format!(
            "{label}: e-class {} merged values of different shapes (a fusion rule is unsound here)",
            c.id
        ));
        return;
    }
    let t_extract = Instant::now();
    let ex = Extraction::new(&eg, &order);
    report.extract_time += t_extract.elapsed();
    let t_rebuild = Instant::now();
    let orig: HashMap<Id, Vec<NodeId>> = orig.into_iter().fold(HashMap::new(), |mut acc, (id, ns)| {
        acc.entry(eg.find(id)).or_insert_with(Vec::new).extend(ns);
        acc
    });
    let old_body = std::mem::take(&mut m.func_mut(f).body);
    let mut rb =
        Rebuild { f, eg: &eg, ex: &ex, orig, val: HashMap::new(), placed: HashSet::new(), opaque_done: HashSet::new() };
    let mut opaque_inputs: Vec<(NodeId, Vec<ValueId>)> = vec![];
    let mut root_map: Vec<(ValueId, ValueId)> = vec![];
    let mut result: std::result::Result<(), String> = Ok(());
    for &n in &old_body {
        let (op, inputs, outputs) = {
            let node = &m.nodes[n.index()];
            (node.op.clone(), node.inputs.clone(), node.outputs.clone())
        };
        let step = (|| -> std::result::Result<(), String> {
            if modeled(&op, outputs.len()) || matches!(op, Op::Constant(_)) {
                for o in outputs.iter().filter(|o| external[o.index()]) {
                    let nv = rb.materialize(m, class_of[o])?;
                    root_map.push((*o, nv));
                }
            } else {
                let mut ins = vec![];
                for i in &inputs {
                    ins.push(match class_of.get(i) {
                        Some(&c) => rb.materialize(m, c)?,
                        None => *i,
                    });
                }
                m.func_mut(f).body.push(n);
                rb.placed.insert(n);
                rb.opaque_done.extend(outputs.iter().copied());
                opaque_inputs.push((n, ins));
            }
            Ok(())
        })();
        if step.is_err() {
            result = step;
            break;
        }
    }
    if result.is_ok() {
        let outs = m.func(f).outputs.clone().unwrap_or_default();
        for o in outs {
            if let Some(&c) = class_of.get(&o) {
                match rb.materialize(m, c) {
                    Ok(nv) => root_map.push((o, nv)),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
    }
    if let Err(why) = result {
        report.rebuild_time += t_rebuild.elapsed();
        m.func_mut(f).body = old_body;
        report.skipped.push(format!("{label}: {why}"));
        return;
    }
    for (n, ins) in opaque_inputs {
        m.nodes[n.index()].inputs = ins;
    }
    for (old, new) in root_map {
        replace_all_uses(m, old, new);
    }
    let before = fused_counts(m, &old_body);
    let new_body = m.func(f).body.clone();
    for (k, v) in fused_counts(m, &new_body) {
        let added = v.saturating_sub(before.get(&k).copied().unwrap_or(0));
        if added > 0 {
            *report.fused_ops.entry(k).or_insert(0) += added;
        }
    }
    report.rewritten.push(label);
    report.rebuild_time += t_rebuild.elapsed();
}
