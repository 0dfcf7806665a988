#!/usr/bin/env python3
"""Run a BERT/MiniLM ONNX export through `tensorjit run` and onnxruntime with a padded
attention_mask (one batch entry fully masked) and compare the outputs (issue 24).

Usage:
    cargo build --release --bin tensorjit
    python3 tools/attention-padding-check.py /work/models/minilm-torchscript/model.onnx \
        [--tensorjit target/release/tensorjit] [--batch 8] [--seq 128] [--rel 1e-4]

Inputs: input_ids uniform in [100, 30000), token_type_ids 0, attention_mask with trailing
padding of varying length per batch entry (entry 0 unpadded, entry 2 — when batch > 2 — all
zeros). onnxruntime runs with graph optimisations off (the unfused graph). Prints the largest
|tensorjit − ort| / max(|ort|, 1) and exits 1 if it exceeds --rel. Also checks that the
optimised IR has one FusedScaledDotProductAttention per layer with a [B,1,1,S] mask and no
head transposes. Not part of `cargo test` (the models are not in the repository).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tensorjit", default=os.path.join("target", "release", "tensorjit"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rel", type=float, default=1e-4)
    a = ap.parse_args()
    b, s = a.batch, a.seq
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(100, 30000, size=(b, s)).astype(np.int64),
        "attention_mask": np.ones((b, s), np.int64),
        "token_type_ids": np.zeros((b, s), np.int64),
    }
    for i in range(1, b):
        feeds["attention_mask"][i, s - (i * 7) % s :] = 0
    if b > 2:
        feeds["attention_mask"][2, :] = 0
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    want = sess.run(None, {k: feeds[k] for k in names})[0]
    with tempfile.TemporaryDirectory() as d:
        args = [a.tensorjit, "run", a.model, "-o", os.path.join(d, "out")]
        for k in names:
            np.save(os.path.join(d, k + ".npy"), feeds[k])
            args += ["-i", f"{k}={os.path.join(d, k + '.npy')}"]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        got = np.load(os.path.join(d, "out", "out0.npy"))
        # The optimised IR at these dims (dim names differ between exporters: take them from ort).
        dims = []
        for i in sess.get_inputs():
            for name, size in zip(i.shape, (b, s)):
                if isinstance(name, str) and f"{name}=" not in " ".join(dims):
                    dims += ["--dim", f"{name}={size}"]
        ir = subprocess.run(
            [a.tensorjit, "dump", a.model, "-s", "optimized"] + dims, check=True, capture_output=True, text=True
        ).stdout
    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))
    fused = re.findall(r"fused_scaled_dot_product_attention .*layout=bshd.*has_mask=true", ir)
    masks = re.findall(rf"= where %\d+, %\d+, %\d+ : f32\[{b},1,1,{s}\]", ir)
    transposes = len(re.findall(r"= transpose ", ir))
    print(f"{a.model}: batch {b} seq {s}: max rel err {err:.3g} (limit {a.rel:g}); "
          f"fused attention ops {len(fused)}, compact masks {len(masks)}, transposes {transposes}; "
          f"nan {int(np.isnan(got).sum())}")
    sys.exit(0 if err <= a.rel and fused and masks else 1)


if __name__ == "__main__":
    main()
