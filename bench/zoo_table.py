#!/usr/bin/env python3
"""Turns bench/zoo.sh's results into the parity table of docs/cpu-engine.md.

    zoo_table.py RESULTS_DIR

RESULTS_DIR holds compare_<isa>.json (bench/compare_ort.js --json, one per ISA level),
optionally compare2_<isa>.json (a second full pass: a row is then the mean of the two),
rerun_<isa>.json (a third measurement of the models whose ratio moved more than 10 % between
the passes, whose rows replace them) and load_times.jsonl (bench/load_times.sh). Prints a
Markdown table: per model and ISA level, Kiln's and ONNX Runtime's p50 at batch 1 and 8 and
their ratio with the spread of its rounds (min-max; marked * where re-measured), the ops on
fallback or slow kernels, and the cold/warm load time; then the rows above the 0.9 target,
worst first.
"""
import json
import os
import sys

TARGET = 0.9  # Kiln/ORT p50 every row should reach


def rows_of(path):
    return json.load(open(path))["rows"] if os.path.exists(path) else []


def merge(a, b):
    """One row from two passes: their means, the spread over both passes' rounds."""
    rounds = a.get("round_ratios", [a["ratio"]]) + b.get("round_ratios", [b["ratio"]])
    m = dict(a)
    for k in ("kiln_p50", "ort_p50", "ratio"):
        m[k] = (a[k] + b[k]) / 2
    m["spread"] = [min(rounds), max(rounds)]
    m["passes"] = 2
    return m


def load_compare(d, isa):
    by = {}
    for r in rows_of(os.path.join(d, f"compare_{isa}.json")):
        by.setdefault(r["model"], {})[r.get("batch", "error")] = r
    for r in rows_of(os.path.join(d, f"compare2_{isa}.json")):
        first = by.get(r["model"], {}).get(r.get("batch"))
        if first and "ratio" in first and "ratio" in r:
            by[r["model"]][r["batch"]] = merge(first, r)
    for r in rows_of(os.path.join(d, f"rerun_{isa}.json")):
        by.setdefault(r["model"], {})[r.get("batch", "error")] = dict(r, rerun=True)
    return by


def ratio_cell(b):
    if not b:
        return "—"
    spread = b.get("spread")
    text = f"{b['ratio']:.2f}" + (f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else "")
    return text + ("*" if b.get("rerun") else "")


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
    tables = {isa: load_compare(d, isa) for isa in isas}
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
                cells += [fmt(b and b["kiln_p50"]), fmt(b and b["ort_p50"]), ratio_cell(b)]
                if b and b["ratio"] > TARGET:
                    worst.append((b["ratio"], m, isa, b["batch"]))
            cells += [ops or "none", ld.get("cold_s", ""), ld.get("warm_s") or ""]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    if worst:
        print(f"\nAbove the {TARGET} target, worst first:")
        for ratio, m, isa, b in sorted(worst, reverse=True):
            print(f"- {m} ({isa}, batch {b}): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
