#!/usr/bin/env python3
"""The precision table: each model at each batch and precision, Kiln's p50, its error against
the float reference, and its time against ONNX Runtime at float32 and, where ORT has the same
precision, at that one (int8: ORT running the model's QDQ export, tests/models/qdq.py).

  bench/precision_table.py FLOAT.json [--qdq QDQ.json]

FLOAT.json: bench/compare_ort.js --json over the float models, with one --kiln entry per
precision ("build/tools/kiln --precision int8", ...; an entry without --precision is float32).
QDQ.json: the same over the <model>_qdq exports, whose ORT side is ORT's int8. bench/precision.sh
runs both and prints this. "Kiln / ORT same precision" for int8 divides figures of the two runs
(the host may have moved between them); the last column is Kiln and ORT on the QDQ export in
the same rounds.
"""
import argparse
import json
import re


def precision_of(kiln_command):
    m = re.search(r"--precision (\S+)", kiln_command)
    return m.group(1) if m else "float32"


def ort_int8(qdq_path):
    """(model, batch) -> the row of the model's QDQ export: ORT's int8 p50, and Kiln's ratio
    to it on that export in the same rounds."""
    if not qdq_path:
        return {}
    rows = json.load(open(qdq_path))["rows"]
    return {(r["model"][: -len("_qdq")], r["batch"]): r
            for r in rows if r["model"].endswith("_qdq") and "ort_p50" in r}


def fmt(x, digits=2):
    return "" if x is None else f"{x:.{digits}f}"


def table(rows, int8):
    out = ["| model | batch | precision | Kiln p50 ms | error vs float reference | ORT float32 p50 ms "
           "| Kiln / ORT float32 | ORT same precision p50 ms | Kiln / ORT same precision "
           "| QDQ export: Kiln / ORT, same rounds |",
           "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: (r["model"], r["batch"])):
        if "kiln_p50" not in r:
            out.append(f"| {r['model']} | {r['batch']} | {precision_of(r.get('kiln', ''))} | "
                       f"failed: {r.get('error', '?')} | | | | | | |")
            continue
        p = precision_of(r["kiln"])
        err = (r.get("engine") or {}).get("rel_err")
        qdq = int8.get((r["model"], r["batch"])) if p == "int8" else None
        same = r["ort_p50"] if p == "float32" else qdq["ort_p50"] if qdq else None
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["model"], r["batch"], p, fmt(r["kiln_p50"]), "" if err is None else f"{err:.2g}",
            fmt(r["ort_p50"]), fmt(r["kiln_p50"] / r["ort_p50"]), fmt(same),
            fmt(r["kiln_p50"] / same) if same else "", fmt(qdq["ratio"]) if qdq else ""))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("float_json")
    ap.add_argument("--qdq")
    a = ap.parse_args()
    print(table(json.load(open(a.float_json))["rows"], ort_int8(a.qdq)))


if __name__ == "__main__":
    main()
