//! Runs the whole compliance suite (`tensorjit::compliance`) on the reference backend "interp":
//! one test per case, e.g. `cargo test --test compliance_interp compliance::binary::`.

tensorjit::compliance_tests!(tensorjit::new_with_config("interp"));

/// Runs every case once and prints the pass / fail / skip counts with the failure messages
/// (`cargo test --test compliance_interp summary -- --ignored --nocapture`).
#[test]
#[ignore = "prints a summary of the suite; the per-case tests above are the real checks"]
fn summary() {
    let backend = match tensorjit::new_with_config("interp") {
        Ok(b) => b,
        Err(e) => panic!("cannot create the interp backend: {e}"),
    };
    let s = tensorjit::compliance::run_all(&backend);
    println!("{s}");
    assert!(s.failed.is_empty(), "{} compliance cases failed", s.failed.len());
}
