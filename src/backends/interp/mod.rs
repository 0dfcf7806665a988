//! The reference backend "interp": executes a compiled module node by node with the reference
//! kernels (`kernels::reference`, internal). It is the semantic oracle of the other backends and
//! the portable fallback (no JIT, no `unsafe`).
//!
//! Options ([`InterpOptions`], or the part after `interp:` in the config string; see
//! docs/configuration.md): `while_limit=N` caps every `while` at N iterations (one more is an
//! [`Error::Limit`] naming the node). `parallelism=N` is accepted and checked (at most
//! [`crate::limits::MAX_THREADS`]) so that one config works on both backends; the interpreter
//! runs each execution sequentially on the calling thread (concurrent `execute` calls on one
//! executable run in parallel).

mod dynamic;
mod exec;
mod inplace;
mod options;
mod plan;
mod sort;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::api::backend::{Backend, Capabilities, Executable};
use crate::error::{Error, Result};
use crate::ir::dtype::SUPPORTED_DTYPES;
use crate::ir::module::Module;
use crate::ir::optype::{ALL_OP_TYPES, OpType};

pub use exec::InterpExecutable;
#[cfg(feature = "jit")]
pub(crate) use exec::{count_iteration, locate, scalar_bool};
pub use options::{InterpOptions, OPTIONS};
#[cfg(feature = "jit")]
pub(crate) use plan::captures;
#[cfg(feature = "jit")]
pub(crate) use sort::sort;

/// The registry name of this backend.
pub const NAME: &str = "interp";

/// Op types this backend does not execute: legacy/internal kinds without a builder method,
/// collectives other than AllReduce, and the attention VJP (no reference kernel).
const UNSUPPORTED: &[OpType] = &[
    OpType::Dot,
    OpType::BlockForDotGeneral,
    OpType::CapturedValue,
    OpType::CollectiveBroadcast,
    OpType::AllGather,
    OpType::SelectAndScatterSum,
    OpType::FusedScaledDotProductAttentionVJP,
];

/// The capabilities of "interp": every op it executes, every supported dtype, functions and
/// dynamic axes.
pub fn capabilities() -> Capabilities {
    Capabilities {
        operations: ALL_OP_TYPES.iter().copied().filter(|t| !UNSUPPORTED.contains(t)).collect(),
        functions: true,
        dtypes: SUPPORTED_DTYPES.iter().copied().collect::<BTreeSet<_>>(),
        dynamic_axes: true,
        prefer_constants_for_variables: false,
    }
}

/// The reference interpreter backend.
pub struct InterpBackend {
    caps: Capabilities,
    opts: InterpOptions,
    finalized: AtomicBool,
}

impl InterpBackend {
    /// A new builder named `name` whose `compile` calls this backend (as
    /// [`Backend`]`::builder` does for `Arc<dyn Backend>`).
    pub fn builder(self: &Arc<Self>, name: &str) -> crate::api::Builder {
        crate::api::Builder::new(Arc::clone(self) as Arc<dyn Backend>, name)
    }

    /// A backend from its option string (`""`, `"while_limit=10"`, …; see
    /// [`InterpOptions::parse`]). Unknown options are an error listing the valid ones.
    pub fn new(config: &str) -> Result<Arc<InterpBackend>> {
        InterpBackend::with_options(InterpOptions::parse(config)?)
    }

    /// A backend from typed options: a bad value, or an invalid environment variable
    /// ([`crate::config::check_env`]), is an [`Error::Config`] naming it.
    pub fn with_options(opts: InterpOptions) -> Result<Arc<InterpBackend>> {
        opts.validate()?;
        crate::config::check_env()?;
        tracing::debug!(target: "tensorjit::interp", options = %opts, "interp backend created");
        Ok(Arc::new(InterpBackend { caps: capabilities(), opts, finalized: AtomicBool::new(false) }))
    }

    /// The registry constructor.
    pub fn constructor(config: &str) -> Result<Arc<dyn Backend>> {
        Ok(InterpBackend::new(config)?)
    }

    /// The options this backend was created with.
    pub fn options(&self) -> &InterpOptions {
        &self.opts
    }
}

impl Backend for InterpBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> String {
        let mut d = String::from("interp: reference interpreter (node by node, sequential per execution)");
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
        if self.is_finalized() {
            return Err(Error::UseAfterFree { what: format!("backend {NAME}"), state: "finalized".into() });
        }
        let t = std::time::Instant::now();
        crate::ir::verify::verify(&module)?;
        let name = module.name.clone();
        let exe = InterpExecutable::new(module)?.with_while_limit(self.opts.while_limit);
        tracing::debug!(target: "tensorjit::interp", module = %name, ms = t.elapsed().as_secs_f64() * 1e3, "compiled");
        Ok(Arc::new(exe))
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
        assert!(InterpBackend::new("").is_ok());
        assert!(InterpBackend::new("parallelism=4").is_ok());
        assert!(InterpBackend::new("ops_sequential").is_err(), "the dead option is gone");
        let e = InterpBackend::new("bogus").err().unwrap().to_string();
        assert!(e.contains("bogus") && e.contains("parallelism") && e.contains("while_limit"), "{e}");
        assert!(InterpBackend::new("parallelism=0").is_err());
        assert!(InterpBackend::new("parallelism=x").is_err());
        assert!(InterpBackend::new("parallelism").is_err());
        assert!(InterpBackend::new("parallelism=1024,while_limit=0").is_ok());
        let e = InterpBackend::new("parallelism=100000").err().unwrap().to_string();
        assert!(e.contains("100000") && e.contains("1024"), "{e}");
        assert!(InterpBackend::new("while_limit").is_err());
        assert!(InterpBackend::new("while_limit=-1").is_err());
    }

    #[test]
    fn capabilities_are_honest() {
        let c = capabilities();
        assert!(c.supports(OpType::Sort) && c.supports(OpType::While) && c.supports(OpType::FusedDense));
        assert!(!c.supports(OpType::Dot) && !c.supports(OpType::FusedScaledDotProductAttentionVJP));
        assert!(c.functions && c.dynamic_axes);
        assert_eq!(c.dtypes.len(), SUPPORTED_DTYPES.len());
    }

    #[test]
    fn executable_is_send_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<InterpExecutable>();
        send_sync::<InterpBackend>();
    }
}
