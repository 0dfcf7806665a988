//! Shared test support: a build-only backend that supports every op and dtype and compiles nothing.

use std::sync::Arc;

use tensorjit::api::{Backend, Capabilities, Executable};
use tensorjit::ir::dtype::SUPPORTED_DTYPES;
use tensorjit::ir::module::Module;
use tensorjit::ir::optype::ALL_OP_TYPES;
use tensorjit::{Error, Result};

/// A backend that supports everything at build time and compiles nothing.
pub struct TestBackend {
    caps: Capabilities,
}

impl Backend for TestBackend {
    fn name(&self) -> &str {
        "test"
    }
    fn description(&self) -> String {
        "build-only test backend".to_string()
    }
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn compile(&self, _module: Module) -> Result<Arc<dyn Executable>> {
        Err(Error::not_implemented("compile", "the test backend only builds"))
    }
    fn finalize(&self) {}
    fn is_finalized(&self) -> bool {
        false
    }
}

/// A new build-only backend with every op, every supported dtype, functions and dynamic axes.
pub fn backend() -> Arc<dyn Backend> {
    Arc::new(TestBackend {
        caps: Capabilities {
            operations: ALL_OP_TYPES.iter().copied().collect(),
            functions: true,
            dtypes: SUPPORTED_DTYPES.iter().copied().collect(),
            dynamic_axes: true,
            prefer_constants_for_variables: false,
        },
    })
}
