//! Stage 3: FusedScaledDotProductAttention from `softmax(Q·Kᵀ·scale + mask) · V` written with
//! DotGeneral over `[B,H,S,D]` (BHSD) or `[B,S,H,D]` (BSHD, output transposed back), the scale on
//! Q, on K or on the scores, K optionally pre-transposed, an additive mask, a boolean mask via
//! `Where(mask, scores, −inf or a large negative)`, and a causal mask (a constant
//! lower-triangular mask or an Iota comparison).
//!
//! The softmax is stage 2's FusedSoftmax: the rule requires its axis to be the key axis (3) of
//! the `[B,H,S,Skv]` scores — a softmax over any other axis is not attention.
//!
//! Exporter forms mapped onto the op's attributes (ops.md §5):
//! - **Grouped-query attention**: K/V with `Hkv` heads expanded to `H = Hkv·G` by
//!   `Reshape(BroadcastInDim(x, [..,Hkv,G,..]))` (the group axis right after the head axis, so
//!   query head h reads kv head `h / G`, the op's convention), the same with an explicit size-1
//!   group axis (`Reshape` to `[..,Hkv,1,..]` first), `Concatenate` of G copies along that
//!   axis, or (one kv head) a broadcast / concatenation along the head axis itself. The op gets
//!   the un-expanded K/V. A repeat in tile order (`[..,G,Hkv,..]`: head h reads `h mod Hkv`) is
//!   not GQA and stays an expanded operand.
//! - **Causal masks with an offset** (`j ≤ i + o`: an Iota comparison with a constant added or
//!   subtracted, or a constant triangle shifted by `o = Skv − Sq`, bottom-right aligned as in
//!   KV-cache decoding): the op's `causal` is top-left aligned, so only `o = 0` becomes
//!   `causal=true`; `o ≥ Skv − 1` hides nothing and is dropped; any other offset stays a Bool
//!   `mask` operand (the comparison itself).
//! - **Per-batch key lengths** (`Where(iota_key < broadcast(len), scores, −inf)`, `len` Int32
//!   `[B]`): `has_seq_lens` with `key_value_seq_len = len` and `query_seq_len = Sq` for every
//!   batch (built as `ReduceMax(Iota(i32[B, Sq+1]))`, so no query row is treated as padding).
//!
//! Not recognised (documented limits): masks applied after scaling the masked scores, the
//! negated (`Where(¬c, −inf, s)`) form of an offset causal mask without a `LogicalNot` node,
//! additive length masks, lengths combined with another mask by `LogicalAnd`.

use egg::Id;

use super::{Rule, binary, binary_comm, emit, local, ops, same, same_shape, shape, splat};
use crate::ir::dtype::DType;
use crate::ir::infer::infer_shapes;
use crate::ir::module::Module;
use crate::ir::op::{AttentionLayout, BinaryOp, CompareOp, Op, ReduceKind, UnaryOp};
use crate::ir::shape::Shape;
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

/// Whether a constant of rank ≥ 2 is the causal pattern with offset `o` on its last two axes
/// `[S, Skv]`: `attend(v)` where key j ≤ query i + o and `masked(v)` elsewhere.
fn const_causal(eg: &EG, id: Id, o: i64, attend: fn(f64) -> bool, masked: fn(f64) -> bool) -> bool {
    let Some(leaf) = eg[id].data.leaf else { return false };
    let l = &eg.analysis.leaves[leaf as usize];
    let (Some(data), r) = (&l.data, l.shape.rank()) else { return false };
    if r < 2 || l.shape.size().is_none_or(|n| n > MAX_MASK_ELEMENTS) {
        return false;
    }
    let (s, skv) = (l.shape.dims[r - 2] as usize, l.shape.dims[r - 1] as usize);
    let Some(v) = values(&l.shape, data) else { return false };
    v.iter().enumerate().all(|(idx, &x)| {
        let (i, j) = (((idx / skv) % s) as i64, (idx % skv) as i64);
        if j <= i + o { attend(x) } else { masked(x) }
    })
}

/// `(axis, offset)` readings of an integer class as `iota_axis + offset`: an index class (see
/// [`index_axes`]) plus or minus an integer splat constant (either order for `+`), nested
/// at most twice.
fn affine_index(eg: &EG, id: Id, depth: usize) -> Vec<(usize, i64)> {
    let mut out: Vec<(usize, i64)> = index_axes(eg, id).into_iter().map(|a| (a, 0)).collect();
    if depth == 0 || !shape(eg, id).is_some_and(|s| s.dtype.is_int()) {
        return out;
    }
    let int_splat = |c: Id| splat(eg, c).filter(|v| v.fract() == 0.0 && v.abs() < 1e9).map(|v| v as i64);
    for (x, c) in binary_comm(eg, id, BinaryOp::Add) {
        if let Some(k) = int_splat(c).filter(|_| same_shape(eg, id, x)) {
            out.extend(affine_index(eg, x, depth - 1).into_iter().map(|(a, o)| (a, o + k)));
        }
    }
    for (x, c) in binary(eg, id, BinaryOp::Sub) {
        if let Some(k) = int_splat(c).filter(|_| same_shape(eg, id, x)) {
            out.extend(affine_index(eg, x, depth - 1).into_iter().map(|(a, o)| (a, o - k)));
        }
    }
    out
}

/// The offsets `o` for which Bool class `cond` is "key j ≤ query i + o" (`attend = true`) or
/// "j > i + o" (`attend = false`) on its last two axes, possibly broadcast: a constant (checked
/// for `o = 0` and the bottom-right `o = Skv − Sq`), or a comparison of row and column iotas,
/// each plus or minus a constant. Strict comparisons shift the offset by one and need integer
/// iotas (always the case with a non-zero constant, see [`affine_index`]).
fn causal_offsets(eg: &EG, cond: Id, attend: bool) -> Vec<i64> {
    let mut out = vec![];
    for c in through_broadcasts(eg, cond) {
        let Some(cs) = shape(eg, c).filter(|s| s.dtype == DType::Bool && s.rank() >= 2) else { continue };
        let rank = cs.rank();
        let (row, col) = (rank - 2, rank - 1);
        let (sq, skv) = (cs.dims[row], cs.dims[col]);
        for o in if sq == skv { vec![0] } else { vec![0, skv - sq] } {
            let found = if attend {
                const_causal(eg, c, o, |v| v != 0.0, |v| v == 0.0)
            } else {
                const_causal(eg, c, o, |v| v == 0.0, |v| v != 0.0)
            };
            if found {
                out.push(o);
            }
        }
        for (op, o) in ops(eg, c) {
            let Op::Compare { dir, total_order: false } = op else { continue };
            let int = shape(eg, o[0]).is_some_and(|s| s.dtype.is_int());
            for (la, oa) in affine_index(eg, o[0], 2) {
                for (lb, ob) in affine_index(eg, o[1], 2) {
                    // a ⋈ b with a = (la, oa), b = (lb, ob): "j ≤ i + off" (attend) or "j > i + off".
                    let found = match (dir, la == row && lb == col, la == col && lb == row) {
                        (CompareOp::GreaterOrEqual, true, _) => Some((true, oa - ob)),
                        (CompareOp::LessOrEqual, _, true) => Some((true, ob - oa)),
                        (CompareOp::GreaterThan, true, _) if int => Some((true, oa - ob - 1)),
                        (CompareOp::LessThan, _, true) if int => Some((true, ob - oa - 1)),
                        (CompareOp::GreaterThan, _, true) => Some((false, ob - oa)),
                        (CompareOp::LessThan, true, _) => Some((false, oa - ob)),
                        (CompareOp::GreaterOrEqual, _, true) if int => Some((false, ob - oa - 1)),
                        (CompareOp::LessOrEqual, true, _) if int => Some((false, oa - ob - 1)),
                        _ => None,
                    };
                    if let Some((a, off)) = found
                        && a == attend
                    {
                        out.push(off);
                    }
                }
            }
        }
    }
    out
}

/// Whether Bool class `cond` is "key j ≤ query i" (`attend = true`) or "j > i" (`attend =
/// false`): [`causal_offsets`] with offset 0.
fn causal_cond(eg: &EG, cond: Id, attend: bool) -> bool {
    causal_offsets(eg, cond, attend).contains(&0)
}

/// Whether float class `m` is an additive causal mask: a constant with 0 on and below the
/// diagonal and −inf (or ≤ −1e9) above, or `Where(j ≤ i, 0, −inf)`, possibly broadcast.
fn causal_additive(eg: &EG, m: Id) -> bool {
    through_broadcasts(eg, m).into_iter().any(|c| {
        const_causal(eg, c, 0, |v| v == 0.0, is_large_negative)
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
    /// Per-batch key lengths (Int32 `[B]`).
    lens: Option<Id>,
}

/// The lengths `len` (Int32 `[B]`) when Bool class `cond` (rank 4 `[B,H,Sq,Skv]`) is "key j <
/// len[b]": `iota_key < broadcast(len)` or `broadcast(len) > iota_key` on the class itself or on
/// a rank 2–4 class broadcast to it with its first axis on the batch axis and its last on the
/// key axis; the lengths broadcast along the batch axis only.
fn seq_len_mask(eg: &EG, cond: Id) -> Option<Id> {
    let cs = shape(eg, cond).filter(|s| s.dtype == DType::Bool && s.rank() == 4)?;
    let mut cands = vec![cond];
    for (op, c) in ops(eg, cond) {
        if let Op::BroadcastInDim { axes, .. } = op
            && axes.len() >= 2
            && axes[0] == 0
            && axes[axes.len() - 1] == 3
            && shape(eg, c[0]).is_some_and(|s| s.dims[0] == cs.dims[0] && s.dims[s.rank() - 1] == cs.dims[3])
        {
            cands.push(c[0]);
        }
    }
    for c in cands {
        let Some(r) = shape(eg, c).map(|s| s.rank()) else { continue };
        for (op, o) in ops(eg, c) {
            let (key, len) = match op {
                Op::Compare { dir: CompareOp::LessThan, total_order: false } => (o[0], o[1]),
                Op::Compare { dir: CompareOp::GreaterThan, total_order: false } => (o[1], o[0]),
                _ => continue,
            };
            if !index_axes(eg, key).contains(&(r - 1)) {
                continue;
            }
            for (lop, l) in ops(eg, len) {
                if let Op::BroadcastInDim { axes, .. } = lop
                    && *axes == [0]
                    && shape(eg, l[0]).is_some_and(|s| s.dtype == DType::Int32 && s.rank() == 1)
                {
                    return Some(l[0]);
                }
            }
        }
    }
    None
}

/// Every reading of the pre-softmax class `t` as masked scores: `core + mask` (float, either
/// order), `Where(mask, core, −inf)`, `Where(¬mask, −inf, core)`, the causal forms of both
/// (offset 0: `causal`; an offset hiding nothing: no mask; another offset: a Bool mask), and a
/// key-length mask; at most one explicit mask, one causal mask and one length mask. Guards:
/// masking never widens the scores; the fill is a splat constant −inf or ≤ −1e9; an additive
/// mask has the scores' dtype.
fn masked(eg: &EG, t: Id, depth: usize) -> Vec<Masked> {
    let mut out = vec![Masked { core: t, mask: None, causal: false, lens: None }];
    if depth == 0 {
        return out;
    }
    let Some(ts) = shape(eg, t).cloned() else { return out };
    let skv = ts.dims.last().copied().unwrap_or(-1);
    let mut add = |inner: Id, mask: Option<Id>, causal: bool, lens: Option<Id>| {
        for p in masked(eg, inner, depth - 1) {
            if (mask.is_some() && p.mask.is_some()) || (causal && p.causal) || (lens.is_some() && p.lens.is_some()) {
                continue;
            }
            out.push(Masked { core: p.core, mask: mask.or(p.mask), causal: causal || p.causal, lens: lens.or(p.lens) });
        }
    };
    for (a, m) in binary_comm(eg, t, BinaryOp::Add) {
        if !same_shape(eg, t, a) || shape(eg, m).is_none_or(|s| s.dtype != ts.dtype) {
            continue;
        }
        if causal_additive(eg, m) {
            add(a, None, true, None);
        } else {
            add(a, Some(m), false, None);
        }
    }
    for (op, c) in ops(eg, t) {
        if *op != Op::Where {
            continue;
        }
        let (cond, on_true, on_false) = (c[0], c[1], c[2]);
        if same_shape(eg, t, on_true) && splat(eg, on_false).is_some_and(is_large_negative) {
            let offs = causal_offsets(eg, cond, true);
            if offs.contains(&0) {
                add(on_true, None, true, None);
            } else if skv > 0 && offs.iter().any(|&o| o >= skv - 1) {
                add(on_true, None, false, None);
            } else if let Some(len) = seq_len_mask(eg, cond) {
                add(on_true, None, false, Some(len));
            } else {
                add(on_true, Some(cond), false, None);
            }
        }
        if same_shape(eg, t, on_false) && splat(eg, on_true).is_some_and(is_large_negative) {
            let offs = causal_offsets(eg, cond, false);
            if offs.contains(&0) {
                add(on_false, None, true, None);
            } else if skv > 0 && offs.iter().any(|&o| o >= skv - 1) {
                add(on_false, None, false, None);
            }
            for (op2, n) in ops(eg, cond) {
                if *op2 == Op::Unary(UnaryOp::LogicalNot) {
                    add(on_false, Some(n[0]), false, None);
                }
            }
        }
    }
    out
}

/// The un-expanded K or V of a grouped-query attention: the class itself, and `x` (rank 4,
/// `Hkv` heads on the layout's head axis `ha`) when the class is `x` repeated G times per head
/// in the op's order (query head h ↔ kv head `h / G`):
/// `Reshape(BroadcastInDim(x, [..,Hkv,G,..], axes without ha+1))`,
/// `Reshape(BroadcastInDim(x5, identity axes))` or `Reshape(Concatenate(x5 × G, axis ha+1))`
/// with `x5 = Reshape(x)` = x with a size-1 axis inserted at ha+1, and (one kv head)
/// `BroadcastInDim(x, identity axes)` or `Concatenate(x × H, axis ha)`. Guards: every dim
/// checked; the reshape merges exactly the head and group axes.
fn peel_repeat(eg: &EG, id: Id, layout: AttentionLayout) -> Vec<Id> {
    let mut out = vec![id];
    let (ha, _) = head_seq_axes(layout);
    let Some(full) = shape(eg, id).filter(|s| s.rank() == 4 && !s.is_dynamic()).cloned() else { return out };
    // x (rank 4) with one kv head, spread over the head axis of `full`.
    let one_head = |x: Id| {
        shape(eg, x).is_some_and(|s| {
            s.dtype == full.dtype
                && s.rank() == 4
                && (0..4).all(|a| if a == ha { s.dims[a] == 1 } else { s.dims[a] == full.dims[a] })
        })
    };
    for (op, c) in ops(eg, id) {
        match op {
            Op::BroadcastInDim { axes, .. } if *axes == [0, 1, 2, 3] && one_head(c[0]) => out.push(c[0]),
            Op::Concatenate { axis } if *axis == ha && one_head(c[0]) && c.iter().all(|&x| same(eg, x, c[0])) => {
                out.push(c[0])
            }
            Op::Reshape { .. } => {
                let Some(s5) = shape(eg, c[0]).filter(|s| s.rank() == 5 && s.dtype == full.dtype) else { continue };
                let (hkv, g) = (s5.dims[ha], s5.dims[ha + 1]);
                let outer_ok = (0..4).all(|a| {
                    let d5 = if a < ha {
                        s5.dims[a]
                    } else if a == ha {
                        hkv * g
                    } else {
                        s5.dims[a + 1]
                    };
                    d5 == full.dims[a]
                });
                if !outer_ok || g < 1 {
                    continue;
                }
                // x: s5 without its group axis, with the group axis of size 1 in x5.
                let is_x = |x: Id| {
                    shape(eg, x).is_some_and(|s| {
                        s.rank() == 4 && (0..4).all(|a| s.dims[a] == s5.dims[if a <= ha { a } else { a + 1 }])
                    })
                };
                let x_of_x5 = |x5: Id| -> Vec<Id> {
                    let ok = shape(eg, x5).is_some_and(|s| {
                        s.rank() == 5 && s.dims[ha + 1] == 1 && (0..5).all(|a| a == ha + 1 || s.dims[a] == s5.dims[a])
                    });
                    if !ok {
                        return vec![];
                    }
                    ops(eg, x5)
                        .filter(|(o, x)| matches!(o, Op::Reshape { .. }) && is_x(x[0]))
                        .map(|(_, x)| x[0])
                        .collect()
                };
                for (op5, e) in ops(eg, c[0]) {
                    match op5 {
                        Op::BroadcastInDim { axes, .. } => {
                            let want: Vec<usize> = (0..5).filter(|&a| a != ha + 1).collect();
                            if *axes == want && is_x(e[0]) {
                                out.push(e[0]);
                            } else if *axes == [0, 1, 2, 3, 4] {
                                out.extend(x_of_x5(e[0]));
                            }
                        }
                        Op::Concatenate { axis } if *axis == ha + 1 && e.iter().all(|&x| same(eg, x, e[0])) => {
                            out.extend(x_of_x5(e[0]));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
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
/// `= FusedScaledDotProductAttention{layout, scale, causal}(q, k, v[, mask][, lens])`. Guards:
/// the PV DotGeneral has batch axes `[0,1]` on the probabilities and (B, H) of v's layout,
/// contracts the probabilities' key axis 3 with v's sequence axis; the softmax is over axis 3,
/// the key axis of the `[B,H,S,Skv]` scores; Q, K and V use the same layout; the scale is the
/// product of every splat factor (non-zero, finite); K and V may be GQA-expanded
/// ([`peel_repeat`]); the fused op's inferred shape (q's shape with v's head dim, GQA-checked:
/// K and V with the same kv heads dividing H) is exactly the class's shape. With a length mask
/// the result starts with the two auxiliary nodes of `query_seq_len = Sq`.
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
                for m in masked(eg, t[0], 3) {
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
                            has_seq_lens: m.lens.is_some(),
                            quantized_matmuls: false,
                        };
                        for k in peel_repeat(eg, s.k, layout) {
                            for vv in peel_repeat(eg, v, layout) {
                                let mut operands = vec![s.q, k, vv];
                                operands.extend(m.mask.map(|mm| mask_operand(eg, mm)));
                                match m.lens {
                                    None => found.extend(emit(eg, id, op.clone(), &operands)),
                                    Some(len) => emit_with_lens(eg, id, op.clone(), operands, len, &mut found),
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    found
}

/// Adds to `found` the nodes of `op(operands…, query_seq_len, len)` with `query_seq_len` =
/// `ReduceMax(Iota(i32[B, Sq+1], axis 1), axis 1)` (Sq for every batch), if the op's inferred
/// shape is exactly the class's shape.
fn emit_with_lens(eg: &EG, class: Id, op: Op, operands: Vec<Id>, len: Id, found: &mut Vec<TNode>) {
    let (Some(want), Some(ls)) = (shape(eg, class), shape(eg, len)) else { return };
    let Some(qs) = shape(eg, operands[0]) else { return };
    let (_, s_axis) = match op {
        Op::FusedScaledDotProductAttention { layout, .. } => head_seq_axes(layout),
        _ => return,
    };
    let (nb, sq) = (qs.dims[0], qs.dims[s_axis]);
    if nb < 0 || sq < 0 || sq >= i64::from(i32::MAX) {
        return;
    }
    let iota = Op::Iota { shape: Shape::new(DType::Int32, &[nb, sq + 1]), axis: 1 };
    let qlen_shape = Shape::new(DType::Int32, &[nb]);
    let mut shapes: Vec<Shape> = vec![];
    for &o in &operands {
        let Some(sh) = shape(eg, o) else { return };
        shapes.push(sh.clone());
    }
    shapes.push(qlen_shape);
    shapes.push(ls.clone());
    let refs: Vec<&Shape> = shapes.iter().collect();
    let scratch = Module::new("egraph-check");
    match infer_shapes(&scratch, &op, &refs) {
        Ok(got) if got.len() == 1 && got[0] == *want => {}
        _ => return,
    }
    let base = found.len();
    found.push(TNode::op(iota, &[]));
    found.push(TNode::op(Op::Reduce { kind: ReduceKind::Max, axes: vec![1] }, &[local(base)]));
    let mut all = operands;
    all.push(local(base + 1));
    all.push(len);
    found.push(TNode::op(op, &all));
}
