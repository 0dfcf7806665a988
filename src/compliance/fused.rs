//! Compliance cases for the fused ops (ops.md §5, §7 FusedOps): softmax, GELU, layer norm,
//! dense, attention, QKV projection and the quantized ops. Expected values come from the
//! closed-form definitions of §5 (evaluated by hand or with libm).

use std::sync::Arc;

use half::{bf16, f16};

use super::*;
use crate::api::AttentionConfig;
use crate::ir::op::{Activation, AttentionLayout, DenseLayout, GgmlType, QuantScheme, Quantization};

const SM123: [f64; 3] = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218];

/// Softmax of `[1,2,3]` along axis 0.
pub fn softmax_1d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedSoftmax], [Float32]);
    let out = exec1(b, &[v(&[1f32, 2., 3.])], |f, p| f.fused_softmax(p[0], 0))?;
    expect_close::<f32>("1D", &out, &[3], &SM123, 1e-6, 0.0)
}

/// Softmax of 2-D inputs along axis 1 (rows sum to 1) and axis 0.
pub fn softmax_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedSoftmax], [Float32]);
    let out = exec1(b, &[t(&[1f32, 2., 3., 1., 1., 1.], &[2, 3])], |f, p| f.fused_softmax(p[0], 1))?;
    let third = 1. / 3.;
    expect_close::<f32>("axis 1", &out, &[2, 3], &[SM123[0], SM123[1], SM123[2], third, third, third], 1e-6, 0.0)?;
    let out = exec1(b, &[t(&[1f32, 2., 3., 2.], &[2, 2])], |f, p| f.fused_softmax(p[0], 0))?;
    expect_close::<f32>("axis 0", &out, &[2, 2], &[0.11920292202211755, 0.5, 0.8807970779778823, 0.5], 1e-6, 0.0)
}

/// Large inputs stay finite: softmax(`[1000,1001,1002]`) = softmax(`[0,1,2]`); −Inf entries get 0.
pub fn softmax_stability(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedSoftmax], [Float32]);
    let out = exec1(b, &[v(&[1000f32, 1001., 1002.])], |f, p| f.fused_softmax(p[0], 0))?;
    expect_close::<f32>("large", &out, &[3], &SM123, 1e-6, 0.0)?;
    let out = exec1(b, &[v(&[f32::NEG_INFINITY, 0., 0.])], |f, p| f.fused_softmax(p[0], 0))?;
    expect_close::<f32>("-inf", &out, &[3], &[0., 0.5, 0.5], 1e-7, 0.0)
}

/// A negative axis is an error for FusedSoftmax (§5).
pub fn softmax_negative_axis_error(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedSoftmax], [Float32]);
    expect_error1(b, "axis -1", &[t(&[1f32; 4], &[2, 2])], |f, p| f.fused_softmax(p[0], -1))?;
    expect_error1(b, "axis 2", &[t(&[1f32; 4], &[2, 2])], |f, p| f.fused_softmax(p[0], 2))
}

/// F64 softmax.
pub fn softmax_f64(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedSoftmax], [Float64]);
    let out = exec1(b, &[v(&[1f64, 2., 3.])], |f, p| f.fused_softmax(p[0], 0))?;
    expect_close::<f64>("f64", &out, &[3], &SM123, 1e-14, 0.0)
}

const GELU_X: [f32; 7] = [-3., -1., -0.5, 0., 0.5, 1., 3.];
const GELU_EXACT: [f64; 7] = [
    -0.00404969409489031,
    -0.15865525393145707,
    -0.15426876936299344,
    0.0,
    0.34573123063700656,
    0.8413447460685429,
    2.99595030590511,
];
const GELU_TANH: [f64; 7] = [
    -0.0036373920817729943,
    -0.15880800939172324,
    -0.15428599017485606,
    0.0,
    0.34571400982514394,
    0.8411919906082768,
    2.996362607918227,
];

/// Exact GELU `x·Φ(x)` at seven points.
pub fn gelu_exact(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedGelu], [Float32]);
    let out = exec1(b, &[v(&GELU_X)], |f, p| f.fused_gelu(p[0], true))?;
    expect_close::<f32>("exact", &out, &[7], &GELU_EXACT, 1e-6, 0.0)?;
    if has_dtype(b, DType::Float64) {
        let x: Vec<f64> = GELU_X.iter().map(|&x| x as f64).collect();
        let out = exec1(b, &[v(&x)], |f, p| f.fused_gelu(p[0], true))?;
        expect_close::<f64>("exact f64", &out, &[7], &GELU_EXACT, 1e-12, 0.0)?;
    }
    Ok(())
}

/// Tanh-approximate GELU at the same points (differs from the exact form).
pub fn gelu_approximate(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedGelu], [Float32]);
    let out = exec1(b, &[v(&GELU_X)], |f, p| f.fused_gelu(p[0], false))?;
    expect_close::<f32>("approximate", &out, &[7], &GELU_TANH, 1e-6, 0.0)
}

fn gelu_half_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = exec1(b, &[v(&vals::<T>(&[-1., 0., 1., 3.]))], |f, p| f.fused_gelu(p[0], true))?;
    let want = [GELU_EXACT[1], 0., GELU_EXACT[5], GELU_EXACT[6]];
    expect_close::<T>("half", &out, &[4], &want, 0.0, 2. * tol_for::<T>())
}

/// GELU in F16 and BF16 (computed in f32, rounded once).
pub fn gelu_half(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedGelu]);
    for_types!(b, gelu_half_typed, [f16, bf16])
}

/// LayerNorm over the last axis (eps 1e-5): rows have zero mean and unit variance.
pub fn layer_norm_simple(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedLayerNorm], [Float32]);
    let out = exec1(b, &[t(&[1f32, 2., 3., 4., 2., 2., 2., 6.], &[2, 4])], |f, p| {
        f.fused_layer_norm(p[0], &[-1], 1e-5, None, None)
    })?;
    let want = [
        -1.3416354199689269,
        -0.447211806656309,
        0.447211806656309,
        1.3416354199689269,
        -0.5773493069415827,
        -0.5773493069415827,
        -0.5773493069415827,
        1.7320479208247481,
    ];
    expect_close::<f32>("simple", &out, &[2, 4], &want, 1e-5, 0.0)
}

/// LayerNorm with gamma `[1,2,3,4]` and beta `[0,1,0,1]`.
pub fn layer_norm_gamma_beta(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedLayerNorm], [Float32]);
    let ins = [t(&[1f32, 2., 3., 4.], &[1, 4]), v(&[1f32, 2., 3., 4.]), v(&[0f32, 1., 0., 1.])];
    let out = exec1(b, &ins, |f, p| f.fused_layer_norm(p[0], &[1], 1e-5, Some(p[1]), Some(p[2])))?;
    let want = [-1.3416354199689269, 0.105576386687382, 1.341635419968927, 6.366541679875708];
    expect_close::<f32>("gamma/beta", &out, &[1, 4], &want, 1e-5, 0.0)?;
    let out = exec1(b, &[t(&[1f32, 2., 3., 4.], &[1, 4]), sc(2f32)], |f, p| {
        let g = f.broadcast_in_dim(p[1], &shape(DType::Float32, &[4]), &[])?;
        let beta = f.scalar(1f32)?;
        let beta = f.broadcast_in_dim(beta, &shape(DType::Float32, &[4]), &[])?;
        f.fused_layer_norm(p[0], &[1], 1e-5, Some(g), Some(beta))
    })?;
    let want = [-1.6832708399378538, 0.105576386687382, 1.894423613312618, 3.6832708399378538];
    expect_close::<f32>("gamma 2, beta 1", &out, &[1, 4], &want, 1e-5, 0.0)
}

/// LayerNorm over two axes (`[1,2,2]` normalised over axes 1 and 2).
pub fn layer_norm_two_axes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedLayerNorm], [Float32]);
    let out =
        exec1(b, &[t(&[1f32, 2., 3., 5.], &[1, 2, 2])], |f, p| f.fused_layer_norm(p[0], &[1, 2], 1e-5, None, None))?;
    let want = [-1.1832132521355805, -0.5070913937723917, 0.1690304645907972, 1.521274181317175];
    expect_close::<f32>("two axes", &out, &[1, 2, 2], &want, 1e-5, 0.0)
}

const DENSE_X: [f32; 6] = [1., 2., 3., 4., 5., 6.];
const DENSE_W: [f32; 12] = [1., 0., -1., 2., 0., 1., 1., -1., 1., 1., 0., 0.];
const DENSE_B: [f32; 4] = [0.5, -10., 0., 1.];
/// `x·w + bias` for the constants above.
const DENSE_PRE: [f64; 8] = [4.5, -5., 1., 1., 10.5, 1., 1., 4.];

fn dense(b: &Arc<dyn Backend>, act: Activation) -> Result<Buffer, String> {
    let ins = [t(&DENSE_X, &[2, 3]), t(&DENSE_W, &[3, 4]), v(&DENSE_B)];
    exec1(b, &ins, |f, p| f.fused_dense(p[0], p[1], Some(p[2]), act, DenseLayout::InputOutputs))
}

/// FusedDense without activation: `[2,3]·[3,4] + bias`.
pub fn dense_none(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedDense], [Float32]);
    expect_close::<f32>("none", &dense(b, Activation::None)?, &[2, 4], &DENSE_PRE, 1e-6, 0.0)?;
    let out = exec1(b, &[t(&DENSE_X, &[2, 3]), t(&DENSE_W, &[3, 4])], |f, p| {
        f.fused_dense(p[0], p[1], None, Activation::None, DenseLayout::InputOutputs)
    })?;
    expect_close::<f32>("no bias", &out, &[2, 4], &[4., 5., 1., 0., 10., 11., 1., 3.], 1e-6, 0.0)
}

/// FusedDense with Relu clamps negatives.
pub fn dense_relu(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedDense], [Float32]);
    let want = [4.5, 0., 1., 1., 10.5, 1., 1., 4.];
    expect_close::<f32>("relu", &dense(b, Activation::Relu)?, &[2, 4], &want, 1e-6, 0.0)
}

/// FusedDense with Gelu (exact), Silu, HardSwish and Tanh.
pub fn dense_activations(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedDense], [Float32]);
    let g1 = 0.8413447460685429;
    let s1 = 0.7310585786300049;
    let t1 = 0.7615941559557649;
    let cases: [(Activation, [f64; 8]); 4] = [
        (Activation::Gelu, [4.4999847104709385, -1.4332578593401202e-06, g1, g1, 10.5, g1, g1, 3.9998733150326675]),
        (
            Activation::Silu,
            [4.450558758162331, -0.03346425462142428, s1, s1, 10.499710875243297, s1, s1, 3.928055160151634],
        ),
        (Activation::HardSwish, [4.5, 0., 2. / 3., 2. / 3., 10.5, 2. / 3., 2. / 3., 4.]),
        (
            Activation::Tanh,
            [0.9997532108480275, -0.9999092042625951, t1, t1, 0.9999999984834879, t1, t1, 0.999329299739067],
        ),
    ];
    for (act, want) in cases {
        expect_close::<f32>(&format!("{act:?}"), &dense(b, act)?, &[2, 4], &want, 1e-6, 1e-6)?;
    }
    Ok(())
}

/// OutputsInput layout: w `[N,K]` (the transpose) gives the same result.
pub fn dense_outputs_input_layout(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedDense], [Float32]);
    let mut wt = [0f32; 12];
    for k in 0..3 {
        for n in 0..4 {
            wt[n * 3 + k] = DENSE_W[k * 4 + n];
        }
    }
    let ins = [t(&DENSE_X, &[2, 3]), t(&wt, &[4, 3]), v(&DENSE_B)];
    let out =
        exec1(b, &ins, |f, p| f.fused_dense(p[0], p[1], Some(p[2]), Activation::None, DenseLayout::OutputsInput))?;
    expect_close::<f32>("outputs-input", &out, &[2, 4], &DENSE_PRE, 1e-6, 0.0)
}

/// Several output axes: w `[3,2,2]`, bias `[2,2]` → output `[2,2,2]`.
pub fn dense_multi_dim_outputs(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedDense], [Float32]);
    let ins = [t(&DENSE_X, &[2, 3]), t(&DENSE_W, &[3, 2, 2]), t(&DENSE_B, &[2, 2])];
    let out =
        exec1(b, &ins, |f, p| f.fused_dense(p[0], p[1], Some(p[2]), Activation::None, DenseLayout::InputOutputs))?;
    expect_close::<f32>("multi-dim", &out, &[2, 2, 2], &DENSE_PRE, 1e-6, 0.0)
}

fn attention(
    b: &Arc<dyn Backend>,
    ins: &[Buffer],
    layout: AttentionLayout,
    scale: f64,
    causal: bool,
    extra: Option<&str>,
    quantized: bool,
) -> Result<Buffer, String> {
    exec1(b, ins, |f, p| {
        let cfg = AttentionConfig {
            scale,
            causal,
            mask: if extra == Some("mask") { Some(p[3]) } else { None },
            bias: if extra == Some("bias") { Some(p[3]) } else { None },
            seq_lens: None,
            quantized_matmuls: quantized,
        };
        Ok(f.fused_scaled_dot_product_attention(p[0], p[1], p[2], layout, &cfg)?.0)
    })
}

/// BHSD, q = k = 1, v = (10, 20), scale 1, causal → (10, 15).
pub fn attention_bhsd_causal(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32]);
    let d = [1, 1, 2, 1];
    let ins = [t(&[1f32, 1.], &d), t(&[1f32, 1.], &d), t(&[10f32, 20.], &d)];
    let out = attention(b, &ins, AttentionLayout::Bhsd, 1.0, true, None, false)?;
    expect_close::<f32>("BHSD causal", &out, &d, &[10., 15.], 1e-5, 0.0)
}

/// The same in BSHD layout (`[1,2,1,1]`).
pub fn attention_bshd_causal(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32]);
    let d = [1, 2, 1, 1];
    let ins = [t(&[1f32, 1.], &d), t(&[1f32, 1.], &d), t(&[10f32, 20.], &d)];
    let out = attention(b, &ins, AttentionLayout::Bshd, 1.0, true, None, false)?;
    expect_close::<f32>("BSHD causal", &out, &d, &[10., 15.], 1e-5, 0.0)
}

fn attention_half_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    for (layout, d) in [(AttentionLayout::Bhsd, [1usize, 1, 2, 8]), (AttentionLayout::Bshd, [1, 2, 1, 8])] {
        let ones = vals::<T>(&[1.; 16]);
        let mut vv = vals::<T>(&[10.; 8]);
        vv.extend(vals::<T>(&[20.; 8]));
        let out = attention(b, &[t(&ones, &d), t(&ones, &d), t(&vv, &d)], layout, 1.0, true, None, false)?;
        let mut want = vec![10.; 8];
        want.extend([15.; 8]);
        expect_close::<T>(&format!("{layout:?}"), &out, &d, &want, 0.0, 2. * tol_for::<T>())?;
    }
    Ok(())
}

/// Causal attention in BF16 and F16, head_dim 8, both layouts.
pub fn attention_half_causal(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention]);
    for_types!(b, attention_half_typed, [bf16, f16])
}

/// A Bool mask `[[T,F]]` (true = attend) hides the second key → 10.
pub fn attention_boolean_mask(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32, Bool]);
    let ins = [
        t(&[1f32], &[1, 1, 1, 1]),
        t(&[1f32, 1.], &[1, 1, 2, 1]),
        t(&[10f32, 20.], &[1, 1, 2, 1]),
        t(&[true, false], &[1, 2]),
    ];
    let out = attention(b, &ins, AttentionLayout::Bhsd, 1.0, false, Some("mask"), false)?;
    expect_close::<f32>("mask", &out, &[1, 1, 1, 1], &[10.], 1e-5, 0.0)
}

/// An additive bias `[[−10,10]]` puts almost all weight on the second key → ≈ 20.
pub fn attention_bias(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32]);
    let ins = [
        t(&[1f32], &[1, 1, 1, 1]),
        t(&[1f32, 1.], &[1, 1, 2, 1]),
        t(&[10f32, 20.], &[1, 1, 2, 1]),
        t(&[-10f32, 10.], &[1, 2]),
    ];
    let out = attention(b, &ins, AttentionLayout::Bhsd, 1.0, false, Some("bias"), false)?;
    expect_close::<f32>("bias", &out, &[1, 1, 1, 1], &[20.], 0.01, 0.0)
}

/// Causal plus bias `[[0,0],[−10,10]]` → (10, ≈20).
pub fn attention_bias_with_causal(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32]);
    let d = [1, 1, 2, 1];
    let ins = [t(&[1f32, 1.], &d), t(&[1f32, 1.], &d), t(&[10f32, 20.], &d), t(&[0f32, 0., -10., 10.], &[2, 2])];
    let out = attention(b, &ins, AttentionLayout::Bhsd, 1.0, true, Some("bias"), false)?;
    expect_close::<f32>("causal + bias", &out, &d, &[10., 20.], 0.01, 0.0)
}

/// Scale 0 selects 1/√head_dim: q = (2,0,0,0), keys 0 and (1,0,0,0) → scores (0,1) →
/// 10 + 10·e/(1+e) = 17.3106.
pub fn attention_default_scale(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32]);
    let ins = [
        t(&[2f32, 0., 0., 0.], &[1, 1, 1, 4]),
        t(&[0f32, 0., 0., 0., 1., 0., 0., 0.], &[1, 1, 2, 4]),
        t(&[10f32, 20.], &[1, 1, 2, 1]),
    ];
    let out = attention(b, &ins, AttentionLayout::Bhsd, 0.0, false, None, false)?;
    expect_close::<f32>("default scale", &out, &[1, 1, 1, 1], &[17.31058578630005], 1e-5, 0.0)
}

/// Grouped-query attention: 2 query heads share 1 kv head; q = (0, ln 3), keys (0, 1),
/// v = (10, 20) → head 0: 15, head 1: weights (1/4, 3/4) → 17.5.
pub fn attention_gqa(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32]);
    let ins = [t(&[0f32, 3f32.ln()], &[1, 2, 1, 1]), t(&[0f32, 1.], &[1, 1, 2, 1]), t(&[10f32, 20.], &[1, 1, 2, 1])];
    let out = attention(b, &ins, AttentionLayout::Bhsd, 1.0, false, None, false)?;
    expect_close::<f32>("GQA", &out, &[1, 2, 1, 1], &[15., 17.5], 1e-5, 0.0)
}

/// The `quantized_matmuls` hint may be ignored: same result as without it.
pub fn attention_quantized_hint(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedScaledDotProductAttention], [Float32]);
    let d = [1, 1, 2, 1];
    let ins = [t(&[1f32, 1.], &d), t(&[1f32, 1.], &d), t(&[10f32, 20.], &d)];
    let out = attention(b, &ins, AttentionLayout::Bhsd, 1.0, true, None, true)?;
    expect_close::<f32>("hint", &out, &d, &[10., 15.], 1e-5, 0.0)
}

/// QKV projection: x `[1,3]`, w `[3,4]`, q_dim 2, kv_dim 1 with biases → q `[11,22]`, k `[103]`,
/// v `[1003]`.
pub fn qkv_projection(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedAttentionQKVProjection], [Float32]);
    let w = [1f32, 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 1.];
    let ins = [t(&[1f32, 2., 3.], &[1, 3]), t(&w, &[3, 4]), v(&[10f32, 20.]), v(&[100f32]), v(&[1000f32])];
    let out = exec(b, &ins, |f, p| {
        let (q, k, vv) = f.fused_attention_qkv_projection(p[0], p[1], Some(p[2]), Some(p[3]), Some(p[4]), 2, 1)?;
        Ok(vec![q, k, vv])
    })?;
    expect_close::<f32>("q", &out[0], &[1, 2], &[11., 22.], 1e-6, 0.0)?;
    expect_close::<f32>("k", &out[1], &[1, 1], &[103.], 1e-6, 0.0)?;
    expect_close::<f32>("v", &out[2], &[1, 1], &[1003.], 1e-6, 0.0)
}

fn linear(block_size: usize) -> Quantization {
    Quantization { scheme: QuantScheme::Linear, block_axis: 1, block_size, ggml_type: GgmlType::default() }
}

/// Linear Int8: w `[[1,−2,3],[4,5,−6]]`, scales `[[0.5],[2]]` (block 3), x `[1,2]` →
/// `[16.5,19,−22.5]`; with bias 1 and Relu → `[17.5,20,0]`.
pub fn quantized_dense_linear_int8(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedQuantizedDense], [Float32, Int8]);
    let ins = || vec![t(&[1f32, 2.], &[1, 2]), t(&[1i8, -2, 3, 4, 5, -6], &[2, 3]), t(&[0.5f32, 2.], &[2, 1])];
    let out = exec1(b, &ins(), |f, p| {
        f.fused_quantized_dense(p[0], p[1], Some(p[2]), None, None, linear(3), Activation::None)
    })?;
    expect_close::<f32>("linear", &out, &[1, 3], &[16.5, 19., -22.5], 1e-5, 0.0)?;
    let mut with_bias = ins();
    with_bias.push(v(&[1f32, 1., 1.]));
    let out = exec1(b, &with_bias, |f, p| {
        f.fused_quantized_dense(p[0], p[1], Some(p[2]), None, Some(p[3]), linear(3), Activation::Relu)
    })?;
    expect_close::<f32>("bias + relu", &out, &[1, 3], &[17.5, 20., 0.], 1e-5, 0.0)
}

/// Linear Int8 with block size 2 (scales `[2,2]`) and a zero point added after scaling:
/// dequant = `[[1.5,0,3],[8,10,−19]]`, x `[1,2]` → `[17.5,20,−35]`.
pub fn quantized_dense_linear_zero_point_blocks(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedQuantizedDense], [Float32, Int8]);
    let ins = [
        t(&[1f32, 2.], &[1, 2]),
        t(&[1i8, -2, 3, 4, 5, -6], &[2, 3]),
        t(&[0.5f32, 1., 2., 3.], &[2, 2]),
        t(&[1f32, 0., 0., -1.], &[2, 2]),
    ];
    let out = exec1(b, &ins, |f, p| {
        f.fused_quantized_dense(p[0], p[1], Some(p[2]), Some(p[3]), None, linear(2), Activation::None)
    })?;
    expect_close::<f32>("zero point", &out, &[1, 3], &[17.5, 20., -35.], 1e-5, 0.0)
}

/// NF4: w (U8, one code per byte) `[[0,15],[7,8]]`, scales `[[1],[2]]` → dequant
/// `[[−1,1],[0,2·0.0795803]]`, x `[1,1]` → `[−1, 1.1591606]`.
pub fn quantized_dense_nf4(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedQuantizedDense], [Float32, Uint8]);
    let q = Quantization { scheme: QuantScheme::Nf4, block_axis: 1, block_size: 2, ggml_type: GgmlType::default() };
    let ins = [t(&[1f32, 1.], &[1, 2]), t(&[0u8, 15, 7, 8], &[2, 2]), t(&[1f32, 2.], &[2, 1])];
    let out = exec1(b, &ins, |f, p| f.fused_quantized_dense(p[0], p[1], Some(p[2]), None, None, q, Activation::None))?;
    expect_close::<f32>("nf4", &out, &[1, 2], &[-1., 1. + 2. * 0.07958029955625534], 1e-6, 0.0)
}

fn ggml(ty: GgmlType) -> Quantization {
    Quantization { scheme: QuantScheme::Ggml, block_axis: 0, block_size: 0, ggml_type: ty }
}

/// Two Q8_0 rows: d = 0.5 with all q = 1, and d = 2 with q = −1 for the first 16 values and +1
/// for the rest.
fn q8_0_rows() -> Vec<u8> {
    let mut w = vec![0x00, 0x38];
    w.extend([1u8; 32]);
    w.extend([0x00, 0x40]);
    w.extend([0xFFu8; 16]);
    w.extend([1u8; 16]);
    w
}

/// GGML Q8_0 (32 values / 34 bytes per block) with x = 0..31: row 0 → 0.5·496 = 248, row 1 →
/// 2·(376 − 120) = 512.
pub fn quantized_dense_ggml_q8_0(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedQuantizedDense], [Float32, Uint8]);
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let ins = [t(&x, &[1, 32]), t(&q8_0_rows(), &[2, 34])];
    let out = exec1(b, &ins, |f, p| {
        f.fused_quantized_dense(p[0], p[1], None, None, None, ggml(GgmlType::Q8_0), Activation::None)
    })?;
    expect_close::<f32>("q8_0", &out, &[1, 2], &[248., 512.], 1e-3, 0.0)
}

/// GGML Q4_0 (18 bytes per block, low nibbles = values 0..15, high = 16..31, `d·(n−8)`):
/// row d = 1, bytes 0x98 → values 0 then 1 → Σ₁₆³¹ k = 376; row d = 0.5, bytes 0x7F →
/// 3.5 then −0.5 → 420 − 188 = 232.
pub fn quantized_dense_ggml_q4_0(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FusedQuantizedDense], [Float32, Uint8]);
    let mut w = vec![0x00, 0x3C];
    w.extend([0x98u8; 16]);
    w.extend([0x00, 0x38]);
    w.extend([0x7Fu8; 16]);
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let ins = [t(&x, &[1, 32]), t(&w, &[2, 18])];
    let out = exec1(b, &ins, |f, p| {
        f.fused_quantized_dense(p[0], p[1], None, None, None, ggml(GgmlType::Q4_0), Activation::None)
    })?;
    expect_close::<f32>("q4_0", &out, &[1, 2], &[376., 232.], 1e-3, 0.0)
}

/// QuantizedEmbeddingLookup of the Q8_0 rows with indices `[[1],[0]]` → F32 `[2,32]`.
pub fn quantized_embedding_lookup_q8_0(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [QuantizedEmbeddingLookup], [Float32, Uint8, Int32]);
    let ins = [t(&q8_0_rows(), &[2, 34]), t(&[1i32, 0], &[2, 1])];
    let out = exec1(b, &ins, |f, p| f.quantized_embedding_lookup(p[0], p[1], ggml(GgmlType::Q8_0)))?;
    let mut want = vec![-2.0; 16];
    want.extend([2.0; 16]);
    want.extend([0.5; 32]);
    expect_close::<f32>("lookup", &out, &[2, 32], &want, 0.0, 0.0)
}
