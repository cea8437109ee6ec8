#!/usr/bin/env python3
"""bench/gpu_report.py's latency rows from the latency stage's files: the interleaved rounds of
one runner merged (the best round's p50 and p99, every round's p50), a single file (torch.compile)
read as one round, a row for every model and batch any runner left, and no model's files read
as another's whose name it starts with.

    gpu_report_test.py SOURCE_DIR
"""
import importlib.util
import json
import os
import sys
import tempfile


def main():
    spec = importlib.util.spec_from_file_location("gpu_report", os.path.join(sys.argv[1], "bench/gpu_report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    with tempfile.TemporaryDirectory() as work:
        def write(name, p50, p99):
            with open(os.path.join(work, name), "w") as f:
                json.dump({"p50_ms": p50, "p99_ms": p99, "isa": "x"}, f)
        write("bench_kiln_resnet50_1_r1.json", 2.0, 2.5)
        write("bench_kiln_resnet50_1_r2.json", 1.5, 3.0)
        write("bench_eager_resnet50_1_r1.json", 4.0, 4.4)
        write("bench_eager_resnet50_1_r2.json", 5.0, 5.5)
        write("bench_overhead_resnet50_1.json", 1.2, 1.3)
        write("bench_kiln_resnet50_2_8_r1.json", 9.0, 9.5)  # another model, named alike
        write("bench_eager_bert_base_8_r2.json", 7.0, 7.7)  # only PyTorch measured it
        rows = {(r["model"], r["batch"]): r for r in report.latency(work)}
    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    expect("rows", sorted(rows), [("bert_base", 8), ("resnet50", 1), ("resnet50_2", 8)])
    r = rows.get(("resnet50", 1), {})
    expect("kiln best round", (r.get("kiln_p50_ms"), r.get("kiln_p99_ms")), (1.5, 3.0))
    expect("kiln rounds", r.get("kiln_p50_rounds_ms"), [2.0, 1.5])
    expect("eager best round", r.get("torch_eager_p50_ms"), 4.0)
    expect("eager rounds", r.get("torch_eager_p50_rounds_ms"), [4.0, 5.0])
    expect("reduce-overhead single file", r.get("torch_overhead_p50_ms"), 1.2)
    expect("kiln / eager", r.get("kiln_over_eager"), 1.5 / 4.0)
    expect("other model", rows.get(("resnet50_2", 8), {}).get("kiln_p50_ms"), 9.0)
    b = rows.get(("bert_base", 8), {})
    expect("a row without Kiln", (b.get("kiln_p50_ms"), b.get("torch_eager_p50_ms")), (None, 7.0))
    for f in failures:
        print("FAIL:", f)
    print("gpu_report_test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
