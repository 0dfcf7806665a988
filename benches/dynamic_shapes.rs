//! MiniLM imported once with `batch`/`sequence` left dynamic against one import per fixed shape
//! (jit): what the first execution at a new shape costs on the dynamic executable (its
//! specialisation) beyond a warm execution, how a warm dynamic execution compares with the
//! fixed-shape executable (alternated, best and median), the fixed module's compile time, and
//! the specialisation counters.
//!
//! `cargo bench --bench dynamic_shapes` (pin with `taskset -c 0` for one thread). The model is
//! `$TENSORJIT_MINILM`, else `~/.cache/tensorjit-bench/models/minilm_l6_v2.onnx`, else
//! `/work/models/minilm-torchscript/model.onnx`; without one it says so and exits. Shapes:
//! `$TENSORJIT_SHAPES` (`1x16,1x128`), default `1x16,1x128,8x128,4x64`; rounds:
//! `$TENSORJIT_ROUNDS` (default 9). Below each row: the phases of that binding's cheap-tier
//! compile (`SpecializationStats::latest_compile`, passes summed by name, phases under 0.2 ms
//! left out); the dynamic module's own compile phases are printed first.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorjit::onnx::{ImportOptions, OnnxModel};
use tensorjit::{Buffer, DType, Executable};

fn model_path() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("TENSORJIT_MINILM") {
        candidates.push(p.into());
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join(".cache/tensorjit-bench/models/minilm_l6_v2.onnx"));
    }
    candidates.push("/work/models/minilm-torchscript/model.onnx".into());
    candidates.into_iter().find(|p| p.is_file())
}

fn shapes() -> Vec<(usize, usize)> {
    let text = std::env::var("TENSORJIT_SHAPES").unwrap_or_else(|_| "1x16,1x128,8x128,4x64".to_string());
    text.split(',')
        .filter_map(|s| {
            let (b, q) = s.trim().split_once('x')?;
            Some((b.parse().ok()?, q.parse().ok()?))
        })
        .collect()
}

/// Token ids in [1000, 2000) (a valid vocabulary range), an all-ones mask, zero token types:
/// one buffer per model input, in order.
fn inputs(m: &OnnxModel, batch: usize, seq: usize) -> Vec<Buffer> {
    m.inputs
        .iter()
        .map(|i| {
            let n = batch * seq;
            let v: Vec<i64> = match i.name.as_str() {
                "attention_mask" => vec![1; n],
                "token_type_ids" => vec![0; n],
                _ => (0..n as i64).map(|k| 1000 + (k * 7919) % 1000).collect(),
            };
            assert_eq!(i.shape.dtype, DType::Int64, "input {} must be int64", i.name);
            Buffer::from_slice(&v, &[batch, seq]).expect("input buffer")
        })
        .collect()
}

fn time(exe: &dyn Executable, ins: &[&Buffer]) -> Duration {
    let t = Instant::now();
    let out = exe.execute(ins, &[]).expect("execute");
    let d = t.elapsed();
    drop(out);
    d
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `name ms` of each phase of at least 0.2 ms, passes summed by name, in order of first run.
fn phase_line(phases: &[(String, Duration)]) -> String {
    let mut sums: Vec<(String, Duration, usize)> = Vec::new();
    for (name, d) in phases {
        match sums.iter_mut().find(|(n, _, _)| n == name) {
            Some(e) => {
                e.1 += *d;
                e.2 += 1;
            }
            None => sums.push((name.clone(), *d, 1)),
        }
    }
    let total: Duration = phases.iter().map(|p| p.1).sum();
    let shown: Vec<String> = sums
        .iter()
        .filter(|(_, d, _)| ms(*d) >= 0.2)
        .map(|(n, d, k)| if *k > 1 { format!("{n} {:.1} (x{k})", ms(*d)) } else { format!("{n} {:.1}", ms(*d)) })
        .collect();
    format!("sum {:.1} ms: {}", ms(total), shown.join(", "))
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let Some(path) = model_path() else {
        println!("dynamic_shapes: no MiniLM model (set TENSORJIT_MINILM); skipped");
        return;
    };
    let rounds: usize = std::env::var("TENSORJIT_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(9).max(1);
    let jit = tensorjit::new_with_config("jit").expect("jit backend");
    println!("model: {}", path.display());

    let t = Instant::now();
    let dynamic = tensorjit::onnx::load(&path).expect("dynamic import");
    let import_time = t.elapsed();
    let t = Instant::now();
    let dyn_exe: Arc<dyn Executable> = jit.compile(dynamic.module.clone()).expect("compile dynamic");
    println!(
        "dynamic import {:.1} ms, compile {:.1} ms; inputs {}",
        ms(import_time),
        ms(t.elapsed()),
        dynamic.inputs.iter().map(|i| format!("{} {}", i.name, i.shape)).collect::<Vec<_>>().join(", ")
    );
    if let Some(r) = dyn_exe.compile_report() {
        println!("dynamic compile phases: {}", phase_line(&r.phases));
    }

    println!(
        "{:>9} | {:>10} {:>10} {:>10} | {:>10} {:>10} {:>7} {:>7} | {:>10}",
        "shape", "first ms", "warm ms", "first-warm", "dyn med", "fixed med", "med x", "best x", "fixed cmp"
    );
    for (b, s) in shapes() {
        let ins = inputs(&dynamic, b, s);
        let refs: Vec<&Buffer> = ins.iter().collect();

        // The first execution at this shape compiles its specialisation.
        let first = time(dyn_exe.as_ref(), &refs);
        let report = dyn_exe.compile_report().expect("report").execution;
        assert_eq!(report.interpreted, None, "the dynamic module runs on the interpreter: {report}");
        let cheap_phases = dyn_exe.specialization_stats().map(|s| s.latest_compile).unwrap_or_default();
        let cheap_plan = report.summary();

        let mut opts = ImportOptions::default();
        for i in &dynamic.inputs {
            opts.input_dims.insert(i.name.clone(), vec![b as i64, s as i64]);
        }
        let fixed = tensorjit::onnx::load_with(&path, &opts).expect("fixed import");
        let t = Instant::now();
        let fixed_exe = jit.compile(fixed.module.clone()).expect("compile fixed");
        let fixed_compile = t.elapsed();
        time(fixed_exe.as_ref(), &refs);

        // Alternate the two executables so that both see the same machine state.
        let (mut td, mut tf) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
        for _ in 0..rounds {
            td.push(time(dyn_exe.as_ref(), &refs));
            tf.push(time(fixed_exe.as_ref(), &refs));
        }
        let (bd, bf) = (*td.iter().min().unwrap(), *tf.iter().min().unwrap());
        let (md, mf) = (median(&mut td), median(&mut tf));
        println!(
            "{:>9} | {:>10.1} {:>10.2} {:>10.1} | {:>10.2} {:>10.2} {:>7.3} {:>7.3} | {:>10.1}",
            format!("{b}x{s}"),
            ms(first),
            ms(bd),
            ms(first) - ms(bd),
            ms(md),
            ms(mf),
            md.as_secs_f64() / mf.as_secs_f64(),
            bd.as_secs_f64() / bf.as_secs_f64(),
            ms(fixed_compile),
        );
        println!("{:>9}   cheap tier: {}", "", phase_line(&cheap_phases));
        println!("{:>9}   cheap plan: {}", "", cheap_plan.trim_end());
    }
    if let Some(stats) = dyn_exe.specialization_stats() {
        println!("specialisations: {stats}");
    }
    println!(
        "first ms: first execution at the shape on the dynamic executable (its specialisation compiled); \
         warm ms: best warm dynamic execution; med x / best x: dynamic / fixed (median / best of {rounds} \
         alternated rounds); fixed cmp: compile time of the fixed-shape module (ms)"
    );
}
