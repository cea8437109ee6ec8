#!/usr/bin/env python3
"""Generates the ONNX operator conformance suite (opsets <= 17) from the installed onnx package.

    gen_onnx_suite.py OUT_DIR [--force]

Runs `python3 -m onnx.backend.test.cmd_tools generate-data -o OUT_DIR` in-process, after
aliasing numpy.float/int/bool/object back to the builtins (numpy 1.24 removed them and ONNX
1.12's test-case code still uses them). OUT_DIR/node/<test>/ then holds model.onnx and
test_data_set_*/{input,output}_K.pb.

Idempotent: OUT_DIR/.kiln-suite-stamp records the onnx/numpy versions and this script's
version; when it matches, nothing is regenerated. The suite is written to a temporary sibling
directory first and moved into place, so an interrupted run never leaves a half suite behind.

Exit codes: 0 ok, 1 generation failed, 77 the onnx/numpy Python modules are missing (skip).
"""
import argparse
import os
import runpy
import shutil
import sys
import time

SCRIPT_VERSION = "1"
SKIP = 77


def stamp_text(onnx_mod, np_mod):
    return (f"script={SCRIPT_VERSION} onnx={onnx_mod.__version__} numpy={np_mod.__version__} "
            f"python={sys.version_info.major}.{sys.version_info.minor}\n")


def alias_numpy_builtins(np_mod):
    # numpy >= 1.24 dropped these deprecated aliases; ONNX 1.12's test cases still use them.
    for name, builtin in (("float", float), ("int", int), ("bool", bool), ("object", object)):
        if name not in np_mod.__dict__:
            setattr(np_mod, name, builtin)


def generate(out_dir):
    argv = sys.argv
    sys.argv = ["onnx.backend.test.cmd_tools", "generate-data", "-o", out_dir]
    try:
        runpy.run_module("onnx.backend.test.cmd_tools", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = argv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", help="where to write the suite (node/ lands under it)")
    ap.add_argument("--force", action="store_true", help="regenerate even if the stamp matches")
    args = ap.parse_args()

    try:
        import numpy as np
        import onnx
    except ImportError as e:
        print(f"gen_onnx_suite: SKIP: python module missing ({e}); install python3-onnx and "
              f"python3-numpy (interpreter: {sys.executable})", file=sys.stderr)
        return SKIP

    out_dir = os.path.abspath(args.out_dir)
    stamp_path = os.path.join(out_dir, ".kiln-suite-stamp")
    want = stamp_text(onnx, np)
    if not args.force and os.path.isfile(stamp_path):
        with open(stamp_path) as f:
            if f.read() == want and os.path.isdir(os.path.join(out_dir, "node")):
                n = len(os.listdir(os.path.join(out_dir, "node")))
                print(f"gen_onnx_suite: up to date: {out_dir} ({n} node tests, {want.strip()})")
                return 0

    alias_numpy_builtins(np)
    tmp = out_dir + ".tmp-%d" % os.getpid()
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    t0 = time.monotonic()
    try:
        generate(tmp)
    except BaseException as e:  # SystemExit from argparse included
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"gen_onnx_suite: generation failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    node_dir = os.path.join(tmp, "node")
    if not os.path.isdir(node_dir) or not os.listdir(node_dir):
        shutil.rmtree(tmp, ignore_errors=True)
        print("gen_onnx_suite: generation produced no node tests", file=sys.stderr)
        return 1
    with open(os.path.join(tmp, ".kiln-suite-stamp"), "w") as f:
        f.write(want)
    old = out_dir + ".old-%d" % os.getpid()
    if os.path.exists(out_dir):
        os.rename(out_dir, old)
    os.rename(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    n = len(os.listdir(os.path.join(out_dir, "node")))
    print(f"gen_onnx_suite: wrote {n} node tests to {out_dir}/node in "
          f"{time.monotonic() - t0:.1f}s ({want.strip()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
