//! Common-subexpression elimination: a node identical to an earlier one in the same function
//! (same op, attributes and operands) is replaced by the earlier node's results.
//!
//! Every op is pure, so equal inputs give equal outputs. Constants are merged when their dtype,
//! dims and bytes are equal. Only nodes of the same function are merged (a closure may run many
//! times or not at all, so hoisting across functions is not done here).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;

use smallvec::SmallVec;

use crate::error::Result;
use crate::ir::module::{Module, Node, NodeId, ValueId};
use crate::ir::op::Op;
use crate::passes::rewrite::Edits;

/// The hasher of node keys: foldhash, seeded once per process. Keys arrive in many small
/// `Debug` pieces, where SipHash (`DefaultHasher`) spent most of the pass's time; the random
/// seed keeps a crafted model from making its keys collide (collisions cost text comparisons).
fn key_hasher() -> foldhash::fast::FoldHasher<'static> {
    static STATE: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    STATE.get_or_init(foldhash::fast::RandomState::default).build_hasher()
}

/// A [`Hasher`] fed through [`std::fmt::Write`]: hashes a `Debug`/`Display` form without
/// building the string (the key of every node is hashed; text is only built on a hash match).
struct HashWriter(foldhash::fast::FoldHasher<'static>);

impl std::fmt::Write for HashWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// Bytes of a constant that its key hashes: every byte of a small constant, evenly spaced
/// 64-byte samples of a large one (CSE runs several times per compile, and hashing every byte of
/// a model's weights each time cost more than the rest of the pipeline; equal keys are confirmed
/// by comparing all bytes).
const SAMPLED_BYTES: usize = 4096;

/// A hash of a constant's length and sampled bytes (see [`SAMPLED_BYTES`]).
fn payload_hash(bytes: &[u8]) -> u64 {
    let mut h = key_hasher();
    bytes.len().hash(&mut h);
    if bytes.len() <= SAMPLED_BYTES {
        bytes.hash(&mut h);
    } else {
        const CHUNK: usize = 64;
        let chunks = SAMPLED_BYTES / CHUNK;
        let step = (bytes.len() - CHUNK) / (chunks - 1);
        for i in 0..chunks {
            bytes[i * step..i * step + CHUNK].hash(&mut h);
        }
    }
    h.finish()
}

/// Writes the op part of what makes two nodes equal (with the operands and the output shapes of
/// [`write_shapes`]): the op's `Debug` form, which holds every attribute. A constant is written as
/// the length and a hash of sampled bytes ([`payload_hash`]; never a text form of the payload:
/// weights can be hundreds of megabytes; all bytes are compared on a match). The output shapes
/// tell constants of equal bytes but different dims apart.
fn write_op(w: &mut impl std::fmt::Write, node: &Node) -> std::fmt::Result {
    match &node.op {
        Op::Constant(c) => write!(w, "const#{}#{:016x}", c.0.len(), payload_hash(c.0.as_slice()))?,
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
            let mut hw = HashWriter(key_hasher());
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
            // The first earlier node with the same key text (the text is built only here) and
            // the same constant bytes.
            let same = if cands.is_empty() {
                None
            } else {
                let text = key_text(m, node);
                cands.iter().copied().find(|&p| key_text(m, &m.nodes[p.index()]) == text && same_payload(p))
            };
            match same {
                Some(prev) => {
                    let prev_outputs = m.nodes[prev.index()].outputs.clone();
                    for (&o, &p) in node.outputs.iter().zip(&prev_outputs) {
                        edits.replace(o, p);
                    }
                    edits.remove(n);
                    changed = true;
                }
                None => cands.push(n),
            }
        }
    }
    edits.apply(m);
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::run;
    use crate::ir::dtype::DType;
    use crate::ir::module::{Module, ValueId};
    use crate::ir::op::{ConstData, Op};
    use crate::ir::shape::Shape;

    /// Adds an f32 constant of `n` elements to main; returns its value.
    fn constant(m: &mut Module, data: &[f32]) -> ValueId {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let shape = Shape::new(DType::Float32, &[data.len() as i64]);
        let n = m.add_node(m.main, Op::Constant(ConstData(Arc::new(bytes))), vec![], vec![shape]);
        m.node(n).outputs[0]
    }

    /// Large constants are keyed by sampled bytes, but merged only when every byte is equal: a
    /// difference between the samples keeps them apart, and a later copy of the second still
    /// merges with it (the key's first entry is not the only candidate).
    #[test]
    fn large_constants_merge_only_when_every_byte_is_equal() {
        let mut m = Module::new("cse");
        let a: Vec<f32> = (0..10_000).map(|i| i as f32).collect();
        let mut b = a.clone();
        b[5_001] = -1.0; // byte offset 20_004: between two 64-byte samples
        let ca = constant(&mut m, &a);
        let cb = constant(&mut m, &b);
        let cb2 = constant(&mut m, &b);
        let ca2 = constant(&mut m, &a);
        m.func_mut(m.main).outputs = Some(vec![ca, cb, cb2, ca2]);
        assert!(run(&mut m).unwrap());
        let outs = m.func(m.main).outputs.clone().unwrap();
        assert_eq!(outs, vec![ca, cb, cb, ca]);
        assert_eq!(m.func(m.main).body.len(), 2);
    }
}
