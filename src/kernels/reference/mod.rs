//! The reference kernels: one plain, safe, obviously correct implementation of every op, generic
//! over element types. They are the semantic oracle and the fallback of every backend.
//!
//! [`eval`] runs one op (other than constants, control flow and barriers, which the executors
//! handle) on concrete input tensors, given the output shapes inferred at build time.

pub(crate) mod common;
mod elementwise;
mod fused;
mod indexing;
mod linalg;
mod misc;
mod movement;
mod reduce;
pub(crate) mod window;

use crate::error::{Error, Result};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

/// Evaluates `op` on `inputs` producing tensors of `out_shapes` (concrete).
pub fn eval(op: &Op, inputs: &[Tensor], out_shapes: &[Shape]) -> Result<Vec<Tensor>> {
    match op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare { .. }
        | Op::Clamp
        | Op::Where
        | Op::ConvertDType { .. }
        | Op::Bitcast { .. } => elementwise::eval(op, inputs, out_shapes),
        Op::Reduce { .. } | Op::ArgMinMax { .. } | Op::Cumulative { .. } => reduce::eval(op, inputs, out_shapes),
        Op::Reshape { .. }
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
        | Op::DynamicDimensionSize { .. } => movement::eval(op, inputs, out_shapes),
        Op::Gather { .. } | Op::Scatter { .. } => indexing::eval(op, inputs, out_shapes),
        Op::DotGeneral { .. } | Op::ConvGeneral { .. } => linalg::eval(op, inputs, out_shapes),
        Op::ReduceWindow { .. } | Op::SelectAndScatter { .. } => window::eval(op, inputs, out_shapes),
        Op::Fft { .. }
        | Op::RngBitGenerator { .. }
        | Op::BatchNormInference { .. }
        | Op::BatchNormTraining { .. }
        | Op::BatchNormGradient { .. } => misc::eval(op, inputs, out_shapes),
        Op::FusedSoftmax { .. }
        | Op::FusedGelu { .. }
        | Op::FusedLayerNorm { .. }
        | Op::FusedDense { .. }
        | Op::FusedScaledDotProductAttention { .. }
        | Op::FusedScaledDotProductAttentionVjp { .. }
        | Op::FusedQuantizedDense { .. }
        | Op::QuantizedEmbeddingLookup { .. }
        | Op::FusedAttentionQkvProjection { .. } => fused::eval(op, inputs, out_shapes),
        Op::Constant(_)
        | Op::Call { .. }
        | Op::Sort { .. }
        | Op::While { .. }
        | Op::If { .. }
        | Op::OptimizationBarrier
        | Op::SchedulingBarrier
        | Op::AllReduce { .. } => {
            Err(Error::invalid(op.op_type().to_string(), "executed by the backend, not by a reference kernel"))
        }
    }
}
