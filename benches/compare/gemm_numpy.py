#!/usr/bin/env python3
"""gemm_numpy.py: the tjgemm shapes timed with numpy (OpenBLAS/MKL) for a side-by-side table.

Usage:
    cargo build --release --bin tjgemm
    python3 benches/compare/gemm_numpy.py [--tjgemm target/release/tjgemm | --tjgemm-output FILE] [--quick]

Runs numpy's float32 matmul on the same shapes with 1 and 2 BLAS threads (threadpoolctl when
installed, else OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set in a child process), takes the best of
repeated runs, and, when the tjgemm binary is given, runs it and prints both columns and the
ratio tensorjit / numpy.
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


def time_numpy(m, n, k, budget=0.5):
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.empty((m, n), dtype=np.float32)
    np.matmul(a, b, out=c)
    best, start, runs = float("inf"), time.perf_counter(), 0
    while runs < 3 or (time.perf_counter() - start < budget and runs < 1000):
        t = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t)
        runs += 1
    return 2.0 * m * n * k / best / 1e9


def child(threads, quick):
    """Prints 'kind m n k gflops' lines for numpy with `threads` BLAS threads."""
    for kind, m, n, k in shapes(quick):
        print(kind, m, n, k, f"{time_numpy(m, n, k):.2f}", flush=True)


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


def tjgemm_table(binary, quick, saved=None):
    """Parses tjgemm's output into {(kind, m, n, k): (gflops_1thread, gflops_2threads)}."""
    if saved:
        out = open(saved).read()
    else:
        args = [binary, "--cpu-time"] + (["--quick"] if quick else [])
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    table, section = {}, ""
    for line in out.splitlines():
        if line.startswith("## "):
            section = line
            continue
        f = line.split()
        if "squares" in section and len(f) == 4 and f[0].isdigit():
            s = int(f[0])
            table[("sq", s, s, s)] = (float(f[2]), None)
        elif "transformer" in section and len(f) == 8 and f[0].isdigit():
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
    a = ap.parse_args()
    if a.child:
        child(a.child, a.quick)
        return
    np1, np2 = numpy_table(1, a.quick), numpy_table(2, a.quick)
    if a.tjgemm or a.tjgemm_output:
        tj, peak = tjgemm_table(a.tjgemm, a.quick, a.tjgemm_output)
    else:
        tj, peak = {}, None
    if peak:
        print(f"# tjgemm FMA peak: {peak:.1f} GFLOP/s (1 thread)")
    print(f"{'shape':>20} {'numpy t1':>9} {'tj t1':>8} {'ratio':>6} {'numpy t2':>9} {'tj t2':>8} {'ratio':>6}")
    for key in shapes(a.quick):
        kind, m, n, k = key
        t1, t2 = tj.get(key, (None, None))
        r1 = f"{t1 / np1[key]:.2f}" if t1 else "-"
        r2 = f"{t2 / np2[key]:.2f}" if t2 else "-"
        print(
            f"{f'{m}x{k}x{n}':>20} {np1[key]:>9.1f} {t1 if t1 else float('nan'):>8.1f} {r1:>6} "
            f"{np2[key]:>9.1f} {t2 if t2 else float('nan'):>8.1f} {r2:>6}"
        )


if __name__ == "__main__":
    main()
