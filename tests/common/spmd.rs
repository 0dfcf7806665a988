//! SPMD scenarios run by every rank of a communicator (tests/collective.rs on threads,
//! tests/mpi.rs under `mpirun`): data-parallel inference, gradient all-reduce, and a
//! tensor-parallel MLP whose first FusedDense is split by columns. Each checks its result against
//! a naive f64 loop over the whole problem and against the same module run in one process.

#![allow(dead_code)]

use std::sync::Arc;

use tensorjit::api::collective::Communicator;
use tensorjit::ir::op::{Activation, ArithReduce, DenseLayout};
use tensorjit::{Backend, Buffer, DType, ExecOptions, Executable, Function, Shape, Value};

type R<T> = tensorjit::Result<T>;

/// The backends every scenario runs on.
pub const BACKENDS: [&str; 2] = ["interp", "jit"];

pub fn backend(name: &str) -> Arc<dyn Backend> {
    tensorjit::new_with_config(name).unwrap()
}

pub fn compile(b: &Arc<dyn Backend>, f: impl FnOnce(&Function) -> R<Vec<Value>>) -> Arc<dyn Executable> {
    let builder = b.builder("spmd");
    let main = builder.main();
    let outs = f(&main).unwrap();
    main.return_(&outs).unwrap();
    builder.compile().unwrap()
}

pub fn f32s(dims: &[usize]) -> Shape {
    let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    Shape::new(DType::Float32, &dims)
}

/// Deterministic test data in [-1, 1), the same on every rank.
pub fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 37 + seed * 101) % 61) as f32 - 30.0) / 30.0).collect()
}

pub fn with(comm: &Arc<dyn Communicator>) -> ExecOptions {
    ExecOptions { communicator: Some(comm.clone()), ..ExecOptions::default() }
}

pub fn run(e: &Arc<dyn Executable>, inputs: &[Buffer], opts: &ExecOptions) -> Vec<Vec<f32>> {
    let refs: Vec<&Buffer> = inputs.iter().collect();
    e.execute_with(&refs, &[], opts).unwrap().iter().map(|b| b.to_vec::<f32>().unwrap()).collect()
}

pub fn close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

/// The jit plans modules with AllReduce itself (no interpreter fallback).
fn planned(name: &str, e: &Arc<dyn Executable>) {
    if name == "jit" {
        let report = e.compile_report().expect("jit reports its plan");
        assert_eq!(report.execution.interpreted, None, "jit handed the module to the interpreter");
    }
}

/// `relu(x·w + b)` for row-major `x [rows, k]`, `w [k, n]`, in f64.
fn dense(x: &[f32], w: &[f32], b: &[f32], rows: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0f64; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let s: f64 = (0..k).map(|i| x[r * k + i] as f64 * w[i * n + j] as f64).sum::<f64>() + b[j] as f64;
            y[r * n + j] = s.max(0.0);
        }
    }
    y
}

/// Data-parallel inference: each rank runs `relu(x·W + b)` summed over its share of the batch;
/// the all-reduced sums equal the whole batch's, on the naive loop and on one process.
pub fn data_parallel(name: &str, comm: &Arc<dyn Communicator>) {
    let (p, r) = (comm.size(), comm.rank());
    let (per, k, n) = (3, 16, 8);
    let batch = per * p;
    let (x, w, b) = (data(batch * k, 1), data(k * n, 2), data(n, 3));
    let be = backend(name);
    let model = |rows: usize, reduce: bool| {
        let (w, b) = (w.clone(), b.clone());
        compile(&be, move |f| {
            let xv = f.parameter("x", f32s(&[rows, k]))?;
            let wv = f.constant(&w, &[k, n])?;
            let bv = f.constant(&b, &[n])?;
            let h = f.fused_dense(xv, wv, Some(bv), Activation::Relu, DenseLayout::InputOutputs)?;
            let s = f.reduce_sum(h, &[0])?;
            if reduce { f.all_reduce(&[s], ArithReduce::Sum, &[]) } else { Ok(vec![s]) }
        })
    };
    let spmd = model(per, true);
    planned(name, &spmd);
    let mine = Buffer::from_slice(&x[r * per * k..(r + 1) * per * k], &[per, k]).unwrap();
    let got = run(&spmd, &[mine], &with(comm));
    let y = dense(&x, &w, &b, batch, k, n);
    let want: Vec<f64> = (0..n).map(|j| (0..batch).map(|i| y[i * n + j]).sum()).collect();
    close("data-parallel", &got[0], &want);
    let single = run(&model(batch, false), &[Buffer::from_slice(&x, &[batch, k]).unwrap()], &ExecOptions::default());
    close("data-parallel vs one process", &got[0], &single[0].iter().map(|&v| v as f64).collect::<Vec<_>>());
}

/// Gradient all-reduce: each rank computes the least-squares gradient `xᵀ(x·w − y)` of its share
/// of the batch; the all-reduced Sum is the whole batch's gradient, the Mean (Sum × 1/size inside
/// the module) its average over ranks.
pub fn gradient(name: &str, comm: &Arc<dyn Communicator>) {
    let (p, r) = (comm.size(), comm.rank());
    let (per, k) = (4, 6);
    let batch = per * p;
    let (x, w, y) = (data(batch * k, 4), data(k, 5), data(batch, 6));
    let be = backend(name);
    let inv = vec![1.0 / p as f32; k];
    let e = compile(&be, |f| {
        let xv = f.parameter("x", f32s(&[per, k]))?;
        let yv = f.parameter("y", f32s(&[per, 1]))?;
        let wv = f.constant(&w, &[k, 1])?;
        let err = f.sub(f.matmul(xv, wv)?, yv)?;
        let g = f.matmul(f.transpose(xv, &[1, 0])?, err)?;
        let g = f.reshape(g, &[k as i64])?;
        let sum = f.all_reduce(&[g], ArithReduce::Sum, &[])?[0];
        let mean = f.mul(sum, f.constant(&inv, &[k])?)?;
        Ok(vec![sum, mean])
    });
    planned(name, &e);
    let xs = Buffer::from_slice(&x[r * per * k..(r + 1) * per * k], &[per, k]).unwrap();
    let ys = Buffer::from_slice(&y[r * per..(r + 1) * per], &[per, 1]).unwrap();
    let got = run(&e, &[xs, ys], &with(comm));
    let mut want = vec![0f64; k];
    for i in 0..batch {
        let err: f64 = (0..k).map(|j| x[i * k + j] as f64 * w[j] as f64).sum::<f64>() - y[i] as f64;
        for (j, g) in want.iter_mut().enumerate() {
            *g += x[i * k + j] as f64 * err;
        }
    }
    close("gradient sum", &got[0], &want);
    close("gradient mean", &got[1], &want.iter().map(|g| g / p as f64).collect::<Vec<_>>());
}

/// Tensor parallelism: `W1 [k, hidden]` split by columns (each rank's FusedDense computes its
/// slice of the hidden layer, gathered with `all_gather` and compared), `W2` split by rows, the
/// partial products all-reduced (Megatron's MLP); equals the whole MLP.
pub fn tensor_parallel(name: &str, comm: &Arc<dyn Communicator>) {
    let (p, r) = (comm.size(), comm.rank());
    let (rows, k, per, n) = (5, 12, 4, 6);
    let hidden = per * p;
    let (x, w1, b1, w2) = (data(rows * k, 7), data(k * hidden, 8), data(hidden, 9), data(hidden * n, 10));
    let cols = |m: &[f32], width: usize| -> Vec<f32> {
        m.chunks(width).flat_map(|row| row[r * per..(r + 1) * per].to_vec()).collect()
    };
    let (w1r, b1r) = (cols(&w1, hidden), b1[r * per..(r + 1) * per].to_vec());
    let w2r = w2[r * per * n..(r + 1) * per * n].to_vec();
    let be = backend(name);
    let e = compile(&be, |f| {
        let xv = f.parameter("x", f32s(&[rows, k]))?;
        let h = f.fused_dense(
            xv,
            f.constant(&w1r, &[k, per])?,
            Some(f.constant(&b1r, &[per])?),
            Activation::Relu,
            DenseLayout::InputOutputs,
        )?;
        let y = f.fused_dense(h, f.constant(&w2r, &[per, n])?, None, Activation::None, DenseLayout::InputOutputs)?;
        Ok(vec![h, f.all_reduce(&[y], ArithReduce::Sum, &[])?[0]])
    });
    planned(name, &e);
    let got = run(&e, &[Buffer::from_slice(&x, &[rows, k]).unwrap()], &with(comm));
    let h = dense(&x, &w1, &b1, rows, k, hidden);
    // The column slices, gathered: rank-major [p, rows, per] → the hidden layer [rows, hidden].
    let mut gathered = vec![0u8; got[0].len() * 4 * p];
    let slice: Vec<u8> = got[0].iter().flat_map(|v| v.to_le_bytes()).collect();
    comm.all_gather(&[], &slice, &mut gathered).unwrap();
    let g: Vec<f32> = gathered.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let whole: Vec<f32> =
        (0..rows * hidden).map(|i| g[(i % hidden / per) * rows * per + i / hidden * per + i % per]).collect();
    close("column-split hidden layer", &whole, &h);
    let plain: Vec<f64> =
        (0..rows * n).map(|i| (0..hidden).map(|j| h[i / n * hidden + j] * w2[j * n + i % n] as f64).sum()).collect();
    close("tensor-parallel MLP", &got[1], &plain);
}
