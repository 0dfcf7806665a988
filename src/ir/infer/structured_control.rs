//! Shape inference for control flow (Call, Sort, While, If; §4.11) and AllReduce (§4.13).
//!
//! Callee signatures are read from the module: parameter shapes, and output shapes once the
//! callee has returned.

use super::{check_reduce_dtype, kind_name};
use crate::bail;
use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module};
use crate::ir::op::ArithReduce;
use crate::ir::shape::Shape;

/// Whether a function is a named function or a closure, for checks and messages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Named,
    Closure,
}

/// Looks `f` up and returns its (parameter shapes, output shapes), checking that it exists, has
/// the expected kind and has returned. `role` names it in messages ("comparator", "body", …).
fn signature(op: &str, m: &Module, f: FuncId, role: &str, kind: Kind) -> Result<(Vec<Shape>, Vec<Shape>)> {
    if f.index() >= m.functions.len() {
        bail!(op, "{role} {f} does not exist");
    }
    let data = m.func(f);
    match kind {
        Kind::Closure if !data.is_closure() => {
            bail!(op, "{role} must be a closure (Function::closure), got named function {:?}", m.func_label(f))
        }
        Kind::Named if data.is_closure() => bail!(op, "{role} must be a named function, got {}", m.func_label(f)),
        Kind::Named if f == m.main => bail!(op, "{role} cannot be the main function"),
        _ => {}
    }
    let outputs = match m.output_shapes(f) {
        Ok(o) => o,
        Err(_) => bail!(op, "{role} {} has not returned yet (call return_ on it first)", m.func_label(f)),
    };
    Ok((m.param_shapes(f), outputs))
}

/// Checks that `got` equals `want` element by element (count and shapes).
fn same_shapes(op: &str, what_got: &str, got: &[Shape], what_want: &str, want: &[&Shape]) -> Result<()> {
    if got.len() != want.len() {
        bail!(op, "{what_got} has {} value(s) but {what_want} has {}", got.len(), want.len());
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != *w {
            bail!(op, "{what_got} {i} has shape {g} but {what_want} {i} has shape {w}");
        }
    }
    Ok(())
}

/// Requires exactly one scalar Bool output.
fn scalar_bool_output(op: &str, role: &str, outputs: &[Shape]) -> Result<()> {
    if outputs.len() != 1 || outputs[0] != Shape::scalar(DType::Bool) {
        let got: Vec<String> = outputs.iter().map(|s| s.to_string()).collect();
        bail!(op, "{role} must return one scalar Bool, returns [{}]", got.join(", "));
    }
    Ok(())
}

pub(super) fn call(op: &str, m: &Module, f: FuncId, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    let (params, outputs) = signature(op, m, f, "callee", Kind::Named)?;
    let label = format!("parameter of {}", m.func_label(f));
    if params.len() != inputs.len() {
        bail!(op, "{} takes {} input(s), {} given", m.func_label(f), params.len(), inputs.len());
    }
    same_shapes(op, &label, &params, "input", inputs)?;
    Ok(outputs)
}

pub(super) fn sort(op: &str, m: &Module, comparator: FuncId, axis: usize, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    let Some(first) = inputs.first() else { bail!(op, "needs at least one input") };
    for (i, s) in inputs.iter().enumerate() {
        if !s.equal_dimensions(first) {
            bail!(op, "input {i} {s} has dims different from input 0 {first}");
        }
        if !s.dtype.is_supported() || s.dtype.is_packed() {
            bail!(op, "input {i} has dtype {} which cannot be sorted", s.dtype);
        }
    }
    if axis >= first.rank() {
        bail!(op, "axis {axis} out of range for inputs of rank {}", first.rank());
    }
    let (params, outputs) = signature(op, m, comparator, "comparator", Kind::Closure)?;
    if params.len() != 2 * inputs.len() {
        bail!(
            op,
            "comparator takes {} parameter(s); {} inputs need {} scalar parameters (lhs0, rhs0, lhs1, rhs1, …)",
            params.len(),
            inputs.len(),
            2 * inputs.len()
        );
    }
    for (j, p) in params.iter().enumerate() {
        let want = Shape::scalar(inputs[j / 2].dtype);
        if *p != want {
            let side = if j % 2 == 0 { "lhs" } else { "rhs" };
            bail!(op, "comparator parameter {j} ({side}{}) is {p}, expected {want}", j / 2);
        }
    }
    scalar_bool_output(op, "comparator", &outputs)?;
    Ok(inputs.iter().map(|s| (*s).clone()).collect())
}

pub(super) fn while_(op: &str, m: &Module, cond: FuncId, body: FuncId, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    if inputs.is_empty() {
        bail!(op, "needs at least one state value");
    }
    let (cond_params, cond_out) = signature(op, m, cond, "cond", Kind::Closure)?;
    same_shapes(op, "cond parameter", &cond_params, "state value", inputs)?;
    scalar_bool_output(op, "cond", &cond_out)?;
    let (body_params, body_out) = signature(op, m, body, "body", Kind::Closure)?;
    same_shapes(op, "body parameter", &body_params, "state value", inputs)?;
    same_shapes(op, "body output", &body_out, "state value", inputs)?;
    Ok(inputs.iter().map(|s| (*s).clone()).collect())
}

pub(super) fn if_(op: &str, m: &Module, then_b: FuncId, else_b: FuncId, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    if inputs.len() != 1 || *inputs[0] != Shape::scalar(DType::Bool) {
        let got: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
        bail!(op, "takes exactly one operand, a scalar Bool predicate; got [{}]", got.join(", "));
    }
    let (then_params, then_out) = signature(op, m, then_b, "then branch", Kind::Closure)?;
    let (else_params, else_out) = signature(op, m, else_b, "else branch", Kind::Closure)?;
    if !then_params.is_empty() || !else_params.is_empty() {
        bail!(
            op,
            "branches take no parameters (use captured values); then has {}, else has {}",
            then_params.len(),
            else_params.len()
        );
    }
    let then_refs: Vec<&Shape> = then_out.iter().collect();
    same_shapes(op, "else branch output", &else_out, "then branch output", &then_refs)?;
    Ok(then_out)
}

pub(super) fn all_reduce(
    op: &str,
    kind: ArithReduce,
    replica_groups: &[Vec<usize>],
    inputs: &[&Shape],
) -> Result<Vec<Shape>> {
    if inputs.is_empty() {
        bail!(op, "needs at least one operand");
    }
    for (i, s) in inputs.iter().enumerate() {
        check_reduce_dtype(op, &format!("operand {i} of the {} reduction", kind_name(kind)), kind, s.dtype)?;
    }
    let mut seen: Vec<usize> = vec![];
    for (g, group) in replica_groups.iter().enumerate() {
        if group.is_empty() {
            bail!(op, "replica group {g} is empty");
        }
        for &d in group {
            if seen.contains(&d) {
                bail!(op, "device {d} appears in more than one replica group (or twice in group {g})");
            }
            seen.push(d);
        }
    }
    Ok(inputs.iter().map(|s| (*s).clone()).collect())
}
