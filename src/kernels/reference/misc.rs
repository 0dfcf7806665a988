//! Reference kernels for FFT (§4.8), RngBitGenerator (Philox-4x32-10, bit-exact as §4.10) and the batch-norm
//! ops (§4.9).
//!
//! FFTs run in f64 with `rustfft` whatever the dtype and are rounded once to C64/F32 outputs. Batch norm
//! computes in f64 for every float dtype (an accurate oracle) and rounds once to the operand dtype.

use num_complex::Complex64;
use rustfft::FftPlanner;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{FftType, Op};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

use super::movement::util::{
    arg, expect_dims, for_each_index, from_c64_vec, from_f64_vec, out_shape, to_c64_vec, to_f64_vec,
};

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    let name = name.as_str();
    match op {
        Op::Fft { fft_type, lengths } => {
            Ok(vec![fft(name, arg(name, inputs, 0)?, *fft_type, lengths, out_shape(name, out_shapes, 0)?)?])
        }
        Op::RngBitGenerator { .. } => rng_bit_generator(
            name,
            arg(name, inputs, 0)?,
            out_shape(name, out_shapes, 0)?,
            out_shape(name, out_shapes, 1)?,
        ),
        Op::BatchNormInference { epsilon, feature_axis } => {
            let x = arg(name, inputs, 0)?;
            let bn = BatchNorm::new(name, x, *feature_axis, *epsilon)?;
            let p: Vec<Vec<f64>> = (1..5).map(|i| bn.param(name, arg(name, inputs, i)?)).collect::<Result<_>>()?;
            let y = bn.inference(&p[0], &p[1], &p[2], &p[3]);
            Ok(vec![bn.output(name, out_shapes, 0, &x.shape, &y)?])
        }
        Op::BatchNormTraining { epsilon, feature_axis } => {
            let x = arg(name, inputs, 0)?;
            let bn = BatchNorm::new(name, x, *feature_axis, *epsilon)?;
            let scale = bn.param(name, arg(name, inputs, 1)?)?;
            let offset = bn.param(name, arg(name, inputs, 2)?)?;
            let (mean, var) = bn.moments();
            let y = bn.inference(&scale, &offset, &mean, &var);
            let c = bn.channel_shape(&x.shape);
            Ok(vec![
                bn.output(name, out_shapes, 0, &x.shape, &y)?,
                bn.output(name, out_shapes, 1, &c, &mean)?,
                bn.output(name, out_shapes, 2, &c, &var)?,
            ])
        }
        Op::BatchNormGradient { epsilon, feature_axis } => {
            let x = arg(name, inputs, 0)?;
            let bn = BatchNorm::new(name, x, *feature_axis, *epsilon)?;
            let scale = bn.param(name, arg(name, inputs, 1)?)?;
            let mean = bn.param(name, arg(name, inputs, 2)?)?;
            let var = bn.param(name, arg(name, inputs, 3)?)?;
            let g = arg(name, inputs, 4)?;
            if g.shape.dtype != x.shape.dtype || g.shape.dims != x.shape.dims {
                return Err(Error::invalid(name, format!("grad_output {} differs from operand {}", g.shape, x.shape)));
            }
            let (gx, gs, go) = bn.gradient(&scale, &mean, &var, &to_f64_vec(name, g)?);
            let c = bn.channel_shape(&x.shape);
            Ok(vec![
                bn.output(name, out_shapes, 0, &x.shape, &gx)?,
                bn.output(name, out_shapes, 1, &c, &gs)?,
                bn.output(name, out_shapes, 2, &c, &go)?,
            ])
        }
        _ => Err(Error::invalid(name, "not an FFT, RNG or batch-norm op")),
    }
}

// ---------------------------------------------------------------------------------------------
// FFT
// ---------------------------------------------------------------------------------------------

/// Applies a 1-D complex FFT of length `dims[axis]` along `axis` of the row-major array `data`, in place.
fn fft_axis(planner: &mut FftPlanner<f64>, data: &mut [Complex64], dims: &[usize], axis: usize, inverse: bool) {
    let n = dims[axis];
    if n == 0 || data.is_empty() {
        return;
    }
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let plan = if inverse { planner.plan_fft_inverse(n) } else { planner.plan_fft_forward(n) };
    let mut lane = vec![Complex64::new(0.0, 0.0); n];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            for (k, v) in lane.iter_mut().enumerate() {
                *v = data[base + k * inner];
            }
            plan.process(&mut lane);
            for (k, v) in lane.iter().enumerate() {
                data[base + k * inner] = *v;
            }
        }
    }
}

/// Maps every lane along the last axis of `data` (lanes of `n_in`) to a lane of `n_out` with `f`.
fn map_last_axis(
    data: &[Complex64],
    n_in: usize,
    n_out: usize,
    mut f: impl FnMut(&[Complex64], &mut [Complex64]),
) -> Vec<Complex64> {
    let lanes = data.len().checked_div(n_in).unwrap_or(0);
    let mut out = vec![Complex64::new(0.0, 0.0); lanes * n_out];
    for l in 0..lanes {
        f(&data[l * n_in..(l + 1) * n_in], &mut out[l * n_out..(l + 1) * n_out]);
    }
    out
}

fn fft(name: &str, x: &Tensor, kind: FftType, lengths: &[i64], out: &Shape) -> Result<Tensor> {
    let dims = x.shape.udims();
    let rank = dims.len();
    let k = lengths.len();
    if !(1..=3).contains(&k) || k > rank || lengths.iter().any(|&l| l < 1) {
        return Err(Error::invalid(name, format!("fft_length {lengths:?} invalid for operand {}", x.shape)));
    }
    let lens: Vec<usize> = lengths.iter().map(|&l| l as usize).collect();
    let first = rank - k;
    let n_last = lens[k - 1];
    let (in_dt, out_dt) = (x.shape.dtype, out.dtype);
    let dtypes_ok = match kind {
        FftType::Forward | FftType::Inverse => in_dt.is_complex() && out_dt == in_dt,
        FftType::ForwardReal => {
            matches!((in_dt, out_dt), (DType::Float32, DType::Complex64) | (DType::Float64, DType::Complex128))
        }
        FftType::InverseReal => {
            matches!((in_dt, out_dt), (DType::Complex64, DType::Float32) | (DType::Complex128, DType::Float64))
        }
    };
    if !dtypes_ok {
        return Err(Error::invalid(name, format!("{kind:?} from {in_dt} to {out_dt} not supported")));
    }
    // Expected trailing input dims and output dims.
    let mut want_in = lens.clone();
    let mut out_dims = dims.clone();
    match kind {
        FftType::ForwardReal => out_dims[rank - 1] = n_last / 2 + 1,
        FftType::InverseReal => {
            want_in[k - 1] = n_last / 2 + 1;
            out_dims[rank - 1] = n_last;
        }
        _ => {}
    }
    if dims[first..] != want_in[..] {
        return Err(Error::invalid(
            name,
            format!("{kind:?} with fft_length {lengths:?} needs trailing dims {want_in:?}, got {}", x.shape),
        ));
    }
    expect_dims(name, "output", out, &out_dims)?;
    let mut planner = FftPlanner::<f64>::new();
    let mut data = to_c64_vec(name, x)?;
    let scale = 1.0 / lens.iter().product::<usize>().max(1) as f64;
    let result = match kind {
        FftType::Forward | FftType::Inverse => {
            let inverse = kind == FftType::Inverse;
            for a in first..rank {
                fft_axis(&mut planner, &mut data, &dims, a, inverse);
            }
            if inverse {
                data.iter_mut().for_each(|v| *v *= scale);
            }
            data
        }
        FftType::ForwardReal => {
            let plan = planner.plan_fft_forward(n_last);
            let mut full = vec![Complex64::new(0.0, 0.0); n_last];
            let mut half = map_last_axis(&data, n_last, out_dims[rank - 1], |lane, o| {
                full.copy_from_slice(lane);
                plan.process(&mut full);
                o.copy_from_slice(&full[..o.len()]);
            });
            for a in first..rank - 1 {
                fft_axis(&mut planner, &mut half, &out_dims, a, false);
            }
            half
        }
        FftType::InverseReal => {
            for a in first..rank - 1 {
                fft_axis(&mut planner, &mut data, &dims, a, true);
            }
            let plan = planner.plan_fft_inverse(n_last);
            let m = dims[rank - 1];
            let mut full = vec![Complex64::new(0.0, 0.0); n_last];
            let mut real = map_last_axis(&data, m, n_last, |lane, o| {
                // Hermitian extension; the imaginary parts of the DC and (even n) Nyquist bins are ignored.
                for (j, v) in full.iter_mut().enumerate() {
                    *v = if j < m { lane[j] } else { lane[n_last - j].conj() };
                    if j == 0 || 2 * j == n_last {
                        v.im = 0.0;
                    }
                }
                plan.process(&mut full);
                o.copy_from_slice(&full);
            });
            real.iter_mut().for_each(|v| *v = Complex64::new(v.re * scale, 0.0));
            real
        }
    };
    from_c64_vec(name, out, &result)
}

// ---------------------------------------------------------------------------------------------
// RngBitGenerator: Philox-4x32-10 (§4.10)
// ---------------------------------------------------------------------------------------------

/// One Philox-4x32-10 block: the four output words for a 128-bit counter and a 64-bit key.
fn philox_block(counter: u128, key: u64) -> [u32; 4] {
    const A: u64 = 0xD251_1F53;
    const B: u64 = 0xCD9E_8D57;
    let mut x = [counter as u32, (counter >> 32) as u32, (counter >> 64) as u32, (counter >> 96) as u32];
    let (mut k0, mut k1) = (key as u32, (key >> 32) as u32);
    for _ in 0..10 {
        let pb = B * x[2] as u64;
        let pa = A * x[0] as u64;
        x = [(pb >> 32) as u32 ^ x[1] ^ k0, pb as u32, (pa >> 32) as u32 ^ x[3] ^ k1, pa as u32];
        k0 = k0.wrapping_add(0x9E37_79B9);
        k1 = k1.wrapping_add(0xBB67_AE85);
    }
    x
}

fn rng_bit_generator(name: &str, state: &Tensor, state_out: &Shape, values: &Shape) -> Result<Vec<Tensor>> {
    if state.shape.dtype != DType::Uint64
        || !matches!(state.shape.dims.as_slice(), [2] | [3])
        || state_out.dims != state.shape.dims
    {
        return Err(Error::invalid(
            name,
            format!("state must be Uint64[3] or Uint64[2] (and so the new state), got {}", state.shape),
        ));
    }
    let s = state.typed::<u64>();
    let key = s[0];
    let counter: u128 =
        if s.len() == 3 { s[1] as u128 | (s[2] as u128) << 64 } else { s[1] as u128 | (key as u128) << 64 };
    let bits = values.dtype.bits();
    if values.dtype.is_bool() || values.dtype.is_packed() || values.dtype.is_complex() || !values.dtype.is_supported() {
        return Err(Error::not_implemented(name, format!("random values of dtype {}", values.dtype)));
    }
    let n = values.num_elements();
    let words = if bits == 64 { 2 * n } else { n };
    let nblocks = words.div_ceil(4);
    let mut stream = Vec::with_capacity(nblocks * 4);
    for i in 0..nblocks {
        stream.extend_from_slice(&philox_block(counter.wrapping_add(i as u128), key));
    }
    let mut t = Tensor::try_zeros(values.clone())?;
    let bytes = t.bytes_mut();
    for j in 0..n {
        match bits {
            64 => {
                let v = stream[2 * j] as u64 | (stream[2 * j + 1] as u64) << 32;
                bytes[8 * j..8 * j + 8].copy_from_slice(&v.to_le_bytes());
            }
            32 => bytes[4 * j..4 * j + 4].copy_from_slice(&stream[j].to_le_bytes()),
            16 => bytes[2 * j..2 * j + 2].copy_from_slice(&(stream[j] as u16).to_le_bytes()),
            _ => bytes[j] = stream[j] as u8,
        }
    }
    let new_counter = counter.wrapping_add(nblocks as u128);
    let new_state: Vec<u64> = if s.len() == 3 {
        vec![key, new_counter as u64, (new_counter >> 64) as u64]
    } else {
        vec![key, s[1].wrapping_add(nblocks as u64)]
    };
    Ok(vec![Tensor::from_vec(state_out.clone(), &new_state)?, t])
}

// ---------------------------------------------------------------------------------------------
// Batch norm (§4.9)
// ---------------------------------------------------------------------------------------------

/// An operand viewed as (channel of each element, value), computed in f64.
struct BatchNorm {
    x: Vec<f64>,
    channel: Vec<usize>,
    channels: usize,
    feature_axis: usize,
    eps: f64,
    dtype: DType,
}

impl BatchNorm {
    fn new(name: &str, x: &Tensor, feature_axis: usize, eps: f32) -> Result<BatchNorm> {
        let dtype = x.shape.dtype;
        if !dtype.is_float() {
            return Err(Error::invalid(name, format!("operand dtype {dtype} must be a float")));
        }
        let dims = x.shape.udims();
        let channels = *dims
            .get(feature_axis)
            .ok_or_else(|| Error::invalid(name, format!("feature_axis {feature_axis} out of range for {}", x.shape)))?;
        let mut channel = Vec::with_capacity(x.len());
        for_each_index(&dims, |idx| channel.push(idx[feature_axis]));
        Ok(BatchNorm { x: to_f64_vec(name, x)?, channel, channels, feature_axis, eps: eps as f64, dtype })
    }

    /// A per-channel parameter (1-D, length = feature dim, operand dtype) as f64.
    fn param(&self, name: &str, p: &Tensor) -> Result<Vec<f64>> {
        if p.shape.dtype != self.dtype || p.shape.udims() != [self.channels] {
            return Err(Error::invalid(
                name,
                format!("parameter {} must be {}[{}]", p.shape, self.dtype, self.channels),
            ));
        }
        to_f64_vec(name, p)
    }

    fn channel_shape(&self, x: &Shape) -> Shape {
        Shape::new(x.dtype, &[x.dims[self.feature_axis]])
    }

    fn output(&self, name: &str, out_shapes: &[Shape], i: usize, want: &Shape, v: &[f64]) -> Result<Tensor> {
        let s = out_shape(name, out_shapes, i)?;
        if s.dtype != want.dtype {
            return Err(Error::invalid(name, format!("output #{i} {s} should have dtype {}", want.dtype)));
        }
        expect_dims(name, &format!("output #{i}"), s, &want.udims())?;
        from_f64_vec(name, s, v)
    }

    /// Per-channel sums of `f(element index)`.
    fn channel_sums(&self, f: impl Fn(usize) -> f64) -> Vec<f64> {
        let mut s = vec![0.0; self.channels];
        for (i, &c) in self.channel.iter().enumerate() {
            s[c] += f(i);
        }
        s
    }

    /// Elements per channel.
    fn count(&self) -> f64 {
        (self.x.len().checked_div(self.channels).unwrap_or(0)) as f64
    }

    /// Batch mean and biased (÷N) variance per channel.
    fn moments(&self) -> (Vec<f64>, Vec<f64>) {
        let n = self.count();
        let mean: Vec<f64> = self.channel_sums(|i| self.x[i]).iter().map(|s| s / n).collect();
        let var = self.channel_sums(|i| (self.x[i] - mean[self.channel[i]]).powi(2)).iter().map(|s| s / n).collect();
        (mean, var)
    }

    /// `(x − mean)·rsqrt(var + eps)·scale + offset`.
    fn inference(&self, scale: &[f64], offset: &[f64], mean: &[f64], var: &[f64]) -> Vec<f64> {
        (0..self.x.len())
            .map(|i| {
                let c = self.channel[i];
                (self.x[i] - mean[c]) / (var[c] + self.eps).sqrt() * scale[c] + offset[c]
            })
            .collect()
    }

    /// (grad_x, grad_scale, grad_offset) per §4.9.
    fn gradient(&self, scale: &[f64], mean: &[f64], var: &[f64], g: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let n = self.count();
        let rs: Vec<f64> = var.iter().map(|v| 1.0 / (v + self.eps).sqrt()).collect();
        let centered = |i: usize| self.x[i] - mean[self.channel[i]];
        let grad_offset = self.channel_sums(|i| g[i]);
        let sum_gx = self.channel_sums(|i| g[i] * centered(i));
        let grad_scale: Vec<f64> = sum_gx.iter().zip(&rs).map(|(s, r)| s * r).collect();
        let grad_x = (0..self.x.len())
            .map(|i| {
                let c = self.channel[i];
                let (mean_g, mean_gx) = (grad_offset[c] / n, sum_gx[c] / n);
                scale[c] * rs[c] * (g[i] - mean_g - centered(i) * mean_gx / (var[c] + self.eps))
            })
            .collect();
        (grad_x, grad_scale, grad_offset)
    }
}

#[cfg(test)]
mod tests {
    use half::f16;
    use num_complex::{Complex32, Complex64};

    use super::super::movement::util::tensor;
    use super::*;

    fn fft_run(kind: FftType, lengths: &[i64], x: Tensor, out: Shape) -> Result<Tensor> {
        eval(&Op::Fft { fft_type: kind, lengths: lengths.to_vec() }, &[x], &[out]).map(|mut v| v.remove(0))
    }

    fn close(a: Complex64, b: Complex64) -> bool {
        (a - b).norm() < 1e-9
    }

    fn c(re: f64, im: f64) -> Complex64 {
        Complex64::new(re, im)
    }

    #[test]
    fn fft_delta_constant_and_inverse() {
        // FFT of a delta is all ones; of a constant 1 is N at DC; IFFT of [N,0,…] is all ones.
        let mut delta = vec![c(0.0, 0.0); 8];
        delta[0] = c(1.0, 0.0);
        let r = fft_run(FftType::Forward, &[8], tensor::<Complex64>(&[8], &delta), Shape::new(DType::Complex128, &[8]))
            .unwrap();
        assert!(r.typed::<Complex64>().iter().all(|&v| close(v, c(1.0, 0.0))));
        let ones = tensor::<Complex64>(&[2, 4], &[c(1.0, 0.0); 8]);
        let r = fft_run(FftType::Forward, &[4], ones, Shape::new(DType::Complex128, &[2, 4])).unwrap();
        let expect = [4.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0];
        assert!(r.typed::<Complex64>().iter().zip(expect).all(|(&v, e)| close(v, c(e, 0.0))));
        let mut spec = vec![c(0.0, 0.0); 4];
        spec[0] = c(4.0, 0.0);
        let r = fft_run(FftType::Inverse, &[4], tensor::<Complex64>(&[4], &spec), Shape::new(DType::Complex128, &[4]))
            .unwrap();
        assert!(r.typed::<Complex64>().iter().all(|&v| close(v, c(1.0, 0.0))));
    }

    #[test]
    fn fft_cosine_and_sine() {
        // x[n] = cos(2πn/8): X[1] = X[7] = 4. x[n] = e^{2πi·3n/8}: X[3] = 8 only.
        let x: Vec<Complex32> =
            (0..8).map(|n| Complex32::new((2.0 * std::f64::consts::PI * n as f64 / 8.0).cos() as f32, 0.0)).collect();
        let r =
            fft_run(FftType::Forward, &[8], tensor::<Complex32>(&[8], &x), Shape::new(DType::Complex64, &[8])).unwrap();
        for (k, v) in r.typed::<Complex32>().iter().enumerate() {
            let e = if k == 1 || k == 7 { 4.0 } else { 0.0 };
            assert!((v.re - e).abs() < 1e-5 && v.im.abs() < 1e-5, "bin {k}: {v}");
        }
        let x: Vec<Complex64> =
            (0..8).map(|n| Complex64::from_polar(1.0, 2.0 * std::f64::consts::PI * 3.0 * n as f64 / 8.0)).collect();
        let r = fft_run(FftType::Forward, &[8], tensor::<Complex64>(&[8], &x), Shape::new(DType::Complex128, &[8]))
            .unwrap();
        for (k, &v) in r.typed::<Complex64>().iter().enumerate() {
            assert!(close(v, c(if k == 3 { 8.0 } else { 0.0 }, 0.0)), "bin {k}: {v}");
        }
    }

    #[test]
    fn fft_2d_on_last_axes() {
        // 2-D FFT of a 2×2 block [[1,2],[3,4]]: [[10, −2], [−4, 0]].
        let x = tensor::<Complex64>(&[1, 2, 2], &[c(1.0, 0.0), c(2.0, 0.0), c(3.0, 0.0), c(4.0, 0.0)]);
        let r = fft_run(FftType::Forward, &[2, 2], x, Shape::new(DType::Complex128, &[1, 2, 2])).unwrap();
        let expect = [10.0, -2.0, -4.0, 0.0];
        assert!(r.typed::<Complex64>().iter().zip(expect).all(|(&v, e)| close(v, c(e, 0.0))));
    }

    #[test]
    fn rfft_and_irfft() {
        // RFFT of [1,2,3,4] = [10, −2+2i, −2].
        let x = tensor::<f64>(&[4], &[1.0, 2.0, 3.0, 4.0]);
        let r = fft_run(FftType::ForwardReal, &[4], x, Shape::new(DType::Complex128, &[3])).unwrap();
        let expect = [c(10.0, 0.0), c(-2.0, 2.0), c(-2.0, 0.0)];
        assert!(r.typed::<Complex64>().iter().zip(expect).all(|(&v, e)| close(v, e)));
        // IRFFT back to 4 reals; the imaginary parts of DC and Nyquist are ignored.
        let spec = tensor::<Complex64>(&[3], &[c(10.0, 5.0), c(-2.0, 2.0), c(-2.0, -7.0)]);
        let r = fft_run(FftType::InverseReal, &[4], spec, Shape::new(DType::Float64, &[4])).unwrap();
        assert!(r.typed::<f64>().iter().zip([1.0, 2.0, 3.0, 4.0]).all(|(v, e)| (v - e).abs() < 1e-12));
        // Odd length: spectrum of [1,0,0,0,0] is 3 bins of 1 → IRFFT with n = 5 gives the delta back.
        let spec = tensor::<Complex32>(&[3], &[Complex32::new(1.0, 0.0); 3]);
        let r = fft_run(FftType::InverseReal, &[5], spec, Shape::new(DType::Float32, &[5])).unwrap();
        assert!(r.typed::<f32>().iter().zip([1.0, 0.0, 0.0, 0.0, 0.0]).all(|(v, e)| (v - e).abs() < 1e-6));
        // 2-D RFFT of [[1,2],[3,4]] = rfft2: [[10, −2], [−4, 0]].
        let x = tensor::<f32>(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let r = fft_run(FftType::ForwardReal, &[2, 2], x, Shape::new(DType::Complex64, &[2, 2])).unwrap();
        let expect = [10.0, -2.0, -4.0, 0.0];
        assert!(r.typed::<Complex32>().iter().zip(expect).all(|(v, e)| (v.re - e).abs() < 1e-6 && v.im.abs() < 1e-6));
        // Length mismatches are errors.
        let x = tensor::<f32>(&[4], &[0.0; 4]);
        assert!(fft_run(FftType::ForwardReal, &[8], x, Shape::new(DType::Complex64, &[5])).is_err());
        let x = tensor::<Complex32>(&[4], &[Complex32::new(0.0, 0.0); 4]);
        assert!(fft_run(FftType::Forward, &[2, 4], x.clone(), Shape::new(DType::Complex64, &[4])).is_err());
        assert!(fft_run(FftType::Forward, &[4], x, Shape::new(DType::Complex128, &[4])).is_err());
    }

    #[test]
    fn fft_empty_batch() {
        let x = tensor::<Complex32>(&[0, 4], &[]);
        let r = fft_run(FftType::Forward, &[4], x, Shape::new(DType::Complex64, &[0, 4])).unwrap();
        assert!(r.is_empty());
        let x = tensor::<f64>(&[0, 4], &[]);
        let r = fft_run(FftType::ForwardReal, &[4], x, Shape::new(DType::Complex128, &[0, 3])).unwrap();
        assert!(r.is_empty());
    }

    fn rng(state: &[u64], values: Shape) -> Vec<Tensor> {
        let st = tensor::<u64>(&[state.len() as i64], state);
        let out = [st.shape.clone(), values.clone()];
        eval(&Op::RngBitGenerator { shape: values }, &[st], &out).unwrap()
    }

    #[test]
    fn philox_section_4_10_example() {
        let expect = [0x6627e8d5u32, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8, 0xf8e4cca4, 0x5cb200db];
        let r = rng(&[0, 0, 0], Shape::new(DType::Uint32, &[6]));
        assert_eq!(r[0].typed::<u64>(), &[0, 2, 0]);
        assert_eq!(r[1].typed::<u32>(), &expect);
        let r = rng(&[0, 0], Shape::new(DType::Uint32, &[6]));
        assert_eq!(r[0].typed::<u64>(), &[0, 2]);
        assert_eq!(r[1].typed::<u32>(), &expect);
    }

    #[test]
    fn philox_packing_rules() {
        let w = [0x6627e8d5u32, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8, 0xf8e4cca4, 0x5cb200db];
        // 64-bit: w_{2j} | w_{2j+1} << 32; 3 elements = 6 words = 2 blocks.
        let r = rng(&[0, 0, 0], Shape::new(DType::Uint64, &[3]));
        let e: Vec<u64> = (0..3).map(|j| w[2 * j] as u64 | (w[2 * j + 1] as u64) << 32).collect();
        assert_eq!(r[1].typed::<u64>(), e.as_slice());
        assert_eq!(r[0].typed::<u64>(), &[0, 2, 0]);
        // 8- and 16-bit: the low bits of one word each; 5 words need 2 blocks.
        let r = rng(&[0, 0, 0], Shape::new(DType::Uint8, &[5]));
        assert_eq!(r[1].typed::<u8>(), &[0xd5, 0x8d, 0x4c, 0xd8, 0xa4]);
        let r = rng(&[0, 0, 0], Shape::new(DType::Float16, &[2]));
        assert_eq!(r[1].typed::<f16>()[0].to_bits(), 0xe8d5);
        assert_eq!(r[0].typed::<u64>(), &[0, 1, 0]);
        // F32 takes the bits.
        let r = rng(&[0, 0, 0], Shape::new(DType::Float32, &[1]));
        assert_eq!(r[1].typed::<f32>()[0].to_bits(), 0x6627e8d5);
        // Empty output: no block, state unchanged.
        let r = rng(&[5, 7, 9], Shape::new(DType::Int32, &[0]));
        assert_eq!(r[0].typed::<u64>(), &[5, 7, 9]);
    }

    #[test]
    fn philox_counter_carry_and_state_forms() {
        // U64[3]: counter low word at u64::MAX carries into the high word.
        let r = rng(&[1, u64::MAX, 0], Shape::new(DType::Uint32, &[8]));
        assert_eq!(r[0].typed::<u64>(), &[1, 1, 1]);
        // Its second block uses counter 2⁶⁴ = the U64[2] form with key 1 and counter 0 (C = 0 | 1 << 64).
        let r2 = rng(&[1, 0], Shape::new(DType::Uint32, &[4]));
        assert_eq!(&r[1].typed::<u32>()[4..], r2[1].typed::<u32>());
        assert_eq!(r2[0].typed::<u64>(), &[1, 1]);
        // Bool values are rejected.
        let st = tensor::<u64>(&[3], &[0, 0, 0]);
        let values = Shape::new(DType::Bool, &[2]);
        assert!(
            eval(
                &Op::RngBitGenerator { shape: values.clone() },
                std::slice::from_ref(&st),
                &[st.shape.clone(), values]
            )
            .is_err()
        );
    }

    fn bn3(op: Op, inputs: &[Tensor], c: i64, x: &Shape) -> Vec<Tensor> {
        let cs = Shape::new(x.dtype, &[c]);
        eval(&op, inputs, &[x.clone(), cs.clone(), cs]).unwrap()
    }

    #[test]
    fn batch_norm_training_by_hand() {
        // x [2,2] with features on axis 1: channel 0 = {1,3} (mean 2, var 1), channel 1 = {2,6} (mean 4, var 4).
        let x = tensor::<f32>(&[2, 2], &[1.0, 2.0, 3.0, 6.0]);
        let scale = tensor::<f32>(&[2], &[1.0, 2.0]);
        let offset = tensor::<f32>(&[2], &[0.0, 10.0]);
        let r = bn3(Op::BatchNormTraining { epsilon: 0.0, feature_axis: 1 }, &[x.clone(), scale, offset], 2, &x.shape);
        assert_eq!(r[1].typed::<f32>(), &[2.0, 4.0]);
        assert_eq!(r[2].typed::<f32>(), &[1.0, 4.0]);
        // normalized: ch0 (1−2)/1 = −1, (3−2)/1 = 1; ch1 ((2−4)/2)·2 + 10 = 8, ((6−4)/2)·2 + 10 = 12.
        assert_eq!(r[0].typed::<f32>(), &[-1.0, 8.0, 1.0, 12.0]);
    }

    #[test]
    fn batch_norm_inference_by_hand() {
        // Features on axis 0: y = (x − mean)/sqrt(var + eps)·scale + offset with var + eps = 4.
        let x = tensor::<f64>(&[2, 2], &[1.0, 5.0, 2.0, 4.0]);
        let p = |v: [f64; 2]| tensor::<f64>(&[2], &v);
        let inputs = [x.clone(), p([2.0, 1.0]), p([1.0, 0.0]), p([1.0, 2.0]), p([3.5, 8.75])];
        let op = Op::BatchNormInference { epsilon: 0.5, feature_axis: 0 };
        let r = eval(&op, &inputs, std::slice::from_ref(&x.shape)).unwrap();
        // ch0: (1−1)/2·2+1 = 1, (5−1)/2·2+1 = 5; ch1: var+eps = 9.25 → (2−2)/√9.25 = 0, (4−2)/√9.25.
        let v = r[0].typed::<f64>();
        assert_eq!(v[..3], [1.0, 5.0, 0.0]);
        assert!((v[3] - 2.0 / 9.25f64.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn batch_norm_gradient_by_hand() {
        // One channel x = {1,3}, mean 2, var 1, eps 0, scale 2, g = {1,0}:
        // grad_offset = 1; grad_scale = Σ g·(x−mean)·1 = −1; mean(g) = 0.5, mean(g·(x−mean)) = −0.5;
        // grad_x = 2·(g − 0.5 − (x−mean)·(−0.5)) = 2·(1 − 0.5 − 0.5, 0 − 0.5 + 0.5) = (0, 0).
        // With g = {2,0} and scale 1, var 4 (rsqrt 0.5), x = {0,4}, mean 2:
        // mean(g) = 1, mean(g·(x−m)) = (2·−2)/2 = −2; grad_x = 0.5·(g − 1 − (x−2)·(−2)/4)
        // = 0.5·(2 − 1 − 1, 0 − 1 + 1) = (0, 0); grad_scale = −4·0.5 = −2; grad_offset = 2.
        let x = tensor::<f32>(&[2, 1], &[1.0, 3.0]);
        let one = |v: f32| tensor::<f32>(&[1], &[v]);
        let op = Op::BatchNormGradient { epsilon: 0.0, feature_axis: 1 };
        let g = tensor::<f32>(&[2, 1], &[1.0, 0.0]);
        let r = bn3(op.clone(), &[x.clone(), one(2.0), one(2.0), one(1.0), g], 1, &x.shape);
        assert_eq!(r[0].typed::<f32>(), &[0.0, 0.0]);
        assert_eq!(r[1].typed::<f32>(), &[-1.0]);
        assert_eq!(r[2].typed::<f32>(), &[1.0]);
        let x = tensor::<f32>(&[2, 1], &[0.0, 4.0]);
        let g = tensor::<f32>(&[2, 1], &[2.0, 0.0]);
        let r = bn3(op, &[x.clone(), one(1.0), one(2.0), one(4.0), g], 1, &x.shape);
        assert_eq!(r[0].typed::<f32>(), &[0.0, 0.0]);
        assert_eq!(r[1].typed::<f32>(), &[-2.0]);
        assert_eq!(r[2].typed::<f32>(), &[2.0]);
    }

    #[test]
    fn batch_norm_gradient_nonzero_and_half() {
        // x = {0, 1, 5} one channel, mean 2, var 4 (given, not the batch's), eps 0, scale 1, g = {1, 0, 0}:
        // rs = 0.5, mean(g) = 1/3, Σ g·(x−m) = −2 → mean −2/3;
        // grad_x[i] = 0.5·(g_i − 1/3 − (x_i − 2)·(−2/3)/4) → [0.5·(1 − 1/3 − 1/3), 0.5·(−1/3 − 1/6), 0.5·(−1/3 + 1/2)]
        // = [1/6, −1/4, 1/12].
        let x = tensor::<f16>(&[3, 1], &[0.0, 1.0, 5.0].map(f16::from_f32));
        let one = |v: f32| tensor::<f16>(&[1], &[f16::from_f32(v)]);
        let g = tensor::<f16>(&[3, 1], &[1.0, 0.0, 0.0].map(f16::from_f32));
        let op = Op::BatchNormGradient { epsilon: 0.0, feature_axis: 1 };
        let r = bn3(op, &[x.clone(), one(1.0), one(2.0), one(4.0), g], 1, &x.shape);
        let gx: Vec<f32> = r[0].typed::<f16>().iter().map(|v| v.to_f32()).collect();
        let expect = [1.0 / 6.0, -0.25, 1.0 / 12.0].map(|v: f64| f16::from_f64(v).to_f32());
        assert_eq!(gx, expect);
        assert_eq!(r[1].typed::<f16>()[0].to_f32(), -1.0);
        assert_eq!(r[2].typed::<f16>()[0].to_f32(), 1.0);
    }
}
