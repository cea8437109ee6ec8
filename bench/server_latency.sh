#!/usr/bin/env bash
# Server overhead and dynamic batching, measured (a benchmark, not a test):
#   bench/server_latency.sh [BUILD_DIR] [SECONDS]
# For resnet18 (~/.cache/kiln/models/resnet18/model.onnx) and the example MLP:
#  - the bare engine: `kiln bench` p50 at batch 1, 2, 4, 8 (best throughput = batch / p50);
#  - kilnd with max_queue_delay_us 0 and 2000: Predict p50/p99 and throughput at concurrency
#    1, 8 and 32 (bench/server_latency, one connection per client thread);
#  - server-added latency = Predict p50 at c=1 (delay 0) minus the bare engine's b1 p50;
#  - serving efficiency = throughput at c=32 / the bare engine's best throughput.
# Writes bench/results/server.md. kiln and kilnd run with their default OpenMP wait policy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
seconds="${2:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/models/resnet18/1" "$work/models/example/1"
cp "$HOME/.cache/kiln/models/resnet18/model.onnx" "$work/models/resnet18/1/"
cp "$root/config/models/example/1/model.onnx" "$work/models/example/1/"
declare -A bare_p50 bare_best

# The bare engine under kilnd's settings (its OpenMP wait policy) with an explicit team of every core: with
# the default team it measured ~1.8x slower on resnet18 b1 here, and spinning threads
# collapse (10x) whenever another process takes a core.
bare() {  # model path -> fills bare_p50[name], bare_best[name]
  local name=$1 path=$2 best=0
  for b in 1 2 4 8; do
    "$build/tools/kiln" bench "$path" --batch "$b" --runs 50 \
      --threads "$(nproc)" --json "$work/bare.json" >/dev/null
    local p50
    p50=$(python3 -c "import json;print(json.load(open('$work/bare.json'))['p50_ms'])")
    [ "$b" = 1 ] && bare_p50[$name]=$(echo "$p50 * 1000" | bc -l)
    local rps
    rps=$(echo "$b * 1000 / $p50" | bc -l)
    if (($(echo "$rps > $best" | bc -l))); then best=$rps; fi
  done
  bare_best[$name]=$best
}
bare resnet18 "$work/models/resnet18/1/model.onnx"
bare example "$work/models/example/1/model.onnx"

port=$((20000 + RANDOM % 20000))
results="$work/results.jsonl"
for delay in 0 2000; do
  cat >"$work/server.yaml" <<YAML
server: {grpc_address: '127.0.0.1:$((port + 1))', http_address: '127.0.0.1:$port'}
model_repository: '$work/models'
engine_cache_dir: '$work/cache'
log: {level: warn}
model_defaults: {max_queue_delay_us: $delay}
YAML
  "$build/server/kilnd" --config "$work/server.yaml" &
  pid=$!
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ]; do
    sleep 0.1
  done
  for model in example resnet18; do
    # resnet18 answers ~60 rows/s: twice the time for enough samples at c=32.
    s=$seconds
    [ "$model" = resnet18 ] && s=$((seconds * 2))
    for c in 1 8 32; do
      "$build/bench/server_latency" --target "127.0.0.1:$((port + 1))" --model "$model" \
        --concurrency "$c" --seconds "$s" |
        sed "s/^{/{\"delay_us\":$delay,/" >>"$results"
      # kilnd's own view of the c=1 calls (the model's first traffic): request vs compute time.
      if [ "$c" = 1 ] && [ "$delay" = 0 ]; then
        curl -s "http://127.0.0.1:$port/metrics" >"$work/metrics_$model.txt"
      fi
    done
  done
  kill -TERM "$pid"
  wait "$pid"
done

# The gRPC floor: a Predict for a model that does not exist, answered NOT_FOUND before any
# model work, with the example's request body (kiln-load, c=1; errors are the point here).
floor_us=0
if [ -x "$build/loadtest/kiln-load" ]; then
  "$build/server/kilnd" --config "$work/server.yaml" &
  pid=$!
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ]; do
    sleep 0.1
  done
  echo '{"model":"no-such-model","inputs":{"x":{"dtype":"DATA_TYPE_FLOAT","shape":[1,8],"float_data":[1,2,3,4,5,6,7,8]}}}' >"$work/floor.json"
  "$build/loadtest/kiln-load" --target "127.0.0.1:$((port + 1))" --data "$work/floor.json" \
    -c 1 -n 3000 --warmup 300 --json "$work/floor_report.json" >/dev/null
  floor_us=$(python3 -c "import json;r=json.load(open('$work/floor_report.json'));print([d['latency'] for d in r['latencyDistribution'] if d['percentage']==50][0]/1000)")
  kill -TERM "$pid"
  wait "$pid"
fi

python3 - "$results" "$root/bench/results/server.md" \
  "${bare_p50[resnet18]}" "${bare_best[resnet18]}" "${bare_p50[example]}" "${bare_best[example]}" \
  "$(nproc)" "$seconds" "$work" "$floor_us" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
work, floor_us = sys.argv[9], float(sys.argv[10])

def in_server_us(model):
    """Mean Predict time inside kilnd minus mean engine time, from its own histograms."""
    sums = {}
    for line in open(f"{work}/metrics_{model}.txt"):
        m = re.match(r'kiln_(request|compute)_duration_seconds_(sum|count)\{model="' + model +
                     r'"[^}]*\} (\S+)', line)
        if m:
            key = (m.group(1), m.group(2))
            sums[key] = sums.get(key, 0.0) + float(m.group(3))
    mean = lambda k: sums[(k, "sum")] / sums[(k, "count")]
    return (mean("request") - mean("compute")) * 1e6
bare = {"resnet18": (float(sys.argv[3]), float(sys.argv[4])),
        "example": (float(sys.argv[5]), float(sys.argv[6]))}
out = ["# kilnd: server-added latency and throughput", "",
       f"Measured by `bench/server_latency.sh` on {sys.argv[7]} cores, {sys.argv[8]} s per point "
       "(resnet18: twice that; after 1 s of warm-up), one-row Predicts, closed loop, OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000 (the default), "
       "default buckets 1/2/4/8, 1 instance, cpu device. The bare engine: `kiln bench` "
       "--threads <cores>, same policy; best throughput over batches 1/2/4/8.", "",
       "Server-added = Predict p50 seen by the client minus the bare engine's p50: it includes the "
       f"gRPC round trip, whose floor here (NOT_FOUND for an unknown model, kiln-load c=1) is "
       f"{floor_us:.0f} us p50, and moving the request's bytes. In kilnd = mean time inside the "
       "Predict handler minus mean engine time, from kilnd's own histograms (decode, validate, "
       "queue, batch, encode).", "",
       "| model | bare engine p50 b1 (us) | Predict p50 c=1 (us) | server-added (us) | in kilnd (us) | "
       "bare best throughput (rows/s) | serving efficiency c=32, delay 0 | c=32, delay 2000 |",
       "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
def find(m, d, c):
    return next(r for r in rows if r["model"] == m and r["delay_us"] == d and r["concurrency"] == c)
for m, (p50, best) in bare.items():
    s = find(m, 0, 1)["p50_us"]
    e0 = find(m, 0, 32)["throughput_rps"] / best
    e2 = find(m, 2000, 32)["throughput_rps"] / best
    eff = lambda e: f"{e:.2f}" if m != "example" else "n/a"  # see below
    out.append(f"| {m} | {p50:.0f} | {s:.0f} | {s - p50:.0f} | {in_server_us(m):.0f} | {best:.0f} | "
               f"{eff(e0)} | {eff(e2)} |")
out += ["", "The example MLP's engine runs in about a microsecond: one gRPC call per row can never "
        "approach its bare throughput, so serving efficiency is reported for resnet18 only."]
out += ["", "| model | max_queue_delay_us | concurrency | throughput (req/s) | p50 (us) | p99 (us) | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
for r in rows:
    out.append(f"| {r['model']} | {r['delay_us']} | {r['concurrency']} | {r['throughput_rps']:.0f} | "
               f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['errors']} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
