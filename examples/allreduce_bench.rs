//! All-reduce bandwidth (f32 Sum, 1 MiB to 256 MiB) through `MpiCommunicator`, beside
//! benches/compare/allreduce.c (`MPI_Allreduce` itself; docs/distributed.md):
//!
//! ```text
//! cargo build --release --features mpi --example allreduce_bench
//! mpirun --allow-run-as-root -np 2 target/release/examples/allreduce_bench [repeats]
//! ```
//!
//! Prints, on rank 0, `<path> <bytes> <median seconds> <algorithm bandwidth GB/s>` per size for
//! two paths: `comm` (`Communicator::all_reduce` on byte buffers) and `jit` (an execution of a
//! module whose one node is AllReduce: adds the output allocation and the executor).

use std::sync::Arc;
use std::time::Instant;

use tensorjit::api::collective::Communicator;
use tensorjit::backends::mpi::MpiCommunicator;
use tensorjit::ir::op::ArithReduce;
use tensorjit::{Buffer, DType, ExecOptions, Shape};

/// The slowest rank's time of each repeat, sorted; the median is reported.
fn median(comm: &dyn Communicator, times: &[f64]) -> f64 {
    let bytes: Vec<u8> = times.iter().flat_map(|t| t.to_le_bytes()).collect();
    let mut max = vec![0u8; bytes.len()];
    comm.all_reduce(&[], DType::Float64, ArithReduce::Max, &bytes, &mut max).unwrap();
    let mut t: Vec<f64> = max.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn barrier(comm: &dyn Communicator) {
    let mut all = vec![0u8; comm.size()];
    comm.all_gather(&[], &[1], &mut all).unwrap();
}

fn main() -> tensorjit::Result<()> {
    let repeats: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10).clamp(1, 1000);
    let comm: Arc<dyn Communicator> = Arc::new(MpiCommunicator::init()?);
    let jit = tensorjit::new_with_config("jit")?;
    let opts = ExecOptions { communicator: Some(comm.clone()), ..ExecOptions::default() };
    let mut bytes = 1usize << 20;
    while bytes <= 256 << 20 {
        let n = bytes / 4;
        let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32 + comm.rank() as f32).collect();
        let send: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut recv = vec![0u8; bytes];
        let builder = jit.builder("allreduce");
        let main = builder.main();
        let p = main.parameter("x", Shape::new(DType::Float32, &[n as i64]))?;
        let outs = main.all_reduce(&[p], ArithReduce::Sum, &[])?;
        main.return_(&outs)?;
        let exe = builder.compile()?;
        let input = Buffer::from_slice(&x, &[n])?;
        // Warm-up of both paths, then the two paths alternate repeat by repeat.
        comm.all_reduce(&[], DType::Float32, ArithReduce::Sum, &send, &mut recv)?;
        exe.execute_with(&[&input], &[], &opts)?;
        let (mut t_comm, mut t_jit) = (vec![], vec![]);
        for _ in 0..repeats {
            barrier(&*comm);
            let t = Instant::now();
            comm.all_reduce(&[], DType::Float32, ArithReduce::Sum, &send, &mut recv)?;
            t_comm.push(t.elapsed().as_secs_f64());
            barrier(&*comm);
            let t = Instant::now();
            let out = exe.execute_with(&[&input], &[], &opts)?;
            t_jit.push(t.elapsed().as_secs_f64());
            drop(out);
        }
        // Element 1 is 1 + rank on each rank.
        let want = comm.size() as f32 + (comm.size() * (comm.size() - 1) / 2) as f32;
        assert_eq!(f32::from_le_bytes(recv[4..8].try_into().unwrap()), want, "wrong sum");
        for (path, times) in [("comm", &t_comm), ("jit", &t_jit)] {
            let med = median(&*comm, times);
            if comm.rank() == 0 {
                println!("{path} {bytes} {med:.6} {:.3}", bytes as f64 / med / 1e9);
            }
        }
        bytes *= 4;
    }
    Ok(())
}
