#!/usr/bin/env python3
"""Weights in the arena's static region vs a read-only constant pool, on an example model.

Compiles the model both ways, loads both plans, and times them in alternating rounds
(so drift on a shared machine hits both alike). For scale it also times `jax.jit` of the
whole model (the direct reference evaluation), measured in the same run. Prints median
step latency, device bytes per step, and ratios.

    python scripts/bench_weights.py [--model plans/examples/cnn/model.json] [--steps 200]
"""

import argparse
import os

import jax
import numpy as np

import executor
from aotplan.core import codec, model_json
from benchutil import timed
from compiler import pipeline, reference

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "..", "plans", "examples", "cnn", "model.json"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    graph, digest = model_json.load(args.model)
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    sessions = {}
    for w in ("arena", "pool"):
        # (pool: every weight an argument, none compiled into the kernel as a literal)
        plan = pipeline.compile_graph(graph, digest, pipeline.Options(weights=w, inline_bytes=0)).plan
        sessions[w] = executor.Session(codec.decode(codec.encode(plan)))
        sessions[w].run(feeds)
    jitted = jax.jit(reference.make_function(graph)[0])
    jax.block_until_ready(jitted(feeds))

    runs = {"arena": lambda: sessions["arena"].run(feeds), "pool": lambda: sessions["pool"].run(feeds),
            "jax.jit": lambda: jax.block_until_ready(jitted(feeds))}
    times = {k: [] for k in runs}
    for _ in range(args.rounds):
        for k, fn in runs.items():
            times[k] += timed(fn, args.steps // args.rounds)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}

    print(f"model {graph.name}: {len(graph.nodes)} nodes, {sum(c.data.nbytes for c in graph.constants)} weight bytes; "
          f"{args.steps} steps each, jax {jax.__version__} on {jax.devices()[0].platform}")
    print(f"{'weights':8s} {'median ms':>10s} {'vs jax.jit':>10s} {'arena B':>10s} {'pool B':>10s} "
          f"{'workspace B':>12s} {'device B/step':>14s}")
    for w in ("arena", "pool"):
        m = sessions[w].memory
        print(f"{w:8s} {med[w]:10.3f} {med[w] / med['jax.jit']:10.2f} {m.arena_bytes:10d} {m.constant_pool_bytes:10d} "
              f"{m.max_workspace_bytes:12d} {m.step_device_bytes:14d}")
    print(f"{'jax.jit':8s} {med['jax.jit']:10.3f} {1.0:10.2f}")
    print(f"pool / arena: latency {med['pool'] / med['arena']:.3f}x, device bytes "
          f"{sessions['pool'].memory.step_device_bytes / sessions['arena'].memory.step_device_bytes:.3f}x")


if __name__ == "__main__":
    main()
