//! Attention at BERT serving shapes (issue 24): the exporters' form — `[B, S, H·D]` projections
//! reshaped to `[B, S, H, D]` and transposed per head, `Q·Kᵀ` by a batched DotGeneral, the
//! scale, an additive padding mask `Where(all-true ∧ mask, 0, f32::MIN)` widened to
//! `[B, 1, S, S]`, FusedSoftmax, `P·V`, the transpose back and the reshape to `[B, S, H·D]` —
//! compiled on "jit" twice: with fusion (the egg pass turns it into one BSHD
//! FusedScaledDotProductAttention with a `[B, 1, 1, S]` mask; checked in the plan) and with
//! `fusion=off` (two batched GEMMs, the softmax kernel, the mask built and added, the
//! transposes: the path the fused op replaces), at `[B, H, S, D]` = `[8,12,128,32]`,
//! `[1,12,384,64]`, `[8,12,32,32]` and `[2,12,512,64]`. Prints the best-of-N time of each and the
//! ratio.
//!
//! `cargo bench --bench attention_serving` (1 thread; pin it with `taskset -c 0`);
//! `ATTN_BENCH_THREADS=N` sets the jit parallelism; `ATTN_BENCH_REPS=N` the rounds (default 20).

use std::sync::Arc;

use tensorjit::api::DotConfig;
use tensorjit::backends::jit::{JitBackend, JitExecutable};
use tensorjit::{Backend, Buffer, DType, Executable, Function, Shape, Value};

#[path = "support/timing.rs"]
mod timing;
use timing::time_pair;

type R<T> = tensorjit::Result<T>;

/// The exporters' attention over `[B, S, H·D]` projections with a Bool `[B, 1, 1, S]` mask.
fn bert_attention(f: &Function, dims: [i64; 4]) -> R<Vec<Value>> {
    let [b, h, s, d] = dims;
    let x = Shape::new(DType::Float32, &[b, s, h * d]);
    let (xq, xk, xv) = (f.parameter("q", x.clone())?, f.parameter("k", x.clone())?, f.parameter("v", x)?);
    let mask = f.parameter("mask", Shape::new(DType::Bool, &[b, 1, 1, s]))?;
    let heads = |t: Value, perm: &[usize]| -> R<Value> { f.transpose(f.reshape(t, &[b, s, h, d])?, perm) };
    let (q, k, v) = (heads(xq, &[0, 2, 1, 3])?, heads(xk, &[0, 2, 3, 1])?, heads(xv, &[0, 2, 1, 3])?);
    let cfg = DotConfig::default();
    let scores = f.dot_general(q, &[3], &[0, 1], k, &[2], &[0, 1], cfg)?;
    let scaled = f.mul(scores, f.scalar(1.0f32 / (d as f32).sqrt())?)?;
    let all = f.constant(&vec![true; s as usize], &[1, 1, s as usize, 1])?;
    let wide = f.logical_and(all, mask)?;
    let add = f.where_(wide, f.scalar(0.0f32)?, f.scalar(f32::MIN)?)?;
    let p = f.fused_softmax(f.add(scaled, add)?, 3)?;
    let o = f.dot_general(p, &[3], &[0, 1], v, &[2], &[0, 1], cfg)?;
    Ok(vec![f.reshape(f.transpose(o, &[0, 2, 1, 3])?, &[b, s, h * d])?])
}

/// Compiles the graph on `backend`; returns the executable and its plan text.
fn compile(backend: &Arc<JitBackend>, dims: [i64; 4]) -> JitExecutable {
    let dynb: Arc<dyn Backend> = backend.clone();
    let builder = dynb.builder("attention");
    let main = builder.main();
    let outs = bert_attention(&main, dims).expect("build");
    main.return_(&outs).expect("return");
    backend.compile_jit(builder.module()).expect("compile")
}

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i + seed) * 7919 % 2001) as f32) / 1000.0 - 1.0).collect()
}

fn main() {
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (threads, reps) = (env("ATTN_BENCH_THREADS", 1), env("ATTN_BENCH_REPS", 20));
    let dir = std::env::temp_dir().join(format!("tensorjit-attn-bench-{}", std::process::id()));
    let fb = JitBackend::new(&format!("parallelism={threads},dump={}", dir.display())).expect("jit");
    let ub = JitBackend::new(&format!("parallelism={threads},fusion=off")).expect("jit");
    println!("threads {threads}, best of {reps}");
    println!("{:<28} {:>10} {:>10} {:>8}", "case [B,H,S,D]", "fused ms", "unfused ms", "speedup");
    for dims in [[8i64, 12, 128, 32], [1, 12, 384, 64], [8, 12, 32, 32], [2, 12, 512, 64]] {
        let [b, h, s, d] = dims.map(|x| x as usize);
        let fe = compile(&fb, dims);
        let ue = compile(&ub, dims);
        let n = b * s * h * d;
        let (q, k, v) = (
            Buffer::from_slice(&data(n, 1), &[b, s, h * d]).expect("q"),
            Buffer::from_slice(&data(n, 2), &[b, s, h * d]).expect("k"),
            Buffer::from_slice(&data(n, 3), &[b, s, h * d]).expect("v"),
        );
        // Trailing padding: batch i keeps s − 3·i keys (at least 1).
        let keep: Vec<bool> = (0..b * s).map(|e| e % s < s.saturating_sub(3 * (e / s)).max(1)).collect();
        let mask = Buffer::from_slice(&keep, &[b, 1, 1, s]).expect("mask");
        let inputs = [&q, &k, &v, &mask];
        // Both compute the same thing.
        let (a, c) = (fe.execute(&inputs, &[]).expect("fused"), ue.execute(&inputs, &[]).expect("unfused"));
        let (a, c) = (a[0].to_vec::<f32>().expect("f32"), c[0].to_vec::<f32>().expect("f32"));
        let err = a.iter().zip(&c).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        let (tf, tu) = time_pair(&fe, &ue, &inputs, reps);
        println!(
            "{:<28} {:>10.3} {:>10.3} {:>7.2}x  (max |fused − unfused| {err:.1e})",
            format!("{dims:?}"),
            tf * 1e3,
            tu * 1e3,
            tu / tf
        );
    }
    // Plans of the fused executables (the unfused backend dumps nothing) using the kernel.
    let fused = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let p = if e.path().is_dir() { e.path().join("plan.txt") } else { e.path() };
            std::fs::read_to_string(p).is_ok_and(|t| t.contains("fused flash attention"))
        })
        .count();
    let _ = std::fs::remove_dir_all(&dir);
    println!("fused plans use the flash attention kernel: {fused} of 4");
}
