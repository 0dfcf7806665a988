#!/usr/bin/env python3
"""Convnet throughput: tensorjit beside onnxruntime on the same ONNX exports, same machine, same run.

Optional, never part of the tests. Needs numpy, onnxruntime, the release CLI and the exports of
tools/onnx-models.py (resnet18, mobilenet_v2; TorchScript exporter, NCHW, batch 1):

    cargo build --release --bin tensorjit
    python3 tools/onnx-models.py --out /work/models --models resnet18,mobilenet_v2 --exporters torchscript
    python3 tools/bench-convnets.py [--models-dir /work/models] [--threads 1,2] [--rounds 2] [--batch 8]

`--batch N` repeats the export's image N times (input-bN.npy beside it; the exports have a
dynamic batch axis) and reports images/s over the batch.

Per model and thread count, each framework runs in a fresh process pinned with taskset (1 thread:
CPU 0; 2 threads: CPUs 0,1); rounds alternate the frameworks and each keeps the best median.
tensorjit: `tensorjit --json bench model.onnx -i input=input.npy -b jit:parallelism=T`;
onnxruntime: CPU provider, ORT_ENABLE_ALL, intra-op threads T, inter-op 1. Prints images/s and
the ratio tensorjit / onnxruntime. The single-convolution figures against torch/oneDNN come from
/work/shared/bench/conv_bench.py beside `tensorjit bench` on the same shape.
"""

import argparse
import json
import os
import subprocess
import sys

ORT_CHILD = r"""
import sys, time, numpy as np, onnxruntime as ort
path, inp, threads, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
x = np.load(inp)
name = s.get_inputs()[0].name
for _ in range(2):
    s.run(None, {name: x})
ts = []
for _ in range(reps):
    t = time.perf_counter()
    s.run(None, {name: x})
    ts.append(time.perf_counter() - t)
print(sorted(ts)[len(ts) // 2] * 1e3)
"""


def pin(threads):
    return ["taskset", "-c", "0" if threads == 1 else "0,1"]


def env(threads):
    e = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        e[k] = str(threads)
    return e


def tensorjit_ms(tj, model, inp, threads, reps):
    cmd = pin(threads) + [tj, "--json", "bench", model, "-i", f"input={inp}", "-r", str(reps),
                          "-b", f"jit:parallelism={threads}"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(threads), check=True).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    return rec["repeat"]["median_ms"]


def ort_ms(model, inp, threads, reps):
    cmd = pin(threads) + [sys.executable, "-c", ORT_CHILD, model, inp, str(threads), str(reps)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(threads), check=True).stdout
    return float(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default="/work/models")
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tensorjit", default="target/release/tensorjit")
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    rows = []
    for name in a.models.split(","):
        d = os.path.join(a.models_dir, f"{name}-torchscript")
        model, inp = os.path.join(d, "model.onnx"), os.path.join(d, "input.npy")
        if a.batch > 1:
            import numpy as np

            x = np.load(inp)
            inp = os.path.join(d, f"input-b{a.batch}.npy")
            np.save(inp, np.repeat(x[:1], a.batch, axis=0))
        for t in [int(x) for x in a.threads.split(",")]:
            best = {"tensorjit": float("inf"), "onnxruntime": float("inf")}
            for r in range(a.rounds):
                for fw in best:
                    ms = tensorjit_ms(a.tensorjit, model, inp, t, a.reps) if fw == "tensorjit" else ort_ms(model, inp, t, a.reps)
                    print(f"  {name} T={t} round {r + 1} {fw}: {ms:.2f} ms", flush=True)
                    best[fw] = min(best[fw], ms)
            rows.append((name, t, a.batch * 1e3 / best["tensorjit"], a.batch * 1e3 / best["onnxruntime"]))
    print(f"batch {a.batch}")
    print("| model | threads | tensorjit images/s | onnxruntime images/s | tensorjit / onnxruntime |")
    print("|---|---|---|---|---|")
    for name, t, tj, o in rows:
        print(f"| {name} | {t} | {tj:.1f} | {o:.1f} | {tj / o:.2f} |")


if __name__ == "__main__":
    main()
