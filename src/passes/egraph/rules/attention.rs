//! Stage 3: FusedScaledDotProductAttention from `softmax(Q·Kᵀ·scale + mask) · V` written with
//! DotGeneral over `[B,H,S,D]` (BHSD) or `[B,S,H,D]` (BSHD, output transposed back), the scale on
//! Q, on K or on the scores, K optionally pre-transposed, an additive mask, a boolean mask via
//! `Where(mask, scores, −inf or a large negative)`, and a causal mask (a constant
//! lower-triangular mask or an Iota comparison).
//!
//! Q, K and V are read through their head-split transposes: the BERT exports' `[B,S,H·D]`
//! projections reshaped to `[B,S,H,D]` and transposed to `[B,H,S,D]` (K to `[B,H,D,S]`), with the
//! output transposed back and reshaped to `[B,S,H·D]`, become one BSHD op on the reshapes, so no
//! head transpose is left (the reshapes are views). The exporters' padding mask — the additive
//! `Where(all-true ∧ mask, 0, finfo.min)` at `[B,1,S,S]`, built on the `[B,1,1,S]`
//! `attention_mask` — becomes the op's additive mask in its compact form `Where(mask, 0,
//! finfo.min)` at `[B,1,1,S]` (an auxiliary node of the result; see [`compact_additive`]). It
//! stays additive, not Bool, so that a row with every key masked keeps the unfused graph's
//! uniform weights.
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

use super::{Rule, binary, binary_comm, infers_class_shape, local, ops, same, same_shape, shape, splat};
use crate::ir::dtype::DType;
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

/// The readings of class `x` whose axes hold the logical (B, H, S, D) axes at positions
/// `map` as an operand in a layout: `x` itself and `y` of a `Transpose(y, perm)` in the class
/// (the axes mapped through `perm`), each kept when its (B, H, S, D) axes are in BHSD or BSHD
/// order. Scale factors on either side of the transpose are peeled ([`peel_scale`]).
fn layout_views(eg: &EG, x: Id, map: [usize; 4]) -> Vec<(Id, AttentionLayout, f64)> {
    let mut out = vec![];
    for (x1, f1) in peel_scale(eg, x) {
        for (y, perm) in peel_transpose(eg, x1) {
            let Some(m) = map.iter().map(|&a| perm.get(a).copied()).collect::<Option<Vec<usize>>>() else { continue };
            let layout = match m.as_slice() {
                [0, 1, 2, 3] => AttentionLayout::Bhsd,
                [0, 2, 1, 3] => AttentionLayout::Bshd,
                _ => continue,
            };
            for (z, f2) in peel_scale(eg, y) {
                if shape(eg, z).is_some_and(|s| s.rank() == 4) {
                    out.push((z, layout, f1 * f2));
                }
            }
        }
    }
    out
}

/// The axis of a rank-4 operand that is neither batch nor contracting, if exactly one.
fn free_axis(batch: &[usize], contracting: &[usize]) -> Option<usize> {
    if batch.len() != 2 || contracting.len() != 1 {
        return None;
    }
    let mut free = (0..4).filter(|a| !batch.contains(a) && !contracting.contains(a));
    let f = free.next()?;
    free.next().is_none().then_some(f)
}

/// Every reading of class `id` as `(Q·c₁)·(K·c₂)ᵀ·c₃`: a DotGeneral with two batch axes (B, H)
/// and one contracting axis (the head dim) on each side, so that its result is the `[B, H, Sq,
/// Skv]` scores, where Q and K are read through a transpose ([`layout_views`]) and both are in
/// the same layout (BHSD, or BSHD: the `[B, S, H, D]` reshapes of the projections, the head
/// split transposes skipped). Guards: ranks 4; plain dtypes; every scale a splat constant not
/// widening its operand.
fn qk_scores(eg: &EG, id: Id) -> Vec<Scores> {
    let mut out = vec![];
    for (d, f0) in peel_scale(eg, id) {
        for (op, c) in ops(eg, d) {
            let Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, .. } = op else { continue };
            let Some(qs) = shape(eg, c[0]) else { continue };
            if qs.rank() != 4 || !plain_dtypes(op, qs.dtype) || shape(eg, c[1]).is_none_or(|s| s.rank() != 4) {
                continue;
            }
            let (Some(qf), Some(kf)) = (free_axis(lhs_batch, lhs_contracting), free_axis(rhs_batch, rhs_contracting))
            else {
                continue;
            };
            let qmap = [lhs_batch[0], lhs_batch[1], qf, lhs_contracting[0]];
            let kmap = [rhs_batch[0], rhs_batch[1], kf, rhs_contracting[0]];
            for (q, ql, fq) in layout_views(eg, c[0], qmap) {
                for (k, kl, fk) in layout_views(eg, c[1], kmap) {
                    if ql == kl {
                        out.push(Scores { q, k, layout: ql, scale: f0 * fq * fk });
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

/// Where the fused op's mask operand comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MaskSrc {
    /// An existing class (Bool, or additive in the scores' dtype).
    Class(Id),
    /// A new additive mask `Where(cond, on_true, on_false)` with a compact Bool `cond` (rank
    /// 4, broadcasting to the scores) and rank-0 splat branches: the compact form of an
    /// additive `Where` mask built on a broadcast condition (see [`compact_additive`]).
    Where { cond: Id, on_true: Id, on_false: Id },
}

/// Scores with their masking peeled off.
#[derive(Clone, Copy)]
struct Masked {
    core: Id,
    mask: Option<MaskSrc>,
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

/// Whether `small` (rank 4) broadcasts to `full` (rank 4) axis by axis.
fn broadcasts_to(small: &Shape, full: &[i64]) -> bool {
    small.rank() == 4 && full.len() == 4 && small.dims.iter().zip(full).all(|(&a, &b)| a == 1 || a == b)
}

/// Classes equal to Bool class `cond` up to a broadcast, smallest first: `cond` itself, `x` of a
/// `BroadcastInDim(x, identity axes)` and the other operand of a `LogicalAnd` with an all-true
/// constant, recursively (depth 3), each of rank 4 broadcasting to `cond`'s dims.
fn bool_sources(eg: &EG, cond: Id, depth: usize) -> Vec<Id> {
    let mut out = vec![cond];
    let Some(cs) = shape(eg, cond).filter(|s| s.dtype == DType::Bool && s.rank() == 4).cloned() else { return out };
    if depth == 0 {
        return out;
    }
    let fits = |x: Id| shape(eg, x).is_some_and(|s| s.dtype == DType::Bool && broadcasts_to(s, &cs.dims));
    for (op, c) in ops(eg, cond) {
        match op {
            Op::BroadcastInDim { axes, .. } if *axes == [0, 1, 2, 3] && fits(c[0]) => {
                out.extend(bool_sources(eg, c[0], depth - 1))
            }
            Op::Binary(BinaryOp::LogicalAnd) => {
                for (t, x) in [(c[0], c[1]), (c[1], c[0])] {
                    if splat(eg, t) == Some(1.0) && fits(x) {
                        out.extend(bool_sources(eg, x, depth - 1));
                    }
                }
            }
            _ => {}
        }
    }
    out.sort_by_key(|&x| shape(eg, x).and_then(|s| s.size()).unwrap_or(usize::MAX));
    out
}

/// A rank-0 class of a splat constant `c`: `c` itself when it has rank 0, else a rank-0 class
/// `x` of a `BroadcastInDim(x)` in its class.
fn scalar_class(eg: &EG, c: Id) -> Option<Id> {
    if shape(eg, c)?.rank() == 0 {
        return Some(c);
    }
    ops(eg, c).find_map(|(op, x)| {
        (matches!(op, Op::BroadcastInDim { .. }) && shape(eg, x[0]).is_some_and(|s| s.rank() == 0)).then_some(x[0])
    })
}

/// The compact form of an additive mask `m` of the `[B,H,Sq,Skv]` scores `ts`: when `m` is
/// `Where(cond, a, b)` with finite splat constants a, b and `cond` a broadcast of a smaller
/// Bool class ([`bool_sources`], e.g. the `[B,1,1,Skv]` padding mask widened to `[B,1,Sq,Skv]`
/// by a `LogicalAnd` with an all-true constant), the same `Where` on the small condition. It is
/// the same additive mask, element for element, so the fused op stays exact — also for a row
/// with every key masked: its scores all become the same large negative value and the softmax
/// gives uniform weights, as in the unfused graph (a Bool mask would make that row 0). An
/// infinite fill is not taken (the unfused graph gives NaN rows there, the fused op 0).
fn compact_additive(eg: &EG, m: Id, ts: &Shape) -> Option<MaskSrc> {
    let ms = shape(eg, m)?;
    if ms.dtype != ts.dtype || !broadcasts_to(ms, &ts.dims) {
        return None;
    }
    for (op, c) in ops(eg, m) {
        if *op != Op::Where {
            continue;
        }
        let finite = |x: Id| splat(eg, x).is_some_and(f64::is_finite);
        if !finite(c[1]) || !finite(c[2]) {
            continue;
        }
        let (Some(on_true), Some(on_false)) = (scalar_class(eg, c[1]), scalar_class(eg, c[2])) else { continue };
        let cs = shape(eg, c[0])?;
        let small = bool_sources(eg, c[0], 3).into_iter().next()?;
        if matches!((shape(eg, small).and_then(|s| s.size()), cs.size()), (Some(a), Some(b)) if a < b) {
            return Some(MaskSrc::Where { cond: small, on_true, on_false });
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
    let mut add = |inner: Id, mask: Option<MaskSrc>, causal: bool, lens: Option<Id>| {
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
        } else if let Some(w) = compact_additive(eg, m, &ts) {
            add(a, Some(w), false, None);
        } else {
            add(a, Some(MaskSrc::Class(m)), false, None);
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
                add(on_true, Some(MaskSrc::Class(cond)), false, None);
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
                    add(on_false, Some(MaskSrc::Class(n[0])), false, None);
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
/// right-aligned from rank 2–4 with dims equal to the scores' or 1, else the mask itself.
fn mask_operand(eg: &EG, m: Id) -> Id {
    let Some(ms) = shape(eg, m) else { return m };
    for (op, c) in ops(eg, m) {
        if let Op::BroadcastInDim { axes, .. } = op
            && let Some(s0) = shape(eg, c[0])
            && (2..=4).contains(&s0.rank())
            && axes.iter().copied().eq(ms.rank() - s0.rank()..ms.rank())
            && s0.dims.iter().zip(axes).all(|(&d, &a)| d == 1 || d == ms.dims[a])
        {
            return c[0];
        }
    }
    m
}

/// `softmax_axis3(Q·Kᵀ·scale (+ mask)) · V` with the output in BHSD, or its
/// `Transpose([0,2,1,3])` (the output in BSHD) `= FusedScaledDotProductAttention{layout, scale,
/// causal}(q, k, v[, mask][, lens])` with the layout of the output: Q, K and V are read through
/// their head-split transposes ([`layout_views`]), so the BERT form `reshape → transpose →
/// attention → transpose → reshape` becomes one BSHD op on the `[B, S, H, D]` reshapes. Guards:
/// the PV DotGeneral has batch axes `[0,1]` on the probabilities and contracts their key axis
/// 3 with v's sequence axis; the softmax is over axis 3, the key axis of the `[B,H,S,Skv]`
/// scores; Q, K and V in the output's layout; the scale is the product of every splat factor
/// (non-zero, finite); K and V may be GQA-expanded ([`peel_repeat`]); the fused op's inferred
/// shape (q's shape with v's head dim, GQA-checked: K and V with the same kv heads dividing H)
/// is exactly the class's shape. Auxiliary nodes (a compact additive mask, the
/// `query_seq_len = Sq` of a length mask) come first in the result.
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
    let mut seen = vec![];
    for (o, layout) in outs {
        for (op, c) in ops(eg, o) {
            let Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, .. } = op else { continue };
            let (p, v) = (c[0], c[1]);
            let Some(ps) = shape(eg, p) else { continue };
            if !plain_dtypes(op, ps.dtype) || *lhs_batch != [0, 1] || *lhs_contracting != [3] {
                continue;
            }
            // v's (B, H, S, D): batch, batch, contracted, free.
            let Some(vf) = free_axis(rhs_batch, rhs_contracting) else { continue };
            let vmap = [rhs_batch[0], rhs_batch[1], rhs_contracting[0], vf];
            let vviews: Vec<Id> = layout_views(eg, v, vmap)
                .into_iter()
                .filter(|&(_, l, f)| l == layout && f == 1.0)
                .map(|(x, ..)| x)
                .collect();
            if vviews.is_empty() {
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
                            for &v0 in &vviews {
                                for vv in peel_repeat(eg, v0, layout) {
                                    let key = (op.clone(), [s.q, k, vv], m.mask, m.lens);
                                    if !seen.contains(&key) {
                                        emit_full(eg, id, op.clone(), [s.q, k, vv], m.mask, m.lens, &mut found);
                                        seen.push(key);
                                    }
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

/// An operand of the fused op: an existing class or an auxiliary node of the result.
#[derive(Clone, Copy)]
enum Operand {
    Class(Id),
    Aux(usize),
}

/// How many nodes a matcher result may hold before a node with auxiliary operands (which refer
/// to earlier nodes of the result by index, at most 16 back from its start) is no longer added.
const MAX_RESULT_WITH_AUX: usize = 12;

/// Adds to `found` the nodes of `op(q, k, v[, mask][, query_seq_len, len])`, if the op's
/// inferred shape is exactly the class's shape: first the auxiliary nodes — a compact mask
/// `Where(cond, on_true, on_false)` ([`MaskSrc::Where`]), and with lengths `query_seq_len` =
/// `ReduceMax(Iota(i32[B, Sq+1], axis 1), axis 1)` (Sq for every batch) — then the op. A mask
/// class is passed in its pre-broadcast form ([`mask_operand`]).
fn emit_full(
    eg: &EG,
    class: Id,
    op: Op,
    qkv: [Id; 3],
    mask: Option<MaskSrc>,
    lens: Option<Id>,
    found: &mut Vec<TNode>,
) {
    let Op::FusedScaledDotProductAttention { layout, .. } = op else { return };
    let (_, s_axis) = head_seq_axes(layout);
    // The auxiliary nodes (children may be `Operand::Aux` of earlier ones) and the operands.
    let mut aux: Vec<(Op, Vec<Operand>)> = vec![];
    let mut operands: Vec<(Operand, Shape)> = vec![];
    for x in qkv {
        let Some(sh) = shape(eg, x) else { return };
        operands.push((Operand::Class(x), sh.clone()));
    }
    match mask {
        None => {}
        Some(MaskSrc::Class(m)) => {
            let m = mask_operand(eg, m);
            let Some(sh) = shape(eg, m) else { return };
            operands.push((Operand::Class(m), sh.clone()));
        }
        Some(MaskSrc::Where { cond, on_true, on_false }) => {
            let (Some(cs), Some(ts)) = (shape(eg, cond), shape(eg, on_true)) else { return };
            aux.push((Op::Where, vec![Operand::Class(cond), Operand::Class(on_true), Operand::Class(on_false)]));
            operands.push((Operand::Aux(aux.len() - 1), Shape::new(ts.dtype, &cs.dims)));
        }
    }
    if let Some(len) = lens {
        let (Some(qs), Some(ls)) = (shape(eg, qkv[0]), shape(eg, len)) else { return };
        let (nb, sq) = (qs.dims[0], qs.dims[s_axis]);
        if nb < 0 || sq < 0 || sq >= i64::from(i32::MAX) {
            return;
        }
        aux.push((Op::Iota { shape: Shape::new(DType::Int32, &[nb, sq + 1]), axis: 1 }, vec![]));
        aux.push((Op::Reduce { kind: ReduceKind::Max, axes: vec![1] }, vec![Operand::Aux(aux.len() - 1)]));
        operands.push((Operand::Aux(aux.len() - 1), Shape::new(DType::Int32, &[nb])));
        operands.push((Operand::Class(len), ls.clone()));
    }
    if !aux.is_empty() && found.len() + aux.len() > MAX_RESULT_WITH_AUX {
        return;
    }
    let refs: Vec<&Shape> = operands.iter().map(|(_, s)| s).collect();
    if !infers_class_shape(eg, class, &op, &refs) {
        return;
    }
    let start = found.len();
    let child = |o: &Operand| match *o {
        Operand::Class(id) => id,
        Operand::Aux(k) => local(start + k),
    };
    for (aop, ch) in &aux {
        let ids: Vec<Id> = ch.iter().map(child).collect();
        found.push(TNode::op(aop.clone(), &ids));
    }
    let ids: Vec<Id> = operands.iter().map(|(o, _)| child(o)).collect();
    found.push(TNode::op(op, &ids));
}
