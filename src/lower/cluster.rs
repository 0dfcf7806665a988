//! Clustering: groups the elementwise F32/F64 nodes of a function into fused [`LoopKernel`]s and
//! orders them with the remaining nodes into a schedule.
//!
//! # What may join a cluster
//!
//! A node is *fusable* when it has one output with a static F32 or F64 shape `S`, every operand
//! it reads has the same dtype and either the dims of `S` (read element by element) or exactly
//! one element (read as a broadcast scalar), and it is one of:
//!
//! - `Binary` Add, Sub, Mul, Div, Max, Min;
//! - `Unary` ops the JIT supports for the dtype ([`crate::jit::supports`]);
//! - `Clamp(lo, x, hi)` (emitted as `Min(Max(lo, x), hi)`, the catalogue's definition);
//! - `Where(Compare(a, b), t, f)` when the comparison is not total-order, its result has the dims
//!   of `S`, and this Where is its only user (the comparison is absorbed into a `Select`);
//! - `ConvertDType` to the operand's own dtype (an alias);
//! - `BroadcastInDim` of a one-element operand (a scalar input of the kernel).
//!
//! One-element constants read by a fusable node become `Const` instructions.
//!
//! # How clusters are formed
//!
//! The body is walked in order with at most one *open* cluster, keyed by (dtype, dims). A fusable
//! node with the open cluster's key joins it; one with another key closes it and opens a new one.
//! A non-fusable node that reads no value of the open cluster is scheduled before it (it only
//! depends on values computed earlier), so it does not split the cluster; one that reads a value
//! of the open cluster closes it first. A cluster therefore only reads values computed before it
//! runs, and no outside node runs between its members. Constants are not scheduled (the executor
//! preloads them). Values of a cluster read outside it, or returned, become kernel outputs.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{BinaryOp, CompareOp, Op, UnaryOp};
use crate::lower::loop_kernel::{Access, ElemTy, Inst, LoopKernel, Reg};

/// Largest number of member nodes in one cluster (bounds Cranelift compile time per kernel).
pub const MAX_CLUSTER_NODES: usize = 512;

/// How a fusable node is emitted.
#[derive(Clone, Debug, PartialEq)]
enum Fuse {
    Unary(UnaryOp, ValueId),
    Binary(BinaryOp, ValueId, ValueId),
    /// The output is the operand itself (same-dtype convert, broadcast of one element).
    Alias(ValueId),
    Clamp(ValueId, ValueId, ValueId),
    Select {
        dir: CompareOp,
        a: ValueId,
        b: ValueId,
        t: ValueId,
        f: ValueId,
    },
}

impl Fuse {
    /// The values the emitted instructions read (for a Select: the comparison's operands).
    fn reads(&self) -> Vec<ValueId> {
        match self {
            Fuse::Unary(_, x) | Fuse::Alias(x) => vec![*x],
            Fuse::Binary(_, a, b) => vec![*a, *b],
            Fuse::Clamp(lo, x, hi) => vec![*lo, *x, *hi],
            Fuse::Select { a, b, t, f, .. } => vec![*a, *b, *t, *f],
        }
    }
}

/// One fused group of nodes and its compiled-to-be kernel.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Element dtype (F32 or F64).
    pub dtype: DType,
    /// Iteration shape (the dims of every member's output).
    pub dims: Vec<i64>,
    /// Number of elements iterated.
    pub len: usize,
    /// Member nodes, in execution order.
    pub nodes: Vec<NodeId>,
    /// Comparisons absorbed into a member's `Select`.
    pub absorbed: Vec<NodeId>,
    /// The value read by each kernel input.
    pub inputs: Vec<ValueId>,
    /// The value written by each kernel output.
    pub outputs: Vec<ValueId>,
    /// The loop body.
    pub kernel: LoopKernel,
}

/// One entry of the schedule: a cluster or a single node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// `clusters[i]`.
    Cluster(usize),
    /// A node run on its own (any op other than a constant).
    Node(NodeId),
}

/// The clusters of a function and the order to run them and the other nodes in.
#[derive(Clone, Debug, Default)]
pub struct Clustering {
    /// The clusters (each with at least one output).
    pub clusters: Vec<Cluster>,
    /// Execution order. Constants are not listed (they are preloaded).
    pub schedule: Vec<Item>,
}

/// The element type of a loop kernel over `d`, if any.
pub fn elem_ty(d: DType) -> Option<ElemTy> {
    match d {
        DType::Float32 => Some(ElemTy::F32),
        DType::Float64 => Some(ElemTy::F64),
        _ => None,
    }
}

/// The value of a one-element Constant `v` of dtype `d` (F32/F64), as f64.
fn const_scalar(m: &Module, v: ValueId, d: DType) -> Option<f64> {
    let ValueDef::Node { node, .. } = m.value(v).def else { return None };
    let Op::Constant(data) = &m.node(node).op else { return None };
    let s = m.shape(v);
    if s.dtype != d || s.size() != Some(1) {
        return None;
    }
    let b = data.0.as_slice();
    match d {
        DType::Float32 => Some(f32::from_le_bytes(b.get(..4)?.try_into().ok()?) as f64),
        DType::Float64 => Some(f64::from_le_bytes(b.get(..8)?.try_into().ok()?)),
        _ => None,
    }
}

/// The node defining `v`, if any.
fn def_node(m: &Module, v: ValueId) -> Option<NodeId> {
    match m.value(v).def {
        ValueDef::Node { node, .. } => Some(node),
        ValueDef::Param(_) => None,
    }
}

struct Analysis<'m> {
    m: &'m Module,
    /// Number of reads of each value by nodes of the function (with multiplicity).
    uses: Vec<u32>,
    /// Values returned by the function.
    returned: HashSet<ValueId>,
}

impl Analysis<'_> {
    /// Whether operand `v` may be read by a kernel over (`d`, `dims`).
    fn operand_ok(&self, v: ValueId, d: DType, dims: &[i64]) -> bool {
        let s = self.m.shape(v);
        s.dtype == d && !s.is_dynamic() && (s.dims == dims || s.size() == Some(1))
    }

    /// How node `n` would be emitted in a cluster, or `None` if it is not fusable.
    fn fuse(&self, n: NodeId) -> Option<Fuse> {
        let m = self.m;
        let node = m.node(n);
        if node.outputs.len() != 1 {
            return None;
        }
        let out = m.shape(node.outputs[0]);
        let ty = elem_ty(out.dtype)?;
        if out.is_dynamic() {
            return None;
        }
        let (d, dims) = (out.dtype, out.dims.as_slice());
        let ins = &node.inputs;
        let fuse = match (&node.op, ins.as_slice()) {
            (Op::Binary(op), &[a, b]) => {
                let ok = matches!(
                    op,
                    BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min
                );
                if !ok {
                    return None;
                }
                Fuse::Binary(*op, a, b)
            }
            (Op::Unary(op), &[x]) => {
                if !crate::jit::supports(ty, &Inst::Unary(*op, 0)) {
                    return None;
                }
                Fuse::Unary(*op, x)
            }
            (Op::Clamp, &[lo, x, hi]) => Fuse::Clamp(lo, x, hi),
            (Op::ConvertDType { dtype }, &[x]) if *dtype == m.shape(x).dtype => Fuse::Alias(x),
            (Op::BroadcastInDim { .. }, &[x]) if m.shape(x).size() == Some(1) => Fuse::Alias(x),
            (Op::Where, &[cond, t, f]) => {
                let c = def_node(m, cond)?;
                let cn = m.node(c);
                let Op::Compare { dir, total_order: false } = cn.op else { return None };
                if cn.func != node.func
                    || self.uses[cond.index()] != 1
                    || self.returned.contains(&cond)
                    || m.shape(cond).dims != dims
                    || cn.inputs.len() != 2
                {
                    return None;
                }
                Fuse::Select { dir, a: cn.inputs[0], b: cn.inputs[1], t, f }
            }
            _ => return None,
        };
        fuse.reads().iter().all(|&v| self.operand_ok(v, d, dims)).then_some(fuse)
    }
}

/// An open cluster while walking the body.
struct Open {
    dtype: DType,
    dims: Vec<i64>,
    nodes: Vec<(NodeId, Fuse)>,
    produced: HashSet<ValueId>,
}

/// Clusters the body of function `f` of `m` (see the module docs for the rule).
pub fn cluster_function(m: &Module, f: FuncId) -> Clustering {
    let fd = m.func(f);
    let mut uses = vec![0u32; m.values.len()];
    for &n in &fd.body {
        for &v in &m.node(n).inputs {
            uses[v.index()] += 1;
        }
    }
    let returned: HashSet<ValueId> = fd.outputs.iter().flatten().copied().collect();
    let an = Analysis { m, uses, returned };

    // Comparisons absorbed by a fusable Where (decided up front: it only depends on shapes).
    let mut fusable: HashMap<NodeId, Fuse> = HashMap::new();
    let mut absorbed_by: HashMap<NodeId, NodeId> = HashMap::new();
    for &n in &fd.body {
        if let Some(fz) = an.fuse(n) {
            if let (Op::Where, Some(c)) = (&m.node(n).op, def_node(m, m.node(n).inputs[0])) {
                absorbed_by.insert(c, n);
            }
            fusable.insert(n, fz);
        }
    }

    let mut open: Option<Open> = None;
    let mut groups: Vec<Vec<(NodeId, Fuse)>> = vec![];
    let mut schedule = vec![];
    let close = |open: &mut Option<Open>, groups: &mut Vec<Vec<(NodeId, Fuse)>>, schedule: &mut Vec<Item>| {
        if let Some(o) = open.take() {
            schedule.push(Item::Cluster(groups.len()));
            groups.push(o.nodes);
        }
    };
    for &n in &fd.body {
        let node = m.node(n);
        if absorbed_by.contains_key(&n) || matches!(node.op, Op::Constant(_)) {
            continue;
        }
        match fusable.get(&n) {
            Some(fz) => {
                let out = m.shape(node.outputs[0]);
                let joins = open
                    .as_ref()
                    .is_some_and(|o| o.dtype == out.dtype && o.dims == out.dims && o.nodes.len() < MAX_CLUSTER_NODES);
                if !joins {
                    close(&mut open, &mut groups, &mut schedule);
                    open = Some(Open {
                        dtype: out.dtype,
                        dims: out.dims.clone(),
                        nodes: vec![],
                        produced: HashSet::new(),
                    });
                }
                if let Some(o) = open.as_mut() {
                    o.nodes.push((n, fz.clone()));
                    o.produced.insert(node.outputs[0]);
                }
            }
            None => {
                if open.as_ref().is_some_and(|o| node.inputs.iter().any(|v| o.produced.contains(v))) {
                    close(&mut open, &mut groups, &mut schedule);
                }
                schedule.push(Item::Node(n));
            }
        }
    }
    close(&mut open, &mut groups, &mut schedule);

    // Values read outside the cluster that defines them: by single nodes, by other clusters, or
    // returned.
    let mut owner: HashMap<ValueId, usize> = HashMap::new();
    for (ci, g) in groups.iter().enumerate() {
        for (n, _) in g {
            owner.insert(m.node(*n).outputs[0], ci);
        }
    }
    let mut external: HashSet<ValueId> = an.returned.clone();
    for item in &schedule {
        if let Item::Node(n) = item {
            external.extend(m.node(*n).inputs.iter().copied());
        }
    }
    for (ci, g) in groups.iter().enumerate() {
        for (_, fz) in g {
            external.extend(fz.reads().into_iter().filter(|v| owner.get(v) != Some(&ci)));
        }
    }

    let mut clusters = Vec::with_capacity(groups.len());
    let mut renumber = vec![None; groups.len()];
    for (ci, g) in groups.into_iter().enumerate() {
        let outputs: Vec<ValueId> =
            g.iter().map(|(n, _)| m.node(*n).outputs[0]).filter(|v| external.contains(v)).collect();
        if outputs.is_empty() {
            continue; // every member is dead
        }
        renumber[ci] = Some(clusters.len());
        clusters.push(build_cluster(m, &absorbed_by, g, outputs));
    }
    let schedule = schedule
        .into_iter()
        .filter_map(|it| match it {
            Item::Cluster(ci) => renumber[ci].map(Item::Cluster),
            other => Some(other),
        })
        .collect();
    Clustering { clusters, schedule }
}

/// Builds a kernel body: registers for values, inputs deduplicated by value.
struct Emitter<'m> {
    m: &'m Module,
    dtype: DType,
    dims: Vec<i64>,
    insts: Vec<Inst>,
    inputs: Vec<ValueId>,
    access: Vec<Access>,
    regs: HashMap<ValueId, Reg>,
}

impl Emitter<'_> {
    fn push(&mut self, inst: Inst) -> Reg {
        self.insts.push(inst);
        self.insts.len() - 1
    }

    /// The constant held by register `r`, if it is a `Const`.
    fn const_of(&self, r: Reg) -> Option<f64> {
        match self.insts.get(r) {
            Some(Inst::Const(c)) => Some(*c),
            _ => None,
        }
    }

    /// Emits `op(a, b)`. Max/Min against a non-NaN constant `c` become one compare and select,
    /// exact for every `x` (the general Max/Min sequence also handles a NaN or signed-zero
    /// second operand, which a known constant rules out):
    /// - `max(x, c)` = `x <= c ? c : x` when `c` is +0, else `x < c ? c : x`;
    /// - `min(x, c)` = `x >= c ? c : x` when `c` is −0, else `x > c ? c : x`.
    ///
    /// (Ordered comparisons: a NaN `x` selects `x`; ties pick `c`, identical to `x` except for
    /// the zero whose sign the rule fixes: max(−0, +0) = +0, min(+0, −0) = −0.)
    fn binary(&mut self, op: BinaryOp, a: Reg, b: Reg) -> Reg {
        let (x, c) = match (self.const_of(a), self.const_of(b)) {
            (_, Some(c)) if !c.is_nan() => (a, (b, c)),
            (Some(c), _) if !c.is_nan() => (b, (a, c)),
            _ => return self.push(Inst::Binary(op, a, b)),
        };
        let (creg, cval) = c;
        let pos_zero = cval == 0.0 && cval.is_sign_positive();
        let neg_zero = cval == 0.0 && cval.is_sign_negative();
        let dir = match op {
            BinaryOp::Max if pos_zero => CompareOp::LessOrEqual,
            BinaryOp::Max => CompareOp::LessThan,
            BinaryOp::Min if neg_zero => CompareOp::GreaterOrEqual,
            BinaryOp::Min => CompareOp::GreaterThan,
            _ => return self.push(Inst::Binary(op, a, b)),
        };
        self.push(Inst::Select { dir, a: x, b: creg, t: creg, f: x })
    }

    /// The register holding `v`: a member's result, a constant, or a load of a new input.
    fn reg_of(&mut self, v: ValueId) -> Reg {
        if let Some(&r) = self.regs.get(&v) {
            return r;
        }
        let inst = match const_scalar(self.m, v, self.dtype) {
            Some(c) => Inst::Const(c),
            None => {
                self.inputs.push(v);
                let full = self.m.shape(v).dims == self.dims;
                self.access.push(if full { Access::Full } else { Access::Scalar });
                Inst::Load(self.inputs.len() - 1)
            }
        };
        let r = self.push(inst);
        self.regs.insert(v, r);
        r
    }
}

/// Emits the kernel of one group of fusable nodes.
fn build_cluster(
    m: &Module,
    absorbed_by: &HashMap<NodeId, NodeId>,
    group: Vec<(NodeId, Fuse)>,
    outputs: Vec<ValueId>,
) -> Cluster {
    let first = m.shape(m.node(group[0].0).outputs[0]);
    let (dtype, dims) = (first.dtype, first.dims.clone());
    let len = first.num_elements();
    let ty = elem_ty(dtype).unwrap_or(ElemTy::F32);
    let mut e =
        Emitter { m, dtype, dims: dims.clone(), insts: vec![], inputs: vec![], access: vec![], regs: HashMap::new() };
    let absorbed_of: HashMap<NodeId, NodeId> = absorbed_by.iter().map(|(&c, &w)| (w, c)).collect();
    let mut nodes = vec![];
    let mut absorbed = vec![];
    for (n, fz) in group {
        nodes.push(n);
        let r = match fz {
            Fuse::Alias(x) => e.reg_of(x),
            Fuse::Unary(op, x) => {
                let a = e.reg_of(x);
                e.push(Inst::Unary(op, a))
            }
            Fuse::Binary(op, x, y) => {
                let a = e.reg_of(x);
                let b = e.reg_of(y);
                e.binary(op, a, b)
            }
            Fuse::Clamp(lo, x, hi) => {
                let (lo, x, hi) = (e.reg_of(lo), e.reg_of(x), e.reg_of(hi));
                let t = e.binary(BinaryOp::Max, lo, x);
                e.binary(BinaryOp::Min, t, hi)
            }
            Fuse::Select { dir, a, b, t, f } => {
                let (a, b, t, f) = (e.reg_of(a), e.reg_of(b), e.reg_of(t), e.reg_of(f));
                if let Some(&c) = absorbed_of.get(&n) {
                    absorbed.push(c);
                }
                e.push(Inst::Select { dir, a, b, t, f })
            }
        };
        e.regs.insert(m.node(n).outputs[0], r);
    }
    let out: Vec<Reg> = outputs.iter().map(|v| e.regs[v]).collect();
    let kernel = LoopKernel { ty, inputs: e.access, insts: e.insts, outputs: out };
    Cluster { dtype, dims, len, nodes, absorbed, inputs: e.inputs, outputs, kernel }
}

/// A human-readable listing of the clusters (for dumps).
pub fn describe(m: &Module, c: &Clustering) -> String {
    let mut s = String::new();
    for (i, cl) in c.clusters.iter().enumerate() {
        let _ = writeln!(
            s,
            "cluster {i}: {} {:?} ({} elements), {} nodes, {} absorbed compares",
            cl.dtype,
            cl.dims,
            cl.len,
            cl.nodes.len(),
            cl.absorbed.len()
        );
        let _ = writeln!(s, "  nodes: {}", join(cl.nodes.iter().map(|n| format!("{n} {}", m.node(*n).op.op_type()))));
        let _ = writeln!(
            s,
            "  inputs: {}",
            join(cl.inputs.iter().zip(&cl.kernel.inputs).map(|(v, a)| format!("{v} {a:?}")))
        );
        let _ = writeln!(s, "  outputs: {}", join(cl.outputs.iter().map(|v| v.to_string())));
        for (r, inst) in cl.kernel.insts.iter().enumerate() {
            let _ = writeln!(s, "    r{r} = {inst:?}");
        }
        let _ = writeln!(s, "    store {:?}", cl.kernel.outputs);
    }
    let _ = writeln!(
        s,
        "schedule: {}",
        join(c.schedule.iter().map(|it| match it {
            Item::Cluster(i) => format!("cluster{i}"),
            Item::Node(n) => n.to_string(),
        }))
    );
    s
}

fn join(it: impl Iterator<Item = String>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::text::parse_module;

    fn clusters(text: &str) -> (Module, Clustering) {
        let m = parse_module(text).expect("parse");
        let c = cluster_function(&m, m.main);
        (m, c)
    }

    #[test]
    fn independent_node_is_hoisted_and_does_not_split_a_cluster() {
        // %3 (reduce of y) does not read the open cluster {%2}, so %4 joins %2's cluster and
        // reads %3 as a broadcast scalar; the reduce runs first.
        let (m, c) = clusters(
            "module @t\n\nfunc @main(%0 \"x\": f32[4], %1 \"y\": f32[4]) {\n  %2 = exp %0 : f32[4]\n  \
             %3 = reduce_sum %1, axes=[0] : f32[]\n  %4 = mul %2, %3 : f32[4]\n  return %4\n}\n",
        );
        assert_eq!(c.clusters.len(), 1);
        let cl = &c.clusters[0];
        assert_eq!(cl.nodes.len(), 2);
        assert_eq!(cl.kernel.inputs, vec![Access::Full, Access::Scalar]);
        assert_eq!(cl.outputs.len(), 1, "%2 is internal");
        assert!(matches!(c.schedule[..], [Item::Node(_), Item::Cluster(0)]));
        assert_eq!(
            m.node(match c.schedule[0] {
                Item::Node(n) => n,
                Item::Cluster(_) => unreachable!(),
            })
            .op
            .op_type(),
            crate::ir::optype::OpType::ReduceSum
        );
    }

    #[test]
    fn a_reader_of_the_open_cluster_closes_it_and_its_value_becomes_an_output() {
        let (_, c) = clusters(
            "module @t\n\nfunc @main(%0 \"x\": f32[2,3]) {\n  %1 = neg %0 : f32[2,3]\n  \
             %2 = reduce_sum %1, axes=[1] : f32[2]\n  %3 = abs %1 : f32[2,3]\n  return %2, %3\n}\n",
        );
        assert_eq!(c.clusters.len(), 2);
        assert!(matches!(c.schedule[..], [Item::Cluster(0), Item::Node(_), Item::Cluster(1)]));
        assert_eq!(c.clusters[0].outputs.len(), 1);
        assert_eq!(c.clusters[1].kernel.inputs, vec![Access::Full]);
    }

    #[test]
    fn compare_with_one_user_becomes_a_select_and_constants_inline() {
        let (_, c) = clusters(
            "module @t\n\nfunc @main(%0 \"x\": f64[5]) {\n  %1 = constant 0.0 : f64[]\n  \
             %2 = less_than %0, %1 : bool[5]\n  %3 = neg %0 : f64[5]\n  %4 = where %2, %3, %0 : f64[5]\n  \
             return %4\n}\n",
        );
        assert_eq!(c.clusters.len(), 1);
        let cl = &c.clusters[0];
        assert_eq!(cl.absorbed.len(), 1);
        assert_eq!(cl.kernel.ty, ElemTy::F64);
        assert!(cl.kernel.insts.contains(&Inst::Const(0.0)));
        assert!(matches!(cl.kernel.insts.last(), Some(Inst::Select { dir: CompareOp::LessThan, .. })));
        assert_eq!(c.schedule.len(), 1, "the compare is not a separate step");
    }

    #[test]
    fn shared_compare_broadcasting_operands_and_other_dtypes_stay_out() {
        // The compare has two users (where and the return), so it is not absorbed; the where is
        // then not fusable. %5 broadcasts a [1,3] operand per axis: not fusable either. i32 adds
        // are not fused.
        let (_, c) = clusters(
            "module @t\n\nfunc @main(%0 \"x\": f32[2,3], %1 \"r\": f32[1,3], %2 \"i\": i32[2]) {\n  \
             %3 = less_than %0, %0 : bool[2,3]\n  %4 = where %3, %0, %0 : f32[2,3]\n  \
             %5 = add %0, %1 : f32[2,3]\n  %6 = add %2, %2 : i32[2]\n  return %3, %4, %5, %6\n}\n",
        );
        assert!(c.clusters.is_empty(), "{:?}", c.clusters);
        assert_eq!(c.schedule.len(), 4);
    }
}
