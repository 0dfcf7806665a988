//! Fast kernels for the ConvGeneral forms of convolution gradients on the "jit" plan (see
//! [`super::fast`]), on [`crate::kernels::conv::backward`]: f32 convolutions with input dilation or
//! negative low padding (input gradients, ONNX ConvTranspose) run phase by phase without the
//! dilation's zeros; filter gradients (XLA's `ConvGeneral(x, dy)`, whose "kernel" is the output
//! gradient and whose output is the small filter, with batch groups for grouped and depthwise
//! filters) run as a GEMM reduction over images and pixels.
//!
//! Dimension numbers become element strides, as in [`super::conv`], so every layout runs without
//! a copy. A constant kernel of a dilated convolution is prepared for every phase once at compile
//! time (a [`PackJob`]); other kernels are prepared at each execution. Every other ConvGeneral
//! is left to [`super::conv`] or the reference kernel.

use std::sync::Arc;

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{Module, NodeId};
use crate::ir::op::{ConvAxes, Op};
use crate::ir::shape::Shape;
use crate::kernels::conv::backward::{DilatedConv, DilatedFilter, FilterGrad, dilated_conv_f32, filter_grad_f32};
use crate::kernels::tensor::Tensor;

use super::conv::{check_operands, view};
use super::fast::{FastKernel, PackJob, Packed};

/// What a node is, for this module.
enum Form {
    /// A convolution with input dilation or cropping, and its kernel strides (o, i, row, column).
    Dilated(DilatedConv, [usize; 4]),
    /// A filter gradient.
    FilterGrad(FilterGrad),
}

/// The form of node `n` when it is a ConvGeneral this module runs.
fn analyse(m: &Module, n: NodeId) -> Option<Form> {
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
    let s = axes.input_spatial.len();
    let ok = [xs, ks, ys].iter().all(|t| t.dtype == DType::Float32 && !t.is_dynamic() && t.rank() == s + 2)
        && (1..=2).contains(&s)
        && axes.kernel_spatial.len() == s
        && axes.output_spatial.len() == s;
    if !ok {
        return None;
    }
    let ConvAxes { input_batch, input_channels, kernel_input_channels, kernel_output_channels, .. } = *axes;
    let x = view(xs, input_batch, input_channels, &axes.input_spatial);
    let k = view(ks, kernel_output_channels, kernel_input_channels, &axes.kernel_spatial);
    let y = view(ys, axes.output_batch, axes.output_channels, &axes.output_spatial);
    // Per-axis attributes (row, column), defaults for a 1-D convolution's unit row.
    let attr = |v: &[i64], a: usize| -> Option<usize> {
        let j = (a + s).checked_sub(2);
        usize::try_from(j.and_then(|j| v.get(j).copied()).unwrap_or(1)).ok().filter(|&v| v >= 1)
    };
    let lo = |a: usize| (a + s).checked_sub(2).and_then(|j| padding.get(j)).map_or(0, |p| p.0);
    let stride = [attr(strides, 0)?, attr(strides, 1)?];
    let in_dil = [attr(input_dilations, 0)?, attr(input_dilations, 1)?];
    let k_dil = [attr(kernel_dilations, 0)?, attr(kernel_dilations, 1)?];
    let pad = [lo(0), lo(1)];
    let (cg, bg) = (usize::try_from((*channel_groups).max(1)).ok()?, usize::try_from((*batch_groups).max(1)).ok()?);
    let (out_pixels, taps) = (y.size[2] * y.size[3], k.size[2] * k.size[3]);
    let dense = in_dil == [1, 1];
    // A constant "kernel" is a forward filter, not dy: `super::conv` packs it (and frees its bytes).
    let runtime_kernel = m.constant_data(node.inputs[1]).is_none();
    if dense && cg == 1 && (bg > 1 || (out_pixels * 4 <= taps && runtime_kernel)) {
        // Filter gradient: the node's batch is the input channels, its input channels the images,
        // its kernel dy, its output the filter (batch = input channels per group).
        let g = FilterGrad {
            batch: x.size[1],
            in_channels: x.size[0],
            in_hw: [x.size[2], x.size[3]],
            out_channels: k.size[0],
            out_hw: [k.size[2], k.size[3]],
            kernel_hw: [y.size[2], y.size[3]],
            stride: k_dil,
            pad,
            dilation: stride,
            groups: bg,
            x_strides: [x.strides[1], x.strides[0], x.strides[2], x.strides[3]],
            dy_strides: [k.strides[1], k.strides[0], k.strides[2], k.strides[3]],
            dw_strides: [y.strides[1], y.strides[0], y.strides[2], y.strides[3]],
        };
        let fits = k.size[1] == x.size[1] && y.size[1] == k.size[0] && y.size[0].checked_mul(bg) == Some(x.size[0]);
        g.validate(xs.num_elements(), ks.num_elements(), ys.num_elements()).ok()?;
        return fits.then_some(Form::FilterGrad(g));
    }
    if bg > 1 || (dense && pad.iter().all(|&p| p >= 0)) {
        return None;
    }
    let c = DilatedConv {
        batch: x.size[0],
        in_channels: x.size[1],
        in_hw: [x.size[2], x.size[3]],
        out_channels: y.size[1],
        out_hw: [y.size[2], y.size[3]],
        kernel_hw: [k.size[2], k.size[3]],
        stride,
        pad,
        input_dilation: in_dil,
        dilation: k_dil,
        groups: cg,
        x_strides: x.strides,
        y_strides: y.strides,
    };
    let fits = k.size[0] == c.out_channels && k.size[1].checked_mul(cg) == Some(c.in_channels) && y.size[0] == c.batch;
    // Forms the phases do not cover (stride and input dilation on one axis) or shapes
    // `validate` rejects keep the reference kernel, which reports those nodes' errors.
    c.validate(xs.num_elements(), ys.num_elements()).ok()?;
    fits.then_some(Form::Dilated(c, k.strides))
}

/// The filter job of node `n`: a dilated convolution this module runs whose kernel is an F32
/// constant, prepared for every phase once.
pub(crate) fn pack_job(m: &Module, n: NodeId) -> Option<PackJob> {
    let Form::Dilated(conv, wstrides) = analyse(m, n)? else { return None };
    let k = m.node(n).inputs[1];
    let bytes = m.constant_data(k)?;
    if bytes.len() != m.shape(k).num_elements() * 4 {
        return None;
    }
    let tag = format!("conv-dilated-filter {:?} {:?} {:?}", m.shape(k).dims, conv, wstrides);
    let make = move |w: &[f32]| DilatedFilter::new(&conv, w, wstrides);
    Some(super::conv::filter_job(n, bytes.clone(), tag, DilatedFilter::size_bytes, make))
}

/// The fast kernel for node `n`, if it is a dilated convolution or a filter gradient.
pub(crate) fn prepare(m: &Module, n: NodeId, packed: &Packed) -> Option<Box<dyn FastKernel>> {
    match analyse(m, n)? {
        Form::Dilated(conv, wstrides) => {
            let filter = packed.get::<DilatedFilter>(n);
            let mut desc = format!(
                "conv transposed f32 {}x{}x{}x{} * {}x{} input dilation {:?} pad {:?} -> {} ch {}x{}, {} groups",
                conv.batch,
                conv.in_channels,
                conv.in_hw[0],
                conv.in_hw[1],
                conv.kernel_hw[0],
                conv.kernel_hw[1],
                conv.input_dilation,
                conv.pad,
                conv.out_channels,
                conv.out_hw[0],
                conv.out_hw[1],
                conv.groups,
            );
            desc += &format!(", {} phases", conv.input_dilation[0] * conv.input_dilation[1]);
            if let Some(f) = &filter {
                desc += &format!(" (packed, {} bytes)", f.size_bytes());
            }
            let prepacked = if filter.is_some() { vec![1] } else { vec![] };
            Some(Box::new(DilatedKernel { conv, wstrides, filter, prepacked, desc }))
        }
        Form::FilterGrad(g) => {
            let desc = format!(
                "conv filter gradient f32 {}x{}x{}x{} · dy {}x{}x{} -> {}x{} filter, {} groups, gemm reduction",
                g.batch,
                g.in_channels,
                g.in_hw[0],
                g.in_hw[1],
                g.out_channels,
                g.out_hw[0],
                g.out_hw[1],
                g.kernel_hw[0],
                g.kernel_hw[1],
                g.groups,
            );
            Some(Box::new(FilterGradKernel { geom: g, desc }))
        }
    }
}

struct DilatedKernel {
    conv: DilatedConv,
    wstrides: [usize; 4],
    filter: Option<Arc<DilatedFilter>>,
    prepacked: Vec<usize>,
    desc: String,
}

impl FastKernel for DilatedKernel {
    fn describe(&self) -> String {
        self.desc.clone()
    }

    fn prepacked_operands(&self) -> &[usize] {
        &self.prepacked
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        check_operands(inputs, out_shapes, 2, if self.filter.is_some() { &[0] } else { &[0, 1] })?;
        let built;
        let filter = match &self.filter {
            Some(f) => f.as_ref(),
            None => {
                built = DilatedFilter::new(&self.conv, inputs[1].typed::<f32>(), self.wstrides)?;
                &built
            }
        };
        let mut out = Tensor::try_zeros(out_shapes[0].clone())?;
        dilated_conv_f32(&self.conv, inputs[0].typed::<f32>(), filter, out.typed_mut::<f32>(), pool)?;
        Ok(vec![out])
    }
}

struct FilterGradKernel {
    geom: FilterGrad,
    desc: String,
}

impl FastKernel for FilterGradKernel {
    fn describe(&self) -> String {
        self.desc.clone()
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        check_operands(inputs, out_shapes, 2, &[0, 1])?;
        let mut out = Tensor::try_zeros(out_shapes[0].clone())?;
        filter_grad_f32(&self.geom, inputs[0].typed::<f32>(), inputs[1].typed::<f32>(), out.typed_mut::<f32>(), pool)?;
        Ok(vec![out])
    }
}
