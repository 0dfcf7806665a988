#!/usr/bin/env python3
"""Writes small If/Loop models with expected outputs from onnx.reference (an implementation
independent of tensorjit) into tests/data/onnx-models/<case>/ (model.onnx, test_data_set_0/).
Run from the repository root: python3 tools/onnx-control-cases.py (needs onnx and numpy)."""
import os
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh
from onnx.reference import ReferenceEvaluator

OUT = os.path.join("tests", "data", "onnx-models")


def write(name, model, inputs):
    onnx.checker.check_model(model)
    d = os.path.join(OUT, name, "test_data_set_0")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(OUT, name, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    outs = ReferenceEvaluator(model).run(None, dict(inputs))
    for i, (k, v) in enumerate(inputs):
        open(os.path.join(d, f"input_{i}.pb"), "wb").write(nh.from_array(v, k).SerializeToString())
    for i, v in enumerate(outs):
        open(os.path.join(d, f"output_{i}.pb"), "wb").write(nh.from_array(np.asarray(v), f"out{i}").SerializeToString())


# Loop with a constant trip count, a carried value, a scan output and an outer-scope capture.
body = h.make_graph(
    [
        h.make_node("Identity", ["cond_in"], ["cond_out"]),
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
        h.make_node("Mul", ["fi", "w"], ["t"]),
        h.make_node("Add", ["y_in", "t"], ["y_out"]),
        h.make_node("Identity", ["y_out"], ["scan"]),
    ],
    "body",
    [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
     h.make_tensor_value_info("y_in", T.FLOAT, [2])],
    [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("y_out", T.FLOAT, [2]),
     h.make_tensor_value_info("scan", T.FLOAT, [2])],
)
g = h.make_graph(
    [h.make_node("Loop", ["M", "c_true", "y0"], ["y", "ys"], body=body)],
    "loop_const_trip",
    [h.make_tensor_value_info("y0", T.FLOAT, [2]), h.make_tensor_value_info("w", T.FLOAT, [2])],
    [h.make_tensor_value_info("y", T.FLOAT, [2]), h.make_tensor_value_info("ys", T.FLOAT, [4, 2])],
    initializer=[nh.from_array(np.array(4, np.int64), "M"), nh.from_array(np.array(True), "c_true")],
)
write("loop_const_trip", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]),
      [("y0", np.array([1.0, -2.0], np.float32)), ("w", np.array([0.5, 3.0], np.float32))])

# Loop that stops early through its condition (no scan outputs), trip count from the graph.
body = h.make_graph(
    [
        h.make_node("Add", ["x_in", "one"], ["x_out"]),
        h.make_node("Less", ["x_out", "limit"], ["cond_out"]),
    ],
    "body",
    [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
     h.make_tensor_value_info("x_in", T.FLOAT, [])],
    [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [])],
    initializer=[nh.from_array(np.array(1.0, np.float32), "one")],
)
g = h.make_graph(
    [h.make_node("Loop", ["M", "c0", "x0"], ["x"], body=body)],
    "loop_early_stop",
    [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("c0", T.BOOL, []),
     h.make_tensor_value_info("x0", T.FLOAT, []), h.make_tensor_value_info("limit", T.FLOAT, [])],
    [h.make_tensor_value_info("x", T.FLOAT, [])],
)
write("loop_early_stop", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]),
      [("M", np.array(10, np.int64)), ("c0", np.array(True)), ("x0", np.array(0.5, np.float32)),
       ("limit", np.array(4.0, np.float32))])

# If on a run-time condition, both branches reading outer values.
then_g = h.make_graph([h.make_node("Add", ["a", "b"], ["r"])], "then", [], [h.make_tensor_value_info("r", T.FLOAT, [3])])
else_g = h.make_graph([h.make_node("Sub", ["a", "b"], ["r2"])], "else", [], [h.make_tensor_value_info("r2", T.FLOAT, [3])])
g = h.make_graph(
    [h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
    "if_runtime",
    [h.make_tensor_value_info("c", T.BOOL, [1]), h.make_tensor_value_info("a", T.FLOAT, [3]),
     h.make_tensor_value_info("b", T.FLOAT, [3])],
    [h.make_tensor_value_info("y", T.FLOAT, [3])],
)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.5, 0.25, -1.0], np.float32)
write("if_true", m, [("c", np.array([True])), ("a", a), ("b", b)])
write("if_false", m, [("c", np.array([False])), ("a", a), ("b", b)])
