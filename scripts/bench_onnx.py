#!/usr/bin/env python3
"""aotplan vs onnxruntime vs jax.jit on the onnx wheel's light architectures (batch 1,
seeded random weights, see tests/onnx_light.py).

For each model: median step latency (interleaved rounds, with min-max spread) of the
aotplan plan replayed by the executor, of onnxruntime (CPU, same thread count), and of
`jax.jit` of the direct evaluation of the same graph; plus arena bytes vs the lower bound.

    python scripts/bench_onnx.py [--models squeezenet,resnet50] [--steps 20] [--rounds 3]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import onnx_light  # noqa: E402
from benchutil import timed  # noqa: E402




def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(onnx_light.LIGHT))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import onnxruntime as ort

    import executor
    from aotplan import codec, model_json
    from compiler import pipeline, reference
    from compiler.frontends import onnx_import

    threads = os.cpu_count()
    print(f"jax {jax.__version__} ({jax.devices()[0].platform}), onnxruntime {ort.__version__} "
          f"({threads} threads), launch mode kernel, {args.rounds} rounds x {args.steps // args.rounds} steps")
    print(f"{'model':14s} {'launches':>8s} {'aotplan ms':>16s} {'onnxruntime ms':>16s} {'jax.jit ms':>16s} "
          f"{'aot/ort':>8s} {'aot/jit':>8s} {'arena MiB':>10s} {'bound MiB':>10s} {'arena/bound':>11s}")
    for name in args.models.split(","):
        m = onnx_light.load_randomized(name)
        x = onnx_light.sample_inputs(onnx_light.input_shape(m), 1)[0]
        in_name = onnx_light.data_input(m).name
        graph = onnx_import.convert(m, name=name)
        plan = pipeline.compile_graph(graph, model_json.graph_digest(graph)).plan
        sess = executor.Session(codec.decode(codec.encode(plan)))
        ort_sess, _ = onnx_light.run_onnxruntime(m, x, threads=threads)
        fn, _ = reference.make_function(graph)
        jitted = jax.jit(fn)
        jx = {in_name: jnp.asarray(x)}
        jax.block_until_ready(jitted(jx))
        runs = {"aot": lambda: sess.run({in_name: x}),
                "ort": lambda: ort_sess.run(None, {in_name: x}),
                "jit": lambda: jax.block_until_ready(jitted(jx))}
        for fn_ in runs.values():
            fn_()
        times = {k: [] for k in runs}
        for _ in range(args.rounds):
            for k, f in runs.items():
                times[k] += timed(f, max(args.steps // args.rounds, 1))
        s = {k: (np.median(v) * 1e3, np.min(v) * 1e3, np.max(v) * 1e3) for k, v in times.items()}
        fmt = lambda t: f"{t[0]:7.2f} ({t[1]:.1f}-{t[2]:.1f})"  # noqa: E731
        mem = plan.memory
        print(f"{name:14s} {len(plan.launches):8d} {fmt(s['aot']):>16s} {fmt(s['ort']):>16s} {fmt(s['jit']):>16s} "
              f"{s['aot'][0] / s['ort'][0]:8.2f} {s['aot'][0] / s['jit'][0]:8.2f} {mem.arena_bytes / 2**20:10.2f} "
              f"{mem.lower_bound_bytes / 2**20:10.2f} {mem.arena_bytes / max(mem.lower_bound_bytes, 1):11.3f}", flush=True)
        del sess, ort_sess, jitted, plan


if __name__ == "__main__":
    main()
