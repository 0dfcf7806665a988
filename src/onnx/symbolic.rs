//! Symbolic shape values at import: the small integer tensors exporters compute from shapes
//! (`Shape`, then `Gather`/`Slice`/`Unsqueeze`/`Concat`/`Cast`, arithmetic, `Equal`/`Where` on
//! them) are tracked element by element as polynomials over the model's named dynamic axes, so
//! that the `Reshape`, `Expand`, `ConstantOfShape`, `Range` and `Slice` they feed produce axes
//! carrying those same names (and shapes verify), while what only depends on static dims folds
//! into constants. Each tracked value is also materialised as a run-time scalar computation
//! (`DynamicDimensionSize` and integer arithmetic) for the consumers that read it as data.

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::op::{BinaryOp, Op};
use crate::ir::shape::Shape;

use super::graph::{Ctx, Node, scalar_bytes};
use super::poly::{Poly, SymVal};
use super::tensor::dtype_from_onnx;

/// The elements of `v` as polynomials: a tracked value, or a small constant integer tensor.
pub(crate) fn ints(ctx: &Ctx<'_>, v: ValueId) -> Option<Vec<Poly>> {
    sym(ctx, v).map(|s| s.elems)
}

fn sym(ctx: &Ctx<'_>, v: ValueId) -> Option<SymVal> {
    if let Some(s) = ctx.sym.get(&v) {
        // Run-time sizes are read from values of the main function only.
        return (ctx.func == ctx.m.main).then(|| s.clone());
    }
    let s = ctx.shape(v);
    if s.rank() > 1 {
        return None;
    }
    let vals = if s.dtype == DType::Bool {
        ctx.known(v)?.iter().map(|&b| i64::from(b != 0)).collect()
    } else {
        ctx.known_i64s(v)?
    };
    SymVal::new(s.dtype, s.dims.clone(), vals.into_iter().map(Poly::constant).collect())
}

/// Imports node `n` symbolically when it computes on tracked values (at least one operand
/// tracked and not constant, or the `Shape`/`Size` of a value with dynamic axes): constants
/// when the result no longer depends on dynamic sizes, else the run-time computation of the
/// tracked result. `None` leaves the node to its handler.
pub(crate) fn import_node(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Option<Vec<ValueId>>> {
    if ctx.func != ctx.m.main || n.num_outputs() != 1 {
        return Ok(None);
    }
    let Some(out) = eval(ctx, n)? else { return Ok(None) };
    let v = if out.is_const() { constant(ctx, &out)? } else { materialise(ctx, &out)? };
    if !out.is_const() {
        ctx.sym.insert(v, out);
    }
    Ok(Some(vec![v]))
}

/// The tracked result of `n`, or `None`.
fn eval(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Option<SymVal>> {
    let op = n.proto.op_type();
    if matches!(op, "Shape" | "Size") {
        let x = n.input(0)?;
        let s = ctx.shape(x).clone();
        if !s.is_dynamic() {
            return Ok(None);
        }
        let dims: Option<Vec<Poly>> = (0..s.rank()).map(|i| Poly::of_dim(&s, i)).collect();
        let Some(dims) = dims else { return Ok(None) };
        ctx.note_axes(x);
        if op == "Size" {
            let mut p = Poly::constant(1);
            for d in &dims {
                let Some(q) = p.mul(d) else { return Ok(None) };
                p = q;
            }
            return Ok(SymVal::new(DType::Int64, vec![], vec![p]));
        }
        let r = s.rank() as i64;
        let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
        let start = clamp(n.attr_i_or("start", 0)?);
        let end = clamp(n.attr_i_or("end", r)?).max(start);
        let part = dims[start as usize..end as usize].to_vec();
        return Ok(SymVal::new(DType::Int64, vec![part.len() as i64], part));
    }
    let ins: Vec<Option<SymVal>> = n.inputs.iter().map(|v| v.and_then(|v| sym(ctx, v))).collect();
    // Only nodes reading a tracked, non-constant value; the rest fold as usual.
    if !n.inputs.iter().flatten().any(|v| ctx.sym.contains_key(v)) {
        return Ok(None);
    }
    let arg = |i: usize| ins.get(i).cloned().flatten();
    let Some(x) = arg(0) else { return Ok(None) };
    Ok(match op {
        "Identity" => Some(x),
        "Cast" => {
            let Some(to) = n.attr_i("to")?.and_then(|t| i32::try_from(t).ok()).and_then(dtype_from_onnx) else {
                return Ok(None);
            };
            // Integer to integer keeps the sizes (they are small and non-negative).
            (to.is_int() && !to.is_packed()).then_some(SymVal { dtype: to, ..x })
        }
        "Gather" => {
            let idx = n.input(1).ok().and_then(|v| ctx.known_i64s(v).map(|k| (k, ctx.shape(v).dims.clone())));
            let axis = n.attr_i_or("axis", 0)?;
            match idx {
                Some((idx, idims)) if x.dims.len() == 1 && (axis == 0 || axis == -1) && idims.len() <= 1 => {
                    let len = x.elems.len() as i64;
                    let picked: Option<Vec<Poly>> = idx
                        .iter()
                        .map(|&i| {
                            let i = if i < 0 { i + len } else { i };
                            (0..len).contains(&i).then(|| x.elems[i as usize].clone())
                        })
                        .collect();
                    picked.and_then(|p| SymVal::new(x.dtype, idims, p))
                }
                _ => None,
            }
        }
        "Unsqueeze" | "Squeeze" | "Reshape" | "Flatten" => {
            // Same elements, new rank ≤ 1 (the handler checks the axes / shape).
            let len = x.elems.len() as i64;
            let out_dims = match op {
                "Unsqueeze" if x.dims.is_empty() => vec![1],
                "Squeeze" if x.dims == [1] => vec![],
                "Reshape" => match ctx.known_i64s(n.input(1)?).as_deref() {
                    Some([d]) if *d == -1 || *d == len => vec![len],
                    Some([]) if len == 1 => vec![],
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            };
            if op == "Reshape" {
                n.ignore_attrs(&["allowzero"]);
            } else {
                n.ignore_attrs(&["axes"]);
            }
            Some(SymVal { dims: out_dims, ..x })
        }
        "Slice" if x.dims.len() == 1 && n.opset >= 10 => {
            let len = x.elems.len() as i64;
            let get = |i: usize, d: i64| match n.opt_input(i) {
                None => Some(d),
                Some(v) => match ctx.known_i64s(v).as_deref() {
                    Some([k]) => Some(*k),
                    _ => None,
                },
            };
            match (get(1, 0), get(2, len), get(3, 0), get(4, 1)) {
                (Some(s), Some(e), Some(a), Some(1)) if a == 0 || a == -1 => {
                    let norm = |v: i64| if v < 0 { v.saturating_add(len) } else { v }.clamp(0, len);
                    let (s, e) = (norm(s), norm(e).max(norm(s)));
                    let part = x.elems[s as usize..e as usize].to_vec();
                    SymVal::new(x.dtype, vec![part.len() as i64], part)
                }
                _ => None,
            }
        }
        "Concat" => {
            let all: Option<Vec<SymVal>> = (0..n.num_inputs()).map(arg).collect();
            match all {
                Some(all) if all.iter().all(|s| s.dims.len() == 1) => {
                    n.ignore_attrs(&["axis"]);
                    let elems: Vec<Poly> = all.into_iter().flat_map(|s| s.elems).collect();
                    SymVal::new(x.dtype, vec![elems.len() as i64], elems)
                }
                _ => None,
            }
        }
        "Add" | "Sub" | "Mul" | "Div" | "Equal" => {
            let Some(y) = arg(1) else { return Ok(None) };
            let Some((dims, pairs)) = broadcast(&[&x, &y]) else { return Ok(None) };
            let mut elems = Vec::with_capacity(pairs.len());
            for p in &pairs {
                let (a, b) = (&p[0], &p[1]);
                let r = match op {
                    "Add" => a.add(b),
                    "Sub" => a.sub(b),
                    "Mul" => a.mul(b),
                    "Div" => a.div(b),
                    _ => a.equals(b).map(|e| Poly::constant(i64::from(e))),
                };
                let Some(r) = r else { return Ok(None) };
                elems.push(r);
            }
            let dtype = if op == "Equal" { DType::Bool } else { x.dtype };
            if !x.dtype.is_int() || x.dtype != y.dtype {
                return Ok(None);
            }
            SymVal::new(dtype, dims, elems)
        }
        "Where" => {
            let (Some(a), Some(b)) = (arg(1), arg(2)) else { return Ok(None) };
            if x.dtype != DType::Bool || a.dtype != b.dtype {
                return Ok(None);
            }
            let Some((dims, triples)) = broadcast(&[&x, &a, &b]) else { return Ok(None) };
            let mut elems = Vec::with_capacity(triples.len());
            for t in triples {
                match t[0].as_const() {
                    Some(c) => elems.push(if c != 0 { t[1].clone() } else { t[2].clone() }),
                    None => return Ok(None),
                }
            }
            SymVal::new(a.dtype, dims, elems)
        }
        _ => None,
    })
}

/// NumPy broadcasting of rank ≤ 1 operands: the output dims and, per output element, the
/// operands' elements.
fn broadcast(vals: &[&SymVal]) -> Option<(Vec<i64>, Vec<Vec<Poly>>)> {
    let len = vals.iter().map(|v| v.elems.len()).max()?;
    if vals.iter().any(|v| v.elems.len() != len && v.elems.len() != 1) {
        return None;
    }
    let dims = if vals.iter().any(|v| v.dims.len() == 1) { vec![len as i64] } else { vec![] };
    let rows = (0..len).map(|i| vals.iter().map(|v| v.elems[if v.elems.len() == 1 { 0 } else { i }].clone()).collect());
    Some((dims, rows.collect()))
}

/// A constant holding the (constant) elements of `s`.
fn constant(ctx: &mut Ctx<'_>, s: &SymVal) -> Result<ValueId> {
    let mut bytes = Vec::with_capacity(s.elems.len() * s.dtype.size());
    for p in &s.elems {
        let c = p.as_const().unwrap_or(0);
        bytes.extend(
            scalar_bytes(s.dtype, c as f64)
                .ok_or_else(|| Error::not_implemented("onnx", format!("a {} shape constant", s.dtype)))?,
        );
    }
    ctx.constant(Shape::new(s.dtype, &s.dims), bytes)
}

/// The run-time computation of a tracked value.
fn materialise(ctx: &mut Ctx<'_>, s: &SymVal) -> Result<ValueId> {
    let mut parts = Vec::with_capacity(s.elems.len());
    for p in &s.elems {
        let v = scalar(ctx, p)?;
        parts.push(if s.dims.is_empty() { v } else { ctx.emit1(Op::Reshape { dims: vec![1] }, &[v])? });
    }
    let v = match parts.as_slice() {
        [v] => *v,
        [] => ctx.const_i64(&[], &[0])?,
        _ => ctx.emit1(Op::Concatenate { axis: 0 }, &parts)?,
    };
    super::ops::common::cast(ctx, v, s.dtype)
}

/// An int64 scalar computing `p` at run time from the sizes of the axes it names.
pub(crate) fn scalar(ctx: &mut Ctx<'_>, p: &Poly) -> Result<ValueId> {
    let mut sum: Option<ValueId> = None;
    for (k, &c) in p.terms() {
        let mut term = if k.is_empty() || c != 1 { Some(ctx.const_i64(&[c], &[])?) } else { None };
        for name in k {
            let &(src, axis) = ctx.axis_sources.get(name).ok_or_else(|| {
                Error::invalid("onnx", format!("no value with the dynamic axis {name:?} to read its size from"))
            })?;
            let d = ctx.emit1(Op::DynamicDimensionSize { axis }, &[src])?;
            let d = super::ops::common::cast(ctx, d, DType::Int64)?;
            term = Some(match term {
                None => d,
                Some(t) => ctx.emit1(Op::Binary(BinaryOp::Mul), &[t, d])?,
            });
        }
        let term = term.ok_or_else(|| Error::invalid("onnx", "empty polynomial term"))?;
        sum = Some(match sum {
            None => term,
            Some(s) => ctx.emit1(Op::Binary(BinaryOp::Add), &[s, term])?,
        });
    }
    match sum {
        Some(s) => Ok(s),
        None => ctx.const_i64(&[0], &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poly_arithmetic_and_names() {
        let (a, b) = (Poly::var("batch"), Poly::var("seq"));
        let ab = a.mul(&b).unwrap();
        assert_eq!(ab.to_string(), "batch*seq");
        assert_eq!(
            ab.mul(&Poly::constant(6)).unwrap().div(&a.mul(&Poly::constant(3)).unwrap()),
            b.mul(&Poly::constant(2))
        );
        assert_eq!(b.sub(&b).unwrap().as_const(), Some(0));
        assert_eq!(a.add(&b).unwrap().add(&Poly::constant(2)).unwrap().axis_name().as_deref(), Some("=batch+seq+2"));
        assert_eq!(b.axis_name().as_deref(), Some("seq"));
        assert_eq!(ab.axis_name(), None);
        assert_eq!(Poly::constant(7).div(&Poly::constant(-2)), Some(Poly::constant(-3)));
        assert_eq!(b.div(&Poly::constant(2)), None);
        assert_eq!(b.equals(&Poly::constant(-1)), Some(false));
        assert_eq!(b.equals(&Poly::constant(4)), None);
        assert_eq!(b.equals(&b), Some(true));
        let s = Shape::with_names(DType::Float32, &[-1, 4], &["=a+seq+3", ""]).unwrap();
        let p = Poly::of_dim(&s, 0).unwrap();
        assert_eq!(p.axis_name().as_deref(), Some("=a+seq+3"));
        assert_eq!(Poly::of_dim(&s, 1), Some(Poly::constant(4)));
    }
}
