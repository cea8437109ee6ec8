#!/usr/bin/env python3
"""A LLaMA-style decoder step with a key/value cache, as exporters write "decoder with past".

  llama_step.py --write DIR [--hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 176 --vocab 1000]
                [--positions input|past] [--no-mask]

RMSNorm, rotary position embeddings (rotate-half, cos/sin tables gathered by position_ids),
grouped-query attention (kv-heads key/value heads, each repeated for heads / kv-heads query
heads), a SwiGLU feed-forward and an untied output head. Inputs: input_ids and position_ids
[batch, sequence], attention_mask [batch, "past_sequence_length + sequence"],
past_key_values.{i}.key/value [batch, kv_heads, past_sequence_length, head_dim]. Outputs:
logits [batch, sequence, vocab] and present.{i}.key/value (the past then the new positions,
keys after the rotation). Attention is masked by the attention mask (additive -10000) and
causally over the new positions. Random weights (seeded). --positions past drops the
position_ids input (the positions are the cache's length onward, read from its shape);
--no-mask drops the attention mask (attention is then causal only, over the whole cache).
Exit codes: 0 written, 77 onnx/numpy missing.
"""
import argparse
import os
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover - environment dependent
    print(f"llama_step: SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_model import Builder  # noqa: E402
from decoder_step import causal_add, i64  # noqa: E402

PAST, TOTAL = "past_sequence_length", "past_sequence_length + sequence"
C = argparse.Namespace(hidden=64, layers=2, heads=4, kv_heads=2, ffn=176, vocab=1000, positions=1024,
                       position_ids="input", mask=True)


def rms_norm(b, x, p):
    ms = b.op("ReduceMean", [b.op("Mul", [x, x], p + "sq")], p + "ms", axes=[-1], keepdims=1)
    inv = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [ms, "eps"], p + "mse")], p + "rms")], p + "inv")
    return b.op("Mul", [b.op("Mul", [x, inv], p + "n"), b.weight(p + "g", C.hidden, scale=1.0)], p + "out")


def project(b, x, p, n_heads):
    d = C.hidden // C.heads
    mm = b.op("MatMul", [x, b.weight(p + "w", C.hidden, n_heads * d)], p + "mm")
    r = b.op("Reshape", [mm, i64(b, p + "s", [0, 0, n_heads, d])], p + "r")
    return b.op("Transpose", [r], p + "t", perm=[0, 2, 1, 3])


def rotate(b, x, cos, sin, p):
    """x [B, H, S, D] rotated by the angles of its positions (rotate-half form)."""
    half = C.hidden // C.heads // 2
    x1 = b.op("Slice", [x, i64(b, p + "s0", [0]), i64(b, p + "s1", [half]), i64(b, p + "ax", [-1])], p + "x1")
    x2 = b.op("Slice", [x, i64(b, p + "s2", [half]), i64(b, p + "s3", [2 * half]), i64(b, p + "ax2", [-1])], p + "x2")
    lo = b.op("Sub", [b.op("Mul", [x1, cos], p + "c1"), b.op("Mul", [x2, sin], p + "s1m")], p + "lo")
    hi = b.op("Add", [b.op("Mul", [x2, cos], p + "c2"), b.op("Mul", [x1, sin], p + "s2m")], p + "hi")
    return b.op("Concat", [lo, hi], p + "rot", axis=-1)


def repeat_kv(b, t, p):
    """[B, KVH, T, D] -> [B, H, T, D], each key/value head serving heads / kv_heads queries."""
    group = C.heads // C.kv_heads
    if group == 1:
        return t
    shape = b.op("Shape", [t], p + "shape")
    head = b.op("Slice", [shape, i64(b, p + "a", [0]), i64(b, p + "b", [2]), i64(b, p + "c", [0])], p + "head")
    tail = b.op("Slice", [shape, i64(b, p + "d", [2]), i64(b, p + "e", [4]), i64(b, p + "f", [0])], p + "tail")
    wide = b.op("Concat", [head, i64(b, p + "g", [group]), tail], p + "wide", axis=0)
    e = b.op("Expand", [b.op("Unsqueeze", [t, i64(b, p + "u", [2])], p + "u5"), wide], p + "exp")
    return b.op("Reshape", [e, i64(b, p + "m", [0, C.heads, -1, C.hidden // C.heads])], p + "rep")


def block(b, x, mask_add, cos, sin, i, outputs):
    p = f"l{i}."
    h = rms_norm(b, x, p + "n1.")
    q = rotate(b, project(b, h, p + "q", C.heads), cos, sin, p + "qr.")
    k = rotate(b, project(b, h, p + "k", C.kv_heads), cos, sin, p + "kr.")
    v = project(b, h, p + "v", C.kv_heads)
    k_all = b.op("Concat", [f"past_key_values.{i}.key", k], f"present.{i}.key", axis=2)
    v_all = b.op("Concat", [f"past_key_values.{i}.value", v], f"present.{i}.value", axis=2)
    outputs += [f"present.{i}.key", f"present.{i}.value"]
    kt = b.op("Transpose", [repeat_kv(b, k_all, p + "rk.")], p + "kT", perm=[0, 1, 3, 2])
    scores = b.op("Mul", [b.op("MatMul", [q, kt], p + "qk"), "scale"], p + "qks")
    if mask_add is not None:
        scores = b.op("Add", [scores, mask_add], p + "m")
    scores = b.op("Add", [scores, causal_add(b, q, k_all, p)], p + "mc")
    probs = b.op("Softmax", [scores], p + "probs", axis=-1)
    ctx = b.op("MatMul", [probs, repeat_kv(b, v_all, p + "rv.")], p + "ctx")
    ctx = b.op("Reshape", [b.op("Transpose", [ctx], p + "ctxT", perm=[0, 2, 1, 3]),
                           i64(b, p + "merge", [0, 0, C.hidden])], p + "ctxr")
    x = b.op("Add", [x, b.op("MatMul", [ctx, b.weight(p + "o", C.hidden, C.hidden)], p + "o.mm")], p + "res1")
    h = rms_norm(b, x, p + "n2.")
    gate = b.op("MatMul", [h, b.weight(p + "gate", C.hidden, C.ffn)], p + "gate.mm")
    silu = b.op("Mul", [gate, b.op("Sigmoid", [gate], p + "sig")], p + "silu")
    up = b.op("MatMul", [h, b.weight(p + "up", C.hidden, C.ffn)], p + "up.mm")
    down = b.op("MatMul", [b.op("Mul", [silu, up], p + "swiglu"), b.weight(p + "down", C.ffn, C.hidden)], p + "down.mm")
    return b.op("Add", [x, down], p + "res2")


def rotary_tables(b):
    """cos/sin [positions, head_dim / 2] for the rotate-half form, base 10000."""
    half = C.hidden // C.heads // 2
    inv = 1.0 / (10000 ** (np.arange(half) / half))
    ang = np.outer(np.arange(C.positions), inv)
    b.const("rope_cos", np.cos(ang).astype(np.float32))
    b.const("rope_sin", np.sin(ang).astype(np.float32))
    pos = "position_ids"
    if C.position_ids == "past":  # past .. past + S - 1, as torch.arange(past, past + S) exports
        s = b.op("Gather", [b.op("Shape", ["input_ids"], "p.ids_shape"), i64(b, "p.one", 1)], "p.S")
        p = b.op("Gather", [b.op("Shape", ["past_key_values.0.key"], "p.kshape"), i64(b, "p.two", 2)],
                 "p.P")
        r = b.op("Range", [p, b.op("Add", [p, s], "p.end"), i64(b, "p.step", 1)], "p.range")
        pos = b.op("Unsqueeze", [r, i64(b, "p.ax0", [0])], "p.pos")
    ax = i64(b, "rope_ax", [1])  # [B, S, half] -> [B, 1, S, half]: one angle per head
    cos = b.op("Unsqueeze", [b.op("Gather", ["rope_cos", pos], "cos_g"), ax], "cos")
    sin = b.op("Unsqueeze", [b.op("Gather", ["rope_sin", pos], "sin_g"), ax], "sin")
    return cos, sin


def build_model():
    b = Builder()
    head_dim = C.hidden // C.heads
    for name, v in [("one", 1.0), ("neg", -10000.0), ("eps", 1e-6), ("scale", 1 / np.sqrt(head_dim))]:
        b.const(name, np.float32(v))
    x = b.op("Gather", [b.weight("embed", C.vocab, C.hidden, scale=1.0), "input_ids"], "x0")
    cos, sin = rotary_tables(b)
    mask_add = None
    if C.mask:
        m4 = b.op("Unsqueeze", ["attention_mask", i64(b, "ax12", [1, 2])], "m4")
        mask_add = b.op("Mul", [b.op("Sub", ["one", b.op("Cast", [m4], "mf", to=TensorProto.FLOAT)],
                                         "inv"), "neg"], "mask_add")
    outputs = []
    for i in range(C.layers):
        x = block(b, x, mask_add, cos, sin, i, outputs)
    b.op("MatMul", [rms_norm(b, x, "norm."), b.weight("lm_head", C.hidden, C.vocab)], "logits")
    cache = ["batch", C.kv_heads, PAST, head_dim]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
              for n in ("input_ids", "position_ids") if n == "input_ids" or C.position_ids == "input"]
    if C.mask:
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", TOTAL]))
    inputs += [helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, cache)
               for i in range(C.layers) for kind in ("key", "value")]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", C.vocab])]
    outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", C.kv_heads, TOTAL, head_dim])
             for n in outputs]
    graph = helper.make_graph(b.nodes, "llama_step", inputs, outs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", required=True, help="write DIR/model.onnx")
    for k in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=getattr(C, k))
    ap.add_argument("--positions", choices=["input", "past"], default="input",
                    help="position ids fed (input) or counted from the cache's length (past)")
    ap.add_argument("--no-mask", action="store_true", help="no attention_mask input")
    a = ap.parse_args()
    for k in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab"):
        setattr(C, k, getattr(a, k))
    C.position_ids, C.mask = a.positions, not a.no_mask
    if C.heads % C.kv_heads or (C.hidden // C.heads) % 2:
        sys.exit("heads must be a multiple of kv-heads and head_dim even")
    os.makedirs(a.write, exist_ok=True)
    model = build_model()
    external = model.ByteSize() > 1900 << 20
    onnx.save(model, os.path.join(a.write, "model.onnx"), save_as_external_data=external)
    return 0


if __name__ == "__main__":
    sys.exit(main())
