#!/usr/bin/env python3
"""Merges what bench/gpu_check.sh's phases left in WORK into one JSON report.

    gpu_report.py WORK OUT.json

Runs after every phase, so a run cut short still reports what it measured. The report:
environment (kiln devices with the CUDA libraries' versions or why they are missing,
nvidia-smi, torch, bundle libraries the loader could not find),
conformance (CUDA and reference summaries over the same tests; the tests failing on CUDA
that pass on the reference, with messages), models (`kiln check --backend cuda` per model),
latency (per model and batch: Kiln fp32 (and TF32 for resnet50), PyTorch eager and
torch.compile p50/p99, and Kiln / torch.compile; a row for every model and batch any runner
measured), why the run stopped early if it did (stop.txt: no GPU, the smoke stage failed;
shards stopped by a sticky CUDA error), and the phases' durations, limits and exit codes.
"""
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return json.loads(text.splitlines()[-1] if text.startswith("{") and "\n{" in text else text)
    except (OSError, ValueError, IndexError):
        return None


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def conformance(work):
    out = {}
    results = {}
    for backend in ("cuda", "ref"):
        summary = {"pass": 0, "fail": 0, "unsupported": 0, "error": 0}
        per_test = {}
        stopped = []
        for path in sorted(glob.glob(os.path.join(work, f"conf_{backend}_*.json"))):
            r = load(path) or {}
            if r.get("stopped"):
                stopped.append({"shard": os.path.basename(path), "reason": r["stopped"][:300],
                                "not_run": r.get("not_run")})
            for k, v in r.get("summary", {}).items():
                summary[k] = summary.get(k, 0) + v
            for t in r.get("results", []):
                per_test[t["test"]] = t
        out["cuda" if backend == "cuda" else "reference"] = summary
        if stopped:
            out[f"{'cuda' if backend == 'cuda' else 'reference'}_shards_stopped"] = stopped
        results[backend] = per_test
    bad = []
    for name, t in sorted(results["cuda"].items()):
        ref = results["ref"].get(name)
        if t["status"] in ("fail", "error") and (ref is None or ref["status"] == "pass"):
            bad.append({"test": name, "status": t["status"], "message": t["message"][:300]})
    out["cuda_fails_where_reference_passes"] = bad
    unsupported = {}
    for t in results["cuda"].values():
        if t["status"] == "unsupported":
            key = re.sub(r"'[^']*'", "'...'", t["message"])[:120]
            unsupported[key] = unsupported.get(key, 0) + 1
    out["cuda_unsupported_reasons"] = dict(sorted(unsupported.items(), key=lambda kv: -kv[1])[:20])
    return out


BENCH = re.compile(r"bench_(kiln|kilntf32|eager|compile|overhead|autotune)_(.+)_(\d+)(?:_r(\d+))?\.json$")


def timed(work, runner, model, batch):
    """A runner's timing of one model and batch: its best round (lowest p50) and every
    round's p50 (the interleaved rounds of the latency stage; one file for torch.compile)."""
    rounds = []
    for path in sorted(glob.glob(os.path.join(work, f"bench_{runner}_{model}_{batch}*.json"))):
        m = BENCH.match(os.path.basename(path))
        t = load(path) if m and m.group(2) == model and int(m.group(3)) == batch else None
        if t and t.get("p50_ms") is not None:
            rounds.append(t)
    if not rounds:
        return {}, []
    return min(rounds, key=lambda t: t["p50_ms"]), [t["p50_ms"] for t in rounds]


def latency(work):
    # One row per (model, batch) that any runner left a file for: a missing or failed Kiln
    # bench must not drop the PyTorch numbers measured beside it.
    keys = set()
    for path in glob.glob(os.path.join(work, "bench_*.json")):
        m = BENCH.match(os.path.basename(path))
        if m:
            keys.add((m.group(2), int(m.group(3))))
    rows = []
    for model, batch in sorted(keys):
        row = {"model": model, "batch": batch}
        kiln, row["kiln_p50_rounds_ms"] = timed(work, "kiln", model, batch)
        row["kiln_p50_ms"], row["kiln_p99_ms"] = kiln.get("p50_ms"), kiln.get("p99_ms")
        row["kiln_fallback_ops"], row["kiln_isa"] = kiln.get("fallback_op_types"), kiln.get("isa")
        tf32, rounds = timed(work, "kilntf32", model, batch)
        if tf32:
            row["kiln_tf32_p50_ms"], row["kiln_tf32_p50_rounds_ms"] = tf32.get("p50_ms"), rounds
        for mode in ("eager", "compile", "overhead", "autotune"):
            t, rounds = timed(work, mode, model, batch)
            row[f"torch_{mode}_p50_ms"] = t.get("p50_ms")
            row[f"torch_{mode}_p99_ms"] = t.get("p99_ms")
            if len(rounds) > 1:
                row[f"torch_{mode}_p50_rounds_ms"] = rounds
        if row["kiln_p50_ms"] and row.get("torch_compile_p50_ms"):
            row["kiln_over_compile"] = row["kiln_p50_ms"] / row["torch_compile_p50_ms"]
        if row["kiln_p50_ms"] and row.get("torch_eager_p50_ms"):
            row["kiln_over_eager"] = row["kiln_p50_ms"] / row["torch_eager_p50_ms"]
        rows.append(row)
    return rows


def main():
    work, out_path = sys.argv[1], sys.argv[2]
    ldd = read(os.path.join(work, "ldd.txt")) or ""
    report = {
        "environment": {
            "kiln_devices": load(os.path.join(work, "devices.json")),
            "nvidia_smi": read(os.path.join(work, "nvidia_smi.txt")),
            "torch": read(os.path.join(work, "torch.txt")),
            "bundle_libraries_not_found": [l.strip() for l in ldd.splitlines() if "not found" in l],
        },
        "stopped": read(os.path.join(work, "stop.txt")),
        "conformance": conformance(work),
        "models": {os.path.basename(p)[6:-5]: load(p) for p in sorted(glob.glob(os.path.join(work, "model_*.json")))},
        "latency": latency(work),
        "phases": [json.loads(l) for l in (read(os.path.join(work, "phases.jsonl")) or "").splitlines() if l],
    }
    with open(out_path, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
