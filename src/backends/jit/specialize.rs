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
//! process-wide constant cache (`shared`) instead of being packed again. The cheap tier starts
//! from the dynamic module with its projections sharing an input already merged
//! (`qkv::run_dynamic`: the concatenated weights are made once, not per binding), and the
//! GEMM operands of its constant weights are packed once, when the dynamic module is compiled
//! (they do not depend on the axes), and held by the specialiser: no binding packs, not even
//! the first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::api::backend::{ExecOptions, Executable};
use crate::api::buffer::Buffer;
use crate::api::{ExecutionReport, SpecializationStats};
use crate::error::{Error, Result};
use crate::ir::dynamic::Bindings;
use crate::ir::module::Module;
use crate::ir::shape::Shape;
use crate::passes::specialize;

use super::fast::Packed;
use super::shared::Accounting;
use super::{JitBackend, JitExecutable};

/// The compiled plans of one module with dynamic axes.
pub(crate) struct Specializer {
    /// The dynamic module (verified and optimised once): what the background recompilations
    /// specialise.
    module: Arc<Module>,
    /// `module` with the dense layers that share an input merged (the same `Arc` when none
    /// are): what the cheap tier specialises at each miss.
    cheap: Arc<Module>,
    /// The GEMM operands of `cheap`'s constants, packed when the dynamic module was compiled:
    /// held so that the process-wide constant cache keeps them for every specialisation.
    _prepacked: Packed,
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

/// A binding whose plan to recompile with the whole pipeline (from the dynamic module
/// specialised to `bindings`), for the plan cached under `key`.
struct Upgrade {
    key: SmallVec<[i64; 4]>,
    label: String,
    bindings: Bindings,
}

struct Entry {
    key: SmallVec<[i64; 4]>,
    exe: Arc<JitExecutable>,
    last_use: u64,
}

impl Specializer {
    /// The specialiser of `module` (accepted by [`specialize::unsupported`]), compiling with a
    /// fork of `backend` (its thread pool started). Merges the dense layers sharing an input
    /// and packs the GEMM operands of the constants now, adding those phases to `phases` and
    /// the packed bytes to `acct`.
    pub(crate) fn new(
        module: Module,
        backend: JitBackend,
        phases: &mut Vec<(String, Duration)>,
        acct: &mut Accounting,
    ) -> Result<Specializer> {
        let axes = specialize::axis_names(&module);
        let stats = SpecializationStats {
            axes: axes.clone(),
            capacity: backend.opts.specializations,
            ..SpecializationStats::default()
        };
        let module = Arc::new(module);
        let t = Instant::now();
        let cheap = if backend.opts.fusion { merged(&module)? } else { None };
        let cheap = cheap.map_or_else(|| module.clone(), Arc::new);
        phases.push(("merge denses (dynamic)".to_string(), t.elapsed()));
        let t = Instant::now();
        let prepacked = prepack(&cheap, &axes, &backend, acct);
        phases.push(("gemm packing (dynamic)".to_string(), t.elapsed()));
        Ok(Specializer {
            module,
            cheap,
            _prepacked: prepacked,
            backend,
            axes,
            cache: Arc::new(Mutex::new(Cache { stats, ..Cache::default() })),
        })
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        lock(&self.cache)
    }

    /// The plan for the sizes of `inputs`: from the cache, or compiled and cached (evicting the
    /// least recently used plan when full), with the recompilation with the whole pipeline to
    /// queue ([`Self::upgrade`]) once the execution that needed the plan is done (so that on a
    /// machine with one free core it does not slow that execution). Errors: inputs that bind
    /// an axis to two sizes, or sizes that make a node's shape invalid (named in the error).
    fn executable(&self, inputs: &[&Buffer]) -> Result<(Arc<JitExecutable>, Option<Upgrade>)> {
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
                return Ok((exe, None));
            }
        }
        // Compiled outside the lock: other bindings keep running meanwhile. Two executions
        // missing on the same binding at once both compile; the first one stored is kept.
        let t0 = Instant::now();
        let label = self.binding_label(&key);
        let mut module = specialize::specialize(&self.cheap, &bindings)?;
        module.name = format!("{}[{label}]", self.module.name);
        let specialize_time = t0.elapsed();
        let exe = Arc::new(self.backend.compile_specialised(module)?);
        let took = t0.elapsed();
        tracing::debug!(target: "tensorjit::jit", module = %self.module.name, binding = %label,
            ms = took.as_secs_f64() * 1e3, "specialised");
        let mut c = self.cache();
        c.stats.misses += 1;
        c.stats.compile_time += took;
        if let Some(r) = exe.compile_report() {
            c.stats.latest_compile =
                std::iter::once(("specialize".to_string(), specialize_time)).chain(r.phases).collect();
            c.latest = Some((label.clone(), r.execution));
        }
        c.stats.latest_constants = exe.constant_memory().unwrap_or_default();
        c.clock += 1;
        let now = c.clock;
        if let Some(e) = c.entries.iter_mut().find(|e| e.key == key) {
            e.last_use = now;
            return Ok((e.exe.clone(), None));
        }
        if c.entries.len() >= self.backend.opts.specializations
            && let Some(oldest) = c.entries.iter().enumerate().min_by_key(|(_, e)| e.last_use).map(|(i, _)| i)
        {
            c.entries.swap_remove(oldest);
            c.stats.evictions += 1;
        }
        c.entries.push(Entry { key: key.clone(), exe: exe.clone(), last_use: now });
        drop(c);
        let upgrade = self.backend.opts.fusion.then_some(Upgrade { key, label, bindings });
        Ok((exe, upgrade))
    }

    /// Recompiles the specialised `module` with the whole pass pipeline on a background thread
    /// and replaces the cached plan of `key` with it, if that plan is still cached (not evicted,
    /// not finalized) and the executable still alive. A failure (no thread, a compile error)
    /// keeps the plan compiled with the cheap passes, which is correct, only less fused.
    fn upgrade(&self, job: Upgrade) {
        {
            let mut c = self.cache();
            c.pending.push_back(job);
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
        let dynamic = self.module.clone();
        let spawned = std::thread::Builder::new().name("tensorjit-specialise".into()).spawn(move || {
            while let Some(job) = next_upgrade(&cache) {
                let compiled = specialize::specialize(&dynamic, &job.bindings).and_then(|mut m| {
                    m.name = format!("{}[{}]", dynamic.name, job.label);
                    backend.compile_jit(m)
                });
                let exe = match compiled {
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
        let (exe, upgrade) = self.executable(inputs)?;
        let out = exe.execute_with(inputs, donate, opts);
        self.upgrade_after(upgrade);
        out
    }

    pub(crate) fn execute_into(
        &self,
        inputs: &[&Buffer],
        donate: &[bool],
        outputs: &[&Buffer],
        opts: &ExecOptions,
    ) -> Result<()> {
        let (exe, upgrade) = self.executable(inputs)?;
        let out = exe.execute_into(inputs, donate, outputs, opts);
        self.upgrade_after(upgrade);
        out
    }

    /// Queues the recompilation [`Self::executable`] asked for, if any.
    fn upgrade_after(&self, upgrade: Option<Upgrade>) {
        if let Some(job) = upgrade {
            self.upgrade(job);
        }
    }
}

/// `module` with the dense layers sharing an input merged ([`crate::passes::egraph::qkv`],
/// also over dynamic inputs) and the layers it replaced removed; `None` when none merge.
fn merged(module: &Module) -> Result<Option<Module>> {
    let mut m = module.clone();
    if crate::passes::egraph::qkv::run_dynamic(&mut m) == 0 {
        return Ok(None);
    }
    crate::passes::dce::run(&mut m)?;
    Ok(Some(m))
}

/// Packs the GEMM operands of `module`'s constants ([`super::plan::pack_constants`]) on a
/// specialisation of it with every axis of size 1 (the packing depends on the weights only).
/// Best effort: a module that size does not specialise packs at each binding instead.
fn prepack(module: &Module, axes: &[String], backend: &JitBackend, acct: &mut Accounting) -> Packed {
    let probe: Bindings = axes.iter().map(|a| (a.clone(), 1)).collect();
    let packed = specialize::specialize(module, &probe).and_then(|mut m| {
        let pool = backend.thread_pool()?;
        super::plan::pack_constants(&mut m, pool.as_deref(), acct, backend.opts.winograd)
    });
    packed.unwrap_or_else(|e| {
        tracing::debug!(target: "tensorjit::jit", module = %module.name, error = %e,
            "no packing at compile time: each binding packs its GEMM operands");
        Packed::default()
    })
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
