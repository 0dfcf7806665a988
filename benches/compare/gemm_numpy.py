#!/usr/bin/env python3
"""gemm_numpy.py: the tjgemm shapes timed with numpy (OpenBLAS/MKL) for a side-by-side table.

Usage:
    cargo build --release --features internals --bin tjgemm
    python3 benches/compare/gemm_numpy.py [--tjgemm target/release/tjgemm | --tjgemm-output FILE] [--quick]
        [--rounds R] [--prepacked]

Runs numpy's float32 matmul on the same shapes with 1 and 2 BLAS threads (threadpoolctl when
installed, else OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set in a child process), takes the best of
repeated runs (1 thread: thread CPU time, as `tjgemm --cpu-time`; 2 threads: wall clock), and,
when the tjgemm binary is given, runs it and prints both columns and the
ratio tensorjit / numpy. With --prepacked, tjgemm packs B once before timing (constant weights,
as the jit backend does at compile time); numpy has no such mode and packs on every call.
"""
import argparse
import os
import re
import subprocess
import sys
import time

SQUARES = [64, 128, 256, 512, 1024, 2048]
MS, KS, NS = [1, 16, 128, 512, 4096], [384, 1536], [384, 1536]


def shapes(quick):
    sq = [64, 256, 512, 1024] if quick else SQUARES
    ms = [1, 16, 128, 512] if quick else MS
    out = [("sq", s, s, s) for s in sq]
    out += [("tr", m, n, k) for m in ms for k in KS for n in NS]
    return out


def time_numpy(m, n, k, budget=0.5, clock=time.perf_counter):
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), dtype=np.float32)
    np.matmul(a, b, out=c)
    best, start, runs = float("inf"), time.perf_counter(), 0
    while runs < 3 or (time.perf_counter() - start < budget and runs < 1000):
        t = clock()
        np.matmul(a, b, out=c)
        best = min(best, clock() - t)
        runs += 1
    return 2.0 * m * n * k / best / 1e9


def child(threads, quick):
    """Prints 'kind m n k gflops' lines for numpy with `threads` BLAS threads."""
    # One BLAS thread runs on this thread: time it in thread CPU time, like `tjgemm --cpu-time`
    # (preemption by other processes excluded on both sides); two threads: wall clock.
    clock = time.thread_time if threads == 1 else time.perf_counter
    for kind, m, n, k in shapes(quick):
        print(kind, m, n, k, f"{time_numpy(m, n, k, clock=clock):.2f}", flush=True)


def numpy_table(threads, quick):
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    args = [sys.executable, __file__, "--child", str(threads)] + (["--quick"] if quick else [])
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        kind, m, n, k, g = line.split()
        table[(kind, int(m), int(n), int(k))] = float(g)
    return table


def tjgemm_table(binary, quick, saved=None, prepacked=False):
    """Parses tjgemm's output into {(kind, m, n, k): (gflops_1thread, gflops_2threads)}."""
    if saved:
        out = open(saved).read()
    else:
        args = [binary, "--cpu-time"] + (["--quick"] if quick else []) + (["--prepacked"] if prepacked else [])
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    table, section = {}, ""
    for line in out.splitlines():
        if line.startswith("## "):
            section = line
            continue
        f = line.split()
        if "squares" in section and len(f) >= 6 and f[0].isdigit():
            s = int(f[0])
            table[("sq", s, s, s)] = (float(f[2]), float(f[4]))
        elif "transformer" in section and len(f) >= 8 and f[0].isdigit():
            m, k, n = int(f[0]), int(f[1]), int(f[2])
            table[("tr", m, n, k)] = (float(f[4]), float(f[6]))
    peak = re.search(r"FMA peak.*?: ([0-9.]+) GFLOP/s", out)
    return table, (float(peak.group(1)) if peak else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tjgemm", default=None)
    ap.add_argument("--tjgemm-output", default=None, help="a saved tjgemm output instead of running it")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1, help="alternate numpy/tjgemm runs, keep the best")
    ap.add_argument("--prepacked", action="store_true", help="tjgemm packs B once, outside the timing")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.quick)
        return
    # Alternate numpy and tjgemm runs `rounds` times and keep each shape's best (the machine may
    # be shared); the spread (worst/best) of each column is printed as a noise figure.
    runs_np1, runs_np2, runs_tj, peak = [], [], [], None
    for _ in range(a.rounds):
        runs_np1.append(numpy_table(1, a.quick))
        runs_np2.append(numpy_table(2, a.quick))
        if a.tjgemm or (a.tjgemm_output and not runs_tj):
            t, p = tjgemm_table(a.tjgemm, a.quick, a.tjgemm_output, a.prepacked)
            runs_tj.append(t)
            peak = max(peak or 0.0, p or 0.0) or None

    def best(runs, pick):
        out, spread = {}, {}
        for key in runs[0] if runs else []:
            vals = [pick(r[key]) for r in runs if key in r and pick(r[key])]
            if vals:
                out[key] = max(vals)
                spread[key] = min(vals) / max(vals)
        return out, spread

    np1, sp_np1 = best(runs_np1, lambda v: v)
    np2, sp_np2 = best(runs_np2, lambda v: v)
    tj1, sp_tj1 = best(runs_tj, lambda v: v[0])
    tj2, sp_tj2 = best(runs_tj, lambda v: v[1])
    tj = {key: (tj1.get(key), tj2.get(key)) for key in set(tj1) | set(tj2)}
    if peak:
        print(f"# tjgemm FMA peak: {peak:.1f} GFLOP/s (1 thread)")
    print(f"# best of {a.rounds} round(s); 'spread' = worst/best over the rounds (1.00 = no noise)")
    if a.prepacked:
        print("# tj columns: B pre-packed once (constant weights); numpy packs on every call")
    print(
        f"{'shape (MxKxN)':>20} {'numpy t1':>9} {'tj t1':>8} {'ratio':>6} {'numpy t2':>9} {'tj t2':>8} {'ratio':>6}"
        f" {'spread np1/tj1/np2/tj2':>24}"
    )
    for key in shapes(a.quick):
        kind, m, n, k = key
        t1, t2 = tj.get(key, (None, None))
        r1 = f"{t1 / np1[key]:.2f}" if t1 else "-"
        r2 = f"{t2 / np2[key]:.2f}" if t2 else "-"
        sp = "/".join(f"{d.get(key, float('nan')):.2f}" for d in (sp_np1, sp_tj1, sp_np2, sp_tj2))
        print(
            f"{f'{m}x{k}x{n}':>20} {np1[key]:>9.1f} {t1 if t1 else float('nan'):>8.1f} {r1:>6} "
            f"{np2[key]:>9.1f} {t2 if t2 else float('nan'):>8.1f} {r2:>6} {sp:>24}"
        )


if __name__ == "__main__":
    main()
