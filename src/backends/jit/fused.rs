//! Fast kernels for fused nodes of the "jit" plan (see [`super::fast`]): FusedSoftmax,
//! FusedLayerNorm (a block of consecutive axes), FusedGelu and FusedScaledDotProductAttention on F32, BF16 and
//! F16 (half types computed in f32 and rounded once: softmax, GELU and layer norm widen blocks of
//! whole rows into L2-sized f32 scratch, run the f32 kernel and round each result once into the
//! output), using [`crate::kernels::fused`]. Other
//! dtypes (F64) and unusual forms (LayerNorm over axes that are not one increasing block, dynamic shapes, shapes the
//! reference kernel would reject) keep the reference kernel.

use std::sync::Arc;

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::{Module, NodeId, ValueId};
use crate::ir::op::{AttentionLayout, Op};
use crate::ir::shape::Shape;
use crate::kernels::fused::attention::{AttentionMask, AttentionParams, broadcast_strides};
use crate::kernels::fused::{
    FusedIsa, attention_f32, gelu_f32, layer_norm_f32, layer_norm_residual_f32, layer_norm_strided_f32, softmax_f32,
};
use crate::kernels::gemm::Scratch;
use crate::kernels::half::HalfFloat;
use crate::kernels::tensor::Tensor;

use super::fast::FastKernel;

/// The fast kernel for node `n`, if this module has one for it.
pub(crate) fn prepare(m: &Module, n: NodeId) -> Result<Option<Box<dyn FastKernel>>> {
    let node = m.node(n);
    let shapes: Vec<&Shape> = node.inputs.iter().map(|&v| m.shape(v)).collect();
    let outs: Vec<&Shape> = node.outputs.iter().map(|&v| m.shape(v)).collect();
    if shapes.iter().chain(&outs).any(|s| s.is_dynamic()) || outs.len() != 1 || shapes.is_empty() {
        return Ok(None);
    }
    let x = shapes[0];
    if !is_f32_like(x.dtype) || outs[0].dtype != x.dtype {
        return Ok(None);
    }
    let isa = FusedIsa::selected();
    let kind = match &node.op {
        Op::FusedSoftmax { axis } if *axis < x.rank() && shapes.len() == 1 => Kind::Softmax { axis: *axis },
        Op::FusedGelu { exact } if shapes.len() == 1 => Kind::Gelu { exact: *exact },
        Op::FusedLayerNorm { axes, epsilon, has_gamma, has_beta } => {
            let rank = x.rank();
            let k = axes.len();
            // A block of consecutive axes, in increasing order (trailing or not).
            let first = axes.first().copied().unwrap_or(0);
            let block = k > 0 && first + k <= rank && axes.iter().enumerate().all(|(i, &a)| a == first + i);
            let n_in = 1 + *has_gamma as usize + *has_beta as usize;
            if !block || shapes.len() != n_in {
                return Ok(None);
            }
            let n: usize = x.udims()[first..first + k].iter().product();
            if shapes[1..].iter().any(|s| !is_f32_like(s.dtype) || s.num_elements() != n) {
                return Ok(None);
            }
            Kind::LayerNorm {
                first,
                axes: k,
                epsilon: *epsilon,
                has_gamma: *has_gamma,
                has_beta: *has_beta,
                residual: None,
            }
        }
        Op::FusedScaledDotProductAttention { layout, scale, causal, has_mask, has_bias, has_seq_lens, .. } => {
            let a = AttentionKind {
                layout: *layout,
                scale: *scale,
                causal: *causal,
                has_mask: *has_mask,
                has_bias: *has_bias,
                has_seq_lens: *has_seq_lens,
                slices: None,
            };
            if !a.supported(&shapes, outs[0]) {
                return Ok(None);
            }
            Kind::Attention(a)
        }
        _ => return Ok(None),
    };
    Ok(Some(Box::new(FusedKernel { kind, isa, dtype: x.dtype })))
}

fn is_f32_like(d: DType) -> bool {
    matches!(d, DType::Float32 | DType::BFloat16 | DType::Float16)
}

#[derive(Clone, Copy, Debug)]
struct AttentionKind {
    layout: AttentionLayout,
    scale: f64,
    causal: bool,
    has_mask: bool,
    has_bias: bool,
    has_seq_lens: bool,
    /// The plan's merge of q, k, v as column blocks of one product (`super::merge`).
    slices: Option<QkvSlices>,
}

/// q, k and v of a BSHD attention read in place from one F32 product of `rows × row` values
/// (its three operands): each starts at its `offsets` entry of row 0, one row per (batch,
/// position), and has the dims `dims` (`[B, S, H, D]`).
#[derive(Clone, Copy, Debug)]
struct QkvSlices {
    offsets: [usize; 3],
    row: usize,
    rows: usize,
    dims: [[usize; 4]; 3],
}

/// The attention kernel of node `att` reading q, k and v (BSHD; F32, or a half type widened
/// once for the three) as the column blocks at `offsets` of the rows of `y` (the plan's merge of the slices of one projection,
/// `super::merge`); `None` unless the blocks fit y's rows and the fast kernel takes the node.
pub(crate) fn prepare_attention_slices(
    m: &Module,
    att: NodeId,
    y: ValueId,
    offsets: [usize; 3],
) -> Option<Box<dyn FastKernel>> {
    let node = m.node(att);
    let Op::FusedScaledDotProductAttention {
        layout: AttentionLayout::Bshd,
        scale,
        causal,
        has_mask,
        has_bias,
        has_seq_lens,
        ..
    } = &node.op
    else {
        return None;
    };
    let ys = m.shape(y);
    let out = m.shape(*node.outputs.first()?);
    let float = matches!(ys.dtype, DType::Float32 | DType::BFloat16 | DType::Float16);
    if !float || ys.is_dynamic() || ys.rank() < 2 || out.is_dynamic() || node.outputs.len() != 1 {
        return None;
    }
    let row = *ys.udims().last()?;
    let rows = ys.num_elements().checked_div(row)?;
    let shapes: Vec<&Shape> = node.inputs.iter().map(|&v| m.shape(v)).collect();
    let mut dims = [[0usize; 4]; 3];
    for t in 0..3 {
        let s = shapes.get(t)?;
        let d: [usize; 4] = s.udims().try_into().ok()?;
        if s.dtype != ys.dtype || s.is_dynamic() || d[0] * d[1] != rows || offsets[t] + d[2] * d[3] > row {
            return None;
        }
        dims[t] = d;
    }
    let slices = Some(QkvSlices { offsets, row, rows, dims });
    let a = AttentionKind {
        layout: AttentionLayout::Bshd,
        scale: *scale,
        causal: *causal,
        has_mask: *has_mask,
        has_bias: *has_bias,
        has_seq_lens: *has_seq_lens,
        slices,
    };
    if !a.supported(&shapes, out) {
        return None;
    }
    Some(Box::new(FusedKernel { kind: Kind::Attention(a), isa: FusedIsa::selected(), dtype: ys.dtype }))
}

/// `[B, H, S, D]` of a q/k/v shape.
fn bhsd(layout: AttentionLayout, s: &Shape) -> Option<[usize; 4]> {
    let d = |i: usize| s.udim(i);
    (s.rank() == 4).then(|| match layout {
        AttentionLayout::Bhsd => [d(0), d(1), d(2), d(3)],
        AttentionLayout::Bshd => [d(0), d(2), d(1), d(3)],
    })
}

/// Places a rank 2–4 mask/bias on `[B, H, Sq, Skv]` (rank-3 masks are `[B, Sq, Skv]`, rank-3
/// biases `[H, Sq, Skv]`), as the reference kernel does.
fn place(s: &Shape, is_mask: bool) -> Option<[usize; 4]> {
    let d = |i: usize| s.udim(i);
    Some(match s.rank() {
        2 => [1, 1, d(0), d(1)],
        3 if is_mask => [d(0), 1, d(1), d(2)],
        3 => [1, d(0), d(1), d(2)],
        4 => [d(0), d(1), d(2), d(3)],
        _ => return None,
    })
}

impl AttentionKind {
    fn n_inputs(&self) -> usize {
        3 + self.has_mask as usize + self.has_bias as usize + 2 * self.has_seq_lens as usize
    }

    /// Whether the fast kernel handles these operand shapes (else the reference kernel runs and
    /// reports any error).
    fn supported(&self, s: &[&Shape], out: &Shape) -> bool {
        if s.len() != self.n_inputs() || s[1..3].iter().any(|x| x.dtype != s[0].dtype) {
            return false;
        }
        let (Some(q), Some(k), Some(v)) = (bhsd(self.layout, s[0]), bhsd(self.layout, s[1]), bhsd(self.layout, s[2]))
        else {
            return false;
        };
        self.fits([q, k, v], s[3..].iter().copied(), out)
    }

    /// Whether q, k, v of `[B, H, S, D]` dims `qkv`, the other operands `rest` (mask, bias,
    /// sequence lengths, as the node has them) and the result `out` agree.
    fn fits<'a>(&self, [q, k, v]: [[usize; 4]; 3], rest: impl IntoIterator<Item = &'a Shape>, out: &Shape) -> bool {
        if k[0] != q[0] || v[0] != q[0] || k[3] != q[3] || v[1] != k[1] || v[2] != k[2] || k[1] == 0 || q[1] % k[1] != 0
        {
            return false;
        }
        if out.num_elements() != q[0] * q[1] * q[2] * v[3] {
            return false;
        }
        let full = [q[0], q[1], q[2], k[2]];
        let mut rest = rest.into_iter();
        if self.has_mask {
            let Some(m) = rest.next() else { return false };
            if !(m.dtype == DType::Bool || is_f32_like(m.dtype)) {
                return false;
            }
            if place(m, true).and_then(|d| broadcast_strides(d, full)).is_none() {
                return false;
            }
        }
        if self.has_bias {
            let Some(b) = rest.next() else { return false };
            if !is_f32_like(b.dtype) || place(b, false).and_then(|d| broadcast_strides(d, full)).is_none() {
                return false;
            }
        }
        if self.has_seq_lens {
            for _ in 0..2 {
                let Some(l) = rest.next() else { return false };
                if !matches!(l.dtype, DType::Int32 | DType::Int64) || l.num_elements() != q[0] {
                    return false;
                }
            }
        }
        rest.next().is_none()
    }
}

/// The LayerNorm kernel of node `ln` reading the terms whose sum is its `x` (the sum
/// `((t0 + t1) + t2) + …`: the plan's merge of the adds that make x, `super::merge`), with the
/// sum as a second result when `keep_sum`; `None` unless the fast kernel takes this form: F32,
/// normalised axes trailing, every term of x's dims or of x's dims with leading axes (before the
/// normalised ones) of size 1, gamma and beta F32 of the normalised size.
pub(crate) fn prepare_residual_layer_norm(
    m: &Module,
    ln: NodeId,
    terms: &[ValueId],
    keep_sum: bool,
) -> Option<Box<dyn FastKernel>> {
    let node = m.node(ln);
    let Op::FusedLayerNorm { axes, epsilon, has_gamma, has_beta } = &node.op else { return None };
    let x = m.shape(*node.inputs.first()?);
    // F32, or a half type whose adds the step reproduces with their roundings.
    let dtype = x.dtype;
    let f32_static = |s: &Shape| s.dtype == dtype && !s.is_dynamic();
    let (rank, k) = (x.rank(), axes.len());
    let first = rank.checked_sub(k)?;
    if !matches!(dtype, DType::Float32 | DType::BFloat16 | DType::Float16)
        || !f32_static(x)
        || node.outputs.len() != 1
        || k == 0
        || axes.iter().enumerate().any(|(i, &ax)| ax != first + i)
    {
        return None;
    }
    // A term repeats x's trailing block: its dims are x's with a prefix (within the leading axes)
    // set to 1.
    let repeats = |s: &Shape| {
        let lead = s.dims.iter().take_while(|&&d| d == 1).count().min(first);
        f32_static(s) && s.rank() == rank && s.dims[lead..] == x.dims[lead..]
    };
    if terms.len() < 2 || !terms.iter().all(|&t| repeats(m.shape(t))) {
        return None;
    }
    let n: usize = x.udims()[first..].iter().product();
    let params = &node.inputs[1..];
    if params.len() != *has_gamma as usize + *has_beta as usize
        || params.iter().any(|&p| !f32_static(m.shape(p)) || m.shape(p).num_elements() != n)
    {
        return None;
    }
    let kind = Kind::LayerNorm {
        first,
        axes: k,
        epsilon: *epsilon,
        has_gamma: *has_gamma,
        has_beta: *has_beta,
        residual: Some(Residual { terms: terms.len(), keep_sum }),
    };
    Some(Box::new(FusedKernel { kind, isa: FusedIsa::selected(), dtype }))
}

/// The residual form of a LayerNorm step: how many terms make x, and whether the sum is a
/// second result.
#[derive(Clone, Copy, Debug)]
struct Residual {
    terms: usize,
    keep_sum: bool,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Softmax {
        axis: usize,
    },
    Gelu {
        exact: bool,
    },
    /// `residual`: the plan merged the adds making x into this step (`super::merge`): the
    /// operands are the terms, then `gamma?, beta?`.
    LayerNorm {
        first: usize,
        axes: usize,
        epsilon: f64,
        has_gamma: bool,
        has_beta: bool,
        residual: Option<Residual>,
    },
    Attention(AttentionKind),
}

struct FusedKernel {
    kind: Kind,
    isa: FusedIsa,
    dtype: DType,
}

/// Runs `f(parallel)` on `pool` when it has several threads (`parallel` true), else here.
fn on_pool<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce(bool) -> R + Send) -> R {
    match pool.filter(|p| p.current_num_threads() > 1) {
        Some(p) => p.install(|| f(true)),
        None => f(false),
    }
}

/// A float tensor's values as f32: borrowed for F32, widened into the GEMM's per-thread scratch
/// pool for the half types (no allocation once warm).
enum F32View<'a> {
    Borrowed(&'a [f32]),
    Widened(Scratch, usize),
}

impl std::ops::Deref for F32View<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            F32View::Borrowed(v) => v,
            F32View::Widened(s, len) => s.view(*len),
        }
    }
}

/// The values of a float tensor as f32 (borrowed for F32, widened for the half types, split over
/// `pool`).
fn as_f32<'a>(name: &str, t: &'a Tensor, pool: Option<&rayon::ThreadPool>) -> Result<F32View<'a>> {
    fn widened<H: HalfFloat>(x: &[H], pool: Option<&rayon::ThreadPool>) -> F32View<'static> {
        let mut s = Scratch::new();
        let v = s.get(x.len());
        on_pool(pool, |par| H::widen(x, v, par));
        F32View::Widened(s, x.len())
    }
    match t.shape.dtype {
        DType::Float32 => Ok(F32View::Borrowed(t.typed::<f32>())),
        DType::BFloat16 => Ok(widened(t.typed::<bf16>(), pool)),
        DType::Float16 => Ok(widened(t.typed::<f16>(), pool)),
        d => Err(Error::invalid(name, format!("operand {} has dtype {d}, expected F32, BF16 or F16", t.shape))),
    }
}

/// Runs `f` on the f32 values of the result `out` (of unspecified content that `f` must
/// overwrite; the half types go through f32 scratch and are rounded once) and writes them into
/// `out`'s storage, which the caller holds uniquely (BF16 rounded over `pool`).
fn write_output(
    name: &str,
    out: &mut Tensor,
    pool: Option<&rayon::ThreadPool>,
    f: impl FnOnce(&mut [f32]) -> Result<()>,
) -> Result<()> {
    let Tensor { shape, data } = out;
    if Some(data.len()) != shape.byte_size() {
        return Err(Error::invalid(name, format!("result buffer of {} bytes for {shape}", data.len())));
    }
    let data = Arc::make_mut(data);
    // The f32 values in the GEMM's per-thread scratch pool (as the GEMM's own half output):
    // no allocation once warm; `f` overwrites every value.
    fn rounded<H: HalfFloat>(
        y: &mut [H],
        pool: Option<&rayon::ThreadPool>,
        f: impl FnOnce(&mut [f32]) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = crate::kernels::gemm::Scratch::new();
        let v = scratch.get(y.len());
        f(v)?;
        on_pool(pool, |par| H::round(v, y, par));
        Ok(())
    }
    match shape.dtype {
        DType::Float32 => f(data.typed_mut::<f32>()),
        DType::BFloat16 => rounded(data.typed_mut::<bf16>(), pool, f),
        DType::Float16 => rounded(data.typed_mut::<f16>(), pool, f),
        d => Err(Error::invalid(name, format!("output {shape} has dtype {d}, expected F32, BF16 or F16"))),
    }
}

/// Elements per block of the half-type path: each block is widened into f32 scratch (two
/// buffers of this many values, in L2), run through the f32 kernel and rounded once into the
/// output, so no full-size f32 copy of the operand or the result is made.
const HALF_BLOCK: usize = 16 * 1024;

/// The half types of the block-wise paths: their conversions ([`HalfFloat`], on the calling
/// thread: the blocks are already split over the pool) and their storage.
trait HalfElem: HalfFloat + crate::ir::dtype::Element {}

impl<H: HalfFloat + crate::ir::dtype::Element> HalfElem for H {}

/// The f32 kernel of a block: `(x, y)` of whole units.
type BlockFn<'a> = dyn Fn(&[f32], &mut [f32]) + Sync + 'a;

/// Runs `f` over blocks of whole `unit`-element pieces (rows or slabs) of a half-type `x` into
/// `y`: each block widened to f32, computed, rounded once; blocks in parallel over `pool`.
fn half_blocks<H: HalfElem>(pool: Option<&rayon::ThreadPool>, x: &[H], y: &mut [H], unit: usize, f: &BlockFn<'_>) {
    use rayon::prelude::*;
    let unit = unit.max(1);
    let per = (HALF_BLOCK / unit).max(1) * unit;
    let n = x.len().min(y.len());
    // The two f32 scratch blocks, taken once per worker from the per-thread pool (no allocation
    // once warm).
    let scratch = || (Scratch::new(), Scratch::new());
    let run = |(a, b): &mut (Scratch, Scratch), (xs, ys): (&[H], &mut [H])| {
        let (a, b) = (a.get(xs.len()), b.get(xs.len()));
        H::widen(xs, a, false);
        f(a, b);
        H::round(b, ys, false);
    };
    match pool {
        Some(p) if p.current_num_threads() > 1 && n > per => {
            p.install(|| x[..n].par_chunks(per).zip(y[..n].par_chunks_mut(per)).for_each_init(scratch, run));
        }
        _ => {
            let mut s = scratch();
            x[..n].chunks(per).zip(y[..n].chunks_mut(per)).for_each(|c| run(&mut s, c));
        }
    }
}

/// Writes the result `out` (a half dtype) block-wise from the half operand `x` by `f` (see
/// [`half_blocks`]).
fn half_output(
    name: &str,
    x: &Tensor,
    out: &mut Tensor,
    unit: usize,
    pool: Option<&rayon::ThreadPool>,
    f: &BlockFn<'_>,
) -> Result<()> {
    let Tensor { shape, data } = out;
    if Some(data.len()) != shape.byte_size() || x.shape.dtype != shape.dtype {
        return Err(Error::invalid(name, format!("result buffer of {} bytes for {shape}", data.len())));
    }
    let data = Arc::make_mut(data);
    match shape.dtype {
        DType::BFloat16 => half_blocks(pool, x.typed::<bf16>(), data.typed_mut::<bf16>(), unit, f),
        DType::Float16 => half_blocks(pool, x.typed::<f16>(), data.typed_mut::<f16>(), unit, f),
        d => return Err(Error::invalid(name, format!("output {shape} has dtype {d}, expected BF16 or F16"))),
    }
    Ok(())
}

fn seq_lens(name: &str, t: &Tensor, b: usize) -> Result<Vec<usize>> {
    let v: Vec<i64> = match t.shape.dtype {
        DType::Int32 => t.typed::<i32>().iter().map(|&x| x as i64).collect(),
        DType::Int64 => t.typed::<i64>().to_vec(),
        d => return Err(Error::invalid(name, format!("sequence length {} has dtype {d}, expected Int32", t.shape))),
    };
    if v.len() != b {
        return Err(Error::invalid(name, format!("sequence length {} must hold one value per batch ({b})", t.shape)));
    }
    Ok(v.into_iter().map(|x| x.max(0) as usize).collect())
}

impl FusedKernel {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Softmax { .. } => "FusedSoftmax",
            Kind::Gelu { .. } => "FusedGelu",
            Kind::LayerNorm { .. } => "FusedLayerNorm",
            Kind::Attention(_) => "FusedScaledDotProductAttention",
        }
    }

    fn attention(
        &self,
        a: &AttentionKind,
        inputs: &[Tensor],
        y: &mut Tensor,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let name = self.name();
        let mismatch = || {
            let shapes: Vec<String> = inputs.iter().take(3).map(|t| t.shape.to_string()).collect();
            Error::invalid(name, format!("operands {} do not match the compiled shapes", shapes.join(" / ")))
        };
        if inputs.len() != a.n_inputs() {
            return Err(mismatch());
        }
        let dims = match &a.slices {
            // The operands are the product three times; check it and use q, k, v's own dims.
            Some(sl) => {
                let y = &inputs[0].shape;
                let fits = |t: &Tensor| {
                    t.shape == *y
                        && t.shape.num_elements() == sl.rows * sl.row
                        && t.shape.dims.last() == Some(&(sl.row as i64))
                };
                if !inputs[..3].iter().all(fits) {
                    return Err(Error::invalid(name, "the q/k/v projection does not match the compiled shape"));
                }
                // BSHD dims as [B, H, S, D].
                sl.dims.map(|d| [d[0], d[2], d[1], d[3]])
            }
            None => {
                let d = |i: usize| bhsd(a.layout, &inputs[i].shape);
                let (Some(q), Some(k), Some(v)) = (d(0), d(1), d(2)) else { return Err(mismatch()) };
                if inputs[1..3].iter().any(|t| t.shape.dtype != inputs[0].shape.dtype) {
                    return Err(mismatch());
                }
                [q, k, v]
            }
        };
        if !a.fits(dims, inputs[3..].iter().map(|t| &t.shape), &y.shape) {
            return Err(mismatch());
        }
        let [qd, kd, vd] = dims;
        let full = [qd[0], qd[1], qd[2], kd[2]];
        let one = a.slices.is_some() && inputs[1..3].iter().all(|t| Arc::ptr_eq(&t.data, &inputs[0].data));
        let mut next = 3;
        let mut add_mask = None;
        let mut bool_mask = None;
        let mut mask_strides = [0; 4];
        if a.has_mask {
            let m = &inputs[next];
            next += 1;
            mask_strides = place(&m.shape, true).and_then(|d| broadcast_strides(d, full)).unwrap_or_default();
            if m.shape.dtype == DType::Bool {
                bool_mask = Some(m.typed::<bool>());
            } else {
                add_mask = Some(as_f32(name, m, pool)?);
            }
        }
        let mut bias = None;
        let mut bias_strides = [0; 4];
        if a.has_bias {
            let b = &inputs[next];
            next += 1;
            bias_strides = place(&b.shape, false).and_then(|d| broadcast_strides(d, full)).unwrap_or_default();
            bias = Some(as_f32(name, b, pool)?);
        }
        let lens = if a.has_seq_lens {
            let ql = seq_lens(name, &inputs[next], qd[0])?;
            let kl = seq_lens(name, &inputs[next + 1], qd[0])?;
            Some(ql.into_iter().zip(kl).collect::<Vec<_>>())
        } else {
            None
        };
        let mask = match (&bool_mask, &add_mask) {
            (Some(m), _) => AttentionMask::Bool(m, mask_strides),
            (None, Some(m)) => AttentionMask::Additive(m, mask_strides),
            _ => AttentionMask::None,
        };
        let scale = if a.scale == 0.0 { 1.0 / (qd[3] as f64).sqrt() } else { a.scale };
        let row_strides = a.slices.as_ref().map(|sl| [sl.row; 3]);
        let [oq, ok, ov] = a.slices.as_ref().map_or([0; 3], |sl| sl.offsets);
        let nb = qd[0];
        let p = AttentionParams {
            layout: a.layout,
            batch: nb,
            heads: qd[1],
            kv_heads: kd[1],
            seq_q: qd[2],
            seq_kv: kd[2],
            head_dim: qd[3],
            v_dim: vd[3],
            scale: scale as f32,
            causal: a.causal,
            mask,
            bias: bias.as_deref().map(|b| (b, bias_strides)),
            seq_lens: lens.as_deref(),
            qkv_row_strides: row_strides,
        };
        let dt = inputs[0].shape.dtype;
        if dt == DType::Float32 {
            let (qc, kc, vc) =
                (as_f32(name, &inputs[0], pool)?, as_f32(name, &inputs[1], pool)?, as_f32(name, &inputs[2], pool)?);
            return write_output(name, y, pool, |y| {
                if attention_f32(self.isa, &p, &qc[oq..], &kc[ok..], &vc[ov..], y, pool) {
                    Ok(())
                } else {
                    Err(mismatch())
                }
            });
        }
        match dt {
            DType::BFloat16 => attention_half::<bf16>(self.isa, &p, inputs, y, one, [oq, ok, ov], pool, &mismatch),
            DType::Float16 => attention_half::<f16>(self.isa, &p, inputs, y, one, [oq, ok, ov], pool, &mismatch),
            d => Err(Error::invalid(
                name,
                format!("operand {} has dtype {d}, expected F32, BF16 or F16", inputs[0].shape),
            )),
        }
    }
}

/// Half-type attention (`p` for the whole batch; q, k, v and the result all of type `H`): one
/// batch element at a time, its q, k and v rows widened into scratch from the per-thread pool
/// and its output rounded from there (batch is the outermost axis of every layout). Widening the
/// whole projection first allocated and faulted in twice its size on every execution (MiniLM
/// 32 × 384 in bf16: 57 MB a layer) and read it back from memory. `one`: the three operands are
/// one projection (widened once); `offsets`: q's, k's and v's first element in their operand.
#[allow(clippy::too_many_arguments)]
fn attention_half<H: HalfElem>(
    isa: FusedIsa,
    p: &AttentionParams<'_>,
    inputs: &[Tensor],
    y: &mut Tensor,
    one: bool,
    [oq, ok, ov]: [usize; 3],
    pool: Option<&rayon::ThreadPool>,
    mismatch: &dyn Fn() -> Error,
) -> Result<()> {
    let nb = p.batch;
    if y.shape.dtype != H::DTYPE
        || inputs[..3].iter().any(|t| t.shape.dtype != H::DTYPE || t.len().checked_rem(nb).is_some_and(|r| r != 0))
        || Some(y.data.len()) != y.shape.byte_size()
    {
        return Err(mismatch());
    }
    if nb == 0 {
        return Ok(());
    }
    let [ql, kl, vl] = [0, 1, 2].map(|i| inputs[i].len() / nb);
    let yl = y.len() / nb;
    /// Batch element b's `len` values of `t` widened into `s`.
    fn widen<'s, H: HalfElem>(
        t: &Tensor,
        b: usize,
        len: usize,
        s: &'s mut Scratch,
        pool: Option<&rayon::ThreadPool>,
    ) -> &'s [f32] {
        let v = s.get(len);
        on_pool(pool, |par| H::widen(&t.typed::<H>()[b * len..(b + 1) * len], v, par));
        v
    }
    // Batch element b's part of a mask, bias or lengths (one too short for the batch leaves an
    // empty or short slice, which `attention_f32` rejects).
    fn part<T>(x: &[T], at: usize) -> &[T] {
        &x[at.min(x.len())..]
    }
    // Batch element b into `o` (its `yl` outputs), each step split over `pool` when given;
    // false when the f32 kernel rejects the operands.
    let run = |b: usize, o: &mut [H], pool: Option<&rayon::ThreadPool>| -> bool {
        let (mut qs, mut ks, mut vs, mut ys) = (Scratch::new(), Scratch::new(), Scratch::new(), Scratch::new());
        let qc = widen::<H>(&inputs[0], b, ql, &mut qs, pool);
        let (kc, vc) = if one {
            (qc, qc)
        } else {
            (widen::<H>(&inputs[1], b, kl, &mut ks, pool), widen::<H>(&inputs[2], b, vl, &mut vs, pool))
        };
        let pb = AttentionParams {
            batch: 1,
            mask: match p.mask {
                AttentionMask::None => AttentionMask::None,
                AttentionMask::Bool(m, sm) => AttentionMask::Bool(part(m, b * sm[0]), sm),
                AttentionMask::Additive(m, sm) => AttentionMask::Additive(part(m, b * sm[0]), sm),
            },
            bias: p.bias.map(|(x, sb)| (part(x, b * sb[0]), sb)),
            seq_lens: p.seq_lens.map(|l| part(&l[..(b + 1).min(l.len())], b)),
            ..*p
        };
        let yf = ys.get(yl);
        if !attention_f32(isa, &pb, &qc[oq..], &kc[ok..], &vc[ov..], yf, pool) {
            return false;
        }
        on_pool(pool, |par| H::round(yf, o, par));
        true
    };
    let out = y.typed_mut::<H>();
    let threads = pool.map_or(1, |p| p.current_num_threads());
    let ok = match pool {
        // Whole batch elements per thread when they split evenly (or are many): no fork and
        // join per step of every element (three each), and each thread's scratch stays its own.
        // Two Zen 4 cores, bf16 MiniLM at 32 x 384: per-element splitting made the attention
        // step 12-23% slower than the f32 kernel on the same projection.
        Some(pl) if threads > 1 && nb >= threads && (nb.is_multiple_of(threads) || nb >= 4 * threads) => {
            use rayon::prelude::*;
            pl.install(|| out.par_chunks_mut(yl.max(1)).enumerate().all(|(b, o)| run(b, o, None)))
        }
        _ => out.chunks_mut(yl.max(1)).enumerate().all(|(b, o)| run(b, o, pool)),
    };
    if ok { Ok(()) } else { Err(mismatch()) }
}

impl FusedKernel {
    /// The residual form of LayerNorm (trailing axes; F32, BF16 or F16 throughout): `inputs =
    /// [terms…, gamma?, beta?]`, results `[y]` or `[y, sum]` (`keep_sum`).
    fn residual_layer_norm(
        &self,
        inputs: &[Tensor],
        outs: &mut [Tensor],
        epsilon: f64,
        (has_gamma, has_beta): (bool, bool),
        res: Residual,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let name = self.name();
        let n_out = 1 + res.keep_sum as usize;
        let n_in = res.terms + has_gamma as usize + has_beta as usize;
        if inputs.len() != n_in || outs.len() != n_out || res.terms < 2 {
            return Err(Error::invalid(name, format!("residual form: expected {n_in} operands and {n_out} results")));
        }
        let Kind::LayerNorm { first, .. } = self.kind else {
            return Err(Error::invalid(name, "not a layer norm kernel (internal dispatch error)"));
        };
        let (y, sum) = outs.split_at_mut(1);
        let y = &mut y[0];
        let mut sum = sum.first_mut();
        let y_shape = &y.shape;
        let n: usize = if first <= y_shape.rank() { y_shape.uproduct(first..y_shape.rank()) } else { 0 };
        let total = y_shape.num_elements();
        let rows = total.checked_div(n).unwrap_or(0);
        let dt = y_shape.dtype;
        let term_ok = |t: &Tensor| {
            t.shape.dtype == dt && n > 0 && !t.is_empty() && t.len().is_multiple_of(n) && total.is_multiple_of(t.len())
        };
        let buffer_ok = |t: &Tensor| t.shape == *y_shape && Some(t.data.len()) == y_shape.byte_size();
        if !matches!(dt, DType::Float32 | DType::BFloat16 | DType::Float16)
            || !buffer_ok(y)
            || sum.as_deref().is_some_and(|s| !buffer_ok(s))
            || !inputs[..res.terms].iter().all(term_ok)
        {
            return Err(Error::invalid(
                name,
                format!(
                    "residual terms {} + {} … do not fit the result {y_shape} (one dtype: F32, BF16 or F16)",
                    inputs[0].shape, inputs[1].shape
                ),
            ));
        }
        let param = |i: usize, what: &str| -> Result<F32View<'_>> {
            let t = &inputs[i];
            if t.len() != n || t.shape.dtype != dt {
                return Err(Error::invalid(name, format!("{what} {} must hold {n} {dt} values", t.shape)));
            }
            as_f32(name, t, None)
        };
        let g = if has_gamma { Some(param(res.terms, "gamma")?) } else { None };
        let b = if has_beta { Some(param(res.terms + has_gamma as usize, "beta")?) } else { None };
        let (g, b) = (g.as_deref(), b.as_deref());
        let ts = &inputs[..res.terms];
        let ln = RowNorm { isa: self.isa, rows, n, epsilon, g, b };
        match dt {
            DType::BFloat16 => ln.half::<bf16>(ts, sum, y, pool),
            DType::Float16 => ln.half::<f16>(ts, sum, y, pool),
            _ => {
                let terms: smallvec::SmallVec<[&[f32]; 4]> = ts.iter().map(|t| t.typed::<f32>()).collect();
                let sv = sum.as_mut().map(|t| Arc::make_mut(&mut t.data).typed_mut::<f32>());
                let yv = Arc::make_mut(&mut y.data).typed_mut::<f32>();
                layer_norm_residual_f32(self.isa, &terms, sv, yv, rows, n, epsilon, g, b, pool);
            }
        }
        Ok(())
    }
}

/// A residual LayerNorm's row geometry and parameters (`rows` rows of `n` values).
struct RowNorm<'a> {
    isa: FusedIsa,
    rows: usize,
    n: usize,
    epsilon: f64,
    g: Option<&'a [f32]>,
    b: Option<&'a [f32]>,
}

impl RowNorm<'_> {
    /// The half-type residual LayerNorm: per block of rows, the terms are added in their order
    /// in f32 with a rounding to `H` after each add (exactly what the adds this step replaces
    /// compute: the f32 sum of two half values rounds to the correctly rounded half sum), the
    /// rounded sum is kept when asked, then normalised in f32 and rounded once, as the plain
    /// half LayerNorm step does. Operand sizes were checked by the caller.
    fn half<H: HalfElem>(
        &self,
        terms: &[Tensor],
        sum: Option<&mut Tensor>,
        y: &mut Tensor,
        pool: Option<&rayon::ThreadPool>,
    ) {
        use rayon::prelude::*;
        let n = self.n.max(1);
        let total = self.rows * n;
        let terms: smallvec::SmallVec<[&[H]; 4]> = terms.iter().map(|t| t.typed::<H>()).collect();
        let per = (HALF_BLOCK / n).max(1) * n;
        // Row `i` of a term (terms repeat along the leading axes).
        let row = |t: &[H], i: usize| -> std::ops::Range<usize> {
            let at = (i * n) % t.len();
            at..at + n
        };
        // Per worker, from the per-thread pool (no allocation once warm): the block's sums and
        // results in f32. Until they are written, the results' first row holds a widened term
        // row and the block's output its rounded sum row.
        let scratch = || (Scratch::new(), Scratch::new());
        let block = |(s, o): &mut (Scratch, Scratch), blk: usize, ys: &mut [H], ss: Option<&mut [H]>| {
            let first = blk * per / n;
            let (s, o) = (s.get(ys.len()), o.get(ys.len()));
            for (r, acc) in s.chunks_exact_mut(n).enumerate() {
                let i = first + r;
                H::widen(&terms[0][row(terms[0], i)], acc, false);
                for term in &terms[1..] {
                    let (t, h) = (&mut o[..n], &mut ys[..n]);
                    H::widen(&term[row(term, i)], t, false);
                    for (a, &v) in acc.iter_mut().zip(t.iter()) {
                        *a += v;
                    }
                    H::round(acc, h, false);
                    H::widen(h, acc, false);
                }
            }
            if let Some(ss) = ss {
                H::round(s, ss, false);
            }
            let rows = ys.len() / n;
            layer_norm_f32(self.isa, s, o, rows, n, self.epsilon, self.g, self.b, None);
            H::round(o, ys, false);
        };
        let ys = &mut y.typed_mut::<H>()[..total];
        let parallel = pool.filter(|p| p.current_num_threads() > 1 && total > per);
        match (sum, parallel) {
            (Some(sv), Some(p)) => p.install(|| {
                let ss = &mut sv.typed_mut::<H>()[..total];
                ys.par_chunks_mut(per)
                    .zip(ss.par_chunks_mut(per))
                    .enumerate()
                    .for_each_init(scratch, |sc, (b, (yc, sc2))| block(sc, b, yc, Some(sc2)));
            }),
            (None, Some(p)) => p.install(|| {
                ys.par_chunks_mut(per).enumerate().for_each_init(scratch, |sc, (b, yc)| block(sc, b, yc, None));
            }),
            (Some(sv), None) => {
                let mut sc = scratch();
                let ss = &mut sv.typed_mut::<H>()[..total];
                for (b, (yc, sc2)) in ys.chunks_mut(per).zip(ss.chunks_mut(per)).enumerate() {
                    block(&mut sc, b, yc, Some(sc2));
                }
            }
            (None, None) => {
                let mut sc = scratch();
                for (b, yc) in ys.chunks_mut(per).enumerate() {
                    block(&mut sc, b, yc, None);
                }
            }
        }
    }
}

impl FastKernel for FusedKernel {
    fn describe(&self) -> String {
        let what = match self.kind {
            Kind::Softmax { axis } => format!("softmax axis {axis}"),
            Kind::Gelu { exact } => format!("gelu {}", if exact { "erf" } else { "tanh" }),
            Kind::LayerNorm { first, axes, residual, .. } => format!(
                "layer norm over axes {first}..{}{}",
                first + axes,
                match residual {
                    None => String::new(),
                    Some(r) =>
                        format!(" of a residual add ({} terms{})", r.terms, if r.keep_sum { ", sum kept" } else { "" }),
                }
            ),
            Kind::Attention(a) => format!(
                "flash attention {:?}{}{}",
                a.layout,
                if a.causal { " causal" } else { "" },
                if a.slices.is_some() { " reading q/k/v in place from one projection" } else { "" }
            ),
        };
        format!("fused {what} {} {}", self.dtype, self.isa.name())
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        super::fast::run_via_into(self, inputs, out_shapes, pool)
    }

    fn writes_into(&self) -> bool {
        true
    }

    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let name = self.name();
        if let Kind::LayerNorm { epsilon, has_gamma, has_beta, residual: Some(r), .. } = self.kind {
            return self.residual_layer_norm(inputs, outs, epsilon, (has_gamma, has_beta), r, pool);
        }
        let ([y], Some(x)) = (outs, inputs.first()) else {
            return Err(Error::invalid(name, "expected an operand and one result"));
        };
        let out = &y.shape;
        if x.shape.dtype != self.dtype || out.dtype != self.dtype {
            return Err(Error::invalid(
                name,
                format!("operand {} / output {out} differ from the compiled dtype", x.shape),
            ));
        }
        match self.kind {
            Kind::Softmax { axis } => {
                let (xs, r) = (&x.shape, x.shape.rank());
                if axis >= r || out.num_elements() != x.len() {
                    return Err(Error::invalid(name, format!("axis {axis} out of range for {}", x.shape)));
                }
                let (outer, n, inner) = (xs.uproduct(0..axis), xs.udim(axis), xs.uproduct(axis + 1..r));
                if x.shape.dtype.is_half() {
                    let slab = n * inner;
                    let f = |a: &[f32], b: &mut [f32]| {
                        softmax_f32(self.isa, a, b, a.len().checked_div(slab).unwrap_or(0), n, inner, None);
                    };
                    return half_output(name, x, y, slab, pool, &f);
                }
                let xv = as_f32(name, x, pool)?;
                write_output(name, y, pool, |y| {
                    softmax_f32(self.isa, &xv, y, outer, n, inner, pool);
                    Ok(())
                })
            }
            Kind::Gelu { exact } => {
                if out.num_elements() != x.len() {
                    return Err(Error::invalid(name, format!("output {out} does not match x {}", x.shape)));
                }
                if x.shape.dtype.is_half() {
                    let f = |a: &[f32], b: &mut [f32]| gelu_f32(self.isa, a, b, exact, None);
                    return half_output(name, x, y, 1, pool, &f);
                }
                let xv = as_f32(name, x, pool)?;
                write_output(name, y, pool, |y| {
                    gelu_f32(self.isa, &xv, y, exact, pool);
                    Ok(())
                })
            }
            Kind::LayerNorm { residual: Some(_), .. } => {
                Err(Error::invalid(name, "residual layer norm (internal dispatch error)"))
            }
            Kind::LayerNorm { first, axes, epsilon, has_gamma, has_beta, residual: None } => {
                let (xs, r) = (&x.shape, x.shape.rank());
                if first + axes > r || out.num_elements() != x.len() {
                    return Err(Error::invalid(name, format!("axes do not fit x {}", x.shape)));
                }
                let n: usize = xs.uproduct(first..first + axes);
                let inner: usize = xs.uproduct(first + axes..r);
                let rows = x.len().checked_div(n).unwrap_or(0);
                let param = |i: usize, what: &str| -> Result<F32View<'_>> {
                    let t = inputs.get(i).ok_or_else(|| Error::invalid(name, format!("missing {what} operand")))?;
                    if t.len() != n {
                        return Err(Error::invalid(name, format!("{what} {} must hold {n} values", t.shape)));
                    }
                    as_f32(name, t, None)
                };
                let g = if has_gamma { Some(param(1, "gamma")?) } else { None };
                let b = if has_beta { Some(param(1 + has_gamma as usize, "beta")?) } else { None };
                if x.shape.dtype.is_half() {
                    let (g, b) = (g.as_deref(), b.as_deref());
                    let slab = n * inner;
                    let f = |a: &[f32], y: &mut [f32]| {
                        let units = a.len().checked_div(slab).unwrap_or(0);
                        if inner == 1 {
                            layer_norm_f32(self.isa, a, y, units, n, epsilon, g, b, None);
                        } else {
                            layer_norm_strided_f32(self.isa, a, y, units, n, inner, epsilon, g, b, None);
                        }
                    };
                    return half_output(name, x, y, slab, pool, &f);
                }
                let xv = as_f32(name, x, pool)?;
                write_output(name, y, pool, |y| {
                    if inner == 1 {
                        layer_norm_f32(self.isa, &xv, y, rows, n, epsilon, g.as_deref(), b.as_deref(), pool);
                    } else {
                        let outer = rows.checked_div(inner).unwrap_or(0);
                        let (g, b) = (g.as_deref(), b.as_deref());
                        layer_norm_strided_f32(self.isa, &xv, y, outer, n, inner, epsilon, g, b, pool);
                    }
                    Ok(())
                })
            }
            Kind::Attention(a) => self.attention(&a, inputs, y, pool),
        }
    }
}
