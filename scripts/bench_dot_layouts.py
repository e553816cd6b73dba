#!/usr/bin/env python3
"""A dot with a constant weight, the weight stored (K, N) or (N, K): which one XLA's CPU
backend runs faster, per shape, against onnxruntime's MatMul on the same shape.

x is [M, K]; the weight W is [K, N]. `(K,N)`: x @ W with W stored as is; `(N,K)`: W
stored transposed and x @ Wt.T (XLA contracts the second axis itself). Compiled with
aotplan's XLA options; medians of interleaved rounds, milliseconds.

    python scripts/bench_dot_layouts.py [--shapes M,K,N[;...]] [--rounds 3] [--steps 5]

The default shapes: GPT-2's LM head over 32 tokens, a BERT-base FFN layer over 128,
AlexNet's first fully connected layer at batch 1.
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts")]

from benchutil import timed  # noqa: E402

SHAPES = "32,768,50257;128,768,3072;1,9216,4096"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()

    import executor

    executor.set_cpu_dispatch("sync")
    import jax
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from aotplan.core import xla_options

    print(f"jax {jax.__version__}, onnxruntime {ort.__version__} ({os.cpu_count()} threads); ms per call")
    rng = np.random.default_rng(0)
    for spec in args.shapes.split(";"):
        m, k, n = (int(v) for v in spec.split(","))
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = (rng.standard_normal((k, n)) * k ** -0.5).astype(np.float32)
        xd, wd, wtd = jax.device_put(x), jax.device_put(w), jax.device_put(np.ascontiguousarray(w.T))
        kn = xla_options.compile(jax.jit(lambda x, w: x @ w).lower(xd, wd), "cpu")
        nk = xla_options.compile(jax.jit(lambda x, wt: x @ wt.T).lower(xd, wtd), "cpu")
        np.testing.assert_allclose(np.asarray(kn(xd, wd)), np.asarray(nk(xd, wtd)), rtol=1e-4, atol=1e-4)
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w")])
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.log_severity_level = os.cpu_count(), 3
        sess = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                                    .SerializeToString(), so, providers=["CPUExecutionProvider"])
        runs = {"(K,N)": lambda: kn(xd, wd).block_until_ready(), "(N,K)": lambda: nk(xd, wtd).block_until_ready(),
                "onnxruntime": lambda: sess.run(None, {"x": x})}
        for f in runs.values():
            f()
        times = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, f in runs.items():
                times[name] += timed(f, args.steps)
        med = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
        print(f"M={m} K={k} N={n}: " + "  ".join(f"{name} {v:8.2f}" for name, v in med.items())
              + f"  (N,K)/(K,N) {med['(N,K)'] / med['(K,N)']:.2f}", flush=True)


if __name__ == "__main__":
    main()
