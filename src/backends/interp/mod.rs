//! The reference backend "interp": executes a compiled module node by node with the reference
//! kernels of [`crate::kernels::reference`]. It is the semantic oracle of the other backends and
//! the portable fallback (no JIT, no `unsafe`).
//!
//! Options (the part after `interp:` in the config string): `parallelism=N` (at most
//! [`crate::limits::MAX_THREADS`]) and `ops_sequential` are accepted for compatibility with the
//! other backends' configs; the interpreter runs each execution sequentially on the calling
//! thread (concurrent `execute` calls on one executable run in parallel). `while_limit=N` caps
//! every `while` at N iterations (one more is an [`Error::Limit`] naming the node).

mod dynamic;
mod exec;
mod inplace;
mod plan;
mod sort;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::api::backend::{Backend, Capabilities, Executable};
use crate::api::registry::parse_config;
use crate::error::{Error, Result};
use crate::ir::dtype::SUPPORTED_DTYPES;
use crate::ir::module::Module;
use crate::ir::optype::{ALL_OP_TYPES, OpType};

pub use exec::InterpExecutable;
pub(crate) use exec::{count_iteration, locate, scalar_bool};
pub(crate) use plan::captures;
pub(crate) use sort::sort;

/// The registry name of this backend.
pub const NAME: &str = "interp";

/// The options accepted in the config string.
pub const OPTIONS: &[&str] = &["parallelism", "ops_sequential", "while_limit"];

/// Parses the `while_limit=N` option of `backend` (a non-negative integer: the most iterations
/// one `while` may run).
pub(crate) fn parse_while_limit(backend: &str, v: Option<&str>) -> Result<u64> {
    v.and_then(|n| n.parse::<u64>().ok()).ok_or_else(|| {
        Error::Config(format!(
            "backend {backend:?}: while_limit needs a non-negative integer (while_limit=N), got {:?}",
            v.unwrap_or("")
        ))
    })
}

/// Parses the `parallelism=N` option of `backend`: 1 to [`crate::limits::MAX_THREADS`].
pub(crate) fn parse_parallelism(backend: &str, v: Option<&str>) -> Result<usize> {
    let max = crate::limits::MAX_THREADS;
    match v.map(|v| v.parse::<usize>()) {
        Some(Ok(n)) if (1..=max).contains(&n) => Ok(n),
        Some(Ok(n)) if n > max => {
            Err(Error::Config(format!("backend {backend:?}: parallelism={n} exceeds the limit of {max} threads")))
        }
        None => Err(Error::Config(format!("backend {backend:?}: parallelism needs a value (parallelism=N)"))),
        _ => Err(Error::Config(format!(
            "backend {backend:?}: parallelism must be a positive integer (at most {max}), got {:?}",
            v.unwrap_or("")
        ))),
    }
}

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
    parallelism: Option<usize>,
    /// Most iterations per `while` (`while_limit`).
    while_limit: Option<u64>,
    config: String,
    finalized: AtomicBool,
}

impl InterpBackend {
    /// A new builder named `name` whose `compile` calls this backend (as
    /// [`Backend`]`::builder` does for `Arc<dyn Backend>`).
    pub fn builder(self: &Arc<Self>, name: &str) -> crate::api::Builder {
        crate::api::Builder::new(Arc::clone(self) as Arc<dyn Backend>, name)
    }

    /// A backend from its option string (`""`, `"parallelism=4"`, `"ops_sequential"`, …).
    /// Unknown options are an error listing the valid ones.
    pub fn new(config: &str) -> Result<Arc<InterpBackend>> {
        let mut parallelism = None;
        let mut while_limit = None;
        for opt in parse_config(NAME, config, OPTIONS)? {
            match (opt.key.as_str(), opt.value.as_deref()) {
                ("parallelism", v) => parallelism = Some(parse_parallelism(NAME, v)?),
                ("while_limit", v) => while_limit = Some(parse_while_limit(NAME, v)?),
                ("ops_sequential", None) => {}
                (key, Some(v)) => {
                    return Err(Error::Config(format!("backend {NAME:?}: option {key:?} takes no value, got {v:?}")));
                }
                _ => {}
            }
        }
        Ok(Arc::new(InterpBackend {
            caps: capabilities(),
            parallelism,
            while_limit,
            config: config.to_string(),
            finalized: AtomicBool::new(false),
        }))
    }

    /// The registry constructor.
    pub fn constructor(config: &str) -> Result<Arc<dyn Backend>> {
        Ok(InterpBackend::new(config)?)
    }
}

impl Backend for InterpBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> String {
        let mut d = String::from("interp: reference interpreter (node by node, sequential per execution)");
        if let Some(p) = self.parallelism {
            d.push_str(&format!(", parallelism={p} (accepted, unused)"));
        }
        if !self.config.is_empty() {
            d.push_str(&format!(", config {:?}", self.config));
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
        crate::ir::verify::verify(&module)?;
        Ok(Arc::new(InterpExecutable::new(module)?.with_while_limit(self.while_limit)))
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
        assert!(InterpBackend::new("parallelism=4,ops_sequential").is_ok());
        let e = InterpBackend::new("bogus").err().unwrap().to_string();
        assert!(e.contains("bogus") && e.contains("parallelism") && e.contains("ops_sequential"), "{e}");
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
