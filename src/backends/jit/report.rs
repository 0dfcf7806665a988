//! The jit's [`ExecutionReport`]: what runs each step of a plan (generated loop, specialised
//! kernel, reference kernel, alias, control flow) or why the interpreter runs the whole module,
//! and the `fallback=error` check on it.

use crate::api::{EventKind, ExecutionReport};
use crate::error::{Error, Result};

use super::exec::{step_kind, step_label};
use super::options::Fallback;
use super::plan::Plan;

/// The report of a plan: every step of every function, grouped by kind and profile label.
pub(crate) fn of_plan(plan: &Plan) -> ExecutionReport {
    let mut r = ExecutionReport::default();
    for fp in &plan.funcs {
        for step in &fp.steps {
            r.add(step_kind(step), step_label(plan, fp, step));
        }
    }
    r
}

/// The report of a module delegated to the interpreter for `why`.
pub(crate) fn interpreted(why: &str) -> ExecutionReport {
    let mut r = ExecutionReport { interpreted: Some(why.to_string()), ..ExecutionReport::default() };
    r.add(EventKind::Interp, "the whole module".to_string());
    r
}

/// `Err` listing the fallbacks of `r` when the options refuse them.
pub(crate) fn check(r: &ExecutionReport, fallback: Fallback, module: &str) -> Result<()> {
    let found = r.fallbacks();
    if fallback == Fallback::Error && !found.is_empty() {
        return Err(Error::invalid(
            "jit compile",
            format!("module {module} needs fallbacks that fallback=error refuses: {}", found.join("; ")),
        ));
    }
    Ok(())
}
