//! Common-subexpression elimination: a node identical to an earlier one in the same function
//! (same op, attributes and operands) is replaced by the earlier node's results.
//!
//! Every op is pure, so equal inputs give equal outputs. Constants are merged when their dtype,
//! dims and bytes are equal. Only nodes of the same function are merged (a closure may run many
//! times or not at all, so hoisting across functions is not done here).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::error::Result;
use crate::ir::module::{Module, NodeId, ValueId};
use crate::ir::op::Op;
use crate::passes::rewrite::Edits;

/// What makes two nodes equal: op with attributes, operands, output shapes.
type Key = (String, Vec<ValueId>, String);

/// Runs CSE; returns whether anything was merged.
pub fn run(m: &mut Module) -> Result<bool> {
    let mut changed = false;
    let mut edits = Edits::new();
    for f in 0..m.functions.len() {
        let mut seen: HashMap<Key, (NodeId, Vec<ValueId>)> = HashMap::new();
        let body = m.functions[f].body.clone();
        for n in body {
            edits.resolve_inputs(m, n);
            let node = &m.nodes[n.index()];
            // The op's Debug form holds every attribute; constants are keyed by the length and a
            // hash of their bytes (never a text form of the payload: weights can be hundreds of
            // megabytes) and compared byte for byte on a match. The output shapes tell constants
            // of equal bytes but different dims apart.
            let shapes = node.outputs.iter().map(|&o| format!("{}", m.shape(o))).collect::<Vec<_>>().join(";");
            let key_op = match &node.op {
                Op::Constant(c) => {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    c.0.as_slice().hash(&mut h);
                    format!("const#{}#{:016x}", c.0.len(), h.finish())
                }
                op => format!("{op:?}"),
            };
            // Canonicalise operand order of commutative ops so `a+b` and `b+a` merge.
            let mut inputs = node.inputs.clone();
            if let Op::Binary(b) = &node.op {
                use crate::ir::op::BinaryOp::*;
                if matches!(
                    b,
                    Add | Mul | Max | Min | BitwiseAnd | BitwiseOr | BitwiseXor | LogicalAnd | LogicalOr | LogicalXor
                ) {
                    inputs.sort();
                }
            }
            let key = (key_op, inputs, shapes);
            let same_payload = |prev: NodeId| match (&m.nodes[prev.index()].op, &node.op) {
                (Op::Constant(a), Op::Constant(b)) => a.0 == b.0,
                _ => true,
            };
            match seen.get(&key).filter(|(pn, _)| same_payload(*pn)) {
                Some((_, prev)) => {
                    for (&o, &p) in node.outputs.iter().zip(prev) {
                        edits.replace(o, p);
                    }
                    edits.remove(n);
                    changed = true;
                }
                None => {
                    seen.entry(key).or_insert((n, node.outputs.clone()));
                }
            }
        }
    }
    edits.apply(m);
    Ok(changed)
}
