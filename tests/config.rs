//! Typed configuration of both backends: `JitOptions` / `InterpOptions` built with setters and
//! from config strings (one parser), every bad option or value a clean `Error::Config` naming
//! it, the removed `ops_sequential`, `new_with_options`, the environment (`TENSORJIT_BACKEND`
//! blank means unset; invalid numeric variables are errors naming them, checked in child
//! processes), and `tracing` events (none printed without a subscriber; the compile stages,
//! fusion, kernel selection and plan events with one).

use std::sync::{Arc, Mutex};

use tensorjit::backends::interp::{InterpBackend, InterpOptions};
use tensorjit::backends::jit::{JitBackend, JitOptions, Reductions, StreamingStores};
use tensorjit::ir::text::parse_module;
use tensorjit::threads::Threads;
use tensorjit::{Backend, BackendOptions, Buffer, Error};

/// `while x < n: x += 1`, returning x.
const COUNT_TO_N: &str = r#"
module @count
func @main(%0 "x": i32[], %1 "n": i32[]) {
  %2 = while %0, cond=@1, body=@2 : i32[]
  return %2
}
closure @1(%3: i32[]) parent=@main {
  %4 = less_than %3, %1 : bool[]
  return %4
}
closure @2(%5: i32[]) parent=@main {
  %6 = constant 1 : i32[]
  %7 = add %5, %6 : i32[]
  return %7
}
"#;

fn i32s(v: i32) -> Buffer {
    Buffer::from_slice(&[v], &[]).unwrap()
}

fn count(b: &Arc<dyn Backend>, n: i32) -> tensorjit::Result<i32> {
    let exe = b.compile(parse_module(COUNT_TO_N).unwrap())?;
    Ok(exe.execute(&[&i32s(0), &i32s(n)], &[])?[0].to_vec::<i32>()?[0])
}

fn config_error(r: tensorjit::Result<Arc<dyn Backend>>) -> String {
    match r {
        Err(Error::Config(msg)) => msg,
        Err(e) => panic!("expected a config error, got {e:?}"),
        Ok(b) => panic!("expected a config error, got backend {}", b.name()),
    }
}

#[test]
fn typed_options_create_working_backends() {
    let jit = JitOptions::default().parallelism(2).while_limit(10).reductions(Reductions::Ordered);
    let interp = InterpOptions::default().while_limit(10);
    let backends: Vec<Arc<dyn Backend>> = vec![
        JitBackend::with_options(jit.clone()).unwrap(),
        InterpBackend::with_options(interp.clone()).unwrap(),
        tensorjit::new_with_options(jit.clone()).unwrap(),
        tensorjit::new_with_options(interp.clone()).unwrap(),
        tensorjit::new_with_options(BackendOptions::Jit(JitOptions::default())).unwrap(),
    ];
    for (i, b) in backends.iter().enumerate() {
        assert_eq!(count(b, 10).unwrap(), 10, "{}", b.name());
        if i < 4 {
            // while_limit=10 is in force: the 11th iteration is an error naming the limit.
            assert!(matches!(count(b, 11), Err(Error::Limit { .. })), "{}", b.name());
        } else {
            assert_eq!(count(b, 11).unwrap(), 11);
        }
    }
    assert_eq!(backends[0].name(), "jit");
    assert_eq!(backends[1].name(), "interp");
    assert_eq!(backends[2].name(), "jit");
    assert_eq!(backends[3].name(), "interp");
    // The description shows the options in config-string form.
    assert!(backends[0].description().contains("parallelism=2,while_limit=10,reductions=ordered"));
    assert!(backends[1].description().contains("while_limit=10"));
}

#[test]
fn config_strings_map_to_typed_options() {
    let b = JitBackend::new("parallelism=3, while_limit=7,fusion=off,streaming_stores=off,dump=/tmp/tj-x").unwrap();
    let want = JitOptions::default()
        .parallelism(3)
        .while_limit(7)
        .fusion(false)
        .streaming_stores(StreamingStores::Off)
        .dump("/tmp/tj-x");
    assert_eq!(b.options(), &want);
    assert_eq!(b.parallelism(), 3);
    assert_eq!("parallelism=3,while_limit=7,fusion=off,streaming_stores=off,dump=/tmp/tj-x".parse(), Ok(want.clone()));
    assert_eq!(JitOptions::parse(&want.to_string()).unwrap(), want);
    assert_eq!(JitBackend::new("").unwrap().options(), &JitOptions::default());
    assert_eq!(JitBackend::new("parallelism=shared").unwrap().options().threads, Threads::Shared);
    assert!(JitOptions::default().fusion, "fusion is on by default");

    let i = InterpBackend::new("parallelism=4,while_limit=3").unwrap();
    assert_eq!(i.options(), &InterpOptions::default().parallelism(4).while_limit(3));
    assert_eq!(InterpOptions::parse("").unwrap(), InterpOptions::default());

    for (config, want) in [
        ("jit", BackendOptions::Jit(JitOptions::default())),
        ("jit:parallelism=2", BackendOptions::Jit(JitOptions::default().parallelism(2))),
        ("interp:while_limit=5", BackendOptions::Interp(InterpOptions::default().while_limit(5))),
    ] {
        let parsed = BackendOptions::parse(config).unwrap();
        assert_eq!(parsed, want, "{config}");
        assert_eq!(parsed.to_string(), config);
        assert_eq!(tensorjit::new_with_options(parsed).unwrap().name(), want.backend_name());
    }
}

#[test]
fn bad_options_are_errors_naming_them() {
    let cases: &[(&str, &[&str])] = &[
        ("jit:bogus", &["bogus", "parallelism", "fusion", "dump"]),
        ("interp:bogus", &["bogus", "parallelism", "while_limit"]),
        // The dead option is gone on both backends.
        ("jit:ops_sequential", &["ops_sequential"]),
        ("interp:ops_sequential", &["ops_sequential"]),
        ("jit:parallelism", &["parallelism"]),
        ("jit:parallelism=0", &["parallelism"]),
        ("jit:parallelism=-2", &["parallelism", "-2"]),
        ("jit:parallelism=lots", &["parallelism", "lots"]),
        ("jit:parallelism=1025", &["parallelism", "1024"]),
        ("interp:parallelism=100000", &["parallelism", "1024"]),
        ("jit:while_limit", &["while_limit"]),
        ("jit:while_limit=1e3", &["while_limit", "1e3"]),
        ("interp:while_limit=-1", &["while_limit", "-1"]),
        ("jit:fusion=maybe", &["fusion", "maybe"]),
        ("jit:reductions=exact", &["reductions", "exact", "fast", "ordered"]),
        ("jit:reductions", &["reductions"]),
        ("jit:streaming_stores=sometimes", &["streaming_stores", "sometimes", "auto"]),
        ("jit:dump", &["dump"]),
        ("jit:dump=", &["dump"]),
        ("nosuch:parallelism=1", &["nosuch", "jit", "interp"]),
    ];
    for &(config, words) in cases {
        let msg = config_error(tensorjit::new_with_config(config));
        for w in words {
            assert!(msg.contains(w), "{config}: {msg:?} lacks {w:?}");
        }
    }
    // Typed options are checked when the backend is made.
    for (opts, word) in [
        (BackendOptions::Jit(JitOptions::default().parallelism(0)), "parallelism"),
        (BackendOptions::Jit(JitOptions::default().parallelism(tensorjit::limits::MAX_THREADS + 1)), "1024"),
        (BackendOptions::Jit(JitOptions::default().dump("")), "dump"),
        (BackendOptions::Interp(InterpOptions::default().parallelism(0)), "parallelism"),
    ] {
        let msg = config_error(tensorjit::new_with_options(opts.clone()));
        assert!(msg.contains(word), "{opts:?}: {msg}");
    }
    assert!(JitBackend::with_options(JitOptions::default().parallelism(tensorjit::limits::MAX_THREADS)).is_ok());
}

/// Runs test `name` of this binary in a child process with `env` set (and `TJ_CONFIG_CHILD=1`,
/// which the child tests look for); returns (success, stdout, stderr).
fn child(name: &str, env: &[(&str, &str)], remove: &[&str]) -> (bool, String, String) {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", name, "--test-threads=1", "--nocapture", "--quiet"]).env("TJ_CONFIG_CHILD", "1");
    for v in remove {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run child");
    let (so, se) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(so.contains("1 passed"), "child {name} did not run:\n{so}\n{se}");
    (out.status.success(), so, se)
}

fn in_child() -> bool {
    std::env::var_os("TJ_CONFIG_CHILD").is_some()
}

/// Child: prints the name of the backend `tensorjit::new()` picks.
#[test]
fn child_default_backend() {
    if !in_child() {
        return;
    }
    let b = tensorjit::new().expect("tensorjit::new");
    println!("backend={}", b.name());
}

#[test]
fn blank_backend_variable_is_unset() {
    if in_child() {
        return;
    }
    let pick = |v: Option<&str>| {
        let env: Vec<(&str, &str)> = v.map(|v| vec![("TENSORJIT_BACKEND", v)]).unwrap_or_default();
        let (ok, out, err) = child("child_default_backend", &env, &["TENSORJIT_BACKEND"]);
        assert!(ok, "{v:?}: {out}\n{err}");
        out.lines().find_map(|l| l.strip_prefix("backend=")).map(str::to_string).unwrap_or_default()
    };
    assert_eq!(pick(None), "jit");
    assert_eq!(pick(Some("")), "jit", "set but empty means unset");
    assert_eq!(pick(Some("   ")), "jit", "blanks mean unset");
    assert_eq!(pick(Some("interp")), "interp");
    assert_eq!(pick(Some(" interp:while_limit=3 ")), "interp");
    assert_eq!(tensorjit::registry::config_from_env_value(Some(" \t")), "jit");
}

/// Child: creates each backend and prints the outcome.
#[test]
fn child_create_backends() {
    if !in_child() {
        return;
    }
    for name in ["jit", "interp"] {
        match tensorjit::new_with_config(name) {
            Ok(_) => println!("{name}: ok"),
            Err(e) => println!("{name}: error: {e}"),
        }
    }
}

#[test]
fn invalid_environment_variables_are_errors_naming_them() {
    if in_child() {
        return;
    }
    for (var, value) in [
        ("TENSORJIT_THREADS", "many"),
        ("TENSORJIT_THREADS", "0"),
        ("TENSORJIT_THREADS", "5000"),
        ("TENSORJIT_POOL_MB", "-1"),
        ("TENSORJIT_MAX_TENSOR_BYTES", "0"),
        ("TENSORJIT_MAX_TENSOR_BYTES", "1GB"),
        ("TENSORJIT_GEMM_KC", "big"),
    ] {
        let (ok, out, err) = child("child_create_backends", &[(var, value)], &[]);
        assert!(ok, "{var}={value}: {out}\n{err}");
        for name in ["jit", "interp"] {
            let line = out.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap_or("");
            assert!(line.contains("error") && line.contains(var) && line.contains(value), "{var}={value}: {line}");
        }
    }
    // Valid and blank values are fine.
    for (var, value) in [("TENSORJIT_THREADS", "2"), ("TENSORJIT_POOL_MB", "0"), ("TENSORJIT_THREADS", " ")] {
        let (ok, out, err) = child("child_create_backends", &[(var, value)], &[]);
        assert!(ok && out.contains("jit: ok") && out.contains("interp: ok"), "{var}={value}: {out}\n{err}");
    }
}

/// A module exercising the compile stages: a GEMM (DotGeneral), a fused elementwise chain ending
/// in a reduction, compiled and run on both backends (jit on the shared pool and on its own).
const WORKLOAD: &str = r#"
module @work
func @main(%0 "a": f32[64,64], %1 "b": f32[64,64]) {
  %2 = dot_general %0, %1, lhs_contracting=[1], lhs_batch=[], rhs_contracting=[0], rhs_batch=[] : f32[64,64]
  %3 = exp %2 : f32[64,64]
  %4 = neg %3 : f32[64,64]
  %5 = mul %4, %0 : f32[64,64]
  %6 = reduce_max %5, axes=[1] : f32[64]
  return %6
}
"#;

fn run_workload() {
    let a = Buffer::from_slice(&vec![0.01f32; 64 * 64], &[64, 64]).unwrap();
    for config in ["jit", "jit:parallelism=2", "interp"] {
        let b = tensorjit::new_with_config(config).unwrap();
        let m = parse_module(WORKLOAD).unwrap_or_else(|e| panic!("{e}"));
        let exe = b.compile(m).unwrap();
        let out = exe.execute(&[&a, &a], &[]).unwrap();
        assert_eq!(out[0].shape().dims, vec![64]);
    }
}

/// Child: the workload without any subscriber (the parent checks stderr stays empty).
#[test]
fn child_quiet_workload() {
    if !in_child() {
        return;
    }
    run_workload();
    // Memory and thread statistics are silent too.
    let _ = tensorjit::memory::pool_stats();
    let _ = tensorjit::memory::set_pool_cap(tensorjit::memory::pool_cap());
    let _ = tensorjit::threads::stats();
}

#[test]
fn library_prints_nothing_without_a_subscriber() {
    if in_child() {
        return;
    }
    let (ok, out, err) = child("child_quiet_workload", &[], &["TENSORJIT_DUMP", "TENSORJIT_BACKEND"]);
    assert!(ok, "{out}\n{err}");
    assert!(err.trim().is_empty(), "the library wrote to stderr:\n{err}");
    assert!(
        out.lines().all(|l| l.trim().is_empty() || l.starts_with("running") || l.contains("passed") || l == "."),
        "the library wrote to stdout:\n{out}"
    );
}

/// A minimal `tracing` subscriber recording each event's target, level and message.
struct Recorder {
    events: Mutex<Vec<(String, tracing::Level, String)>>,
}

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut v = MessageVisitor(String::new());
        e.record(&mut v);
        let md = e.metadata();
        self.events.lock().unwrap().push((md.target().to_string(), *md.level(), v.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Child: the workload under a recording subscriber; prints `target|level|message` lines.
#[test]
fn child_traced_workload() {
    if !in_child() {
        return;
    }
    // Global (this child process runs nothing else): events from pool threads count too.
    let rec = Arc::new(Recorder { events: Mutex::new(vec![]) });
    tracing::subscriber::set_global_default(rec.clone()).expect("no subscriber yet");
    run_workload();
    for (target, level, msg) in rec.events.lock().unwrap().iter() {
        println!("EVENT {target}|{level}|{}", msg.replace('\n', "\\n"));
    }
}

#[test]
fn compile_stages_are_traced() {
    if in_child() {
        return;
    }
    let (ok, out, err) = child("child_traced_workload", &[], &["TENSORJIT_DUMP", "TENSORJIT_BACKEND"]);
    assert!(ok, "{out}\n{err}");
    let events: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("EVENT ")).collect();
    let has = |target: &str, level: &str, msg: &str| {
        events.iter().any(|e| e.starts_with(&format!("{target}|{level}|")) && e.contains(msg))
    };
    for (target, level, msg) in [
        ("tensorjit::jit", "DEBUG", "jit backend created"),
        ("tensorjit::jit", "DEBUG", "optimisation passes done"),
        ("tensorjit::passes", "TRACE", "pass"),
        ("tensorjit::passes", "DEBUG", "egg fusion"),
        ("tensorjit::jit", "DEBUG", "clusters formed"),
        ("tensorjit::jit", "TRACE", "clusters:"),
        ("tensorjit::jit", "DEBUG", "fast kernel selected"),
        ("tensorjit::gemm", "DEBUG", "selected the GEMM kernels"),
        ("tensorjit::codegen", "DEBUG", "loop kernel compiled"),
        ("tensorjit::jit", "DEBUG", "plan built"),
        ("tensorjit::jit", "TRACE", "plan:"),
        ("tensorjit::jit", "DEBUG", "compiled"),
        ("tensorjit::threads", "DEBUG", "started the shared thread pool"),
        ("tensorjit::threads", "DEBUG", "started a backend's own thread pool"),
        ("tensorjit::interp", "DEBUG", "compiled"),
    ] {
        assert!(has(target, level, msg), "no {level} event {msg:?} of {target} among:\n{}", events.join("\n"));
    }
    // The compile summary carries its stage times.
    assert!(events.iter().any(|e| e.contains("plan built") && e.contains("codegen_ms") && e.contains("clustering_ms")));
    assert!(events.iter().any(|e| e.contains("|compiled") && e.contains("passes_ms")));
}

/// docs/configuration.md documents every option of both backends and every environment
/// variable; every `"TENSORJIT_…"` string in the sources is one of `env::ENV_VARS`.
#[test]
fn configuration_doc_lists_every_option_and_variable() {
    let root = env!("CARGO_MANIFEST_DIR");
    let doc = std::fs::read_to_string(format!("{root}/docs/configuration.md")).unwrap();
    for v in tensorjit::env::ENV_VARS {
        assert!(doc.contains(&format!("`{v}`")), "docs/configuration.md does not describe {v}");
    }
    for o in tensorjit::backends::jit::OPTIONS.iter().chain(tensorjit::backends::interp::OPTIONS) {
        assert!(doc.contains(&format!("`{o}=")), "docs/configuration.md does not describe option {o}");
    }
    let mut stack = vec![std::path::PathBuf::from(format!("{root}/src"))];
    let mut seen = 0;
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (i, _) in text.match_indices("\"TENSORJIT_") {
            let name: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            assert!(tensorjit::env::ENV_VARS.contains(&name.as_str()), "{}: {name} is not in ENV_VARS", p.display());
            seen += 1;
        }
    }
    assert!(seen >= tensorjit::env::ENV_VARS.len(), "found only {seen} variable names in src/");
}
