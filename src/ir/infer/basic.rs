//! Shape inference for elementwise, shape-manipulation, reduction, cumulative and barrier ops.

use crate::error::{Error, Result};
use crate::ir::op::Op;
use crate::ir::shape::Shape;

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    let _ = inputs;
    Err(Error::not_implemented(op.op_type().to_string(), "shape inference pending"))
}
