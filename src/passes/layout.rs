//! Channels-last layout for convolution chains: 2-D convolutions written channels-first (NCHW,
//! the ONNX form) are rewritten to produce and read channels-last (NHWC) tensors, with the
//! elementwise ops, reductions and pooling windows between them carried over, so that a
//! convnet's activations stay channels-last from its first convolution to its head.
//!
//! Channels-last is the layout the kernels run fastest on where the channels, not the image
//! width, fill the vectors: depthwise convolutions over small planes (MobileNet's 14×14 and 7×7
//! layers would fill half a vector per row) and 1×1 convolutions (one GEMM over every pixel of
//! the batch, no per-image split), and it is the layout the Winograd kernel stages into.
//!
//! The rewrite is exact (a change of layout, no arithmetic changes): for a value `v` in NCHW the
//! pass keeps its twin `v'` with `v = transpose(v', [0, 3, 1, 2])`. Walking the body in order:
//! - a ConvGeneral with NCHW input and output (OIHW or any kernel layout) whose chain qualifies
//!   (below) gets channels-last output dimension numbers, and reads the input's twin with
//!   channels-last input dimension numbers when there is one (else the NCHW input in place);
//! - an elementwise op (unary, binary, clamp, compare, select) with a twin operand gets a twin
//!   when its other operands are scalars, twins, constants (transposed by the fold pass) or
//!   broadcasts (broadcast again to the channels-last axes);
//! - a reduction over a twin whose kept axes stay in the same order (global average pooling
//!   keeps N and C), and a pooling window (ReduceWindow) over a twin, read the twin instead;
//! - every other reader of a value with a twin (and the function's outputs) reads
//!   `transpose(twin)`, made once per value;
//! - a value that a closure reads by id keeps its node as well (the closure and the other NCHW
//!   readers read it; the twin feeds the channels-last readers).
//!
//! Models written channels-last (a TensorFlow export: `Transpose(x, [0, 3, 1, 2])` before a
//! convolution, `Transpose(y, [0, 2, 3, 1])` after it) bring their twins with them: the result of
//! a transpose to NCHW has its operand as its twin, so such a convolution reads the channels-last
//! tensor in place; the transpose after it reads the transpose back of the convolution's
//! channels-last result, a pair the simplifier cancels.
//!
//! A convolution qualifies when its input has a twin, or its result reaches another qualifying
//! convolution through elementwise ops and pooling windows: a lone convolution keeps its layout (a transpose back
//! would cost more than the layout gains). The old nodes are left to dead-code elimination.

use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::{ConvAxes, Op};
use crate::ir::shape::Shape;

/// NHWC axis `i` is NCHW axis `TO_NHWC[i]` (`v' = transpose(v, TO_NHWC)`).
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
/// NCHW axis `i` is NHWC axis `TO_NCHW[i]` (`v = transpose(v', TO_NCHW)`).
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

/// Whether `axes` is NCHW input and output (any kernel layout) over two spatial axes.
fn nchw(axes: &ConvAxes) -> bool {
    axes.input_batch == 0
        && axes.input_channels == 1
        && axes.input_spatial == [2, 2 + 1]
        && axes.output_batch == 0
        && axes.output_channels == 1
        && axes.output_spatial == [2, 2 + 1]
}

/// Whether node `n` is a static f32/bf16/f16 2-D convolution with NCHW input and output.
fn nchw_conv(m: &Module, n: NodeId) -> bool {
    let node = m.node(n);
    let Op::ConvGeneral { axes, batch_groups, .. } = &node.op else { return false };
    let (&[x, _], &[y]) = (&node.inputs[..], &node.outputs[..]) else { return false };
    let float = matches!(m.shape(y).dtype, DType::Float32 | DType::BFloat16 | DType::Float16);
    nchw(axes) && *batch_groups == 1 && float && !m.shape(x).is_dynamic() && !m.shape(y).is_dynamic()
}

/// Whether `op` is computed element by element (operands broadcast by size-1 axes or scalars).
fn elementwise(op: &Op) -> bool {
    matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Clamp | Op::Compare { .. } | Op::Where)
}

/// When node `n` is `transpose(x', [0, 3, 1, 2])` of a static rank-4 `x'` (a channels-last
/// tensor read as NCHW): `x'`, the twin of its result.
fn seed(m: &Module, n: NodeId) -> Option<ValueId> {
    let node = m.node(n);
    let Op::Transpose { perm } = &node.op else { return None };
    let (&[x], &[_]) = (&node.inputs[..], &node.outputs[..]) else { return None };
    (perm[..] == TO_NCHW && m.shape(x).rank() == 4 && !m.shape(x).is_dynamic()).then_some(x)
}

/// Whether `op` carries a twin from its operand to its result: an elementwise op, or a pooling
/// window (ResNet's stem reaches its first block through a max pool).
fn carries(op: &Op) -> bool {
    elementwise(op) || matches!(op, Op::ReduceWindow { .. })
}

/// `dims` permuted: `out[i] = dims[perm[i]]`.
fn permuted<T: Copy>(dims: &[T], perm: &[usize; 4]) -> Vec<T> {
    perm.iter().map(|&p| dims[p]).collect()
}

/// The channels-last twin's shape of the rank-4 shape `s`.
fn nhwc_shape(s: &Shape) -> Shape {
    Shape::new(s.dtype, &permuted(&s.dims, &TO_NHWC))
}

/// Which convolutions [`run`] moves to channels-last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Those with small planes for their channel count ([`small_planes`]).
    SmallPlanes,
    /// Every NCHW convolution.
    All,
}

/// Whether node `n`'s output planes are small for its channel count: at most [`PLANE_RATIO`]
/// pixels per output channel. There a plane's rows fill few vector lanes (a 14-wide row fills
/// 14 of 16) and a channels-first kernel spends its time at the planes' edges, while the
/// channels fill every lane channels-last. Larger planes (a convnet's first stages) stay
/// channels-first, where the row-vectorised kernels stream long rows.
fn small_planes(m: &Module, n: NodeId) -> bool {
    let d = &m.shape(m.node(n).outputs[0]).dims;
    d.len() == 4 && d[2] * d[3] <= PLANE_RATIO * d[1]
}

/// Most output pixels per output channel for [`Policy::SmallPlanes`] (MobileNetV2: the 14×14
/// and 7×7 stages qualify, the 28×28 ones with 32 to 192 channels do not).
const PLANE_RATIO: i64 = 4;

/// The convolutions of `body` to rewrite (module docs: input with a twin, or result reaching
/// another convolution of the set through elementwise ops).
fn chosen(m: &Module, body: &[NodeId], policy: Policy) -> HashSet<NodeId> {
    let all = policy == Policy::All;
    let convs: HashSet<NodeId> =
        body.iter().copied().filter(|&n| nchw_conv(m, n) && (all || small_planes(m, n))).collect();
    // Values that may have a twin: conv results and elementwise or pooling results of them
    // (forward).
    let mut twin: HashSet<ValueId> = HashSet::new();
    for &n in body {
        let node = m.node(n);
        let from = convs.contains(&n)
            || seed(m, n).is_some()
            || (carries(&node.op) && node.inputs.iter().any(|v| twin.contains(v)));
        if from && node.outputs.len() == 1 && m.shape(node.outputs[0]).rank() == 4 {
            twin.insert(node.outputs[0]);
        }
    }
    // Values that reach a convolution's input through elementwise ops and pooling (backward).
    let mut feeds: HashSet<ValueId> = convs.iter().map(|&n| m.node(n).inputs[0]).collect();
    for &n in body.iter().rev() {
        let node = m.node(n);
        if carries(&node.op) && node.outputs.iter().any(|v| feeds.contains(v)) {
            feeds.extend(node.inputs.iter().copied());
        }
    }
    convs
        .iter()
        .copied()
        .filter(|&n| {
            let node = m.node(n);
            twin.contains(&node.inputs[0]) || feeds.contains(&node.outputs[0])
        })
        .collect()
}

/// Rewrites the convolution chains of every function that `policy` picks; returns whether
/// anything changed.
pub fn run(m: &mut Module, policy: Policy) -> Result<bool> {
    // The rewrite of one function changes no function's reads of values it does not define, so
    // the captured values are found once for all of them.
    let captured = captured(m);
    let mut changed = false;
    for f in 0..m.functions.len() {
        changed |= run_func(m, FuncId(f as u32), policy, &captured);
    }
    Ok(changed)
}

/// [`run`] with [`Policy::SmallPlanes`] (a pipeline pass).
pub fn run_small(m: &mut Module) -> Result<bool> {
    run(m, Policy::SmallPlanes)
}

/// [`run`] with [`Policy::All`] (a pipeline pass).
pub fn run_all(m: &mut Module) -> Result<bool> {
    run(m, Policy::All)
}

fn run_func(m: &mut Module, func: FuncId, policy: Policy, captured: &HashSet<ValueId>) -> bool {
    let body = m.functions[func.index()].body.clone();
    let convs = chosen(m, &body, policy);
    if convs.is_empty() {
        return false;
    }
    // `twins[v]`: v's channels-last twin; `back[v]`: `transpose(twin)`, made on first need.
    let mut twins: HashMap<ValueId, ValueId> = HashMap::new();
    let mut back: HashMap<ValueId, ValueId> = HashMap::new();
    m.functions[func.index()].body.clear();
    for &n in &body {
        let node = m.node(n).clone();
        if let Some(t) = seed(m, n).filter(|x| !twins.contains_key(x)) {
            // The transpose stays for any reader in NCHW (it is its own transpose back).
            twins.insert(node.outputs[0], t);
            back.insert(node.outputs[0], node.outputs[0]);
            m.functions[func.index()].body.push(n);
            continue;
        }
        if let Some(out) = twin_of(m, func, n, &node.op, &node.inputs, &convs, &twins) {
            twins.insert(node.outputs[0], out);
            if !captured.contains(&node.outputs[0]) {
                // Replaced by its twin: the old node leaves the body.
                continue;
            }
            // A closure reads the value by id: the old node stays (below), its operands with
            // twins read through the transposes back, and its NCHW readers read it directly.
            back.insert(node.outputs[0], node.outputs[0]);
        }
        if let Some((t, op)) = reduce_over_twin(m, n, &twins) {
            m.nodes[n.index()].op = op;
            m.nodes[n.index()].inputs = vec![t];
        } else {
            // Operands with a twin that this node reads in NCHW: through the transpose back.
            for i in 0..node.inputs.len() {
                let v = node.inputs[i];
                if let Some(&t) = twins.get(&v) {
                    m.nodes[n.index()].inputs[i] = transpose_back(m, func, &mut back, v, t);
                }
            }
        }
        m.functions[func.index()].body.push(n);
    }
    // The function's outputs read their NCHW values.
    if let Some(mut outs) = m.functions[func.index()].outputs.clone() {
        for o in outs.iter_mut() {
            if let Some(&t) = twins.get(o) {
                *o = transpose_back(m, func, &mut back, *o, t);
            }
        }
        m.functions[func.index()].outputs = Some(outs);
    }
    true
}

/// The values that a function reads (in its nodes or outputs) without defining them (as a
/// parameter or a node's result): values a closure reads from its ancestors by id, which the
/// function defining them must keep computing. One walk over the module.
fn captured(m: &Module) -> HashSet<ValueId> {
    let mut read = HashSet::new();
    for f in &m.functions {
        let mut defined: HashSet<ValueId> = f.params.iter().copied().collect();
        defined.extend(f.body.iter().flat_map(|&n| m.node(n).outputs.iter().copied()));
        let reads = f.body.iter().flat_map(|&n| m.node(n).inputs.iter().copied());
        read.extend(reads.chain(f.outputs.iter().flatten().copied()).filter(|v| !defined.contains(v)));
    }
    read
}

/// `v` (in NCHW) as `transpose(t)` of its twin `t`, the transpose appended to `func`'s body on
/// the first call for `v` and reused after (`back`).
fn transpose_back(
    m: &mut Module,
    func: FuncId,
    back: &mut HashMap<ValueId, ValueId>,
    v: ValueId,
    t: ValueId,
) -> ValueId {
    *back.entry(v).or_insert_with(|| {
        let shape = m.shape(v).clone();
        let tn = m.add_node(func, Op::Transpose { perm: TO_NCHW.to_vec() }, vec![t], vec![shape]);
        m.node(tn).outputs[0]
    })
}

/// The channels-last twin of node `n`'s result, its new node appended to `func`'s body, when `n`
/// is one of the ops the module docs list; None otherwise (nothing appended).
fn twin_of(
    m: &mut Module,
    func: FuncId,
    n: NodeId,
    op: &Op,
    inputs: &[ValueId],
    convs: &HashSet<NodeId>,
    twins: &HashMap<ValueId, ValueId>,
) -> Option<ValueId> {
    let out = *m.node(n).outputs.first()?;
    if m.node(n).outputs.len() != 1 {
        return None;
    }
    let out_shape = m.shape(out).clone();
    match op {
        Op::ConvGeneral { axes, strides, padding, input_dilations, kernel_dilations, channel_groups, batch_groups }
            if convs.contains(&n) =>
        {
            let (x, w) = (inputs[0], inputs[1]);
            let mut axes = axes.clone();
            let x = match twins.get(&x) {
                Some(&t) => {
                    (axes.input_batch, axes.input_channels, axes.input_spatial) = (0, 3, vec![1, 2]);
                    t
                }
                None => x,
            };
            (axes.output_batch, axes.output_channels, axes.output_spatial) = (0, 3, vec![1, 2]);
            let op = Op::ConvGeneral {
                axes,
                strides: strides.clone(),
                padding: padding.clone(),
                input_dilations: input_dilations.clone(),
                kernel_dilations: kernel_dilations.clone(),
                channel_groups: *channel_groups,
                batch_groups: *batch_groups,
            };
            let c = m.add_node(func, op, vec![x, w], vec![nhwc_shape(&out_shape)]);
            Some(m.node(c).outputs[0])
        }
        op if elementwise(op) && out_shape.rank() == 4 && inputs.iter().any(|v| twins.contains_key(v)) => {
            // Every operand: a twin, a scalar, a rank-4 constant (transposed; folded later), or a
            // rank-4 broadcast (of anything: broadcast again to the twin's axes).
            // The twins of constants and broadcasts are made once every operand qualifies: (operand
            // index, op, its input).
            let mut ins = Vec::with_capacity(inputs.len());
            let mut made = vec![];
            for &v in inputs {
                let s = m.shape(v);
                if let Some(&t) = twins.get(&v) {
                    ins.push(t);
                    continue;
                }
                if s.rank() == 4 && m.constant_data(v).is_some() && !s.is_dynamic() {
                    made.push((ins.len(), Op::Transpose { perm: TO_NHWC.to_vec() }, v));
                } else if s.rank() != 0 {
                    let (x, b) = broadcast_to_twin(m, func, v)?;
                    made.push((ins.len(), b, x));
                }
                ins.push(v);
            }
            for (i, op, x) in made {
                let t = m.add_node(func, op, vec![x], vec![nhwc_shape(m.shape(ins[i]))]);
                ins[i] = m.node(t).outputs[0];
            }
            let e = m.add_node(func, op.clone(), ins, vec![nhwc_shape(&out_shape)]);
            Some(m.node(e).outputs[0])
        }
        Op::ReduceWindow { kind, window, strides, input_dilations, window_dilations, padding }
            if inputs.len() == 1 && twins.contains_key(&inputs[0]) && out_shape.rank() == 4 =>
        {
            // Each list is empty (the defaults) or has one entry per axis.
            fn axes<T: Copy>(v: &[T]) -> Option<Vec<T>> {
                match v.len() {
                    0 => Some(vec![]),
                    4 => Some(permuted(v, &TO_NHWC)),
                    _ => None,
                }
            }
            let op = Op::ReduceWindow {
                kind: *kind,
                window: axes(window)?,
                strides: axes(strides)?,
                input_dilations: axes(input_dilations)?,
                window_dilations: axes(window_dilations)?,
                padding: axes(padding)?,
            };
            let r = m.add_node(func, op, vec![twins[&inputs[0]]], vec![nhwc_shape(&out_shape)]);
            Some(m.node(r).outputs[0])
        }
        _ => None,
    }
}

/// When `v` is a static rank-4 `BroadcastInDim` of `x` computed in `func`: `x` and the broadcast
/// that gives `v`'s channels-last twin from it, each of `x`'s axes sent to the twin's position of
/// the axis it went to. The ReLU6 bounds a builder writes as broadcast scalars
/// (`clamp(broadcast 0, x, broadcast 6)`) or a bias broadcast along the channels.
fn broadcast_to_twin(m: &Module, func: FuncId, v: ValueId) -> Option<(ValueId, Op)> {
    let s = m.shape(v);
    if s.rank() != 4 || s.is_dynamic() || m.value(v).func != func {
        return None;
    }
    let ValueDef::Node { node, .. } = m.value(v).def else { return None };
    let Op::BroadcastInDim { axes, .. } = &m.node(node).op else { return None };
    let &[x] = &m.node(node).inputs[..] else { return None };
    let axes: Option<Vec<usize>> = axes.iter().map(|&a| TO_NCHW.get(a).copied()).collect();
    Some((x, Op::BroadcastInDim { shape: nhwc_shape(s), axes: axes? }))
}

/// Node `n` as a reduction over a value with a twin whose kept axes keep their order: the
/// operand and op that compute the same result from the twin.
fn reduce_over_twin(m: &Module, n: NodeId, twins: &HashMap<ValueId, ValueId>) -> Option<(ValueId, Op)> {
    let node = m.node(n);
    let Op::Reduce { kind, axes } = &node.op else { return None };
    let &[x] = &node.inputs[..] else { return None };
    let t = *twins.get(&x)?;
    // Twin axis i holds NCHW axis TO_NHWC[i]: reduced where that axis is.
    let kept_nchw: Vec<usize> = (0..4).filter(|a| !axes.contains(a)).collect();
    let kept_twin: Vec<usize> = TO_NHWC.iter().copied().filter(|a| !axes.contains(a)).collect();
    let axes = (0..4).filter(|&i| axes.contains(&TO_NHWC[i])).collect();
    (kept_nchw == kept_twin).then_some((t, Op::Reduce { kind: *kind, axes }))
}
