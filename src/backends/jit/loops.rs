//! Loop steps of the "jit" plan: how a compiled cluster becomes a step (buffers, in-place
//! reuse) and how the executor runs one, split across the thread pool.

use std::sync::Arc;

use rayon::prelude::*;

use crate::codegen::CompiledLoop;
use crate::codegen::loop_kernel::{Access, LoopKernel};
use crate::error::{Error, Result};
use crate::ir::module::{Module, ValueId};
use crate::ir::shape::Shape;
use crate::kernels::tensor::Tensor;
use crate::lower::cluster::Cluster;
use crate::memory::AlignedBytes;

use crate::backends::signature::unnamed;

/// Loops over at least this many elements are split across the thread pool.
pub const PARALLEL_MIN_ELEMENTS: usize = 1 << 16;

/// Chunk boundaries are multiples of this many elements (whole unrolled vector iterations; at
/// least 16, which keeps a streaming kernel's vector stores 16-byte aligned).
const CHUNK_ALIGN: usize = 64;

/// The output size from which `streaming_stores=auto` writes a loop's outputs with non-temporal
/// stores: the last-level cache (an output that large cannot be read back from cache anyway).
pub(crate) fn auto_stream_min_bytes() -> usize {
    let c = crate::kernels::gemm::cache_sizes();
    if c.l3 > 0 { c.l3 } else { 4 * c.l2 }
}

/// A fused loop compiled by Cranelift.
pub(crate) struct LoopStep {
    /// Index into `Plan::clustering.clusters`.
    pub cluster: usize,
    /// The machine code.
    pub code: CompiledLoop,
    /// The variant writing the outputs with non-temporal stores, used when every output pointer
    /// is 16-byte aligned (planned for outputs larger than the last-level cache).
    pub streaming: Option<CompiledLoop>,
    /// Elements of the iteration space.
    pub len: usize,
    /// Units of the kernel's `start..end` range: `len`, or the output elements of a kernel with
    /// reductions (each unit then covers a whole reduced row).
    pub iters: usize,
    /// Outputs written element for element (the reductions' outputs follow them).
    pub n_plain: usize,
    /// Bytes per element of the cluster's main dtype (outputs may differ: see `out_shapes`).
    pub esize: usize,
    /// Value read by each kernel input.
    pub inputs: Vec<ValueId>,
    /// Whether each input's last use is this step (it is moved out of its slot).
    pub input_dies: Vec<bool>,
    /// Value written by each kernel output.
    pub outputs: Vec<ValueId>,
    /// Shape of each output.
    pub out_shapes: Vec<Shape>,
    /// For each output, a dying `Full` input whose storage it may take over.
    pub in_place: Vec<Option<usize>>,
}

impl LoopStep {
    /// The step running cluster `ci` (`c`) with its compiled code.
    pub(crate) fn new(m: &Module, ci: usize, c: &Cluster, code: CompiledLoop) -> LoopStep {
        let out_shapes = c.outputs.iter().map(|&v| unnamed(m.shape(v))).collect();
        LoopStep {
            cluster: ci,
            code,
            streaming: None,
            len: c.len,
            iters: c.kernel.iterations(c.len),
            n_plain: c.kernel.outputs.len(),
            esize: c.dtype.size(),
            inputs: c.inputs.clone(),
            input_dies: vec![false; c.inputs.len()],
            outputs: c.outputs.clone(),
            out_shapes,
            in_place: vec![None; c.outputs.len()],
        }
    }

    /// Records which inputs die at this step (`dies(v)`) and which outputs may be written over a
    /// dying `Full` input of the same size.
    pub(crate) fn plan_memory(&mut self, m: &Module, kernel: &LoopKernel, dies: impl Fn(ValueId) -> bool) {
        for (k, &v) in self.inputs.iter().enumerate() {
            // A value read through two accesses (e.g. transposed and element for element) dies
            // at its last occurrence only: the earlier ones share its storage.
            self.input_dies[k] = dies(v) && !self.inputs[k + 1..].contains(&v);
        }
        let mut taken = vec![false; self.inputs.len()];
        for j in 0..self.n_plain {
            let cand = (0..self.inputs.len()).find(|&k| {
                !taken[k]
                    && self.input_dies[k]
                    && kernel.inputs[k] == Access::Full
                    && m.shape(self.inputs[k]).byte_size() == self.out_shapes[j].byte_size()
            });
            if let Some(k) = cand {
                taken[k] = true;
                self.in_place[j] = Some(k);
            }
        }
    }
}

/// The argument pointers of one kernel call, shared by the threads running its chunks.
struct Args(Vec<*mut u8>);

// SAFETY: the pointers refer to buffers owned by the executing call, which outlive every chunk
// (the parallel loop joins before they are released); chunks write disjoint element ranges.
unsafe impl Sync for Args {}

impl Args {
    fn ptrs(&self) -> &[*mut u8] {
        &self.0
    }
}

pub(crate) fn run_loop(s: &LoopStep, env: &mut [Option<Tensor>], pool: Option<&rayon::ThreadPool>) -> Result<()> {
    let mut ins: Vec<Tensor> = Vec::with_capacity(s.inputs.len());
    for (k, &v) in s.inputs.iter().enumerate() {
        let t = if s.input_dies[k] {
            env.get_mut(v.index()).and_then(Option::take)
        } else {
            env.get(v.index()).cloned().flatten()
        };
        ins.push(t.ok_or_else(|| internal(format!("loop input {v} is not available")))?);
    }
    let mut in_ptrs: Vec<Option<*mut u8>> = vec![None; ins.len()];
    let mut fresh: Vec<Option<AlignedBytes>> = Vec::with_capacity(s.outputs.len());
    let mut out_ptrs: Vec<*mut u8> = Vec::with_capacity(s.outputs.len());
    for j in 0..s.outputs.len() {
        let reused = s.in_place[j].and_then(|k| Arc::get_mut(&mut ins[k].data).map(|b| (k, b.as_mut_ptr())));
        match reused {
            Some((k, p)) => {
                in_ptrs[k] = Some(p);
                out_ptrs.push(p);
                fresh.push(None);
            }
            None => {
                let bytes = s.out_shapes[j]
                    .byte_size()
                    .ok_or_else(|| internal(format!("loop output {} has no static size", s.outputs[j])))?;
                // The kernel writes every element of every output, so stale pooled bytes are fine.
                let mut b = AlignedBytes::try_recycled(bytes)
                    .map_err(|_| Error::out_of_memory(format!("loop output {}", s.outputs[j]), bytes))?;
                out_ptrs.push(b.as_mut_ptr());
                fresh.push(Some(b));
            }
        }
    }
    let mut args: Vec<*mut u8> =
        ins.iter().zip(&in_ptrs).map(|(t, p)| p.unwrap_or(t.data.as_ptr() as *mut u8)).collect();
    args.extend(out_ptrs);
    // A streaming kernel needs 16-byte aligned output pointers (buffers here are 64-byte
    // aligned; this keeps any other storage on the ordinary kernel) and aligned chunk starts,
    // which whole-element ranges (no reduction) cut at multiples of CHUNK_ALIGN give.
    let stream_ok = s.iters == s.len && args[ins.len()..].iter().all(|p| (*p as usize).is_multiple_of(16));
    let code = match &s.streaming {
        Some(nt) if stream_ok => nt,
        _ => &s.code,
    };
    let args = Args(args);
    let threads = pool.map_or(1, |p| p.current_num_threads());
    // A reduction's units are whole rows: any split is as good as another.
    let align = if s.iters == s.len { CHUNK_ALIGN } else { 1 };
    match pool {
        Some(pool) if threads > 1 && s.len >= PARALLEL_MIN_ELEMENTS && s.iters > 1 => {
            let chunk = s.iters.div_ceil(threads).next_multiple_of(align);
            let n = s.iters.div_ceil(chunk);
            pool.install(|| {
                (0..n).into_par_iter().for_each(|c| {
                    let (a, b) = (c * chunk, ((c + 1) * chunk).min(s.iters));
                    // SAFETY: `args` holds one pointer per kernel input then per output; Full inputs
                    // and outputs have `len` elements of their own types (checked shapes), Scalar
                    // inputs one, Strided inputs are the operands whose shapes their stride maps
                    // were derived from (every offset in bounds); outputs are fresh buffers or a
                    // dying Full input of this call's own (uniquely held) storage of the same byte
                    // size, written element for element; reduction outputs have `iters` elements
                    // and unit j writes only element j (and the plain elements of its rows);
                    // chunks are disjoint. A streaming kernel is only chosen with 16-byte aligned
                    // outputs and whole-element ranges, whose chunk starts are multiples of
                    // CHUNK_ALIGN (≥ 16 elements), so its non-temporal stores are aligned.
                    unsafe { code.run(args.ptrs(), a, b) }
                })
            });
        }
        _ if s.iters > 0 => {
            // SAFETY: as above, on the whole range from one thread (start 0: aligned).
            unsafe { code.run(args.ptrs(), 0, s.iters) }
        }
        _ => {}
    }
    for (j, b) in fresh.into_iter().enumerate() {
        let data = match (b, s.in_place[j]) {
            (Some(b), _) => Arc::new(b),
            (None, Some(k)) => ins[k].data.clone(),
            (None, None) => return Err(internal(format!("loop output {} has no buffer", s.outputs[j]))),
        };
        env[s.outputs[j].index()] = Some(Tensor { shape: s.out_shapes[j].clone(), data });
    }
    Ok(())
}

fn internal(msg: String) -> Error {
    Error::Execution(format!("internal error: {msg}"))
}
