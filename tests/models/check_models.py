#!/usr/bin/env python3
"""Checks Kiln against ONNX Runtime on the exported real models (export_models.py).

    check_models.py --kiln KILN [--dir DIR] [--known-failures FILE] [--rtol R] [--atol A]

Runs `kiln check --json --rtol R --atol A` on DIR/<model> for every model export_models.py
makes and requires each to pass, unless it is listed in the known-failures file
(`model_name  # reason`); a listed model that passes fails the run ("unexpectedly passing,
remove from list"). A crash (signal, exit code other than 0/1) or a timeout always fails.
A model with DIR/<model>/check.json ({"rtol": R, "atol": A}: the int8 models, which cannot
match ONNX Runtime's int8 kernels to float tolerances) is checked with that tolerance instead,
whatever the mode (an O2 or --bisect run rounds requantization ties differently too); models
are grouped by tolerance and kiln check runs once per group.

DIR defaults to ${KILN_CACHE_DIR:-$HOME/.cache/kiln}/models, as for export_models.py.
Exit codes: 0 ok, 1 failures, 2 usage, 77 the models are not exported (export skipped).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, HERE)
from export_models import MODELS, SKIP, default_dir  # noqa: E402


def read_known(path):
    out = {}
    if not path or not os.path.exists(path):
        return out
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition("#")
                out[name.strip()] = reason.strip()
    return out


def model_tolerance(model_dir, default):
    """(rtol, atol) as strings: the model's check.json if it has one, else `default`."""
    path = os.path.join(model_dir, "check.json")
    if not os.path.isfile(path):
        return default
    with open(path) as f:
        tol = json.load(f)
    return repr(float(tol["rtol"])), repr(float(tol["atol"]))


def run_group(kiln, tol, dirs, extra, deadline):
    """kiln check on `dirs` at tolerance `tol`: (results, None) or (None, why it failed)."""
    fd, json_path = tempfile.mkstemp(prefix="kiln-models-", suffix=".json")
    os.close(fd)
    cmd = [kiln, "check", "--json", json_path, "--rtol", tol[0], "--atol", tol[1]] + extra + dirs
    print("check_models: " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, timeout=max(1.0, deadline - time.monotonic()))
        if proc.returncode not in (0, 1):
            how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
                   else f"exit code {proc.returncode}")
            return None, f"kiln check crashed ({how})"
        with open(json_path) as f:
            return json.load(f)["results"], None
    except subprocess.TimeoutExpired:
        return None, "timed out"
    finally:
        os.unlink(json_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--dir", default=default_dir(), help="models folder (default: %(default)s)")
    ap.add_argument("--known-failures", help="file of `model_name  # reason` lines")
    ap.add_argument("--rtol", default="1e-3")
    ap.add_argument("--atol", default="1e-4")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds for kiln check (all its runs)")
    ap.add_argument("--kiln-arg", action="append", default=[],
                    help="extra argument for kiln check, repeatable (--kiln-arg=--bisect)")
    args = ap.parse_args()

    root = os.path.abspath(args.dir)
    dirs = [os.path.join(root, m) for m in MODELS]
    missing = [d for d in dirs if not os.path.isfile(os.path.join(d, "model.onnx"))]
    if missing:
        print(f"check_models: SKIP: models not exported in {root} (missing: "
              f"{', '.join(os.path.basename(d) for d in missing)}); real_models_export was "
              f"skipped (torch or onnxruntime-node absent) or failed")
        return SKIP
    kiln = os.path.abspath(args.kiln)
    if not os.access(kiln, os.X_OK):
        print(f"check_models: kiln executable {kiln} not found", file=sys.stderr)
        return 2
    known = read_known(args.known_failures)

    # One kiln check per tolerance, the command line's first; --timeout covers them all.
    groups = {}
    for d in dirs:
        groups.setdefault(model_tolerance(d, (args.rtol, args.atol)), []).append(d)
    t0 = time.monotonic()
    results = []
    for tol, group in groups.items():
        got, why = run_group(kiln, tol, group, args.kiln_arg, t0 + args.timeout)
        if why == "timed out":
            print(f"check_models: FAILED: kiln check timed out after {args.timeout:.0f}s")
            return 1
        if why:
            print(f"check_models: FAILED: {why}")
            return 1
        results += got
    elapsed = time.monotonic() - t0
    own = {os.path.basename(g): tol for tol, group in groups.items() for g in group
           if tol != (args.rtol, args.atol)}

    bad = []
    w = max([14] + [len(r["test"]) + 2 for r in results])
    print(f"\n{'model':<{w}}{'status':<13}{'max_abs_err':>13}{'max_rel_err':>13}  message")
    for r in results:
        name = r["test"]
        listed = name in known
        ok = (r["status"] == "pass") != listed
        verdict = "" if ok else ("  <- unexpectedly passing, remove from list" if listed
                                 else "  <- must pass")
        print(f"{name:<{w}}{r['status']:<13}{r['max_abs_err']:>13.3g}{r['max_rel_err']:>13.3g}  "
              f"{r['message'][:100]}{verdict}")
        if not ok:
            bad.append(name)
    if len(results) != len(dirs):
        print(f"check_models: kiln reported {len(results)} results for {len(dirs)} models")
        bad.append("<missing results>")
    print(f"\ncheck_models: {sum(r['status'] == 'pass' for r in results)}/{len(dirs)} pass "
          f"(rtol {args.rtol}, atol {args.atol}"
          + "".join(f"; {n}: rtol {t[0]}, atol {t[1]} (check.json)" for n, t in own.items())
          + f") in {elapsed:.1f}s: "
          + ("OK" if not bad else "FAILED: " + ", ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
