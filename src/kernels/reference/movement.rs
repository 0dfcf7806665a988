//! Reference kernels for data movement (§4.5): Reshape, DynamicReshape, Transpose, BroadcastInDim, Concatenate,
//! Slice, DynamicSlice, DynamicUpdateSlice, Pad, Reverse, Iota, DynamicShape and DynamicDimensionSize.
//!
//! They move raw element bytes by element size, so every non-packed dtype (Bool and complex included) works
//! without generics. Packed sub-byte dtypes are accepted only by the reshapes (identical bytes).

#[path = "mv_util.rs"]
pub(super) mod util;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{Op, PadAxis};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

use util::{arg, elem_size, expect_dims, for_each_index, from_i64_fn, from_i64_vec, out_shape, scalar_index, strides};

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    let name = name.as_str();
    let out = out_shape(name, out_shapes, 0)?;
    let t = match op {
        Op::Reshape { .. } | Op::DynamicReshape { .. } => reshape(name, arg(name, inputs, 0)?, out)?,
        Op::Transpose { perm } => transpose(name, arg(name, inputs, 0)?, perm, out)?,
        Op::BroadcastInDim { axes, .. } => broadcast_in_dim(name, arg(name, inputs, 0)?, axes, out)?,
        Op::Concatenate { axis } => concatenate(name, inputs, *axis, out)?,
        Op::Slice { starts, limits, strides } => slice(name, arg(name, inputs, 0)?, starts, limits, strides, out)?,
        Op::DynamicSlice { sizes } => dynamic_slice(name, inputs, sizes, out)?,
        Op::DynamicUpdateSlice => dynamic_update_slice(name, inputs, out)?,
        Op::Pad { axes } => pad(name, arg(name, inputs, 0)?, arg(name, inputs, 1)?, axes, out)?,
        Op::Reverse { axes } => reverse(name, arg(name, inputs, 0)?, axes, out)?,
        Op::Iota { axis, .. } => iota(name, *axis, out)?,
        Op::DynamicShape => {
            let x = arg(name, inputs, 0)?;
            let dims: Vec<i64> = x.shape.dims.clone();
            expect_dims(name, "output", out, &[dims.len()])?;
            from_i64_vec(name, &out.with_dtype(DType::Int32), &dims, false)?
        }
        Op::DynamicDimensionSize { axis } => {
            let x = arg(name, inputs, 0)?;
            let d = *x.shape.dims.get(*axis).ok_or_else(|| {
                Error::invalid(name, format!("axis {axis} out of range for operand shape {}", x.shape))
            })?;
            expect_dims(name, "output", out, &[])?;
            from_i64_vec(name, &out.with_dtype(DType::Int32), &[d], false)?
        }
        _ => return Err(Error::invalid(name, "not a data-movement op")),
    };
    Ok(vec![t])
}

/// Checks that `x` and the output share a dtype and returns the element size.
fn same_dtype_size(name: &str, x: &Tensor, out: &Shape) -> Result<usize> {
    if x.shape.dtype != out.dtype {
        return Err(Error::invalid(
            name,
            format!("operand dtype {} differs from output dtype {}", x.shape.dtype, out.dtype),
        ));
    }
    elem_size(name, x.shape.dtype)
}

/// A tensor of `shape` whose element at each output index is source element `f(idx)` of `src`, or `fill`
/// where `f` returns `None`. Callers guarantee that `f` returns in-range indices.
fn map_elements(
    shape: &Shape,
    esize: usize,
    src: &[u8],
    fill: &[u8],
    mut f: impl FnMut(&[usize]) -> Option<usize>,
) -> Result<Tensor> {
    let mut out = Tensor::try_zeros(shape.clone())?;
    let dims = shape.udims();
    let bytes = out.bytes_mut();
    let mut o = 0;
    let mut bad = None;
    for_each_index(&dims, |idx| {
        let Some(dst) = bytes.get_mut(o * esize..(o + 1) * esize) else {
            bad = bad.or(Some(o));
            return;
        };
        let from = match f(idx) {
            Some(i) => i.checked_mul(esize).and_then(|a| src.get(a..a.checked_add(esize)?)),
            None => Some(fill),
        };
        match from {
            Some(b) if b.len() == esize => dst.copy_from_slice(b),
            _ => bad = bad.or(Some(o)),
        }
        o += 1;
    });
    match bad {
        // Operand data shorter than its shape (an unverified module's constant): an error.
        Some(o) => Err(Error::invalid(
            "movement",
            format!("output element {o} of {shape} reads outside its operand ({} bytes)", src.len()),
        )),
        None => Ok(out),
    }
}

fn reshape(name: &str, x: &Tensor, out: &Shape) -> Result<Tensor> {
    if x.shape.dtype != out.dtype || out.byte_size() != Some(x.bytes().len()) {
        return Err(Error::invalid(name, format!("cannot reshape operand {} to {out}", x.shape)));
    }
    Ok(Tensor { shape: out.clone(), data: x.data.clone() })
}

fn transpose(name: &str, x: &Tensor, perm: &[usize], out: &Shape) -> Result<Tensor> {
    let esize = same_dtype_size(name, x, out)?;
    let dims = x.shape.udims();
    let mut seen = vec![false; dims.len()];
    if perm.len() != dims.len() || perm.iter().any(|&p| p >= dims.len() || std::mem::replace(&mut seen[p], true)) {
        return Err(Error::invalid(name, format!("perm {perm:?} is not a permutation of the axes of {}", x.shape)));
    }
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    expect_dims(name, "output", out, &out_dims)?;
    let st = strides(&dims);
    let pst: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    map_elements(out, esize, x.bytes(), &[], |idx| Some(idx.iter().zip(&pst).map(|(i, s)| i * s).sum()))
}

fn broadcast_in_dim(name: &str, x: &Tensor, axes: &[usize], out: &Shape) -> Result<Tensor> {
    let esize = same_dtype_size(name, x, out)?;
    let dims = x.shape.udims();
    let odims = out.udims();
    if axes.len() != dims.len() {
        return Err(Error::invalid(name, format!("{} axes {axes:?} for operand of rank {}", axes.len(), dims.len())));
    }
    let mut seen = vec![false; odims.len()];
    for (i, &a) in axes.iter().enumerate() {
        if a >= odims.len() || std::mem::replace(&mut seen[a], true) {
            return Err(Error::invalid(name, format!("axes {axes:?}: entry {a} out of range or repeated for {out}")));
        }
        if dims[i] != 1 && dims[i] != odims[a] {
            return Err(Error::invalid(
                name,
                format!("operand axis {i} of size {} cannot broadcast to {out}", dims[i]),
            ));
        }
    }
    let st = strides(&dims);
    map_elements(out, esize, x.bytes(), &[], |idx| {
        Some((0..dims.len()).map(|i| if dims[i] == 1 { 0 } else { idx[axes[i]] * st[i] }).sum())
    })
}

fn concatenate(name: &str, inputs: &[Tensor], axis: usize, out: &Shape) -> Result<Tensor> {
    let first = arg(name, inputs, 0)?;
    let esize = same_dtype_size(name, first, out)?;
    let rank = first.shape.rank();
    if axis >= rank {
        return Err(Error::invalid(name, format!("axis {axis} out of range for rank {rank}")));
    }
    let mut out_dims = first.shape.udims();
    out_dims[axis] = 0;
    for (i, x) in inputs.iter().enumerate() {
        let d = x.shape.udims();
        let compatible = x.shape.dtype == first.shape.dtype
            && d.len() == rank
            && (0..rank).all(|a| a == axis || d[a] == out_dims[a]);
        if !compatible {
            return Err(Error::invalid(
                name,
                format!("operand #{i} {} does not match operand #0 {}", x.shape, first.shape),
            ));
        }
        out_dims[axis] += d[axis];
    }
    expect_dims(name, "output", out, &out_dims)?;
    let outer: usize = out_dims[..axis].iter().product();
    let inner: usize = out_dims[axis + 1..].iter().product::<usize>() * esize;
    let mut bytes = Vec::with_capacity(out_dims.iter().product::<usize>() * esize);
    for o in 0..outer {
        for x in inputs {
            let block = x.shape.udims()[axis] * inner;
            bytes.extend_from_slice(&x.bytes()[o * block..(o + 1) * block]);
        }
    }
    let mut t = Tensor::try_zeros(out.clone())?;
    t.bytes_mut().copy_from_slice(&bytes);
    Ok(t)
}

fn slice(name: &str, x: &Tensor, starts: &[i64], limits: &[i64], steps: &[i64], out: &Shape) -> Result<Tensor> {
    let esize = same_dtype_size(name, x, out)?;
    let dims = x.shape.udims();
    let rank = dims.len();
    if starts.len() != rank || limits.len() != rank || (steps.len() != rank && !steps.is_empty()) {
        return Err(Error::invalid(name, format!("starts/limits/strides lengths differ from rank {rank}")));
    }
    let mut out_dims = Vec::with_capacity(rank);
    let mut step = Vec::with_capacity(rank);
    for a in 0..rank {
        let d = dims[a] as i64;
        let s = steps.get(a).copied().unwrap_or(1);
        // A limit of −1 on a full-range slice means "the whole (dynamic) axis".
        let limit = if limits[a] == -1 && starts[a] == 0 && s == 1 { d } else { limits[a] };
        if starts[a] < 0 || starts[a] > limit || limit > d || s < 1 {
            return Err(Error::invalid(
                name,
                format!("axis {a}: start {} limit {} stride {s} invalid for dim {d}", starts[a], limits[a]),
            ));
        }
        out_dims.push(((limit - starts[a]) as usize).div_ceil(s as usize));
        step.push(s as usize);
    }
    expect_dims(name, "output", out, &out_dims)?;
    let st = strides(&dims);
    map_elements(out, esize, x.bytes(), &[], |idx| {
        Some((0..rank).map(|a| (starts[a] as usize + idx[a] * step[a]) * st[a]).sum())
    })
}

/// Adjusted dynamic start (§9): negative → +dim, then clamped to `[0, dim − size]`.
fn adjust_start(start: i64, dim: usize, size: usize) -> usize {
    let s = if start < 0 { start.saturating_add(dim as i64) } else { start };
    s.clamp(0, (dim - size) as i64) as usize
}

/// Reads the scalar start operands `inputs[first..first + rank]` and adjusts them for windows of `sizes`.
fn dynamic_starts(name: &str, inputs: &[Tensor], first: usize, dims: &[usize], sizes: &[usize]) -> Result<Vec<usize>> {
    if inputs.len() != first + dims.len() {
        return Err(Error::invalid(name, format!("{} start operands for rank {}", inputs.len() - first, dims.len())));
    }
    (0..dims.len())
        .map(|a| {
            if sizes[a] > dims[a] {
                return Err(Error::invalid(name, format!("axis {a}: size {} exceeds dim {}", sizes[a], dims[a])));
            }
            let s = scalar_index(name, &format!("start index of axis {a}"), &inputs[first + a])?;
            Ok(adjust_start(s, dims[a], sizes[a]))
        })
        .collect()
}

fn dynamic_slice(name: &str, inputs: &[Tensor], sizes: &[i64], out: &Shape) -> Result<Tensor> {
    let x = arg(name, inputs, 0)?;
    let esize = same_dtype_size(name, x, out)?;
    let dims = x.shape.udims();
    if sizes.len() != dims.len() || sizes.iter().any(|&s| s < 0) {
        return Err(Error::invalid(name, format!("sizes {sizes:?} invalid for operand {}", x.shape)));
    }
    let sizes: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
    expect_dims(name, "output", out, &sizes)?;
    let starts = dynamic_starts(name, inputs, 1, &dims, &sizes)?;
    let st = strides(&dims);
    map_elements(out, esize, x.bytes(), &[], |idx| {
        Some(idx.iter().enumerate().map(|(a, &i)| (starts[a] + i) * st[a]).sum())
    })
}

fn dynamic_update_slice(name: &str, inputs: &[Tensor], out: &Shape) -> Result<Tensor> {
    let x = arg(name, inputs, 0)?;
    let update = arg(name, inputs, 1)?;
    let esize = same_dtype_size(name, x, out)?;
    let dims = x.shape.udims();
    let udims = update.shape.udims();
    if update.shape.dtype != x.shape.dtype || udims.len() != dims.len() {
        return Err(Error::invalid(name, format!("update {} does not match operand {}", update.shape, x.shape)));
    }
    expect_dims(name, "output", out, &dims)?;
    let starts = dynamic_starts(name, inputs, 2, &dims, &udims)?;
    let st = strides(&dims);
    let mut t = x.clone();
    let bytes = t.bytes_mut();
    let src = update.bytes();
    let mut u = 0;
    for_each_index(&udims, |idx| {
        let o: usize = idx.iter().enumerate().map(|(a, &i)| (starts[a] + i) * st[a]).sum();
        bytes[o * esize..(o + 1) * esize].copy_from_slice(&src[u * esize..(u + 1) * esize]);
        u += 1;
    });
    Ok(t)
}

fn pad(name: &str, x: &Tensor, fill: &Tensor, axes: &[PadAxis], out: &Shape) -> Result<Tensor> {
    let esize = same_dtype_size(name, x, out)?;
    if fill.shape.dtype != x.shape.dtype || fill.len() != 1 {
        return Err(Error::invalid(name, format!("fill value {} must be a scalar of the operand dtype", fill.shape)));
    }
    let dims = x.shape.udims();
    if axes.len() > dims.len() {
        return Err(Error::invalid(name, format!("{} pad configs for rank {}", axes.len(), dims.len())));
    }
    let cfg: Vec<PadAxis> = (0..dims.len()).map(|a| axes.get(a).copied().unwrap_or_default()).collect();
    let mut out_dims = Vec::with_capacity(dims.len());
    for (a, (p, &d)) in cfg.iter().zip(&dims).enumerate() {
        // i128: the attributes may be near ±i64::MAX even when the resulting size is small.
        let d = d as i128;
        let n = d + p.start as i128 + p.end as i128 + (d - 1).max(0) * p.interior as i128;
        if p.interior < 0 || n < 0 || n > i64::MAX as i128 {
            return Err(Error::invalid(name, format!("axis {a}: padding {p:?} of dim {d} gives size {n}")));
        }
        out_dims.push(n as usize);
    }
    expect_dims(name, "output", out, &out_dims)?;
    let st = strides(&dims);
    map_elements(out, esize, x.bytes(), fill.bytes(), |idx| {
        let mut src = 0;
        for (a, &o) in idx.iter().enumerate() {
            // i128: `o − start` and `interior + 1` may leave i64 for huge (valid) attributes.
            let p = o as i128 - cfg[a].start as i128;
            let step = cfg[a].interior as i128 + 1;
            if p < 0 || p % step != 0 || p / step >= dims[a] as i128 {
                return None;
            }
            src += (p / step) as usize * st[a];
        }
        Some(src)
    })
}

fn reverse(name: &str, x: &Tensor, axes: &[usize], out: &Shape) -> Result<Tensor> {
    let esize = same_dtype_size(name, x, out)?;
    let dims = x.shape.udims();
    expect_dims(name, "output", out, &dims)?;
    let mut rev = vec![false; dims.len()];
    for &a in axes {
        *rev.get_mut(a).ok_or_else(|| Error::invalid(name, format!("axis {a} out of range for {}", x.shape)))? = true;
    }
    let st = strides(&dims);
    map_elements(out, esize, x.bytes(), &[], |idx| {
        Some((0..dims.len()).map(|a| if rev[a] { dims[a] - 1 - idx[a] } else { idx[a] } * st[a]).sum())
    })
}

fn iota(name: &str, axis: usize, out: &Shape) -> Result<Tensor> {
    let d = out.dtype;
    if !(d.is_float() || d.is_complex() || (d.is_int() && !d.is_packed())) {
        return Err(Error::invalid(name, format!("dtype {d} not supported (ints, floats, complex)")));
    }
    let dims = out.udims();
    if axis >= dims.len() {
        return Err(Error::invalid(name, format!("axis {axis} out of range for {out}")));
    }
    // Flat index i has coordinate (i / inner) % dims[axis] on `axis`, inner = Π dims[axis+1..].
    let inner = dims[axis + 1..].iter().fold(1usize, |a, &d| a.saturating_mul(d));
    let (inner, len) = (inner.max(1), dims[axis].max(1));
    from_i64_fn(name, out, out.num_elements(), |i| ((i / inner) % len) as i64, false)
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};
    use num_complex::Complex32;

    use super::util::tensor;
    use super::*;

    fn run(op: Op, inputs: &[Tensor], out: Shape) -> Result<Tensor> {
        eval(&op, inputs, &[out]).map(|mut v| v.remove(0))
    }

    fn iota_i32(dims: &[i64]) -> Tensor {
        let n: i64 = dims.iter().product();
        tensor::<i32>(dims, &(0..n as i32).collect::<Vec<_>>())
    }

    #[test]
    fn reshape_shares_bytes_for_every_dtype() {
        let x = iota_i32(&[4]);
        let r = run(Op::Reshape { dims: vec![2, 2] }, &[x], Shape::new(DType::Int32, &[2, 2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[0, 1, 2, 3]);
        assert_eq!(r.shape.dims, vec![2, 2]);
        let packed = Tensor::zeros(Shape::new(DType::Int4, &[4]));
        let r = run(Op::Reshape { dims: vec![2, 2] }, &[packed], Shape::new(DType::Int4, &[2, 2])).unwrap();
        assert_eq!(r.bytes().len(), 2);
        let bad = run(Op::Reshape { dims: vec![3] }, &[iota_i32(&[4])], Shape::new(DType::Int32, &[3]));
        assert!(bad.is_err());
    }

    #[test]
    fn transpose_3d() {
        // x[i,j,k] = 12i + 4j + k, perm (2,0,1): out[k,i,j] = x[i,j,k].
        let x = iota_i32(&[2, 3, 4]);
        let r = run(Op::Transpose { perm: vec![2, 0, 1] }, &[x], Shape::new(DType::Int32, &[4, 2, 3])).unwrap();
        let mut expect = vec![];
        for k in 0..4 {
            for i in 0..2 {
                for j in 0..3 {
                    expect.push(12 * i + 4 * j + k);
                }
            }
        }
        assert_eq!(r.typed::<i32>(), expect.as_slice());
        let bad =
            run(Op::Transpose { perm: vec![0, 0, 1] }, &[iota_i32(&[2, 3, 4])], Shape::new(DType::Int32, &[2, 2, 3]));
        assert!(bad.is_err());
    }

    #[test]
    fn transpose_scalar_and_bool() {
        let x = tensor::<bool>(&[], &[true]);
        let r = run(Op::Transpose { perm: vec![] }, &[x], Shape::scalar(DType::Bool)).unwrap();
        assert_eq!(r.typed::<bool>(), &[true]);
        let x = tensor::<bool>(&[2, 1], &[true, false]);
        let r = run(Op::Transpose { perm: vec![1, 0] }, &[x], Shape::new(DType::Bool, &[1, 2])).unwrap();
        assert_eq!(r.typed::<bool>(), &[true, false]);
    }

    #[test]
    fn broadcast_in_dim_examples() {
        // §4.5: [[1,3]] axes [0,2] → [2,3,2], every innermost row {1,3}.
        let x = tensor::<i8>(&[1, 2], &[1, 3]);
        let op = Op::BroadcastInDim { shape: Shape::new(DType::Int8, &[2, 3, 2]), axes: vec![0, 2] };
        let r = run(op, &[x], Shape::new(DType::Int8, &[2, 3, 2])).unwrap();
        assert_eq!(r.typed::<i8>(), &[1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3]);
        // [3,5] axes [1] → [2,2,2]: x[j] at [i,j,k].
        let x = tensor::<f16>(&[2], &[f16::from_f32(3.0), f16::from_f32(5.0)]);
        let op = Op::BroadcastInDim { shape: Shape::new(DType::Float16, &[2, 2, 2]), axes: vec![1] };
        let r = run(op, &[x], Shape::new(DType::Float16, &[2, 2, 2])).unwrap();
        let v: Vec<f32> = r.typed::<f16>().iter().map(|v| v.to_f32()).collect();
        assert_eq!(v, vec![3.0, 3.0, 5.0, 5.0, 3.0, 3.0, 5.0, 5.0]);
        // Permuting axes: [2,3] with axes (1,0) → [3,2] is the transpose.
        let x = iota_i32(&[2, 3]);
        let op = Op::BroadcastInDim { shape: Shape::new(DType::Int32, &[3, 2]), axes: vec![1, 0] };
        let r = run(op, &[x], Shape::new(DType::Int32, &[3, 2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[0, 3, 1, 4, 2, 5]);
        // Scalar → [2].
        let x = tensor::<bf16>(&[], &[bf16::from_f32(7.0)]);
        let op = Op::BroadcastInDim { shape: Shape::new(DType::BFloat16, &[2]), axes: vec![] };
        let r = run(op, &[x], Shape::new(DType::BFloat16, &[2])).unwrap();
        assert_eq!(r.typed::<bf16>(), &[bf16::from_f32(7.0); 2]);
        // Size mismatch is rejected.
        let op = Op::BroadcastInDim { shape: Shape::new(DType::Int32, &[3]), axes: vec![0] };
        assert!(run(op, &[iota_i32(&[2])], Shape::new(DType::Int32, &[3])).is_err());
    }

    #[test]
    fn concatenate_axis_1_and_empty() {
        let a = tensor::<f32>(&[2, 1], &[1.0, 2.0]);
        let b = tensor::<f32>(&[2, 2], &[3.0, 4.0, 5.0, 6.0]);
        let e = tensor::<f32>(&[2, 0], &[]);
        let r = run(Op::Concatenate { axis: 1 }, &[a, e, b], Shape::new(DType::Float32, &[2, 3])).unwrap();
        assert_eq!(r.typed::<f32>(), &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
        let c = tensor::<Complex32>(&[1], &[Complex32::new(1.0, 2.0)]);
        let d = tensor::<Complex32>(&[1], &[Complex32::new(3.0, 4.0)]);
        let r = run(Op::Concatenate { axis: 0 }, &[c, d], Shape::new(DType::Complex64, &[2])).unwrap();
        assert_eq!(r.typed::<Complex32>(), &[Complex32::new(1.0, 2.0), Complex32::new(3.0, 4.0)]);
        let bad = run(
            Op::Concatenate { axis: 0 },
            &[iota_i32(&[2, 2]), iota_i32(&[2, 3])],
            Shape::new(DType::Int32, &[4, 2]),
        );
        assert!(bad.is_err());
    }

    fn slice_op(starts: &[i64], limits: &[i64], strides: &[i64]) -> Op {
        Op::Slice { starts: starts.to_vec(), limits: limits.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn slice_examples() {
        let x = iota_i32(&[5]);
        let r = run(slice_op(&[2], &[4], &[1]), std::slice::from_ref(&x), Shape::new(DType::Int32, &[2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[2, 3]);
        let r = run(slice_op(&[2], &[5], &[2]), std::slice::from_ref(&x), Shape::new(DType::Int32, &[2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[2, 4]);
        let r = run(slice_op(&[2], &[2], &[1]), std::slice::from_ref(&x), Shape::new(DType::Int32, &[0])).unwrap();
        assert!(r.is_empty());
        // 2-D with stride: rows 0..3 step 2, cols 1..3 of a 3×3 iota.
        let y = iota_i32(&[3, 3]);
        let r = run(slice_op(&[0, 1], &[3, 3], &[2, 1]), std::slice::from_ref(&y), Shape::new(DType::Int32, &[2, 2]))
            .unwrap();
        assert_eq!(r.typed::<i32>(), &[1, 2, 7, 8]);
        let r = run(slice_op(&[0, 1], &[2, 1], &[]), &[y], Shape::new(DType::Int32, &[2, 0])).unwrap();
        assert!(r.is_empty());
        // §9: strict bounds.
        for (s, l, st) in [(-1, 2, 1), (0, 6, 1), (3, 2, 1), (0, 2, 0)] {
            assert!(
                run(slice_op(&[s], &[l], &[st]), std::slice::from_ref(&x), Shape::new(DType::Int32, &[1])).is_err()
            );
        }
    }

    fn start(v: i64) -> Tensor {
        tensor::<i64>(&[], &[v])
    }

    #[test]
    fn dynamic_slice_negative_and_clamped_starts() {
        let x = iota_i32(&[5]);
        for (s, expect) in [(-1, [3, 4]), (-2, [3, 4]), (-5, [0, 1]), (-7, [0, 1]), (10, [3, 4]), (1, [1, 2])] {
            let r = run(Op::DynamicSlice { sizes: vec![2] }, &[x.clone(), start(s)], Shape::new(DType::Int32, &[2]));
            assert_eq!(r.unwrap().typed::<i32>(), &expect, "start {s}");
        }
        // Start given as uint8, 2-D.
        let y = iota_i32(&[3, 3]);
        let inputs = [y, tensor::<u8>(&[], &[1]), tensor::<i16>(&[], &[5])];
        let r = run(Op::DynamicSlice { sizes: vec![2, 2] }, &inputs, Shape::new(DType::Int32, &[2, 2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[4, 5, 7, 8]);
        let bad = run(Op::DynamicSlice { sizes: vec![6] }, &[x, start(0)], Shape::new(DType::Int32, &[6]));
        assert!(bad.is_err());
    }

    #[test]
    fn dynamic_update_slice_examples() {
        let x = iota_i32(&[5]);
        let u = tensor::<i32>(&[2], &[9, 9]);
        let r = run(Op::DynamicUpdateSlice, &[x.clone(), u.clone(), start(-1)], Shape::new(DType::Int32, &[5]));
        assert_eq!(r.unwrap().typed::<i32>(), &[0, 1, 2, 9, 9]);
        let r = run(Op::DynamicUpdateSlice, &[x.clone(), u.clone(), start(1)], Shape::new(DType::Int32, &[5]));
        assert_eq!(r.unwrap().typed::<i32>(), &[0, 9, 9, 3, 4]);
        let r = run(Op::DynamicUpdateSlice, &[x.clone(), u, start(-9)], Shape::new(DType::Int32, &[5]));
        assert_eq!(r.unwrap().typed::<i32>(), &[9, 9, 2, 3, 4]);
        // The input is not modified.
        assert_eq!(x.typed::<i32>(), &[0, 1, 2, 3, 4]);
        let e = tensor::<i32>(&[0], &[]);
        let r = run(Op::DynamicUpdateSlice, &[x, e, start(3)], Shape::new(DType::Int32, &[5]));
        assert_eq!(r.unwrap().typed::<i32>(), &[0, 1, 2, 3, 4]);
    }

    fn pad_op(cfg: &[(i64, i64, i64)]) -> Op {
        Op::Pad { axes: cfg.iter().map(|&(start, end, interior)| PadAxis { start, end, interior }).collect() }
    }

    #[test]
    fn pad_examples_from_section_11() {
        let x = tensor::<i32>(&[5], &[1, 2, 3, 4, 5]);
        let zero = tensor::<i32>(&[], &[0]);
        let r = run(pad_op(&[(-1, -1, 1)]), &[x.clone(), zero.clone()], Shape::new(DType::Int32, &[7])).unwrap();
        assert_eq!(r.typed::<i32>(), &[0, 2, 0, 3, 0, 4, 0]);
        let r = run(pad_op(&[(-2, 1, 0)]), &[x.clone(), zero.clone()], Shape::new(DType::Int32, &[4])).unwrap();
        assert_eq!(r.typed::<i32>(), &[3, 4, 5, 0]);
        // (2, −3, 2): [0,0,1,0,0,2,0,0,3,0,0,4] (the last 3 of the 15 cells cropped).
        let r = run(pad_op(&[(2, -3, 2)]), &[x.clone(), zero.clone()], Shape::new(DType::Int32, &[12])).unwrap();
        assert_eq!(r.typed::<i32>(), &[0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4]);
        let e = tensor::<i32>(&[0], &[]);
        let nine = tensor::<i32>(&[], &[9]);
        let r = run(pad_op(&[(1, 1, 3)]), &[e, nine], Shape::new(DType::Int32, &[2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[9, 9]);
        // Size < 0 and interior < 0 are errors.
        assert!(run(pad_op(&[(-4, -2, 0)]), &[x.clone(), zero.clone()], Shape::new(DType::Int32, &[0])).is_err());
        assert!(run(pad_op(&[(0, 0, -1)]), &[x, zero], Shape::new(DType::Int32, &[1])).is_err());
    }

    #[test]
    fn scalars_pass_through_pad_and_dynamic_slice() {
        let x = tensor::<u16>(&[], &[42]);
        let fill = tensor::<u16>(&[], &[0]);
        let r = run(pad_op(&[]), &[x.clone(), fill], Shape::scalar(DType::Uint16)).unwrap();
        assert_eq!(r.typed::<u16>(), &[42]);
        let r =
            run(Op::DynamicSlice { sizes: vec![] }, std::slice::from_ref(&x), Shape::scalar(DType::Uint16)).unwrap();
        assert_eq!(r.typed::<u16>(), &[42]);
        let r = run(Op::Reverse { axes: vec![] }, &[x], Shape::scalar(DType::Uint16)).unwrap();
        assert_eq!(r.typed::<u16>(), &[42]);
        let e = tensor::<u16>(&[0, 2], &[]);
        let r = run(Op::Reverse { axes: vec![0, 1] }, &[e], Shape::new(DType::Uint16, &[0, 2])).unwrap();
        assert!(r.is_empty());
    }

    #[test]
    fn pad_2d_bool_leading_axis_only() {
        // [[T,F],[F,T]] padded (1,0,0) on axis 0 only, fill T.
        let x = tensor::<bool>(&[2, 2], &[true, false, false, true]);
        let fill = tensor::<bool>(&[], &[true]);
        let r = run(pad_op(&[(1, 0, 0)]), &[x, fill], Shape::new(DType::Bool, &[3, 2])).unwrap();
        assert_eq!(r.typed::<bool>(), &[true, true, true, false, false, true]);
    }

    #[test]
    fn reverse_both_axes() {
        let x = tensor::<f32>(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let r = run(Op::Reverse { axes: vec![0, 1] }, std::slice::from_ref(&x), Shape::new(DType::Float32, &[2, 2]))
            .unwrap();
        assert_eq!(r.typed::<f32>(), &[4.0, 3.0, 2.0, 1.0]);
        let r =
            run(Op::Reverse { axes: vec![1] }, std::slice::from_ref(&x), Shape::new(DType::Float32, &[2, 2])).unwrap();
        assert_eq!(r.typed::<f32>(), &[2.0, 1.0, 4.0, 3.0]);
        assert!(run(Op::Reverse { axes: vec![2] }, &[x], Shape::new(DType::Float32, &[2, 2])).is_err());
    }

    #[test]
    fn iota_ints_and_halves() {
        let s = Shape::new(DType::Int8, &[2, 3]);
        let r = run(Op::Iota { shape: s.clone(), axis: 1 }, &[], s).unwrap();
        assert_eq!(r.typed::<i8>(), &[0, 1, 2, 0, 1, 2]);
        let s = Shape::new(DType::BFloat16, &[2, 3]);
        let r = run(Op::Iota { shape: s.clone(), axis: 0 }, &[], s).unwrap();
        let v: Vec<f32> = r.typed::<bf16>().iter().map(|v| v.to_f32()).collect();
        assert_eq!(v, vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        let s = Shape::new(DType::Float64, &[0, 3]);
        assert!(run(Op::Iota { shape: s.clone(), axis: 1 }, &[], s).unwrap().is_empty());
        let s = Shape::new(DType::Bool, &[2]);
        assert!(run(Op::Iota { shape: s.clone(), axis: 0 }, &[], s).is_err());
    }

    #[test]
    fn dynamic_shape_queries() {
        let x = iota_i32(&[2, 3]);
        let r = run(Op::DynamicShape, std::slice::from_ref(&x), Shape::new(DType::Int32, &[2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[2, 3]);
        let r =
            run(Op::DynamicDimensionSize { axis: 1 }, std::slice::from_ref(&x), Shape::scalar(DType::Int32)).unwrap();
        assert_eq!(r.typed::<i32>(), &[3]);
        assert!(run(Op::DynamicDimensionSize { axis: 2 }, &[x], Shape::scalar(DType::Int32)).is_err());
    }
}
