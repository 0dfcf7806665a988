//! What one steady-state execution allocates (issue 24, low-overhead execution), measured with a
//! counting global allocator (`common/counting.rs`, global only in this binary) on the "jit"
//! backend, one thread, for a 1-op graph, an MLP, a MiniLM-shaped encoder layer from standard
//! ops and a small convnet block (and the ONNX MiniLM, ResNet-18 and MobileNetV2 where the files
//! are on this machine). After warm-up, `execute_into` of every one of them must allocate nothing, and
//! `execute` only its results: per result its storage (the bytes and their `Arc`), its shape's
//! dims and the `Buffer`, plus the result `Vec`.
//! The counter is process-wide, so this file holds a single test running its cases in turn.

#[path = "common/counting.rs"]
mod counting;

#[path = "../benches/support/bert.rs"]
#[allow(dead_code)]
mod bert;

use std::sync::{Arc, Barrier};

use counting::{Counting, count};
use tensorjit::api::{AttentionConfig, ConvConfig};
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::op::{ArithReduce, AttentionLayout, ConvAxes};
use tensorjit::{Backend, Buffer, DType, ExecOptions, Executable, Function, Shape, Value};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations of one returned result: its bytes, their `Arc`, the shape's dims, the
/// `Buffer`'s shared state.
const PER_RESULT: u64 = 4;

/// Steady-state counts of one executable: `(allocations, bytes)` of one `execute` and one
/// `execute_into`.
#[derive(Debug, Clone, Copy)]
struct Counts {
    execute: (u64, u64),
    into: (u64, u64),
}

/// Deterministic inputs of the executable's parameter shapes: f32 values in [-1, 1), integers 1
/// (valid token ids, masks and token types for the ONNX encoder).
fn inputs(exe: &dyn Executable) -> Vec<Buffer> {
    exe.input_shapes()
        .iter()
        .map(|s| {
            let n = s.num_elements();
            let dims: Vec<usize> = s.dims.iter().map(|&d| d as usize).collect();
            let vals = || (0..n).map(|i| ((i * 7919 % 2001) as f32 / 1000.0) - 1.0);
            match s.dtype {
                DType::Float32 => Buffer::from_slice(&vals().collect::<Vec<_>>(), &dims).unwrap(),
                DType::BFloat16 => {
                    Buffer::from_slice(&vals().map(half::bf16::from_f32).collect::<Vec<_>>(), &dims).unwrap()
                }
                DType::Float16 => {
                    Buffer::from_slice(&vals().map(half::f16::from_f32).collect::<Vec<_>>(), &dims).unwrap()
                }
                DType::Int64 => Buffer::from_slice(&vec![1i64; n], &dims).unwrap(),
                DType::Int32 => Buffer::from_slice(&vec![1i32; n], &dims).unwrap(),
                d => panic!("no input generator for {d:?}"),
            }
        })
        .collect()
}

fn zeroed_outputs(exe: &dyn Executable) -> Vec<Buffer> {
    exe.output_shapes()
        .iter()
        .map(|s| Buffer::from_bytes(s.clone(), &vec![0u8; s.byte_size().unwrap()]).unwrap())
        .collect()
}

fn bits(b: &Buffer) -> Vec<u8> {
    b.to_bytes().unwrap()
}

/// Warms `exe` up (3 executions each way), counts one `execute` and one `execute_into`, and
/// checks both give the first execution's results bit for bit. Returns the counts and the results.
fn measure(name: &str, exe: &dyn Executable) -> (Counts, Vec<Buffer>) {
    let ins = inputs(exe);
    let refs: Vec<&Buffer> = ins.iter().collect();
    let opts = ExecOptions::default();
    let first = exe.execute(&refs, &[]).unwrap();
    // The constant cache hashes new weights on a background thread after a compile; its
    // allocations are not the execution's (the counter sees every thread).
    tensorjit::backends::jit::wait_for_constant_hashing();
    let outs = zeroed_outputs(exe);
    let handles: Vec<&Buffer> = outs.iter().collect();
    // Each way warmed up on its own: `execute` hands the results' storage to the caller, so the
    // first `execute_into` after it allocates that storage again.
    for _ in 0..3 {
        exe.execute(&refs, &[]).unwrap();
    }
    let mut got = Vec::new();
    let execute = count(|| got = exe.execute(&refs, &[]).unwrap());
    for _ in 0..3 {
        exe.execute_into(&refs, &[], &handles, &opts).unwrap();
    }
    let into = count(|| exe.execute_into(&refs, &[], &handles, &opts).unwrap());
    for (k, f) in first.iter().enumerate() {
        assert_eq!(bits(&got[k]), bits(f), "{name}: execute result {k} differs from the first execution");
        assert_eq!(bits(&outs[k]), bits(f), "{name}: execute_into result {k} differs from the first execution");
    }
    let c = Counts { execute, into };
    eprintln!(
        "{name}: execute {} allocations / {} bytes, execute_into {} / {} ({} results)",
        c.execute.0,
        c.execute.1,
        c.into.0,
        c.into.1,
        first.len()
    );
    (c, first)
}

/// Asserts the steady state: `execute_into` allocates nothing, `execute` only its results.
fn assert_allocation_free(name: &str, c: Counts, results: &[Buffer]) {
    assert_eq!(c.into, (0, 0), "{name}: execute_into allocated");
    let want_bytes: u64 = results.iter().map(|b| b.shape().byte_size().unwrap() as u64).sum();
    let n = results.len() as u64;
    assert_eq!(c.execute.0, 1 + PER_RESULT * n, "{name}: execute allocations");
    // The results' bytes, plus the small bookkeeping (shapes, `Arc`s, the `Vec`).
    assert!(
        c.execute.1 >= want_bytes && c.execute.1 <= want_bytes + 256 * (n + 1),
        "{name}: execute allocated {} bytes for {want_bytes} bytes of results",
        c.execute.1
    );
}

/// Asserts that `execute_into` allocates nothing and `execute` no more than its results.
fn assert_writes_into_slots(name: &str, c: Counts, results: &[Buffer]) {
    assert_eq!(c.into, (0, 0), "{name}: execute_into allocated");
    let n = results.len() as u64;
    assert!(c.execute.0 <= 1 + PER_RESULT * n, "{name}: execute made {} allocations", c.execute.0);
}

fn f32s(dims: &[i64]) -> Shape {
    Shape::new(DType::Float32, dims)
}

fn det(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0) * 0.1).collect()
}

fn compile(b: &Arc<dyn Backend>, name: &str, body: impl FnOnce(&Function) -> Vec<Value>) -> Arc<dyn Executable> {
    let builder = b.builder(name);
    let f = builder.main();
    let outs = body(&f);
    f.return_(&outs).unwrap();
    builder.compile().unwrap()
}

/// `x + y` over f32 `dims`.
fn add(b: &Arc<dyn Backend>, dims: &[i64]) -> Arc<dyn Executable> {
    compile(b, "add", |f| {
        let x = f.parameter("x", f32s(dims)).unwrap();
        let y = f.parameter("y", f32s(dims)).unwrap();
        vec![f.add(x, y).unwrap()]
    })
}

/// `relu(x·w1 + b1)·w2 + b2` from standard ops (DotGeneral, broadcast bias, Max), batch 8.
fn mlp(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    let (m, k, h, n) = (8i64, 128i64, 256i64, 64i64);
    compile(b, "mlp", |f| {
        let x = f.parameter("x", f32s(&[m, k])).unwrap();
        let layer = |x: Value, k: i64, n: i64, seed: usize, relu: bool| {
            let w = f.constant(&det((k * n) as usize, seed), &[k as usize, n as usize]).unwrap();
            let bias = f.constant(&det(n as usize, seed + 1), &[n as usize]).unwrap();
            let y = f.matmul(x, w).unwrap();
            let y = f.add(y, f.broadcast_in_dim(bias, &f32s(&[m, n]), &[1]).unwrap()).unwrap();
            if relu { f.max(y, f.scalar(0f32).unwrap()).unwrap() } else { y }
        };
        let hidden = layer(x, k, h, 1, true);
        vec![layer(hidden, h, n, 3, false)]
    })
}

/// One MiniLM-shaped encoder layer (hidden 384, 12 heads, FFN 1536, exact GELU), batch 1,
/// sequence 128, from standard ops (`benches/support/bert.rs`).
fn encoder(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    let e = bert::Encoder { batch: 1, seq: 128, hidden: 384, heads: 12, ffn: 1536, gelu_erf: true };
    compile(b, "encoder", |f| {
        let x = f.parameter("x", f32s(&[e.batch, e.seq, e.hidden])).unwrap();
        vec![bert::encoder_layer(f, &e, x, 0).unwrap()]
    })
}

/// A half type throughout (bf16 or f16), `[2, 64, 4 heads × 16]`: a residual LayerNorm with
/// gamma and beta, a BSHD attention with an additive key mask, a softmax, an erf GELU and a
/// layer norm without operands: the half-type steps that widen their operands and parameters
/// into f32 scratch and round their results.
fn norms_half(b: &Arc<dyn Backend>, dt: DType) -> Arc<dyn Executable> {
    let (bt, s, h, d) = (2i64, 64i64, 4i64, 16i64);
    let w = h * d;
    let shape = |dims: &[i64]| Shape::new(dt, dims);
    compile(b, &format!("norms {dt:?}"), |f| {
        let x = f.parameter("x", shape(&[bt, s, w])).unwrap();
        let r = f.parameter("r", shape(&[bt, s, w])).unwrap();
        let mask = f.parameter("mask", shape(&[bt, 1, 1, s])).unwrap();
        let param = |seed: usize| {
            let v = det(w as usize, seed);
            if dt == DType::Float16 {
                f.constant(&v.into_iter().map(half::f16::from_f32).collect::<Vec<_>>(), &[w as usize]).unwrap()
            } else {
                f.constant(&v.into_iter().map(half::bf16::from_f32).collect::<Vec<_>>(), &[w as usize]).unwrap()
            }
        };
        let (gamma, beta) = (param(1), param(2));
        let sum = f.add(x, r).unwrap();
        let ln = f.fused_layer_norm(sum, &[-1], 1e-5, Some(gamma), Some(beta)).unwrap();
        let q = f.reshape(ln, &[bt, s, h, d]).unwrap();
        let cfg = AttentionConfig { mask: Some(mask), ..Default::default() };
        let (att, _) = f.fused_scaled_dot_product_attention(q, q, q, AttentionLayout::Bshd, &cfg).unwrap();
        let att = f.reshape(att, &[bt, s, w]).unwrap();
        let sm = f.fused_softmax(att, 2).unwrap();
        let ge = f.fused_gelu(sm, true).unwrap();
        // A layer norm without gamma and beta (GPT-2's exports have them apart).
        vec![f.fused_layer_norm(ge, &[-1], 1e-5, None, None).unwrap()]
    })
}

/// f32 layer norms without gamma or beta: a residual one over the last axis and one over a
/// middle axis (`[2, 48, 40]` over axis 1).
fn norms_f32(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    compile(b, "norms f32", |f| {
        let x = f.parameter("x", f32s(&[2, 48, 40])).unwrap();
        let r = f.parameter("r", f32s(&[2, 48, 40])).unwrap();
        let sum = f.add(x, r).unwrap();
        let ln = f.fused_layer_norm(sum, &[-1], 1e-5, None, None).unwrap();
        vec![f.fused_layer_norm(ln, &[1], 1e-5, None, None).unwrap()]
    })
}

/// A bf16 `x·w + bias` whose f32 product (2100 x 1000 values, 8.4 MB) outgrows the GEMM's
/// pooled scratch: computed in row blocks whose scratch the thread keeps, with the bias widened
/// into pooled scratch too.
fn dense_bf16(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    let (m, k, n) = (2100i64, 64i64, 1000i64);
    compile(b, "dense bf16", |f| {
        let bf = |v: Vec<f32>| v.into_iter().map(half::bf16::from_f32).collect::<Vec<_>>();
        let x = f.parameter("x", Shape::new(DType::BFloat16, &[m, k])).unwrap();
        let w = f.constant(&bf(det((k * n) as usize, 5)), &[k as usize, n as usize]).unwrap();
        let bias = f.constant(&bf(det(n as usize, 6)), &[n as usize]).unwrap();
        let bias = f.broadcast_in_dim(bias, &Shape::new(DType::BFloat16, &[m, n]), &[1]).unwrap();
        vec![f.add(f.matmul(x, w).unwrap(), bias).unwrap()]
    })
}

/// NCHW `maxpool2x2(relu(conv3x3(x, w) + bias))`: x [1, 16, 32, 32], 32 output channels, pad 1;
/// f32, or bf16 throughout with `bf16` (the convolution and the pool in f32 scratch).
fn convnet(b: &Arc<dyn Backend>, bf16: bool) -> Arc<dyn Executable> {
    let (c, o, hw) = (16i64, 32i64, 32i64);
    let typed = |f: &Function, v: Vec<f32>, dims: &[usize]| {
        if bf16 {
            f.constant(&v.into_iter().map(half::bf16::from_f32).collect::<Vec<_>>(), dims).unwrap()
        } else {
            f.constant(&v, dims).unwrap()
        }
    };
    let shape = |dims: &[i64]| Shape::new(if bf16 { DType::BFloat16 } else { DType::Float32 }, dims);
    compile(b, "convnet", |f| {
        let x = f.parameter("x", shape(&[1, c, hw, hw])).unwrap();
        let w = typed(f, det((o * c * 9) as usize, 5), &[o as usize, c as usize, 3, 3]);
        let bias = typed(f, det(o as usize, 6), &[o as usize]);
        let axes = ConvAxes {
            input_batch: 0,
            input_channels: 1,
            input_spatial: vec![2, 3],
            kernel_input_channels: 1,
            kernel_output_channels: 0,
            kernel_spatial: vec![2, 3],
            output_batch: 0,
            output_channels: 1,
            output_spatial: vec![2, 3],
        };
        let cfg = ConvConfig {
            axes,
            strides: vec![1, 1],
            padding: vec![(1, 1), (1, 1)],
            input_dilations: vec![],
            kernel_dilations: vec![],
            channel_groups: 1,
            batch_groups: 1,
        };
        let y = f.conv_general(x, w, &cfg).unwrap();
        let y = f.add(y, f.broadcast_in_dim(bias, &shape(&[1, o, hw, hw]), &[1]).unwrap()).unwrap();
        let zero = if bf16 { f.scalar(half::bf16::ZERO) } else { f.scalar(0f32) };
        let y = f.max(y, zero.unwrap()).unwrap();
        vec![f.reduce_window(y, ArithReduce::Max, &[1, 1, 2, 2], &[1, 1, 2, 2], &[], &[], &[]).unwrap()]
    })
}

/// A bf16 channels-last stage: `maxpool2x2(dw3x3(relu(conv3x3(x) + b1)) + b2)` over x [1, 64, 64,
/// 16], 32 channels: the first convolution on the half-precision GEMM, the depthwise one band by
/// band in f32 scratch, both with their epilogues merged.
fn convnet_nhwc_bf16(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    let (c, o, hw) = (16usize, 32usize, 64i64);
    let bf = |v: Vec<f32>| v.into_iter().map(half::bf16::from_f32).collect::<Vec<_>>();
    let shape = |dims: &[i64]| Shape::new(DType::BFloat16, dims);
    let cfg = |groups: i64| ConvConfig {
        axes: ConvAxes {
            input_batch: 0,
            input_channels: 3,
            input_spatial: vec![1, 2],
            kernel_input_channels: 2,
            kernel_output_channels: 3,
            kernel_spatial: vec![0, 1],
            output_batch: 0,
            output_channels: 3,
            output_spatial: vec![1, 2],
        },
        strides: vec![1, 1],
        padding: vec![(1, 1), (1, 1)],
        input_dilations: vec![],
        kernel_dilations: vec![],
        channel_groups: groups,
        batch_groups: 1,
    };
    compile(b, "convnet nhwc bf16", |f| {
        let out = shape(&[1, hw, hw, o as i64]);
        let x = f.parameter("x", shape(&[1, hw, hw, c as i64])).unwrap();
        let w1 = f.constant(&bf(det(9 * c * o, 5)), &[3, 3, c, o]).unwrap();
        let w2 = f.constant(&bf(det(9 * o, 7)), &[3, 3, 1, o]).unwrap();
        let (b1, b2) = (f.constant(&bf(det(o, 6)), &[o]).unwrap(), f.constant(&bf(det(o, 8)), &[o]).unwrap());
        let y = f.conv_general(x, w1, &cfg(1)).unwrap();
        let y = f.add(y, f.broadcast_in_dim(b1, &out, &[3]).unwrap()).unwrap();
        let y = f.max(y, f.scalar(half::bf16::ZERO).unwrap()).unwrap();
        let y = f.conv_general(y, w2, &cfg(o as i64)).unwrap();
        let y = f.add(y, f.broadcast_in_dim(b2, &out, &[3]).unwrap()).unwrap();
        vec![f.reduce_window(y, ArithReduce::Max, &[1, 2, 2, 1], &[1, 2, 2, 1], &[], &[], &[]).unwrap()]
    })
}

/// Runs `exe` with `execute_into` on 4 threads at once, in rounds between barriers (so that only
/// the executions are counted); each thread's results must equal `want`. The executable keeps
/// one execution state per concurrent execution, made the first time that many overlap, and
/// whether the 4 executions of a round overlap depends on the scheduler: so rounds repeat (at
/// most `ROUNDS`) until one allocates nothing — the steady state must be reached, and after it
/// nothing is allocated.
fn concurrent_rounds_allocate_nothing(exe: &dyn Executable, want: &[Buffer]) {
    const THREADS: usize = 4;
    const ROUNDS: usize = 50;
    let ins = inputs(exe);
    let (go, done) = (Barrier::new(THREADS + 1), Barrier::new(THREADS + 1));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let counted = std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let refs: Vec<&Buffer> = ins.iter().collect();
                let outs = zeroed_outputs(exe);
                let handles: Vec<&Buffer> = outs.iter().collect();
                let opts = ExecOptions::default();
                exe.execute_into(&refs, &[], &handles, &opts).unwrap();
                loop {
                    go.wait();
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    exe.execute_into(&refs, &[], &handles, &opts).unwrap();
                    done.wait();
                }
                for (k, w) in want.iter().enumerate() {
                    assert_eq!(bits(&outs[k]), bits(w), "concurrent execute_into result {k}");
                }
            });
        }
        tensorjit::backends::jit::wait_for_constant_hashing();
        let mut last = (u64::MAX, 0);
        for _ in 0..ROUNDS {
            last = count(|| {
                go.wait();
                done.wait();
            });
            if last == (0, 0) {
                break;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        go.wait();
        last
    });
    eprintln!("{THREADS} concurrent execute_into: {} allocations / {} bytes", counted.0, counted.1);
    assert_eq!(counted, (0, 0), "{THREADS} concurrent execute_into: no round of {ROUNDS} was allocation-free");
}

/// An ONNX model at `path` with its symbolic dims set, or `None` when the file is not here.
fn onnx(b: &Arc<dyn Backend>, path: &str, dims: &[(&str, i64)]) -> Option<Arc<dyn Executable>> {
    if !std::path::Path::new(path).exists() {
        eprintln!("{path}: not on this machine, not measured");
        return None;
    }
    let opts = tensorjit::onnx::ImportOptions {
        dims: dims.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        ..Default::default()
    };
    let model = tensorjit::onnx::load_with(path, &opts).unwrap();
    Some(b.compile(model.module).unwrap())
}

#[test]
fn steady_state_allocations_per_execution() {
    let b: Arc<dyn Backend> = JitBackend::new("parallelism=1").unwrap();

    // 1. A 1-op graph: the results are all it allocates; they are x + y.
    for dims in [&[4i64][..], &[1024]] {
        let exe = add(&b, dims);
        let (c, r) = measure(&format!("add f32{dims:?}"), &*exe);
        let n = dims[0] as usize;
        let want: Vec<f32> = (0..n).map(|i| 2.0 * ((i * 7919 % 2001) as f32 / 1000.0 - 1.0)).collect();
        assert_eq!(r[0].to_vec::<f32>().unwrap(), want);
        assert_allocation_free("add", c, &r);
    }

    // 2. An MLP (FusedDense + bias + ReLU after the fusion pass).
    let exe = mlp(&b);
    let (c, r) = measure("mlp 8x128x256x64", &*exe);
    assert_allocation_free("mlp", c, &r);

    // The same MLP from 4 threads at once: each execution takes a kept execution state and its
    // thread's GEMM scratch, so a concurrent round after warm-up allocates nothing either.
    concurrent_rounds_allocate_nothing(&*exe, &r);

    // 3. The encoder layer (GEMMs, flash attention reading q/k/v from one projection, layer
    // norm loops) and 4. the convnet block (Winograd convolution with its epilogue, max pool;
    // in bf16 too, whose convolution and pool widen into per-thread f32 scratch kept between
    // executions): their kernels write into the memory plan's slots, so `execute_into`
    // allocates nothing either, and `execute` at most its results' bookkeeping (their bytes may
    // come from the process buffer pool).
    for (name, exe) in [
        ("encoder layer minilm b1 s128", encoder(&b)),
        ("convnet block", convnet(&b, false)),
        ("convnet block bf16", convnet(&b, true)),
        ("convnet stage nhwc bf16", convnet_nhwc_bf16(&b)),
        ("dense bf16 2100x64x1000", dense_bf16(&b)),
        ("norms bf16", norms_half(&b, DType::BFloat16)),
        ("norms f16", norms_half(&b, DType::Float16)),
        ("norms f32", norms_f32(&b)),
    ] {
        let (c, r) = measure(name, &*exe);
        assert_writes_into_slots(name, c, &r);
    }

    // 5. The ONNX models, where they are on this machine (tools/onnx-models.py writes the
    // torchscript exports): MiniLM in f32 and bf16 (fused residual LayerNorm, embedding row
    // gathers, attention),
    // ResNet-18 (the direct stem, Winograd and implicit-GEMM convolutions, the global-average-pool
    // tail: a reduction loop, a reshape, a division in place over the reshape) and MobileNetV2
    // (direct 1×1 and depthwise kernels) allocate nothing either.
    // MiniLM in bf16 too (the export of `model.to(torch.bfloat16)`: bf16 products, attention and
    // residual layer norms).
    for (name, path) in [
        ("onnx minilm 1x128", "/work/models/minilm-torchscript/model.onnx"),
        ("onnx minilm bf16 1x128", "/work/models/minilm-torchscript-bf16/model.onnx"),
    ] {
        if let Some(exe) = onnx(&b, path, &[("batch", 1), ("sequence", 128)]) {
            let (c, r) = measure(name, &*exe);
            assert_writes_into_slots(name, c, &r);
        }
    }
    for (name, path) in [
        ("onnx resnet-18 b1", "/work/models/resnet18-torchscript/model.onnx"),
        ("onnx mobilenetv2 b1", "/work/models/mobilenet_v2-torchscript/model.onnx"),
    ] {
        if let Some(exe) = onnx(&b, path, &[("batch", 1)]) {
            let (c, r) = measure(name, &*exe);
            assert_writes_into_slots(name, c, &r);
        }
    }
}
