//! Algebraic simplification: exact identities that remove or merge nodes.
//!
//! Every rule is exact for every input, IEEE special values included:
//! - `x · 1`, `1 · x`, `x / 1` → `x` (NaN·1 is NaN, −0·1 is −0).
//! - `x + (−0.0)`, `(−0.0) + x`, `x − (+0.0)` → `x` for floats; `x + 0`, `x − 0` for integers.
//!   (`x + (+0.0)` is *not* an identity: −0 + +0 = +0.)
//! - `neg(neg(x))` → `x`; `identity(x)` → `x`; `convert_dtype(x)` to x's own dtype → `x`.
//! - `transpose(transpose(x, p), q)` → `transpose(x, p∘q)`, and a transpose by the identity
//!   permutation → `x`.
//! - `reshape(reshape(x))` → `reshape(x)`; a reshape to x's own dims → `x`.
//! - `broadcast_in_dim(x)` to x's own shape with axes `0..rank` → `x`.
//! - a slice covering every axis with stride 1, a reverse of no axes, a pad of all zeros → `x`.
//!
//! A replacement is only made when the replacing value has exactly the node's result shape.

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{BinaryOp, Op, UnaryOp};
use crate::passes::fold::constant_bytes;
use crate::passes::rewrite::Edits;

/// Little-endian bytes of the value `v` in `dtype` (integers and floats only).
fn scalar_bytes(dtype: DType, v: f64) -> Option<Vec<u8>> {
    Some(match dtype {
        DType::Float32 => (v as f32).to_le_bytes().to_vec(),
        DType::Float64 => v.to_le_bytes().to_vec(),
        DType::Float16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
        DType::BFloat16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        DType::Int8 => (v as i8).to_le_bytes().to_vec(),
        DType::Int16 => (v as i16).to_le_bytes().to_vec(),
        DType::Int32 => (v as i32).to_le_bytes().to_vec(),
        DType::Int64 => (v as i64).to_le_bytes().to_vec(),
        DType::Uint8 => (v as u8).to_le_bytes().to_vec(),
        DType::Uint16 => (v as u16).to_le_bytes().to_vec(),
        DType::Uint32 => (v as u32).to_le_bytes().to_vec(),
        DType::Uint64 => (v as u64).to_le_bytes().to_vec(),
        _ => return None,
    })
}

/// Whether `v` is a constant whose every element has exactly the bytes of `value`.
fn is_splat(m: &Module, v: ValueId, value: f64) -> bool {
    let dtype = m.shape(v).dtype;
    let (Some(data), Some(pat)) = (constant_bytes(m, v), scalar_bytes(dtype, value)) else { return false };
    !pat.is_empty() && data.chunks(pat.len()).all(|c| c == pat.as_slice())
}

fn def_node(m: &Module, v: ValueId) -> Option<NodeId> {
    match m.value(v).def {
        ValueDef::Node { node, .. } => Some(node),
        ValueDef::Param(_) => None,
    }
}

enum Rewrite {
    /// The node's only result is this existing value.
    Value(ValueId),
    /// The node becomes this op applied to these operands (same result shape).
    Node(Box<Op>, Vec<ValueId>),
}

fn rule(m: &Module, n: NodeId) -> Option<Rewrite> {
    let node = m.node(n);
    let ins = &node.inputs;
    let x0 = ins.first().copied();
    let is_float = |v: ValueId| m.shape(v).dtype.is_float();
    match &node.op {
        Op::Binary(BinaryOp::Mul) => {
            if is_splat(m, ins[1], 1.0) {
                return Some(Rewrite::Value(ins[0]));
            }
            if is_splat(m, ins[0], 1.0) {
                return Some(Rewrite::Value(ins[1]));
            }
        }
        Op::Binary(BinaryOp::Div) if is_splat(m, ins[1], 1.0) => return Some(Rewrite::Value(ins[0])),
        Op::Binary(BinaryOp::Add) => {
            let zero = if is_float(ins[0]) { -0.0 } else { 0.0 };
            if is_splat(m, ins[1], zero) {
                return Some(Rewrite::Value(ins[0]));
            }
            if is_splat(m, ins[0], zero) {
                return Some(Rewrite::Value(ins[1]));
            }
        }
        Op::Binary(BinaryOp::Sub) if is_splat(m, ins[1], 0.0) => return Some(Rewrite::Value(ins[0])),
        Op::Unary(UnaryOp::Identity) => return x0.map(Rewrite::Value),
        Op::Unary(UnaryOp::Neg) => {
            let inner = def_node(m, ins[0])?;
            if m.node(inner).op == Op::Unary(UnaryOp::Neg) {
                return Some(Rewrite::Value(m.node(inner).inputs[0]));
            }
        }
        Op::ConvertDType { dtype } if m.shape(ins[0]).dtype == *dtype => return Some(Rewrite::Value(ins[0])),
        Op::Transpose { perm } => {
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return Some(Rewrite::Value(ins[0]));
            }
            let inner = def_node(m, ins[0])?;
            if let Op::Transpose { perm: p1 } = &m.node(inner).op {
                // out[i] = mid[perm[i]] = x[p1[perm[i]]]
                let composed: Vec<usize> = perm.iter().map(|&q| p1[q]).collect();
                let x = m.node(inner).inputs[0];
                if composed.iter().enumerate().all(|(i, &p)| i == p) {
                    return Some(Rewrite::Value(x));
                }
                return Some(Rewrite::Node(Box::new(Op::Transpose { perm: composed }), vec![x]));
            }
        }
        Op::Reshape { dims } => {
            if m.shape(ins[0]).dims == *dims {
                return Some(Rewrite::Value(ins[0]));
            }
            let inner = def_node(m, ins[0])?;
            if let Op::Reshape { .. } = &m.node(inner).op {
                let x = m.node(inner).inputs[0];
                return Some(Rewrite::Node(Box::new(Op::Reshape { dims: dims.clone() }), vec![x]));
            }
        }
        Op::BroadcastInDim { axes, .. } if axes.iter().enumerate().all(|(i, &a)| i == a) => {
            return Some(Rewrite::Value(ins[0]));
        }
        Op::Slice { starts, limits, strides } => {
            let d = &m.shape(ins[0]).dims;
            if starts.iter().all(|&s| s == 0) && limits == d && strides.iter().all(|&s| s == 1) {
                return Some(Rewrite::Value(ins[0]));
            }
        }
        Op::Reverse { axes } if axes.is_empty() => return Some(Rewrite::Value(ins[0])),
        Op::Pad { axes } if axes.iter().all(|a| a.start == 0 && a.end == 0 && a.interior == 0) => {
            return Some(Rewrite::Value(ins[0]));
        }
        _ => {}
    }
    None
}

/// Runs the simplifier to a fixpoint over every function; returns whether anything changed.
pub fn run(m: &mut Module) -> Result<bool> {
    let mut changed = false;
    let mut edits = Edits::new();
    for f in 0..m.functions.len() {
        let body = m.functions[f].body.clone();
        for n in body {
            edits.resolve_inputs(m, n);
            if m.node(n).outputs.len() != 1 {
                continue;
            }
            let out = m.node(n).outputs[0];
            match rule(m, n) {
                Some(Rewrite::Value(v)) if m.shape(v) == m.shape(out) && m.is_visible(v, m.node(n).func) => {
                    edits.replace(out, v);
                    edits.remove(n);
                    changed = true;
                }
                Some(Rewrite::Node(op, inputs)) => {
                    let node = &mut m.nodes[n.index()];
                    node.op = *op;
                    node.inputs = inputs;
                    changed = true;
                }
                _ => {}
            }
        }
    }
    edits.apply(m);
    Ok(changed)
}
