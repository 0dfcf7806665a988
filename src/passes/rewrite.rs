//! Small graph-editing primitives shared by the passes: use replacement and body surgery.

use std::collections::{HashMap, HashSet};

use crate::ir::module::{Module, NodeId, ValueId};

/// Edits of one pass, applied in one sweep at the end ([`Edits::apply`]), so that a pass
/// rewriting every node of a long chain stays linear (an immediate [`replace_all_uses`] and
/// [`remove_from_body`] per node would scan the module per node: quadratic).
///
/// A pass walking a body in order calls [`Edits::resolve_inputs`] on each node before looking at
/// it: its operands then read exactly what an immediate replacement would have left there.
#[derive(Debug, Default)]
pub struct Edits {
    replaced: HashMap<ValueId, ValueId>,
    removed: HashSet<NodeId>,
}

impl Edits {
    /// No edits yet.
    pub fn new() -> Edits {
        Edits::default()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.replaced.is_empty() && self.removed.is_empty()
    }

    /// Records that every use of `old` reads `new` instead.
    pub fn replace(&mut self, old: ValueId, new: ValueId) {
        let new = self.resolve(new);
        if old != new {
            self.replaced.insert(old, new);
        }
    }

    /// Records that `node` leaves its function's body.
    pub fn remove(&mut self, node: NodeId) {
        self.removed.insert(node);
    }

    /// What `v` reads after the replacements so far (chains followed; at most one step per
    /// recorded replacement, so a cycle cannot hang).
    pub fn resolve(&self, mut v: ValueId) -> ValueId {
        for _ in 0..=self.replaced.len() {
            match self.replaced.get(&v) {
                Some(&w) if w != v => v = w,
                _ => break,
            }
        }
        v
    }

    /// Rewrites the operands of `node` through the replacements so far.
    pub fn resolve_inputs(&self, m: &mut Module, node: NodeId) {
        if self.replaced.is_empty() {
            return;
        }
        let inputs: Vec<ValueId> = m.nodes[node.index()].inputs.iter().map(|&v| self.resolve(v)).collect();
        m.nodes[node.index()].inputs = inputs;
    }

    /// Applies every replacement (operands of every body node, function outputs) and removal,
    /// in one sweep over the module.
    pub fn apply(self, m: &mut Module) {
        if self.is_empty() {
            return;
        }
        for f in 0..m.functions.len() {
            if !self.removed.is_empty() {
                m.functions[f].body.retain(|n| !self.removed.contains(n));
            }
            if self.replaced.is_empty() {
                continue;
            }
            for k in 0..m.functions[f].body.len() {
                let n = m.functions[f].body[k];
                for i in m.nodes[n.index()].inputs.iter_mut() {
                    *i = self.resolve(*i);
                }
            }
            if let Some(outs) = m.functions[f].outputs.as_mut() {
                for o in outs.iter_mut() {
                    *o = self.resolve(*o);
                }
            }
        }
    }
}

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
