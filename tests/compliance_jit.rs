//! Runs the whole compliance suite (`tensorjit::compliance`) on the Cranelift backend "jit":
//! one test per case, e.g. `cargo test --test compliance_jit compliance::binary::`.
//!
//! A second instance runs the suite with `parallelism=1` (no thread pool), so both the pooled
//! and the single-threaded executor paths are covered; a third with `streaming_stores=on`, so
//! every vectorised loop of the suite also runs with non-temporal output stores.

use std::sync::Arc;

use tensorjit::Backend;
use tensorjit::backends::jit::JitBackend;

fn jit(config: &str) -> tensorjit::Result<Arc<dyn Backend>> {
    JitBackend::constructor(config)
}

tensorjit::compliance_tests!(tensorjit::new_with_config("jit"));
tensorjit::compliance_tests!(compliance_single_thread, jit("parallelism=1"));
tensorjit::compliance_tests!(compliance_streaming_stores, jit("parallelism=3,streaming_stores=on"));

/// Runs every case once and prints the pass / fail / skip counts with the failure messages
/// (`cargo test --test compliance_jit summary -- --ignored --nocapture`).
#[test]
#[ignore = "prints a summary of the suite; the per-case tests above are the real checks"]
fn summary() {
    let backend = match jit("") {
        Ok(b) => b,
        Err(e) => panic!("cannot create the jit backend: {e}"),
    };
    let s = tensorjit::compliance::run_all(&backend);
    println!("{s}");
    assert!(s.failed.is_empty(), "{} compliance cases failed", s.failed.len());
}
