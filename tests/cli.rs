//! Tests of the `tensorjit` command itself (the built binary): help and version, exit status 2
//! for usage errors and 1 for failures naming the file, `check` positions, `--json` output read
//! back with serde_json, `dump` of every stage, dumps of a model-sized constant staying small
//! and replaying through a side file, `fmt` and `bench`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tensorjit::{DType, Shape};

/// A fresh, empty scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorjit_cli_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary; no run may panic.
fn tj(args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorjit"))
        .args(args)
        .env_remove("TENSORJIT_BACKEND")
        .env_remove("TENSORJIT_DUMP")
        .output()
        .expect("tensorjit runs");
    let o = Out {
        code: out.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!o.stderr.contains("panicked"), "{args:?} panicked: {}", o.stderr);
    o
}

fn json(o: &Out) -> Value {
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object on one line: {}", o.stdout);
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `out0 = 2 * exp(x + y)` on f32[4,5] (one fused loop on jit).
const SMALL: &str = "module @small

func @main(%0 \"x\": f32[4,5], %1 \"y\": f32[4,5]) {
  %2 = add %0, %1 : f32[4,5]
  %3 = exp %2 : f32[4,5]
  %4 = constant 2.0 : f32[]
  %5 = broadcast_in_dim %4, shape=f32[4,5], axes=[] : f32[4,5]
  %6 = mul %3, %5 : f32[4,5]
  %7 = mul %3, %5 : f32[4,5]
  %8 = add %6, %7 : f32[4,5]
  return %8
}
";

fn write_npy(path: &Path, dims: &[u64], data: &[f32]) {
    use npyz::WriterBuilder;
    let f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = npyz::WriteOptions::new().default_dtype().shape(dims).writer(f).begin_nd().unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

#[test]
fn help_and_version() {
    let o = tj(&["--help"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for cmd in ["run", "bench", "check", "fmt", "dump", "--json", "--quiet", "Exit status"] {
        assert!(o.stdout.contains(cmd), "--help lists {cmd}: {}", o.stdout);
    }
    for (cmd, want) in [
        ("run", "--input <NAME=PATH>"),
        ("bench", "--warmup <N>"),
        ("check", "<FILE>"),
        ("fmt", "--constants-file <PATH>"),
        ("dump", "--stage <STAGE>"),
    ] {
        let o = tj(&[cmd, "--help"]);
        assert_eq!(o.code, 0, "{cmd} --help: {}", o.stderr);
        assert!(o.stdout.contains(&format!("Usage: tensorjit {cmd}")) && o.stdout.contains(want), "{}", o.stdout);
    }
    assert!(tj(&["run", "--help"]).stdout.contains("bf16"), "run --help has the dtype conventions");
    assert!(tj(&["help", "dump"]).stdout.contains("asm"));
    let o = tj(&["--version"]);
    assert_eq!((o.code, o.stdout.trim()), (0, format!("tensorjit {}", env!("CARGO_PKG_VERSION")).as_str()));
}

#[test]
fn usage_errors_exit_with_2() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["check"],
        &["check", "--bogus", "m.tjir"],
        &["run", "m.tjir"],
        &["run", "m.tjir", "--out", "o", "--input", "no_equals_sign"],
        &["bench", "m.tjir", "--warmup", "-3"],
        &["dump", "m.tjir", "--stage", "nonsense"],
        &["check", "--json", "--quiet", "m.tjir"],
    ] {
        let o = tj(args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(!o.stderr.is_empty(), "{args:?}");
    }
    let o = tj(&["check", "--bogus", "m.tjir"]);
    assert!(o.stderr.contains("--bogus"), "{}", o.stderr);
}

#[test]
fn failures_exit_with_1_and_name_the_file() {
    let dir = scratch("fail");
    let missing = dir.join("missing.tjir");
    let out = dir.join("out");
    for args in [
        vec!["check", path(&missing)],
        vec!["fmt", path(&missing)],
        vec!["dump", path(&missing)],
        vec!["run", path(&missing), "--out", path(&out)],
        vec!["bench", path(&missing)],
    ] {
        let o = tj(&args);
        assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains("missing.tjir"), "{args:?}: {}", o.stderr);
    }
    // A parse error: FILE:LINE:COLUMN on every command.
    let bad = dir.join("bad.tjir");
    std::fs::write(&bad, "module @m\n\nfunc @main(%0: f32[2]) {\n  %1 = nope %0 : f32[2]\n  return %1\n}\n").unwrap();
    for cmd in ["check", "fmt", "dump", "bench"] {
        let o = tj(&[cmd, path(&bad)]);
        assert_eq!(o.code, 1, "{cmd}: {}", o.stderr);
        assert!(o.stderr.contains(&format!("{}:4:8: error: unknown op `nope`", bad.display())), "{cmd}: {}", o.stderr);
    }
    // dump only knows the jit backend.
    std::fs::write(dir.join("small.tjir"), SMALL).unwrap();
    let o = tj(&["dump", path(&dir.join("small.tjir")), "--backend", "interp"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("jit"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_lists_errors_with_positions_and_json() {
    let dir = scratch("check");
    let f = dir.join("m.tjir");
    std::fs::write(
        &f,
        "module @m\n\nfunc @main(%0: f32[2]) {\n  %1 = neg %0 : f32[3]\n  %2 = abs %0 : i32[2]\n  return %1\n}\n",
    )
    .unwrap();
    let o = tj(&["check", path(&f)]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let name = f.display().to_string();
    assert!(o.stderr.contains(&format!("{name}:4:3: error: @main: %1 = neg")), "{}", o.stderr);
    assert!(o.stderr.contains(&format!("{name}:5:3: error: @main: %2 = abs")), "{}", o.stderr);
    assert!(o.stderr.contains("2 verification error(s)"), "{}", o.stderr);
    assert!(o.stdout.is_empty());

    let o = tj(&["check", "--json", path(&f)]);
    assert_eq!(o.code, 1);
    let v = json(&o);
    assert_eq!(v["command"], "check");
    assert_eq!(v["file"], name.as_str());
    assert_eq!(v["ok"], false);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2);
    assert_eq!((errors[0]["line"].as_u64(), errors[0]["column"].as_u64()), (Some(4), Some(3)));
    assert!(errors[0]["message"].as_str().unwrap().contains("inference gives f32[2]"));

    // A parse error in JSON, and a good file (the global flag may come first).
    std::fs::write(&f, "module @m\n\nfunc @main(%0: f32[2]) {\n  %1 = neg %0 f32[2]\n}\n").unwrap();
    let v = json(&tj(&["--json", "check", path(&f)]));
    assert_eq!(
        (v["ok"].as_bool(), v["errors"][0]["line"].as_u64(), v["errors"][0]["column"].as_u64()),
        (Some(false), Some(4), Some(15))
    );
    std::fs::write(&f, SMALL).unwrap();
    let o = tj(&["check", "--json", path(&f)]);
    assert_eq!(o.code, 0);
    let v = json(&o);
    assert_eq!((v["ok"].as_bool(), v["errors"].as_array().map(Vec::len)), (Some(true), Some(0)));
    assert_eq!(v["module"]["nodes"], 7);
    // --quiet: nothing on stdout, the exit status tells.
    let o = tj(&["check", "-q", path(&f)]);
    assert_eq!((o.code, o.stdout.as_str()), (0, ""));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_and_bench_json() {
    let dir = scratch("json");
    let f = dir.join("small.tjir");
    std::fs::write(&f, SMALL).unwrap();
    let x: Vec<f32> = (0..20).map(|i| i as f32 * 0.1).collect();
    write_npy(&dir.join("x.npy"), &[4, 5], &x);
    write_npy(&dir.join("y.npy"), &[4, 5], &[0.0; 20]);
    let (xa, ya) = (format!("x={}", dir.join("x.npy").display()), format!("y={}", dir.join("y.npy").display()));
    let out = dir.join("out");
    let o = tj(&["run", path(&f), "-i", &xa, "-i", &ya, "--out", path(&out), "--json", "--repeat", "3"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o);
    assert_eq!((v["command"].as_str(), v["ok"].as_bool()), (Some("run"), Some(true)));
    let o0 = &v["outputs"][0];
    assert_eq!(o0["name"], "out0");
    assert_eq!(o0["dtype"], "f32");
    assert_eq!(o0["shape"], serde_json::json!([4, 5]));
    assert_eq!(o0["storage"], "native");
    assert!(Path::new(o0["path"].as_str().unwrap()).exists());
    assert!(v["compile_ms"].as_f64().unwrap() >= 0.0 && v["execute_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["repeat"]["n"], 3);
    for k in ["median_ms", "min_ms", "mean_ms", "max_ms"] {
        assert!(v["repeat"][k].as_f64().is_some(), "{k}: {v}");
    }
    // --quiet writes the files and prints nothing.
    let o = tj(&["run", path(&f), "-i", &xa, "-i", &ya, "--out", path(&out), "-q"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, ""));
    // A failed run in JSON: ok=false with the error.
    let o = tj(&["run", path(&f), "-i", &xa, "--out", path(&out), "--json"]);
    assert_eq!(o.code, 1);
    let v = json(&o);
    assert_eq!(v["ok"], false);
    assert!(v["error"]["message"].as_str().unwrap().contains("\"y\""), "{v}");

    // bench: y generated, x from its file.
    let o = tj(&["bench", path(&f), "-i", &xa, "--repeat", "4", "--warmup", "0", "--fill", "random", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = json(&o);
    assert_eq!(v["command"], "bench");
    assert_eq!(v["repeat"]["n"], 4);
    assert_eq!(v["warmup"], 0);
    assert_eq!(v["inputs"][1]["source"], "random");
    assert!(v["inputs"][0]["source"].as_str().unwrap().ends_with("x.npy"));
    let v = json(&tj(&["bench", path(&f), "--json", "-b", "interp"]));
    assert_eq!(
        (v["backend"].as_str(), v["repeat"]["n"].as_u64(), v["warmup"].as_u64()),
        (Some("interp"), Some(10), Some(1))
    );
    let o = tj(&["bench", path(&f), "-r", "2"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("2 executions after 1 warm-up: median") && o.stdout.contains("generated (zeros)"),
        "{}",
        o.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dump_prints_every_stage() {
    let dir = scratch("dump");
    let f = dir.join("small.tjir");
    std::fs::write(&f, SMALL).unwrap();
    let stage = |s: &str| {
        let o = tj(&["dump", path(&f), "--stage", s]);
        assert_eq!(o.code, 0, "{s}: {}", o.stderr);
        o.stdout
    };
    let input = stage("input");
    assert!(input.starts_with(";; ==== input: module ====\nmodule @small\n"), "{input}");
    assert!(!input.contains(";; ==== passes"), "{input}");
    let passes = stage("passes");
    assert!(passes.contains(";; ==== passes: timings ====\nfold: "), "{passes}");
    assert!(passes.contains(";; ==== passes: 01-fold ====\nmodule @small"), "{passes}");
    assert!(passes.contains(";; ==== passes: egg ====\negg fusion"), "{passes}");
    let optimized = stage("optimized");
    assert!(optimized.contains(";; ==== optimized: module ====\nmodule @small"), "{optimized}");
    assert!(optimized.contains("%6 = add %5, %5"), "cse merged the two products: {optimized}");
    let clusters = stage("clusters");
    assert!(clusters.contains(";; ==== clusters: clusters ====\ncluster 0: Float32 [4, 5]"), "{clusters}");
    let clif = stage("clif");
    assert!(clif.contains(";; ==== clif: kernel-0 (cluster 0 of main) ====\nfunction"), "{clif}");
    let asm = stage("asm");
    assert!(asm.contains(";; ==== asm: kernel-0 (cluster 0 of main) ===="), "{asm}");
    let is_machine_code = |l: &str| {
        let l = l.trim_start();
        ["ret", "mov", "add", "vadd", "vmov", "ldr", "str", "fadd", "jmp", "b "].iter().any(|m| l.starts_with(m))
    };
    assert!(asm.lines().filter(|l| is_machine_code(l)).count() >= 5, "{asm}");
    let plan = stage("plan");
    assert!(plan.contains(";; ==== plan: plan ====") && plan.contains("step 0: loop cluster0"), "{plan}");
    // Several stages (comma-separated or repeated) come in pipeline order; the default is all.
    let two = tj(&["dump", path(&f), "-s", "plan,input"]).stdout;
    assert!(two.find(";; ==== input").unwrap() < two.find(";; ==== plan").unwrap(), "{two}");
    let all = tj(&["dump", path(&f)]).stdout;
    for s in ["input", "passes", "optimized", "clusters", "clif", "asm", "plan"] {
        assert!(all.contains(&format!(";; ==== {s}: ")), "{s} in the default dump");
    }
    assert_eq!(tj(&["dump", path(&f), "--stage", "all"]).stdout.lines().count(), all.lines().count());
    // fusion=off: no egg report.
    let off = tj(&["dump", path(&f), "-s", "passes", "--backend", "jit:fusion=off"]).stdout;
    assert!(!off.contains(";; ==== passes: egg"), "{off}");
    // JSON: one object with the sections.
    let v = json(&tj(&["dump", path(&f), "-s", "asm,plan", "--json"]));
    let sections = v["sections"].as_array().unwrap();
    assert_eq!(sections[0]["stage"], "asm");
    assert_eq!(sections.last().unwrap()["stage"], "plan");
    assert!(sections[0]["text"].as_str().unwrap().contains("ret"), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A module with a symbolic dimension is planned as written (no bound sizes): its steps are the
/// shape-generic kernels, and one of them (`iota`) reads no operand. The plan's grouping of
/// consecutive kernels once indexed every kernel's first operand and panicked there (found
/// dumping an imported MiniLM with its batch left symbolic).
#[test]
fn dump_plans_a_symbolic_module_with_an_operandless_kernel() {
    let dir = scratch("dump-dyn");
    let f = dir.join("dyn.tjir");
    std::fs::write(
        &f,
        "module @dyn

func @main(%0 \"x\": f32[n=?,4]) {
  %1 = reduce_sum %0, axes=[1] : f32[n=?]
  %2 = iota shape=f32[n=?], axis=0 : f32[n=?]
  %3 = add %1, %2 : f32[n=?]
  return %3
}
",
    )
    .unwrap();
    let o = tj(&["dump", path(&f), "-s", "plan"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("iota f32[?]"), "{}", o.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An IR file of `y = x · W` with W a 384×384 f32 constant.
fn big_constant_ir(dir: &Path) -> PathBuf {
    let backend = tensorjit::new_with_config("interp").unwrap();
    let b = backend.builder("big");
    let f = b.main();
    let w: Vec<f32> = (0..384 * 384).map(|i| ((i * 31) % 97) as f32 / 97.0).collect();
    let x = f.parameter("x", Shape::new(DType::Float32, &[1, 384])).unwrap();
    let wv = f.constant(&w, &[384, 384]).unwrap();
    let y = f.matmul(x, wv).unwrap();
    let z = f.exp(y).unwrap();
    f.return_(&[z]).unwrap();
    let p = dir.join("big.tjir");
    std::fs::write(&p, tensorjit::ir::text::print_module(&b.module())).unwrap();
    p
}

#[test]
fn dumps_of_large_constants_stay_small_and_replay() {
    let dir = scratch("big");
    let ir = big_constant_ir(&dir);
    assert!(std::fs::metadata(&ir).unwrap().len() > 1_000_000, "the full text is large");
    let o = tj(&["dump", path(&ir)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let input = o.stdout.split(";; ==== passes").next().unwrap();
    assert!(input.len() < 10_000, "input stage of {} bytes", input.len());
    assert!(input.contains("constant elided(bytes=589824, hash=\"xxh64:"), "{input}");
    let o = tj(&["dump", path(&ir), "-s", "input,optimized,plan"]);
    assert!(o.stdout.len() < 10_000, "{} bytes", o.stdout.len());

    // With a side file the optimised stage replays and computes what the original does.
    let sub = dir.join("replay");
    std::fs::create_dir_all(&sub).unwrap();
    let consts = sub.join("consts.bin");
    let o = tj(&["dump", path(&ir), "--stage", "optimized", "--constants-file", path(&consts)]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.len() < 10_000);
    assert!(o.stdout.contains("constant file(\"consts.bin\", offset=0, bytes=589824"), "{}", o.stdout);
    assert!(o.stderr.contains("consts.bin"), "says where the constants went: {}", o.stderr);
    let replay = sub.join("optimized.tjir");
    std::fs::write(&replay, &o.stdout).unwrap();
    write_npy(&dir.join("x.npy"), &[1, 384], &(0..384).map(|i| (i % 5) as f32 * 0.01).collect::<Vec<_>>());
    let xa = format!("x={}", dir.join("x.npy").display());
    let (a, b) = (dir.join("a"), dir.join("b"));
    assert_eq!(tj(&["run", path(&ir), "-i", &xa, "--out", path(&a), "-b", "interp", "-q"]).code, 0);
    let o = tj(&["run", path(&replay), "-i", &xa, "--out", path(&b), "-b", "interp", "-q"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read(a.join("out0.npy")).unwrap(), std::fs::read(b.join("out0.npy")).unwrap());

    // fmt: the same with --max-constant-elements / --preview; check resolves the side file.
    let o = tj(&["fmt", path(&ir), "--constants-file", path(&sub.join("w.bin")), "--preview", "2"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.len() < 2_000 && o.stdout.contains("first=[0.0, 0.31958762]) : f32[384,384]"), "{}", o.stdout);
    let small = sub.join("fmt.tjir");
    std::fs::write(&small, &o.stdout).unwrap();
    assert_eq!(tj(&["check", path(&small)]).code, 0);
    // A damaged side file: check fails naming it, with the constant's position.
    let mut w = std::fs::read(sub.join("w.bin")).unwrap();
    w[7] ^= 1;
    std::fs::write(sub.join("w.bin"), &w).unwrap();
    let o = tj(&["check", path(&small)]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains(&format!("{}:4:", small.display())) && o.stderr.contains("w.bin"), "{}", o.stderr);
    // fmt without options prints constants in full (the canonical text).
    let o = tj(&["fmt", path(&ir)]);
    assert_eq!(o.stdout, std::fs::read_to_string(&ir).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}
