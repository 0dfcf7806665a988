//! Data parallelism over MPI (docs/distributed.md): every rank holds the whole model and its own
//! share of the batch.
//!
//! 1. Inference: each rank runs a two-layer MLP on its rows; the predictions are gathered and the
//!    summed loss is all-reduced inside the module.
//! 2. Training: linear least squares by gradient descent; each rank computes the gradient of its
//!    rows, the module all-reduces it (Sum) and takes the step, so every rank keeps the same
//!    weights.
//!
//! Each rank also runs both on the whole batch in one process (no communicator) and fails if the
//! results differ by more than float rounding:
//!
//! ```text
//! cargo build --features mpi --example data_parallel
//! mpirun --allow-run-as-root -np 2 target/debug/examples/data_parallel
//! ```

#[path = "common/spmd.rs"]
mod spmd;

use std::sync::Arc;

use spmd::{check, values};
use tensorjit::api::collective::Communicator;
use tensorjit::backends::mpi::MpiCommunicator;
use tensorjit::ir::op::{Activation, ArithReduce, DenseLayout};
use tensorjit::{Backend, Buffer, DType, ExecOptions, Executable, Shape};

/// Rows of the batch per rank, input features, hidden units, outputs.
const PER: usize = 8;
const K: usize = 32;
const HIDDEN: usize = 64;
const N: usize = 4;
/// Gradient-descent steps and their size.
const STEPS: usize = 20;
const LR: f32 = 0.01;

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(DType::Float32, &dims.iter().map(|&d| d as i64).collect::<Vec<_>>())
}

/// `relu(x·W1 + b1)·W2 + b2` for `rows` rows and the sum of the squared outputs (the "loss"),
/// all-reduced across the ranks when `reduce`.
fn mlp(jit: &Arc<dyn Backend>, rows: usize, reduce: bool) -> tensorjit::Result<Arc<dyn Executable>> {
    let builder = jit.builder("mlp");
    let f = builder.main();
    let x = f.parameter("x", f32s(&[rows, K]))?;
    let w1 = f.constant(&values(K * HIDDEN, 1), &[K, HIDDEN])?;
    let b1 = f.constant(&values(HIDDEN, 2), &[HIDDEN])?;
    let h = f.fused_dense(x, w1, Some(b1), Activation::Relu, DenseLayout::InputOutputs)?;
    let w2 = f.constant(&values(HIDDEN * N, 3), &[HIDDEN, N])?;
    let b2 = f.constant(&values(N, 4), &[N])?;
    let y = f.fused_dense(h, w2, Some(b2), Activation::None, DenseLayout::InputOutputs)?;
    let mut loss = f.reduce_sum(f.mul(y, y)?, &[0, 1])?;
    if reduce {
        loss = f.all_reduce(&[loss], ArithReduce::Sum, &[])?[0];
    }
    f.return_(&[y, loss])?;
    builder.compile()
}

/// One gradient-descent step of least squares `½‖x·w − t‖²`: `w − lr·xᵀ(x·w − t)`, the gradient
/// summed across the ranks when `reduce`.
fn step(jit: &Arc<dyn Backend>, rows: usize, reduce: bool) -> tensorjit::Result<Arc<dyn Executable>> {
    let builder = jit.builder("sgd");
    let f = builder.main();
    let x = f.parameter("x", f32s(&[rows, K]))?;
    let t = f.parameter("t", f32s(&[rows, 1]))?;
    let w = f.parameter("w", f32s(&[K, 1]))?;
    let err = f.sub(f.matmul(x, w)?, t)?;
    let mut grad = f.matmul(f.transpose(x, &[1, 0])?, err)?;
    if reduce {
        grad = f.all_reduce(&[grad], ArithReduce::Sum, &[])?[0];
    }
    let next = f.sub(w, f.mul(grad, f.constant(&[LR; K], &[K, 1])?)?)?;
    f.return_(&[next])?;
    builder.compile()
}

fn run(e: &Arc<dyn Executable>, inputs: &[&Buffer], opts: &ExecOptions) -> tensorjit::Result<Vec<Vec<f32>>> {
    e.execute_with(inputs, &[], opts)?.iter().map(|b| b.to_vec::<f32>()).collect()
}

fn main() -> tensorjit::Result<()> {
    let comm: Arc<dyn Communicator> = Arc::new(MpiCommunicator::init()?);
    let (rank, size) = (comm.rank(), comm.size());
    let batch = PER * size;
    let jit = tensorjit::new_with_config("jit")?;
    let ranks = ExecOptions { communicator: Some(comm.clone()), ..ExecOptions::default() };
    let alone = ExecOptions::default();
    let x = values(batch * K, 5);
    let mine = Buffer::from_slice(&x[rank * PER * K..(rank + 1) * PER * K], &[PER, K])?;
    let whole = Buffer::from_slice(&x, &[batch, K])?;

    // Inference: this rank's predictions, gathered in rank order, and the all-reduced loss.
    let out = run(&mlp(&jit, PER, true)?, &[&mine], &ranks)?;
    let bytes: Vec<u8> = out[0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut all = vec![0u8; bytes.len() * size];
    comm.all_gather(&[], &bytes, &mut all)?;
    let all: Vec<f32> = all.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let one = run(&mlp(&jit, batch, false)?, &[&whole], &alone)?;
    let d_pred = check("data-parallel predictions", &all, &one[0])?;
    let d_loss = check("data-parallel loss", &out[1], &one[1])?;

    // Training: the same weights on every rank, step after step.
    let t = values(batch, 6);
    let (t_mine, t_whole) =
        (Buffer::from_slice(&t[rank * PER..(rank + 1) * PER], &[PER, 1])?, Buffer::from_slice(&t, &[batch, 1])?);
    let (sgd, sgd_one) = (step(&jit, PER, true)?, step(&jit, batch, false)?);
    let (mut w, mut w_one) = (vec![0f32; K], vec![0f32; K]);
    for _ in 0..STEPS {
        w = run(&sgd, &[&mine, &t_mine, &Buffer::from_slice(&w, &[K, 1])?], &ranks)?.remove(0);
        w_one = run(&sgd_one, &[&whole, &t_whole, &Buffer::from_slice(&w_one, &[K, 1])?], &alone)?.remove(0);
    }
    let d_w = check("data-parallel training", &w, &w_one)?;
    println!(
        "rank {rank} of {size}: {batch} rows; loss {:.4} (one process {:.4}); largest relative difference: \
         predictions {d_pred:e}, loss {d_loss:e}, weights after {STEPS} steps {d_w:e}",
        out[1][0], one[1][0]
    );
    Ok(())
}
