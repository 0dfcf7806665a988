//! Stage 3: FusedScaledDotProductAttention from `softmax(Q·Kᵀ·scale + mask) · V` written with
//! DotGeneral over `[B,H,S,D]` (BHSD) or `[B,S,H,D]` (BSHD, output transposed back), the scale on
//! Q, on K or on the scores, K optionally pre-transposed, an additive mask, a boolean mask via
//! `Where(mask, scores, −inf or a large negative)`, and a causal mask (a constant
//! lower-triangular mask or an Iota comparison).
//!
//! The softmax is stage 2's FusedSoftmax: the rule requires its axis to be the key axis (3) of
//! the `[B,H,S,Skv]` scores — a softmax over any other axis is not attention.
//! Not recognised (documented limits): grouped-query attention written with a repeat/broadcast
//! of K/V heads, bottom-right aligned causal masks, masks applied after scaling the masked
//! scores, per-batch sequence lengths.

use egg::Id;

use super::{Rule, binary, binary_comm, emit, ops, same_shape, shape, splat};
use crate::ir::dtype::DType;
use crate::ir::op::{AttentionLayout, BinaryOp, CompareOp, Op, UnaryOp};
use crate::passes::egraph::analysis::{EG, values};
use crate::passes::egraph::lang::TNode;

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![Rule { name: "sdpa", matcher: sdpa }]
}

/// Largest constant mask (in elements) decoded to check for a causal pattern.
const MAX_MASK_ELEMENTS: usize = 1 << 22;

/// Whether a constant is "minus infinity" for masking: −inf or ≤ −1e9.
fn is_large_negative(v: f64) -> bool {
    v <= -1e9
}

/// The class itself with factor 1, and `(a, c)` / `(a, 1/c)` for `a·c` (either order) / `a/c`
/// where c is a splat constant that does not widen a.
fn peel_scale(eg: &EG, id: Id) -> Vec<(Id, f64)> {
    let mut out = vec![(id, 1.0)];
    for (a, c) in binary_comm(eg, id, BinaryOp::Mul) {
        if let Some(v) = splat(eg, c).filter(|_| same_shape(eg, id, a)) {
            out.push((a, v));
        }
    }
    for (a, c) in binary(eg, id, BinaryOp::Div) {
        if let Some(v) = splat(eg, c).filter(|v| *v != 0.0 && same_shape(eg, id, a)) {
            out.push((a, 1.0 / v));
        }
    }
    out
}

/// The class itself with the identity permutation, and `(k, perm)` for `Transpose(k, perm)`.
fn peel_transpose(eg: &EG, id: Id) -> Vec<(Id, Vec<usize>)> {
    let mut out = vec![(id, vec![0, 1, 2, 3])];
    for (op, c) in ops(eg, id) {
        if let Op::Transpose { perm } = op
            && perm.len() == 4
        {
            out.push((c[0], perm.clone()));
        }
    }
    out
}

/// `(h_axis, s_axis)` of q/k/v in a layout.
fn head_seq_axes(layout: AttentionLayout) -> (usize, usize) {
    match layout {
        AttentionLayout::Bhsd => (1, 2),
        AttentionLayout::Bshd => (2, 1),
    }
}

/// A recognised `Q·Kᵀ·scale`.
struct Scores {
    q: Id,
    k: Id,
    layout: AttentionLayout,
    scale: f64,
}

/// Whether a DotGeneral's dtype attributes are plain (no accumulator/output dtype change).
fn plain_dtypes(op: &Op, input: DType) -> bool {
    matches!(op, Op::DotGeneral { accumulator_dtype: None, output_dtype, .. } if output_dtype.is_none_or(|d| d == input))
}

/// Every reading of class `id` as `(Q·c₁)·(K·c₂)ᵀ·c₃`: a DotGeneral with batch axes (B, H) of
/// the layout and contracting the head dim (3) of Q and of K, where K may be pre-transposed
/// (its axes are mapped back through the permutation). Guards: ranks 4, q batch axes `[0,1]`
/// (BHSD) or `[0,2]` (BSHD), k's batch axes the same axes of k and its contracted axis k's
/// head dim; every scale a splat constant not widening its operand.
fn qk_scores(eg: &EG, id: Id) -> Vec<Scores> {
    let mut out = vec![];
    for (d, f0) in peel_scale(eg, id) {
        for (op, c) in ops(eg, d) {
            let Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, .. } = op else { continue };
            let Some(qs) = shape(eg, c[0]) else { continue };
            if qs.rank() != 4 || !plain_dtypes(op, qs.dtype) || *lhs_contracting != [3] || rhs_contracting.len() != 1 {
                continue;
            }
            let layout = match lhs_batch.as_slice() {
                [0, 1] => AttentionLayout::Bhsd,
                [0, 2] => AttentionLayout::Bshd,
                _ => continue,
            };
            for (q, fq) in peel_scale(eg, c[0]) {
                for (k1, fk1) in peel_scale(eg, c[1]) {
                    for (k2, perm) in peel_transpose(eg, k1) {
                        let batch: Option<Vec<usize>> = rhs_batch.iter().map(|&i| perm.get(i).copied()).collect();
                        let contract = perm.get(rhs_contracting[0]).copied();
                        if batch.as_deref() != Some(lhs_batch.as_slice()) || contract != Some(3) {
                            continue;
                        }
                        for (k, fk2) in peel_scale(eg, k2) {
                            if shape(eg, k).is_some_and(|s| s.rank() == 4)
                                && shape(eg, q).is_some_and(|s| s.rank() == 4)
                            {
                                out.push(Scores { q, k, layout, scale: f0 * fq * fk1 * fk2 });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The axes of class `id` along which its value is the element index: an `Iota{axis}`, or a
/// `BroadcastInDim` of an iota (its axis mapped), seen through nothing else.
fn index_axes(eg: &EG, id: Id) -> Vec<usize> {
    let mut out = vec![];
    for (op, c) in ops(eg, id) {
        match op {
            Op::Iota { axis, .. } => out.push(*axis),
            Op::BroadcastInDim { axes, .. } => {
                for (iop, _) in ops(eg, c[0]) {
                    if let Op::Iota { axis, .. } = iop
                        && let Some(&a) = axes.get(*axis)
                    {
                        out.push(a);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The class and the classes it is a `BroadcastInDim` of, when the broadcast keeps the last
/// two axes last (so "row" and "column" stay the last two axes).
fn through_broadcasts(eg: &EG, id: Id) -> Vec<Id> {
    let mut out = vec![id];
    let Some(rank) = shape(eg, id).map(|s| s.rank()) else { return out };
    for (op, c) in ops(eg, id) {
        if let Op::BroadcastInDim { axes, .. } = op
            && axes.len() >= 2
            && axes[axes.len() - 2..] == [rank - 2, rank - 1]
        {
            out.push(c[0]);
        }
    }
    out
}

/// Whether a constant of rank ≥ 2 is the causal pattern on its last two axes `[S, Skv]`:
/// `attend(v)` on and below the diagonal (key j ≤ query i) and `masked(v)` above it.
fn const_causal(eg: &EG, id: Id, attend: fn(f64) -> bool, masked: fn(f64) -> bool) -> bool {
    let Some(leaf) = eg[id].data.leaf else { return false };
    let l = &eg.analysis.leaves[leaf as usize];
    let (Some(data), r) = (&l.data, l.shape.rank()) else { return false };
    if r < 2 || l.shape.size().is_none_or(|n| n > MAX_MASK_ELEMENTS) {
        return false;
    }
    let (s, skv) = (l.shape.dims[r - 2] as usize, l.shape.dims[r - 1] as usize);
    let Some(v) = values(&l.shape, data) else { return false };
    v.iter().enumerate().all(|(idx, &x)| {
        let (i, j) = ((idx / skv) % s, idx % skv);
        if j <= i { attend(x) } else { masked(x) }
    })
}

/// Whether Bool class `cond` is "key j ≤ query i" (`attend = true`) or "j > i" (`attend =
/// false`) on its last two axes: a constant, or a comparison of row and column iotas
/// (`i ≥ j`, `j ≤ i`; negated: `j > i`, `i < j`), possibly broadcast.
fn causal_cond(eg: &EG, cond: Id, attend: bool) -> bool {
    through_broadcasts(eg, cond).into_iter().any(|c| {
        let Some(rank) = shape(eg, c).filter(|s| s.dtype == DType::Bool && s.rank() >= 2).map(|s| s.rank()) else {
            return false;
        };
        let (row, col) = (rank - 2, rank - 1);
        if attend && const_causal(eg, c, |v| v != 0.0, |v| v == 0.0) {
            return true;
        }
        if !attend && const_causal(eg, c, |v| v == 0.0, |v| v != 0.0) {
            return true;
        }
        ops(eg, c).any(|(op, o)| {
            let Op::Compare { dir, total_order: false } = op else { return false };
            let is = |id: Id, axis: usize| index_axes(eg, id).contains(&axis);
            let (a, b) = (o[0], o[1]);
            match (attend, dir) {
                (true, CompareOp::GreaterOrEqual) | (false, CompareOp::LessThan) => is(a, row) && is(b, col),
                (true, CompareOp::LessOrEqual) | (false, CompareOp::GreaterThan) => is(a, col) && is(b, row),
                _ => false,
            }
        })
    })
}

/// Whether float class `m` is an additive causal mask: a constant with 0 on and below the
/// diagonal and −inf (or ≤ −1e9) above, or `Where(j ≤ i, 0, −inf)`, possibly broadcast.
fn causal_additive(eg: &EG, m: Id) -> bool {
    through_broadcasts(eg, m).into_iter().any(|c| {
        const_causal(eg, c, |v| v == 0.0, is_large_negative)
            || ops(eg, c).any(|(op, o)| {
                *op == Op::Where
                    && ((causal_cond(eg, o[0], true)
                        && splat(eg, o[1]) == Some(0.0)
                        && splat(eg, o[2]).is_some_and(is_large_negative))
                        || (causal_cond(eg, o[0], false)
                            && splat(eg, o[2]) == Some(0.0)
                            && splat(eg, o[1]).is_some_and(is_large_negative)))
            })
    })
}

/// Scores with their masking peeled off.
#[derive(Clone, Copy)]
struct Masked {
    core: Id,
    mask: Option<Id>,
    causal: bool,
}

/// Every reading of the pre-softmax class `t` as masked scores: `core + mask` (float, either
/// order), `Where(mask, core, −inf)`, `Where(¬mask, −inf, core)`, and the causal forms of
/// both; at most one explicit mask and one causal mask. Guards: masking never widens the
/// scores; the fill is a splat constant −inf or ≤ −1e9; an additive mask has the scores' dtype.
fn masked(eg: &EG, t: Id, depth: usize) -> Vec<Masked> {
    let mut out = vec![Masked { core: t, mask: None, causal: false }];
    if depth == 0 {
        return out;
    }
    let Some(ts) = shape(eg, t).cloned() else { return out };
    let mut add = |inner: Id, mask: Option<Id>, causal: bool| {
        for p in masked(eg, inner, depth - 1) {
            if (mask.is_some() && p.mask.is_some()) || (causal && p.causal) {
                continue;
            }
            out.push(Masked { core: p.core, mask: mask.or(p.mask), causal: causal || p.causal });
        }
    };
    for (a, m) in binary_comm(eg, t, BinaryOp::Add) {
        if !same_shape(eg, t, a) || shape(eg, m).is_none_or(|s| s.dtype != ts.dtype) {
            continue;
        }
        if causal_additive(eg, m) {
            add(a, None, true);
        } else {
            add(a, Some(m), false);
        }
    }
    for (op, c) in ops(eg, t) {
        if *op != Op::Where {
            continue;
        }
        let (cond, on_true, on_false) = (c[0], c[1], c[2]);
        if same_shape(eg, t, on_true) && splat(eg, on_false).is_some_and(is_large_negative) {
            if causal_cond(eg, cond, true) {
                add(on_true, None, true);
            } else {
                add(on_true, Some(cond), false);
            }
        }
        if same_shape(eg, t, on_false) && splat(eg, on_true).is_some_and(is_large_negative) {
            if causal_cond(eg, cond, false) {
                add(on_false, None, true);
            }
            for (op2, n) in ops(eg, cond) {
                if *op2 == Op::Unary(UnaryOp::LogicalNot) {
                    add(on_false, Some(n[0]), false);
                }
            }
        }
    }
    out
}

/// The mask operand for the fused op: the mask's pre-broadcast value when it was broadcast
/// right-aligned from rank 2–3 with dims equal to the scores' or 1, else the mask itself.
fn mask_operand(eg: &EG, m: Id) -> Id {
    let Some(ms) = shape(eg, m) else { return m };
    for (op, c) in ops(eg, m) {
        if let Op::BroadcastInDim { axes, .. } = op
            && let Some(s0) = shape(eg, c[0])
            && (2..=3).contains(&s0.rank())
            && axes.iter().copied().eq(ms.rank() - s0.rank()..ms.rank())
            && s0.dims.iter().zip(axes).all(|(&d, &a)| d == 1 || d == ms.dims[a])
        {
            return c[0];
        }
    }
    m
}

/// `softmax_axis3(Q·Kᵀ·scale (+ mask)) · V` (BHSD), or its `Transpose([0,2,1,3])` (BSHD)
/// `= FusedScaledDotProductAttention{layout, scale, causal}(q, k, v[, mask])`. Guards: the PV
/// DotGeneral has batch axes `[0,1]` on the probabilities and (B, H) of v's layout, contracts
/// the probabilities' key axis 3 with v's sequence axis; the softmax is over axis 3, the key
/// axis of the `[B,H,S,Skv]` scores; Q, K and V use the same layout; the scale is the product of
/// every splat factor (non-zero, finite); the fused op's inferred shape (q's shape with v's
/// head dim, GQA-checked) is exactly the class's shape.
fn sdpa(eg: &EG, id: Id) -> Vec<TNode> {
    let mut outs: Vec<(Id, AttentionLayout)> = vec![(id, AttentionLayout::Bhsd)];
    for (op, c) in ops(eg, id) {
        if let Op::Transpose { perm } = op
            && *perm == [0, 2, 1, 3]
        {
            outs.push((c[0], AttentionLayout::Bshd));
        }
    }
    let mut found = vec![];
    for (o, layout) in outs {
        let (h_axis, s_axis) = head_seq_axes(layout);
        for (op, c) in ops(eg, o) {
            let Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, .. } = op else { continue };
            let (p, v) = (c[0], c[1]);
            let Some(ps) = shape(eg, p) else { continue };
            if !plain_dtypes(op, ps.dtype) || *lhs_batch != [0, 1] || *lhs_contracting != [3] {
                continue;
            }
            if *rhs_batch != [0, h_axis] || *rhs_contracting != [s_axis] || shape(eg, v).is_none_or(|s| s.rank() != 4) {
                continue;
            }
            for (sop, t) in ops(eg, p) {
                if *sop != (Op::FusedSoftmax { axis: 3 }) {
                    continue;
                }
                for m in masked(eg, t[0], 2) {
                    for s in qk_scores(eg, m.core) {
                        if s.layout != layout || !s.scale.is_finite() || s.scale == 0.0 {
                            continue;
                        }
                        let scale = if ps.dtype == DType::Float32 { super::shortest_f32(s.scale) } else { s.scale };
                        let op = Op::FusedScaledDotProductAttention {
                            layout,
                            scale,
                            causal: m.causal,
                            has_mask: m.mask.is_some(),
                            has_bias: false,
                            has_seq_lens: false,
                            quantized_matmuls: false,
                        };
                        let mut operands = vec![s.q, s.k, v];
                        operands.extend(m.mask.map(|mm| mask_operand(eg, mm)));
                        found.extend(emit(eg, id, op, &operands));
                    }
                }
            }
        }
    }
    found
}
