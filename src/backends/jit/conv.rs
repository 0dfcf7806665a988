//! Fast kernel for ConvGeneral nodes of the "jit" plan (see [`super::fast`]): f32 convolutions with
//! one or two spatial axes run on [`crate::kernels::conv`] (implicit GEMM on the GEMM microkernels,
//! Winograd F(4×4, 3×3) for constant 3×3 stride-1 filters unless `winograd=off`, the direct
//! depthwise kernel, or the direct kernel for few input channels).
//!
//! BF16 and F16 convolutions (input, kernel and result of one of those types) run on the same
//! kernels in f32, as the catalogue's §9 computes a half-precision op: a constant filter is
//! widened once when it is packed, the input (and a kernel computed at run time) is widened into
//! f32 scratch at each execution, and the f32 result is rounded once into the output (to nearest
//! even). The scratch is kept per thread between executions, so a warm execution allocates
//! nothing. A merged epilogue (`super::merge`: bias, residual, ReLU, clamp) is applied to the
//! f32 result as the half-typed loop it replaces computes it: the sum rounded to the half type
//! after the convolution, after the bias add and after the residual add, then the ReLU and the
//! clamp (exact on half values), so the results are the unmerged plan's bit for bit. Image
//! chains and inverted residual blocks stay f32-only.
//!
//! The node's dimension numbers become element strides of the input, kernel and output, so every
//! layout (NCHW, NHWC, OIHW, HWIO, transposed outputs) runs without a copy. A constant kernel is
//! rearranged and packed once at compile time (a [`PackJob`], with the GEMM weights) and shared
//! through the process-wide constant cache;
//! a kernel computed at run time is packed on each execution. Input dilation, batch groups and
//! negative low padding (cropping) are [`super::conv_backward`]'s (the plan asks it first); dynamic
//! shapes, three or more spatial axes and other dtypes keep the reference kernel.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::dtype::Element;
use crate::ir::module::{Module, NodeId};
use crate::ir::op::{ConvAxes, Op};
use crate::ir::shape::Shape;
use crate::kernels::conv::half::{HalfFilter, HalfGemm, HalfTail, conv2d_half, finish_rows};
use crate::kernels::conv::{ConvEpilogue, ConvFilter, ConvGeom, conv2d_f32};
use crate::kernels::gemm::{Activation, Scratch};
use crate::kernels::half::{HalfFloat, f32_values};
use crate::kernels::movement::row_major_strides;
use crate::kernels::tensor::Tensor;

use super::fast::{FastKernel, PackJob, Packed, Prepared};
use super::shared::Accounting;

const OP: &str = "ConvGeneral";

/// The geometry, kernel strides and element type (F32, BF16 or F16, the same for the input, the
/// kernel and the result) of node `n` when it is a ConvGeneral this module can run.
fn analyse(m: &Module, n: NodeId) -> Option<(ConvGeom, [usize; 4], DType)> {
    let node = m.node(n);
    let Op::ConvGeneral { axes, strides, padding, input_dilations, kernel_dilations, channel_groups, batch_groups } =
        &node.op
    else {
        return None;
    };
    if node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let (xs, ks, ys) = (m.shape(node.inputs[0]), m.shape(node.inputs[1]), m.shape(node.outputs[0]));
    let dtype = xs.dtype;
    let typed = matches!(dtype, DType::Float32 | DType::BFloat16 | DType::Float16)
        && [xs, ks, ys].iter().all(|s| s.dtype == dtype && !s.is_dynamic());
    if !typed
        || !(1..=2).contains(&axes.input_spatial.len())
        || input_dilations.iter().any(|&d| d != 1)
        || *batch_groups > 1
    {
        return None;
    }
    // Negative low padding, non-positive strides or dilations and mismatched dims give no
    // geometry, or one `validate` rejects: the reference kernel reports those nodes' errors.
    let (geom, wstrides) = geometry(axes, strides, padding, kernel_dilations, *channel_groups, xs, ks, ys)?;
    geom.validate(xs.num_elements(), ys.num_elements()).ok()?;
    Some((geom, wstrides, dtype))
}

/// The filter job of node `n`: a ConvGeneral this module runs whose kernel is a constant (F32,
/// or BF16/F16 widened to f32), rearranged and packed once ([`PackJob`]); for the Winograd kernel
/// where `winograd` allows it and the shape qualifies.
pub(crate) fn pack_job(m: &Module, n: NodeId, winograd: bool) -> Option<PackJob> {
    let (geom, wstrides, dtype) = analyse(m, n)?;
    let k = m.node(n).inputs[1];
    let bytes = m.constant_data(k)?;
    if Some(bytes.len()) != m.shape(k).byte_size() {
        return None;
    }
    if dtype != DType::Float32 && crate::kernels::conv::half::qualifies(&geom) {
        // On the half-precision GEMM (see the module docs).
        let tag = format!("conv-half-filter {dtype:?} {:?} {geom:?} {wstrides:?}", m.shape(k).dims);
        let make = move |w: &[f32]| match dtype {
            DType::BFloat16 => HalfFilter::new::<half::bf16>(&geom, w, wstrides),
            _ => HalfFilter::new::<half::f16>(&geom, w, wstrides),
        };
        return Some(typed_filter_job(n, bytes.clone(), dtype, tag, HalfFilter::size_bytes, make));
    }
    let tag = format!("conv-filter {dtype:?} {:?} {:?} {:?} winograd={winograd}", m.shape(k).dims, geom, wstrides);
    let make = move |w: &[f32]| ConvFilter::with_winograd(&geom, w, wstrides, winograd);
    Some(typed_filter_job(n, bytes.clone(), dtype, tag, ConvFilter::size_bytes, make))
}

/// The [`PackJob`] preparing node `n`'s constant f32 filter `source` with `make`, through the
/// process-wide constant cache under `tag` (`size`: the prepared bytes, for the accounting).
pub(crate) fn filter_job<T: std::any::Any + Send + Sync>(
    n: NodeId,
    source: Arc<Vec<u8>>,
    tag: String,
    size: fn(&T) -> usize,
    make: impl Fn(&[f32]) -> Result<T> + Send + 'static,
) -> PackJob {
    typed_filter_job(n, source, DType::Float32, tag, size, make)
}

/// [`filter_job`] for a filter whose elements are `dtype` (F32, BF16 or F16), widened to f32
/// before `make` sees them.
fn typed_filter_job<T: std::any::Any + Send + Sync>(
    n: NodeId,
    source: Arc<Vec<u8>>,
    dtype: DType,
    tag: String,
    size: fn(&T) -> usize,
    make: impl Fn(&[f32]) -> Result<T> + Send + 'static,
) -> PackJob {
    let run = move |acct: &mut Accounting| -> Result<Prepared> {
        let prepare = || {
            let w = f32_values(&source, dtype)
                .ok_or_else(|| Error::invalid(OP, format!("a {dtype:?} filter is not packed")))?;
            make(&w)
        };
        Ok(super::shared::shared(&source, tag, size, prepare, acct)?)
    };
    PackJob { node: n, run: Box::new(run) }
}

/// What a merged step computes after the convolution: `clamp(act(conv + bias + residual))`, the
/// residual being the step's operand 2.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Tail {
    /// One value per output channel (read from a constant at compile time).
    pub bias: Option<Vec<f32>>,
    /// Whether operand 2 is a residual laid out like the output.
    pub residual: bool,
    /// Applied after the bias and the residual.
    pub activation: Activation,
    /// `Min(Max(v, lo), hi)` (catalogue semantics), last.
    pub clamp: Option<(f32, f32)>,
}

impl Tail {
    /// The dump's words for the tail (empty for none).
    fn describe(&self) -> String {
        let mut parts = vec![];
        if self.bias.is_some() {
            parts.push("bias".to_string());
        }
        if self.residual {
            parts.push("residual".to_string());
        }
        if self.activation != Activation::None {
            parts.push(format!("{:?}", self.activation).to_lowercase());
        }
        if let Some((lo, hi)) = self.clamp {
            parts.push(format!("clamp [{lo}, {hi}]"));
        }
        if parts.is_empty() { String::new() } else { format!(", epilogue {}", parts.join(" + ")) }
    }
}

/// Whether node `n` is a ConvGeneral this module can run.
pub(crate) fn runs(m: &Module, n: NodeId) -> bool {
    analyse(m, n).is_some()
}

/// The fast kernel for node `n`, if it is a ConvGeneral this module can run; its filter is the
/// one its [`PackJob`] prepared when the kernel is a constant, else packed at each execution.
pub(crate) fn prepare(m: &Module, n: NodeId, packed: &Packed) -> Option<Box<dyn FastKernel>> {
    prepare_with(m, n, packed, Tail::default())
}

/// [`prepare`] with an epilogue (`tail`; a bias of the wrong length gives no kernel).
pub(crate) fn prepare_with(m: &Module, n: NodeId, packed: &Packed, tail: Tail) -> Option<Box<dyn FastKernel>> {
    let (geom, wstrides, dtype) = analyse(m, n)?;
    if tail.bias.as_ref().is_some_and(|b| b.len() != geom.out_channels) {
        return None;
    }
    let filter = packed.get::<ConvFilter>(n);
    let half_filter = packed.get::<HalfFilter>(n).filter(|_| dtype != DType::Float32);
    let mut desc = format!(
        "conv {}{} {}x{}x{}x{} * {}x{} /{:?} -> {} ch, {} groups",
        dtype.short_name(),
        if dtype == DType::Float32 { "" } else { " (in f32)" },
        geom.batch,
        geom.in_channels,
        geom.in_hw[0],
        geom.in_hw[1],
        geom.kernel_hw[0],
        geom.kernel_hw[1],
        geom.stride,
        geom.out_channels,
        geom.groups,
    );
    match &filter {
        _ if half_filter.is_some() => {
            let bytes = half_filter.as_ref().map_or(0, |f| f.size_bytes());
            desc += &format!(" {} gemm (packed, {bytes} bytes)", dtype.short_name());
        }
        Some(f) => desc += &format!(" {} (packed, {} bytes)", f.describe(), f.size_bytes()),
        None if geom.is_depthwise() => desc += " depthwise direct",
        None if geom.is_stem() => desc += " stem direct",
        None if geom.is_strided_direct() => desc += " strided direct",
        None => desc += " implicit gemm",
    }
    desc += &tail.describe();
    let prepacked = if filter.is_some() || half_filter.is_some() { vec![1] } else { vec![] };
    let mut kernel = ConvKernel { geom, wstrides, dtype, filter, half_filter, prepacked, desc, tail, bands: None };
    if dtype != DType::Float32 && kernel.half_filter.is_none() {
        kernel.bands = kernel.half_bands();
    }
    Some(Box::new(kernel))
}

/// The kernel's geometry from the node's dimension numbers, and the kernel's strides in
/// (output channel, input channel, row, column) order (None: not a shape this kernel takes).
#[allow(clippy::too_many_arguments)]
fn geometry(
    axes: &ConvAxes,
    strides: &[i64],
    padding: &[(i64, i64)],
    kernel_dilations: &[i64],
    groups: i64,
    xs: &Shape,
    ks: &Shape,
    ys: &Shape,
) -> Option<(ConvGeom, [usize; 4])> {
    let s = axes.input_spatial.len();
    let rank = s + 2;
    if [xs, ks, ys].iter().any(|t| t.rank() != rank) || axes.kernel_spatial.len() != s || axes.output_spatial.len() != s
    {
        return None;
    }
    let x = view(xs, axes.input_batch, axes.input_channels, &axes.input_spatial);
    let k = view(ks, axes.kernel_output_channels, axes.kernel_input_channels, &axes.kernel_spatial);
    let y = view(ys, axes.output_batch, axes.output_channels, &axes.output_spatial);
    // `slot(a)`: the node's spatial index of axis a (rows, columns; see `view`).
    let slot = |a: usize| a.checked_sub(2 - s);
    let attr = |v: &[i64], a: usize| usize::try_from(slot(a).and_then(|j| v.get(j).copied()).unwrap_or(1)).ok();
    let pad_lo = |a: usize| usize::try_from(slot(a).and_then(|j| padding.get(j)).map_or(0, |p| p.0)).ok();
    let groups = usize::try_from(groups.max(1)).ok()?;
    let geom = ConvGeom {
        batch: x.size[0],
        in_channels: x.size[1],
        in_hw: [x.size[2], x.size[3]],
        out_channels: y.size[1],
        out_hw: [y.size[2], y.size[3]],
        kernel_hw: [k.size[2], k.size[3]],
        stride: [attr(strides, 0)?, attr(strides, 1)?],
        pad: [pad_lo(0)?, pad_lo(1)?],
        dilation: [attr(kernel_dilations, 0)?, attr(kernel_dilations, 1)?],
        groups,
        x_strides: x.strides,
        y_strides: y.strides,
    };
    let channels_fit = k.size[0] == geom.out_channels && k.size[1] * groups == geom.in_channels;
    channels_fit.then_some((geom, k.strides))
}

/// Sizes and element strides of one operand in logical (batch-or-O, channel-or-I, row, column)
/// order.
pub(crate) struct View {
    pub size: [usize; 4],
    pub strides: [usize; 4],
}

/// The [`View`] of a row-major operand of shape `s` (rank = spatial axes + 2) whose logical first
/// and second axes are `first` and `second`. The kernels work on two spatial axes (rows,
/// columns): a 1-D convolution's single axis is the columns, its rows a unit axis.
pub(crate) fn view(s: &Shape, first: usize, second: usize, spatial: &[usize]) -> View {
    let d = s.udims();
    let st = row_major_strides(&d);
    let sp = |a: usize| (a + spatial.len()).checked_sub(2).map(|j| spatial[j]);
    let size = |a: usize| sp(a).map_or(1, |i| d[i]);
    let stride = |a: usize| sp(a).map_or(0, |i| st[i]);
    View { size: [d[first], d[second], size(0), size(1)], strides: [st[first], st[second], stride(0), stride(1)] }
}

/// Checks that there are `operands` operands and one result, and that each operand in `check` is
/// f32 with all its bytes.
pub(crate) fn check_operands(inputs: &[Tensor], out_shapes: &[Shape], operands: usize, check: &[usize]) -> Result<()> {
    check_typed_operands(inputs, out_shapes, operands, check, DType::Float32)
}

/// [`check_operands`] for operands of `dtype`.
fn check_typed_operands(
    inputs: &[Tensor],
    out_shapes: &[Shape],
    operands: usize,
    check: &[usize],
    dtype: DType,
) -> Result<()> {
    if inputs.len() != operands || out_shapes.len() != 1 {
        return Err(Error::invalid(
            OP,
            format!("expected {operands} operands and 1 result, got {} and {}", inputs.len(), out_shapes.len()),
        ));
    }
    for &i in check {
        let t = &inputs[i];
        if t.shape.dtype != dtype || Some(t.data.len()) != t.shape.byte_size() {
            return Err(Error::invalid(OP, format!("operand {i} {} has {} bytes", t.shape, t.data.len())));
        }
    }
    Ok(())
}

/// One image of a [`ConvKernel`] whose filter is a prepared constant and whose operands hold
/// their images one after another (batch outermost, dense): what [`super::chain`] runs image by
/// image.
pub(crate) struct ImageConv {
    /// The geometry of one image (batch 1).
    geom: ConvGeom,
    filter: Arc<ConvFilter>,
    tail: Tail,
    /// Images of the node, and elements of one image of its input and of its result.
    pub images: usize,
    pub x_len: usize,
    pub y_len: usize,
    pub desc: String,
}

impl ImageConv {
    /// Pixels of an input plane.
    pub(crate) fn in_pixels(&self) -> usize {
        self.geom.in_hw[0] * self.geom.in_hw[1]
    }

    /// Bytes of the prepared filter, read again for every image of a chain.
    pub(crate) fn filter_bytes(&self) -> usize {
        self.filter.size_bytes()
    }

    /// The geometry of one image.
    pub(crate) fn geom(&self) -> &ConvGeom {
        &self.geom
    }

    /// Whether the epilogue adds a residual (the step's operand 2).
    pub(crate) fn has_residual(&self) -> bool {
        self.tail.residual
    }

    /// One image: `x` and `residual` its operands' elements, `y` its result's, on the calling
    /// thread.
    pub(crate) fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32]) -> Result<()> {
        if self.tail.residual && residual.is_none_or(|r| r.len() != y.len()) {
            return Err(Error::invalid(OP, "residual missing or not laid out like the result"));
        }
        convolve(&self.geom, &self.tail, x, &self.filter, residual, y, None)
    }

    /// Part of one image, on the calling thread: `geom` is this convolution's with other planes
    /// and strides (a band of rows, scratch layouts; the channels, kernel and layout unchanged,
    /// as the prepared filter requires), the residual (read when the tail has one) laid out like
    /// `y`. [`conv2d_f32`] checks `geom` against the slices.
    pub(crate) fn run_as(&self, geom: &ConvGeom, x: &[f32], residual: Option<&[f32]>, y: &mut [f32]) -> Result<()> {
        if self.tail.residual && residual.is_none() {
            return Err(Error::invalid(OP, "residual missing"));
        }
        convolve(geom, &self.tail, x, &self.filter, residual, y, None)
    }
}

/// The convolution of `x` into `y` with `tail`'s epilogue (the residual read only when the tail
/// has one): the one call both [`ConvKernel`] and [`ImageConv`] make.
fn convolve(
    geom: &ConvGeom,
    tail: &Tail,
    x: &[f32],
    filter: &ConvFilter,
    residual: Option<&[f32]>,
    y: &mut [f32],
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    let epi = ConvEpilogue {
        bias: tail.bias.as_deref(),
        residual: residual.filter(|_| tail.residual),
        activation: tail.activation,
        clamp: tail.clamp,
    };
    // A window with no taps (no input channels per group, or an empty kernel) sums nothing: the
    // storage's previous contents must not survive into those results.
    if geom.in_channels == 0 || geom.kernel_hw.contains(&0) {
        y.fill(0.0);
    }
    conv2d_f32(geom, x, filter, &epi, y, pool)
}

pub(crate) struct ConvKernel {
    geom: ConvGeom,
    wstrides: [usize; 4],
    /// The operands' and the result's element type: F32, or BF16/F16 computed in f32.
    dtype: DType,
    /// A BF16/F16 constant filter packed for the half-precision GEMM (then `filter` is None).
    half_filter: Option<Arc<HalfFilter>>,
    /// A BF16/F16 call band by band: the image kernel (no tail) and the output rows of a band
    /// ([`ConvKernel::half_bands`], decided once).
    bands: Option<(ImageConv, usize)>,
    filter: Option<Arc<ConvFilter>>,
    prepacked: Vec<usize>,
    desc: String,
    tail: Tail,
}

impl ConvKernel {
    /// The kernel for one image, when its filter is a prepared constant and its input and result
    /// hold their images one after another.
    pub(crate) fn per_image(&self) -> Option<ImageConv> {
        if self.dtype != DType::Float32 {
            return None;
        }
        self.image_conv(self.tail.clone())
    }

    /// [`Self::per_image`] for any element type, with the epilogue `tail`.
    fn image_conv(&self, tail: Tail) -> Option<ImageConv> {
        let g = &self.geom;
        let filter = self.filter.clone()?;
        let dims = |c: usize, hw: [usize; 2]| c.checked_mul(hw[0])?.checked_mul(hw[1]);
        let (x_len, y_len) = (dims(g.in_channels, g.in_hw)?, dims(g.out_channels, g.out_hw)?);
        // Batch outermost and dense: image i is elements i·len .. (i + 1)·len.
        if g.x_strides[0] != x_len || g.y_strides[0] != y_len || x_len == 0 || y_len == 0 {
            return None;
        }
        let geom = ConvGeom { batch: 1, ..g.clone() };
        geom.validate(x_len, y_len).ok()?;
        Some(ImageConv { geom, filter, tail, images: g.batch, x_len, y_len, desc: self.desc.clone() })
    }
}

impl FastKernel for ConvKernel {
    fn describe(&self) -> String {
        self.desc.clone()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn prepacked_operands(&self) -> &[usize] {
        &self.prepacked
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        super::fast::run_via_into(self, inputs, out_shapes, pool)
    }

    fn writes_into(&self) -> bool {
        true
    }

    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let [out] = outs else {
            return Err(Error::invalid(OP, format!("expected 1 result, got {}", outs.len())));
        };
        let operands = 2 + usize::from(self.tail.residual);
        check_typed_operands(
            inputs,
            std::slice::from_ref(&out.shape),
            operands,
            if self.filter.is_some() || self.half_filter.is_some() { &[0] } else { &[0, 1] },
            self.dtype,
        )?;
        if out.shape.dtype != self.dtype || Some(out.data.len()) != out.shape.byte_size() {
            return Err(Error::invalid(OP, format!("result buffer of {} bytes for {}", out.data.len(), out.shape)));
        }
        if let Some(r) = inputs.get(2).filter(|_| self.tail.residual)
            && (r.shape.dtype != self.dtype
                || r.shape.dims != out.shape.dims
                || Some(r.data.len()) != r.shape.byte_size())
        {
            return Err(Error::invalid(
                OP,
                format!("residual {} ({} bytes) for an output {}", r.shape, r.data.len(), out.shape),
            ));
        }
        match self.dtype {
            DType::BFloat16 => return self.run_half::<half::bf16>(inputs, out, pool),
            DType::Float16 => return self.run_half::<half::f16>(inputs, out, pool),
            _ => {}
        }
        let x = &inputs[0];
        let built;
        let filter = match &self.filter {
            Some(f) => f.as_ref(),
            None => {
                built = ConvFilter::new(&self.geom, inputs[1].typed::<f32>(), self.wstrides)?;
                &built
            }
        };
        let residual = inputs.get(2).filter(|_| self.tail.residual).map(|r| r.typed::<f32>());
        let y = Arc::make_mut(&mut out.data).typed_mut::<f32>();
        convolve(&self.geom, &self.tail, x.typed::<f32>(), filter, residual, y, pool)
    }
}

impl ConvKernel {
    /// [`FastKernel::run_into`] for BF16/F16 operands (checked by the caller): band by band where
    /// [`Self::half_bands`] allowed it, on the half-precision GEMM where the filter was packed
    /// for it, else the input (and a kernel computed at run time) widened into f32 scratch, the
    /// f32 convolution, and its result finished into `out` ([`finish_half`], or one rounding
    /// when there is no tail).
    fn run_half<H: HalfFloat + HalfGemm + Element>(
        &self,
        inputs: &[Tensor],
        out: &mut Tensor,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let y = Arc::make_mut(&mut out.data).typed_mut::<H>();
        if let Some((image, rows)) = &self.bands {
            let res = inputs.get(2).filter(|_| self.tail.residual).map(|r| r.typed::<H>());
            return self.run_half_bands(image, *rows, inputs[0].typed::<H>(), res, y, pool);
        }
        if let Some(f) = &self.half_filter {
            return self.run_half_gemm(f, inputs, y, pool);
        }
        // The thread's pooled f32 scratch (no allocation once warm).
        let (mut xs, mut ys) = (Scratch::new(), Scratch::new());
        let built;
        let filter = match &self.filter {
            Some(f) => f.as_ref(),
            None => {
                let k = inputs[1].typed::<H>();
                let mut w = vec![0.0; k.len()];
                H::widen(k, &mut w, false);
                built = ConvFilter::new(&self.geom, &w, self.wstrides)?;
                &built
            }
        };
        let mut body = || -> Result<()> {
            let x = inputs[0].typed::<H>();
            let x32 = xs.get(x.len());
            H::widen(x, x32, true);
            let residual = inputs.get(2).filter(|_| self.tail.residual).map(|r| r.typed::<H>());
            let y32 = ys.get(y.len());
            convolve(&self.geom, &Tail::default(), x32, filter, None, y32, pool)?;
            finish_half(&self.tail, self.geom.y_strides[1], y32, residual, y, pool.is_some());
            Ok(())
        };
        // Inside the pool, the conversions split over its threads as well.
        match pool {
            Some(p) => p.install(body),
            None => body(),
        }
    }
}

/// Most f32 values of one band's result in [`ConvKernel::run_half_bands`] (128 KiB: the band's
/// input, result and residual in f32 stay in L2 beside the filter).
const HALF_BAND_VALUES: usize = 1 << 15;

/// Filters up to this size run half-precision channels-last convolutions band by band (each
/// band reads the whole filter again).
const HALF_BAND_FILTER_BYTES: usize = 256 << 10;

impl ConvKernel {
    /// A half-precision call on the half-precision GEMM: each block's f32 sums finished into the
    /// output as they leave it.
    fn run_half_gemm<H: HalfFloat + HalfGemm + Element>(
        &self,
        filter: &HalfFilter,
        inputs: &[Tensor],
        y: &mut [H],
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let x = inputs[0].typed::<H>();
        let res = inputs.get(2).filter(|_| self.tail.residual).map(|r| r.typed::<H>());
        let finish = |at: usize, tile: &mut [f32], yb: &mut [H]| {
            finish_half(&self.tail, 1, tile, res.map(|r| &r[at..]), yb, false);
        };
        match pool {
            Some(p) => p.install(|| conv2d_half(&self.geom, x, filter, y, &finish, true)),
            None => conv2d_half(&self.geom, x, filter, y, &finish, false),
        }
    }

    /// Whether a half-precision call runs band by band, and the output rows of a band: dense
    /// channels-last images with a prepared filter of at most [`HALF_BAND_FILTER_BYTES`], whose
    /// f32 result is larger than a band, and whose every band reads at least one input row.
    /// Layer by layer, the f32 scratch of a whole call (4.8 MB for MobileNetV2's 112 × 112 × 96)
    /// goes to memory and comes back to be rounded; a band's stays in L2.
    fn half_bands(&self) -> Option<(ImageConv, usize)> {
        let g = &self.geom;
        let [h, w] = g.in_hw;
        let ([ho, wo], co, ci) = (g.out_hw, g.out_channels, g.in_channels);
        let dense = |s: [usize; 4], c: usize, w: usize| s[1..] == [1, w * c, c];
        if !dense(g.x_strides, ci, w) || !dense(g.y_strides, co, wo) || co == 0 || wo == 0 {
            return None;
        }
        let reach = (g.kernel_hw[0].max(1) - 1) * g.dilation[0] + 1;
        let rows_inside = g.pad[0] < reach && (ho.max(1) - 1) * g.stride[0] < h + g.pad[0];
        let image = self.image_conv(Tail::default())?;
        let rows = (HALF_BAND_VALUES / (wo * co)).max(1);
        (rows_inside && rows < ho && image.filter_bytes() <= HALF_BAND_FILTER_BYTES).then_some((image, rows))
    }

    /// A half-precision call band by band ([`Self::half_bands`]): each band of `rows` output
    /// rows of an image widens the input rows its windows read, convolves them into f32 scratch
    /// on the calling thread and finishes its result ([`finish_half`]: the tail, the rounding)
    /// while it is in cache; the bands split over the pool.
    fn run_half_bands<H: HalfFloat + Element>(
        &self,
        image: &ImageConv,
        rows: usize,
        x: &[H],
        res: Option<&[H]>,
        y: &mut [H],
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        use rayon::prelude::*;
        let g = image.geom();
        let ([h, w], [_, wo], ci, co) = (g.in_hw, g.out_hw, g.in_channels, g.out_channels);
        let (s, p, reach) = (g.stride[0], g.pad[0], (g.kernel_hw[0].max(1) - 1) * g.dilation[0] + 1);
        let (x_len, y_len, band_len) = (image.x_len, image.y_len, rows * wo * co);
        if x.len() < x_len * image.images || y.len() < y_len * image.images {
            return Err(Error::invalid(OP, format!("{} input and {} result values for {g:?}", x.len(), y.len())));
        }
        let band = |i: usize, b: usize, yb: &mut [H]| -> Result<()> {
            let (o0, n) = (b * rows, yb.len() / (wo * co));
            let lo = (o0 * s).saturating_sub(p).min(h);
            let hi = ((o0 + n - 1) * s + reach).saturating_sub(p).min(h).max(lo);
            let (mut xbuf, mut ybuf) = (Scratch::new(), Scratch::new());
            let xs = &x[i * x_len + lo * w * ci..i * x_len + hi * w * ci];
            let x32 = xbuf.get(xs.len());
            H::widen(xs, x32, false);
            let bg = ConvGeom {
                in_hw: [hi - lo, w],
                out_hw: [n, wo],
                pad: [p.saturating_sub(o0 * s), g.pad[1]],
                x_strides: [(hi - lo) * w * ci, 1, w * ci, ci],
                y_strides: [n * wo * co, 1, wo * co, co],
                ..g.clone()
            };
            let y32 = ybuf.get(yb.len());
            image.run_as(&bg, x32, None, y32)?;
            let r = res.map(|r| &r[i * y_len + o0 * wo * co..][..yb.len()]);
            finish_half(&self.tail, 1, y32, r, yb, false);
            Ok(())
        };
        let y = &mut y[..y_len * image.images];
        match pool {
            Some(p) => p.install(|| {
                y.par_chunks_mut(y_len).enumerate().try_for_each(|(i, yi)| {
                    yi.par_chunks_mut(band_len).enumerate().try_for_each(|(b, yb)| band(i, b, yb))
                })
            }),
            None => y
                .chunks_mut(y_len)
                .enumerate()
                .try_for_each(|(i, yi)| yi.chunks_mut(band_len).enumerate().try_for_each(|(b, yb)| band(i, b, yb))),
        }
    }
}

/// Values per piece of [`finish_half`] (a piece of f32 scratch and its half-typed output stay
/// in L1 through the piece's passes).
const HALF_PIECE: usize = 4096;

/// The merged tail of a half-precision convolution over its f32 result `y32`, as the half-typed
/// loop computes it: `r(conv)`, `r(· + bias)`, `r(· + residual)`, then the ReLU and the clamp,
/// into `y` (`r`: rounding to `H`, to nearest even); `residual` (read when the tail has one) is
/// laid out like `y`. `cs` is the output's channel stride; the pieces split over the current pool
/// when `parallel`. Without a tail, one rounding.
fn finish_half<H: HalfFloat>(
    tail: &Tail,
    cs: usize,
    y32: &mut [f32],
    residual: Option<&[H]>,
    y: &mut [H],
    parallel: bool,
) {
    use rayon::prelude::*;
    if *tail == Tail::default() {
        H::round(y32, y, parallel);
        return;
    }
    let epi = ConvEpilogue { activation: tail.activation, clamp: tail.clamp, ..Default::default() };
    if cs == 1 {
        // Channels innermost, whole pixels (the GEMM's blocks, the bands, whole channels-last
        // results): long vectorised passes, the roundings in f32 lanes; in chunks of whole
        // pixels over the pool when `parallel`.
        let residual = residual.filter(|_| tail.residual);
        let c = tail.bias.as_ref().map_or(1, |b| b.len().max(1));
        let chunk = (HALF_PIECE / c).max(1) * c;
        let rows = |(k, (v, h)): (usize, (&mut [f32], &mut [H]))| {
            let t = HalfTail { bias: tail.bias.as_deref(), residual: residual.map(|r| &r[k * chunk..]), act: epi };
            finish_rows(&t, v, h);
        };
        let n = y32.len().min(y.len());
        if parallel && n > chunk && rayon::current_num_threads() > 1 {
            y32[..n].par_chunks_mut(chunk).zip(y[..n].par_chunks_mut(chunk)).enumerate().for_each(rows);
        } else {
            rows((0, (&mut y32[..n], &mut y[..n])));
        }
        return;
    }
    let round = H::serial_rounding();
    let piece = |(k, (v, h)): (usize, (&mut [f32], &mut [H]))| {
        let start = k * HALF_PIECE;
        // `v` takes the value of `h` after each rounding.
        let settle = |v: &mut [f32], h: &mut [H]| {
            round(v, h);
            H::widen(h, v, false);
        };
        settle(v, h);
        if let Some(b) = tail.bias.as_deref() {
            add_bias(v, start, b, cs);
            settle(v, h);
        }
        if let Some(r) = residual.filter(|_| tail.residual) {
            let mut wide = [0f32; HALF_PIECE];
            let wide = &mut wide[..v.len()];
            H::widen(&r[start..][..v.len()], wide, false);
            v.iter_mut().zip(wide.iter()).for_each(|(v, r)| *v += r);
            settle(v, h);
        }
        epi.activate_slice(v);
        round(v, h);
    };
    let n = y32.len().min(y.len());
    let (y32, y) = (&mut y32[..n], &mut y[..n]);
    if parallel && n > HALF_PIECE && rayon::current_num_threads() > 1 {
        y32.par_chunks_mut(HALF_PIECE).zip(y.par_chunks_mut(HALF_PIECE)).enumerate().for_each(piece);
    } else {
        y32.chunks_mut(HALF_PIECE).zip(y.chunks_mut(HALF_PIECE)).enumerate().for_each(piece);
    }
}

/// Adds each value's channel bias to `vals`, output elements `start..` of a dense output whose
/// channel axis has stride `cs` (the channel of element `i` is `(i / cs) % bias.len()`), run of
/// one channel by run (channels-innermost results take [`finish_rows`] instead).
fn add_bias(vals: &mut [f32], start: usize, bias: &[f32], cs: usize) {
    let c = bias.len();
    if c == 0 || cs == 0 {
        return;
    }
    let (mut i, mut at) = (0, start);
    while i < vals.len() {
        let run = (cs - at % cs).min(vals.len() - i);
        let b = bias[(at / cs) % c];
        vals[i..i + run].iter_mut().for_each(|v| *v += b);
        (i, at) = (i + run, at + run);
    }
}

#[cfg(test)]
mod tests {
    use super::add_bias;

    #[test]
    fn bias_follows_the_channel_of_every_element() {
        for (cs, c) in [(1, 1), (1, 4), (1, 5), (3, 4), (7, 2), (100, 8)] {
            let bias: Vec<f32> = (0..c).map(|k| (k * 10 + 1) as f32).collect();
            for start in [0, 1, 2, 3, 5, 17, 4096] {
                for len in [0, 1, 4, 9, 30, 801] {
                    let mut vals = vec![0.5f32; len];
                    add_bias(&mut vals, start, &bias, cs);
                    for (j, v) in vals.iter().enumerate() {
                        let ch = ((start + j) / cs) % c;
                        assert_eq!(*v, 0.5 + (ch * 10 + 1) as f32, "cs {cs} c {c} start {start} element {j}");
                    }
                }
            }
        }
    }
}
