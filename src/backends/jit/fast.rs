//! Fast kernels: specialised implementations the plan uses instead of a node's reference kernel
//! (GEMM for DotGeneral and FusedDense, hand-written fused kernels for Softmax, LayerNorm, GELU
//! and attention). A node without one runs its reference kernel.
//! This file is the interface; `plan` picks the kernel (`dot` or `fused`) for each node.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use super::shared::Accounting;
use crate::error::{Error, Result};
use crate::ir::module::NodeId;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;
use crate::memory::AlignedBytes;

/// A kernel prepared at compile time for one node. Shared by every execution of the plan.
pub(crate) trait FastKernel: Send + Sync {
    /// A short description for the plan dump (e.g. `gemm f32 [64x384]·[384x1536] packed`).
    fn describe(&self) -> String;

    /// Operands the kernel captured at compile time (e.g. a constant weight matrix packed for
    /// GEMM). The plan does not keep those constants: at run time `inputs[i]` for such an operand
    /// has its shape but no data, and the kernel must not read it.
    fn prepacked_operands(&self) -> &[usize] {
        &[]
    }

    /// Computes the node's results from its operands. `out_shapes` are the node's static result
    /// shapes; `pool` is the backend's thread pool (`None`: one thread).
    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>>;

    /// Whether [`FastKernel::run_into`] is implemented: the plan then gives the node's results
    /// memory slots, and an execution writes them into storage kept from the previous one.
    fn writes_into(&self) -> bool {
        false
    }

    /// Computes the node's results into `outs`: one tensor per result, of its static shape, with
    /// storage of that shape's byte size that the caller holds uniquely (so it is written in
    /// place) and whose previous contents do not matter. Only called when
    /// [`FastKernel::writes_into`] says so.
    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let _ = (inputs, outs, pool);
        Err(crate::error::Error::invalid(self.describe(), "this kernel does not write into given buffers"))
    }

    /// The kernel as `Any`, for plan passes that regroup kernels of a known type (`chain`).
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
}

/// A constant operand of one node, prepared (packed, rearranged) at compile time before the
/// plan's kernels are: the plan runs every node's jobs in parallel, the source bytes of each
/// released once it is done, and hands the results to the node's [`FastKernel`] preparation
/// ([`Packed::get`]). GEMM weights and convolution filters are prepared this way.
pub(crate) struct PackJob {
    /// The node whose operand `1` this prepares.
    pub node: NodeId,
    /// Prepares the operand (through the process-wide constant cache), adding its bytes and
    /// hashing time to the accounting.
    pub run: Prepare,
}

/// What a [`PackJob`] runs.
pub(crate) type Prepare = Box<dyn FnOnce(&mut Accounting) -> Result<Prepared> + Send>;

/// An operand a [`PackJob`] prepared (a `PackedB`, a `ConvFilter`, …).
pub(crate) type Prepared = Arc<dyn Any + Send + Sync>;

/// The operands prepared by the [`PackJob`]s of a module, by node.
#[derive(Default)]
pub(crate) struct Packed(pub HashMap<NodeId, Prepared>);

impl Packed {
    /// Node `n`'s prepared operand, if it has one of type `T`.
    pub(crate) fn get<T: Any + Send + Sync>(&self, n: NodeId) -> Option<Arc<T>> {
        self.0.get(&n)?.clone().downcast::<T>().ok()
    }
}

/// [`FastKernel::run`] of a kernel that writes into given buffers: new storage for each result
/// (recycled, of unspecified content: [`FastKernel::run_into`] overwrites all of it), then
/// `run_into`.
pub(crate) fn run_via_into<K: FastKernel + ?Sized>(
    k: &K,
    inputs: &[Tensor],
    out_shapes: &[Shape],
    pool: Option<&rayon::ThreadPool>,
) -> Result<Vec<Tensor>> {
    let mut outs = out_shapes
        .iter()
        .map(|s| {
            let bytes = s.byte_size().ok_or_else(|| Error::invalid(k.describe(), format!("result {s} is dynamic")))?;
            Ok(Tensor { shape: s.clone(), data: Arc::new(AlignedBytes::try_recycled(bytes)?) })
        })
        .collect::<Result<Vec<_>>>()?;
    k.run_into(inputs, &mut outs, pool)?;
    Ok(outs)
}
