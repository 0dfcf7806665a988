//! Greedy extraction for the fusion e-graph: the cheapest e-node of every class under
//! [`FusionCost`], computed in the function's topological order (classes that rules created
//! outside the function's values first).
//!
//! egg's own `Extractor` iterates over all classes until the costs settle, one level of depth
//! per sweep — quadratic on a deep model graph (a 12-layer encoder). Here every class is first
//! visited in the order its value was defined in the function (operands before users; a fused
//! node's operands are sub-terms of what it replaces, so they come earlier too), so one sweep
//! settles almost everything and a second confirms it. Like egg's, the cost compared is a tree
//! cost: see the module documentation of [`super`] for what that means for shared
//! subexpressions.

use std::collections::HashMap;

use egg::{CostFunction, Id, Language};

use super::FusionCost;
use super::analysis::EG;
use super::lang::TNode;

/// Sweeps after which extraction gives up on settling (each sweep is linear in the e-graph).
const MAX_SWEEPS: usize = 64;

/// The best e-node of each canonical class reachable from `order`.
pub struct Extraction {
    best: HashMap<Id, ((bool, f64), TNode)>,
}

impl Extraction {
    /// Computes the best node of every class, visiting `order` (class ids in definition order).
    pub fn new(eg: &EG, order: &[Id]) -> Extraction {
        let mut best: HashMap<Id, ((bool, f64), TNode)> = HashMap::new();
        // Classes that are not a value of the function (operands a rule created, such as an
        // attention's constant query length) come first: they are small and leaf-like.
        let in_order: std::collections::HashSet<Id> = order.iter().map(|&c| eg.find(c)).collect();
        let mut canonical: Vec<Id> = eg.classes().map(|c| c.id).filter(|c| !in_order.contains(c)).collect();
        canonical.extend(order.iter().map(|&c| eg.find(c)));
        let mut seen = std::collections::HashSet::new();
        canonical.retain(|c| seen.insert(*c));
        for _ in 0..MAX_SWEEPS {
            let mut changed = false;
            for &c in &canonical {
                for node in &eg[c].nodes {
                    if !node.all(|ch| best.contains_key(&eg.find(ch))) {
                        continue;
                    }
                    let cost = FusionCost.cost(node, |ch| best[&eg.find(ch)].0);
                    let better = match best.get(&c) {
                        None => true,
                        Some((old, _)) => cost.partial_cmp(old) == Some(std::cmp::Ordering::Less),
                    };
                    if better {
                        best.insert(c, (cost, node.clone()));
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        Extraction { best }
    }

    /// The chosen e-node of class `c` (canonical id), if it has one.
    pub fn node(&self, c: Id) -> Option<&TNode> {
        self.best.get(&c).map(|(_, n)| n)
    }
}
