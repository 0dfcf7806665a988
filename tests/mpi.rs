//! The SPMD scenarios of tests/common/spmd.rs (data-parallel inference, gradient all-reduce, a
//! tensor-parallel MLP split by columns) on `MpiCommunicator`, one process per rank, on both
//! backends. Optional (feature `mpi`, an MPI library); run it under `mpirun` (docs/distributed.md):
//!
//! ```text
//! cargo build --features mpi --test mpi
//! mpirun --allow-run-as-root -np 2 target/debug/deps/mpi-XXXX
//! ```
//!
//! Without the harness: every rank must run the same collectives in the same order, which the
//! test harness's parallel threads would not; run alone it is a world of one rank.

#![cfg(feature = "mpi")]

#[path = "common/spmd.rs"]
mod spmd;

use std::sync::Arc;

use tensorjit::DType;
use tensorjit::api::collective::Communicator;
use tensorjit::backends::mpi::MpiCommunicator;
use tensorjit::ir::op::ArithReduce;

fn main() {
    let comm: Arc<dyn Communicator> = Arc::new(MpiCommunicator::init().expect("MPI initialises"));
    let mut passed = 0;
    for name in spmd::BACKENDS {
        spmd::data_parallel(name, &comm);
        spmd::gradient(name, &comm);
        spmd::tensor_parallel(name, &comm);
        passed += 3;
    }
    // The communicator's own checks: groups of one rank each, and mismatched sizes → Err on all.
    let groups: Vec<Vec<usize>> = (0..comm.size()).map(|r| vec![r]).collect();
    let mine = (comm.rank() as f32 + 1.5).to_le_bytes();
    let mut out = [0u8; 4];
    comm.all_reduce(&groups, DType::Float32, ArithReduce::Sum, &mine, &mut out).unwrap();
    assert_eq!(out, mine, "a group of one is the identity");
    if comm.size() > 1 {
        let send = vec![0u8; 4 * (comm.rank() + 1)];
        let mut recv = send.clone();
        assert!(comm.all_reduce(&[], DType::Float32, ArithReduce::Sum, &send, &mut recv).is_err());
        let bad = [vec![0]];
        assert!(comm.all_reduce(&bad, DType::Float32, ArithReduce::Sum, &mine, &mut out).is_err());
    }
    passed += 1;
    println!("mpi: rank {} of {}: {passed} passed, 0 failed", comm.rank(), comm.size());
}
