//! Shape inference for Gather and Scatter{Sum,Max,Min} with XLA dimension numbers (§4.7).

use super::{check_axes, check_index_dtype, check_reduce_dtype, kind_name, make_shape, names, unify};
use crate::bail;
use crate::error::{Error, Result};
use crate::ir::op::{ArithReduce, Op};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// The index-vector size and the batch axes of `indices` for `index_vector_axis` (which may
/// equal the rank: an implicit trailing axis of size 1).
fn index_layout(op: &str, indices: &Shape, index_vector_axis: usize) -> Result<(usize, Vec<usize>)> {
    let rank = indices.rank();
    if index_vector_axis > rank {
        bail!(op, "index_vector_axis {index_vector_axis} out of range [0, {rank}] for indices {indices}");
    }
    let size = if index_vector_axis == rank {
        1
    } else {
        let d = indices.dims[index_vector_axis];
        if d == DYNAMIC_DIM {
            bail!(op, "the index vector axis {index_vector_axis} of indices {indices} must be static");
        }
        d as usize
    };
    let batch = (0..rank).filter(|&a| a != index_vector_axis).collect();
    Ok((size, batch))
}

/// Checks the map from index-vector components to operand axes: one entry per component,
/// unique, in range.
fn check_index_map(op: &str, what: &str, map: &[usize], vector_size: usize, operand_rank: usize) -> Result<()> {
    if map.len() != vector_size {
        bail!(op, "{what} {map:?} has {} entries but the index vector has size {vector_size}", map.len());
    }
    check_axes(op, what, map, operand_rank, false)
}

pub(super) fn gather(op: &str, attrs: &Op, operand: &Shape, indices: &Shape) -> Result<Shape> {
    let Op::Gather {
        index_vector_axis, offset_output_axes, collapsed_slice_axes, start_index_map, slice_sizes, ..
    } = attrs
    else {
        return Err(Error::invalid(op, "expected Gather attributes"));
    };
    if operand.dtype.is_packed() || !operand.dtype.is_supported() {
        bail!(op, "operand dtype {} is not supported (packed and name-only dtypes are rejected)", operand.dtype);
    }
    check_index_dtype(op, "start_indices", indices.dtype)?;
    let rank = operand.rank();
    let (vector_size, batch_axes) = index_layout(op, indices, *index_vector_axis)?;
    check_index_map(op, "start_index_map", start_index_map, vector_size, rank)?;
    if slice_sizes.len() != rank {
        bail!(op, "slice_sizes {slice_sizes:?} has {} entries for an operand of rank {rank}", slice_sizes.len());
    }
    for (a, (&size, &d)) in slice_sizes.iter().zip(&operand.dims).enumerate() {
        let bound = if d == DYNAMIC_DIM { 1 } else { d };
        if size < 0 || size > bound {
            bail!(op, "slice size {size} of operand axis {a} is outside [0, {bound}] (operand {operand})");
        }
    }
    check_axes(op, "collapsed_slice_axes", collapsed_slice_axes, rank, true)?;
    for &a in collapsed_slice_axes {
        if slice_sizes[a] != 1 {
            bail!(op, "collapsed operand axis {a} has slice size {}; it must be 1", slice_sizes[a]);
        }
    }
    if collapsed_slice_axes.len() + offset_output_axes.len() != rank {
        bail!(
            op,
            "rank(operand) = {rank} must equal len(collapsed_slice_axes) = {} + len(offset_output_axes) = {}",
            collapsed_slice_axes.len(),
            offset_output_axes.len()
        );
    }
    let out_rank = batch_axes.len() + offset_output_axes.len();
    check_axes(op, "offset_output_axes", offset_output_axes, out_rank, true)?;
    // Offset axes take the kept operand axes in increasing order; the rest are the batch axes.
    let kept: Vec<usize> = (0..rank).filter(|a| !collapsed_slice_axes.contains(a)).collect();
    let idx_names = names(indices);
    let (mut dims, mut nm) = (Vec::with_capacity(out_rank), Vec::with_capacity(out_rank));
    let (mut next_offset, mut next_batch) = (kept.iter(), batch_axes.iter());
    for pos in 0..out_rank {
        let (d, n) = if offset_output_axes.contains(&pos) {
            let a = *next_offset.next().ok_or_else(|| Error::invalid(op, "offset axes exhausted"))?;
            (slice_sizes[a], String::new())
        } else {
            let b = *next_batch.next().ok_or_else(|| Error::invalid(op, "batch axes exhausted"))?;
            (indices.dims[b], idx_names[b].clone())
        };
        dims.push(d);
        nm.push(n);
    }
    Ok(make_shape(operand.dtype, dims, nm))
}

pub(super) fn scatter(op: &str, attrs: &Op, operand: &Shape, indices: &Shape, updates: &Shape) -> Result<Shape> {
    let Op::Scatter {
        kind,
        index_vector_axis,
        update_window_axes,
        inserted_window_axes,
        scatter_axes_to_operand_axes,
        ..
    } = attrs
    else {
        return Err(Error::invalid(op, "expected Scatter attributes"));
    };
    if !matches!(kind, ArithReduce::Sum | ArithReduce::Max | ArithReduce::Min) {
        bail!(op, "combiner must be Sum, Max or Min, got {}", kind_name(*kind));
    }
    check_reduce_dtype(op, "operand", *kind, operand.dtype)?;
    if updates.dtype != operand.dtype {
        bail!(op, "updates dtype {} differs from operand dtype {}", updates.dtype, operand.dtype);
    }
    check_index_dtype(op, "scatter_indices", indices.dtype)?;
    let rank = operand.rank();
    let (vector_size, batch_axes) = index_layout(op, indices, *index_vector_axis)?;
    check_index_map(op, "scatter_axes_to_operand_axes", scatter_axes_to_operand_axes, vector_size, rank)?;
    check_axes(op, "update_window_axes", update_window_axes, updates.rank(), true)?;
    check_axes(op, "inserted_window_axes", inserted_window_axes, rank, true)?;
    if update_window_axes.len() + batch_axes.len() != updates.rank() {
        bail!(
            op,
            "rank(updates) = {} must equal len(update_window_axes) = {} + the {} batch axes of scatter_indices {indices}",
            updates.rank(),
            update_window_axes.len(),
            batch_axes.len()
        );
    }
    if update_window_axes.len() + inserted_window_axes.len() != rank {
        bail!(
            op,
            "rank(operand) = {rank} must equal len(update_window_axes) = {} + len(inserted_window_axes) = {}",
            update_window_axes.len(),
            inserted_window_axes.len()
        );
    }
    // Window axes of updates pair, in order, with the operand axes that are not inserted.
    let window_operand_axes = (0..rank).filter(|a| !inserted_window_axes.contains(a));
    for (&ua, oa) in update_window_axes.iter().zip(window_operand_axes) {
        let (u, o) = (updates.dims[ua], operand.dims[oa]);
        let fits = match (u == DYNAMIC_DIM, o == DYNAMIC_DIM) {
            (false, false) => u <= o,
            (false, true) => u <= 1,
            (true, true) => unify(op, "update window axis", updates, ua, operand, oa).is_ok(),
            (true, false) => false,
        };
        if !fits {
            bail!(op, "update window axis {ua} of updates {updates} is larger than operand axis {oa} of {operand}");
        }
    }
    // The other updates axes are the scatter (batch) axes, equal to the batch axes of indices.
    let update_batch = (0..updates.rank()).filter(|a| !update_window_axes.contains(a));
    for (ua, &ia) in update_batch.zip(&batch_axes) {
        unify(op, "updates batch axis vs scatter_indices batch axis", updates, ua, indices, ia)?;
    }
    Ok(operand.clone())
}
