//! Dense layers with constant weights that share their input (an attention block's Q, K and V
//! projections) run as one product whose weights the jit packs block by block from the layers'
//! own constants (`passes::egraph::qkv`, `backends::jit::dot::weight_blocks`): the values are the
//! three products worked out in f64 here, the concatenation of the weights is never a step of
//! the plan, the packed weights are the only copy the executable keeps, and a second compile
//! of the same weights shares them. (Its own test binary: the constant cache's counters are
//! process-wide.)

use tensorjit::backends::jit::constant_cache_stats;
use tensorjit::ir::op::{Activation, DenseLayout};
use tensorjit::{Buffer, DType, Executable, Shape};

/// Input width and each layer's output width (MiniLM's projections are 384 × 3·384).
const K: usize = 64;
const N: usize = 384;
const ROWS: usize = 5;

/// Deterministic values in [-1, 1) with few mantissa bits (products exact in f32).
fn values(seed: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| (((i * 37 + seed * 101) % 64) as f32 - 32.0) / 32.0).collect()
}

/// Layer `l`'s weights as `[K, N]` (`io`) or `[N, K]`, and its bias.
fn layer(l: usize, io: bool) -> (Vec<f32>, Vec<f32>) {
    let w = values(l + 1, K * N);
    let w = if io { w } else { (0..N * K).map(|i| w[(i % K) * N + i / K]).collect() };
    (w, values(l + 11, N))
}

fn compile(io: bool) -> std::sync::Arc<dyn Executable> {
    let backend = tensorjit::new_with_config("jit").unwrap();
    let b = backend.builder("qkv");
    let main = b.main();
    let x = main.parameter("x", Shape::new(DType::Float32, &[ROWS as i64, K as i64])).unwrap();
    let layout = if io { DenseLayout::InputOutputs } else { DenseLayout::OutputsInput };
    let dims = if io { [K, N] } else { [N, K] };
    let outs: Vec<_> = (0..3)
        .map(|l| {
            let (w, bias) = layer(l, io);
            let w = main.constant(&w, &dims).unwrap();
            let bias = main.constant(&bias, &[N]).unwrap();
            main.fused_dense(x, w, Some(bias), Activation::None, layout).unwrap()
        })
        .collect();
    main.return_(&outs).unwrap();
    b.compile().unwrap()
}

#[test]
fn merged_dense_weights_are_packed_from_each_layers_constant() {
    for io in [true, false] {
        let before = constant_cache_stats();
        let exe = compile(io);
        let report = exe.compile_report().expect("jit compile report");
        let steps: Vec<&str> = report.execution.steps.iter().map(|s| s.label.as_str()).collect();
        assert!(!steps.iter().any(|s| s.contains("concatenate")), "io {io}: {steps:?}");
        let dense: Vec<&&str> = steps.iter().filter(|s| s.contains("packed")).collect();
        assert_eq!(dense.len(), 1, "io {io}: one merged, packed product: {steps:?}");
        let mem = exe.constant_memory().expect("constant memory");
        assert!(mem.packed_bytes >= 3 * K * N * 4, "io {io}: {mem:?}");
        // The packed panels (padding included) and the biases are all the executable keeps.
        assert!(mem.total_bytes() < 3 * K * N * 4 * 5 / 4, "io {io}: {mem:?}");
        let after = constant_cache_stats();
        assert_eq!(after.misses, before.misses + 1, "io {io}: one packed entry: {after:?}");

        let x = values(99, ROWS * K);
        let xb = Buffer::from_slice(&x, &[ROWS, K]).unwrap();
        let got = exe.execute(&[&xb], &[]).unwrap();
        for (l, y) in got.iter().enumerate() {
            let y = y.to_vec::<f32>().unwrap();
            let (w, bias) = layer(l, true);
            for r in 0..ROWS {
                for c in 0..N {
                    let want = bias[c] as f64 + (0..K).map(|i| x[r * K + i] as f64 * w[i * N + c] as f64).sum::<f64>();
                    assert_eq!(y[r * N + c] as f64, want, "io {io}: layer {l} [{r}, {c}]");
                }
            }
        }

        // The same weights compiled again (new buffers, equal bytes): the packed copy is shared.
        let again = compile(io);
        let shared = constant_cache_stats();
        assert_eq!(shared.hits, after.hits + 1, "io {io}: {shared:?}");
        assert_eq!(again.execute(&[&xb], &[]).unwrap()[2].to_vec::<f32>().unwrap(), got[2].to_vec::<f32>().unwrap());
    }
}
