//! Shape inference: the output shapes and dtypes of every op, with the checks of the catalogue.
//!
//! `basic` covers elementwise, shape-manipulation, reduction, cumulative and barrier ops;
//! `structured` covers windows, gather/scatter, dot, convolution, FFT, batch norm, RNG, control
//! flow, collectives and fused ops.

mod basic;
mod structured;

use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::op::Op;
use crate::ir::shape::Shape;

/// Output shapes of `op` applied to operands of shapes `inputs` (closures looked up in `m`).
/// Errors name the op and the offending operand or attribute. Constants have no inference
/// (their shape is given with their data).
pub fn infer_shapes(m: &Module, op: &Op, inputs: &[&Shape]) -> Result<Vec<Shape>> {
    match op {
        Op::Constant(_) => Err(Error::invalid("Constant", "constant shapes come with their data")),
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare { .. }
        | Op::Clamp
        | Op::Where
        | Op::ConvertDType { .. }
        | Op::Bitcast { .. }
        | Op::Reshape { .. }
        | Op::DynamicReshape { .. }
        | Op::Transpose { .. }
        | Op::BroadcastInDim { .. }
        | Op::Concatenate { .. }
        | Op::Slice { .. }
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Pad { .. }
        | Op::Reverse { .. }
        | Op::Iota { .. }
        | Op::DynamicShape
        | Op::DynamicDimensionSize { .. }
        | Op::Reduce { .. }
        | Op::ArgMinMax { .. }
        | Op::Cumulative { .. }
        | Op::OptimizationBarrier
        | Op::SchedulingBarrier => basic::infer(op, inputs),
        _ => structured::infer(m, op, inputs),
    }
}
