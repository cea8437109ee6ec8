#!/usr/bin/env python3
"""A GPT-2-style decoder step with a key/value cache, as exporters write "decoder with past".

  decoder_step.py --write DIR [--hidden 768 --layers 12 --heads 12 --vocab 50257]
                  [--positions input|mask|past] [--no-mask] [--other-names]

Inputs: input_ids and position_ids [batch, sequence], attention_mask [batch,
"past_sequence_length + sequence"], past_key_values.{i}.key/value [batch, heads,
past_sequence_length, head_dim]. Outputs: logits [batch, sequence, vocab] and
present.{i}.key/value [batch, heads, "past_sequence_length + sequence", head_dim] (the past
then the new positions: Concat on axis 2). Pre-LayerNorm blocks, tied embeddings, the erf GELU;
attention masked by the attention mask (additive -10000) and causally over the new positions
(built from the run's shapes: query i sees every key up to the cache's end plus i). Random
weights (seeded). The test size is the default; GPT-2 small is --hidden 768 --layers 12 --heads
12 --vocab 50257. --positions mask or past drops the position_ids input: the positions are
derived in the graph from the attention mask or from the cache's length. --no-mask drops the
attention_mask input (attention is then causal only, over the whole cache: a step must run at
its sequence's exact length). --other-names writes
the same model under names another exporter might use (tokens, mask, positions, scores,
k_cache_{i} -> k_cache_out_{i}): served with the model config's generation.tensors. Exit
codes: 0 written, 77 onnx/numpy missing.
"""
import argparse
import os
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover - environment dependent
    print(f"decoder_step: SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import text_model  # noqa: E402  (Builder, layer_norm, dense: the same building blocks)
from text_model import Builder, dense, layer_norm  # noqa: E402

PAST, TOTAL = "past_sequence_length", "past_sequence_length + sequence"


def i64(b, name, v):
    return b.const(name, np.array(v, np.int64))


def split_heads(b, t, p):
    h = text_model.HIDDEN // text_model.HEADS
    r = b.op("Reshape", [t, i64(b, p + "s", [0, 0, text_model.HEADS, h])], p + "r")
    return b.op("Transpose", [r], p + "t", perm=[0, 2, 1, 3])


def causal_add(b, q, k_all, p):
    """[S, T] additive mask: query i (of S new positions) sees keys j <= T - S + i."""
    p += "causal."
    s = b.op("Gather", [b.op("Shape", [q], p + "qs"), i64(b, p + "i2", 2)], p + "S")
    t = b.op("Gather", [b.op("Shape", [k_all], p + "ks"), i64(b, p + "j2", 2)], p + "T")
    rows = b.op("Add", [b.op("Range", [i64(b, p + "z", 0), s, i64(b, p + "o", 1)], p + "rr"),
                        b.op("Sub", [t, s], p + "off")], p + "rows")
    cols = b.op("Range", [i64(b, p + "z2", 0), t, i64(b, p + "o2", 1)], p + "cols")
    future = b.op("Greater", [b.op("Unsqueeze", [cols, i64(b, p + "a0", [0])], p + "c0"),
                              b.op("Unsqueeze", [rows, i64(b, p + "a1", [1])], p + "r1")], p + "fut")
    return b.op("Where", [future, "neg", b.const(p + "zero", np.float32(0.0))], p + "cadd")


def block(b, x, mask_add, i, outputs):
    p = f"h{i}."
    hidden = text_model.HIDDEN
    h = layer_norm(b, x, p + "ln1")
    q, k, v = (split_heads(b, dense(b, h, p + n, hidden, hidden), p + n + "h") for n in "qkv")
    k_all = b.op("Concat", [f"past_key_values.{i}.key", k], f"present.{i}.key", axis=2)
    v_all = b.op("Concat", [f"past_key_values.{i}.value", v], f"present.{i}.value", axis=2)
    outputs += [f"present.{i}.key", f"present.{i}.value"]
    kt = b.op("Transpose", [k_all], p + "kT", perm=[0, 1, 3, 2])
    scores = b.op("Mul", [b.op("MatMul", [q, kt], p + "qk"), "scale"], p + "qks")
    if mask_add is not None:
        scores = b.op("Add", [scores, mask_add], p + "m")
    scores = b.op("Add", [scores, causal_add(b, q, k_all, p)], p + "mc")
    probs = b.op("Softmax", [scores], p + "probs", axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v_all], p + "ctx")], p + "ctxT", perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, i64(b, p + "merge", [0, 0, hidden])], p + "ctxr")
    x = b.op("Add", [x, dense(b, ctx, p + "o", hidden, hidden)], p + "res1")
    f = dense(b, layer_norm(b, x, p + "ln2"), p + "f1", hidden, text_model.FFN)
    erf = b.op("Erf", [b.op("Div", [f, "sqrt2"], p + "gd")], p + "erf")
    gelu = b.op("Mul", [b.op("Mul", [f, b.op("Add", ["one", erf], p + "g1")], p + "g2"), "half"], p + "gelu")
    return b.op("Add", [x, dense(b, gelu, p + "f2", text_model.FFN, hidden)], p + "res2")


POSITIONS = "input"  # input | mask | past: where position ids come from
MASK = True  # whether the model takes an attention_mask


def positions(b):
    """The new positions' ids: the input, or derived in the graph as exporters without a
    position_ids input do: from the attention mask (cumsum - 1 over past + new, the last S
    kept: right however the cache is padded, as the mask hides the padding) or from the
    cache's length (past .. past + S - 1: wrong under padding, which the server must see)."""
    if POSITIONS == "input":
        return "position_ids"
    s = b.op("Gather", [b.op("Shape", ["input_ids"], "p.ids_shape"), i64(b, "p.one", 1)], "p.S")
    if POSITIONS == "past":
        p = b.op("Gather", [b.op("Shape", ["past_key_values.0.key"], "p.kshape"), i64(b, "p.two", 2)],
                 "p.P")
        r = b.op("Range", [p, b.op("Add", [p, s], "p.end"), i64(b, "p.step", 1)], "p.range")
        return b.op("Unsqueeze", [r, i64(b, "p.ax0", [0])], "p.pos")
    c = b.op("CumSum", ["attention_mask", i64(b, "p.axis", 1)], "p.cum")
    pos = b.op("Sub", [c, i64(b, "p.one_", 1)], "p.all")
    neg = b.op("Neg", [b.op("Unsqueeze", [s, i64(b, "p.ax", [0])], "p.S1")], "p.negS")
    big = i64(b, "p.big", [1 << 30])
    last = b.op("Slice", [pos, neg, big, i64(b, "p.sax", [1])], "p.last")
    # A padding row's mask hides everything before its new positions: cumsum - 1 stays >= 0.
    return b.op("Max", [last, i64(b, "p.zero", 0)], "p.pos")


def build_model():
    b = Builder()
    hidden, heads = text_model.HIDDEN, text_model.HEADS
    for name, v in [("one", 1.0), ("neg", -10000.0), ("two", 2.0), ("eps", 1e-5),
                    ("sqrt2", 1.4142135), ("half", 0.5), ("scale", 1 / np.sqrt(hidden // heads))]:
        b.const(name, np.float32(v))
    wte = b.weight("wte", text_model.VOCAB, hidden)
    x = b.op("Add", [b.op("Gather", [wte, "input_ids"], "tok"),
                     b.op("Gather", [b.weight("wpe", 1024, hidden), positions(b)], "pos")], "x0")
    mask_add = None
    if MASK:
        m4 = b.op("Unsqueeze", ["attention_mask", i64(b, "ax12", [1, 2])], "m4")
        mask_add = b.op("Mul", [b.op("Sub", ["one", b.op("Cast", [m4], "mf", to=TensorProto.FLOAT)],
                                         "inv"), "neg"], "mask_add")
    outputs = []
    for i in range(text_model.LAYERS):
        x = block(b, x, mask_add, i, outputs)
    x = layer_norm(b, x, "lnf")
    b.op("MatMul", [x, b.op("Transpose", [wte], "wteT", perm=[1, 0])], "logits")
    head_dim = hidden // heads
    cache = ["batch", heads, PAST, head_dim]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])]
    if POSITIONS == "input":
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "sequence"]))
    if MASK:
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", TOTAL]))
    for i in range(text_model.LAYERS):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}",
                                                        TensorProto.FLOAT, cache))
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                          ["batch", "sequence", text_model.VOCAB])]
    outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", heads, TOTAL, head_dim])
             for n in outputs]
    graph = helper.make_graph(b.nodes, "decoder_step", inputs, outs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def other_names(model):
    """The same model under another exporter's names (no "past"/"present" in the cache's):
    tokens, mask, positions, scores, k_cache_{i}/v_cache_{i} -> k_cache_out_{i}/v_cache_out_{i}."""
    fixed = {"input_ids": "tokens", "attention_mask": "mask", "position_ids": "positions",
             "logits": "scores"}
    for i in range(text_model.LAYERS):
        for kind in ("key", "value"):
            fixed[f"past_key_values.{i}.{kind}"] = f"{kind[0]}_cache_{i}"
            fixed[f"present.{i}.{kind}"] = f"{kind[0]}_cache_out_{i}"
    g = model.graph
    for v in list(g.input) + list(g.output):
        v.name = fixed.get(v.name, v.name)
    for n in g.node:
        n.input[:] = [fixed.get(x, x) for x in n.input]
        n.output[:] = [fixed.get(x, x) for x in n.output]
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", required=True, help="write DIR/model.onnx")
    ap.add_argument("--hidden", type=int, default=text_model.HIDDEN)
    ap.add_argument("--ffn", type=int, default=0, help="default 4 x hidden")
    ap.add_argument("--layers", type=int, default=text_model.LAYERS)
    ap.add_argument("--heads", type=int, default=text_model.HEADS)
    ap.add_argument("--vocab", type=int, default=text_model.VOCAB)
    ap.add_argument("--positions", choices=["input", "mask", "past"], default="input",
                    help="position ids as an input, or derived from the mask or the cache's length")
    ap.add_argument("--no-mask", action="store_true",
                    help="no attention_mask input: causal attention over the whole cache")
    ap.add_argument("--other-names", action="store_true",
                    help="name the inputs and outputs as another exporter might (other_names)")
    a = ap.parse_args()
    global POSITIONS, MASK
    POSITIONS, MASK = a.positions, not a.no_mask
    if a.no_mask and a.positions == "mask":
        ap.error("--positions mask needs the attention mask")
    text_model.HIDDEN, text_model.LAYERS, text_model.HEADS, text_model.VOCAB = (
        a.hidden, a.layers, a.heads, a.vocab)
    text_model.FFN = a.ffn or 4 * a.hidden
    os.makedirs(a.write, exist_ok=True)
    model = build_model()
    if a.other_names:
        model = other_names(model)
    if model.ByteSize() > 1900 << 20:
        onnx.save(model, os.path.join(a.write, "model.onnx"), save_as_external_data=True)
    else:
        onnx.save(model, os.path.join(a.write, "model.onnx"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
