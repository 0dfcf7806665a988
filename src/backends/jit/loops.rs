//! Loop steps of the "jit" plan: how a compiled cluster becomes a step (buffers, in-place
//! reuse) and how the executor runs one, split across the thread pool, with its outputs'
//! storage from the memory an execution state keeps between executions ([`Arena`]).

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
                // Not over a value another operand of this step reads (its earlier occurrences
                // read the storage through the same pointer while the output is written).
                !taken[k]
                    && self.input_dies[k]
                    && !self.inputs[..k].contains(&self.inputs[k])
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

/// What an execution state keeps of a value once it is released (see [`Arena`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retain {
    /// The tensor's shape (its data is released): the next execution reuses the shape's heap
    /// storage for this value.
    Shell,
    /// A constant: kept whole (its data is shared with `Plan::constants`, never written).
    Constant,
    /// A loop output of `main` that owns memory slot `s`: its storage goes back to the slot,
    /// for the next value planned into that slot (in this or the next execution).
    Slot(u32),
    /// An alias (Reshape, Identity, …) of the storage of slot `s`'s value: released like a
    /// shell (the slot's value gives the storage back); when it is a result of `main` written
    /// into a caller's buffer, the buffer's previous storage goes to slot `s`.
    AliasOf(u32),
}

/// The memory an execution state keeps from one execution to the next, as `Plan::retain`
/// says: the tensors of released values (their shapes; constants whole) and the storage of
/// `main`'s memory slots. With it a steady-state execution of loop steps allocates nothing: a
/// value's tensor comes back with its shape, a loop output's storage from its slot.
pub(crate) struct Arena {
    /// Released values' tensors, by value: shells (shape, empty data) and constants.
    keep: Vec<Option<Tensor>>,
    /// The storage of each memory slot while no value holds it.
    slots: Vec<Option<Arc<AlignedBytes>>>,
    /// The empty storage a shell holds.
    empty: Arc<AlignedBytes>,
}

impl Arena {
    /// An empty arena for a plan of `num_values` values and `num_slots` memory slots.
    pub(crate) fn new(num_values: usize, num_slots: usize) -> Arena {
        Arena { keep: vec![None; num_values], slots: vec![None; num_slots], empty: Arc::new(AlignedBytes::zeroed(0)) }
    }

    /// The tensor of value `v` with `shape` (unnamed) holding `data`: `v`'s kept shell when it
    /// has that shape (no allocation), else a new tensor.
    pub(crate) fn tensor(&mut self, v: ValueId, shape: &Shape, data: Arc<AlignedBytes>) -> Tensor {
        match self.keep.get_mut(v.index()).and_then(Option::take) {
            Some(mut t)
                if t.shape.dtype == shape.dtype && t.shape.dims == shape.dims && t.shape.axis_names.is_none() =>
            {
                t.data = data;
                t
            }
            _ => Tensor { shape: unnamed(shape), data },
        }
    }

    /// The empty storage (a shared handle: no allocation).
    pub(crate) fn empty(&self) -> Arc<AlignedBytes> {
        self.empty.clone()
    }

    /// The kept tensor of constant `v`, if a previous execution released it.
    pub(crate) fn take_kept(&mut self, v: ValueId) -> Option<Tensor> {
        self.keep.get_mut(v.index()).and_then(Option::take)
    }

    /// Storage of `bytes` bytes for a value planned as `retain`: its slot's when that is free,
    /// of that size and uniquely held (so it can be written), else `None`.
    pub(crate) fn slot_storage(&mut self, retain: Retain, bytes: usize) -> Option<Arc<AlignedBytes>> {
        let Retain::Slot(s) = retain else { return None };
        let mut d = self.slots.get_mut(s as usize).and_then(Option::take)?;
        (d.len() == bytes && Arc::get_mut(&mut d).is_some()).then_some(d)
    }

    /// Releases `t`, the tensor of value `v`, planned as `retain`: a slot's storage goes back to
    /// the slot, a constant is kept whole, and otherwise only the shape is kept.
    pub(crate) fn release(&mut self, v: ValueId, mut t: Tensor, retain: Retain) {
        match retain {
            Retain::Constant => {}
            // The last member of an alias group to go hands the storage back to the slot: while
            // an alias (a reshape's result, …) still holds it, the slot would only get a second
            // handle, and the in-place loop or the kernel that takes the slot next would find the
            // storage shared and allocate anew.
            Retain::Slot(s) | Retain::AliasOf(s) => {
                let mut d = std::mem::replace(&mut t.data, self.empty.clone());
                if Arc::get_mut(&mut d).is_some()
                    && let Some(slot) = self.slots.get_mut(s as usize)
                {
                    *slot = Some(d);
                }
            }
            Retain::Shell => t.data = self.empty.clone(),
        }
        if let Some(k) = self.keep.get_mut(v.index()) {
            *k = Some(t);
        }
    }

    /// Puts `data` in slot `s` (whatever the slot held is let go).
    pub(crate) fn fill_slot(&mut self, s: u32, data: Arc<AlignedBytes>) {
        if let Some(slot) = self.slots.get_mut(s as usize) {
            *slot = Some(data);
        }
    }

    /// Keeps the shape of `t`, the tensor of value `v`, and lets its data go (an input whose
    /// storage a loop output took over in place).
    pub(crate) fn release_shell(&mut self, v: ValueId, t: Tensor) {
        self.release(v, t, Retain::Shell);
    }
}

/// Scratch vectors of [`run_loop`], kept by an execution state so that a step allocates
/// nothing once they have grown to the plan's widest step.
#[derive(Default)]
pub(crate) struct LoopScratch {
    /// Dying inputs moved out of their value slots, by kernel input (`None`: read in place).
    taken: Vec<Option<Tensor>>,
    /// Whether each input's storage became an output's (in place).
    consumed: Vec<bool>,
    /// The new storage of each output (`None`: written over an input).
    outs: Vec<Option<Arc<AlignedBytes>>>,
    /// The kernel's argument pointers: inputs, then outputs.
    args: Vec<*mut u8>,
}

// SAFETY: the pointers in `args` are only written and read by the `run_loop` call that filled
// them (and the pool threads it joins), which clears them before returning; between steps the
// vector is empty, so moving the scratch to another thread moves no live pointer.
unsafe impl Send for LoopScratch {}

impl LoopScratch {
    /// Lets go of everything a failed step left behind.
    pub(crate) fn clear(&mut self) {
        self.taken.clear();
        self.consumed.clear();
        self.outs.clear();
        self.args.clear();
    }
}

/// The argument pointers of one kernel call, shared by the threads running its chunks.
struct Args<'a>(&'a [*mut u8]);

// SAFETY: the pointers refer to buffers owned by the executing call, which outlive every chunk
// (the parallel loop joins before they are released); chunks write disjoint element ranges.
unsafe impl Sync for Args<'_> {}

impl Args<'_> {
    fn ptrs(&self) -> &[*mut u8] {
        self.0
    }
}

/// Runs loop step `s`: its inputs are read from `env` (dying ones moved out, and put back unless
/// an output took their storage over), its outputs' storage comes from their memory slots in
/// `arena` (`retain`: the plan's) or is allocated, and the outputs are stored in `env`.
pub(crate) fn run_loop(
    s: &LoopStep,
    env: &mut [Option<Tensor>],
    arena: &mut Arena,
    retain: &[Retain],
    scratch: &mut LoopScratch,
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    scratch.clear();
    let LoopScratch { taken, consumed, outs, args } = scratch;
    for (k, &v) in s.inputs.iter().enumerate() {
        // A value read twice dies at its last occurrence: earlier ones read it from `env` first.
        let t = if s.input_dies[k] { env.get_mut(v.index()).and_then(Option::take) } else { None };
        let p = match t.as_ref().or_else(|| env.get(v.index()).and_then(Option::as_ref)) {
            Some(t) => t.data.as_ptr() as *mut u8,
            None => return Err(internal(format!("loop input {v} is not available"))),
        };
        taken.push(t);
        consumed.push(false);
        args.push(p);
    }
    for j in 0..s.outputs.len() {
        let v = s.outputs[j];
        let over = s.in_place[j].and_then(|k| {
            let t = taken.get_mut(k)?.as_mut()?;
            Arc::get_mut(&mut t.data).map(|b| (k, b.as_mut_ptr()))
        });
        if let Some((k, p)) = over {
            consumed[k] = true;
            args[k] = p;
            args.push(p);
            outs.push(None);
            continue;
        }
        let bytes =
            s.out_shapes[j].byte_size().ok_or_else(|| internal(format!("loop output {v} has no static size")))?;
        let plan = retain.get(v.index()).copied().unwrap_or(Retain::Shell);
        let mut data = match arena.slot_storage(plan, bytes) {
            Some(d) => d,
            // The kernel writes every element of every output, so stale pooled bytes are fine.
            None => Arc::new(
                AlignedBytes::try_recycled(bytes)
                    .map_err(|_| Error::out_of_memory(format!("loop output {v}"), bytes))?,
            ),
        };
        let p = Arc::get_mut(&mut data)
            .ok_or_else(|| internal(format!("loop output {v}: storage is shared")))?
            .as_mut_ptr();
        args.push(p);
        outs.push(Some(data));
    }
    let n_in = s.inputs.len();
    // A streaming kernel needs 16-byte aligned output pointers (buffers here are 64-byte
    // aligned; this keeps any other storage on the ordinary kernel) and aligned chunk starts,
    // which whole-element ranges (no reduction) cut at multiples of CHUNK_ALIGN give.
    let stream_ok = s.iters == s.len && args[n_in..].iter().all(|p| (*p as usize).is_multiple_of(16));
    let code = match &s.streaming {
        Some(nt) if stream_ok => nt,
        _ => &s.code,
    };
    let call_args = Args(args.as_slice());
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
                    // were derived from (every offset in bounds); outputs are fresh buffers, slot
                    // buffers of their exact byte size held uniquely, or a dying Full input of
                    // this call's own (uniquely held) storage of the same byte size, written
                    // element for element; reduction outputs have `iters` elements and unit j
                    // writes only element j (and the plain elements of its rows); chunks are
                    // disjoint. A streaming kernel is only chosen with 16-byte aligned outputs and
                    // whole-element ranges, whose chunk starts are multiples of CHUNK_ALIGN (≥ 16
                    // elements), so its non-temporal stores are aligned.
                    unsafe { code.run(call_args.ptrs(), a, b) }
                })
            });
        }
        _ if s.iters > 0 => {
            // SAFETY: as above, on the whole range from one thread (start 0: aligned).
            unsafe { code.run(call_args.ptrs(), 0, s.iters) }
        }
        _ => {}
    }
    args.clear();
    for (j, out) in outs.iter_mut().enumerate() {
        let v = s.outputs[j];
        let data = match (out.take(), s.in_place[j]) {
            (Some(d), _) => d,
            (None, Some(k)) => match taken.get(k).and_then(Option::as_ref) {
                Some(t) => t.data.clone(),
                None => return Err(internal(format!("loop output {v} has no buffer"))),
            },
            (None, None) => return Err(internal(format!("loop output {v} has no buffer"))),
        };
        env[v.index()] = Some(arena.tensor(v, &s.out_shapes[j], data));
    }
    // Dying inputs: one whose storage an output took over keeps only its shape; the others go
    // back to their value slots, where the plan's drops release them after this step.
    for (k, t) in taken.drain(..).enumerate() {
        if let Some(t) = t {
            let v = s.inputs[k];
            if consumed[k] {
                arena.release_shell(v, t);
            } else {
                env[v.index()] = Some(t);
            }
        }
    }
    Ok(())
}

fn internal(msg: String) -> Error {
    Error::Execution(format!("internal error: {msg}"))
}
