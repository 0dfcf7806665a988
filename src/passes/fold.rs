//! Constant folding: a node whose operands are all constants is evaluated at compile time with
//! the reference kernels and replaced by constants, when its results are small.

use std::sync::Arc;

use crate::error::Result;
use crate::ir::module::{Module, ValueDef, ValueId};
use crate::ir::op::{ConstData, Op};
use crate::kernels::reference;
use crate::kernels::tensor::Tensor;
use crate::passes::rewrite::{move_last_to, remove_from_body, replace_all_uses};
use crate::runtime::aligned::AlignedBytes;

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
    for f in 0..m.functions.len() {
        let mut pos = 0;
        while pos < m.functions[f].body.len() {
            let n = m.functions[f].body[pos];
            let node = m.node(n).clone();
            pos += 1;
            if !foldable(&node.op) || node.inputs.is_empty() {
                continue;
            }
            let out_shapes: Vec<_> = node.outputs.iter().map(|&o| m.shape(o).clone()).collect();
            if out_shapes.iter().any(|s| s.size().is_none_or(|n| n > FOLD_LIMIT_ELEMENTS)) {
                continue;
            }
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for &i in &node.inputs {
                match constant_bytes(m, i) {
                    Some(b) => {
                        inputs.push(Tensor { shape: m.shape(i).clone(), data: Arc::new(AlignedBytes::from_bytes(b)) })
                    }
                    None => break,
                }
            }
            if inputs.len() != node.inputs.len() {
                continue;
            }
            let Ok(results) = reference::eval(&node.op, &inputs, &out_shapes) else { continue };
            let func = node.func;
            // Insert the constants where the folded node was, then drop it.
            let at = pos - 1;
            for (k, (out, t)) in node.outputs.iter().zip(results).enumerate() {
                let c = m.add_node(
                    func,
                    Op::Constant(ConstData(Arc::new(t.bytes().to_vec()))),
                    vec![],
                    vec![out_shapes[k].clone()],
                );
                move_last_to(m, func, at + k);
                let new_v = m.node(c).outputs[0];
                replace_all_uses(m, *out, new_v);
            }
            remove_from_body(m, n);
            pos = at + node.outputs.len();
            changed = true;
        }
    }
    Ok(changed)
}
