//! The jit's execution report (`CompileReport::execution`): what runs each step, the fallbacks
//! it lists (reference kernels, the interpreter), and `fallback=error` refusing them.

use tensorjit::Buffer;
use tensorjit::api::{EventKind, ExecutionReport};
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::text::parse_module;

fn report(config: &str, text: &str) -> tensorjit::Result<ExecutionReport> {
    let jit = JitBackend::constructor(config).expect("jit");
    let exe = jit.compile(parse_module(text).expect("parse"))?;
    Ok(exe.compile_report().expect("the jit reports its compile").execution)
}

/// An elementwise loop and a GEMM: nothing falls back, and fallback=error compiles it.
const PLANNED: &str = r#"module @planned
func @main(%0 "a": f32[4,8], %1 "b": f32[8,3]) {
  %2 = dot_general %0, %1, lhs_contracting=[1], rhs_contracting=[0], lhs_batch=[], rhs_batch=[] : f32[4,3]
  %3 = exp %2 : f32[4,3]
  %4 = add %3, %3 : f32[4,3]
  return %4
}
"#;

/// FFT has no jit kernel: its reference kernel runs it.
const REFERENCE: &str = r#"module @reference
func @main(%0 "x": c64[4,8]) {
  %1 = fft %0, fft_type=forward, lengths=[8] : c64[4,8]
  return %1
}
"#;

/// A dynamic axis: one plan per binding of `batch`, compiled at run time.
const DYNAMIC: &str = r#"module @dynamic
func @main(%0 "x": f32[batch=?,4]) {
  %1 = exp %0 : f32[batch=?,4]
  return %1
}
"#;

/// A reshape sized by tensor data: the interpreter runs the module.
const DATA_SHAPED: &str = r#"module @data_shaped
func @main(%0 "x": f32[4], %1 "n": i32[]) {
  %2 = dynamic_reshape %0, %1, specs=[rows=?,2] : f32[rows=?,2]
  %3 = exp %2 : f32[rows=?,2]
  return %3
}
"#;

#[test]
fn planned_module_has_no_fallbacks() {
    for config in ["", "fallback=error"] {
        let r = report(config, PLANNED).expect("compiles");
        assert_eq!(r.interpreted, None);
        assert!(r.fallbacks().is_empty(), "{r}");
        assert_eq!(r.count(EventKind::Reference), 0, "{r}");
        assert_eq!(r.count(EventKind::Kernel), 1, "the dot is one GEMM kernel:\n{r}");
        assert_eq!(r.count(EventKind::Loop), 1, "exp and add are one loop:\n{r}");
        assert!(r.to_string().starts_with("execution: 1 generated loops, 1 specialised kernels, 0 reference"), "{r}");
    }
}

#[test]
fn reference_kernels_are_listed_and_refused_on_request() {
    let r = report("", REFERENCE).expect("compiles");
    assert_eq!(r.count(EventKind::Reference), 1, "{r}");
    let f = r.fallbacks();
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].starts_with("reference kernel: fft"), "{f:?}");
    let e = report("fallback=error", REFERENCE).expect_err("refused").to_string();
    assert!(e.contains("fallback=error") && e.contains("fft") && e.contains("module reference"), "{e}");
}

#[test]
fn interpreter_delegation_is_listed_and_refused_on_request() {
    let r = report("", DATA_SHAPED).expect("compiles");
    let why = r.interpreted.as_deref().expect("delegated");
    assert!(why.contains("dynamic_reshape") && why.contains("tensor data"), "{why}");
    assert_eq!(r.count(EventKind::Interp), 1, "{r}");
    assert!(r.fallbacks()[0].starts_with("interpreter: "), "{:?}", r.fallbacks());
    assert!(r.to_string().contains("runs on the interpreter"), "{r}");
    let e = report("fallback=error", DATA_SHAPED).expect_err("refused").to_string();
    assert!(e.contains("interpreter") && e.contains("tensor data"), "{e}");
    // Allowed, it still runs (on the interpreter): exp of [[0, 1], [2, 3]].
    let jit = JitBackend::constructor("").expect("jit");
    let exe = jit.compile(parse_module(DATA_SHAPED).expect("parse")).expect("compile");
    let x = Buffer::from_slice(&[0f32, 1.0, 2.0, 3.0], &[4]).expect("x");
    let n = Buffer::from_slice(&[2i32], &[]).expect("n");
    let out = exe.execute(&[&x, &n], &[]).expect("execute");
    assert_eq!(out[0].dims(), vec![2, 2]);
    let y = out[0].to_vec::<f32>().expect("f32");
    let want = [1.0f32, std::f32::consts::E, 7.389_056, 20.085_537];
    for (g, w) in y.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * w, "{y:?}");
    }
}

/// A dynamic axis is specialised, not interpreted: the report says so before any execution
/// (no steps yet) and lists the latest plan's steps after; `fallback=error` accepts it.
#[test]
fn dynamic_axes_are_specialised_without_fallback() {
    for config in ["", "fallback=error"] {
        let r = report(config, DYNAMIC).expect("compiles");
        assert_eq!(r.interpreted, None, "{r}");
        assert!(r.fallbacks().is_empty(), "{r}");
        assert!(r.specialized.as_deref().is_some_and(|s| s.contains("batch") && s.contains("none yet")), "{r}");
    }
    let jit = JitBackend::constructor("fallback=error").expect("jit");
    let exe = jit.compile(parse_module(DYNAMIC).expect("parse")).expect("compile");
    for rows in [1usize, 3, 1] {
        let x: Vec<f32> = (0..rows * 4).map(|i| i as f32 * 0.25).collect();
        let out = exe.execute(&[&Buffer::from_slice(&x, &[rows, 4]).expect("x")], &[]).expect("execute");
        assert_eq!(out[0].dims(), vec![rows, 4]);
        for (g, v) in out[0].to_vec::<f32>().expect("f32").iter().zip(&x) {
            let w = (*v as f64).exp() as f32;
            assert!((g - w).abs() <= 2e-6 * w, "rows {rows}: exp({v}) = {g}, want {w}");
        }
    }
    let r = exe.compile_report().expect("report").execution;
    assert_eq!(r.count(EventKind::Loop), 1, "{r}");
    assert!(r.fallbacks().is_empty(), "{r}");
    assert!(r.to_string().contains("2 compiled; steps of batch=3"), "{r}");
    let stats = exe.specialization_stats().expect("stats");
    assert_eq!((stats.misses, stats.hits, stats.cached, stats.evictions), (2, 1, 2, 0), "{stats}");
    assert_eq!(stats.axes, vec!["batch".to_string()]);
}
