#!/usr/bin/env bash
# What the KServe v2 protocol costs over kiln.v1 (a benchmark, not a test):
#   bench/v2_overhead.sh [BUILD_DIR] [SECONDS] [ROUNDS] [MODELS]
# One kilnd (loopback, batching window 0, engine cache on) with the example MLP and, when
# ~/.cache/kiln/models/resnet18/model.onnx exists, resnet18. kiln-load sends the same random
# one-row requests as kiln.v1 Predict and as v2 ModelInfer (raw_input_contents), closed loop,
# at concurrency 1 and 16, SECONDS per run (default 3; resnet18 twice that), alternating the
# two protocols ROUNDS times (default 5) so that drift of the machine hits both alike; the
# p50 of each protocol is the median of its rounds' p50s. MODELS: "example,resnet18" (default)
# or one of them. Beside the client's view, kilnd's
# own: the mean time inside the handler per run (kiln_request_duration_seconds by method,
# scraped before and after), which the client's share of the shared cores does not blur.
# Writes bench/results/v2.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
seconds="${2:-3}"
rounds="${3:-5}"
wanted="${4:-example,resnet18}"
# shellcheck source=loadtest/local_kilnd.sh
source "$root/loadtest/local_kilnd.sh"

want_resnet=0
[[ ",$wanted," == *,resnet18,* ]] && want_resnet=1
stage_models "$root" "$want_resnet"

pick_free_ports
cat >"$work/server.yaml" <<YAML
server: {grpc_address: '127.0.0.1:$grpc_port', http_address: '127.0.0.1:$http_port'}
model_repository: '$work/models'
engine_cache_dir: '$work/cache'
log: {level: warn}
model_defaults: {max_queue_delay_us: 0}
YAML
"$build/server/kilnd" --config "$work/server.yaml" &
pid=$!
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port/readyz")" = 200 ]; do
  sleep 0.2
done

results="$work/results.jsonl"
for model in "${models[@]}"; do
  [[ ",$wanted," == *",$model,"* ]] || continue
  s=$seconds
  [ "$model" = resnet18 ] && s=$((seconds * 2))
  for c in 1 16; do
    for round in $(seq "$rounds"); do
      for protocol in kiln v2; do
        "$build/loadtest/kiln-load" --target "127.0.0.1:$grpc_port" --model "$model" \
          --protocol "$protocol" -c "$c" --threads "$((c < 4 ? c : 4))" -n 100 >/dev/null
        curl -s "http://127.0.0.1:$http_port/metrics" >"$work/before.txt"
        "$build/loadtest/kiln-load" --target "127.0.0.1:$grpc_port" --model "$model" \
          --protocol "$protocol" -c "$c" --threads "$((c < 4 ? c : 4))" -z "${s}s" \
          --json "$work/run.json" >/dev/null
        curl -s "http://127.0.0.1:$http_port/metrics" >"$work/after.txt"
        python3 - "$work" "$model" "$c" "$protocol" "$round" >>"$results" <<'PY'
import json, re, sys
work, model, c, protocol, rnd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
r = json.load(open(f"{work}/run.json"))
p50 = [d["latency"] for d in r["latencyDistribution"] if d["percentage"] == 50][0] / 1000
method = "Predict" if protocol == "kiln" else "ModelInfer"
def scrape(name):
    got = {}
    for line in open(f"{work}/{name}.txt"):
        m = re.match(r'kiln_request_duration_seconds_(sum|count)\{model="' + model +
                     r'",method="' + method + r'"\} (\S+)', line)
        if m:
            got[m.group(1)] = float(m.group(2))
    return got
b, a = scrape("before"), scrape("after")
in_kilnd = (a["sum"] - b.get("sum", 0)) / (a["count"] - b.get("count", 0)) * 1e6
print(json.dumps({"model": model, "c": c, "protocol": protocol, "round": rnd, "p50_us": p50,
                  "rps": r["rps"], "in_kilnd_us": in_kilnd,
                  "errors": sum(n for code, n in r["statusCodeDistribution"].items() if code != "OK")}))
PY
      done
    done
  done
done

python3 - "$results" "$root/bench/results/v2.md" "$(nproc)" "$seconds" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = ["# KServe v2 ModelInfer vs kiln.v1 Predict", "",
       f"Measured by `bench/v2_overhead.sh` on {sys.argv[3]} cores (client and server share them), "
       f"{sys.argv[4]} s per run (resnet18: twice that), the two protocols alternated "
       f"{sys.argv[5]} times per row; p50 = the median of the runs' p50s. kiln-load, closed loop, "
       "one-row random requests, raw tensor bytes both ways, batching window 0, cpu device.", "",
       "In kilnd = the mean time inside the Predict / ModelInfer handler during the run (arrival "
       "to response, queue and engine included), from kilnd's own histograms; median over rounds.", "",
       "| model | concurrency | Predict p50 (us) | ModelInfer p50 (us) | v2 / v1 p50 | Predict in kilnd (us) | ModelInfer in kilnd (us) | v2 / v1 in kilnd | Predict req/s | ModelInfer req/s | errors |",
       "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
for model in dict.fromkeys(r["model"] for r in rows):
    for c in (1, 16):
        pick = lambda p, k: [r[k] for r in rows if r["model"] == model and r["c"] == c and r["protocol"] == p]
        if not pick("kiln", "p50_us"):
            continue
        v1, v2 = statistics.median(pick("kiln", "p50_us")), statistics.median(pick("v2", "p50_us"))
        k1, k2 = statistics.median(pick("kiln", "in_kilnd_us")), statistics.median(pick("v2", "in_kilnd_us"))
        out.append(f"| {model} | {c} | {v1:.0f} | {v2:.0f} | {v2 / v1:.3f} | {k1:.0f} | {k2:.0f} | {k2 / k1:.3f} | "
                   f"{statistics.median(pick('kiln', 'rps')):.0f} | {statistics.median(pick('v2', 'rps')):.0f} | "
                   f"{sum(pick('kiln', 'errors')) + sum(pick('v2', 'errors'))} |")
out += ["", "Every run:", "", "| model | c | round | protocol | p50 (us) | in kilnd (us) | req/s |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
for r in rows:
    out.append(f"| {r['model']} | {r['c']} | {r['round']} | {r['protocol']} | {r['p50_us']:.0f} | "
               f"{r['in_kilnd_us']:.0f} | {r['rps']:.0f} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
