#!/usr/bin/env bash
# Time from kilnd's start to READY for each model, cold (empty engine cache) and warm (the
# cache the cold start filled), with the embedded default config (4 batch buckets, layout
# tuning, warm-up check). One JSON object per line on stdout. A benchmark, not a test.
#   bench/load_times.sh [--kilnd build/server/kilnd] [--models DIR] [--no-warm] NAME...
# NAME is a folder of DIR (default ~/.cache/kiln/models) holding model.onnx.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kilnd="$root/build/server/kilnd"
models="$HOME/.cache/kiln/models"
warm=1
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kilnd) kilnd="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --no-warm) warm=0; shift ;;
    *) names+=("$1"); shift ;;
  esac
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
port_http=18611 port_grpc=18610

# Starts kilnd on repository $1 with engine cache $2; prints seconds to READY (or FAILED:...).
time_to_ready() {
  local start end pid code
  start=$(date +%s.%N)
  "$kilnd" --config "$root/config/server.yaml" --model-repository "$1" --engine-cache-dir "$2" \
    --grpc-address "127.0.0.1:$port_grpc" --http-address "127.0.0.1:$port_http" \
    >"$work/kilnd.log" 2>&1 &
  pid=$!
  code=000
  for _ in $(seq 1 6000); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$port_http/readyz" || true)
    [ "$code" = 200 ] && break
    kill -0 "$pid" 2>/dev/null || break
    grep -q "FAILED" "$work/kilnd.log" && break
    sleep 0.1
  done
  end=$(date +%s.%N)
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ "$code" = 200 ]; then
    awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}'
  else
    printf 'FAILED: %s' "$(grep -m1 -o 'FAILED.*' "$work/kilnd.log" | tr '"' "'" | cut -c1-200)"
  fi
}

# The level the engines run at (KILN_MAX_CPU_ISA caps it), recorded with every row.
isa=$("$(dirname "$kilnd")/../tools/kiln" devices --json 2>/dev/null |
  sed -n 's/^{"cpu":{"isa":"\([a-z0-9]*\)".*/\1/p')
for name in "${names[@]}"; do
  repo="$work/repo" cache="$work/cache"
  rm -rf "$repo" "$cache"
  mkdir -p "$repo/$name/1" "$cache"
  ln -s "$models/$name/model.onnx" "$repo/$name/1/model.onnx"
  cold=$(time_to_ready "$repo" "$cache")
  breakdown=$(grep -m1 -o 'built [0-9]* bucket(s): [^"]*' "$work/kilnd.log" | tr '"' "'" || true)
  warm_s=null
  if [ "$warm" = 1 ] && [[ "$cold" != FAILED* ]]; then warm_s="\"$(time_to_ready "$repo" "$cache")\""; fi
  printf '{"model": "%s", "isa": "%s", "cold_s": "%s", "warm_s": %s, "breakdown": "%s"}\n' \
    "$name" "${isa:-unknown}" "$cold" "$warm_s" "$breakdown"
done
