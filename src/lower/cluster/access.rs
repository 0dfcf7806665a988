//! Iteration geometry and input access patterns: the reduced-axes split of a shape and the
//! normalised (contiguous-axes merged) strided or broadcast access of an input.

use super::*;

/// The `(outer, red, inner)` view of a reduction of an operand of `dims` over `axes`, when the
/// reduced axes of more than one element are adjacent (the rest need a general index map).
pub(super) fn reduce_geometry(dims: &[i64], axes: &[usize]) -> Option<(usize, usize, usize)> {
    if axes.iter().any(|&a| a >= dims.len()) || dims.iter().any(|&d| d < 0) {
        return None;
    }
    let reduced = |k: usize| axes.contains(&k);
    let big: Vec<usize> = (0..dims.len()).filter(|&k| reduced(k) && dims[k] != 1).collect();
    let total: usize = dims.iter().map(|&d| d as usize).product();
    let (Some(&first), Some(&last)) = (big.first(), big.last()) else {
        return Some((total, 1, 1));
    };
    if (first..=last).any(|k| !reduced(k) && dims[k] != 1) {
        return None;
    }
    let prod = |r: std::ops::Range<usize>| -> usize { dims[r].iter().map(|&d| d as usize).product() };
    Some((prod(0..first), prod(first..last + 1), prod(last + 1..dims.len())))
}

/// The shape a member iterates over: its operand's for a reduction, else its output's.
pub(super) fn iter_shape<'a>(m: &'a Module, n: NodeId, fz: &Fuse) -> &'a Shape {
    match fz {
        Fuse::Reduce { x, .. } => m.shape(*x),
        _ => m.shape(m.node(n).outputs[0]),
    }
}

/// Row-major element strides of `dims`.
pub(super) fn row_major(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1].saturating_mul(dims[k + 1].max(1));
    }
    s
}

/// The simplest access equivalent to reading through (`dims`, `strides`): size-1 axes dropped,
/// adjacent axes merged where they are contiguous, `Full` for the identity map and `Scalar`
/// when every stride is 0.
pub(crate) fn normalize_access(dims: &[i64], strides: &[i64]) -> Access {
    let mut d: Vec<i64> = vec![];
    let mut s: Vec<i64> = vec![];
    for (&dk, &sk) in dims.iter().zip(strides) {
        if dk == 1 {
            continue;
        }
        if let (Some(ld), Some(&ls)) = (d.last_mut(), s.last())
            && ls == sk.saturating_mul(dk)
        {
            *ld *= dk;
            *s.last_mut().unwrap_or(&mut 0) = sk;
            continue;
        }
        d.push(dk);
        s.push(sk);
    }
    if s.iter().all(|&x| x == 0) {
        return Access::Scalar;
    }
    if d.len() == 1 && s[0] == 1 {
        return Access::Full;
    }
    Access::Strided { dims: d, strides: s }
}

/// The access reading `v` (dims `vd`) broadcast to `dims` (same rank; size-1 axes of `vd` repeat).
pub(super) fn broadcast_access(vd: &[i64], dims: &[i64]) -> Option<Access> {
    if vd.len() != dims.len() || vd.iter().zip(dims).any(|(&a, &b)| a != b && a != 1) {
        return None;
    }
    let rs = row_major(vd);
    let strides: Vec<i64> = vd.iter().zip(&rs).map(|(&a, &s)| if a == 1 { 0 } else { s }).collect();
    Some(normalize_access(dims, &strides))
}
