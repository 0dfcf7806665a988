//! Constant folding: a node whose operands are all constants is evaluated at compile time with
//! the reference kernels and replaced by constants, when its results are small.
//!
//! Folding never materialises data the graph only implies: a `broadcast_in_dim` of a constant
//! (a bias, a mask, a scalar) is left as it is unless its result is tiny, because the fusion
//! patterns (Dense + bias, scaled softmax, …) and the kernels consume it in its compact form.
//! Consumers of such a broadcast still fold — the broadcast is evaluated on the fly as their
//! operand — when their own result is no larger than their operands' real data.
//!
//! Nor does it copy constant weights into one: a `Concatenate` of constants read only as the
//! weights of FusedDense layers (the merged Q/K/V projections, `egraph::qkv`) stays, since the
//! jit packs each constant straight into the product's panels.

use std::sync::Arc;

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{ConstData, Op};
use crate::ir::shape::Shape;
use crate::kernels::reference;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;
use crate::passes::rewrite::Edits;

/// Results with more elements than this are not folded (they would bloat the module).
pub const FOLD_LIMIT_ELEMENTS: usize = 1 << 16;

/// Results up to this many elements fold whatever their operands' size (a few KiB at most).
const SMALL_RESULT_ELEMENTS: usize = 1024;

/// A result folds only if it has at most this many times the elements of its operands' data
/// (for an operand that is a broadcast of a constant, the constant's own elements).
const MAX_GROWTH: usize = 2;

/// The data of `v` if it is defined by a Constant node.
pub fn constant_bytes(m: &Module, v: ValueId) -> Option<&[u8]> {
    m.constant_data(v).map(|d| d.as_slice())
}

/// Whether folding may evaluate `op` (pure, no callees, not a shape op left to the backends).
pub(crate) fn foldable(op: &Op) -> bool {
    !matches!(
        op,
        Op::Constant(_)
            | Op::Call { .. }
            | Op::Sort { .. }
            | Op::While { .. }
            | Op::If { .. }
            | Op::OptimizationBarrier
            | Op::SchedulingBarrier
            | Op::AllReduce { .. }
            | Op::DynamicShape
            | Op::DynamicDimensionSize { .. }
            | Op::DynamicReshape { .. }
    )
}

/// Runs constant folding; returns whether anything was folded. Ops whose reference kernel
/// fails (e.g. not implemented) are left alone: the error, if any, surfaces at run time.
pub fn run(m: &mut Module) -> Result<bool> {
    let mut changed = false;
    // Replacements are applied in one sweep at the end and each body is rebuilt in one pass, so
    // folding a long chain of constant ops stays linear.
    let mut edits = Edits::new();
    let weights_only = dense_weights_only(m);
    for f in 0..m.functions.len() {
        let func = FuncId(f as u32);
        let old_body = std::mem::take(&mut m.functions[f].body);
        for &n in &old_body {
            edits.resolve_inputs(m, n);
            let kept = matches!(m.node(n).op, Op::Concatenate { .. })
                && m.node(n).outputs.first().is_some_and(|v| weights_only[v.index()]);
            match if kept { None } else { fold_node(m, n) } {
                Some(results) => {
                    let node = m.node(n).clone();
                    // The constants take the folded node's place.
                    for ((out, t), shape) in node.outputs.iter().zip(results).zip(out_shapes(m, &node.outputs)) {
                        let c = m.add_node(
                            func,
                            Op::Constant(ConstData(Arc::new(t.bytes().to_vec()))),
                            vec![],
                            vec![shape],
                        );
                        let new_v = m.node(c).outputs[0];
                        edits.replace(*out, new_v);
                    }
                    changed = true;
                }
                None => m.functions[f].body.push(n),
            }
        }
    }
    edits.apply(m);
    Ok(changed)
}

/// For every value: whether it is read, and only as the weights (operand 1) of FusedDense
/// nodes of float dtypes the jit packs (f32, bf16, f16).
fn dense_weights_only(m: &Module) -> Vec<bool> {
    let mut weight = vec![false; m.values.len()];
    let mut other = vec![false; m.values.len()];
    for f in &m.functions {
        for &v in f.outputs.iter().flatten() {
            other[v.index()] = true;
        }
        for &n in &f.body {
            let node = m.node(n);
            for (i, &v) in node.inputs.iter().enumerate() {
                let packable = matches!(m.shape(v).dtype, DType::Float32 | DType::BFloat16 | DType::Float16);
                if i == 1 && packable && matches!(node.op, Op::FusedDense { .. }) {
                    weight[v.index()] = true;
                } else {
                    other[v.index()] = true;
                }
            }
        }
    }
    weight.iter().zip(&other).map(|(&w, &o)| w && !o).collect()
}

fn out_shapes(m: &Module, outputs: &[ValueId]) -> Vec<Shape> {
    outputs.iter().map(|&o| m.shape(o).clone()).collect()
}

/// The results of node `n` evaluated at compile time, when it can be folded.
fn fold_node(m: &Module, n: NodeId) -> Option<Vec<Tensor>> {
    let node = m.node(n);
    if !foldable(&node.op) || node.inputs.is_empty() {
        return None;
    }
    let out_shapes = out_shapes(m, &node.outputs);
    let mut out_elems = 0usize;
    for s in &out_shapes {
        out_elems = out_elems.saturating_add(s.size().filter(|&n| n <= FOLD_LIMIT_ELEMENTS)?);
    }
    // Every operand must be known, and the growth rule hold, before any operand's data is
    // read: a Gather from a weight table by a parameter must not touch the table.
    let known = node.inputs.iter().map(|&i| known_operand(m, i)).collect::<Option<Vec<_>>>()?;
    let mut data_elems = 0usize;
    for &(src, _) in &known {
        data_elems = data_elems.saturating_add(m.shape(src).size()?);
    }
    if out_elems > SMALL_RESULT_ELEMENTS && out_elems > data_elems.saturating_mul(MAX_GROWTH) {
        return None;
    }
    let inputs = node.inputs.iter().zip(&known).map(|(&v, &k)| operand_value(m, v, k)).collect::<Option<Vec<_>>>()?;
    reference::eval(&node.op, &inputs, &out_shapes).ok()
}

/// Where the data of operand `v` comes from when it is known at compile time: the constant
/// `src`, directly or through the `broadcast_in_dim` node `b` (left in the graph by
/// [`fold_node`]'s growth rule and evaluated for this use only). Reads nothing.
fn known_operand(m: &Module, v: ValueId) -> Option<(ValueId, Option<NodeId>)> {
    if m.constant_data(v).is_some() {
        return Some((v, None));
    }
    let ValueDef::Node { node: b, .. } = m.value(v).def else { return None };
    let node = m.node(b);
    if !matches!(node.op, Op::BroadcastInDim { .. }) || node.inputs.len() != 1 {
        return None;
    }
    let src = node.inputs[0];
    m.constant_data(src)?;
    if m.shape(v).size()? > FOLD_LIMIT_ELEMENTS {
        return None;
    }
    Some((src, Some(b)))
}

/// The value of operand `v`, known as `(src, b)` ([`known_operand`]): a view of the constant's
/// bytes (no copy), or the broadcast of it evaluated for this use.
fn operand_value(m: &Module, v: ValueId, (src, b): (ValueId, Option<NodeId>)) -> Option<Tensor> {
    let data = Arc::new(AlignedBytes::from_shared(m.constant_data(src)?));
    let t = Tensor { shape: m.shape(src).clone(), data };
    match b {
        None => Some(t),
        Some(b) => {
            let shape = m.shape(v).clone();
            reference::eval(&m.node(b).op, &[t], std::slice::from_ref(&shape)).ok()?.pop()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::text::parse_module;

    /// A bias broadcast to a large shape stays a broadcast; a weight scaled by a broadcast
    /// scalar (result as large as the weight) still folds, to the value computed by hand.
    #[test]
    fn broadcasts_stay_compact_but_their_consumers_fold() {
        let ones = vec!["1.0"; 1600].join(", ");
        let twos = vec!["2.0"; 40].join(", ");
        let text = format!(
            "module @m\n\nfunc @main(%0 \"x\": f32[40,40]) {{\n  \
             %1 = constant [{ones}] : f32[40,40]\n  \
             %2 = constant 0.5 : f32[]\n  \
             %3 = broadcast_in_dim %2, shape=f32[40,40], axes=[] : f32[40,40]\n  \
             %4 = mul %1, %3 : f32[40,40]\n  \
             %5 = constant [{twos}] : f32[40]\n  \
             %6 = broadcast_in_dim %5, shape=f32[40,40], axes=[1] : f32[40,40]\n  \
             %7 = add %0, %6 : f32[40,40]\n  \
             %8 = mul %7, %4 : f32[40,40]\n  \
             return %8\n}}\n"
        );
        let mut m = parse_module(&text).unwrap();
        assert!(run(&mut m).unwrap());
        crate::passes::dce::run(&mut m).unwrap();
        let body: Vec<_> = m.functions[0].body.iter().map(|&n| m.node(n).op.clone()).collect();
        let broadcasts = body.iter().filter(|op| matches!(op, Op::BroadcastInDim { .. })).count();
        assert_eq!(broadcasts, 1, "the bias broadcast stays, the scalar one is gone: {body:?}");
        // The folded weight: 1.0 * 0.5 in every one of its 1600 elements.
        let folded: Vec<&ConstData> = body
            .iter()
            .filter_map(|op| match op {
                Op::Constant(c) if c.0.len() == 1600 * 4 => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(folded.len(), 1);
        assert!(folded[0].0.chunks(4).all(|b| f32::from_le_bytes(b.try_into().unwrap()) == 0.5));
        // The only other constant is the bias itself, [40], not a materialised [40, 40].
        let sizes: Vec<usize> =
            body.iter().filter_map(|op| if let Op::Constant(c) = op { Some(c.0.len()) } else { None }).collect();
        assert_eq!(sizes.len(), 2, "{sizes:?}");
        assert!(sizes.contains(&(40 * 4)), "{sizes:?}");
    }

    /// A concatenation of constant f32 weights read only by a FusedDense stays (the jit packs
    /// each part); the same concatenation read by anything else folds, to the bytes in order.
    #[test]
    fn weight_concatenations_stay_for_the_packer() {
        let text = |ret: &str| {
            format!(
                "module @m\n\nfunc @main(%0 \"x\": f32[3,2]) {{\n  \
                 %1 = constant [1.0, 2.0, 3.0, 4.0] : f32[2,2]\n  \
                 %2 = constant [5.0, 6.0, 7.0, 8.0] : f32[2,2]\n  \
                 %3 = concatenate %1, %2, axis=1 : f32[2,4]\n  \
                 %4 = fused_dense %0, %3, activation=none, layout=input_outputs, has_bias=false : f32[3,4]\n  \
                 return {ret}\n}}\n"
            )
        };
        let mut m = parse_module(&text("%4")).unwrap();
        assert!(!run(&mut m).unwrap(), "nothing to fold");
        assert!(m.functions[0].body.iter().any(|&n| matches!(m.node(n).op, Op::Concatenate { .. })));
        // Also returned: folded.
        let mut m = parse_module(&text("%4, %3")).unwrap();
        assert!(run(&mut m).unwrap());
        crate::passes::dce::run(&mut m).unwrap();
        assert!(!m.functions[0].body.iter().any(|&n| matches!(m.node(n).op, Op::Concatenate { .. })));
        let want: Vec<u8> = [1.0f32, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(m.functions[0].body.iter().any(|&n| matches!(&m.node(n).op, Op::Constant(c) if *c.0 == want)));
    }
}
