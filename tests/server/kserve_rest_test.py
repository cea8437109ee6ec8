#!/usr/bin/env python3
"""The KServe v2 REST API's edges against the real kilnd: malformed, oversize and wrongly
sized bodies (JSON and the binary extension), the probes beside a slow upload (which gets 408
at the body timeout), the repository index, load and unload with and without the bearer token,
and the curl and Python examples of docs/server.md ("KServe v2"), run as written.

    kserve_rest_test.py SOURCE_DIR KILND

Exit 77 (skip) when numpy, onnx, grpcio or grpc_tools is missing (run with /usr/bin/python3).
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kserve_harness import MAX_BODY, SRC, STUBS, TOKEN, KServeCase, grpc, pb  # noqa: E402


class RestTest(KServeCase):
    # --- REST errors and limits

    def test_bad_rest_requests(self):
        infer = "/v2/models/example/infer"
        x = {"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}
        cases = [
            (b"{not json", 400, "malformed JSON"),
            (b"[" * 100 + b"]" * 100, 400, "nested deeper"),
            (json.dumps({"inputs": [dict(x, datatype="INT32")]}).encode(), 400, "datatype INT32"),
            (json.dumps({"inputs": [dict(x, data=[0.5] * 7)]}).encode(), 400, "has 7 elements"),
            (json.dumps({"inputs": [dict(x, data=[[0.5] * 4, [0.5] * 4, [0.5]])]}).encode(), 400, "has 9 elements"),
            (json.dumps({"inputs": [x], "outputs": [{"name": "nope"}]}).encode(), 400, "unknown output"),
            (json.dumps({"inputs": [dict(x, name="y")]}).encode(), 400, "unknown input"),
            (json.dumps({"inputs": [dict(x, data=["a"] * 8)]}).encode(), 400, "expected a number"),
            (json.dumps({"inputs": [dict(x, datatype="BYTES")]}).encode(), 400, "BYTES"),
            (json.dumps({"inputs": x}).encode(), 400, "'inputs' must be an array"),
            (json.dumps({"inputs": [dict(x, parameters={"shared_memory_region": "r"})]}).encode(), 501, "shared-memory"),
        ]
        for body, code, text in cases:
            status, data, _ = self.k.request("POST", infer, body, {"Content-Type": "application/json"})
            self.assertIn(text, self.rest_error(status, json.loads(data), code), body[:80])
        for path, code in (("/v2/models/nope/infer", 404), ("/v2/models/example/versions/5/infer", 404),
                           ("/v2/models/example/versions/zero/infer", 400)):
            status, doc, _ = self.k.post_json(path, {"inputs": [x]})
            self.rest_error(status, doc, code)
        status, doc, _ = self.k.post_json("/v2/models/dtypes/infer", {"inputs": [
            {"name": "in_UINT8", "shape": [1, 3], "datatype": "UINT8", "data": [1, 300, 2]}]})
        self.assertIn("out of the UINT8 range", self.rest_error(status, doc, 400))
        # The binary extension's lengths are checked against the body.
        header = json.dumps({"inputs": [dict(x, data=None, parameters={"binary_data_size": 32})]})
        header = header.replace('"data": null, ', "").encode()
        for hlen, extra, text in ((len(header) + 1000, b"\0" * 32, "exceeds the body"),
                                  (len(header), b"\0" * 16, "exceeds the 16 bytes"),
                                  (len(header), b"\0" * 40, "8 bytes of binary data after"),
                                  ("12x", b"", "not a byte count")):
            status, data, _ = self.k.request("POST", infer, header + extra,
                                             {"Inference-Header-Content-Length": str(hlen)})
            self.assertIn(text, self.rest_error(status, json.loads(data), 400))
        status, data, _ = self.k.request("GET", "/v2/no/such/endpoint")
        self.rest_error(status, json.loads(data), 404)

    def test_oversize_body_is_refused_before_it_is_read(self):
        with socket.create_connection(("127.0.0.1", self.k.http_port), timeout=10) as s:
            s.sendall(f"POST /v2/models/example/infer HTTP/1.1\r\nHost: t\r\n"
                      f"Content-Length: {MAX_BODY + 1}\r\n\r\n".encode())
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 413"))
        # A body at the limit is read (and here refused only as JSON).
        status, data, _ = self.k.request("POST", "/v2/models/example/infer", b" " * MAX_BODY)
        self.assertEqual(status, 400, data)

    def test_probes_answer_beside_a_slow_upload(self):
        slow = socket.create_connection(("127.0.0.1", self.k.http_port), timeout=10)
        slow.sendall(b"POST /v2/models/example/infer HTTP/1.1\r\nHost: t\r\n"
                     b"Content-Length: 100000\r\n\r\n" + b" " * 1000)
        t0 = time.time()
        for path in ("/healthz", "/readyz", "/v2/health/live"):
            self.assertEqual(self.k.get(path)[0], 200)
        # Well before the slow request's 3 s timeout (a loaded CI machine may take a while).
        self.assertLess(time.time() - t0, 2.0)
        # The slow one gets the body timeout (3 s here), not the probes' 2 s.
        slow.settimeout(6)
        t1 = time.time()
        answer = slow.recv(100)
        self.assertTrue(answer.startswith(b"HTTP/1.1 408"), answer)
        self.assertGreater(time.time() - t0, 2.5)
        self.assertLess(time.time() - t1, 4.0)
        slow.close()

    # --- repository

    def test_repository(self):
        md = lambda: [(m.name, m.version, m.state) for m in
                      self.stub.RepositoryIndex(pb.RepositoryIndexRequest()).models]
        self.assertIn(("example", "1", "READY"), md())
        shutil.copytree(os.path.join(self.k.repo, "example"), os.path.join(self.k.repo, "late"))
        self.assertIn(("late", "1", "UNAVAILABLE"), md())
        ready_only = self.stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True)).models
        self.assertNotIn("late", [m.name for m in ready_only])
        load = pb.RepositoryModelLoadRequest(model_name="late")
        self.assertEqual(self.code_of(self.stub.RepositoryModelLoad, load)[0],
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(self.code_of(self.stub.RepositoryModelLoad, load,
                                      metadata=[("authorization", "Bearer wrong")])[0],
                         grpc.StatusCode.PERMISSION_DENIED)
        auth = [("authorization", f"Bearer {TOKEN}")]
        self.stub.RepositoryModelLoad(load, metadata=auth)
        self.assertTrue(self.stub.ModelReady(pb.ModelReadyRequest(name="late")).ready)
        bad = pb.RepositoryModelLoadRequest(model_name="late")
        bad.parameters["config"].string_param = "{}"
        self.assertEqual(self.code_of(self.stub.RepositoryModelLoad, bad, metadata=auth)[0],
                         grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(self.code_of(self.stub.RepositoryModelLoad,
                                      pb.RepositoryModelLoadRequest(model_name="absent"),
                                      metadata=auth)[0], grpc.StatusCode.NOT_FOUND)
        self.stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="late"),
                                        metadata=auth)
        self.assertFalse(self.stub.ModelReady(pb.ModelReadyRequest(name="late")).ready)
        # REST: the same with the Authorization header.
        status, doc, _ = self.k.post_json("/v2/repository/models/late/load", {})
        self.rest_error(status, doc, 401)
        status, doc, _ = self.k.post_json("/v2/repository/models/late/load", {},
                                          {"Authorization": "Bearer nope"})
        self.rest_error(status, doc, 403)
        hdr = {"Authorization": f"Bearer {TOKEN}"}
        self.assertEqual(self.k.post_json("/v2/repository/models/late/load", {}, hdr)[0], 200)
        self.assertEqual(self.k.get("/v2/models/late/ready")[0], 200)
        status, doc, _ = self.k.post_json("/v2/repository/index", {})
        self.assertEqual(status, 200)
        self.assertIn({"name": "late", "version": "1", "state": "READY", "reason": ""}, doc)
        self.assertEqual(self.k.post_json("/v2/repository/models/late/unload", {}, hdr)[0], 200)
        self.assertEqual(self.k.get("/v2/models/late/ready")[0], 404)
        status, doc, _ = self.k.post_json("/v2/repository/index", {"ready": True})
        self.assertNotIn("late", [m["name"] for m in doc])
        self.rest_error(*self.k.post_json("/v2/repository/models/absent/load", {}, hdr)[:2], 404)
        shutil.rmtree(os.path.join(self.k.repo, "late"))

    # --- the examples of docs/server.md

    def test_docs_examples(self):
        with open(os.path.join(SRC, "docs/server.md")) as f:
            text = f.read()
        blocks = re.findall(r"<!-- tested: (sh|python) -->\s*```\w*\n(.*?)```", text, re.S)
        self.assertGreaterEqual(len(blocks), 2)
        for lang, code in blocks:
            code = code.replace("localhost:8501", f"127.0.0.1:{self.k.http_port}")
            code = code.replace("localhost:8500", f"127.0.0.1:{self.k.grpc_port}")
            if lang == "sh":
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True,
                                   text=True, timeout=60)
                self.assertEqual(r.returncode, 0, code + r.stdout + r.stderr)
            else:
                r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   timeout=60, cwd=STUBS)
                self.assertEqual(r.returncode, 0, code + r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
