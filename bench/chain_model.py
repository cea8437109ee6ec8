#!/usr/bin/env python3
"""Writes a generated chain model for compile-time scaling measurements.

    chain_model.py N OUT.onnx [--op Add|Max|...|ConvRelu]

N nodes in one dependency chain over a [batch, 16] float input: y_i = OP(y_{i-1}, c) with one
shared [16] constant c (so no node is foldable or a duplicate of another, and every value has
one reader). Max keeps the values exact, so kilnd's warm-up check passes on any length (a long
Add chain's float32 rounding drifts past its tolerance). ConvRelu is N/2 pairs of a 1x1 Conv
(16 channels, one shared weight) and a Relu over [batch, 16, 1, 1]: every pair is one
epilogue fusion. A benchmark input, not a test model: bench/compile_time.sh times `kiln compile`
on it, and tests/unit/compile_scaling_test.cc builds the same graph in C++.
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", type=int)
    ap.add_argument("out")
    ap.add_argument("--op", default="Add")
    args = ap.parse_args()
    conv = args.op == "ConvRelu"
    shape = ["batch", 16, 1, 1] if conv else ["batch", 16]
    if conv:
        w = np.eye(16, dtype=np.float32).reshape(16, 16, 1, 1) * 0.5
        c = numpy_helper.from_array(w, "c")
    else:
        c = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32), "c")
    nodes = []
    prev = "x"
    for i in range(args.n):
        out = "y" if i == args.n - 1 else f"v{i}"
        if conv:
            op, ins = ("Conv", [prev, "c"]) if i % 2 == 0 else ("Relu", [prev])
        else:
            op, ins = args.op, [prev, "c"]
        nodes.append(helper.make_node(op, ins, [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, f"chain{args.n}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, args.out)


if __name__ == "__main__":
    main()
