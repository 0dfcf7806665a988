//! Stage 3: FusedDense from `DotGeneral(x, w)` contracting x's last axis with w's first
//! (weights `[K, N…]`) or last (transposed weights `[N…, K]`) axis, then the bias broadcast
//! over the leading axes, then an activation (ReLU, exact GELU, tanh, SiLU, hard-swish).
//!
//! Each step is its own rule that extends a FusedDense found in an operand class, so any
//! prefix (matmul, matmul + bias, matmul + activation, …) fuses.

use egg::Id;

use super::{
    Arg, Rule, binary, binary_comm, emit, emit_aux, ops, same, same_shape, shape, splat, splat_is, squeezed, unary,
};
use crate::ir::op::{Activation, BinaryOp, DenseLayout, Op, UnaryOp};
use crate::passes::egraph::analysis::EG;
use crate::passes::egraph::lang::TNode;

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        Rule { name: "dense-matmul", matcher: dense_matmul },
        Rule { name: "dense-bias", matcher: dense_bias },
        Rule { name: "dense-relu", matcher: dense_relu },
        Rule { name: "dense-gelu", matcher: dense_gelu },
        Rule { name: "dense-tanh", matcher: dense_tanh },
        Rule { name: "dense-silu", matcher: dense_silu },
        Rule { name: "dense-hard-swish", matcher: dense_hard_swish },
    ]
}

/// `DotGeneral(x, w, lhs_contracting=[rank(x)−1], rhs_contracting=[0] | [rank(w)−1], no batch
/// axes) = FusedDense{layout}(x, w)`; when a rank-2 `w` is `Transpose(w0, [1,0])`, also
/// `FusedDense{other layout}(x, w0)`. Guards: x's contracted axis is its last; w has rank ≥ 2
/// and is contracted on its first axis (InputOutputs) or last axis (OutputsInput); no batch
/// axes; no accumulator or output dtype other than the input's; x, w float (F32, F64, BF16, F16) with equal K
/// (inference of the fused op, which must give the dot's shape).
fn dense_matmul(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (op, c) in ops(eg, id) {
        let Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, accumulator_dtype, output_dtype } =
            op
        else {
            continue;
        };
        let (Some(xs), Some(ws)) = (shape(eg, c[0]), shape(eg, c[1])) else { continue };
        if !lhs_batch.is_empty() || !rhs_batch.is_empty() || accumulator_dtype.is_some() {
            continue;
        }
        if output_dtype.is_some_and(|d| d != xs.dtype) || xs.rank() < 1 || ws.rank() < 2 {
            continue;
        }
        if *lhs_contracting != [xs.rank() - 1] {
            continue;
        }
        let layout = if *rhs_contracting == [0] {
            DenseLayout::InputOutputs
        } else if *rhs_contracting == [ws.rank() - 1] {
            DenseLayout::OutputsInput
        } else {
            continue;
        };
        let fused = Op::FusedDense { activation: Activation::None, layout, has_bias: false };
        out.extend(emit(eg, id, fused, &[c[0], c[1]]));
        // A rank-2 weight transposed just for the matmul: use the untransposed one with the
        // other layout (w = Transpose(w0, [1,0]) contracted on 0 is w0 contracted on 1).
        if ws.rank() == 2 {
            let other = match layout {
                DenseLayout::InputOutputs => DenseLayout::OutputsInput,
                DenseLayout::OutputsInput => DenseLayout::InputOutputs,
            };
            for (top, tc) in ops(eg, c[1]) {
                if *top == (Op::Transpose { perm: vec![1, 0] }) {
                    let fused = Op::FusedDense { activation: Activation::None, layout: other, has_bias: false };
                    out.extend(emit(eg, id, fused, &[c[0], tc[0]]));
                }
            }
        }
    }
    out
}

/// The FusedDense nodes of a class without activation: `(layout, has_bias, operands)`.
fn plain_dense(eg: &EG, id: Id) -> Vec<(DenseLayout, bool, Vec<Id>)> {
    ops(eg, id)
        .filter_map(|(op, c)| match op {
            Op::FusedDense { activation: Activation::None, layout, has_bias } => Some((*layout, *has_bias, c.to_vec())),
            _ => None,
        })
        .collect()
}

/// The output dims `N…` of a dense with weights `w` in `layout`.
fn out_dims(eg: &EG, w: Id, layout: DenseLayout) -> Option<Vec<i64>> {
    let ws = shape(eg, w)?;
    Some(match layout {
        DenseLayout::InputOutputs => ws.dims[1..].to_vec(),
        DenseLayout::OutputsInput => ws.dims[..ws.rank() - 1].to_vec(),
    })
}

/// `FusedDense(x, w) + BroadcastInDim(b, axes = the trailing |N…| axes)` (either order)
/// `= FusedDense(x, w, b)`, and the same with the bias broadcast implicitly by the add (`b` of
/// dims `[1, …, 1, N…]`, as ONNX exports write it: it becomes `Reshape(b, N…)`). Guards: the
/// dense has no bias or activation yet; b's dims are exactly w's output dims N… and the
/// broadcast maps them to the trailing output axes in order (or b is added directly when the
/// output is exactly N…, or with size-1 leading axes only); same dtype; the sum has the
/// dense's shape.
fn dense_bias(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (y, bb) in binary_comm(eg, id, BinaryOp::Add) {
        let (Some(ys), Some(bs)) = (shape(eg, y), shape(eg, bb)) else { continue };
        if !same_shape(eg, id, y) || bs.dtype != ys.dtype {
            continue;
        }
        for (layout, has_bias, c) in plain_dense(eg, y) {
            let Some(n) = out_dims(eg, c[1], layout) else { continue };
            if has_bias || n.len() > ys.rank() {
                continue;
            }
            let lead = ys.rank() - n.len();
            let mut biases = vec![];
            if ys == bs {
                for (op, bc) in ops(eg, bb) {
                    if let Op::BroadcastInDim { axes, .. } = op
                        && axes.iter().copied().eq(lead..ys.rank())
                        && shape(eg, bc[0]).is_some_and(|b| b.dims == n)
                    {
                        biases.push(Arg::Class(bc[0]));
                    }
                }
            }
            if bs.rank() == ys.rank() {
                let keep: Vec<usize> = (lead..ys.rank()).collect();
                biases.extend(squeezed(eg, bb, &keep, &n));
            }
            for b in biases {
                let fused = Op::FusedDense { activation: Activation::None, layout, has_bias: true };
                emit_aux(eg, id, fused, &[Arg::Class(c[0]), Arg::Class(c[1]), b], &mut out);
            }
        }
    }
    out
}

/// The dense `y` (a class holding a FusedDense without activation) with `activation`
/// applied, for class `id`.
fn with_activation(eg: &EG, id: Id, y: Id, activation: Activation) -> Vec<TNode> {
    if !same_shape(eg, id, y) {
        return vec![];
    }
    plain_dense(eg, y)
        .into_iter()
        .filter_map(|(layout, has_bias, c)| emit(eg, id, Op::FusedDense { activation, layout, has_bias }, &c))
        .collect()
}

/// `Max(dense, 0)` (either order) `= FusedDense{relu}`. Guards: the zero is a splat constant
/// +0.0 that does not widen the result (Max keeps NaN, as the fused ReLU does).
fn dense_relu(eg: &EG, id: Id) -> Vec<TNode> {
    binary_comm(eg, id, BinaryOp::Max)
        .into_iter()
        .filter(|&(_, z)| splat(eg, z).is_some_and(|v| v == 0.0 && v.is_sign_positive()))
        .flat_map(|(y, _)| with_activation(eg, id, y, Activation::Relu))
        .collect()
}

/// `FusedGelu{exact}(dense) = FusedDense{gelu}` (the stage-2 GELU of a dense output). Guard:
/// the exact (erf) GELU only — the catalogue's Gelu activation is the erf form.
fn dense_gelu(eg: &EG, id: Id) -> Vec<TNode> {
    ops(eg, id)
        .filter(|(op, _)| **op == Op::FusedGelu { exact: true })
        .flat_map(|(_, c)| with_activation(eg, id, c[0], Activation::Gelu))
        .collect()
}

/// `Tanh(dense) = FusedDense{tanh}`.
fn dense_tanh(eg: &EG, id: Id) -> Vec<TNode> {
    unary(eg, id, UnaryOp::Tanh).into_iter().flat_map(|y| with_activation(eg, id, y, Activation::Tanh)).collect()
}

/// `dense · Logistic(dense)` (either order) `= FusedDense{silu}`. Guard: the logistic's
/// operand is the same dense class.
fn dense_silu(eg: &EG, id: Id) -> Vec<TNode> {
    binary_comm(eg, id, BinaryOp::Mul)
        .into_iter()
        .filter(|&(y, l)| unary(eg, l, UnaryOp::Logistic).into_iter().any(|a| same(eg, a, y)))
        .flat_map(|(y, _)| with_activation(eg, id, y, Activation::Silu))
        .collect()
}

/// Whether `t` is `y/6 + ½` (or `y·(1/6) + ½`), every operation in either order.
fn sixth_plus_half(eg: &EG, t: Id, y: Id) -> bool {
    binary_comm(eg, t, BinaryOp::Add).into_iter().any(|(s, h)| {
        splat_is(eg, h, 0.5)
            && (binary(eg, s, BinaryOp::Div).into_iter().any(|(a, six)| same(eg, a, y) && splat_is(eg, six, 6.0))
                || binary_comm(eg, s, BinaryOp::Mul)
                    .into_iter()
                    .any(|(a, k)| same(eg, a, y) && splat_is(eg, k, 1.0 / 6.0)))
    })
}

/// `dense · Clamp(0, dense/6 + ½, 1)` (either order) `= FusedDense{hard_swish}`. Guards: clamp
/// bounds exactly 0 and 1, the constants ½ and 1/6 (or 6) within relative 1e-6, the same dense
/// class inside and outside.
fn dense_hard_swish(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (y, cl) in binary_comm(eg, id, BinaryOp::Mul) {
        let ok = ops(eg, cl).any(|(op, c)| {
            *op == Op::Clamp
                && splat(eg, c[0]) == Some(0.0)
                && splat(eg, c[2]) == Some(1.0)
                && sixth_plus_half(eg, c[1], y)
        });
        if ok {
            out.extend(with_activation(eg, id, y, Activation::HardSwish));
        }
    }
    out
}
