//! Constant folding: a node whose operands are all constants is evaluated at compile time with
//! the reference kernels and replaced by constants, when its results are small.

use std::sync::Arc;

use crate::error::Result;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{ConstData, Op};
use crate::ir::shape::Shape;
use crate::kernels::reference;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;
use crate::passes::rewrite::Edits;

/// Results with more elements than this are not folded (they would bloat the module).
pub const FOLD_LIMIT_ELEMENTS: usize = 1 << 16;

/// The data of `v` if it is defined by a Constant node.
pub fn constant_bytes(m: &Module, v: ValueId) -> Option<&[u8]> {
    match m.value(v).def {
        ValueDef::Node { node, .. } => match &m.node(node).op {
            Op::Constant(c) => Some(c.0.as_slice()),
            _ => None,
        },
        ValueDef::Param(_) => None,
    }
}

fn foldable(op: &Op) -> bool {
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
    for f in 0..m.functions.len() {
        let func = FuncId(f as u32);
        let old_body = std::mem::take(&mut m.functions[f].body);
        for &n in &old_body {
            edits.resolve_inputs(m, n);
            match fold_node(m, n) {
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
    if out_shapes.iter().any(|s| s.size().is_none_or(|n| n > FOLD_LIMIT_ELEMENTS)) {
        return None;
    }
    let mut inputs = Vec::with_capacity(node.inputs.len());
    for &i in &node.inputs {
        let b = constant_bytes(m, i)?;
        inputs.push(Tensor { shape: m.shape(i).clone(), data: Arc::new(AlignedBytes::from_bytes(b)) });
    }
    reference::eval(&node.op, &inputs, &out_shapes).ok()
}
