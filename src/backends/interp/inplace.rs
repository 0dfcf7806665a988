//! In-place execution of ops whose operand storage the execution owns outright: a donated
//! input, or an intermediate at its last use. Only taken when the storage is not shared
//! (`Arc::get_mut` succeeds), so no other tensor or buffer can observe the write.

use std::sync::Arc;

use super::dynamic::scalar_i64;
use crate::error::Result;
use crate::kernels::tensor::Tensor;

/// DynamicUpdateSlice(x, update, starts…): writes `update` into `x`'s own storage when `x` is
/// unshared; otherwise (or for packed dtypes / malformed operands) calls `fallback`, the
/// reference kernel, which also produces the errors for invalid operands.
///
/// Starts follow §9: a negative start is first increased by the dim, then clamped to
/// `[0, dim − update_dim]`.
pub(super) fn dynamic_update_slice(
    name: &str,
    inputs: Vec<Tensor>,
    fallback: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    let mut inputs = inputs;
    let usable = inputs.len() >= 2 && {
        let (x, u) = (&inputs[0], &inputs[1]);
        let r = x.shape.rank();
        !x.shape.dtype.is_packed()
            && u.shape.dtype == x.shape.dtype
            && u.shape.rank() == r
            && inputs.len() == 2 + r
            && u.shape.dims.iter().zip(&x.shape.dims).all(|(a, b)| a <= b)
    };
    if !usable {
        return fallback(&inputs);
    }
    let rank = inputs[0].shape.rank();
    let mut starts = Vec::with_capacity(rank);
    for (k, t) in inputs[2..].iter().enumerate() {
        let Ok(s) = scalar_i64(name, &format!("start index {k}"), t) else {
            return fallback(&inputs);
        };
        let (dim, ud) = (inputs[0].shape.dims[k], inputs[1].shape.dims[k]);
        let s = if s < 0 { s.saturating_add(dim) } else { s };
        starts.push(s.clamp(0, dim - ud) as usize);
    }
    let mut rest = inputs.split_off(1);
    let mut x = inputs.pop().expect("dynamic_update_slice: x checked above");
    let Some(dst) = Arc::get_mut(&mut x.data) else {
        rest.insert(0, x);
        return fallback(&rest);
    };
    let update = &rest[0];
    let esz = x.shape.dtype.size();
    let xd = x.shape.udims();
    let ud = update.shape.udims();
    let src = update.bytes();
    let dst = dst.as_bytes_mut();
    if ud.contains(&0) {
        return Ok(vec![x]);
    }
    if rank == 0 {
        dst[..esz].copy_from_slice(&src[..esz]);
        return Ok(vec![x]);
    }
    // Row-major strides of x (in elements); copy one contiguous last-axis run per update row.
    let mut xstride = vec![1usize; rank];
    for k in (0..rank - 1).rev() {
        xstride[k] = xstride[k + 1] * xd[k + 1];
    }
    let run = ud[rank - 1];
    let rows: usize = ud[..rank - 1].iter().product();
    let mut idx = vec![0usize; rank - 1];
    for row in 0..rows {
        let mut off = starts[rank - 1];
        for k in 0..rank - 1 {
            off += (starts[k] + idx[k]) * xstride[k];
        }
        let s = row * run * esz;
        dst[off * esz..(off + run) * esz].copy_from_slice(&src[s..s + run * esz]);
        // Next row index (odometer over the leading update axes).
        for k in (0..rank - 1).rev() {
            idx[k] += 1;
            if idx[k] < ud[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    Ok(vec![x])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::ir::dtype::DType;
    use crate::ir::shape::Shape;

    fn t_i32(dims: &[i64], v: &[i32]) -> Tensor {
        Tensor::from_vec(Shape::new(DType::Int32, dims), v).unwrap()
    }

    fn no_fallback(_: &[Tensor]) -> Result<Vec<Tensor>> {
        Err(Error::invalid("test", "fallback called"))
    }

    #[test]
    fn writes_in_place_with_clamped_starts() {
        // [0..4] <- [9,9] at -1: -1 + 5 = 4, clamped to 5 - 2 = 3 → [0,1,2,9,9] (§9 example).
        let x = t_i32(&[5], &[0, 1, 2, 3, 4]);
        let ptr = x.data.as_ptr() as usize;
        let out =
            dynamic_update_slice("DynamicUpdateSlice", vec![x, t_i32(&[2], &[9, 9]), t_i32(&[], &[-1])], no_fallback)
                .unwrap();
        assert_eq!(out[0].typed::<i32>(), &[0, 1, 2, 9, 9]);
        assert_eq!(out[0].data.as_ptr() as usize, ptr, "storage reused");
    }

    #[test]
    fn two_dims() {
        // 3x4 zeros, update 2x2 [[1,2],[3,4]] at (1, 2).
        let x = t_i32(&[3, 4], &[0; 12]);
        let out = dynamic_update_slice(
            "DynamicUpdateSlice",
            vec![x, t_i32(&[2, 2], &[1, 2, 3, 4]), t_i32(&[], &[1]), t_i32(&[], &[2])],
            no_fallback,
        )
        .unwrap();
        assert_eq!(out[0].typed::<i32>(), &[0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4]);
    }

    #[test]
    fn shared_storage_falls_back() {
        let x = t_i32(&[2], &[1, 2]);
        let keep = x.clone();
        let r = dynamic_update_slice("DynamicUpdateSlice", vec![x, t_i32(&[1], &[7]), t_i32(&[], &[0])], no_fallback);
        assert!(r.is_err(), "must not write into shared storage");
        assert_eq!(keep.typed::<i32>(), &[1, 2]);
    }
}
