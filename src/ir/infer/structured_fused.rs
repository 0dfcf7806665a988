//! Shape inference for the fused ops (§5): softmax, GELU, layer norm, dense, attention (+VJP),
//! quantized dense, quantized embedding lookup and the QKV projection.

use super::{check_axes, check_index_dtype, count, make_shape, names, static_dim, unify};
use crate::bail;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{AttentionLayout, DenseLayout, GgmlType, Op, QuantScheme, Quantization};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

pub(super) fn infer(op: &str, attrs: &Op, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    match attrs {
        Op::FusedSoftmax { axis } => {
            count(op, inputs, 1)?;
            let x = inputs[0];
            float_dtype(op, "x", x)?;
            if *axis >= x.rank() {
                bail!(op, "axis {axis} out of range for x {x}");
            }
            Ok(vec![x.clone()])
        }
        Op::FusedGelu { .. } => {
            count(op, inputs, 1)?;
            float_dtype(op, "x", inputs[0])?;
            Ok(vec![inputs[0].clone()])
        }
        Op::FusedLayerNorm { axes, epsilon, has_gamma, has_beta } => {
            count(op, inputs, 1 + usize::from(*has_gamma) + usize::from(*has_beta))?;
            layer_norm(op, axes, *epsilon, inputs, *has_gamma, *has_beta)
        }
        Op::FusedDense { layout, has_bias, .. } => {
            count(op, inputs, 2 + usize::from(*has_bias))?;
            dense(op, *layout, inputs[0], inputs[1], inputs.get(2).copied()).map(|s| vec![s])
        }
        Op::FusedScaledDotProductAttention { layout, scale, has_mask, has_bias, has_seq_lens, .. } => {
            let n = 3 + usize::from(*has_mask) + usize::from(*has_bias) + 2 * usize::from(*has_seq_lens);
            count(op, inputs, n)?;
            let a = attention(op, *layout, *scale, inputs[0], inputs[1], inputs[2])?;
            let mut next = 3;
            if *has_mask {
                let mask = inputs[next];
                if !(mask.dtype == DType::Bool || mask.dtype == a.out.dtype) {
                    bail!(op, "mask dtype {} must be Bool or the dtype of q ({})", mask.dtype, a.out.dtype);
                }
                broadcastable(op, "mask", mask, &a.scores)?;
                next += 1;
            }
            if *has_bias {
                let bias = inputs[next];
                if bias.dtype != a.out.dtype {
                    bail!(op, "bias dtype {} must equal the dtype of q ({})", bias.dtype, a.out.dtype);
                }
                broadcastable(op, "bias", bias, &a.scores)?;
                next += 1;
            }
            if *has_seq_lens {
                for (what, s) in [("query_seq_len", inputs[next]), ("key_value_seq_len", inputs[next + 1])] {
                    if s.dtype != DType::Int32 || s.rank() != 1 {
                        bail!(op, "{what} must be Int32 [batch], got {s}");
                    }
                    unify(op, what, s, 0, &a.scores, 0)?;
                }
            }
            Ok(vec![a.out])
        }
        Op::FusedScaledDotProductAttentionVjp { layout, scale, .. } => {
            count(op, inputs, 5)?;
            let (q, k, v, out, d_out) = (inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
            let a = attention(op, *layout, *scale, q, k, v)?;
            if *out != a.out {
                bail!(op, "out has shape {out}; the forward output of these q, k, v has shape {}", a.out);
            }
            if d_out != out {
                bail!(op, "d_out has shape {d_out}; it must equal the shape of out {out}");
            }
            Ok(vec![q.clone(), k.clone(), v.clone()])
        }
        Op::FusedQuantizedDense { quant, has_zero_point, has_bias, .. } => {
            quantized_dense(op, quant, *has_zero_point, *has_bias, inputs).map(|s| vec![s])
        }
        Op::QuantizedEmbeddingLookup { quant } => {
            count(op, inputs, 2)?;
            embedding_lookup(op, quant, inputs[0], inputs[1]).map(|s| vec![s])
        }
        Op::FusedAttentionQkvProjection { q_dim, kv_dim, has_bias_q, has_bias_k, has_bias_v } => {
            let flags = [*has_bias_q, *has_bias_k, *has_bias_v];
            count(op, inputs, 2 + flags.iter().filter(|&&f| f).count())?;
            qkv_projection(op, *q_dim, *kv_dim, flags, inputs)
        }
        _ => Err(Error::invalid(op, "not a fused op (internal dispatch error)")),
    }
}

/// Requires a float dtype: F32, F64, or a half type (F16/BF16, computed in f32 and rounded once
/// per fused op, §9).
fn float_dtype(op: &str, what: &str, s: &Shape) -> Result<()> {
    if !matches!(s.dtype, DType::Float32 | DType::Float64 | DType::BFloat16 | DType::Float16) {
        bail!(op, "{what} has dtype {}; Float32, Float64, BFloat16 or Float16 is required", s.dtype);
    }
    Ok(())
}

/// Requires `s` to have exactly `dims` (static) and `dtype`.
fn exact(op: &str, what: &str, s: &Shape, dtype: DType, dims: &[i64]) -> Result<()> {
    if s.dtype != dtype || s.dims != dims {
        bail!(op, "{what} must be {}, got {s}", Shape::new(dtype, dims));
    }
    Ok(())
}

fn layer_norm(
    op: &str,
    axes: &[usize],
    epsilon: f64,
    inputs: &[&Shape],
    has_gamma: bool,
    has_beta: bool,
) -> Result<Vec<Shape>> {
    let x = inputs[0];
    float_dtype(op, "x", x)?;
    if axes.is_empty() {
        bail!(op, "at least one normalised axis is required");
    }
    check_axes(op, "axes", axes, x.rank(), true)?;
    if !epsilon.is_finite() || epsilon < 0.0 {
        bail!(op, "epsilon {epsilon} must be finite and ≥ 0");
    }
    let params = [("gamma", has_gamma), ("beta", has_beta)].into_iter().filter(|p| p.1).map(|p| p.0);
    for (what, s) in params.zip(&inputs[1..]) {
        if s.dtype != x.dtype || s.rank() != axes.len() {
            bail!(op, "{what} {s} must have dtype {} and the dims of the normalised axes {axes:?} of x {x}", x.dtype);
        }
        for (i, &a) in axes.iter().enumerate() {
            unify(op, what, s, i, x, a)?;
        }
    }
    Ok(vec![x.clone()])
}

fn dense(op: &str, layout: DenseLayout, x: &Shape, w: &Shape, bias: Option<&Shape>) -> Result<Shape> {
    float_dtype(op, "x", x)?;
    if w.dtype != x.dtype {
        bail!(op, "w dtype {} differs from x dtype {}", w.dtype, x.dtype);
    }
    if x.rank() < 1 || w.rank() < 2 {
        bail!(op, "x {x} needs rank ≥ 1 and w {w} rank ≥ 2");
    }
    let (k_axis, outs) = match layout {
        DenseLayout::InputOutputs => (0, 1..w.rank()),
        DenseLayout::OutputsInput => (w.rank() - 1, 0..w.rank() - 1),
    };
    unify(op, "contracted axis (last of x vs the input axis of w)", x, x.rank() - 1, w, k_axis)?;
    let out_dims: Vec<i64> = w.dims[outs.clone()].to_vec();
    if out_dims.contains(&DYNAMIC_DIM) {
        bail!(op, "the output axes of w {w} must be static");
    }
    if let Some(b) = bias {
        exact(op, "bias", b, x.dtype, &out_dims)?;
    }
    let mut dims = x.dims[..x.rank() - 1].to_vec();
    dims.extend(&out_dims);
    let mut nm = names(x);
    nm.pop();
    nm.extend(outs.map(|a| w.axis_name(a).to_string()));
    Ok(make_shape(x.dtype, dims, nm))
}

/// What attention inference learns from q, k and v.
struct Attention {
    /// The output shape: q's shape with v's head dimension.
    out: Shape,
    /// The scores shape `[B, H, S, Skv]` (q's dtype), for mask/bias/seq-len checks.
    scores: Shape,
}

fn attention(op: &str, layout: AttentionLayout, scale: f64, q: &Shape, k: &Shape, v: &Shape) -> Result<Attention> {
    if !q.dtype.is_float() {
        bail!(op, "q has dtype {}; a float dtype is required", q.dtype);
    }
    for (what, s) in [("k", k), ("v", v)] {
        if s.dtype != q.dtype {
            bail!(op, "{what} dtype {} differs from q dtype {}", s.dtype, q.dtype);
        }
    }
    for (what, s) in [("q", q), ("k", k), ("v", v)] {
        if s.rank() != 4 {
            bail!(op, "{what} {s} must have rank 4 ({layout:?} layout)");
        }
    }
    if scale.is_nan() || scale.is_infinite() {
        bail!(op, "scale {scale} must be finite (0 selects 1/√head_dim)");
    }
    let (h_axis, s_axis) = match layout {
        AttentionLayout::Bhsd => (1, 2),
        AttentionLayout::Bshd => (2, 1),
    };
    let (b, b_name) = unify(op, "batch (q vs k)", q, 0, k, 0)?;
    unify(op, "batch (k vs v)", k, 0, v, 0)?;
    unify(op, "head_dim (q vs k)", q, 3, k, 3)?;
    let heads = static_dim(op, "q heads", q, h_axis)?;
    let kv_heads = static_dim(op, "k heads", k, h_axis)?;
    unify(op, "heads (k vs v)", k, h_axis, v, h_axis)?;
    let (skv, skv_name) = unify(op, "sequence length (k vs v)", k, s_axis, v, s_axis)?;
    if kv_heads < 1 || heads % kv_heads != 0 {
        bail!(op, "q has {heads} heads, k/v have {kv_heads}: the kv heads must divide the q heads");
    }
    let mut out_dims = q.dims.clone();
    let mut out_names = names(q);
    out_dims[3] = v.dims[3];
    out_names[3] = v.axis_name(3).to_string();
    let out = make_shape(q.dtype, out_dims, out_names);
    let scores = make_shape(
        q.dtype,
        vec![b, heads, q.dims[s_axis], skv],
        vec![b_name, q.axis_name(h_axis).to_string(), q.axis_name(s_axis).to_string(), skv_name],
    );
    Ok(Attention { out, scores })
}

/// Checks that `s` (rank 2–4) broadcasts, right-aligned, to `target`: each dim equal or 1.
fn broadcastable(op: &str, what: &str, s: &Shape, target: &Shape) -> Result<()> {
    if !(2..=4).contains(&s.rank()) {
        bail!(op, "{what} {s} must have rank 2 to 4 (broadcast to [batch, heads, seq, kv_seq] {target})");
    }
    let offset = target.rank() - s.rank();
    for i in 0..s.rank() {
        if s.dims[i] != 1 && unify(op, what, s, i, target, offset + i).is_err() {
            bail!(op, "{what} {s} does not broadcast to [batch, heads, seq, kv_seq] {target} (axis {i})");
        }
    }
    Ok(())
}

/// `(values, bytes)` per block of a GGML type.
fn ggml_block(t: GgmlType) -> (i64, i64) {
    match t {
        GgmlType::Q4_0 | GgmlType::Iq4Nl => (32, 18),
        GgmlType::Q8_0 => (32, 34),
        GgmlType::Q2K => (256, 84),
        GgmlType::Q3K => (256, 110),
        GgmlType::Q4K => (256, 144),
        GgmlType::Q5K => (256, 176),
        GgmlType::Q6K => (256, 210),
    }
}

/// Checks a GGML row tensor `[rows, bytes_per_row]` of Uint8 and returns the values per row.
fn ggml_row_values(op: &str, what: &str, quant: &Quantization, w: &Shape) -> Result<i64> {
    if matches!(quant.ggml_type, GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q5K) {
        return Err(Error::not_implemented(op, format!("GGML type {:?} is not supported", quant.ggml_type)));
    }
    if w.dtype != DType::Uint8 || w.rank() != 2 {
        bail!(op, "{what} must be Uint8 [rows, bytes_per_row] GGML blocks, got {w}");
    }
    let bytes = static_dim(op, what, w, 1)?;
    let (values, block_bytes) = ggml_block(quant.ggml_type);
    if bytes % block_bytes != 0 {
        bail!(
            op,
            "{what} rows of {bytes} bytes are not a whole number of {:?} blocks ({block_bytes} bytes)",
            quant.ggml_type
        );
    }
    Ok(bytes / block_bytes * values)
}

fn quantized_dense(
    op: &str,
    quant: &Quantization,
    has_zero_point: bool,
    has_bias: bool,
    inputs: &[&Shape],
) -> Result<Shape> {
    let ggml = quant.scheme == QuantScheme::Ggml;
    if ggml && has_zero_point {
        bail!(op, "GGML weights take no zero point");
    }
    if quant.scheme == QuantScheme::Nf4 && has_zero_point {
        bail!(op, "NF4 weights take no zero point");
    }
    let n_in = 2 + usize::from(!ggml) + usize::from(has_zero_point) + usize::from(has_bias);
    count(op, inputs, n_in)?;
    let (x, w) = (inputs[0], inputs[1]);
    if x.dtype != DType::Float32 || x.rank() < 1 {
        bail!(op, "x must be Float32 with rank ≥ 1, got {x}");
    }
    let xk = static_dim(op, "x", x, x.rank() - 1)?;
    let (k, n) = if ggml {
        let k = ggml_row_values(op, "w", quant, w)?;
        (k, static_dim(op, "w", w, 0)?)
    } else {
        let allowed: &[DType] = match quant.scheme {
            QuantScheme::Nf4 => &[DType::Uint8, DType::Int8, DType::Uint4, DType::Int4],
            _ => &[DType::Int8, DType::Uint8, DType::Int4, DType::Uint4, DType::Int2, DType::Uint2],
        };
        if !allowed.contains(&w.dtype) || w.rank() != 2 {
            bail!(op, "{:?} weights must be [K, N] with dtype in {allowed:?}, got {w}", quant.scheme);
        }
        if quant.block_axis != 1 {
            bail!(op, "block_axis is {}; it must be 1 (blocks run along the output columns)", quant.block_axis);
        }
        if quant.block_size < 1 {
            bail!(op, "block_size must be ≥ 1");
        }
        let (k, n) = (static_dim(op, "w", w, 0)?, static_dim(op, "w", w, 1)?);
        let scale_dims = [k, (n as usize).div_ceil(quant.block_size) as i64];
        exact(op, "scale", inputs[2], DType::Float32, &scale_dims)?;
        if has_zero_point {
            exact(op, "zero_point", inputs[3], DType::Float32, &scale_dims)?;
        }
        (k, n)
    };
    if xk != k {
        bail!(op, "x {x} has {xk} input features but w {w} holds {k}");
    }
    if has_bias {
        exact(op, "bias", inputs[n_in - 1], DType::Float32, &[n])?;
    }
    let mut dims = x.dims.clone();
    let mut nm = names(x);
    dims[x.rank() - 1] = n;
    nm[x.rank() - 1].clear();
    Ok(make_shape(DType::Float32, dims, nm))
}

fn embedding_lookup(op: &str, quant: &Quantization, data: &Shape, indices: &Shape) -> Result<Shape> {
    if quant.scheme != QuantScheme::Ggml {
        return Err(Error::not_implemented(op, format!("only GGML quantization is supported, got {:?}", quant.scheme)));
    }
    let k = ggml_row_values(op, "data", quant, data)?;
    check_index_dtype(op, "indices", indices.dtype)?;
    if indices.rank() < 1 || indices.dims[indices.rank() - 1] != 1 {
        bail!(op, "indices must have shape [..., 1], got {indices}");
    }
    let mut dims = indices.dims.clone();
    let mut nm = names(indices);
    let last = dims.len() - 1;
    dims[last] = k;
    nm[last].clear();
    Ok(make_shape(DType::Float32, dims, nm))
}

fn qkv_projection(op: &str, q_dim: i64, kv_dim: i64, flags: [bool; 3], inputs: &[&Shape]) -> Result<Vec<Shape>> {
    let (x, w) = (inputs[0], inputs[1]);
    float_dtype(op, "x", x)?;
    if q_dim < 1 || kv_dim < 1 {
        bail!(op, "q_dim {q_dim} and kv_dim {kv_dim} must be ≥ 1");
    }
    if x.rank() != 2 || w.rank() != 2 || w.dtype != x.dtype {
        bail!(op, "x {x} must be [batch, in] and w_qkv {w} [in, q_dim + 2·kv_dim] of the same dtype");
    }
    unify(op, "input features (x vs w_qkv)", x, 1, w, 0)?;
    // i128: q_dim and kv_dim are unbounded attributes; once equal to a dim they are bounded by it.
    let cols = q_dim as i128 + 2 * kv_dim as i128;
    if w.dims[1] as i128 != cols {
        bail!(op, "w_qkv {w} must have {cols} = q_dim {q_dim} + 2·kv_dim {kv_dim} columns");
    }
    let widths = [("bias_q", q_dim), ("bias_k", kv_dim), ("bias_v", kv_dim)];
    let present = widths.iter().zip(flags).filter(|(_, f)| *f).map(|(wd, _)| wd);
    for (&(what, width), s) in present.zip(&inputs[2..]) {
        exact(op, what, s, x.dtype, &[width])?;
    }
    let (b, b_name) = (x.dims[0], x.axis_name(0).to_string());
    let out = |d: i64| make_shape(x.dtype, vec![b, d], vec![b_name.clone(), String::new()]);
    Ok(vec![out(q_dim), out(kv_dim), out(kv_dim)])
}
