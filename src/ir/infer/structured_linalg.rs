//! Shape inference for DotGeneral, ConvGeneral, FFT (§4.8), batch norm (§4.9) and RNGBitGenerator (§4.10).

use super::window::{AxisWindow, checked_window_count};
use super::{check_axes, make_shape, names, static_dim, unify};
use crate::bail;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{FftType, Op};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// Checks an optional dtype of a DotGeneral config (numeric, non-packed).
fn check_config_dtype(op: &str, what: &str, d: Option<DType>) -> Result<()> {
    match d {
        Some(d) if !d.is_numeric() => bail!(op, "{what} {d} is not a numeric dtype"),
        _ => Ok(()),
    }
}

pub(super) fn dot_general(op: &str, attrs: &Op, lhs: &Shape, rhs: &Shape) -> Result<Shape> {
    let Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, accumulator_dtype, output_dtype } =
        attrs
    else {
        return Err(Error::invalid(op, "expected DotGeneral attributes"));
    };
    if lhs.dtype != rhs.dtype {
        bail!(op, "lhs dtype {} differs from rhs dtype {}", lhs.dtype, rhs.dtype);
    }
    if !lhs.dtype.is_numeric() {
        bail!(op, "operand dtype {} is not numeric", lhs.dtype);
    }
    check_config_dtype(op, "accumulator dtype", *accumulator_dtype)?;
    check_config_dtype(op, "output dtype", *output_dtype)?;
    if lhs_contracting.len() != rhs_contracting.len() {
        bail!(
            op,
            "lhs contracting axes {lhs_contracting:?} and rhs contracting axes {rhs_contracting:?} differ in length"
        );
    }
    if lhs_batch.len() != rhs_batch.len() {
        bail!(op, "lhs batch axes {lhs_batch:?} and rhs batch axes {rhs_batch:?} differ in length");
    }
    for (side, s, c, b) in [("lhs", lhs, lhs_contracting, lhs_batch), ("rhs", rhs, rhs_contracting, rhs_batch)] {
        let all: Vec<usize> = c.iter().chain(b.iter()).copied().collect();
        check_axes(op, &format!("{side} contracting+batch axes"), &all, s.rank(), false)?;
    }
    let (mut dims, mut nm) = (vec![], vec![]);
    for (&la, &ra) in lhs_contracting.iter().zip(rhs_contracting) {
        unify(op, &format!("contracting axes (lhs {la}, rhs {ra})"), lhs, la, rhs, ra)?;
    }
    for (&la, &ra) in lhs_batch.iter().zip(rhs_batch) {
        let (d, n) = unify(op, &format!("batch axes (lhs {la}, rhs {ra})"), lhs, la, rhs, ra)?;
        dims.push(d);
        nm.push(n);
    }
    for (s, c, b) in [(lhs, lhs_contracting, lhs_batch), (rhs, rhs_contracting, rhs_batch)] {
        for a in (0..s.rank()).filter(|a| !c.contains(a) && !b.contains(a)) {
            dims.push(s.dims[a]);
            nm.push(s.axis_name(a).to_string());
        }
    }
    Ok(make_shape(output_dtype.unwrap_or(lhs.dtype), dims, nm))
}

/// Takes a per-spatial-axis list (empty ⇒ the default) and checks each entry against `min`.
fn spatial_list(op: &str, what: &str, v: &[i64], s: usize, default: i64, min: i64) -> Result<Vec<i64>> {
    let v = if v.is_empty() { vec![default; s] } else { v.to_vec() };
    if v.len() != s {
        bail!(op, "{what} {v:?} must have one entry per spatial axis ({s})");
    }
    if let Some(bad) = v.iter().find(|&&x| x < min) {
        bail!(op, "{what} {v:?}: entry {bad} must be ≥ {min}");
    }
    Ok(v)
}

/// Checks that `batch`, `channels` and `spatial` form a permutation of `0..rank`.
fn check_permutation(
    op: &str,
    what: &str,
    batch: usize,
    channels: usize,
    spatial: &[usize],
    rank: usize,
) -> Result<()> {
    let all: Vec<usize> = [batch, channels].into_iter().chain(spatial.iter().copied()).collect();
    if all.len() != rank {
        bail!(op, "{what} axes {all:?} must cover all {rank} axes");
    }
    check_axes(op, &format!("{what} axes"), &all, rank, false)
}

pub(super) fn conv_general(op: &str, attrs: &Op, input: &Shape, kernel: &Shape) -> Result<Shape> {
    let Op::ConvGeneral { axes, strides, padding, input_dilations, kernel_dilations, channel_groups, batch_groups } =
        attrs
    else {
        return Err(Error::invalid(op, "expected ConvGeneral attributes"));
    };
    if input.dtype != kernel.dtype {
        bail!(op, "input dtype {} differs from kernel dtype {}", input.dtype, kernel.dtype);
    }
    if !input.dtype.is_numeric() {
        bail!(op, "input dtype {} is not numeric", input.dtype);
    }
    let rank = input.rank();
    if rank < 3 || kernel.rank() != rank {
        bail!(op, "input {input} and kernel {kernel} must have the same rank ≥ 3");
    }
    let s = rank - 2;
    for (what, sp) in
        [("input", &axes.input_spatial), ("kernel", &axes.kernel_spatial), ("output", &axes.output_spatial)]
    {
        if sp.len() != s {
            bail!(op, "{what} spatial axes {sp:?} must have {s} entries");
        }
    }
    check_permutation(op, "input", axes.input_batch, axes.input_channels, &axes.input_spatial, rank)?;
    check_permutation(
        op,
        "kernel",
        axes.kernel_input_channels,
        axes.kernel_output_channels,
        &axes.kernel_spatial,
        rank,
    )?;
    check_permutation(op, "output", axes.output_batch, axes.output_channels, &axes.output_spatial, rank)?;
    let strides = spatial_list(op, "strides", strides, s, 1, 1)?;
    let in_dil = spatial_list(op, "input dilations", input_dilations, s, 1, 1)?;
    let k_dil = spatial_list(op, "kernel dilations", kernel_dilations, s, 1, 1)?;
    let padding = if padding.is_empty() { vec![(0, 0); s] } else { padding.clone() };
    if padding.len() != s {
        bail!(op, "padding {padding:?} must have one (low, high) pair per spatial axis ({s})");
    }
    let (cg, bg) = ((*channel_groups).max(1), (*batch_groups).max(1));
    if cg > 1 && bg > 1 {
        bail!(op, "channel_groups {cg} and batch_groups {bg}: at most one of them may be > 1");
    }
    for i in 0..rank {
        if kernel.dims[i] == DYNAMIC_DIM {
            bail!(op, "kernel {kernel} must have a static shape");
        }
    }
    let cin = static_dim(op, "input channels", input, axes.input_channels)?;
    let cin_k = kernel.dims[axes.kernel_input_channels];
    let cout = kernel.dims[axes.kernel_output_channels];
    if cin % cg != 0 || cout % cg != 0 || cin as i128 != cin_k as i128 * cg as i128 {
        bail!(
            op,
            "channels: input has {cin}, kernel has {cin_k} input and {cout} output channels, channel_groups {cg}: \
             need input = kernel input × groups and both input and output channels divisible by the groups"
        );
    }
    let batch = input.dims[axes.input_batch];
    let mut batch_name = input.axis_name(axes.input_batch).to_string();
    let out_batch = if batch == DYNAMIC_DIM {
        if bg > 1 {
            bail!(op, "batch_groups {bg} need a static input batch axis (input {input})");
        }
        DYNAMIC_DIM
    } else {
        if batch % bg != 0 || cout % bg != 0 {
            bail!(op, "batch {batch} and output channels {cout} must be divisible by batch_groups {bg}");
        }
        if bg > 1 {
            batch_name.clear();
        }
        batch / bg
    };
    let mut dims = vec![0; rank];
    let mut nm = vec![String::new(); rank];
    dims[axes.output_batch] = out_batch;
    nm[axes.output_batch] = batch_name;
    dims[axes.output_channels] = cout;
    for i in 0..s {
        let (ia, ka, oa) = (axes.input_spatial[i], axes.kernel_spatial[i], axes.output_spatial[i]);
        let (d, k) = (input.dims[ia], kernel.dims[ka]);
        let (lo, hi) = padding[i];
        if d == DYNAMIC_DIM {
            if (k, strides[i], in_dil[i], k_dil[i], lo, hi) != (1, 1, 1, 1, 0, 0) {
                bail!(op, "spatial axis {ia} of input {input} is dynamic: only a size-preserving window is allowed");
            }
            dims[oa] = DYNAMIC_DIM;
            nm[oa] = input.axis_name(ia).to_string();
            continue;
        }
        let geometry = AxisWindow {
            dim: d,
            padding: (lo, hi),
            in_dil: in_dil[i],
            window: k,
            win_dil: k_dil[i],
            stride: strides[i],
        };
        dims[oa] = checked_window_count(op, ia, &geometry)?;
    }
    Ok(make_shape(input.dtype, dims, nm))
}

pub(super) fn fft(op: &str, fft_type: FftType, lengths: &[i64], x: &Shape) -> Result<Shape> {
    let n = lengths.len();
    if !(1..=3).contains(&n) {
        bail!(op, "fft_length {lengths:?} must have 1 to 3 entries");
    }
    if let Some(l) = lengths.iter().find(|&&l| l < 1) {
        bail!(op, "fft_length {lengths:?}: entry {l} must be ≥ 1");
    }
    let rank = x.rank();
    if rank < n {
        bail!(op, "operand {x} has fewer axes than fft_length {lengths:?}");
    }
    let first = rank - n;
    for a in first..rank {
        static_dim(op, "transformed axis", x, a)?;
    }
    let (in_ok, out_dtype) = match fft_type {
        FftType::Forward | FftType::Inverse => (x.dtype.is_complex(), x.dtype),
        FftType::ForwardReal => (
            matches!(x.dtype, DType::Float32 | DType::Float64),
            if x.dtype == DType::Float64 { DType::Complex128 } else { DType::Complex64 },
        ),
        FftType::InverseReal => (x.dtype.is_complex(), x.dtype.real_dtype()),
    };
    if !in_ok {
        let want = if fft_type == FftType::ForwardReal { "Float32 or Float64" } else { "Complex64 or Complex128" };
        bail!(op, "{fft_type:?} needs a {want} operand, got {}", x.dtype);
    }
    let last = lengths[n - 1];
    let mut expect = lengths.to_vec();
    if fft_type == FftType::InverseReal {
        expect[n - 1] = last / 2 + 1;
    }
    if x.dims[first..] != expect[..] {
        bail!(op, "{fft_type:?} with fft_length {lengths:?} needs trailing dims {expect:?}, operand is {x}");
    }
    let mut dims = x.dims.clone();
    match fft_type {
        FftType::ForwardReal => dims[rank - 1] = last / 2 + 1,
        FftType::InverseReal => dims[rank - 1] = last,
        _ => {}
    }
    let mut nm = names(x);
    if matches!(fft_type, FftType::ForwardReal | FftType::InverseReal) {
        nm[rank - 1].clear();
    }
    Ok(make_shape(out_dtype, dims, nm))
}

/// Batch-norm shapes. `x` is `inputs[0]`; `params` are the operand positions of the 1-D
/// per-feature tensors; `grad` the position of `grad_out` (same shape as x) if any. The first
/// output has x's shape; with `stats` (training, gradient) two `[features]` outputs follow.
pub(super) struct BatchNormOperands<'a> {
    pub params: &'a [usize],
    pub grad: Option<usize>,
    pub stats: bool,
}

pub(super) fn batch_norm(
    op: &str,
    epsilon: f32,
    feature_axis: usize,
    inputs: &[&Shape],
    layout: BatchNormOperands,
) -> Result<Vec<Shape>> {
    let BatchNormOperands { params, grad, stats } = layout;
    let x = inputs[0];
    const PARAM_NAMES: [&str; 5] = ["x", "scale", "offset", "mean", "variance"];
    const GRAD_PARAM_NAMES: [&str; 5] = ["x", "scale", "mean", "variance", "grad_out"];
    let label = |i: usize| if grad.is_some() { GRAD_PARAM_NAMES[i] } else { PARAM_NAMES[i] };
    if !x.dtype.is_float() {
        bail!(op, "operand x has dtype {}; a float dtype is required", x.dtype);
    }
    if !epsilon.is_finite() || epsilon < 0.0 {
        bail!(op, "epsilon {epsilon} must be finite and ≥ 0");
    }
    if feature_axis >= x.rank() {
        bail!(op, "feature_axis {feature_axis} out of range for x {x}");
    }
    let mut feature = (x.dims[feature_axis], x.axis_name(feature_axis).to_string());
    for &p in params {
        let s = inputs[p];
        if s.dtype != x.dtype || s.rank() != 1 {
            bail!(op, "{} must be a 1-D {} tensor of the feature axis, got {s}", label(p), x.dtype);
        }
        feature = unify(op, label(p), s, 0, x, feature_axis)?;
    }
    if let Some(g) = grad {
        let s = inputs[g];
        if s.dtype != x.dtype || s.rank() != x.rank() {
            bail!(op, "grad_out {s} must have the shape of x {x}");
        }
        for a in 0..x.rank() {
            unify(op, "grad_out vs x", s, a, x, a)?;
        }
    }
    let per_feature = make_shape(x.dtype, vec![feature.0], vec![feature.1]);
    if stats { Ok(vec![x.clone(), per_feature.clone(), per_feature]) } else { Ok(vec![x.clone()]) }
}

pub(super) fn rng_bit_generator(op: &str, state: &Shape, shape: &Shape) -> Result<Vec<Shape>> {
    if state.dtype != DType::Uint64 || !(state.dims == [3] || state.dims == [2]) {
        bail!(op, "state must be Uint64[3] or Uint64[2], got {state}");
    }
    let d = shape.dtype;
    if d.is_bool() || d.is_packed() || d.is_complex() || !(d.is_int() || d.is_float()) {
        bail!(op, "random values of dtype {d} are not supported (use an integer or float dtype)");
    }
    shape.validate_for(op, "values shape")?;
    if shape.is_dynamic() {
        bail!(op, "values shape {shape} must be static");
    }
    Ok(vec![state.clone(), shape.clone()])
}
