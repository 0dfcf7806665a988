//! Fusion rules: each rule is a named, guarded Rust matcher wrapped as an egg [`Rewrite`].
//!
//! A matcher looks at one e-class and returns the e-nodes to add to it (a fused op, or an
//! internal idiom of the normalisation stage). It checks every axis, shape, dtype and constant
//! it relies on through the [analysis](super::analysis); a fused op is only offered when its own
//! shape inference gives exactly the class's shape ([`emit`]). The same matcher serves as the
//! rewrite's searcher and, re-run on the class at apply time, as its applier, so the rule is one
//! function with no pattern/guard split.
//!
//! Files group the rules by pattern family; the stages ([`stage_rules`]) are:
//! 1. `normalize`: mean, broadcast-back of a reduction, square, inverse square root;
//! 2. `gelu`, `softmax`, `layernorm`;
//! 3. `dense` (+ bias, + activation) and `attention` (which builds on stage 2's softmax).
//!
//! There are no commutativity or associativity rewrites: matchers try both operand orders of
//! `add`/`mul`/`max` themselves and read products of three factors in any bracketing.

pub mod attention;
pub mod dense;
pub mod gelu;
pub mod layernorm;
pub mod normalize;
pub mod softmax;

use std::sync::OnceLock;

use egg::{Applier, Id, Language, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};

use crate::ir::dtype::DType;
use crate::ir::infer::infer_shapes;
use crate::ir::module::Module;
use crate::ir::op::{BinaryOp, Op, ReduceKind, UnaryOp};
use crate::ir::shape::Shape;
use crate::passes::egraph::analysis::{EG, TAnalysis};
use crate::passes::egraph::lang::{Internal, TNode};

/// A matcher: the e-nodes (with operands) that the rule proves equal to the class.
pub type Matcher = fn(&EG, Id) -> Vec<TNode>;

/// A named fusion rule.
#[derive(Clone, Copy)]
pub struct Rule {
    /// Rule name (shown in the report).
    pub name: &'static str,
    /// The guarded matcher.
    pub matcher: Matcher,
}

impl Rule {
    /// The egg rewrite running this rule.
    pub fn rewrite(self) -> Rewrite<TNode, TAnalysis> {
        match Rewrite::new(self.name, self, self) {
            Ok(r) => r,
            // A rule without pattern variables cannot refer to an unbound one.
            Err(e) => panic!("fusion rule {}: {e}", self.name),
        }
    }
}

/// Largest id value of the [`local`] child references.
const LOCAL_BASE: usize = u32::MAX as usize;
/// How many earlier nodes a matcher's result may refer to with [`local`].
const MAX_LOCAL: usize = 16;

/// A child id standing for node `k` of the same matcher result: a matcher may return auxiliary
/// nodes (new operands of the fused op, such as a constant-valued length built from an iota)
/// followed by the nodes that use them. A node referred to this way is added to the e-graph as
/// its own class; every other returned node is proved equal to the matched class.
pub fn local(k: usize) -> Id {
    Id::from(LOCAL_BASE - k.min(MAX_LOCAL - 1))
}

fn local_index(id: Id) -> Option<usize> {
    let v = usize::from(id);
    (v > LOCAL_BASE - MAX_LOCAL).then(|| LOCAL_BASE - v)
}

/// The indices of a matcher result's nodes that later nodes refer to with [`local`].
fn auxiliaries(found: &[TNode]) -> Vec<bool> {
    let mut aux = vec![false; found.len()];
    for n in found {
        for &c in n.children() {
            if let Some(k) = local_index(c).filter(|&k| k < found.len()) {
                aux[k] = true;
            }
        }
    }
    aux
}

/// `node` with its [`local`] children replaced by the classes in `ids` (None if one is
/// unknown).
fn resolve(node: &TNode, ids: &[Option<Id>]) -> Option<TNode> {
    let mut n = node.clone();
    for c in n.children_mut() {
        if let Some(k) = local_index(*c) {
            *c = (*ids.get(k)?)?;
        }
    }
    Some(n)
}

/// Whether every node of a matcher result is already in the e-graph, the non-auxiliary ones in
/// class `id`.
fn all_present(eg: &EG, id: Id, found: &[TNode]) -> bool {
    let aux = auxiliaries(found);
    let mut ids: Vec<Option<Id>> = vec![];
    for (i, n) in found.iter().enumerate() {
        let Some(c) = resolve(n, &ids).and_then(|n| eg.lookup(n)) else { return false };
        if !aux[i] && eg.find(c) != eg.find(id) {
            return false;
        }
        ids.push(Some(c));
    }
    true
}

impl Searcher<TNode, TAnalysis> for Rule {
    fn search_eclass_with_limit(&self, eg: &EG, eclass: Id, limit: usize) -> Option<SearchMatches<'_, TNode>> {
        if limit == 0 {
            return None;
        }
        let found = (self.matcher)(eg, eclass);
        if !all_present(eg, eclass, &found) {
            Some(SearchMatches { eclass, substs: vec![Subst::default()], ast: None })
        } else {
            None
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl Applier<TNode, TAnalysis> for Rule {
    fn apply_one(
        &self,
        eg: &mut EG,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TNode>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        let mut changed = vec![];
        let found = (self.matcher)(eg, eclass);
        let aux = auxiliaries(&found);
        let mut ids: Vec<Option<Id>> = vec![];
        for (i, node) in found.iter().enumerate() {
            let Some(node) = resolve(node, &ids) else {
                ids.push(None);
                continue;
            };
            let id = eg.add(node);
            ids.push(Some(id));
            if !aux[i] && eg.union(id, eclass) {
                changed.push(eg.find(eclass));
            }
        }
        changed
    }
}

/// The rules of each stage, in order: `(stage name, rules)`.
pub fn stage_rules() -> Vec<(&'static str, Vec<Rule>)> {
    vec![
        ("normalize", normalize::rules()),
        ("gelu-softmax-layernorm", [gelu::rules(), softmax::rules(), layernorm::rules()].concat()),
        ("dense-attention", [dense::rules(), attention::rules()].concat()),
    ]
}

// ---- matching helpers -------------------------------------------------------------------

/// Relative tolerance for constants compared with their f32 value.
pub const REL_TOL: f64 = 1e-6;

/// `a ≈ b` within relative tolerance [`REL_TOL`].
pub fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() <= REL_TOL * b.abs().max(f64::MIN_POSITIVE)
}

/// An f32 value as the f64 with the shortest decimal that rounds to the same f32 (so an f32
/// `1e-5` becomes the attribute `1e-5`, not `9.99999974737875e-6`; both give the same f32).
pub fn shortest_f32(v: f64) -> f64 {
    format!("{:?}", v as f32).parse::<f64>().unwrap_or(v)
}

/// The shape of a class.
pub fn shape(eg: &EG, id: Id) -> Option<&Shape> {
    eg[id].data.shape.as_ref()
}

/// Whether two classes have the same known shape.
pub fn same_shape(eg: &EG, a: Id, b: Id) -> bool {
    matches!((shape(eg, a), shape(eg, b)), (Some(x), Some(y)) if x == y)
}

/// The splat constant value of a class.
pub fn splat(eg: &EG, id: Id) -> Option<f64> {
    eg[id].data.splat
}

/// `a ≈ b` for a constant `a` stored in `dtype`: within [`REL_TOL`], or, for bf16 and f16 (8 and
/// 11 significant bits), within half a unit in the last place of `b` in that type (plus
/// [`REL_TOL`] for a detour through f32), so that a constant such as 1/√2 matches in the form
/// the half type holds (0.70703125 in bf16) but not the type's next value (0.7109375).
pub fn approx_in(dtype: Option<DType>, a: f64, b: f64) -> bool {
    let mantissa_bits = match dtype {
        Some(DType::BFloat16) => 7,
        Some(DType::Float16) => 10,
        _ => return approx(a, b),
    };
    if approx(a, b) {
        return true;
    }
    if !b.is_finite() || b == 0.0 {
        return false;
    }
    let ulp = 2f64.powi(b.abs().log2().floor() as i32 - mantissa_bits);
    (a - b).abs() <= ulp / 2.0 + REL_TOL * b.abs()
}

/// The dtype of a class.
pub fn dtype(eg: &EG, id: Id) -> Option<DType> {
    shape(eg, id).map(|s| s.dtype)
}

/// Whether the class is a constant with every element ≈ `v` ([`approx_in`] its dtype).
pub fn splat_is(eg: &EG, id: Id, v: f64) -> bool {
    splat(eg, id).is_some_and(|s| approx_in(dtype(eg, id), s, v))
}

/// The value of a class that is a scalar constant (a rank-0 or single-element constant leaf),
/// or a `broadcast_in_dim`/`reshape` of one.
pub fn scalar_const(eg: &EG, id: Id) -> Option<f64> {
    scalar_const_depth(eg, id, 4)
}

fn scalar_const_depth(eg: &EG, id: Id, depth: usize) -> Option<f64> {
    let d = &eg[id].data;
    let v = d.splat?;
    if d.leaf.is_some() && d.shape.as_ref().is_some_and(|s| s.size() == Some(1)) {
        return Some(v);
    }
    if depth == 0 {
        return None;
    }
    ops(eg, id)
        .filter(|(op, _)| matches!(op, Op::BroadcastInDim { .. } | Op::Reshape { .. }))
        .find_map(|(_, c)| scalar_const_depth(eg, c[0], depth - 1))
}

/// The IR op nodes of a class.
pub fn ops(eg: &EG, id: Id) -> impl Iterator<Item = (&Op, &[Id])> {
    eg[id].nodes.iter().filter_map(|n| n.as_op())
}

/// Operands `x` of `unary(x)` nodes in the class.
pub fn unary(eg: &EG, id: Id, u: UnaryOp) -> Vec<Id> {
    ops(eg, id).filter(|(op, _)| **op == Op::Unary(u)).map(|(_, c)| c[0]).collect()
}

/// Operands `(lhs, rhs)` of `b(lhs, rhs)` nodes in the class, as written.
pub fn binary(eg: &EG, id: Id, b: BinaryOp) -> Vec<(Id, Id)> {
    ops(eg, id).filter(|(op, _)| **op == Op::Binary(b)).map(|(_, c)| (c[0], c[1])).collect()
}

/// Operands of a commutative `b` in both orders: `(a, b)` and `(b, a)` for each node.
pub fn binary_comm(eg: &EG, id: Id, b: BinaryOp) -> Vec<(Id, Id)> {
    binary(eg, id, b).into_iter().flat_map(|(x, y)| [(x, y), (y, x)]).collect()
}

/// `(x, axes)` of `reduce_<kind>(x, axes)` nodes in the class.
pub fn reduces(eg: &EG, id: Id, kind: ReduceKind) -> Vec<(Id, Vec<usize>)> {
    ops(eg, id)
        .filter_map(|(op, c)| match op {
            Op::Reduce { kind: k, axes } if *k == kind => Some((c[0], axes.clone())),
            _ => None,
        })
        .collect()
}

/// The internal nodes of a class with their operands.
pub fn internals(eg: &EG, id: Id) -> impl Iterator<Item = (&Internal, &[Id])> {
    eg[id].nodes.iter().filter_map(|n| match n {
        TNode::Internal(i, c) => Some((i, c.as_slice())),
        _ => None,
    })
}

/// `(r, axes)` of the class's `Restore{axes}(r)` nodes.
pub fn restores(eg: &EG, id: Id) -> Vec<(Id, Vec<usize>)> {
    internals(eg, id)
        .filter_map(|(i, c)| match i {
            Internal::Restore { axes, .. } => Some((c[0], axes.clone())),
            _ => None,
        })
        .collect()
}

/// `r` of the class's `Restore{axes}(r)` nodes with exactly these axes.
pub fn restores_along(eg: &EG, id: Id, axes: &[usize]) -> Vec<Id> {
    restores(eg, id).into_iter().filter(|(_, a)| a == axes).map(|(r, _)| r).collect()
}

/// `(x, axes)` of the class's `Mean{axes}(x)` nodes.
pub fn means(eg: &EG, id: Id) -> Vec<(Id, Vec<usize>)> {
    internals(eg, id)
        .filter_map(|(i, c)| match i {
            Internal::Mean { axes } => Some((c[0], axes.clone())),
            _ => None,
        })
        .collect()
}

/// Operands of the class's internal nodes of kind `kind` (`Square` or `InvSqrt`).
pub fn internal1(eg: &EG, id: Id, kind: &Internal) -> Vec<Id> {
    internals(eg, id).filter(|(i, _)| *i == kind).map(|(_, c)| c[0]).collect()
}

/// Every way the class is a product of three factors: `(a·b)·c` or `a·(b·c)` with any operand
/// order, returned as the three factors (in some order; callers try all roles).
pub fn product3(eg: &EG, id: Id) -> Vec<[Id; 3]> {
    let mut out = vec![];
    for (ab, c) in binary_comm(eg, id, BinaryOp::Mul) {
        for (a, b) in binary(eg, ab, BinaryOp::Mul) {
            out.push([a, b, c]);
        }
    }
    out
}

/// All orderings of three factors.
pub fn perms3(f: [Id; 3]) -> [[Id; 3]; 6] {
    let [a, b, c] = f;
    [[a, b, c], [a, c, b], [b, a, c], [b, c, a], [c, a, b], [c, b, a]]
}

/// Builds a fused IR node for class `class`, or `None` unless its inferred shape is exactly the
/// class's shape (dtype, dims and axis names).
pub fn emit(eg: &EG, class: Id, op: Op, operands: &[Id]) -> Option<TNode> {
    let shapes: Option<Vec<&Shape>> = operands.iter().map(|&o| shape(eg, o)).collect();
    infers_class_shape(eg, class, &op, &shapes?).then(|| TNode::op(op, operands))
}

/// Whether `op` over operands of `shapes` infers exactly the class's shape (dtype, dims and
/// axis names): the guard every fused node a rule offers must pass.
pub fn infers_class_shape(eg: &EG, class: Id, op: &Op, shapes: &[&Shape]) -> bool {
    static SCRATCH: OnceLock<Module> = OnceLock::new();
    let scratch = SCRATCH.get_or_init(|| Module::new("egraph-check"));
    let Some(want) = shape(eg, class) else { return false };
    matches!(infer_shapes(scratch, op, shapes), Ok(got) if got.len() == 1 && got[0] == *want)
}

/// Whether a child class and a parent class are the same class.
pub fn same(eg: &EG, a: Id, b: Id) -> bool {
    eg.find(a) == eg.find(b)
}

/// An operand of a node a matcher builds: an existing class, or a new auxiliary node (with the
/// shape it will have) that is added as its own class and referred to with [`local`].
#[derive(Clone, Debug)]
pub enum Arg {
    /// An existing e-class.
    Class(Id),
    /// A new node and its shape (its operands are existing classes).
    New(TNode, Shape),
}

/// Like [`emit`] with some operands new auxiliary nodes: appends to `found` the auxiliary nodes
/// and then `op` over them (referred to with [`local`]), or nothing unless `op`'s inferred shape
/// is exactly the class's shape.
pub fn emit_aux(eg: &EG, class: Id, op: Op, args: &[Arg], found: &mut Vec<TNode>) {
    let mut shapes: Vec<&Shape> = vec![];
    for a in args {
        match a {
            Arg::Class(c) => match shape(eg, *c) {
                Some(s) => shapes.push(s),
                None => return,
            },
            Arg::New(_, s) => shapes.push(s),
        }
    }
    if !infers_class_shape(eg, class, &op, &shapes) {
        return;
    }
    let mut operands = vec![];
    for a in args {
        match a {
            Arg::Class(c) => operands.push(*c),
            Arg::New(n, _) => {
                operands.push(local(found.len()));
                found.push(n.clone());
            }
        }
    }
    found.push(TNode::op(op, &operands));
}

/// Class `b` as a value of dims `dims`, when `b` is `dims` with size-1 axes inserted (the
/// implicit broadcasting form of binary ops, e.g. a bias `[1,1,N]` for `[N]`): `b` itself when
/// its dims already are `dims`, the operand of a `Reshape` in its class that has them, or a new
/// `Reshape` node. `keep` lists the axes of `b` that hold `dims`, increasing (all others must be 1).
pub fn squeezed(eg: &EG, b: Id, keep: &[usize], dims: &[i64]) -> Option<Arg> {
    let bs = shape(eg, b)?;
    if keep.len() != dims.len() || keep.iter().any(|&a| a >= bs.rank()) || !keep.windows(2).all(|w| w[0] < w[1]) {
        return None;
    }
    for a in 0..bs.rank() {
        let ok = match keep.iter().position(|&k| k == a) {
            Some(i) => bs.dims[a] == dims[i],
            None => bs.dims[a] == 1,
        };
        if !ok {
            return None;
        }
    }
    if bs.dims == dims {
        return Some(Arg::Class(b));
    }
    for (op, c) in ops(eg, b) {
        if matches!(op, Op::Reshape { .. }) && shape(eg, c[0]).is_some_and(|s| s.dims == dims && s.dtype == bs.dtype) {
            return Some(Arg::Class(c[0]));
        }
    }
    if dims.iter().any(|&d| d < 0) {
        return None;
    }
    Some(Arg::New(TNode::op(Op::Reshape { dims: dims.to_vec() }, &[b]), Shape::new(bs.dtype, dims)))
}

#[cfg(test)]
mod tests {
    use super::approx_in;
    use crate::ir::dtype::DType;
    use half::{bf16, f16};

    #[test]
    fn half_type_constants_match_within_half_an_ulp() {
        let r = std::f64::consts::FRAC_1_SQRT_2;
        let b = Some(DType::BFloat16);
        let h = Some(DType::Float16);
        // 1/√2 as each half type holds it matches; the type's neighbouring values do not.
        assert!(approx_in(b, f64::from(bf16::from_f64(r)), r));
        assert!(!approx_in(b, 0.7109375, r));
        assert!(!approx_in(b, 0.703125, r));
        assert!(approx_in(h, f64::from(f16::from_f64(r)), r));
        assert!(!approx_in(h, f64::from(f16::from_f64(r)) + 2f64.powi(-11), r));
        // f32 and untyped keep the 1e-6 relative tolerance.
        assert!(!approx_in(Some(DType::Float32), f64::from(bf16::from_f64(r)), r));
        assert!(approx_in(None, f64::from(r as f32), r));
    }
}
