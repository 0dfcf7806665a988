//! Steady-state allocations of the "jit" executor (issue 24, low-overhead execution): a counting
//! global allocator wraps the system one, and after a few warm-up executions the number of heap
//! allocations per further execution is asserted. The counter is process-wide, so this file holds
//! a single test that runs its cases one after another, on one thread (`parallelism=1`: no pool).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use tensorjit::backends::jit::{JitBackend, wait_for_constant_hashing};
use tensorjit::ir::op::{Activation, DenseLayout};
use tensorjit::{Backend, Buffer, DType, ExecOptions, Executable, Shape, Value};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed.
static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
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

    // 4. With a GEMM (fusion off, so that the product stays a DotGeneral kernel): it writes
    //    into its memory slot, alone or with loops around it: no allocation either.
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
    // The GEMM kernel's own scratch (its packing buffers, `kernels::gemm`) is all that is left:
    // the step writes into its memory slot and adds nothing.
    let own = gemm_allocations(ROWS, COLS, COLS, false, false);
    assert_eq!(counts, [own, own], "execute_into with a GEMM (alone, then with loops around it)");

    // 5. A small MLP with constant weights: FusedDense (weights packed at compile time, bias and
    //    GELU in the epilogue) then a plain product and a loop, on the default fusion.
    let mlp = mlp_graph(&b);
    let outs = out_buffers(&*mlp);
    let handles: Vec<&Buffer> = outs.iter().collect();
    let (x, _, xs, _) = inputs(-0.5);
    for _ in 0..3 {
        mlp.execute_into(&[&x], &[], &handles, &opts).unwrap();
    }
    let n = allocations(|| mlp.execute_into(&[&x], &[], &handles, &opts).unwrap());
    let own = gemm_allocations(ROWS, COLS, HIDDEN, true, true) + gemm_allocations(ROWS, HIDDEN, COLS, true, false);
    assert_eq!(n, own, "execute_into of the MLP: {n} allocations, {own} in the GEMM kernel itself");
    assert!(close(&outs[0].to_vec::<f32>().unwrap(), &mlp_expected(&xs)));
    constant_memory_is_what_compile_keeps();
    eprintln!(
        "allocations per execution: execute_into 0 (loops), {} (GEMM, all in the GEMM kernel), {n} (MLP, all in \
         the GEMM kernel); execute {n_loops_execute} (loop graph, 2 results), {} (one f32[{ROWS},{COLS}] result)",
        counts[0], n_exec[0]
    );
}

const HIDDEN: usize = 24;

/// The MLP's weights: `w1` [COLS, HIDDEN], `b1` [HIDDEN], `w2` [HIDDEN, COLS].
fn mlp_weights() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let w1 = (0..COLS * HIDDEN).map(|i| ((i * 13 % 19) as f32 - 9.0) * 0.05).collect();
    let b1 = (0..HIDDEN).map(|i| (i as f32 - 12.0) * 0.02).collect();
    let w2 = (0..HIDDEN * COLS).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.04).collect();
    (w1, b1, w2)
}

/// `relu(relu(x·w1 + b1)·w2 + 1)`: a FusedDense with bias and activation, a DotGeneral with a
/// constant rhs, an elementwise loop.
fn mlp_graph(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    let builder = b.builder("mlp");
    let f = builder.main();
    let (w1, b1, w2) = mlp_weights();
    let x = f.parameter("x", Shape::new(DType::Float32, &[ROWS as i64, COLS as i64])).unwrap();
    let w1 = f.constant(&w1, &[COLS, HIDDEN]).unwrap();
    let b1 = f.constant(&b1, &[HIDDEN]).unwrap();
    let w2 = f.constant(&w2, &[HIDDEN, COLS]).unwrap();
    let h = f.fused_dense(x, w1, Some(b1), Activation::Relu, DenseLayout::InputOutputs).unwrap();
    let y = f.matmul(h, w2).unwrap();
    let one = f.scalar(1f32).unwrap();
    let zero = f.scalar(0f32).unwrap();
    let r = f.max(f.add(y, one).unwrap(), zero).unwrap();
    f.return_(&[r]).unwrap();
    builder.compile().unwrap()
}

/// The MLP by naive loops.
fn mlp_expected(xs: &[f32]) -> Vec<f32> {
    let (w1, b1, w2) = mlp_weights();
    let mut h = vec![0f32; ROWS * HIDDEN];
    for i in 0..ROWS {
        for j in 0..HIDDEN {
            let dot: f32 = (0..COLS).map(|t| xs[i * COLS + t] * w1[t * HIDDEN + j]).sum();
            h[i * HIDDEN + j] = (dot + b1[j]).max(0.0);
        }
    }
    let mut y = vec![0f32; ROWS * COLS];
    for i in 0..ROWS {
        for j in 0..COLS {
            let dot: f32 = (0..HIDDEN).map(|t| h[i * HIDDEN + t] * w2[t * COLS + j]).sum();
            y[i * COLS + j] = (dot + 1.0).max(0.0);
        }
    }
    y
}

const DK: usize = 512;
const DN: usize = 512;
const DROWS: usize = 64;

/// The dense graph's weights: `seed` 0 for the checked executables, others for warming up.
fn dense_weights(seed: usize) -> Vec<f32> {
    (0..DK * DN).map(|i| ((i * 17 % 29 + seed) as f32 - 14.0) * 0.01).collect()
}

/// `fused_dense(x, w, bias) + table` with constant `w` [DK, DN] (1 MiB, packed at compile
/// time: [`dense_weights`]), `bias` [DN] (2 KiB) and `table` [DROWS, DN] (128 KiB, loaded by
/// the plan).
fn dense_graph(b: &Arc<dyn Backend>, seed: usize) -> Arc<dyn Executable> {
    let builder = b.builder("dense");
    let f = builder.main();
    let w = dense_weights(seed);
    let bias: Vec<f32> = (0..DN).map(|i| i as f32 * 0.001).collect();
    let table: Vec<f32> = (0..DROWS * DN).map(|i| ((i + seed) % 13) as f32).collect();
    let x = f.parameter("x", Shape::new(DType::Float32, &[DROWS as i64, DK as i64])).unwrap();
    let w = f.constant(&w, &[DK, DN]).unwrap();
    let bias = f.constant(&bias, &[DN]).unwrap();
    let table = f.constant(&table, &[DROWS, DN]).unwrap();
    let y = f.fused_dense(x, w, Some(bias), Activation::None, DenseLayout::InputOutputs).unwrap();
    let r = f.add(y, table).unwrap();
    f.return_(&[r]).unwrap();
    builder.compile().unwrap()
}

/// The constant memory an executable reports: the packed weights are at least the weights'
/// bytes and at most that plus the packing's padding (at most 64 columns more, and 4 KiB of
/// alignment), the plan constants are the bias and the table; it is what the compile kept
/// allocated (the live bytes it added, less the plan's own small structures); a second
/// executable of the same weights reports the large constants as shared and keeps no copy.
fn constant_memory_is_what_compile_keeps() {
    const SLACK: i64 = 64 * 1024;
    let b: Arc<dyn Backend> = JitBackend::new("parallelism=1").unwrap();
    // Once with other weights, so that process-wide caches (compiled loop kernels) are filled;
    // kept alive, so that its buffers are not recycled into the next compile.
    let warm = dense_graph(&b, 1);
    // A new cache entry's source is hashed on a background thread, which holds it until then:
    // that is waited for before each count of what the executable keeps; buffers kept by the
    // process-wide buffer pool (which packing may draw from) are freed first.
    let live = || {
        wait_for_constant_hashing();
        tensorjit::memory::release_pool();
        // Packed weights live in huge-page arenas mapped outside the global allocator.
        LIVE.load(Ordering::SeqCst) + tensorjit::memory::arena_bytes() as i64
    };
    let before = live();
    let exe = dense_graph(&b, 0);
    let mem = exe.constant_memory().unwrap();
    let kept = live() - before;
    let (w_bytes, bias_bytes, table_bytes) = (DK * DN * 4, DN * 4, DROWS * DN * 4);
    assert!(mem.packed_bytes >= w_bytes && mem.packed_bytes <= w_bytes + DK * 64 * 4 + 4096, "{mem:?}");
    assert_eq!(mem.plan_bytes, bias_bytes + table_bytes, "{mem:?}");
    assert_eq!((mem.owned_bytes, mem.shared_bytes), (mem.total_bytes(), 0), "{mem:?}");
    // Everything else the executable holds (steps, shapes, names) is small.
    assert!(kept >= mem.total_bytes() as i64 && kept <= mem.total_bytes() as i64 + SLACK, "{kept} vs {mem:?}");

    let before = live();
    let again = dense_graph(&b, 0);
    let kept_again = live() - before;
    let shared = again.constant_memory().unwrap();
    assert_eq!(shared.total_bytes(), mem.total_bytes());
    // The bias is below the sharing threshold: copied; the weights and the table are shared.
    assert_eq!((shared.owned_bytes, shared.shared_bytes), (bias_bytes, mem.packed_bytes + table_bytes), "{shared:?}");
    assert!(kept_again >= bias_bytes as i64 && kept_again <= bias_bytes as i64 + SLACK, "{kept_again} vs {shared:?}");

    // Both compute `x·w + bias + table`.
    let xs: Vec<f32> = (0..DROWS * DK).map(|i| ((i * 5 % 7) as f32 - 3.0) * 0.1).collect();
    let x = Buffer::from_slice(&xs, &[DROWS, DK]).unwrap();
    let w = dense_weights(0);
    let mut want = vec![0f32; DROWS * DN];
    for i in 0..DROWS {
        for j in 0..DN {
            let dot: f64 = (0..DK).map(|t| xs[i * DK + t] as f64 * w[t * DN + j] as f64).sum();
            want[i * DN + j] = dot as f32 + j as f32 * 0.001 + ((i * DN + j) % 13) as f32;
        }
    }
    for e in [&exe, &again] {
        let got = e.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-3 * (1.0 + w.abs())));
    }
    drop(warm);
}

/// Heap allocations one call of the f32 GEMM kernel makes by itself (its scratch), for an
/// `m x k · k x n` product with B as a matrix or pre-packed, with or without a bias and a ReLU
/// in the epilogue, on one thread.
fn gemm_allocations(m: usize, k: usize, n: usize, packed: bool, dense: bool) -> u64 {
    use tensorjit::kernels::gemm::{Activation, Epilogue, GemmArgs, MatMut, MatRef, PackedB, Rhs, gemm_f32};
    let bias = vec![0.125f32; n];
    let a = vec![0.5f32; m * k];
    let b = vec![0.25f32; k * n];
    let mut c = vec![0f32; m * n];
    let p = PackedB::new(k, n, MatRef::row_major(&b, n)).unwrap();
    let call = |c: &mut [f32]| {
        let rhs = if packed { Rhs::Packed(&p) } else { Rhs::Mat(MatRef::row_major(&b, n)) };
        let epilogue = if dense { Epilogue::dense(&bias, Activation::Relu) } else { Epilogue::default() };
        let args = GemmArgs::new(m, n, k, MatRef::row_major(&a, k), rhs, MatMut::row_major(c, n));
        gemm_f32(args.epilogue(epilogue).threads(1)).unwrap();
    };
    call(&mut c);
    allocations(|| call(&mut c))
}
