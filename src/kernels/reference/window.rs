//! Reference kernels for the window ops (§4.6): ReduceWindow (Sum/Product/Max/Min with strides, padding, input
//! and window dilations) and SelectAndScatter (Max/Min with XLA's selection rule).
//!
//! ReduceWindow accumulates in the element type's accumulator (f32 for half types, rounded once); padding cells
//! and input-dilation holes hold the reduction's identity. SelectAndScatter scans each window's in-bounds cells
//! in row-major order, keeps the first and replaces the kept cell by the next cell `e` unless `kept ≥ e` (Max) /
//! `kept ≤ e` (Min), so ties pick the first and NaN compares false both ways; padding is never selected and
//! overlapping windows accumulate.

use crate::error::{Error, Result};
use crate::ir::op::{ArithReduce, Op};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

use super::movement::util::{
    Arith, arg, dilated, expect_dims, for_each_index, out_shape, strides, window_count, with_arith_type,
};

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let name = op.op_type().to_string();
    let name = name.as_str();
    let out = out_shape(name, out_shapes, 0)?;
    let x = arg(name, inputs, 0)?;
    if out.dtype != x.shape.dtype {
        return Err(Error::invalid(name, format!("output dtype {} differs from operand {}", out.dtype, x.shape)));
    }
    let t = match op {
        Op::ReduceWindow { kind, window, strides, input_dilations, window_dilations, padding } => {
            let g = Geometry::new(name, &x.shape, window, strides, input_dilations, window_dilations, padding)?;
            expect_dims(name, "output", out, &g.out_dims)?;
            with_arith_type!(x.shape.dtype, name, T => Ok(reduce_window::<T>(*kind, x, out, &g)))?
        }
        Op::SelectAndScatter { kind, window, strides, padding } => {
            let source = arg(name, inputs, 1)?;
            if !matches!(kind, ArithReduce::Max | ArithReduce::Min) {
                return Err(Error::invalid(name, format!("selection {kind:?} not supported (Max or Min)")));
            }
            let g = Geometry::new(name, &x.shape, window, strides, &[], &[], padding)?;
            if source.shape.dtype != x.shape.dtype {
                return Err(Error::invalid(
                    name,
                    format!("source {} dtype differs from operand {}", source.shape, x.shape),
                ));
            }
            expect_dims(name, "source", &source.shape, &g.out_dims)?;
            expect_dims(name, "output", out, &x.shape.udims())?;
            let is_max = *kind == ArithReduce::Max;
            with_arith_type!(x.shape.dtype, name, T => Ok(select_and_scatter::<T>(is_max, x, source, &g)))?
        }
        _ => return Err(Error::invalid(name, "not a window op")),
    };
    Ok(vec![t])
}

/// Per-axis window geometry with defaults applied (window 1, stride = window, dilations 1, padding 0).
pub(crate) struct Geometry {
    pub(crate) in_dims: Vec<usize>,
    pub(crate) window: Vec<usize>,
    pub(crate) stride: Vec<i64>,
    pub(crate) in_dil: Vec<i64>,
    pub(crate) win_dil: Vec<i64>,
    pub(crate) low: Vec<i64>,
    /// Windows per axis (the result's dims).
    pub(crate) out_dims: Vec<usize>,
}

impl Geometry {
    /// The geometry of a window op on operand `x` (`name` for errors); attributes the catalogue
    /// rejects (wrong lengths, strides or dilations below 1, negative padding) are errors.
    pub(crate) fn new(
        name: &str,
        x: &Shape,
        window: &[i64],
        strides: &[i64],
        in_dil: &[i64],
        win_dil: &[i64],
        padding: &[(i64, i64)],
    ) -> Result<Geometry> {
        let rank = x.rank();
        let per_axis = |v: &[i64], default: &[i64], what: &str, min: i64| -> Result<Vec<i64>> {
            match v.len() {
                0 => Ok(default.to_vec()),
                n if n == rank && v.iter().all(|&e| e >= min) => Ok(v.to_vec()),
                _ => Err(Error::invalid(name, format!("{what} {v:?} must have {rank} entries ≥ {min}"))),
            }
        };
        let window = per_axis(window, &vec![1; rank], "window", 0)?;
        let stride = per_axis(strides, &window, "strides", 1)?;
        let in_dil = per_axis(in_dil, &vec![1; rank], "input dilations", 1)?;
        let win_dil = per_axis(win_dil, &vec![1; rank], "window dilations", 1)?;
        if stride.contains(&0) {
            return Err(Error::invalid(name, format!("strides {stride:?} must be ≥ 1")));
        }
        let padding = match padding.len() {
            0 => vec![(0, 0); rank],
            n if n == rank && padding.iter().all(|&(lo, hi)| lo >= 0 && hi >= 0) => padding.to_vec(),
            _ => return Err(Error::invalid(name, format!("padding {padding:?} must have {rank} pairs ≥ 0"))),
        };
        let in_dims = x.udims();
        let out_dims = (0..rank)
            .map(|a| {
                // No overflow: shape inference (run by the verifier before any kernel) rejects
                // attributes unless |lo| + |hi| + the dilated input and the dilated window fit in
                // i64 (`checked_window_count` in src/ir/infer/structured_window.rs).
                let padded = padding[a].0 + padding[a].1 + dilated(in_dims[a] as i64, in_dil[a]);
                window_count(padded, dilated(window[a], win_dil[a]), stride[a]) as usize
            })
            .collect();
        Ok(Geometry {
            in_dims,
            window: window.iter().map(|&w| w as usize).collect(),
            stride,
            in_dil,
            win_dil,
            low: padding.iter().map(|p| p.0).collect(),
            out_dims,
        })
    }

    /// The window cells of axis `a` that land on real operand elements (not padding, not a
    /// dilation hole) for the window at output index `o`: each one's operand index times
    /// `stride` (its part of the flat operand offset), in increasing cell order, written to
    /// `hits`. The walk covers the smaller of the window and the operand axis, so a huge window
    /// over huge padding costs no more than the operand's extent.
    fn axis_hits(&self, a: usize, o: usize, stride: usize, hits: &mut Vec<usize>) {
        hits.clear();
        let (n, w) = (self.in_dims[a] as i64, self.window[a] as i64);
        if n == 0 || w == 0 {
            return;
        }
        let (wd, id) = (self.win_dil[a], self.in_dil[a]);
        // All in i64 without overflow: o·stride ≤ padded − dilated window, the dilated input
        // (n−1)·id and lo are each ≤ padded, and shape inference keeps padded = lo + hi + dilated
        // input ≤ i64::MAX (`checked_window_count` in src/ir/infer/structured_window.rs).
        // Cell k sits at padded position start + k·wd, which is operand element i when
        // start + k·wd − lo = i·id.
        let start = o as i64 * self.stride[a];
        let off = self.low[a] - start; // k·wd = i·id + off
        if w <= n {
            // Cells whose position falls inside the dilated operand: k·wd ∈ [off, (n−1)·id + off].
            let first = if off <= 0 { 0 } else { (off + wd - 1) / wd };
            let last_pos = (n - 1) * id + off;
            if last_pos < 0 {
                return;
            }
            let last = (last_pos / wd).min(w - 1);
            for k in first..=last {
                let rel = k * wd - off;
                if rel % id == 0 {
                    hits.push((rel / id) as usize * stride);
                }
            }
        } else {
            for i in 0..n {
                let kw = i * id + off;
                if kw >= 0 && kw % wd == 0 && kw / wd < w {
                    hits.push(i as usize * stride);
                }
            }
        }
    }

    /// Calls `f(flat operand index)` for every window cell of output index `o` that lands on a
    /// real operand element, in row-major window order (the last axis fastest). `scratch` is
    /// reused across calls (no allocation per output element once warm).
    fn for_each_source(&self, o: &[usize], in_strides: &[usize], scratch: &mut Scratch, mut f: impl FnMut(usize)) {
        let rank = o.len();
        let Scratch { hits, pos } = scratch;
        for a in 0..rank {
            self.axis_hits(a, o[a], in_strides[a], &mut hits[a]);
            if hits[a].is_empty() {
                return;
            }
        }
        // Odometer over the per-axis lists of offsets.
        pos.fill(0);
        loop {
            f((0..rank).map(|a| hits[a][pos[a]]).sum());
            let mut a = rank;
            loop {
                if a == 0 {
                    return;
                }
                a -= 1;
                pos[a] += 1;
                if pos[a] < hits[a].len() {
                    break;
                }
                pos[a] = 0;
            }
        }
    }
}

/// Per-kernel scratch of [`Geometry::for_each_source`]: each axis's offsets and the odometer.
struct Scratch {
    hits: Vec<Vec<usize>>,
    pos: Vec<usize>,
}

impl Scratch {
    fn new(rank: usize) -> Scratch {
        Scratch { hits: vec![Vec::new(); rank], pos: vec![0; rank] }
    }
}

/// A binary reduction on accumulators.
type Combine<A> = fn(A, A) -> A;

fn reduce_window<T: Arith>(kind: ArithReduce, x: &Tensor, out: &Shape, g: &Geometry) -> Tensor {
    let data = x.typed::<T>();
    let st = strides(&g.in_dims);
    let (init, combine): (T::Acc, Combine<T::Acc>) = match kind {
        ArithReduce::Sum => (T::zero(), T::add),
        ArithReduce::Product => (T::one(), T::mul),
        ArithReduce::Max => (T::lowest(), T::max),
        ArithReduce::Min => (T::highest(), T::min),
    };
    let mut scratch = Scratch::new(g.in_dims.len());
    let mut vals = Vec::with_capacity(out.num_elements());
    for_each_index(&g.out_dims, |o| {
        let mut acc = init;
        g.for_each_source(o, &st, &mut scratch, |i| acc = combine(acc, data[i].to_acc()));
        vals.push(T::from_acc(acc));
    });
    let mut t = Tensor::zeros(out.clone());
    t.typed_mut::<T>().copy_from_slice(&vals);
    t
}

fn select_and_scatter<T: Arith>(is_max: bool, x: &Tensor, source: &Tensor, g: &Geometry) -> Tensor {
    let data = x.typed::<T>();
    let src = source.typed::<T>();
    let st = strides(&g.in_dims);
    let mut out = Tensor::zeros(x.shape.clone());
    let acc = out.typed_mut::<T>();
    let mut scratch = Scratch::new(g.in_dims.len());
    let mut s = 0;
    for_each_index(&g.out_dims, |o| {
        let mut kept: Option<usize> = None;
        g.for_each_source(o, &st, &mut scratch, |i| {
            kept = match kept {
                Some(k) if (is_max && T::ge(data[k], data[i])) || (!is_max && T::le(data[k], data[i])) => Some(k),
                _ => Some(i),
            };
        });
        if let Some(k) = kept {
            acc[k] = T::from_acc(T::add(acc[k].to_acc(), src[s].to_acc()));
        }
        s += 1;
    });
    out
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::super::movement::util::tensor;
    use super::*;
    use crate::ir::dtype::DType;

    fn rw(kind: ArithReduce, w: i64, s: i64, in_dil: i64, w_dil: i64, pad: (i64, i64)) -> Op {
        Op::ReduceWindow {
            kind,
            window: vec![w],
            strides: vec![s],
            input_dilations: vec![in_dil],
            window_dilations: vec![w_dil],
            padding: vec![pad],
        }
    }

    fn run(op: Op, inputs: &[Tensor], out: Shape) -> Result<Tensor> {
        eval(&op, inputs, &[out]).map(|mut v| v.remove(0))
    }

    fn f32s(v: &[f32]) -> Tensor {
        tensor::<f32>(&[v.len() as i64], v)
    }

    #[test]
    fn reduce_window_section_11_examples() {
        let x = f32s(&[1.0, 2.0, 3.0, 4.0]);
        let r =
            run(rw(ArithReduce::Sum, 2, 1, 1, 1, (0, 0)), std::slice::from_ref(&x), Shape::new(DType::Float32, &[3]))
                .unwrap();
        assert_eq!(r.typed::<f32>(), &[3.0, 5.0, 7.0]);
        let r = run(
            rw(ArithReduce::Product, 2, 2, 1, 1, (1, 1)),
            std::slice::from_ref(&x),
            Shape::new(DType::Float32, &[3]),
        )
        .unwrap();
        assert_eq!(r.typed::<f32>(), &[1.0, 6.0, 4.0]);
        let y = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        let r =
            run(rw(ArithReduce::Max, 3, 1, 1, 2, (0, 0)), std::slice::from_ref(&y), Shape::new(DType::Float32, &[3]))
                .unwrap();
        assert_eq!(r.typed::<f32>(), &[5.0, 6.0, 7.0]);
        let r = run(rw(ArithReduce::Max, 3, 1, 2, 1, (1, 1)), &[y], Shape::new(DType::Float32, &[13])).unwrap();
        assert_eq!(r.typed::<f32>(), &[1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0]);
        let z = f32s(&[-1.0, -2.0, -3.0, -4.0]);
        let r = run(rw(ArithReduce::Max, 3, 1, 2, 1, (0, 0)), &[z], Shape::new(DType::Float32, &[5])).unwrap();
        assert_eq!(r.typed::<f32>(), &[-1.0, -2.0, -2.0, -3.0, -3.0]);
        // Window 3 on a length-2 axis → size 0.
        let r = run(rw(ArithReduce::Sum, 3, 1, 1, 1, (0, 0)), &[f32s(&[1.0, 2.0])], Shape::new(DType::Float32, &[0]));
        assert!(r.unwrap().is_empty());
    }

    #[test]
    fn reduce_window_defaults_2d_min_int() {
        // Empty strides default to the window: 2×2 windows over a 4×4 iota, Min → top-left corners.
        let x = tensor::<i32>(&[4, 4], &(0..16).collect::<Vec<_>>());
        let op = Op::ReduceWindow {
            kind: ArithReduce::Min,
            window: vec![2, 2],
            strides: vec![],
            input_dilations: vec![],
            window_dilations: vec![],
            padding: vec![],
        };
        let r = run(op, &[x], Shape::new(DType::Int32, &[2, 2])).unwrap();
        assert_eq!(r.typed::<i32>(), &[0, 2, 8, 10]);
    }

    #[test]
    fn reduce_window_bf16_and_scalar() {
        // f32 accumulation, one rounding: BF16 [256,1,1,1,1] window 5 → 260 (XLA gives 256, see §9).
        let x: Vec<bf16> = [256.0, 1.0, 1.0, 1.0, 1.0].iter().map(|&v| bf16::from_f32(v)).collect();
        let x = tensor::<bf16>(&[5], &x);
        let r = run(rw(ArithReduce::Sum, 5, 1, 1, 1, (0, 0)), &[x], Shape::new(DType::BFloat16, &[1])).unwrap();
        assert_eq!(r.typed::<bf16>()[0].to_f32(), 260.0);
        let s = tensor::<f64>(&[], &[2.5]);
        let op = Op::ReduceWindow {
            kind: ArithReduce::Sum,
            window: vec![],
            strides: vec![],
            input_dilations: vec![],
            window_dilations: vec![],
            padding: vec![],
        };
        assert_eq!(run(op, &[s], Shape::scalar(DType::Float64)).unwrap().typed::<f64>(), &[2.5]);
    }

    #[test]
    fn reduce_window_max_nan_and_rejects_negative_padding() {
        let x = f32s(&[1.0, f32::NAN, 3.0]);
        let r =
            run(rw(ArithReduce::Max, 2, 1, 1, 1, (0, 0)), std::slice::from_ref(&x), Shape::new(DType::Float32, &[2]))
                .unwrap();
        assert!(r.typed::<f32>().iter().all(|v| v.is_nan()));
        assert!(run(rw(ArithReduce::Max, 2, 1, 1, 1, (-1, 0)), &[x], Shape::new(DType::Float32, &[1])).is_err());
    }

    fn sas(kind: ArithReduce, w: &[i64], s: &[i64], pad: &[(i64, i64)]) -> Op {
        Op::SelectAndScatter { kind, window: w.to_vec(), strides: s.to_vec(), padding: pad.to_vec() }
    }

    fn sas1(kind: ArithReduce, x: &[f32], src: &[f32], w: i64, s: i64, pad: (i64, i64)) -> Vec<f32> {
        let op = sas(kind, &[w], &[s], &[pad]);
        let r = run(op, &[f32s(x), f32s(src)], Shape::new(DType::Float32, &[x.len() as i64])).unwrap();
        r.typed::<f32>().to_vec()
    }

    #[test]
    fn select_and_scatter_section_11_examples() {
        use ArithReduce::{Max, Min};
        assert_eq!(sas1(Max, &[1.0, 5.0, 3.0, 6.0, 2.0], &[10.0, 20.0], 3, 2, (0, 0)), vec![0.0, 10.0, 0.0, 20.0, 0.0]);
        // Ties pick the first.
        assert_eq!(sas1(Max, &[5.0, 5.0, 1.0, 5.0], &[10.0, 20.0, 30.0], 2, 1, (0, 0)), vec![10.0, 20.0, 0.0, 30.0]);
        // NaN compares false both ways.
        let nan = f32::NAN;
        assert_eq!(sas1(Max, &[1.0, nan, 3.0], &[7.0], 3, 1, (0, 0)), vec![0.0, 0.0, 7.0]);
        assert_eq!(sas1(Max, &[1.0, 3.0, nan], &[7.0], 3, 1, (0, 0)), vec![0.0, 0.0, 7.0]);
        assert_eq!(sas1(Max, &[nan, nan, 3.0], &[7.0], 3, 1, (0, 0)), vec![0.0, 0.0, 7.0]);
        // Padding is never selected, even where every real cell is smaller than the (absent) pad value.
        assert_eq!(sas1(Max, &[-5.0, -6.0], &[1.0, 2.0], 2, 1, (1, 0)), vec![3.0, 0.0]);
        assert_eq!(sas1(Min, &[3.0, 1.0, 1.0, 2.0], &[10.0, 20.0], 2, 2, (0, 0)), vec![0.0, 10.0, 20.0, 0.0]);
        assert_eq!(sas1(Min, &[1.0, 5.0, 3.0, 6.0, 2.0], &[10.0, 20.0], 3, 2, (0, 0)), vec![10.0, 0.0, 0.0, 0.0, 20.0]);
        // Overlapping windows accumulate: [1,3,2] windows of 2, stride 1 both pick 3.
        assert_eq!(sas1(Max, &[1.0, 3.0, 2.0], &[5.0, 7.0], 2, 1, (0, 0)), vec![0.0, 12.0, 0.0]);
    }

    #[test]
    fn select_and_scatter_empty_source() {
        // Window 3 on a length-2 operand: no window, the output is all zeros.
        let r = sas1(ArithReduce::Max, &[1.0, 2.0], &[], 3, 1, (0, 0));
        assert_eq!(r, vec![0.0, 0.0]);
    }

    #[test]
    fn select_and_scatter_2d_and_errors() {
        // [[1,2],[3,4]] window 2×2 stride 1 → one window picks 4.
        let x = tensor::<i64>(&[2, 2], &[1, 2, 3, 4]);
        let src = tensor::<i64>(&[1, 1], &[10]);
        let r = run(sas(ArithReduce::Max, &[2, 2], &[1, 1], &[]), &[x.clone(), src], Shape::new(DType::Int64, &[2, 2]));
        assert_eq!(r.unwrap().typed::<i64>(), &[0, 0, 0, 10]);
        let bad_src = tensor::<i64>(&[2, 2], &[0; 4]);
        let r = run(
            sas(ArithReduce::Max, &[2, 2], &[1, 1], &[]),
            &[x.clone(), bad_src.clone()],
            Shape::new(DType::Int64, &[2, 2]),
        );
        assert!(r.is_err());
        let r = run(sas(ArithReduce::Sum, &[1, 1], &[1, 1], &[]), &[x, bad_src], Shape::new(DType::Int64, &[2, 2]));
        assert!(r.is_err());
    }
}
