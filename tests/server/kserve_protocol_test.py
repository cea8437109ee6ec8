#!/usr/bin/env python3
"""The KServe v2 protocol against the real kilnd, with clients a user would have: the gRPC
binding and the REST inference API.

gRPC: stubs generated at test time from proto/kserve/*.proto (package `inference`, the
published definition's names and numbers). REST: Python's http.client. kiln.v1 stubs only to
prove the three APIs give the same numbers.

    kserve_protocol_test.py SOURCE_DIR KILND

Exit 77 (skip) when numpy, onnx, grpcio or grpc_tools is missing (run with /usr/bin/python3).
Covers every endpoint of the gRPC binding, health and metadata over both, every datatype
through raw bytes, typed contents, JSON and the binary extension, the bad gRPC requests,
classification, streaming and statistics. REST errors, limits, the repository and the docs'
examples are in kserve_rest_test.py.
"""
import json
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kserve_harness import (CONTENTS_FIELD, DTYPES, KServeCase, bf16_to_f32, grpc, np, pb,  # noqa: E402
                            sample, tpb, v1)


class ProtocolTest(KServeCase):
    # --- health and metadata

    def test_health_and_server_metadata(self):
        self.assertTrue(self.stub.ServerLive(pb.ServerLiveRequest()).live)
        self.assertTrue(self.stub.ServerReady(pb.ServerReadyRequest()).ready)
        md = self.stub.ServerMetadata(pb.ServerMetadataRequest())
        self.assertEqual(md.name, "kiln")
        for ext in ("classification", "binary_tensor_data", "model_repository", "statistics",
                    "model_configuration"):
            self.assertIn(ext, md.extensions)
        self.assertEqual(self.k.get("/v2/health/live")[0], 200)
        self.assertEqual(self.k.get("/v2/health/ready")[0], 200)
        status, body, _ = self.k.get("/v2")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["name"], "kiln")

    def test_model_ready(self):
        ready = lambda n, v="": self.stub.ModelReady(pb.ModelReadyRequest(name=n, version=v)).ready
        self.assertTrue(ready("example"))
        self.assertTrue(ready("example", "1"))
        self.assertFalse(ready("example", "2"))
        self.assertFalse(ready("no_such_model"))
        code, _ = self.code_of(self.stub.ModelReady, pb.ModelReadyRequest(name="example", version="x"))
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(self.k.get("/v2/models/example/ready")[0], 200)
        self.assertEqual(self.k.get("/v2/models/example/versions/1/ready")[0], 200)
        self.assertEqual(self.k.get("/v2/models/example/versions/2/ready")[0], 404)
        self.assertEqual(self.k.get("/v2/models/no_such_model/ready")[0], 404)

    def test_model_metadata(self):
        md = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="example"))
        self.assertEqual(md.name, "example")
        self.assertEqual(list(md.versions), ["1"])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in md.inputs],
                         [("x", "FP32", [-1, 8])])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in md.outputs],
                         [("logits", "FP32", [-1, 4]), ("probs", "FP32", [-1, 4])])
        fixed = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="fixed"))
        self.assertEqual(list(fixed.inputs[0].shape), [2, 3])
        dtypes = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="dtypes"))
        self.assertEqual(sorted(t.datatype for t in dtypes.inputs), sorted(DTYPES))
        for name, version, code in (("no_such_model", "", grpc.StatusCode.NOT_FOUND),
                                    ("example", "9", grpc.StatusCode.NOT_FOUND),
                                    ("example", "-1", grpc.StatusCode.INVALID_ARGUMENT)):
            got, _ = self.code_of(self.stub.ModelMetadata,
                                  pb.ModelMetadataRequest(name=name, version=version))
            self.assertEqual(got, code)
        for path in ("/v2/models/example", "/v2/models/example/versions/1"):
            status, body, _ = self.k.get(path)
            self.assertEqual(status, 200)
            doc = json.loads(body)
            self.assertEqual(doc["inputs"], [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}])
            self.assertEqual(doc["versions"], ["1"])
        status, body, _ = self.k.get("/v2/models/no_such_model")
        self.rest_error(status, json.loads(body), 404)
        status, body, _ = self.k.get("/v2/models/example/versions/7")
        self.rest_error(status, json.loads(body), 404)

    def test_model_config(self):
        c = self.stub.ModelConfig(pb.ModelConfigRequest(name="example")).config
        self.assertEqual(c.name, "example")
        self.assertEqual(c.max_batch_size, 8)
        self.assertEqual([(i.name, list(i.dims)) for i in c.input], [("x", [8])])
        self.assertEqual(c.input[0].data_type, 11)  # TYPE_FP32
        self.assertEqual(list(c.dynamic_batching.preferred_batch_size), [1, 2, 4, 8])
        self.assertEqual(c.instance_group[0].count, 1)
        fixed = self.stub.ModelConfig(pb.ModelConfigRequest(name="fixed")).config
        self.assertEqual(fixed.max_batch_size, 0)
        self.assertEqual(list(fixed.input[0].dims), [2, 3])
        status, body, _ = self.k.get("/v2/models/example/config")
        self.assertEqual(status, 200)
        doc = json.loads(body)
        self.assertEqual(doc["max_batch_size"], 8)
        self.assertEqual(doc["input"][0]["dims"], [8])
        self.assertEqual(doc["input"][0]["data_type"], "TYPE_FP32")
        code, _ = self.code_of(self.stub.ModelConfig, pb.ModelConfigRequest(name="nope"))
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)

    # --- inference

    def test_grpc_rest_and_v1_agree(self):
        x = np.random.default_rng(1).uniform(-1, 1, (3, 8)).astype(np.float32)
        grpc_out = self.outputs_of(self.infer_raw("example", {"x": ("FP32", x)}, id="r1"))
        # Typed contents give the same bytes as raw ones.
        req = pb.ModelInferRequest(model_name="example")
        t = req.inputs.add(name="x", datatype="FP32", shape=x.shape)
        t.contents.fp32_contents.extend(x.ravel().tolist())
        self.assertEqual(self.outputs_of(self.stub.ModelInfer(req)), grpc_out)
        v1resp = self.v1.Predict(v1.PredictRequest(model="example", inputs={"x": tpb.Tensor(
            dtype=tpb.DATA_TYPE_FLOAT, shape=x.shape, raw_data=x.tobytes())}))
        for name in ("logits", "probs"):
            self.assertEqual(grpc_out[name][0], "FP32")
            self.assertEqual(grpc_out[name][1], [3, 4])
            self.assertEqual(grpc_out[name][2], v1resp.outputs[name].raw_data)
        # REST, JSON both ways: the shortest round-trip text gives back the same floats.
        status, doc, _ = self.k.post_json("/v2/models/example/infer", {
            "id": "r2", "inputs": [{"name": "x", "shape": [3, 8], "datatype": "FP32",
                                    "data": x.tolist()}]})
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["id"], "r2")
        self.assertEqual(doc["model_name"], "example")
        self.assertEqual(doc["model_version"], "1")
        for o in doc["outputs"]:
            self.assertEqual(np.array(o["data"], np.float32).tobytes(), grpc_out[o["name"]][2])
        # REST, binary both ways.
        header = json.dumps({"inputs": [{"name": "x", "shape": [3, 8], "datatype": "FP32",
                                         "parameters": {"binary_data_size": x.nbytes}}],
                             "parameters": {"binary_data_output": True}}).encode()
        status, body, hdrs = self.k.request(
            "POST", "/v2/models/example/infer", header + x.tobytes(),
            {"Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(status, 200, body)
        n = int(hdrs["Inference-Header-Content-Length"])
        doc, rest = json.loads(body[:n]), body[n:]
        for o in doc["outputs"]:
            size = o["parameters"]["binary_data_size"]
            self.assertEqual(rest[:size], grpc_out[o["name"]][2])
            rest = rest[size:]
        self.assertEqual(rest, b"")

    def test_a_form_label_does_not_stop_a_large_json_body(self):
        # `curl -d` labels bodies as forms, which would be parsed as such and refused past 8 KB.
        doc = {"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.25] * 8}]}
        body = json.dumps(doc).encode() + b" " * 20000
        status, data, _ = self.k.request("POST", "/v2/models/example/infer", body,
                                         {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 200, data)
        self.assertEqual(len(json.loads(data)["outputs"]), 2)

    def test_requested_outputs_and_classification(self):
        x = np.random.default_rng(2).uniform(-1, 1, (2, 8)).astype(np.float32)
        out = self.outputs_of(self.infer_raw("example", {"x": ("FP32", x)}, outputs=["probs"]))
        self.assertEqual(list(out), ["probs"])
        probs = np.frombuffer(out["probs"][2], np.float32).reshape(2, 4)
        req = pb.ModelInferRequest(model_name="example")
        req.inputs.add(name="x", datatype="FP32", shape=x.shape)
        req.raw_input_contents.append(x.tobytes())
        o = req.outputs.add(name="probs")
        o.parameters["classification"].int64_param = 2
        cls = self.outputs_of(self.stub.ModelInfer(req))["probs"]
        self.assertEqual(cls[:2], ("BYTES", [2, 2]))
        raw, strings = cls[2], []
        while raw:
            (n,) = struct.unpack("<I", raw[:4])
            strings.append(raw[4:4 + n].decode())
            raw = raw[4 + n:]
        top = np.argsort(-probs, axis=1, kind="stable")[:, :2]
        self.assertEqual([int(s.split(":")[1]) for s in strings], top.ravel().tolist())
        self.assertAlmostEqual(float(strings[0].split(":")[0]), float(probs[0, top[0, 0]]), places=5)
        # The same over REST, mixing a JSON output and a binary one.
        status, doc, _ = self.k.post_json("/v2/models/example/infer", {
            "inputs": [{"name": "x", "shape": [2, 8], "datatype": "FP32", "data": x.ravel().tolist()}],
            "outputs": [{"name": "probs", "parameters": {"classification": 2}},
                        {"name": "logits", "parameters": {"binary_data": False}}]})
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["outputs"][0]["data"], strings)
        self.assertEqual(doc["outputs"][0]["shape"], [2, 2])
        self.assertEqual(len(doc["outputs"][1]["data"]), 8)

    def test_every_datatype(self):
        arrays = {n: sample(n, (2, 3), seed=i) for i, n in enumerate(DTYPES)}
        # gRPC raw bytes.
        resp = self.infer_raw("dtypes", {f"in_{n}": (n, a) for n, a in arrays.items()})
        out = self.outputs_of(resp)
        for n, a in arrays.items():
            self.assertEqual(out[f"out_{n}"][:2], (n, [2, 3]), n)
            self.assertEqual(out[f"out_{n}"][2], a.tobytes(), n)
        # gRPC typed contents, for every datatype that has a field ("typed" takes those).
        req = pb.ModelInferRequest(model_name="typed")
        for n, a in arrays.items():
            if DTYPES[n][2]:
                t = req.inputs.add(name=f"in_{n}", datatype=n, shape=a.shape)
                getattr(t.contents, CONTENTS_FIELD[n]).extend(a.ravel().tolist())
        out = self.outputs_of(self.stub.ModelInfer(req))
        for n, a in arrays.items():
            if DTYPES[n][2]:
                self.assertEqual(out[f"out_{n}"][2], a.tobytes(), n)
        # FP16 and BF16 have no field: raw bytes only.
        req = pb.ModelInferRequest(model_name="dtypes")
        req.inputs.add(name="in_FP16", datatype="FP16", shape=[2, 3])
        self.assertIn("no data", self.code_of(self.stub.ModelInfer, req)[1])
        req.inputs[0].contents.fp32_contents.extend([0.0] * 6)
        self.assertIn("FP16 has no contents field", self.code_of(self.stub.ModelInfer, req)[1])
        # REST JSON: numbers (booleans for BOOL); FP16/BF16 as their float values.
        inputs = []
        for n, a in arrays.items():
            values = bf16_to_f32(a) if n == "BF16" else a
            inputs.append({"name": f"in_{n}", "datatype": n, "shape": [2, 3],
                           "data": values.ravel().tolist()})
        status, doc, _ = self.k.post_json("/v2/models/dtypes/infer", {"inputs": inputs})
        self.assertEqual(status, 200, doc)
        for o in doc["outputs"]:
            n = o["name"][4:]
            self.assertEqual(o["datatype"], n)
            a = arrays[n]
            want = bf16_to_f32(a) if n == "BF16" else a
            got = np.array(o["data"], dtype=np.float32 if n == "BF16" else want.dtype)
            self.assertTrue(np.array_equal(got.ravel(), want.ravel()), n)
        # REST binary, every datatype in one body.
        spec, blob = [], b""
        for n, a in arrays.items():
            spec.append({"name": f"in_{n}", "datatype": n, "shape": [2, 3],
                         "parameters": {"binary_data_size": a.nbytes}})
            blob += a.tobytes()
        header = json.dumps({"inputs": spec, "parameters": {"binary_data_output": True}}).encode()
        status, body, hdrs = self.k.request("POST", "/v2/models/dtypes/infer", header + blob,
                                            {"Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(status, 200, body)
        n_json = int(hdrs["Inference-Header-Content-Length"])
        doc, rest = json.loads(body[:n_json]), body[n_json:]
        for o in doc["outputs"]:
            size = o["parameters"]["binary_data_size"]
            self.assertEqual(rest[:size], arrays[o["name"][4:]].tobytes(), o["name"])
            rest = rest[size:]

    def test_bad_grpc_requests(self):
        x = np.zeros((1, 8), np.float32)
        bad = [
            ("wrong datatype", dict(model_name="example"), [("x", "INT64", [1, 8], np.zeros((1, 8), np.int64).tobytes())], "datatype INT64"),
            ("short data", dict(model_name="example"), [("x", "FP32", [1, 8], x.tobytes()[:28])], "needs 32"),
            ("unknown input", dict(model_name="example"), [("y", "FP32", [1, 8], x.tobytes())], "unknown input 'y'"),
            ("bad shape", dict(model_name="example"), [("x", "FP32", [1, 9], np.zeros(9, np.float32).tobytes())], "shape [1,9]"),
            ("BYTES", dict(model_name="example"), [("x", "BYTES", [1], b"\x01\x00\x00\x00a")], "BYTES"),
            ("unknown datatype", dict(model_name="example"), [("x", "FLOAT", [1, 8], x.tobytes())], "unknown datatype 'FLOAT'"),
            ("batch too big", dict(model_name="example"), [("x", "FP32", [9, 8], np.zeros((9, 8), np.float32).tobytes())], "max_batch_size"),
        ]
        for what, kw, inputs, text in bad:
            req = pb.ModelInferRequest(**kw)
            for name, dt, shape, raw in inputs:
                req.inputs.add(name=name, datatype=dt, shape=shape)
                req.raw_input_contents.append(raw)
            code, msg = self.code_of(self.stub.ModelInfer, req)
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, what)
            self.assertIn(text, msg, what)
        for kw, code in ((dict(model_name="nope"), grpc.StatusCode.NOT_FOUND),
                         (dict(model_name="example", model_version="3"), grpc.StatusCode.NOT_FOUND),
                         (dict(model_name="example", model_version="one"), grpc.StatusCode.INVALID_ARGUMENT)):
            got, _ = self.code_of(self.stub.ModelInfer, self._req(x, **kw))
            self.assertEqual(got, code, kw)
        got, msg = self.code_of(self.infer_raw, "example", {"x": ("FP32", x)}, outputs=["nope"])
        self.assertEqual(got, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("unknown output 'nope'", msg)
        # Counts and ranges of typed contents; raw and typed together.
        req = pb.ModelInferRequest(model_name="example")
        req.inputs.add(name="x", datatype="FP32", shape=[1, 8]).contents.fp32_contents.extend([1.0] * 7)
        self.assertIn("has 7 elements", self.code_of(self.stub.ModelInfer, req)[1])
        req = pb.ModelInferRequest(model_name="dtypes")
        for n in DTYPES:
            t = req.inputs.add(name=f"in_{n}", datatype=n, shape=[1, 3])
            req.raw_input_contents.append(np.zeros(3, DTYPES[n][1]).tobytes())
        req.inputs[list(DTYPES).index("INT8")].contents.int_contents.extend([1, 2, 3])
        self.assertIn("both contents and raw_input_contents", self.code_of(self.stub.ModelInfer, req)[1])
        del req.raw_input_contents[:]
        req2 = pb.ModelInferRequest(model_name="dtypes")
        t = req2.inputs.add(name="in_INT8", datatype="INT8", shape=[1, 3])
        t.contents.int_contents.extend([1, 300, 3])
        self.assertIn("out of the INT8 range", self.code_of(self.stub.ModelInfer, req2)[1])
        req = self._req(x)
        req.raw_input_contents.append(b"extra")
        self.assertIn("2 entries for 1 inputs", self.code_of(self.stub.ModelInfer, req)[1])
        # Extensions Kiln lacks are UNIMPLEMENTED, saying so.
        req = self._req(x)
        req.inputs[0].parameters["shared_memory_region"].string_param = "r0"
        code, msg = self.code_of(self.stub.ModelInfer, req)
        self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("shared-memory", msg)
        req = self._req(x)
        req.parameters["sequence_id"].int64_param = 7
        self.assertEqual(self.code_of(self.stub.ModelInfer, req)[0], grpc.StatusCode.UNIMPLEMENTED)

    def _req(self, x, **kw):
        kw.setdefault("model_name", "example")
        req = pb.ModelInferRequest(**kw)
        req.inputs.add(name="x", datatype="FP32", shape=x.shape)
        req.raw_input_contents.append(x.tobytes())
        return req

    def test_unsupported_extensions(self):
        for call, req in ((self.stub.SystemSharedMemoryStatus, pb.SystemSharedMemoryStatusRequest()),
                          (self.stub.SystemSharedMemoryRegister, pb.SystemSharedMemoryRegisterRequest(name="r")),
                          (self.stub.SystemSharedMemoryUnregister, pb.SystemSharedMemoryUnregisterRequest()),
                          (self.stub.CudaSharedMemoryStatus, pb.CudaSharedMemoryStatusRequest()),
                          (self.stub.CudaSharedMemoryRegister, pb.CudaSharedMemoryRegisterRequest()),
                          (self.stub.CudaSharedMemoryUnregister, pb.CudaSharedMemoryUnregisterRequest()),
                          (self.stub.TraceSetting, pb.TraceSettingRequest()),
                          (self.stub.LogSettings, pb.LogSettingsRequest())):
            code, msg = self.code_of(call, req)
            self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("kilnd does not implement", msg)

    def test_stream_infer(self):
        xs = [np.random.default_rng(10 + i).uniform(-1, 1, (1, 8)).astype(np.float32) for i in range(20)]

        def requests():
            for i, x in enumerate(xs):
                req = self._req(x, id=f"s{i}")
                if i == 7:
                    req.model_name = "nope"
                yield req

        got = list(self.stub.ModelStreamInfer(requests()))
        self.assertEqual(len(got), 20)
        for i, (x, r) in enumerate(zip(xs, got)):
            self.assertEqual(r.infer_response.id, f"s{i}")
            if i == 7:
                self.assertIn("not loaded", r.error_message)
                continue
            self.assertEqual(r.error_message, "")
            # Streamed requests batch together: another engine (bucket), so equal within
            # rounding rather than bit for bit.
            want = self.outputs_of(self.stub.ModelInfer(self._req(x)))
            got_out = self.outputs_of(r.infer_response)
            for name, (dt, shape, raw) in want.items():
                self.assertEqual(got_out[name][:2], (dt, shape))
                np.testing.assert_allclose(np.frombuffer(got_out[name][2], np.float32),
                                           np.frombuffer(raw, np.float32), rtol=1e-5, atol=1e-6)

    def test_statistics(self):
        def stats():
            s = self.stub.ModelStatistics(pb.ModelStatisticsRequest(name="fixed"))
            self.assertEqual(len(s.model_stats), 1)
            return s.model_stats[0]
        before = stats()
        x = np.ones((2, 3), np.float32)
        for _ in range(3):
            self.infer_raw("fixed", {"in_FP32": ("FP32", x)})
        self.code_of(self.infer_raw, "fixed", {"in_FP32": ("FP32", np.ones((2, 4), np.float32))})
        after = stats()
        self.assertEqual(after.version, "1")
        self.assertEqual(after.inference_count - before.inference_count, 3)
        self.assertEqual(after.execution_count - before.execution_count, 3)
        self.assertEqual(after.inference_stats.success.count - before.inference_stats.success.count, 3)
        self.assertEqual(after.inference_stats.fail.count - before.inference_stats.fail.count, 1)
        self.assertGreater(after.inference_stats.compute_infer.ns, 0)
        self.assertGreater(after.last_inference, 0)
        everything = self.stub.ModelStatistics(pb.ModelStatisticsRequest())
        self.assertGreaterEqual(len(everything.model_stats), 3)
        code, _ = self.code_of(self.stub.ModelStatistics, pb.ModelStatisticsRequest(name="nope"))
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)
        status, body, _ = self.k.get("/v2/models/fixed/stats")
        self.assertEqual(status, 200)
        doc = json.loads(body)["model_stats"][0]
        self.assertEqual(doc["inference_count"], after.inference_count)  # numbers, not strings
        self.assertEqual(self.k.get("/v2/models/stats")[0], 200)
        self.assertEqual(self.k.get("/v2/models/fixed/versions/1/stats")[0], 200)
        self.assertEqual(self.k.get("/v2/models/nope/stats")[0], 404)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
