#!/usr/bin/env python3
"""JAX's CPU dispatch, sync vs async, for plans and the jax.jit peer (CPU only).

`jax_cpu_enable_async_dispatch` is read once, when a process starts its CPU backend,
so each measurement is a fresh child process; children alternate sync and async
(--repeats of each) so that drift on a shared machine hits both alike. A child
compiles nothing: the parent compiles a sink plan per model once; the child loads it,
builds the jax.jit peer (weights as arguments, like the plan's constant pool), warms
both up and times interleaved rounds of `Session.run` (numpy in -> numpy out) and of
the peer (the same host round trip). Printed per model: median step time with spread
over all children of a mode, sync / async for each runner, and plan / peer within
each mode (what scripts/bench_replay.py's "x jit" is under that dispatch).

    python scripts/bench_dispatch.py [--models mlp,transformer,cnn] [--onnx squeezenet]
        [--repeats 3] [--steps 400]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from bench_replay import graph_specs, host_outputs, make_peer, random_feeds, to_storage  # noqa: E402
from benchutil import timed  # noqa: E402


def child(mode, plan_path, model_path, steps, rounds):
    import executor

    assert executor.set_cpu_dispatch(mode)
    from aotplan.core import model_json

    graph, _ = model_json.load(model_path)
    specs = graph_specs(graph)
    feeds = random_feeds(specs)
    stor = to_storage(feeds, specs)
    sess = executor.load(plan_path)
    step, info = make_peer(graph, True)
    runners = {"plan": lambda: sess.run(feeds), "jit(args)": lambda: host_outputs(step(stor), info)}
    for f in runners.values():
        for _ in range(20):
            f()
    times = {k: [] for k in runners}
    for _ in range(rounds):
        for k, f in runners.items():
            times[k] += timed(f, max(steps // rounds, 1))
    print(json.dumps(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mlp,transformer,cnn", help="example models (plans/examples)")
    ap.add_argument("--onnx", default="", help="also these light ONNX models (needs onnx), e.g. squeezenet")
    ap.add_argument("--repeats", type=int, default=3, help="child processes per dispatch mode and model")
    ap.add_argument("--steps", type=int, default=400, help="timed steps per runner in each child")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds in each child")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "PLAN", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child, args.steps, args.rounds)

    from aotplan.core import codec, model_json
    from compiler import pipeline

    print(f"{'model':12s} {'runner':10s} {'sync ms':>24s} {'async ms':>24s} {'sync/async':>10s}")
    with tempfile.TemporaryDirectory(prefix="bench_dispatch_") as tmp:
        models = [(m, os.path.join(ROOT, "plans", "examples", m, "model.json")) for m in args.models.split(",") if m]
        for name in [m for m in args.onnx.split(",") if m]:
            import onnx_light
            from compiler.frontends import onnx_import

            path = os.path.join(tmp, name, "model.json")  # a folder each: its weights file beside it
            os.makedirs(os.path.dirname(path))
            model_json.save(onnx_import.convert(onnx_light.load_randomized(name), name=name), path)
            models.append((name, path))
        for name, model_path in models:
            graph, digest = model_json.load(model_path)
            plan_path = os.path.join(tmp, name + ".plan")
            with open(plan_path, "wb") as f:
                f.write(codec.encode(pipeline.compile_graph(graph, digest, pipeline.Options()).plan))
            got = {"sync": {}, "async": {}}
            for _ in range(args.repeats):
                for mode in ("sync", "async"):
                    r = subprocess.run([sys.executable, __file__, "--child", mode, plan_path, model_path,
                                        "--steps", str(args.steps), "--rounds", str(args.rounds)],
                                       capture_output=True, text=True)
                    if r.returncode:
                        sys.exit(f"{name} ({mode}): child failed:\n{r.stderr[-2000:]}")
                    for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items():
                        got[mode].setdefault(k, []).extend(v)
            med = {(m, k): float(np.median(v)) * 1e3 for m in got for k, v in got[m].items()}
            for k in got["sync"]:
                cells = []
                for m in ("sync", "async"):
                    v = np.array(got[m][k]) * 1e3
                    cells.append(f"{med[(m, k)]:.4f} ({np.percentile(v, 10):.4f}-{np.percentile(v, 90):.4f})")
                ratio = med[("sync", k)] / med[("async", k)]
                print(f"{name:12s} {k:10s} {cells[0]:>24s} {cells[1]:>24s} {ratio:10.2f}", flush=True)
            print(f"{'':12s} plan / jit(args): sync {med[('sync', 'plan')] / med[('sync', 'jit(args)')]:.2f}, "
                  f"async {med[('async', 'plan')] / med[('async', 'jit(args)')]:.2f}   "
                  f"(spread: 10th-90th percentile of all steps)", flush=True)


if __name__ == "__main__":
    main()
