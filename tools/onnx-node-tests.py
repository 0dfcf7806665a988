#!/usr/bin/env python3
"""Writes the ONNX backend node tests into tests/data/onnx-node/ (one folder per case:
model.onnx and test_data_set_N/{input,output}_K.pb, plus tolerances.txt), the same files the
onnx repository keeps under onnx/backend/test/data/node.

Needs the `onnx` Python package (pip install onnx==1.23.2; other versions give other cases).
The test suite (tests/onnx_node.rs) reads the vendored copy and needs neither Python nor the
network. Run from the repository root:  python3 tools/onnx-node-tests.py
"""
import os
import shutil
import sys
import warnings

warnings.filterwarnings("ignore")

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx.backend.test.case.node import collect_testcases  # noqa: E402

OUT = os.path.join("tests", "data", "onnx-node")

# The operators in scope (issue 23): a case is written when every op of its model (subgraphs
# included) is one of these, so function-expanded variants of in-scope ops come along.
SCOPE = set(
    """Add Sub Mul Div Pow Sqrt Reciprocal Exp Log Neg Abs Erf Tanh Sigmoid Relu LeakyRelu Elu Gelu
    HardSigmoid HardSwish Softplus Clip Min Max Sum Mean Floor Ceil Round Sign Mod Where Equal Less
    LessOrEqual Greater GreaterOrEqual Not And Or Xor IsNaN IsInf Cast CastLike MatMul Gemm Einsum
    Conv ConvTranspose MaxPool AveragePool GlobalAveragePool GlobalMaxPool BatchNormalization
    InstanceNormalization LayerNormalization GroupNormalization Softmax LogSoftmax ReduceMean
    ReduceSum ReduceMax ReduceMin ReduceProd ReduceL2 ArgMax ArgMin TopK CumSum Reshape Flatten
    Transpose Squeeze Unsqueeze Concat Split Slice Gather GatherElements GatherND ScatterND
    ScatterElements Expand Tile Pad Resize Shape Size ConstantOfShape Range Constant Identity
    Dropout Trilu OneHot NonZero If Loop""".split()
)


def op_types(graph, acc):
    for n in graph.node:
        acc.add(n.op_type)
        for a in n.attribute:
            if a.g.node:
                op_types(a.g, acc)
            for sub in a.graphs:
                op_types(sub, acc)
    return acc


def write_tensor(path, name, value):
    if isinstance(value, onnx.TensorProto):
        t = value
    else:
        t = numpy_helper.from_array(value, name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def main():
    cases = collect_testcases(None)
    if os.path.isdir(OUT):
        for entry in os.listdir(OUT):
            p = os.path.join(OUT, entry)
            if os.path.isdir(p):
                shutil.rmtree(p)
    os.makedirs(OUT, exist_ok=True)
    tol = []
    written = 0
    for case in sorted(cases, key=lambda c: c.name):
        if not op_types(case.model.graph, set()) <= SCOPE:
            continue
        d = os.path.join(OUT, case.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        g = case.model.graph
        init = {t.name for t in g.initializer}
        in_names = [i.name for i in g.input if i.name not in init]
        out_names = [o.name for o in g.output]
        for k, (inputs, outputs) in enumerate(case.data_sets or []):
            ds = os.path.join(d, f"test_data_set_{k}")
            os.makedirs(ds, exist_ok=True)
            try:
                for i, v in enumerate(inputs):
                    write_tensor(os.path.join(ds, f"input_{i}.pb"), in_names[i] if i < len(in_names) else "", v)
                for i, v in enumerate(outputs):
                    write_tensor(os.path.join(ds, f"output_{i}.pb"), out_names[i] if i < len(out_names) else "", v)
            except Exception as e:  # sequences, optionals, strings...: recorded, not written
                shutil.rmtree(ds)
                with open(os.path.join(d, "unwritable.txt"), "a") as f:
                    f.write(f"{type(e).__name__}: {e}\n")
        tol.append(f"{case.name} {case.rtol!r} {case.atol!r}")
        written += 1
    with open(os.path.join(OUT, "tolerances.txt"), "w") as f:
        f.write("\n".join(tol) + "\n")
    print(f"wrote {written} cases to {OUT} (onnx {onnx.__version__})", file=sys.stderr)


if __name__ == "__main__":
    main()
