#!/usr/bin/env python3
"""A merged decoder, as Hugging Face Optimum exports `decoder_model_merged.onnx`: one file for
the first step and the steps with a cache, an If on a bool input `use_cache_branch` around two
branches that share the weights.

  merged_decoder.py --write DIR [--base decoder_step|llama_step] [the base's size flags]

The inputs and outputs are those of the base step model (tests/models/decoder_step.py or
llama_step.py) plus `use_cache_branch` (bool [1]). The cache branch (true) is the base step
itself, reading the past. The other branch computes the step without a cache: the past is
cut to zero positions before it is read, so it is right only when the past it is given is
empty (the attention mask then covers the new positions alone), as an exporter's no-cache
graph is. Random weights, as the base's. Exit codes: 0 written, 77 onnx/numpy missing.
"""
import argparse
import copy
import importlib
import os
import sys

try:
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover - environment dependent
    print(f"merged_decoder: SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import text_model  # noqa: E402


def branch(step, prefix, past_inputs):
    """The step's nodes as a branch: every value it makes renamed with `prefix` (names are
    unique across a model's scopes), the outer inputs and weights read as they are. With
    past_inputs, each past is first cut to zero positions along axis 2."""
    made = {o for n in step.graph.node for o in n.output}
    nodes = []
    rename = {}
    if past_inputs:
        for p in past_inputs:
            rename[p] = prefix + p
            nodes.append(helper.make_node("Slice", [p, "merged.zero", "merged.zero", "merged.two"],
                                          [prefix + p]))
    for n in step.graph.node:
        c = copy.deepcopy(n)
        c.input[:] = [prefix + i if i in made else rename.get(i, i) for i in n.input]
        c.output[:] = [prefix + o for o in n.output]
        nodes.append(c)
    outs = [helper.make_tensor_value_info(prefix + o.name, o.type.tensor_type.elem_type, None)
            for o in step.graph.output]
    return helper.make_graph(nodes, prefix.strip("/") + "_branch", [], outs)


def merge(step):
    pasts = [i.name for i in step.graph.input if i.name.startswith("past_key_values")]
    g = step.graph
    inits = list(g.initializer) + [
        helper.make_tensor("merged.zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("merged.two", TensorProto.INT64, [1], [2])]
    node = helper.make_node("If", ["use_cache_branch"], [o.name for o in g.output],
                            then_branch=branch(step, "cache/", []),
                            else_branch=branch(step, "first/", pasts))
    inputs = list(g.input) + [helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])]
    graph = helper.make_graph([node], "decoder_merged", inputs, list(g.output), inits)
    model = helper.make_model(graph, opset_imports=list(step.opset_import))
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", required=True, help="write DIR/model.onnx")
    ap.add_argument("--base", default="decoder_step", choices=["decoder_step", "llama_step"])
    a, rest = ap.parse_known_args()
    base = importlib.import_module(a.base)
    # The base's own flags (sizes) set its module state as its main() would.
    sys.argv = [a.base, "--write", a.write] + rest
    saved = onnx.save
    made = {}
    onnx.save = lambda model, path, **kw: made.setdefault("model", model)
    try:
        base.main()
    finally:
        onnx.save = saved
    os.makedirs(a.write, exist_ok=True)
    onnx.save(merge(made["model"]), os.path.join(a.write, "model.onnx"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
