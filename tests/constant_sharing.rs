//! Executables compiled from the same weights share them: the second compile of a model with a
//! large constant (an embedding-sized table added to the input; a dense layer's weights, which
//! the GEMM packs at compile time) gets the first one's copy from the process-wide cache, both
//! compute the right values, and the copy outlives neither. (Its own test binary, one test: the
//! cache's counters are process-wide.)

use tensorjit::backends::jit::{MIN_SHARED_BYTES, constant_cache_stats};
use tensorjit::ir::op::{Activation, DenseLayout};
use tensorjit::{Buffer, DType, Shape};

const N: usize = 40_000; // 160 KB of f32, above MIN_SHARED_BYTES

/// `x + table` with `table[i] = i / 4`, compiled for the jit.
fn compile() -> std::sync::Arc<dyn tensorjit::Executable> {
    let backend = tensorjit::new_with_config("jit").unwrap();
    let b = backend.builder("shared");
    let main = b.main();
    let x = main.parameter("x", Shape::new(DType::Float32, &[N as i64])).unwrap();
    let table: Vec<f32> = (0..N).map(|i| i as f32 / 4.0).collect();
    let t = main.constant(&table, &[N]).unwrap();
    let y = main.add(x, t).unwrap();
    main.return_(&[y]).unwrap();
    b.compile().unwrap()
}

#[test]
fn a_recompiled_model_shares_its_constants() {
    const { assert!(N * 4 >= MIN_SHARED_BYTES) };
    let before = constant_cache_stats();
    let a = compile();
    let after_first = constant_cache_stats();
    assert_eq!(after_first.misses, before.misses + 1, "{after_first:?}");
    let b = compile();
    let after_second = constant_cache_stats();
    assert_eq!(after_second.hits, after_first.hits + 1, "{after_second:?}");
    assert_eq!(after_second.bytes_saved, after_first.bytes_saved + (N * 4) as u64);
    assert_eq!(after_second.live_entries, 1);

    let x = Buffer::from_slice(&vec![1.0f32; N], &[N]).unwrap();
    for exe in [&a, &b] {
        let y = exe.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        for (i, v) in y.iter().enumerate() {
            assert_eq!(*v, 1.0 + i as f32 / 4.0);
        }
    }
    drop((a, b));
    assert_eq!(constant_cache_stats().live_entries, 0);

    // A dense layer's constant weights are packed once for both executables, even when they
    // are compiled for different batch sizes.
    let dense = |rows: usize| {
        let backend = tensorjit::new_with_config("jit").unwrap();
        let b = backend.builder("dense");
        let main = b.main();
        let x = main.parameter("x", Shape::new(DType::Float32, &[rows as i64, K as i64])).unwrap();
        let w: Vec<f32> = (0..K * K).map(|i| if i % (K + 1) == 0 { 2.0 } else { 0.0 }).collect();
        let w = main.constant(&w, &[K, K]).unwrap();
        let y = main.fused_dense(x, w, None, Activation::None, DenseLayout::InputOutputs).unwrap();
        main.return_(&[y]).unwrap();
        b.compile().unwrap()
    };
    let before = constant_cache_stats();
    let d4 = dense(4);
    let d9 = dense(9);
    let after = constant_cache_stats();
    assert_eq!((after.misses, after.hits), (before.misses + 1, before.hits + 1), "{after:?}");
    for (exe, rows) in [(&d4, 4), (&d9, 9)] {
        let x: Vec<f32> = (0..rows * K).map(|i| (i % 7) as f32).collect();
        let xb = Buffer::from_slice(&x, &[rows, K]).unwrap();
        let y = exe.execute(&[&xb], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        // w = 2·I: y = 2x.
        assert!(y.iter().zip(&x).all(|(a, b)| *a == 2.0 * b));
    }
}

const K: usize = 160; // 160² f32 = 100 KB of weights
