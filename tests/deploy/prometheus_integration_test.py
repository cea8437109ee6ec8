#!/usr/bin/env python3
"""The monitoring stack end to end, on loopback: the real kilnd and a real Prometheus.

Starts kilnd (a copy of the example model and a decoder from tests/models/decoder_step.py
that generates, free ports) and /usr/bin/prometheus with
deploy/prometheus/prometheus.yml rewritten to scrape that kilnd every second and load
deploy/prometheus/rules.yml; sends Predict/BatchPredict traffic (and some bad requests, so
error series exist) and token generation over REST (generate and generate_stream); then evaluates through /api/v1/query every PromQL expression of the
Grafana dashboards and of the rules (alert expressions without their threshold comparison) and
requires each to succeed with a non-empty result. Finally every rule must evaluate with health
"ok". Exit 77 (skip) when prometheus, python3-yaml, python3-grpcio/grpc-tools or python3-onnx
are missing.

  prometheus_integration_test.py SOURCE_DIR KILND [PROMETHEUS]
"""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kiln_net import free_port, http_get, stop_process  # noqa: E402

SRC = os.path.abspath(sys.argv[1])
KILND = sys.argv[2]
PROMETHEUS = sys.argv[3] if len(sys.argv) > 3 else (shutil.which("prometheus") or "")


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


try:
    import yaml
except ImportError:
    skip("python3-yaml is not installed")
try:
    import grpc
    import grpc_tools  # noqa: F401
except ImportError:
    skip("python3-grpcio / python3-grpc-tools are not installed (run with /usr/bin/python3)")
try:
    import numpy  # noqa: F401
    import onnx  # noqa: F401  (tests/models/decoder_step.py writes the decoder)
except ImportError:
    skip("python3-onnx / python3-numpy are not installed (run with /usr/bin/python3)")
if not PROMETHEUS or not os.access(PROMETHEUS, os.X_OK):
    skip("no prometheus server binary (Debian: prometheus)")
if not os.access(KILND, os.X_OK):
    print("FAIL: kilnd binary not found:", KILND)
    sys.exit(1)

DEADLINE = time.monotonic() + 240  # ctest's TIMEOUT is 300




def wait_for(what, fn, seconds):
    end = min(time.monotonic() + seconds, DEADLINE)
    while time.monotonic() < end:
        if fn():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


# ---- PromQL helpers -------------------------------------------------------------------------
COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")


def strip_threshold(expr):
    """`LHS > 0.5` -> `LHS`: cuts at the last comparison outside (), {}, [] and strings."""
    depth, quote, cut = 0, None, None
    i = 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif depth == 0:
            for op in COMPARISONS:
                if expr.startswith(op, i) and not expr.startswith("=~", i):
                    cut = i
                    i += len(op) - 1
                    break
        i += 1
    return expr[:cut].strip() if cut is not None else expr.strip()


def grafana_to_promql(expr):
    """Grafana's macros and template variables -> plain PromQL for a 1 s scrape interval."""
    m = re.fullmatch(r"\s*label_values\((.+),\s*\w+\)\s*", expr)
    if m:
        expr = m.group(1)
    return (expr.replace("$__rate_interval", "30s").replace("$__interval", "5s")
            .replace("$__range", "1m").replace("$model", ".*"))


def main():
    tmp = tempfile.mkdtemp(prefix="kiln-deploy-it-")
    procs = []
    try:
        return run(tmp, procs)
    finally:
        for p in reversed(procs):
            stop_process(p, 20)
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp, procs):
    # gRPC stubs for the Python client.
    stubs = os.path.join(tmp, "stubs")
    os.makedirs(stubs)
    protos = sorted(glob.glob(os.path.join(SRC, "proto/kiln/v1/*.proto")))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + os.path.join(SRC, "proto"),
                    "--python_out=" + stubs, "--grpc_python_out=" + stubs] + protos, check=True)
    sys.path.insert(0, stubs)
    from kiln.v1 import inference_pb2 as pb, inference_pb2_grpc as rpc, tensor_pb2 as tpb

    # kilnd on free loopback ports with a copy of the example model and a disk engine cache.
    models = os.path.join(tmp, "models")
    shutil.copytree(os.path.join(SRC, "config/models/example"), os.path.join(models, "example"))
    # A decoder that generates (the generation panels and metrics need its traffic).
    subprocess.run([sys.executable, os.path.join(SRC, "tests/models/decoder_step.py"), "--write",
                    os.path.join(models, "dec", "1")], check=True)
    with open(os.path.join(models, "dec", "config.yaml"), "w") as f:
        f.write("device: cpu\nmax_batch_size: 2\n"
                "dynamic_dims: {past_sequence_length: [1, 64], sequence: {min: 1, max: 16, classes: [1, 16]}}\n")
    grpc_port, http_port = free_port(), free_port()
    cfg = os.path.join(tmp, "server.yaml")
    with open(cfg, "w") as f:
        yaml.safe_dump({"server": {"grpc_address": f"127.0.0.1:{grpc_port}",
                                   "http_address": f"127.0.0.1:{http_port}"},
                        "model_repository": models,
                        "engine_cache_dir": os.path.join(tmp, "cache"),
                        "log": {"level": "warn"}}, f)
    kilnd_log = open(os.path.join(tmp, "kilnd.log"), "w")
    procs.append(subprocess.Popen([KILND, "--config", cfg], stdout=kilnd_log,
                                  stderr=subprocess.STDOUT))
    kilnd_http = f"http://127.0.0.1:{http_port}"
    try:
        wait_for("kilnd /readyz", lambda: http_get(kilnd_http + "/readyz")[0] == 200, 120)
    except RuntimeError:
        print(open(os.path.join(tmp, "kilnd.log")).read())
        raise

    # Prometheus: the deploy config, scraping this kilnd every second.
    with open(os.path.join(SRC, "deploy/prometheus/prometheus.yml")) as f:
        pcfg = yaml.safe_load(f)
    pcfg["global"]["scrape_interval"] = "1s"
    pcfg["global"]["evaluation_interval"] = "1s"
    pcfg["rule_files"] = [os.path.join(SRC, "deploy/prometheus", r) for r in pcfg["rule_files"]]
    jobs = [j for j in pcfg["scrape_configs"] if j["job_name"] == "kilnd"]
    assert jobs, "prometheus.yml has no job kilnd"
    jobs[0]["static_configs"] = [{"targets": [f"127.0.0.1:{http_port}"]}]
    jobs[0]["scrape_interval"] = "1s"
    pcfg["scrape_configs"] = jobs
    pcfg_path = os.path.join(tmp, "prometheus.yml")
    with open(pcfg_path, "w") as f:
        yaml.safe_dump(pcfg, f)
    prom_port = free_port()
    prom = f"http://127.0.0.1:{prom_port}"
    prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
    procs.append(subprocess.Popen(
        [PROMETHEUS, "--config.file=" + pcfg_path,
         "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=prom_log, stderr=subprocess.STDOUT))
    try:
        wait_for("prometheus /-/ready", lambda: http_get(prom + "/-/ready")[0] == 200, 60)
    except RuntimeError:
        print(open(os.path.join(tmp, "prometheus.log")).read()[-4000:])
        raise

    def query(expr):
        url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = http_get(url)
        try:
            return json.loads(body)
        except ValueError:
            return {"status": f"http {status}", "error": body[:200]}

    # Traffic: 4 client threads for ~12 s of scrapes; good requests of 1..8 rows (they batch),
    # BatchPredict, and bad ones (unknown model: NOT_FOUND; wrong shape: INVALID_ARGUMENT).
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = rpc.InferenceServiceStub(channel)

    def tensor(rows, cols=8):
        return tpb.Tensor(dtype=tpb.DATA_TYPE_FLOAT, shape=[rows, cols],
                          raw_data=bytes(4 * rows * cols))

    counts = {"ok": 0, "err": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def client(seed):
        i = seed
        while not stop.is_set():
            i += 1
            try:
                if i % 10 == 0:
                    stub.Predict(pb.PredictRequest(model="no_such_model",
                                                   inputs={"x": tensor(1)}), timeout=10)
                elif i % 10 == 5:
                    stub.Predict(pb.PredictRequest(model="example",
                                                   inputs={"x": tensor(1, 3)}), timeout=10)
                elif i % 7 == 0:
                    stub.BatchPredict(pb.BatchPredictRequest(
                        model="example", samples=[pb.Sample(inputs={"x": tensor(1)})] * 3),
                        timeout=10)
                else:
                    stub.Predict(pb.PredictRequest(model="example",
                                                   inputs={"x": tensor(1 + i % 8)}), timeout=10)
                with lock:
                    counts["ok"] += 1
            except grpc.RpcError:
                with lock:
                    counts["err"] += 1
            time.sleep(0.005)

    def generator():
        i = 0
        while not stop.is_set():
            i += 1
            route = "generate_stream" if i % 3 == 0 else "generate"
            body = json.dumps({"input_ids": [1 + i % 50, 2, 3], "parameters": {"max_tokens": 8}})
            req = urllib.request.Request(f"{kilnd_http}/v2/models/dec/{route}", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    r.read()
                with lock:
                    counts["ok"] += 1
            except (urllib.error.URLError, OSError):
                with lock:
                    counts["err"] += 1
            time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(k * 1000,)) for k in range(4)]
    threads.append(threading.Thread(target=generator))
    for t in threads:
        t.start()
    try:
        def scraped_enough():
            r = query('count_over_time(kiln_requests_total{code="OK"}[1m])')
            return r.get("status") == "success" and any(
                float(s["value"][1]) >= 8 for s in r["data"]["result"])
        wait_for("8 scrapes of kilnd with traffic", scraped_enough, 60)
        time.sleep(3)  # a few rule evaluations with traffic flowing
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
    print(f"traffic: {counts['ok']} ok, {counts['err']} rejected (intended)")
    if counts["ok"] == 0 or counts["err"] == 0:
        print("FAIL: traffic did not produce both good and bad requests")
        return 1

    # Every expression: dashboards and rules.
    exprs = []  # (origin, promql)
    for path in sorted(glob.glob(os.path.join(SRC, "deploy/grafana/dashboards/*.json"))):
        dash = json.load(open(path))
        for p in dash["panels"]:
            for t in p.get("targets", []):
                exprs.append((f"{os.path.basename(path)}: {p['title']} [{t['refId']}]",
                              grafana_to_promql(t["expr"])))
        for v in dash.get("templating", {}).get("list", []):
            if v.get("type") == "query":
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                exprs.append((f"{os.path.basename(path)}: variable ${v['name']}",
                              grafana_to_promql(q)))
    with open(os.path.join(SRC, "deploy/prometheus/rules.yml")) as f:
        rules = yaml.safe_load(f)
    rule_names = []
    for g in rules["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                rule_names.append(r["alert"])
                exprs.append((f"alert {r['alert']} (threshold stripped)", strip_threshold(r["expr"])))
                exprs.append((f"alert {r['alert']} (as written)", r["expr"]))
            else:
                rule_names.append(r["record"])
                exprs.append((f"record {r['record']}", r["expr"]))
                exprs.append((f"recorded series {r['record']}", r["record"]))

    failures = 0
    for origin, e in exprs:
        as_written = origin.endswith("(as written)")
        r = query(e)
        ok = r.get("status") == "success"
        n = len(r["data"]["result"]) if ok and isinstance(r["data"]["result"], list) else 0
        # An alert expression as written may be empty (no alert firing); it must be valid.
        good = ok and (as_written or n > 0)
        print(f"{'ok  ' if good else 'FAIL'} {n:3d} series  {origin}: {e}"
              + ("" if ok else f"  -> {r.get('error')}"))
        failures += not good
    print(f"{len(exprs)} expressions, {failures} failed")

    # Every rule evaluated without error.
    rr = json.loads(http_get(prom + "/api/v1/rules")[1])
    seen = {}
    for g in rr["data"]["groups"]:
        for r in g["rules"]:
            seen[r["name"]] = (r.get("health"), r.get("lastError", ""))
    for name in rule_names:
        health, err = seen.get(name, (None, "not loaded"))
        if health != "ok":
            print(f"FAIL rule {name}: health {health} {err}")
            failures += 1
    print(f"{len(rule_names)} rules loaded with health ok" if failures == 0 else "")

    # Only the intended target is scraped, and it is up.
    up = query('up{job="kilnd"}')["data"]["result"]
    if len(up) != 1 or up[0]["value"][1] != "1":
        print("FAIL: up{job=\"kilnd\"} is not exactly one target at 1:", up)
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
