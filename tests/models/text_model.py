#!/usr/bin/env python3
"""A BERT-shaped text encoder with [batch, sequence] inputs, checked against ONNX Runtime.

Builds the model with the onnx helper (Debian's python3-onnx; no torch): token and position
embeddings (the positions sliced by the sequence length taken from Shape), LayerNorms written
out as ReduceMean/Sub/Pow/Sqrt/Div, an attention mask applied as Unsqueeze -> Cast -> Sub ->
Mul, multi-head attention with Reshape/Transpose, the erf form of GELU, a tanh pooler. That
is what exporters write for text models, and what the pattern passes, the fused element-wise
kernels and symbolic-dim handling have to meet. Outputs come from ONNX Runtime
(tools/ort/run_ort.js) on inputs with padding in the mask; `kiln check` then runs the model
on the reference and on the CPU engine at O0 and O2 (rtol 1e-3, atol 1e-4).

  text_model.py --kiln build/tools/kiln [--work DIR]
  text_model.py --write DIR [--causal] [--hidden 256 --layers 4 --heads 4 --ffn 1024]
      [--vocab 30522]  (BERT-base: --hidden 768 --layers 12 --heads 12 --ffn 3072 --vocab 30522)
      only writes DIR/model.onnx (for bench/compare_ort.js --models ... --dim sequence=128)

--causal adds a GPT-style causal mask (Range over the run's sequence length, Greater, Where)
to the attention: a decoder's self-attention; the check runs the encoder and the decoder.

Exit codes: 0 ok, 1 a check failed, 77 onnx/numpy or node with onnxruntime-node missing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_ORT = os.path.join(REPO, "tools", "ort", "run_ort.js")

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover - environment dependent
    print(f"text_model: SKIP: {e}")
    sys.exit(77)

HIDDEN, FFN, VOCAB, LAYERS, HEADS = 64, 256, 1000, 2, 4  # the test's size; --write may change


class Builder:
    def __init__(self):
        self.rng = np.random.RandomState(0)
        self.nodes, self.inits = [], []

    def weight(self, name, *shape, scale=0.05):
        arr = (self.rng.randn(*shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(self, name, value):
        self.inits.append(numpy_helper.from_array(np.array(value), name))
        return name

    def op(self, op_type, inputs, output, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [output], **attrs))
        return output


def layer_norm(b, x, p):
    mean = b.op("ReduceMean", [x], p + "mean", axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean], p + "d")
    var = b.op("ReduceMean", [b.op("Pow", [d, "two"], p + "sq")], p + "var", axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, "eps"], p + "ve")], p + "std")
    n = b.op("Div", [d, std], p + "n")
    return b.op("Add", [b.op("Mul", [n, b.weight(p + "g", HIDDEN, scale=1.0)], p + "ng"),
                        b.weight(p + "b", HIDDEN)], p + "out")


def dense(b, x, p, n_in, n_out):
    mm = b.op("MatMul", [x, b.weight(p + "w", n_in, n_out)], p + "mm")
    return b.op("Add", [mm, b.weight(p + "b", n_out)], p)


def heads(b, t, p):
    shape = b.const(p + "shape", np.array([0, 0, HEADS, HIDDEN // HEADS], np.int64))
    return b.op("Transpose", [b.op("Reshape", [t, shape], p + "r")], p + "t", perm=[0, 2, 1, 3])


def encoder_layer(b, x, mask_add, p):
    q, k, v = (heads(b, dense(b, x, p + n, HIDDEN, HIDDEN), p + n + "h") for n in "qkv")
    kt = b.op("Transpose", [k], p + "kT", perm=[0, 1, 3, 2])
    scores = b.op("Mul", [b.op("MatMul", [q, kt], p + "qk"), "scale"], p + "qks")
    probs = b.op("Softmax", [b.op("Add", [scores, mask_add], p + "masked")], p + "probs", axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v], p + "ctx")], p + "ctxT", perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.const(p + "merge", np.array([0, 0, HIDDEN], np.int64))], p + "ctxr")
    x = layer_norm(b, b.op("Add", [dense(b, ctx, p + "o", HIDDEN, HIDDEN), x], p + "res1"), p + "ln1")
    f = dense(b, x, p + "f1", HIDDEN, FFN)
    erf = b.op("Erf", [b.op("Div", [f, "sqrt2"], p + "gd")], p + "erf")
    gelu = b.op("Mul", [b.op("Mul", [f, b.op("Add", ["one", erf], p + "g1")], p + "g2"), "half"], p + "gelu")
    return layer_norm(b, b.op("Add", [dense(b, gelu, p + "f2", FFN, HIDDEN), x], p + "res2"), p + "ln2")


def causal_mask(b, seq):
    """[S, S] additive mask, -10000 above the diagonal (a GPT-style decoder's self-attention:
    position i sees positions <= i), built from the run's sequence length as exporters do."""
    r = b.op("Range", [b.const("r0", np.array(0, np.int64)), seq,
                       b.const("r1", np.array(1, np.int64))], "positions")
    rows = b.op("Unsqueeze", [r, b.const("ax1", np.array([1], np.int64))], "pos_rows")
    cols = b.op("Unsqueeze", [r, b.const("ax0c", np.array([0], np.int64))], "pos_cols")
    future = b.op("Greater", [cols, rows], "future")
    return b.op("Where", [future, "neg", b.const("zero", np.float32(0.0))], "causal_add")


def build_model(causal=False):
    b = Builder()
    for name, v in [("one", 1.0), ("neg", -10000.0), ("two", 2.0), ("eps", 1e-12),
                    ("sqrt2", 1.4142135), ("half", 0.5), ("scale", 1 / np.sqrt(HIDDEN // HEADS))]:
        b.const(name, np.float32(v))
    emb = b.op("Gather", [b.weight("word_emb", VOCAB, HIDDEN), "input_ids"], "emb")
    seq = b.op("Gather", [b.op("Shape", ["input_ids"], "shape"), b.const("i1", np.array(1, np.int64))], "seq")
    seq1 = b.op("Unsqueeze", [seq, b.const("ax0", np.array([0], np.int64))], "seq1")
    pos = b.op("Slice", [b.weight("pos_emb", 512, HIDDEN), b.const("z", np.array([0], np.int64)), seq1,
                         b.const("a0", np.array([0], np.int64))], "pos")
    x = layer_norm(b, b.op("Add", [emb, pos], "x0"), "ln0")
    m4 = b.op("Unsqueeze", ["attention_mask", b.const("ax12", np.array([1, 2], np.int64))], "m4")
    mf = b.op("Cast", [m4], "mf", to=TensorProto.FLOAT)
    mask_add = b.op("Mul", [b.op("Sub", ["one", mf], "inv"), "neg"], "mask_add")
    if causal:  # padding mask [B, 1, 1, S] + causal mask [S, S] -> [B, 1, S, S]
        mask_add = b.op("Add", [mask_add, causal_mask(b, seq)], "mask_causal")
    for layer in range(LAYERS):
        x = encoder_layer(b, x, mask_add, f"l{layer}")
    cls = b.op("Gather", [x, b.const("i0", np.array(0, np.int64))], "cls", axis=1)
    b.op("Tanh", [dense(b, cls, "pool", HIDDEN, HIDDEN)], "pooled")
    b.op("Identity", [x], "last_hidden_state")
    dyn = ["batch", "sequence"]
    graph = helper.make_graph(
        b.nodes, "text_decoder" if causal else "text_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, dyn),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, dyn)],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dyn + [HIDDEN]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", HIDDEN])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def write_case(case, model, inputs, outputs):
    os.makedirs(os.path.join(case, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for i, (name, arr) in enumerate(tensors):
            path = os.path.join(case, "test_data_set_0", f"{kind}_{i}.pb")
            with open(path, "wb") as f:
                f.write(numpy_helper.from_array(arr, name).SerializeToString())


def run_ort(model_path, inputs, work):
    spec = []
    for name, arr in inputs:
        arr.tofile(os.path.join(work, name + ".bin"))
        spec.append({"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape),
                     "file": name + ".bin"})
    with open(os.path.join(work, "inputs.json"), "w") as f:
        json.dump({"inputs": spec}, f)
    out_dir = os.path.join(work, "ort")
    proc = subprocess.run(["node", RUN_ORT, "--model", model_path, "--inputs",
                           os.path.join(work, "inputs.json"), "--out-dir", out_dir],
                          capture_output=True, text=True)
    if proc.returncode == 77 or (proc.returncode != 0 and "Cannot find module" in proc.stderr):
        print("text_model: SKIP: onnxruntime-node is not installed (tools/ort)")
        sys.exit(77)
    if proc.returncode != 0:
        raise RuntimeError(f"run_ort.js failed: {proc.stderr.strip()}")
    with open(os.path.join(out_dir, "outputs.json")) as f:
        outs = json.load(f)["outputs"]
    return [(o["name"], np.fromfile(os.path.join(out_dir, o["file"]), dtype=o["dtype"])
             .reshape(o["shape"])) for o in outs]


def main():
    global HIDDEN, FFN, LAYERS, HEADS, VOCAB
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln")
    ap.add_argument("--work", help="keep the generated case here (default: a temporary folder)")
    ap.add_argument("--write", help="only write DIR/model.onnx")
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--ffn", type=int, default=FFN)
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--heads", type=int, default=HEADS)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--causal", action="store_true", help="--write the decoder (causal mask)")
    args = ap.parse_args()
    HIDDEN, FFN, LAYERS, HEADS, VOCAB = args.hidden, args.ffn, args.layers, args.heads, args.vocab
    if args.write:
        os.makedirs(args.write, exist_ok=True)
        onnx.save(build_model(args.causal), os.path.join(args.write, "model.onnx"))
        return 0
    if not args.kiln:
        ap.error("--kiln is required (or --write)")
    if shutil.which("node") is None:
        print("text_model: SKIP: node is not installed")
        return 77
    work = args.work or tempfile.mkdtemp(prefix="kiln_text_model_")
    os.makedirs(work, exist_ok=True)
    failed = False
    for causal in (False, True):
        failed |= check_variant(args.kiln, work, causal)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def check_variant(kiln, work, causal):
    """Writes the encoder (or the causal decoder), its ORT outputs on padded inputs, and runs
    kiln check on the reference and the CPU engine at O0 and O2; True when one failed."""
    name = "text_decoder" if causal else "text_encoder"
    model = build_model(causal)
    model_path = os.path.join(work, name + ".onnx")
    onnx.save(model, model_path)
    rng = np.random.RandomState(1)
    ids = rng.randint(0, VOCAB, size=(4, 32)).astype(np.int64)
    mask = np.ones((4, 32), np.int64)
    mask[1, 20:] = 0  # padded sequences
    mask[3, 5:] = 0
    inputs = [("input_ids", ids), ("attention_mask", mask)]
    ort_work = os.path.join(work, name + "_ort")
    os.makedirs(ort_work, exist_ok=True)
    outputs = run_ort(model_path, inputs, ort_work)
    case = os.path.join(work, name)
    write_case(case, model, inputs, outputs)
    failed = False
    for extra in ([], ["--backend", "cpu", "--opt", "O0"], ["--backend", "cpu", "--opt", "O2"]):
        cmd = [kiln, "check", "--rtol", "1e-3", "--atol", "1e-4"] + extra + [case]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        print(name, " ".join(extra) or "reference", "->", proc.stdout.strip().splitlines()[0]
              if proc.stdout.strip() else proc.stderr.strip())
        failed |= proc.returncode != 0
    return failed


if __name__ == "__main__":
    sys.exit(main())
