//! Small graph-editing primitives shared by the passes: use replacement and body surgery.

use crate::ir::module::{FuncId, Module, NodeId, ValueId};

/// Replaces every use of `old` by `new`: node operands in every function (closures capture
/// ancestor values) and function outputs.
pub fn replace_all_uses(m: &mut Module, old: ValueId, new: ValueId) {
    if old == new {
        return;
    }
    for f in 0..m.functions.len() {
        let body = m.functions[f].body.clone();
        for n in body {
            for i in m.nodes[n.index()].inputs.iter_mut() {
                if *i == old {
                    *i = new;
                }
            }
        }
        if let Some(outs) = m.functions[f].outputs.as_mut() {
            for o in outs.iter_mut() {
                if *o == old {
                    *o = new;
                }
            }
        }
    }
}

/// Removes `node` from its function's body (the node stays in the arena, unreachable).
pub fn remove_from_body(m: &mut Module, node: NodeId) {
    let f = m.nodes[node.index()].func;
    m.functions[f.index()].body.retain(|&n| n != node);
}

/// Moves the last node of `func`'s body (just appended by `Module::add_node`) to position `pos`.
pub fn move_last_to(m: &mut Module, func: FuncId, pos: usize) {
    let body = &mut m.functions[func.index()].body;
    if let Some(n) = body.pop() {
        body.insert(pos.min(body.len()), n);
    }
}

/// Counts, for every value, how many operand slots and function outputs refer to it.
pub fn use_counts(m: &Module) -> Vec<usize> {
    let mut uses = vec![0usize; m.values.len()];
    for f in &m.functions {
        for &n in &f.body {
            for &i in &m.nodes[n.index()].inputs {
                uses[i.index()] += 1;
            }
        }
        if let Some(outs) = &f.outputs {
            for &o in outs {
                uses[o.index()] += 1;
            }
        }
    }
    uses
}
