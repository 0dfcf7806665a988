//! Benchmarks of the fused kernels against their decomposed forms on "jit" (issue 6 item 4):
//! Softmax [4096, 1536], LayerNorm [4096, 768] and [4096, 1536], GELU [4096, 1536] (erf and tanh)
//! and attention (H 12, d 64, S 128 and 512, several batch sizes), each fused op beside the same
//! computation built from standard ops, compiled and run on "jit" in the same process. Prints a
//! table of the best-of-N time, GB/s (bytes read + written by the op) and the speed-up. The
//! decomposed graphs are compiled with `fusion=off`: by default the jit's egg pass would
//! recognise them and rewrite them into the very fused ops measured here. For attention at
//! S = 512 a child process (with the buffer pool disabled, `TENSORJIT_POOL_MB=0`, so every buffer
//! is a real allocation) also reports the peak memory allocated during one execution (a counting
//! global allocator), beside the `[B, H, S, S]` f32 score matrix the decomposed form materialises.
//!
//! `cargo bench --bench fused` (default run < 1 min); `FUSED_BENCH_FULL=1` adds B = 2, 4 and more
//! repetitions; `FUSED_BENCH_THREADS=N` sets the jit parallelism (default: all cores);
//! `cargo bench --bench fused -- attention` (or `softmax`, `layer`, `gelu`, a full case name)
//! runs only the matching cases. Attention rows also print GFLOP/s (`4·B·H·S²·d`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorjit::api::{AttentionConfig, DotConfig};
use tensorjit::backends::jit::{JitBackend, JitExecutable};
use tensorjit::ir::op::{Activation, AttentionLayout, DenseLayout};
use tensorjit::{Backend, Buffer, DType, Executable, Function, Shape, Value};

#[path = "support/timing.rs"]
mod timing;
use timing::time_pair;

// ---- counting allocator ------------------------------------------------------------------------

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only updates counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) };
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = CURRENT.fetch_add(new - l.size(), Ordering::Relaxed) + (new - l.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// ---- graphs --------------------------------------------------------------------------------------

type R<T> = tensorjit::Result<T>;

fn f32s(dims: &[i64]) -> Shape {
    Shape::new(DType::Float32, dims)
}

fn compile(b: &Arc<JitBackend>, f: impl FnOnce(&Function) -> R<Vec<Value>>) -> JitExecutable {
    let dynb: Arc<dyn Backend> = b.clone();
    let builder = dynb.builder("bench");
    let main = builder.main();
    let outs = f(&main).expect("build");
    main.return_(&outs).expect("return");
    b.compile_jit(builder.module()).expect("compile")
}

/// Softmax over the last axis from standard ops: ReduceMax, broadcast, Sub, Exp, ReduceSum, Div.
fn softmax_std(f: &Function, x: Value, dims: &[i64]) -> R<Value> {
    let r = dims.len();
    let full = f32s(dims);
    let keep: Vec<usize> = (0..r - 1).collect();
    let m = f.broadcast_in_dim(f.reduce_max(x, &[r - 1])?, &full, &keep)?;
    let e = f.exp(f.sub(x, m)?)?;
    let s = f.broadcast_in_dim(f.reduce_sum(e, &[r - 1])?, &full, &keep)?;
    f.div(e, s)
}

/// Layer norm over the last axis of x [rows, h] from standard ops.
fn layer_norm_std(f: &Function, x: Value, gamma: Value, beta: Value, rows: i64, h: i64) -> R<Value> {
    let full = f32s(&[rows, h]);
    let col = f32s(&[rows]);
    let inv_h = f.broadcast_in_dim(f.scalar(1.0f32 / h as f32)?, &col, &[])?;
    let mean = f.mul(f.reduce_sum(x, &[1])?, inv_h)?;
    let xc = f.sub(x, f.broadcast_in_dim(mean, &full, &[0])?)?;
    let var = f.mul(f.reduce_sum(f.mul(xc, xc)?, &[1])?, inv_h)?;
    let eps = f.broadcast_in_dim(f.scalar(1e-5f32)?, &col, &[])?;
    let inv = f.rsqrt(f.add(var, eps)?)?;
    let y = f.mul(xc, f.broadcast_in_dim(inv, &full, &[0])?)?;
    let y = f.mul(y, f.broadcast_in_dim(gamma, &full, &[1])?)?;
    f.add(y, f.broadcast_in_dim(beta, &full, &[1])?)
}

fn gelu_erf_std(f: &Function, x: Value) -> R<Value> {
    let e = f.erf(f.mul(x, f.scalar(std::f32::consts::FRAC_1_SQRT_2)?)?)?;
    f.mul(f.mul(x, f.scalar(0.5f32)?)?, f.add(e, f.scalar(1f32)?)?)
}

fn gelu_tanh_std(f: &Function, x: Value) -> R<Value> {
    let x3 = f.mul(f.mul(x, x)?, x)?;
    let inner = f.add(x, f.mul(f.scalar(0.044_715f32)?, x3)?)?;
    let t = f.tanh(f.mul(f.scalar(0.797_884_6f32)?, inner)?)?;
    f.mul(f.mul(f.scalar(0.5f32)?, x)?, f.add(f.scalar(1f32)?, t)?)
}

/// Attention [B, H, S, D] from standard ops: DotGeneral, scale, softmax, DotGeneral.
fn attention_std(f: &Function, q: Value, k: Value, v: Value, dims: [i64; 4]) -> R<Value> {
    let [b, h, s, d] = dims;
    let cfg = DotConfig::default();
    let scores = f.dot_general(q, &[3], &[0, 1], k, &[3], &[0, 1], cfg)?; // [B, H, S, S]
    let scaled = f.mul(scores, f.scalar(1.0f32 / (d as f32).sqrt())?)?;
    let p = softmax_std(f, scaled, &[b, h, s, s])?;
    f.dot_general(p, &[3], &[0, 1], v, &[2], &[0, 1], cfg) // [B, H, S, D]
}

// ---- measurement ---------------------------------------------------------------------------------

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i + seed) * 7919 % 2001) as f32) / 1000.0 - 1.0).collect()
}

fn buf(dims: &[usize], seed: usize) -> Buffer {
    Buffer::from_slice(&data(dims.iter().product(), seed), dims).expect("buffer")
}

/// The peak bytes allocated above the starting level during one execution (after a warm-up).
fn peak_alloc(e: &JitExecutable, inputs: &[&Buffer]) -> usize {
    drop(e.execute(inputs, &[]).expect("execute"));
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    drop(e.execute(inputs, &[]).expect("execute"));
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

struct Row {
    name: String,
    fused_s: f64,
    std_s: f64,
    bytes: usize,
    /// Floating-point operations of the computation (0: not reported).
    flops: f64,
}

fn print_row(r: &Row) {
    let gbs = |s: f64| r.bytes as f64 / s / 1e9;
    let gflops = if r.flops > 0.0 {
        format!("  GFLOP/s fused {:.1}, std {:.1}", r.flops / r.fused_s / 1e9, r.flops / r.std_s / 1e9)
    } else {
        String::new()
    };
    println!(
        "{:<34} {:>9.3} {:>7.2} {:>9.3} {:>7.2} {:>7.2}x{gflops}",
        r.name,
        r.fused_s * 1e3,
        gbs(r.fused_s),
        r.std_s * 1e3,
        gbs(r.std_s),
        r.std_s / r.fused_s
    );
}

/// Compiles the fused and the decomposed attention graphs for `[B, 12, S, 64]`.
fn attention_pair(fb: &Arc<JitBackend>, sb: &Arc<JitBackend>, bn: i64, s: i64) -> (JitExecutable, JitExecutable) {
    let dims = [bn, 12, s, 64];
    let params = |f: &Function| -> R<(Value, Value, Value)> {
        Ok((f.parameter("q", f32s(&dims))?, f.parameter("k", f32s(&dims))?, f.parameter("v", f32s(&dims))?))
    };
    let fe = compile(fb, |f| {
        let (q, k, v) = params(f)?;
        Ok(vec![f.fused_scaled_dot_product_attention(q, k, v, AttentionLayout::Bhsd, &AttentionConfig::default())?.0])
    });
    let se = compile(sb, |f| {
        let (q, k, v) = params(f)?;
        Ok(vec![attention_std(f, q, k, v, dims)?])
    });
    (fe, se)
}

/// The child process: peak allocation of one attention execution at S = 512 (pool disabled).
fn memory(fb: &Arc<JitBackend>, sb: &Arc<JitBackend>) {
    for bn in [1i64, 8] {
        let s = 512i64;
        let ud = [bn as usize, 12, s as usize, 64];
        let (q, k, v) = (buf(&ud, 6), buf(&ud, 7), buf(&ud, 8));
        let (fe, se) = attention_pair(fb, sb, bn, s);
        let fm = peak_alloc(&fe, &[&q, &k, &v]);
        let sm = peak_alloc(&se, &[&q, &k, &v]);
        let out = ud.iter().product::<usize>() * 4;
        let s2 = (bn * 12 * s * s) as usize * 4;
        let mib = |b: usize| b as f64 / 1048576.0;
        println!(
            "attention B{bn} H12 S512 d64: peak alloc per run: fused {:.2} MiB (output {:.2} MiB + {:.1} KiB), \
             decomposed {:.2} MiB; one [B,H,S,S] f32 score matrix = {:.2} MiB",
            mib(fm),
            mib(out),
            fm.saturating_sub(out) as f64 / 1024.0,
            mib(sm),
            mib(s2)
        );
    }
}

fn main() {
    let full = std::env::var("FUSED_BENCH_FULL").is_ok_and(|v| v == "1");
    let threads = std::env::var("FUSED_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let b = JitBackend::new(&format!("parallelism={threads}")).expect("jit backend");
    let sb = JitBackend::new(&format!("parallelism={threads},fusion=off")).expect("jit backend");
    if std::env::args().any(|a| a == "--memory") {
        memory(&b, &sb);
        return;
    }
    let reps = if full { 15 } else { 7 };
    // `cargo bench --bench fused -- NAME` runs only the cases whose name contains NAME
    // (`softmax`, `layer`, `gelu`, `attention`); cargo itself passes `--bench`.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let want = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    println!(
        "fused vs decomposed on jit, {threads} thread(s), fused path {}, best of {reps} alternating rounds",
        tensorjit::kernels::fused::FusedIsa::selected().name()
    );
    println!("{:<34} {:>9} {:>7} {:>9} {:>7} {:>8}", "case", "fused ms", "GB/s", "std ms", "GB/s", "speedup");
    const R4: i64 = 4096;
    // Softmax [4096, 1536].
    if want("softmax [4096,1536]") {
        let dims = [R4, 1536];
        let x = buf(&[4096, 1536], 1);
        let fe = compile(&b, |f| Ok(vec![f.fused_softmax(f.parameter("x", f32s(&dims))?, 1)?]));
        let se = compile(&sb, |f| Ok(vec![softmax_std(f, f.parameter("x", f32s(&dims))?, &dims)?]));
        let (ft, st) = time_pair(&fe, &se, &[&x], reps);
        print_row(&Row {
            name: "softmax [4096,1536]".into(),
            fused_s: ft,
            std_s: st,
            bytes: 8 * 4096 * 1536,
            flops: 0.0,
        });
    }
    // LayerNorm [4096, 768] and [4096, 1536] with gamma and beta.
    for h in [768i64, 1536] {
        if !want(&format!("layer norm [4096,{h}]")) {
            continue;
        }
        let dims = [R4, h];
        let x = buf(&[4096, h as usize], 2);
        let g = buf(&[h as usize], 3);
        let bb = buf(&[h as usize], 4);
        let params = |f: &Function| -> R<(Value, Value, Value)> {
            Ok((f.parameter("x", f32s(&dims))?, f.parameter("g", f32s(&[h]))?, f.parameter("b", f32s(&[h]))?))
        };
        let fe = compile(&b, |f| {
            let (x, g, bb) = params(f)?;
            Ok(vec![f.fused_layer_norm(x, &[1], 1e-5, Some(g), Some(bb))?])
        });
        let se = compile(&sb, |f| {
            let (x, g, bb) = params(f)?;
            Ok(vec![layer_norm_std(f, x, g, bb, R4, h)?])
        });
        let (ft, st) = time_pair(&fe, &se, &[&x, &g, &bb], reps);
        let bytes = 8 * 4096 * h as usize;
        print_row(&Row { name: format!("layer norm [4096,{h}]"), fused_s: ft, std_s: st, bytes, flops: 0.0 });
    }
    // GELU [4096, 1536], erf and tanh.
    for exact in [true, false] {
        if !want(&format!("gelu {} [4096,1536]", if exact { "erf" } else { "tanh" })) {
            continue;
        }
        let dims = [R4, 1536];
        let x = buf(&[4096, 1536], 5);
        let fe = compile(&b, |f| Ok(vec![f.fused_gelu(f.parameter("x", f32s(&dims))?, exact)?]));
        let se = compile(&sb, |f| {
            let x = f.parameter("x", f32s(&dims))?;
            Ok(vec![if exact { gelu_erf_std(f, x)? } else { gelu_tanh_std(f, x)? }])
        });
        let (ft, st) = time_pair(&fe, &se, &[&x], reps);
        let name = format!("gelu {} [4096,1536]", if exact { "erf" } else { "tanh" });
        print_row(&Row { name, fused_s: ft, std_s: st, bytes: 8 * 4096 * 1536, flops: 0.0 });
    }
    // FusedDense x [512, 768] · w [768, 3072] + bias, with ReLU and with exact GELU (`dense+gelu`), against
    // DotGeneral + broadcast bias Add + the activation from standard ops.
    for (act, tag) in [(Activation::Relu, "relu"), (Activation::Gelu, "gelu")] {
        let name = format!("dense+{tag} 512x768x3072");
        if !want(&name) {
            continue;
        }
        let (m, k, n) = (512i64, 768i64, 3072i64);
        let x = buf(&[m as usize, k as usize], 6);
        let w = buf(&[k as usize, n as usize], 7);
        let bias = buf(&[n as usize], 8);
        let params = |f: &Function| -> R<(Value, Value, Value)> {
            Ok((f.parameter("x", f32s(&[m, k]))?, f.parameter("w", f32s(&[k, n]))?, f.parameter("b", f32s(&[n]))?))
        };
        let fe = compile(&b, |f| {
            let (x, w, bb) = params(f)?;
            Ok(vec![f.fused_dense(x, w, Some(bb), act, DenseLayout::InputOutputs)?])
        });
        let se = compile(&sb, |f| {
            let (x, w, bb) = params(f)?;
            let y = f.matmul(x, w)?;
            let y = f.add(y, f.broadcast_in_dim(bb, &f32s(&[m, n]), &[1])?)?;
            Ok(vec![match act {
                Activation::Relu => f.max(y, f.broadcast_in_dim(f.scalar(0f32)?, &f32s(&[m, n]), &[])?)?,
                _ => gelu_erf_std(f, y)?,
            }])
        });
        // The GEMM alone (the same DotGeneral, no bias, no activation), to show what the bias and
        // activation cost on top of it in each form.
        let ge = compile(&sb, |f| {
            let (x, w, _) = params(f)?;
            Ok(vec![f.matmul(x, w)?])
        });
        let (ft, st) = time_pair(&fe, &se, &[&x, &w, &bias], reps);
        let (gt, _) = time_pair(&ge, &fe, &[&x, &w, &bias], reps);
        let bytes = 4 * (m * k + k * n + n + m * n) as usize;
        let flops = 2.0 * (m * k * n) as f64;
        print_row(&Row { name, fused_s: ft, std_s: st, bytes, flops });
        println!(
            "{:<34} GEMM alone {:.3} ms: bias + {tag} add {:.3} ms fused, {:.3} ms decomposed",
            "",
            gt * 1e3,
            (ft - gt) * 1e3,
            (st - gt) * 1e3
        );
    }
    // Attention, BHSD, H 12, d 64.
    let batches: &[(i64, i64)] = if full {
        &[(1, 128), (2, 128), (4, 128), (8, 128), (1, 512), (2, 512), (4, 512), (8, 512)]
    } else {
        &[(1, 128), (8, 128), (1, 512), (8, 512)]
    };
    for &(bn, s) in batches {
        if !want(&format!("attention B{bn} H12 S{s} d64")) {
            continue;
        }
        let ud = [bn as usize, 12, s as usize, 64];
        let (q, k, v) = (buf(&ud, 6), buf(&ud, 7), buf(&ud, 8));
        let (fe, se) = attention_pair(&b, &sb, bn, s);
        let (ft, st) = time_pair(&fe, &se, &[&q, &k, &v], reps);
        let n = ud.iter().product::<usize>();
        let name = format!("attention B{bn} H12 S{s} d64");
        // Q·Kᵀ and P·V: 2 · (2·S·S·d) per (batch, head).
        let flops = 4.0 * (bn * 12) as f64 * (s * s) as f64 * 64.0;
        print_row(&Row { name, fused_s: ft, std_s: st, bytes: 4 * 4 * n, flops });
    }
    // Peak memory, in a child process without the buffer pool.
    if !want("attention") {
        return;
    }
    match std::env::current_exe() {
        Ok(exe) => {
            let out = std::process::Command::new(exe)
                .arg("--memory")
                .env("TENSORJIT_POOL_MB", "0")
                .env("FUSED_BENCH_THREADS", threads.to_string())
                .output();
            match out {
                Ok(o) => print!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
                Err(e) => println!("memory child failed: {e}"),
            }
        }
        Err(e) => println!("no memory measurement: {e}"),
    }
}
