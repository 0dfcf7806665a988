//! Dumps of every compilation stage of the "jit" backend: written to files by
//! `TENSORJIT_DUMP=DIR` or `dump=DIR`, or returned by [`JitBackend::compile_stages`] (what
//! `tensorjit dump` prints).
//!
//! Each compiled module gets its own directory `DIR/NNNN-<module name>/` holding:
//! `ir-00-input.tjir` and `ir-NN-<pass>.tjir` (the IR before the pipeline and after each pass that
//! changed it; they replay with `tensorjit run`), `constants.bin` (the data of the constants with
//! more than [`crate::ir::text::DEFAULT_DUMP_CONSTANT_ELEMENTS`] elements, which the `.tjir`
//! files reference as `file("constants.bin", …)`; shared by all of them), `passes.txt` (pass
//! timings), `egg.txt`, `clusters.txt`, `kernel-K.clif` and `kernel-K.asm` (Cranelift IR and
//! machine code of cluster K's loop) and `plan.txt` (the steps with their buffer assignments, or
//! why the interpreter runs the module).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{ConvLayout, JitBackend, plan};
use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::ir::text::{PrintOptions, SideFile, print_module_with_side_file};
use crate::passes::egraph::EggConfig;
use crate::passes::{self, PassCtx};

/// The environment variable naming the dump directory.
pub use crate::env::DUMP_ENV;

/// The side file of a dump directory's `.tjir` files.
pub const CONSTANTS_FILE: &str = "constants.bin";

/// Writes the files of one compilation into a fresh directory under a root.
pub(crate) struct Dumper {
    dir: PathBuf,
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(format!("jit dump: cannot write {}: {e}", path.display()))
}

/// Keeps letters, digits, `-` and `_` of a module name (others become `_`).
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .take(48)
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    if s.is_empty() { "module".to_string() } else { s }
}

/// The machine code of one compiled loop.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelListing {
    /// The dump file stem: `kernel-K` for cluster K of main, `fN-kernel-K` for another
    /// function's, with `.stream` appended for the non-temporal-store variant.
    pub name: String,
    /// The function the loop belongs to (its label, e.g. `main`).
    pub function: String,
    /// The cluster it runs.
    pub cluster: usize,
    /// Cranelift IR.
    pub clif: String,
    /// The machine code Cranelift produced (its listing).
    pub asm: String,
}

/// Every stage of one jit compilation, as [`JitBackend::compile_stages`] returns it.
#[derive(Clone, Debug)]
pub struct Stages {
    /// The module as given.
    pub input: Module,
    /// `(label, module)` after each pass that changed the module, in order (`"01-fold"`, …;
    /// the labels of the dump files `ir-<label>.tjir`).
    pub passes: Vec<(String, Module)>,
    /// `(pass, time, changed)` of every pass run, in order.
    pub timings: Vec<(String, Duration, bool)>,
    /// The egg fusion report (`None` with `fusion=off`).
    pub egg: Option<String>,
    /// The module after the whole pipeline (what is planned).
    pub optimized: Module,
    /// Why the interpreter runs the module (dynamic shapes it cannot specialise); then there are no
    /// clusters, kernels or plan steps.
    pub delegated: Option<String>,
    /// The clusters of every function (`clusters.txt`).
    pub clusters: String,
    /// The compiled loops.
    pub kernels: Vec<KernelListing>,
    /// The plan (`plan.txt`).
    pub plan: String,
}

/// The pass timings as `passes.txt` lists them.
pub fn format_timings(timings: &[(String, Duration, bool)]) -> String {
    let mut t = String::new();
    for (name, d, changed) in timings {
        t.push_str(&format!("{name}: {:.3} ms{}\n", d.as_secs_f64() * 1e3, if *changed { " (changed)" } else { "" }));
    }
    t
}

/// The clusters listing and the compiled loops of a plan.
fn listings(plan: &plan::Plan) -> (String, Vec<KernelListing>) {
    let m = &plan.module;
    let mut clusters = String::new();
    let mut kernels = Vec::new();
    for fp in &plan.funcs {
        // main's files keep their plain names; other functions' are prefixed.
        let prefix = if fp.func == m.main { String::new() } else { format!("{}-", fp.func) };
        if fp.func != m.main && !fp.clustering.clusters.is_empty() {
            clusters.push_str(&format!("\n{} ({}):\n", m.func_label(fp.func), fp.func));
        }
        clusters.push_str(&crate::lower::cluster::describe(m, &fp.clustering));
        for s in &fp.steps {
            if let plan::Step::Loop(l) = s {
                let listing = |suffix: &str, code: &crate::codegen::CompiledLoop| KernelListing {
                    name: format!("{prefix}kernel-{}{suffix}", l.cluster),
                    function: m.func_label(fp.func),
                    cluster: l.cluster,
                    clif: code.clif.to_string(),
                    asm: code.disasm.to_string(),
                };
                kernels.push(listing("", &l.code));
                if let Some(nt) = &l.streaming {
                    kernels.push(listing(".stream", nt));
                }
            }
        }
    }
    (clusters, kernels)
}

impl Dumper {
    /// A new numbered directory for module `name` under `root` (created).
    pub(crate) fn new(root: &Path, name: &str) -> Result<Dumper> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{n:04}-{}-{}", std::process::id(), sanitize(name)));
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        Ok(Dumper { dir })
    }

    /// Writes `file` with `text`.
    pub(crate) fn write(&self, file: &str, text: &str) -> Result<()> {
        let p = self.dir.join(file);
        std::fs::write(&p, text).map_err(|e| io(&p, e))
    }

    /// Writes the IR snapshots (large constants in [`CONSTANTS_FILE`], shared by all of
    /// them) and pass timings of a pipeline run.
    pub(crate) fn passes(&self, ctx: &PassCtx) -> Result<()> {
        let opts = PrintOptions::dump();
        let mut side = SideFile::new(CONSTANTS_FILE)?;
        for (label, m) in &ctx.snapshots {
            self.write(&format!("ir-{label}.tjir"), &print_module_with_side_file(m, &opts, &mut side))?;
        }
        if !side.is_empty() {
            side.write_file(&self.dir.join(CONSTANTS_FILE))?;
        }
        self.write("passes.txt", &format_timings(&ctx.timings))
    }

    /// Writes `clusters.txt`, the Cranelift IR and machine code of every loop, and `plan.txt`.
    pub(crate) fn plan(&self, plan: &plan::Plan) -> Result<()> {
        let (clusters, kernels) = listings(plan);
        for k in &kernels {
            self.write(&format!("{}.clif", k.name), &k.clif)?;
            self.write(&format!("{}.asm", k.name), &k.asm)?;
        }
        self.write("clusters.txt", &clusters)?;
        let report = super::report::of_plan(plan);
        self.write("execution.txt", &report.to_string())?;
        self.write("plan.txt", &format!("{}\n{}", report.summary(), plan.describe()))
    }
}

impl JitBackend {
    /// Runs this backend's pipeline on `module` as [`JitBackend::compile_jit`] does (same
    /// passes, options and plan), recording every stage instead of returning an executable:
    /// the IR after each pass, the egg report, the clusters, each loop's Cranelift IR and
    /// machine code, and the plan. Needs no inputs; nothing is executed.
    pub fn compile_stages(&self, mut module: Module) -> Result<Stages> {
        crate::ir::verify::verify(&module)?;
        let input = module.clone();
        let (ctx, report) = self.optimize(&mut module, true)?;
        // The first snapshot is the input.
        let passes = ctx.snapshots.into_iter().filter(|(label, _)| label != "00-input").collect();
        let optimized = module.clone();
        let (delegated, clusters, kernels, plan) = match plan::needs_interpreter(&module) {
            Some(why) => {
                let plan = format!("delegated to the interpreter: {why}\n");
                (Some(why), String::new(), Vec::new(), plan)
            }
            None => {
                let pool = self.thread_pool()?;
                let p = plan::build(module, self.plan_options(true), pool.as_deref())?;
                let (clusters, kernels) = listings(&p);
                let head = super::report::of_plan(&p).summary();
                (None, clusters, kernels, format!("{head}\n{}", p.describe()))
            }
        };
        Ok(Stages {
            input,
            passes,
            timings: ctx.timings,
            egg: report.map(|r| r.to_string()),
            optimized,
            delegated,
            clusters,
            kernels,
            plan,
        })
    }

    /// This backend's pass pipeline on `module` (egg fusion when `fusion` is on); `record_ir`
    /// keeps the IR after each pass in the returned context.
    pub(crate) fn optimize(
        &self,
        module: &mut Module,
        record_ir: bool,
    ) -> Result<(PassCtx, Option<passes::egraph::EggReport>)> {
        let mut ctx = PassCtx { record_ir, ..PassCtx::default() };
        let egg = self.opts.fusion.then(EggConfig::default);
        let report = passes::optimize_with_fusion(module, &mut ctx, egg.as_ref())?;
        self.conv_layout(module, &mut ctx)?;
        Ok((ctx, report))
    }

    /// The cheap passes only (folding, simplification, CSE, DCE, and the merging of dense layers
    /// that share an input; no egg rewriting), for a specialisation of a module that [`Self::optimize`] already fused; `record_ir` as there.
    pub(crate) fn optimize_specialised(
        &self,
        module: &mut Module,
        record_ir: bool,
    ) -> Result<(PassCtx, Option<passes::egraph::EggReport>)> {
        let mut ctx = PassCtx { record_ir, ..PassCtx::default() };
        passes::optimize(module, &mut ctx)?;
        if self.opts.fusion {
            // The one fusion step that needs static shapes (it skips dense layers over dynamic
            // inputs): projections sharing an input merged into one GEMM.
            passes::merge_denses(module, &mut ctx)?;
        }
        // Shapes are static now: the convolutions the full pipeline saw with dynamic axes.
        self.conv_layout(module, &mut ctx)?;
        Ok((ctx, None))
    }

    /// The `conv_layout` option's pass ([`passes::layout`]), after fusion (which the layout
    /// change does not affect) and before the plan; when it changed the module, rounds of the
    /// cheap passes fold the transposed constants.
    fn conv_layout(&self, module: &mut Module, ctx: &mut PassCtx) -> Result<()> {
        let layout: Option<fn(&mut Module) -> Result<bool>> = match self.opts.conv_layout {
            ConvLayout::Auto | ConvLayout::Nhwc => Some(passes::layout::run_all),
            ConvLayout::Small => Some(passes::layout::run_small),
            _ => None,
        };
        if let Some(pass) = layout
            && passes::run_pass(module, ctx, "layout", pass)?
        {
            passes::optimize(module, ctx)?;
        }
        Ok(())
    }

    /// How this backend plans a module (`disasm`: record machine code listings).
    pub(crate) fn plan_options(&self, disasm: bool) -> plan::PlanOptions {
        plan::PlanOptions {
            disasm,
            ordered: self.opts.reductions == super::Reductions::Ordered,
            stream_min_bytes: self.stream_min_bytes,
            winograd: self.opts.winograd,
            conv_chains: self.opts.conv_chains,
            conv_blocks: match self.opts.conv_blocks {
                super::ConvBlocks::Off => None,
                super::ConvBlocks::On => Some(0),
                _ => Some(crate::kernels::gemm::cache_sizes().l2),
            },
            threads: 1,
        }
    }
}
