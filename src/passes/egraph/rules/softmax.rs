//! Stage 2: FusedSoftmax from `exp(x − max) / sum(exp(x − max))` and `exp(x) / sum(exp(x))`.

use egg::Id;

use super::{Rule, binary, emit, reduces, restores_along, same, same_shape, unary};
use crate::ir::op::{BinaryOp, Op, ReduceKind, UnaryOp};
use crate::passes::egraph::analysis::EG;
use crate::passes::egraph::lang::TNode;

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        Rule { name: "softmax-max-subtracted", matcher: softmax_max_subtracted },
        Rule { name: "softmax-plain", matcher: softmax_plain },
    ]
}

/// For `class = e / den` with `den = Restore{[a]}(ReduceSum(e, [a]))`: the pairs `(e, a)`.
/// Guards: the sum reduces exactly one axis `a`, over the numerator `e` itself, and is put back
/// along exactly that axis; the quotient has e's shape.
fn normalised(eg: &EG, id: Id) -> Vec<(Id, usize)> {
    let mut out = vec![];
    for (e, den) in binary(eg, id, BinaryOp::Div) {
        if !same_shape(eg, id, e) {
            continue;
        }
        for (axes, r) in super::restores(eg, den).into_iter().map(|(r, a)| (a, r)) {
            if axes.len() != 1 {
                continue;
            }
            if reduces(eg, r, ReduceKind::Sum).iter().any(|(s, sa)| *sa == axes && same(eg, *s, e)) {
                out.push((e, axes[0]));
            }
        }
    }
    out
}

/// `exp(x − Restore{[a]}(ReduceMax(x,[a]))) / Restore{[a]}(ReduceSum(that,[a])) =
/// FusedSoftmax{a}(x)`. Guards: both reductions over the same single axis `a`, the max over the
/// same x that is subtracted, both broadcasts put back exactly axis `a`, the difference and the
/// result have x's shape, x is F32, F64, BF16 or F16 (inference of the fused op).
fn softmax_max_subtracted(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (e, a) in normalised(eg, id) {
        for d in unary(eg, e, UnaryOp::Exp) {
            for (x, mr) in binary(eg, d, BinaryOp::Sub) {
                if !same_shape(eg, d, x) {
                    continue;
                }
                let max_ok = restores_along(eg, mr, &[a])
                    .into_iter()
                    .any(|m| reduces(eg, m, ReduceKind::Max).iter().any(|(mx, ma)| *ma == [a] && same(eg, *mx, x)));
                if max_ok {
                    out.extend(emit(eg, id, Op::FusedSoftmax { axis: a }, &[x]));
                }
            }
        }
    }
    out
}

/// `exp(x) / Restore{[a]}(ReduceSum(exp(x), [a])) = FusedSoftmax{a}(x)` (no max subtraction;
/// the fused op is the stable form of the same value). Guards: one axis `a` for the sum and the
/// broadcast, result of x's shape, x F32, F64, BF16 or F16.
fn softmax_plain(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (e, a) in normalised(eg, id) {
        for x in unary(eg, e, UnaryOp::Exp) {
            out.extend(emit(eg, id, Op::FusedSoftmax { axis: a }, &[x]));
        }
    }
    out
}
