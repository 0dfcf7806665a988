//! Shared helpers of the "jit" backend tests: a backend from an option string, compiling a
//! `main` built by a closure into the concrete executable, and running it on owned buffers.

use std::sync::Arc;

use tensorjit::backends::jit::{JitBackend, JitExecutable};
use tensorjit::{Buffer, Builder, Executable, Function, Value};

/// A "jit" backend with `config` options (e.g. `"parallelism=2"`).
pub fn backend(config: &str) -> Arc<JitBackend> {
    JitBackend::new(config).expect("jit backend")
}

/// Builds `main` with `f`, returns it, and compiles it with `b` into the concrete executable.
pub fn compile(b: &Arc<JitBackend>, f: impl FnOnce(&Function) -> tensorjit::Result<Vec<Value>>) -> JitExecutable {
    let builder = Builder::new(b.clone(), "test");
    let main = builder.main();
    let outs = f(&main).expect("build");
    main.return_(&outs).expect("return");
    b.compile_jit(builder.module()).expect("compile")
}

/// Executes `e` on `inputs` (none donated).
pub fn run(e: &JitExecutable, inputs: &[Buffer]) -> Vec<Buffer> {
    let refs: Vec<&Buffer> = inputs.iter().collect();
    e.execute(&refs, &[]).expect("execute")
}
