#!/usr/bin/env python3
"""Whole convnets: several tensorjit binaries (or configs) beside onnxruntime, alternated in one run.

Optional, never part of the tests. Needs numpy, onnxruntime and the exports of
tools/onnx-models.py (MODELS_DIR, default /work/models: resnet18-torchscript, mobilenet_v2-torchscript,
with input.npy and, for batch N > 1, input-bN.npy as tools/bench-convnets.py writes it):

    python3 tools/ab-convnets.py "BIN[@jit-options];BIN2[@jit-options]" BATCH ROUNDS MODELS THREADS [noort]
    python3 tools/ab-convnets.py "/tmp/before;target/release/tensorjit" 1 5 m,r 1,2

MODELS: m (MobileNetV2), r (ResNet-18). Each round runs every binary (`tensorjit --json bench
model.onnx -b jit:parallelism=T[,options]`) and onnxruntime (unless `noort`; CPU provider, intra-op
threads T) in its own process pinned with taskset (CPU 0, or 0,1); prints the best median per
image in ms of each and the ratio onnxruntime / binary (images/s). BENCH_PYTHON: the Python that
runs onnxruntime (default: this one).
"""
import json, os, subprocess, sys
PY=os.environ.get("BENCH_PYTHON", sys.executable)
bins=[b for b in sys.argv[1].split(";") if b]; batch=int(sys.argv[2]); rounds=int(sys.argv[3])
models=sys.argv[4].split(","); threads=[int(t) for t in sys.argv[5].split(",")]
ort = len(sys.argv) <= 6 or sys.argv[6] != "noort"
MD={"m":"mobilenet_v2","r":"resnet18"}
ORT=r"""
import sys, time, numpy as np, onnxruntime as ort
so=ort.SessionOptions(); so.intra_op_num_threads=int(sys.argv[3]); so.inter_op_num_threads=1
s=ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"]); x=np.load(sys.argv[2]); n=s.get_inputs()[0].name
for _ in range(5): s.run(None,{n:x})
ts=[]
for _ in range(int(sys.argv[4])):
    t=time.perf_counter(); s.run(None,{n:x}); ts.append(time.perf_counter()-t)
print(sorted(ts)[len(ts)//2]*1e3)
"""
for m in models:
  d=f"{os.environ.get('MODELS_DIR', '/work/models')}/{MD.get(m,m)}-torchscript"; inp=f"{d}/input.npy" if batch==1 else f"{d}/input-b{batch}.npy"
  for t in threads:
    cpus="0" if t==1 else "0,1"; reps=max(20, 400//batch) if m=="m" else max(20,150//batch)
    best={}
    for r in range(rounds):
      for b in bins:
        exe,_,cfg=b.partition("@"); cfg=("jit:parallelism=%d"%t)+(","+cfg if cfg else "")
        o=subprocess.run(["taskset","-c",cpus,exe,"--json","bench",f"{d}/model.onnx","-i",f"input={inp}","-b",cfg,"-r",str(reps),"-w","5"],capture_output=True,text=True).stdout
        ms=json.loads(o.strip().splitlines()[-1])["repeat"]["median_ms"]; best[b]=min(best.get(b,1e9),ms)
      if ort:
        o=subprocess.run(["taskset","-c",cpus,PY,"-c",ORT,f"{d}/model.onnx",inp,str(t),str(reps)],capture_output=True,text=True).stdout
        best["ort"]=min(best.get("ort",1e9),float(o.strip()))
    print(m, "b%d"%batch, "T%d"%t, "  ".join(f"{k.split('/')[-1]}={v/batch:.3f}" for k,v in best.items()), "" if not ort else "  ratios: "+" ".join(f"{best['ort']/best[b]:.3f}" for b in bins), flush=True)
