//! BERT-like encoder layer (hidden 768, 12 heads, FFN 3072, exact GELU) built from standard ops,
//! run on "jit" with the egg fusion pass off and on, in tokens per second (issue 6 §4).
//!
//! `cargo bench --bench encoder` runs batch 1 and 8 at sequence 128 and 512;
//! `cargo bench --bench encoder -- quick` only batch 1, sequence 128. `TENSORJIT_BACKEND`-style
//! options can be appended with `-- opts=parallelism=2`.
//! `cargo bench --bench encoder -- export=PATH` instead writes a MiniLM-shaped model (6 layers,
//! hidden 384, 12 heads, FFN 1536, batch 1, sequence 128, 22 M weights as constants) as IR text
//! to PATH, constants in full: the input for `tensorjit dump` at model scale.

#[path = "support/bert.rs"]
#[allow(dead_code)]
mod bert;

use std::time::{Duration, Instant};

use bert::Encoder;
use tensorjit::backends::jit::JitBackend;
use tensorjit::passes::egraph::{self, EggConfig};
use tensorjit::{Backend, Buffer, DType, Executable, Shape};

fn build(e: &Encoder, backend: &std::sync::Arc<JitBackend>) -> tensorjit::ir::module::Module {
    let builder = backend.builder("encoder");
    let main = builder.main();
    let x = main.parameter("x", Shape::new(DType::Float32, &[e.batch, e.seq, e.hidden])).expect("param");
    let y = bert::encoder_layer(&main, e, x, 0).expect("encoder layer");
    main.return_(&[y]).expect("return");
    builder.module()
}

/// Seconds per execution: at least 3 runs and about 2 s after one warm-up run.
fn time(exe: &dyn Executable, x: &Buffer) -> (f64, Vec<f32>) {
    let out = exe.execute(&[x], &[]).expect("execute");
    let first = out[0].to_vec::<f32>().expect("f32 output");
    let mut runs = 0u32;
    let start = Instant::now();
    while runs < 3 || start.elapsed() < Duration::from_secs(2) {
        std::hint::black_box(exe.execute(&[x], &[]).expect("execute"));
        runs += 1;
    }
    (start.elapsed().as_secs_f64() / f64::from(runs), first)
}

/// Writes the MiniLM-shaped model to `path` (see the file's header).
fn export(path: &str) {
    let e = Encoder { batch: 1, seq: 128, hidden: 384, heads: 12, ffn: 1536, gelu_erf: true };
    let b: std::sync::Arc<dyn Backend> = JitBackend::new("").expect("jit");
    let builder = b.builder("minilm");
    let main = builder.main();
    let mut x = main.parameter("x", Shape::new(DType::Float32, &[e.batch, e.seq, e.hidden])).expect("param");
    for layer in 0..6 {
        x = bert::encoder_layer(&main, &e, x, layer).expect("encoder layer");
    }
    main.return_(&[x]).expect("return");
    let text = tensorjit::ir::text::print_module(&builder.module());
    std::fs::write(path, &text).expect("write");
    println!("wrote {path}: {} bytes", text.len());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(path) = args.iter().find_map(|a| a.strip_prefix("export=")) {
        export(path);
        return;
    }
    let quick = args.iter().any(|a| a == "quick");
    let opts = args.iter().find_map(|a| a.strip_prefix("opts=")).unwrap_or("").to_string();
    let sep = if opts.is_empty() { "" } else { "," };
    let off = JitBackend::new(&format!("{opts}{sep}fusion=off")).expect("jit");
    let on = JitBackend::new(&format!("{opts}{sep}fusion=on")).expect("jit");
    println!("BERT-like encoder layer, hidden 768, 12 heads, FFN 3072, GELU erf; jit options {opts:?}");
    println!(
        "{:>5} {:>5} | {:>14} {:>14} | {:>7} | {:>9} | fused ops",
        "batch", "seq", "unfused tok/s", "fused tok/s", "speedup", "max |diff|"
    );
    let shapes: &[(i64, i64)] = if quick { &[(1, 128)] } else { &[(1, 128), (8, 128), (1, 512), (8, 512)] };
    for &(batch, seq) in shapes {
        let e = Encoder { batch, seq, hidden: 768, heads: 12, ffn: 3072, gelu_erf: true };
        let m = build(&e, &off);
        let mut probe = m.clone();
        let report = egraph::run(&mut probe, &EggConfig::default()).expect("egg");
        let x = Buffer::from_slice(&bert::input(&e), &[batch as usize, seq as usize, 768]).expect("input");
        let exe_off = off.compile(m.clone()).expect("compile unfused");
        let (t_off, y_off) = time(exe_off.as_ref(), &x);
        drop(exe_off);
        let exe_on = on.compile(m).expect("compile fused");
        let (t_on, y_on) = time(exe_on.as_ref(), &x);
        let diff = y_off.iter().zip(&y_on).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let tokens = (batch * seq) as f64;
        let fused: Vec<String> = report.fused_ops.iter().map(|(k, v)| format!("{k}×{v}")).collect();
        println!(
            "{batch:>5} {seq:>5} | {:>14.0} {:>14.0} | {:>6.2}× | {diff:>9.2e} | {}",
            tokens / t_off,
            tokens / t_on,
            t_off / t_on,
            fused.join(" ")
        );
    }
}
