//! `Executable::execute_into` (results written into the caller's buffers) and the jit
//! executor's memory reuse between executions: values stay right when loop outputs, aliases,
//! kernel results, constants and parameters share and recycle storage over many executions, from
//! one thread or several; bad output buffers are refused before anything runs.

use std::sync::Arc;

use tensorjit::backends::jit::{JitBackend, JitExecutable};
use tensorjit::{Backend, Buffer, DType, Error, ExecOptions, Executable, Function, Shape, Value};

type R<T> = tensorjit::Result<T>;

fn jit(config: &str) -> Arc<dyn Backend> {
    JitBackend::new(config).unwrap()
}

fn compile(b: &Arc<dyn Backend>, f: impl FnOnce(&Function) -> R<Vec<Value>>) -> Arc<dyn Executable> {
    let builder = b.builder("t");
    let main = builder.main();
    let outs = f(&main).unwrap();
    main.return_(&outs).unwrap();
    builder.compile().unwrap()
}

fn f32s(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 37 + seed * 11) % 29) as f32 - 14.0) * 0.125).collect()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
    }
}

fn opts() -> ExecOptions {
    ExecOptions::default()
}

const N: usize = 6;
const M: usize = 4;

/// `a = x·y + x` (loop), `r = reshape(a)` (alias), `d = a·W` (GEMM kernel, [N,M]x[M,M]),
/// `e = max(d, 0) + 1` (loop over a kernel result), `s = Σ_rows e` (reduction), `c = const`
/// returned as is, `x` returned as is, `e` returned twice.
fn mixed(f: &Function) -> R<Vec<Value>> {
    let x = f.parameter("x", Shape::new(DType::Float32, &[N as i64, M as i64]))?;
    let y = f.parameter("y", Shape::new(DType::Float32, &[N as i64, M as i64]))?;
    let w = f.parameter("w", Shape::new(DType::Float32, &[M as i64, M as i64]))?;
    let a = f.add(f.mul(x, y)?, x)?;
    let r = f.reshape(a, &[(N * M) as i64])?;
    let d = f.matmul(a, w)?;
    let e = f.add(f.max(d, f.scalar(0f32)?)?, f.scalar(1f32)?)?;
    let s = f.reduce_sum(e, &[0])?;
    let c = f.constant(&[1.5f32, -2.5], &[2])?;
    Ok(vec![r, e, s, c, x, e])
}

/// The results of [`mixed`] computed by hand.
fn mixed_expected(x: &[f32], y: &[f32], w: &[f32]) -> Vec<Vec<f32>> {
    let a: Vec<f32> = x.iter().zip(y).map(|(&x, &y)| x * y + x).collect();
    let mut e = vec![0f32; N * M];
    for i in 0..N {
        for j in 0..M {
            let d: f32 = (0..M).map(|k| a[i * M + k] * w[k * M + j]).sum();
            e[i * M + j] = d.max(0.0) + 1.0;
        }
    }
    let s: Vec<f32> = (0..M).map(|j| (0..N).map(|i| e[i * M + j]).sum()).collect();
    vec![a, e.clone(), s, vec![1.5, -2.5], x.to_vec(), e]
}

fn mixed_inputs(seed: usize) -> ([Buffer; 3], Vec<Vec<f32>>) {
    let (x, y, w) = (f32s(N * M, seed), f32s(N * M, seed + 1), f32s(M * M, seed + 2));
    let want = mixed_expected(&x, &y, &w);
    let bufs = [
        Buffer::from_slice(&x, &[N, M]).unwrap(),
        Buffer::from_slice(&y, &[N, M]).unwrap(),
        Buffer::from_slice(&w, &[M, M]).unwrap(),
    ];
    (bufs, want)
}

fn zeros_like(exe: &dyn Executable) -> Vec<Buffer> {
    exe.output_shapes()
        .iter()
        .map(|s| Buffer::from_bytes(s.clone(), &vec![0u8; s.byte_size().unwrap()]).unwrap())
        .collect()
}

fn check_all(outs: &[Buffer], want: &[Vec<f32>]) {
    for (o, w) in outs.iter().zip(want) {
        close(&o.to_vec::<f32>().unwrap(), w);
    }
}

#[test]
fn results_stay_right_over_many_executions() {
    for config in ["parallelism=1", "parallelism=2", "fusion=off"] {
        let exe = compile(&jit(config), mixed);
        let outs = zeros_like(&*exe);
        let handles: Vec<&Buffer> = outs.iter().collect();
        for seed in 0..6 {
            let (ins, want) = mixed_inputs(seed);
            let refs: Vec<&Buffer> = ins.iter().collect();
            if seed % 2 == 0 {
                exe.execute_into(&refs, &[], &handles, &opts()).unwrap();
                check_all(&outs, &want);
            } else {
                check_all(&exe.execute(&refs, &[]).unwrap(), &want);
            }
            // The inputs were not written.
            close(&ins[0].to_vec::<f32>().unwrap(), &f32s(N * M, seed));
        }
    }
}

#[test]
fn results_kept_by_the_caller_are_not_overwritten() {
    let exe = compile(&jit("parallelism=1"), mixed);
    let mut kept = Vec::new();
    for seed in 0..4 {
        let (ins, want) = mixed_inputs(seed);
        let refs: Vec<&Buffer> = ins.iter().collect();
        kept.push((exe.execute(&refs, &[]).unwrap(), want));
    }
    for (outs, want) in &kept {
        check_all(outs, want);
    }
}

#[test]
fn donated_inputs_are_reused_safely() {
    let exe = compile(&jit("parallelism=1"), |f| {
        let x = f.parameter("x", Shape::new(DType::Float32, &[8]))?;
        let a = f.mul(x, f.scalar(2f32)?)?;
        let b = f.add(a, f.scalar(1f32)?)?;
        let c = f.sub(b, x)?;
        Ok(vec![c])
    });
    let out = Buffer::from_slice(&[0f32; 8], &[8]).unwrap();
    for seed in 0..4 {
        let xs = f32s(8, seed);
        let want: Vec<f32> = xs.iter().map(|&x| (x * 2.0 + 1.0) - x).collect();
        let x = Buffer::from_slice(&xs, &[8]).unwrap();
        exe.execute_into(&[&x], &[true], &[&out], &opts()).unwrap();
        close(&out.to_vec::<f32>().unwrap(), &want);
        assert!(!x.is_live(), "a donated buffer is unusable");
    }
}

#[test]
fn an_output_buffer_may_be_the_next_input() {
    // x ← 2x + 1, iterated through one buffer given as both input and output.
    let exe = compile(&jit("parallelism=1"), |f| {
        let x = f.parameter("x", Shape::new(DType::Float32, &[5]))?;
        Ok(vec![f.add(f.mul(x, f.scalar(2f32)?)?, f.scalar(1f32)?)?])
    });
    let mut want = vec![0.0f32, 1.0, -1.0, 0.5, 3.0];
    let buf = Buffer::from_slice(&want, &[5]).unwrap();
    for _ in 0..5 {
        exe.execute_into(&[&buf], &[], &[&buf], &opts()).unwrap();
        for w in &mut want {
            *w = *w * 2.0 + 1.0;
        }
        close(&buf.to_vec::<f32>().unwrap(), &want);
    }
}

#[test]
fn interpreter_runs_execute_into_too() {
    let exe = compile(&tensorjit::new_with_config("interp").unwrap(), mixed);
    let outs = zeros_like(&*exe);
    let handles: Vec<&Buffer> = outs.iter().collect();
    for seed in 0..2 {
        let (ins, want) = mixed_inputs(seed);
        let refs: Vec<&Buffer> = ins.iter().collect();
        exe.execute_into(&refs, &[], &handles, &opts()).unwrap();
        check_all(&outs, &want);
    }
}

#[test]
fn concurrent_executions_keep_their_own_memory() {
    let exe = compile(&jit("parallelism=1"), mixed);
    std::thread::scope(|s| {
        for t in 0..4 {
            let exe = &exe;
            s.spawn(move || {
                let outs = zeros_like(&**exe);
                let handles: Vec<&Buffer> = outs.iter().collect();
                for i in 0..25 {
                    let (ins, want) = mixed_inputs(t * 100 + i);
                    let refs: Vec<&Buffer> = ins.iter().collect();
                    if i % 3 == 0 {
                        check_all(&exe.execute(&refs, &[]).unwrap(), &want);
                    } else {
                        exe.execute_into(&refs, &[], &handles, &opts()).unwrap();
                        check_all(&outs, &want);
                    }
                }
            });
        }
    });
}

#[test]
fn release_memory_and_finalize() {
    let b = JitBackend::new("parallelism=1").unwrap();
    let builder = b.builder("t");
    let outs = mixed(&builder.main()).unwrap();
    builder.main().return_(&outs).unwrap();
    let exe: JitExecutable = b.compile_jit(builder.module()).unwrap();
    let (ins, want) = mixed_inputs(3);
    let refs: Vec<&Buffer> = ins.iter().collect();
    check_all(&exe.execute(&refs, &[]).unwrap(), &want);
    exe.release_memory();
    check_all(&exe.execute(&refs, &[]).unwrap(), &want);
    let outs = zeros_like(&exe);
    let handles: Vec<&Buffer> = outs.iter().collect();
    exe.finalize();
    assert!(matches!(exe.execute_into(&refs, &[], &handles, &opts()), Err(Error::UseAfterFree { .. })));
}

#[test]
fn bad_output_buffers_are_refused_before_running() {
    let exe = compile(&jit("parallelism=1"), |f| {
        let x = f.parameter("x", Shape::new(DType::Float32, &[3]))?;
        let y = f.neg(x)?;
        let z = f.reduce_sum(x, &[0])?;
        let w = f.abs(x)?;
        Ok(vec![y, z, w])
    });
    let x = Buffer::from_slice(&[1f32, -2.0, 3.0], &[3]).unwrap();
    let (y, z, w) = (
        Buffer::from_slice(&[7f32; 3], &[3]).unwrap(),
        Buffer::scalar(7f32),
        Buffer::from_slice(&[7f32; 3], &[3]).unwrap(),
    );
    let err = |outs: &[&Buffer]| exe.execute_into(&[&x], &[], outs, &opts()).unwrap_err();

    let e = err(&[&y]).to_string();
    assert!(e.contains("1 output buffers given") && e.contains("3 results"), "{e}");
    let wrong_dims = Buffer::from_slice(&[0f32; 4], &[4]).unwrap();
    let e = err(&[&wrong_dims, &z, &w]).to_string();
    assert!(e.contains("output 0") && e.contains("[3]") && e.contains("[4]"), "{e}");
    let wrong_dtype = Buffer::scalar(0f64);
    let e = err(&[&y, &wrong_dtype, &w]).to_string();
    assert!(e.contains("output 1") && e.contains("Float64"), "{e}");
    // The same buffer twice, also through a cloned handle.
    let e = err(&[&y, &z, &y.clone()]).to_string();
    assert!(e.contains("output buffers 0 and 2"), "{e}");
    let dead = Buffer::from_slice(&[0f32; 3], &[3]).unwrap();
    dead.finalize();
    let e = err(&[&y, &z, &dead]);
    assert!(matches!(e, Error::UseAfterFree { .. }) && e.to_string().contains("output 2"), "{e}");
    // None of these ran: the buffers hold what they held.
    assert_eq!(y.to_vec::<f32>().unwrap(), [7.0; 3]);
    assert_eq!(z.to_vec::<f32>().unwrap(), [7.0]);

    // A failed execution (a bad input) leaves the outputs as they were.
    let bad = Buffer::from_slice(&[1f32, 2.0], &[2]).unwrap();
    assert!(exe.execute_into(&[&bad], &[], &[&y, &z, &w], &opts()).is_err());
    assert_eq!(y.to_vec::<f32>().unwrap(), [7.0; 3]);
    assert_eq!(w.to_vec::<f32>().unwrap(), [7.0; 3]);

    // Good buffers: written, seen through every handle.
    let y2 = y.clone();
    exe.execute_into(&[&x], &[], &[&y, &z, &w], &opts()).unwrap();
    assert_eq!(y2.to_vec::<f32>().unwrap(), [-1.0, 2.0, -3.0]);
    assert_eq!(z.to_vec::<f32>().unwrap(), [2.0]);
    assert_eq!(w.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
}

/// Softmax, GELU, a residual LayerNorm, attention, a transpose and a slice: kernels that write
/// their results into the memory plan's kept storage (so each execution finds the previous one's
/// values, or the caller's, in it), checked against the reference interpreter over executions
/// with changing inputs, alternating `execute_into` and `execute`, on one and two threads.
#[test]
fn fused_and_movement_kernels_overwrite_kept_storage() {
    const D: i64 = 16;
    let graph = |f: &Function| -> R<Vec<Value>> {
        let shape = Shape::new(DType::Float32, &[2, 4, D]);
        let x = f.parameter("x", shape.clone())?;
        let y = f.parameter("y", shape)?;
        let qkv = Shape::new(DType::Float32, &[1, 4, 2, 8]);
        let (q, k, v) = (f.parameter("q", qkv.clone())?, f.parameter("k", qkv.clone())?, f.parameter("v", qkv)?);
        let g = f.constant(&f32s(D as usize, 7), &[D as usize])?;
        let b = f.constant(&f32s(D as usize, 8), &[D as usize])?;
        let sm = f.fused_softmax(x, 2)?;
        let ge = f.fused_gelu(y, true)?;
        let ln = f.fused_layer_norm(f.add(x, y)?, &[-1], 1e-5, Some(g), Some(b))?;
        let (att, _) = f.fused_scaled_dot_product_attention(
            q,
            k,
            v,
            tensorjit::ir::op::AttentionLayout::Bshd,
            &tensorjit::api::AttentionConfig::default(),
        )?;
        let tr = f.transpose(x, &[2, 0, 1])?;
        let sl = f.slice(y, &[0, 1, 2], &[2, 4, D], &[1, 2, 3])?;
        Ok(vec![sm, ge, ln, att, tr, sl])
    };
    let interp = compile(&(tensorjit::backends::interp::InterpBackend::new("").unwrap() as Arc<dyn Backend>), graph);
    let inputs = |seed: usize| -> Vec<Buffer> {
        let (n, m) = (2 * 4 * D as usize, 4 * 2 * 8);
        vec![
            Buffer::from_slice(&f32s(n, seed), &[2, 4, D as usize]).unwrap(),
            Buffer::from_slice(&f32s(n, seed + 3), &[2, 4, D as usize]).unwrap(),
            Buffer::from_slice(&f32s(m, seed + 5), &[1, 4, 2, 8]).unwrap(),
            Buffer::from_slice(&f32s(m, seed + 6), &[1, 4, 2, 8]).unwrap(),
            Buffer::from_slice(&f32s(m, seed + 9), &[1, 4, 2, 8]).unwrap(),
        ]
    };
    for config in ["parallelism=1", "parallelism=2"] {
        let exe = compile(&jit(config), graph);
        let outs = zeros_like(&*exe);
        let handles: Vec<&Buffer> = outs.iter().collect();
        for seed in 0..6 {
            let ins = inputs(seed);
            let refs: Vec<&Buffer> = ins.iter().collect();
            let want: Vec<Vec<f32>> =
                interp.execute(&refs, &[]).unwrap().iter().map(|b| b.to_vec::<f32>().unwrap()).collect();
            if seed % 2 == 0 {
                exe.execute_into(&refs, &[], &handles, &opts()).unwrap();
                check_all(&outs, &want);
            } else {
                check_all(&exe.execute(&refs, &[]).unwrap(), &want);
            }
        }
    }
}
