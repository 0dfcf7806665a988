//! The optimisation pipeline: an explicit list of passes over an [`ir::Module`](crate::ir::Module),
//! with the verifier run between passes when asked (always in debug builds and tests).
//!
//! Each pass is a function `run(&mut Module) -> Result<bool>` returning whether it changed
//! anything; [`optimize`] runs them in rounds until nothing changes.
// Without the jit backend (and outside this crate's own tests) only the ONNX importer's
// dead-code elimination ([`dce`]) runs; the rest of the pipeline is unused there.
#![cfg_attr(not(any(feature = "jit", feature = "internals")), allow(dead_code))]

pub mod conv_bn;
pub mod cse;
pub mod dce;
pub mod egraph;
pub mod fold;
pub mod layout;
pub mod rewrite;
pub mod simplify;
pub mod specialize;

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::ir::module::Module;

/// Options and records of one pipeline run.
#[derive(Debug)]
pub struct PassCtx {
    /// Run the verifier after every pass that changed the module.
    pub verify: bool,
    /// Keep the module before the pipeline and after each pass that changed it.
    pub record_ir: bool,
    /// `(pass name, time, changed)` for each pass run, in order.
    pub timings: Vec<(String, Duration, bool)>,
    /// `(label, module)` snapshots when `record_ir` is set: `"00-input"`, `"01-fold"`, …
    /// (copies share the constants' data; print them with [`crate::ir::text`]).
    pub snapshots: Vec<(String, Module)>,
}

// Derivable only in release builds, where `cfg!(debug_assertions)` is false.
#[allow(clippy::derivable_impls)]
impl Default for PassCtx {
    fn default() -> PassCtx {
        PassCtx { verify: cfg!(debug_assertions), record_ir: false, timings: vec![], snapshots: vec![] }
    }
}

type Pass = fn(&mut Module) -> Result<bool>;

/// The canonicalisation passes, in the order one round runs them.
pub const PIPELINE: [(&str, Pass); 5] =
    [("fold", fold::run), ("conv-bn", conv_bn::run), ("simplify", simplify::run), ("cse", cse::run), ("dce", dce::run)];

/// Maximum number of rounds of [`PIPELINE`].
pub const MAX_ROUNDS: usize = 8;

fn snapshot(ctx: &mut PassCtx, label: String, m: &Module) {
    if ctx.record_ir {
        ctx.snapshots.push((label, m.clone()));
    }
}

/// Runs one named pass with timing, snapshot and verification.
pub fn run_pass(m: &mut Module, ctx: &mut PassCtx, name: &str, pass: Pass) -> Result<bool> {
    let t = Instant::now();
    let changed = pass(m)?;
    let elapsed = t.elapsed();
    tracing::trace!(target: "tensorjit::passes", pass = name, changed, ms = elapsed.as_secs_f64() * 1e3, "pass");
    ctx.timings.push((name.to_string(), elapsed, changed));
    if changed {
        let label = format!("{:02}-{name}", ctx.snapshots.len());
        snapshot(ctx, label, m);
        if ctx.verify {
            crate::ir::verify::verify(m).map_err(|e| match e {
                Error::Verify(v) => Error::Verify(v.into_iter().map(|s| format!("after pass {name}: {s}")).collect()),
                other => other,
            })?;
        }
    }
    Ok(changed)
}

/// Runs the egg fusion pass ([`egraph::run`]) as one pipeline step: timed, snapshotted when it
/// changed the module, and verified afterwards when `ctx.verify` is set.
pub fn run_egg(m: &mut Module, ctx: &mut PassCtx, cfg: &egraph::EggConfig) -> Result<egraph::EggReport> {
    let t = Instant::now();
    let report = egraph::run(m, cfg)?;
    let changed = report.changed();
    tracing::debug!(
        target: "tensorjit::passes",
        changed,
        rewritten = ?report.rewritten,
        fused_ops = ?report.fused_ops,
        skipped = ?report.skipped,
        ms = report.total_time.as_secs_f64() * 1e3,
        "egg fusion"
    );
    if tracing::enabled!(target: "tensorjit::passes", tracing::Level::TRACE) {
        tracing::trace!(target: "tensorjit::passes", "egg fusion report:\n{report}");
    }
    ctx.timings.push(("egg-fusion".to_string(), t.elapsed(), changed));
    if changed {
        let label = format!("{:02}-egg-fusion", ctx.snapshots.len());
        snapshot(ctx, label, m);
        if ctx.verify {
            crate::ir::verify::verify(m).map_err(|e| match e {
                Error::Verify(v) => {
                    Error::Verify(v.into_iter().map(|s| format!("after pass egg-fusion: {s}")).collect())
                }
                other => other,
            })?;
        }
    }
    Ok(report)
}

/// Merges dense layers that share their input ([`egraph::qkv`], the last step of the egg
/// pass) on its own, then cleans up with [`PIPELINE`] rounds when it merged any: for modules
/// the egg pass already saw with dynamic shapes, made static since.
pub fn merge_denses(m: &mut Module, ctx: &mut PassCtx) -> Result<bool> {
    let t = Instant::now();
    let changed = egraph::qkv::run(m) > 0;
    ctx.timings.push(("merge-denses".to_string(), t.elapsed(), changed));
    if changed {
        let label = format!("{:02}-merge-denses", ctx.snapshots.len());
        snapshot(ctx, label, m);
        if ctx.verify {
            crate::ir::verify::verify(m)?;
        }
        rounds(m, ctx)?;
    }
    Ok(changed)
}

/// The "jit" pipeline: [`optimize`], then (when `egg` is given) the fusion pass and another
/// [`optimize`] to clean up what fusion left dead or duplicated. Returns the fusion report.
pub fn optimize_with_fusion(
    m: &mut Module,
    ctx: &mut PassCtx,
    egg: Option<&egraph::EggConfig>,
) -> Result<Option<egraph::EggReport>> {
    optimize(m, ctx)?;
    let Some(cfg) = egg else { return Ok(None) };
    let report = run_egg(m, ctx, cfg)?;
    if report.changed() {
        rounds(m, ctx)?;
    }
    Ok(Some(report))
}

/// Runs [`PIPELINE`] in rounds until a round changes nothing (at most [`MAX_ROUNDS`]).
/// Fails with [`Error::Limit`] first when functions are nested deeper than
/// [`crate::limits::MAX_NESTING`] (the passes assume bounded nesting).
pub fn optimize(m: &mut Module, ctx: &mut PassCtx) -> Result<()> {
    crate::ir::verify::check_limits(m)?;
    snapshot(ctx, "00-input".to_string(), m);
    rounds(m, ctx)
}

/// Rounds of [`PIPELINE`] until one changes nothing (at most [`MAX_ROUNDS`]).
fn rounds(m: &mut Module, ctx: &mut PassCtx) -> Result<()> {
    for _ in 0..MAX_ROUNDS {
        let mut changed = false;
        for (name, pass) in PIPELINE {
            changed |= run_pass(m, ctx, name, pass)?;
        }
        if !changed {
            break;
        }
    }
    Ok(())
}
