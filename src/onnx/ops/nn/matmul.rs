//! Matrix products: `MatMul` (NumPy matmul), `Gemm` and `Einsum`, all onto `DotGeneral`.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, Op, ReduceKind};
use crate::ir::shape::Shape;

use super::super::common::{broadcast_dims, broadcast_to, reshape_to};
use super::{bin, dims_of, reshape};
use crate::onnx::graph::{Ctx, Node};

/// `DotGeneral` with the given axes (output dtype = input dtype).
fn dot(
    ctx: &mut Ctx<'_>,
    a: ValueId,
    b: ValueId,
    contracting: (Vec<usize>, Vec<usize>),
    batch: (Vec<usize>, Vec<usize>),
) -> Result<ValueId> {
    let op = Op::DotGeneral {
        lhs_contracting: contracting.0,
        lhs_batch: batch.0,
        rhs_contracting: contracting.1,
        rhs_batch: batch.1,
        accumulator_dtype: None,
        output_dtype: None,
    };
    ctx.emit1(op, &[a, b])
}

/// Checks that both operands have the same numeric element type.
fn same_numeric(ctx: &Ctx<'_>, n: &Node<'_>, a: ValueId, b: ValueId) -> Result<()> {
    let (da, db) = (ctx.dtype(a), ctx.dtype(b));
    if da != db {
        return Err(n.invalid(format!("operand types differ: {da} and {db}")));
    }
    if !(da.is_float() || (da.is_int() && !da.is_packed())) {
        return Err(n.unsupported(format!("element type {da}")));
    }
    Ok(())
}

/// `MatMul(A, B)` with NumPy semantics.
pub(super) fn matmul(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    same_numeric(ctx, n, a, b)?;
    Ok(vec![numpy_matmul(ctx, n, a, b)?])
}

/// NumPy `matmul`: 1-D operands are promoted (and the added axis removed from the result),
/// leading (batch) axes broadcast.
fn numpy_matmul(ctx: &mut Ctx<'_>, n: &Node<'_>, a: ValueId, b: ValueId) -> Result<ValueId> {
    if ctx.shape(a).is_dynamic() || ctx.shape(b).is_dynamic() {
        return dynamic_matmul(ctx, n, a, b);
    }
    let (mut ad, mut bd) = (dims_of(ctx, n, a)?, dims_of(ctx, n, b)?);
    if ad.is_empty() || bd.is_empty() {
        return Err(n.invalid("MatMul operands must have rank ≥ 1"));
    }
    let (a_vec, b_vec) = (ad.len() == 1, bd.len() == 1);
    if a_vec {
        ad.insert(0, 1);
    }
    if b_vec {
        bd.push(1);
    }
    let (ra, rb) = (ad.len(), bd.len());
    let (m, k, kb, nn) = (ad[ra - 2], ad[ra - 1], bd[rb - 2], bd[rb - 1]);
    if k != kb {
        return Err(n.invalid(format!("inner dimensions differ: A {ad:?}, B {bd:?}")));
    }
    let (a_batch, b_batch) = (ad[..ra - 2].to_vec(), bd[..rb - 2].to_vec());
    let batch = broadcast_dims(n, &[a_batch.clone(), b_batch.clone()])?;
    let nb = batch.len();
    let mut full = batch.clone();
    full.extend([m, nn]);
    let a = reshape(ctx, a, &ad)?;
    let b = reshape(ctx, b, &bd)?;
    let y = if b_batch.iter().all(|&d| d == 1) {
        // B is one matrix: contract A's last axis with it; the result is [a_batch.., M, N].
        let b2 = reshape(ctx, b, &[k, nn])?;
        dot(ctx, a, b2, (vec![ra - 1], vec![0]), (vec![], vec![]))?
    } else if a_batch.iter().all(|&d| d == 1) {
        // A is one matrix: [M, b_batch.., N], then move M next to N.
        let a2 = reshape(ctx, a, &[m, k])?;
        let y = dot(ctx, a2, b, (vec![1], vec![rb - 2]), (vec![], vec![]))?;
        let nbb = rb - 2;
        let mut perm: Vec<usize> = (1..=nbb).collect();
        perm.extend([0, nbb + 1]);
        ctx.emit1(Op::Transpose { perm }, &[y])?
    } else {
        let mut at = batch.clone();
        at.extend([m, k]);
        let mut bt = batch.clone();
        bt.extend([k, nn]);
        let a = broadcast_to(ctx, n, a, &at)?;
        let b = broadcast_to(ctx, n, b, &bt)?;
        let bax: Vec<usize> = (0..nb).collect();
        dot(ctx, a, b, (vec![nb + 1], vec![nb]), (bax.clone(), bax))?
    };
    let y = reshape(ctx, y, &full)?;
    let mut out = batch;
    if !a_vec {
        out.push(m);
    }
    if !b_vec {
        out.push(nn);
    }
    reshape(ctx, y, &out)
}

/// `matmul` with dynamic axes (operands of rank ≥ 2): either B is one static matrix (`x @ W`:
/// A's last axis contracted with it), or both have the same batch axes (equal sizes or names:
/// attention's `Q @ K^T`). The contracted axis must be static.
fn dynamic_matmul(ctx: &mut Ctx<'_>, n: &Node<'_>, a: ValueId, b: ValueId) -> Result<ValueId> {
    let (sa, sb) = (ctx.shape(a).clone(), ctx.shape(b).clone());
    let (ra, rb) = (sa.rank(), sb.rank());
    let unsupported = || n.unsupported(format!("MatMul of {sa} and {sb} with dynamic axes"));
    if ra < 2 || rb < 2 {
        return Err(unsupported());
    }
    let (k, kb) = (sa.dims[ra - 1], sb.dims[rb - 2]);
    // A dynamic contracted axis must be the same named axis on both sides.
    if k != kb || (k < 0 && sa.axis_name(ra - 1) != sb.axis_name(rb - 2)) {
        return Err(n.invalid(format!("inner dimensions differ: A {sa}, B {sb}")));
    }
    if !sb.is_dynamic() && sb.dims[..rb - 2].iter().all(|&d| d == 1) {
        let nn = sb.dims[rb - 1];
        let b2 = reshape(ctx, b, &[k, nn])?;
        let mut a = a;
        if rb > ra {
            let mut dims = vec![1; rb - ra];
            dims.extend(&sa.dims);
            a = ctx.emit1(Op::Reshape { dims }, &[a])?;
        }
        let r = ctx.rank(a);
        return dot(ctx, a, b2, (vec![r - 1], vec![0]), (vec![], vec![]));
    }
    let same_batch = ra == rb
        && (0..ra - 2).all(|i| sa.dims[i] == sb.dims[i] && (sa.dims[i] >= 0 || sa.axis_name(i) == sb.axis_name(i)));
    if !same_batch {
        return Err(unsupported());
    }
    let bax: Vec<usize> = (0..ra - 2).collect();
    dot(ctx, a, b, (vec![ra - 1], vec![ra - 2]), (bax.clone(), bax))
}

/// `Gemm(A, B, C) = alpha·A'·B' + beta·C` with optional transposes and C broadcast to `[M, N]`.
pub(super) fn gemm(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    same_numeric(ctx, n, a, b)?;
    let trans_a = n.attr_i_or("transA", 0)? != 0;
    let trans_b = n.attr_i_or("transB", 0)? != 0;
    let alpha = n.attr_f_or("alpha", 1.0)? as f64;
    let beta = n.attr_f_or("beta", 1.0)? as f64;
    // `broadcast` (opset < 7) only allowed C to broadcast; broadcasting is always on since.
    n.ignore_attrs(&["broadcast"]);
    // A dynamic M (rows of A, e.g. batch·sequence) carries through; K and N must be static.
    let (ad, bd) = (ctx.shape(a).dims.clone(), dims_of(ctx, n, b)?);
    if ad.len() == 2 && ad[usize::from(!trans_a)] < 0 {
        return Err(n.unsupported(format!("the contracted axis of A {} is dynamic", ctx.shape(a))));
    }
    if ad.len() != 2 || bd.len() != 2 {
        return Err(n.invalid(format!("A {ad:?} and B {bd:?} must be matrices")));
    }
    let (m, k) = if trans_a { (ad[1], ad[0]) } else { (ad[0], ad[1]) };
    let (kb, nn) = if trans_b { (bd[1], bd[0]) } else { (bd[0], bd[1]) };
    if k != kb {
        return Err(
            n.invalid(format!("inner dimensions differ: A {ad:?} (transA {trans_a}), B {bd:?} (transB {trans_b})"))
        );
    }
    let dt = ctx.dtype(a);
    let c = n.opt_input(2).filter(|_| beta != 0.0);
    if dt.is_int() && (alpha != 1.0 || (c.is_some() && beta != 1.0)) {
        return Err(n.unsupported(format!("alpha {alpha} / beta {beta} on integer operands")));
    }
    let ca = usize::from(!trans_a);
    let cb = usize::from(trans_b);
    let mut y = dot(ctx, a, b, (vec![ca], vec![cb]), (vec![], vec![]))?;
    if alpha != 1.0 {
        let s = ctx.scalar(dt, alpha)?;
        y = bin(ctx, BinaryOp::Mul, y, s)?;
    }
    if let Some(c) = c {
        if ctx.dtype(c) != dt {
            return Err(n.invalid(format!("C has type {}, A has {dt}", ctx.dtype(c))));
        }
        let cd = dims_of(ctx, n, c)?;
        if cd.len() > 2 || broadcast_dims(n, &[cd.clone(), vec![m, nn]])? != [m, nn] {
            return Err(n.invalid(format!("C {cd:?} does not broadcast to [{m}, {nn}]")));
        }
        // Rank 2 with leading size-1 axes; the add broadcasts it (a bias stays `[1, N]`, not
        // an `[M, N]` copy, so the fusion pass sees the dense + bias pattern).
        let mut c = if cd.len() < 2 {
            let mut d2 = vec![1; 2 - cd.len()];
            d2.extend(&cd);
            reshape_to(ctx, c, &d2)?
        } else {
            c
        };
        if beta != 1.0 {
            let s = ctx.scalar(dt, beta)?;
            c = bin(ctx, BinaryOp::Mul, c, s)?;
        }
        y = bin(ctx, BinaryOp::Add, y, c)?;
    }
    Ok(vec![y])
}

/// An einsum axis label: a letter, or one of the axes an ellipsis stands for (right-aligned).
type Label = u32;
const ELLIPSIS_BASE: Label = 1 << 16;

/// One operand of an einsum contraction: its value and the label of each axis.
struct Term {
    v: ValueId,
    labels: Vec<Label>,
}

/// Parses one side of an equation term: letters and at most one `...`.
fn parse_term(n: &Node<'_>, s: &str) -> Result<(Vec<Label>, Option<usize>)> {
    let mut labels = Vec::new();
    let mut ellipsis = None;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'.' {
            if !s[i..].starts_with("...") || ellipsis.is_some() {
                return Err(n.invalid(format!("einsum term {s:?}: bad ellipsis")));
            }
            ellipsis = Some(labels.len());
            i += 3;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return Err(n.invalid(format!("einsum term {s:?}: unexpected character {:?}", c as char)));
        }
        labels.push(c as Label);
        i += 1;
    }
    Ok((labels, ellipsis))
}

/// Expands a parsed term against `rank` (`ell` axes for the ellipsis, right-aligned among `max_ell`).
fn expand_term(labels: &[Label], ellipsis: Option<usize>, ell: usize, max_ell: usize) -> Vec<Label> {
    match ellipsis {
        None => labels.to_vec(),
        Some(p) => {
            let mut out = labels[..p].to_vec();
            out.extend((max_ell - ell..max_ell).map(|i| ELLIPSIS_BASE + i as Label));
            out.extend(&labels[p..]);
            out
        }
    }
}

/// `Einsum(equation, inputs...)`: sums of products over labelled axes, onto diagonals
/// (`Where` + sums), reductions and `DotGeneral` (operands contracted left to right).
pub(super) fn einsum(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let eq: String = n
        .attr_s("equation")?
        .ok_or_else(|| n.invalid("attribute \"equation\" is required"))?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let inputs = n.present_inputs();
    if inputs.is_empty() || inputs.len() != n.num_inputs() {
        return Err(n.invalid("Einsum needs at least one input and no omitted ones"));
    }
    let dt = ctx.dtype(inputs[0]);
    for &v in &inputs {
        if ctx.dtype(v) != dt {
            return Err(n.invalid(format!("operand types differ: {} and {dt}", ctx.dtype(v))));
        }
    }
    if !(dt.is_float() || (dt.is_int() && !dt.is_packed())) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != inputs.len() {
        return Err(n.invalid(format!("equation {eq:?} has {} operands, {} inputs given", terms.len(), inputs.len())));
    }
    // Parse, then give each ellipsis its axes.
    let mut parsed = Vec::new();
    let mut max_ell = 0usize;
    let mut ells = Vec::new();
    for (t, &v) in terms.iter().zip(&inputs) {
        let (labels, ellipsis) = parse_term(n, t)?;
        let rank = ctx.rank(v);
        let ell = match ellipsis {
            Some(_) if rank >= labels.len() => rank - labels.len(),
            None if rank == labels.len() => 0,
            _ => return Err(n.invalid(format!("term {t:?} does not match an operand of rank {rank}"))),
        };
        max_ell = max_ell.max(ell);
        ells.push(ell);
        parsed.push((labels, ellipsis));
    }
    let mut ops: Vec<Term> = Vec::new();
    for (((labels, ellipsis), &ell), &v) in parsed.iter().zip(&ells).zip(&inputs) {
        ops.push(Term { v, labels: expand_term(labels, *ellipsis, ell, max_ell) });
    }
    // Output labels.
    let out: Vec<Label> = match rhs {
        Some(r) => {
            let (labels, ellipsis) = parse_term(n, r)?;
            expand_term(&labels, ellipsis, max_ell, max_ell)
        }
        None => {
            let mut count: BTreeMap<Label, usize> = BTreeMap::new();
            for t in &ops {
                for &l in &t.labels {
                    *count.entry(l).or_default() += 1;
                }
            }
            let mut out: Vec<Label> = (0..max_ell).map(|i| ELLIPSIS_BASE + i as Label).collect();
            out.extend(count.iter().filter(|&(&l, &c)| c == 1 && l < ELLIPSIS_BASE).map(|(&l, _)| l));
            out
        }
    };
    for (i, l) in out.iter().enumerate() {
        if out[..i].contains(l) {
            return Err(n.invalid(format!("equation {eq:?}: output label repeated")));
        }
        if !ops.iter().any(|t| t.labels.contains(l)) {
            return Err(n.invalid(format!("equation {eq:?}: output label not in any input")));
        }
    }
    // Sizes per label (size-1 axes broadcast).
    let mut size: BTreeMap<Label, i64> = BTreeMap::new();
    for t in &ops {
        let dims = dims_of(ctx, n, t.v)?;
        for (&l, &d) in t.labels.iter().zip(&dims) {
            let e = size.entry(l).or_insert(d);
            if *e == 1 {
                *e = d;
            } else if d != 1 && d != *e {
                return Err(n.invalid(format!("equation {eq:?}: a label has sizes {} and {d}", *e)));
            }
        }
    }
    // Diagonals, then labels only this operand has.
    for i in 0..ops.len() {
        diagonal(ctx, n, &mut ops[i])?;
        let others: Vec<Label> = ops
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .flat_map(|(_, t)| t.labels.iter().copied())
            .chain(out.iter().copied())
            .collect();
        let lone: Vec<usize> = (0..ops[i].labels.len()).filter(|&a| !others.contains(&ops[i].labels[a])).collect();
        sum_axes(ctx, &mut ops[i], &lone)?;
    }
    let mut ops = ops.into_iter();
    let mut acc = ops.next().ok_or_else(|| n.invalid("no operands"))?;
    let mut rest: Vec<Term> = ops.collect();
    while !rest.is_empty() {
        let mut t = rest.remove(0);
        // Labels of the output and of the operands still to come survive this product.
        let keep: Vec<Label> = out.iter().chain(rest.iter().flat_map(|r| r.labels.iter())).copied().collect();
        contract(ctx, n, &mut acc, &mut t, &keep, &size)?;
    }
    // Whatever is not in the output is summed; then order as the output says.
    let extra: Vec<usize> = (0..acc.labels.len()).filter(|&a| !out.contains(&acc.labels[a])).collect();
    sum_axes(ctx, &mut acc, &extra)?;
    let perm: Vec<usize> = out
        .iter()
        .map(|l| acc.labels.iter().position(|x| x == l).ok_or_else(|| n.invalid("output label lost")))
        .collect::<Result<_>>()?;
    let mut y = acc.v;
    if perm.iter().enumerate().any(|(i, &p)| i != p) {
        y = ctx.emit1(Op::Transpose { perm }, &[y])?;
    }
    Ok(vec![y])
}

/// Replaces repeated labels of one operand by their diagonal.
fn diagonal(ctx: &mut Ctx<'_>, n: &Node<'_>, t: &mut Term) -> Result<()> {
    loop {
        let Some((first, l)) =
            t.labels.iter().enumerate().find(|&(i, l)| t.labels[i + 1..].contains(l)).map(|(i, &l)| (i, l))
        else {
            return Ok(());
        };
        let pos: Vec<usize> = (0..t.labels.len()).filter(|&a| t.labels[a] == l).collect();
        let dims = dims_of(ctx, n, t.v)?;
        let d = dims[first];
        if pos.iter().any(|&p| dims[p] != d) {
            return Err(n.invalid(format!("repeated einsum label with sizes {dims:?}")));
        }
        // Mask over the repeated axes: true where all their indices are equal.
        let k = pos.len();
        let total = (d as usize)
            .checked_pow(k as u32)
            .filter(|&t| t <= 1 << 24)
            .ok_or_else(|| n.unsupported("diagonal too large"))?;
        let mut mask = vec![0u8; total];
        for i in 0..d as usize {
            let mut idx = 0usize;
            for _ in 0..k {
                idx = idx * d as usize + i;
            }
            mask[idx] = 1;
        }
        let mdims = vec![d; k];
        let mask = ctx.constant(Shape::new(crate::ir::dtype::DType::Bool, &mdims), mask)?;
        let full = Shape::new(crate::ir::dtype::DType::Bool, &dims);
        let mask = ctx.emit1(Op::BroadcastInDim { shape: full, axes: pos.clone() }, &[mask])?;
        let zero = ctx.scalar(ctx.dtype(t.v), 0.0)?;
        let v = ctx.emit1(Op::Where, &[mask, t.v, zero])?;
        t.v = v;
        sum_axes(ctx, t, &pos[1..])?;
    }
}

/// Sums `t` over `axes` (removing their labels).
fn sum_axes(ctx: &mut Ctx<'_>, t: &mut Term, axes: &[usize]) -> Result<()> {
    if axes.is_empty() {
        return Ok(());
    }
    t.v = ctx.emit1(Op::Reduce { kind: ReduceKind::Sum, axes: axes.to_vec() }, &[t.v])?;
    t.labels = t.labels.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &l)| l).collect();
    Ok(())
}

/// Broadcasts the size-1 axes of `t` whose label has a larger size.
fn expand_labels(ctx: &mut Ctx<'_>, n: &Node<'_>, t: &mut Term, size: &BTreeMap<Label, i64>) -> Result<()> {
    let dims = dims_of(ctx, n, t.v)?;
    let want: Vec<i64> = t.labels.iter().map(|l| size[l]).collect();
    if dims != want {
        t.v = broadcast_to(ctx, n, t.v, &want)?;
    }
    Ok(())
}

/// `acc ← acc ⊗ t`: shared labels that must survive (in `keep`) become batch axes, the other
/// shared ones are contracted.
fn contract(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    acc: &mut Term,
    t: &mut Term,
    keep: &[Label],
    size: &BTreeMap<Label, i64>,
) -> Result<()> {
    expand_labels(ctx, n, acc, size)?;
    expand_labels(ctx, n, t, size)?;
    let (mut lb, mut rb, mut lc, mut rc) = (vec![], vec![], vec![], vec![]);
    let mut batch_labels = vec![];
    for (i, l) in acc.labels.iter().enumerate() {
        if let Some(j) = t.labels.iter().position(|x| x == l) {
            if keep.contains(l) {
                lb.push(i);
                rb.push(j);
                batch_labels.push(*l);
            } else {
                lc.push(i);
                rc.push(j);
            }
        }
    }
    let mut labels = batch_labels;
    labels.extend(acc.labels.iter().enumerate().filter(|(i, _)| !lb.contains(i) && !lc.contains(i)).map(|(_, &l)| l));
    labels.extend(t.labels.iter().enumerate().filter(|(i, _)| !rb.contains(i) && !rc.contains(i)).map(|(_, &l)| l));
    acc.v = dot(ctx, acc.v, t.v, (lc, rc), (lb, rb))?;
    acc.labels = labels;
    Ok(())
}
