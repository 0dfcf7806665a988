//! Sort with a comparator closure: each 1-D lane along the axis is merge-sorted (stable) by
//! calling the comparator on scalar tensors, then every operand is permuted the same way.

use crate::error::{Error, Result};
use crate::ir::module::FuncId;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;
use std::sync::Arc;

/// A stable bottom-up merge sort of `0..n` under `less` ("a goes strictly before b"). Unlike
/// `slice::sort_by` it cannot panic on an inconsistent comparator, and it propagates errors.
pub(super) fn merge_sort(n: usize, mut less: impl FnMut(usize, usize) -> Result<bool>) -> Result<Vec<usize>> {
    let mut a: Vec<usize> = (0..n).collect();
    let mut b = vec![0usize; n];
    let mut width = 1;
    while width < n {
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut i, mut j, mut k) = (start, mid, start);
            while i < mid && j < end {
                // Take from the right run only when it is strictly first: equal keys keep their
                // input order.
                if less(a[j], a[i])? {
                    b[k] = a[j];
                    j += 1;
                } else {
                    b[k] = a[i];
                    i += 1;
                }
                k += 1;
            }
            b[k..k + (mid - i)].copy_from_slice(&a[i..mid]);
            k += mid - i;
            b[k..k + (end - j)].copy_from_slice(&a[j..end]);
            start = end;
        }
        std::mem::swap(&mut a, &mut b);
        width *= 2;
    }
    Ok(a)
}

/// Sorts `inputs` (equal dims) along `axis`; `compare(args)` runs the comparator closure on 2N
/// scalar tensors interleaved `(lhs0, rhs0, lhs1, rhs1, …)` and returns whether lhs goes first.
pub(crate) fn sort(
    comparator: FuncId,
    axis: usize,
    inputs: &[Tensor],
    mut compare: impl FnMut(FuncId, Vec<Tensor>) -> Result<bool>,
) -> Result<Vec<Tensor>> {
    let first = inputs.first().ok_or_else(|| Error::invalid("Sort", "at least one operand is required"))?;
    let dims = first.shape.udims();
    if axis >= dims.len() {
        return Err(Error::invalid("Sort", format!("axis {axis} out of range for operand 0 {}", first.shape)));
    }
    for (k, t) in inputs.iter().enumerate() {
        if t.shape.dims != first.shape.dims {
            return Err(Error::invalid(
                "Sort",
                format!("operand {k} {} has other dims than operand 0 {}", t.shape, first.shape),
            ));
        }
        if t.shape.dtype.is_packed() {
            return Err(Error::not_implemented("Sort", format!("operand {k}: packed dtype {}", t.shape.dtype)));
        }
    }
    let len = dims[axis];
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let sizes: Vec<usize> = inputs.iter().map(|t| t.shape.dtype.size()).collect();
    let mut outs: Vec<Vec<u8>> = inputs.iter().map(|t| t.bytes().to_vec()).collect();
    for o in 0..outer {
        for i in 0..inner {
            let index = |j: usize| (o * len + j) * inner + i;
            // The scalars of this lane, made once and shared by every comparator call.
            let scalars: Vec<Vec<Tensor>> = (0..len)
                .map(|j| {
                    inputs
                        .iter()
                        .zip(&sizes)
                        .map(|(t, &sz)| {
                            let e = index(j) * sz;
                            Tensor {
                                shape: Shape::scalar(t.shape.dtype),
                                data: Arc::new(AlignedBytes::from_bytes(&t.bytes()[e..e + sz])),
                            }
                        })
                        .collect()
                })
                .collect();
            let perm = merge_sort(len, |a, b| {
                let args = scalars[a].iter().zip(&scalars[b]).flat_map(|(l, r)| [l.clone(), r.clone()]).collect();
                compare(comparator, args)
            })?;
            for (j, &p) in perm.iter().enumerate() {
                for ((out, t), &sz) in outs.iter_mut().zip(inputs).zip(&sizes) {
                    let (dst, src) = (index(j) * sz, index(p) * sz);
                    out[dst..dst + sz].copy_from_slice(&t.bytes()[src..src + sz]);
                }
            }
        }
    }
    Ok(inputs
        .iter()
        .zip(outs)
        .map(|(t, bytes)| Tensor { shape: t.shape.clone(), data: Arc::new(AlignedBytes::from_bytes(&bytes)) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sort_is_stable_and_total() {
        // Keys with ties: stable order keeps equal keys in input order.
        let keys = [3, 1, 2, 1, 3, 0, 2];
        let perm = merge_sort(keys.len(), |a, b| Ok(keys[a] < keys[b])).unwrap();
        assert_eq!(perm, vec![5, 1, 3, 2, 6, 0, 4]);
        assert_eq!(merge_sort(0, |_, _| Ok(false)).unwrap(), Vec::<usize>::new());
        assert_eq!(merge_sort(1, |_, _| Ok(false)).unwrap(), vec![0]);
        // An inconsistent comparator (always true) must not panic.
        assert_eq!(merge_sort(5, |_, _| Ok(true)).unwrap().len(), 5);
        // Errors propagate.
        assert!(merge_sort(3, |_, _| Err(Error::invalid("x", "boom"))).is_err());
    }
}
