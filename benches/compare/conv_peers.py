#!/usr/bin/env python3
"""conv_peers.py: the issue's convolution shapes and convnets, tensorjit beside onnxruntime and torch.

Usage:
    cargo build --release --bin tensorjit
    python3 benches/compare/conv_peers.py [--tensorjit target/release/tensorjit] [--threads 1,2]
        [--rounds 3] [--shapes all|name,...] [--models DIR] [--batch 8] [--out FILE.md]

Each shape is one ONNX `Conv` (NCHW, weights as an initializer, no bias) written to a temporary
directory, so tensorjit and onnxruntime run the same file (tensorjit packs the constant filter
at compile time, onnxruntime reorders it to its blocked layout at session creation); torch runs
`F.conv2d` on the same arrays in NCHW and channels_last (oneDNN). tensorjit also runs the shape
channels-last: the Conv between `Transpose(x, [0, 3, 1, 2])` and `Transpose(y, [0, 2, 3, 1])` (a
TensorFlow export's form), which its layout pass turns into one channels-last convolution. Each
layout is compared with the peers in the same layout (onnxruntime, NCHW only, in both), and the
faster of each side with the faster of the other. With
--models DIR, ResNet-18 and MobileNetV2 (`DIR/{resnet18,mobilenet_v2}-torchscript/model.onnx`,
from tools/onnx-models.py) are timed too, tensorjit against onnxruntime, in images/s.

Every (framework, threads) figure comes from its own process pinned with `taskset` (CPU 0 for
1 thread, CPUs 0,1 for 2), frameworks alternate within each round, and the best of the rounds is
kept (the machine is shared: the best round is the least disturbed). tensorjit: `tensorjit --json
bench FILE -b jit:parallelism=T`, its minimum over the timed executions; the peers: minimum over
the same number of calls. Every framework first warms up for about `WARM_S` (0.2 s): the second
core of a freshly started process runs slowly for its first tens of milliseconds. When a C
compiler is present, the machine's FMA peak is measured beside them (../shared/bench/fma_peak.c
if found, else skipped).
Prints a markdown table: GFLOP/s (convs) or images/s (models) per framework and layout, and the
ratios of tensorjit to the best peer.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# name: (batch, cin, cout, h, w, k, stride, pad, groups)
SHAPES = {
    "3x3 64->64 56x56 b1": (1, 64, 64, 56, 56, 3, 1, 1, 1),
    "3x3 64->64 56x56 b8": (8, 64, 64, 56, 56, 3, 1, 1, 1),
    "1x1 256->64 56x56 b8": (8, 256, 64, 56, 56, 1, 1, 0, 1),
    "dw 3x3 32ch 112x112 b1": (1, 32, 32, 112, 112, 3, 1, 1, 32),
    "dw 3x3 32ch 112x112 b8": (8, 32, 32, 112, 112, 3, 1, 1, 32),
    "7x7/2 3->64 224x224 b1": (1, 3, 64, 224, 224, 7, 2, 3, 1),
    "7x7/2 3->64 224x224 b8": (8, 3, 64, 224, 224, 7, 2, 3, 1),
    "3x3/2 3->32 224x224 b1": (1, 3, 32, 224, 224, 3, 2, 1, 1),
    "3x3/2 3->32 224x224 b8": (8, 3, 32, 224, 224, 3, 2, 1, 1),
    # MobileNetV2's narrow layers (the channel-blocked depthwise path, folded 1x1 runs).
    "dw 3x3/2 576ch 14x14 b8": (8, 576, 576, 14, 14, 3, 2, 1, 576),
    "dw 3x3 960ch 7x7 b8": (8, 960, 960, 7, 7, 3, 1, 1, 960),
    "1x1 960->160 7x7 b8": (8, 960, 160, 7, 7, 1, 1, 0, 1),
}
# Seconds of warm-up before the timed calls, every framework (see `worker`, `warm_calls`).
WARM_S = 0.2

MODELS = {"ResNet-18": "resnet18-torchscript", "MobileNetV2": "mobilenet_v2-torchscript"}


def out_hw(s):
    n, ci, co, h, w, k, st, p, g = s
    return (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1


def flops(s):
    n, ci, co, h, w, k, st, p, g = s
    oh, ow = out_hw(s)
    return 2.0 * n * co * oh * ow * (ci // g) * k * k


def write_onnx(path, s, seed=0, nhwc=False):
    """The shape's Conv; `nhwc`: between Transpose(x, [0, 3, 1, 2]) and Transpose(y, [0, 2, 3, 1]),
    so that input and output are channels-last (as a TensorFlow export writes it)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    n, ci, co, h, w, k, st, p, g = s
    oh, ow = out_hw(s)
    wt = np.random.default_rng(seed).uniform(-1, 1, (co, ci // g, k, k)).astype(np.float32)
    x, y = ("xt", "yt") if nhwc else ("x", "y")
    nodes = [helper.make_node("Conv", [x, "w"], [y], kernel_shape=[k, k], pads=[p] * 4, strides=[st, st], group=g)]
    dims_in, dims_out = [n, ci, h, w], [n, co, oh, ow]
    if nhwc:
        nodes.insert(0, helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]))
        nodes.append(helper.make_node("Transpose", ["yt"], ["y"], perm=[0, 2, 3, 1]))
        dims_in, dims_out = [n, h, w, ci], [n, oh, ow, co]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims_in)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims_out)],
        initializer=[numpy_helper.from_array(wt, "w")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    save(m, path)


def pinned(cmd, threads):
    cpus = ",".join(str(i) for i in range(threads))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return subprocess.run(["taskset", "-c", cpus] + cmd, env=env, capture_output=True, text=True, check=False)


def worker(fw, threads, path, shape, repeat):
    """Runs in the pinned child: prints the minimum seconds per call."""
    import numpy as np

    if fw == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        # Models: symbolic axes (the batch) take the requested batch size.
        batch = shape["batch"] if isinstance(shape, dict) else 1
        dims = [d if isinstance(d, int) else batch for d in inp.shape]
        x = np.random.default_rng(1).uniform(0, 1, dims).astype(np.float32)
        call = lambda: sess.run(None, {inp.name: x})  # noqa: E731
    else:
        import torch
        import torch.nn.functional as F

        torch.set_num_threads(threads)
        n, ci, co, h, w, k, st, p, g = shape
        x = torch.rand(n, ci, h, w)
        wt = torch.rand(co, ci // g, k, k) * 2 - 1
        if fw == "torch_nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
            wt = wt.contiguous(memory_format=torch.channels_last)

        def call():
            with torch.no_grad():
                F.conv2d(x, wt, stride=st, padding=p, groups=g)

    # Warm-up by time (at least WARM_S and 2 calls): a short-lived process's second core is slow
    # for its first tens of milliseconds, which would otherwise decide the two-thread figures of
    # the small shapes.
    t0, calls = time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - t0 < WARM_S:
        call()
        calls += 1
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    print(best)


def warm_calls(shape, threads):
    """tensorjit's warm-up calls: about WARM_S of work at 250 GFLOP/s per thread (faster than it
    runs, so at least WARM_S), 2 to 3000 calls (models: 10)."""
    if not isinstance(shape, (tuple, list)):
        return 10
    est = flops(shape) / (250e9 * threads)
    return int(min(3000, max(2, WARM_S / est)))


def measure(fw, threads, path, shape, repeat, tj):
    if fw == "tensorjit":
        r = pinned(
            [tj, "--json", "bench", path, "-b", f"jit:parallelism={threads}", "--repeat", str(repeat), "--warmup",
             str(warm_calls(shape, threads)), "--fill", "random"],
            threads,
        )
        for line in r.stdout.splitlines():
            j = json.loads(line)
            if j.get("ok", True) and "repeat" in j:
                return j["repeat"]["min_ms"] / 1e3
        sys.stderr.write(f"tensorjit failed on {path}: {r.stdout[-400:]} {r.stderr[-400:]}\n")
        return None
    arg = json.dumps(shape if isinstance(shape, dict) else (list(shape) if shape else None))
    r = pinned([sys.executable, __file__, "--worker", fw, str(threads), path, arg, str(repeat)], threads)
    try:
        return float(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        sys.stderr.write(f"{fw} failed on {path}: {r.stderr[-400:]}\n")
        return None


def fma_peak():
    src = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "bench", "fma_peak.c")
    if not os.path.exists(src):
        return None
    exe = os.path.join(tempfile.gettempdir(), "tj_fma_peak")
    if subprocess.run(["cc", "-O2", "-march=native", src, "-o", exe], capture_output=True).returncode != 0:
        return None
    r = pinned([exe], 2)
    rows = [l.split(",") for l in r.stdout.strip().splitlines()[1:]]
    return ", ".join(f"{x[0]} {x[1]} thread(s) {x[2]} GFLOP/s" for x in rows if len(x) > 2)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        fw, threads, path, shape, repeat = sys.argv[2:7]
        worker(fw, int(threads), path, json.loads(shape), int(repeat))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensorjit", default="target/release/tensorjit")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--models", default=None, help="directory holding <model>-torchscript/model.onnx")
    ap.add_argument("--batch", type=int, default=8, help="model batch size")
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    a = ap.parse_args()
    names = list(SHAPES) if a.shapes == "all" else [s for s in a.shapes.split(",") if s]
    if a.shapes == "none":
        names = []
    threads = [int(t) for t in a.threads.split(",")]
    tmp = tempfile.mkdtemp(prefix="tj_conv_peers_")
    jobs = []  # (label, path, shape or None, work units, unit)
    for i, name in enumerate(names):
        path = os.path.join(tmp, f"conv{i}.onnx")
        write_onnx(path, SHAPES[name])
        write_onnx(path.replace(".onnx", "_nhwc.onnx"), SHAPES[name], nhwc=True)
        jobs.append((name, path, SHAPES[name], flops(SHAPES[name]) / 1e9, "GFLOP/s"))
    if a.models:
        import numpy as np

        for label, d in MODELS.items():
            src = os.path.join(a.models, d, "model.onnx")
            if os.path.exists(src):
                jobs.append((f"{label} b{a.batch}", src, None, float(a.batch), "images/s"))
        np.save(os.path.join(tmp, "x.npy"), np.random.default_rng(2).uniform(0, 1, (a.batch, 3, 224, 224)).astype(np.float32))
    peak = fma_peak()
    best = {}
    for rnd in range(a.rounds):
        for label, path, shape, work, unit in jobs:
            for t in threads:
                fws = ["tensorjit", "ort"] + (["tensorjit_nhwc", "torch", "torch_nhwc"] if shape else [])
                if rnd % 2:
                    fws.reverse()
                for fw in fws:
                    repeat = a.repeat if shape else max(3, a.repeat // 2)
                    if shape is None and fw == "tensorjit":
                        r = pinned([a.tensorjit, "--json", "bench", path, "-i", f"input={os.path.join(tmp, 'x.npy')}",
                                    "-b", f"jit:parallelism={t}", "--repeat", str(repeat), "--warmup", "2"], t)
                        s = None
                        for line in r.stdout.splitlines():
                            j = json.loads(line)
                            if "repeat" in j:
                                s = j["repeat"]["min_ms"] / 1e3
                    elif fw == "tensorjit_nhwc":
                        s = measure("tensorjit", t, path.replace(".onnx", "_nhwc.onnx"), shape, repeat, a.tensorjit)
                    else:
                        s = measure(fw, t, path, shape or {"batch": a.batch}, repeat, a.tensorjit)
                    if s:
                        # Each layout's figure ("torch" and "tensorjit" run NCHW), and the faster of
                        # a framework's layouts under its plain name.
                        layout = {"torch": "torch_nchw", "tensorjit": "tensorjit_nchw"}.get(fw, fw)
                        for f in {layout, fw.split("_")[0]}:
                            best[(label, t, f)] = min(best.get((label, t, f), float("inf")), s)
            print(f"round {rnd + 1}: {label} done", file=sys.stderr)
    lines = []
    if peak:
        lines.append(f"FMA peak measured beside (median): {peak}\n")
    lines.append("Convolutions: tensorjit and torch in NCHW / NHWC (tensorjit NHWC: the Conv between transposes,")
    lines.append("absorbed by its layout pass; onnxruntime NCHW); ratios: tensorjit NCHW / best of onnxruntime and torch")
    lines.append("NCHW, tensorjit NHWC / best of onnxruntime and torch NHWC, best / best.\n")
    lines.append("| shape | threads | unit | tensorjit | onnxruntime | torch | NCHW | NHWC | best / best |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for label, path, shape, work, unit in jobs:
        for t in threads:
            fws = ("tensorjit", "tensorjit_nchw", "tensorjit_nhwc", "ort", "torch", "torch_nchw", "torch_nhwc")
            rate = {fw: work / best[(label, t, fw)] for fw in fws if (label, t, fw) in best}

            def ratio(tj, peers):
                got = [rate[p] for p in peers if p in rate]
                return f"{rate[tj] / max(got):.2f}" if got and tj in rate else "-"

            cell = lambda fw: f"{rate[fw]:.1f}" if fw in rate else "-"  # noqa: E731
            if shape:
                tj, torch = (f"{cell(f + '_nchw')} / {cell(f + '_nhwc')}" for f in ("tensorjit", "torch"))
                nchw, nhwc = ratio("tensorjit_nchw", ("ort", "torch_nchw")), ratio("tensorjit_nhwc", ("ort", "torch_nhwc"))
            else:
                tj, torch, nchw, nhwc = cell("tensorjit"), "-", ratio("tensorjit", ("ort",)), "-"
            both = ratio("tensorjit", ("ort", "torch"))
            lines.append(f"| {label} | {t} | {unit} | {tj} | {cell('ort')} | {torch} | {nchw} | {nhwc} | {both} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
