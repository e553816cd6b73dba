#!/usr/bin/env python3
"""A dot with a constant weight, the weight stored (K, N) or (N, K), run by XLA's own
CPU dot (Eigen: aotplan's XLA options, with the (K, N) weight the weight_layout pass
stores) or YNNPACK (XLA's default): which is faster, per shape, against onnxruntime's
MatMul on the same shape.

x is [M, K]; the weight W is [K, N], an argument of the kernel (as a plan's constants
are). `(K,N)`: x @ W with W stored as is; `(N,K)`: W stored transposed and x @ Wt.T
(XLA contracts the second axis itself). Medians of interleaved rounds, milliseconds.

    python scripts/bench_dot_layouts.py [--shapes M,K,N[;...]] [--rounds 3] [--steps 5]

The default shapes: GPT-2's LM head over 32 tokens, a BERT-base FFN layer over 128,
AlexNet's first fully connected layer at batch 1, then small M (a few tokens, a small
batch) over BERT's FFN and a 4,096-wide layer, and M = 1 over BERT's FFN.
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts")]

from benchutil import timed  # noqa: E402

SHAPES = "32,768,50257;128,768,3072;1,9216,4096;2,768,3072;4,768,3072;16,768,3072;8,4096,4096;1,768,3072"


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
        kn_low, nk_low = jax.jit(lambda x, w: x @ w).lower(xd, wd), jax.jit(lambda x, wt: x @ wt.T).lower(xd, wtd)
        ynn = {**xla_options.CPU, "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
        kernels = {"Eigen (K,N)": (xla_options.compile(kn_low, "cpu"), wd),
                   "Eigen (N,K)": (xla_options.compile(nk_low, "cpu"), wtd),
                   "YNN (K,N)": (kn_low.compile(compiler_options=ynn), wd),
                   "YNN (N,K)": (nk_low.compile(compiler_options=ynn), wtd)}
        want = np.asarray(kernels["Eigen (K,N)"][0](xd, wd))
        for f, wa in kernels.values():
            np.testing.assert_allclose(np.asarray(f(xd, wa)), want, rtol=1e-4, atol=1e-4)
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w")])
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.log_severity_level = os.cpu_count(), 3
        sess = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                                    .SerializeToString(), so, providers=["CPUExecutionProvider"])
        runs = {name: (lambda f=f, wa=wa: f(xd, wa).block_until_ready()) for name, (f, wa) in kernels.items()}
        runs["onnxruntime"] = lambda: sess.run(None, {"x": x})
        for f in runs.values():
            f()
        times = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, f in runs.items():
                times[name] += timed(f, args.steps)
        med = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
        ours = "Eigen (K,N)"  # (aotplan's)
        print(f"M={m} K={k} N={n}: " + "  ".join(f"{name} {v:7.2f}" for name, v in med.items())
              + f"  aotplan's ({ours}) / best other {med[ours] / min(v for k_, v in med.items() if k_ not in (ours, 'onnxruntime')):.2f}"
              + f" / onnxruntime {med[ours] / med['onnxruntime']:.2f}", flush=True)


if __name__ == "__main__":
    main()
