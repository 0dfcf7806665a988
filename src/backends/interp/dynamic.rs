//! Run-time shapes for nodes with dynamic axes: the shape-level resolution of `ir::dynamic`
//! applied to the operands' tensors, and scalar size operands read as integers.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

pub(super) use crate::ir::dynamic::{Bindings, bind, dynamic_reshape_dims};

/// `op` with its dynamic attributes made concrete from the operands ([`crate::ir::dynamic::resolve_op`]).
pub(super) fn resolve_op<'a>(
    op: &'a Op,
    static_in: &[&Shape],
    inputs: &[Tensor],
    static_out: &[&Shape],
    b: &Bindings,
) -> Result<Cow<'a, Op>> {
    let shapes: Vec<&Shape> = inputs.iter().map(|t| &t.shape).collect();
    crate::ir::dynamic::resolve_op(op, static_in, &shapes, static_out, b)
}

/// Concrete output shapes of `op` on concrete `inputs` ([`crate::ir::dynamic::output_shapes`]).
pub(super) fn output_shapes(
    m: &Module,
    op: &Op,
    inputs: &[Tensor],
    static_out: &[&Shape],
    b: &Bindings,
) -> Result<Vec<Shape>> {
    let shapes: Vec<&Shape> = inputs.iter().map(|t| &t.shape).collect();
    crate::ir::dynamic::output_shapes(m, op, &shapes, static_out, b)
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
