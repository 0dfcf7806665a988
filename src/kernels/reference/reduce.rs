//! Reference kernels of the reductions (§4.6: Reduce*, ArgMinMax) and the cumulative ops (§10).
//! Half types accumulate in f32 and round once per output; ints wrap; Max/Min propagate NaN.

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::op::{ArithReduce, Op, ReduceKind};
use crate::ir::shape::Shape;
use crate::kernels::reference::common::{
    Arith, IntElem, NumElem, Ordered, check_arity, make_tensor, strided_offsets, strides, with_int, with_numeric,
    with_real,
};
use crate::kernels::tensor::Tensor;

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    check_arity(&name, inputs, 1, out_shapes, 1)?;
    let (x, out) = (&inputs[0], &out_shapes[0]);
    let r = match op {
        Op::Reduce { kind, axes } => reduce(&name, *kind, axes, x, out)?,
        Op::ArgMinMax { axis, is_min, .. } => arg_min_max(&name, *axis, *is_min, x, out)?,
        Op::Cumulative { kind, axis, exclusive, reverse } => {
            cumulative(&name, *kind, *axis, *exclusive, *reverse, x, out)?
        }
        _ => return Err(Error::invalid(name, "not a reduction")),
    };
    Ok(vec![r])
}

fn unsupported(name: &str, dt: DType) -> Error {
    Error::invalid(name, format!("operand dtype {dt} is not supported"))
}

/// For every input element (row-major), the index of the output element it reduces into.
fn reduce_targets(name: &str, dims: &[usize], axes: &[usize], out: &Shape) -> Result<Vec<usize>> {
    let mut seen = vec![false; dims.len()];
    for &a in axes {
        if a >= dims.len() || seen[a] {
            return Err(Error::invalid(
                name,
                format!("axes {axes:?} out of range or repeated for rank {}", dims.len()),
            ));
        }
        seen[a] = true;
    }
    let kept: Vec<usize> = (0..dims.len()).filter(|a| !seen[*a]).map(|a| dims[a]).collect();
    if kept != out.udims() {
        return Err(Error::invalid(name, format!("output dims {:?} differ from the kept dims {kept:?}", out.dims)));
    }
    let kst = strides(&kept);
    let mut st = vec![0usize; dims.len()];
    let mut k = 0;
    for a in 0..dims.len() {
        if !seen[a] {
            st[a] = kst[k];
            k += 1;
        }
    }
    Ok(strided_offsets(dims, &st))
}

fn fold<T: Element, A: Copy, U: Element>(
    x: &[T],
    targets: &[usize],
    out: &Shape,
    init: A,
    f: impl Fn(A, T) -> A,
    fin: impl Fn(A) -> U,
) -> Result<Tensor> {
    let mut acc = vec![init; out.num_elements()];
    for (&v, &o) in x.iter().zip(targets) {
        acc[o] = f(acc[o], v);
    }
    make_tensor(out, &acc.into_iter().map(fin).collect::<Vec<U>>())
}

fn reduce(name: &str, kind: ReduceKind, axes: &[usize], x: &Tensor, out: &Shape) -> Result<Tensor> {
    let dt = x.shape.dtype;
    let tg = reduce_targets(name, &x.shape.udims(), axes, out)?;
    match kind {
        ReduceKind::Sum | ReduceKind::Product => with_numeric!(dt, T => {
            let (init, f): (<T as NumElem>::Acc, fn(_, _) -> _) = if kind == ReduceKind::Sum {
                (Arith::zero(), Arith::add)
            } else {
                (Arith::one(), Arith::mul)
            };
            fold(x.typed::<T>(), &tg, out, init, |a, v: T| f(a, v.to_acc()), T::from_acc)
        }, _ => Err(unsupported(name, dt))),
        ReduceKind::Max | ReduceKind::Min => with_real!(dt, T => {
            let (init, f): (<T as NumElem>::Acc, fn(_, _) -> _) = if kind == ReduceKind::Max {
                (Arith::lowest(), Arith::max)
            } else {
                (Arith::highest(), Arith::min)
            };
            fold(x.typed::<T>(), &tg, out, init, |a, v: T| f(a, v.to_acc()), T::from_acc)
        }, _ => Err(unsupported(name, dt))),
        ReduceKind::BitwiseAnd | ReduceKind::BitwiseOr | ReduceKind::BitwiseXor => with_int!(dt, T => {
            let (init, f): (T, fn(T, T) -> T) = match kind {
                ReduceKind::BitwiseAnd => (IntElem::not(<T as Arith>::zero()), IntElem::and),
                ReduceKind::BitwiseOr => (<T as Arith>::zero(), IntElem::or),
                _ => (<T as Arith>::zero(), IntElem::xor),
            };
            fold(x.typed::<T>(), &tg, out, init, f, |a| a)
        }, _ => Err(unsupported(name, dt))),
        ReduceKind::LogicalAnd | ReduceKind::LogicalOr | ReduceKind::LogicalXor => {
            if dt != DType::Bool {
                return Err(unsupported(name, dt));
            }
            let (init, f): (bool, fn(bool, bool) -> bool) = match kind {
                ReduceKind::LogicalAnd => (true, |a, b| a && b),
                ReduceKind::LogicalOr => (false, |a, b| a || b),
                _ => (false, |a, b| a != b),
            };
            fold(x.typed::<bool>(), &tg, out, init, f, |a| a)
        }
    }
}

/// `(outer, n, inner)` sizes around `axis`.
fn lanes(name: &str, dims: &[usize], axis: usize) -> Result<(usize, usize, usize)> {
    if axis >= dims.len() {
        return Err(Error::invalid(name, format!("axis {axis} out of range for rank {}", dims.len())));
    }
    Ok((dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product()))
}

fn arg_min_max(name: &str, axis: usize, is_min: bool, x: &Tensor, out: &Shape) -> Result<Tensor> {
    let dims = x.shape.udims();
    let (outer, n, inner) = lanes(name, &dims, axis)?;
    if n == 0 {
        return Err(Error::invalid(name, format!("reduced axis {axis} of {} is empty", x.shape)));
    }
    if out.num_elements() != outer * inner {
        return Err(Error::invalid(name, format!("output shape {out} does not match operand {}", x.shape)));
    }
    let dt = x.shape.dtype;
    let idx: Vec<i128> = with_real!(dt, T => {
        let v = x.typed::<T>();
        let mut res = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| v[(o * n + k) * inner + i];
                let mut best = 0usize;
                for k in 1..n {
                    let (b, c) = (at(best), at(k));
                    if Ordered::is_nan_val(b) {
                        break; // the first NaN wins
                    }
                    let better = Ordered::is_nan_val(c) || if is_min { Ordered::lt(c, b) } else { Ordered::lt(b, c) };
                    if better {
                        best = k;
                    }
                }
                res.push(best as i128);
            }
        }
        res
    }, _ => return Err(unsupported(name, dt)));
    with_int!(out.dtype, U => {
        let r: Vec<U> = idx.iter().map(|&i| U::from_i128_wrap(i)).collect();
        make_tensor(out, &r)
    }, _ => Err(Error::invalid(name, format!("output dtype {} is not an integer dtype", out.dtype))))
}

fn cumulative(
    name: &str,
    kind: ArithReduce,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    x: &Tensor,
    out: &Shape,
) -> Result<Tensor> {
    let dims = x.shape.udims();
    let (outer, n, inner) = lanes(name, &dims, axis)?;
    if out.udims() != dims || out.dtype != x.shape.dtype {
        return Err(Error::invalid(name, format!("output shape {out} differs from operand {}", x.shape)));
    }
    let dt = x.shape.dtype;
    if dt.is_complex() && matches!(kind, ArithReduce::Max | ArithReduce::Min) {
        return Err(unsupported(name, dt));
    }
    with_numeric!(dt, T => cum_lanes::<T>(x.typed::<T>(), out, (outer, n, inner), exclusive, reverse, kind),
        _ => Err(unsupported(name, dt)))
}

fn cum_lanes<T: NumElem>(
    v: &[T],
    out: &Shape,
    (outer, n, inner): (usize, usize, usize),
    exclusive: bool,
    reverse: bool,
    kind: ArithReduce,
) -> Result<Tensor> {
    type Step<A> = fn(A, A) -> A;
    let (init, f): (T::Acc, Step<T::Acc>) = match kind {
        ArithReduce::Sum => (Arith::zero(), Arith::add),
        ArithReduce::Product => (Arith::one(), Arith::mul),
        ArithReduce::Max => (Arith::lowest(), Arith::max),
        ArithReduce::Min => (Arith::highest(), Arith::min),
    };
    let mut r = vec![T::default(); v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = init;
            for step in 0..n {
                let k = if reverse { n - 1 - step } else { step };
                let p = (o * n + k) * inner + i;
                if exclusive {
                    r[p] = T::from_acc(acc);
                    acc = f(acc, v[p].to_acc());
                } else {
                    acc = f(acc, v[p].to_acc());
                    r[p] = T::from_acc(acc);
                }
            }
        }
    }
    make_tensor(out, &r)
}

#[cfg(test)]
mod tests {
    use half::bf16;
    use num_complex::Complex64;

    use super::*;

    fn t<T: Element>(dims: &[i64], v: &[T]) -> Tensor {
        Tensor::from_vec(Shape::new(T::DTYPE, dims), v).unwrap()
    }
    fn red<U: Element>(kind: ReduceKind, axes: &[usize], x: &Tensor, out: &[i64]) -> Vec<U> {
        let op = Op::Reduce { kind, axes: axes.to_vec() };
        eval(&op, std::slice::from_ref(x), &[Shape::new(U::DTYPE, out)]).unwrap()[0].typed::<U>().to_vec()
    }
    fn arg(x: &Tensor, axis: usize, is_min: bool, out: &[i64]) -> Vec<i32> {
        let op = Op::ArgMinMax { axis, out_dtype: DType::Int32, is_min };
        eval(&op, std::slice::from_ref(x), &[Shape::new(DType::Int32, out)]).unwrap()[0].typed::<i32>().to_vec()
    }
    fn cum<T: Element>(kind: ArithReduce, axis: usize, exclusive: bool, reverse: bool, x: &Tensor) -> Vec<T> {
        let op = Op::Cumulative { kind, axis, exclusive, reverse };
        eval(&op, std::slice::from_ref(x), std::slice::from_ref(&x.shape)).unwrap()[0].typed::<T>().to_vec()
    }

    #[test]
    fn sums_over_axes() {
        let x = t(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(red::<f32>(ReduceKind::Sum, &[1], &x, &[2]), vec![6.0, 15.0]);
        assert_eq!(red::<f32>(ReduceKind::Sum, &[0], &x, &[3]), vec![5.0, 7.0, 9.0]);
        assert_eq!(red::<f32>(ReduceKind::Product, &[0, 1], &x, &[]), vec![720.0]);
        assert_eq!(red::<f32>(ReduceKind::Max, &[1], &x, &[2]), vec![3.0, 6.0]);
        assert_eq!(red::<f32>(ReduceKind::Min, &[0], &x, &[3]), vec![1.0, 2.0, 3.0]);
        // U32 iota [2,2,2,2,2] summed over axes (1,3): element [a,c,e] = Σ_{b,d} (16a+8b+4c+2d+e).
        let v: Vec<u32> = (0..32).collect();
        let x = t(&[2, 2, 2, 2, 2], &v);
        let r = red::<u32>(ReduceKind::Sum, &[1, 3], &x, &[2, 2, 2]);
        let expect: Vec<u32> =
            (0..8u32).map(|i| 4 * (16 * (i >> 2) + 4 * ((i >> 1) & 1) + (i & 1)) + 8 * 2 + 2 * 2).collect();
        assert_eq!(r, expect);
        // F64 [−1e8,−1e6,−1e16] max → −1e6; ints wrap.
        assert_eq!(red::<f64>(ReduceKind::Max, &[0], &t(&[3], &[-1e8f64, -1e6, -1e16]), &[]), vec![-1e6]);
        assert_eq!(red::<i8>(ReduceKind::Sum, &[0], &t(&[2], &[100i8, 100]), &[]), vec![-56]);
        let c = t(&[2], &[Complex64::new(1.0, 1.0), Complex64::new(1.0, -1.0)]);
        assert_eq!(red::<Complex64>(ReduceKind::Product, &[0], &c, &[]), vec![Complex64::new(2.0, 0.0)]);
    }

    #[test]
    fn empty_reductions_give_identities() {
        let x = t::<f32>(&[0, 3], &[]);
        assert_eq!(red::<f32>(ReduceKind::Sum, &[0], &x, &[3]), vec![0.0; 3]);
        assert_eq!(red::<f32>(ReduceKind::Product, &[0], &x, &[3]), vec![1.0; 3]);
        assert_eq!(red::<f32>(ReduceKind::Max, &[0], &x, &[3]), vec![f32::NEG_INFINITY; 3]);
        assert_eq!(red::<f32>(ReduceKind::Min, &[0], &x, &[3]), vec![f32::INFINITY; 3]);
        let i = t::<i32>(&[0], &[]);
        assert_eq!(red::<i32>(ReduceKind::Max, &[0], &i, &[]), vec![i32::MIN]);
        assert_eq!(red::<i32>(ReduceKind::Min, &[0], &i, &[]), vec![i32::MAX]);
        let u = t::<u8>(&[0], &[]);
        assert_eq!(red::<u8>(ReduceKind::Max, &[0], &u, &[]), vec![0]);
        assert_eq!(red::<u8>(ReduceKind::Min, &[0], &u, &[]), vec![255]);
        assert_eq!(red::<u8>(ReduceKind::BitwiseAnd, &[0], &u, &[]), vec![255]);
        assert_eq!(red::<u8>(ReduceKind::BitwiseOr, &[0], &u, &[]), vec![0]);
        assert_eq!(red::<u8>(ReduceKind::BitwiseXor, &[0], &u, &[]), vec![0]);
        let b = t::<bool>(&[0], &[]);
        assert_eq!(red::<bool>(ReduceKind::LogicalAnd, &[0], &b, &[]), vec![true]);
        assert_eq!(red::<bool>(ReduceKind::LogicalOr, &[0], &b, &[]), vec![false]);
        assert_eq!(red::<bool>(ReduceKind::LogicalXor, &[0], &b, &[]), vec![false]);
    }

    #[test]
    fn nan_bitwise_logical_half() {
        let r = red::<f32>(ReduceKind::Max, &[0], &t(&[3], &[1.0f32, f32::NAN, 3.0]), &[]);
        assert!(r[0].is_nan());
        assert_eq!(red::<bool>(ReduceKind::LogicalXor, &[0], &t(&[3], &[true, true, true]), &[]), vec![true]);
        assert_eq!(red::<bool>(ReduceKind::LogicalAnd, &[0], &t(&[2], &[true, false]), &[]), vec![false]);
        assert_eq!(red::<bool>(ReduceKind::LogicalOr, &[0], &t(&[2], &[true, false]), &[]), vec![true]);
        assert_eq!(red::<i32>(ReduceKind::BitwiseAnd, &[0], &t(&[3], &[7i32, 3, 2]), &[]), vec![2]);
        assert_eq!(red::<u8>(ReduceKind::BitwiseOr, &[0, 1], &t(&[3, 1], &[3u8, 12, 17]), &[]), vec![31]);
        // BF16 [256,1,1,1,1] with f32 accumulation: 260 (exact in bf16).
        let h: Vec<bf16> = [256.0f32, 1.0, 1.0, 1.0, 1.0].iter().map(|&v| bf16::from_f32(v)).collect();
        assert_eq!(red::<bf16>(ReduceKind::Sum, &[0], &t(&[5], &h), &[])[0].to_f32(), 260.0);
        let h: Vec<bf16> = [-17.0f32, 3.0, 5.0].iter().map(|&v| bf16::from_f32(v)).collect();
        assert_eq!(red::<bf16>(ReduceKind::Min, &[0], &t(&[3], &h), &[])[0].to_f32(), -17.0);
        let bad = Op::Reduce { kind: ReduceKind::Max, axes: vec![0] };
        let c = t(&[1], &[Complex64::new(1.0, 0.0)]);
        assert!(eval(&bad, &[c], &[Shape::scalar(DType::Complex128)]).is_err());
        let bad = Op::Reduce { kind: ReduceKind::Sum, axes: vec![2] };
        assert!(eval(&bad, &[t(&[1], &[1i32])], &[Shape::scalar(DType::Int32)]).is_err());
    }

    #[test]
    fn argminmax() {
        let x = t(&[5], &[1.0f32, f32::NAN, 3.0, f32::NAN, 3.0]);
        assert_eq!(arg(&x, 0, false, &[]), vec![1]);
        assert_eq!(arg(&x, 0, true, &[]), vec![1]);
        assert_eq!(arg(&t(&[3], &[3.0f64, 1.0, 3.0]), 0, false, &[]), vec![0]);
        assert_eq!(arg(&t(&[3], &[5i32, 7, 7]), 0, false, &[]), vec![1]);
        assert_eq!(arg(&t(&[2], &[-0.0f32, 0.0]), 0, false, &[]), vec![0]);
        assert_eq!(arg(&t(&[5], &[3.0f32, 1.0, 4.0, 1.0, 5.0]), 0, true, &[]), vec![1]);
        let m = t(&[3, 3], &[1i32, 2, 3, 9, 5, 6, 7, 8, 4]);
        assert_eq!(arg(&m, 1, false, &[3]), vec![2, 0, 1]);
        assert_eq!(arg(&m, 0, true, &[3]), vec![0, 0, 0]);
        let op = Op::ArgMinMax { axis: 0, out_dtype: DType::Int32, is_min: true };
        assert!(eval(&op, &[t::<f32>(&[0], &[])], &[Shape::scalar(DType::Int32)]).is_err());
    }

    #[test]
    fn cumulative_ops() {
        let x = t(&[4], &[1i32, 2, 3, 4]);
        assert_eq!(cum::<i32>(ArithReduce::Sum, 0, false, false, &x), vec![1, 3, 6, 10]);
        assert_eq!(cum::<i32>(ArithReduce::Sum, 0, false, true, &x), vec![10, 9, 7, 4]);
        assert_eq!(cum::<i32>(ArithReduce::Sum, 0, true, false, &x), vec![0, 1, 3, 6]);
        assert_eq!(cum::<i32>(ArithReduce::Product, 0, true, true, &x), vec![24, 12, 4, 1]);
        let m = cum::<f32>(ArithReduce::Max, 0, false, false, &t(&[5], &[3.0f32, 1.0, f32::NAN, 4.0, 2.0]));
        assert_eq!(&m[..2], &[3.0, 3.0]);
        assert!(m[2..].iter().all(|v| v.is_nan()));
        let m = cum::<f32>(ArithReduce::Min, 0, true, false, &t(&[2], &[3.0f32, 1.0]));
        assert_eq!(m, vec![f32::INFINITY, 3.0]);
        assert_eq!(cum::<i8>(ArithReduce::Sum, 0, false, false, &t(&[2], &[100i8, 100])), vec![100, -56]);
        let x = t(&[2, 2], &[1.0f64, 2.0, 3.0, 4.0]);
        assert_eq!(cum::<f64>(ArithReduce::Sum, 1, false, false, &x), vec![1.0, 3.0, 3.0, 7.0]);
        assert_eq!(cum::<f64>(ArithReduce::Sum, 0, false, false, &x), vec![1.0, 2.0, 4.0, 6.0]);
        // BF16 [256,1,1,1,1]: f32 partial sums 256…260 each rounded once to bf16 (ulp 2 there,
        // ties to even): 257 → 256, 259 → 260.
        let h: Vec<bf16> = [256.0f32, 1.0, 1.0, 1.0, 1.0].iter().map(|&v| bf16::from_f32(v)).collect();
        let c = cum::<bf16>(ArithReduce::Sum, 0, false, false, &t(&[5], &h));
        assert_eq!(c.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), vec![256.0, 256.0, 258.0, 260.0, 260.0]);
        let op = Op::Cumulative { kind: ArithReduce::Sum, axis: 0, exclusive: false, reverse: false };
        let b = t(&[1], &[true]);
        assert!(eval(&op, std::slice::from_ref(&b), std::slice::from_ref(&b.shape)).is_err());
    }
}
