//! Reference kernels for Gather and Scatter (§4.7) with full XLA dimension numbers (no batching dims).
//!
//! Gather moves raw element bytes (every non-packed dtype) and clamps start indices so the whole slice is in
//! bounds. Scatter (Sum/Max/Min) combines in the element type (half types in f32, rounded after each combine),
//! skips any update window that is even partly out of bounds, and applies duplicates in row-major order of the
//! updates.

use crate::error::{Error, Result};
use crate::ir::op::{ArithReduce, Op};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

use super::movement::util::{
    Arith, arg, elem_size, expect_dims, for_each_index, int_values, out_shape, strides, with_arith_type,
};

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    let name = name.as_str();
    let out = out_shape(name, out_shapes, 0)?;
    let t = match op {
        Op::Gather {
            index_vector_axis,
            offset_output_axes,
            collapsed_slice_axes,
            start_index_map,
            slice_sizes,
            ..
        } => {
            let g = GatherDims {
                index_vector_axis: *index_vector_axis,
                offset_output_axes,
                collapsed_slice_axes,
                start_index_map,
                slice_sizes,
            };
            gather(name, arg(name, inputs, 0)?, arg(name, inputs, 1)?, &g, out)?
        }
        Op::Scatter {
            kind,
            index_vector_axis,
            update_window_axes,
            inserted_window_axes,
            scatter_axes_to_operand_axes,
            ..
        } => {
            let s = ScatterDims {
                index_vector_axis: *index_vector_axis,
                update_window_axes,
                inserted_window_axes,
                scatter_axes_to_operand_axes,
            };
            scatter(name, *kind, arg(name, inputs, 0)?, arg(name, inputs, 1)?, arg(name, inputs, 2)?, &s, out)?
        }
        _ => return Err(Error::invalid(name, "not an indexing op")),
    };
    Ok(vec![t])
}

struct GatherDims<'a> {
    index_vector_axis: usize,
    offset_output_axes: &'a [usize],
    collapsed_slice_axes: &'a [usize],
    start_index_map: &'a [usize],
    slice_sizes: &'a [i64],
}

struct ScatterDims<'a> {
    index_vector_axis: usize,
    update_window_axes: &'a [usize],
    inserted_window_axes: &'a [usize],
    scatter_axes_to_operand_axes: &'a [usize],
}

/// Whether `axes` are unique and all below `bound`.
fn unique_in_range(axes: &[usize], bound: usize) -> bool {
    let mut seen = vec![false; bound];
    axes.iter().all(|&a| a < bound && !std::mem::replace(&mut seen[a], true))
}

/// The layout of an index tensor: its batch axes, the index-vector length and the stride of the vector axis.
struct IndexLayout {
    vals: Vec<i64>,
    dims: Vec<usize>,
    strides: Vec<usize>,
    batch_axes: Vec<usize>,
    vec_len: usize,
    vec_stride: usize,
}

impl IndexLayout {
    fn new(name: &str, indices: &Tensor, ivaxis: usize, map: &[usize], operand_rank: usize) -> Result<IndexLayout> {
        let vals = int_values(name, "indices", indices)?;
        let dims = indices.shape.udims();
        if ivaxis > dims.len() {
            return Err(Error::invalid(name, format!("index_vector_axis {ivaxis} > indices rank {}", dims.len())));
        }
        let strides = strides(&dims);
        let implicit = ivaxis == dims.len();
        let vec_len = if implicit { 1 } else { dims[ivaxis] };
        let vec_stride = if implicit { 0 } else { strides[ivaxis] };
        if map.len() != vec_len || !unique_in_range(map, operand_rank) {
            return Err(Error::invalid(
                name,
                format!("index map {map:?} must be {vec_len} unique operand axes below {operand_rank}"),
            ));
        }
        let batch_axes = (0..dims.len()).filter(|&a| a != ivaxis).collect();
        Ok(IndexLayout { vals, dims, strides, batch_axes, vec_len, vec_stride })
    }

    /// Start vector (one entry per operand axis, 0 where unmapped) for batch coordinates `batch`.
    fn start(&self, batch: &[usize], map: &[usize], start: &mut [i64]) {
        start.fill(0);
        let base: usize = batch.iter().zip(&self.batch_axes).map(|(&b, &a)| b * self.strides[a]).sum();
        for (k, &a) in map.iter().enumerate().take(self.vec_len) {
            start[a] = self.vals[base + k * self.vec_stride];
        }
    }
}

fn gather(name: &str, operand: &Tensor, indices: &Tensor, g: &GatherDims, out: &Shape) -> Result<Tensor> {
    if out.dtype != operand.shape.dtype {
        return Err(Error::invalid(
            name,
            format!("output dtype {} != operand dtype {}", out.dtype, operand.shape.dtype),
        ));
    }
    let esize = elem_size(name, operand.shape.dtype)?;
    let odims = operand.shape.udims();
    let r = odims.len();
    let idx = IndexLayout::new(name, indices, g.index_vector_axis, g.start_index_map, r)?;
    if g.slice_sizes.len() != r || (0..r).any(|a| g.slice_sizes[a] < 0 || g.slice_sizes[a] as usize > odims[a]) {
        return Err(Error::invalid(
            name,
            format!("slice_sizes {:?} invalid for operand {}", g.slice_sizes, operand.shape),
        ));
    }
    let sizes: Vec<usize> = g.slice_sizes.iter().map(|&s| s as usize).collect();
    if !unique_in_range(g.collapsed_slice_axes, r) || g.collapsed_slice_axes.iter().any(|&a| sizes[a] != 1) {
        return Err(Error::invalid(name, format!("collapsed_slice_axes {:?} invalid", g.collapsed_slice_axes)));
    }
    let offset_operand_axes: Vec<usize> = (0..r).filter(|a| !g.collapsed_slice_axes.contains(a)).collect();
    let out_rank = idx.batch_axes.len() + offset_operand_axes.len();
    if g.offset_output_axes.len() != offset_operand_axes.len() || !unique_in_range(g.offset_output_axes, out_rank) {
        return Err(Error::invalid(name, format!("offset_output_axes {:?} invalid", g.offset_output_axes)));
    }
    let batch_out_axes: Vec<usize> = (0..out_rank).filter(|a| !g.offset_output_axes.contains(a)).collect();
    let mut out_dims = vec![0; out_rank];
    for (k, &oa) in batch_out_axes.iter().enumerate() {
        out_dims[oa] = idx.dims[idx.batch_axes[k]];
    }
    for (j, &oa) in g.offset_output_axes.iter().enumerate() {
        out_dims[oa] = sizes[offset_operand_axes[j]];
    }
    expect_dims(name, "output", out, &out_dims)?;

    let ostrides = strides(&odims);
    let src = operand.bytes();
    let mut t = Tensor::try_zeros(out.clone())?;
    let bytes = t.bytes_mut();
    // When the last output axis is the offset axis of the operand's last axis, each output row
    // is one contiguous run of the operand: copied whole (an embedding-row gather is a memcpy
    // per row instead of one index computation per element).
    let rows = out_rank > 0
        && g.offset_output_axes.last() == Some(&(out_rank - 1))
        && offset_operand_axes.last() == Some(&(r - 1));
    let run = if rows { out_dims[out_rank - 1] } else { 1 };
    let mut walk = out_dims.clone();
    if rows {
        walk[out_rank - 1] = 1;
    }
    let mut start = vec![0i64; r];
    let mut batch = vec![0usize; batch_out_axes.len()];
    let mut coord = vec![0usize; r];
    let mut o = 0;
    for_each_index(&walk, |oidx| {
        for (b, &oa) in batch.iter_mut().zip(&batch_out_axes) {
            *b = oidx[oa];
        }
        idx.start(&batch, g.start_index_map, &mut start);
        for (a, c) in coord.iter_mut().enumerate() {
            *c = start[a].clamp(0, (odims[a] - sizes[a]) as i64) as usize;
        }
        for (j, &oa) in g.offset_output_axes.iter().enumerate() {
            coord[offset_operand_axes[j]] += oidx[oa];
        }
        let i: usize = coord.iter().zip(&ostrides).map(|(c, s)| c * s).sum();
        bytes[o * esize..(o + run) * esize].copy_from_slice(&src[i * esize..(i + run) * esize]);
        o += run;
    });
    Ok(t)
}

/// Validated scatter geometry: for each operand axis its window extent and the updates axis it comes from.
struct ScatterPlan {
    odims: Vec<usize>,
    udims: Vec<usize>,
    /// Updates axis feeding each operand axis (None for inserted axes).
    window_src: Vec<Option<usize>>,
    /// Updates axes that are scatter (batch) axes, in order.
    scatter_axes: Vec<usize>,
}

fn scatter_plan(
    name: &str,
    operand: &Shape,
    idx: &IndexLayout,
    updates: &Shape,
    s: &ScatterDims,
) -> Result<ScatterPlan> {
    let odims = operand.udims();
    let udims = updates.udims();
    let r = odims.len();
    let uw = s.update_window_axes;
    if !unique_in_range(uw, udims.len()) || uw.windows(2).any(|w| w[0] > w[1]) {
        return Err(Error::invalid(name, format!("update_window_axes {uw:?} invalid for updates {updates}")));
    }
    if !unique_in_range(s.inserted_window_axes, r) || uw.len() + s.inserted_window_axes.len() != r {
        return Err(Error::invalid(
            name,
            format!(
                "inserted_window_axes {:?} with {} window axes do not cover rank {r}",
                s.inserted_window_axes,
                uw.len()
            ),
        ));
    }
    let scatter_axes: Vec<usize> = (0..udims.len()).filter(|a| !uw.contains(a)).collect();
    let batch_dims: Vec<usize> = idx.batch_axes.iter().map(|&a| idx.dims[a]).collect();
    let scatter_dims: Vec<usize> = scatter_axes.iter().map(|&a| udims[a]).collect();
    if batch_dims != scatter_dims {
        return Err(Error::invalid(
            name,
            format!("updates scatter dims {scatter_dims:?} differ from indices batch dims {batch_dims:?}"),
        ));
    }
    let mut window_src = vec![None; r];
    let mut next = uw.iter();
    for (a, w) in window_src.iter_mut().enumerate() {
        if !s.inserted_window_axes.contains(&a) {
            let &ua = next.next().ok_or_else(|| Error::invalid(name, "too few update window axes"))?;
            if udims[ua] > odims[a] {
                return Err(Error::invalid(name, format!("update window axis {ua} larger than operand axis {a}")));
            }
            *w = Some(ua);
        }
    }
    Ok(ScatterPlan { odims, udims, window_src, scatter_axes })
}

fn scatter(
    name: &str,
    kind: ArithReduce,
    operand: &Tensor,
    indices: &Tensor,
    updates: &Tensor,
    s: &ScatterDims,
    out: &Shape,
) -> Result<Tensor> {
    let dtype = operand.shape.dtype;
    if updates.shape.dtype != dtype || out.dtype != dtype {
        return Err(Error::invalid(
            name,
            format!("updates {} / output {out} dtype differ from operand {}", updates.shape, operand.shape),
        ));
    }
    expect_dims(name, "output", out, &operand.shape.udims())?;
    if kind == ArithReduce::Product {
        return Err(Error::invalid(name, "scatter supports Sum, Max and Min"));
    }
    let idx =
        IndexLayout::new(name, indices, s.index_vector_axis, s.scatter_axes_to_operand_axes, operand.shape.rank())?;
    let plan = scatter_plan(name, &operand.shape, &idx, &updates.shape, s)?;
    with_arith_type!(dtype, name, T => Ok(scatter_typed::<T>(kind, operand, &idx, s.scatter_axes_to_operand_axes, updates, &plan)))
}

fn scatter_typed<T: Arith>(
    kind: ArithReduce,
    operand: &Tensor,
    idx: &IndexLayout,
    map: &[usize],
    updates: &Tensor,
    plan: &ScatterPlan,
) -> Tensor {
    let mut t = operand.clone();
    let ostrides = strides(&plan.odims);
    let data = t.typed_mut::<T>();
    let upd = updates.typed::<T>();
    let r = plan.odims.len();
    let mut start = vec![0i64; r];
    let mut batch = vec![0usize; plan.scatter_axes.len()];
    let mut u = 0;
    for_each_index(&plan.udims, |uidx| {
        let value = upd[u];
        u += 1;
        for (b, &ua) in batch.iter_mut().zip(&plan.scatter_axes) {
            *b = uidx[ua];
        }
        idx.start(&batch, map, &mut start);
        let mut target = 0;
        for a in 0..r {
            let extent = plan.window_src[a].map_or(1, |ua| plan.udims[ua]) as i64;
            if start[a] < 0 || start[a] > plan.odims[a] as i64 - extent {
                return; // The whole window is skipped when any part is out of bounds.
            }
            let w = plan.window_src[a].map_or(0, |ua| uidx[ua]);
            target += (start[a] as usize + w) * ostrides[a];
        }
        let (cur, v) = (data[target].to_acc(), value.to_acc());
        data[target] = T::from_acc(match kind {
            ArithReduce::Max => T::max(cur, v),
            ArithReduce::Min => T::min(cur, v),
            _ => T::add(cur, v),
        });
    });
    t
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::super::movement::util::tensor;
    use super::*;
    use crate::ir::dtype::DType;

    fn gather_op(iv: usize, offsets: &[usize], collapsed: &[usize], map: &[usize], sizes: &[i64]) -> Op {
        Op::Gather {
            index_vector_axis: iv,
            offset_output_axes: offsets.to_vec(),
            collapsed_slice_axes: collapsed.to_vec(),
            start_index_map: map.to_vec(),
            slice_sizes: sizes.to_vec(),
            indices_are_sorted: false,
        }
    }

    fn run(op: Op, inputs: &[Tensor], out: Shape) -> Result<Tensor> {
        eval(&op, inputs, &[out]).map(|mut v| v.remove(0))
    }

    #[test]
    fn gather_1d_clamps_starts() {
        // §4.7: operand {0..4}, slice size 2, starts {−1, 3, 4} → {{0,1},{3,4},{3,4}}.
        let x = tensor::<f32>(&[5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
        let i = tensor::<i32>(&[3, 1], &[-1, 3, 4]);
        let r = run(gather_op(1, &[1], &[], &[0], &[2]), &[x, i], Shape::new(DType::Float32, &[3, 2])).unwrap();
        assert_eq!(r.typed::<f32>(), &[0.0, 1.0, 3.0, 4.0, 3.0, 4.0]);
    }

    #[test]
    fn gather_rows_implicit_index_vector() {
        // §11: rows [−1,0,4,5,7] of a [5,2] operand → rows [0,0,4,4,4]; indices rank 1, implicit vector axis.
        let x = tensor::<i64>(&[5, 2], &[0, 1, 10, 11, 20, 21, 30, 31, 40, 41]);
        let i = tensor::<i8>(&[5], &[-1, 0, 4, 5, 7]);
        let r = run(gather_op(1, &[1], &[0], &[0], &[1, 2]), &[x, i], Shape::new(DType::Int64, &[5, 2])).unwrap();
        assert_eq!(r.typed::<i64>(), &[0, 1, 0, 1, 40, 41, 40, 41, 40, 41]);
    }

    #[test]
    fn gather_section_4_7_example() {
        // operand iota [4,3,2,2] (x[a,b,c,d] = 12a + 4b + 2c + d); idx [3,3,2] with the vector on axis 1,
        // map [0,2,3] (component 0 → axis 0, 1 → axis 2, 2 → axis 3), collapsed [0,2], sizes [1,3,1,1], offset
        // output axes [1,3] (operand axes 1 and 3). Output [3,3,2,1]: out[i,b,j,0] = x[a, b, c, d] where
        // (a, c, d) = clamp(idx[i,:,j]) to ([0,3], [0,1], [0,1]).
        let x = tensor::<f32>(&[4, 3, 2, 2], &(0..48).map(|v| v as f32).collect::<Vec<_>>());
        // idx[i, k, j]: batch i ∈ 0..3, component k ∈ 0..3, batch j ∈ 0..2.
        #[rustfmt::skip]
        let idx = [
            0, 1,   1, 0,   1, 0,  // i=0: j=0 → (0,1,1), j=1 → (1,0,0)
            3, 2,   0, 1,   1, 1,  // i=1: j=0 → (3,0,1), j=1 → (2,1,1)
            9, -1,  5, 0,  -3, 7,  // i=2: j=0 → (9,5,−3) → (3,1,0), j=1 → (−1,0,7) → (0,0,1)
        ];
        let i = tensor::<i32>(&[3, 3, 2], &idx);
        let op = gather_op(1, &[1, 3], &[0, 2], &[0, 2, 3], &[1, 3, 1, 1]);
        let r = run(op, &[x, i], Shape::new(DType::Float32, &[3, 3, 2, 1])).unwrap();
        // Expected, in output order [i][b][j]: value = 12a + 4b + 2c + d.
        let starts = [[(0, 1, 1), (1, 0, 0)], [(3, 0, 1), (2, 1, 1)], [(3, 1, 0), (0, 0, 1)]];
        let mut expect = vec![];
        for s in &starts {
            for b in 0..3 {
                for &(a, c, d) in s {
                    expect.push((12 * a + 4 * b + 2 * c + d) as f32);
                }
            }
        }
        assert_eq!(expect[..6], [3.0, 12.0, 7.0, 16.0, 11.0, 20.0]);
        assert_eq!(r.typed::<f32>(), expect.as_slice());
    }

    #[test]
    fn gather_bool_and_empty_batch() {
        let x = tensor::<bool>(&[3], &[true, false, true]);
        let i = tensor::<u8>(&[2], &[1, 2]);
        let r = run(gather_op(1, &[], &[0], &[0], &[1]), &[x.clone(), i], Shape::new(DType::Bool, &[2])).unwrap();
        assert_eq!(r.typed::<bool>(), &[false, true]);
        let i = tensor::<u8>(&[0], &[]);
        let r =
            run(gather_op(1, &[], &[0], &[0], &[1]), &[x.clone(), i.clone()], Shape::new(DType::Bool, &[0])).unwrap();
        assert!(r.is_empty());
        // A bad slice size is an error.
        assert!(run(gather_op(1, &[1], &[], &[0], &[4]), &[x, i], Shape::new(DType::Bool, &[0, 4])).is_err());
    }

    fn scatter_op(kind: ArithReduce, iv: usize, window: &[usize], inserted: &[usize], map: &[usize]) -> Op {
        Op::Scatter {
            kind,
            index_vector_axis: iv,
            update_window_axes: window.to_vec(),
            inserted_window_axes: inserted.to_vec(),
            scatter_axes_to_operand_axes: map.to_vec(),
            indices_are_sorted: false,
            unique_indices: false,
        }
    }

    #[test]
    fn scatter_sum_skips_out_of_bounds_windows() {
        // §4.7 example → {0,1000,2000,10,20}.
        let x = tensor::<f32>(&[5], &[0.0; 5]);
        let i = tensor::<i32>(&[4, 1], &[-1, 3, 4, 1]);
        let u = tensor::<f32>(&[4, 2], &[1.0, 2.0, 10.0, 20.0, 100.0, 200.0, 1000.0, 2000.0]);
        let op = scatter_op(ArithReduce::Sum, 1, &[1], &[], &[0]);
        let r = run(op, &[x, i, u], Shape::new(DType::Float32, &[5])).unwrap();
        assert_eq!(r.typed::<f32>(), &[0.0, 1000.0, 2000.0, 10.0, 20.0]);
    }

    #[test]
    fn scatter_sum_duplicates_combine() {
        // §11: size-1 windows at [−1,5,2,2] → only index 2, the sum of both.
        let x = tensor::<i32>(&[5], &[0; 5]);
        let i = tensor::<i64>(&[4], &[-1, 5, 2, 2]);
        let u = tensor::<i32>(&[4], &[1, 10, 100, 1000]);
        let op = scatter_op(ArithReduce::Sum, 1, &[], &[0], &[0]);
        let r = run(op, &[x, i, u], Shape::new(DType::Int32, &[5])).unwrap();
        assert_eq!(r.typed::<i32>(), &[0, 0, 1100, 0, 0]);
    }

    #[test]
    fn scatter_max_min_and_nan() {
        let x = tensor::<f32>(&[2], &[1.0, 1.0]);
        let i = tensor::<i32>(&[3], &[0, 0, 1]);
        let u = tensor::<f32>(&[3], &[3.0, f32::NAN, -5.0]);
        let r = run(
            scatter_op(ArithReduce::Max, 1, &[], &[0], &[0]),
            &[x.clone(), i.clone(), u.clone()],
            Shape::new(DType::Float32, &[2]),
        )
        .unwrap();
        let v = r.typed::<f32>();
        assert!(v[0].is_nan());
        assert_eq!(v[1], 1.0);
        let r = run(scatter_op(ArithReduce::Min, 1, &[], &[0], &[0]), &[x, i, u], Shape::new(DType::Float32, &[2]))
            .unwrap();
        let v = r.typed::<f32>();
        assert!(v[0].is_nan());
        assert_eq!(v[1], -5.0);
    }

    #[test]
    fn scatter_compliance_cases() {
        // ScatterMax into zeros [2,2,5], U8 indices [[0,1],[1,0]], updates [5,2] window axis 0, inserted (0,1).
        let x = tensor::<f32>(&[2, 2, 5], &[0.0; 20]);
        let i = tensor::<u8>(&[2, 2], &[0, 1, 1, 0]);
        let u = tensor::<f32>(&[5, 2], &[1.0, 6.0, 2.0, 7.0, 3.0, 8.0, 4.0, 9.0, 5.0, 10.0]);
        let op = scatter_op(ArithReduce::Max, 1, &[0], &[0, 1], &[0, 1]);
        let r = run(op, &[x, i, u], Shape::new(DType::Float32, &[2, 2, 5])).unwrap();
        // Batch 0 → x[0,1,:] = u[:,0] = 1..5; batch 1 → x[1,0,:] = u[:,1] = 6..10.
        let mut expect = vec![0.0f32; 20];
        expect[5..10].copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        expect[10..15].copy_from_slice(&[6.0, 7.0, 8.0, 9.0, 10.0]);
        assert_eq!(r.typed::<f32>(), expect.as_slice());
        // ScatterSum into ones [2,5,2] with inserted/map (0,2): window on operand axis 1 from updates axis 1.
        let x = tensor::<bf16>(&[2, 5, 2], &[bf16::ONE; 20]);
        let i = tensor::<i32>(&[2, 2], &[0, 1, 1, 0]);
        let u: Vec<bf16> = (1..=10).map(|v| bf16::from_f32(v as f32)).collect();
        let u = tensor::<bf16>(&[2, 5], &u);
        let op = scatter_op(ArithReduce::Sum, 1, &[1], &[0, 2], &[0, 2]);
        let r = run(op, &[x, i, u], Shape::new(DType::BFloat16, &[2, 5, 2])).unwrap();
        // Batch 0 → x[0,:,1] += 1..5; batch 1 → x[1,:,0] += 6..10.
        let mut expect = vec![1.0f32; 20];
        for k in 0..5 {
            expect[k * 2 + 1] += (k + 1) as f32;
            expect[10 + k * 2] += (k + 6) as f32;
        }
        let got: Vec<f32> = r.typed::<bf16>().iter().map(|v| v.to_f32()).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn scatter_rejects_bad_geometry() {
        let x = tensor::<f32>(&[5], &[0.0; 5]);
        let i = tensor::<i32>(&[2, 1], &[0, 1]);
        let u = tensor::<f32>(&[3, 2], &[0.0; 6]);
        let op = scatter_op(ArithReduce::Sum, 1, &[1], &[], &[0]);
        assert!(run(op, &[x.clone(), i.clone(), u], Shape::new(DType::Float32, &[5])).is_err());
        let u = tensor::<f32>(&[2, 6], &[0.0; 12]);
        let op = scatter_op(ArithReduce::Sum, 1, &[1], &[], &[0]);
        assert!(run(op, &[x, i, u], Shape::new(DType::Float32, &[5])).is_err());
    }
}
