//! Shape and data-movement operators: reshapes, transposes, slicing, concatenation, gathers
//! and scatters, padding, constants, and the shape-computing ops folded at import.

use crate::error::Result;
use crate::ir::module::ValueId;
use crate::ir::op::Op;

use super::common::{const_ints, static_dims};
use super::Handler;
use crate::onnx::graph::{Ctx, Node};

/// Op types mapped here.
pub(super) const OPS: &[&str] = &["Reshape", "Shape", "Constant"];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    Some(match op {
        "Reshape" => reshape,
        "Shape" => shape,
        "Constant" => constant,
        _ => return None,
    })
}

/// `Reshape(data, shape)`: 0 copies the input dim (unless `allowzero`), -1 is inferred.
fn reshape(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let spec = const_ints(ctx, n, 1, "shape")?;
    let allowzero = n.attr_i_or("allowzero", 0)? != 0;
    let src = static_dims(ctx, n, x)?;
    let total: i64 = src.iter().product();
    let mut dims = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            0 if !allowzero => dims.push(*src.get(i).ok_or_else(|| n.invalid(format!("shape {spec:?}: 0 at axis {i} has no input dim")))?),
            -1 if infer.is_none() => {
                infer = Some(i);
                dims.push(1);
            }
            d if d < 0 => return Err(n.invalid(format!("shape {spec:?}: invalid dim {d}"))),
            d => dims.push(d),
        }
    }
    if let Some(i) = infer {
        let known: i64 = dims.iter().product();
        if known == 0 || total % known != 0 {
            return Err(n.invalid(format!("cannot reshape {src:?} to {spec:?}")));
        }
        dims[i] = total / known;
    }
    Ok(vec![ctx.emit1(Op::Reshape { dims }, &[x])?])
}

/// `Shape(data)` with optional `start`/`end`: an int64 constant when the dims are static.
fn shape(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = static_dims(ctx, n, x)?;
    let r = dims.len() as i64;
    let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
    let start = clamp(n.attr_i_or("start", 0)?);
    let end = clamp(n.attr_i_or("end", r)?);
    let part: Vec<i64> = if start < end { dims[start as usize..end as usize].to_vec() } else { vec![] };
    Ok(vec![ctx.const_i64(&part, &[part.len() as i64])?])
}

/// `Constant` with one of its value attributes.
fn constant(ctx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>> {
    if let Some(t) = n.attr_tensor("value")? {
        let mut t = t.clone();
        return Ok(vec![ctx.initializer(&mut t)?]);
    }
    if let Some(v) = n.attr_f("value_float")? {
        return Ok(vec![ctx.scalar(crate::ir::dtype::DType::Float32, v as f64)?]);
    }
    if let Some(v) = n.attr_i("value_int")? {
        return Ok(vec![ctx.const_i64(&[v], &[])?]);
    }
    if let Some(v) = n.attr_floats("value_floats")? {
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let shape = crate::ir::shape::Shape::new(crate::ir::dtype::DType::Float32, &[v.len() as i64]);
        return Ok(vec![ctx.constant(shape, bytes)?]);
    }
    if let Some(v) = n.attr_ints("value_ints")? {
        return Ok(vec![ctx.const_i64(&v, &[v.len() as i64])?]);
    }
    n.ignore_attrs(&["sparse_value", "value_string", "value_strings"]);
    Err(n.unsupported("only tensor, float(s) and int(s) values are supported"))
}
