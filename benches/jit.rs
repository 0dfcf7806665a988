//! Criterion benchmarks of the "jit" backend (issue 4 §7), each beside a baseline measured in
//! the same run:
//! (a) compile time of a 1,000-node elementwise graph and of one BERT encoder layer (hidden 384,
//!     12 heads, sequence 128) built from standard ops, cold (Cranelift cache cleared) and warm;
//! (b) execute latency of a 4-element f32 add (interp beside it);
//! (c) a fused chain of 8 elementwise ops over 16M f32 in bytes/s, beside a plain copy and a
//!     triad `a = b + s·c` (plain Rust loops over preallocated memory from the same allocator as
//!     the jit's tensors), on 1 and 2 threads;
//! (d) exact GELU (erf) and softmax over [4096, 1536] f32, from standard ops (which the egg pass
//!     rewrites into the fused ops) and as the fused ops.
//!
//! `cargo bench --bench jit` (filter: `cargo bench --bench jit -- fused_chain`).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tensorjit::backends::jit::{JitBackend, JitExecutable};
use tensorjit::ir::module::Module;
use tensorjit::memory::AlignedBytes;
use tensorjit::{Backend, Buffer, DType, Executable, Function, Shape, Value};

type R<T> = tensorjit::Result<T>;

fn jit(config: &str) -> Arc<JitBackend> {
    JitBackend::new(config).expect("jit backend")
}

/// Builds a module with `f` on a jit backend's builder.
fn module(f: impl FnOnce(&Function) -> R<Vec<Value>>) -> Module {
    let b: Arc<dyn Backend> = jit("parallelism=1");
    let builder = b.builder("bench");
    let main = builder.main();
    let outs = f(&main).expect("build");
    main.return_(&outs).expect("return");
    builder.module()
}

fn param(f: &Function, name: &str, dims: &[i64]) -> R<Value> {
    f.parameter(name, Shape::new(DType::Float32, dims))
}

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 % 2001) as f32) / 1000.0 - 1.0).collect()
}

fn buf(dims: &[usize]) -> Buffer {
    Buffer::from_slice(&data(dims.iter().product()), dims).expect("buffer")
}

// ---- (a) compile time --------------------------------------------------------------------

/// 1,000 elementwise nodes over f32[1024] (adds, muls, subs, maxes with scalar constants).
fn elementwise_1000() -> Module {
    module(|f| {
        let mut x = param(f, "x", &[1024])?;
        let y = param(f, "y", &[1024])?;
        let mut nodes = 0;
        let mut i = 0;
        while nodes < 1000 {
            let c = f.scalar(1.0f32 + i as f32 * 1e-3)?;
            nodes += 1; // the constant
            x = match i % 4 {
                0 => f.add(x, y)?,
                1 => f.mul(x, c)?,
                2 => f.sub(x, c)?,
                _ => f.max(x, y)?,
            };
            nodes += 1;
            i += 1;
        }
        Ok(vec![x])
    })
}

/// `x·W + b` for x [s, k], W [k, n], b [n].
fn dense(f: &Function, x: Value, w: Value, b: Value, s: i64, n: i64) -> R<Value> {
    let y = f.matmul(x, w)?;
    let bb = f.broadcast_in_dim(b, &Shape::new(DType::Float32, &[s, n]), &[1])?;
    f.add(y, bb)
}

/// Layer norm over the last axis of x [s, h] from standard ops.
fn layer_norm(f: &Function, x: Value, gamma: Value, beta: Value, s: i64, h: i64) -> R<Value> {
    let full = Shape::new(DType::Float32, &[s, h]);
    let inv_h = f.scalar(1.0f32 / h as f32)?;
    let mean = f.mul(f.reduce_sum(x, &[1])?, f.broadcast_in_dim(inv_h, &Shape::new(DType::Float32, &[s]), &[])?)?;
    let xc = f.sub(x, f.broadcast_in_dim(mean, &full, &[0])?)?;
    let var = f.reduce_sum(f.mul(xc, xc)?, &[1])?;
    let var = f.mul(var, f.broadcast_in_dim(inv_h, &Shape::new(DType::Float32, &[s]), &[])?)?;
    let eps = f.broadcast_in_dim(f.scalar(1e-5f32)?, &Shape::new(DType::Float32, &[s]), &[])?;
    let inv = f.rsqrt(f.add(var, eps)?)?;
    let y = f.mul(xc, f.broadcast_in_dim(inv, &full, &[0])?)?;
    let y = f.mul(y, f.broadcast_in_dim(gamma, &full, &[1])?)?;
    f.add(y, f.broadcast_in_dim(beta, &full, &[1])?)
}

/// Softmax over the last axis of x (rank r) from standard ops.
fn softmax(f: &Function, x: Value, dims: &[i64]) -> R<Value> {
    let r = dims.len();
    let full = Shape::new(DType::Float32, dims);
    let keep: Vec<usize> = (0..r - 1).collect();
    let m = f.broadcast_in_dim(f.reduce_max(x, &[r - 1])?, &full, &keep)?;
    let e = f.exp(f.sub(x, m)?)?;
    let s = f.broadcast_in_dim(f.reduce_sum(e, &[r - 1])?, &full, &keep)?;
    f.div(e, s)
}

/// tanh-approximated GELU from standard ops.
fn gelu_tanh(f: &Function, x: Value) -> R<Value> {
    let c = f.scalar(0.044_715f32)?;
    let k = f.scalar(0.797_884_6f32)?;
    let half = f.scalar(0.5f32)?;
    let one = f.scalar(1.0f32)?;
    let x3 = f.mul(f.mul(x, x)?, x)?;
    let t = f.tanh(f.mul(k, f.add(x, f.mul(c, x3)?)?)?)?;
    f.mul(f.mul(half, x)?, f.add(one, t)?)
}

/// One BERT encoder layer: hidden 384, 12 heads of 32, sequence 128, FFN 1536.
fn bert_layer() -> Module {
    const S: i64 = 128;
    const H: i64 = 384;
    const NH: i64 = 12;
    const HD: i64 = 32;
    const FF: i64 = 1536;
    module(|f| {
        let x = param(f, "x", &[S, H])?;
        let mut w = vec![];
        for name in ["wq", "wk", "wv", "wo"] {
            w.push((param(f, name, &[H, H])?, param(f, &format!("b{name}"), &[H])?));
        }
        let heads = |v: Value| -> R<Value> { f.transpose(f.reshape(v, &[S, NH, HD])?, &[1, 0, 2]) };
        let q = heads(dense(f, x, w[0].0, w[0].1, S, H)?)?;
        let k = heads(dense(f, x, w[1].0, w[1].1, S, H)?)?;
        let v = heads(dense(f, x, w[2].0, w[2].1, S, H)?)?;
        let cfg = tensorjit::api::DotConfig::default();
        let scores = f.dot_general(q, &[2], &[0], k, &[2], &[0], cfg)?; // [NH, S, S]
        let scale = f.scalar(1.0f32 / (HD as f32).sqrt())?;
        let p = softmax(f, f.mul(scores, scale)?, &[NH, S, S])?;
        let ctx = f.dot_general(p, &[2], &[0], v, &[1], &[0], cfg)?; // [NH, S, HD]
        let ctx = f.reshape(f.transpose(ctx, &[1, 0, 2])?, &[S, H])?;
        let attn = dense(f, ctx, w[3].0, w[3].1, S, H)?;
        let (g1, b1) = (param(f, "ln1_g", &[H])?, param(f, "ln1_b", &[H])?);
        let x1 = layer_norm(f, f.add(x, attn)?, g1, b1, S, H)?;
        let (wi, bi) = (param(f, "w_in", &[H, FF])?, param(f, "b_in", &[FF])?);
        let (wo, bo) = (param(f, "w_out", &[FF, H])?, param(f, "b_out", &[H])?);
        let h = gelu_tanh(f, dense(f, x1, wi, bi, S, FF)?)?;
        let y = dense(f, h, wo, bo, S, H)?;
        let (g2, b2) = (param(f, "ln2_g", &[H])?, param(f, "ln2_b", &[H])?);
        Ok(vec![layer_norm(f, f.add(x1, y)?, g2, b2, S, H)?])
    })
}

fn compile_time(c: &mut Criterion) {
    let b = jit("parallelism=1");
    let mut g = c.benchmark_group("compile");
    g.sample_size(20);
    for (name, m) in [("elementwise_1000", elementwise_1000()), ("bert_layer", bert_layer())] {
        let e = b.compile_jit(m.clone()).expect("compile");
        eprintln!("{name}: {} nodes in the body, {} loop kernels", m.func(m.main).body.len(), e.num_loop_steps());
        g.bench_function(BenchmarkId::new(name, "cold"), |bch| {
            bch.iter_batched(
                || {
                    tensorjit::codegen::clear_cache();
                    m.clone()
                },
                |m| b.compile_jit(m).expect("compile"),
                BatchSize::PerIteration,
            )
        });
        g.bench_function(BenchmarkId::new(name, "warm_kernel_cache"), |bch| {
            bch.iter_batched(|| m.clone(), |m| b.compile_jit(m).expect("compile"), BatchSize::PerIteration)
        });
        g.bench_function(BenchmarkId::new(name, "baseline_module_clone"), |bch| bch.iter(|| black_box(m.clone())));
    }
    g.finish();
}

// ---- (b) tiny execute ----------------------------------------------------------------------

fn tiny_execute(c: &mut Criterion) {
    let m = module(|f| Ok(vec![f.add(param(f, "x", &[4])?, param(f, "y", &[4])?)?]));
    let x = Buffer::from_slice(&[1f32, 2., 3., 4.], &[4]).expect("x");
    let y = Buffer::from_slice(&[5f32, 6., 7., 8.], &[4]).expect("y");
    let mut g = c.benchmark_group("execute_add_4xf32");
    let e = jit("").compile_jit(m.clone()).expect("compile");
    g.bench_function("jit", |bch| bch.iter(|| e.execute(&[&x, &y], &[]).expect("execute")));
    let interp = tensorjit::new_with_config("interp").expect("interp");
    let ei = interp.compile(m).expect("compile");
    g.bench_function("interp", |bch| bch.iter(|| ei.execute(&[&x, &y], &[]).expect("execute")));
    g.finish();
}

// ---- (c) bandwidth: fused chain vs copy and triad ---------------------------------------------

const N16M: usize = 16 << 20;

/// 8 elementwise ops with scalar constants: ((((x·1.5 + 0.25) max 0) · 0.75 − 0.125) / 1.25 +
/// 2) min 3, then negated.
fn chain8() -> Module {
    module(|f| {
        let mut x = param(f, "x", &[N16M as i64])?;
        let c = |v: f32| f.scalar(v);
        x = f.mul(x, c(1.5)?)?;
        x = f.add(x, c(0.25)?)?;
        x = f.max(x, c(0.0)?)?;
        x = f.mul(x, c(0.75)?)?;
        x = f.sub(x, c(0.125)?)?;
        x = f.div(x, c(1.25)?)?;
        x = f.add(x, c(2.0)?)?;
        x = f.min(x, c(3.0)?)?;
        Ok(vec![f.neg(x)?])
    })
}

/// Runs `body(start, end)` over `0..n` split into `threads` contiguous parts.
fn split(n: usize, threads: usize, body: impl Fn(usize, usize) + Sync) {
    if threads == 1 {
        return body(0, n);
    }
    let chunk = n.div_ceil(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let body = &body;
            s.spawn(move || body(t * chunk, ((t + 1) * chunk).min(n)));
        }
    });
}

#[derive(Clone, Copy)]
struct Ptr(*mut f32);
// SAFETY: the benchmark threads write disjoint ranges of a buffer that outlives them.
unsafe impl Sync for Ptr {}
// SAFETY: as above.
unsafe impl Send for Ptr {}

impl Ptr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

fn bandwidth(c: &mut Criterion) {
    // The baselines' arrays come from the same allocator as the jit's tensors (64-byte aligned,
    // advised to use transparent huge pages), so the ratios compare loops, not page sizes.
    let src_b = AlignedBytes::from_slice(&data(N16M));
    let src2_b = AlignedBytes::from_slice(&data(N16M));
    let mut dst_b = AlignedBytes::zeroed(4 * N16M);
    let (src, src2) = (src_b.typed::<f32>(), src2_b.typed::<f32>());
    let dst = dst_b.typed_mut::<f32>();
    let m = chain8();
    let mut g = c.benchmark_group("bandwidth_16M_f32");
    g.sample_size(10);
    for threads in [1usize, 2] {
        let tag = format!("t{threads}");
        g.throughput(Throughput::Bytes((2 * 4 * N16M) as u64));
        let out = Ptr(dst.as_mut_ptr());
        g.bench_function(BenchmarkId::new("copy", &tag), |bch| {
            bch.iter(|| {
                split(N16M, threads, |a, b| {
                    // SAFETY: [a, b) is within dst, and the parts are disjoint.
                    let d = unsafe { std::slice::from_raw_parts_mut(out.get().add(a), b - a) };
                    d.copy_from_slice(&src[a..b]);
                })
            })
        });
        g.throughput(Throughput::Bytes((3 * 4 * N16M) as u64));
        g.bench_function(BenchmarkId::new("triad", &tag), |bch| {
            bch.iter(|| {
                let s = black_box(1.5f32);
                split(N16M, threads, |a, b| {
                    // SAFETY: as for copy.
                    let d = unsafe { std::slice::from_raw_parts_mut(out.get().add(a), b - a) };
                    for ((d, &x), &y) in d.iter_mut().zip(&src[a..b]).zip(&src2[a..b]) {
                        *d = x + s * y;
                    }
                })
            })
        });
        g.throughput(Throughput::Bytes((2 * 4 * N16M) as u64));
        let e: JitExecutable = jit(&format!("parallelism={threads}")).compile_jit(m.clone()).expect("compile");
        assert_eq!(e.num_loop_steps(), 1, "the chain fuses into one loop");
        let x = Buffer::from_slice(src, &[N16M]).expect("x");
        g.bench_function(BenchmarkId::new("jit_chain8_new_output", &tag), |bch| {
            bch.iter(|| e.execute(&[&x], &[]).expect("execute"))
        });
        g.bench_function(BenchmarkId::new("jit_chain8_donated_in_place", &tag), |bch| {
            bch.iter_batched(
                || Buffer::from_slice(src, &[N16M]).expect("x"),
                |x| e.execute(&[&x], &[true]).expect("execute"),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

// ---- (d) GELU and softmax --------------------------------------------------------------------

fn gelu_softmax(c: &mut Criterion) {
    const R: i64 = 4096;
    const C: i64 = 1536;
    let bytes = (2 * 4 * R * C) as u64;
    let gelu_erf = module(|f| {
        let x = param(f, "x", &[R, C])?;
        let e = f.erf(f.mul(x, f.scalar(std::f32::consts::FRAC_1_SQRT_2)?)?)?;
        Ok(vec![f.mul(f.mul(x, f.scalar(0.5f32)?)?, f.add(e, f.scalar(1f32)?)?)?])
    });
    let gelu_fused = module(|f| Ok(vec![f.fused_gelu(param(f, "x", &[R, C])?, true)?]));
    let soft = module(|f| {
        let x = param(f, "x", &[R, C])?;
        Ok(vec![softmax(f, x, &[R, C])?])
    });
    let soft_fused = module(|f| Ok(vec![f.fused_softmax(param(f, "x", &[R, C])?, 1)?]));
    let x = buf(&[R as usize, C as usize]);
    let mut g = c.benchmark_group("rows4096x1536_f32");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    for threads in [1usize, 2] {
        let b = jit(&format!("parallelism={threads}"));
        for (name, m) in [
            ("gelu_erf_standard_ops", &gelu_erf),
            ("gelu_erf_fused_op", &gelu_fused),
            ("softmax_standard_ops", &soft),
            ("softmax_fused_op", &soft_fused),
        ] {
            let e = b.compile_jit(m.clone()).expect("compile");
            g.bench_function(BenchmarkId::new(name, format!("t{threads}")), |bch| {
                bch.iter(|| e.execute(&[&x], &[]).expect("execute"))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, compile_time, tiny_execute, bandwidth, gelu_softmax);
criterion_main!(benches);
