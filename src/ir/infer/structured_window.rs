//! Shape inference for the window ops: ReduceWindow and SelectAndScatter (§4.6).

use super::{check_reduce_dtype, kind_name, make_shape, names};
use crate::bail;
use crate::error::{Error, Result};
use crate::ir::op::ArithReduce;
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// The window attributes of ReduceWindow; each list is empty (defaults) or has one entry per axis.
pub(super) struct WindowConfig<'a> {
    pub window: &'a [i64],
    pub strides: &'a [i64],
    pub input_dilations: &'a [i64],
    pub window_dilations: &'a [i64],
    pub padding: &'a [(i64, i64)],
}

/// Number of window positions: `floor((padded − dilated window) / stride) + 1`, or 0 when the
/// dilated window is larger than the padded input (XLA; not an error).
fn window_count(padded: i64, eff_window: i64, stride: i64) -> i64 {
    if padded < eff_window { 0 } else { (padded - eff_window) / stride + 1 }
}

/// The window geometry of one spatial axis, for [`checked_window_count`].
pub(super) struct AxisWindow {
    /// Input extent (static, ≥ 0).
    pub dim: i64,
    /// Low and high padding (may be negative for ConvGeneral).
    pub padding: (i64, i64),
    /// Input dilation (≥ 1).
    pub in_dil: i64,
    /// Window (kernel) extent (≥ 0).
    pub window: i64,
    /// Window (kernel) dilation (≥ 1).
    pub win_dil: i64,
    /// Stride (≥ 1).
    pub stride: i64,
}

/// Number of window positions along `axis`, computed in i128 and bounded so that every quantity
/// the kernels derive from it fits in i64. Errors name `op`, the axis and the values when
/// `|lo| + |hi| + dilated input` or the dilated window does not fit in i64.
///
/// Why this makes the kernels' index arithmetic safe: they compute `padded = lo + hi +
/// dilated(d, in_dil)` (every partial sum is bounded by `|lo| + |hi| + dilated ≤ i64::MAX`), the
/// dilated window (checked here), and for output position `p < count` and window offset `q <
/// window` the source position `p·stride + q·win_dil − lo`. Since `p·stride ≤ padded − eff_window`
/// and `q·win_dil ≤ eff_window − 1`, the sum before subtracting `lo` is in `[0, padded − 1]`, and
/// after it in `[−lo, hi + dilated − 1]`, both within `±(|lo| + |hi| + dilated)` — so in i64.
pub(super) fn checked_window_count(op: &str, axis: usize, w: &AxisWindow) -> Result<i64> {
    let AxisWindow { dim, padding: (lo, hi), in_dil, window, win_dil, stride } = *w;
    if stride < 1 || in_dil < 1 || win_dil < 1 {
        bail!(op, "axis {axis}: stride {stride}, input dilation {in_dil} and window dilation {win_dil} must be ≥ 1");
    }
    let dilated128 = |n: i64, dil: i64| if n <= 0 { 0 } else { (n as i128 - 1) * dil as i128 + 1 };
    let dil_in = dilated128(dim, in_dil);
    let extent = (lo as i128).abs() + (hi as i128).abs() + dil_in;
    if extent > i64::MAX as i128 {
        return Err(Error::invalid(
            op,
            format!(
                "axis {axis}: padded input extent overflows (dim {dim}, input dilation {in_dil}, padding ({lo}, {hi}))"
            ),
        ));
    }
    let eff_window = dilated128(window, win_dil);
    if eff_window > i64::MAX as i128 {
        return Err(Error::invalid(
            op,
            format!("axis {axis}: dilated window extent overflows (window {window}, window dilation {win_dil})"),
        ));
    }
    let padded = lo as i128 + hi as i128 + dil_in;
    Ok(window_count(padded as i64, eff_window as i64, stride))
}

/// Takes list `v` if it has `rank` entries, the default when empty, else errors.
fn per_axis<T: Copy>(op: &str, what: &str, v: &[T], rank: usize, default: impl Fn(usize) -> T) -> Result<Vec<T>> {
    if v.is_empty() {
        return Ok((0..rank).map(default).collect());
    }
    if v.len() != rank {
        bail!(op, "{what} has {} entries for an operand of rank {rank}", v.len());
    }
    Ok(v.to_vec())
}

pub(super) fn reduce_window(op: &str, kind: ArithReduce, x: &Shape, cfg: &WindowConfig) -> Result<Shape> {
    check_reduce_dtype(op, "operand", kind, x.dtype)?;
    let rank = x.rank();
    let window = per_axis(op, "window dimensions", cfg.window, rank, |_| 1)?;
    let strides = per_axis(op, "strides", cfg.strides, rank, |i| window[i])?;
    let in_dil = per_axis(op, "input dilations", cfg.input_dilations, rank, |_| 1)?;
    let w_dil = per_axis(op, "window dilations", cfg.window_dilations, rank, |_| 1)?;
    let padding = per_axis(op, "padding", cfg.padding, rank, |_| (0, 0))?;
    let mut dims = Vec::with_capacity(rank);
    let mut nm = names(x);
    for i in 0..rank {
        let (w, s, id, wd, (lo, hi)) = (window[i], strides[i], in_dil[i], w_dil[i], padding[i]);
        if w < 1 {
            bail!(op, "window dimension {i} is {w}; it must be ≥ 1");
        }
        if s < 1 {
            bail!(op, "stride of axis {i} is {s}; it must be ≥ 1");
        }
        if id < 1 || wd < 1 {
            bail!(op, "dilations of axis {i} are (input {id}, window {wd}); they must be ≥ 1");
        }
        if lo < 0 || hi < 0 {
            bail!(op, "padding of axis {i} is ({lo}, {hi}); it must be ≥ 0");
        }
        let d = x.dims[i];
        let identity = (w, s, id, wd, lo, hi) == (1, 1, 1, 1, 0, 0);
        if !identity {
            // Only axes the window leaves untouched keep their name.
            nm[i].clear();
        }
        if d == DYNAMIC_DIM {
            if !identity {
                bail!(
                    op,
                    "axis {i} of {x} is dynamic: only a window of 1 with stride 1, no padding or dilation is allowed"
                );
            }
            dims.push(DYNAMIC_DIM);
            continue;
        }
        let geometry = AxisWindow { dim: d, padding: (lo, hi), in_dil: id, window: w, win_dil: wd, stride: s };
        dims.push(checked_window_count(op, i, &geometry)?);
    }
    Ok(make_shape(x.dtype, dims, nm))
}

pub(super) fn select_and_scatter(
    op: &str,
    kind: ArithReduce,
    operand: &Shape,
    source: &Shape,
    window: &[i64],
    strides: &[i64],
    padding: &[(i64, i64)],
) -> Result<Shape> {
    if !matches!(kind, ArithReduce::Max | ArithReduce::Min) {
        bail!(op, "selection must be Max or Min, got {}", kind_name(kind));
    }
    check_reduce_dtype(op, "operand", kind, operand.dtype)?;
    if operand.is_dynamic() || source.is_dynamic() {
        bail!(op, "operand {operand} and source {source} must have static shapes");
    }
    if source.dtype != operand.dtype {
        bail!(op, "source dtype {} differs from operand dtype {}", source.dtype, operand.dtype);
    }
    let cfg = WindowConfig { window, strides, input_dilations: &[], window_dilations: &[], padding };
    let windows = reduce_window(op, kind, operand, &cfg)?;
    if source.dims != windows.dims {
        bail!(
            op,
            "source has dims {:?} but the windows over operand {operand} give {:?} (they must be equal)",
            source.dims,
            windows.dims
        );
    }
    Ok(operand.clone())
}
