//! The e-class analysis of the fusion pass: the shape (dtype + dims) of every class and, for
//! constants, their value — a splat value when every element is equal, and the raw data of a
//! constant leaf for rules that need all elements (causal masks).
//!
//! Shapes of op nodes come from [`infer_shapes`], so a fused node added by a rule carries the
//! shape its own inference gives; the rules check it equals the class's shape before adding.

use egg::{Analysis, DidMerge, EGraph, Id};
use half::{bf16, f16};

use crate::ir::dtype::DType;
use crate::ir::infer::infer_shapes;
use crate::ir::module::{Module, ValueId};
use crate::ir::op::{ConstData, Op, UnaryOp};
use crate::ir::shape::Shape;
use crate::passes::egraph::lang::TNode;

/// The e-graph of the fusion pass.
pub type EG = EGraph<TNode, TAnalysis>;

/// One opaque value of the function being rewritten.
#[derive(Clone, Debug)]
pub struct LeafInfo {
    /// The IR value it stands for.
    pub value: ValueId,
    /// Its shape.
    pub shape: Shape,
    /// The data when the value is the output of a `constant` node.
    pub data: Option<ConstData>,
    /// The common value of all elements of a constant whose elements are all equal.
    pub splat: Option<f64>,
}

/// The analysis: the leaf table plus an empty module used for shape inference.
#[derive(Debug)]
pub struct TAnalysis {
    /// Leaves, indexed by [`TNode::Leaf`].
    pub leaves: Vec<LeafInfo>,
    scratch: Module,
}

impl TAnalysis {
    /// An analysis over the given leaf table.
    pub fn new(leaves: Vec<LeafInfo>) -> TAnalysis {
        TAnalysis { leaves, scratch: Module::new("egraph") }
    }
}

/// What is known about an e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    /// Its shape (`None` when inference failed or the class holds only internal nodes).
    pub shape: Option<Shape>,
    /// All elements equal this constant.
    pub splat: Option<f64>,
    /// The class is this leaf (constant data, if any, is in the leaf table).
    pub leaf: Option<u32>,
    /// Nodes of two different known shapes were merged into this class: some rule proved
    /// unequal values equal. The pass leaves such a function unchanged (see [`super::run`]).
    pub shape_conflict: bool,
}

impl Analysis<TNode> for TAnalysis {
    type Data = Facts;

    fn make(egraph: &mut EG, enode: &TNode, _id: Id) -> Facts {
        match enode {
            TNode::Leaf(i) => {
                let l = &egraph.analysis.leaves[*i as usize];
                Facts { shape: Some(l.shape.clone()), splat: l.splat, leaf: Some(*i), shape_conflict: false }
            }
            TNode::Internal(..) => Facts { shape: None, splat: None, leaf: None, shape_conflict: false },
            TNode::Op(key, children) => {
                let shapes: Option<Vec<&Shape>> = children.iter().map(|&c| egraph[c].data.shape.as_ref()).collect();
                let shape = shapes
                    .and_then(|s| infer_shapes(&egraph.analysis.scratch, key.op(), &s).ok())
                    .and_then(|mut v| if v.len() == 1 { v.pop() } else { None });
                let child_splat = children.first().and_then(|&c| egraph[c].data.splat);
                let splat = match key.op() {
                    Op::BroadcastInDim { .. } | Op::Reshape { .. } | Op::Transpose { .. } => child_splat,
                    Op::Unary(UnaryOp::Neg) => child_splat.map(|v| -v),
                    _ => None,
                };
                Facts { shape, splat, leaf: None, shape_conflict: false }
            }
        }
    }

    fn merge(&mut self, a: &mut Facts, b: Facts) -> DidMerge {
        let mut changed_a = false;
        let mut b_differs = false;
        if a.shape.is_none() && b.shape.is_some() {
            a.shape = b.shape;
            changed_a = true;
        } else if a.shape != b.shape {
            b_differs = true;
            if b.shape.is_some() && !a.shape_conflict {
                a.shape_conflict = true;
                changed_a = true;
            }
        }
        if b.shape_conflict && !a.shape_conflict {
            a.shape_conflict = true;
            changed_a = true;
        }
        if a.splat.is_none() && b.splat.is_some() {
            a.splat = b.splat;
            changed_a = true;
        } else if a.splat != b.splat {
            b_differs = true;
        }
        if a.leaf.is_none() && b.leaf.is_some() {
            a.leaf = b.leaf;
            changed_a = true;
        } else if a.leaf != b.leaf {
            b_differs = true;
        }
        DidMerge(changed_a, b_differs)
    }
}

/// Decodes element `i` of little-endian data of `dtype` as f64 (None for dtypes without a real
/// value: complex, packed, name-only).
fn element(dtype: DType, bytes: &[u8], i: usize) -> Option<f64> {
    let size = dtype.size();
    let b = bytes.get(i * size..(i + 1) * size)?;
    let v = match dtype {
        DType::Bool => f64::from(b[0] != 0),
        DType::Int8 => f64::from(b[0] as i8),
        DType::Uint8 => f64::from(b[0]),
        DType::Int16 => f64::from(i16::from_le_bytes(b.try_into().ok()?)),
        DType::Uint16 => f64::from(u16::from_le_bytes(b.try_into().ok()?)),
        DType::Int32 => f64::from(i32::from_le_bytes(b.try_into().ok()?)),
        DType::Uint32 => f64::from(u32::from_le_bytes(b.try_into().ok()?)),
        DType::Int64 => i64::from_le_bytes(b.try_into().ok()?) as f64,
        DType::Uint64 => u64::from_le_bytes(b.try_into().ok()?) as f64,
        DType::Float16 => f64::from(f16::from_le_bytes(b.try_into().ok()?)),
        DType::BFloat16 => f64::from(bf16::from_le_bytes(b.try_into().ok()?)),
        DType::Float32 => f64::from(f32::from_le_bytes(b.try_into().ok()?)),
        DType::Float64 => f64::from_le_bytes(b.try_into().ok()?),
        _ => return None,
    };
    Some(v)
}

/// The common value of a constant whose elements all have the same bits (early exit on the
/// first difference, so large weights cost almost nothing).
pub fn splat_value(shape: &Shape, data: &ConstData) -> Option<f64> {
    let n = shape.size()?;
    if n == 0 || shape.dtype.is_packed() {
        return None;
    }
    let size = shape.dtype.size();
    let bytes = data.0.as_slice();
    if shape.byte_size() != Some(bytes.len()) {
        return None;
    }
    let first = &bytes[..size];
    if bytes.chunks_exact(size).all(|c| c == first) { element(shape.dtype, bytes, 0) } else { None }
}

/// All elements of a constant as f64, in row-major order (None if undecodable).
pub fn values(shape: &Shape, data: &ConstData) -> Option<Vec<f64>> {
    let n = shape.size()?;
    if shape.dtype.is_packed() || shape.byte_size() != Some(data.0.len()) {
        return None;
    }
    (0..n).map(|i| element(shape.dtype, &data.0, i)).collect()
}
