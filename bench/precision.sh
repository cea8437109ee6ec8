#!/usr/bin/env bash
# The precision table (docs/cpu-engine.md, "int8 for float models"): Kiln at float32, int8,
# bf16 and bf16-mixed beside ONNX Runtime at float32 in the same interleaved rounds
# (bench/compare_ort.js), each lowered variant's error against the float reference (what
# `kiln bench` reports as rel_err, on its random feed), and ORT's int8 where the model has a
# QDQ export (<model>_qdq from tests/models/export_models.py: ORT running it is ORT's int8).
# A benchmark, not a test.
#   bench/precision.sh [OUT]
# OUT (default bench/results/precision): float.json, qdq.json and table.md.
# Env: MODELS (default resnet18,mobilenet_v2: folders of ~/.cache/kiln/models), BATCHES (1,8),
# ROUNDS (3), RUNS (8), BUILD (default build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kiln="${BUILD:-$root/build}/tools/kiln"
only="${MODELS:-resnet18,mobilenet_v2}" batches="${BATCHES:-1,8}"
rounds="${ROUNDS:-3}" runs="${RUNS:-8}" out="${1:-$root/bench/results/precision}"
mkdir -p "$out"
models="${KILN_CACHE_DIR:-$HOME/.cache/kiln}/models"
qdq=""
for m in ${only//,/ }; do
  [ -f "$models/${m}_qdq/model.onnx" ] && qdq="${qdq:+$qdq,}${m}_qdq"
done
compare() {  # ONLY KILN_ENTRIES JSON
  node "$root/bench/compare_ort.js" --kiln "$2" --only "$1" --batches "$batches" \
    --rounds "$rounds" --runs "$runs" --json "$3"
}
compare "$only" "$kiln,$kiln --precision int8,$kiln --precision bf16,$kiln --precision bf16-mixed" \
  "$out/float.json"
qdq_flag=()
if [ -n "$qdq" ]; then
  compare "$qdq" "$kiln" "$out/qdq.json"
  qdq_flag=(--qdq "$out/qdq.json")
fi
/usr/bin/python3 "$root/bench/precision_table.py" "$out/float.json" "${qdq_flag[@]}" | tee "$out/table.md"
