//! Common-subexpression elimination: a node identical to an earlier one in the same function
//! (same op, attributes and operands) is replaced by the earlier node's results.
//!
//! Every op is pure, so equal inputs give equal outputs. Constants are merged when their dtype,
//! dims and bytes are equal. Only nodes of the same function are merged (a closure may run many
//! times or not at all, so hoisting across functions is not done here).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use smallvec::SmallVec;

use crate::error::Result;
use crate::ir::module::{Module, Node, NodeId, ValueId};
use crate::ir::op::Op;
use crate::passes::rewrite::Edits;

/// A [`Hasher`] fed through [`std::fmt::Write`]: hashes a `Debug`/`Display` form without
/// building the string (the key of every node is hashed; text is only built on a hash match).
struct HashWriter(DefaultHasher);

impl std::fmt::Write for HashWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// Writes the op part of what makes two nodes equal (with the operands and the output shapes of
/// [`write_shapes`]): the op's `Debug` form, which holds every attribute. A constant is written as the length and a hash of
/// its bytes (never a text form of the payload: weights can be hundreds of megabytes; bytes are
/// compared on a match). The output shapes tell constants of equal bytes but different dims apart.
fn write_op(w: &mut impl std::fmt::Write, node: &Node) -> std::fmt::Result {
    match &node.op {
        Op::Constant(c) => {
            let mut h = DefaultHasher::new();
            c.0.as_slice().hash(&mut h);
            write!(w, "const#{}#{:016x}", c.0.len(), h.finish())?;
        }
        op => write!(w, "{op:?}")?,
    }
    Ok(())
}

fn write_shapes(w: &mut impl std::fmt::Write, m: &Module, node: &Node) -> std::fmt::Result {
    for (i, &o) in node.outputs.iter().enumerate() {
        write!(w, "{}{}", if i == 0 { "" } else { ";" }, m.shape(o))?;
    }
    Ok(())
}

/// The key text: op form and output shapes.
fn key_text(m: &Module, node: &Node) -> (String, String) {
    let (mut op, mut shapes) = (String::new(), String::new());
    let _ = write_op(&mut op, node);
    let _ = write_shapes(&mut shapes, m, node);
    (op, shapes)
}

/// Runs CSE; returns whether anything was merged.
pub fn run(m: &mut Module) -> Result<bool> {
    let mut changed = false;
    let mut edits = Edits::new();
    for f in 0..m.functions.len() {
        // (hash of the key text, canonical operands) → the first node of each distinct key text
        // with that hash (more than one only on a hash collision).
        let mut seen: HashMap<(u64, Vec<ValueId>), SmallVec<[NodeId; 1]>> = HashMap::new();
        let body = m.functions[f].body.clone();
        for n in body {
            edits.resolve_inputs(m, n);
            let node = &m.nodes[n.index()];
            let mut hw = HashWriter(DefaultHasher::new());
            let _ = write_op(&mut hw, node);
            hw.0.write_u8(0xff);
            let _ = write_shapes(&mut hw, m, node);
            let hash = hw.0.finish();
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
            let same_payload = |prev: NodeId| match (&m.nodes[prev.index()].op, &node.op) {
                (Op::Constant(a), Op::Constant(b)) => a.0 == b.0,
                _ => true,
            };
            let cands = seen.entry((hash, inputs)).or_default();
            // The first earlier node with the same key text (the text is built only here).
            let same_key = if cands.is_empty() {
                None
            } else {
                let text = key_text(m, node);
                cands.iter().copied().find(|&p| key_text(m, &m.nodes[p.index()]) == text)
            };
            match same_key {
                Some(prev) if same_payload(prev) => {
                    let prev_outputs = m.nodes[prev.index()].outputs.clone();
                    for (&o, &p) in node.outputs.iter().zip(&prev_outputs) {
                        edits.replace(o, p);
                    }
                    edits.remove(n);
                    changed = true;
                }
                // Same key but other constant bytes: the first node stays the key's entry.
                Some(_) => {}
                None => cands.push(n),
            }
        }
    }
    edits.apply(m);
    Ok(changed)
}
