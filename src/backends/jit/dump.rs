//! Dumps of every compilation stage of the "jit" backend (`TENSORJIT_DUMP=DIR` or `dump=DIR`).
//!
//! Each compiled module gets its own directory `DIR/NNNN-<module name>/` holding:
//! `ir-00-input.tjir` and `ir-NN-<pass>.tjir` (the IR before the pipeline and after each pass that
//! changed it; they replay with `tensorjit run`), `passes.txt` (pass timings), `clusters.txt`,
//! `kernel-K.clif` and `kernel-K.asm` (Cranelift IR and machine code of cluster K's loop) and
//! `plan.txt` (the steps with their buffer assignments, or why the interpreter runs the module).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::passes::PassCtx;

/// The environment variable naming the dump directory.
pub const DUMP_ENV: &str = "TENSORJIT_DUMP";

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

    /// Writes the IR snapshots and pass timings of a pipeline run.
    pub(crate) fn passes(&self, ctx: &PassCtx) -> Result<()> {
        for (label, text) in &ctx.snapshots {
            self.write(&format!("ir-{label}.tjir"), text)?;
        }
        let mut t = String::new();
        for (name, d, changed) in &ctx.timings {
            t.push_str(&format!(
                "{name}: {:.3} ms{}\n",
                d.as_secs_f64() * 1e3,
                if *changed { " (changed)" } else { "" }
            ));
        }
        self.write("passes.txt", &t)
    }
}
