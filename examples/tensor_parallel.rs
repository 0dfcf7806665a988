//! Tensor parallelism over MPI: a two-layer MLP whose first FusedDense is split by columns
//! (each rank holds `W1[:, its columns]` and computes its slice of the hidden layer) and whose
//! second is split by rows, the partial products summed by AllReduce (docs/distributed.md):
//!
//! ```text
//! cargo build --features mpi --example tensor_parallel
//! mpirun --allow-run-as-root -np 2 target/debug/examples/tensor_parallel
//! ```
//!
//! Every rank also runs the whole MLP in one process and fails if the results differ by more than
//! float rounding.

#[path = "common/spmd.rs"]
mod spmd;

use std::sync::Arc;

use spmd::{check, values};
use tensorjit::api::collective::Communicator;
use tensorjit::backends::mpi::MpiCommunicator;
use tensorjit::ir::op::{Activation, ArithReduce, DenseLayout};
use tensorjit::{Buffer, DType, ExecOptions, Shape};

const ROWS: usize = 4;
const K: usize = 64;
const HIDDEN: usize = 256;
const N: usize = 32;

/// `relu(x·W1[:, cols] + b1[cols]) · W2[cols, :]`, all-reduced when `comm` is given.
fn mlp(cols: std::ops::Range<usize>, comm: Option<Arc<dyn Communicator>>) -> tensorjit::Result<Vec<f32>> {
    let (w1, b1, w2, x) = (values(K * HIDDEN, 1), values(HIDDEN, 2), values(HIDDEN * N, 3), values(ROWS * K, 4));
    let w1c: Vec<f32> = w1.chunks(HIDDEN).flat_map(|row| row[cols.clone()].to_vec()).collect();
    let w2r = w2[cols.start * N..cols.end * N].to_vec();
    let width = cols.len();
    let jit = tensorjit::new_with_config("jit")?;
    let builder = jit.builder("mlp");
    let f = builder.main();
    let xv = f.parameter("x", Shape::new(DType::Float32, &[ROWS as i64, K as i64]))?;
    let b = f.constant(&b1[cols], &[width])?;
    let h = f.fused_dense(xv, f.constant(&w1c, &[K, width])?, Some(b), Activation::Relu, DenseLayout::InputOutputs)?;
    let mut y = f.fused_dense(h, f.constant(&w2r, &[width, N])?, None, Activation::None, DenseLayout::InputOutputs)?;
    if comm.is_some() {
        y = f.all_reduce(&[y], ArithReduce::Sum, &[])?[0];
    }
    f.return_(&[y])?;
    let exe = builder.compile()?;
    let opts = ExecOptions { communicator: comm, ..ExecOptions::default() };
    exe.execute_with(&[&Buffer::from_slice(&x, &[ROWS, K])?], &[], &opts)?[0].to_vec::<f32>()
}

fn main() -> tensorjit::Result<()> {
    let comm: Arc<dyn Communicator> = Arc::new(MpiCommunicator::init()?);
    let (rank, size) = (comm.rank(), comm.size());
    let per = HIDDEN / size;
    let cols = rank * per..if rank + 1 == size { HIDDEN } else { (rank + 1) * per };
    println!("rank {rank} of {size}: hidden columns {cols:?}");
    let y = mlp(cols, Some(comm))?;
    let whole = mlp(0..HIDDEN, None)?;
    let diff = check("tensor_parallel", &y, &whole)?;
    println!("rank {rank}: y[0, ..4] = {:?}; largest relative difference from one process: {diff:e}", &y[..4]);
    Ok(())
}
