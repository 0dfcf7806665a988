//! Pooling: `MaxPool`, `AveragePool`, `LpPool` onto `ReduceWindow`, and their global forms
//! onto reductions.

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::op::{ArithReduce, BinaryOp, CompareOp, Op, PadAxis, ReduceKind, UnaryOp};
use crate::ir::shape::Shape;

use super::conv::{AutoPad, MAX_WINDOW_ATTR, auto_pad, pads_attr, spatial_attr, split_same};
use super::{bin, const_of, dims_of, mean_keep, reduce_keep, require_float, un};
use crate::onnx::graph::{Ctx, Node};

/// The window of one spatial axis after `auto_pad` / `ceil_mode` are resolved.
#[derive(Clone, Copy, Debug)]
struct AxisWin {
    /// Input extent.
    dim: i64,
    kernel: i64,
    stride: i64,
    dilation: i64,
    /// Explicit (or `auto_pad`) padding.
    lo: i64,
    hi: i64,
    /// Output extent.
    out: i64,
}

impl AxisWin {
    fn eff(&self) -> i64 {
        (self.kernel - 1) * self.dilation + 1
    }
    /// Cells past the padded input that the last window reaches (ceil mode).
    fn extra(&self) -> i64 {
        ((self.out - 1) * self.stride + self.eff() - (self.dim + self.lo + self.hi)).max(0)
    }
    /// Cells of window `o` whose padded position `o·stride + j·dilation` (`0 ≤ j < kernel`)
    /// lies in `[from, to)`.
    fn count_in(&self, o: i64, from: i64, to: i64) -> i64 {
        let base = o * self.stride;
        // First j with base + j·d ≥ bound, clamped to [0, kernel].
        let first_at = |bound: i64| -> i64 {
            let need = bound - base;
            let j = if need <= 0 { 0 } else { (need + self.dilation - 1) / self.dilation };
            j.min(self.kernel)
        };
        (first_at(to) - first_at(from)).max(0)
    }
}

/// Reads the window attributes shared by the pooling ops for an input of dims `xd`.
fn window(n: &Node<'_>, xd: &[i64], dilations_allowed: bool) -> Result<Vec<AxisWin>> {
    if xd.len() < 3 {
        return Err(n.invalid(format!("input {xd:?} must be [N, C, spatial...]")));
    }
    let s = xd.len() - 2;
    let kernel = n.attr_ints("kernel_shape")?.ok_or_else(|| n.invalid("attribute \"kernel_shape\" is required"))?;
    if kernel.len() != s || kernel.iter().any(|&k| !(1..=MAX_WINDOW_ATTR).contains(&k)) {
        return Err(n.invalid(format!("kernel_shape {kernel:?} must have {s} entries in [1, {MAX_WINDOW_ATTR}]")));
    }
    let strides = spatial_attr(n, "strides", s, 1, 1)?;
    let dilations = if dilations_allowed { spatial_attr(n, "dilations", s, 1, 1)? } else { vec![1; s] };
    let ceil = n.attr_i_or("ceil_mode", 0)? != 0;
    let mode = auto_pad(n)?;
    let pads = pads_attr(n, s)?;
    let mut out = Vec::with_capacity(s);
    for i in 0..s {
        let mut w = AxisWin {
            dim: xd[2 + i],
            kernel: kernel[i],
            stride: strides[i],
            dilation: dilations[i],
            lo: 0,
            hi: 0,
            out: 0,
        };
        let eff = w.eff();
        match mode {
            AutoPad::SameUpper | AutoPad::SameLower => {
                w.out = (w.dim + w.stride - 1) / w.stride;
                (w.lo, w.hi) = split_same(mode, (w.out - 1) * w.stride + eff - w.dim);
            }
            AutoPad::NotSet | AutoPad::Valid => {
                if mode == AutoPad::NotSet {
                    (w.lo, w.hi) = pads.as_ref().map_or((0, 0), |p| p[i]);
                }
                let span = w.dim + w.lo + w.hi - eff;
                if span < 0 {
                    return Err(n.invalid(format!(
                        "spatial axis {i}: the window ({eff} cells) is larger than the padded input ({})",
                        w.dim + w.lo + w.hi
                    )));
                }
                w.out = if ceil { (span + w.stride - 1) / w.stride + 1 } else { span / w.stride + 1 };
                // The last window must start inside the input or its begin padding.
                if ceil && (w.out - 1) * w.stride >= w.dim + w.lo {
                    w.out -= 1;
                }
            }
        }
        out.push(w);
    }
    Ok(out)
}

/// `ReduceWindow` over the spatial axes with the windows' padding (identity-filled), cropped
/// to the ONNX output size.
fn reduce_window(ctx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId, kind: ArithReduce, w: &[AxisWin]) -> Result<ValueId> {
    let mut window = vec![1, 1];
    let mut strides = vec![1, 1];
    let mut dil = vec![1, 1];
    let mut padding = vec![(0, 0), (0, 0)];
    for a in w {
        window.push(a.kernel);
        strides.push(a.stride);
        dil.push(a.dilation);
        padding.push((a.lo, a.hi + a.extra()));
    }
    let rank = window.len();
    let op = Op::ReduceWindow { kind, window, strides, input_dilations: vec![1; rank], window_dilations: dil, padding };
    let y = ctx.emit1(op, &[x])?;
    let yd = dims_of(ctx, n, y)?;
    let mut limits = yd.clone();
    for (i, a) in w.iter().enumerate() {
        limits[2 + i] = a.out.min(yd[2 + i]);
    }
    if limits == yd {
        return Ok(y);
    }
    ctx.emit1(Op::Slice { starts: vec![0; rank], limits, strides: vec![1; rank] }, &[y])
}

/// `MaxPool(X)`: the maximum of each window; padding never wins. The optional `Indices`
/// output is the flat index (into X, batch and channel included) of the first maximum of each
/// window in row-major window order; `storage_order` = 1 numbers the spatial axes column-major.
pub(super) fn max_pool(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = ctx.dtype(x);
    if !(dt.is_float() || (dt.is_int() && !dt.is_packed())) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let storage_order = n.attr_i_or("storage_order", 0)?;
    if !(0..=1).contains(&storage_order) {
        return Err(n.invalid(format!("storage_order {storage_order}")));
    }
    let xd = dims_of(ctx, n, x)?;
    let w = window(n, &xd, true)?;
    let y = reduce_window(ctx, n, x, ArithReduce::Max, &w)?;
    if !n.output_wanted(1) {
        return Ok(vec![y]);
    }
    let idx = max_indices(ctx, n, x, y, &xd, &w, storage_order == 1)?;
    Ok(vec![y, idx])
}

/// The `Indices` output of `MaxPool`: for each window offset (in row-major order, last first so
/// that the first match wins), the positions where the shifted input equals the maximum and
/// lies inside the input take that offset's flat index.
fn max_indices(
    ctx: &mut Ctx<'_>,
    n: &Node<'_>,
    x: ValueId,
    y: ValueId,
    xd: &[i64],
    w: &[AxisWin],
    column_major: bool,
) -> Result<ValueId> {
    let s = w.len();
    let cells: i64 = w.iter().map(|a| a.kernel).product();
    if cells > 1024 {
        return Err(n.unsupported(format!("the Indices output for windows of {cells} cells (at most 1024)")));
    }
    let dt = ctx.dtype(x);
    let rank = s + 2;
    // Pad with the lowest value so that every shifted slice has the output's shape.
    let fill = if dt.is_float() {
        f64::NEG_INFINITY
    } else if dt.is_unsigned() {
        0.0
    } else {
        i64::MIN as f64
    };
    let fill = ctx.scalar(dt, fill)?;
    let mut axes = vec![PadAxis::default(); 2];
    axes.extend(w.iter().map(|a| PadAxis { start: a.lo, end: a.hi + a.extra(), interior: 0 }));
    let xp = ctx.emit1(Op::Pad { axes }, &[x, fill])?;
    // Element offsets of the spatial axes in X (row-major, or column-major when asked).
    let sp = &xd[2..];
    let mut step = vec![0i64; s];
    let mut acc = 1i64;
    for i in 0..s {
        let a = if column_major { i } else { s - 1 - i };
        step[a] = acc;
        acc *= sp[a];
    }
    let plane = acc;
    let (nb, c) = (xd[0], xd[1]);
    let base: Vec<i64> = (0..nb * c).map(|k| k * plane).collect();
    let mut bd = vec![1i64; rank];
    bd[0] = nb;
    bd[1] = c;
    let base = ctx.const_i64(&base, &bd)?;
    let mut res = ctx.const_i64(&[-1], &[])?;
    let kernel: Vec<i64> = w.iter().map(|a| a.kernel).collect();
    for q in cartesian(&kernel).iter().rev() {
        // The slice of the padded input this offset sees.
        let mut starts = vec![0i64, 0];
        let mut limits = vec![nb, c];
        let mut strides = vec![1i64, 1];
        for (i, a) in w.iter().enumerate() {
            let st = q[i] * a.dilation;
            starts.push(st);
            limits.push(st + (a.out - 1) * a.stride + 1);
            strides.push(a.stride);
        }
        let v = ctx.emit1(Op::Slice { starts, limits, strides }, &[xp])?;
        let mut hit = ctx.emit1(Op::Compare { dir: CompareOp::Equal, total_order: false }, &[v, y])?;
        // Flat index = base(n, c) + Σ position·step, one term per spatial axis; cells in the
        // padding never match.
        let mut idx = base;
        for (i, a) in w.iter().enumerate() {
            let pos: Vec<i64> = (0..a.out).map(|o| o * a.stride + q[i] * a.dilation - a.lo).collect();
            let mut d = vec![1i64; rank];
            d[2 + i] = a.out;
            if pos.iter().any(|&p| p < 0 || p >= a.dim) {
                let valid: Vec<u8> = pos.iter().map(|&p| u8::from(p >= 0 && p < a.dim)).collect();
                let m = ctx.constant(Shape::new(DType::Bool, &d), valid)?;
                hit = bin(ctx, BinaryOp::LogicalAnd, hit, m)?;
            }
            let terms: Vec<i64> = pos.iter().map(|&p| p.min(a.dim - 1).max(0) * step[i]).collect();
            let t = ctx.const_i64(&terms, &d)?;
            idx = bin(ctx, BinaryOp::Add, idx, t)?;
        }
        res = ctx.emit1(Op::Where, &[hit, idx, res])?;
    }
    Ok(res)
}

/// Every index tuple below `dims`, row-major.
fn cartesian(dims: &[i64]) -> Vec<Vec<i64>> {
    let mut out = vec![vec![]];
    for &d in dims {
        out = out.iter().flat_map(|p| (0..d).map(move |i| [p.clone(), vec![i]].concat())).collect();
    }
    out
}

/// The divisor of an average pool: per output position, the number of window cells inside the
/// input (`count_include_pad` = 0) or inside input + explicit padding (= 1). It is the product
/// of one constant per spatial axis (a scalar when the count does not vary along the axis).
fn pool_divisor(ctx: &mut Ctx<'_>, n: &Node<'_>, w: &[AxisWin], include_pad: bool, dt: DType) -> Result<ValueId> {
    let rank = w.len() + 2;
    let mut div: Option<ValueId> = None;
    let mut uniform = 1f64;
    for (i, a) in w.iter().enumerate() {
        let (from, to) = if include_pad { (0, a.lo + a.dim + a.hi) } else { (a.lo, a.lo + a.dim) };
        let per: Vec<f64> = (0..a.out).map(|o| a.count_in(o, from, to) as f64).collect();
        if per.iter().all(|&c| c == per[0]) {
            uniform *= per.first().copied().unwrap_or(1.0);
            continue;
        }
        let mut dims = vec![1i64; rank];
        dims[2 + i] = a.out;
        let c = const_of(ctx, n, dt, &dims, &per)?;
        div = Some(match div {
            None => c,
            Some(d) => bin(ctx, BinaryOp::Mul, d, c)?,
        });
    }
    let u = ctx.scalar(dt, uniform)?;
    match div {
        None => Ok(u),
        Some(d) if uniform == 1.0 => Ok(d),
        Some(d) => bin(ctx, BinaryOp::Mul, d, u),
    }
}

/// `AveragePool(X)`: window sums divided by the number of counted cells.
pub(super) fn average_pool(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = require_float(ctx, n, x)?;
    let include_pad = n.attr_i_or("count_include_pad", 0)? != 0;
    let xd = dims_of(ctx, n, x)?;
    let w = window(n, &xd, true)?;
    let sum = reduce_window(ctx, n, x, ArithReduce::Sum, &w)?;
    let div = pool_divisor(ctx, n, &w, include_pad, dt)?;
    Ok(vec![bin(ctx, BinaryOp::Div, sum, div)?])
}

/// `|x|^p`, with `p` ∈ {1, 2} as exact forms.
fn abs_pow(ctx: &mut Ctx<'_>, x: ValueId, p: i64) -> Result<ValueId> {
    match p {
        1 => un(ctx, UnaryOp::Abs, x),
        2 => bin(ctx, BinaryOp::Mul, x, x),
        _ => {
            let a = un(ctx, UnaryOp::Abs, x)?;
            let e = ctx.scalar(ctx.dtype(x), p as f64)?;
            bin(ctx, BinaryOp::Pow, a, e)
        }
    }
}

/// `s^(1/p)`.
fn root(ctx: &mut Ctx<'_>, s: ValueId, p: i64) -> Result<ValueId> {
    match p {
        1 => Ok(s),
        2 => un(ctx, UnaryOp::Sqrt, s),
        _ => {
            let e = ctx.scalar(ctx.dtype(s), 1.0 / p as f64)?;
            bin(ctx, BinaryOp::Pow, s, e)
        }
    }
}

/// The `p` attribute of the Lp ops (an int since opset 2).
fn lp_p(n: &Node<'_>) -> Result<i64> {
    let p = if n.opset < 2 {
        // Opset 1 declares `p` as a float.
        let f = n.attr_f_or("p", 2.0)?;
        if f.fract() != 0.0 {
            return Err(n.unsupported(format!("non-integer p {f}")));
        }
        f as i64
    } else {
        n.attr_i_or("p", 2)?
    };
    if p < 1 {
        return Err(n.invalid(format!("p {p} must be ≥ 1")));
    }
    Ok(p)
}

/// `LpPool(X)`: `(Σ |x|^p)^(1/p)` over each window (padding contributes 0).
pub(super) fn lp_pool(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require_float(ctx, n, x)?;
    let p = lp_p(n)?;
    let xd = dims_of(ctx, n, x)?;
    let w = window(n, &xd, true)?;
    let a = abs_pow(ctx, x, p)?;
    let s = reduce_window(ctx, n, a, ArithReduce::Sum, &w)?;
    Ok(vec![root(ctx, s, p)?])
}

/// The spatial axes of a global pool's input.
fn spatial_axes(ctx: &Ctx<'_>, n: &Node<'_>, x: ValueId) -> Result<Vec<usize>> {
    let r = ctx.rank(x);
    if r < 3 {
        return Err(n.invalid(format!("input of rank {r} must be [N, C, spatial...]")));
    }
    Ok((2..r).collect())
}

/// `GlobalAveragePool(X)`: the mean over all spatial axes (kept as size 1).
pub(super) fn global_average_pool(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require_float(ctx, n, x)?;
    let axes = spatial_axes(ctx, n, x)?;
    Ok(vec![mean_keep(ctx, n, x, &axes)?])
}

/// `GlobalMaxPool(X)`: the maximum over all spatial axes (kept as size 1).
pub(super) fn global_max_pool(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = ctx.dtype(x);
    if !(dt.is_float() || (dt.is_int() && !dt.is_packed())) {
        return Err(n.unsupported(format!("element type {dt}")));
    }
    let axes = spatial_axes(ctx, n, x)?;
    Ok(vec![reduce_keep(ctx, n, x, ReduceKind::Max, &axes)?])
}

/// `GlobalLpPool(X)`: the Lp norm over all spatial axes (kept as size 1).
pub(super) fn global_lp_pool(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    require_float(ctx, n, x)?;
    let p = lp_p(n)?;
    let axes = spatial_axes(ctx, n, x)?;
    let a = abs_pow(ctx, x, p)?;
    let s = reduce_keep(ctx, n, a, ReduceKind::Sum, &axes)?;
    Ok(vec![root(ctx, s, p)?])
}

#[cfg(test)]
mod tests {
    use super::AxisWin;

    #[test]
    fn count_in_matches_enumeration() {
        for kernel in 1..5 {
            for stride in 1..4 {
                for dilation in 1..4 {
                    let w = AxisWin { dim: 7, kernel, stride, dilation, lo: 2, hi: 1, out: 5 };
                    for o in 0..5 {
                        for (from, to) in [(0, 10), (2, 9), (3, 4), (5, 5), (8, 2)] {
                            let want =
                                (0..kernel).map(|j| o * stride + j * dilation).filter(|&p| p >= from && p < to).count()
                                    as i64;
                            assert_eq!(w.count_in(o, from, to), want, "{w:?} o={o} [{from}, {to})");
                        }
                    }
                }
            }
        }
    }
}
