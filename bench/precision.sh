#!/usr/bin/env bash
# The precision table (docs/cpu-engine.md, "int8 for float models"): Kiln at float32, int8,
# bf16 and bf16-mixed beside ONNX Runtime at float32 in the same interleaved rounds
# (bench/compare_ort.js), each lowered variant's error against the float reference (what
# `kiln bench` reports as rel_err, on its random feed), and ORT's int8 where the model has a
# QDQ export (<model>_qdq from tests/models/export_models.py: ORT running it is ORT's int8).
# A benchmark, not a test.
#   bench/precision.sh [--only m1,m2] [--batches 1,8] [--rounds 3] [--runs 8] [OUT]
# OUT (default bench/results/precision): float.json, qdq.json and table.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kiln="${BUILD:-$root/build}/tools/kiln"
only="resnet18,mobilenet_v2" batches="1,8" rounds=3 runs=8 out="$root/bench/results/precision"
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    *) out="$1"; shift ;;
  esac
done
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
