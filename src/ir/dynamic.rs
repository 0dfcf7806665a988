//! Concrete shapes for named dynamic axes: axis-name bindings, op attributes made concrete from
//! the operands' concrete shapes, and shape inference re-run on them. The interpreter uses it at
//! run time; the jit's specialisation pass (`passes::specialize`) at compile time.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::op::{Op, ReshapeDim};
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// Axis name → concrete size, for one execution (and the function scopes inside it), or one
/// specialisation.
pub type Bindings = HashMap<String, i64>;

/// The size of a dynamic axis called `name`: a bound name, or a symbolic sum `"=a+b+10"`.
pub fn resolve_name(op: &str, name: &str, b: &Bindings) -> Result<i64> {
    if let Some(b_) = b.get(name) {
        return Ok(*b_);
    }
    if let Some(sum) = name.strip_prefix('=') {
        let mut total = 0i64;
        for term in sum.split('+').map(str::trim) {
            let v = match term.parse::<i64>() {
                Ok(v) => v,
                Err(_) => *b.get(term).ok_or_else(|| {
                    Error::invalid(op, format!("dynamic axis {name:?}: term {term:?} is not bound by any input"))
                })?,
            };
            total =
                total.checked_add(v).ok_or_else(|| Error::invalid(op, format!("dynamic axis {name:?} overflows")))?;
        }
        return Ok(total);
    }
    Err(Error::invalid(op, format!("dynamic axis {name:?} is not bound by any input")))
}

/// `s` with every dynamic dim replaced by its binding, without axis names.
pub fn resolve_shape(op: &str, s: &Shape, b: &Bindings) -> Result<Shape> {
    let mut dims = s.dims.clone();
    for (i, d) in dims.iter_mut().enumerate() {
        if *d == DYNAMIC_DIM {
            *d = resolve_name(op, s.axis_name(i), b)?;
        }
    }
    Ok(Shape::new(s.dtype, &dims))
}

/// Binds the names of the dynamic axes of `static_shape` to the dims of `concrete`. A name
/// already bound to another size is an error naming `what` and the axis.
pub fn bind(static_shape: &Shape, concrete: &Shape, what: &str, b: &mut Bindings) -> Result<()> {
    if static_shape.rank() != concrete.rank() {
        return Err(Error::invalid("execute", format!("{what}: expects {static_shape}, got {concrete}")));
    }
    for (k, (&s, &c)) in static_shape.dims.iter().zip(&concrete.dims).enumerate() {
        if s != DYNAMIC_DIM {
            continue;
        }
        let name = static_shape.axis_name(k);
        match b.get(name) {
            Some(&prev) if prev != c => {
                return Err(Error::invalid(
                    "execute",
                    format!("{what}: axis {k} ({name:?}) has size {c}, but {name:?} is already bound to {prev}"),
                ));
            }
            _ => {
                b.insert(name.to_string(), c);
            }
        }
    }
    Ok(())
}

/// The dims of the dynamic axes of `static_shape`, read from `concrete`, in order.
fn dynamic_dims_of(static_shape: &Shape, concrete: &Shape) -> Vec<i64> {
    static_shape.dims.iter().zip(&concrete.dims).filter(|(s, _)| **s == DYNAMIC_DIM).map(|(_, &c)| c).collect()
}

/// `op` with its dynamic attributes (`-1` dims in shapes, reshape dims, slice limits) made
/// concrete from the operands and the bindings. `static_in`/`static_out` are the build-time
/// shapes of the node's operands and results.
pub fn resolve_op<'a>(
    op: &'a Op,
    static_in: &[&Shape],
    inputs: &[&Shape],
    static_out: &[&Shape],
    b: &Bindings,
) -> Result<Cow<'a, Op>> {
    let name = op.op_type().to_string();
    Ok(match op {
        Op::BroadcastInDim { shape, axes } if shape.is_dynamic() => {
            let (Some(sx), Some(x)) = (static_in.first(), inputs.first()) else {
                return Err(Error::invalid(&name, "missing operand x"));
            };
            let mut dims = shape.dims.clone();
            for (j, d) in dims.iter_mut().enumerate() {
                if *d != DYNAMIC_DIM {
                    continue;
                }
                // A dynamic operand axis maps onto this axis: take its concrete size; else the
                // axis is new (or broadcast from 1) and its name must be bound.
                match axes.iter().position(|&a| a == j) {
                    Some(i) if sx.dims.get(i) == Some(&DYNAMIC_DIM) => {
                        *d = x.dims.get(i).copied().unwrap_or(DYNAMIC_DIM);
                    }
                    _ => *d = resolve_name(&name, shape.axis_name(j), b)?,
                }
            }
            Cow::Owned(Op::BroadcastInDim { shape: Shape::new(shape.dtype, &dims), axes: axes.clone() })
        }
        Op::Iota { shape, axis } if shape.is_dynamic() => {
            Cow::Owned(Op::Iota { shape: resolve_shape(&name, shape, b)?, axis: *axis })
        }
        Op::RngBitGenerator { shape } if shape.is_dynamic() => {
            Cow::Owned(Op::RngBitGenerator { shape: resolve_shape(&name, shape, b)? })
        }
        Op::Reshape { dims } if dims.iter().any(|&d| d < 0) => {
            Cow::Owned(Op::Reshape { dims: reshape_dims(&name, dims, static_in, inputs, static_out, b)? })
        }
        Op::Slice { starts, limits, strides } if limits.iter().any(|&l| l < 0) => {
            let (Some(sx), Some(x)) = (static_in.first(), inputs.first()) else {
                return Err(Error::invalid(&name, "missing operand x"));
            };
            let mut limits = limits.clone();
            for (i, l) in limits.iter_mut().enumerate() {
                // On a dynamic axis a limit of -1 means "to the end".
                if *l == -1 && sx.dims.get(i) == Some(&DYNAMIC_DIM) {
                    *l = x.dims.get(i).copied().unwrap_or(-1);
                }
            }
            Cow::Owned(Op::Slice { starts: starts.clone(), limits, strides: strides.clone() })
        }
        Op::DynamicSlice { sizes } if sizes.iter().any(|&s| s < 0) => {
            let out = static_out.first().ok_or_else(|| Error::invalid(&name, "missing output"))?;
            let resolved = resolve_shape(&name, out, b)?;
            Cow::Owned(Op::DynamicSlice { sizes: resolved.dims })
        }
        _ => Cow::Borrowed(op),
    })
}

/// Concrete dims of a Reshape whose target has dynamic (`-1`) entries: the k-th dynamic target
/// dim takes the size of the k-th dynamic operand axis (names map in order); failing that, the
/// output axis name's binding; failing that, the one remaining dim is inferred from the count.
fn reshape_dims(
    name: &str,
    dims: &[i64],
    static_in: &[&Shape],
    inputs: &[&Shape],
    static_out: &[&Shape],
    b: &Bindings,
) -> Result<Vec<i64>> {
    let (Some(sx), Some(x)) = (static_in.first(), inputs.first()) else {
        return Err(Error::invalid(name, "missing operand x"));
    };
    let from_input = dynamic_dims_of(sx, x);
    let n_dyn = dims.iter().filter(|&&d| d < 0).count();
    let mut out = dims.to_vec();
    if from_input.len() == n_dyn {
        let mut it = from_input.into_iter();
        for d in out.iter_mut().filter(|d| **d < 0) {
            *d = it.next().unwrap_or(-1);
        }
        return Ok(out);
    }
    let out_shape = static_out.first();
    for (j, d) in out.iter_mut().enumerate() {
        if *d < 0
            && let Some(s) = out_shape
            && let Ok(v) = resolve_name(name, s.axis_name(j), b)
        {
            *d = v;
        }
    }
    let unknown: Vec<usize> = (0..out.len()).filter(|&j| out[j] < 0).collect();
    match unknown.as_slice() {
        [] => Ok(out),
        [j] => {
            let known: i64 = out.iter().filter(|&&d| d >= 0).product();
            let total = x.num_elements() as i64;
            if known == 0 || total % known != 0 {
                return Err(Error::invalid(name, format!("cannot infer dynamic dim {j} of {dims:?} from operand {x}")));
            }
            out[*j] = total / known;
            Ok(out)
        }
        _ => Err(Error::invalid(name, format!("cannot resolve the dynamic dims of {dims:?} from operand {x}"))),
    }
}

/// Concrete output shapes of `op` (already resolved by [`resolve_op`]) on concrete `inputs`,
/// by re-running shape inference; any dim still dynamic is taken from the bindings through the
/// build-time output names.
pub fn output_shapes(
    m: &Module,
    op: &Op,
    inputs: &[&Shape],
    static_out: &[&Shape],
    b: &Bindings,
) -> Result<Vec<Shape>> {
    let name = op.op_type().to_string();
    let inferred = crate::ir::infer::infer_shapes(m, op, inputs)?;
    let mut out = Vec::with_capacity(inferred.len());
    for (i, s) in inferred.into_iter().enumerate() {
        if !s.is_dynamic() {
            out.push(Shape::new(s.dtype, &s.dims));
            continue;
        }
        let mut dims = s.dims.clone();
        for (k, d) in dims.iter_mut().enumerate() {
            if *d == DYNAMIC_DIM {
                let axis =
                    static_out.get(i).map(|st| st.axis_name(k)).filter(|n| !n.is_empty()).unwrap_or(s.axis_name(k));
                *d = resolve_name(&name, axis, b)?;
            }
        }
        out.push(Shape::new(s.dtype, &dims));
    }
    Ok(out)
}

/// Axes a `DynamicReshape` names: (name, output axis).
pub type NewAxes = Vec<(String, usize)>;

/// The dims of a `DynamicReshape` of `x` by `specs`, with `values` the sizes of its `Dynamic`
/// axes in order (the node's scalar operands), and the new axis names with the output axis each
/// one names (to bind for later ops). Errors name `op`: a missing or negative size, more than
/// one inferred axis, or an element count the inferred axis cannot take.
pub fn dynamic_reshape_dims(op: &str, specs: &[ReshapeDim], x: &Shape, values: &[i64]) -> Result<(Vec<i64>, NewAxes)> {
    let mut next_value = values.iter();
    let mut dims = Vec::with_capacity(specs.len());
    let mut inferred = None;
    let mut new_names = vec![];
    for (j, spec) in specs.iter().enumerate() {
        match spec {
            ReshapeDim::Static(n) => dims.push(*n),
            ReshapeDim::Dynamic(axis) => {
                let &v = next_value
                    .next()
                    .ok_or_else(|| Error::invalid(op, format!("missing the size operand of axis {axis:?}")))?;
                // 0 is a valid size (static zero-sized axes are supported too).
                if v < 0 {
                    return Err(Error::invalid(op, format!("size of axis {axis:?} is negative: {v}")));
                }
                dims.push(v);
                new_names.push((axis.clone(), j));
            }
            ReshapeDim::Inferred(axis) => {
                if inferred.is_some() {
                    return Err(Error::invalid(op, "at most one axis may be inferred"));
                }
                inferred = Some(j);
                dims.push(-1);
                new_names.push((axis.clone(), j));
            }
        }
    }
    if let Some(j) = inferred {
        let total = x.num_elements() as i64;
        let known = dims.iter().filter(|&&d| d >= 0).try_fold(1i64, |a, &d| a.checked_mul(d)).unwrap_or(0);
        if known == 0 || total % known != 0 {
            return Err(Error::invalid(
                op,
                format!("cannot infer axis {j}: {total} elements do not divide into {known}"),
            ));
        }
        dims[j] = total / known;
    }
    Ok((dims, new_names))
}
