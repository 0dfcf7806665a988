//! Reference kernel of FusedScaledDotProductAttention (§5): BHSD/BSHD layouts, GQA, scale,
//! causal (top-left aligned), Bool or additive mask, additive bias, per-batch sequence lengths;
//! fully masked rows and padded query rows output 0. Computed in f64, rounded once.

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{AttentionLayout, Op};
use crate::ir::shape::Shape;
use crate::kernels::reference::common::{float_tensor_from_f64, float_tensor_to_f64, with_int};
use crate::kernels::tensor::Tensor;

/// A `[B, H, S, D]`-indexed view of a q/k/v tensor in either layout.
struct View {
    data: Vec<f64>,
    /// (batch, heads, seq, dim).
    dims: [usize; 4],
    layout: AttentionLayout,
}

impl View {
    fn new(name: &str, what: &str, t: &Tensor, layout: AttentionLayout) -> Result<View> {
        let d = t.shape.udims();
        if d.len() != 4 {
            return Err(Error::invalid(name, format!("{what} {} must have rank 4", t.shape)));
        }
        let dims = match layout {
            AttentionLayout::Bhsd => [d[0], d[1], d[2], d[3]],
            AttentionLayout::Bshd => [d[0], d[2], d[1], d[3]],
        };
        Ok(View { data: float_tensor_to_f64(name, t)?, dims, layout })
    }

    fn offset(&self, b: usize, h: usize, s: usize) -> usize {
        let [_, nh, ns, nd] = self.dims;
        match self.layout {
            AttentionLayout::Bhsd => ((b * nh + h) * ns + s) * nd,
            AttentionLayout::Bshd => ((b * ns + s) * nh + h) * nd,
        }
    }

    fn row(&self, b: usize, h: usize, s: usize) -> &[f64] {
        let o = self.offset(b, h, s);
        &self.data[o..o + self.dims[3]]
    }
}

/// A mask or bias broadcast to `[B, H, S, Skv]`: per-axis strides (0 on size-1 axes).
struct Bcast<T> {
    data: Vec<T>,
    strides: [usize; 4],
}

impl<T: Copy> Bcast<T> {
    /// `dims4` are the operand dims placed on the (B, H, S, Skv) axes (missing axes = 1).
    fn new(name: &str, what: &str, data: Vec<T>, dims4: [usize; 4], full: [usize; 4]) -> Result<Bcast<T>> {
        let mut strides = [0usize; 4];
        let mut s = 1;
        for a in (0..4).rev() {
            if dims4[a] != 1 && dims4[a] != full[a] {
                return Err(Error::invalid(
                    name,
                    format!("{what} dims {dims4:?} do not broadcast to [B, H, S, Skv] = {full:?}"),
                ));
            }
            strides[a] = if dims4[a] == 1 { 0 } else { s };
            s *= dims4[a];
        }
        Ok(Bcast { data, strides })
    }

    fn at(&self, b: usize, h: usize, i: usize, j: usize) -> T {
        let s = self.strides;
        self.data[b * s[0] + h * s[1] + i * s[2] + j * s[3]]
    }
}

/// Places the dims of a rank 2–4 operand on the (B, H, S, Skv) axes. Masks of rank 3 are
/// `[B, S, Skv]`; biases are right-aligned (rank 3 = `[H, S, Skv]`).
fn place(name: &str, what: &str, t: &Tensor, is_mask: bool) -> Result<[usize; 4]> {
    let d = t.shape.udims();
    Ok(match d.len() {
        2 => [1, 1, d[0], d[1]],
        3 if is_mask => [d[0], 1, d[1], d[2]],
        3 => [1, d[0], d[1], d[2]],
        4 => [d[0], d[1], d[2], d[3]],
        _ => return Err(Error::invalid(name, format!("{what} {} must have rank 2, 3 or 4", t.shape))),
    })
}

#[allow(clippy::unnecessary_cast)]
fn int_values(name: &str, what: &str, t: &Tensor, n: usize) -> Result<Vec<i64>> {
    let v: Vec<i64> = with_int!(t.shape.dtype, T => t.typed::<T>().iter().map(|&x| x as i64).collect(),
        _ => return Err(Error::invalid(name, format!("{what} dtype {} must be an integer dtype", t.shape.dtype))));
    if v.len() != n {
        return Err(Error::invalid(name, format!("{what} {} must hold one value per batch ({n})", t.shape)));
    }
    Ok(v)
}

/// Evaluates FusedScaledDotProductAttention (operands and flags as documented on [`Op`]).
pub(super) fn sdpa(name: &str, op: &Op, inputs: &[Tensor], out: &Shape) -> Result<Tensor> {
    let Op::FusedScaledDotProductAttention { layout, scale, causal, has_mask, has_bias, has_seq_lens, .. } = op else {
        return Err(Error::invalid(name, "not an attention op"));
    };
    let n_in = 3 + *has_mask as usize + *has_bias as usize + 2 * *has_seq_lens as usize;
    if inputs.len() != n_in {
        return Err(Error::invalid(name, format!("expected {n_in} operands, got {}", inputs.len())));
    }
    let q = View::new(name, "query", &inputs[0], *layout)?;
    let k = View::new(name, "key", &inputs[1], *layout)?;
    let v = View::new(name, "value", &inputs[2], *layout)?;
    let [nb, nh, ns, nd] = q.dims;
    let [kb, nkv, nskv, kd] = k.dims;
    let [vb, vh, vs, vd] = v.dims;
    if kb != nb || vb != nb || kd != nd || vh != nkv || vs != nskv || nkv == 0 || nh % nkv != 0 {
        return Err(Error::invalid(
            name,
            format!(
                "incompatible query {}, key {}, value {} (GQA needs heads % kv_heads = 0)",
                inputs[0].shape, inputs[1].shape, inputs[2].shape
            ),
        ));
    }
    if out.num_elements() != nb * nh * ns * vd {
        return Err(Error::invalid(name, format!("output {out} does not match the query/value shapes")));
    }
    let full = [nb, nh, ns, nskv];
    let mut next = 3;
    let mut bool_mask = None;
    let mut add_mask = None;
    if *has_mask {
        let m = &inputs[next];
        next += 1;
        let dims4 = place(name, "mask", m, true)?;
        if m.shape.dtype == DType::Bool {
            bool_mask = Some(Bcast::new(name, "mask", m.typed::<bool>().to_vec(), dims4, full)?);
        } else {
            add_mask = Some(Bcast::new(name, "mask", float_tensor_to_f64(name, m)?, dims4, full)?);
        }
    }
    let mut bias = None;
    if *has_bias {
        let b = &inputs[next];
        next += 1;
        let dims4 = place(name, "bias", b, false)?;
        bias = Some(Bcast::new(name, "bias", float_tensor_to_f64(name, b)?, dims4, full)?);
    }
    let lens = if *has_seq_lens {
        let ql = int_values(name, "query_seq_len", &inputs[next], nb)?;
        let kl = int_values(name, "key_value_seq_len", &inputs[next + 1], nb)?;
        Some((ql, kl))
    } else {
        None
    };
    let scale = if *scale == 0.0 { 1.0 / (nd as f64).sqrt() } else { *scale };
    let group = nh / nkv;
    // The output has the query's layout with head dim `vd`.
    let out_off = |b: usize, h: usize, s: usize| match layout {
        AttentionLayout::Bhsd => ((b * nh + h) * ns + s) * vd,
        AttentionLayout::Bshd => ((b * ns + s) * nh + h) * vd,
    };
    let mut y = vec![0.0; nb * nh * ns * vd];
    let mut scores = vec![0.0; nskv];
    let mut allowed = vec![false; nskv];
    for b in 0..nb {
        let (q_len, kv_len) = match &lens {
            Some((ql, kl)) => (ql[b].max(0) as usize, kl[b].max(0) as usize),
            None => (ns, nskv),
        };
        for h in 0..nh {
            let hk = h / group;
            for i in 0..ns.min(q_len) {
                let qr = q.row(b, h, i);
                let mut m = f64::NEG_INFINITY;
                for j in 0..nskv {
                    let ok = j < kv_len && !(*causal && j > i) && bool_mask.as_ref().is_none_or(|bm| bm.at(b, h, i, j));
                    allowed[j] = ok;
                    if !ok {
                        continue;
                    }
                    let kr = k.row(b, hk, j);
                    let mut s = scale * qr.iter().zip(kr).map(|(a, c)| a * c).sum::<f64>();
                    if let Some(bs) = &bias {
                        s += bs.at(b, h, i, j);
                    }
                    if let Some(am) = &add_mask {
                        s += am.at(b, h, i, j);
                    }
                    scores[j] = s;
                    m = if m.is_nan() || s.is_nan() { f64::NAN } else { m.max(s) };
                }
                if m == f64::NEG_INFINITY {
                    continue; // fully masked row → 0
                }
                let mut sum = 0.0;
                for j in 0..nskv {
                    if allowed[j] {
                        scores[j] = (scores[j] - m).exp();
                        sum += scores[j];
                    }
                }
                let o = out_off(b, h, i);
                for j in 0..nskv {
                    if allowed[j] {
                        let p = scores[j] / sum;
                        for (d, &vv) in v.row(b, hk, j).iter().enumerate() {
                            y[o + d] += p * vv;
                        }
                    }
                }
            }
        }
    }
    float_tensor_from_f64(name, out, &y)
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;
    use crate::ir::dtype::Element;

    fn t<T: Element>(dims: &[i64], v: &[T]) -> Tensor {
        Tensor::from_vec(Shape::new(T::DTYPE, dims), v).unwrap()
    }
    fn op(layout: AttentionLayout, causal: bool, mask: bool, bias: bool, lens: bool) -> Op {
        Op::FusedScaledDotProductAttention {
            layout,
            scale: 1.0,
            causal,
            has_mask: mask,
            has_bias: bias,
            has_seq_lens: lens,
            quantized_matmuls: false,
        }
    }
    fn run(op: &Op, inputs: &[Tensor]) -> Vec<f64> {
        let out = inputs[0].shape.clone();
        float_tensor_to_f64("t", &sdpa("t", op, inputs, &out).unwrap()).unwrap()
    }

    #[test]
    fn causal_q_k_one() {
        // q = k = 1, v = (10, 20), scale 1, causal → (10, 15), in both layouts.
        let ones = t(&[1, 1, 2, 1], &[1.0f32, 1.0]);
        let v = t(&[1, 1, 2, 1], &[10.0f32, 20.0]);
        assert_eq!(
            run(&op(AttentionLayout::Bhsd, true, false, false, false), &[ones.clone(), ones.clone(), v]),
            vec![10.0, 15.0]
        );
        let ones = t(&[1, 2, 1, 1], &[1.0f32, 1.0]);
        let v = t(&[1, 2, 1, 1], &[10.0f32, 20.0]);
        assert_eq!(
            run(&op(AttentionLayout::Bshd, true, false, false, false), &[ones.clone(), ones, v]),
            vec![10.0, 15.0]
        );
        // Half types, head dim 8: q = k = 1 everywhere, v rows all 10 / all 20.
        let q: Vec<bf16> = vec![bf16::from_f32(1.0); 16];
        let mut vv = vec![bf16::from_f32(10.0); 8];
        vv.extend(vec![bf16::from_f32(20.0); 8]);
        let qt = t(&[1, 1, 2, 8], &q);
        let r = run(&op(AttentionLayout::Bhsd, true, false, false, false), &[qt.clone(), qt, t(&[1, 1, 2, 8], &vv)]);
        assert_eq!(&r[..8], &[10.0; 8]);
        assert_eq!(&r[8..], &[15.0; 8]);
        let q: Vec<f16> = vec![f16::from_f32(1.0); 16];
        let mut vv = vec![f16::from_f32(10.0); 8];
        vv.extend(vec![f16::from_f32(20.0); 8]);
        let qt = t(&[1, 2, 1, 8], &q);
        let r = run(&op(AttentionLayout::Bshd, true, false, false, false), &[qt.clone(), qt, t(&[1, 2, 1, 8], &vv)]);
        assert_eq!(&r[8..], &[15.0; 8]);
    }

    #[test]
    fn masks_bias_and_lengths() {
        // One query, two keys: Bool mask [[T, F]] → 10.
        let q = t(&[1, 1, 1, 1], &[1.0f32]);
        let k = t(&[1, 1, 2, 1], &[1.0f32, 1.0]);
        let v = t(&[1, 1, 2, 1], &[10.0f32, 20.0]);
        let m = t(&[1, 2], &[true, false]);
        assert_eq!(
            run(&op(AttentionLayout::Bhsd, false, true, false, false), &[q.clone(), k.clone(), v.clone(), m]),
            vec![10.0]
        );
        // Additive bias (−10, +10) → weights 1/(1+e²⁰) and e²⁰/(1+e²⁰) → ≈ 20.
        let b = t(&[1, 2], &[-10.0f32, 10.0]);
        let r = run(&op(AttentionLayout::Bhsd, false, false, true, false), &[q.clone(), k.clone(), v.clone(), b]);
        let w = 1.0 / (1.0 + 20f64.exp());
        assert!((r[0] - (10.0 * w + 20.0 * (1.0 - w))).abs() < 1e-5);
        // Float mask of −Inf on both keys → fully masked → 0.
        let m = t(&[1, 2], &[f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert_eq!(
            run(&op(AttentionLayout::Bhsd, false, true, false, false), &[q.clone(), k.clone(), v.clone(), m]),
            vec![0.0]
        );
        // Sequence lengths: batch of 2 with two queries; batch 0: q_len 1, kv_len 1; batch 1: 2, 2.
        let q2 = t(&[2, 1, 2, 1], &[1.0f32; 4]);
        let k2 = t(&[2, 1, 2, 1], &[1.0f32; 4]);
        let v2 = t(&[2, 1, 2, 1], &[10.0f32, 20.0, 30.0, 50.0]);
        let ql = t(&[2], &[1i32, 2]);
        let kl = t(&[2], &[1i32, 2]);
        let r = run(&op(AttentionLayout::Bhsd, false, false, false, true), &[q2, k2, v2, ql, kl]);
        assert_eq!(r, vec![10.0, 0.0, 40.0, 40.0]);
    }

    #[test]
    fn gqa_and_default_scale() {
        // 2 query heads share 1 kv head; scale 0 ⇒ 1/√2 for head_dim 2.
        let q = t(&[1, 2, 1, 2], &[1.0f64, 0.0, 0.0, 1.0]);
        let k = t(&[1, 1, 2, 2], &[1.0f64, 0.0, 0.0, 1.0]);
        let v = t(&[1, 1, 2, 2], &[1.0f64, 0.0, 0.0, 1.0]);
        let mut o = op(AttentionLayout::Bhsd, false, false, false, false);
        if let Op::FusedScaledDotProductAttention { scale, .. } = &mut o {
            *scale = 0.0;
        }
        let r = run(&o, &[q, k, v]);
        // Head 0 scores (1/√2, 0): p0 = 1/(1+e^(−1/√2)).
        let p = 1.0 / (1.0 + (-std::f64::consts::FRAC_1_SQRT_2).exp());
        let e = [p, 1.0 - p, 1.0 - p, p];
        for (a, b) in r.iter().zip(e) {
            assert!((a - b).abs() < 1e-15);
        }
        let bad = t(&[1, 3, 1, 2], &[0.0f64; 6]);
        let k = t(&[1, 2, 2, 2], &[0.0f64; 8]);
        let out = bad.shape.clone();
        assert!(sdpa("t", &op(AttentionLayout::Bhsd, false, false, false, false), &[bad, k.clone(), k], &out).is_err());
    }
}
