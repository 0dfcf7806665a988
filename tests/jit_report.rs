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

/// A dynamic axis: the whole module goes to the interpreter.
const DYNAMIC: &str = r#"module @dynamic
func @main(%0 "x": f32[batch=?,4]) {
  %1 = exp %0 : f32[batch=?,4]
  return %1
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
    let r = report("", DYNAMIC).expect("compiles");
    let why = r.interpreted.as_deref().expect("delegated");
    assert!(why.contains("dynamic"), "{why}");
    assert_eq!(r.count(EventKind::Interp), 1, "{r}");
    assert!(r.fallbacks()[0].starts_with("interpreter: "), "{:?}", r.fallbacks());
    assert!(r.to_string().contains("runs on the interpreter"), "{r}");
    let e = report("fallback=error", DYNAMIC).expect_err("refused").to_string();
    assert!(e.contains("interpreter") && e.contains("dynamic"), "{e}");
    // Allowed, it still runs (on the interpreter): exp of [[0, 1, 2, 3]].
    let jit = JitBackend::constructor("").expect("jit");
    let exe = jit.compile(parse_module(DYNAMIC).expect("parse")).expect("compile");
    let x = Buffer::from_slice(&[0f32, 1.0, 2.0, 3.0], &[1, 4]).expect("x");
    let y = exe.execute(&[&x], &[]).expect("execute")[0].to_vec::<f32>().expect("f32");
    let want = [1.0f32, std::f32::consts::E, 7.389_056, 20.085_537];
    for (g, w) in y.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * w, "{y:?}");
    }
}
