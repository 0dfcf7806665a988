//! A BERT-style encoder layer built from standard ops only (the forms model exporters emit),
//! shared by the benchmarks: Dense as DotGeneral + broadcast bias, LayerNorm as reduce/mean/
//! variance/rsqrt, softmax max-subtracted, GELU (erf or tanh form), attention as two batched
//! DotGenerals around a scaled softmax.

use tensorjit::{DType, Function, Shape, Value};

type R<T> = tensorjit::Result<T>;

/// Sizes of one encoder layer.
#[derive(Clone, Copy, Debug)]
pub struct Encoder {
    /// Batch.
    pub batch: i64,
    /// Sequence length.
    pub seq: i64,
    /// Hidden size.
    pub hidden: i64,
    /// Attention heads (hidden / heads = head size).
    pub heads: i64,
    /// Feed-forward inner size.
    pub ffn: i64,
    /// GELU in its erf form (else the tanh approximation).
    pub gelu_erf: bool,
}

fn f32s(dims: &[i64]) -> Shape {
    Shape::new(DType::Float32, dims)
}

fn det(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0) * scale).collect()
}

/// A constant weight (deterministic values).
pub fn weight(f: &Function, dims: &[i64], seed: usize) -> R<Value> {
    let n: i64 = dims.iter().product();
    let d: Vec<usize> = dims.iter().map(|&x| x as usize).collect();
    f.constant(&det(n as usize, seed, 0.05), &d)
}

/// Input activations for `x` of the encoder.
pub fn input(e: &Encoder) -> Vec<f32> {
    det((e.batch * e.seq * e.hidden) as usize, 1, 1.0)
}

/// `x·W + b` over the last axis of x [.., k] with W [k, n], b [n].
pub fn dense(f: &Function, x: Value, w: Value, b: Value, out: &[i64]) -> R<Value> {
    let r = out.len();
    let cfg = tensorjit::api::DotConfig::default();
    let y = f.dot_general(x, &[r - 1], &[], w, &[0], &[], cfg)?;
    let bb = f.broadcast_in_dim(b, &f32s(out), &[r - 1])?;
    f.add(y, bb)
}

/// Layer norm over the last axis of x (dims `d`) from standard ops, E[(x−μ)²] form.
pub fn layer_norm(f: &Function, x: Value, gamma: Value, beta: Value, d: &[i64]) -> R<Value> {
    let r = d.len();
    let h = d[r - 1];
    let full = f32s(d);
    let rows = f32s(&d[..r - 1]);
    let keep: Vec<usize> = (0..r - 1).collect();
    let inv_h = f.broadcast_in_dim(f.scalar(1.0f32 / h as f32)?, &rows, &[])?;
    let mean = f.mul(f.reduce_sum(x, &[r - 1])?, inv_h)?;
    let xc = f.sub(x, f.broadcast_in_dim(mean, &full, &keep)?)?;
    let var = f.mul(f.reduce_sum(f.mul(xc, xc)?, &[r - 1])?, inv_h)?;
    let eps = f.broadcast_in_dim(f.scalar(1e-12f32)?, &rows, &[])?;
    let inv = f.rsqrt(f.add(var, eps)?)?;
    let y = f.mul(xc, f.broadcast_in_dim(inv, &full, &keep)?)?;
    let y = f.mul(y, f.broadcast_in_dim(gamma, &full, &[r - 1])?)?;
    f.add(y, f.broadcast_in_dim(beta, &full, &[r - 1])?)
}

/// Softmax over the last axis of x (dims `d`) from standard ops, max-subtracted.
pub fn softmax(f: &Function, x: Value, d: &[i64]) -> R<Value> {
    let r = d.len();
    let full = f32s(d);
    let keep: Vec<usize> = (0..r - 1).collect();
    let m = f.broadcast_in_dim(f.reduce_max(x, &[r - 1])?, &full, &keep)?;
    let e = f.exp(f.sub(x, m)?)?;
    let s = f.broadcast_in_dim(f.reduce_sum(e, &[r - 1])?, &full, &keep)?;
    f.div(e, s)
}

/// GELU from standard ops: `0.5·x·(1 + erf(x/√2))` or the tanh approximation.
pub fn gelu(f: &Function, x: Value, erf: bool) -> R<Value> {
    let half = f.scalar(0.5f32)?;
    let one = f.scalar(1.0f32)?;
    let inner = if erf {
        f.erf(f.mul(x, f.scalar(std::f32::consts::FRAC_1_SQRT_2)?)?)?
    } else {
        let c = f.scalar(0.044_715f32)?;
        let k = f.scalar(0.797_884_6f32)?;
        let x3 = f.mul(f.mul(x, x)?, x)?;
        f.tanh(f.mul(k, f.add(x, f.mul(c, x3)?)?)?)?
    };
    f.mul(f.mul(half, x)?, f.add(one, inner)?)
}

/// One encoder layer on `x` [batch, seq, hidden] with constant weights (seeded by `layer`).
pub fn encoder_layer(f: &Function, e: &Encoder, x: Value, layer: usize) -> R<Value> {
    let (b, s, h, nh, ff) = (e.batch, e.seq, e.hidden, e.heads, e.ffn);
    let hd = h / nh;
    let seed = layer * 16;
    let act = [b, s, h];
    let mut w = vec![];
    for i in 0..4 {
        w.push((weight(f, &[h, h], seed + i)?, weight(f, &[h], seed + 4 + i)?));
    }
    let heads = |v: Value| -> R<Value> { f.transpose(f.reshape(v, &[b, s, nh, hd])?, &[0, 2, 1, 3]) };
    let q = heads(dense(f, x, w[0].0, w[0].1, &act)?)?;
    let k = heads(dense(f, x, w[1].0, w[1].1, &act)?)?;
    let v = heads(dense(f, x, w[2].0, w[2].1, &act)?)?;
    let cfg = tensorjit::api::DotConfig::default();
    let scores = f.dot_general(q, &[3], &[0, 1], k, &[3], &[0, 1], cfg)?; // [B, NH, S, S]
    let scale = f.scalar(1.0f32 / (hd as f32).sqrt())?;
    let p = softmax(f, f.mul(scores, scale)?, &[b, nh, s, s])?;
    let ctx = f.dot_general(p, &[3], &[0, 1], v, &[2], &[0, 1], cfg)?; // [B, NH, S, HD]
    let ctx = f.reshape(f.transpose(ctx, &[0, 2, 1, 3])?, &[b, s, h])?;
    let attn = dense(f, ctx, w[3].0, w[3].1, &act)?;
    let (g1, b1) = (weight(f, &[h], seed + 8)?, weight(f, &[h], seed + 9)?);
    let x1 = layer_norm(f, f.add(x, attn)?, g1, b1, &act)?;
    let (wi, bi) = (weight(f, &[h, ff], seed + 10)?, weight(f, &[ff], seed + 11)?);
    let (wo, bo) = (weight(f, &[ff, h], seed + 12)?, weight(f, &[h], seed + 13)?);
    let inner = gelu(f, dense(f, x1, wi, bi, &[b, s, ff])?, e.gelu_erf)?;
    let y = dense(f, inner, wo, bo, &act)?;
    let (g2, b2) = (weight(f, &[h], seed + 14)?, weight(f, &[h], seed + 15)?);
    layer_norm(f, f.add(x1, y)?, g2, b2, &act)
}
