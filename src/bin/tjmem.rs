//! tjmem: peak resident memory of building, compiling and running a model with ~100 MB of f32
//! constant weights on the "jit" backend, whose GEMM kernels pack constant weights at compile time.
//!
//! Prints VmRSS / VmHWM (from `/proc/self/status`) after each phase; the peak of each phase is
//! measured separately by resetting VmHWM (`/proc/self/clear_refs` = 5) before it.
//!
//! `cargo build --release --features internals --bin tjmem && target/release/tjmem [--layers 4]
//! [--width 2560] [--batch 8] [--op dense|dense-oi|dot] [--backend jit[:options]] [--phases]` (`--phases`
//! also measures the verifier and the optimisation passes alone on a copy of the module).

use tensorjit::ir::op::{Activation, DenseLayout};
use tensorjit::{Buffer, DType, Shape};

fn status_kib(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Resets VmHWM to the current RSS (Linux ≥ 4.0); returns whether it worked.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn report(phase: &str, weights_mib: f64, base: u64) {
    let (rss, hwm) = (status_kib("VmRSS:"), status_kib("VmHWM:"));
    println!(
        "{phase:<28} VmRSS {:8.1} MiB  phase peak VmHWM {:8.1} MiB  (peak - baseline = {:.2} x weights)",
        mib(rss),
        mib(hwm),
        (mib(hwm) - mib(base)) / weights_mib
    );
}

struct Opts {
    layers: usize,
    width: usize,
    batch: usize,
    op: String,
    backend: String,
    phases: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts { layers: 4, width: 2560, batch: 8, op: "dense".into(), backend: "jit".into(), phases: false };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--layers" => o.layers = val()?.parse().map_err(|e| format!("--layers: {e}"))?,
            "--width" => o.width = val()?.parse().map_err(|e| format!("--width: {e}"))?,
            "--batch" => o.batch = val()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--op" => o.op = val()?,
            "--backend" => o.backend = val()?,
            "--phases" => o.phases = true,
            "--help" | "-h" => {
                return Err("usage: tjmem [--layers L] [--width W] [--batch B] [--op dense|dense-oi|dot] \
                            [--backend jit] [--phases]"
                    .into());
            }
            _ => return Err(format!("unknown argument {a:?} (see --help)")),
        }
    }
    if !matches!(o.op.as_str(), "dense" | "dense-oi" | "dot") {
        return Err(format!("--op must be dense, dense-oi or dot, got {:?}", o.op));
    }
    Ok(o)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o) {
        eprintln!("tjmem: {e}");
        std::process::exit(1);
    }
}

fn run(o: &Opts) -> tensorjit::Result<()> {
    let (l, w, b) = (o.layers, o.width, o.batch);
    let weights = l * w * w * 4;
    let weights_mib = weights as f64 / (1024.0 * 1024.0);
    println!(
        "model: {l} x {} [{w}x{w}] f32 weights = {weights_mib:.1} MiB, x [{b}x{w}], backend {:?}",
        o.op, o.backend
    );
    if !reset_peak() {
        println!("note: /proc/self/clear_refs is not writable; VmHWM below is the process-wide peak");
    }
    let backend = tensorjit::new_with_config(&o.backend)?;
    let base = status_kib("VmRSS:");
    report("baseline", weights_mib, base);

    reset_peak();
    let builder = backend.builder("tjmem");
    {
        let f = builder.main();
        let mut x = f.parameter("x", Shape::new(DType::Float32, &[b as i64, w as i64]))?;
        for layer in 0..l {
            // Small values so activations stay O(1) through the layers.
            let data: Vec<f32> = (0..w * w).map(|i| ((i * 7 + layer * 13) % 11) as f32 * 1e-3 - 5e-3).collect();
            let c = f.constant(&data, &[w, w])?;
            drop(data);
            x = match o.op.as_str() {
                "dense" => f.fused_dense(x, c, None, Activation::Relu, DenseLayout::InputOutputs)?,
                "dense-oi" => f.fused_dense(x, c, None, Activation::Relu, DenseLayout::OutputsInput)?,
                _ => f.dot_general(x, &[1], &[], c, &[0], &[], Default::default())?,
            };
        }
        f.return_(&[x])?;
    }
    report("after building the module", weights_mib, base);

    if o.phases {
        // The front half of compile on a copy of the module (constants shared), phase by phase.
        let mut m = builder.module();
        reset_peak();
        tensorjit::ir::verify::verify(&m)?;
        report("  phase: verify", weights_mib, base);
        reset_peak();
        let mut ctx = tensorjit::passes::PassCtx::default();
        tensorjit::passes::optimize_with_fusion(&mut m, &mut ctx, None)?;
        report("  phase: passes (no egg)", weights_mib, base);
        drop(m);
    }

    reset_peak();
    let exe = builder.compile()?;
    report("after compile", weights_mib, base);

    reset_peak();
    let xs: Vec<f32> = (0..b * w).map(|i| (i % 5) as f32 - 2.0).collect();
    let input = Buffer::from_slice(&xs, &[b, w])?;
    let t = std::time::Instant::now();
    let out = exe.execute(&[&input], &[])?;
    let dt = t.elapsed();
    report("after one execution", weights_mib, base);
    let y = out[0].to_vec::<f32>()?;
    let sum: f64 = y.iter().map(|&v| v as f64).sum();
    println!("output [{b}x{w}] sum {sum:.6e}, execution {:.1} ms", dt.as_secs_f64() * 1e3);
    let rss = status_kib("VmRSS:");
    println!(
        "resident after compile+run minus baseline: {:.1} MiB = {:.2} x the weights ({weights_mib:.1} MiB)",
        mib(rss) - mib(base),
        (mib(rss) - mib(base)) / weights_mib
    );
    Ok(())
}
