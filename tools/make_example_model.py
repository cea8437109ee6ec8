#!/usr/bin/python3
"""Writes config/models/example/1/model.onnx: the small MLP kilnd serves out of the box.

x: FLOAT[batch, 8] -> Gemm(8->16) -> Relu -> Gemm(16->4) -> logits, Softmax -> probs.
Runs on Debian's /usr/bin/python3 (where python3-onnx lives, not a pyenv python).
Weights come from a fixed seed, so the file is reproducible; the committed copy lets kilnd
start without Python. Needs only Debian's python3-onnx and python3-numpy (no torch).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build():
    rng = np.random.default_rng(20240601)
    w1 = rng.standard_normal((8, 16)).astype(np.float32) * 0.5
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    w2 = rng.standard_normal((16, 4)).astype(np.float32) * 0.5
    b2 = rng.standard_normal(4).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["h_relu"], name="relu1"),
        helper.make_node("Gemm", ["h_relu", "w2", "b2"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "example_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 4])],
        initializer=[numpy_helper.from_array(a, n)
                     for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln-make-example-model")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        root, "config", "models", "example", "1", "model.onnx")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    onnx.save(build(), out)
    print(out)


if __name__ == "__main__":
    main()
