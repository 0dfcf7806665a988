//! Specialisation of a module with named dynamic axes to the sizes of one execution's inputs:
//! every shape made static, `DynamicShape`/`DynamicDimensionSize` replaced by constants and
//! `DynamicReshape` by `Reshape`, so that the whole static pipeline (folding, fusion, the jit's
//! plan and kernels) applies to it. The jit compiles one specialisation per binding of the axes
//! and keeps them in a bounded cache (docs/configuration.md, `specializations=N`).
//!
//! What cannot be specialised, [`unsupported`] says why (the module then runs on the
//! interpreter): dynamic shapes inside a function other than `main` (their axes are bound per
//! call), and a `DynamicReshape` whose sizes depend on tensor data rather than on shapes.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::dynamic::{self, Bindings};
use crate::ir::module::{Module, ValueId};
use crate::ir::op::{ConstData, Op};
use crate::ir::shape::Shape;
use crate::ir::{DType, FuncId};
use crate::kernels::reference;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;

/// Shape computations (the operands of a `DynamicReshape`) are evaluated when their results
/// have at most this many elements; larger ones are not shape arithmetic.
const MAX_SHAPE_VALUE_ELEMENTS: usize = 1024;

/// Why `m` cannot be specialised; `None` when [`specialize`] can make it static for any binding
/// of its axes (a binding may still be rejected, e.g. a reshape that does not divide).
pub fn unsupported(m: &Module) -> Option<String> {
    for (f, func) in m.functions.iter().enumerate() {
        if FuncId(f as u32) == m.main {
            continue;
        }
        let dynamic_param = func.params.iter().find(|&&p| m.shape(p).is_dynamic());
        let dynamic_node = func.body.iter().find(|&&n| {
            let node = m.node(n);
            node.inputs.iter().chain(&node.outputs).any(|&v| m.shape(v).is_dynamic())
        });
        if dynamic_param.is_some() || dynamic_node.is_some() {
            return Some(format!("function {} has dynamic shapes (bound per call)", m.func_label(FuncId(f as u32))));
        }
    }
    let from_shapes = shape_values(m);
    for &n in &m.func(m.main).body {
        let node = m.node(n);
        if let Op::DynamicReshape { .. } = node.op
            && let Some(&v) =
                node.inputs.iter().skip(1).find(|v| !from_shapes.get(v.0 as usize).copied().unwrap_or(false))
        {
            return Some(format!("node {n} (dynamic_reshape): its size operand {v} depends on tensor data"));
        }
    }
    None
}

/// Which values of `main` are computed from constants and operand shapes only (indexed by value
/// id): the values a specialisation can evaluate at compile time.
fn shape_values(m: &Module) -> Vec<bool> {
    let mut known = vec![false; m.values.len()];
    for &n in &m.func(m.main).body {
        let node = m.node(n);
        let yes = match &node.op {
            Op::Constant(_) | Op::DynamicShape | Op::DynamicDimensionSize { .. } => true,
            op if evaluable(op) => {
                !node.inputs.is_empty() && node.inputs.iter().all(|v| known.get(v.0 as usize).copied().unwrap_or(false))
            }
            _ => false,
        };
        if yes {
            for &o in &node.outputs {
                known[o.0 as usize] = true;
            }
        }
    }
    known
}

/// Ops a specialisation may evaluate on shape values (what folding evaluates, less randomness).
fn evaluable(op: &Op) -> bool {
    super::fold::foldable(op) && !matches!(op, Op::RngBitGenerator { .. })
}

/// The names of the dynamic axes of `main`'s parameters, sorted: the order of a binding's key.
pub fn axis_names(m: &Module) -> Vec<String> {
    let mut names: Vec<String> = m
        .func(m.main)
        .params
        .iter()
        .flat_map(|&p| {
            let s = m.shape(p);
            (0..s.rank()).filter(|&k| s.dims[k] < 0).map(move |k| s.axis_name(k).to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Binds the dynamic axes of `main`'s parameters to the dims of `inputs` (one concrete shape per
/// parameter; the caller has checked the count and dtypes). A name bound to two sizes, or a
/// rank mismatch, is an error naming the parameter.
pub fn bind_inputs(m: &Module, inputs: &[&Shape]) -> Result<Bindings> {
    let func = m.func(m.main);
    let mut b = Bindings::new();
    for (i, (&p, s)) in func.params.iter().zip(inputs).enumerate() {
        let want = m.shape(p);
        if want.is_dynamic() {
            let name = func.param_names.get(i).map(String::as_str).unwrap_or("");
            dynamic::bind(want, s, &format!("parameter {i} ({name:?})"), &mut b)?;
        }
    }
    Ok(b)
}

/// `m` (accepted by [`unsupported`]) with its dynamic axes bound by `bindings`: a static module
/// computing the same results for inputs of those sizes. Errors name the node whose shape the
/// binding makes invalid.
pub fn specialize(m: &Module, bindings: &Bindings) -> Result<Module> {
    let mut s = m.clone();
    let mut b = bindings.clone();
    let main = m.func(m.main);
    for &p in &main.params {
        let shape = m.shape(p);
        if shape.is_dynamic() {
            s.values[p.0 as usize].shape = dynamic::resolve_shape("execute", shape, &b)?;
        }
    }
    let from_shapes = shape_values(m);
    // Shape values computed so far (small tensors), for the sizes of DynamicReshape.
    let mut known: HashMap<ValueId, Tensor> = HashMap::new();
    for &n in &main.body {
        let node = m.node(n);
        // Errors name the op (what the interpreter names for the same failure) and the node.
        let name = node.op.op_type().to_string();
        let in_shapes: Vec<Shape> = node.inputs.iter().map(|&v| s.shape(v).clone()).collect();
        let in_refs: Vec<&Shape> = in_shapes.iter().collect();
        let static_in: Vec<&Shape> = node.inputs.iter().map(|&v| m.shape(v)).collect();
        let static_out: Vec<&Shape> = node.outputs.iter().map(|&v| m.shape(v)).collect();
        let x = in_shapes.first();
        let (op, outs) = match &node.op {
            Op::DynamicShape => {
                let x = x.ok_or_else(|| Error::invalid(&name, "missing operand x"))?;
                let dims: Vec<i32> = x
                    .dims
                    .iter()
                    .map(|&d| i32::try_from(d))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| Error::invalid(&name, format!("dims of {x} do not fit int32")))?;
                constant(&dims, Shape::new(DType::Int32, &[dims.len() as i64]))
            }
            Op::DynamicDimensionSize { axis } => {
                let d = x.and_then(|x| x.dims.get(*axis)).copied().ok_or_else(|| {
                    Error::invalid(
                        &name,
                        format!("axis {axis} out of range for operand {:?}", x.map(|s| s.to_string())),
                    )
                })?;
                let d = i32::try_from(d).map_err(|_| Error::invalid(&name, format!("size {d} does not fit int32")))?;
                constant(&[d], Shape::scalar(DType::Int32))
            }
            Op::DynamicReshape { specs } => {
                let x = x.ok_or_else(|| Error::invalid(&name, "missing operand x"))?;
                let mut values = Vec::with_capacity(node.inputs.len().saturating_sub(1));
                for &v in &node.inputs[1..] {
                    let t = known.get(&v).ok_or_else(|| {
                        Error::invalid(&name, format!("node {n}: size operand {v} is not computed from shapes"))
                    })?;
                    values.push(scalar_i64(&name, v, t)?);
                }
                let (dims, new_names) = dynamic::dynamic_reshape_dims(&name, specs, x, &values)?;
                for (axis, j) in new_names {
                    b.insert(axis, dims[j]);
                }
                let out = Shape::new(x.dtype, &dims);
                if out.size() != x.size() || out.check_limits().is_err() {
                    return Err(Error::invalid(&name, format!("node {n}: cannot reshape {x} to {out}")));
                }
                s.nodes[n.0 as usize].inputs.truncate(1);
                (Op::Reshape { dims }, vec![out])
            }
            op => {
                let dynamic = static_in.iter().chain(&static_out).any(|s| s.is_dynamic());
                if dynamic {
                    let op = dynamic::resolve_op(op, &static_in, &in_refs, &static_out, &b)?.into_owned();
                    let outs = dynamic::output_shapes(m, &op, &in_refs, &static_out, &b)?;
                    (op, outs)
                } else {
                    (op.clone(), static_out.iter().map(|&s| s.clone()).collect())
                }
            }
        };
        // An iota over a dynamic axis (positions `0..seq`, a `Range` from an ONNX export) is
        // shape data once the axis has a size: made a constant when small, so that folding
        // takes what it feeds (a slice of a position table as a gather by `start + iota`).
        // The egg rules that read iotas (causal masks) already ran on the dynamic module.
        let (op, outs) = match op {
            Op::Iota { .. }
                if static_out.iter().any(|s| s.is_dynamic())
                    && outs.iter().all(|o| o.size().is_some_and(|e| e <= MAX_SHAPE_VALUE_ELEMENTS)) =>
            {
                match reference::eval(&op, &[], &outs) {
                    Ok(mut t) if t.len() == 1 => {
                        let t = t.remove(0);
                        (Op::Constant(ConstData(Arc::new(t.bytes().to_vec()))), outs)
                    }
                    _ => (op, outs),
                }
            }
            other => (other, outs),
        };
        // Keep the values shape computations need (only those: no weight is read).
        if from_shapes.get(node.outputs.first().map_or(usize::MAX, |v| v.0 as usize)).copied().unwrap_or(false)
            && outs.iter().all(|o| o.size().is_some_and(|e| e <= MAX_SHAPE_VALUE_ELEMENTS))
        {
            let result = match &op {
                Op::Constant(c) => {
                    Some(vec![Tensor { shape: outs[0].clone(), data: Arc::new(AlignedBytes::from_shared(&c.0)) }])
                }
                op => {
                    let args: Option<Vec<Tensor>> = node.inputs.iter().map(|v| known.get(v).cloned()).collect();
                    args.and_then(|args| reference::eval(op, &args, &outs).ok())
                }
            };
            if let Some(result) = result {
                for (&o, t) in node.outputs.iter().zip(result) {
                    known.insert(o, t);
                }
            }
        }
        for (&o, shape) in node.outputs.iter().zip(outs) {
            s.values[o.0 as usize].shape = shape;
        }
        if let Op::Constant(_) = op {
            s.nodes[n.0 as usize].inputs.clear();
        }
        s.nodes[n.0 as usize].op = op;
    }
    Ok(s)
}

/// A Constant op of `data` and its result shape.
fn constant(data: &[i32], shape: Shape) -> (Op, Vec<Shape>) {
    let bytes: Vec<u8> = data.iter().flat_map(|d| d.to_le_bytes()).collect();
    (Op::Constant(ConstData(Arc::new(bytes))), vec![shape])
}

/// A scalar integer shape value as `i64`.
fn scalar_i64(op: &str, v: ValueId, t: &Tensor) -> Result<i64> {
    let bytes = t.bytes();
    let wrong = || Error::invalid(op, format!("size operand {v} must be an integer scalar, got {}", t.shape));
    if t.len() != 1 {
        return Err(wrong());
    }
    Ok(match t.shape.dtype {
        DType::Int8 => bytes[0] as i8 as i64,
        DType::Uint8 => bytes[0] as i64,
        DType::Int16 => i16::from_le_bytes([bytes[0], bytes[1]]) as i64,
        DType::Uint16 => u16::from_le_bytes([bytes[0], bytes[1]]) as i64,
        DType::Int32 => i32::from_le_bytes(bytes[..4].try_into().map_err(|_| wrong())?) as i64,
        DType::Uint32 => u32::from_le_bytes(bytes[..4].try_into().map_err(|_| wrong())?) as i64,
        DType::Int64 => i64::from_le_bytes(bytes[..8].try_into().map_err(|_| wrong())?),
        DType::Uint64 => i64::try_from(u64::from_le_bytes(bytes[..8].try_into().map_err(|_| wrong())?))
            .map_err(|_| Error::invalid(op, format!("size operand {v} is too large")))?,
        _ => return Err(wrong()),
    })
}
