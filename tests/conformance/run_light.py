#!/usr/bin/env python3
"""Lays out ONNX's "light" models as backend-test directories and runs run_conformance.py.

    run_light.py --src SHARED/onnx-tests/light --work BUILD_DIR/light-tests [run_conformance args]

The light folder holds <name>.onnx + <name>_output_0.pb only (model-zoo CNNs whose weights are
ConstantOfShape nodes). Each gets WORK/<name>/model.onnx and
test_data_set_0/output_0.pb as symlinks to the shared files, and input_0.pb: an all-zero
tensor of the graph input's shape (ONNX computed the expected outputs on zeros; ONNX Runtime
reproduces them exactly). Nothing is copied out of the shared folder. Every argument after
the known ones goes to run_conformance.py (--kiln, --known-failures, --report, ...), with
--suite WORK added.

Exit codes: those of run_conformance.py; 77 when SRC is absent.
"""
import argparse
import os
import subprocess
import sys

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


def graph_inputs(model, onnx_mod):
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def lay_out(src, work, onnx_mod):
    import numpy as np
    from onnx import numpy_helper
    names = sorted(f[:-5] for f in os.listdir(src) if f.endswith(".onnx"))
    if not names:
        raise SystemExit(f"run_light: no .onnx files in {src}")
    for name in names:
        model_path = os.path.join(src, name + ".onnx")
        out_path = os.path.join(src, name + "_output_0.pb")
        if not os.path.exists(out_path):
            print(f"run_light: {name}: no {name}_output_0.pb, left out")
            continue
        model = onnx_mod.load(model_path, load_external_data=False)
        ds = os.path.join(work, name, "test_data_set_0")
        os.makedirs(ds, exist_ok=True)
        for link, target in ((os.path.join(work, name, "model.onnx"), model_path),
                             (os.path.join(ds, "output_0.pb"), out_path)):
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(target, link)
        for k, inp in enumerate(graph_inputs(model, onnx_mod)):
            tt = inp.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
            dtype = onnx_mod.mapping.TENSOR_TYPE_TO_NP_TYPE[tt.elem_type]
            onnx_mod.save_tensor(numpy_helper.from_array(np.zeros(dims, dtype), inp.name),
                                 os.path.join(ds, f"input_{k}.pb"))
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="the shared light/ folder")
    ap.add_argument("--work", required=True, help="where to lay out the test directories")
    args, rest = ap.parse_known_args()
    src = os.path.abspath(args.src)
    if not os.path.isdir(src):
        print(f"run_light: SKIP: {src} does not exist (the shared ONNX test data is absent on "
              f"this machine)")
        return SKIP
    try:
        import numpy  # noqa: F401
        import onnx
    except ImportError as e:
        print(f"run_light: SKIP: python module missing ({e}; interpreter {sys.executable})")
        return SKIP
    work = os.path.abspath(args.work)
    names = lay_out(src, work, onnx)
    print(f"run_light: {len(names)} light models laid out in {work}", flush=True)
    cmd = [sys.executable, os.path.join(HERE, "run_conformance.py"), "--suite", work] + rest
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
