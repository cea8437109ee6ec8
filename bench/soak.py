#!/usr/bin/env python3
"""Soak: kilnd under mixed traffic for a while, its resources sampled, every answer checked.

    bench/soak.py KILND [--minutes 30] [--out bench/results/soak.json]

Starts kilnd on free loopback ports with a scratch repository and, for the given time, runs
at once (all traffic to 127.0.0.1 only, every loop bounded by the deadline):
  - kiln.v1 Predict and BatchPredict, KServe v2 gRPC ModelInfer and v2 REST infer on an
    affine model (y = 2x + 1) whose answers are checked exactly;
  - uploads of generated models (a random chain of element-wise ops, checked against numpy
    after the upload) and unloads of them;
  - hostile requests: wrong shapes and dtypes, unknown models, a BatchPredict whose answer
    passes the message limit, a request-sized Expand past the memory budget, garbage REST
    bodies, a Loop run past its deadline; each must get its expected error code.
Every 5 s it samples kilnd's resident memory, threads and open file descriptors. It prints
and writes a JSON summary: requests per kind, errors by code, requests answered wrongly
(the goal is 0), unexpected codes, and the maxima and drift (last minute's mean minus the
first minute's) of RSS, threads and descriptors. Run with Debian's /usr/bin/python3
(python3-grpcio, python3-grpc-tools, python3-onnx, python3-numpy).
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../tests"))
from kiln_net import free_port  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def save(model, path):
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def affine_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("Mul", ["x", "two"], ["t"]), helper.make_node("Add", ["t", "one"], ["y"])]
    g = helper.make_graph(nodes, "affine", [x], [y], initializer=[two, one])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


# Element-wise ops a generated model chains, with their numpy meaning.
CHAIN_OPS = {"Relu": lambda a: np.maximum(a, 0), "Neg": np.negative, "Abs": np.abs,
             "Tanh": np.tanh, "Sigmoid": lambda a: 1 / (1 + np.exp(-a))}


def chain_model(rng):
    ops = [rng.choice(sorted(CHAIN_OPS)) for _ in range(rng.randint(1, 12))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    names = ["x"] + [f"t{i}" for i in range(len(ops) - 1)] + ["y"]
    nodes = [helper.make_node(op, [names[i]], [names[i + 1]]) for i, op in enumerate(ops)]
    g = helper.make_graph(nodes, "chain", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), ops


def expand_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Expand", ["x", "s"], ["y"])], "expand", [x, s], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def loop_model():
    """y = x + n[0]: a Loop adding 1 per iteration, its trip count from the request."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["v", "one"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    nodes = [helper.make_node("Reshape", ["n", "scalar"], ["trips"]),
             helper.make_node("Loop", ["trips", "go", "x"], ["y"], body=body)]
    g = helper.make_graph(nodes, "loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                                          helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                          initializer=[helper.make_tensor("scalar", TensorProto.INT64, [0], []),
                                       helper.make_tensor("go", TensorProto.BOOL, [], [True])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts, self.codes, self.wrong, self.unexpected = {}, {}, 0, []

    def add(self, kind, code, wrong=False, expected=None):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            key = f"{kind}:{code}"
            self.codes[key] = self.codes.get(key, 0) + 1
            if wrong:
                self.wrong += 1
            if expected is not None and code not in expected and len(self.unexpected) < 50:
                self.unexpected.append(key)


class Soak:
    def __init__(self, kilnd, minutes):
        self.tmp = tempfile.mkdtemp(prefix="kiln_soak_")
        self.repo = os.path.join(self.tmp, "models")
        save(affine_model(), os.path.join(self.repo, "affine/1/model.onnx"))
        save(expand_model(), os.path.join(self.repo, "expand/1/model.onnx"))
        save(loop_model(), os.path.join(self.repo, "loop/1/model.onnx"))
        with open(os.path.join(self.repo, "affine/config.yaml"), "w") as f:
            f.write("max_batch_size: 8\n")
        with open(os.path.join(self.repo, "expand/config.yaml"), "w") as f:
            f.write("device: cpu\n")  # the CPU engine serves outputs sized at run time
        self.grpc_port, self.http_port = free_port(), free_port()
        cfg = os.path.join(self.tmp, "server.yaml")
        with open(cfg, "w") as f:
            f.write(f"server: {{grpc_address: '127.0.0.1:{self.grpc_port}', http_address: "
                    f"'127.0.0.1:{self.http_port}', memory_budget_bytes: 2147483648}}\n"
                    f"model_repository: '{self.repo}'\nlog: {{level: warn}}\n")
        self.log = open(os.path.join(self.tmp, "kilnd.log"), "w")
        self.proc = subprocess.Popen([kilnd, "--config", cfg], stdout=self.log, stderr=subprocess.STDOUT)
        self.end = time.time() + minutes * 60
        self.stats = Stats()
        self.samples = []
        self.gen_stubs()
        self.wait_ready()

    def gen_stubs(self):
        stubs = os.path.join(self.tmp, "stubs")
        os.makedirs(stubs)
        protos = [os.path.join(SRC, "proto", p) for p in
                  ("kserve/model_config.proto", "kserve/grpc_service.proto", "kiln/v1/tensor.proto",
                   "kiln/v1/inference.proto", "kiln/v1/model.proto")]
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + os.path.join(SRC, "proto"),
                        "--python_out=" + stubs, "--grpc_python_out=" + stubs] + protos, check=True)
        sys.path.insert(0, stubs)
        global pb, rpc, v1, v1rpc, tpb, mpb, mrpc
        from kserve import grpc_service_pb2 as pb, grpc_service_pb2_grpc as rpc
        from kiln.v1 import inference_pb2 as v1, inference_pb2_grpc as v1rpc, tensor_pb2 as tpb
        from kiln.v1 import model_pb2 as mpb, model_pb2_grpc as mrpc

    def wait_ready(self):
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if self.http("GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("kilnd did not become ready")

    def http(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def channel(self):
        return grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}",
                                     options=[("grpc.max_receive_message_length", 1 << 30)])

    # --- traffic loops: each runs until the deadline, counting what it sees

    def loop(self, fn):
        rng = random.Random(threading.get_ident())
        while time.time() < self.end:
            try:
                fn(rng)
            except Exception as e:  # a crash of the client side is a finding too
                self.stats.add("client-exception", f"{type(e).__name__}: {e}"[:200], expected=())

    def v1_predict(self, rng, stub):
        rows = rng.randint(1, 8)
        x = np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal((rows, 16)).astype(np.float32)
        if rng.random() < 0.5:
            req = v1.PredictRequest(model="affine", inputs={"x": tpb.Tensor(
                dtype=tpb.DATA_TYPE_FLOAT, shape=x.shape, raw_data=x.tobytes())})
            kind, call = "Predict", stub.Predict
        else:
            req = v1.BatchPredictRequest(model="affine", samples=[v1.Sample(inputs={"x": tpb.Tensor(
                dtype=tpb.DATA_TYPE_FLOAT, shape=[1, 16], raw_data=x[i:i + 1].tobytes())})
                for i in range(rows)])
            kind, call = "BatchPredict", stub.BatchPredict
        try:
            out = call(req, timeout=10)
        except grpc.RpcError as e:
            self.stats.add(kind, e.code().name, expected=("OK",))
            return
        if kind == "Predict":
            got = np.frombuffer(out.outputs["y"].raw_data, np.float32).reshape(rows, 16)
        else:
            got = np.concatenate([np.frombuffer(r.outputs["y"].raw_data, np.float32).reshape(1, 16)
                                  for r in out.results])
        self.stats.add(kind, "OK", wrong=not np.array_equal(got, x * 2 + 1))

    def v2_infer(self, rng, stub):
        rows = rng.randint(1, 8)
        x = np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal((rows, 16)).astype(np.float32)
        if rng.random() < 0.5:
            req = pb.ModelInferRequest(model_name="affine", inputs=[pb.ModelInferRequest.InferInputTensor(
                name="x", datatype="FP32", shape=x.shape)], raw_input_contents=[x.tobytes()])
            try:
                out = stub.ModelInfer(req, timeout=10)
            except grpc.RpcError as e:
                self.stats.add("ModelInfer", e.code().name, expected=("OK",))
                return
            got = np.frombuffer(out.raw_output_contents[0], np.float32).reshape(rows, 16)
            self.stats.add("ModelInfer", "OK", wrong=not np.array_equal(got, x * 2 + 1))
            return
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                       "data": x.flatten().tolist()}]})
        status, data = self.http("POST", "/v2/models/affine/infer", body)
        if status != 200:
            self.stats.add("RESTInfer", status, expected=(200,))
            return
        got = np.array(json.loads(data)["outputs"][0]["data"], np.float32).reshape(rows, 16)
        self.stats.add("RESTInfer", 200, wrong=not np.array_equal(got, x * 2 + 1))

    def uploads(self, rng, mstub, istub):
        model, ops = chain_model(rng)
        name = f"gen{rng.randint(0, 3)}"
        chunk = mpb.LoadModelChunk(name=name, data=model.SerializeToString(), config_yaml="max_batch_size: 4\n")
        try:
            mstub.LoadModel(iter([chunk]), timeout=60)
        except grpc.RpcError as e:
            self.stats.add("LoadModel", e.code().name, expected=("OK", "ABORTED"))
            return
        self.stats.add("LoadModel", "OK")
        x = np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal((2, 8)).astype(np.float32)
        want = x
        for op in ops:
            want = CHAIN_OPS[op](want).astype(np.float32)
        try:
            out = istub.Predict(v1.PredictRequest(model=name, inputs={"x": tpb.Tensor(
                dtype=tpb.DATA_TYPE_FLOAT, shape=x.shape, raw_data=x.tobytes())}), timeout=10)
            got = np.frombuffer(out.outputs["y"].raw_data, np.float32).reshape(2, 8)
            # One thread uploads, so the name serves the model just uploaded.
            self.stats.add("Predict-generated", "OK",
                           wrong=not np.allclose(got, want, rtol=1e-5, atol=1e-6))
        except grpc.RpcError as e:
            self.stats.add("Predict-generated", e.code().name, expected=("OK", "NOT_FOUND", "UNAVAILABLE"))
        if rng.random() < 0.5:
            try:
                mstub.UnloadModel(mpb.UnloadModelRequest(name=name, delete_from_repository=True), timeout=30)
                self.stats.add("UnloadModel", "OK")
            except grpc.RpcError as e:
                self.stats.add("UnloadModel", e.code().name, expected=("OK", "NOT_FOUND"))

    # Each hostile case: (how to send it, the code it must get).
    def hostile(self, rng, istub):
        bad = np.zeros((1, 9), np.float32)
        cases = [
            (lambda: istub.Predict(v1.PredictRequest(model="affine", inputs={"x": tpb.Tensor(
                dtype=tpb.DATA_TYPE_FLOAT, shape=bad.shape, raw_data=bad.tobytes())}), timeout=10),
             "INVALID_ARGUMENT"),                                           # wrong shape
            (lambda: istub.Predict(v1.PredictRequest(model="nope"), timeout=10), "NOT_FOUND"),
            (lambda: istub.Predict(self.expand_request(40000, 40000), timeout=30),
             "RESOURCE_EXHAUSTED"),                                         # past the budget
            (lambda: istub.Predict(self.expand_request(4096, 8192), timeout=30),
             "RESOURCE_EXHAUSTED"),                                         # past the message limit
            (lambda: istub.Predict(self.loop_request(1 << 40), timeout=0.5),
             "DEADLINE_EXCEEDED"),                                          # stopped by its deadline
        ]
        case = rng.randint(0, len(cases))
        if case == len(cases):  # garbage REST body
            status, _ = self.http("POST", "/v2/models/affine/infer", b"{\"inputs\": [tru")
            self.stats.add("hostile-rest", status, expected=(400,))
            return
        send, expected = cases[case]
        try:
            send()
            self.stats.add(f"hostile-{case}", "OK", expected=(expected,))
        except grpc.RpcError as e:
            self.stats.add(f"hostile-{case}", e.code().name, expected=(expected,))

    def loop_request(self, trips):
        x, n = np.array([0.0], np.float32), np.array([trips], np.int64)
        return v1.PredictRequest(model="loop", inputs={
            "x": tpb.Tensor(dtype=tpb.DATA_TYPE_FLOAT, shape=[1], raw_data=x.tobytes()),
            "n": tpb.Tensor(dtype=tpb.DATA_TYPE_INT64, shape=[1], raw_data=n.tobytes())})

    def expand_request(self, rows, cols):
        x = np.array([2.0], np.float32)
        s = np.array([rows, cols], np.int64)
        return v1.PredictRequest(model="expand", inputs={
            "x": tpb.Tensor(dtype=tpb.DATA_TYPE_FLOAT, shape=[1], raw_data=x.tobytes()),
            "s": tpb.Tensor(dtype=tpb.DATA_TYPE_INT64, shape=[2], raw_data=s.tobytes())})

    # --- resources

    def sample(self):
        pid = self.proc.pid
        while time.time() < self.end and self.proc.poll() is None:
            status = open(f"/proc/{pid}/status").read()
            field = lambda k: int(next(l.split()[1] for l in status.splitlines() if l.startswith(k)))
            self.samples.append({"t": time.time(), "rss_mb": field("VmRSS:") / 1024,
                                 "threads": field("Threads:"), "fds": len(os.listdir(f"/proc/{pid}/fd"))})
            time.sleep(5)

    def run(self):
        ch = self.channel()
        istub, kstub, mstub = v1rpc.InferenceServiceStub(ch), rpc.GRPCInferenceServiceStub(ch), \
            mrpc.ModelServiceStub(ch)
        workers = [lambda r: self.v1_predict(r, istub), lambda r: self.v1_predict(r, istub),
                   lambda r: self.v2_infer(r, kstub), lambda r: self.uploads(r, mstub, istub),
                   lambda r: self.hostile(r, istub)]
        threads = [threading.Thread(target=self.loop, args=(w,)) for w in workers]
        threads.append(threading.Thread(target=self.sample))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        alive = self.proc.poll() is None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return alive

    def summary(self, alive):
        def drift(key):
            t0, t1 = self.samples[0]["t"], self.samples[-1]["t"]
            first = [s[key] for s in self.samples if s["t"] <= t0 + 60]
            last = [s[key] for s in self.samples if s["t"] >= t1 - 60]
            return round(sum(last) / len(last) - sum(first) / len(first), 1)
        res = {"alive_at_end": alive, "exit_code": self.proc.returncode, "requests": self.stats.counts,
               "codes": self.stats.codes, "answered_wrongly": self.stats.wrong,
               "unexpected": self.stats.unexpected}
        if self.samples:
            for key in ("rss_mb", "threads", "fds"):
                res[key] = {"max": max(s[key] for s in self.samples), "drift": drift(key)}
        return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kilnd")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    soak = Soak(a.kilnd, a.minutes)
    try:
        res = soak.summary(soak.run())
    finally:
        shutil.rmtree(soak.tmp, ignore_errors=True)
    print(json.dumps(res, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
    return 0 if res["alive_at_end"] and res["answered_wrongly"] == 0 and not res["unexpected"] else 1


if __name__ == "__main__":
    sys.exit(main())
