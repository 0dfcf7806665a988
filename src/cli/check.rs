//! `tensorjit check FILE`: reads, parses and verifies an IR text file and lists every error
//! with its position (`FILE:LINE:COLUMN: error: message`). A parse stops at the first error;
//! the verifier reports all of its findings, each at the node (or function header) concerned.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::cli::{display_name, load_module};
use crate::ir::verify::verify_diagnostics;

/// One error found by [`check`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnostic {
    /// 1-based line, when the error has a place in the file.
    pub line: Option<usize>,
    /// 1-based column, when the error has a place in the file.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// Size of a module that checked out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModuleSummary {
    /// The module's name.
    pub name: String,
    /// Number of functions (main, named functions, closures).
    pub functions: usize,
    /// Number of nodes.
    pub nodes: usize,
    /// Number of values.
    pub values: usize,
}

/// The result of [`check`]; as JSON (`serde`): `{"file", "ok", "errors": [{"line", "column",
/// "message"}], "module": {"name", "functions", "nodes", "values"} or null}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckReport {
    /// The file, as named on the command line (`<stdin>` for `-`).
    pub file: String,
    /// Whether the file parsed and verified.
    pub ok: bool,
    /// Every error found (empty when `ok`).
    pub errors: Vec<Diagnostic>,
    /// The module, when it parsed.
    pub module: Option<ModuleSummary>,
}

/// Checks the IR file `path` (`-`: standard input). Never fails: unreadable files, parse and
/// verification errors are listed in the report.
pub fn check(path: &Path) -> CheckReport {
    let file = display_name(path);
    let (m, map) = match load_module(path) {
        Ok(r) => r,
        Err(e) => {
            let d = Diagnostic { line: e.line, column: e.column, message: e.message };
            return CheckReport { file, ok: false, errors: vec![d], module: None };
        }
    };
    let errors: Vec<Diagnostic> = verify_diagnostics(&m)
        .into_iter()
        .map(|d| {
            let pos = d.node.and_then(|n| map.node_position(n)).or_else(|| d.func.and_then(|f| map.func_position(f)));
            Diagnostic { line: pos.map(|p| p.0), column: pos.map(|p| p.1), message: d.message }
        })
        .collect();
    let module = Some(ModuleSummary {
        name: m.name.clone(),
        functions: m.functions.len(),
        nodes: m.nodes.len(),
        values: m.values.len(),
    });
    CheckReport { file, ok: errors.is_empty(), errors, module }
}

impl CheckReport {
    /// The report as one JSON object (with `"command": "check"`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("command".into(), "check".into());
        }
        v
    }

    /// The human form: `ok: …` on `out` when the file checked out, else every error on `err` as
    /// `FILE:LINE:COLUMN: error: message` and a count.
    pub fn write_human(&self, out: &mut impl Write, err: &mut impl Write) -> std::io::Result<()> {
        if self.ok {
            if let Some(m) = &self.module {
                writeln!(
                    out,
                    "ok: module @{}, {} functions, {} nodes, {} values",
                    m.name, m.functions, m.nodes, m.values
                )?;
            }
            return Ok(());
        }
        self.write_errors(err)
    }

    /// Every error as `FILE:LINE:COLUMN: error: message`, then a count when the module parsed.
    pub fn write_errors(&self, err: &mut impl Write) -> std::io::Result<()> {
        for d in &self.errors {
            match (d.line, d.column) {
                (Some(l), Some(c)) => writeln!(err, "{}:{l}:{c}: error: {}", self.file, d.message)?,
                (Some(l), None) => writeln!(err, "{}:{l}: error: {}", self.file, d.message)?,
                _ => writeln!(err, "{}: error: {}", self.file, d.message)?,
            }
        }
        if self.module.is_some() && !self.errors.is_empty() {
            writeln!(err, "{}: {} verification error(s)", self.file, self.errors.len())?;
        }
        Ok(())
    }
}
