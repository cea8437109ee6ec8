#!/usr/bin/env python3
"""Turns bench/zoo.sh's results into the parity table of docs/cpu-engine.md.

    zoo_table.py RESULTS_DIR

RESULTS_DIR holds compare_<isa>.json (bench/compare_ort.js --json, one per ISA level),
optionally rerun_<isa>.json (a second, later measurement of some models, whose rows replace
the first's: bench/zoo.sh re-measures every model with a ratio above 1.0) and
load_times.jsonl (bench/load_times.sh). Prints a Markdown table: per model and ISA level,
Kiln's and ONNX Runtime's p50 at batch 1 and 8 and their ratio (marked * where re-measured),
the ops on fallback or slow kernels, and the cold/warm load time; then the rows whose ratio
is above 1.0, worst first.
"""
import json
import os
import sys


def load_compare(path, rerun_path=None):
    rows = json.load(open(path))["rows"]
    if rerun_path and os.path.exists(rerun_path):
        rows += [dict(r, rerun=True) for r in json.load(open(rerun_path))["rows"]]
    by = {}
    for r in rows:
        by.setdefault(r["model"], {})[r.get("batch", "error")] = r
    return by


def fmt(v, nd=2):
    return "—" if v is None else f"{v:.{nd}f}"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = sys.argv[1]
    isas = sorted(f[len("compare_"):-len(".json")] for f in os.listdir(d)
                  if f.startswith("compare_") and f.endswith(".json"))
    loads = {}
    lt = os.path.join(d, "load_times.jsonl")
    if os.path.exists(lt):
        for line in open(lt):
            if line.strip():
                r = json.loads(line)
                # Rows naming no level were measured at the top one.
                loads[(r["model"], r.get("isa", isas[-1]))] = r
    tables = {isa: load_compare(os.path.join(d, f"compare_{isa}.json"),
                                os.path.join(d, f"rerun_{isa}.json")) for isa in isas}
    models = sorted(set().union(*[set(t) for t in tables.values()]) | {m for m, _ in loads})
    print("| model | ISA | Kiln b1 ms | ORT b1 ms | b1 ratio | Kiln b8 ms | ORT b8 ms | b8 ratio "
          "| fallback / slow ops | load cold s | load warm s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    worst = []
    for m in models:
        for isa in isas:
            rows = tables[isa].get(m, {})
            if "error" in rows:
                print(f"| {m} | {isa} | error: {rows['error']['error'][:80]} |||||||||")
                continue
            b1, b8 = rows.get(1), rows.get(8)
            eng = (b1 or b8 or {}).get("engine", {})
            ops = ",".join(x for x in [eng.get("fallback_op_types", ""), eng.get("slow_ops", "")] if x)
            ld = loads.get((m, isa), {})  # on the row of the level it was measured at
            cells = [m, isa]
            for b in (b1, b8):
                mark = "*" if b and b.get("rerun") else ""
                cells += [fmt(b and b["kiln_p50"]), fmt(b and b["ort_p50"]), fmt(b and b["ratio"]) + mark]
                if b and b["ratio"] > 1.0:
                    worst.append((b["ratio"], m, isa, b["batch"]))
            cells += [ops or "none", ld.get("cold_s", ""), ld.get("warm_s") or ""]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    if worst:
        print("\nAbove 1.0, worst first:")
        for ratio, m, isa, b in sorted(worst, reverse=True):
            print(f"- {m} ({isa}, batch {b}): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
