#!/usr/bin/env bash
# Cold vs warm restart time-to-READY of kilnd with the engine cache on disk.
#   bench/engine_cache_restart.sh [KILND] [MODEL_NAME...]
# Copies ~/.cache/kiln/models/<name>/model.onnx (default: resnet18 resnet50) into a temporary
# repository (buckets 1 and 2), starts kilnd with an empty engine cache (cold: compile + warm-up
# check), stops it, starts it again on the same cache (warm), and prints seconds until /readyz
# answers 200 for each start. A benchmark, not a test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kilnd="${1:-$root/build/server/kilnd}"
shift || true
models=("${@:-resnet18 resnet50}")
read -r -a models <<<"${models[*]}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for m in "${models[@]}"; do
  mkdir -p "$work/models/$m/1"
  cp "$HOME/.cache/kiln/models/$m/model.onnx" "$work/models/$m/1/model.onnx"
  echo "max_batch_size: 2" >"$work/models/$m/config.yaml"
done
port=$((20000 + RANDOM % 20000))
cat >"$work/server.yaml" <<YAML
server: {grpc_address: '127.0.0.1:$((port + 1))', http_address: '127.0.0.1:$port'}
model_repository: '$work/models'
engine_cache_dir: '$work/cache'
log: {level: warn}
YAML

# Starts kilnd, prints seconds until /readyz is 200, stops it with SIGTERM.
time_to_ready() {
  local t0 pid
  t0=$(date +%s.%N)
  "$kilnd" --config "$work/server.yaml" &
  pid=$!
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ]; do
    sleep 0.05
  done
  echo "$(date +%s.%N) - $t0" | bc
  kill -TERM "$pid"
  wait "$pid"
}

cold=$(time_to_ready)
warm=$(time_to_ready)
echo "models: ${models[*]} (buckets 1,2)"
echo "cold start to READY: ${cold} s"
echo "warm start to READY: ${warm} s"
echo "cold/warm: $(echo "scale=1; $cold / $warm" | bc)x"
echo "cache files: $(ls "$work/cache" | wc -l), $(du -sh "$work/cache" | cut -f1)"
