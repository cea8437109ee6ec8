#!/usr/bin/env bash
# The standard load test:  loadtest/run.sh [BUILD_DIR] [SECONDS]
# Starts a local kilnd (loopback, its default OpenMP wait policy) on a temporary model repository
# with the example model and resnet18 (~/.cache/kiln/models/resnet18/model.onnx, skipped when
# absent), and runs kiln-load (closed loop, random batch-1 inputs per GetModel) at concurrency
# 1, 8 and 32, with dynamic batching on (max_queue_delay_us 2000) and off (0), SECONDS each
# (default 5). Writes loadtest/results.md. Needs kilnd and kiln-load built in BUILD_DIR.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
seconds="${2:-5}"
# shellcheck source=loadtest/local_kilnd.sh
source "$root/loadtest/local_kilnd.sh"

stage_models "$root" 1

pick_free_ports

start_kilnd() {  # delay_us
  cat >"$work/server.yaml" <<YAML
server: {grpc_address: '127.0.0.1:$grpc_port', http_address: '127.0.0.1:$http_port'}
model_repository: '$work/models'
engine_cache_dir: '$work/cache'
log: {level: warn}
model_defaults: {max_queue_delay_us: $1}
YAML
  "$build/server/kilnd" --config "$work/server.yaml" &
  pid=$!
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port/readyz")" = 200 ] && return
    sleep 0.2
  done
  echo "run.sh: kilnd never became ready" >&2
  exit 1
}

for delay in 2000 0; do
  start_kilnd "$delay"
  for model in "${models[@]}"; do
    warmup=200
    [ "$model" = resnet18 ] && warmup=8
    for c in 1 8 32; do
      echo "== $model delay=${delay}us c=$c ${seconds}s" >&2
      "$build/loadtest/kiln-load" --target "127.0.0.1:$grpc_port" --model "$model" \
        -c "$c" -z "${seconds}s" --warmup "$warmup" --json "$work/r_${model}_${delay}_${c}.json" >/dev/null
    done
  done
  kill -TERM "$pid"
  wait "$pid"
  pid=""
done

python3 - "$work" "$root/loadtest/results.md" "$seconds" "$(nproc)" "${models[@]}" <<'PY'
import json, sys, datetime
work, out, seconds, cores, models = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
ms = lambda ns: f"{ns / 1e6:.2f}"


def p999(r):  # ghz has no 99.9th percentile: nearest rank over the successful calls' details
    lat = sorted(d["latency"] for d in (r["details"] or []) if not d["error"])
    return lat[min(len(lat), max(1, -(-999 * len(lat) // 1000))) - 1] if lat else 0


lines = ["# kilnd load test (loadtest/run.sh)", "",
         f"{datetime.date.today()}, {cores} cores, kilnd and kiln-load on the same machine (loopback), "
         f"kilnd's default OpenMP wait policy (PASSIVE, GOMP_SPINCOUNT=1000), closed loop, {seconds} s per row after warm-up, one-row random "
         "Predicts (kiln-load --model). Latencies in ms.", "",
         "| model | batching | c | count | rps | p50 | p90 | p95 | p99 | p99.9 | max | errors |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for model in models:
    for delay in ("2000", "0"):
        for c in ("1", "8", "32"):
            r = json.load(open(f"{work}/r_{model}_{delay}_{c}.json"))
            lat = {d["percentage"]: d["latency"] for d in r["latencyDistribution"]}
            errors = r["count"] - r["statusCodeDistribution"].get("OK", 0)
            batching = f"on ({delay} us)" if delay != "0" else "off (0)"
            lines.append(f"| {model} | {batching} | {c} | {r['count']} | {r['rps']:.0f} | {ms(lat[50])} | "
                         f"{ms(lat[90])} | {ms(lat[95])} | {ms(lat[99])} | {ms(p999(r))} | "
                         f"{ms(r['slowest'])} | {errors} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
