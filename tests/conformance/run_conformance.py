#!/usr/bin/env python3
"""Runs `kiln check` over an ONNX backend-test suite and holds the result to account.

    run_conformance.py --kiln KILN --suite DIR --known-failures FILE
                       [--jobs N] [--report FILE] [--update-known-failures]
                       [--kiln-arg ARG ...]

Every directory under DIR holding a model.onnx is a test. Tests are run in chunks (about 100
directories per `kiln check --json` process, --jobs processes at a time). A chunk that crashes
(killed by a signal, an exit code other than 0/1, unreadable JSON) or times out is re-run one
test per process so the culprit is pinned; such a test gets the status 'crash'.

A test is tier-1 when every operator in its graph (subgraphs included; domain '' or 'ai.onnx')
is in tier1_ops.txt. The run fails (exit 1) when
  - a tier-1 test does not pass and is not in the known-failures file;
  - a non-tier-1 test fails or errors (pass and unsupported are fine: a numeric failure means
    every operator in it ran, so it is a real bug) and is not in the known-failures file;
  - a test listed in the known-failures file now has an acceptable outcome ("unexpectedly
    passing, remove from list"), or the list names a test the suite does not have;
  - any test crashes (the list cannot excuse a crash).

Known-failures format: one `test_name  # reason` per line; '#' lines are comments. A reason
that starts with "expected data:" blames the test's expected outputs, not Kiln: such a test
may also pass (a --bisect run compares Kiln with itself, never with those outputs).
--update-known-failures rewrites the file from the current failures (reason: kiln's message);
it is meant for developers, and still exits 1 when something crashed.

Exit codes: 0 ok, 1 failures, 2 usage/harness error, 77 the suite (or python onnx) is absent.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
STATUSES = ("pass", "fail", "unsupported", "error", "crash")
HERE = os.path.dirname(os.path.abspath(__file__))


def die(msg, code=2):
    print(f"run_conformance: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------- inputs

def read_name_list(path):
    """Lines of `name  # comment`; returns {name: comment}."""
    out = {}
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition("#")
            name = name.strip()
            if not name or len(name.split()) != 1:
                die(f"{path}:{lineno}: expected `test_name  # reason`, got: {raw.rstrip()}")
            out[name] = reason.strip()
    return out


def find_tests(suite):
    """Directories holding model.onnx, sorted (the order `kiln check` uses)."""
    found = []
    for root, dirs, files in os.walk(suite, followlinks=True):
        dirs.sort()
        if "model.onnx" in files:
            found.append(root)
            dirs[:] = []  # a test directory is a leaf for kiln check too
    found.sort()
    return found


def graph_ops(graph, onnx_mod, acc):
    for node in graph.node:
        domain = node.domain or ""
        acc.add(node.op_type if domain in ("", "ai.onnx") else f"{domain}:{node.op_type}")
        for attr in node.attribute:
            if attr.type == onnx_mod.AttributeProto.GRAPH:
                graph_ops(attr.g, onnx_mod, acc)
            elif attr.type == onnx_mod.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    graph_ops(g, onnx_mod, acc)
    return acc


def model_ops(path, onnx_mod):
    try:
        model = onnx_mod.load(path, load_external_data=False)
    except Exception as e:  # a model python onnx cannot parse is still run through kiln
        return None, f"python onnx could not read the model: {e}"
    return sorted(graph_ops(model.graph, onnx_mod, set())), None


# ----------------------------------------------------------------------------- running kiln

def describe_exit(rc):
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def tail(text, n=400):
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


def run_kiln(kiln, dirs, timeout, extra):
    """Runs one `kiln check` process. Returns (results or None, problem message or None)."""
    fd, json_path = tempfile.mkstemp(prefix="kiln-check-", suffix=".json")
    os.close(fd)
    os.unlink(json_path)
    cmd = [kiln, "check", "-q", "--json", json_path] + extra + dirs
    try:
        # Own session, so a timeout takes down anything kiln (or a wrapper) started.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True)
    except OSError as e:
        die(f"cannot run {kiln}: {e}")
    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            return None, f"timed out after {timeout:.0f}s"
        if proc.returncode not in (0, 1):
            detail = tail(stderr or stdout)
            return None, f"kiln check {describe_exit(proc.returncode)}" + (
                f": {detail}" if detail else "")
        try:
            with open(json_path) as f:
                results = json.load(f)["results"]
        except (OSError, ValueError, KeyError) as e:
            return None, f"kiln check wrote no readable JSON ({e}): " + tail(stderr)
        names = [os.path.basename(os.path.normpath(d)) for d in dirs]
        if [r.get("test") for r in results] != names:
            return None, (f"kiln check reported {len(results)} results for {len(dirs)} test "
                          f"directories (names do not line up)")
        return results, None
    finally:
        if os.path.exists(json_path):
            os.unlink(json_path)


def run_chunk(kiln, dirs, chunk_timeout, test_timeout, extra):
    """Returns (list of result dicts in `dirs` order, number of re-runs done)."""
    results, problem = run_kiln(kiln, dirs, chunk_timeout, extra)
    if results is not None:
        return results, 0
    # Pin the culprit: one process per test.
    out = []
    for d in dirs:
        one, why = run_kiln(kiln, [d], test_timeout, extra)
        if one is not None:
            out.append(one[0])
        else:
            out.append({"test": os.path.basename(os.path.normpath(d)), "status": "crash",
                        "max_abs_err": 0.0, "max_rel_err": 0.0, "message": why})
    print(f"run_conformance: a chunk of {len(dirs)} tests failed as a whole ({problem}); "
          f"re-ran them one per process", file=sys.stderr)
    return out, len(dirs)


# ----------------------------------------------------------------------------- judging

def judge(res, tier1, listed, may_pass=False):
    """The outcome of one test: 'ok', 'violation', 'known' or 'unexpected-pass'."""
    status = res["status"]
    if status == "crash":
        return "violation"
    acceptable = status == "pass" if tier1 else status in ("pass", "unsupported")
    if listed:
        return "unexpected-pass" if acceptable and not may_pass else "known"
    return "ok" if acceptable else "violation"


def count_table(rows):
    """rows: list of (label, Counter). Returns the table as text."""
    cols = list(STATUSES) + ["total"]
    width = max(len(r[0]) for r in rows) + 2
    lines = [" " * width + "".join(f"{c:>13}" for c in cols)]
    for label, c in rows:
        cells = [c.get(s, 0) for s in STATUSES] + [sum(c.values())]
        lines.append(f"{label:<{width}}" + "".join(f"{v:>13}" for v in cells))
    return "\n".join(lines)


def pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def print_list(title, items, limit):
    if not items:
        return
    print(f"\n{title} ({len(items)}):")
    for line in items[:limit]:
        print("  " + line)
    if len(items) > limit:
        print(f"  ... and {len(items) - limit} more (all of them are in the JSON report; "
              f"--list-limit raises this)")


def write_known_failures(path, records, old):
    header = [
        "# Known conformance failures for this suite: `test_name  # reason`, one per line.",
        "# A listed test that starts passing fails the run until it is removed from here.",
        "# Crashes are never excused. Regenerate: run_conformance.py ... --update-known-failures",
        "# (a listed test keeps its reason when the list is rewritten; edit reasons freely).",
    ]
    lines = []
    for r in sorted(records, key=lambda r: r["test"]):
        reason = old.get(r["test"]) or f"{r['status']}: {r['message']}"
        reason = " ".join(reason.split())[:200]
        lines.append(f"{r['test']}  # {reason}")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(header + lines) + "\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- main

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--kiln", required=True, help="the kiln executable")
    ap.add_argument("--suite", required=True, help="directory of backend-test directories")
    ap.add_argument("--known-failures", required=True,
                    help="the suite's known-failures file (an absent file counts as empty)")
    ap.add_argument("--tier1-ops", default=os.path.join(HERE, "tier1_ops.txt"),
                    help="tier-1 operator list (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="kiln processes at a time (default: %(default)s)")
    ap.add_argument("--chunk-size", type=int, default=100,
                    help="test directories per kiln process (default: %(default)s)")
    ap.add_argument("--chunk-timeout", type=float, default=300,
                    help="seconds one chunk may take before it is re-run test by test "
                         "(default: %(default)s)")
    ap.add_argument("--test-timeout", type=float, default=60,
                    help="seconds one test may take when re-run alone (default: %(default)s)")
    ap.add_argument("--rtol", help="passed to kiln check (default: kiln's own)")
    ap.add_argument("--atol", help="passed to kiln check (default: kiln's own)")
    ap.add_argument("--kiln-arg", action="append", default=[],
                    help="extra argument for kiln check, repeatable (e.g. --kiln-arg=--opt "
                         "--kiln-arg=O2: the optimized graph must pass what the raw graph passes)")
    ap.add_argument("--filter", help="only tests whose name matches this regex (developers)")
    ap.add_argument("--report",
                    help="JSON report path (default: none; the suite's folder may be read-only)")
    ap.add_argument("--list-limit", type=int, default=60,
                    help="at most this many lines per problem list (default: %(default)s)")
    ap.add_argument("--update-known-failures", action="store_true",
                    help="rewrite the known-failures file from the current failures")
    return ap.parse_args()


def main():
    args = parse_args()
    suite = os.path.abspath(args.suite)
    if not os.path.isdir(suite):
        print(f"run_conformance: SKIP: suite directory {suite} does not exist (the shared ONNX "
              f"test data is absent on this machine; see tests/conformance/README.md)")
        return SKIP
    try:
        import onnx
    except ImportError as e:
        print(f"run_conformance: SKIP: python module onnx missing ({e}; interpreter "
              f"{sys.executable}); install python3-onnx")
        return SKIP
    kiln = os.path.abspath(args.kiln)
    if not os.access(kiln, os.X_OK):
        die(f"kiln executable {kiln} not found or not executable")
    if args.jobs < 1 or args.chunk_size < 1:
        die("--jobs and --chunk-size must be at least 1")
    tier1_ops = set(read_name_list(args.tier1_ops))
    kf_path = os.path.abspath(args.known_failures)
    known = read_name_list(kf_path) if os.path.exists(kf_path) else {}
    report = os.path.abspath(args.report) if args.report else None
    extra = []
    if args.rtol:
        extra += ["--rtol", args.rtol]
    if args.atol:
        extra += ["--atol", args.atol]
    extra += args.kiln_arg

    t0 = time.monotonic()
    dirs = find_tests(suite)
    if args.filter:
        rx = re.compile(args.filter)
        dirs = [d for d in dirs if rx.search(os.path.basename(d))]
    if not dirs:
        die(f"no test directories (holding model.onnx) under {suite}", 1)
    names = [os.path.basename(d) for d in dirs]
    dups = [n for n, c in collections.Counter(names).items() if c > 1]
    if dups:
        die(f"test names are not unique under {suite}: {', '.join(dups[:5])}")

    # Operators per test (python onnx), while kiln runs.
    chunks = [dirs[i:i + args.chunk_size] for i in range(0, len(dirs), args.chunk_size)]
    print(f"run_conformance: {len(dirs)} tests under {suite}: {len(chunks)} chunk(s), "
          f"{args.jobs} job(s)", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_chunk, kiln, c, args.chunk_timeout, args.test_timeout, extra)
                   for c in chunks]
        ops = {}
        for d, n in zip(dirs, names):
            ops[n] = model_ops(os.path.join(d, "model.onnx"), onnx)
        results, reruns = [], 0
        for fut in futures:
            res, rr = fut.result()
            results.extend(res)
            reruns += rr
    elapsed = time.monotonic() - t0

    # Judge.
    records = []
    for d, res in zip(dirs, results):
        name = res["test"]
        op_list, op_err = ops[name]
        tier1 = op_list is not None and all(o in tier1_ops for o in op_list)
        rec = {
            "test": name,
            "dir": d,
            "status": res.get("status", "error"),
            "tier1": tier1,
            "ops": op_list if op_list is not None else [],
            "known_failure": name in known,
            "max_abs_err": res.get("max_abs_err", 0.0),
            "max_rel_err": res.get("max_rel_err", 0.0),
            "message": res.get("message", "") or (op_err or ""),
        }
        rec["outcome"] = judge(rec, tier1, name in known,
                               str(known.get(name, "")).startswith("expected data:"))
        records.append(rec)
    by_name = {r["test"]: r for r in records}
    stale = [] if args.filter else sorted(n for n in known if n not in by_name)

    c_t1 = collections.Counter(r["status"] for r in records if r["tier1"])
    c_other = collections.Counter(r["status"] for r in records if not r["tier1"])
    c_all = c_t1 + c_other
    n_t1 = sum(c_t1.values())
    crashes = [r for r in records if r["status"] == "crash"]
    violations = [r for r in records if r["outcome"] == "violation" and r["status"] != "crash"]
    unexpected = [r for r in records if r["outcome"] == "unexpected-pass"]
    known_hit = [r for r in records if r["outcome"] == "known"]

    def fmt(r):
        tag = "tier-1" if r["tier1"] else "other "
        return f"{r['status']:<11} {tag} {r['test']:<55} {r['message'][:160]}"

    print()
    print(count_table([("tier-1", c_t1), ("non-tier-1", c_other), ("all", c_all)]))
    print(f"\ntier-1 pass: {c_t1['pass']}/{n_t1} ({pct(c_t1['pass'], n_t1)})   "
          f"all pass: {c_all['pass']}/{len(records)} ({pct(c_all['pass'], len(records))})   "
          f"known failures: {len(known_hit)} hit of {len(known)} listed   "
          f"time: {elapsed:.1f}s" + (f" ({reruns} tests re-run alone)" if reruns else ""))

    if args.update_known_failures:
        maskable = [r for r in records if r["outcome"] in ("violation", "known")
                    and r["status"] != "crash"]
        write_known_failures(kf_path, maskable, known)
        print(f"\nrun_conformance: wrote {len(maskable)} entries to {kf_path}")
        violations, unexpected, stale = [], [], []

    lim = args.list_limit
    t1_bad = [fmt(r) for r in violations if r["tier1"]]
    other_bad = [fmt(r) for r in violations if not r["tier1"]]
    print_list("CRASHES (never allowed; the known-failures list cannot excuse them)",
               [fmt(r) for r in crashes], lim)
    print_list("tier-1 tests not passing (fix, or list in "
               f"{os.path.basename(kf_path)} with a reason)", t1_bad, lim)
    print_list("non-tier-1 tests that fail or error (every operator ran, so this is a bug)",
               other_bad, lim)
    print_list(f"unexpectedly passing, remove from {os.path.basename(kf_path)}",
               [fmt(r) for r in unexpected], lim)
    print_list(f"listed in {os.path.basename(kf_path)} but not in the suite, remove them",
               stale, lim)
    if violations:
        reasons = collections.Counter(
            re.sub(r"'[^']*'", "'…'", r["message"])[:90] for r in violations)
        print("\nmost common reasons:")
        for msg, n in reasons.most_common(12):
            print(f"  {n:5d}  {msg}")

    ok = not (crashes or violations or unexpected or stale)
    summary = {
        "suite": suite,
        "kiln": kiln,
        "known_failures_file": kf_path,
        "elapsed_s": round(elapsed, 2),
        "tests": len(records),
        "tier1_tests": n_t1,
        "tier1_pass": c_t1["pass"],
        "all_pass": c_all["pass"],
        "counts": {"tier1": dict(c_t1), "non_tier1": dict(c_other), "all": dict(c_all)},
        "crashes": [r["test"] for r in crashes],
        "violations": [r["test"] for r in violations],
        "unexpectedly_passing": [r["test"] for r in unexpected],
        "stale_known_failures": stale,
        "ok": ok,
    }
    if report:
        os.makedirs(os.path.dirname(report), exist_ok=True)
        with open(report, "w") as f:
            json.dump({"summary": summary, "results": records}, f, indent=1)
            f.write("\n")
        print(f"\nreport: {report}")
    print("RESULT: " + ("OK" if ok else
                        f"FAILED ({len(crashes)} crash, {len(violations)} not allowed, "
                        f"{len(unexpected)} unexpectedly passing, {len(stale)} stale)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
