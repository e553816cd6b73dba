"""Differential fuzzing of the whole compiler and executor: random model graphs
(tests/fuzz/graph_gen.py) compiled under every launch mode and memory/format option,
replayed through the executor, and compared with an independent float64 numpy
evaluation (tests/numpy_ref.py); within a launch mode, the options that only move bytes
must also agree bit for bit. The CI run (tests/fuzz/test_graph_fuzz.py) takes a few
fixed seeds; this runs as many as you like.

    python scripts/fuzz_graphs.py --seeds 200 [--start 0] [--max-nodes 12] [--quick]
        [--dtype float32 --dtype float16 --dtype bfloat16] [--variant kernel/naive ...]
        [--save-bad DIR] [--stop-after N]

Each seed is one graph; prints a line per failing seed (the seed reproduces it) and a
summary; exits 1 if any failed. --save-bad writes each failing graph as DIR/fuzzSEED/
model.json (+ its weights file and the inputs as .npy), ready for `aotplan compile` and
`aotplan check`.
"""

import argparse
import collections
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "fuzz")):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402

import graph_gen  # noqa: E402


def compile_and_run(graph, launch, opts, feeds):
    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline

    res = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(launch=launch, **opts))
    sess = executor.Session(codec.decode(codec.encode(res.plan)))
    return sess.run(feeds)


def save(graph, feeds, where):
    from aotplan.core import model_json

    os.makedirs(where, exist_ok=True)
    model_json.save(graph, os.path.join(where, "model.json"))
    for k, v in feeds.items():
        np.save(os.path.join(where, f"{k}.npy"), v)


def _at_least(n):
    def parse(text):
        v = int(text)
        if v < n:
            raise argparse.ArgumentTypeError(f"must be at least {n}")
        return v
    return parse


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=_at_least(1), default=100, help="graphs to try (default 100)")
    ap.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--max-nodes", type=_at_least(2), default=12, help="nodes per graph, at most (default 12)")
    ap.add_argument("--dtype", choices=list(graph_gen.RTOL), action="append",
                    help="the graphs' dtype (repeatable: seeds take them in turn; default float32)")
    ap.add_argument("--quick", action="store_true", help="only the variants the CI run takes: "
                    + ", ".join(graph_gen.QUICK))
    ap.add_argument("--variant", action="append", help="only this variant (repeatable); names: "
                    + ", ".join(v[0] for v in graph_gen.variants()))
    ap.add_argument("--save-bad", metavar="DIR", help="write each failing graph here")
    ap.add_argument("--stop-after", type=int, default=0, help="stop after N failing seeds (default: never)")
    a = ap.parse_args(argv)
    names = a.variant or (graph_gen.QUICK if a.quick else None)
    try:
        vs = graph_gen.variants(names)
    except ValueError as e:
        ap.error(str(e))
    ops = collections.Counter()
    failed = []
    t0 = time.perf_counter()
    kinds = a.dtype or ["float32"]
    for seed in range(a.start, a.start + a.seeds):
        graph, feeds, want = graph_gen.random_graph(seed, a.max_nodes, kinds[seed % len(kinds)])
        ops.update(n.op for n in graph.nodes)
        fails = graph_gen.check(graph, feeds, want, vs, lambda g, m, o: compile_and_run(g, m, o, feeds))
        if fails:
            failed.append(seed)
            print(f"seed {seed} ({graph.inputs[0].dtype}): {len(graph.nodes)} nodes, {len(fails)} failures",
                  flush=True)
            for f in fails:
                print(f"    {f}", flush=True)
            if a.save_bad:
                save(graph, feeds, os.path.join(a.save_bad, f"fuzz{seed}"))
            if a.stop_after and len(failed) >= a.stop_after:
                break
        elif (seed - a.start + 1) % 10 == 0:
            print(f"  {seed - a.start + 1} seeds, {len(failed)} failing, {time.perf_counter() - t0:.0f} s",
                  flush=True)
    n = seed - a.start + 1
    print(f"{n} graphs x {len(vs)} variants in {time.perf_counter() - t0:.0f} s: {len(failed)} failing"
          + (f" (seeds {', '.join(map(str, failed))})" if failed else ""))
    print("ops drawn: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
