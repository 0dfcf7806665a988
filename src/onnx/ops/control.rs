//! Control flow: `If` and `Loop` bodies become IR closures run by `If` and `While`. An `If`
//! whose condition is known at import is replaced by the chosen branch.

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, ValueId};
use crate::ir::op::{BinaryOp, CompareOp, Op};
use crate::ir::shape::Shape;

use super::Handler;
use super::common::not_constant;
use crate::onnx::graph::{Ctx, Node};
use crate::onnx::proto::GraphProto;

/// Op types mapped here.
pub(super) const OPS: &[&str] = &["If", "Loop"];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    Some(match op {
        "If" => if_,
        "Loop" => loop_,
        _ => return None,
    })
}

/// Imports `g` as a closure of the current function taking `params` (name, shape) and returns
/// the closure and its output values.
fn closure(ctx: &mut Ctx<'_>, g: &GraphProto, params: &[(String, Shape)]) -> Result<(FuncId, Vec<ValueId>)> {
    let parent = ctx.func;
    let f = ctx.m.add_function(None, Some(parent));
    let mut bound = Vec::with_capacity(params.len());
    for (name, shape) in params {
        let v = ctx.m.add_param(f, name, shape.clone());
        bound.push((name.clone(), v));
    }
    ctx.func = f;
    let outs = ctx.import_body(g, &bound);
    ctx.func = parent;
    let outs = outs?;
    ctx.m.func_mut(f).outputs = Some(outs.clone());
    Ok((f, outs))
}

/// A scalar view of a one-element Bool condition.
fn scalar_bool(ctx: &mut Ctx<'_>, n: &Node<'_>, v: ValueId, what: &str) -> Result<ValueId> {
    let s = ctx.shape(v).clone();
    if s.dtype != DType::Bool {
        return Err(n.invalid(format!("{what} has type {}, expected bool", s.dtype)));
    }
    if s.is_scalar() {
        return Ok(v);
    }
    if s.is_dynamic() || s.num_elements() != 1 {
        return Err(n.invalid(format!("{what} has shape {s}, expected a single element")));
    }
    ctx.emit1(Op::Reshape { dims: vec![] }, &[v])
}

/// `If(cond)` with `then_branch` / `else_branch` graphs (no inputs; they read outer values).
fn if_(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let then_g = n.attr_graph("then_branch")?.ok_or_else(|| n.invalid("missing then_branch"))?;
    let else_g = n.attr_graph("else_branch")?.ok_or_else(|| n.invalid("missing else_branch"))?;
    let cond = scalar_bool(ctx, n, n.input(0)?, "the condition")?;
    if let Some(b) = ctx.known(cond) {
        // Known at import (shape-dependent branches): keep only the branch taken.
        let g = if b.first().copied().unwrap_or(0) != 0 { then_g } else { else_g };
        return ctx.import_body(g, &[]);
    }
    let (tf, touts) = closure(ctx, then_g, &[])?;
    let (ef, eouts) = closure(ctx, else_g, &[])?;
    if touts.len() != eouts.len() {
        return Err(n.invalid(format!("then_branch has {} outputs, else_branch {}", touts.len(), eouts.len())));
    }
    for (k, (&a, &b)) in touts.iter().zip(&eouts).enumerate() {
        if ctx.shape(a) != ctx.shape(b) {
            return Err(n.unsupported(format!(
                "output {k} has shape {} in then_branch and {} in else_branch (branches must agree)",
                ctx.shape(a),
                ctx.shape(b)
            )));
        }
    }
    ctx.emit(Op::If { then_branch: tf, else_branch: ef }, &[cond])
}

/// `Loop(M?, cond?, v_initial...)`: the body maps `(iteration, cond, v...)` to
/// `(cond, v..., scan...)`. Loop-carried values keep their shapes. Scan outputs need a trip
/// count known at import and a body that cannot stop early.
fn loop_(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let body = n.attr_graph("body")?.ok_or_else(|| n.invalid("missing body"))?;
    if body.input.len() < 2 || body.input.len() != n.num_inputs().max(2) {
        return Err(n.invalid(format!(
            "the body takes {} inputs; the node gives {} (expected iteration, condition and one per carried value)",
            body.input.len(),
            n.num_inputs()
        )));
    }
    let n_carried = body.input.len() - 2;
    if body.output.len() < 1 + n_carried {
        return Err(n.invalid(format!("the body returns {} outputs for {n_carried} carried values", body.output.len())));
    }
    let n_scan = body.output.len() - 1 - n_carried;
    let trip = match n.opt_input(0) {
        Some(m) => {
            let s = ctx.shape(m).clone();
            if s.dtype != DType::Int64 || s.num_elements() != 1 || s.is_dynamic() {
                return Err(n.invalid(format!("the trip count has shape {s}, expected one int64")));
            }
            Some(if s.is_scalar() { m } else { ctx.emit1(Op::Reshape { dims: vec![] }, &[m])? })
        }
        None => None,
    };
    let cond0 = match n.opt_input(1) {
        Some(c) => scalar_bool(ctx, n, c, "the condition")?,
        None => ctx.scalar(DType::Bool, 1.0)?,
    };
    let carried: Vec<ValueId> = (0..n_carried).map(|i| n.input(2 + i)).collect::<Result<_>>()?;
    let known_trip = trip.and_then(|t| ctx.known_i64s(t)).map(|v| v[0]);

    // State: (i, cond, carried..., scan buffers...).
    let zero = ctx.const_i64(&[0], &[])?;
    let mut state = vec![zero, cond0];
    state.extend(&carried);
    let names: Vec<String> = body.input.iter().map(|i| i.name().to_string()).collect();
    let mut params: Vec<(String, Shape)> =
        vec![(names[0].clone(), Shape::scalar(DType::Int64)), (names[1].clone(), Shape::scalar(DType::Bool))];
    for (k, &v) in carried.iter().enumerate() {
        params.push((names[2 + k].clone(), ctx.shape(v).clone()));
    }

    // Body closure: import the ONNX body, then append i + 1 and the scan-buffer updates.
    let parent = ctx.func;
    let bf = ctx.m.add_function(None, Some(parent));
    let mut bparams = Vec::new();
    for (name, shape) in &params {
        bparams.push((name.clone(), ctx.m.add_param(bf, name, shape.clone())));
    }
    ctx.func = bf;
    let result = (|| -> Result<(Vec<ValueId>, Vec<ValueId>)> {
        let outs = ctx.import_body(body, &bparams)?;
        let cond_out = scalar_bool(ctx, n, outs[0], "the body's condition output")?;
        if n_scan > 0 {
            if known_trip.is_none() {
                // The output length would be dynamic.
                return Err(match trip {
                    Some(_) => not_constant(ctx, n, 0, "M, the trip count", "a constant (the loop has scan outputs)"),
                    None => n.unsupported("scan outputs need a trip count (the output length would be dynamic)"),
                });
            }
            // The body must not stop early: its condition output is the condition input.
            if cond_out != bparams[1].1 || ctx.known(cond0).is_none_or(|b| b[0] == 0) {
                return Err(n.unsupported("scan outputs with a loop that may stop early (dynamic output length)"));
            }
        }
        for k in 0..n_carried {
            let (a, b) = (ctx.shape(outs[1 + k]).clone(), params[2 + k].1.clone());
            if a != b {
                return Err(n.unsupported(format!(
                    "carried value {k} changes shape from {b} to {a} (loop-carried shapes must be fixed)"
                )));
            }
        }
        let one = ctx.const_i64(&[1], &[])?;
        let next = ctx.emit1(Op::Binary(BinaryOp::Add), &[bparams[0].1, one])?;
        let mut ret = vec![next, cond_out];
        ret.extend_from_slice(&outs[1..1 + n_carried]);
        Ok((ret, outs[1 + n_carried..].to_vec()))
    })();
    ctx.func = parent;
    let (mut ret, scans) = result?;

    // Scan outputs: one buffer [M, ...] per scan value, written at row i.
    let m = known_trip.unwrap_or(0);
    let mut scan_bufs = Vec::new();
    if n_scan > 0 {
        if m < 0 {
            return Err(n.invalid(format!("negative trip count {m}")));
        }
        for &s in &scans {
            let es = ctx.shape(s).clone();
            let mut dims = vec![m];
            dims.extend(&es.dims);
            let bshape = Shape::new(es.dtype, &dims);
            let bytes = bshape.byte_size().ok_or_else(|| n.invalid("scan output size overflows"))?;
            let buf = ctx.constant(bshape.clone(), vec![0u8; bytes])?;
            scan_bufs.push(buf);
        }
        // Add the buffers as state: body params and updates.
        ctx.func = bf;
        let r = (|| -> Result<()> {
            let mut rows = Vec::new();
            for (k, &s) in scans.iter().enumerate() {
                let bshape = ctx.shape(scan_bufs[k]).clone();
                let p = ctx.m.add_param(bf, &format!("scan{k}"), bshape);
                let mut dims = vec![1];
                dims.extend(ctx.shape(s).dims.clone());
                let row = ctx.emit1(Op::Reshape { dims }, &[s])?;
                let zero = ctx.const_i64(&[0], &[])?;
                let mut starts = vec![bparams[0].1];
                starts.extend(std::iter::repeat_n(zero, ctx.rank(s)));
                let mut ins = vec![p, row];
                ins.extend(starts);
                rows.push(ctx.emit1(Op::DynamicUpdateSlice, &ins)?);
            }
            ret.extend(rows);
            Ok(())
        })();
        ctx.func = parent;
        r?;
    }
    ctx.m.func_mut(bf).outputs = Some(ret);

    // Condition closure: cond && i < M.
    let cf = ctx.m.add_function(None, Some(parent));
    let mut cparams = Vec::new();
    for (name, shape) in &params {
        cparams.push(ctx.m.add_param(cf, name, shape.clone()));
    }
    for &b in &scan_bufs {
        let s = ctx.shape(b).clone();
        ctx.m.add_param(cf, "scan", s);
    }
    ctx.func = cf;
    let r = (|| -> Result<ValueId> {
        match trip {
            Some(t) => {
                let lt = ctx.emit1(Op::Compare { dir: CompareOp::LessThan, total_order: false }, &[cparams[0], t])?;
                ctx.emit1(Op::Binary(BinaryOp::LogicalAnd), &[cparams[1], lt])
            }
            None => Ok(cparams[1]),
        }
    })();
    ctx.func = parent;
    let c = r?;
    ctx.m.func_mut(cf).outputs = Some(vec![c]);

    state.extend(&scan_bufs);
    let outs = ctx.emit(Op::While { cond: cf, body: bf }, &state)?;
    let mut results: Vec<ValueId> = outs[2..2 + n_carried].to_vec();
    results.extend_from_slice(&outs[2 + n_carried..]);
    Ok(results)
}
