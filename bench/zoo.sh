#!/usr/bin/env bash
# The whole-zoo parity run behind docs/cpu-engine.md's table: every torchvision
# classification model (tests/models/export_models.py --models zoo), Kiln vs ONNX Runtime at
# batch 1 and 8 on 2 threads at each ISA level this CPU has (KILN_MAX_CPU_ISA caps Kiln's
# side; ORT picks its kernels by CPUID and cannot be capped), and each model's cold and
# warm load time in kilnd. Hours on 2 cores; results land in OUT, then
# bench/zoo_table.py OUT prints the table. compare_ort.js re-runs a noisy round itself
# (p99/p50 above 1.5 on either side); the top level is measured in two full passes, and every
# model whose ratio moved more than 10 % between them a third time (rerun_<isa>.json), which
# the table shows in their place.
#   bench/zoo.sh [OUT (default bench/results/zoo)] [--only m1,m2]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/bench/results/zoo}"
shift || true
only=()
[ "${1:-}" = "--only" ] && only=(--only "$2")
zoo="${KILN_CACHE_DIR:-$HOME/.cache/kiln}/zoo"
mkdir -p "$out"
/usr/bin/python3 "$root/tests/models/export_models.py" --out "$zoo" --models zoo
levels=(avx2)
grep -q avx512f /proc/cpuinfo && levels=(avx512 avx2)
compare() {  # ISA OUT_JSON [compare_ort.js flags]
  local isa=$1 json=$2
  shift 2
  KILN_MAX_CPU_ISA=$isa node "$root/bench/compare_ort.js" --kiln "$root/build/tools/kiln" \
    --models "$zoo" --batches 1,8 --rounds 4 --runs 5 --json "$json" "$@"
}
for isa in "${levels[@]}"; do
  compare "$isa" "$out/compare_$isa.json" "${only[@]}"
done
top=${levels[0]}
compare "$top" "$out/compare2_$top.json" "${only[@]}"
moved="$(/usr/bin/python3 - "$out/compare_$top.json" "$out/compare2_$top.json" <<'PY'
import json, sys
first, second = ({(r["model"], r["batch"]): r["ratio"] for r in json.load(open(f))["rows"]
                  if "ratio" in r} for f in sys.argv[1:3])
print(",".join(sorted({m for (m, b), x in first.items()
                       if (m, b) in second and abs(second[(m, b)] - x) > 0.1 * x})))
PY
)"
if [ -n "$moved" ]; then
  compare "$top" "$out/rerun_$top.json" --only "$moved"
fi
names=()
for d in "$zoo"/*/; do
  n="$(basename "$d")"
  [ -f "$d/model.onnx" ] || continue
  if [ "${#only[@]}" -gt 0 ] && [[ ",${only[1]}," != *",$n,"* ]]; then continue; fi
  names+=("$n")
done
"$root/bench/load_times.sh" --models "$zoo" "${names[@]}" >"$out/load_times.jsonl"
/usr/bin/python3 "$root/bench/zoo_table.py" "$out"
