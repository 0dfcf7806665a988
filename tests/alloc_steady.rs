//! Steady-state allocations of the "jit" executor (issue 24, low-overhead execution): a counting
//! global allocator wraps the system one, and after a few warm-up executions the number of heap
//! allocations per further execution is asserted. The counter is process-wide, so this file holds
//! a single test that runs its cases one after another, on one thread (`parallelism=1`: no pool).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tensorjit::backends::jit::JitBackend;
use tensorjit::{Backend, Buffer, DType, ExecOptions, Executable, Shape, Value};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations (alloc, alloc_zeroed, realloc) made while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.load(Ordering::SeqCst);
    f();
    ALLOCS.load(Ordering::SeqCst) - before
}

const ROWS: usize = 8;
const COLS: usize = 16;

/// A loop-only graph: `e = max(x·y + x, 0)` (elementwise, one fused loop), `s = Σ_cols e`
/// (a reduction), `r = reshape(e, [COLS·ROWS])` (an alias); returns `(r, s)`.
fn loops_graph(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    let builder = b.builder("loops");
    let f = builder.main();
    let x = f.parameter("x", Shape::new(DType::Float32, &[ROWS as i64, COLS as i64])).unwrap();
    let y = f.parameter("y", Shape::new(DType::Float32, &[ROWS as i64, COLS as i64])).unwrap();
    let p = f.mul(x, y).unwrap();
    let q = f.add(p, x).unwrap();
    let zero = f.scalar(0f32).unwrap();
    let e = f.max(q, zero).unwrap();
    let s = f.reduce_sum(e, &[1]).unwrap();
    let r = f.reshape(e, &[(ROWS * COLS) as i64]).unwrap();
    f.return_(&[r, s]).unwrap();
    builder.compile().unwrap()
}

fn inputs(seed: f32) -> (Buffer, Buffer, Vec<f32>, Vec<f32>) {
    let xs: Vec<f32> = (0..ROWS * COLS).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.125 + seed).collect();
    let ys: Vec<f32> = (0..ROWS * COLS).map(|i| ((i * 11 % 17) as f32 - 8.0) * 0.25).collect();
    let x = Buffer::from_slice(&xs, &[ROWS, COLS]).unwrap();
    let y = Buffer::from_slice(&ys, &[ROWS, COLS]).unwrap();
    (x, y, xs, ys)
}

/// The loop graph's results by hand: `(e flattened, row sums of e)`.
fn expected(xs: &[f32], ys: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let e: Vec<f32> = xs.iter().zip(ys).map(|(&x, &y)| (x * y + x).max(0.0)).collect();
    let s = e.chunks(COLS).map(|r| r.iter().map(|&v| v as f64).sum::<f64>() as f32).collect();
    (e, s)
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1e-5 * (1.0 + w.abs()))
}

/// Zero-filled buffers of the executable's result shapes.
fn out_buffers(exe: &dyn Executable) -> Vec<Buffer> {
    exe.output_shapes()
        .iter()
        .map(|s| Buffer::from_bytes(s.clone(), &vec![0u8; s.byte_size().unwrap()]).unwrap())
        .collect()
}

/// `h = x·w` (a GEMM over parameters), then `e = max(h + 1, 0)` and `s = Σ_cols e` (loops);
/// returns `(e, s)`. `dot_only`: just `x·w`.
fn dot_graph(b: &Arc<dyn Backend>, dot_only: bool) -> Arc<dyn Executable> {
    let builder = b.builder("dot");
    let f = builder.main();
    let x = f.parameter("x", Shape::new(DType::Float32, &[ROWS as i64, COLS as i64])).unwrap();
    let w = f.parameter("w", Shape::new(DType::Float32, &[COLS as i64, COLS as i64])).unwrap();
    let h = f.matmul(x, w).unwrap();
    let outs: Vec<Value> = if dot_only {
        vec![h]
    } else {
        let one = f.scalar(1f32).unwrap();
        let zero = f.scalar(0f32).unwrap();
        let e = f.max(f.add(h, one).unwrap(), zero).unwrap();
        let s = f.reduce_sum(e, &[1]).unwrap();
        vec![e, s]
    };
    f.return_(&outs).unwrap();
    builder.compile().unwrap()
}

/// Five stages of `x ← x − 0.01·broadcast(Σ_cols x)`: several loop steps (a reduction cannot
/// feed a broadcast in the same loop), one f32[ROWS, COLS] result. `stages = 0`: `−x`.
fn chain_graph(b: &Arc<dyn Backend>, stages: usize) -> Arc<dyn Executable> {
    let builder = b.builder("chain");
    let f = builder.main();
    let shape = Shape::new(DType::Float32, &[ROWS as i64, COLS as i64]);
    let mut x = f.parameter("x", shape.clone()).unwrap();
    if stages == 0 {
        x = f.neg(x).unwrap();
    }
    for _ in 0..stages {
        let s = f.reduce_sum(x, &[1]).unwrap();
        let b = f.broadcast_in_dim(s, &shape, &[0]).unwrap();
        let k = f.scalar(0.01f32).unwrap();
        x = f.sub(x, f.mul(b, k).unwrap()).unwrap();
    }
    f.return_(&[x]).unwrap();
    builder.compile().unwrap()
}

/// The chain's result by hand.
fn chain_expected(xs: &[f32], stages: usize) -> Vec<f32> {
    let mut x = xs.to_vec();
    for _ in 0..stages {
        let sums: Vec<f32> = x.chunks(COLS).map(|r| r.iter().sum()).collect();
        for (i, v) in x.iter_mut().enumerate() {
            *v -= sums[i / COLS] * 0.01;
        }
    }
    x
}

#[test]
fn steady_state_allocations() {
    let b: Arc<dyn Backend> = JitBackend::new("parallelism=1").unwrap();
    let opts = ExecOptions::default();

    // 1. Loop steps only: execute_into allocates nothing once warm.
    let exe = loops_graph(&b);
    let outs = out_buffers(&*exe);
    let handles: Vec<&Buffer> = outs.iter().collect();
    let (x, y, _, _) = inputs(0.0);
    for _ in 0..3 {
        exe.execute_into(&[&x, &y], &[], &handles, &opts).unwrap();
    }
    for round in 1..=4 {
        let (x, y, xs, ys) = inputs(round as f32 * 0.5);
        let n = allocations(|| exe.execute_into(&[&x, &y], &[], &handles, &opts).unwrap());
        assert_eq!(n, 0, "execute_into of the loop graph, round {round}: {n} allocations");
        let (e, s) = expected(&xs, &ys);
        assert!(close(&outs[0].to_vec::<f32>().unwrap(), &e) && close(&outs[1].to_vec::<f32>().unwrap(), &s));
    }

    // The same graph through execute (new result buffers), for the record.
    for _ in 0..3 {
        exe.execute(&[&x, &y], &[]).unwrap();
    }
    let mut r = Vec::new();
    let n_loops_execute = allocations(|| r = exe.execute(&[&x, &y], &[]).unwrap());
    drop(r);

    // 2. Many loop steps: still none.
    let chain = chain_graph(&b, 5);
    let out = out_buffers(&*chain);
    let (x, _, xs, _) = inputs(0.25);
    for _ in 0..3 {
        chain.execute_into(&[&x], &[], &[&out[0]], &opts).unwrap();
    }
    let n = allocations(|| chain.execute_into(&[&x], &[], &[&out[0]], &opts).unwrap());
    assert_eq!(n, 0, "execute_into of the 5-stage chain: {n} allocations");
    assert!(close(&out[0].to_vec::<f32>().unwrap(), &chain_expected(&xs, 5)));

    // 3. execute (new result buffers): what it allocates depends on the results, not on the
    //    number of steps: the 5-stage chain allocates as much as a single negation.
    let single = chain_graph(&b, 0);
    let mut n_exec = [0u64; 2];
    for (k, exe) in [&single, &chain].into_iter().enumerate() {
        for _ in 0..3 {
            exe.execute(&[&x], &[]).unwrap();
        }
        let mut r = Vec::new();
        n_exec[k] = allocations(|| r = exe.execute(&[&x], &[]).unwrap());
        let want = if k == 0 { xs.iter().map(|v| -v).collect() } else { chain_expected(&xs, 5) };
        assert!(close(&r[0].to_vec::<f32>().unwrap(), &want));
    }
    assert_eq!(n_exec[0], n_exec[1], "execute: 1 step vs 5 stages");

    // 4. With a GEMM (fusion off, so that the product stays the same DotGeneral kernel in both
    //    graphs): the loops around it add no allocation to the GEMM kernel's own.
    let nofuse: Arc<dyn Backend> = JitBackend::new("parallelism=1,fusion=off").unwrap();
    let mut counts = [0u64; 2];
    for (k, dot_only) in [true, false].into_iter().enumerate() {
        let exe = dot_graph(&nofuse, dot_only);
        let outs = out_buffers(&*exe);
        let handles: Vec<&Buffer> = outs.iter().collect();
        let ws: Vec<f32> = (0..COLS * COLS).map(|i| ((i % 7) as f32 - 3.0) * 0.1).collect();
        let w = Buffer::from_slice(&ws, &[COLS, COLS]).unwrap();
        let (x, _, xs, _) = inputs(0.75);
        for _ in 0..3 {
            exe.execute_into(&[&x, &w], &[], &handles, &opts).unwrap();
        }
        counts[k] = allocations(|| exe.execute_into(&[&x, &w], &[], &handles, &opts).unwrap());
        let mut h = vec![0f32; ROWS * COLS];
        for i in 0..ROWS {
            for j in 0..COLS {
                h[i * COLS + j] = (0..COLS).map(|t| xs[i * COLS + t] * ws[t * COLS + j]).sum();
            }
        }
        let want = if dot_only { h } else { h.iter().map(|v| (v + 1.0).max(0.0)).collect() };
        assert!(close(&outs[0].to_vec::<f32>().unwrap(), &want));
    }
    assert_eq!(counts[1], counts[0], "GEMM + loops vs the GEMM alone");
    eprintln!(
        "allocations per execution: execute_into 0 (loops); execute {n_loops_execute} (loop graph, 2 results), \
         {} (one f32[{ROWS},{COLS}] result); GEMM kernel {}",
        n_exec[0], counts[0]
    );
}
