#!/usr/bin/env python3
"""decode_peers.py: GPT-2 small greedy decoding, per-token latency, tensorjit beside torch eager.

Usage:
    cargo build --release --example generate
    python3 benches/compare/decode_peers.py [--example target/release/examples/generate]
        [--threads 1,2] [--rounds 3] [--steps 16] [--contexts 128,512,1024]
        [--batch-lens 96,160,256,384,512,640,800,1000] [--check] [--out FILE.md]

Both run the same model: `GPT2LMHeadModel(GPT2Config())` with random weights from a seed, saved
as safetensors and loaded by examples/generate.rs (`--weights`). One decode step = one new token
per sequence with the KV cache of the previous ones: tensorjit's step (examples/support/gpt2.rs:
cache rows written in place, attention over the filled prefix) and torch's forward with
`past_key_values` (a DynamicCache) and `use_cache=True`, plus the argmax. "ctx C" times N
steps ending at context C (the caches hold C−N tokens first; their contents do not change the
work, so they are random rather than a prefill). "batch" decodes 8 sequences of different
lengths in one step: tensorjit writes each sequence's row at its own position and attends over
each prefix; torch pads the cache to the longest (left padding with an attention mask and
explicit position ids, as batched generation with transformers does).

For each thread count T, tensorjit runs as a child process pinned with `taskset` (CPU 0, or
CPUs 0,1) with `jit:parallelism=T`, answering commands on stdin (`generate --bench-stdin`); this
process pins itself to the same CPUs with `torch.set_num_threads(T)`. The two alternate within
each round; per round a framework's figure is the median step time, and the best round is kept
(the machine is shared). `--check` first compares 12 greedy tokens of both on a prompt.
Prints a markdown table: ms per token and the ratio torch / tensorjit (> 1: tensorjit faster).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
from safetensors.torch import save_file
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel


def make_model(seed, path):
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, path)
    return model


def random_cache(cfg, batch, length, gen):
    cache = DynamicCache()
    shape = (batch, cfg.n_head, length, cfg.n_embd // cfg.n_head)
    for layer in range(cfg.n_layer):
        cache.update(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen), layer)
    return cache


def torch_steps(model, lens, steps, gen):
    """Per-step seconds of `steps` batched decode steps ending at context lens[i] per sequence."""
    cfg = model.config
    batch = len(lens)
    start = [max(l - steps, 0) for l in lens]
    longest = max(start)
    cache = random_cache(cfg, batch, longest, gen)
    # Left padding: sequence i's tokens are the last start[i] cache positions.
    mask = torch.zeros(batch, longest, dtype=torch.long)
    for i, s in enumerate(start):
        mask[i, longest - s:] = 1
    tok = torch.zeros(batch, 1, dtype=torch.long)
    pos = torch.tensor(start, dtype=torch.long).unsqueeze(1)
    times = []
    with torch.inference_mode():
        for _ in range(steps):
            mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], dim=1)
            t = time.perf_counter()
            out = model(input_ids=tok, past_key_values=cache, attention_mask=mask, position_ids=pos, use_cache=True)
            tok = out.logits[:, -1, :].argmax(-1, keepdim=True)
            times.append(time.perf_counter() - t)
            cache = out.past_key_values
            pos = pos + 1
    return times


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


class Tensorjit:
    def __init__(self, example, weights, threads, cpus):
        cmd = ["taskset", "-c", cpus, example, "--bench-stdin", "--weights", weights,
               "--backend", f"jit:parallelism={threads}"]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        ready = json.loads(self.p.stdout.readline())
        assert ready.get("ready"), ready

    def steps(self, lens, steps):
        if len(lens) == 1:
            self.p.stdin.write(f"ctx {lens[0]} {steps}\n")
        else:
            self.p.stdin.write(f"batch {','.join(map(str, lens))} {steps}\n")
        r = json.loads(self.p.stdout.readline())
        if "error" in r:
            raise RuntimeError(r["error"])
        return [t / 1e3 for t in r["ms"]]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def check(model, example, weights, prompt, n):
    out = subprocess.run([example, "--weights", weights, "--prompt", ",".join(map(str, prompt)),
                          "--tokens", str(n)], capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("sequence 0"))
    got = [int(t) for t in line.split("-> [")[1].rstrip("]").split(",") if t.strip()]
    with torch.inference_mode():
        ids = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    want = ids[0, len(prompt):].tolist()
    print(f"greedy check: tensorjit {got}\n              torch     {want}\n              "
          f"{'same' if got == want else 'DIFFERENT'}", file=sys.stderr)
    return got == want


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", default="target/release/examples/generate")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--contexts", default="128,512,1024")
    ap.add_argument("--batch-lens", default="96,160,256,384,512,640,800,1000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    weights = os.path.join(tmp, "gpt2-random.safetensors")
    model = make_model(a.seed, weights)
    if a.check:
        check(model, a.example, weights, [464, 2068, 7586, 21831, 18045, 625], 12)
    cases = [[int(c)] for c in a.contexts.split(",")]
    if a.batch_lens:
        cases.append([int(c) for c in a.batch_lens.split(",")])
    gen = torch.Generator().manual_seed(1)
    rows = []
    for threads in [int(t) for t in a.threads.split(",")]:
        cpus = ",".join(str(c) for c in range(threads))
        os.sched_setaffinity(0, set(range(threads)))
        torch.set_num_threads(threads)
        tj = Tensorjit(a.example, weights, threads, cpus)
        best = {}
        for r in range(a.rounds):
            for lens in cases:
                key = tuple(lens)
                tj_t = median(tj.steps(lens, a.steps))
                pt_t = median(torch_steps(model, lens, a.steps, gen))
                b = best.setdefault(key, [float("inf"), float("inf")])
                b[0], b[1] = min(b[0], tj_t), min(b[1], pt_t)
                print(f"T={threads} round {r} {key}: tensorjit {tj_t * 1e3:.2f} ms, torch {pt_t * 1e3:.2f} ms",
                      file=sys.stderr)
        tj.close()
        for lens in cases:
            t, p = best[tuple(lens)]
            what = f"context {lens[0]}" if len(lens) == 1 else f"batch {len(lens)}, lengths {min(lens)}–{max(lens)}"
            rows.append((threads, what, t * 1e3, p * 1e3, p / t))
    lines = ["| threads | case | tensorjit ms/step | torch eager ms/step | torch / tensorjit |", "|---|---|---|---|---|"]
    lines += [f"| {t} | {w} | {a_:.2f} | {b:.2f} | {r:.2f}× |" for t, w, a_, b, r in rows]
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
