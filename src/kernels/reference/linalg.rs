//! Reference kernels for DotGeneral and ConvGeneral (§4.8).
//!
//! Accumulation (the oracle's choice, see §9): F16/BF16 accumulate in f32 (f64 if the accumulator dtype asks
//! for it) and round once; **F32 and F64 accumulate in f64** (more accurate than XLA's f32 accumulation for F32,
//! so results are within rounding of any correct f32 kernel); integers accumulate with wrap-around modulo 2⁶⁴ and
//! are then wrapped into the output dtype, which equals accumulating in the output dtype when it is wider than
//! the input (int8 `[100,100]·[1,1]` = −56, or 200 with an Int32 output) and in the input dtype otherwise;
//! integer inputs with a float/complex output accumulate in f64; complex accumulates in `Complex<f64>`.
//! The result is converted to the output dtype (`output_dtype`, default the input dtype).

use std::ops::{Add, Mul};

use num_complex::Complex64;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{ConvAxes, Op};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

use super::movement::util::{
    arg, axis_offsets, dilated, expect_dims, for_each_index, from_c64_vec, from_f32_vec, from_f64_vec, from_i64_vec,
    out_shape, strides, to_c64_vec, to_f32_vec, to_f64_vec, to_i64_vec, window_count,
};

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    let name = name.as_str();
    let out = out_shape(name, out_shapes, 0)?;
    let (lhs, rhs) = (arg(name, inputs, 0)?, arg(name, inputs, 1)?);
    let t = match op {
        Op::DotGeneral { lhs_contracting, lhs_batch, rhs_contracting, rhs_batch, accumulator_dtype, output_dtype } => {
            if output_dtype.is_some_and(|d| d != out.dtype) {
                return Err(Error::invalid(name, format!("output_dtype {output_dtype:?} differs from output {out}")));
            }
            let plan = dot_plan(name, lhs, rhs, [lhs_contracting, lhs_batch, rhs_contracting, rhs_batch], out)?;
            compute(name, lhs, rhs, *accumulator_dtype, out, &plan)?
        }
        Op::ConvGeneral { axes, strides, padding, input_dilations, kernel_dilations, channel_groups, batch_groups } => {
            let cfg = ConvConfig {
                axes,
                strides,
                padding,
                input_dilations,
                kernel_dilations,
                channel_groups: *channel_groups,
                batch_groups: *batch_groups,
            };
            if out.dtype != lhs.shape.dtype {
                return Err(Error::invalid(
                    name,
                    format!("output dtype {} differs from input {}", out.dtype, lhs.shape),
                ));
            }
            let plan = conv_plan(name, lhs, rhs, &cfg, out)?;
            compute(name, lhs, rhs, None, out, &plan)?
        }
        _ => return Err(Error::invalid(name, "not a linear-algebra op")),
    };
    Ok(vec![t])
}

/// The accumulation domain: `+`, `·` and zero.
trait Ring: Copy + Add<Output = Self> + Mul<Output = Self> {
    fn zero() -> Self;
}
impl Ring for f32 {
    fn zero() -> f32 {
        0.0
    }
}
impl Ring for f64 {
    fn zero() -> f64 {
        0.0
    }
}
impl Ring for Complex64 {
    fn zero() -> Complex64 {
        Complex64::new(0.0, 0.0)
    }
}

/// Two's complement integers modulo 2⁶⁴.
#[derive(Clone, Copy)]
struct Wrap(i64);
impl Add for Wrap {
    type Output = Wrap;
    fn add(self, o: Wrap) -> Wrap {
        Wrap(self.0.wrapping_add(o.0))
    }
}
impl Mul for Wrap {
    type Output = Wrap;
    fn mul(self, o: Wrap) -> Wrap {
        Wrap(self.0.wrapping_mul(o.0))
    }
}
impl Ring for Wrap {
    fn zero() -> Wrap {
        Wrap(0)
    }
}

/// A validated computation, generic over the accumulation domain; returns the output in row-major order.
trait Kernel {
    fn run<A: Ring>(&self, l: &[A], r: &[A]) -> Vec<A>;
}

/// Converts both operands into the accumulation domain chosen from the dtypes (module doc), runs `k`, and
/// converts the result to the output dtype.
fn compute(name: &str, lhs: &Tensor, rhs: &Tensor, acc: Option<DType>, out: &Shape, k: &impl Kernel) -> Result<Tensor> {
    let dt = lhs.shape.dtype;
    if rhs.shape.dtype != dt {
        return Err(Error::invalid(name, format!("operand dtypes differ: {} vs {}", lhs.shape, rhs.shape)));
    }
    let real_out = out.dtype.is_float() || out.dtype.is_complex();
    match dt {
        DType::Float16 | DType::BFloat16 if acc != Some(DType::Float64) => {
            let v = k.run(&to_f32_vec(name, lhs)?, &to_f32_vec(name, rhs)?);
            from_f32_vec(name, out, &v)
        }
        DType::Float16 | DType::BFloat16 | DType::Float32 | DType::Float64 => {
            let v = k.run(&to_f64_vec(name, lhs)?, &to_f64_vec(name, rhs)?);
            from_f64_vec(name, out, &v)
        }
        d if d.is_int() && !d.is_packed() && real_out => {
            let v = k.run(&to_f64_vec(name, lhs)?, &to_f64_vec(name, rhs)?);
            from_f64_vec(name, out, &v)
        }
        d if d.is_int() && !d.is_packed() => {
            let wrap = |t: &Tensor| -> Result<Vec<Wrap>> { Ok(to_i64_vec(name, t)?.into_iter().map(Wrap).collect()) };
            let v: Vec<i64> = k.run(&wrap(lhs)?, &wrap(rhs)?).into_iter().map(|w| w.0).collect();
            from_i64_vec(name, out, &v, d.is_unsigned())
        }
        DType::Complex64 | DType::Complex128 => {
            let v = k.run(&to_c64_vec(name, lhs)?, &to_c64_vec(name, rhs)?);
            from_c64_vec(name, out, &v)
        }
        d => Err(Error::not_implemented(name, format!("dtype {d}"))),
    }
}

/// Flat offsets of the batch, free and contracting index combinations of both operands.
struct DotPlan {
    lb: Vec<usize>,
    rb: Vec<usize>,
    lf: Vec<usize>,
    rf: Vec<usize>,
    lc: Vec<usize>,
    rc: Vec<usize>,
}

/// Validates DotGeneral's axes (`[lhs_contracting, lhs_batch, rhs_contracting, rhs_batch]`) and output shape.
fn dot_plan(name: &str, lhs: &Tensor, rhs: &Tensor, axes: [&Vec<usize>; 4], out: &Shape) -> Result<DotPlan> {
    let [lc, lb, rc, rb] = axes;
    let (ld, rd) = (lhs.shape.udims(), rhs.shape.udims());
    if lc.len() != rc.len() || lb.len() != rb.len() {
        return Err(Error::invalid(name, format!("contracting {lc:?}/{rc:?} or batch {lb:?}/{rb:?} lengths differ")));
    }
    let free = |dims: &[usize], c: &[usize], b: &[usize], side: &str| -> Result<Vec<usize>> {
        let mut seen = vec![false; dims.len()];
        for &a in c.iter().chain(b) {
            if a >= dims.len() || std::mem::replace(&mut seen[a], true) {
                return Err(Error::invalid(
                    name,
                    format!("{side} axis {a} out of range or repeated (rank {})", dims.len()),
                ));
            }
        }
        Ok((0..dims.len()).filter(|&a| !seen[a]).collect())
    };
    let lfree = free(&ld, lc, lb, "lhs")?;
    let rfree = free(&rd, rc, rb, "rhs")?;
    for (&l, &r) in lc.iter().zip(rc).chain(lb.iter().zip(rb)) {
        if ld[l] != rd[r] {
            return Err(Error::invalid(
                name,
                format!("lhs axis {l} (size {}) paired with rhs axis {r} (size {})", ld[l], rd[r]),
            ));
        }
    }
    let out_dims: Vec<usize> =
        lb.iter().map(|&a| ld[a]).chain(lfree.iter().map(|&a| ld[a])).chain(rfree.iter().map(|&a| rd[a])).collect();
    expect_dims(name, "output", out, &out_dims)?;
    let (ls, rs) = (strides(&ld), strides(&rd));
    Ok(DotPlan {
        lb: axis_offsets(&ld, &ls, lb),
        rb: axis_offsets(&rd, &rs, rb),
        lf: axis_offsets(&ld, &ls, &lfree),
        rf: axis_offsets(&rd, &rs, &rfree),
        lc: axis_offsets(&ld, &ls, lc),
        rc: axis_offsets(&rd, &rs, rc),
    })
}

impl Kernel for DotPlan {
    fn run<A: Ring>(&self, l: &[A], r: &[A]) -> Vec<A> {
        let mut out = Vec::with_capacity(self.lb.len() * self.lf.len() * self.rf.len());
        for (&lb, &rb) in self.lb.iter().zip(&self.rb) {
            for &lf in &self.lf {
                for &rf in &self.rf {
                    let mut acc = A::zero();
                    for (&lc, &rc) in self.lc.iter().zip(&self.rc) {
                        acc = acc + l[lb + lf + lc] * r[rb + rf + rc];
                    }
                    out.push(acc);
                }
            }
        }
        out
    }
}

/// ConvGeneral's attributes.
struct ConvConfig<'a> {
    axes: &'a ConvAxes,
    strides: &'a [i64],
    padding: &'a [(i64, i64)],
    input_dilations: &'a [i64],
    kernel_dilations: &'a [i64],
    channel_groups: i64,
    batch_groups: i64,
}

/// Validated convolution geometry (strides in elements; per spatial axis j: stride, low padding, dilations).
struct ConvPlan {
    out_dims: Vec<usize>,
    out_batch: usize,
    out_channels: usize,
    out_spatial: Vec<usize>,
    x_batch: usize,
    x_channel: usize,
    x_spatial: Vec<usize>,
    x_sizes: Vec<i64>,
    k_in: usize,
    k_out: usize,
    /// Every kernel spatial position: its index per axis and its flat kernel offset.
    k_positions: Vec<(Vec<i64>, usize)>,
    stride: Vec<i64>,
    low: Vec<i64>,
    in_dil: Vec<i64>,
    k_dil: Vec<i64>,
    cin_k: usize,
    out_per_channel_group: usize,
    out_per_batch_group: usize,
    batch_groups: usize,
    batch_per_group: usize,
}

fn is_permutation(axes: impl Iterator<Item = usize>, rank: usize) -> bool {
    let mut seen = vec![false; rank];
    let mut n = 0;
    for a in axes {
        if a >= rank || std::mem::replace(&mut seen[a], true) {
            return false;
        }
        n += 1;
    }
    n == rank
}

fn conv_plan(name: &str, x: &Tensor, k: &Tensor, c: &ConvConfig, out: &Shape) -> Result<ConvPlan> {
    let ax = c.axes;
    let s = ax.input_spatial.len();
    let rank = s + 2;
    let (xd, kd) = (x.shape.udims(), k.shape.udims());
    let ranks_ok = s >= 1
        && xd.len() == rank
        && kd.len() == rank
        && out.rank() == rank
        && ax.kernel_spatial.len() == s
        && ax.output_spatial.len() == s
        && is_permutation(
            [ax.input_batch, ax.input_channels].into_iter().chain(ax.input_spatial.iter().copied()),
            rank,
        )
        && is_permutation(
            [ax.kernel_input_channels, ax.kernel_output_channels].into_iter().chain(ax.kernel_spatial.iter().copied()),
            rank,
        )
        && is_permutation(
            [ax.output_batch, ax.output_channels].into_iter().chain(ax.output_spatial.iter().copied()),
            rank,
        );
    if !ranks_ok {
        return Err(Error::invalid(name, format!("axes {ax:?} invalid for input {} and kernel {}", x.shape, k.shape)));
    }
    let per_axis = |v: &[i64], default: i64, what: &str| -> Result<Vec<i64>> {
        match v.len() {
            0 => Ok(vec![default; s]),
            n if n == s && v.iter().all(|&x| x >= 1) => Ok(v.to_vec()),
            _ => Err(Error::invalid(name, format!("{what} {v:?} must have {s} entries ≥ 1"))),
        }
    };
    let stride = per_axis(c.strides, 1, "strides")?;
    let in_dil = per_axis(c.input_dilations, 1, "input_dilations")?;
    let k_dil = per_axis(c.kernel_dilations, 1, "kernel_dilations")?;
    let padding = match c.padding.len() {
        0 => vec![(0, 0); s],
        n if n == s => c.padding.to_vec(),
        _ => return Err(Error::invalid(name, format!("padding {:?} must have {s} entries", c.padding))),
    };
    let (cg, bg) = (c.channel_groups.max(1) as usize, c.batch_groups.max(1) as usize);
    let (b, cin) = (xd[ax.input_batch], xd[ax.input_channels]);
    let (cin_k, o) = (kd[ax.kernel_input_channels], kd[ax.kernel_output_channels]);
    if (cg > 1 && bg > 1) || cin_k.checked_mul(cg) != Some(cin) || o % cg != 0 || b % bg != 0 || o % bg != 0 {
        return Err(Error::invalid(
            name,
            format!(
                "input channels {cin}, kernel channels {cin_k}→{o}, batch {b} incompatible with channel_groups {cg}, batch_groups {bg}"
            ),
        ));
    }
    let mut out_dims = vec![0; rank];
    out_dims[ax.output_batch] = b / bg;
    out_dims[ax.output_channels] = o;
    for j in 0..s {
        let (lo, hi) = padding[j];
        // No overflow: shape inference (run by the verifier before any kernel) rejects attributes
        // unless |lo| + |hi| + the dilated input and the dilated kernel fit in i64
        // (`checked_window_count` in src/ir/infer/structured_window.rs).
        let padded = lo + hi + dilated(xd[ax.input_spatial[j]] as i64, in_dil[j]);
        let window = dilated(kd[ax.kernel_spatial[j]] as i64, k_dil[j]);
        out_dims[ax.output_spatial[j]] = window_count(padded, window, stride[j]) as usize;
    }
    expect_dims(name, "output", out, &out_dims)?;
    let (xs, ks) = (strides(&xd), strides(&kd));
    let k_sizes: Vec<usize> = ax.kernel_spatial.iter().map(|&a| kd[a]).collect();
    let mut k_positions = Vec::new();
    for_each_index(&k_sizes, |q| {
        let off = q.iter().zip(&ax.kernel_spatial).map(|(&i, &a)| i * ks[a]).sum();
        k_positions.push((q.iter().map(|&i| i as i64).collect(), off));
    });
    Ok(ConvPlan {
        out_dims,
        out_batch: ax.output_batch,
        out_channels: ax.output_channels,
        out_spatial: ax.output_spatial.clone(),
        x_batch: xs[ax.input_batch],
        x_channel: xs[ax.input_channels],
        x_spatial: ax.input_spatial.iter().map(|&a| xs[a]).collect(),
        x_sizes: ax.input_spatial.iter().map(|&a| xd[a] as i64).collect(),
        k_in: ks[ax.kernel_input_channels],
        k_out: ks[ax.kernel_output_channels],
        k_positions,
        stride,
        low: padding.iter().map(|p| p.0).collect(),
        in_dil,
        k_dil,
        cin_k,
        out_per_channel_group: o / cg,
        out_per_batch_group: o / bg,
        batch_groups: bg,
        batch_per_group: b / bg,
    })
}

impl Kernel for ConvPlan {
    /// `out[b,o,p] = Σ_c Σ_q X[b', g·Cin_k + c, p·stride + q·k_dil − lo] · K[c,o,q]` over the input with
    /// `in_dil − 1` holes between elements (holes and padding read as 0; §4.8).
    fn run<A: Ring>(&self, x: &[A], k: &[A]) -> Vec<A> {
        let mut out = Vec::with_capacity(self.out_dims.iter().product());
        for_each_index(&self.out_dims, |idx| {
            let (b, o) = (idx[self.out_batch], idx[self.out_channels]);
            let g = o / self.out_per_channel_group;
            let bb = if self.batch_groups > 1 { (o / self.out_per_batch_group) * self.batch_per_group + b } else { b };
            let mut acc = A::zero();
            'positions: for (q, k_off) in &self.k_positions {
                let mut x_off = bb * self.x_batch;
                for j in 0..q.len() {
                    let p = idx[self.out_spatial[j]] as i64;
                    // In i64: p·stride ≤ padded − dilated kernel and q·k_dil ≤ dilated kernel − 1,
                    // so `pos` lies in [−lo, hi + dilated input − 1], bounded by |lo| + |hi| +
                    // dilated input ≤ i64::MAX (checked by shape inference).
                    let pos = p * self.stride[j] + q[j] * self.k_dil[j] - self.low[j];
                    if pos < 0 || pos % self.in_dil[j] != 0 || pos / self.in_dil[j] >= self.x_sizes[j] {
                        continue 'positions;
                    }
                    x_off += (pos / self.in_dil[j]) as usize * self.x_spatial[j];
                }
                for c in 0..self.cin_k {
                    let xv = x[x_off + (g * self.cin_k + c) * self.x_channel];
                    acc = acc + xv * k[c * self.k_in + o * self.k_out + k_off];
                }
            }
            out.push(acc);
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;
    use num_complex::Complex32;

    use super::super::movement::util::tensor;
    use super::*;

    fn dot(lc: &[usize], lb: &[usize], rc: &[usize], rb: &[usize], output_dtype: Option<DType>) -> Op {
        Op::DotGeneral {
            lhs_contracting: lc.to_vec(),
            lhs_batch: lb.to_vec(),
            rhs_contracting: rc.to_vec(),
            rhs_batch: rb.to_vec(),
            accumulator_dtype: None,
            output_dtype,
        }
    }

    fn run(op: Op, inputs: &[Tensor], out: Shape) -> Result<Tensor> {
        eval(&op, inputs, &[out]).map(|mut v| v.remove(0))
    }

    fn iota_f32(dims: &[i64]) -> Tensor {
        let n: i64 = dims.iter().product();
        tensor::<f32>(dims, &(0..n).map(|v| v as f32).collect::<Vec<_>>())
    }

    #[test]
    fn dot_general_section_4_8_einsum() {
        // lhs [2,3,4,5] contract [1] batch [3,0]; rhs [5,1,2,3] contract [3] batch [0,2] → [5,2,4,1]
        // = einsum('abcd,dxab->dacx').
        let (l, r) = (iota_f32(&[2, 3, 4, 5]), iota_f32(&[5, 1, 2, 3]));
        let out =
            run(dot(&[1], &[3, 0], &[3], &[0, 2], None), &[l, r], Shape::new(DType::Float32, &[5, 2, 4, 1])).unwrap();
        let lv = |a: usize, b: usize, c: usize, d: usize| (60 * a + 20 * b + 5 * c + d) as f32;
        let rv = |d: usize, x: usize, a: usize, b: usize| (6 * d + 6 * x + 3 * a + b) as f32;
        let mut expect = vec![];
        for d in 0..5 {
            for a in 0..2 {
                for c in 0..4 {
                    expect.push((0..3).map(|b| lv(a, b, c, d) * rv(d, 0, a, b)).sum::<f32>());
                }
            }
        }
        assert_eq!(out.typed::<f32>(), expect.as_slice());
        // Spot check by hand: out[1,1,2,0] (flat 8 + 4 + 2) = Σ_b L[1,b,2,1]·R[1,0,1,b]
        // = 71·9 + 91·10 + 111·11 = 2770.
        assert_eq!(out.typed::<f32>()[14], 2770.0);
    }

    #[test]
    fn dot_general_free_axes_order() {
        // lhs [3,2,4] contract [1], rhs [5,2] contract [1] → [3,4,5]: out[i,k,j] = Σ_b L[i,b,k]·R[j,b].
        let (l, r) = (iota_f32(&[3, 2, 4]), iota_f32(&[5, 2]));
        let out = run(dot(&[1], &[], &[1], &[], None), &[l, r], Shape::new(DType::Float32, &[3, 4, 5])).unwrap();
        let v = out.typed::<f32>();
        // out[0,0,0] = L[0,0,0]·R[0,0] + L[0,1,0]·R[0,1] = 0·0 + 4·1 = 4.
        assert_eq!(v[0], 4.0);
        // out[2,3,4] = L[2,0,3]·R[4,0] + L[2,1,3]·R[4,1] = 19·8 + 23·9 = 359.
        assert_eq!(v[2 * 20 + 3 * 5 + 4], 359.0);
        // out[1,2,1] = L[1,0,2]·R[1,0] + L[1,1,2]·R[1,1] = 10·2 + 14·3 = 62.
        assert_eq!(v[20 + 10 + 1], 62.0);
    }

    #[test]
    fn dot_general_int_wrap_and_output_dtype() {
        let l = tensor::<i8>(&[2], &[100, 100]);
        let r = tensor::<i8>(&[2], &[1, 1]);
        let out = run(dot(&[0], &[], &[0], &[], None), &[l.clone(), r.clone()], Shape::scalar(DType::Int8)).unwrap();
        assert_eq!(out.typed::<i8>(), &[-56]);
        let op = dot(&[0], &[], &[0], &[], Some(DType::Int32));
        let out = run(op, &[l, r], Shape::scalar(DType::Int32)).unwrap();
        assert_eq!(out.typed::<i32>(), &[200]);
        let l = tensor::<u8>(&[1], &[200]);
        let r = tensor::<u8>(&[1], &[2]);
        let out = run(dot(&[0], &[], &[0], &[], None), &[l, r], Shape::scalar(DType::Uint8)).unwrap();
        assert_eq!(out.typed::<u8>(), &[144]);
    }

    #[test]
    fn dot_general_size_zero_contraction_is_zeros() {
        let l = tensor::<f32>(&[2, 0], &[]);
        let r = tensor::<f32>(&[0, 3], &[]);
        let out = run(dot(&[1], &[], &[0], &[], None), &[l, r], Shape::new(DType::Float32, &[2, 3])).unwrap();
        assert_eq!(out.typed::<f32>(), &[0.0; 6]);
        let l = tensor::<f32>(&[0, 2], &[]);
        let r = tensor::<f32>(&[2], &[1.0, 2.0]);
        let out = run(dot(&[1], &[], &[0], &[], None), &[l, r], Shape::new(DType::Float32, &[0])).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn dot_general_half_accumulates_in_f32() {
        // §11: BF16 [256,1,1,1,1]·ones = 260 (f32 accumulation, one rounding); [1,2,3]·[4,5,6] = 32.
        let l: Vec<bf16> = [256.0, 1.0, 1.0, 1.0, 1.0].iter().map(|&v| bf16::from_f32(v)).collect();
        let l = tensor::<bf16>(&[5], &l);
        let r = tensor::<bf16>(&[5], &[bf16::ONE; 5]);
        let out = run(dot(&[0], &[], &[0], &[], None), &[l, r], Shape::scalar(DType::BFloat16)).unwrap();
        assert_eq!(out.typed::<bf16>()[0].to_f32(), 260.0);
        let l = tensor::<bf16>(&[1, 3], &[1.0, 2.0, 3.0].map(bf16::from_f32));
        let r = tensor::<bf16>(&[3, 1], &[4.0, 5.0, 6.0].map(bf16::from_f32));
        let op = dot(&[1], &[], &[0], &[], Some(DType::Float32));
        let out = run(op, &[l, r], Shape::new(DType::Float32, &[1, 1])).unwrap();
        assert_eq!(out.typed::<f32>(), &[32.0]);
    }

    #[test]
    fn dot_general_batched_matmul_and_complex() {
        // Batch of two 2×2 matmuls: [[1,2],[3,4]]·[[5,6],[7,8]] = [[19,22],[43,50]]; identity·[[5,6],[7,8]].
        let l = tensor::<f64>(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 1.0, 0.0, 0.0, 1.0]);
        let r = tensor::<f64>(&[2, 2, 2], &[5.0, 6.0, 7.0, 8.0, 5.0, 6.0, 7.0, 8.0]);
        let out = run(dot(&[2], &[0], &[1], &[0], None), &[l, r], Shape::new(DType::Float64, &[2, 2, 2])).unwrap();
        assert_eq!(out.typed::<f64>(), &[19.0, 22.0, 43.0, 50.0, 5.0, 6.0, 7.0, 8.0]);
        // (1+i)·i + 2·3 = 5 + i.
        let l = tensor::<Complex32>(&[2], &[Complex32::new(1.0, 1.0), Complex32::new(2.0, 0.0)]);
        let r = tensor::<Complex32>(&[2], &[Complex32::new(0.0, 1.0), Complex32::new(3.0, 0.0)]);
        let out = run(dot(&[0], &[], &[0], &[], None), &[l, r], Shape::scalar(DType::Complex64)).unwrap();
        assert_eq!(out.typed::<Complex32>(), &[Complex32::new(5.0, 1.0)]);
    }

    #[test]
    fn dot_general_rejects_bad_axes() {
        let (l, r) = (iota_f32(&[2, 3]), iota_f32(&[2, 3]));
        assert!(
            run(dot(&[1], &[], &[0], &[], None), &[l.clone(), r.clone()], Shape::new(DType::Float32, &[2, 3])).is_err()
        );
        assert!(
            run(dot(&[1, 1], &[], &[1, 0], &[], None), &[l.clone(), r.clone()], Shape::scalar(DType::Float32)).is_err()
        );
        assert!(run(dot(&[2], &[], &[1], &[], None), &[l, r], Shape::new(DType::Float32, &[2, 2])).is_err());
    }

    fn ncw() -> ConvAxes {
        ConvAxes {
            input_batch: 0,
            input_channels: 1,
            input_spatial: vec![2],
            kernel_input_channels: 0,
            kernel_output_channels: 1,
            kernel_spatial: vec![2],
            output_batch: 0,
            output_channels: 1,
            output_spatial: vec![2],
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(axes: ConvAxes, stride: i64, pad: (i64, i64), in_dil: i64, k_dil: i64, cg: i64, bg: i64) -> Op {
        Op::ConvGeneral {
            axes,
            strides: vec![stride],
            padding: vec![pad],
            input_dilations: vec![in_dil],
            kernel_dilations: vec![k_dil],
            channel_groups: cg,
            batch_groups: bg,
        }
    }

    fn conv1d(op: Op, out_w: i64) -> Vec<f32> {
        let x = tensor::<f32>(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let k = tensor::<f32>(&[1, 1, 2], &[1.0, 10.0]);
        run(op, &[x, k], Shape::new(DType::Float32, &[1, 1, out_w])).unwrap().typed::<f32>().to_vec()
    }

    #[test]
    fn conv_1d_by_hand() {
        // out[p] = x[p] + 10·x[p+1] over x = [1,2,3,4,5].
        assert_eq!(conv1d(conv(ncw(), 1, (0, 0), 1, 1, 1, 1), 4), vec![21.0, 32.0, 43.0, 54.0]);
        // Stride 2, padding (0,1): windows at 0, 2, 4 over [1,2,3,4,5,0].
        assert_eq!(conv1d(conv(ncw(), 2, (0, 1), 1, 1, 1, 1), 3), vec![21.0, 43.0, 5.0]);
        // Input dilation 2: [1,0,2,0,3,0,4,0,5].
        assert_eq!(conv1d(conv(ncw(), 1, (0, 0), 2, 1, 1, 1), 8), vec![1.0, 20.0, 2.0, 30.0, 3.0, 40.0, 4.0, 50.0]);
        // Kernel dilation 2: x[p] + 10·x[p+2].
        assert_eq!(conv1d(conv(ncw(), 1, (0, 0), 1, 2, 1, 1), 3), vec![31.0, 42.0, 53.0]);
        // Negative padding crops: (−1, 0) → over [2,3,4,5].
        assert_eq!(conv1d(conv(ncw(), 1, (-1, 0), 1, 1, 1, 1), 3), vec![32.0, 43.0, 54.0]);
        // Padding both sides: [0,1,2,3,4,5,0] → [10, 21, 32, 43, 54, 5].
        assert_eq!(conv1d(conv(ncw(), 1, (1, 1), 1, 1, 1, 1), 6), vec![10.0, 21.0, 32.0, 43.0, 54.0, 5.0]);
        // A wrong output size is rejected.
        let x = tensor::<f32>(&[1, 1, 5], &[0.0; 5]);
        let k = tensor::<f32>(&[1, 1, 2], &[0.0; 2]);
        assert!(run(conv(ncw(), 1, (0, 0), 1, 1, 1, 1), &[x, k], Shape::new(DType::Float32, &[1, 1, 5])).is_err());
    }

    #[test]
    fn conv_kernel_longer_than_input_gives_empty_axis() {
        let x = tensor::<f32>(&[1, 1, 5], &[1.0; 5]);
        let k = tensor::<f32>(&[1, 1, 6], &[1.0; 6]);
        let out = run(conv(ncw(), 1, (0, 0), 1, 1, 1, 1), &[x, k], Shape::new(DType::Float32, &[1, 1, 0])).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn conv_feature_groups_with_permuted_layouts() {
        // Input NWC [1,3,4]: channel c holds c+1 at every position; kernel OIW [2,2,1]: K[o=0] = (1, 10),
        // K[o=1] = (100, 1000). Group 0 (o=0) sees channels 0,1: 1 + 20 = 21; group 1 sees channels 2,3:
        // 300 + 4000 = 4300.
        let axes = ConvAxes {
            input_batch: 0,
            input_channels: 2,
            input_spatial: vec![1],
            kernel_input_channels: 1,
            kernel_output_channels: 0,
            kernel_spatial: vec![2],
            output_batch: 0,
            output_channels: 1,
            output_spatial: vec![2],
        };
        let x = tensor::<i32>(&[1, 3, 4], &[1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]);
        let k = tensor::<i32>(&[2, 2, 1], &[1, 10, 100, 1000]);
        let out = run(conv(axes, 1, (0, 0), 1, 1, 2, 1), &[x, k], Shape::new(DType::Int32, &[1, 2, 3])).unwrap();
        assert_eq!(out.typed::<i32>(), &[21, 21, 21, 4300, 4300, 4300]);
    }

    #[test]
    fn conv_batch_groups() {
        // Input [2,1,2] with batches [1,2] and [3,4]; kernel [1,2,1] = (1, 10); 2 batch groups: output channel
        // 0 reads batch 0, channel 1 reads batch 1 → [[1,2],[30,40]].
        let x = tensor::<f64>(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
        let k = tensor::<f64>(&[1, 2, 1], &[1.0, 10.0]);
        let out = run(conv(ncw(), 1, (0, 0), 1, 1, 1, 2), &[x, k], Shape::new(DType::Float64, &[1, 2, 2])).unwrap();
        assert_eq!(out.typed::<f64>(), &[1.0, 2.0, 30.0, 40.0]);
    }

    #[test]
    fn conv_2d_with_transposed_output() {
        // NCHW x = [[1,2,3],[4,5,6]], kernel [[1,0],[0,1]]: out[h,w] = x[h,w] + x[h+1,w+1] → [[6, 8]].
        // Output axes: batch 2, channels 0, spatial (3, 1) → dims [C=1, W=2, B=1, H=1].
        let axes = ConvAxes {
            input_batch: 0,
            input_channels: 1,
            input_spatial: vec![2, 3],
            kernel_input_channels: 0,
            kernel_output_channels: 1,
            kernel_spatial: vec![2, 3],
            output_batch: 2,
            output_channels: 0,
            output_spatial: vec![3, 1],
        };
        let op = Op::ConvGeneral {
            axes,
            strides: vec![],
            padding: vec![],
            input_dilations: vec![],
            kernel_dilations: vec![],
            channel_groups: 0,
            batch_groups: 0,
        };
        let x = tensor::<f32>(&[1, 1, 2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let k = tensor::<f32>(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0]);
        let out = run(op, &[x, k], Shape::new(DType::Float32, &[1, 2, 1, 1])).unwrap();
        assert_eq!(out.typed::<f32>(), &[6.0, 8.0]);
    }

    #[test]
    fn conv_bf16_accumulates_in_f32() {
        // §11: conv of BF16 [256,1,1,1,1] with a ones kernel of width 5 = 260.
        let x: Vec<bf16> = [256.0, 1.0, 1.0, 1.0, 1.0].iter().map(|&v| bf16::from_f32(v)).collect();
        let x = tensor::<bf16>(&[1, 1, 5], &x);
        let k = tensor::<bf16>(&[1, 1, 5], &[bf16::ONE; 5]);
        let out = run(conv(ncw(), 1, (0, 0), 1, 1, 1, 1), &[x, k], Shape::new(DType::BFloat16, &[1, 1, 1])).unwrap();
        assert_eq!(out.typed::<bf16>()[0].to_f32(), 260.0);
    }
}
