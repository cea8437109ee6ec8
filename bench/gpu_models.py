#!/usr/bin/env python3
"""The models of bench/gpu_check.sh, made where they are needed.

    gpu_models.py skeleton --out DIR
        (here, when the bundle is built) resnet50 and mobilenet_v2 from the real-model test set
        (tests/models/export_models.py), a BERT-base-sized encoder (export_models.py's
        encoder at hidden 768, 12 layers, 12 heads, sequence 128, exported with torch) and a
        GPT-2-small-sized decode step (tests/models/decoder_step.py at hidden 768, 12 layers,
        12 heads, vocabulary 50257, its dims fixed at one new position after a past of 127) as
        ONNX *skeletons*: every float initializer of more than 64 values keeps its name, dtype
        and dims but not its data, so the four models travel in a few hundred KB.
    gpu_models.py materialize --skeletons DIR --out DIR
        (on the GPU machine) fills the weights from a fixed seed (fan-in scaled normals;
        BatchNorm statistics and scales near 1, so 50 layers stay O(1)) and writes each model in
        the ONNX backend-test layout: model.onnx and test_data_set_0 with inputs and the outputs
        of ONNX Runtime (CPU), for `kiln check --backend cuda`.
    gpu_models.py torch-latency --model NAME --batch N --mode eager|compile|autotune|overhead [--runs R]
        (on the GPU machine) the same architecture in PyTorch (torchvision's when installed,
        else the definitions below; the encoder from export_models.py), random weights, fp32
        (TF32 off, like Kiln's default), timed end to end as `kiln bench` times an engine:
        pinned host input -> device -> model -> host output, synchronised. Prints one JSON line.

Needs onnx and numpy (skeleton: also torch; materialize: onnxruntime; torch-latency: torch).
"""
import argparse
import json
import math
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("resnet50", "mobilenet_v2", "bert_base", "gpt2_step")
BERT = dict(vocab=30522, max_len=128, hidden=768, heads=12, ff=3072, layers=12)
SEQ = 128
GPT2 = dict(vocab=50257, hidden=768, heads=12, layers=12, past=127)
STRIP_ABOVE = 64  # float initializers with more values than this travel without data


def models_dir():
    base = os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln")
    return os.path.join(base, "models")


def encoder_class(torch):
    sys.path.insert(0, os.path.join(REPO, "tests", "models"))
    import torch_models  # noqa: E402  (the test set's encoder definition)
    return type(torch_models.build_encoder(torch))


def export_bert(path):
    import torch
    model = encoder_class(torch)(**BERT).eval()
    ids = torch.zeros(1, SEQ, dtype=torch.int64)
    mask = torch.ones(1, SEQ, dtype=torch.float32)
    dyn = {n: {0: "batch"} for n in ("input_ids", "attention_mask", "last_hidden_state", "pooled")}
    torch.onnx.export(model, (ids, mask), path, opset_version=17, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooled"], dynamic_axes=dyn, do_constant_folding=False)


def export_gpt2_step(path):
    """decoder_step.py at GPT-2-small size, its dims fixed: one new position after 127."""
    import subprocess
    import tempfile
    import onnx
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "models", "decoder_step.py"),
                        "--write", tmp, "--hidden", str(GPT2["hidden"]), "--layers", str(GPT2["layers"]),
                        "--heads", str(GPT2["heads"]), "--vocab", str(GPT2["vocab"])], check=True)
        m = onnx.load(os.path.join(tmp, "model.onnx"))
    past = GPT2["past"]
    sizes = {"sequence": 1, "past_sequence_length": past, "past_sequence_length + sequence": past + 1}
    for v in list(m.graph.input) + list(m.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param in sizes:
                d.dim_value = sizes[d.dim_param]
    onnx.save(m, path)


def strip(src, dst):
    import onnx
    m = onnx.load(src)
    kept = 0
    for t in m.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type == onnx.TensorProto.FLOAT and n > STRIP_ABOVE:
            t.ClearField("raw_data")
            t.ClearField("float_data")
            t.doc_string = "kiln-skeleton"
        else:
            kept += 1
    onnx.save(m, dst)
    return kept


def cmd_skeleton(args):
    os.makedirs(args.out, exist_ok=True)
    for name in MODELS:
        dst = os.path.join(args.out, name + ".onnx")
        if name in ("bert_base", "gpt2_step"):
            tmp = dst + ".full"
            (export_bert if name == "bert_base" else export_gpt2_step)(tmp)
            strip(tmp, dst)
            os.remove(tmp)
        else:
            src = os.path.join(models_dir(), name, "model.onnx")
            if not os.path.exists(src):
                sys.exit(f"{src} missing: run tests/models/export_models.py first")
            strip(src, dst)
        print(f"skeleton {dst}: {os.path.getsize(dst)} bytes")


def fill(model, rng):
    """Seeded weights for every stripped initializer (see the module doc)."""
    import numpy as np
    from onnx import numpy_helper
    bn_role = {}
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            for i, role in zip(range(1, 5), ("scale", "bias", "mean", "var")):
                bn_role[node.input[i]] = role
    for t in model.graph.initializer:
        if t.doc_string != "kiln-skeleton":
            continue
        dims = list(t.dims)
        role = bn_role.get(t.name)
        if role in ("scale", "var"):
            v = rng.uniform(0.75, 1.25, dims)
        elif role in ("bias", "mean"):
            v = rng.normal(0.0, 0.1, dims)
        elif len(dims) >= 2:
            fan_in = int(np.prod(dims[1:])) if len(dims) > 2 else dims[0]
            v = rng.normal(0.0, 1.0 / math.sqrt(max(fan_in, 1)), dims)
        else:
            v = rng.normal(0.0, 0.02, dims)
        t.CopyFrom(numpy_helper.from_array(v.astype(np.float32), t.name))


def inputs_for(model, rng, batch=1):
    import numpy as np
    import onnx
    feeds = {}
    for inp in model.graph.input:
        dims = [d.dim_value if d.dim_value > 0 else batch for d in inp.type.tensor_type.shape.dim]
        integer = inp.type.tensor_type.elem_type == onnx.TensorProto.INT64
        if inp.name == "input_ids":
            feeds[inp.name] = rng.integers(0, BERT["vocab"], dims).astype(np.int64)
        elif inp.name == "position_ids":  # the new position after the past
            feeds[inp.name] = np.full(dims, GPT2["past"], np.int64)
        elif inp.name == "attention_mask" and integer:  # the decoder's: the past and itself
            feeds[inp.name] = np.ones(dims, np.int64)
        elif inp.name == "attention_mask":
            mask = np.ones(dims, np.float32)
            mask[..., dims[-1] * 3 // 4:] = 0.0  # padded tail
            feeds[inp.name] = mask
        else:
            feeds[inp.name] = rng.normal(0.0, 1.0, dims).astype(np.float32)
    return feeds


def reference_outputs(path, feeds, model, work, kiln):
    """The expected outputs: ONNX Runtime (CPU) where installed, else Kiln's reference
    interpreter (`kiln run`, for rehearsing this script without onnxruntime)."""
    import subprocess
    from onnx import numpy_helper
    try:
        import onnxruntime as ort
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    except ImportError:
        if not kiln:
            raise
    cmd = [kiln, "run", path, "--output-dir", work]
    for k, inp in enumerate(model.graph.input):
        cmd += ["--input", f"{inp.name}={os.path.join(work, f'input_{k}.pb')}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    outs = []
    for k in range(len(model.graph.output)):
        with open(os.path.join(work, f"output_{k}.pb"), "rb") as f:
            t = __import__("onnx").TensorProto()
            t.ParseFromString(f.read())
            outs.append(numpy_helper.to_array(t))
    return outs


def cmd_materialize(args):
    import numpy as np
    import onnx
    from onnx import numpy_helper
    for name in MODELS:
        src = os.path.join(args.skeletons, name + ".onnx")
        if not os.path.exists(src):
            print(f"{name}: no skeleton", file=sys.stderr)
            continue
        rng = np.random.default_rng(2024)
        m = onnx.load(src)
        fill(m, rng)
        out = os.path.join(args.out, name)
        data = os.path.join(out, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        path = os.path.join(out, "model.onnx")
        onnx.save(m, path)
        feeds = inputs_for(m, rng)
        for k, inp in enumerate(m.graph.input):
            with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(feeds[inp.name], inp.name).SerializeToString())
        outs = reference_outputs(path, feeds, m, data, args.kiln)
        for k, (o, v) in enumerate(zip(m.graph.output, outs)):
            with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, o.name).SerializeToString())
        print(f"{name}: {path}")


# ---------------------------------------------------------------- PyTorch architectures
def resnet50(nn):
    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + (self.down(x) if self.down is not None else x))

    layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                   nn.MaxPool2d(3, 2, 1)], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def mobilenet_v2(nn):
    def cbr(cin, cout, k, s, groups=1):
        return [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU6(inplace=True)]

    class Inverted(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hid = cin * t
            body = (cbr(cin, hid, 1, 1) if t != 1 else []) + cbr(hid, hid, 3, stride, hid)
            self.body = nn.Sequential(*body, nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    layers, cin = cbr(3, 32, 3, 2), 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            layers.append(Inverted(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += cbr(320, 1280, 1, 1) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def gpt2_step(torch):
    """The decode step of decoder_step.py in PyTorch: pre-LayerNorm blocks, tied embeddings,
    erf GELU, the cache concatenated per layer; past as one [layers, 2, B, heads, P, d] tensor."""
    nn = torch.nn
    hid, heads, layers, vocab = GPT2["hidden"], GPT2["heads"], GPT2["layers"], GPT2["vocab"]
    dim = hid // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hid), nn.LayerNorm(hid)
            self.q, self.k, self.v, self.o = (nn.Linear(hid, hid) for _ in range(4))
            self.fc, self.fc2 = nn.Linear(hid, 4 * hid), nn.Linear(4 * hid, hid)

        def forward(self, x, mask_add, pk, pv):
            b, s, _ = x.shape
            h = self.ln1(x)
            q, k, v = (t(h).view(b, s, heads, dim).transpose(1, 2) for t in (self.q, self.k, self.v))
            k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dim) + mask_add, -1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, s, hid))
            return x + self.fc2(nn.functional.gelu(self.fc(self.ln2(x)))), k, v

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, hid), nn.Embedding(1024, hid)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.lnf = nn.LayerNorm(hid)

        def forward(self, ids, pos, mask, past):
            x = self.wte(ids) + self.wpe(pos)
            mask_add = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
            presents = []
            for i, blk in enumerate(self.blocks):
                x, k, v = blk(x, mask_add, past[i, 0], past[i, 1])
                presents += [k, v]
            return (self.lnf(x) @ self.wte.weight.t(), *presents)

    return Step()


def torch_inputs(torch, name, batch):
    """Host inputs for `name` at `batch`, as `kiln bench` feeds the ONNX model."""
    if name == "bert_base":
        return [torch.randint(0, BERT["vocab"], (batch, SEQ)), torch.ones(batch, SEQ)]
    if name == "gpt2_step":
        p = GPT2["past"]
        return [torch.randint(0, GPT2["vocab"], (batch, 1)), torch.full((batch, 1), p),
                torch.ones(batch, p + 1, dtype=torch.int64),
                torch.randn(GPT2["layers"], 2, batch, GPT2["heads"], p, GPT2["hidden"] // GPT2["heads"])]
    return [torch.randn(batch, 3, 224, 224)]


def torch_model(torch, name):
    if name == "bert_base":
        return encoder_class(torch)(**BERT)
    if name == "gpt2_step":
        return gpt2_step(torch)
    try:
        import torchvision
        return getattr(torchvision.models, name)(weights=None)
    except ImportError:
        return (resnet50 if name == "resnet50" else mobilenet_v2)(torch.nn)


def cmd_torch_latency(args):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    model = torch_model(torch, args.model).eval().to(dev)
    host = [h.pin_memory() for h in torch_inputs(torch, args.model, args.batch)]
    t0 = time.perf_counter()
    # compile: torch.compile's default; autotune: max-autotune-no-cudagraphs (Triton GEMM and
    # convolution autotuning, no graphs); overhead: reduce-overhead (CUDA graphs, as Kiln replays).
    modes = {"compile": None, "autotune": "max-autotune-no-cudagraphs", "overhead": "reduce-overhead"}
    fn = torch.compile(model, mode=modes[args.mode]) if args.mode in modes else model

    def step():
        out = fn(*[h.to(dev, non_blocking=True) for h in host])
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o.cpu() for o in outs]

    with torch.inference_mode():
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        prepare_s = time.perf_counter() - t0
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            step()  # .cpu() synchronises
            times.append((time.perf_counter() - t) * 1000.0)
    times.sort()
    print(json.dumps({"model": args.model, "batch": args.batch, "mode": args.mode, "runs": args.runs,
                      "p50_ms": times[len(times) // 2], "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))],
                      "prepare_s": prepare_s, "torch": torch.__version__}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("skeleton")
    s.add_argument("--out", required=True)
    m = sub.add_parser("materialize")
    m.add_argument("--skeletons", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--kiln", help="kiln binary for reference outputs when onnxruntime is absent")
    t = sub.add_parser("torch-latency")
    t.add_argument("--model", choices=MODELS, required=True)
    t.add_argument("--batch", type=int, default=1)
    t.add_argument("--mode", choices=("eager", "compile", "autotune", "overhead"), default="eager")
    t.add_argument("--runs", type=int, default=100)
    t.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    {"skeleton": cmd_skeleton, "materialize": cmd_materialize, "torch-latency": cmd_torch_latency}[args.cmd](args)


if __name__ == "__main__":
    main()
