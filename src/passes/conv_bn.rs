//! Batch-norm folding: a convolution with a constant filter followed by a per-output-channel
//! affine map with constant parameters (a bias add, the `(x − mean) · k + beta` that ONNX
//! `BatchNormalization` imports as, or a `BatchNormInference` node) becomes one convolution with a
//! rescaled constant filter and one constant bias add.
//!
//! The chain `conv → (+ c | − c | · c | ÷ c | BatchNormInference)*`, every link read only by the
//! next, composes into `conv · s + t` per output channel (f64); the filter's output-channel slices
//! are multiplied by `s` and the bias is `t`, each rounded to f32 once. Chains that are a single
//! bias add are left alone (nothing to fold: that is the form this pass produces). The result is
//! plain catalogue ops (`ConvGeneral`, `Add` of a `[1, C, 1, 1]`-style constant), which the jit
//! runs as one convolution step with a bias epilogue. Rounding differs from the unfolded chain's
//! (one rounding instead of one per op), as in every BN-folding converter.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{BinaryOp, ConstData, Op};
use crate::ir::shape::Shape;
use crate::memory::f32s;
use crate::passes::rewrite::Edits;

/// The data of `v` as f32 (a BF16/F16 constant widened exactly) when it is a constant, or a
/// `BroadcastInDim` of one (then also that node), whose axes other than `keep` (an axis of `dims`) have size 1 once broadcast to `dims`
/// (a scalar, or a constant of `dims`' rank; through the broadcast's axes otherwise).
pub(crate) fn constant_along(
    m: &Module,
    v: ValueId,
    dims: &[i64],
    keep: Option<usize>,
) -> Option<(Vec<f32>, Option<NodeId>)> {
    // F32 data, or BF16/F16 widened (exactly) to f32.
    let floats = |v: ValueId| -> Option<Vec<f32>> {
        let s = m.shape(v);
        let bytes = m.constant_data(v)?;
        if s.is_dynamic() || Some(bytes.len()) != s.byte_size() {
            return None;
        }
        crate::kernels::half::f32_values(bytes, s.dtype).map(std::borrow::Cow::into_owned)
    };
    let ok = |axis: usize, d: i64| d == 1 || (Some(axis) == keep && dims.get(axis) == Some(&d));
    if let Some(data) = floats(v) {
        // Binary ops broadcast size-1 axes of operands of equal rank, and scalars.
        let d = &m.shape(v).dims;
        let fits = d.is_empty() || (d.len() == dims.len() && d.iter().enumerate().all(|(i, &di)| ok(i, di)));
        return fits.then_some((data, None));
    }
    let ValueDef::Node { node, output: 0 } = m.value(v).def else { return None };
    let Op::BroadcastInDim { axes, .. } = &m.node(node).op else { return None };
    let src = *m.node(node).inputs.first()?;
    let data = floats(src)?;
    let d = &m.shape(src).dims;
    let fits = d.len() == axes.len() && d.iter().zip(axes).all(|(&di, &a)| a < dims.len() && ok(a, di));
    fits.then_some((data, Some(node)))
}

/// `v` as one f64 per channel (`c` channels on axis `axis` of `dims`; a single value repeats).
fn per_channel(m: &Module, v: ValueId, dims: &[i64], axis: usize, c: usize) -> Option<Vec<f64>> {
    let (data, _) = constant_along(m, v, dims, Some(axis))?;
    match data.len() {
        n if n == c => Some(data.iter().map(|&x| f64::from(x)).collect()),
        1 => Some(vec![f64::from(data[0]); c]),
        _ => None,
    }
}

/// A foldable chain: the conv node, the last value of the chain, and `conv · s + t`.
struct Chain {
    conv: NodeId,
    last: ValueId,
    scale: Vec<f64>,
    shift: Vec<f64>,
}

/// Follows the affine chain after conv node `n` (module docs).
fn chain(m: &Module, n: NodeId, readers: &HashMap<ValueId, Vec<NodeId>>, returned: &HashSet<ValueId>) -> Option<Chain> {
    let node = m.node(n);
    let Op::ConvGeneral { axes, .. } = &node.op else { return None };
    let (&[_, w], &[y]) = (&node.inputs[..], &node.outputs[..]) else { return None };
    let dims = m.shape(y).dims.clone();
    if m.shape(y).dtype != DType::Float32 || m.shape(y).is_dynamic() || m.constant_data(w).is_none() {
        return None;
    }
    let axis = axes.output_channels;
    let c = usize::try_from(*dims.get(axis)?).ok()?;
    let (mut s, mut t) = (vec![1f64; c], vec![0f64; c]);
    let (mut cur, mut links, mut scaled) = (y, 0usize, false);
    while let [u] = readers.get(&cur).map_or(&[][..], |r| &r[..]) {
        if returned.contains(&cur) || m.node(*u).outputs.len() != 1 || m.shape(m.node(*u).outputs[0]).dims != dims {
            break;
        }
        let un = m.node(*u);
        let other = |i: usize| un.inputs.get(i).copied();
        let step = match (&un.op, un.inputs.iter().position(|&v| v == cur)) {
            (Op::Binary(op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div)), Some(i))
                if un.inputs.len() == 2 && un.inputs[0] != un.inputs[1] =>
            {
                let Some(k) = per_channel(m, other(1 - i)?, &dims, axis, c) else { break };
                match (op, i) {
                    (BinaryOp::Add, _) => t.iter_mut().zip(&k).for_each(|(t, k)| *t += k),
                    (BinaryOp::Sub, 0) => t.iter_mut().zip(&k).for_each(|(t, k)| *t -= k),
                    (BinaryOp::Mul, _) => {
                        s.iter_mut().zip(&k).for_each(|(s, k)| *s *= k);
                        t.iter_mut().zip(&k).for_each(|(t, k)| *t *= k);
                    }
                    (BinaryOp::Div, 0) => {
                        s.iter_mut().zip(&k).for_each(|(s, k)| *s /= k);
                        t.iter_mut().zip(&k).for_each(|(t, k)| *t /= k);
                    }
                    _ => break,
                }
                !matches!(op, BinaryOp::Add | BinaryOp::Sub)
            }
            (Op::BatchNormInference { epsilon, feature_axis }, Some(0)) if *feature_axis == axis => {
                let p = (1..5)
                    .map(|i| {
                        let v = other(i)?;
                        (m.shape(v).dims == [c as i64]).then(|| per_channel(m, v, &[c as i64], 0, c)).flatten()
                    })
                    .collect::<Option<Vec<_>>>();
                let Some(p) = p else { break };
                for ch in 0..c {
                    // (x − mean) · scale / √(var + eps) + offset
                    let k = p[0][ch] / (p[3][ch] + f64::from(*epsilon)).sqrt();
                    (s[ch], t[ch]) = (s[ch] * k, (t[ch] - p[2][ch]) * k + p[1][ch]);
                }
                true
            }
            _ => break,
        };
        scaled |= step;
        links += 1;
        cur = un.outputs[0];
    }
    let finite = s.iter().chain(&t).all(|x| x.is_finite());
    (finite && (scaled || links > 1)).then_some(Chain { conv: n, last: cur, scale: s, shift: t })
}

/// The filter of `ch`'s conv scaled per output channel, rounded once (None: not finite in f32).
fn scaled_filter(m: &Module, ch: &Chain) -> Option<Vec<u8>> {
    let node = m.node(ch.conv);
    let Op::ConvGeneral { axes, .. } = &node.op else { return None };
    let w = node.inputs[1];
    let wd = m.shape(w).udims();
    let bytes = m.constant_data(w)?;
    if m.shape(w).dtype != DType::Float32 || bytes.len() != m.shape(w).num_elements() * 4 {
        return None;
    }
    let data = f32s(bytes);
    // Element strides of the output-channel axis: index / inner % size.
    let o = axes.kernel_output_channels;
    let inner: usize = wd.get(o + 1..)?.iter().product();
    let size = *wd.get(o)?;
    if size != ch.scale.len() || inner == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() * 4);
    for (i, &x) in data.iter().enumerate() {
        let v = (f64::from(x) * ch.scale[(i / inner) % size]) as f32;
        if !v.is_finite() && x.is_finite() {
            return None;
        }
        out.extend_from_slice(&v.to_le_bytes());
    }
    Some(out)
}

/// Folds every chain of every function; returns whether anything changed.
pub fn run(m: &mut Module) -> Result<bool> {
    let mut readers: HashMap<ValueId, Vec<NodeId>> = HashMap::new();
    let mut returned = HashSet::new();
    for fd in &m.functions {
        returned.extend(fd.outputs.iter().flatten().copied());
        for &n in &fd.body {
            // One entry per read: a node reading a value twice is no chain link.
            for &v in &m.node(n).inputs {
                readers.entry(v).or_default().push(n);
            }
        }
    }
    let mut edits = Edits::new();
    let mut changed = false;
    for f in 0..m.functions.len() {
        let func = FuncId(f as u32);
        let chains: Vec<Chain> = m.functions[f].body.iter().filter_map(|&n| chain(m, n, &readers, &returned)).collect();
        // The folded nodes go right after the chain's last node (every operand is defined there).
        let mut at_last: HashMap<ValueId, (Chain, Vec<u8>)> = HashMap::new();
        for ch in chains {
            if let Some(w) = scaled_filter(m, &ch) {
                at_last.insert(ch.last, (ch, w));
            }
        }
        if at_last.is_empty() {
            continue;
        }
        let old_body = std::mem::take(&mut m.functions[f].body);
        for &n in &old_body {
            m.functions[f].body.push(n);
            let Some((ch, w)) = m.node(n).outputs.first().and_then(|v| at_last.remove(v)) else { continue };
            let conv = m.node(ch.conv).clone();
            let Op::ConvGeneral { axes, .. } = &conv.op else { continue };
            let y = conv.outputs[0];
            let ys = m.shape(y).clone();
            let wc =
                m.add_node(func, Op::Constant(ConstData(Arc::new(w))), vec![], vec![m.shape(conv.inputs[1]).clone()]);
            let wv = m.node(wc).outputs[0];
            let cv = m.add_node(func, conv.op.clone(), vec![conv.inputs[0], wv], vec![ys.clone()]);
            let mut bdims = vec![1i64; ys.rank()];
            bdims[axes.output_channels] = ch.shift.len() as i64;
            let bias: Vec<u8> = ch.shift.iter().flat_map(|&t| (t as f32).to_le_bytes()).collect();
            let bc = m.add_node(
                func,
                Op::Constant(ConstData(Arc::new(bias))),
                vec![],
                vec![Shape::new(DType::Float32, &bdims)],
            );
            let (yv, bv) = (m.node(cv).outputs[0], m.node(bc).outputs[0]);
            // `add_node` appends each new node to the body being rebuilt: right after `n`.
            let add = m.add_node(func, Op::Binary(BinaryOp::Add), vec![yv, bv], vec![m.shape(ch.last).clone()]);
            edits.replace(ch.last, m.node(add).outputs[0]);
            changed = true;
        }
    }
    edits.apply(m);
    Ok(changed)
}
