//! The jit's AllReduce step: the operands reduced across the ranks of the execution's
//! [`crate::api::collective::Communicator`] (or, without one, a single device's copy).

use std::sync::Arc;

use crate::api::backend::ExecOptions;
use crate::api::collective::all_reduce_tensors;
use crate::backends::jit::plan::KernelStep;
use crate::error::{Error, Result};
use crate::ir::op::Op;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;

/// Runs AllReduce step `s`, reading its operands from `env` and writing its results there.
pub(super) fn run(s: &KernelStep, env: &mut [Option<Tensor>], opts: &ExecOptions) -> Result<()> {
    let Op::AllReduce { kind, replica_groups } = &s.op else {
        return Err(Error::invalid("jit", format!("{} planned as an AllReduce step", s.op.op_type())));
    };
    let missing = |v| Error::invalid("jit", format!("AllReduce operand {v} is not available"));
    let inputs: Vec<Tensor> = s
        .inputs
        .iter()
        .map(|&v| env.get(v.index()).and_then(Clone::clone).ok_or_else(|| missing(v)))
        .collect::<Result<_>>()?;
    let outs = all_reduce_tensors("AllReduce", opts.communicator.as_deref(), *kind, replica_groups, inputs)?;
    if outs.len() != s.outputs.len() {
        return Err(Error::invalid("jit", format!("AllReduce gave {} results for {}", outs.len(), s.outputs.len())));
    }
    for (t, &v) in outs.into_iter().zip(&s.outputs) {
        // One device returns its operands: the results get storage of their own, as every
        // other kernel step's do, so that the plan's memory slots never share an operand's.
        let t = if s.inputs.iter().any(|&i| env[i.index()].as_ref().is_some_and(|x| Arc::ptr_eq(&x.data, &t.data))) {
            let mut data = AlignedBytes::try_recycled(t.data.len())?;
            data.as_bytes_mut().copy_from_slice(t.bytes());
            Tensor { shape: t.shape, data: Arc::new(data) }
        } else {
            t
        };
        let slot = env.get_mut(v.index()).ok_or_else(|| Error::invalid("jit", format!("no slot for value {v}")))?;
        *slot = Some(t);
    }
    Ok(())
}
