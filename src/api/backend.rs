//! The backend-neutral traits: `Backend` (compiles modules), `Executable` (runs them), `Capabilities`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::api::buffer::Buffer;
use crate::api::profile::Profiler;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::Module;
use crate::ir::optype::OpType;
use crate::ir::shape::Shape;

/// What a backend supports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capabilities {
    /// Ops the backend can build and execute.
    pub operations: BTreeSet<OpType>,
    /// Closures, Call, Sort, While and If.
    pub functions: bool,
    /// DTypes buffers and ops may use.
    pub dtypes: BTreeSet<DType>,
    /// Dynamic (named, `-1`) axes.
    pub dynamic_axes: bool,
    /// Hint to callers: pass variables as constants.
    pub prefer_constants_for_variables: bool,
}

impl Capabilities {
    /// Whether `op` is supported.
    pub fn supports(&self, op: OpType) -> bool {
        self.operations.contains(&op)
    }
}

/// A compute backend: something that compiles an [`ir::Module`](crate::ir::Module) into an
/// [`Executable`]. Backends are shared as `Arc<dyn Backend>` and chosen at run time by name.
pub trait Backend: Send + Sync + 'static {
    /// Short registry name (`"interp"`, `"jit"`).
    fn name(&self) -> &str;
    /// Human description, including the configuration.
    fn description(&self) -> String;
    /// Supported ops, dtypes and features.
    fn capabilities(&self) -> &Capabilities;
    /// Verifies `module` ([`crate::ir::verify::verify`]; it may come from anywhere, not only a
    /// [`Builder`](crate::api::Builder)) and compiles it.
    fn compile(&self, module: Module) -> Result<Arc<dyn Executable>>;
    /// Number of devices (1 for CPU backends).
    fn num_devices(&self) -> usize {
        1
    }
    /// Text describing device `dev`.
    fn device_description(&self, dev: usize) -> String {
        format!("device#{dev}")
    }
    /// Releases resources; later compiles fail.
    fn finalize(&self);
    /// Whether `finalize` was called.
    fn is_finalized(&self) -> bool;
}

impl dyn Backend {
    /// A buffer holding a copy of `data` with dims `dims`, checked against the capabilities.
    pub fn buffer_from_slice<T: crate::ir::dtype::Element>(&self, data: &[T], dims: &[usize]) -> Result<Buffer> {
        self.check_dtype(T::DTYPE)?;
        Buffer::from_slice(data, dims)
    }

    /// A buffer from raw bytes, checked against the capabilities.
    pub fn buffer_from_bytes(&self, shape: Shape, bytes: &[u8]) -> Result<Buffer> {
        self.check_dtype(shape.dtype)?;
        Buffer::from_bytes(shape, bytes)
    }

    fn check_dtype(&self, d: DType) -> Result<()> {
        if self.is_finalized() {
            return Err(Error::UseAfterFree { what: format!("backend {}", self.name()), state: "finalized".into() });
        }
        if !self.capabilities().dtypes.contains(&d) {
            return Err(Error::not_implemented(
                "Buffer",
                format!("backend {} does not support dtype {d}", self.name()),
            ));
        }
        Ok(())
    }
}

/// Where a backend's `compile` spent its time, phase by phase, in order (e.g. `verify`, one
/// entry per optimisation pass, `egg-fusion`, `plan: clustering`, `plan: codegen`, `plan: gemm
/// packing`, `plan: constants`). Phases may nest: [`CompileReport::hashing`] is the part of the
/// packing and constant phases spent hashing constants for the process-wide constant cache.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompileReport {
    /// `(phase, time)` in the order the phases ran.
    pub phases: Vec<(String, std::time::Duration)>,
    /// Time spent hashing constants' bytes (included in the packing and constant phases).
    pub hashing: std::time::Duration,
    /// The whole `compile` call.
    pub total: std::time::Duration,
    /// What runs each part of the executable (generated loops, specialised kernels, reference
    /// kernels, the interpreter), for backends that plan; empty otherwise.
    pub execution: crate::api::report::ExecutionReport,
}

/// The constant memory an executable holds: constants its plan loads and GEMM operands packed
/// at compile time. `owned_bytes` were made by this executable's compile; `shared_bytes` were
/// served by the process-wide constant cache from another executable's compile (the same bytes,
/// held once). `owned_bytes + shared_bytes == plan_bytes + packed_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConstantMemory {
    /// Constants the plan loads at each execution (their storage, allocated once).
    pub plan_bytes: usize,
    /// Packed GEMM operands (tile layout, with its padding).
    pub packed_bytes: usize,
    /// Made by this executable's compile.
    pub owned_bytes: usize,
    /// Taken from the process-wide cache (made by another executable).
    pub shared_bytes: usize,
    /// Number of constant buffers (plan constants and packed operands).
    pub buffers: usize,
}

impl ConstantMemory {
    /// `plan_bytes + packed_bytes`.
    pub fn total_bytes(&self) -> usize {
        self.plan_bytes + self.packed_bytes
    }
}

/// A compiled function, ready to run many times, from many threads at once.
pub trait Executable: Send + Sync {
    /// Where compilation spent its time, when the backend records it (`None` by default).
    fn compile_report(&self) -> Option<CompileReport> {
        None
    }

    /// The constant memory this executable holds, when the backend reports it (`None` by
    /// default).
    fn constant_memory(&self) -> Option<ConstantMemory> {
        None
    }

    /// The counters of the plans specialised per binding of the dynamic axes, for a module with
    /// dynamic axes on a backend that specialises them (the jit); `None` otherwise.
    fn specialization_stats(&self) -> Option<super::report::SpecializationStats> {
        None
    }

    /// Parameter names of `main`, in order.
    fn input_names(&self) -> &[String];
    /// Parameter shapes of `main`, in order.
    fn input_shapes(&self) -> &[Shape];
    /// Output shapes.
    fn output_shapes(&self) -> &[Shape];
    /// Runs with `inputs`; `donate[i]` lets the executable reuse input i's memory (the buffer
    /// becomes unusable). `donate` may be empty (no donation). Same as [`Executable::execute_with`]
    /// with the default [`ExecOptions`] (no deadline, no cancellation).
    fn execute(&self, inputs: &[&Buffer], donate: &[bool]) -> Result<Vec<Buffer>> {
        self.execute_with(inputs, donate, &ExecOptions::default())
    }
    /// Runs with `inputs` under `opts`: the deadline and the cancellation token are checked
    /// between plan steps and loop iterations, and a stopped run returns
    /// [`Error::DeadlineExceeded`] or [`Error::Cancelled`] (the executable stays usable).
    ///
    /// ```
    /// use tensorjit::{Buffer, CancelToken, DType, Error, ExecOptions, Shape};
    ///
    /// let backend = tensorjit::new_with_config("jit")?;
    /// let builder = backend.builder("neg");
    /// let main = builder.main();
    /// let x = main.parameter("x", Shape::new(DType::Float64, &[2]))?;
    /// let y = main.neg(x)?;
    /// main.return_(&[y])?;
    /// let exe = builder.compile()?;
    /// let x = Buffer::from_slice(&[1.5f64, -2.0], &[2])?;
    ///
    /// // A token cancelled (here: before the run, by this thread) stops the execution.
    /// let cancel = CancelToken::new();
    /// cancel.cancel();
    /// let opts = ExecOptions { cancel: Some(cancel), ..ExecOptions::default() };
    /// assert!(matches!(exe.execute_with(&[&x], &[], &opts), Err(Error::Cancelled)));
    /// // The executable stays usable.
    /// assert_eq!(exe.execute(&[&x], &[])?[0].to_vec::<f64>()?, [-1.5, 2.0]);
    /// # Ok::<(), tensorjit::Error>(())
    /// ```
    fn execute_with(&self, inputs: &[&Buffer], donate: &[bool], opts: &ExecOptions) -> Result<Vec<Buffer>>;
    /// Runs with `inputs` (and `donate`, as [`Executable::execute_with`]) under `opts` and puts
    /// result `i` into `outputs[i]`, a live buffer of [`Executable::output_shapes`]`()[i]`
    /// (exactly: dtype and dims), instead of returning new buffers. Each output buffer then
    /// holds its result (every handle of it sees the new values); the storage it held before
    /// may be kept by the executable and reused by later executions, so that a steady-state
    /// call allocates nothing where the backend can (the "jit" backend's loop steps). Outputs
    /// are checked before anything runs and written only when the execution succeeded; an
    /// output buffer given twice is an error.
    ///
    /// ```
    /// use tensorjit::{Buffer, DType, ExecOptions, Shape};
    ///
    /// let backend = tensorjit::new_with_config("jit")?;
    /// let builder = backend.builder("twice");
    /// let main = builder.main();
    /// let x = main.parameter("x", Shape::new(DType::Float32, &[3]))?;
    /// let y = main.add(x, x)?;
    /// main.return_(&[y])?;
    /// let exe = builder.compile()?;
    /// let out = Buffer::from_slice(&[0f32; 3], &[3])?;
    /// for k in 1..4 {
    ///     let x = Buffer::from_slice(&[k as f32, 0.5, -1.0], &[3])?;
    ///     exe.execute_into(&[&x], &[], &[&out], &ExecOptions::default())?;
    ///     assert_eq!(out.to_vec::<f32>()?, [2.0 * k as f32, 1.0, -2.0]);
    /// }
    /// // A buffer of another shape is refused before anything runs.
    /// let wrong = Buffer::from_slice(&[0f32; 4], &[4])?;
    /// let x = Buffer::from_slice(&[1f32, 2.0, 3.0], &[3])?;
    /// assert!(exe.execute_into(&[&x], &[], &[&wrong], &ExecOptions::default()).is_err());
    /// # Ok::<(), tensorjit::Error>(())
    /// ```
    fn execute_into(&self, inputs: &[&Buffer], donate: &[bool], outputs: &[&Buffer], opts: &ExecOptions) -> Result<()> {
        check_output_buffers(self.output_shapes(), outputs)?;
        let results = self.execute_with(inputs, donate, opts)?;
        if results.len() != outputs.len() {
            return Err(Error::Execution(format!(
                "internal error: {} results for {} output buffers",
                results.len(),
                outputs.len()
            )));
        }
        for (out, r) in outputs.iter().zip(&results) {
            out.replace_storage(r.storage()?)?;
        }
        Ok(())
    }
    /// Releases resources; later executes fail.
    fn finalize(&self) {}
}

/// A handle that stops executions from another thread: clone it into [`ExecOptions::cancel`],
/// call [`CancelToken::cancel`] anywhere, and every execution holding it returns
/// [`Error::Cancelled`] at its next check (between plan steps and loop iterations).
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Requests cancellation of every execution holding this token (or a clone of it).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Per-execution options of [`Executable::execute_with`].
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    /// Stop with [`Error::DeadlineExceeded`] once this instant has passed.
    pub deadline: Option<Instant>,
    /// Stop with [`Error::Cancelled`] once this token is cancelled.
    pub cancel: Option<CancelToken>,
    /// Record the time of every step (jit) or node (interp) of the execution into this
    /// profiler (`crate::api::profile`); `None`: nothing is timed.
    pub profiler: Option<Profiler>,
    /// The ranks an SPMD program's AllReduce nodes reduce across (`crate::api::collective`,
    /// docs/distributed.md); `None`: one device, where only replica groups of one member run.
    pub communicator: Option<Arc<dyn crate::api::collective::Communicator>>,
}

impl ExecOptions {
    /// Options with a deadline `timeout` from now.
    pub fn with_timeout(timeout: std::time::Duration) -> ExecOptions {
        ExecOptions { deadline: Instant::now().checked_add(timeout), ..ExecOptions::default() }
    }

    /// Whether neither a deadline nor a token is set (nothing to check).
    pub fn is_unbounded(&self) -> bool {
        self.deadline.is_none() && self.cancel.is_none()
    }

    /// `Err(Cancelled)` or `Err(DeadlineExceeded)` when the run must stop, else `Ok`.
    pub fn check(&self) -> Result<()> {
        if let Some(c) = &self.cancel
            && c.is_cancelled()
        {
            return Err(Error::Cancelled);
        }
        if let Some(d) = self.deadline
            && Instant::now() >= d
        {
            return Err(Error::DeadlineExceeded);
        }
        Ok(())
    }
}

/// Checks count, dtype and shape of `inputs` against the parameters (static shapes need equal
/// dims; dynamic axes accept any size). Errors name the parameter.
pub fn check_inputs(names: &[String], shapes: &[Shape], inputs: &[&Buffer], donate: &[bool]) -> Result<()> {
    if inputs.len() != shapes.len() {
        return Err(Error::invalid(
            "execute",
            format!(
                "{} inputs given, the function has {} parameters ({})",
                inputs.len(),
                shapes.len(),
                names.join(", ")
            ),
        ));
    }
    if !donate.is_empty() && donate.len() != inputs.len() {
        return Err(Error::invalid(
            "execute",
            format!("donate has {} flags for {} inputs", donate.len(), inputs.len()),
        ));
    }
    for (i, ((name, want), got)) in names.iter().zip(shapes).zip(inputs).enumerate() {
        let buf = got;
        let got = got.shape();
        let dims_ok = want.rank() == got.rank()
            && want.dims.iter().zip(&got.dims).all(|(&w, &g)| w == crate::ir::shape::DYNAMIC_DIM || w == g);
        if want.dtype != got.dtype || !dims_ok {
            return Err(Error::invalid("execute", format!("parameter {i} ({name:?}) expects {want}, got {got}")));
        }
        // A donated or finalized buffer is reported when its storage is taken.
        if let Ok(data) = buf.storage()
            && got.byte_size() != Some(data.len())
        {
            return Err(Error::invalid(
                "execute",
                format!("parameter {i} ({name:?}): {} bytes of storage for shape {got}", data.len()),
            ));
        }
    }
    Ok(())
}

/// Checks the output buffers of [`Executable::execute_into`] against the results' `shapes`:
/// their count, each buffer live with exactly its result's dtype and dims (and storage of that
/// size), and no buffer given twice. Errors name the output.
pub fn check_output_buffers(shapes: &[Shape], outputs: &[&Buffer]) -> Result<()> {
    if outputs.len() != shapes.len() {
        return Err(Error::invalid(
            "execute_into",
            format!("{} output buffers given, the function has {} results", outputs.len(), shapes.len()),
        ));
    }
    for (i, (want, buf)) in shapes.iter().zip(outputs).enumerate() {
        let got = buf.shape();
        if got.dtype != want.dtype || got.dims != want.dims {
            return Err(Error::invalid("execute_into", format!("output {i} is {want}, the buffer given is {got}")));
        }
        let data = buf.storage().map_err(|e| match e {
            Error::UseAfterFree { what, state } => {
                Error::UseAfterFree { what: format!("{what} given as output {i}"), state }
            }
            other => other,
        })?;
        if got.byte_size() != Some(data.len()) {
            return Err(Error::invalid(
                "execute_into",
                format!("output {i}: {} bytes of storage for shape {got}", data.len()),
            ));
        }
        if let Some(j) = outputs[..i].iter().position(|b| b.same_buffer(buf)) {
            return Err(Error::invalid("execute_into", format!("output buffers {j} and {i} are the same buffer")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ir::dtype::DType;
    use crate::memory::AlignedBytes;

    #[test]
    fn check_inputs_rejects_storage_shorter_than_the_shape() {
        let names = vec!["x".to_string()];
        let shapes = vec![Shape::new(DType::Float32, &[4096])];
        // 4 bytes of storage under an f32[4096] shape (16384 bytes): built unchecked, as only
        // crate code can.
        let bad = Buffer::wrap(shapes[0].clone(), Arc::new(AlignedBytes::from_bytes(&[0; 4])));
        let e = check_inputs(&names, &shapes, &[&bad], &[]).unwrap_err().to_string();
        assert!(e.contains("parameter 0 (\"x\")") && e.contains("4 bytes of storage"), "{e}");
        let good = Buffer::from_slice(&vec![0f32; 4096], &[4096]).unwrap();
        assert!(check_inputs(&names, &shapes, &[&good], &[]).is_ok());
    }
}
