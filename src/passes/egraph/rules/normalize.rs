//! Stage 1: normalisations. Each rule adds an internal idiom node (never extracted) so that the
//! fusion rules of the later stages look for one form instead of every exporter spelling.

use egg::Id;

use super::{Rule, approx_in, binary, binary_comm, dtype, local, ops, reduces, same, same_shape, shape, splat, unary};
use crate::ir::dtype::DType;
use crate::ir::op::{BinaryOp, Op, ReduceKind, UnaryOp};
use crate::ir::shape::Shape;
use crate::passes::egraph::analysis::EG;
use crate::passes::egraph::lang::{Internal, TNode};

/// The rules of this stage.
pub fn rules() -> Vec<Rule> {
    vec![
        Rule { name: "mean-sum-times-reciprocal", matcher: mean_sum_times_reciprocal },
        Rule { name: "mean-sum-div-count", matcher: mean_sum_div_count },
        Rule { name: "restore-broadcast", matcher: restore_broadcast },
        Rule { name: "restore-keepdims-reshape", matcher: restore_keepdims_reshape },
        Rule { name: "restore-keepdims-broadcast", matcher: restore_keepdims_broadcast },
        Rule { name: "square-mul", matcher: square_mul },
        Rule { name: "square-pow", matcher: square_pow },
        Rule { name: "inv-sqrt-rsqrt", matcher: inv_sqrt_rsqrt },
        Rule { name: "inv-sqrt-reciprocal", matcher: inv_sqrt_reciprocal },
    ]
}

/// Number of elements `x` has on `axes` (static dims only).
fn count(eg: &EG, x: Id, axes: &[usize]) -> Option<f64> {
    let s = shape(eg, x)?;
    let mut n = 1.0;
    for &a in axes {
        let d = *s.dims.get(a)?;
        if d < 0 {
            return None;
        }
        n *= d as f64;
    }
    Some(n)
}

/// `s = ReduceSum(x, A)` inside `class = op(s, c)`: `Mean{A}(x)` when `c`'s splat value
/// satisfies `ok(value, n)` with `n = ∏ dims(x)[A]`, and `c` does not widen the result (class
/// shape = shape of s). Also the keep-dims form `s = Reshape(ReduceSum(x, A))` that inserts
/// size-1 axes exactly at A (ONNX `ReduceSum(keepdims=1)` / `ReduceMean` decompositions): then
/// the class is `Restore{A}(Mean{A}(x))` with the mean a new class.
fn mean_of(eg: &EG, class: Id, s: Id, c: Id, ok: fn(Option<DType>, f64, f64) -> bool) -> Vec<TNode> {
    let mut out = vec![];
    let Some(v) = splat(eg, c) else { return out };
    let cd = dtype(eg, c);
    if !same_shape(eg, class, s) {
        return out;
    }
    let is_mean = |x: Id, axes: &[usize]| {
        !axes.is_empty()
            && shape(eg, x).is_some_and(|sh| sh.dtype.is_float())
            && count(eg, x, axes).is_some_and(|n| n > 0.0 && ok(cd, v, n))
    };
    for (x, axes) in reduces(eg, s, ReduceKind::Sum) {
        if is_mean(x, &axes) {
            out.push(TNode::internal(Internal::Mean { axes }, &[x]));
        }
    }
    let Some(kd) = shape(eg, s) else { return out };
    for (op, rc) in ops(eg, s) {
        let Op::Reshape { .. } = op else { continue };
        let Some(r) = shape(eg, rc[0]) else { continue };
        let Some(ins) = keepdims_axes(r, kd) else { continue };
        for (x, axes) in reduces(eg, rc[0], ReduceKind::Sum) {
            if axes == ins && is_mean(x, &axes) {
                let base = out.len();
                out.push(TNode::internal(Internal::Mean { axes: axes.clone() }, &[x]));
                out.push(TNode::internal(Internal::Restore { axes, dims: kd.dims.clone() }, &[local(base)]));
            }
        }
    }
    out
}

/// `ReduceSum(x, A) · c = Mean{A}(x)` when `c` is a constant ≈ `1/n`, `n = ∏ dims(x)[A]`
/// (either operand order). Guards: x float, A non-empty and static, c a splat constant within
/// relative 1e-6 of 1/n, c does not widen the result.
fn mean_sum_times_reciprocal(eg: &EG, id: Id) -> Vec<TNode> {
    binary_comm(eg, id, BinaryOp::Mul)
        .into_iter()
        .flat_map(|(s, c)| mean_of(eg, id, s, c, |d, v, n| approx_in(d, v, 1.0 / n)))
        .collect()
}

/// `ReduceSum(x, A) / c = Mean{A}(x)` when `c` is a constant ≈ `n = ∏ dims(x)[A]`. Guards as
/// for `mean-sum-times-reciprocal`.
fn mean_sum_div_count(eg: &EG, id: Id) -> Vec<TNode> {
    binary(eg, id, BinaryOp::Div).into_iter().flat_map(|(s, c)| mean_of(eg, id, s, c, approx_in)).collect()
}

/// The complement of `axes` in `0..rank`.
fn complement(axes: &[usize], rank: usize) -> Vec<usize> {
    (0..rank).filter(|a| !axes.contains(a)).collect()
}

/// `BroadcastInDim(r, shape=X, axes=K) = Restore{R}(r)` where `R` = the axes of X not in K.
/// Guards: K strictly increasing (no permutation), rank(r) = |K|, every dim of r equals the dim
/// of X it maps to (only the R axes are created, none stretched), R non-empty, same dtype, X
/// static (the node records X's dims, which must fix the value).
fn restore_broadcast(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (op, c) in ops(eg, id) {
        let Op::BroadcastInDim { shape: x, axes } = op else { continue };
        let Some(r) = shape(eg, c[0]) else { continue };
        if r.dtype != x.dtype || x.is_dynamic() || r.rank() != axes.len() || !axes.windows(2).all(|w| w[0] < w[1]) {
            continue;
        }
        if axes.iter().enumerate().any(|(i, &a)| x.dims.get(a) != Some(&r.dims[i]) || r.dims[i] < 0) {
            continue;
        }
        let restored = complement(axes, x.rank());
        if !restored.is_empty() {
            out.push(TNode::internal(Internal::Restore { axes: restored, dims: x.dims.clone() }, &[c[0]]));
        }
    }
    out
}

/// The size-1 axes a keep-dims reshape from `from` to `to` inserts, if `to` is `from` with
/// size-1 axes inserted (matched left to right, preferring to keep dims).
fn inserted_ones(from: &[i64], to: &[i64]) -> Option<Vec<usize>> {
    if to.len() <= from.len() {
        return None;
    }
    let (mut j, mut ins) = (0, vec![]);
    for (i, &d) in to.iter().enumerate() {
        if j < from.len() && from[j] == d {
            j += 1;
        } else if d == 1 {
            ins.push(i);
        } else {
            return None;
        }
    }
    (j == from.len() && ins.len() + from.len() == to.len()).then_some(ins)
}

/// The size-1 axes a keep-dims reshape of `r` to `to` inserts ([`inserted_ones`] on their
/// dims), provided `r`'s dynamic axes are `to`'s, in the same order and with the same names (a
/// reshape's k-th dynamic target axis takes the size of its operand's k-th dynamic axis, so
/// those axes are kept; the inserted ones are static).
fn keepdims_axes(r: &Shape, to: &Shape) -> Option<Vec<usize>> {
    let ins = inserted_ones(&r.dims, &to.dims)?;
    let dynamic = |s: &Shape| (0..s.rank()).filter(|&i| s.dims[i] < 0).map(|i| s.axis_name(i).to_string()).collect();
    let (a, b): (Vec<String>, Vec<String>) = (dynamic(r), dynamic(to));
    (a == b).then_some(ins)
}

/// `Reshape(r) = Restore{R}(r)` (keep-dims form) when the reshape only inserts size-1 axes `R`
/// into r's dims; a binary op broadcasts them later. Guards: the reshape keeps r's dims in
/// order, dynamic ones included ([`keepdims_axes`]).
fn restore_keepdims_reshape(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (op, c) in ops(eg, id) {
        let Op::Reshape { dims } = op else { continue };
        let (Some(r), Some(to)) = (shape(eg, c[0]), shape(eg, id)) else { continue };
        if to.dims != *dims {
            continue;
        }
        if let Some(ins) = keepdims_axes(r, to) {
            out.push(TNode::internal(Internal::Restore { axes: ins, dims: dims.clone() }, &[c[0]]));
        }
    }
    out
}

/// `BroadcastInDim(k, shape=X, axes=[0..rank]) = Restore{R}(r)` when `k = Restore{R}(r)` is a
/// keep-dims value (size 1 on R) and the broadcast only stretches those R axes. Guards:
/// identity axes, X static, k's dims equal X's outside R and are 1 on R.
fn restore_keepdims_broadcast(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (op, c) in ops(eg, id) {
        let Op::BroadcastInDim { shape: x, axes } = op else { continue };
        let Some(k) = shape(eg, c[0]) else { continue };
        if k.rank() != x.rank() || x.is_dynamic() || axes.iter().enumerate().any(|(i, &a)| i != a) {
            continue;
        }
        for (r, ra) in super::restores(eg, c[0]) {
            let ok = (0..x.rank()).all(|i| if ra.contains(&i) { k.dims[i] == 1 } else { k.dims[i] == x.dims[i] });
            if ok {
                out.push(TNode::internal(Internal::Restore { axes: ra, dims: x.dims.clone() }, &[r]));
            }
        }
    }
    out
}

/// `d · d = Square(d)`. Guard: both operands are the same class.
fn square_mul(eg: &EG, id: Id) -> Vec<TNode> {
    binary(eg, id, BinaryOp::Mul)
        .into_iter()
        .filter(|&(a, b)| same(eg, a, b))
        .map(|(a, _)| TNode::internal(Internal::Square, &[a]))
        .collect()
}

/// `Pow(d, 2) = Square(d)`. Guards: the exponent is a constant with every element exactly 2,
/// and it does not widen the result.
fn square_pow(eg: &EG, id: Id) -> Vec<TNode> {
    binary(eg, id, BinaryOp::Pow)
        .into_iter()
        .filter(|&(d, e)| splat(eg, e) == Some(2.0) && same_shape(eg, id, d))
        .map(|(d, _)| TNode::internal(Internal::Square, &[d]))
        .collect()
}

/// `Rsqrt(s) = InvSqrt(s)`.
fn inv_sqrt_rsqrt(eg: &EG, id: Id) -> Vec<TNode> {
    unary(eg, id, UnaryOp::Rsqrt).into_iter().map(|s| TNode::internal(Internal::InvSqrt, &[s])).collect()
}

/// `1 / Sqrt(s) = InvSqrt(s)`. Guards: the numerator is a constant with every element exactly
/// 1, and it does not widen the result.
fn inv_sqrt_reciprocal(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (one, t) in binary(eg, id, BinaryOp::Div) {
        if splat(eg, one) != Some(1.0) || !same_shape(eg, id, t) {
            continue;
        }
        for s in unary(eg, t, UnaryOp::Sqrt) {
            out.push(TNode::internal(Internal::InvSqrt, &[s]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::inserted_ones;

    #[test]
    fn keepdims_axes() {
        assert_eq!(inserted_ones(&[2, 3], &[2, 3, 1]), Some(vec![2]));
        assert_eq!(inserted_ones(&[2, 3], &[2, 1, 3]), Some(vec![1]));
        assert_eq!(inserted_ones(&[2], &[2, 1, 1]), Some(vec![1, 2]));
        assert_eq!(inserted_ones(&[2, 3], &[3, 2, 1]), None);
        assert_eq!(inserted_ones(&[2, 3], &[2, 3]), None);
    }
}
