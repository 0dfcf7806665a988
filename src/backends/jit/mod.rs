//! The "jit" backend: optimises the module, fuses elementwise F32/F64 nodes into loops compiled
//! by Cranelift, runs every other node with its reference kernel, and splits large loops across
//! a persistent thread pool.
//!
//! Options (the part after `jit:` in the config string):
//! - `parallelism=N`: threads of the backend's pool (default: the available cores), at most
//!   [`crate::limits::MAX_THREADS`]; loops over at least [`PARALLEL_MIN_ELEMENTS`] elements are
//!   split across them.
//! - `while_limit=N`: every `while` may run at most N iterations; one more is an
//!   [`Error::Limit`] naming the while node (default: unbounded; a deadline or a
//!   [`crate::api::CancelToken`] in [`crate::api::ExecOptions`] stops a run too).
//! - `ops_sequential`: accepted; steps always run one after another in this version.
//! - `fusion=on|off`: run the egg fusion pass ([`crate::passes::egraph`]) that rewrites decomposed
//!   Dense, LayerNorm, Softmax, GELU and attention into fused ops (default on).
//! - `reductions=fast|ordered`: `fast` (default) lets fused float Sum/Product reductions keep
//!   vector partial sums (reassociated, like every vectorising compiler); `ordered` accumulates
//!   each output in element order, bit-identical to the reference interpreter.
//! - `streaming_stores=auto|on|off`: write a loop's outputs with non-temporal stores (no read of
//!   each destination line before it is written; see [`crate::codegen::compile_streaming`]) when they
//!   take at least the last-level cache's size (`auto`, the default), always (`on`), or never.
//! - `dump=DIR`: write every compilation stage under `DIR` (as `TENSORJIT_DUMP=DIR`; see
//!   [`dump`] and docs/debugging.md).
//!
//! Every function of the module (main, named functions, closures) gets its own plan; Call,
//! While, If and Sort steps run the callees' plans. Current limitation: a module with AllReduce
//! or dynamic shapes is optimised and then run by the interpreter
//! ([`crate::backends::interp::InterpExecutable`]) as a whole; its `plan.txt` dump says why.

mod dot;
pub mod dump;
mod exec;
mod fast;
mod fused;
mod loops;
mod plan;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::api::backend::{Backend, Capabilities, Executable};
use crate::api::registry::parse_config;
use crate::backends::interp::InterpExecutable;
use crate::backends::signature::Signature;
use crate::error::{Error, Result};
use crate::ir::module::Module;
use crate::passes::egraph::EggConfig;
use crate::passes::{self, PassCtx};

pub use exec::JitExecutable;
pub use loops::PARALLEL_MIN_ELEMENTS;

/// The registry name of this backend.
pub const NAME: &str = "jit";

/// The options accepted in the config string.
pub const OPTIONS: &[&str] =
    &["parallelism", "ops_sequential", "dump", "fusion", "reductions", "streaming_stores", "while_limit"];

/// The Cranelift JIT backend.
pub struct JitBackend {
    caps: Capabilities,
    parallelism: usize,
    /// Most iterations per `while` (`while_limit`).
    while_limit: Option<u64>,
    dump: Option<PathBuf>,
    fusion: bool,
    /// Float Sum/Product reductions accumulate in element order (`reductions=ordered`).
    ordered_reductions: bool,
    /// Output size from which loops use non-temporal stores (`streaming_stores`); `None`: never.
    stream_min_bytes: Option<usize>,
    config: String,
    pool: OnceLock<std::result::Result<Arc<rayon::ThreadPool>, String>>,
    finalized: AtomicBool,
}

fn config_error(msg: String) -> Error {
    Error::Config(format!("backend {NAME:?}: {msg}"))
}

impl JitBackend {
    /// A new builder named `name` whose `compile` calls this backend (as
    /// [`Backend`]`::builder` does for `Arc<dyn Backend>`).
    pub fn builder(self: &Arc<Self>, name: &str) -> crate::api::Builder {
        crate::api::Builder::new(Arc::clone(self) as Arc<dyn Backend>, name)
    }

    /// A backend from its option string (`""`, `"parallelism=2"`, `"dump=/tmp/d"`, …).
    /// Unknown options are an error listing the valid ones.
    pub fn new(config: &str) -> Result<Arc<JitBackend>> {
        let mut parallelism = None;
        let mut while_limit = None;
        let mut dump = None;
        let mut fusion = true;
        let mut ordered_reductions = false;
        let mut stream_min_bytes = Some(loops::auto_stream_min_bytes());
        for opt in parse_config(NAME, config, OPTIONS)? {
            match (opt.key.as_str(), opt.value.as_deref()) {
                ("parallelism", v) => parallelism = Some(crate::backends::interp::parse_parallelism(NAME, v)?),
                ("while_limit", v) => while_limit = Some(crate::backends::interp::parse_while_limit(NAME, v)?),
                ("dump", Some(d)) if !d.is_empty() => dump = Some(PathBuf::from(d)),
                ("dump", _) => return Err(config_error("dump needs a directory (dump=DIR)".into())),
                ("ops_sequential", None) => {}
                ("fusion", Some("on" | "true" | "1")) | ("fusion", None) => fusion = true,
                ("fusion", Some("off" | "false" | "0")) => fusion = false,
                ("fusion", Some(v)) => return Err(config_error(format!("fusion must be on or off, got {v:?}"))),
                ("reductions", Some("fast")) => ordered_reductions = false,
                ("reductions", Some("ordered")) => ordered_reductions = true,
                ("reductions", v) => {
                    return Err(config_error(format!("reductions must be fast or ordered, got {:?}", v.unwrap_or(""))));
                }
                ("streaming_stores", Some("auto")) => stream_min_bytes = Some(loops::auto_stream_min_bytes()),
                ("streaming_stores", Some("on")) => stream_min_bytes = Some(0),
                ("streaming_stores", Some("off")) => stream_min_bytes = None,
                ("streaming_stores", v) => {
                    return Err(config_error(format!(
                        "streaming_stores must be auto, on or off, got {:?}",
                        v.unwrap_or("")
                    )));
                }
                (key, Some(v)) => return Err(config_error(format!("option {key:?} takes no value, got {v:?}"))),
                _ => {}
            }
        }
        let parallelism = parallelism.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(crate::limits::MAX_THREADS))
        });
        Ok(Arc::new(JitBackend {
            caps: crate::backends::interp::capabilities(),
            parallelism,
            while_limit,
            dump,
            fusion,
            ordered_reductions,
            stream_min_bytes,
            config: config.to_string(),
            pool: OnceLock::new(),
            finalized: AtomicBool::new(false),
        }))
    }

    /// The registry constructor.
    pub fn constructor(config: &str) -> Result<Arc<dyn Backend>> {
        Ok(JitBackend::new(config)?)
    }

    /// Threads used for large loops.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// The dump directory: the `dump` option, else `TENSORJIT_DUMP` (read at each compile).
    pub fn dump_dir(&self) -> Option<PathBuf> {
        self.dump.clone().or_else(|| std::env::var_os(dump::DUMP_ENV).filter(|s| !s.is_empty()).map(PathBuf::from))
    }

    /// The pool (built at first use; `None` with one thread).
    fn pool(&self) -> Result<Option<Arc<rayon::ThreadPool>>> {
        if self.parallelism <= 1 {
            return Ok(None);
        }
        let p = self.pool.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(self.parallelism)
                .thread_name(|i| format!("tensorjit-jit-{i}"))
                .build()
                .map(Arc::new)
                .map_err(|e| e.to_string())
        });
        match p {
            Ok(p) => Ok(Some(p.clone())),
            Err(e) => Err(config_error(format!("cannot start {} threads: {e}", self.parallelism))),
        }
    }

    /// Compiles `module` into the concrete executable type (what [`Backend::compile`] returns).
    pub fn compile_jit(&self, mut module: Module) -> Result<JitExecutable> {
        if self.is_finalized() {
            return Err(Error::UseAfterFree { what: format!("backend {NAME}"), state: "finalized".into() });
        }
        // The module may come from anywhere (`Backend::compile` is public): the plan and the
        // generated code rely on every invariant the verifier checks.
        crate::ir::verify::verify(&module)?;
        let dumper = match self.dump_dir() {
            Some(d) => Some(dump::Dumper::new(&d, &module.name)?),
            None => None,
        };
        let mut ctx = PassCtx { record_ir: dumper.is_some(), ..PassCtx::default() };
        let egg = self.fusion.then(EggConfig::default);
        let report = passes::optimize_with_fusion(&mut module, &mut ctx, egg.as_ref())?;
        if let Some(d) = &dumper {
            d.passes(&ctx)?;
            if let Some(r) = &report {
                d.write("egg.txt", &r.to_string())?;
            }
        }
        let sig = Signature::of(&module)?;
        let runner = match plan::needs_interpreter(&module) {
            Some(why) => {
                if let Some(d) = &dumper {
                    d.write("plan.txt", &format!("delegated to the interpreter: {why}\n"))?;
                }
                exec::Runner::Interp(InterpExecutable::new(module)?.with_while_limit(self.while_limit))
            }
            None => {
                let plan = plan::build(module, self.plan_options(dumper.is_some()))?;
                if let Some(d) = &dumper {
                    d.plan(&plan)?;
                }
                exec::Runner::Plan { plan: Arc::new(plan), pool: self.pool()? }
            }
        };
        Ok(JitExecutable::new(runner, sig, self.while_limit))
    }
}

impl Backend for JitBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> String {
        let mut d = format!(
            "jit: Cranelift-compiled fused loops ({}) and reference kernels, parallelism={}",
            crate::codegen::host_isa_description(),
            self.parallelism
        );
        if !self.config.is_empty() {
            d.push_str(&format!(", config {:?}", self.config));
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
        let b = JitBackend::new("parallelism=3,ops_sequential").unwrap();
        assert_eq!(b.parallelism(), 3);
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
        assert!(JitBackend::new("ops_sequential=1").is_err());
        assert_eq!(JitBackend::new("dump=/x").unwrap().dump_dir(), Some(PathBuf::from("/x")));
    }

    #[test]
    fn executable_is_send_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<JitExecutable>();
        send_sync::<JitBackend>();
    }
}
