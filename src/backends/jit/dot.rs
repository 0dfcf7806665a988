//! Fast kernels for DotGeneral and FusedDense nodes of the "jit" plan (see [`super::fast`]): both run
//! on [`crate::kernels::gemm`].
//!
//! Mapping (per batch index): the lhs free axes form the rows M and its contracting axes the depth K
//! of A; the rhs contracting axes form the rows K and its free axes the columns N of B; the output
//! is row-major `[batch…, M…, N…]`. When an operand's row axes and column axes are each a run of
//! axes whose strides nest (row-major order within the group, size-1 axes ignored), the operand is
//! passed as a strided matrix view per batch offset, with no copy (packing absorbs transposes);
//! otherwise it is gathered once per execution into a `[batch, rows, cols]` scratch buffer.
//! Batches run one after another with all threads of the pool per GEMM, or in parallel (one thread
//! per GEMM) when each product is small.
//!
//! FusedDense is the same product (x's last axis against w's input axis) with the bias and the
//! activation in the GEMM epilogue, so there is no extra pass over the output. On BF16/F16 the bias
//! is widened to f32 and the activation runs on the f32 accumulators: one rounding per fused op
//! (§9).
//!
//! A constant f32, bf16 or f16 right-hand side (DotGeneral without batch axes, or FusedDense's w) is
//! packed once at compile time ([`PackedB`]) and listed in [`FastKernel::prepacked_operands`], so the plan does
//! not keep its bytes. So is a rank-2 right-hand side that is a `Concatenate` of such constants
//! along its columns (the merged weights of dense layers sharing an input,
//! [`crate::passes::egraph::qkv`]): each constant is packed straight into its panels
//! ([`PackedB::from_blocks`]), and the concatenation is never materialised ([`weight_blocks`]).
//!
//! Dtypes: F32 and F64 (accumulating in their own type), BF16 and F16 (f32 accumulation, one rounding
//! to the output dtype: BF16, F16 or F32), Int8 with an Int8/Int16/Int32 output (i32 accumulation,
//! wrapping, which equals the reference's wrap modulo 2⁶⁴ reduced to the output width). Other
//! combinations (f32 inputs asking for f64 accumulation, other integer dtypes, mixed dtypes) keep
//! the reference kernel.

use std::sync::Arc;

use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::dtype::{DType, Element};
use crate::ir::module::{Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{Activation as OpActivation, DenseLayout, Op};
use crate::ir::shape::Shape;
use crate::kernels::gemm::{
    Activation, Bias, Epilogue, Finish, GemmArgs, MatMut, MatRef, PackedB, Rhs, Scalar, Scratch, gemm_bf16, gemm_f16,
    gemm_f32, gemm_f64, gemm_i8,
};
use crate::kernels::half::{HalfFloat, RoundInto};
use crate::kernels::tensor::Tensor;

use super::fast::{FastKernel, PackJob, Packed, Prepared};
use super::shared::Accounting;

/// Products below this many flops run on one thread each (batches in parallel instead).
const SMALL_FLOPS: usize = 4_000_000;

/// The packing job of node `n`: a GEMM node whose right-hand side is a constant f32, bf16 or
/// f16 matrix (static shapes, no batch axes).
pub(crate) fn pack_job(m: &Module, n: NodeId) -> Result<Option<PackJob>> {
    let Some((spec, Some(geom))) = analyse(m, n, None)? else { return Ok(None) };
    let node = m.node(n);
    let rs = m.shape(node.inputs[1]);
    match m.constant_data(node.inputs[1]) {
        Some(bytes)
            if matches!(spec.in_dtype, DType::Float32 | DType::BFloat16 | DType::Float16)
                && geom.nb == 1
                && geom.k > 0
                && geom.n > 0 =>
        {
            // Shared by every executable packing the same bytes the same way (a model compiled
            // for several shapes packs its weights once): the packing depends on the dtype, the
            // rhs dims and which of its axes are contracted (the process's GEMM kernels are
            // chosen once).
            let tag = format!(
                "gemm-b {} {:?} rc={:?} rb={:?} k={} n={}",
                spec.in_dtype, rs.dims, spec.rc, spec.rb, geom.k, geom.n
            );
            let source = bytes.clone();
            let run = move |acct: &mut Accounting| -> Result<Prepared> {
                let make = || pack_constant(&spec, &geom, &source);
                Ok(super::shared::shared(&source, tag, PackedB::size_bytes, make, acct)?)
            };
            Ok(Some(PackJob { node: n, run: Box::new(run) }))
        }
        Some(_) => Ok(None),
        None => Ok(blocks_job(m, n, spec, geom)),
    }
}

/// The constants whose concatenation along its columns is the rank-2 right-hand side `v` of a
/// product contracting its axis `k_axis` (`Concatenate` of constants along the other axis, each
/// of the dtype's size): `(columns, bytes)` per operand, in order.
fn weight_blocks(m: &Module, v: ValueId, k_axis: usize) -> Option<Vec<(usize, Arc<Vec<u8>>)>> {
    let ValueDef::Node { node, output: 0 } = m.value(v).def else { return None };
    let node = m.node(node);
    let Op::Concatenate { axis: dimension } = node.op else { return None };
    let vs = m.shape(v);
    if vs.rank() != 2 || k_axis > 1 || dimension != 1 - k_axis || vs.is_dynamic() || node.inputs.is_empty() {
        return None;
    }
    let es = vs.dtype.size();
    node.inputs
        .iter()
        .map(|&u| {
            let us = m.shape(u);
            let bytes = m.constant_data(u)?;
            let cols = *us.dims.get(dimension)?;
            let ok = us.dtype == vs.dtype && us.rank() == 2 && us.dims[k_axis] == vs.dims[k_axis] && cols >= 0;
            (ok && bytes.len() == us.dims[0] as usize * us.dims[1] as usize * es)
                .then(|| (cols as usize, bytes.clone()))
        })
        .collect()
}

/// The packing job of GEMM node `n` (analysed as `spec`, `geom`) whose right-hand side is a
/// concatenation of constants ([`weight_blocks`]).
fn blocks_job(m: &Module, n: NodeId, spec: Spec, geom: Geom) -> Option<PackJob> {
    let rhs = m.node(n).inputs[1];
    let rs = m.shape(rhs);
    if !matches!(spec.in_dtype, DType::Float32 | DType::BFloat16 | DType::Float16)
        || geom.nb != 1
        || geom.k == 0
        || geom.n == 0
        || spec.rc.len() != 1
        || !spec.rb.is_empty()
    {
        return None;
    }
    let k_axis = spec.rc[0];
    let blocks = weight_blocks(m, rhs, k_axis)?;
    let widths: Vec<usize> = blocks.iter().map(|b| b.0).collect();
    // How the parts are put together is part of the packed form's name (see `shared_blocks`).
    let tag = format!(
        "gemm-b blocks {} {:?} rc={:?} k={} n={} widths={widths:?}",
        spec.in_dtype, rs.dims, spec.rc, geom.k, geom.n
    );
    let sources: Vec<Arc<Vec<u8>>> = blocks.into_iter().map(|b| b.1).collect();
    let (k, dtype, op) = (geom.k, spec.in_dtype, spec.op);
    let run = move |acct: &mut Accounting| -> Result<Prepared> {
        let make = || pack_blocks(op, dtype, k, k_axis, &widths, &sources);
        Ok(super::shared::shared_blocks(&sources, tag, PackedB::size_bytes, make, acct)?)
    };
    Some(PackJob { node: n, run: Box::new(run) })
}

/// Packs the column blocks `sources` (little-endian `dtype` bytes, `[k, w_i]` when the
/// contracted axis is 0, else `[w_i, k]`) side by side.
fn pack_blocks(
    op: &'static str,
    dtype: DType,
    k: usize,
    k_axis: usize,
    widths: &[usize],
    sources: &[Arc<Vec<u8>>],
) -> Result<PackedB> {
    fn typed<'a, T: Copy, const N: usize>(
        bytes: &'a [u8],
        view: impl Fn(&'a [u8]) -> Option<&'a [T]>,
        f: impl Fn([u8; N]) -> T,
    ) -> std::borrow::Cow<'a, [T]>
    where
        [T]: ToOwned<Owned = Vec<T>>,
    {
        match view(bytes) {
            Some(v) => std::borrow::Cow::Borrowed(v),
            None => std::borrow::Cow::Owned(bytes.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect()),
        }
    }
    fn views<'a, T>(
        k: usize,
        k_axis: usize,
        widths: &[usize],
        data: &'a [std::borrow::Cow<'a, [T]>],
    ) -> Vec<(usize, MatRef<'a, T>)>
    where
        [T]: ToOwned<Owned = Vec<T>>,
    {
        widths
            .iter()
            .zip(data)
            .map(|(&w, d)| (w, if k_axis == 0 { MatRef::row_major(d, w) } else { MatRef::new(d, 1, k) }))
            .collect()
    }
    use crate::memory::view_as;
    use half::slice::HalfBitsSliceExt;
    match dtype {
        DType::Float32 => {
            let data: Vec<_> = sources.iter().map(|b| typed(b, view_as::<f32>, f32::from_le_bytes)).collect();
            PackedB::from_blocks(k, &views(k, k_axis, widths, &data))
        }
        DType::BFloat16 => {
            fn bits(b: &[u8]) -> Option<&[bf16]> {
                view_as::<u16>(b).map(|u| u.reinterpret_cast::<bf16>())
            }
            let data: Vec<_> =
                sources.iter().map(|b| typed(b, bits, |c: [u8; 2]| bf16::from_bits(u16::from_le_bytes(c)))).collect();
            PackedB::from_blocks_bf16(k, &views(k, k_axis, widths, &data))
        }
        DType::Float16 => {
            fn bits(b: &[u8]) -> Option<&[f16]> {
                view_as::<u16>(b).map(|u| u.reinterpret_cast::<f16>())
            }
            let data: Vec<_> =
                sources.iter().map(|b| typed(b, bits, |c: [u8; 2]| f16::from_bits(u16::from_le_bytes(c)))).collect();
            PackedB::from_blocks_f16(k, &views(k, k_axis, widths, &data))
        }
        d => Err(Error::invalid(op, format!("constant operand 1 of dtype {d} cannot be pre-packed"))),
    }
}

/// The fast kernel for node `n`, if this module has one for it; `packed`: the operands the
/// [`PackJob`]s prepared.
pub(crate) fn prepare(m: &Module, n: NodeId, packed: &Packed) -> Result<Option<Box<dyn FastKernel>>> {
    prepare_with(m, n, packed, None)
}

/// [`prepare`], with a FusedDense's epilogue activation replaced by `activation` when given
/// (the plan's merge of a following FusedGelu into the GEMM epilogue, `super::merge`).
pub(crate) fn prepare_with(
    m: &Module,
    n: NodeId,
    packed: &Packed,
    activation: Option<Activation>,
) -> Result<Option<Box<dyn FastKernel>>> {
    let Some((spec, geom)) = analyse(m, n, activation)? else { return Ok(None) };
    let node = m.node(n);
    let (ls, rs) = (m.shape(node.inputs[0]), m.shape(node.inputs[1]));
    let packed = packed.get::<PackedB>(n);
    let desc = describe(&spec, geom.as_ref(), packed.as_deref());
    let prepacked = if packed.is_some() { vec![1] } else { vec![] };
    // Static operand shapes: the geometry is kept for every execution (no allocation then).
    let fixed = geom.map(|geom| Fixed { ldims: ls.dims.clone(), rdims: rs.dims.clone(), geom });
    Ok(Some(Box::new(GemmKernel { spec, packed, prepacked, desc, fixed })))
}

/// What node `n` computes on GEMM, and its geometry when the operand shapes are static; `None`
/// when GEMM does not apply (or the node is invalid: its reference kernel reports why).
/// `replaced`: an activation that replaces a FusedDense's own (see [`prepare_with`]).
fn analyse(m: &Module, n: NodeId, replaced: Option<Activation>) -> Result<Option<(Spec, Option<Geom>)>> {
    let node = m.node(n);
    let spec = match &node.op {
        Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, accumulator_dtype, output_dtype } => {
            if node.inputs.len() != 2 || node.outputs.len() != 1 {
                return Ok(None);
            }
            let (l, r) = (m.shape(node.inputs[0]), m.shape(node.inputs[1]));
            let out = m.shape(node.outputs[0]).dtype;
            if output_dtype.is_some_and(|d| d != out)
                || !dot_dtypes_supported(l.dtype, r.dtype, *accumulator_dtype, out)
            {
                return Ok(None);
            }
            Spec {
                op: "DotGeneral",
                lc: lhs_contracting.clone(),
                lb: lhs_batch.clone(),
                rc: rhs_contracting.clone(),
                rb: rhs_batch.clone(),
                in_dtype: l.dtype,
                out_dtype: out,
                activation: Activation::None,
                has_bias: false,
            }
        }
        Op::FusedDense { activation, layout, has_bias } => {
            if node.inputs.len() != 2 + *has_bias as usize || node.outputs.len() != 1 {
                return Ok(None);
            }
            let (x, w) = (m.shape(node.inputs[0]), m.shape(node.inputs[1]));
            let out = m.shape(node.outputs[0]).dtype;
            let dt = x.dtype;
            let float = matches!(dt, DType::Float32 | DType::Float64 | DType::BFloat16 | DType::Float16);
            if !float || w.dtype != dt || out != dt || x.rank() < 1 {
                return Ok(None);
            }
            if *has_bias && m.shape(node.inputs[2]).dtype != dt {
                return Ok(None);
            }
            let w_k = match layout {
                DenseLayout::InputOutputs => 0,
                DenseLayout::OutputsInput => w.rank().saturating_sub(1),
            };
            Spec {
                op: "FusedDense",
                lc: vec![x.rank() - 1],
                lb: vec![],
                rc: vec![w_k],
                rb: vec![],
                in_dtype: dt,
                out_dtype: dt,
                activation: replaced.unwrap_or(gemm_activation(*activation)),
                has_bias: *has_bias,
            }
        }
        _ => return Ok(None),
    };
    let (ls, rs) = (m.shape(node.inputs[0]), m.shape(node.inputs[1]));
    // Static geometry (for the description, and to leave invalid nodes to the reference kernel's errors).
    let geom = if ls.is_dynamic() || rs.is_dynamic() {
        None
    } else {
        match spec.geometry(&ls.udims(), &rs.udims()) {
            Ok(g) => Some(g),
            Err(_) => return Ok(None),
        }
    };
    Ok(Some((spec, geom)))
}

/// Whether the GEMM kernels implement DotGeneral for these dtypes (module doc).
fn dot_dtypes_supported(l: DType, r: DType, acc: Option<DType>, out: DType) -> bool {
    if l != r {
        return false;
    }
    match l {
        DType::Float32 => out == DType::Float32 && acc.is_none_or(|a| a == DType::Float32),
        DType::Float64 => out == DType::Float64,
        DType::BFloat16 | DType::Float16 => {
            acc != Some(DType::Float64) && matches!(out, DType::Float32 | DType::BFloat16 | DType::Float16)
        }
        DType::Int8 => matches!(out, DType::Int8 | DType::Int16 | DType::Int32),
        _ => false,
    }
}

/// The GEMM epilogue activation for a fused-op activation (§5: Gelu is the exact erf form).
fn gemm_activation(a: OpActivation) -> Activation {
    match a {
        OpActivation::None => Activation::None,
        OpActivation::Gelu => Activation::GeluErf,
        OpActivation::Relu => Activation::Relu,
        OpActivation::Silu => Activation::Silu,
        OpActivation::HardSwish => Activation::HardSwish,
        OpActivation::Tanh => Activation::Tanh,
    }
}

/// Packs the constant right-hand side (little-endian `bytes` of `spec.in_dtype`, shape `rhs`)
/// as its K x N matrix: f32, or bf16/f16 (packed for their GEMM entry point).
fn pack_constant(spec: &Spec, g: &Geom, bytes: &[u8]) -> Result<PackedB> {
    use crate::memory::view_as;
    use half::slice::HalfBitsSliceExt;
    // Packed straight from the constant's bytes when they are aligned (no decoded copy).
    if bytes.len() == g.rhs_len * spec.in_dtype.size() {
        match spec.in_dtype {
            DType::Float32 => {
                if let Some(data) = view_as::<f32>(bytes) {
                    return with_rhs(g, data, PackedB::new);
                }
            }
            DType::BFloat16 => {
                if let Some(bits) = view_as::<u16>(bytes) {
                    return with_rhs(g, bits.reinterpret_cast::<bf16>(), PackedB::new_bf16);
                }
            }
            DType::Float16 => {
                if let Some(bits) = view_as::<u16>(bytes) {
                    return with_rhs(g, bits.reinterpret_cast::<f16>(), PackedB::new_f16);
                }
            }
            _ => {}
        }
    }
    match spec.in_dtype {
        DType::Float32 => {
            let data = decode(spec, g, bytes, f32::from_le_bytes)?;
            with_rhs(g, &data, PackedB::new)
        }
        DType::BFloat16 => {
            let data = decode(spec, g, bytes, |b: [u8; 2]| bf16::from_bits(u16::from_le_bytes(b)))?;
            with_rhs(g, &data, PackedB::new_bf16)
        }
        DType::Float16 => {
            let data = decode(spec, g, bytes, |b: [u8; 2]| f16::from_bits(u16::from_le_bytes(b)))?;
            with_rhs(g, &data, PackedB::new_f16)
        }
        d => Err(Error::invalid(spec.op, format!("constant operand 1 of dtype {d} cannot be pre-packed"))),
    }
}

/// The elements of a constant of `g.rhs_len` values of `N` bytes each.
fn decode<T, const N: usize>(spec: &Spec, g: &Geom, bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Result<Vec<T>> {
    let want = g.rhs_len * N;
    if bytes.len() != want {
        return Err(Error::invalid(
            spec.op,
            format!("constant operand 1 has {} bytes, its shape needs {want}", bytes.len()),
        ));
    }
    Ok(bytes.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect())
}

/// Packs the rhs of `g` (in place or gathered) with `pack`.
fn with_rhs<T: Copy>(
    g: &Geom,
    data: &[T],
    pack: impl Fn(usize, usize, MatRef<'_, T>) -> Result<PackedB>,
) -> Result<PackedB> {
    let side = &g.rhs;
    match &side.gather {
        None => pack(g.k, g.n, MatRef::new(tail(data, side.boff[0]), side.rs, side.cs)),
        Some(gt) => {
            let dense = gather(data, gt);
            pack(g.k, g.n, MatRef::row_major(&dense, g.n))
        }
    }
}

fn describe(spec: &Spec, g: Option<&Geom>, packed: Option<&PackedB>) -> String {
    let dt = spec.in_dtype.to_string().to_lowercase();
    let mut s = format!("gemm {dt}");
    if let Some(g) = g {
        if g.nb != 1 {
            s += &format!(" {}x", g.nb);
        }
        s += &format!(" [{}x{}]·[{}x{}]", g.m, g.k, g.k, g.n);
        if g.lhs.gather.is_some() {
            s += " lhs-gathered";
        }
        if packed.is_none() && g.rhs.gather.is_some() {
            s += " rhs-gathered";
        }
    }
    if spec.has_bias {
        s += " +bias";
    }
    if spec.activation != Activation::None {
        s += &format!(" {:?}", spec.activation).to_lowercase();
    }
    if spec.out_dtype != spec.in_dtype {
        s += &format!(" -> {}", spec.out_dtype.to_string().to_lowercase());
    }
    if let Some(p) = packed {
        s += &format!(" packed ({}, {} bytes)", p.kernel_name(), p.size_bytes());
    }
    s
}

/// What the node computes, independent of shapes.
struct Spec {
    op: &'static str,
    lc: Vec<usize>,
    lb: Vec<usize>,
    rc: Vec<usize>,
    rb: Vec<usize>,
    in_dtype: DType,
    out_dtype: DType,
    activation: Activation,
    has_bias: bool,
}

/// How one operand is read as a matrix per batch index.
struct Side {
    /// Element offset of each batch's matrix (in the operand, or in the gathered copy).
    boff: Vec<usize>,
    /// Row and column strides (in the operand, or in the gathered copy).
    rs: usize,
    cs: usize,
    /// When the axes do not nest: how to gather the operand into `[batch, rows, cols]`.
    gather: Option<Gather>,
}

/// Offsets in the operand of every batch, row and column index.
struct Gather {
    boff: Vec<usize>,
    roff: Vec<usize>,
    coff: Vec<usize>,
}

/// The problem for concrete operand dims.
struct Geom {
    nb: usize,
    m: usize,
    n: usize,
    k: usize,
    out_dims: Vec<usize>,
    lhs: Side,
    rhs: Side,
    rhs_len: usize,
}

impl Spec {
    /// Validates the axes against the operand dims and maps the product onto GEMMs.
    fn geometry(&self, ld: &[usize], rd: &[usize]) -> Result<Geom> {
        let op = self.op;
        if self.lc.len() != self.rc.len() || self.lb.len() != self.rb.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "contracting {:?}/{:?} or batch {:?}/{:?} axis lists differ in length",
                    self.lc, self.rc, self.lb, self.rb
                ),
            ));
        }
        let lfree = free_axes(op, "lhs", ld.len(), &self.lc, &self.lb)?;
        let rfree = free_axes(op, "rhs", rd.len(), &self.rc, &self.rb)?;
        for (&l, &r) in self.lc.iter().zip(&self.rc).chain(self.lb.iter().zip(&self.rb)) {
            if ld[l] != rd[r] {
                return Err(Error::invalid(
                    op,
                    format!("lhs axis {l} (size {}) is paired with rhs axis {r} (size {})", ld[l], rd[r]),
                ));
            }
        }
        let size = |d: &[usize], axes: &[usize]| axes.iter().map(|&a| d[a]).product::<usize>();
        let nb = size(ld, &self.lb);
        let m = size(ld, &lfree);
        let k = size(ld, &self.lc);
        let n = size(rd, &rfree);
        let out_dims: Vec<usize> = self
            .lb
            .iter()
            .map(|&a| ld[a])
            .chain(lfree.iter().map(|&a| ld[a]))
            .chain(rfree.iter().map(|&a| rd[a]))
            .collect();
        Ok(Geom {
            nb,
            m,
            n,
            k,
            out_dims,
            lhs: side(ld, &self.lb, &lfree, &self.lc),
            rhs: side(rd, &self.rb, &self.rc, &rfree),
            rhs_len: rd.iter().product(),
        })
    }
}

/// The axes of a rank-`rank` operand that are neither contracting nor batch, ascending; errors on
/// out-of-range or repeated axes.
fn free_axes(op: &str, what: &str, rank: usize, c: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let mut seen = vec![false; rank];
    for &a in c.iter().chain(b) {
        if a >= rank || std::mem::replace(&mut seen[a], true) {
            return Err(Error::invalid(op, format!("{what} axis {a} is out of range or repeated (rank {rank})")));
        }
    }
    Ok((0..rank).filter(|&a| !seen[a]).collect())
}

fn row_major_strides(d: &[usize]) -> Vec<usize> {
    let mut s = vec![1; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1];
    }
    s
}

/// Offsets of every index combination of `axes` (row-major over `axes` in the given order).
fn axis_offsets(d: &[usize], s: &[usize], axes: &[usize]) -> Vec<usize> {
    let mut offs = vec![0usize];
    for &a in axes {
        offs = offs.iter().flat_map(|&o| (0..d[a]).map(move |i| o + i * s[a])).collect();
    }
    offs
}

/// The single stride that walks the flattened index of `axes` (row-major in the given order), if
/// their strides nest; size-1 axes do not matter. An empty (or all size-1) group gets stride 1.
fn group_stride(d: &[usize], s: &[usize], axes: &[usize]) -> Option<usize> {
    let live: Vec<usize> = axes.iter().copied().filter(|&a| d[a] != 1).collect();
    for w in live.windows(2) {
        if s[w[0]] != s[w[1]] * d[w[1]] {
            return None;
        }
    }
    Some(live.last().map_or(1, |&a| s[a]))
}

fn side(d: &[usize], batch: &[usize], rows: &[usize], cols: &[usize]) -> Side {
    let s = row_major_strides(d);
    let boff = axis_offsets(d, &s, batch);
    match (group_stride(d, &s, rows), group_stride(d, &s, cols)) {
        (Some(rs), Some(cs)) => Side { boff, rs, cs, gather: None },
        _ => {
            let r: usize = rows.iter().map(|&a| d[a]).product();
            let c: usize = cols.iter().map(|&a| d[a]).product();
            let dense = (0..boff.len()).map(|b| b * r * c).collect();
            let g = Gather { boff, roff: axis_offsets(d, &s, rows), coff: axis_offsets(d, &s, cols) };
            Side { boff: dense, rs: c, cs: 1, gather: Some(g) }
        }
    }
}

/// Copies an operand into `[batch, rows, cols]` row-major order.
fn gather<T: Copy>(src: &[T], g: &Gather) -> Vec<T> {
    let mut out = Vec::with_capacity(g.boff.len() * g.roff.len() * g.coff.len());
    for &b in &g.boff {
        for &r in &g.roff {
            let base = b + r;
            out.extend(g.coff.iter().map(|&c| src[base + c]));
        }
    }
    out
}

/// `data[off..]`, or empty when `off` is past the end (operands with no elements).
fn tail<T>(data: &[T], off: usize) -> &[T] {
    data.get(off..).unwrap_or(&[])
}

/// Input element types with their GEMM entry point and accumulator/output type.
trait DotElem: Element {
    type Acc: Scalar + Element;
    fn gemm(args: GemmArgs<'_, Self, Self::Acc>) -> Result<()>;
}

impl DotElem for f32 {
    type Acc = f32;
    fn gemm(args: GemmArgs<'_, f32, f32>) -> Result<()> {
        gemm_f32(args)
    }
}
impl DotElem for f64 {
    type Acc = f64;
    fn gemm(args: GemmArgs<'_, f64, f64>) -> Result<()> {
        gemm_f64(args)
    }
}
impl DotElem for bf16 {
    type Acc = f32;
    fn gemm(args: GemmArgs<'_, bf16, f32>) -> Result<()> {
        gemm_bf16(args)
    }
}
impl DotElem for f16 {
    type Acc = f32;
    fn gemm(args: GemmArgs<'_, f16, f32>) -> Result<()> {
        gemm_f16(args)
    }
}
impl DotElem for i8 {
    type Acc = i32;
    fn gemm(args: GemmArgs<'_, i8, i32>) -> Result<()> {
        gemm_i8(args)
    }
}

/// DotGeneral or FusedDense on GEMM.
struct GemmKernel {
    spec: Spec,
    /// The constant right-hand side, packed at compile time (shared with other executables
    /// that pack the same bytes the same way).
    packed: Option<Arc<PackedB>>,
    /// `[1]` when `packed` is set.
    prepacked: Vec<usize>,
    desc: String,
    /// The geometry computed at compile time for the operands' static dims.
    fixed: Option<Fixed>,
}

/// A geometry computed once, for operands of dims `ldims` and `rdims`.
struct Fixed {
    ldims: Vec<i64>,
    rdims: Vec<i64>,
    geom: Geom,
}

/// A product's f32/f64/i32 output and the consumer of its finished tiles, if any.
type Out<'a, A> = (&'a mut [A], Option<&'a dyn Finish<A>>);

impl GemmKernel {
    /// Runs the batched product for one input type; `c` is the `[batch, m, n]` output and the
    /// consumer of its finished tiles, if any.
    fn run_typed<T: DotElem>(
        &self,
        g: &Geom,
        a: &[T],
        b: Option<&[T]>,
        c: Out<'_, T::Acc>,
        bias: Option<&[T::Acc]>,
        threads: usize,
    ) -> Result<()> {
        self.run_rows(g, 0..g.m, a, b, c, bias, threads)
    }

    /// [`Self::run_typed`] for the rows `rows` of every batch's product only: `c` is then
    /// `[batch, rows.len(), n]`.
    #[allow(clippy::too_many_arguments)]
    fn run_rows<T: DotElem>(
        &self,
        g: &Geom,
        rows: std::ops::Range<usize>,
        a: &[T],
        b: Option<&[T]>,
        (c, finish): Out<'_, T::Acc>,
        bias: Option<&[T::Acc]>,
        threads: usize,
    ) -> Result<()> {
        let (m, n, k) = (rows.len(), g.n, g.k);
        if m == 0 || n == 0 || g.nb == 0 {
            return Ok(());
        }
        let a_copy = g.lhs.gather.as_ref().map(|gt| gather(a, gt));
        let a = a_copy.as_deref().unwrap_or(a);
        let b_copy = match (b, &g.rhs.gather) {
            (Some(b), Some(gt)) if self.packed.is_none() => Some(gather(b, gt)),
            _ => None,
        };
        let b = b_copy.as_deref().or(b);
        let epilogue = Epilogue {
            bias: bias.map_or(Bias::None, Bias::PerColumn),
            activation: self.spec.activation,
            ..Epilogue::default()
        };
        let one = |bi: usize, cc: &mut [T::Acc], t: usize| -> Result<()> {
            let av = MatRef::new(tail(a, g.lhs.boff[bi] + rows.start * g.lhs.rs), g.lhs.rs, g.lhs.cs);
            let bv: Rhs<'_, T> = match (&self.packed, b) {
                (Some(p), _) => Rhs::Packed(p),
                (None, Some(b)) => Rhs::Mat(MatRef::new(tail(b, g.rhs.boff[bi]), g.rhs.rs, g.rhs.cs)),
                (None, None) => {
                    return Err(Error::invalid(self.spec.op, "operand 1 has no data and no packed copy"));
                }
            };
            T::gemm(
                GemmArgs::new(m, n, k, av, bv, MatMut::row_major(cc, n)).epilogue(epilogue).threads(t).finish(finish),
            )
        };
        let flops = 2usize.saturating_mul(m).saturating_mul(n).saturating_mul(k);
        if g.nb > 1 && threads > 1 && flops < SMALL_FLOPS {
            c.par_chunks_mut(m * n).enumerate().try_for_each(|(bi, cc)| one(bi, cc, 1))
        } else {
            c.chunks_mut(m * n).enumerate().try_for_each(|(bi, cc)| one(bi, cc, threads))
        }
    }

    /// The operands' data for input type `T` (rhs `None` when it was prepacked).
    fn operands<'t, T: DotElem>(&self, inputs: &'t [Tensor]) -> (&'t [T], Option<&'t [T]>) {
        let b = if self.packed.is_some() { None } else { Some(inputs[1].typed::<T>()) };
        (inputs[0].typed::<T>(), b)
    }

    fn compute(&self, g: &Geom, inputs: &[Tensor], out: &mut Tensor, threads: usize) -> Result<()> {
        let bias = |i: usize| inputs.get(i).filter(|_| self.spec.has_bias);
        match self.spec.in_dtype {
            DType::Float32 => {
                let (a, b) = self.operands::<f32>(inputs);
                let bias = bias(2).map(|t| t.typed::<f32>());
                self.run_typed(g, a, b, (out.typed_mut::<f32>(), None), bias, threads)
            }
            DType::Float64 => {
                let (a, b) = self.operands::<f64>(inputs);
                let bias = bias(2).map(|t| t.typed::<f64>());
                self.run_typed(g, a, b, (out.typed_mut::<f64>(), None), bias, threads)
            }
            DType::BFloat16 => self.compute_half::<bf16>(g, inputs, bias(2), out, threads),
            DType::Float16 => self.compute_half::<f16>(g, inputs, bias(2), out, threads),
            DType::Int8 => {
                let (a, b) = self.operands::<i8>(inputs);
                match self.spec.out_dtype {
                    DType::Int32 => self.run_typed(g, a, b, (out.typed_mut::<i32>(), None), None, threads),
                    d => {
                        let mut c = vec![0i32; out.len()];
                        self.run_typed(g, a, b, (&mut c, None), None, threads)?;
                        match d {
                            DType::Int8 => narrow(&c, out.typed_mut::<i8>(), |x| x as i8),
                            DType::Int16 => narrow(&c, out.typed_mut::<i16>(), |x| x as i16),
                            _ => return Err(Error::invalid(self.spec.op, format!("output dtype {d} for int8 inputs"))),
                        }
                        Ok(())
                    }
                }
            }
            d => Err(Error::invalid(self.spec.op, format!("dtype {d} reached the GEMM kernel"))),
        }
    }

    /// A BF16/F16 product: f32 accumulation, its bias widened into the epilogue's f32 on
    /// per-thread pooled scratch (no allocation once warm), the output through [`Self::half_out`].
    fn compute_half<H: DotElem<Acc = f32> + HalfFloat>(
        &self,
        g: &Geom,
        inputs: &[Tensor],
        bias: Option<&Tensor>,
        out: &mut Tensor,
        threads: usize,
    ) -> Result<()> {
        let (a, b) = self.operands::<H>(inputs);
        let mut wide = Scratch::new();
        let bias = bias.map(|t| {
            let w = wide.get(t.len());
            H::widen(t.typed::<H>(), w, false);
            &*w
        });
        self.half_out(g, out, |r, c, fin| self.run_rows(g, r, a, b, (c, fin), bias, threads))
    }

    /// Runs `f` on an f32 output, directly into `out` when it is F32, else into f32 scratch
    /// (pooled per thread: no allocation or zeroing once warm; the product overwrites every
    /// element) that the GEMM rounds once into `out`'s half dtype tile by tile as it finishes
    /// them (the [`Finish`] it is handed), while each tile is in cache. A product whose f32
    /// copy would outgrow the pool's largest buffer runs in row blocks that each fit it (one
    /// batch only): otherwise every execution would allocate, clear and fault in a scratch as
    /// large as the product (75 MB for a MiniLM up-projection at 32 x 384) and free it again.
    fn half_out(
        &self,
        g: &Geom,
        out: &mut Tensor,
        mut f: impl FnMut(std::ops::Range<usize>, &mut [f32], Option<&dyn Finish<f32>>) -> Result<()>,
    ) -> Result<()> {
        let d = out.shape.dtype;
        if d == DType::Float32 {
            return f(0..g.m, out.typed_mut::<f32>(), None);
        }
        let total = out.len();
        let mut scratch = Scratch::new();
        // Rows `rows` of the product into the result's elements `o`.
        let mut block = |rows: std::ops::Range<usize>, o: std::ops::Range<usize>| -> Result<()> {
            let c = scratch.get(o.len());
            match d {
                DType::BFloat16 => f(rows, c, Some(&RoundInto::new(c, &mut out.typed_mut::<bf16>()[o]))),
                DType::Float16 => f(rows, c, Some(&RoundInto::new(c, &mut out.typed_mut::<f16>()[o]))),
                _ => Err(Error::invalid(self.spec.op, format!("output dtype {d} for half inputs"))),
            }
        };
        if g.nb != 1 || g.lhs.gather.is_some() {
            return block(0..g.m, 0..total);
        }
        // Whole multiples of 96 rows (every microkernel's MR divides it) where possible.
        let fit = (HALF_OUT_BLOCK / g.n.max(1)).max(1);
        let per_block = if fit >= 96 { fit / 96 * 96 } else { fit };
        for r0 in (0..g.m).step_by(per_block) {
            let rows = r0..(r0 + per_block).min(g.m);
            block(rows.clone(), rows.start * g.n..rows.end * g.n)?;
        }
        Ok(())
    }
}

/// Most f32 elements of a half-output product's scratch per block: half the pool's largest
/// buffer, so that the block's scratch stays pooled beside the GEMM's own packing buffers.
const HALF_OUT_BLOCK: usize = Scratch::MAX_POOLED / 2;

fn narrow<A: Copy, B>(src: &[A], dst: &mut [B], f: impl Fn(A) -> B) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

impl GemmKernel {
    /// Checks the operands (count, dtypes, byte sizes), and returns the product's geometry: the
    /// compile-time one when the operands have the static dims, else one computed for theirs.
    fn checked_geometry<'a>(&'a self, inputs: &[Tensor], owned: &'a mut Option<Geom>) -> Result<&'a Geom> {
        let op = self.spec.op;
        let want_inputs = 2 + self.spec.has_bias as usize;
        if inputs.len() != want_inputs {
            return Err(Error::invalid(op, format!("expected {want_inputs} operands, got {}", inputs.len())));
        }
        for (i, t) in inputs.iter().enumerate() {
            if t.shape.dtype != self.spec.in_dtype {
                return Err(Error::invalid(op, format!("operand {i} is {}, expected {}", t.shape, self.spec.in_dtype)));
            }
            let prepacked = self.prepacked.contains(&i);
            if !prepacked && Some(t.data.len()) != t.shape.byte_size() {
                return Err(Error::invalid(op, format!("operand {i} ({}) has {} bytes", t.shape, t.data.len())));
            }
        }
        let g = match &self.fixed {
            Some(f) if inputs[0].shape.dims == f.ldims && inputs[1].shape.dims == f.rdims => &f.geom,
            _ => &*owned.insert(self.spec.geometry(&inputs[0].shape.udims(), &inputs[1].shape.udims())?),
        };
        if let Some(bias) = inputs.get(2)
            && bias.len() != g.n
        {
            return Err(Error::invalid(
                op,
                format!("bias {} has {} values for {} outputs", bias.shape, bias.len(), g.n),
            ));
        }
        if let Some(p) = &self.packed
            && (p.k() != g.k || p.n() != g.n || g.nb != 1)
        {
            return Err(Error::invalid(
                op,
                format!("operand 1 was packed as {}x{}, the product needs {}x{}", p.k(), p.n(), g.k, g.n),
            ));
        }
        Ok(g)
    }

    /// Errors unless `shape` is the product's result shape (a dynamic one: its dtype and rank).
    fn check_result(&self, shape: &Shape, g: &Geom) -> Result<()> {
        let dims_match = shape.dims.len() == g.out_dims.len()
            && shape.dims.iter().zip(&g.out_dims).all(|(&a, &b)| usize::try_from(a) == Ok(b));
        if shape.dtype != self.spec.out_dtype
            || shape.rank() != g.out_dims.len()
            || (!shape.is_dynamic() && !dims_match)
        {
            return Err(Error::invalid(
                self.spec.op,
                format!("result shape {shape} does not match the product's dims {:?}", g.out_dims),
            ));
        }
        Ok(())
    }

    /// Computes into `out` (of the result's shape and byte size) on `pool`.
    fn compute_on(
        &self,
        g: &Geom,
        inputs: &[Tensor],
        out: &mut Tensor,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let threads = pool.map_or(1, |p| p.current_num_threads());
        match pool {
            Some(p) => p.install(|| self.compute(g, inputs, out, threads)),
            None => self.compute(g, inputs, out, 1),
        }
    }
}

impl FastKernel for GemmKernel {
    fn describe(&self) -> String {
        self.desc.clone()
    }

    fn prepacked_operands(&self) -> &[usize] {
        &self.prepacked
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        if out_shapes.len() != 1 {
            return Err(Error::invalid(self.spec.op, format!("expected 1 result, got {}", out_shapes.len())));
        }
        let mut owned = None;
        let g = self.checked_geometry(inputs, &mut owned)?;
        self.check_result(&out_shapes[0], g)?;
        let mut shape = out_shapes[0].clone();
        shape.dims = g.out_dims.iter().map(|&d| d as i64).collect();
        let mut out = Tensor::try_zeros(shape)?;
        self.compute_on(g, inputs, &mut out, pool)?;
        Ok(vec![out])
    }

    fn writes_into(&self) -> bool {
        true
    }

    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let op = self.spec.op;
        let [out] = outs else {
            return Err(Error::invalid(op, format!("expected 1 result, got {}", outs.len())));
        };
        let mut owned = None;
        let g = self.checked_geometry(inputs, &mut owned)?;
        self.check_result(&out.shape, g)?;
        if out.shape.is_dynamic() || Some(out.data.len()) != out.shape.byte_size() {
            return Err(Error::invalid(op, format!("result buffer of {} bytes for {}", out.data.len(), out.shape)));
        }
        if g.k == 0 {
            // An empty contraction: the products are zero (plus the bias); the buffer's previous
            // contents must not survive.
            Arc::make_mut(&mut out.data).as_bytes_mut().fill(0);
        }
        self.compute_on(g, inputs, out, pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_strides_nest_or_not() {
        // [2, 3, 4] row-major: strides [12, 4, 1].
        let d = [2, 3, 4];
        let s = row_major_strides(&d);
        assert_eq!(s, vec![12, 4, 1]);
        assert_eq!(group_stride(&d, &s, &[1, 2]), Some(1));
        assert_eq!(group_stride(&d, &s, &[0, 1]), Some(4));
        assert_eq!(group_stride(&d, &s, &[2, 1]), None);
        assert_eq!(group_stride(&d, &s, &[0, 2]), None);
        assert_eq!(group_stride(&d, &s, &[]), Some(1));
        // Size-1 axes are ignored: [3, 1, 4] axes (0, 2) nest.
        let d = [3, 1, 4];
        let s = row_major_strides(&d);
        assert_eq!(group_stride(&d, &s, &[0, 2]), Some(1));
        assert_eq!(axis_offsets(&d, &s, &[2, 0]), vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
    }
}
