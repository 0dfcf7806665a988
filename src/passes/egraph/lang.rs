//! The egg language of the fusion pass: the IR's ops with their attributes inside the e-nodes.
//!
//! An e-node is one of
//! - [`TNode::Leaf`]: a value the pass does not look into (a parameter, a constant, a value
//!   captured from an enclosing function, an output of an opaque node such as `while`); it
//!   indexes the leaf table of the [`analysis`](super::analysis), which holds its shape and,
//!   for constants, its data;
//! - [`TNode::Op`]: any single-result, closure-free IR op, held as an [`OpKey`] whose
//!   equality, hash and order come from the op's exact attribute spelling, so two nodes are
//!   equal exactly when op, every attribute and the operands are equal;
//! - [`TNode::Internal`]: the recognised idioms of the normalisation stage (mean, broadcast back
//!   of a reduction, square, inverse square root). They only give the later rules one form to
//!   look for; extraction never chooses them.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use egg::{Id, Language};
use smallvec::SmallVec;

use crate::ir::op::Op;

/// Operands of an e-node.
pub type Children = SmallVec<[Id; 3]>;

/// An IR op inside an e-node. Compared, hashed and ordered by its canonical key: the op's
/// `Debug` form, which spells every attribute exactly (floats in their shortest round-trip
/// form). Never holds a `Constant` (constants are leaves, so their data is not re-hashed).
#[derive(Clone)]
pub struct OpKey {
    op: Arc<Op>,
    key: Box<str>,
}

impl OpKey {
    /// Wraps `op`, computing its key.
    pub fn new(op: Op) -> OpKey {
        let key = format!("{op:?}").into_boxed_str();
        OpKey { op: Arc::new(op), key }
    }

    /// The IR op.
    pub fn op(&self) -> &Op {
        &self.op
    }
}

impl PartialEq for OpKey {
    fn eq(&self, other: &OpKey) -> bool {
        self.key == other.key
    }
}

impl Eq for OpKey {}

impl Hash for OpKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl PartialOrd for OpKey {
    fn partial_cmp(&self, other: &OpKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OpKey {
    fn cmp(&self, other: &OpKey) -> Ordering {
        self.key.cmp(&other.key)
    }
}

impl fmt::Debug for OpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

/// Idioms recognised by the normalisation stage. Not IR ops: extraction gives them infinite cost.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Internal {
    /// `mean(x)` over `axes`: `ReduceSum(x, axes)` times `1/n` or divided by `n`, where `n` is
    /// the product of x's dims on `axes`. Operand: `x`.
    Mean {
        /// Reduced axes of x (sorted).
        axes: Vec<usize>,
    },
    /// A reduced value `r` put back along the reduced `axes` of the class's shape: a
    /// `BroadcastInDim` over the other axes, or a keep-dims `Reshape` (size-1 axes, broadcast
    /// later by a binary op), optionally followed by an identity-axes `BroadcastInDim`.
    /// Operand: `r`.
    ///
    /// The node carries the class's `dims`: the restored axes may have any size (1 for a
    /// keep-dims reshape, the full size for a broadcast), so `r` and `axes` alone do not fix the
    /// value. Without them, a keep-dims reshape and its broadcast (or two broadcasts of `r` to
    /// different sizes) would be the same e-node and hash-consing would merge their classes.
    Restore {
        /// The axes of the class's shape that `r` lacks (sorted).
        axes: Vec<usize>,
        /// The dims of the class's shape (the restored value).
        dims: Vec<i64>,
    },
    /// `d·d` or `Pow(d, 2)`. Operand: `d`.
    Square,
    /// `Rsqrt(s)` or `1 / Sqrt(s)`. Operand: `s`.
    InvSqrt,
}

/// An e-node of the fusion e-graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TNode {
    /// An opaque value: index into the analysis's leaf table.
    Leaf(u32),
    /// A single-result IR op applied to its operands (in the op's documented order).
    Op(OpKey, Children),
    /// A normalisation idiom (never extracted).
    Internal(Internal, Children),
}

impl TNode {
    /// An IR op node.
    pub fn op(op: Op, children: &[Id]) -> TNode {
        TNode::Op(OpKey::new(op), children.iter().copied().collect())
    }

    /// An internal node.
    pub fn internal(i: Internal, children: &[Id]) -> TNode {
        TNode::Internal(i, children.iter().copied().collect())
    }

    /// The IR op and operands, if this is an op node.
    pub fn as_op(&self) -> Option<(&Op, &[Id])> {
        match self {
            TNode::Op(k, c) => Some((k.op(), c)),
            _ => None,
        }
    }
}

impl Language for TNode {
    type Discriminant = u8;

    fn discriminant(&self) -> u8 {
        match self {
            TNode::Leaf(_) => 0,
            TNode::Op(..) => 1,
            TNode::Internal(..) => 2,
        }
    }

    fn matches(&self, other: &TNode) -> bool {
        match (self, other) {
            (TNode::Leaf(a), TNode::Leaf(b)) => a == b,
            (TNode::Op(a, ca), TNode::Op(b, cb)) => a == b && ca.len() == cb.len(),
            (TNode::Internal(a, ca), TNode::Internal(b, cb)) => a == b && ca.len() == cb.len(),
            _ => false,
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            TNode::Leaf(_) => &[],
            TNode::Op(_, c) | TNode::Internal(_, c) => c,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            TNode::Leaf(_) => &mut [],
            TNode::Op(_, c) | TNode::Internal(_, c) => c,
        }
    }
}

impl fmt::Display for TNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TNode::Leaf(i) => write!(f, "leaf{i}"),
            TNode::Op(k, _) => f.write_str(k.op().op_type().name()),
            TNode::Internal(i, _) => write!(f, "{i:?}"),
        }
    }
}
