//! Fast kernels for data-movement nodes of the "jit" plan (see [`super::fast`]): Transpose,
//! BroadcastInDim and Slice with static shapes, run by the strided gather of
//! [`crate::kernels::movement`] (cache-blocked, split across the pool) instead of the reference
//! kernels' per-element index arithmetic. Any dtype: elements are moved as 1-, 2-, 4- or 8-byte
//! words (wider ones as several words). Also the row gather of embedding lookups (Gather of
//! whole rows along axis 0, the form ONNX `Gather` on axis 0 imports as), a row copy per index,
//! and DynamicUpdateSlice as contiguous run copies, written over the operand's own storage when
//! the executor owns it outright ([`update_slice_in_place`]: a donated KV cache is not copied).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::{Module, NodeId};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::kernels::movement::{View, gather};
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;

use super::fast::FastKernel;

/// A view of the operand, fixed at compile time.
struct MovementKernel {
    /// The op's name (for errors and profiles).
    op: &'static str,
    /// The view in elements of the operand's dtype.
    view: View,
    /// Operand shape the view was built for.
    input: Shape,
}

/// The fast kernel for node `n`, if it is a data-movement node this module runs.
pub(crate) fn prepare(m: &Module, n: NodeId) -> Result<Option<Box<dyn FastKernel>>> {
    let node = m.node(n);
    if let Op::Gather { .. } = node.op {
        return Ok(RowGather::prepare(m, n).map(|k| Box::new(k) as Box<dyn FastKernel>));
    }
    if let Op::DynamicUpdateSlice = node.op {
        return Ok(UpdateSlice::prepare(m, n).map(|k| Box::new(k) as Box<dyn FastKernel>));
    }
    let (&[x], &[y]) = (node.inputs.as_slice(), node.outputs.as_slice()) else { return Ok(None) };
    let (xs, ys) = (m.shape(x), m.shape(y));
    // Packed (sub-byte) dtypes keep the reference kernel.
    if xs.is_dynamic() || ys.is_dynamic() || xs.dtype != ys.dtype || xs.dtype.is_packed() {
        return Ok(None);
    }
    let in_dims = xs.udims();
    let out_dims = ys.udims();
    let view = match &node.op {
        Op::Transpose { perm } if perm.len() == in_dims.len() && perm.iter().all(|&p| p < in_dims.len()) => {
            View::transpose(&in_dims, perm)
        }
        Op::BroadcastInDim { axes, .. }
            if axes.len() == in_dims.len()
                && axes.iter().zip(&in_dims).all(|(&a, &d)| a < out_dims.len() && (d == 1 || d == out_dims[a])) =>
        {
            View::broadcast(&in_dims, &out_dims, axes)
        }
        Op::Slice { starts, strides, .. }
            if starts.len() == in_dims.len()
                && strides.len() == in_dims.len()
                && starts.iter().all(|&s| s >= 0)
                && strides.iter().all(|&s| s >= 1) =>
        {
            let starts: Vec<usize> = starts.iter().map(|&s| s as usize).collect();
            let steps: Vec<usize> = strides.iter().map(|&s| s as usize).collect();
            View::slice(&in_dims, &starts, &steps, &out_dims)
        }
        _ => return Ok(None),
    };
    // Shape inference checked the node; the view must still stay inside its operand.
    if view.dims != out_dims || view.extent() > xs.num_elements() {
        return Ok(None);
    }
    Ok(Some(Box::new(MovementKernel { op: node.op.op_type().name(), view, input: xs.clone() })))
}

/// `view` in units of `k`-element words: every axis scaled, plus an innermost axis of `k`.
fn widen(view: &View, k: usize) -> View {
    let mut v =
        View { dims: view.dims.clone(), strides: view.strides.iter().map(|s| s * k).collect(), base: view.base * k };
    v.dims.push(k);
    v.strides.push(1);
    v
}

impl FastKernel for MovementKernel {
    fn describe(&self) -> String {
        let v = self.view.simplify();
        format!("{} {} {:?} (strided copy, strides {:?})", self.op, self.input.dtype.short_name(), v.dims, v.strides)
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        super::fast::run_via_into(self, inputs, out_shapes, pool)
    }

    fn writes_into(&self) -> bool {
        true
    }

    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let (Some(x), [out]) = (inputs.first(), outs) else {
            return Err(Error::invalid(self.op, "expected an operand and one result"));
        };
        if x.shape != self.input || out.shape.dims.iter().map(|&d| d as usize).ne(self.view.dims.iter().copied()) {
            return Err(Error::invalid(
                self.op,
                format!("operand {} / output {} differ from the compiled {}", x.shape, out.shape, self.input),
            ));
        }
        let esize = x.shape.dtype.size();
        if out.shape.dtype != x.shape.dtype || out.data.len() != self.view.len() * esize {
            return Err(Error::invalid(
                self.op,
                format!("result buffer of {} bytes for {} of {}", out.data.len(), out.shape, x.shape.dtype),
            ));
        }
        let data = Arc::make_mut(&mut out.data);
        let src = &x.data;
        match esize {
            1 => gather(src.typed::<u8>(), &self.view, data.typed_mut::<u8>(), pool),
            2 => gather(src.typed::<u16>(), &self.view, data.typed_mut::<u16>(), pool),
            4 => gather(src.typed::<u32>(), &self.view, data.typed_mut::<u32>(), pool),
            8 => gather(src.typed::<u64>(), &self.view, data.typed_mut::<u64>(), pool),
            e if e % 8 == 0 => gather(src.typed::<u64>(), &widen(&self.view, e / 8), data.typed_mut::<u64>(), pool),
            e if e > 0 => gather(src.typed::<u8>(), &widen(&self.view, e), data.typed_mut::<u8>(), pool),
            _ => return Err(Error::invalid(self.op, format!("packed dtype {}", x.shape.dtype))),
        }
        Ok(())
    }
}

/// `out[b, …] = operand[clamp(indices[b], 0, rows - 1), …]`: a Gather whose slices are whole
/// rows of the operand's axis 0 (collapsed), one index per row, the rows' axes last in the
/// output.
struct RowGather {
    operand: Shape,
    indices: Shape,
    /// Rows of the operand.
    rows: usize,
    /// Bytes per row.
    row_bytes: usize,
}

/// Rows at least this many bytes in all, split across the pool.
const ROW_GATHER_PARALLEL_BYTES: usize = 1 << 18;

impl RowGather {
    fn prepare(m: &Module, n: NodeId) -> Option<RowGather> {
        let node = m.node(n);
        let Op::Gather {
            index_vector_axis,
            offset_output_axes,
            collapsed_slice_axes,
            start_index_map,
            slice_sizes,
            ..
        } = &node.op
        else {
            return None;
        };
        let (&[x, i], &[y]) = (node.inputs.as_slice(), node.outputs.as_slice()) else { return None };
        let (xs, is, ys) = (m.shape(x), m.shape(i), m.shape(y));
        if xs.is_dynamic() || is.is_dynamic() || ys.is_dynamic() || xs.dtype != ys.dtype || xs.dtype.is_packed() {
            return None;
        }
        if !matches!(is.dtype, DType::Int32 | DType::Int64) || xs.rank() == 0 {
            return None;
        }
        let x_dims = xs.udims();
        let r = x_dims.len();
        // One index per row: the index vector is implicit or an axis of size 1.
        let iv = *index_vector_axis;
        if iv > is.rank() || (iv < is.rank() && is.udims()[iv] != 1) {
            return None;
        }
        let batch_rank = is.rank() - usize::from(iv < is.rank());
        let whole_rows = slice_sizes.len() == r
            && slice_sizes[0] == 1
            && slice_sizes[1..].iter().zip(&x_dims[1..]).all(|(&s, &d)| s >= 0 && s as usize == d);
        let rows_last = offset_output_axes.iter().copied().eq(batch_rank..batch_rank + r - 1);
        if start_index_map.as_slice() != [0] || collapsed_slice_axes.as_slice() != [0] || !whole_rows || !rows_last {
            return None;
        }
        if x_dims[0] == 0 || ys.num_elements() != is.num_elements() * x_dims[1..].iter().product::<usize>() {
            return None;
        }
        let row_bytes = xs.dtype.size_for(x_dims[1..].iter().product());
        Some(RowGather { operand: xs.clone(), indices: is.clone(), rows: x_dims[0], row_bytes })
    }
}

impl FastKernel for RowGather {
    fn describe(&self) -> String {
        format!(
            "gather rows {} [{}x{} bytes] by {}",
            self.operand.dtype.short_name(),
            self.rows,
            self.row_bytes,
            self.indices
        )
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        super::fast::run_via_into(self, inputs, out_shapes, pool)
    }

    fn writes_into(&self) -> bool {
        true
    }

    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let (Some(x), Some(idx), [out]) = (inputs.first(), inputs.get(1), outs) else {
            return Err(Error::invalid("gather", "expected operand, indices and one result"));
        };
        if x.shape != self.operand || idx.shape != self.indices {
            return Err(Error::invalid(
                "gather",
                format!("operand {} / indices {} differ from the compiled ones", x.shape, idx.shape),
            ));
        }
        let rb = self.row_bytes;
        let src = x.data.as_bytes();
        if src.len() != self.rows * rb {
            return Err(Error::invalid(
                "gather",
                format!("operand storage of {} bytes for {} (expected {})", src.len(), x.shape, self.rows * rb),
            ));
        }
        if out.shape.dtype != x.shape.dtype || out.data.len() != idx.shape.num_elements() * rb {
            return Err(Error::invalid(
                "gather",
                format!("result buffer of {} bytes for {}", out.data.len(), out.shape),
            ));
        }
        // Row `k`'s operand row: its index clamped into the operand (the catalogue's Gather).
        let last = (self.rows - 1) as i64;
        let start = |k: usize| -> usize {
            let i = match idx.shape.dtype {
                DType::Int32 => idx.data.typed::<i32>()[k] as i64,
                _ => idx.data.typed::<i64>()[k],
            };
            i.clamp(0, last) as usize
        };
        let dst = Arc::make_mut(&mut out.data).as_bytes_mut();
        let row = |(k, out): (usize, &mut [u8])| {
            let s = start(k) * rb;
            out.copy_from_slice(&src[s..s + rb])
        };
        match pool {
            _ if rb == 0 => {}
            Some(p) if dst.len() >= ROW_GATHER_PARALLEL_BYTES && p.current_num_threads() > 1 => {
                use rayon::prelude::*;
                p.install(|| dst.par_chunks_mut(rb).enumerate().for_each(row))
            }
            _ => dst.chunks_mut(rb).enumerate().for_each(row),
        }
        Ok(())
    }
}

/// DynamicUpdateSlice with static shapes and Int32/Int64 starts: `run` copies the operand and
/// writes the update into the copy; the executor calls [`update_slice_in_place`] instead when
/// the operand dies at this node and its storage is held by nothing else.
struct UpdateSlice {
    operand: Shape,
    update: Shape,
}

impl UpdateSlice {
    fn prepare(m: &Module, n: NodeId) -> Option<UpdateSlice> {
        let node = m.node(n);
        let (xs, us) = (m.shape(*node.inputs.first()?), m.shape(*node.inputs.get(1)?));
        let starts = &node.inputs[2..];
        let ok = !xs.is_dynamic()
            && !us.is_dynamic()
            && !xs.dtype.is_packed()
            && us.dtype == xs.dtype
            && us.rank() == xs.rank()
            && starts.len() == xs.rank()
            && us.dims.iter().zip(&xs.dims).all(|(u, x)| u <= x)
            && starts
                .iter()
                .all(|&s| m.shape(s).rank() == 0 && matches!(m.shape(s).dtype, DType::Int32 | DType::Int64));
        ok.then(|| UpdateSlice { operand: xs.clone(), update: us.clone() })
    }
}

impl FastKernel for UpdateSlice {
    fn describe(&self) -> String {
        format!(
            "dynamic_update_slice {} {:?} <- {:?} (row copies, in place when the operand dies)",
            self.operand.dtype.short_name(),
            self.operand.dims,
            self.update.dims
        )
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], _pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        let (Some(x), Some(u)) = (inputs.first(), inputs.get(1)) else {
            return Err(Error::invalid("DynamicUpdateSlice", "expected an operand, an update and starts"));
        };
        if x.shape != self.operand || u.shape != self.update || out_shapes.first() != Some(&self.operand) {
            return Err(Error::invalid(
                "DynamicUpdateSlice",
                format!("operand {} / update {} differ from the compiled {}", x.shape, u.shape, self.operand),
            ));
        }
        let mut data = AlignedBytes::try_recycled(x.data.len())?;
        data.as_bytes_mut().copy_from_slice(x.bytes());
        let mut out = Tensor { shape: x.shape.clone(), data: Arc::new(data) };
        let written = write_update(&mut out, u, &inputs[2..])?;
        debug_assert!(written, "the copy is held uniquely");
        Ok(vec![out])
    }
}

/// DynamicUpdateSlice over `inputs[0]`'s own storage: `inputs = [x, update, starts…]` with one
/// Int32/Int64 scalar start per axis (negative ones + dim, then clamped to `[0, dim − update
/// dim]`, as the catalogue says). Returns `Ok(false)`, writing nothing, when x's storage is
/// shared (another value, a caller's buffer or a constant still holds it) or the operands are
/// not of the forms [`UpdateSlice`] handles; the caller then runs the copying kernel. The caller
/// must also know that x is not read after this node (its value dies here).
pub(crate) fn update_slice_in_place(inputs: &mut [Tensor]) -> Result<bool> {
    let [x, u, starts @ ..] = inputs else { return Ok(false) };
    write_update(x, u, starts)
}

/// Writes `u` into `x` at `starts` if x's storage is unique and the shapes fit (else `false`).
fn write_update(x: &mut Tensor, u: &Tensor, starts: &[Tensor]) -> Result<bool> {
    const OP: &str = "DynamicUpdateSlice";
    let (xd, ud) = (x.shape.udims(), u.shape.udims());
    let esize = x.shape.dtype.size();
    let r = xd.len();
    if x.shape.dtype != u.shape.dtype || x.shape.dtype.is_packed() || ud.len() != r || starts.len() != r {
        return Ok(false);
    }
    if ud.iter().zip(&xd).any(|(u, x)| u > x) || u.data.len() != u.shape.num_elements() * esize {
        return Ok(false);
    }
    let mut at = Vec::with_capacity(r);
    for (k, s) in starts.iter().enumerate() {
        let v = match (s.shape.dtype, s.data.len()) {
            (DType::Int32, 4) if s.shape.rank() == 0 => s.typed::<i32>()[0] as i64,
            (DType::Int64, 8) if s.shape.rank() == 0 => s.typed::<i64>()[0],
            _ => return Ok(false),
        };
        let v = if v < 0 { v.saturating_add(xd[k] as i64) } else { v };
        at.push(v.clamp(0, (xd[k] - ud[k]) as i64) as usize);
    }
    let Some(dst) = Arc::get_mut(&mut x.data) else { return Ok(false) };
    if dst.len() != x.shape.num_elements() * esize {
        return Err(Error::invalid(OP, format!("operand storage of {} bytes for {}", dst.len(), x.shape)));
    }
    if ud.contains(&0) {
        return Ok(true);
    }
    // Trailing axes the update covers whole join the innermost axis it only partly covers
    // into one contiguous run; the axes before it are walked row by row.
    let mut whole = r;
    while whole > 0 && ud[whole - 1] == xd[whole - 1] {
        whole -= 1;
    }
    let run_axis = whole.saturating_sub(1);
    let run = ud[run_axis..].iter().product::<usize>() * esize;
    let mut stride = vec![esize; r];
    for k in (0..r.saturating_sub(1)).rev() {
        stride[k] = stride[k + 1] * xd[k + 1];
    }
    let base: usize = (run_axis..r).map(|k| at[k] * stride[k]).sum();
    let (dst, src) = (dst.as_bytes_mut(), u.bytes());
    let mut idx = vec![0usize; run_axis];
    for row in src.chunks_exact(run) {
        let off = base + (0..run_axis).map(|k| (at[k] + idx[k]) * stride[k]).sum::<usize>();
        dst[off..off + run].copy_from_slice(row);
        // Next row (odometer over the leading update axes).
        for k in (0..run_axis).rev() {
            idx[k] += 1;
            if idx[k] < ud[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::text::parse_module;
    use crate::kernels::reference;

    /// Each node's fast kernel against the reference kernel on the same operand.
    #[test]
    fn matches_the_reference_kernels() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let cases = [
            ("f32[8,128,12,32]", "transpose %0, perm=[0,2,1,3] : f32[8,12,128,32]"),
            ("f32[8,12,128,32]", "transpose %0, perm=[0,1,3,2] : f32[8,12,32,128]"),
            ("bf16[5,7,9]", "transpose %0, perm=[2,0,1] : bf16[9,5,7]"),
            ("f64[6,4]", "transpose %0, perm=[1,0] : f64[4,6]"),
            ("c128[3,5]", "transpose %0, perm=[1,0] : c128[5,3]"),
            ("bool[8,128]", "broadcast_in_dim %0, shape=bool[8,12,128,128], axes=[0,3] : bool[8,12,128,128]"),
            ("f32[384]", "broadcast_in_dim %0, shape=f32[1024,384], axes=[1] : f32[1024,384]"),
            ("i8[1,7]", "broadcast_in_dim %0, shape=i8[3,5,7], axes=[1,2] : i8[3,5,7]"),
            ("f32[40,50]", "slice %0, starts=[3,5], limits=[23,50], strides=[2,3] : f32[10,15]"),
        ];
        for (input, op) in cases {
            let text = format!("module @m\n\nfunc @main(%0 \"x\": {input}) {{\n  %1 = {op}\n  return %1\n}}\n");
            let m = parse_module(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let n = m.functions[0].body[0];
            let x_shape = m.shape(m.node(n).inputs[0]).clone();
            let out_shape = m.shape(m.node(n).outputs[0]).clone();
            let bytes = x_shape.byte_size().unwrap();
            // Pseudo-random bytes; bools must hold 0 or 1.
            let mut data: Vec<u8> = (0..bytes).map(|i| ((i * 2654435761usize) >> 7) as u8).collect();
            if x_shape.dtype == crate::ir::dtype::DType::Bool {
                data.iter_mut().for_each(|b| *b &= 1);
            }
            let x = Tensor { shape: x_shape, data: Arc::new(AlignedBytes::from_bytes(&data)) };
            let want =
                reference::eval(&m.node(n).op, std::slice::from_ref(&x), std::slice::from_ref(&out_shape)).unwrap();
            let k = prepare(&m, n).unwrap().unwrap_or_else(|| panic!("no fast kernel for {op}"));
            for p in [None, Some(&pool)] {
                let got = k.run(std::slice::from_ref(&x), std::slice::from_ref(&out_shape), p).unwrap();
                assert_eq!(got[0].bytes(), want[0].bytes(), "{op}");
            }
        }
    }

    fn tensor_i64(dims: &[i64], v: &[i64]) -> Tensor {
        Tensor::from_vec(Shape::new(DType::Int64, dims), v).unwrap()
    }

    /// Embedding lookups: rows by index, out-of-range indices clamped (as the catalogue's
    /// Gather clamps its starts), expected values written out by hand.
    #[test]
    fn row_gather_copies_clamped_rows() {
        let text = "module @m\n\nfunc @main(%0 \"t\": f32[4,3], %1 \"i\": i64[2,3]) {\n  \
                    %2 = gather %0, %1, index_vector_axis=2, offset_output_axes=[2], collapsed_slice_axes=[0], \
                    start_index_map=[0], slice_sizes=[1,3], indices_are_sorted=false : f32[2,3,3]\n  return %2\n}\n";
        let m = parse_module(text).unwrap();
        let n = m.functions[0].body[0];
        let k = prepare(&m, n).unwrap().expect("a row gather");
        assert!(k.describe().starts_with("gather rows"), "{}", k.describe());
        let table: Vec<f32> = (0..4).flat_map(|r| (0..3).map(move |c| (10 * r + c) as f32)).collect();
        let t = Tensor::from_vec(Shape::new(DType::Float32, &[4, 3]), &table).unwrap();
        let idx = tensor_i64(&[2, 3], &[0, 3, -1, 7, 2, 1]);
        let out = Shape::new(DType::Float32, &[2, 3, 3]);
        let got = k.run(&[t, idx], std::slice::from_ref(&out), None).unwrap();
        let rows = [0, 3, 0, 3, 2, 1];
        let want: Vec<f32> = rows.iter().flat_map(|&r| (0..3).map(move |c| (10 * r + c) as f32)).collect();
        assert_eq!(got[0].typed::<f32>(), want.as_slice());
    }

    /// Large lookups (split across the pool), i32 indices with an explicit index-vector axis,
    /// against the reference kernel.
    #[test]
    fn row_gather_matches_the_reference_kernel() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let text = "module @m\n\nfunc @main(%0 \"t\": bf16[1000,384], %1 \"i\": i32[1024,1]) {\n  \
                    %2 = gather %0, %1, index_vector_axis=1, offset_output_axes=[1], collapsed_slice_axes=[0], \
                    start_index_map=[0], slice_sizes=[1,384], indices_are_sorted=false : bf16[1024,384]\n  return %2\n}\n";
        let m = parse_module(text).unwrap();
        let n = m.functions[0].body[0];
        let k = prepare(&m, n).unwrap().expect("a row gather");
        let bytes: Vec<u8> = (0..1000 * 384 * 2).map(|i| ((i * 2654435761usize) >> 9) as u8).collect();
        let t = Tensor {
            shape: Shape::new(DType::BFloat16, &[1000, 384]),
            data: Arc::new(AlignedBytes::from_bytes(&bytes)),
        };
        let iv: Vec<i32> = (0..1024i32).map(|i| i * 7919 % 1100 - 50).collect();
        let idx = Tensor::from_vec(Shape::new(DType::Int32, &[1024, 1]), &iv).unwrap();
        let out = Shape::new(DType::BFloat16, &[1024, 384]);
        let inputs = [t, idx];
        let want = reference::eval(&m.node(n).op, &inputs, std::slice::from_ref(&out)).unwrap();
        for p in [None, Some(&pool)] {
            let got = k.run(&inputs, std::slice::from_ref(&out), p).unwrap();
            assert_eq!(got[0].bytes(), want[0].bytes());
        }
    }

    /// DynamicUpdateSlice: the copying kernel and the in-place path against the reference
    /// kernel, starts in range, negative and clamped, i32 and i64, several ranks.
    #[test]
    fn update_slice_matches_the_reference_kernel() {
        let cases: [(&[i64], &[i64], &[i64]); 6] = [
            (&[2, 3, 16, 4], &[2, 3, 1, 4], &[0, 0, 5, 0]),
            (&[2, 3, 16, 4], &[1, 3, 1, 4], &[1, 0, 15, 0]),
            (&[2, 3, 16, 4], &[1, 2, 3, 2], &[-1, 7, 20, -3]),
            (&[5, 7], &[5, 7], &[2, 2]),
            (&[9], &[4], &[-2]),
            (&[3, 4], &[0, 4], &[1, 0]),
        ];
        for (xd, ud, at) in cases {
            let xs = Shape::new(DType::Float32, xd);
            let us = Shape::new(DType::Float32, ud);
            let xv: Vec<f32> = (0..xs.num_elements()).map(|i| i as f32).collect();
            let uv: Vec<f32> = (0..us.num_elements()).map(|i| -1.0 - i as f32).collect();
            for wide in [false, true] {
                let starts: Vec<Tensor> = at
                    .iter()
                    .map(|&a| match wide {
                        true => tensor_i64(&[], &[a]),
                        false => Tensor::from_vec(Shape::new(DType::Int32, &[]), &[a as i32]).unwrap(),
                    })
                    .collect();
                let mut inputs =
                    vec![Tensor::from_vec(xs.clone(), &xv).unwrap(), Tensor::from_vec(us.clone(), &uv).unwrap()];
                inputs.extend(starts);
                let want = reference::eval(&Op::DynamicUpdateSlice, &inputs, std::slice::from_ref(&xs)).unwrap();
                let k = UpdateSlice { operand: xs.clone(), update: us.clone() };
                let got = k.run(&inputs, std::slice::from_ref(&xs), None).unwrap();
                assert_eq!(got[0].bytes(), want[0].bytes(), "{xd:?} {ud:?} {at:?}");
                // Shared storage (`got` holds a second handle) is not written over.
                let before = inputs[0].clone();
                assert!(!update_slice_in_place(&mut inputs).unwrap());
                assert_eq!(inputs[0].bytes(), before.bytes());
                drop(before);
                let ptr = inputs[0].data.as_bytes().as_ptr();
                assert!(update_slice_in_place(&mut inputs).unwrap());
                assert_eq!(inputs[0].data.as_bytes().as_ptr(), ptr, "written in place");
                assert_eq!(inputs[0].bytes(), want[0].bytes(), "{xd:?} {ud:?} {at:?} in place");
            }
        }
    }
}
