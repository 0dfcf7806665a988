//! Verifier tests: hand-corrupted modules each report the expected violation, and every
//! violation of a module is reported, not just the first.

use std::sync::Arc;

use tensorjit::Error;
use tensorjit::ir::dtype::DType;
use tensorjit::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use tensorjit::ir::op::{ConstData, Op, UnaryOp};
use tensorjit::ir::shape::Shape;
use tensorjit::ir::text::parse_module;
use tensorjit::ir::verify::{verify, verify_diagnostics};

/// The violations of `m` (empty when it verifies).
fn errors(m: &Module) -> Vec<String> {
    match verify(m) {
        Ok(()) => vec![],
        Err(Error::Verify(list)) => list,
        Err(other) => panic!("verify returned a non-Verify error: {other}"),
    }
}

fn errors_of(text: &str) -> Vec<String> {
    errors(&parse_module(text).unwrap_or_else(|e| panic!("test text must parse: {e}")))
}

fn f32s(dims: &[i64]) -> Shape {
    Shape::new(DType::Float32, dims)
}

/// main(%0: f32[2]) { %1 = neg %0 : f32[2]; return %1 }
fn small_valid() -> Module {
    let mut m = Module::new("m");
    let main = m.main;
    let x = m.add_param(main, "x", f32s(&[2]));
    let n = m.add_node(main, Op::Unary(UnaryOp::Neg), vec![x], vec![f32s(&[2])]);
    let y = m.node(n).outputs[0];
    m.func_mut(main).outputs = Some(vec![y]);
    m
}

#[test]
fn valid_modules_pass() {
    assert_eq!(errors(&small_valid()), Vec::<String>::new());
    // A node removed from every body (dead) is ignored.
    let mut m = small_valid();
    let main = m.main;
    let x = m.func(main).params[0];
    let dead = m.add_node(main, Op::Unary(UnaryOp::Exp), vec![x], vec![f32s(&[7])]);
    m.func_mut(main).body.retain(|&n| n != dead);
    assert_eq!(errors(&m), Vec::<String>::new());
}

#[test]
fn wrong_output_shape() {
    let e = errors_of("module @m\nfunc @main(%0: f32[2]) {\n  %1 = neg %0 : f32[3]\n  return %1\n}\n");
    assert_eq!(e, vec!["@main: %1 = neg: output 0 (%1) has shape f32[3] but inference gives f32[2]"]);
}

#[test]
fn wrong_output_count() {
    let e = errors_of("module @m\nfunc @main(%0: f32[2]) {\n  %1, %2 = neg %0 : f32[2], f32[2]\n  return %1\n}\n");
    assert_eq!(e, vec!["@main: %1, %2 = neg: the node has 2 output(s) but the op produces 1"]);
}

#[test]
fn inference_errors_are_violations() {
    let e = errors_of("module @m\nfunc @main(%0: f32[2], %1: i32[2]) {\n  %2 = add %0, %1 : f32[2]\n  return %2\n}\n");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("@main: %2 = add: shape inference rejects the node: "), "{e:?}");
}

#[test]
fn use_before_definition() {
    // Built through the arena API: the first node reads the output of the second.
    let mut m = Module::new("m");
    let main = m.main;
    let x = m.add_param(main, "", f32s(&[2]));
    let a = m.add_node(main, Op::Unary(UnaryOp::Neg), vec![ValueId(2)], vec![f32s(&[2])]);
    m.add_node(main, Op::Unary(UnaryOp::Exp), vec![x], vec![f32s(&[2])]);
    let av = m.node(a).outputs[0];
    m.func_mut(main).outputs = Some(vec![av]);
    assert_eq!(
        errors(&m),
        vec!["@main: %1 = neg: operand 0 (%2) is used before its definition (or its defining node is not in the body)"]
    );
    // The same through text: forward references parse, the verifier rejects them.
    let e = errors_of(
        "module @m\nfunc @main(%0: f32[2]) {\n  %1 = neg %2 : f32[2]\n  %2 = exp %0 : f32[2]\n  return %1\n}\n",
    );
    assert_eq!(e, errors(&m));
}

#[test]
fn operand_out_of_range() {
    let mut m = small_valid();
    let n = m.func(m.main).body[0];
    m.nodes[n.index()].inputs[0] = ValueId(99);
    assert_eq!(errors(&m), vec!["@main: %1 = neg: operand 0 (%99) is out of range"]);
}

const SIBLINGS: &str = "module @m

func @main(%0: f32[3]) {
  %1 = sort %0, comparator=@1, axis=0, stable=false : f32[3]
  %2 = sort %0, comparator=@2, axis=0, stable=false : f32[3]
  return %1, %2
}

closure @1(%3: f32[], %4: f32[]) parent=@main {
  %5 = less_than %3, %4 : bool[]
  return %5
}

closure @2(%6: f32[], %7: f32[]) parent=@main {
  %8 = less_than %6, %3 : bool[]
  return %8
}
";

#[test]
fn value_of_a_sibling_closure_is_not_visible() {
    assert_eq!(
        errors_of(SIBLINGS),
        vec![
            "closure @2: %8 = less_than: operand 1 (%3) belongs to closure @1, which is not an ancestor: it is not visible here"
        ]
    );
}

#[test]
fn returning_a_value_of_a_closure_from_main() {
    let text =
        SIBLINGS.replace("%8 = less_than %6, %3", "%8 = less_than %6, %7").replace("return %1, %2", "return %1, %5");
    assert_eq!(
        errors_of(&text),
        vec!["@main: output 1 (%5) belongs to closure @1, which is not an ancestor: it is not visible here"]
    );
}

#[test]
fn capture_must_be_defined_before_the_closure_is_used() {
    let text = "module @m

func @main(%0: f32[3]) {
  %1 = sort %0, comparator=@1, axis=0, stable=false : f32[3]
  %2 = constant 0.0 : f32[]
  return %1
}

closure @1(%3: f32[], %4: f32[]) parent=@main {
  %5 = add %3, %2 : f32[]
  %6 = less_than %5, %4 : bool[]
  return %6
}
";
    assert_eq!(
        errors_of(text),
        vec![
            "closure @1: %5 = add: operand 1 (%2) belongs to ancestor @main but is not defined before the point where that function uses this closure"
        ]
    );
    // Moving the constant before the sort makes it valid; nested closures see it too.
    let ok = text.replace(
        "  %1 = sort %0, comparator=@1, axis=0, stable=false : f32[3]\n  %2 = constant 0.0 : f32[]\n",
        "  %2 = constant 0.0 : f32[]\n  %1 = sort %0, comparator=@1, axis=0, stable=false : f32[3]\n",
    );
    assert_eq!(errors_of(&ok), Vec::<String>::new());
}

#[test]
fn closure_used_by_an_op_outside_its_parent() {
    let text = "module @m

func @main(%0: f32[3], %1: bool[]) {
  %2 = if %1, then_branch=@1, else_branch=@2 : f32[3]
  return %2
}

closure @1() parent=@main {
  %3 = sort %0, comparator=@3, axis=0, stable=false : f32[3]
  return %3
}

closure @2() parent=@main {
  return %0
}

closure @3(%4: f32[], %5: f32[]) parent=@main {
  %6 = less_than %4, %5 : bool[]
  return %6
}
";
    assert_eq!(
        errors_of(text),
        vec!["closure @1: %3 = sort: closure @3 is a closure of @main; only ops of its parent function may use it"]
    );
    // With @3 a child of @1 the module is valid (and @3 may still read @main's values).
    assert_eq!(
        errors_of(
            &text
                .replace("closure @3(%4: f32[], %5: f32[]) parent=@main", "closure @3(%4: f32[], %5: f32[]) parent=@1")
        ),
        Vec::<String>::new()
    );
}

#[test]
fn callee_kinds() {
    let call_closure = "module @m
func @main(%0: f32[3]) {
  %1 = call %0, func=@1 : f32[3]
  return %1
}
closure @1(%2: f32[3]) parent=@main {
  return %2
}
";
    assert_eq!(errors_of(call_closure), vec!["@main: %1 = call: `call` must name a named function, not closure @1"]);
    let sort_named = "module @m
func @main(%0: f32[3]) {
  %1 = sort %0, comparator=@cmp, axis=0, stable=false : f32[3]
  return %1
}
func @cmp(%2: f32[], %3: f32[]) {
  %4 = less_than %2, %3 : bool[]
  return %4
}
";
    assert_eq!(errors_of(sort_named), vec!["@main: %1 = sort: expects a closure but names the function @cmp"]);
}

#[test]
fn callee_that_has_not_returned() {
    let text = "module @m
func @main(%0: f32[3]) {
  %1 = sort %0, comparator=@1, axis=0, stable=false : f32[3]
  return %1
}
closure @1(%2: f32[], %3: f32[]) parent=@main {
  %4 = less_than %2, %3 : bool[]
}
";
    assert_eq!(
        errors_of(text),
        vec![
            "@main: %1 = sort: callee closure @1 has not returned",
            "closure @1: function has not returned (no `return`)"
        ]
    );
}

#[test]
fn recursion_is_rejected() {
    let text = "module @m
func @main(%0: f32[]) {
  %1 = call %0, func=@f : f32[]
  return %1
}
func @f(%2: f32[]) {
  %3 = call %2, func=@g : f32[]
  return %3
}
func @g(%4: f32[]) {
  %5 = call %4, func=@f : f32[]
  return %5
}
";
    assert_eq!(errors_of(text), vec!["recursion: @f -> @g -> @f"]);
}

#[test]
fn missing_or_empty_return() {
    assert_eq!(
        errors_of("module @m\nfunc @main(%0: f32[2]) {\n  %1 = neg %0 : f32[2]\n}\n"),
        vec!["@main: function has not returned (no `return`)"]
    );
    assert_eq!(
        errors_of("module @m\nfunc @main(%0: f32[2]) {\n  return\n}\n"),
        vec!["@main: function returns no values (at least one is required)"]
    );
}

#[test]
fn bad_constants() {
    assert_eq!(
        errors_of("module @m\nfunc @main() {\n  %0 = constant hex\"000000\" : f32[1]\n  return %0\n}\n"),
        vec!["@main: %0 = constant: constant data has 3 bytes but shape f32[1] needs 4"]
    );
    assert_eq!(
        errors_of("module @m\nfunc @main() {\n  %0 = constant hex\"0102\" : bool[2]\n  return %0\n}\n"),
        vec!["@main: %0 = constant: Bool constant element 1 is 2 (must be 0 or 1)"]
    );
    // Packed dtypes need ceil(n*bits/8) bytes: 3 Int4 values take 2 bytes.
    assert_eq!(
        errors_of("module @m\nfunc @main() {\n  %0 = constant hex\"21\" : i4[3]\n  return %0\n}\n"),
        vec!["@main: %0 = constant: constant data has 1 bytes but shape i4[3] needs 2"]
    );
    assert_eq!(
        errors_of("module @m\nfunc @main(%0: f32[2]) {\n  %1 = constant %0, [1.0] : f32[]\n  return %1\n}\n"),
        vec!["@main: %1 = constant: a constant takes no operands"]
    );
}

#[test]
fn invalid_shapes_and_dtypes() {
    assert_eq!(
        errors_of("module @m\nfunc @main(%0: f32[?]) {\n  return %0\n}\n"),
        vec!["@main: parameter %0: invalid shape f32[?]: Shape: dynamic axis 0 must be named"]
    );
    assert_eq!(
        errors_of("module @m\nfunc @main(%0: f8e5m2[2]) {\n  return %0\n}\n"),
        vec!["@main: parameter %0: dtype f8e5m2 is not supported in tensors"]
    );
}

#[test]
fn function_structure() {
    assert_eq!(
        errors_of("module @m\nfunc @main(%0: f32[]) {\n  return %0\n}\nclosure @1() {\n  return %0\n}\n"),
        vec![
            "closure @1: closure without a parent",
            "closure @1: output 0 (%0) belongs to @main, which is not an ancestor: it is not visible here"
        ]
    );
    assert_eq!(
        errors_of(
            "module @m\nfunc @main(%0: f32[]) {\n  return %0\n}\nfunc @f(%1: f32[]) parent=@main {\n  return %1\n}\n"
        ),
        vec!["@f: a named function cannot have a parent"]
    );
    let mut m = small_valid();
    let main = m.main;
    m.func_mut(main).name = Some("entry".into());
    assert_eq!(errors(&m), vec!["module: the main function @entry is not named \"main\""]);
    let mut m = small_valid();
    let c = m.add_function(None, Some(FuncId(0)));
    let main = m.main;
    m.func_mut(main).parent = Some(c);
    let mut e = errors(&m);
    e.sort();
    assert!(e.contains(&"module: @main has a parent".to_string()), "{e:?}");
    assert!(e.iter().any(|s| s.contains("is its own ancestor (parent cycle)")), "{e:?}");
}

#[test]
fn node_in_two_bodies_and_wrong_func() {
    let mut m = small_valid();
    let h = m.add_function(Some("h".into()), None);
    let p = m.add_param(h, "", f32s(&[]));
    m.func_mut(h).outputs = Some(vec![p]);
    m.func_mut(h).body.push(NodeId(0));
    assert_eq!(errors(&m), vec!["@h: %1 = neg also appears in the body of @main (a node belongs to exactly one body)"]);
    let mut m = small_valid();
    m.nodes[0].func = FuncId(5);
    let e = errors(&m);
    assert!(
        e.contains(&"@main: %1 = neg: the node's func is f5 but it is in the body of this function".to_string()),
        "{e:?}"
    );
}

#[test]
fn inconsistent_value_definitions() {
    let mut m = small_valid();
    m.values[1].def = ValueDef::Param(5);
    assert_eq!(
        errors(&m),
        vec![
            "@main: %1 = neg: output 0 (%1) is not defined as output 0 of this node",
            "value %1: claims to be parameter 5 of @main, which it is not"
        ]
    );
}

#[test]
fn all_violations_are_reported() {
    // Three independent problems in three places.
    let text = "module @m

func @main(%0: f32[2]) {
  %1 = neg %0 : f32[5]
  %2 = constant hex\"00\" : i32[]
  %3 = call %0, func=@h : f32[2]
  return %1, %2, %3
}

func @h(%4: f32[2]) {
  %5 = exp %4 : f32[2]
}
";
    let m = parse_module(text).expect("parses");
    let e = errors(&m);
    assert_eq!(
        e,
        vec![
            "@main: %1 = neg: output 0 (%1) has shape f32[5] but inference gives f32[2]",
            "@main: %2 = constant: constant data has 1 bytes but shape i32[] needs 4",
            "@main: %3 = call: callee @h has not returned",
            "@h: function has not returned (no `return`)",
        ]
    );
    // The diagnostics point at the nodes and functions, for the CLI's line numbers.
    let d = verify_diagnostics(&m);
    assert_eq!(d.len(), 4);
    assert_eq!(d[0].node, Some(NodeId(0)));
    assert_eq!(d[3].func, Some(FuncId(1)));
    assert_eq!(d[3].node, None);
}

#[test]
fn bool_constant_through_the_api() {
    let mut m = Module::new("m");
    let main = m.main;
    let n =
        m.add_node(main, Op::Constant(ConstData(Arc::new(vec![1, 0, 3]))), vec![], vec![Shape::new(DType::Bool, &[3])]);
    let v = m.node(n).outputs[0];
    m.func_mut(main).outputs = Some(vec![v]);
    assert_eq!(errors(&m), vec!["@main: %0 = constant: Bool constant element 2 is 3 (must be 0 or 1)"]);
}
