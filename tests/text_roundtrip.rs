//! IR text format tests: the corpus round-trips byte for byte and verifies, parse errors carry
//! exact positions, and random modules survive print → parse → print unchanged.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;
use tensorjit::Error;
use tensorjit::ir::dtype::DType;
use tensorjit::ir::module::{FuncId, Module, ValueId};
use tensorjit::ir::op::{ArithReduce, BinaryOp, CompareOp, ConstData, Op, ReduceKind, UnaryOp};
use tensorjit::ir::optype::{ALL_OP_TYPES, OpType};
use tensorjit::ir::shape::Shape;
use tensorjit::ir::text::{PrintOptions, parse_module, print_module, print_module_with};
use tensorjit::ir::verify::verify;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/filetests/corpus")
}

/// The corpus files, sorted by name.
fn corpus_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("corpus directory exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tjir"))
        .collect();
    files.sort();
    files
}

/// The text without its full-line `;` comments (the printer does not keep comments).
fn strip_comment_lines(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with(';')).map(|l| format!("{l}\n")).collect()
}

#[test]
fn corpus_round_trips_byte_for_byte_and_verifies() {
    let files = corpus_files();
    assert!(files.len() >= 10, "expected the corpus files, found {}", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable corpus file");
        let m = parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let printed = print_module(&m);
        assert_eq!(printed, strip_comment_lines(&text), "{} does not round-trip", path.display());
        // Printing the re-parsed module gives the same text again.
        assert_eq!(print_module(&parse_module(&printed).expect("reparse")), printed);
        if let Err(e) = verify(&m) {
            panic!("{} does not verify: {e}", path.display());
        }
    }
}

/// Op types that are not IR ops (legacy, internal or declared-only) or not valid as written
/// (SelectAndScatterSum has no semantics in the spec).
const NOT_IN_CORPUS: [OpType; 7] = [
    OpType::Parameter,
    OpType::Dot,
    OpType::CollectiveBroadcast,
    OpType::AllGather,
    OpType::CapturedValue,
    OpType::BlockForDotGeneral,
    OpType::SelectAndScatterSum,
];

#[test]
fn corpus_covers_every_op() {
    let mut seen = BTreeSet::new();
    for path in corpus_files() {
        let m = parse_module(&std::fs::read_to_string(&path).expect("readable")).expect("parses");
        for f in &m.functions {
            for &n in &f.body {
                seen.insert(m.node(n).op.op_type());
            }
        }
    }
    let missing: Vec<&str> =
        ALL_OP_TYPES.iter().filter(|t| !NOT_IN_CORPUS.contains(t) && !seen.contains(t)).map(|t| t.name()).collect();
    assert!(missing.is_empty(), "ops missing from the corpus: {missing:?}");
}

#[test]
fn cli_check_and_fmt() {
    let exe = env!("CARGO_BIN_EXE_tensorjit");
    let file = corpus_dir().join("control_flow.tjir");
    let out = std::process::Command::new(exe).arg("check").arg(&file).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok: module @control_flow, 9 functions, 19 nodes, 36 values\n");

    let out = std::process::Command::new(exe).arg("fmt").arg(&file).output().expect("runs");
    assert!(out.status.success());
    let text = std::fs::read_to_string(&file).expect("readable");
    assert_eq!(String::from_utf8_lossy(&out.stdout), strip_comment_lines(&text));

    // A broken file: both violations are reported with their lines and columns, exit status 1.
    let dir = std::env::temp_dir().join(format!("tensorjit_cli_{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.tjir");
    std::fs::write(
        &bad,
        "module @bad\n\nfunc @main(%0: f32[2]) {\n  %1 = neg %0 : f32[3]\n  %2 = exp %0 : i32[2]\n  return %1\n}\n",
    )
    .expect("write");
    let out = std::process::Command::new(exe).arg("check").arg(&bad).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let b = bad.display();
    assert!(
        err.contains(&format!(
            "{b}:4:3: error: @main: %1 = neg: output 0 (%1) has shape f32[3] but inference gives f32[2]"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{b}:5:3: error: @main: %2 = exp: output 0 (%2) has shape i32[2] but inference gives f32[2]"
        )),
        "{err}"
    );

    std::fs::write(&bad, "module @bad\nfunc @main() {\n  %0 = constant [1, 2 : f32[2]\n}\n").expect("write");
    let out = std::process::Command::new(exe).arg("check").arg(&bad).output().expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr), format!("{b}:3:23: error: expected `,` or `]`, found `:`\n"));
    let _ = std::fs::remove_dir_all(&dir);

    let out = std::process::Command::new(exe).arg("frobnicate").output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn docs_example_round_trips_and_verifies() {
    // The first ``` block after "## Example" in docs/ir.md.
    let doc = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/ir.md")).expect("docs");
    let after = &doc[doc.find("## Example").expect("example section")..];
    let start = after.find("```\n").expect("code block") + 4;
    let len = after[start..].find("```").expect("end of block");
    let text = &after[start..start + len];
    let m = parse_module(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(print_module(&m), text);
    verify(&m).unwrap_or_else(|e| panic!("{e}"));
}

// ---------------------------------------------------------------------------------------------
// Hand-checked printing of a small module and of values that the corpus cannot hold.

#[test]
fn prints_the_documented_form() {
    let mut m = Module::new("demo");
    let main = m.main;
    let x = m.add_param(main, "x", Shape::new(DType::Float32, &[2, 3]));
    let v = m.add_param(main, "", Shape::new(DType::Float32, &[3]));
    let b = m.add_node(
        main,
        Op::BroadcastInDim { shape: Shape::new(DType::Float32, &[2, 3]), axes: vec![1] },
        vec![v],
        vec![Shape::new(DType::Float32, &[2, 3])],
    );
    let bv = m.node(b).outputs[0];
    let s = m.add_node(main, Op::Binary(BinaryOp::Add), vec![x, bv], vec![Shape::new(DType::Float32, &[2, 3])]);
    let sv = m.node(s).outputs[0];
    m.func_mut(main).outputs = Some(vec![sv]);
    let expected = "module @demo\n\nfunc @main(%0 \"x\": f32[2,3], %1: f32[3]) {\n  %2 = broadcast_in_dim %1, shape=f32[2,3], axes=[1] : f32[2,3]\n  %3 = add %0, %2 : f32[2,3]\n  return %3\n}\n";
    assert_eq!(print_module(&m), expected);
    assert_eq!(parse_module(expected).expect("parses"), m);
    verify(&m).expect("valid");
}

#[test]
fn values_are_renumbered_canonically() {
    // A closure created in the middle of main: its values are allocated between main's, but the
    // text numbers main's values first.
    let mut m = Module::new("order");
    let main = m.main;
    let x = m.add_param(main, "x", Shape::new(DType::Float32, &[4]));
    let c = m.add_function(None, Some(main));
    let a = m.add_param(c, "", Shape::scalar(DType::Float32));
    let b = m.add_param(c, "", Shape::scalar(DType::Float32));
    let lt = m.add_node(
        c,
        Op::Compare { dir: CompareOp::LessThan, total_order: false },
        vec![a, b],
        vec![Shape::scalar(DType::Bool)],
    );
    let ltv = m.node(lt).outputs[0];
    m.func_mut(c).outputs = Some(vec![ltv]);
    let s = m.add_node(
        main,
        Op::Sort { comparator: c, axis: 0, stable: false },
        vec![x],
        vec![Shape::new(DType::Float32, &[4])],
    );
    let sv = m.node(s).outputs[0];
    m.func_mut(main).outputs = Some(vec![sv]);
    let text = print_module(&m);
    assert_eq!(
        text,
        "module @order\n\nfunc @main(%0 \"x\": f32[4]) {\n  %1 = sort %0, comparator=@1, axis=0, stable=false : f32[4]\n  return %1\n}\n\nclosure @1(%2: f32[], %3: f32[]) parent=@main {\n  %4 = less_than %2, %3 : bool[]\n  return %4\n}\n"
    );
    let back = parse_module(&text).expect("parses");
    assert_eq!(print_module(&back), text);
    assert_eq!(back.func(FuncId(1)).parent, Some(FuncId(0)));
    verify(&m).expect("valid");
    verify(&back).expect("valid");
}

#[test]
fn quoting_odd_names_and_kinds_the_mnemonic_cannot_say() {
    let mut m = Module::new("my module");
    let main = m.main;
    let shape = Shape::with_names(DType::Float32, &[-1, 2], &["the batch", ""]).expect("valid");
    let x = m.add_param(main, "a \"quoted\"\tname", shape.clone());
    // Scatter with a Product kind and SelectAndScatter with Sum: the mnemonic cannot carry the
    // kind, so an explicit `kind=` attribute does.
    let op = m.add_param(main, "", Shape::new(DType::Float32, &[4]));
    let idx = m.add_param(main, "", Shape::new(DType::Int32, &[1, 1]));
    let upd = m.add_param(main, "", Shape::new(DType::Float32, &[1]));
    let sc = Op::Scatter {
        kind: ArithReduce::Product,
        index_vector_axis: 1,
        update_window_axes: vec![],
        inserted_window_axes: vec![0],
        scatter_axes_to_operand_axes: vec![0],
        indices_are_sorted: false,
        unique_indices: true,
    };
    m.add_node(main, sc, vec![op, idx, upd], vec![Shape::new(DType::Float32, &[4])]);
    let ss = Op::SelectAndScatter { kind: ArithReduce::Sum, window: vec![2], strides: vec![2], padding: vec![(0, 0)] };
    m.add_node(main, ss, vec![op, upd], vec![Shape::new(DType::Float32, &[4])]);
    m.func_mut(main).outputs = Some(vec![x]);
    let h = m.add_function(Some("3rd helper".into()), None);
    let hp = m.add_param(h, "é", Shape::scalar(DType::Int8));
    m.func_mut(h).outputs = Some(vec![hp]);
    let text = print_module(&m);
    let expected = "module @\"my module\"\n\nfunc @main(%0 \"a \\\"quoted\\\"\\tname\": f32[\"the batch\"=?,2], %1: f32[4], %2: i32[1,1], %3: f32[1]) {\n  %4 = scatter_sum %1, %2, %3, kind=product, index_vector_axis=1, update_window_axes=[], inserted_window_axes=[0], scatter_axes_to_operand_axes=[0], indices_are_sorted=false, unique_indices=true : f32[4]\n  %5 = select_and_scatter_sum %1, %3, window=[2], strides=[2], padding=[(0,0)] : f32[4]\n  return %0\n}\n\nfunc @\"3rd helper\"(%6 \"é\": i8[]) {\n  return %6\n}\n";
    assert_eq!(text, expected);
    let back = parse_module(&text).expect("parses");
    assert_eq!(back, m);
}

#[test]
fn invalid_modules_still_print_and_parse_back() {
    // Not returned, dynamic axis without a name, Bool constant byte 2 (printed as hex), a node
    // without outputs: the verifier rejects them but the text keeps every detail.
    let mut m = Module::new("broken");
    let main = m.main;
    let p = m.add_param(main, "", Shape { dtype: DType::Float32, dims: vec![-1, -3], axis_names: None });
    m.add_node(main, Op::Constant(ConstData(Arc::new(vec![0, 2]))), vec![], vec![Shape::new(DType::Bool, &[2])]);
    m.add_node(main, Op::OptimizationBarrier, vec![], vec![]);
    m.add_node(main, Op::Unary(UnaryOp::Neg), vec![p], vec![]);
    let text = print_module(&m);
    assert_eq!(
        text,
        "module @broken\n\nfunc @main(%0: f32[?,-3]) {\n  %1 = constant hex\"0002\" : bool[2]\n  optimization_barrier\n  neg %0\n}\n"
    );
    assert_eq!(parse_module(&text).expect("parses"), m);
    assert!(verify(&m).is_err());
}

#[test]
fn constants_print_exact_bits() {
    let mut m = Module::new("c");
    let main = m.main;
    let f32s: Vec<u8> = [1.5f32, f32::from_bits(0x7fc0_0000), f32::from_bits(0x7fa0_0000), -0.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let n = m.add_node(
        main,
        Op::Constant(ConstData(Arc::new(f32s.clone()))),
        vec![],
        vec![Shape::new(DType::Float32, &[2, 2])],
    );
    let v = m.node(n).outputs[0];
    m.func_mut(main).outputs = Some(vec![v]);
    let text = print_module(&m);
    assert!(text.contains("%0 = constant [1.5, nan, 0x7fa00000, -0.0] : f32[2,2]\n"), "{text}");
    let back = parse_module(&text).expect("parses");
    match &back.node(back.func(back.main).body[0]).op {
        Op::Constant(d) => assert_eq!(d.0.as_slice(), f32s.as_slice()),
        other => panic!("not a constant: {other:?}"),
    }
    // Summarised dumps: the hash and the first values; the text says the data was elided.
    let elided = print_module_with(&m, &PrintOptions { max_constant_elements: Some(2), preview_elements: 2 });
    let hash = format!("xxh64:{:016x}", tensorjit::ir::text::xxh64::xxh64(&f32s));
    assert!(
        elided.contains(&format!("constant elided(bytes=16, hash=\"{hash}\", first=[1.5, nan]) : f32[2,2]")),
        "{elided}"
    );
    let e = parse_module(&elided).unwrap_err().to_string();
    assert!(e.contains("elided") && e.contains("line 4, column 17"), "{e}");
}

#[test]
fn hand_written_conveniences_parse() {
    // Comments, non-numeric labels, nested constant lists spanning lines, omitted false flags,
    // hex integers, forward references to functions.
    let text = "; leading comment\nmodule @conv // trailing comment\n\nfunc @main(%x: f32[2,2]) {\n  %c = constant [[1, 2],\n                 [3, 0x10]] : i32[2,2]\n  %s = sort %x, comparator=@1, axis=1 : f32[2,2]\n  return %s, %c\n}\n\nclosure @1(%a: f32[], %b: f32[]) parent=@main {\n  %r = less_than %a, %b : bool[]\n  return %r\n}\n";
    let m = parse_module(text).expect("parses");
    verify(&m).expect("valid");
    let printed = print_module(&m);
    assert!(printed.contains("  %1 = constant [1, 2, 3, 16] : i32[2,2]\n"), "{printed}");
    assert!(printed.contains("  %2 = sort %0, comparator=@1, axis=1, stable=false : f32[2,2]\n"), "{printed}");
}

// ---------------------------------------------------------------------------------------------
// Parse errors: exact line, column and message.

fn parse_err(text: &str) -> (usize, usize, String) {
    match parse_module(text) {
        Err(Error::Parse { line, column, msg }) => (line, column, msg),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

const HEAD: &str = "module @m\n\nfunc @main(%0: f32[2]) {\n";

#[test]
fn parse_errors_have_exact_positions() {
    assert_eq!(parse_err("func @main() {\n}\n"), (1, 1, "expected `module @name` header, found `func`".to_string()));
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = addd %0, %0 : f32[2]\n  return %1\n}}\n")),
        (4, 8, "unknown op `addd`".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = add %0, %7 : f32[2]\n  return %1\n}}\n")),
        (4, 16, "undefined value `%7`".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = neg %0 : f32[2,\n  return %1\n}}\n")),
        (5, 3, "expected a dimension (integer or `?`), found `return`".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = neg %0 : f32[2], f32[2]\n}}\n")),
        (4, 15, "neg: 1 result(s) but 2 output shape(s) after `:`".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = reduce_sum %0 : f32[]\n}}\n")),
        (4, 8, "reduce_sum: missing attribute `axes`".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = neg %0, axis=3 : f32[2]\n}}\n")),
        (4, 16, "neg: unknown attribute `axis`".into())
    );
    assert_eq!(parse_err(&format!("{HEAD}  %1 = neg %0 : f31[2]\n}}\n")), (4, 17, "unknown dtype `f31`".into()));
    assert_eq!(
        parse_err(&format!("{HEAD}  %0 = neg %0 : f32[2]\n}}\n")),
        (4, 3, "value `%0` is already defined at line 3".into())
    );
    assert_eq!(
        parse_err("module @m\nfunc @main(%0 \"unterminated: f32[]) {\n}\n"),
        (2, 15, "unterminated string (expected a closing `\"`)".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  return %0\n  %1 = neg %0 : f32[2]\n}}\n")),
        (5, 3, "expected `}` after `return` (it must be the last statement), found `%1`".into())
    );
    assert_eq!(parse_err("module @m\n\nfunc @other() {\n}\n"), (5, 1, "expected a `func @main(…)` definition".into()));
    assert_eq!(
        parse_err("module @m\nfunc @main() {\n}\nclosure @cmp() parent=@main {\n}\n"),
        (4, 9, "expected a closure number such as `@1`, found `@cmp` (names are for functions)".into())
    );
    assert_eq!(
        parse_err("module @m\nfunc @main() {\n  %0 = constant [1, 300] : i8[2]\n}\n"),
        (3, 21, "constant element of dtype i8: 300 is out of range [-128, 127]".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = add %0, axis=1, %0 : f32[2]\n}}\n")),
        (4, 24, "operand `%0` must come before the attributes".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = cum_sum %0, axis=0, exclusive=maybe : f32[2]\n}}\n")),
        (4, 38, "attribute `exclusive` of cum_sum: expected `true` or `false`, found `maybe`".into())
    );
    assert_eq!(
        parse_err(&format!(
            "{HEAD}  %1 = reduce_window %0, kind=avg, window=[1], strides=[1], input_dilations=[1], window_dilations=[1], padding=[(0,0)] : f32[2]\n}}\n"
        )),
        (4, 31, "attribute `kind` of reduce_window: expected `sum`, `product`, `max` or `min`, found `avg`".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = sort %0, comparator=@9, axis=0 : f32[2]\n}}\n")),
        (4, 28, "undefined function `@9`".into())
    );
    assert_eq!(
        parse_err(&format!("{HEAD}  %1 = neg %0\n}}\n")),
        (4, 14, "expected `:` and the output shapes, found end of line".into())
    );
    assert_eq!(
        parse_err("module @m\nfunc @main() {\n  %0 = constant [1.0] : i4[2]\n}\n"),
        (3, 17, "constant: values of dtype i4 must be written as `hex\"…\"` bytes".into())
    );
}

// ---------------------------------------------------------------------------------------------
// Random modules: print → parse → print is the identity and the module verifies.

const DTYPES: [DType; 9] = [
    DType::Float32,
    DType::Float64,
    DType::BFloat16,
    DType::Float16,
    DType::Int32,
    DType::Int8,
    DType::Uint16,
    DType::Int64,
    DType::Bool,
];

const NAMES: [&str; 6] = ["", "x", "a b", "q\"uote", "tab\tnew\nline", "é→"];

/// One construction step; its numbers pick operands and variants modulo what is available.
#[derive(Clone, Debug)]
enum Step {
    Unary(u32, u32),
    BinarySelf(u32, u32),
    BinaryScalar(u32, Vec<u8>),
    Compare(u32, u32),
    Reshape(u32, bool),
    Transpose(u32, u64),
    Reduce(u32, u32),
    Broadcast(u32, i64),
    Constant(u32, Vec<i64>, Vec<u8>),
    Convert(u32, u32),
    Sort(u32, u32),
}

fn dims_strategy() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(0i64..4, 0..4)
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Step::Unary(a, b)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Step::BinarySelf(a, b)),
        (any::<u32>(), prop::collection::vec(any::<u8>(), 16)).prop_map(|(a, b)| Step::BinaryScalar(a, b)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Step::Compare(a, b)),
        (any::<u32>(), any::<bool>()).prop_map(|(a, b)| Step::Reshape(a, b)),
        (any::<u32>(), any::<u64>()).prop_map(|(a, b)| Step::Transpose(a, b)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Step::Reduce(a, b)),
        (any::<u32>(), 0i64..3).prop_map(|(a, b)| Step::Broadcast(a, b)),
        (any::<u32>(), dims_strategy(), prop::collection::vec(any::<u8>(), 0..600))
            .prop_map(|(a, d, b)| Step::Constant(a, d, b)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Step::Convert(a, b)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Step::Sort(a, b)),
    ]
}

/// Bytes for `n` elements of `dtype` taken cyclically from `seed` (Bool bytes reduced to 0/1).
fn const_bytes(dtype: DType, n: usize, seed: &[u8]) -> Vec<u8> {
    let len = dtype.size_for(n);
    let mut out: Vec<u8> = (0..len).map(|i| if seed.is_empty() { 0 } else { seed[i % seed.len()] }).collect();
    if dtype == DType::Bool {
        out.iter_mut().for_each(|b| *b &= 1);
    }
    out
}

struct Gen {
    m: Module,
    vals: Vec<ValueId>,
    closures: bool,
}

impl Gen {
    fn pick(&self, k: u32) -> (ValueId, Shape) {
        let v = self.vals[k as usize % self.vals.len()];
        (v, self.m.shape(v).clone())
    }

    fn push(&mut self, op: Op, inputs: Vec<ValueId>, out: Shape) {
        let main = self.m.main;
        let n = self.m.add_node(main, op, inputs, vec![out]);
        self.vals.extend(self.m.node(n).outputs.clone());
    }

    fn scalar_const(&mut self, dtype: DType, seed: &[u8]) -> ValueId {
        let main = self.m.main;
        let n = self.m.add_node(
            main,
            Op::Constant(ConstData(Arc::new(const_bytes(dtype, 1, seed)))),
            vec![],
            vec![Shape::scalar(dtype)],
        );
        let v = self.m.node(n).outputs[0];
        self.vals.push(v);
        v
    }

    fn step(&mut self, s: &Step) {
        match s {
            Step::Unary(a, k) => {
                let (v, sh) = self.pick(*a);
                let choices: &[UnaryOp] = match sh.dtype {
                    DType::Bool => &[UnaryOp::LogicalNot, UnaryOp::Identity],
                    d if d.is_float() => {
                        &[UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Floor]
                    }
                    d if d.is_unsigned() => &[UnaryOp::BitwiseNot, UnaryOp::BitCount, UnaryOp::Abs],
                    _ => &[UnaryOp::Neg, UnaryOp::Abs, UnaryOp::BitwiseNot, UnaryOp::Clz],
                };
                let u = choices[*k as usize % choices.len()];
                self.push(Op::Unary(u), vec![v], sh);
            }
            Step::BinarySelf(a, k) => {
                let (v, sh) = self.pick(*a);
                let choices: &[BinaryOp] = if sh.dtype == DType::Bool {
                    &[BinaryOp::LogicalAnd, BinaryOp::LogicalXor]
                } else {
                    &[BinaryOp::Add, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Sub]
                };
                let b = choices[*k as usize % choices.len()];
                self.push(Op::Binary(b), vec![v, v], sh);
            }
            Step::BinaryScalar(a, seed) => {
                let (v, sh) = self.pick(*a);
                let c = self.scalar_const(sh.dtype, seed);
                let b = if sh.dtype == DType::Bool { BinaryOp::LogicalOr } else { BinaryOp::Min };
                // The non-scalar side gives the result shape (both scalars: scalar).
                self.push(Op::Binary(b), vec![c, v], sh);
            }
            Step::Compare(a, k) => {
                let (v, sh) = self.pick(*a);
                if sh.dtype == DType::Bool {
                    return;
                }
                let dir = [CompareOp::Equal, CompareOp::LessThan, CompareOp::GreaterOrEqual][*k as usize % 3];
                let total_order = k % 2 == 0;
                self.push(Op::Compare { dir, total_order }, vec![v, v], sh.with_dtype(DType::Bool));
            }
            Step::Reshape(a, flatten) => {
                let (v, sh) = self.pick(*a);
                let dims: Vec<i64> =
                    if *flatten { vec![sh.dims.iter().product()] } else { sh.dims.iter().rev().copied().collect() };
                self.push(Op::Reshape { dims: dims.clone() }, vec![v], Shape::new(sh.dtype, &dims));
            }
            Step::Transpose(a, seed) => {
                let (v, sh) = self.pick(*a);
                // A permutation from the seed (Fisher-Yates with the seed's digits).
                let mut perm: Vec<usize> = (0..sh.rank()).collect();
                let mut s = *seed;
                for i in (1..perm.len()).rev() {
                    perm.swap(i, (s % (i as u64 + 1)) as usize);
                    s /= i as u64 + 1;
                }
                let dims: Vec<i64> = perm.iter().map(|&p| sh.dims[p]).collect();
                self.push(Op::Transpose { perm }, vec![v], Shape::new(sh.dtype, &dims));
            }
            Step::Reduce(a, mask) => {
                let (v, sh) = self.pick(*a);
                let axes: Vec<usize> = (0..sh.rank()).filter(|i| mask & (1 << i) != 0).collect();
                let kind = match sh.dtype {
                    DType::Bool => ReduceKind::LogicalOr,
                    _ if mask & 16 != 0 => ReduceKind::Max,
                    _ => ReduceKind::Sum,
                };
                let dims: Vec<i64> =
                    sh.dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
                self.push(Op::Reduce { kind, axes }, vec![v], Shape::new(sh.dtype, &dims));
            }
            Step::Broadcast(a, k) => {
                let (v, sh) = self.pick(*a);
                let mut dims = vec![*k];
                dims.extend(&sh.dims);
                let out = Shape::new(sh.dtype, &dims);
                let axes: Vec<usize> = (1..=sh.rank()).collect();
                self.push(Op::BroadcastInDim { shape: out.clone(), axes }, vec![v], out);
            }
            Step::Constant(k, dims, seed) => {
                let dtype = DTYPES[*k as usize % DTYPES.len()];
                let shape = Shape::new(dtype, dims);
                let data = const_bytes(dtype, shape.num_elements(), seed);
                let main = self.m.main;
                let n = self.m.add_node(main, Op::Constant(ConstData(Arc::new(data))), vec![], vec![shape]);
                self.vals.extend(self.m.node(n).outputs.clone());
            }
            Step::Convert(a, k) => {
                let (v, sh) = self.pick(*a);
                let dtype = DTYPES[*k as usize % DTYPES.len()];
                self.push(Op::ConvertDType { dtype }, vec![v], sh.with_dtype(dtype));
            }
            Step::Sort(a, k) => {
                let (v, sh) = self.pick(*a);
                if sh.rank() == 0 || sh.dtype == DType::Bool {
                    return;
                }
                let main = self.m.main;
                let c = self.m.add_function(None, Some(main));
                let l = self.m.add_param(c, "", Shape::scalar(sh.dtype));
                let r = self.m.add_param(c, "", Shape::scalar(sh.dtype));
                let n = self.m.add_node(
                    c,
                    Op::Compare { dir: CompareOp::LessThan, total_order: true },
                    vec![l, r],
                    vec![Shape::scalar(DType::Bool)],
                );
                let o = self.m.node(n).outputs[0];
                self.m.func_mut(c).outputs = Some(vec![o]);
                let axis = *k as usize % sh.rank();
                self.push(Op::Sort { comparator: c, axis, stable: k % 2 == 0 }, vec![v], sh);
                self.closures = true;
            }
        }
    }
}

fn build(name_k: usize, params: &[(usize, Vec<i64>, usize)], steps: &[Step], outs: &[u32]) -> (Module, bool) {
    let mut g = Gen { m: Module::new(NAMES[name_k % NAMES.len()]), vals: vec![], closures: false };
    let main = g.m.main;
    let mut used: Vec<&str> = vec![];
    for (dk, dims, nk) in params {
        // Parameter names of one function must be distinct (verifier F5); a repeat is unnamed.
        let name = NAMES[nk % NAMES.len()];
        let name = if used.contains(&name) { "" } else { name };
        if !name.is_empty() {
            used.push(name);
        }
        let v = g.m.add_param(main, name, Shape::new(DTYPES[dk % DTYPES.len()], dims));
        g.vals.push(v);
    }
    for s in steps {
        g.step(s);
    }
    let outputs: Vec<ValueId> = outs.iter().map(|&k| g.vals[k as usize % g.vals.len()]).collect();
    g.m.func_mut(main).outputs = Some(outputs);
    (g.m, g.closures)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_modules_round_trip(
        name_k in 0usize..6,
        params in prop::collection::vec((0usize..9, dims_strategy(), 0usize..6), 1..4),
        steps in prop::collection::vec(step_strategy(), 0..14),
        outs in prop::collection::vec(any::<u32>(), 1..4),
    ) {
        let (m, closures) = build(name_k, &params, &steps, &outs);
        let text = print_module(&m);
        let back = parse_module(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(print_module(&back), text.clone());
        if !closures {
            // Built in print order, so even the ids are the same.
            prop_assert_eq!(&back, &m);
        }
        if let Err(e) = verify(&m) {
            return Err(TestCaseError::fail(format!("{e}\n{text}")));
        }
        prop_assert!(verify(&back).is_ok());
    }

    #[test]
    fn random_shapes_round_trip(
        dk in 0usize..32,
        dims in prop::collection::vec((-1i64..5, 0usize..6), 0..5),
    ) {
        let dtype = tensorjit::ir::dtype::ALL_DTYPES[dk];
        // Dynamic axes get a name; some static ones too.
        let names: Vec<&str> =
            dims.iter().map(|&(d, k)| if d < 0 { ["b", "a b", "x.y", "\"", "_", "é"][k] } else { NAMES[k] }).collect();
        let ds: Vec<i64> = dims.iter().map(|&(d, _)| d).collect();
        let shape = Shape::with_names(dtype, &ds, &names).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut m = Module::new("s");
        let main = m.main;
        let p = m.add_param(main, "", shape.clone());
        m.func_mut(main).outputs = Some(vec![p]);
        let text = print_module(&m);
        let back = parse_module(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back.shape(ValueId(0)), &shape);
        prop_assert_eq!(print_module(&back), text);
    }

    #[test]
    fn random_constant_bits_round_trip(
        dk in 0usize..21,
        n in 0usize..40,
        seed in prop::collection::vec(any::<u8>(), 1..200),
        scalar in any::<bool>(),
    ) {
        let dtype = tensorjit::ir::dtype::SUPPORTED_DTYPES[dk];
        let dims: Vec<i64> = if scalar { vec![] } else { vec![n as i64] };
        let shape = Shape::new(dtype, &dims);
        let data = const_bytes(dtype, shape.num_elements(), &seed);
        let mut m = Module::new("k");
        let main = m.main;
        let node = m.add_node(main, Op::Constant(ConstData(Arc::new(data.clone()))), vec![], vec![shape]);
        let v = m.node(node).outputs[0];
        m.func_mut(main).outputs = Some(vec![v]);
        let text = print_module(&m);
        let back = parse_module(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        match &back.node(back.func(back.main).body[0]).op {
            Op::Constant(d) => prop_assert_eq!(d.0.as_slice(), data.as_slice()),
            other => prop_assert!(false, "not a constant: {:?}", other),
        }
        prop_assert_eq!(print_module(&back), text);
        prop_assert!(verify(&m).is_ok());
    }
}
