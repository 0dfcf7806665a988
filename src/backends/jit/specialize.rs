//! Modules with dynamic axes on the jit: one static plan per binding of the axes, compiled at the
//! first execution with those sizes and kept in a least-recently-used cache of
//! `specializations=N` plans, with its counters in [`SpecializationStats`]. The dynamic module
//! went through the whole pass pipeline (egg fusion included) once; a binding costs
//! `passes::specialize` (shapes made static, shape ops and small iotas made constants), the
//! cheap passes again (folding what the sizes made constant, merging projections that share an
//! input), planning and code generation, so that the first execution at a new shape waits
//! little. The plan is then recompiled in the background with the whole pipeline on the static
//! module (egg fusion finds what dynamic shapes hid from it) and swapped into the cache when
//! done ([`SpecializationStats::upgraded`]): warm executions run the plan a module compiled for
//! those sizes gets.
//!
//! A plan for one binding is exactly the plan of a module compiled for those fixed sizes, so a
//! warm execution costs what the static module's does plus one cache lookup. Recompiling is
//! cheap where it matters: the specialised modules share the dynamic module's constants (the
//! same `Arc`s), so packed GEMM operands and large constants are found by identity in the
//! process-wide constant cache (`shared`) instead of being packed again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use smallvec::SmallVec;

use crate::api::backend::{ExecOptions, Executable};
use crate::api::buffer::Buffer;
use crate::api::{ExecutionReport, SpecializationStats};
use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::shape::Shape;
use crate::passes::specialize;

use super::{JitBackend, JitExecutable};

/// The compiled plans of one module with dynamic axes.
pub(crate) struct Specializer {
    /// The dynamic module (verified and optimised once), specialised at each miss.
    module: Module,
    /// What compiles a specialisation: the backend's options and thread pool.
    backend: JitBackend,
    /// The names of the axes, in key order.
    axes: Vec<String>,
    /// Shared with the background recompilations (which hold it weakly).
    cache: Arc<Mutex<Cache>>,
}

#[derive(Default)]
struct Cache {
    /// Few entries (at most `specializations`): a linear scan beats hashing the key.
    entries: Vec<Entry>,
    /// Incremented at every use, for least-recently-used eviction.
    clock: u64,
    stats: SpecializationStats,
    /// The report of the latest compiled plan and its binding.
    latest: Option<(String, ExecutionReport)>,
    /// Recompilations with the whole pipeline waiting for the background worker, oldest first
    /// (at most `specializations`: older ones are dropped, their plans would be evicted).
    pending: VecDeque<Upgrade>,
    /// Whether a worker thread is draining `pending` (one per executable, so that a burst of
    /// new shapes never starts a thread per shape).
    worker: bool,
}

/// A specialised module to recompile with the whole pipeline, for the plan cached under `key`.
struct Upgrade {
    key: SmallVec<[i64; 4]>,
    label: String,
    module: Module,
}

struct Entry {
    key: SmallVec<[i64; 4]>,
    exe: Arc<JitExecutable>,
    last_use: u64,
}

impl Specializer {
    /// The specialiser of `module` (accepted by [`specialize::unsupported`]), compiling with a
    /// fork of `backend`.
    pub(crate) fn new(module: Module, backend: JitBackend) -> Specializer {
        let axes = specialize::axis_names(&module);
        let stats = SpecializationStats {
            axes: axes.clone(),
            capacity: backend.opts.specializations,
            ..SpecializationStats::default()
        };
        Specializer { module, backend, axes, cache: Arc::new(Mutex::new(Cache { stats, ..Cache::default() })) }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        lock(&self.cache)
    }

    /// The plan for the sizes of `inputs`: from the cache, or compiled and cached (evicting the
    /// least recently used plan when full). Errors: inputs that bind an axis to two sizes, or
    /// sizes that make a node's shape invalid (named in the error).
    pub(crate) fn executable(&self, inputs: &[&Buffer]) -> Result<Arc<JitExecutable>> {
        let params = self.module.func(self.module.main).params.len();
        if inputs.len() != params {
            return Err(Error::invalid("execute", format!("expects {params} inputs, got {}", inputs.len())));
        }
        let shapes: SmallVec<[&Shape; 8]> = inputs.iter().map(|b| b.shape()).collect();
        let bindings = specialize::bind_inputs(&self.module, &shapes)?;
        let key: SmallVec<[i64; 4]> = self.axes.iter().map(|a| bindings.get(a).copied().unwrap_or(-1)).collect();
        {
            let mut c = self.cache();
            c.clock += 1;
            let now = c.clock;
            if let Some(e) = c.entries.iter_mut().find(|e| e.key == key) {
                e.last_use = now;
                let exe = e.exe.clone();
                c.stats.hits += 1;
                return Ok(exe);
            }
        }
        // Compiled outside the lock: other bindings keep running meanwhile. Two executions
        // missing on the same binding at once both compile; the first one stored is kept.
        let t0 = Instant::now();
        let label = self.binding_label(&key);
        let mut module = specialize::specialize(&self.module, &bindings)?;
        module.name = format!("{}[{label}]", self.module.name);
        let whole = self.backend.opts.fusion.then(|| module.clone());
        let exe = Arc::new(self.backend.compile_specialised(module)?);
        let took = t0.elapsed();
        tracing::debug!(target: "tensorjit::jit", module = %self.module.name, binding = %label,
            ms = took.as_secs_f64() * 1e3, "specialised");
        let mut c = self.cache();
        c.stats.misses += 1;
        c.stats.compile_time += took;
        if let Some(r) = exe.compile_report() {
            c.latest = Some((label.clone(), r.execution));
        }
        c.clock += 1;
        let now = c.clock;
        if let Some(e) = c.entries.iter_mut().find(|e| e.key == key) {
            e.last_use = now;
            return Ok(e.exe.clone());
        }
        if c.entries.len() >= self.backend.opts.specializations
            && let Some(oldest) = c.entries.iter().enumerate().min_by_key(|(_, e)| e.last_use).map(|(i, _)| i)
        {
            c.entries.swap_remove(oldest);
            c.stats.evictions += 1;
        }
        c.entries.push(Entry { key: key.clone(), exe: exe.clone(), last_use: now });
        drop(c);
        if let Some(m) = whole {
            self.upgrade(key, label, m);
        }
        Ok(exe)
    }

    /// Recompiles the specialised `module` with the whole pass pipeline on a background thread
    /// and replaces the cached plan of `key` with it, if that plan is still cached (not evicted,
    /// not finalized) and the executable still alive. A failure (no thread, a compile error)
    /// keeps the plan compiled with the cheap passes, which is correct, only less fused.
    fn upgrade(&self, key: SmallVec<[i64; 4]>, label: String, module: Module) {
        {
            let mut c = self.cache();
            c.pending.push_back(Upgrade { key, label, module });
            while c.pending.len() > self.backend.opts.specializations {
                c.pending.pop_front();
            }
            if c.worker {
                return;
            }
            c.worker = true;
        }
        let cache = Arc::downgrade(&self.cache);
        let backend = self.backend.fork();
        let spawned = std::thread::Builder::new().name("tensorjit-specialise".into()).spawn(move || {
            while let Some(job) = next_upgrade(&cache) {
                let exe = match backend.compile_jit(job.module) {
                    Ok(exe) => Arc::new(exe),
                    Err(e) => {
                        tracing::debug!(target: "tensorjit::jit", binding = %job.label, error = %e,
                            "background recompilation failed: the plan from the cheap passes stays");
                        continue;
                    }
                };
                let Some(cache) = cache.upgrade() else { return };
                let mut c = lock(&cache);
                let Some(entry) = c.entries.iter_mut().find(|e| e.key == job.key) else { continue };
                entry.exe = exe.clone();
                c.stats.upgraded += 1;
                if let (Some((latest, _)), Some(r)) = (&c.latest, exe.compile_report())
                    && *latest == job.label
                {
                    c.latest = Some((job.label, r.execution));
                }
            }
        });
        if let Err(e) = spawned {
            tracing::debug!(target: "tensorjit::jit", error = %e, "no thread for the background recompilation");
            let mut c = self.cache();
            c.worker = false;
            c.pending.clear();
        }
    }

    /// `batch=8, sequence=128`.
    fn binding_label(&self, key: &[i64]) -> String {
        self.axes.iter().zip(key).map(|(a, k)| format!("{a}={k}")).collect::<Vec<_>>().join(", ")
    }

    pub(crate) fn stats(&self) -> SpecializationStats {
        let c = self.cache();
        SpecializationStats { cached: c.entries.len(), ..c.stats.clone() }
    }

    /// The execution report: the latest compiled plan's steps, and what they are.
    pub(crate) fn report(&self) -> ExecutionReport {
        let c = self.cache();
        let axes = self.axes.join(", ");
        match &c.latest {
            Some((label, r)) => ExecutionReport {
                specialized: Some(format!(
                    "dynamic axes {axes}: specialised per binding, {} compiled; steps of {label}",
                    c.stats.misses
                )),
                ..r.clone()
            },
            None => ExecutionReport {
                specialized: Some(format!("dynamic axes {axes}: specialised per binding at run time, none yet")),
                ..ExecutionReport::default()
            },
        }
    }

    /// Frees the memory each plan keeps between executions ([`JitExecutable::release_memory`]).
    pub(crate) fn release_memory(&self) {
        let plans: Vec<Arc<JitExecutable>> = self.cache().entries.iter().map(|e| e.exe.clone()).collect();
        for exe in plans {
            exe.release_memory();
        }
    }

    /// Finalizes and drops every plan.
    pub(crate) fn finalize(&self) {
        let entries = {
            let mut c = self.cache();
            std::mem::take(&mut c.entries)
        };
        for e in &entries {
            e.exe.finalize();
        }
    }

    pub(crate) fn execute_with(&self, inputs: &[&Buffer], donate: &[bool], opts: &ExecOptions) -> Result<Vec<Buffer>> {
        self.executable(inputs)?.execute_with(inputs, donate, opts)
    }

    pub(crate) fn execute_into(
        &self,
        inputs: &[&Buffer],
        donate: &[bool],
        outputs: &[&Buffer],
        opts: &ExecOptions,
    ) -> Result<()> {
        self.executable(inputs)?.execute_into(inputs, donate, outputs, opts)
    }
}

/// The cache, also after a panic while it was held (its state is consistent between
/// statements).
fn lock(cache: &Mutex<Cache>) -> std::sync::MutexGuard<'_, Cache> {
    cache.lock().unwrap_or_else(|e| e.into_inner())
}

/// The next recompilation whose plan is still cached; `None` (and the worker marked stopped)
/// when there is none or the executable is gone.
fn next_upgrade(cache: &std::sync::Weak<Mutex<Cache>>) -> Option<Upgrade> {
    let cache = cache.upgrade()?;
    let mut c = lock(&cache);
    while let Some(job) = c.pending.pop_front() {
        if c.entries.iter().any(|e| e.key == job.key) {
            return Some(job);
        }
    }
    c.worker = false;
    None
}
