//! Reference kernels of FusedQuantizedDense and QuantizedEmbeddingLookup (§5): Linear
//! (Int8/Uint8 and packed Int4/Uint4/Int2/Uint2 weights, per-block scale and zero point), NF4 and
//! the GGML blocks Q4_0, Q8_0, IQ4_NL, Q4_K, Q6_K (the other GGML types are NotImplemented).

use half::f16;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{GgmlType, Op, QuantScheme, Quantization};
use crate::ir::shape::Shape;
use crate::kernels::reference::common::{float_tensor_from_f64, float_tensor_to_f64, unpack_ints, with_int};
use crate::kernels::tensor::Tensor;

use super::activate;

/// The QLoRA NormalFloat4 values (the f32 literals of §5, kept digit for digit).
#[allow(clippy::excessive_precision)]
pub(super) const NF4_TABLE: [f32; 16] = [
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
];

/// The IQ4_NL code book.
pub(super) const IQ4NL_TABLE: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// (values, bytes) per block of a GGML type.
pub(super) fn ggml_block(t: GgmlType) -> (usize, usize) {
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

fn fp16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Dequantises one GGML block (`bytes` of length [`ggml_block`]`.1`) into `out`.
fn dequant_block(name: &str, t: GgmlType, b: &[u8], out: &mut Vec<f32>) -> Result<()> {
    match t {
        GgmlType::Q4_0 | GgmlType::Iq4Nl => {
            let d = fp16_at(b, 0);
            let q = &b[2..18];
            let val = |nib: u8| -> f32 {
                if t == GgmlType::Q4_0 { d * (nib as f32 - 8.0) } else { d * IQ4NL_TABLE[nib as usize] as f32 }
            };
            out.extend(q.iter().map(|&x| val(x & 0xF)));
            out.extend(q.iter().map(|&x| val(x >> 4)));
        }
        GgmlType::Q8_0 => {
            let d = fp16_at(b, 0);
            out.extend(b[2..34].iter().map(|&x| d * (x as i8) as f32));
        }
        GgmlType::Q4K => {
            let (d, dmin) = (fp16_at(b, 0), fp16_at(b, 2));
            let s = &b[4..16];
            let qs = &b[16..144];
            let scale_min = |j: usize| -> (f32, f32) {
                let (sc, m) = if j < 4 {
                    (s[j] & 63, s[j + 4] & 63)
                } else {
                    ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
                };
                (d * sc as f32, dmin * m as f32)
            };
            for c in 0..4 {
                let chunk = &qs[32 * c..32 * c + 32];
                let (d1, m1) = scale_min(2 * c);
                out.extend(chunk.iter().map(|&x| d1 * (x & 0xF) as f32 - m1));
                let (d2, m2) = scale_min(2 * c + 1);
                out.extend(chunk.iter().map(|&x| d2 * (x >> 4) as f32 - m2));
            }
        }
        GgmlType::Q6K => {
            let d = fp16_at(b, 208);
            let start = out.len();
            out.resize(start + 256, 0.0);
            let o = &mut out[start..];
            for half in 0..2 {
                let ql = &b[64 * half..64 * half + 64];
                let qh = &b[128 + 32 * half..128 + 32 * half + 32];
                let sc = &b[192 + 8 * half..192 + 8 * half + 8];
                let y = &mut o[128 * half..128 * half + 128];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    let s = |i: usize| d * (sc[i] as i8) as f32;
                    y[l] = s(is) * q1 as f32;
                    y[l + 32] = s(is + 2) * q2 as f32;
                    y[l + 64] = s(is + 4) * q3 as f32;
                    y[l + 96] = s(is + 6) * q4 as f32;
                }
            }
        }
        GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q5K => {
            return Err(Error::not_implemented(name, format!("GGML type {t:?}")));
        }
    }
    Ok(())
}

/// Dequantises every row of a GGML `[rows, bytes_per_row]` Uint8 tensor; returns (values, K).
fn ggml_rows(name: &str, t: GgmlType, w: &Tensor) -> Result<(Vec<f32>, usize)> {
    let d = w.shape.udims();
    if w.shape.dtype != DType::Uint8 || d.len() != 2 {
        return Err(Error::invalid(name, format!("GGML data {} must be Uint8 [rows, bytes_per_row]", w.shape)));
    }
    let (vpb, bpb) = ggml_block(t);
    if !d[1].is_multiple_of(bpb) {
        return Err(Error::invalid(name, format!("bytes per row {} is not a multiple of {bpb} ({t:?} block)", d[1])));
    }
    let k = d[1] / bpb * vpb;
    let mut out = Vec::with_capacity(d[0] * k);
    for blk in w.bytes().chunks_exact(bpb) {
        dequant_block(name, t, blk, &mut out)?;
    }
    Ok((out, k))
}

/// Integer values of a Linear/NF4 weight tensor (packed dtypes unpacked, sign-extended).
#[allow(clippy::unnecessary_cast)]
fn int_weights(name: &str, w: &Tensor) -> Result<Vec<i64>> {
    let dt = w.shape.dtype;
    if dt.is_packed() {
        return unpack_ints(dt, w.bytes(), w.len());
    }
    with_int!(dt, T => Ok(w.typed::<T>().iter().map(|&v| v as i64).collect()),
        _ => Err(Error::invalid(name, format!("weights dtype {dt} must be an integer dtype"))))
}

/// FusedQuantizedDense: `act(x·dequant(w) + bias)`.
pub(super) fn quantized_dense(name: &str, op: &Op, inputs: &[Tensor], out: &Shape) -> Result<Tensor> {
    let Op::FusedQuantizedDense { quant, activation, has_zero_point, has_bias } = op else {
        return Err(Error::invalid(name, "not a quantized dense op"));
    };
    let ggml = quant.scheme == QuantScheme::Ggml;
    let n_in = 2 + (!ggml) as usize + *has_zero_point as usize + *has_bias as usize;
    if inputs.len() != n_in {
        return Err(Error::invalid(name, format!("expected {n_in} operands, got {}", inputs.len())));
    }
    if ggml && *has_zero_point {
        return Err(Error::invalid(name, "GGML quantization takes no zero point"));
    }
    let (x, w) = (&inputs[0], &inputs[1]);
    let xd = x.shape.udims();
    let Some(&k) = xd.last() else {
        return Err(Error::invalid(name, format!("x {} must have rank ≥ 1", x.shape)));
    };
    let m: usize = xd[..xd.len() - 1].iter().product();
    // Dequantised weights as wt[n·K + k] (row per output column).
    let (wt, n) = if ggml {
        let (rows, kk) = ggml_rows(name, quant.ggml_type, w)?;
        if kk != k {
            return Err(Error::invalid(name, format!("GGML weights hold K = {kk} values per row, x has K = {k}")));
        }
        let n = w.shape.udims()[0];
        (rows, n)
    } else {
        linear_or_nf4(name, quant, w, &inputs[2], has_zero_point.then(|| &inputs[3]), k)?
    };
    if out.num_elements() != m * n {
        return Err(Error::invalid(name, format!("output {out} does not hold {m}×{n} values")));
    }
    let bias = if *has_bias {
        let b = float_tensor_to_f64(name, &inputs[n_in - 1])?;
        if b.len() != n {
            return Err(Error::invalid(name, format!("bias {} must hold {n} values", inputs[n_in - 1].shape)));
        }
        Some(b)
    } else {
        None
    };
    let xv = float_tensor_to_f64(name, x)?;
    let mut y = vec![0.0; m * n];
    for r in 0..m {
        let xr = &xv[r * k..r * k + k];
        for c in 0..n {
            let mut s: f64 = xr.iter().zip(&wt[c * k..c * k + k]).map(|(a, b)| a * *b as f64).sum();
            if let Some(b) = &bias {
                s += b[c];
            }
            y[r * n + c] = activate(*activation, s);
        }
    }
    float_tensor_from_f64(name, out, &y)
}

/// Linear / NF4 dequantisation of `w [K, N]`; returns the transposed `[N, K]` values and N.
fn linear_or_nf4(
    name: &str,
    quant: &Quantization,
    w: &Tensor,
    scale: &Tensor,
    zero_point: Option<&Tensor>,
    k: usize,
) -> Result<(Vec<f32>, usize)> {
    let wd = w.shape.udims();
    if wd.len() != 2 || wd[0] != k {
        return Err(Error::invalid(name, format!("weights {} must be [K = {k}, N]", w.shape)));
    }
    if quant.block_axis != 1 {
        return Err(Error::invalid(name, format!("block_axis {} must be 1", quant.block_axis)));
    }
    if quant.block_size == 0 {
        return Err(Error::invalid(name, "block_size must be ≥ 1"));
    }
    if quant.scheme == QuantScheme::Nf4 && zero_point.is_some() {
        return Err(Error::invalid(name, "NF4 quantization takes no zero point"));
    }
    let n = wd[1];
    let blocks = n.div_ceil(quant.block_size);
    let sv = float_tensor_to_f64(name, scale)?;
    if sv.len() != k * blocks {
        return Err(Error::invalid(name, format!("scale {} must be [K = {k}, {blocks}]", scale.shape)));
    }
    let zv = match zero_point {
        Some(z) => {
            let v = float_tensor_to_f64(name, z)?;
            if v.len() != k * blocks {
                return Err(Error::invalid(name, format!("zero_point {} must be [K = {k}, {blocks}]", z.shape)));
            }
            Some(v)
        }
        None => None,
    };
    let q = int_weights(name, w)?;
    let mut wt = vec![0.0f32; n * k];
    for kk in 0..k {
        for c in 0..n {
            let si = kk * blocks + c / quant.block_size;
            let s = sv[si] as f32;
            let v = if quant.scheme == QuantScheme::Nf4 {
                NF4_TABLE[(q[kk * n + c] & 0xF) as usize] * s
            } else {
                q[kk * n + c] as f32 * s + zv.as_ref().map_or(0.0, |z| z[si] as f32)
            };
            wt[c * k + kk] = v;
        }
    }
    Ok((wt, n))
}

/// QuantizedEmbeddingLookup: dequantised GGML rows of `data` selected by `indices [..., 1]`.
#[allow(clippy::unnecessary_cast)]
pub(super) fn embedding_lookup(
    name: &str,
    quant: &Quantization,
    data: &Tensor,
    indices: &Tensor,
    out: &Shape,
) -> Result<Tensor> {
    if quant.scheme != QuantScheme::Ggml {
        return Err(Error::not_implemented(name, format!("{:?} quantization (only GGML)", quant.scheme)));
    }
    let (rows, k) = ggml_rows(name, quant.ggml_type, data)?;
    let v = data.shape.udims()[0];
    let idx: Vec<i64> = with_int!(indices.shape.dtype, T => indices.typed::<T>().iter().map(|&i| i as i64).collect(),
        _ => return Err(Error::invalid(name, format!("indices dtype {} must be an integer dtype", indices.shape.dtype))));
    if indices.shape.dims.last() != Some(&1) {
        return Err(Error::invalid(name, format!("indices {} must end with an axis of size 1", indices.shape)));
    }
    if out.num_elements() != idx.len() * k {
        return Err(Error::invalid(name, format!("output {out} does not hold {} rows of {k}", idx.len())));
    }
    let mut y = Vec::with_capacity(idx.len() * k);
    for &i in &idx {
        if i < 0 || i as usize >= v {
            return Err(Error::invalid(name, format!("index {i} outside [0, {v})")));
        }
        let i = i as usize;
        y.extend(rows[i * k..i * k + k].iter().map(|&f| f as f64));
    }
    float_tensor_from_f64(name, out, &y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dtype::Element;
    use crate::ir::op::Activation;

    fn t<T: Element>(dims: &[i64], v: &[T]) -> Tensor {
        Tensor::from_vec(Shape::new(T::DTYPE, dims), v).unwrap()
    }
    fn ggml_op(ty: GgmlType) -> Op {
        Op::FusedQuantizedDense {
            quant: Quantization { scheme: QuantScheme::Ggml, block_axis: 0, block_size: 0, ggml_type: ty },
            activation: Activation::None,
            has_zero_point: false,
            has_bias: false,
        }
    }
    fn q4_0_block() -> Vec<u8> {
        // d = 0.5 (fp16 0x3800); byte i: low nibble i, high nibble 15 − i.
        let mut b = vec![0x00, 0x38];
        b.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        b
    }
    fn q8_0_block() -> Vec<u8> {
        // d = 2.0 (fp16 0x4000); q = −16 … 15.
        let mut b = vec![0x00, 0x40];
        b.extend((-16i8..16).map(|q| q as u8));
        b
    }

    #[test]
    fn q4_0_and_q8_0_blocks() {
        let mut v = Vec::new();
        dequant_block("t", GgmlType::Q4_0, &q4_0_block(), &mut v).unwrap();
        let e: Vec<f32> =
            (0..16).map(|i| 0.5 * (i as f32 - 8.0)).chain((0..16).map(|i| 0.5 * (7.0 - i as f32))).collect();
        assert_eq!(v, e);
        let mut v = Vec::new();
        dequant_block("t", GgmlType::Q8_0, &q8_0_block(), &mut v).unwrap();
        assert_eq!(v, (-16..16).map(|q| 2.0 * q as f32).collect::<Vec<_>>());
        let mut v = Vec::new();
        dequant_block("t", GgmlType::Iq4Nl, &q4_0_block(), &mut v).unwrap();
        assert_eq!(v[0], -63.5);
        assert_eq!(v[16], 0.5 * 113.0);
        // Dense over x = ones [1, 32]: row sums −8 (Q4_0: 0.5·(−8 − 8)) and −32 (Q8_0: 2·(−16)).
        let x = t(&[1, 32], &[1.0f32; 32]);
        let w = t(&[1, 18], &q4_0_block());
        let y = quantized_dense("t", &ggml_op(GgmlType::Q4_0), &[x.clone(), w], &Shape::new(DType::Float32, &[1, 1]));
        assert_eq!(y.unwrap().typed::<f32>(), &[-8.0]);
        let mut two = q8_0_block();
        two.extend(q8_0_block());
        let w = t(&[2, 34], &two);
        let y = quantized_dense("t", &ggml_op(GgmlType::Q8_0), &[x, w], &Shape::new(DType::Float32, &[1, 2]));
        assert_eq!(y.unwrap().typed::<f32>(), &[-32.0, -32.0]);
    }

    #[test]
    fn q4_k_block() {
        // d = dmin = 1; scales s[0..4] = 2 (s[0] also has bit 6 set), s[4..8] = 1, s[8..12] = 0x13;
        // every qs byte 0x21 (low nibble 1, high 2).
        let mut b = vec![0x00, 0x3C, 0x00, 0x3C, 0x42, 2, 2, 2, 1, 1, 1, 1, 0x13, 0x13, 0x13, 0x13];
        b.extend([0x21u8; 128]);
        let mut v = Vec::new();
        dequant_block("t", GgmlType::Q4K, &b, &mut v).unwrap();
        assert_eq!(v.len(), 256);
        // Sub-blocks 0–3: sc 2, m 1 → low 2·1 − 1 = 1, high 2·2 − 1 = 3.
        assert_eq!((v[0], v[32], v[64], v[96]), (1.0, 3.0, 1.0, 3.0));
        // Sub-block 4: sc = (0x13 & 0xF) | ((0x42 >> 6) << 4) = 19, m = 1 | 0 = 1 → 19 − 1 = 18.
        assert_eq!(v[128], 18.0);
        // Sub-block 5: sc = 3 | ((s[1] >> 6) << 4) = 3, m = 1 → 3·2 − 1 = 5; sub-blocks 6, 7: 2, 5.
        assert_eq!((v[160], v[192], v[224]), (5.0, 2.0, 5.0));
        let w = t(&[1, 144], &b);
        let (rows, k) = ggml_rows("t", GgmlType::Q4K, &w).unwrap();
        assert_eq!((rows.len(), k), (256, 256));
    }

    #[test]
    fn q6_k_block() {
        // ql all 0x21, qh all 0 except qh[0] = 0b11_10_01_00, scales i + 1, d = 1.
        let mut b = vec![0x21u8; 128];
        let mut qh = vec![0u8; 64];
        qh[0] = 0b11_10_01_00;
        b.extend(qh);
        b.extend((1..=16u8).collect::<Vec<_>>());
        b.extend([0x00, 0x3C]);
        assert_eq!(b.len(), 210);
        let mut v = Vec::new();
        dequant_block("t", GgmlType::Q6K, &b, &mut v).unwrap();
        // l = 0: q1 = 1 − 32 = −31 (·sc 1); q2 = 17 − 32 = −15 (·sc 3); q3 = 34 − 32 = 2 (·sc 5);
        // q4 = 50 − 32 = 18 (·sc 7).
        assert_eq!((v[0], v[32], v[64], v[96]), (-31.0, -45.0, 10.0, 126.0));
        // l = 16: is = 1 → sc 2, 4, 6, 8 with q = −31, −31, −30, −30.
        assert_eq!((v[16], v[48], v[80], v[112]), (-62.0, -124.0, -180.0, -240.0));
        // Second half uses scales 9…16.
        assert_eq!((v[128], v[128 + 16], v[128 + 96]), (-279.0, -310.0, -15.0 * 30.0));
    }

    #[test]
    fn linear_and_nf4() {
        let q = Quantization { scheme: QuantScheme::Linear, block_axis: 1, block_size: 2, ggml_type: GgmlType::Q4_0 };
        let op =
            Op::FusedQuantizedDense { quant: q, activation: Activation::None, has_zero_point: true, has_bias: true };
        let x = t(&[1, 2], &[1.0f32, 10.0]);
        let w = t(&[2, 3], &[1i8, 2, 3, 4, 5, 6]);
        let s = t(&[2, 2], &[0.5f32, 2.0, 1.0, 3.0]);
        let z = t(&[2, 2], &[0.0f32, 1.0, 0.25, 0.0]);
        let b = t(&[3], &[1.0f32; 3]);
        let y = quantized_dense("t", &op, &[x, w, s, z, b], &Shape::new(DType::Float32, &[1, 3])).unwrap();
        assert_eq!(y.typed::<f32>(), &[44.0, 54.5, 188.0]);
        // Packed Int4 [[1, −2], [3, −8]] = bytes 0xE1, 0x83; scale [[1], [0.5]]; x = [1, 1].
        let op =
            Op::FusedQuantizedDense { quant: q, activation: Activation::Relu, has_zero_point: false, has_bias: false };
        let mut w = Tensor::zeros(Shape::new(DType::Int4, &[2, 2]));
        w.bytes_mut().copy_from_slice(&[0xE1, 0x83]);
        let x = t(&[1, 2], &[1.0f32, 1.0]);
        let s = t(&[2, 1], &[1.0f32, 0.5]);
        let y = quantized_dense("t", &op, &[x, w, s], &Shape::new(DType::Float32, &[1, 2])).unwrap();
        assert_eq!(y.typed::<f32>(), &[2.5, 0.0]);
        // NF4: codes 0 and 15 → −1 and 1, times scale 2, times x = 3.
        let nq = Quantization { scheme: QuantScheme::Nf4, ..q };
        let op =
            Op::FusedQuantizedDense { quant: nq, activation: Activation::None, has_zero_point: false, has_bias: false };
        let y = quantized_dense(
            "t",
            &op,
            &[t(&[1, 1], &[3.0f32]), t(&[1, 2], &[0u8, 15]), t(&[1, 1], &[2.0f32])],
            &Shape::new(DType::Float32, &[1, 2]),
        );
        assert_eq!(y.unwrap().typed::<f32>(), &[-6.0, 6.0]);
        assert_eq!(NF4_TABLE[8], 0.07958029955625534f64 as f32);
        let bad = Op::FusedQuantizedDense {
            quant: Quantization { block_axis: 0, ..nq },
            activation: Activation::None,
            has_zero_point: false,
            has_bias: false,
        };
        let r = quantized_dense(
            "t",
            &bad,
            &[t(&[1, 1], &[3.0f32]), t(&[1, 1], &[0u8]), t(&[1, 1], &[2.0f32])],
            &Shape::new(DType::Float32, &[1, 1]),
        );
        assert!(r.is_err());
    }

    #[test]
    fn embedding_lookup_rows() {
        let quant = Quantization { scheme: QuantScheme::Ggml, block_axis: 0, block_size: 0, ggml_type: GgmlType::Q8_0 };
        let mut d = q8_0_block();
        let mut second = q8_0_block();
        second[1] = 0x3C; // d = 1.0
        d.extend(second);
        let data = t(&[2, 34], &d);
        let idx = t(&[2, 1], &[1i32, 0]);
        let y = embedding_lookup("t", &quant, &data, &idx, &Shape::new(DType::Float32, &[2, 32])).unwrap();
        let y = y.typed::<f32>();
        assert_eq!((y[0], y[31], y[32], y[63]), (-16.0, 15.0, -32.0, 30.0));
        let bad = t(&[1, 1], &[2i64]);
        assert!(embedding_lookup("t", &quant, &data, &bad, &Shape::new(DType::Float32, &[1, 32])).is_err());
        let bad = t(&[1, 1], &[-1i64]);
        assert!(embedding_lookup("t", &quant, &data, &bad, &Shape::new(DType::Float32, &[1, 32])).is_err());
        let q5 = Quantization { ggml_type: GgmlType::Q5K, ..quant };
        let data = t(&[1, 176], &[0u8; 176]);
        let e = embedding_lookup("t", &q5, &data, &t(&[1, 1], &[0i32]), &Shape::new(DType::Float32, &[1, 256]));
        assert!(e.unwrap_err().is_not_implemented());
    }
}
