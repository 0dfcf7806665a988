//! Shape inference for windows, gather/scatter, dot, conv, FFT, batch norm, RNG, control flow,
//! collectives and fused ops.
//!
//! This file dispatches to one submodule per family and holds the helpers they share: operand
//! count checks, axis-list checks, and dimension unification (equal sizes; dynamic axes must
//! also agree on their names, §2).

#[path = "structured_control.rs"]
mod control;
#[path = "structured_fused.rs"]
mod fused;
#[path = "structured_index.rs"]
mod index;
#[path = "structured_linalg.rs"]
mod linalg;
#[path = "structured_window.rs"]
mod window;

use crate::bail;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::Module;
use crate::ir::op::{ArithReduce, Op};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

pub(super) fn infer(m: &Module, op: &Op, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    let name = op.op_type().to_string();
    let name = name.as_str();
    match op {
        Op::ReduceWindow { kind, window, strides, input_dilations, window_dilations, padding } => {
            count(name, inputs, 1)?;
            let cfg = window::WindowConfig { window, strides, input_dilations, window_dilations, padding };
            window::reduce_window(name, *kind, inputs[0], &cfg).map(|s| vec![s])
        }
        Op::SelectAndScatter { kind, window, strides, padding } => {
            count(name, inputs, 2)?;
            window::select_and_scatter(name, *kind, inputs[0], inputs[1], window, strides, padding).map(|s| vec![s])
        }
        Op::Gather { .. } => {
            count(name, inputs, 2)?;
            index::gather(name, op, inputs[0], inputs[1]).map(|s| vec![s])
        }
        Op::Scatter { .. } => {
            count(name, inputs, 3)?;
            index::scatter(name, op, inputs[0], inputs[1], inputs[2]).map(|s| vec![s])
        }
        Op::DotGeneral { .. } => {
            count(name, inputs, 2)?;
            linalg::dot_general(name, op, inputs[0], inputs[1]).map(|s| vec![s])
        }
        Op::ConvGeneral { .. } => {
            count(name, inputs, 2)?;
            linalg::conv_general(name, op, inputs[0], inputs[1]).map(|s| vec![s])
        }
        Op::Fft { fft_type, lengths } => {
            count(name, inputs, 1)?;
            linalg::fft(name, *fft_type, lengths, inputs[0]).map(|s| vec![s])
        }
        Op::BatchNormInference { epsilon, feature_axis } => {
            count(name, inputs, 5)?;
            let layout = linalg::BatchNormOperands { params: &[1, 2, 3, 4], grad: None, stats: false };
            linalg::batch_norm(name, *epsilon, *feature_axis, inputs, layout)
        }
        Op::BatchNormTraining { epsilon, feature_axis } => {
            count(name, inputs, 3)?;
            let layout = linalg::BatchNormOperands { params: &[1, 2], grad: None, stats: true };
            linalg::batch_norm(name, *epsilon, *feature_axis, inputs, layout)
        }
        Op::BatchNormGradient { epsilon, feature_axis } => {
            count(name, inputs, 5)?;
            let layout = linalg::BatchNormOperands { params: &[1, 2, 3], grad: Some(4), stats: true };
            linalg::batch_norm(name, *epsilon, *feature_axis, inputs, layout)
        }
        Op::RngBitGenerator { shape } => {
            count(name, inputs, 1)?;
            linalg::rng_bit_generator(name, inputs[0], shape)
        }
        Op::Call { func } => control::call(name, m, *func, inputs),
        Op::Sort { comparator, axis, .. } => control::sort(name, m, *comparator, *axis, inputs),
        Op::While { cond, body } => control::while_(name, m, *cond, *body, inputs),
        Op::If { then_branch, else_branch } => control::if_(name, m, *then_branch, *else_branch, inputs),
        Op::AllReduce { kind, replica_groups } => control::all_reduce(name, *kind, replica_groups, inputs),
        Op::FusedSoftmax { .. }
        | Op::FusedGelu { .. }
        | Op::FusedLayerNorm { .. }
        | Op::FusedDense { .. }
        | Op::FusedScaledDotProductAttention { .. }
        | Op::FusedScaledDotProductAttentionVjp { .. }
        | Op::FusedQuantizedDense { .. }
        | Op::QuantizedEmbeddingLookup { .. }
        | Op::FusedAttentionQkvProjection { .. } => fused::infer(name, op, inputs),
        _ => Err(Error::invalid(name, "not a structured op (internal dispatch error)")),
    }
}

/// Checks the number of operands.
fn count(op: &str, inputs: &[&Shape], n: usize) -> Result<()> {
    if inputs.len() != n {
        bail!(op, "expects {n} operand(s), got {}", inputs.len());
    }
    Ok(())
}

/// Checks an axis list: every entry `< bound`, no repeats and, if `ascending`, strictly increasing.
fn check_axes(op: &str, what: &str, axes: &[usize], bound: usize, ascending: bool) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        if a >= bound {
            bail!(op, "{what} {axes:?}: axis {a} out of range [0, {bound})");
        }
        if axes[..i].contains(&a) {
            bail!(op, "{what} {axes:?}: axis {a} repeated");
        }
        if ascending && i > 0 && axes[i - 1] > a {
            bail!(op, "{what} {axes:?} must be in ascending order");
        }
    }
    Ok(())
}

/// Axis names of a shape as owned strings (`""` for unnamed axes).
fn names(s: &Shape) -> Vec<String> {
    (0..s.rank()).map(|i| s.axis_name(i).to_string()).collect()
}

/// A shape from dims and names (all-empty names ⇒ no names).
fn make_shape(dtype: DType, dims: Vec<i64>, names: Vec<String>) -> Shape {
    let axis_names = if names.iter().all(|n| n.is_empty()) { None } else { Some(names) };
    Shape { dtype, dims, axis_names }
}

/// Renders a dimension for messages (`?` for dynamic, with its name).
fn dim_str(d: i64, name: &str) -> String {
    match (d == DYNAMIC_DIM, name.is_empty()) {
        (true, _) => format!("{name}=?"),
        (false, true) => d.to_string(),
        (false, false) => format!("{name}={d}"),
    }
}

/// Unifies two axes that must have the same size: `(a.dims[ai], b.dims[bi])`. Sizes must be
/// equal; for dynamic axes the names follow §2 ("" + x → x, x + x → x, x + y and "?" → error);
/// for static axes the first non-empty name wins. Returns the unified (dim, name).
fn unify(op: &str, what: &str, a: &Shape, ai: usize, b: &Shape, bi: usize) -> Result<(i64, String)> {
    let (da, na) = (a.dims[ai], a.axis_name(ai));
    let (db, nb) = (b.dims[bi], b.axis_name(bi));
    if da != db {
        bail!(op, "{what}: dimension {} of {a} and dimension {} of {b} differ", dim_str(da, na), dim_str(db, nb));
    }
    let name = if da == DYNAMIC_DIM {
        if na == "?" || nb == "?" || (!na.is_empty() && !nb.is_empty() && na != nb) {
            bail!(op, "{what}: dynamic axes {na:?} of {a} and {nb:?} of {b} cannot be unified");
        }
        if na.is_empty() { nb } else { na }
    } else if na.is_empty() {
        nb
    } else {
        na
    };
    Ok((da, name.to_string()))
}

/// Requires a non-negative static dim (for axes whose size the op must know at build time).
fn static_dim(op: &str, what: &str, s: &Shape, axis: usize) -> Result<i64> {
    let d = s.dims[axis];
    if d == DYNAMIC_DIM {
        bail!(op, "{what}: axis {axis} of {s} must be static");
    }
    Ok(d)
}

/// The name of an arithmetic reduction for messages.
fn kind_name(k: ArithReduce) -> &'static str {
    match k {
        ArithReduce::Sum => "Sum",
        ArithReduce::Product => "Product",
        ArithReduce::Max => "Max",
        ArithReduce::Min => "Min",
    }
}

/// Checks that `dtype` can be combined with `kind` (numeric, non-packed; Max/Min also
/// non-complex since complex numbers have no order here).
fn check_reduce_dtype(op: &str, what: &str, kind: ArithReduce, dtype: DType) -> Result<()> {
    if !dtype.is_numeric() {
        bail!(op, "{what} has dtype {dtype}; a numeric (non-packed int, float or complex) dtype is required");
    }
    if dtype.is_complex() && matches!(kind, ArithReduce::Max | ArithReduce::Min) {
        bail!(op, "{what} has dtype {dtype}: {} is not defined on complex numbers", kind_name(kind));
    }
    Ok(())
}

/// Checks that `dtype` is a usable (non-packed) integer dtype for indices.
fn check_index_dtype(op: &str, what: &str, dtype: DType) -> Result<()> {
    if !dtype.is_int() || dtype.is_packed() {
        bail!(op, "{what} has dtype {dtype}; an integer dtype (8 to 64 bits) is required");
    }
    Ok(())
}
