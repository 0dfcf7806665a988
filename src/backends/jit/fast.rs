//! Fast kernels: specialised implementations the plan uses instead of a node's reference kernel
//! (GEMM for DotGeneral and FusedDense, hand-written fused kernels for Softmax, LayerNorm, GELU
//! and attention). A node without one runs its reference kernel.
//! This file is the interface; `plan` picks the kernel (`dot` or `fused`) for each node.

use crate::error::Result;
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;

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
}
