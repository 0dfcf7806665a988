//! Criterion benchmarks of the GEMM kernels on named shapes (squares, BERT-base projections,
//! batch-1 decoding), reported as FLOP/s (elements = 2·m·n·k floating-point operations).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::bf16;
use tensorjit::kernels::gemm::*;

fn data(len: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 7919 % 2001) as f32) / 1000.0 - 1.0).collect()
}

fn f32_shapes(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm_f32");
    g.sample_size(20);
    let shapes: &[(&str, usize, usize, usize)] = &[
        ("square128", 128, 128, 128),
        ("square512", 512, 512, 512),
        ("bert_qkv_b128", 128, 2304, 768),
        ("bert_ffn_up_b128", 128, 3072, 768),
        ("decode_m1", 1, 1536, 384),
        ("decode_m16", 16, 1536, 384),
    ];
    for &(name, m, n, k) in shapes {
        let a = data(m * k);
        let b = data(k * n);
        let bias = data(n);
        let mut out = vec![0.0f32; m * n];
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        for threads in [1usize, 2] {
            g.bench_with_input(BenchmarkId::new(name, format!("t{threads}")), &threads, |bch, &t| {
                bch.iter(|| {
                    gemm_f32(
                        GemmArgs::new(
                            m,
                            n,
                            k,
                            MatRef::row_major(&a, k),
                            MatRef::row_major(&b, n),
                            MatMut::row_major(&mut out, n),
                        )
                        .epilogue(Epilogue::dense(&bias, Activation::GeluTanh))
                        .threads(t),
                    )
                    .expect("gemm_f32")
                })
            });
        }
        let packed = PackedB::new(k, n, MatRef::row_major(&b, n)).expect("pack");
        g.bench_function(BenchmarkId::new(name, "prepacked_t1"), |bch| {
            bch.iter(|| {
                gemm_f32(GemmArgs::new(
                    m,
                    n,
                    k,
                    MatRef::row_major(&a, k),
                    Rhs::Packed(&packed),
                    MatMut::row_major(&mut out, n),
                ))
                .expect("gemm_f32")
            })
        });
    }
    g.finish();
}

fn bf16_shapes(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm_bf16");
    g.sample_size(20);
    for &(name, m, n, k) in &[("square512", 512usize, 512usize, 512usize), ("bert_ffn_up_b128", 128, 3072, 768)] {
        let a: Vec<bf16> = data(m * k).into_iter().map(bf16::from_f32).collect();
        let b: Vec<bf16> = data(k * n).into_iter().map(bf16::from_f32).collect();
        let mut out = vec![0.0f32; m * n];
        g.throughput(Throughput::Elements((2 * m * n * k) as u64));
        g.bench_function(name, |bch| {
            bch.iter(|| {
                gemm_bf16(GemmArgs::new(
                    m,
                    n,
                    k,
                    MatRef::row_major(&a, k),
                    MatRef::row_major(&b, n),
                    MatMut::row_major(&mut out, n),
                ))
                .expect("gemm_bf16")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, f32_shapes, bf16_shapes);
criterion_main!(benches);
