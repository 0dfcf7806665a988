//! Hostile nesting and long chains (issue items 3 and 4b): deep literals in the IR text, deep
//! closure nesting and call chains, duplicate parameter names and long elementwise chains end
//! in a clean `Err` naming the place (a `Parse` or `Limit` error) or in the right answer, on
//! both backends, never in a stack overflow. Everything runs on the default test thread
//! (2 MiB of stack), in debug builds too.

use std::sync::Arc;
use std::time::Instant;

use tensorjit::ir::module::{FuncId, Module};
use tensorjit::ir::op::{BinaryOp, ConstData, Op};
use tensorjit::ir::text::{parse_module, print_module};
use tensorjit::ir::verify::{verify, verify_diagnostics};
use tensorjit::limits::{MAX_NESTING, MAX_PARSE_DEPTH};
use tensorjit::{Backend, Buffer, DType, Error, Shape};

const BACKENDS: [&str; 2] = ["interp", "jit"];

fn backend(name: &str) -> Arc<dyn Backend> {
    tensorjit::new_with_config(name).expect("backend is registered")
}

fn scalar() -> Shape {
    Shape::new(DType::Float32, &[])
}

/// A module whose only node is `constant <payload> : f32[1]`.
fn constant_text(payload: &str) -> String {
    format!("module @m\n\nfunc @main() {{\n  %0 = constant {payload} : f32[1]\n  return %0\n}}\n")
}

/// `Err(Parse)` at line 4 (the constant's line), naming the nesting limit.
fn assert_depth_error(r: tensorjit::Result<Module>) {
    match r {
        Err(Error::Parse { line, column, msg }) => {
            assert_eq!(line, 4, "{msg}");
            assert!(column > 1, "{column}");
            assert!(msg.contains(&format!("more than {MAX_PARSE_DEPTH} levels")), "{msg}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

// ---- the IR text ---------------------------------------------------------------------------

#[test]
fn twenty_thousand_brackets_are_a_parse_error() {
    let deep = format!("{}1.5{}", "[".repeat(20_000), "]".repeat(20_000));
    assert_depth_error(parse_module(&constant_text(&deep)));
}

#[test]
fn twenty_thousand_minus_signs_are_a_parse_error() {
    let deep = format!("{}1.5", "-".repeat(20_000));
    assert_depth_error(parse_module(&constant_text(&deep)));
}

#[test]
fn twenty_thousand_chained_names_are_a_parse_error() {
    let text = format!(
        "module @m\n\nfunc @main(%0: f32[]) {{\n  %1 = all_reduce %0, kind=sum, replica_groups={}1 : f32[]\n  return %1\n}}\n",
        "a=".repeat(20_000)
    );
    assert_depth_error(parse_module(&text));
}

#[test]
fn bracket_nesting_limit_is_inclusive() {
    // MAX_PARSE_DEPTH brackets are accepted (the payload flattens to one element) …
    let ok = format!("{}1.5{}", "[".repeat(MAX_PARSE_DEPTH), "]".repeat(MAX_PARSE_DEPTH));
    let m = parse_module(&constant_text(&ok)).expect("256 levels parse");
    verify(&m).expect("and verify");
    let main = m.func(m.main);
    let Op::Constant(data) = &m.node(main.body[0]).op else { panic!("not a constant") };
    assert_eq!(data.0.as_slice(), 1.5f32.to_le_bytes());
    // … one more is not.
    let deep = format!("{}1.5{}", "[".repeat(MAX_PARSE_DEPTH + 1), "]".repeat(MAX_PARSE_DEPTH + 1));
    assert_depth_error(parse_module(&constant_text(&deep)));
}

#[test]
fn deepest_accepted_literal_fits_a_small_stack() {
    // The parser's deepest accepted value needs well under a test thread's 2 MiB: it parses on
    // a thread with half of that (debug builds included). `TJ_PARSE_STACK_KIB` overrides the
    // size, to measure the real need by bisection.
    let kib: usize = std::env::var("TJ_PARSE_STACK_KIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let ok = format!("{}1.5{}", "[".repeat(MAX_PARSE_DEPTH), "]".repeat(MAX_PARSE_DEPTH));
    let text = constant_text(&ok);
    let parsed = std::thread::Builder::new()
        .stack_size(kib << 10)
        .spawn(move || parse_module(&text).is_ok())
        .expect("spawn")
        .join()
        .expect("no overflow");
    assert!(parsed);
}

/// The text of a module with `depth` closures, each the parent of the next (flat in the text:
/// `parent=@k`), the innermost returning `%0` of main.
fn nested_closure_text(depth: usize) -> String {
    let mut t = String::from("module @m\n\nfunc @main(%0: f32[]) {\n  return %0\n}\n");
    for k in 1..=depth {
        let parent = if k == 1 { "@main".to_string() } else { format!("@{}", k - 1) };
        let body = if k == depth { "%0".to_string() } else { format!("%{k}") };
        t.push_str(&format!("\nclosure @{k}(%{k}: f32[]) parent={parent} {{\n  return {body}\n}}\n"));
    }
    t
}

#[test]
fn twenty_thousand_nested_closures_parse_print_and_fail_verification_with_a_limit() {
    let text = nested_closure_text(20_000);
    let m = parse_module(&text).expect("the text is flat: it parses");
    assert_eq!(print_module(&m), text, "and prints back without recursion");
    let t = Instant::now();
    let e = verify(&m).expect_err("too deep");
    println!("verify of 20,000 nested closures: {:?}", t.elapsed());
    match &e {
        Error::Limit { what, msg } => {
            // The function at level 201 (main is level 1) is closure @200.
            assert_eq!(what, "closure @200", "{msg}");
            assert!(msg.contains("20001 levels") && msg.contains(&format!("at most {MAX_NESTING}")), "{msg}");
        }
        other => panic!("expected a limit error, got {other:?}"),
    }
    let d = verify_diagnostics(&m);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].message, e.to_string());
}

#[test]
fn closure_nesting_limit_is_inclusive_in_the_verifier() {
    // main + 199 closures = 200 levels.
    let m = parse_module(&nested_closure_text(MAX_NESTING - 1)).expect("parse");
    verify(&m).expect("200 levels are allowed");
    let m = parse_module(&nested_closure_text(MAX_NESTING)).expect("parse");
    assert!(matches!(verify(&m), Err(Error::Limit { .. })));
}

// ---- nested `if` closures ------------------------------------------------------------------

/// `depth` nested `if`s (main + `depth` then-branches = `depth + 1` levels), built with the
/// builder: the innermost then-branch returns `x + 1`, every else-branch `-1`; all predicates are
/// true, so the result is `x + 1`.
fn nested_ifs(b: &Arc<dyn Backend>, depth: usize) -> tensorjit::Builder {
    let bld = b.builder("nested_ifs");
    let main = bld.main();
    let x = main.parameter("x", scalar()).unwrap();
    let mut thens = Vec::with_capacity(depth);
    let mut elses = Vec::with_capacity(depth);
    let mut parent = main.clone();
    for _ in 0..depth {
        let t = parent.closure().unwrap();
        elses.push(parent.closure().unwrap());
        thens.push(t.clone());
        parent = t;
    }
    for k in (0..depth).rev() {
        let (t, e) = (&thens[k], &elses[k]);
        let minus_one = e.constant(&[-1.0f32], &[]).unwrap();
        e.return_(&[minus_one]).unwrap();
        if k + 1 == depth {
            let one = t.constant(&[1.0f32], &[]).unwrap();
            let r = t.add(x, one).unwrap();
            t.return_(&[r]).unwrap();
        } else {
            let p = t.constant(&[true], &[]).unwrap();
            let r = t.if_(p, &thens[k + 1], &elses[k + 1]).unwrap();
            t.return_(&r).unwrap();
        }
    }
    let p = main.constant(&[true], &[]).unwrap();
    let r = main.if_(p, &thens[0], &elses[0]).unwrap();
    main.return_(&r).unwrap();
    bld
}

fn run_scalar(exe: &Arc<dyn tensorjit::Executable>, x: f32) -> f32 {
    let out = exe.execute(&[&Buffer::scalar(x)], &[]).expect("execute");
    out[0].to_vec::<f32>().unwrap()[0]
}

fn assert_limit(r: tensorjit::Result<Arc<dyn tensorjit::Executable>>, place: &str) {
    match r {
        Err(Error::Limit { what, msg }) => {
            assert_eq!(what, place, "{msg}");
            assert!(msg.contains(&format!("at most {MAX_NESTING}")), "{msg}");
        }
        Err(other) => panic!("expected a limit error, got {other}"),
        Ok(_) => panic!("expected a limit error, the module compiled"),
    }
}

#[test]
fn twenty_thousand_nested_ifs_are_rejected_at_compile_time() {
    for name in BACKENDS {
        let b = backend(name);
        let bld = nested_ifs(&b, 20_000);
        // Straight to the backend (no builder verification): the compiler checks the limit too.
        let m = bld.module();
        // then-branch k is function 2k + 1; the one at level 201 (main is level 1) is k = 199.
        assert_limit(b.compile(m), "closure @399");
        assert_limit(bld.compile(), "closure @399");
    }
}

#[test]
fn nested_ifs_two_hundred_levels_run_and_two_hundred_and_one_are_rejected() {
    for name in BACKENDS {
        let b = backend(name);
        let exe = nested_ifs(&b, MAX_NESTING - 1).compile().expect("200 levels compile");
        assert_eq!(run_scalar(&exe, 2.5), 3.5, "{name}");
        assert_limit(nested_ifs(&b, MAX_NESTING).compile(), "closure @399");
    }
}

// ---- call chains ---------------------------------------------------------------------------

/// main calls `@f1`, which calls `@f2`, … `@f<n>` (`n + 1` levels); `@f<n>` returns its
/// argument and every other function adds 1 to what its callee returns: the result is `x + n - 1`.
fn call_chain(b: &Arc<dyn Backend>, n: usize) -> tensorjit::Builder {
    let bld = b.builder("call_chain");
    let main = bld.main();
    let x = main.parameter("x", scalar()).unwrap();
    let funcs: Vec<_> = (1..=n).map(|k| bld.new_function(&format!("f{k}")).unwrap()).collect();
    for k in (0..n).rev() {
        let f = &funcs[k];
        let a = f.parameter("a", scalar()).unwrap();
        if k + 1 == n {
            f.return_(&[a]).unwrap();
        } else {
            let r = f.call(&funcs[k + 1], &[a]).unwrap();
            let one = f.constant(&[1.0f32], &[]).unwrap();
            let s = f.add(r[0], one).unwrap();
            f.return_(&[s]).unwrap();
        }
    }
    let r = main.call(&funcs[0], &[x]).unwrap();
    main.return_(&r).unwrap();
    bld
}

#[test]
fn twenty_thousand_chained_calls_are_rejected_at_compile_time() {
    for name in BACKENDS {
        let b = backend(name);
        let bld = call_chain(&b, 20_000);
        let m = bld.module();
        let e = verify(&m).expect_err("too deep");
        assert!(matches!(&e, Error::Limit { msg, .. } if msg.contains("20001 levels")), "{e}");
        assert_limit(b.compile(m), "@f200");
        assert_limit(bld.compile(), "@f200");
    }
}

#[test]
fn call_chain_of_two_hundred_levels_runs_and_two_hundred_and_one_are_rejected() {
    for name in BACKENDS {
        let b = backend(name);
        let exe = call_chain(&b, MAX_NESTING - 1).compile().expect("200 levels compile");
        assert_eq!(run_scalar(&exe, 0.5), 0.5 + (MAX_NESTING - 2) as f32, "{name}");
        assert_limit(call_chain(&b, MAX_NESTING).compile(), "@f200");
    }
}

// ---- a module built by hand ----------------------------------------------------------------

/// 20,000 closures nested through their parents, none used: the parent chains alone are too
/// deep. Built directly on the IR (no builder checks), compiled straight on the backends.
#[test]
fn deep_unused_closures_built_by_hand_are_rejected() {
    let mut m = Module::new("hand");
    let main = m.main;
    let x = m.add_param(main, "x", scalar());
    m.func_mut(main).outputs = Some(vec![x]);
    let mut parent: FuncId = main;
    for _ in 0..20_000 {
        let c = m.add_function(None, Some(parent));
        let data = ConstData(Arc::new(2.0f32.to_le_bytes().to_vec()));
        let k = m.add_node(c, Op::Constant(data), vec![], vec![scalar()]);
        let kv = m.node(k).outputs[0];
        let n = m.add_node(c, Op::Binary(BinaryOp::Mul), vec![x, kv], vec![scalar()]);
        let out = m.node(n).outputs[0];
        m.func_mut(c).outputs = Some(vec![out]);
        parent = c;
    }
    for name in BACKENDS {
        assert_limit(backend(name).compile(m.clone()), "closure @200");
    }
}

// ---- duplicate parameter names -------------------------------------------------------------

#[test]
fn duplicate_parameter_names_are_rejected() {
    for name in BACKENDS {
        let b = backend(name);
        let bld = b.builder("dup");
        let main = bld.main();
        let x = main.parameter("x", scalar()).unwrap();
        let y = main.parameter("x", scalar()).unwrap();
        let s = main.add(x, y).unwrap();
        main.return_(&[s]).unwrap();
        match bld.compile() {
            Err(Error::Verify(v)) => {
                assert_eq!(v, vec!["@main: parameters 0 and 1 are both named \"x\" (names must be distinct)"]);
            }
            Err(other) => panic!("expected a verify error, got {other}"),
            Ok(_) => panic!("{name}: duplicate names accepted"),
        }
    }
    // Unnamed parameters (the empty name) may repeat; named ones in different functions too.
    let text = "module @m\n\nfunc @main(%0: f32[], %1: f32[], %2 \"a\": f32[]) {\n  %3 = call %2, func=@g : f32[]\n  return %3\n}\n\nfunc @g(%4 \"a\": f32[]) {\n  return %4\n}\n";
    verify(&parse_module(text).unwrap()).expect("no duplicates");
    let dup = text.replace("%1: f32[]", "%1 \"a\": f32[]");
    let e = verify(&parse_module(&dup).unwrap()).unwrap_err();
    assert_eq!(
        e,
        Error::Verify(vec!["@main: parameters 1 and 2 are both named \"a\" (names must be distinct)".into()])
    );
}

// ---- long elementwise chains ---------------------------------------------------------------

/// A 20,000-node chain `v ← v + y; v ← v · z` compiles and runs on both backends (no pass or
/// lowering step recurses along the chain): with y = 1 and z = 1 the result is x + 10,000.
#[test]
fn twenty_thousand_node_chain_compiles_and_runs() {
    for name in BACKENDS {
        let b = backend(name);
        let bld = b.builder("chain");
        let main = bld.main();
        let shape = Shape::new(DType::Float32, &[4]);
        let x = main.parameter("x", shape.clone()).unwrap();
        let y = main.parameter("y", shape.clone()).unwrap();
        let z = main.parameter("z", shape).unwrap();
        let mut v = x;
        for i in 0..20_000 {
            v = if i % 2 == 0 { main.add(v, y) } else { main.mul(v, z) }.unwrap();
        }
        main.return_(&[v]).unwrap();
        let exe = bld.compile().expect("compile");
        let xs = Buffer::from_slice(&[0.0f32, 1.0, -2.0, 0.5], &[4]).unwrap();
        let ones = Buffer::from_slice(&[1.0f32; 4], &[4]).unwrap();
        let out = exe.execute(&[&xs, &ones, &ones], &[]).expect("execute");
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![10_000.0, 10_001.0, 9_998.0, 10_000.5], "{name}");
    }
}
