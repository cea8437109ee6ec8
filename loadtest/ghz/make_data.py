#!/usr/bin/env python3
"""Writes a Predict request in the Tensor JSON form (float_data, what ghz sends) with seeded
random inputs in [-1, 1): the resnet18 input, 150,528 floats, is too big to inline in a config.

  /usr/bin/python3 loadtest/ghz/make_data.py                    # resnet18 [1,3,224,224]
  /usr/bin/python3 loadtest/ghz/make_data.py --model example --input x --shape 1,8 -o ex.json
"""
import argparse
import json

import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--input", default="input", help="the model's input name (GetModel lists it)")
    p.add_argument("--shape", default="1,3,224,224")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default="loadtest/ghz/resnet18_data.json")
    a = p.parse_args()
    shape = [int(d) for d in a.shape.split(",")]
    x = np.random.default_rng(a.seed).uniform(-1, 1, size=shape).astype(np.float32)
    request = {"model": a.model, "inputs": {a.input: {
        "dtype": "DATA_TYPE_FLOAT", "shape": shape,
        # float32 -> Python float is exact; 9 significant digits round-trip a float32.
        "float_data": [float(f"{v:.9g}") for v in x.ravel()]}}}
    with open(a.output, "w") as f:
        json.dump(request, f, separators=(",", ":"))
    print(f"wrote {a.output}: {a.model} {a.input} {shape}")


if __name__ == "__main__":
    main()
