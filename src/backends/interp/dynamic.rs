//! Run-time shapes for nodes with dynamic axes: axis-name bindings, op attributes made concrete
//! from the actual operands, and shape inference re-run on the concrete operand shapes.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::op::Op;
use crate::ir::shape::{DYNAMIC_DIM, Shape};
use crate::kernels::tensor::Tensor;

/// Axis name → concrete size, for one execution (and the function scopes inside it).
pub(super) type Bindings = HashMap<String, i64>;

/// The size of a dynamic axis called `name`: a bound name, or a symbolic sum `"=a+b+10"`.
pub(super) fn resolve_name(op: &str, name: &str, b: &Bindings) -> Result<i64> {
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
pub(super) fn resolve_shape(op: &str, s: &Shape, b: &Bindings) -> Result<Shape> {
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
pub(super) fn bind(static_shape: &Shape, concrete: &Shape, what: &str, b: &mut Bindings) -> Result<()> {
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
pub(super) fn resolve_op<'a>(
    op: &'a Op,
    static_in: &[&Shape],
    inputs: &[Tensor],
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
                        *d = x.shape.dims.get(i).copied().unwrap_or(DYNAMIC_DIM);
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
                    *l = x.shape.dims.get(i).copied().unwrap_or(-1);
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
    inputs: &[Tensor],
    static_out: &[&Shape],
    b: &Bindings,
) -> Result<Vec<i64>> {
    let (Some(sx), Some(x)) = (static_in.first(), inputs.first()) else {
        return Err(Error::invalid(name, "missing operand x"));
    };
    let from_input = dynamic_dims_of(sx, &x.shape);
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
            let total = x.len() as i64;
            if known == 0 || total % known != 0 {
                return Err(Error::invalid(
                    name,
                    format!("cannot infer dynamic dim {j} of {dims:?} from operand {}", x.shape),
                ));
            }
            out[*j] = total / known;
            Ok(out)
        }
        _ => Err(Error::invalid(name, format!("cannot resolve the dynamic dims of {dims:?} from operand {}", x.shape))),
    }
}

/// Concrete output shapes of `op` (already resolved by [`resolve_op`]) on concrete `inputs`,
/// by re-running shape inference; any dim still dynamic is taken from the bindings through the
/// build-time output names.
pub(super) fn output_shapes(
    m: &Module,
    op: &Op,
    inputs: &[Tensor],
    static_out: &[&Shape],
    b: &Bindings,
) -> Result<Vec<Shape>> {
    let name = op.op_type().to_string();
    let shapes: Vec<&Shape> = inputs.iter().map(|t| &t.shape).collect();
    let inferred = crate::ir::infer::infer_shapes(m, op, &shapes)?;
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

/// Reads a scalar integer tensor (any integer dtype of at least 8 bits) as `i64`.
pub(super) fn scalar_i64(op: &str, what: &str, t: &Tensor) -> Result<i64> {
    use crate::ir::dtype::DType as D;
    if t.len() != 1 {
        return Err(Error::invalid(op, format!("{what} must be a scalar, got {}", t.shape)));
    }
    let v = match t.shape.dtype {
        D::Int8 => t.typed::<i8>()[0] as i64,
        D::Int16 => t.typed::<i16>()[0] as i64,
        D::Int32 => t.typed::<i32>()[0] as i64,
        D::Int64 => t.typed::<i64>()[0],
        D::Uint8 => t.typed::<u8>()[0] as i64,
        D::Uint16 => t.typed::<u16>()[0] as i64,
        D::Uint32 => t.typed::<u32>()[0] as i64,
        D::Uint64 => i64::try_from(t.typed::<u64>()[0])
            .map_err(|_| Error::invalid(op, format!("{what} = {} is too large", t.typed::<u64>()[0])))?,
        d => return Err(Error::invalid(op, format!("{what} must be an integer scalar, got dtype {d}"))),
    };
    Ok(v)
}
