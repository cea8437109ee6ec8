"""The KServe v2 protocol tests' harness: kilnd on free ports with a repository made for them
(the example, identity models of every datatype through the reference interpreter, a fixed
shape one), stubs generated from proto/kserve and kiln.v1's protos, and a TestCase base class
with one kilnd per test module and the helpers both test files use.

    kserve_protocol_test.py | kserve_rest_test.py SOURCE_DIR KILND

Importing it exits 77 (skip) when numpy, onnx, grpcio or grpc_tools is missing.
"""
import atexit
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kiln_net import free_port, stop_process  # noqa: E402

try:
    import grpc
    import grpc_tools  # noqa: F401
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (run with Debian's /usr/bin/python3)")
    sys.exit(77)

SRC, KILND = sys.argv[1], sys.argv[2]
TOKEN = "s3cret"
MAX_BODY = 1 << 20
# name -> (ONNX element type, numpy dtype, has a typed `contents` field)
DTYPES = {
    "BOOL": (TensorProto.BOOL, np.bool_, True),
    "UINT8": (TensorProto.UINT8, np.uint8, True),
    "UINT16": (TensorProto.UINT16, np.uint16, True),
    "UINT32": (TensorProto.UINT32, np.uint32, True),
    "UINT64": (TensorProto.UINT64, np.uint64, True),
    "INT8": (TensorProto.INT8, np.int8, True),
    "INT16": (TensorProto.INT16, np.int16, True),
    "INT32": (TensorProto.INT32, np.int32, True),
    "INT64": (TensorProto.INT64, np.int64, True),
    "FP16": (TensorProto.FLOAT16, np.float16, False),
    "BF16": (TensorProto.BFLOAT16, np.uint16, False),  # numpy has no bfloat16: raw bits
    "FP32": (TensorProto.FLOAT, np.float32, True),
    "FP64": (TensorProto.DOUBLE, np.float64, True),
}
CONTENTS_FIELD = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
                  "UINT32": "uint_contents", "UINT64": "uint64_contents", "INT8": "int_contents",
                  "INT16": "int_contents", "INT32": "int_contents", "INT64": "int64_contents",
                  "FP32": "fp32_contents", "FP64": "fp64_contents"}



def identity_model(path, inputs, batch):
    """One Identity per (name, onnx type): in_<name> -> out_<name>, shape [batch, 3] or [2, 3]."""
    dim0 = "batch" if batch else 2
    ins = [helper.make_tensor_value_info(f"in_{n}", t, [dim0, 3]) for n, t in inputs]
    outs = [helper.make_tensor_value_info(f"out_{n}", t, [dim0, 3]) for n, t in inputs]
    nodes = [helper.make_node("Identity", [f"in_{n}"], [f"out_{n}"]) for n, _ in inputs]
    model = helper.make_model(helper.make_graph(nodes, "identity", ins, outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def sample(name, shape, seed):
    """Values of each datatype that survive every path exactly (in range, finite)."""
    rng = np.random.default_rng(seed)
    _, npt, _ = DTYPES[name]
    if name == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if name == "BF16":  # bfloat16 bits of small floats: the top half of a float32
        return (rng.uniform(-4, 4, shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if np.issubdtype(npt, np.integer):
        info = np.iinfo(npt)
        return rng.integers(info.min, info.max, shape, dtype=npt, endpoint=True)
    return rng.uniform(-8, 8, shape).astype(npt)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


# Python stubs of the published v2 definition and of kiln.v1, generated once per process.
STUBS = tempfile.mkdtemp(prefix="kiln_kserve_stubs_")
atexit.register(shutil.rmtree, STUBS, True)
subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + os.path.join(SRC, "proto"),
                "--python_out=" + STUBS, "--grpc_python_out=" + STUBS] +
               [os.path.join(SRC, "proto", p) for p in
                ("kserve/model_config.proto", "kserve/grpc_service.proto",
                 "kiln/v1/tensor.proto", "kiln/v1/inference.proto")], check=True)
sys.path.insert(0, STUBS)
from kserve import grpc_service_pb2 as pb, grpc_service_pb2_grpc as rpc  # noqa: E402
from kiln.v1 import inference_pb2 as v1, inference_pb2_grpc as v1rpc, tensor_pb2 as tpb  # noqa: E402,F401


class Kilnd:
    """kilnd on free ports with a repository made for these tests."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.repo = os.path.join(tmp, "models")
        shutil.copytree(os.path.join(SRC, "config/models/example"), os.path.join(self.repo, "example"))
        identity_model(os.path.join(self.repo, "dtypes/1/model.onnx"),
                       [(n, t) for n, (t, _, _) in DTYPES.items()], batch=True)
        # Identity through the reference interpreter: every dtype, no compiler in the way.
        with open(os.path.join(self.repo, "dtypes/config.yaml"), "w") as f:
            f.write("device: reference\nopt_level: O0\nmax_batch_size: 4\n")
        identity_model(os.path.join(self.repo, "typed/1/model.onnx"),
                       [(n, t) for n, (t, _, typed) in DTYPES.items() if typed], batch=True)
        shutil.copy(os.path.join(self.repo, "dtypes/config.yaml"), os.path.join(self.repo, "typed"))
        identity_model(os.path.join(self.repo, "fixed/1/model.onnx"),
                       [("FP32", TensorProto.FLOAT)], batch=False)
        self.grpc_port, self.http_port = free_port(), free_port()
        cfg = os.path.join(tmp, "server.yaml")
        with open(cfg, "w") as f:
            f.write(f"server: {{grpc_address: '127.0.0.1:{self.grpc_port}', "
                    f"http_address: '127.0.0.1:{self.http_port}', auth_token: '{TOKEN}', "
                    f"drain_timeout_ms: 2000, http_api: {{max_body_bytes: {MAX_BODY}, "
                    f"max_buffered_bytes: {4 * MAX_BODY}, body_timeout_ms: 3000}}}}\n"
                    f"model_repository: '{self.repo}'\nlog: {{level: warn}}\n")
        self.log = open(os.path.join(tmp, "kilnd.log"), "w")
        env = dict(os.environ)
        env.pop("KILN_AUTH_TOKEN", None)
        self.proc = subprocess.Popen([KILND, "--config", cfg], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("kilnd did not become ready")

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, dict(r.getheaders())

    def get(self, path):
        return self.request("GET", path)

    def post_json(self, path, doc, headers=None):
        status, data, hdrs = self.request("POST", path, json.dumps(doc).encode(),
                                          dict({"Content-Type": "application/json"}, **(headers or {})))
        return status, json.loads(data) if data else None, hdrs

    def stop(self):
        stop_process(self.proc, 20)
        self.log.close()


class KServeCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kiln_kserve_")
        cls.k = Kilnd(cls.tmp)
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.k.grpc_port}")
        cls.stub = rpc.GRPCInferenceServiceStub(cls.channel)
        cls.v1 = v1rpc.InferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.k.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # --- helpers

    def code_of(self, fn, *args, **kwargs):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(*args, **kwargs)
        return cm.exception.code(), cm.exception.details()

    def infer_raw(self, model, arrays, outputs=None, **kw):
        req = pb.ModelInferRequest(model_name=model, **kw)
        for name, (dt, a) in arrays.items():
            req.inputs.add(name=name, datatype=dt, shape=a.shape)
            req.raw_input_contents.append(a.tobytes())
        for o in outputs or []:
            req.outputs.add(name=o)
        return self.stub.ModelInfer(req)

    def outputs_of(self, resp):
        out = {}
        for t, raw in zip(resp.outputs, resp.raw_output_contents):
            out[t.name] = (t.datatype, list(t.shape), raw)
        return out

    def rest_error(self, status, body, code):
        self.assertEqual(status, code, body)
        self.assertIn("error", body)
        return body["error"]
