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
//! - `logical_and(all-true constant, x)` (either order) → `x`, or `broadcast_in_dim(x)` to the
//!   result shape when the constant widens it (a Bool mask combined with an all-true one).
//! - a `gather` whose constant start indices enumerate the leading operand axes in row-major
//!   order, each index vector taking the whole of the remaining axes, with the batch axes before
//!   the offset axes → `reshape(x)` (the ONNX exporters' "flatten then gather every row" mask).
//!
//! A replacement is only made when the replacing value has exactly the node's result shape.

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{BinaryOp, Op, UnaryOp};
use crate::passes::egraph::analysis::values;
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

/// Whether `v` is a Bool constant with every element true.
fn is_all_true(m: &Module, v: ValueId) -> bool {
    m.shape(v).dtype == DType::Bool && constant_bytes(m, v).is_some_and(|d| !d.is_empty() && d.iter().all(|&b| b != 0))
}

/// `logical_and(t, x)` with `t` all true: `x` itself when it has the result's shape, else a
/// broadcast of `x` (same rank, each dim 1 or the result's) to the result's shape.
fn and_all_true(m: &Module, n: NodeId) -> Option<Rewrite> {
    let node = m.node(n);
    let out = m.shape(node.outputs[0]);
    let ins = &node.inputs;
    for (t, x) in [(ins[0], ins[1]), (ins[1], ins[0])] {
        if !is_all_true(m, t) {
            continue;
        }
        let xs = m.shape(x);
        if xs == out {
            return Some(Rewrite::Value(x));
        }
        let widens = xs.rank() == out.rank()
            && !xs.is_dynamic()
            && !out.is_dynamic()
            && xs.dims.iter().zip(&out.dims).all(|(&a, &b)| a == 1 || a == b);
        if widens {
            let op = Op::BroadcastInDim { shape: out.clone(), axes: (0..out.rank()).collect() };
            return Some(Rewrite::Node(Box::new(op), vec![x]));
        }
    }
    None
}

/// Largest index tensor (in elements) decoded to look for an enumeration.
const MAX_GATHER_INDICES: usize = 1 << 20;

/// A `gather` that reads the operand in row-major order, as a `reshape` (see the module doc):
/// the index vector (trailing or implicit, k components) addresses operand axes `0..k` in
/// order with slice size 1 there and the whole axis elsewhere, the offset axes are the last
/// output axes, and the constant indices are the row-major enumeration of the first k dims (so
/// none is clamped).
fn gather_enumeration(m: &Module, n: NodeId) -> Option<Rewrite> {
    let node = m.node(n);
    let Op::Gather {
        index_vector_axis, offset_output_axes, collapsed_slice_axes, start_index_map, slice_sizes, ..
    } = &node.op
    else {
        return None;
    };
    let (xs, is, out) = (m.shape(node.inputs[0]), m.shape(node.inputs[1]), m.shape(node.outputs[0]));
    if xs.is_dynamic() || is.is_dynamic() || out.is_dynamic() || !is.dtype.is_int() {
        return None;
    }
    let (r, q) = (xs.rank(), is.rank());
    let k = match *index_vector_axis {
        a if a == q => 1,
        a if a + 1 == q => is.dims[a] as usize,
        _ => return None,
    };
    if k == 0 || k > r || start_index_map.iter().copied().ne(0..k) || slice_sizes.len() != r {
        return None;
    }
    if !(0..r).all(|a| slice_sizes[a] == if a < k { 1 } else { xs.dims[a] }) {
        return None;
    }
    if collapsed_slice_axes.iter().any(|&a| a >= k)
        || offset_output_axes.iter().copied().ne(out.rank() - offset_output_axes.len()..out.rank())
    {
        return None;
    }
    let lead: Vec<usize> = xs.dims[..k].iter().map(|&d| d as usize).collect();
    let count: usize = lead.iter().product();
    if is.size() != Some(count * k) || count * k > MAX_GATHER_INDICES || out.size() != xs.size() {
        return None;
    }
    let Op::Constant(data) = &m.node(def_node(m, node.inputs[1])?).op else { return None };
    let idx = values(is, data)?;
    // Index vector number e must be the multi-index of e over `lead`, row-major.
    let enumerates = (0..count).all(|e| {
        let mut rest = e;
        (0..k).rev().all(|c| {
            let want = rest % lead[c];
            rest /= lead[c];
            idx[e * k + c] == want as f64
        })
    });
    enumerates.then(|| Rewrite::Node(Box::new(Op::Reshape { dims: out.dims.clone() }), vec![node.inputs[0]]))
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
        Op::Binary(BinaryOp::LogicalAnd) => return and_all_true(m, n),
        Op::Gather { .. } => return gather_enumeration(m, n),
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
