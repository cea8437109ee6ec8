#!/usr/bin/env bash
# ctest `loadtest`: kilnd on free loopback ports with the example model, kiln-load -n 200 -c 4
# --json, and the ghz report checked: it parses, has ghz's fields, count == 200, OK == 200.
#   loadtest_test.sh KILND KILN_LOAD SOURCE_DIR
set -euo pipefail
kilnd=$1 load=$2 src=$3
work="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Two free ports from the kernel (bound to port 0, then released).
read -r grpc_port http_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

mkdir -p "$work/models"
cp -r "$src/config/models/example" "$work/models/"
cat >"$work/server.yaml" <<YAML
server: {grpc_address: '127.0.0.1:$grpc_port', http_address: '127.0.0.1:$http_port'}
model_repository: '$work/models'
log: {level: warn}
YAML
"$kilnd" --config "$work/server.yaml" &
pid=$!

# --wait-ready polls GetModel until the example is READY (bounded by ctest's TIMEOUT too).
timeout 90 "$load" --target "127.0.0.1:$grpc_port" --model example --wait-ready 60s \
  -n 200 -c 4 --warmup 10 --json "$work/report.json"

python3 - "$work/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k in ["count", "total", "average", "fastest", "slowest", "rps", "latencyDistribution",
          "histogram", "statusCodeDistribution", "errorDistribution"]:
    assert k in r, f"missing {k}"
assert r["count"] == 200, r["count"]
assert r["statusCodeDistribution"] == {"OK": 200}, r["statusCodeDistribution"]
assert r["errorDistribution"] == {}, r["errorDistribution"]
assert 0 < r["fastest"] <= r["average"] <= r["slowest"], r
assert r["total"] > 0 and r["rps"] > 0
lat = {d["percentage"]: d["latency"] for d in r["latencyDistribution"]}
assert sorted(lat) == [10, 25, 50, 75, 90, 95, 99], lat
assert all(isinstance(p, int) for p in lat), "ghz reads percentages as integers"
assert lat[50] <= lat[99] <= r["slowest"], lat
assert sum(b["count"] for b in r["histogram"]) == 200, r["histogram"]
assert abs(sum(b["frequency"] for b in r["histogram"]) - 1) < 1e-3
print("ghz report OK:", r["count"], "calls,", round(r["rps"]), "rps")
PY
