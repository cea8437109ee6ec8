#!/usr/bin/env bash
# ctest `loadtest`: kilnd on free loopback ports with the example model, kiln-load -n 200 -c 4
# --json, and the ghz report checked: it parses, has ghz's fields, count == 200, OK == 200.
#   loadtest_test.sh KILND KILN_LOAD SOURCE_DIR
set -euo pipefail
kilnd=$1 load=$2 src=$3
# shellcheck source=loadtest/local_kilnd.sh
source "$(dirname "${BASH_SOURCE[0]}")/local_kilnd.sh"

pick_free_ports

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
assert len(r["details"]) == 200 and all(d["status"] == "OK" and d["error"] == "" for d in r["details"])
assert r["date"].endswith("Z") and all(d["timestamp"].endswith("Z") for d in r["details"]), r["date"]
o = r["options"]
assert o["insecure"] is True and o["binary"] is False and o["CPUs"] >= 1, o
assert "rps" not in o and "latencyP999" not in r, "fields ghz does not write"
print("ghz report OK:", r["count"], "calls,", round(r["rps"]), "rps")
PY

# The ghz configs (loadtest/ghz/*.json) as ghz would use them, without ghz (not packaged for
# Debian): the proto and the call they name exist, inline `data` is a request kilnd accepts
# (sent by kiln-load, which parses the same proto3 JSON form), and make_data.py writes a
# request file kilnd accepts (shown on the example; resnet18's is the same form, bigger).
python3 - "$src" "$work" <<'PY'
import json, os, re, sys
src, work = sys.argv[1], sys.argv[2]
ghz = os.path.join(src, "loadtest", "ghz")
configs = sorted(f for f in os.listdir(ghz) if f.endswith(".json"))
assert configs, "no ghz configs"
for name in configs:
    c = json.load(open(os.path.join(ghz, name)))
    proto = os.path.join(src, c["proto"])
    assert os.path.isfile(proto), f"{name}: proto {c['proto']} missing"
    for p in c.get("import-paths", []):
        assert os.path.isdir(os.path.join(src, p)), f"{name}: import path {p} missing"
    package, service, method = c["call"].rsplit(".", 2)
    text = open(proto).read()
    assert re.search(rf"^package {re.escape(package)};", text, re.M), f"{name}: package"
    assert re.search(rf"service {service}\s*{{[^}}]*rpc {method}\s*\(", text, re.S), \
        f"{name}: {c['call']} is not an rpc of {c['proto']}"
    assert ("data" in c) != ("data-file" in c), f"{name}: data or data-file"
    if "data" in c:
        json.dump(c["data"], open(os.path.join(work, f"inline_{name}"), "w"))
    else:
        make = open(os.path.join(ghz, "make_data.py")).read()
        assert c["data-file"] in make, f"{name}: {c['data-file']} is not what make_data.py writes"
print("ghz configs OK:", ", ".join(configs))
PY
for f in "$work"/inline_*.json; do
  "$load" --target "127.0.0.1:$grpc_port" --data "$f" -n 20 --json "$work/inline.json" >/dev/null
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['statusCodeDistribution']=={'OK':20}, r" "$work/inline.json"
done
# Debian's python3 (with numpy), not whatever python3 comes first on the PATH.
debian_python=/usr/bin/python3
[ -x "$debian_python" ] || debian_python=python3
"$debian_python" "$src/loadtest/ghz/make_data.py" --model example --input x --shape 1,8 -o "$work/made.json" >/dev/null
"$load" --target "127.0.0.1:$grpc_port" --data "$work/made.json" -n 20 --json "$work/made_report.json" >/dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['statusCodeDistribution']=={'OK':20}, r" "$work/made_report.json"
echo "ghz data OK"
