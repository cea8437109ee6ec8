#!/usr/bin/env bash
# Heap allocations per CPU-engine Run on real models: every malloc-family call in the process
# is counted by a preloaded shim (built here with cc), `kiln bench` runs R1 then R2 timed runs,
# and the difference divided by R2 - R1 is what one Run costs the heap. A measurement, not a
# test (tests/unit/cpu_engine_test.cc asserts the same on small graphs).
#   bench/heap_allocs.sh [KILN] [MODEL_NAME...]   (models from ~/.cache/kiln/models/<name>)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kiln="${1:-$root/build/tools/kiln}"
shift || true
models=("${@:-resnet50 resnet18 mobilenet_v2 bert_tiny}")
read -r -a models <<<"${models[*]}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cc -O2 -shared -fPIC -o "$work/count.so" "$root/bench/tools/malloc_count.c"

# Prints the process's malloc-family call count for one `kiln bench` invocation.
count() {
  LD_PRELOAD="$work/count.so" "$kiln" bench "$@" 2>&1 >/dev/null |
    awk '/^malloc_count/ {print $2}'
}

r1=10 r2=60
printf '%-14s %-6s %-10s %s\n' model batch layout allocs_per_run
for m in "${models[@]}"; do
  for batch in 1 8; do
    for layout in primitive blocked; do
      args=("$HOME/.cache/kiln/models/$m/model.onnx" --batch "$batch" --layout "$layout")
      a="$(count "${args[@]}" --runs "$r1")"
      b="$(count "${args[@]}" --runs "$r2")"
      printf '%-14s %-6s %-10s %s\n' "$m" "$batch" "$layout" \
        "$(awk -v a="$a" -v b="$b" -v n=$((r2 - r1)) 'BEGIN {printf "%.2f", (b - a) / n}')"
    done
  done
done
