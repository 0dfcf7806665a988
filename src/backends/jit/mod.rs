//! The "jit" backend: optimises the module, fuses elementwise F32/F64 nodes into loops compiled
//! by Cranelift, runs every other node with its reference kernel, and splits large loops across
//! a persistent thread pool.
//!
//! Options ([`JitOptions`], or the part after `jit:` in the config string; every option and
//! default is in docs/configuration.md):
//! - `parallelism=N`: a thread pool of the backend's own with N threads (1 to
//!   [`crate::limits::MAX_THREADS`]; 1: no pool). Without it (or with `parallelism=shared`) the
//!   backend runs on the process-wide pool of [`crate::threads`], shared by every backend.
//!   Loops over at least [`PARALLEL_MIN_ELEMENTS`] elements, GEMMs and fused kernels are split
//!   across the pool's threads.
//! - `while_limit=N`: every `while` may run at most N iterations; one more is an
//!   [`Error::Limit`] naming the while node (default: unbounded; a deadline or a
//!   [`crate::api::CancelToken`] in [`crate::api::ExecOptions`] stops a run too).
//! - `fusion=on|off`: run the egg fusion pass (`passes::egraph`, internal) that rewrites decomposed
//!   Dense, LayerNorm, Softmax, GELU and attention into fused ops (default on).
//! - `reductions=fast|ordered`: `fast` (default) lets fused float Sum/Product reductions keep
//!   vector partial sums (reassociated, like every vectorising compiler); `ordered` accumulates
//!   each output in element order, bit-identical to the reference interpreter.
//! - `streaming_stores=auto|on|off`: write a loop's outputs with non-temporal stores (no read of
//!   each destination line before it is written; see docs/architecture.md, "JIT") when they
//!   take at least the last-level cache's size (`auto`, the default), always (`on`), or never.
//! - `spin=on|off`: while an execution runs its steps inside its pool, the pool's other threads
//!   look for work between its parallel splits instead of sleeping (default on; `off` lets them
//!   sleep, each split then waking them).
//! - `dump=DIR`: write every compilation stage under `DIR` (as `TENSORJIT_DUMP=DIR`; see
//!   [`dump`] and docs/debugging.md).
//!
//! Compilation reports its stages, times and decisions as `tracing` events (target
//! `tensorjit::jit`, debug and trace levels; docs/configuration.md).
//!
//! Every function of the module (main, named functions, closures) gets its own plan; Call,
//! While, If and Sort steps run the callees' plans. A module with named dynamic axes gets one
//! plan per binding of its axes, compiled at the first execution with those sizes and kept in a
//! bounded cache (`specializations=N`; [`Executable::specialization_stats`]). Current
//! limitation: a module with dynamic shapes inside a called function, or a reshape
//! sized by tensor data is optimised and then run by the interpreter
//! ([`crate::backends::interp::InterpExecutable`]) as a whole; its report and `plan.txt` dump
//! say why.

mod block;
mod chain;
mod conv;
mod conv_backward;
mod dot;
pub mod dump;
mod exec;
mod fast;
mod fused;
mod loops;
mod merge;
mod movement;
mod options;
mod plan;
mod pool;
mod report;
mod shared;
mod specialize;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::api::backend::{Backend, Capabilities, Executable};
use crate::backends::interp::InterpExecutable;
use crate::backends::signature::Signature;
use crate::error::{Error, Result};
use crate::ir::module::Module;

pub use exec::JitExecutable;
pub use loops::PARALLEL_MIN_ELEMENTS;
pub use options::{
    ConvBlocks, ConvLayout, DEFAULT_SPECIALIZATIONS, Fallback, JitOptions, MAX_SPECIALIZATIONS, OPTIONS, Reductions,
    StreamingStores,
};
pub use shared::{ConstantCacheStats, MIN_SHARED_BYTES, constant_cache_stats, wait_for_constant_hashing};

use crate::threads::Threads;

/// The registry name of this backend.
pub const NAME: &str = "jit";

/// The Cranelift JIT backend.
pub struct JitBackend {
    caps: Capabilities,
    opts: JitOptions,
    /// Output size from which loops use non-temporal stores (`streaming_stores`); `None`: never.
    stream_min_bytes: Option<usize>,
    /// The backend's own pool ([`Threads::Own`] with more than one thread), started at first use.
    own_pool: OnceLock<std::result::Result<Arc<rayon::ThreadPool>, String>>,
    finalized: AtomicBool,
}

impl JitBackend {
    /// A new builder named `name` whose `compile` calls this backend (as
    /// [`Backend`]`::builder` does for `Arc<dyn Backend>`).
    pub fn builder(self: &Arc<Self>, name: &str) -> crate::api::Builder {
        crate::api::Builder::new(Arc::clone(self) as Arc<dyn Backend>, name)
    }

    /// A backend from its option string (`""`, `"parallelism=2"`, `"dump=/tmp/d"`, …; see
    /// [`JitOptions::parse`]). Unknown options are an error listing the valid ones.
    pub fn new(config: &str) -> Result<Arc<JitBackend>> {
        JitBackend::with_options(JitOptions::parse(config)?)
    }

    /// A backend from typed options: a bad value (see [`JitOptions::validate`]), or an invalid
    /// environment variable ([`crate::config::check_env`]), is an [`Error::Config`] naming it.
    pub fn with_options(opts: JitOptions) -> Result<Arc<JitBackend>> {
        opts.validate()?;
        crate::config::check_env()?;
        let stream_min_bytes = match opts.streaming_stores {
            StreamingStores::Off => None,
            StreamingStores::On => Some(0),
            _ => Some(loops::auto_stream_min_bytes()),
        };
        tracing::debug!(target: "tensorjit::jit", options = %opts, "jit backend created");
        Ok(Arc::new(JitBackend {
            caps: crate::backends::interp::capabilities(),
            opts,
            stream_min_bytes,
            own_pool: OnceLock::new(),
            finalized: AtomicBool::new(false),
        }))
    }

    /// The registry constructor.
    pub fn constructor(config: &str) -> Result<Arc<dyn Backend>> {
        Ok(JitBackend::new(config)?)
    }

    /// The options this backend was created with.
    pub fn options(&self) -> &JitOptions {
        &self.opts
    }

    /// Threads used for large loops: the backend's own pool size (`parallelism=N`), else the
    /// shared pool's ([`crate::threads::shared_pool_threads`]).
    pub fn parallelism(&self) -> usize {
        match self.opts.threads {
            Threads::Own(n) => n,
            _ => crate::threads::shared_pool_threads().unwrap_or(1),
        }
    }

    /// The dump directory: the `dump` option, else `TENSORJIT_DUMP` (read at each compile).
    pub fn dump_dir(&self) -> Option<PathBuf> {
        self.opts.dump.clone().or_else(|| {
            // Empty or blank counts as unset (as for every variable); other paths as given.
            std::env::var_os(dump::DUMP_ENV)
                .filter(|s| s.to_str().is_none_or(|s| !s.trim().is_empty()))
                .map(PathBuf::from)
        })
    }

    /// The pool this backend's executables run on: the shared pool
    /// ([`crate::threads::shared_pool`], the same `Arc` for every backend using it), or the
    /// backend's own (started at the first call); `None` with `parallelism=1`.
    pub fn thread_pool(&self) -> Result<Option<Arc<rayon::ThreadPool>>> {
        match self.opts.threads {
            Threads::Own(n) if n <= 1 => Ok(None),
            Threads::Own(n) => {
                let p = self.own_pool.get_or_init(|| crate::threads::own_pool(NAME, n).map_err(|e| e.to_string()));
                match p {
                    Ok(p) => Ok(Some(p.clone())),
                    // A platform without threads: run on the calling thread.
                    Err(e) => {
                        tracing::warn!(target: "tensorjit::threads", error = %e, "running on the calling thread");
                        Ok(None)
                    }
                }
            }
            // An invalid TENSORJIT_THREADS is still an error; a pool that cannot start is not.
            _ => {
                crate::threads::shared_pool_threads()?;
                Ok(crate::threads::shared_pool_or_none())
            }
        }
    }

    /// Compiles `module` into the concrete executable type (what [`Backend::compile`] returns).
    pub fn compile_jit(&self, module: Module) -> Result<JitExecutable> {
        self.compile_with(module, Pipeline::Full)
    }

    /// Compiles a specialisation of a dynamic module that [`Self::compile_jit`] already
    /// optimised (egg fusion included): only the cheap passes run again, for what the
    /// concrete sizes make foldable, so that a new binding costs planning and code generation
    /// rather than the whole pipeline.
    pub(crate) fn compile_specialised(&self, module: Module) -> Result<JitExecutable> {
        self.compile_with(module, Pipeline::Specialised)
    }

    fn compile_with(&self, mut module: Module, pipeline: Pipeline) -> Result<JitExecutable> {
        if self.is_finalized() {
            return Err(Error::UseAfterFree { what: format!("backend {NAME}"), state: "finalized".into() });
        }
        let _span = tracing::debug_span!(target: "tensorjit::jit", "compile", module = %module.name).entered();
        // The constant cache's background hashing waits for the compile (`shared`).
        let _compiling = shared::Compiling::start();
        let t0 = Instant::now();
        // The module may come from anywhere (`Backend::compile` is public): the plan and the
        // generated code rely on every invariant the verifier checks.
        crate::ir::verify::verify(&module)?;
        let verify_time = t0.elapsed();
        let dumper = match self.dump_dir() {
            Some(d) => Some(dump::Dumper::new(&d, &module.name)?),
            None => None,
        };
        let t1 = Instant::now();
        let (ctx, report) = match pipeline {
            Pipeline::Full => self.optimize(&mut module, dumper.is_some())?,
            Pipeline::Specialised => self.optimize_specialised(&mut module, dumper.is_some())?,
        };
        let passes_time = t1.elapsed();
        tracing::debug!(
            target: "tensorjit::jit",
            passes = ctx.timings.len(),
            changed = ctx.timings.iter().filter(|t| t.2).count(),
            nodes = module.nodes.len(),
            ms = passes_time.as_secs_f64() * 1e3,
            "optimisation passes done"
        );
        if let Some(d) = &dumper {
            d.passes(&ctx)?;
            if let Some(r) = &report {
                d.write("egg.txt", &r.to_string())?;
            }
        }
        let mut report = crate::api::CompileReport::default();
        report.phases.push(("verify".to_string(), verify_time));
        report.phases.extend(ctx.timings.iter().map(|(name, t, _)| (format!("pass: {name}"), *t)));
        let mut constants = crate::api::ConstantMemory::default();
        let sig = Signature::of(&module)?;
        let runner = match plan::needs_interpreter(&module) {
            Some(why) => {
                tracing::debug!(target: "tensorjit::jit", reason = %why, "module delegated to the interpreter");
                report.execution = report::interpreted(&why);
                report::check(&report.execution, self.opts.fallback, &module.name)?;
                if let Some(d) = &dumper {
                    d.write("plan.txt", &format!("delegated to the interpreter: {why}\n"))?;
                    d.write("execution.txt", &report.execution.to_string())?;
                }
                exec::Runner::Interp(InterpExecutable::new(module)?.with_while_limit(self.opts.while_limit))
            }
            None if plan::is_dynamic(&module) => {
                let axes = crate::passes::specialize::axis_names(&module);
                if axes.is_empty() {
                    // Shape ops on static shapes only: specialised once, now.
                    let mut m = crate::passes::specialize::specialize(&module, &Default::default())?;
                    m.name = module.name.clone();
                    return self.compile_specialised(m);
                }
                // Initialised here so that every specialisation shares the pool.
                self.thread_pool()?;
                let mut acct = shared::Accounting::default();
                let spec = specialize::Specializer::new(module, self.fork(), &mut report.phases, &mut acct)?;
                report.hashing += acct.hashing;
                constants.packed_bytes += acct.owned_bytes + acct.shared_bytes;
                constants.owned_bytes += acct.owned_bytes;
                constants.shared_bytes += acct.shared_bytes;
                constants.buffers += acct.buffers;
                report.execution = spec.report();
                if let Some(d) = &dumper {
                    let text = format!(
                        "{}each binding of the axes {} is compiled at its first execution and dumped as its own module\n",
                        report.execution.summary(),
                        axes.join(", ")
                    );
                    d.write("plan.txt", &text)?;
                }
                exec::Runner::Dynamic(Box::new(spec))
            }
            None => {
                let t2 = Instant::now();
                let pool = self.thread_pool()?;
                let plan = plan::build(module, self.plan_options(dumper.is_some()), pool.as_deref())?;
                let planning = t2.elapsed();
                plan.trace_summary(planning);
                plan.report(planning, &mut report, &mut constants);
                report.execution = report::of_plan(&plan);
                report::check(&report.execution, self.opts.fallback, &plan.module.name)?;
                if let Some(d) = &dumper {
                    d.plan(&plan)?;
                }
                exec::Runner::Plan { plan: Arc::new(plan), pool }
            }
        };
        tracing::debug!(
            target: "tensorjit::jit",
            verify_ms = verify_time.as_secs_f64() * 1e3,
            passes_ms = passes_time.as_secs_f64() * 1e3,
            total_ms = t0.elapsed().as_secs_f64() * 1e3,
            "compiled"
        );
        report.total = t0.elapsed();
        Ok(JitExecutable::new(runner, sig, self.opts.while_limit, self.opts.spin).with_report(report, constants))
    }
}

/// Which passes [`JitBackend::compile_with`] runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pipeline {
    /// The whole pipeline: rounds of the cheap passes, egg fusion, rounds again.
    Full,
    /// The cheap passes only, on a specialisation of a module the full pipeline optimised.
    Specialised,
}

impl JitBackend {
    /// A backend with the same options and thread pool (started: call [`Self::thread_pool`]
    /// first), for compiling specialisations after this one is gone.
    fn fork(&self) -> JitBackend {
        JitBackend {
            caps: self.caps.clone(),
            opts: self.opts.clone(),
            stream_min_bytes: self.stream_min_bytes,
            own_pool: self.own_pool.clone(),
            finalized: AtomicBool::new(false),
        }
    }
}

impl Backend for JitBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> String {
        let pool = match self.opts.threads {
            Threads::Own(_) => "own pool",
            _ => "shared pool",
        };
        let mut d = format!(
            "jit: Cranelift-compiled fused loops ({}) and reference kernels, parallelism={} ({pool})",
            crate::codegen::host_isa_description(),
            self.parallelism()
        );
        let config = self.opts.to_string();
        if !config.is_empty() {
            d.push_str(&format!(", config {config:?}"));
        }
        d
    }

    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn compile(&self, module: Module) -> Result<Arc<dyn Executable>> {
        Ok(Arc::new(self.compile_jit(module)?))
    }

    fn finalize(&self) {
        self.finalized.store(true, Ordering::SeqCst);
    }

    fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        assert!(JitBackend::new("").is_ok());
        let b = JitBackend::new("parallelism=3").unwrap();
        assert_eq!(b.parallelism(), 3);
        assert!(JitBackend::new("ops_sequential").is_err(), "the dead option is gone");
        let e = JitBackend::new("bogus").err().unwrap().to_string();
        assert!(e.contains("bogus") && e.contains("parallelism") && e.contains("dump"), "{e}");
        assert!(JitBackend::new("parallelism=0").is_err());
        assert!(JitBackend::new("parallelism").is_err());
        assert_eq!(JitBackend::new("parallelism=1024").unwrap().parallelism(), 1024);
        let e = JitBackend::new("parallelism=100000").err().unwrap().to_string();
        assert!(e.contains("100000") && e.contains("1024"), "{e}");
        assert!(JitBackend::new("while_limit=10").is_ok());
        assert!(JitBackend::new("while_limit=x").is_err());
        assert!(JitBackend::new("dump").is_err());
        assert_eq!(JitBackend::new("dump=/x").unwrap().dump_dir(), Some(PathBuf::from("/x")));
    }

    #[test]
    fn executable_is_send_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<JitExecutable>();
        send_sync::<JitBackend>();
    }
}
