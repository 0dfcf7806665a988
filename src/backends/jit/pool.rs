//! Fast kernel for pooling nodes of the "jit" plan (see [`super::fast`]): f32 ReduceWindow
//! (Max, Min, Sum) and SelectAndScatter (Max, Min) whose window spans at most two axes run on
//! [`crate::kernels::pool`] (max/average pooling and its gradient, NCHW, NHWC and 1-D).
//! BF16 and F16 ReduceWindow run there too, in f32: the operand widened into f32 scratch, the
//! result rounded once (the catalogue's §9: f32 accumulation, one rounding; Max and Min are
//! exact either way), bit-identical to the reference kernel.
//!
//! The node's operand is viewed as `[outer, H, mid, W, inner]` around its windowed axes, so
//! every layout runs without a copy. Input dilation, three or more windowed axes, Product, other
//! dtypes (half-precision SelectAndScatter among them) and dynamic shapes keep the reference
//! kernel, as do attributes the reference rejects (it reports those nodes' errors).

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::module::{Module, NodeId};
use crate::ir::op::{ArithReduce, Op};
use crate::ir::shape::Shape;
use crate::kernels::fused::FusedIsa;
use crate::kernels::gemm::Scratch;
use crate::kernels::half::HalfFloat;
use crate::kernels::pool::{PoolGeom, PoolKind, reduce_window_f32, select_and_scatter_f32};
use crate::kernels::tensor::Tensor;

use super::fast::FastKernel;

/// The fast kernel for node `n`, if it is a pooling node this module can run.
pub(crate) fn prepare(m: &Module, n: NodeId) -> Option<Box<dyn FastKernel>> {
    let node = m.node(n);
    let (kind, scatter, window, strides, in_dil, win_dil, padding) = match &node.op {
        Op::ReduceWindow { kind, window, strides, input_dilations, window_dilations, padding } => {
            (kind, false, window, strides, &input_dilations[..], &window_dilations[..], padding)
        }
        Op::SelectAndScatter { kind, window, strides, padding } => {
            (kind, true, window, strides, &[][..], &[][..], padding)
        }
        _ => return None,
    };
    let kind = match kind {
        ArithReduce::Max => PoolKind::Max,
        ArithReduce::Min => PoolKind::Min,
        ArithReduce::Sum if !scatter => PoolKind::Sum,
        _ => return None,
    };
    if node.inputs.len() != 1 + scatter as usize || node.outputs.len() != 1 {
        return None;
    }
    let x = m.shape(node.inputs[0]);
    let y = m.shape(node.outputs[0]);
    let mut shapes = vec![x, y];
    if scatter {
        shapes.push(m.shape(node.inputs[1]));
    }
    // F32, or a half type throughout for ReduceWindow.
    let dtype = x.dtype;
    let typed = dtype == DType::Float32 || (!scatter && matches!(dtype, DType::BFloat16 | DType::Float16));
    if !typed || shapes.iter().any(|s| s.dtype != dtype || s.is_dynamic()) {
        return None;
    }
    let (geom, counts) = geometry(x, window, strides, in_dil, win_dil, padding)?;
    // The result (ReduceWindow) or source (SelectAndScatter) has the window counts; a
    // SelectAndScatter result is shaped like its operand.
    let windows = if scatter { shapes[2] } else { y };
    if geom.validate("pool").is_err() || windows.udims() != counts || (scatter && y.udims() != x.udims()) {
        return None;
    }
    let desc = describe(kind, scatter, x, &geom);
    Some(Box::new(PoolKernel { geom, kind, scatter, dtype, isa: FusedIsa::selected(), desc }))
}

/// The `[outer, H, mid, W, inner]` view of an operand of shape `x` under the window attributes,
/// and the window counts per axis (None: more than two windowed axes, input dilation, or
/// attributes the reference rejects).
fn geometry(
    x: &Shape,
    window: &[i64],
    strides: &[i64],
    in_dil: &[i64],
    win_dil: &[i64],
    padding: &[(i64, i64)],
) -> Option<(PoolGeom, Vec<usize>)> {
    let dims = x.udims();
    let rank = dims.len();
    // The reference kernel's defaults and checks, so both accept the same attributes.
    let g =
        crate::kernels::reference::window::Geometry::new("pool", x, window, strides, in_dil, win_dil, padding).ok()?;
    let mut axes = Vec::new();
    for (a, &n) in dims.iter().enumerate() {
        let (w, count) = (g.window[a], g.out_dims[a]);
        let s = usize::try_from(g.stride[a]).ok()?;
        let d = usize::try_from(g.win_dil[a]).ok()?;
        let lo = usize::try_from(g.low[a]).ok()?;
        if g.in_dil[a] != 1 {
            return None;
        }
        // An axis with window 1, stride 1 and no padding (its count is its size) is not windowed.
        if (w, s, lo) != (1, 1, 0) || count != n {
            axes.push((a, w, s, d, lo, count));
        }
    }
    let product = |r: std::ops::Range<usize>| dims[r].iter().product::<usize>();
    // (axis, window, stride, dilation, low padding, count); a missing H or W is a unit axis.
    let (h, w) = match axes[..] {
        [] => ((rank, 1, 1, 1, 0, 1), (rank, 1, 1, 1, 0, 1)),
        [w] => ((w.0, 1, 1, 1, 0, 1), w),
        [h, w] => (h, w),
        _ => return None,
    };
    let extent = |a: usize| dims.get(a).copied().unwrap_or(1);
    let (outer, mid, inner, in_hw) = match axes[..] {
        [] => (product(0..rank), 1, 1, [1, 1]),
        [_] => (product(0..w.0), 1, product(w.0 + 1..rank), [1, extent(w.0)]),
        _ => (product(0..h.0), product(h.0 + 1..w.0), product(w.0 + 1..rank), [extent(h.0), extent(w.0)]),
    };
    let geom = PoolGeom {
        outer,
        mid,
        inner,
        in_hw,
        out_hw: [h.5, w.5],
        window: [h.1, w.1],
        stride: [h.2, w.2],
        dilation: [h.3, w.3],
        pad: [h.4, w.4],
    };
    Some((geom, g.out_dims))
}

/// E.g. `maxpool f32 8x64x112x112 3x3 /2 pad 1 nchw`: the reduction, operand dims, window,
/// strides, low padding and the vectorised axis (`nchw`: output columns, `nhwc`: inner axes).
fn describe(kind: PoolKind, scatter: bool, x: &Shape, g: &PoolGeom) -> String {
    let dims: Vec<String> = x.udims().iter().map(|d| d.to_string()).collect();
    let pair = |v: [usize; 2]| if v[0] == v[1] { v[0].to_string() } else { format!("{}x{}", v[0], v[1]) };
    format!(
        "{}pool{} {}{} {} {}x{} /{} pad {}{} {}",
        kind.name(),
        if scatter { " select-and-scatter" } else { "" },
        x.dtype.short_name(),
        if x.dtype == DType::Float32 { "" } else { " (in f32)" },
        dims.join("x"),
        g.window[0],
        g.window[1],
        pair(g.stride),
        pair(g.pad),
        if g.dilation == [1, 1] { String::new() } else { format!(" dilation {}", pair(g.dilation)) },
        if g.inner == 1 { "nchw" } else { "nhwc" },
    )
}

struct PoolKernel {
    geom: PoolGeom,
    kind: PoolKind,
    scatter: bool,
    /// F32, or BF16/F16 (ReduceWindow only) computed in f32.
    dtype: DType,
    isa: FusedIsa,
    desc: String,
}

impl PoolKernel {
    fn op(&self) -> &'static str {
        if self.scatter { "SelectAndScatter" } else { "ReduceWindow" }
    }

    /// The f32 values of operand `i`, checked against the geometry.
    fn operand<'a>(&self, inputs: &'a [Tensor], i: usize, len: Option<usize>) -> Result<&'a [f32]> {
        let t = inputs.get(i).ok_or_else(|| Error::invalid(self.op(), format!("missing operand {i}")))?;
        let n = t.shape.num_elements();
        if t.shape.dtype != DType::Float32 || t.data.len() != n * 4 || Some(n) != len {
            return Err(Error::invalid(self.op(), format!("operand {i} {} with {} bytes", t.shape, t.data.len())));
        }
        Ok(t.typed::<f32>())
    }

    fn compute(&self, inputs: &[Tensor], out: &mut Tensor, pool: Option<&rayon::ThreadPool>) -> Result<()> {
        match self.dtype {
            DType::BFloat16 => return self.compute_half::<half::bf16>(inputs, out, pool),
            DType::Float16 => return self.compute_half::<half::f16>(inputs, out, pool),
            _ => {}
        }
        let g = &self.geom;
        let x = self.operand(inputs, 0, g.in_len())?;
        let want = if self.scatter { g.in_len() } else { g.out_len() };
        let n = out.shape.num_elements();
        if out.shape.dtype != DType::Float32 || out.data.len() != n * 4 || Some(n) != want {
            return Err(Error::invalid(self.op(), format!("result {} with {} bytes", out.shape, out.data.len())));
        }
        let y = out.typed_mut::<f32>();
        if self.scatter {
            let src = self.operand(inputs, 1, g.out_len())?;
            select_and_scatter_f32(g, self.kind, x, src, y, pool)
        } else {
            reduce_window_f32(self.isa, g, self.kind, x, y, pool)
        }
    }

    /// [`Self::compute`] for a BF16/F16 ReduceWindow: the operand widened into f32 scratch, the
    /// f32 kernel, its result rounded once into `out`.
    fn compute_half<H: HalfFloat + Element>(
        &self,
        inputs: &[Tensor],
        out: &mut Tensor,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let g = &self.geom;
        let t = inputs.first().ok_or_else(|| Error::invalid(self.op(), "missing operand 0"))?;
        let n = t.shape.num_elements();
        if t.shape.dtype != self.dtype || Some(t.data.len()) != t.shape.byte_size() || Some(n) != g.in_len() {
            return Err(Error::invalid(self.op(), format!("operand 0 {} with {} bytes", t.shape, t.data.len())));
        }
        let m = out.shape.num_elements();
        if out.shape.dtype != self.dtype || Some(out.data.len()) != out.shape.byte_size() || Some(m) != g.out_len() {
            return Err(Error::invalid(self.op(), format!("result {} with {} bytes", out.shape, out.data.len())));
        }
        // The thread's pooled f32 scratch (no allocation once warm).
        let (mut xs, mut ys) = (Scratch::new(), Scratch::new());
        let y = out.typed_mut::<H>();
        let mut body = || -> Result<()> {
            let x32 = xs.get(n);
            H::widen(t.typed::<H>(), x32, true);
            let y32 = ys.get(m);
            reduce_window_f32(self.isa, g, self.kind, x32, y32, pool)?;
            H::round(y32, y, true);
            Ok(())
        };
        // Inside the pool, the conversions split over its threads as well.
        match pool {
            Some(p) => p.install(body),
            None => body(),
        }
    }
}

impl FastKernel for PoolKernel {
    fn describe(&self) -> String {
        self.desc.clone()
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        let [shape] = out_shapes else {
            return Err(Error::invalid(self.op(), format!("expected 1 result, got {}", out_shapes.len())));
        };
        let mut out = Tensor::try_zeros(shape.clone())?;
        self.compute(inputs, &mut out, pool)?;
        Ok(vec![out])
    }

    fn writes_into(&self) -> bool {
        true
    }

    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let [out] = outs else {
            return Err(Error::invalid(self.op(), format!("expected 1 result, got {}", outs.len())));
        };
        // Both kernels write every result value: the buffer's previous contents do not matter.
        self.compute(inputs, out, pool)
    }
}
