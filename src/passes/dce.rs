//! Dead-code elimination: drops nodes none of whose results reach an output of `main`.
//!
//! Liveness is computed over the whole module at once: every function's outputs are live (a
//! closure whose user died keeps its body, so that values it captures never dangle); a node is
//! live when one of its results is live; the operands of a live node are live, which reaches
//! captured ancestor values too. Every op is pure, so nothing else keeps a node alive.

use crate::error::Result;
use crate::ir::module::{Module, ValueDef};

/// Runs DCE; returns whether anything was removed.
pub fn run(m: &mut Module) -> Result<bool> {
    let mut live_val = vec![false; m.values.len()];
    loop {
        let mut changed = false;
        for f in 0..m.functions.len() {
            if let Some(outs) = &m.functions[f].outputs {
                for o in outs {
                    changed |= !std::mem::replace(&mut live_val[o.index()], true);
                }
            }
            for &n in m.functions[f].body.iter().rev() {
                let node = &m.nodes[n.index()];
                if !node.outputs.iter().any(|o| live_val[o.index()]) {
                    continue;
                }
                for i in &node.inputs {
                    changed |= !std::mem::replace(&mut live_val[i.index()], true);
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut removed = false;
    for f in 0..m.functions.len() {
        let before = m.functions[f].body.len();
        let nodes = &m.nodes;
        let values = &m.values;
        m.functions[f].body.retain(|&n| {
            nodes[n.index()].outputs.iter().any(|o| {
                debug_assert!(matches!(values[o.index()].def, ValueDef::Node { .. }));
                live_val[o.index()]
            })
        });
        removed |= m.functions[f].body.len() != before;
    }
    Ok(removed)
}
