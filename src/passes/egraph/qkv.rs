//! After the rules: dense layers with constant weights that read the same input (the Q, K and V
//! projections of an attention block) become one FusedDense over the concatenated weights,
//! followed by one `Slice` of its last axis per original layer.
//!
//! `FusedDense(x, w_i, b_i)` for i = 1..k (k ≥ 2) with the same `x`, activation, weight layout
//! and dtype, rank-2 constant weights of the same K (`[K, N_i]` InputOutputs or `[N_i, K]`
//! OutputsInput) and constant biases `[N_i]` on all or none (a constant, or a `Reshape` of one)
//! equal `Slice(FusedDense(x, concat(w_i), concat(b_i)), last axis N_1+…+N_{i−1} ..
//! N_1+…+N_i)`: every output column is its own dot product plus its own bias, and the
//! activation is elementwise. The merged weights are a `Concatenate` (along the output axis) of
//! the members' constants when they are f32, bf16 or f16 with one layout: the jit packs each
//! member's bytes straight into the panels of one GEMM with N = ΣN_i and never computes the
//! concatenation (`backends/jit/dot.rs`, `weight_blocks`), so the merge copies no weights;
//! other dtypes and mixed layouts get one constant of the concatenated bytes. The jit plan then
//! lets an attention read q, k and v as column blocks of that product without the slices'
//! copies (`backends/jit/merge.rs`). Nodes made by this pass are catalogue ops only.
//!
//! [`run`] merges layers over inputs of static shape; [`run_dynamic`] also those whose input
//! has dynamic leading axes (K and every N_i static): the slices then keep those axes whole
//! (limit `-1`), so that the specialisations of a dynamic module share its concatenated
//! weights instead of concatenating (and the jit packing) them again per binding.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ir::dtype::DType;
use crate::ir::infer::infer_shapes;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{ConstData, DenseLayout, Op};
use crate::ir::shape::Shape;
use crate::passes::rewrite::replace_all_uses;

/// The constant bytes of `v` (a Constant node's result, or a `Reshape` of one: same bytes).
fn constant_bytes(m: &Module, v: ValueId) -> Option<&Arc<Vec<u8>>> {
    if let Some(d) = m.constant_data(v) {
        return Some(d);
    }
    let ValueDef::Node { node, output: 0 } = m.value(v).def else { return None };
    match &m.node(node).op {
        Op::Reshape { .. } => constant_bytes(m, *m.node(node).inputs.first()?),
        _ => None,
    }
}

/// What must agree for two denses to merge: input, activation, bias present, dtype, K.
type GroupKey = (ValueId, String, bool, String, i64);

/// One mergeable dense: its node, output, weight layout (InputOutputs?), output width `N_i`,
/// weight and bias bytes.
struct Member {
    node: NodeId,
    out: ValueId,
    io: bool,
    n: i64,
    w: Arc<Vec<u8>>,
    b: Option<Arc<Vec<u8>>>,
}

/// A dense layer `merge_function` may take (`dynamic`: its input may have dynamic leading axes).
fn member(m: &Module, f: FuncId, n: NodeId, dynamic: bool) -> Option<(GroupKey, Member)> {
    let node = m.node(n);
    let Op::FusedDense { activation, layout, has_bias } = &node.op else { return None };
    let (x, w) = (*node.inputs.first()?, *node.inputs.get(1)?);
    let (xs, ws) = (m.shape(x), m.shape(w));
    let out = *node.outputs.first()?;
    let os = m.shape(out);
    if ws.rank() != 2 || ws.is_dynamic() || m.value(out).func != f || xs.rank() < 1 || os.rank() < 1 {
        return None;
    }
    let static_last = xs.dims[xs.rank() - 1] >= 0 && os.dims[os.rank() - 1] >= 0;
    if !static_last || (!dynamic && (xs.is_dynamic() || os.is_dynamic())) {
        return None;
    }
    let (k, n_out) = match layout {
        DenseLayout::InputOutputs => (ws.dims[0], ws.dims[1]),
        DenseLayout::OutputsInput => (ws.dims[1], ws.dims[0]),
    };
    let wb = constant_bytes(m, w)?.clone();
    let es = ws.dtype.size();
    if wb.len() != (k * n_out) as usize * es {
        return None;
    }
    let b = match has_bias {
        true => {
            let bv = *node.inputs.get(2)?;
            let bs = m.shape(bv);
            if bs.dims != [n_out] || bs.dtype != ws.dtype {
                return None;
            }
            let bb = constant_bytes(m, bv)?.clone();
            if bb.len() != n_out as usize * es {
                return None;
            }
            Some(bb)
        }
        false => None,
    };
    let key = (x, format!("{activation:?}"), *has_bias, ws.dtype.to_string(), k);
    let io = *layout == DenseLayout::InputOutputs;
    Some((key, Member { node: n, out, io, n: n_out, w: wb, b }))
}

/// The shapes of a merged group's nodes: the merged dense's result and each slice's, by
/// inference (`None` when inference rejects them or a slice's shape is not its member's).
fn merged_shapes(m: &Module, proto: &Op, ins: &[Shape], slices: &[(Op, ValueId)]) -> Option<(Shape, Vec<Shape>)> {
    let refs: Vec<&Shape> = ins.iter().collect();
    let y = infer_shapes(m, proto, &refs).ok()?.pop()?;
    let mut outs = Vec::with_capacity(slices.len());
    for (op, old) in slices {
        let s = infer_shapes(m, op, &[&y]).ok()?.pop()?;
        if s != *m.shape(*old) {
            return None;
        }
        outs.push(s);
    }
    Some((y, outs))
}

/// The members' weights concatenated along the output axis: rows appended (`[N, K]`) or each
/// input row made of every member's row (`[K, N]`; a member's `[N, K]` weights read down a
/// column).
fn concatenated(found: &[Member], members: &[usize], io_layout: bool, k: i64, es: usize) -> Vec<u8> {
    let mut w = Vec::with_capacity(members.iter().map(|&i| found[i].w.len()).sum());
    if io_layout {
        let ku = k as usize;
        for r in 0..ku {
            for &i in members {
                let (wi, ni) = (&found[i].w, found[i].n as usize);
                if found[i].io {
                    w.extend_from_slice(&wi[r * ni * es..(r + 1) * ni * es]);
                } else {
                    for c in 0..ni {
                        w.extend_from_slice(&wi[(c * ku + r) * es..(c * ku + r + 1) * es]);
                    }
                }
            }
        }
    } else {
        for &i in members {
            w.extend_from_slice(&found[i].w);
        }
    }
    w
}

/// Merges the groups of function `f`; returns how many groups were merged.
fn merge_function(m: &mut Module, f: FuncId, dynamic: bool) -> usize {
    // Groups in body order, each with the body position of its first member.
    let body = m.func(f).body.clone();
    let mut groups: Vec<(GroupKey, Vec<usize>)> = vec![];
    let mut index: HashMap<GroupKey, usize> = HashMap::new();
    let mut found: Vec<Member> = vec![];
    for &n in &body {
        if let Some((key, mb)) = member(m, f, n, dynamic) {
            let gi = *index.entry(key.clone()).or_insert_with(|| {
                groups.push((key, vec![]));
                groups.len() - 1
            });
            groups[gi].1.push(found.len());
            found.push(mb);
        }
    }
    let mut merged = 0;
    for (key, members) in groups.into_iter().filter(|g| g.1.len() >= 2) {
        let (x, _, has_bias, _, k) = key;
        let first = found[members[0]].node;
        // Weights `[N, K]` (OutputsInput) when every member has them so, else `[K, N]`.
        let io_layout = members.iter().any(|&i| found[i].io);
        let proto = match m.node(first).op.clone() {
            Op::FusedDense { activation, has_bias, .. } => {
                let layout = if io_layout { DenseLayout::InputOutputs } else { DenseLayout::OutputsInput };
                Op::FusedDense { activation, layout, has_bias }
            }
            _ => continue,
        };
        let w_shape = m.shape(m.node(first).inputs[1]).clone();
        let dt = w_shape.dtype;
        let total: i64 = members.iter().map(|&i| found[i].n).sum();
        let w_dims = if io_layout { vec![k, total] } else { vec![total, k] };
        let mut in_shapes = vec![m.shape(x).clone(), Shape::new(dt, &w_dims)];
        if has_bias {
            in_shapes.push(Shape::new(dt, &[total]));
        }
        // One slice of the last axis per member; a dynamic axis is kept whole (limit -1).
        let rank = m.shape(found[members[0]].out).rank();
        let last = rank - 1;
        let mut slices = Vec::with_capacity(members.len());
        let mut at = 0;
        for &i in &members {
            let (old, n_i) = (found[i].out, found[i].n);
            let starts: Vec<i64> = (0..rank).map(|a| if a == last { at } else { 0 }).collect();
            let mut limits: Vec<i64> = m.shape(old).dims.iter().map(|&d| if d < 0 { -1 } else { d }).collect();
            limits[last] = at + n_i;
            slices.push((Op::Slice { starts, limits, strides: vec![1; rank] }, old));
            at += n_i;
        }
        let Some((y_shape, slice_shapes)) = merged_shapes(m, &proto, &in_shapes, &slices) else { continue };
        let mut nodes = vec![];
        let same_layout = members.iter().all(|&i| found[i].io == io_layout);
        let blockwise = same_layout && matches!(dt, DType::Float32 | DType::BFloat16 | DType::Float16);
        let wv = if blockwise {
            // Each member's bytes as a constant of its own (shared, not copied), concatenated.
            let mut parts = Vec::with_capacity(members.len());
            for &i in &members {
                let dims = if io_layout { [k, found[i].n] } else { [found[i].n, k] };
                let c = m.add_node(f, Op::Constant(ConstData(found[i].w.clone())), vec![], vec![Shape::new(dt, &dims)]);
                nodes.push(c);
                parts.push(m.node(c).outputs[0]);
            }
            let axis = if io_layout { 1 } else { 0 };
            let cat = m.add_node(f, Op::Concatenate { axis }, parts, vec![in_shapes[1].clone()]);
            nodes.push(cat);
            m.node(cat).outputs[0]
        } else {
            let wc = m.add_node(
                f,
                Op::Constant(ConstData(Arc::new(concatenated(&found, &members, io_layout, k, dt.size())))),
                vec![],
                vec![in_shapes[1].clone()],
            );
            nodes.push(wc);
            m.node(wc).outputs[0]
        };
        let mut inputs = vec![x, wv];
        if has_bias {
            let b: Vec<u8> = members.iter().flat_map(|&i| found[i].b.iter().flat_map(|b| b.iter().copied())).collect();
            let bc = m.add_node(f, Op::Constant(ConstData(Arc::new(b))), vec![], vec![in_shapes[2].clone()]);
            nodes.push(bc);
            inputs.push(m.node(bc).outputs[0]);
        }
        let dense = m.add_node(f, proto, inputs, vec![y_shape]);
        nodes.push(dense);
        let y = m.node(dense).outputs[0];
        for ((op, old), shape) in slices.into_iter().zip(slice_shapes) {
            let s = m.add_node(f, op, vec![y], vec![shape]);
            nodes.push(s);
            let sv = m.node(s).outputs[0];
            replace_all_uses(m, old, sv);
        }
        // The new nodes go where the first member was (x and every use of the members are
        // after it); the members leave the body (their constants go to dead-code elimination).
        let gone: Vec<NodeId> = members.iter().map(|&i| found[i].node).collect();
        let fd = m.func_mut(f);
        fd.body.retain(|n| !nodes.contains(n) && (*n == first || !gone.contains(n)));
        if let Some(p) = fd.body.iter().position(|&n| n == first) {
            fd.body.splice(p..=p, nodes);
        }
        merged += 1;
    }
    merged
}

/// Merges dense layers sharing an input of static shape in every function of `m` (module docs);
/// returns the number of merged groups.
pub fn run(m: &mut Module) -> usize {
    (0..m.functions.len()).map(|fi| merge_function(m, FuncId(fi as u32), false)).sum()
}

/// As [`run`], also merging layers whose input has dynamic leading axes.
pub fn run_dynamic(m: &mut Module) -> usize {
    (0..m.functions.len()).map(|fi| merge_function(m, FuncId(fi as u32), true)).sum()
}
