//! Reference kernels (linalg).

use crate::error::{Error, Result};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

pub(super) fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    let _ = (inputs, out_shapes);
    Err(Error::not_implemented(op.op_type().to_string(), "reference kernel pending"))
}
