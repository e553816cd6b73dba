#!/usr/bin/env python3
"""Per-step work on weights across the benchmark set: for each model, the transposes,
copies and pads of constant arguments in its compiled kernels (compiler/constant_moves.py;
the target is 0), the largest kernel workspace and the largest weight, as sink plans with
`aotplan compile`'s defaults, and with one clean-up pass off for comparison.

    python scripts/constant_moves.py [--only SUBSTRING ...] [--disable-pass weight_layout]

The set is scripts/plan_digests.py's: the examples, the benchmark families
(scripts/gen_models.py) and the ONNX light models (tests/onnx_light.py).
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", metavar="SUBSTRING", help="models whose key holds it (repeatable)")
    ap.add_argument("--disable-pass", action="append", default=[], metavar="NAME")
    a = ap.parse_args()

    import numpy as np

    import plan_digests
    from aotplan.core import model_json
    from compiler import pipeline
    from compiler.frontends import onnx_import

    print(f"{'model':34s} {'moves':>6s} {'workspace MiB':>14s} {'largest weight MiB':>19s}"
          + (f"   (passes off: {', '.join(a.disable_pass)})" if a.disable_pass else ""))
    total = 0
    with tempfile.TemporaryDirectory() as work:
        for key, model, mode in plan_digests._cases(work):
            if mode != "sink" or (a.only and not any(o in key for o in a.only)):
                continue
            path = model()
            graph, digest = onnx_import.load(path) if path.endswith(".onnx") else model_json.load(path)
            res = pipeline.compile_graph(graph, digest, pipeline.Options(launch="sink",
                                                                         disabled=frozenset(a.disable_pass)))
            workspace = max(k.workspace_bytes for k in res.plan.kernels)
            largest = max((np.asarray(c.data).nbytes for c in graph.constants), default=0)
            total += res.formats.constant_moves
            print(f"{key:34s} {res.formats.constant_moves:6d} {workspace / 2**20:14.2f} {largest / 2**20:19.2f}",
                  flush=True)
    print(f"weights relaid out per step, all models: {total}")


if __name__ == "__main__":
    main()
