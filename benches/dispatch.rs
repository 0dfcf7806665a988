//! Per-execution dispatch cost (issue 24, low-overhead execution): a 1-op graph (an f32 add over
//! [4], [1024] and [1, 384]) compiled once, then `execute` (new result buffers per call) and
//! `execute_into` (results written into buffers the caller keeps) timed per call, in ns per
//! execution: on "jit" with one thread (`parallelism=1`) and on the shared pool (the loops are
//! below the parallel threshold, so both run on the calling thread; the second shows what the
//! pool costs a tiny call), and on "interp" for comparison. The goal is at most 1 µs per
//! execution on "jit".
//!
//! `cargo bench --bench dispatch` (quick look: `cargo bench --bench dispatch -- --warm-up-time 1
//! --measurement-time 2`).

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tensorjit::{Backend, Buffer, DType, ExecOptions, Executable, Shape};

fn add_exe(config: &str, dims: &[i64]) -> Arc<dyn Executable> {
    let b: Arc<dyn Backend> = tensorjit::new_with_config(config).expect("backend");
    let builder = b.builder("dispatch");
    let main = builder.main();
    let x = main.parameter("x", Shape::new(DType::Float32, dims)).expect("x");
    let y = main.parameter("y", Shape::new(DType::Float32, dims)).expect("y");
    let z = main.add(x, y).expect("add");
    main.return_(&[z]).expect("return");
    builder.compile().expect("compile")
}

fn buf(dims: &[usize], scale: f32) -> Buffer {
    let n: usize = dims.iter().product();
    let data: Vec<f32> = (0..n).map(|i| i as f32 * scale).collect();
    Buffer::from_slice(&data, dims).expect("buffer")
}

fn dispatch(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch_add_f32");
    for dims in [&[4usize][..], &[1024], &[1, 384]] {
        let idims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let (x, y) = (buf(dims, 0.5), buf(dims, 0.25));
        let label = format!("{dims:?}");
        for (config, name) in [("jit:parallelism=1", "jit 1 thread"), ("jit", "jit shared pool"), ("interp", "interp")]
        {
            let e = add_exe(config, &idims);
            g.bench_with_input(BenchmarkId::new(format!("execute, {name}"), &label), &(), |b, _| {
                b.iter(|| e.execute(&[&x, &y], &[]).expect("execute"))
            });
            let out = buf(dims, 0.0);
            let opts = ExecOptions::default();
            g.bench_with_input(BenchmarkId::new(format!("execute_into, {name}"), &label), &(), |b, _| {
                b.iter(|| e.execute_into(&[&x, &y], &[], &[&out], &opts).expect("execute_into"))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
