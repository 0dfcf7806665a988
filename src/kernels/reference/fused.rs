//! Reference kernels of the fused ops (§5), computed by their decomposition semantics in f64 and
//! rounded once to the output dtype (F16/BF16/F32/F64). Attention and the quantized ops live in
//! the `fused_*` files.

#[path = "fused_attention.rs"]
mod fused_attention;
#[path = "fused_quant.rs"]
mod fused_quant;

use crate::error::{Error, Result};
use crate::ir::op::{Activation, DenseLayout, Op};
use crate::ir::shape::Shape;
use crate::kernels::reference::common::{
    erf_f64, float_tensor_from_f64, float_tensor_to_f64, strided_offsets, strides,
};
use crate::kernels::tensor::Tensor;

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    let want = |n_in: usize, n_out: usize| -> Result<()> {
        if inputs.len() != n_in {
            return Err(Error::invalid(&name, format!("expected {n_in} operand(s), got {}", inputs.len())));
        }
        if out_shapes.len() != n_out {
            return Err(Error::invalid(&name, format!("expected {n_out} output(s), got {}", out_shapes.len())));
        }
        Ok(())
    };
    match op {
        Op::FusedSoftmax { axis } => {
            want(1, 1)?;
            Ok(vec![softmax(&name, &inputs[0], *axis, &out_shapes[0])?])
        }
        Op::FusedGelu { exact } => {
            want(1, 1)?;
            let x = float_tensor_to_f64(&name, &inputs[0])?;
            let y: Vec<f64> = x.iter().map(|&v| if *exact { gelu_exact(v) } else { gelu_tanh(v) }).collect();
            Ok(vec![float_tensor_from_f64(&name, &out_shapes[0], &y)?])
        }
        Op::FusedLayerNorm { axes, epsilon, has_gamma, has_beta } => {
            want(1 + *has_gamma as usize + *has_beta as usize, 1)?;
            let gamma = has_gamma.then(|| &inputs[1]);
            let beta = has_beta.then(|| &inputs[1 + *has_gamma as usize]);
            Ok(vec![layer_norm(&name, &inputs[0], axes, *epsilon, gamma, beta, &out_shapes[0])?])
        }
        Op::FusedDense { activation, layout, has_bias } => {
            want(2 + *has_bias as usize, 1)?;
            let bias = has_bias.then(|| &inputs[2]);
            Ok(vec![dense(&name, &inputs[0], &inputs[1], bias, *layout, *activation, &out_shapes[0])?])
        }
        Op::FusedAttentionQkvProjection { q_dim, kv_dim, has_bias_q, has_bias_k, has_bias_v } => {
            let flags = [*has_bias_q, *has_bias_k, *has_bias_v];
            want(2 + flags.iter().filter(|f| **f).count(), 3)?;
            let mut next = 2;
            let biases: Vec<Option<&Tensor>> = flags
                .iter()
                .map(|&f| {
                    f.then(|| {
                        next += 1;
                        &inputs[next - 1]
                    })
                })
                .collect();
            qkv_projection(&name, &inputs[0], &inputs[1], &biases, *q_dim, *kv_dim, out_shapes)
        }
        Op::FusedScaledDotProductAttention { .. } => {
            if out_shapes.is_empty() {
                return Err(Error::invalid(&name, "expected an output shape"));
            }
            let out = fused_attention::sdpa(&name, op, inputs, &out_shapes[0])?;
            // Any extra outputs (VJP states) are empty for this backend.
            let mut outs = vec![out];
            for s in &out_shapes[1..] {
                outs.push(Tensor::try_zeros(s.clone())?);
            }
            Ok(outs)
        }
        Op::FusedScaledDotProductAttentionVjp { .. } => {
            Err(Error::not_implemented(name, "the reference backend returns no attention states for a VJP"))
        }
        Op::FusedQuantizedDense { .. } => {
            want(inputs.len(), 1)?;
            Ok(vec![fused_quant::quantized_dense(&name, op, inputs, &out_shapes[0])?])
        }
        Op::QuantizedEmbeddingLookup { quant } => {
            want(2, 1)?;
            Ok(vec![fused_quant::embedding_lookup(&name, quant, &inputs[0], &inputs[1], &out_shapes[0])?])
        }
        _ => Err(Error::invalid(name, "not a fused op")),
    }
}

/// Exact GELU: `x·½·(1 + erf(x/√2))`.
pub(super) fn gelu_exact(x: f64) -> f64 {
    x * 0.5 * (1.0 + erf_f64(x * std::f64::consts::FRAC_1_SQRT_2))
}

/// Tanh-approximated GELU: `x·½·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub(super) fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    x * 0.5 * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// The activations of §5 (Relu keeps NaN).
pub(super) fn activate(act: Activation, x: f64) -> f64 {
    match act {
        Activation::None => x,
        Activation::Gelu => gelu_exact(x),
        Activation::Relu => {
            if x.is_nan() || x > 0.0 {
                x
            } else {
                0.0
            }
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        Activation::Tanh => x.tanh(),
    }
}

/// NaN-propagating maximum.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

fn softmax(name: &str, x: &Tensor, axis: usize, out: &Shape) -> Result<Tensor> {
    let dims = x.shape.udims();
    if axis >= dims.len() {
        return Err(Error::invalid(name, format!("axis {axis} out of range for {}", x.shape)));
    }
    let v = float_tensor_to_f64(name, x)?;
    let (n, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    let outer: usize = dims[..axis].iter().product();
    let mut y = vec![0.0; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            let m = (0..n).fold(f64::NEG_INFINITY, |m, k| nan_max(m, v[at(k)]));
            let mut sum = 0.0;
            for k in 0..n {
                y[at(k)] = (v[at(k)] - m).exp();
                sum += y[at(k)];
            }
            for k in 0..n {
                y[at(k)] /= sum;
            }
        }
    }
    float_tensor_from_f64(name, out, &y)
}

/// The values of an optional per-position parameter (gamma/beta/bias) that must hold `n` values.
fn param(name: &str, what: &str, t: Option<&Tensor>, n: usize) -> Result<Option<Vec<f64>>> {
    let Some(t) = t else { return Ok(None) };
    let v = float_tensor_to_f64(name, t)?;
    if v.len() != n {
        return Err(Error::invalid(name, format!("{what} {} must hold {n} values", t.shape)));
    }
    Ok(Some(v))
}

fn layer_norm(
    name: &str,
    x: &Tensor,
    axes: &[usize],
    eps: f64,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    out: &Shape,
) -> Result<Tensor> {
    let dims = x.shape.udims();
    let rank = dims.len();
    let mut norm = vec![false; rank];
    for &a in axes {
        if a >= rank || norm[a] {
            return Err(Error::invalid(name, format!("axes {axes:?} out of range or repeated for {}", x.shape)));
        }
        norm[a] = true;
    }
    let kept: Vec<usize> = (0..rank).filter(|&a| !norm[a]).map(|a| dims[a]).collect();
    let normd: Vec<usize> = (0..rank).filter(|&a| norm[a]).map(|a| dims[a]).collect();
    let (ks, ns) = (strides(&kept), strides(&normd));
    let (mut kst, mut nst) = (vec![0; rank], vec![0; rank]);
    let (mut ki, mut ni) = (0, 0);
    for a in 0..rank {
        if norm[a] {
            nst[a] = ns[ni];
            ni += 1;
        } else {
            kst[a] = ks[ki];
            ki += 1;
        }
    }
    let group = strided_offsets(&dims, &kst);
    let pos = strided_offsets(&dims, &nst);
    let n: usize = normd.iter().product();
    let groups: usize = kept.iter().product();
    let gamma = param(name, "gamma", gamma, n)?;
    let beta = param(name, "beta", beta, n)?;
    let v = float_tensor_to_f64(name, x)?;
    let mut mean = vec![0.0; groups];
    for (&e, &g) in v.iter().zip(&group) {
        mean[g] += e;
    }
    mean.iter_mut().for_each(|m| *m /= n as f64);
    let mut var = vec![0.0; groups];
    for (&e, &g) in v.iter().zip(&group) {
        var[g] += (e - mean[g]) * (e - mean[g]);
    }
    var.iter_mut().for_each(|s| *s /= n as f64);
    let y: Vec<f64> = v
        .iter()
        .enumerate()
        .map(|(i, &e)| {
            let (g, p) = (group[i], pos[i]);
            let mut r = (e - mean[g]) / (var[g] + eps).sqrt();
            if let Some(gm) = &gamma {
                r *= gm[p];
            }
            if let Some(b) = &beta {
                r += b[p];
            }
            r
        })
        .collect();
    float_tensor_from_f64(name, out, &y)
}

/// `act(x·w + bias)`; `w` is `[K, N…]` (InputOutputs) or `[N…, K]` (OutputsInput).
fn dense(
    name: &str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    layout: DenseLayout,
    act: Activation,
    out: &Shape,
) -> Result<Tensor> {
    let (xd, wd) = (x.shape.udims(), w.shape.udims());
    if xd.is_empty() || wd.is_empty() {
        return Err(Error::invalid(name, format!("x {} and w {} must have rank ≥ 1", x.shape, w.shape)));
    }
    let k = xd[xd.len() - 1];
    let wk = if layout == DenseLayout::InputOutputs { wd[0] } else { wd[wd.len() - 1] };
    if wk != k {
        return Err(Error::invalid(name, format!("contracted dims differ: x {} vs w {}", x.shape, w.shape)));
    }
    let n: usize = if layout == DenseLayout::InputOutputs {
        wd[1..].iter().product()
    } else {
        wd[..wd.len() - 1].iter().product()
    };
    let m: usize = xd[..xd.len() - 1].iter().product();
    if out.num_elements() != m * n {
        return Err(Error::invalid(name, format!("output {out} does not hold {m}×{n} values")));
    }
    let xv = float_tensor_to_f64(name, x)?;
    let wv = float_tensor_to_f64(name, w)?;
    let bv = param(name, "bias", bias, n)?;
    let mut y = vec![0.0; m * n];
    for r in 0..m {
        for c in 0..n {
            let mut s = 0.0;
            for kk in 0..k {
                let wval = if layout == DenseLayout::InputOutputs { wv[kk * n + c] } else { wv[c * k + kk] };
                s += xv[r * k + kk] * wval;
            }
            if let Some(b) = &bv {
                s += b[c];
            }
            y[r * n + c] = activate(act, s);
        }
    }
    float_tensor_from_f64(name, out, &y)
}

fn qkv_projection(
    name: &str,
    x: &Tensor,
    w: &Tensor,
    biases: &[Option<&Tensor>],
    q_dim: i64,
    kv_dim: i64,
    outs: &[Shape],
) -> Result<Vec<Tensor>> {
    let (xd, wd) = (x.shape.udims(), w.shape.udims());
    if q_dim < 0 || kv_dim < 0 {
        return Err(Error::invalid(name, format!("q_dim {q_dim} and kv_dim {kv_dim} must be ≥ 0")));
    }
    let (qd, kd) = (q_dim as usize, kv_dim as usize);
    let total = qd + 2 * kd;
    if xd.len() != 2 || wd.len() != 2 || wd[0] != xd[1] || wd[1] != total {
        return Err(Error::invalid(
            name,
            format!("x {} and w_qkv {} must be [B, in] and [in, {total}]", x.shape, w.shape),
        ));
    }
    let (b, k) = (xd[0], xd[1]);
    let xv = float_tensor_to_f64(name, x)?;
    let wv = float_tensor_to_f64(name, w)?;
    let widths = [qd, kd, kd];
    let mut start = 0;
    let mut res = Vec::with_capacity(3);
    for (i, &wid) in widths.iter().enumerate() {
        let bias = param(name, ["bias_q", "bias_k", "bias_v"][i], biases[i], wid)?;
        let mut y = vec![0.0; b * wid];
        for r in 0..b {
            for c in 0..wid {
                let mut s: f64 = (0..k).map(|kk| xv[r * k + kk] * wv[kk * total + start + c]).sum();
                if let Some(bv) = &bias {
                    s += bv[c];
                }
                y[r * wid + c] = s;
            }
        }
        res.push(float_tensor_from_f64(name, &outs[i], &y)?);
        start += wid;
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::*;
    use crate::ir::dtype::{DType, Element};

    fn t<T: Element>(dims: &[i64], v: &[T]) -> Tensor {
        Tensor::from_vec(Shape::new(T::DTYPE, dims), v).unwrap()
    }
    fn run1(op: &Op, inputs: &[Tensor], out: Shape) -> Tensor {
        eval(op, inputs, &[out]).unwrap().remove(0)
    }

    #[test]
    fn softmax_values_and_stability() {
        let x = t(&[2, 3], &[1.0f64, 2.0, 3.0, 1000.0, 1001.0, 1002.0]);
        let y = run1(&Op::FusedSoftmax { axis: 1 }, std::slice::from_ref(&x), x.shape.clone());
        // softmax(1,2,3) = e^k / (e + e² + e³): 0.09003057317038046, 0.24472847105479764, 0.6652409557748219.
        let e = [0.09003057317038046, 0.24472847105479764, 0.6652409557748219];
        for (i, v) in y.typed::<f64>().iter().enumerate() {
            assert!((v - e[i % 3]).abs() < 1e-15, "{i}: {v}");
        }
        let x = t(&[2, 2], &[0.0f32, 0.0, 1.0, 1.0]);
        let y = run1(&Op::FusedSoftmax { axis: 0 }, std::slice::from_ref(&x), x.shape.clone());
        let s = 1.0 / (1.0 + std::f32::consts::E);
        let r = y.typed::<f32>();
        assert!((r[0] - s).abs() < 1e-7 && (r[2] - (1.0 - s)).abs() < 1e-7);
        assert!(eval(&Op::FusedSoftmax { axis: 2 }, std::slice::from_ref(&x), std::slice::from_ref(&x.shape)).is_err());
    }

    #[test]
    fn gelu_points() {
        let x = t(&[3], &[1.0f64, 0.0, -1.0]);
        let y = run1(&Op::FusedGelu { exact: true }, std::slice::from_ref(&x), x.shape.clone());
        let r = y.typed::<f64>();
        assert!((r[0] - 0.8413447460685429).abs() < 1e-15);
        assert_eq!(r[1], 0.0);
        assert!((r[2] + 0.15865525393145707).abs() < 1e-15);
        // tanh form at 1: 0.5·(1 + tanh(√(2/π)·1.044715)) = 0.8411919906082768.
        let y = run1(&Op::FusedGelu { exact: false }, std::slice::from_ref(&x), x.shape.clone());
        assert!((y.typed::<f64>()[0] - 0.8411919906082768).abs() < 1e-15);
        let h = t(&[1], &[bf16::from_f32(1.0)]);
        let y = run1(&Op::FusedGelu { exact: true }, std::slice::from_ref(&h), h.shape.clone());
        assert_eq!(y.typed::<bf16>()[0], bf16::from_f64(0.8413447460685429));
    }

    #[test]
    fn layer_norm_closed_forms() {
        // Row [1,2,3,4]: mean 2.5, var 1.25; y = (x−2.5)/√(1.25+ε) → ·2 + 1; a constant row gives beta.
        let x = t(&[2, 4], &[1.0f64, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0]);
        let g = t(&[4], &[2.0f64; 4]);
        let b = t(&[4], &[1.0f64; 4]);
        let op = Op::FusedLayerNorm { axes: vec![1], epsilon: 1e-5, has_gamma: true, has_beta: true };
        let y = run1(&op, &[x.clone(), g, b], x.shape.clone());
        let s = (1.25f64 + 1e-5).sqrt();
        let expect = [1.0 - 3.0 / s, 1.0 - 1.0 / s, 1.0 + 1.0 / s, 1.0 + 3.0 / s];
        for (v, e) in y.typed::<f64>()[..4].iter().zip(expect) {
            assert!((v - e).abs() < 1e-14);
        }
        assert_eq!(&y.typed::<f64>()[4..], &[1.0; 4]);
        // Joint axes (0, 1) of a [2, 2] f32 with eps 1e-5: mean 2.5, var 1.25.
        let x = t(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]);
        let op = Op::FusedLayerNorm { axes: vec![0, 1], epsilon: 1e-5, has_gamma: false, has_beta: false };
        let y = run1(&op, std::slice::from_ref(&x), x.shape.clone());
        let d = (1.25f64 + 1e-5).sqrt();
        assert!((y.typed::<f32>()[0] as f64 + 1.5 / d).abs() < 1e-6);
        // Axis 0 of a [2, 2]: columns normalised separately: ±1 (eps 0).
        let op = Op::FusedLayerNorm { axes: vec![0], epsilon: 0.0, has_gamma: false, has_beta: false };
        let y = run1(&op, std::slice::from_ref(&x), x.shape.clone());
        assert_eq!(y.typed::<f32>(), &[-1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn dense_layouts_and_activations() {
        // x [2,3] · w [3,2] + bias.
        let x = t(&[2, 3], &[1.0f32, 2.0, 3.0, -1.0, -2.0, -3.0]);
        let w = t(&[3, 2], &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0]);
        let b = t(&[2], &[0.5f32, -0.5]);
        let op = Op::FusedDense { activation: Activation::None, layout: DenseLayout::InputOutputs, has_bias: true };
        let out = Shape::new(DType::Float32, &[2, 2]);
        let y = run1(&op, &[x.clone(), w, b.clone()], out.clone());
        assert_eq!(y.typed::<f32>(), &[4.5, 4.5, -3.5, -5.5]);
        let wt = t(&[2, 3], &[1.0f32, 0.0, 1.0, 0.0, 1.0, 1.0]);
        let op = Op::FusedDense { activation: Activation::Relu, layout: DenseLayout::OutputsInput, has_bias: true };
        let y = run1(&op, &[x, wt, b], out);
        assert_eq!(y.typed::<f32>(), &[4.5, 4.5, 0.0, 0.0]);
        assert!(activate(Activation::Relu, f64::NAN).is_nan());
        assert_eq!(activate(Activation::HardSwish, 1.0), 1.0 * (1.0 / 6.0 + 0.5));
        assert_eq!(activate(Activation::HardSwish, 4.0), 4.0);
        assert_eq!(activate(Activation::HardSwish, -4.0), 0.0);
        assert_eq!(activate(Activation::Silu, 0.0), 0.0);
        assert!((activate(Activation::Silu, 1.0) - 0.7310585786300049).abs() < 1e-15);
        assert_eq!(activate(Activation::Tanh, 0.0), 0.0);
        assert!((activate(Activation::Gelu, 1.0) - 0.8413447460685429).abs() < 1e-15);
    }

    #[test]
    fn qkv_projection_example() {
        // x [1,3] = [1,2,3], w columns chosen so q = [11,22] − bias, k = [103], v = [1006].
        let x = t(&[1, 3], &[1.0f32, 0.0, 0.0]);
        let w = t(&[3, 4], &[10.0f32, 20.0, 100.0, 1000.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let bq = t(&[2], &[1.0f32, 2.0]);
        let bk = t(&[1], &[3.0f32]);
        let bv = t(&[1], &[6.0f32]);
        let op = Op::FusedAttentionQkvProjection {
            q_dim: 2,
            kv_dim: 1,
            has_bias_q: true,
            has_bias_k: true,
            has_bias_v: true,
        };
        let outs = [
            Shape::new(DType::Float32, &[1, 2]),
            Shape::new(DType::Float32, &[1, 1]),
            Shape::new(DType::Float32, &[1, 1]),
        ];
        let r = eval(&op, &[x, w, bq, bk, bv], &outs).unwrap();
        assert_eq!(r[0].typed::<f32>(), &[11.0, 22.0]);
        assert_eq!(r[1].typed::<f32>(), &[103.0]);
        assert_eq!(r[2].typed::<f32>(), &[1006.0]);
    }
}
