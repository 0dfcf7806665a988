//! `tensorjit dump FILE --stage …`: the jit backend's compilation stages of an IR file,
//! without inputs and without executing anything ([`crate::backends::jit::JitBackend::compile_stages`]):
//! the module as parsed, the IR after every pass that changed it (with the pass timings and the
//! egg fusion report), the optimised IR, the fusion clusters, each loop's Cranelift IR and
//! machine code, and the execution plan. The same stages `TENSORJIT_DUMP` writes to files.
//!
//! Each stage is printed as sections headed `;; ==== STAGE: NAME ====` (an IR comment, so that
//! the output of one IR stage — `input` or `optimized` — is itself a module that parses and
//! runs, given its side file when constants were moved to one).

use std::io::Write;
use std::path::PathBuf;

use crate::backends::jit::JitBackend;
use crate::backends::jit::dump::{Stages, format_timings};
use crate::cli::fmt::{ConstantsFileReport, Printer};
use crate::cli::{CliError, display_name, load_module_with_dims};
use crate::ir::text::PrintOptions;

/// A stage [`dump`] can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
#[non_exhaustive]
pub enum Stage {
    /// The module as parsed.
    Input,
    /// The pass timings, the IR after every pass that changed the module, and the egg report.
    Passes,
    /// The IR after the whole pipeline (what is planned and compiled).
    Optimized,
    /// The fusion clusters (what fuses into each compiled loop).
    Clusters,
    /// The Cranelift IR of each compiled loop.
    Clif,
    /// The machine code of each compiled loop.
    Asm,
    /// The execution plan: steps, buffers, liveness.
    Plan,
    /// Every stage above.
    All,
}

impl Stage {
    /// The stage's name on the command line and in section headers.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Input => "input",
            Stage::Passes => "passes",
            Stage::Optimized => "optimized",
            Stage::Clusters => "clusters",
            Stage::Clif => "clif",
            Stage::Asm => "asm",
            Stage::Plan => "plan",
            Stage::All => "all",
        }
    }

    /// Every stage `all` stands for, in output order.
    pub const EVERY: [Stage; 7] =
        [Stage::Input, Stage::Passes, Stage::Optimized, Stage::Clusters, Stage::Clif, Stage::Asm, Stage::Plan];
}

/// Options of [`dump`].
#[derive(Clone, Debug, PartialEq)]
pub struct DumpOptions {
    /// The IR file (`-`: standard input).
    pub file: PathBuf,
    /// The stages to show (empty: all), printed in the order of [`Stage::EVERY`].
    pub stages: Vec<Stage>,
    /// The backend config: `jit` or `jit:OPTIONS` (`fusion=off`, `reductions=ordered`,
    /// `streaming_stores=on`, …); `None`: `jit`.
    pub backend: Option<String>,
    /// How the IR stages print constants (default: [`PrintOptions::dump`], more than 16
    /// elements summarised).
    pub print: PrintOptions,
    /// Write the summarised constants' data to this side file (the IR stages then replay).
    pub constants_file: Option<PathBuf>,
    /// ONNX models: sizes for symbolic dimensions (`--dim NAME=SIZE`); the others stay dynamic.
    pub dims: Vec<(String, i64)>,
}

impl Default for DumpOptions {
    fn default() -> DumpOptions {
        DumpOptions {
            file: PathBuf::new(),
            stages: Vec::new(),
            backend: None,
            print: PrintOptions::dump(),
            constants_file: None,
            dims: Vec::new(),
        }
    }
}

/// One printed section.
#[derive(Clone, Debug, PartialEq)]
pub struct Section {
    /// The stage it belongs to.
    pub stage: Stage,
    /// What it is: `module` (input, optimized), a pass label (`01-fold`), `timings`, `egg`,
    /// a kernel (`kernel-0`, `f1-kernel-2.stream`), `clusters`, `plan`.
    pub name: String,
    /// Its text.
    pub text: String,
}

/// The result of [`dump`].
#[derive(Clone, Debug, PartialEq)]
pub struct DumpReport {
    /// The IR file.
    pub file: String,
    /// The backend config used.
    pub backend: String,
    /// Why the interpreter would run this module (no clusters, loops or plan steps then).
    pub delegated: Option<String>,
    /// The sections, in order.
    pub sections: Vec<Section>,
    /// The side file, when one was asked for.
    pub constants_file: Option<ConstantsFileReport>,
}

impl DumpReport {
    /// The sections with their headers.
    pub fn write_human(&self, w: &mut impl Write) -> std::io::Result<()> {
        for s in &self.sections {
            writeln!(w, ";; ==== {}: {} ====", s.stage.name(), s.name)?;
            w.write_all(s.text.as_bytes())?;
            if !s.text.is_empty() && !s.text.ends_with('\n') {
                writeln!(w)?;
            }
        }
        Ok(())
    }

    /// As one JSON object: `{"command": "dump", "file", "ok": true, "backend", "delegated",
    /// "sections": [{"stage", "name", "text"}], "constants_file"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let sections: Vec<serde_json::Value> = self
            .sections
            .iter()
            .map(|s| serde_json::json!({ "stage": s.stage.name(), "name": s.name, "text": s.text }))
            .collect();
        serde_json::json!({
            "command": "dump",
            "file": self.file,
            "ok": true,
            "backend": self.backend,
            "delegated": self.delegated,
            "sections": sections,
            "constants_file": self.constants_file.as_ref().map(|c| c.to_json()),
        })
    }
}

/// The jit backend of a `--backend` config (`jit` or `jit:OPTIONS`).
fn jit_backend(config: Option<&str>) -> Result<std::sync::Arc<JitBackend>, CliError> {
    let config = config.unwrap_or("jit");
    let options = match config.split_once(':') {
        Some(("jit", o)) => o,
        None if config == "jit" => "",
        _ => {
            return Err(CliError::new(format!(
                "--backend {config:?}: dump shows the stages of the jit backend; use jit or jit:OPTIONS"
            )));
        }
    };
    JitBackend::new(options).map_err(CliError::from)
}

/// Compiles `opts.file` with the jit pipeline and collects the asked-for stages.
pub fn dump(opts: &DumpOptions) -> Result<DumpReport, CliError> {
    let backend = jit_backend(opts.backend.as_deref())?;
    let (module, _) = load_module_with_dims(&opts.file, &opts.dims)?;
    let stages: Stages = backend.compile_stages(module).map_err(|e| CliError::in_file(&opts.file, e))?;
    let want = |s: Stage| opts.stages.is_empty() || opts.stages.contains(&Stage::All) || opts.stages.contains(&s);
    let mut printer = Printer::new(opts.print.clone(), opts.constants_file.as_deref())?;
    let mut sections = Vec::new();
    let mut add = |stage: Stage, name: &str, text: String| sections.push(Section { stage, name: name.into(), text });
    let none = |what: &str| match &stages.delegated {
        Some(why) => format!("(no {what}: the module is delegated to the interpreter: {why})\n"),
        None => format!("(no {what})\n"),
    };
    for stage in Stage::EVERY.into_iter().filter(|&s| want(s)) {
        match stage {
            Stage::Input => add(stage, "module", printer.print(&stages.input)),
            Stage::Passes => {
                add(stage, "timings", format_timings(&stages.timings));
                for (label, m) in &stages.passes {
                    add(stage, label, printer.print(m));
                }
                if let Some(egg) = &stages.egg {
                    add(stage, "egg", egg.clone());
                }
            }
            Stage::Optimized => add(stage, "module", printer.print(&stages.optimized)),
            Stage::Clusters => {
                let text = if stages.clusters.is_empty() { none("clusters") } else { stages.clusters.clone() };
                add(stage, "clusters", text);
            }
            Stage::Clif | Stage::Asm => {
                if stages.kernels.is_empty() {
                    add(stage, "kernels", none("compiled loops"));
                }
                for k in &stages.kernels {
                    let text = if stage == Stage::Asm { k.asm.clone() } else { k.clif.clone() };
                    add(stage, &format!("{} (cluster {} of {})", k.name, k.cluster, k.function), text);
                }
            }
            Stage::Plan => add(stage, "plan", stages.plan.clone()),
            Stage::All => {}
        }
    }
    let constants_file = printer.finish()?;
    Ok(DumpReport {
        file: display_name(&opts.file),
        backend: opts.backend.clone().unwrap_or_else(|| "jit".into()),
        delegated: stages.delegated.clone(),
        sections,
        constants_file,
    })
}
