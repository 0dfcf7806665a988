#!/usr/bin/env bash
# All-reduce bandwidth beside the MPI library's own (docs/distributed.md): alternates
# benches/compare/allreduce.c (MPI_Allreduce) and examples/allreduce_bench.rs (tensorjit over MPI)
# ROUNDS times on NP ranks, pinned to CPUS; prints every line of every run ("<path> <bytes>
# <median s> <GB/s>"), then the best GB/s of each path and size.
# Usage: benches/compare/allreduce.sh [ROUNDS] [REPEATS]   (env NP=2 CPUS=0,1)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
REPEATS=${2:-10}
NP=${NP:-2}
CPUS=${CPUS:-0,1}
MPIRUN=(mpirun --oversubscribe -np "$NP")
if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
target=${CARGO_TARGET_DIR:-target}
cargo build --release --features mpi --example allreduce_bench
mpicc -O2 -o "$target/allreduce_c" benches/compare/allreduce.c
log=$(mktemp)
for _ in $(seq "$ROUNDS"); do
  taskset -c "$CPUS" "${MPIRUN[@]}" "$target/allreduce_c" "$REPEATS" | tee -a "$log"
  taskset -c "$CPUS" "${MPIRUN[@]}" "$target/release/examples/allreduce_bench" "$REPEATS" | tee -a "$log"
done
echo "best of $ROUNDS rounds (GB/s algorithm bandwidth; bus bandwidth = x 2(n-1)/n, n = $NP):"
awk '{ k = $1 " " $2; if (!(k in best) || $4 > best[k]) best[k] = $4 } END { for (k in best) print k, best[k] }' "$log" | sort -k2,2n -k1,1
rm -f "$log"
