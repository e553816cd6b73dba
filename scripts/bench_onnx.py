#!/usr/bin/env python3
"""aotplan vs onnxruntime vs jax.jit on the onnx wheel's light architectures (batch 1,
seeded random weights, see tests/onnx_light.py), or on ONNX files of your own.

For each model: median step latency (interleaved rounds, with min-max spread) of the
aotplan plan replayed by the executor, of onnxruntime (CPU, same thread count), and of
`jax.jit` of the direct evaluation of the same graph, twice: `jit(args)` takes the
weights as arguments, as a plan takes its constant pool (the peer aotplan's latency
target is set against, as in scripts/bench_replay.py), and `jit(const)` closes over
them (XLA sees literals and may fold them); plus arena bytes vs the lower bound. Every
runner does the same host round trip: numpy feeds in, numpy outputs out.

    python scripts/bench_onnx.py [--models squeezenet,resnet50] [--steps 20] [--rounds 3] [--launch sink]
                                 [--disable-pass weight_layout]
    python scripts/bench_onnx.py --file model.onnx [--file other.onnx] [--input-shape x=1,64,40]

A --file model's inputs are random: floats standard normal, integers in [0, 10), bools
true; its symbolic dimensions need --input-shape. `--models ''` runs only the files.
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the repository first: tests/ has folders named like its packages (tests/compiler, ...)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import onnx_light  # noqa: E402
from benchutil import timed  # noqa: E402


def _shape_arg(text):
    name, _, dims = text.partition("=")
    return name, tuple(int(d) for d in dims.split(","))


def _random_feeds(graph):
    from aotplan.core import dtypes

    rng = np.random.default_rng(0)
    out = {}
    for t in graph.inputs:
        dt = dtypes.np_dtype(t.dtype)
        if t.dtype == "bool":
            out[t.name] = np.ones(t.shape, bool)
        elif t.dtype in dtypes.FLOAT_DTYPES:
            out[t.name] = rng.standard_normal(t.shape).astype(dt)
        else:
            out[t.name] = rng.integers(0, 10, t.shape).astype(dt)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(onnx_light.LIGHT))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--launch", default="sink", choices=("sink", "fused", "kernel"))
    ap.add_argument("--file", action="append", default=[], help="an ONNX model to run too (repeatable)")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                    help="fix a --file input's shape (repeatable)")
    ap.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                    help="compile the plans without this clean-up pass (repeatable), as `aotplan compile` does")
    args = ap.parse_args()

    import jax
    import onnxruntime as ort

    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline, reference
    from compiler.frontends import onnx_import

    threads = os.cpu_count()
    shapes = dict(_shape_arg(a) for a in args.input_shape)
    print(f"jax {jax.__version__} ({jax.devices()[0].platform}), onnxruntime {ort.__version__} "
          f"({threads} threads), launch mode {args.launch}, {args.rounds} rounds x {args.steps // args.rounds} steps"
          + (f", passes disabled: {', '.join(args.disable_pass)}" if args.disable_pass else ""))
    print(f"{'model':14s} {'launches':>8s} {'aotplan ms':>16s} {'onnxruntime ms':>16s} {'jit(args) ms':>16s} "
          f"{'jit(const) ms':>16s} {'aot/ort':>8s} {'x jit(args)':>11s} {'x jit(const)':>12s} {'arena MiB':>10s} "
          f"{'bound MiB':>10s} {'arena/bound':>11s}")
    models = [(n, None) for n in args.models.split(",") if n] + [(os.path.basename(f), f) for f in args.file]
    for name, path in models:
        if path is None:
            m = onnx_light.load_randomized(name)
            feeds = {onnx_light.data_input(m).name: onnx_light.sample_inputs(onnx_light.input_shape(m), 1)[0]}
            graph = onnx_import.convert(m, name=name)
        else:
            import onnx

            m = onnx.load(path)
            graph = onnx_import.convert(m, input_shapes=shapes, name=os.path.splitext(name)[0])
            feeds = _random_feeds(graph)
        plan = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(
            launch=args.launch, disabled=frozenset(args.disable_pass))).plan
        sess = executor.Session(codec.decode(codec.encode(plan)))
        opts = ort.SessionOptions()
        opts.log_severity_level, opts.intra_op_num_threads = 3, threads
        ort_sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        fn, weights, _ = reference.make_function_of_weights(graph)
        jitted = jax.jit(fn)
        on_host = lambda outs: {k: np.asarray(v) for k, v in outs.items()}  # noqa: E731
        runs = {"aot": lambda: sess.run(feeds),
                "ort": lambda: ort_sess.run(None, feeds),
                "jit": lambda: on_host(jitted(weights, feeds)),
                "const": lambda: on_host(jitted_const(feeds))}
        jitted_const = jax.jit(lambda feeds: fn(weights, feeds))
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
              f"{fmt(s['const']):>16s} {s['aot'][0] / s['ort'][0]:8.2f} {s['aot'][0] / s['jit'][0]:11.2f} "
              f"{s['aot'][0] / s['const'][0]:12.2f} {mem.arena_bytes / 2**20:10.2f} "
              f"{mem.lower_bound_bytes / 2**20:10.2f} {mem.arena_bytes / max(mem.lower_bound_bytes, 1):11.3f}", flush=True)


if __name__ == "__main__":
    main()
