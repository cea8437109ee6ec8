#!/usr/bin/env bash
# The whole-zoo parity run behind docs/cpu-engine.md's table: every torchvision
# classification model (tests/models/export_models.py --models zoo), Kiln vs ONNX Runtime at
# batch 1 and 8 on 2 threads at each ISA level this CPU has (KILN_MAX_CPU_ISA caps Kiln's
# side; ORT picks its kernels by CPUID and cannot be capped), and each model's cold and
# warm load time in kilnd. Hours on 2 cores; results land in OUT, then
# bench/zoo_table.py OUT prints the table. The models above 1.0 at the top level are
# measured a second time (rerun_<isa>.json), which the table shows.
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
for isa in "${levels[@]}"; do
  KILN_MAX_CPU_ISA=$isa node "$root/bench/compare_ort.js" --kiln "$root/build/tools/kiln" \
    --models "$zoo" --batches 1,8 --rounds 2 --runs 5 --json "$out/compare_$isa.json" "${only[@]}"
done
# A second measurement of every model with a ratio above 1.0 at the top level (a row can
# lose a few hundredths to the machine's state); zoo_table.py shows it in place of the first.
above="$(/usr/bin/python3 -c 'import json,sys; print(",".join(sorted({r["model"] for r in json.load(open(sys.argv[1]))["rows"] if r.get("ratio", 0) > 1.0})))' "$out/compare_${levels[0]}.json")"
if [ -n "$above" ]; then
  KILN_MAX_CPU_ISA=${levels[0]} node "$root/bench/compare_ort.js" --kiln "$root/build/tools/kiln" \
    --models "$zoo" --batches 1,8 --rounds 2 --runs 5 --json "$out/rerun_${levels[0]}.json" --only "$above"
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
