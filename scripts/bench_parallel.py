#!/usr/bin/env python3
"""Plans for several devices against the one-device plan, per step: latency and one
device's memory (arena, constant pool, workspace), on 1, 2, 4 host devices (forced:
XLA_FLAGS before jax starts, so this script sets it), the one-device plan measured in
the same run, rounds interleaved.

    python scripts/bench_parallel.py [MODEL ...] [--devices 1,2,4] [--batch 4] [--steps 20] [--rounds 3]
    python scripts/bench_parallel.py --parallel tensor [MODEL ...] [--launch kernel|sink]

Data parallel (default): MODEL a model.json (default: the example MLP and CNN);
`--batch` sets every input's first axis (a model that writes its batch into a shape
cannot take another one). Its plans move no bytes between devices (no collective).
Tensor parallel: MODEL a model.json (default: a BERT-like encoder of
scripts/gen_models.py's structure, 2 layers, sequence 64, hidden 512, 8 heads, FFN
2048, and three heads summed as one block, tests/tensor_models.py's structure at
hidden 512); each row also says the collectives per step and the bytes each device
sends into them; the block model is measured with and without `collective-blocks`
(one all-reduce of one block vs one per tensor). `--launch sink`: one program over the
devices holds the collectives; a row says how many its program names and how many
XLA's compiled program runs. On a CPU the host devices share the
same cores, so no speed-up is expected there: the memory split is the point
(docs/design.md, "Several devices").
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("models", nargs="*", metavar="MODEL")
ap.add_argument("--devices", default="1,2,4")
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--parallel", choices=("data", "tensor"), default="data")
ap.add_argument("--launch", choices=("fused", "kernel", "sink"), default="fused",
                help="tensor parallel: the launch mode")
args = ap.parse_args()
counts = [int(n) for n in args.devices.split(",")]
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_force_host_platform_device_count={max(counts)}").strip()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from benchutil import interleaved  # noqa: E402

import compiler  # noqa: E402
import executor  # noqa: E402
from aotplan.core import codec, model_json  # noqa: E402
from compiler import pipeline, tensor_parallel_plan  # noqa: E402


def _at_batch(path, batch, work):
    """A copy of model.json (and its weights) with every input's first axis `batch`."""
    with open(path) as f:
        doc = json.load(f)
    for t in doc["inputs"]:
        t["shape"][0] = batch
    folder = os.path.dirname(os.path.abspath(path))
    for name in os.listdir(folder):
        if name != "model.json":
            shutil.copy(os.path.join(folder, name), work)
    out = os.path.join(work, "model.json")
    with open(out, "w") as f:
        json.dump(doc, f)
    return out


def _timed(sessions, feeds):
    """{key: session} -> {key: median ms per step}, rounds interleaved."""
    times = interleaved({k: (lambda s=s: s.run(feeds)) for k, s in sessions.items()}, args.steps, args.rounds)
    return {k: float(np.median(v)) * 1e3 for k, v in times.items()}


def _tensor_models(work):

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import gen_models
    import tensor_models

    out = []
    bert = gen_models.bert4(layers=2, seq=64, hid=512, heads=8, ffn=2048, name="bert_l2_h512")
    nodes = [("up", "matmul", ("x", "w"), ("h",), {}), ("act", "relu", ("h",), ("a",), {})]
    consts = [("w", (512, 2048))]
    for k in ("o1", "o2", "o3"):
        nodes.append((k, "matmul", ("a", f"{k}.w"), (k,), {}))
        consts.append((f"{k}.w", (2048, 512)))
    heads = tensor_models.small_graph(nodes, [("x", (64, 512))], consts, ["o1", "o2", "o3"])
    for name, graph in (("bert_l2_h512", bert), ("three_heads_h512", heads)):
        os.makedirs(os.path.join(work, name))
        path = os.path.join(work, name, "model.json")
        model_json.save(graph, path)
        out.append(path)
    return out


def tensor_main():
    with tempfile.TemporaryDirectory() as work:
        models = args.models or _tensor_models(work)
        print(f"host devices {max(counts)} (forced), tensor parallel, {args.launch} mode, {args.rounds} rounds x "
              f"{args.steps} steps; ms per step (median), one device's bytes")
        for path in models:
            plans, counted = {}, {}
            for n in counts:
                variants = [("", {})] if n == 1 else [("", {})] + (
                    [(" no blocks", {"collective_blocks": False})] if "three_heads" in path else [])
                for label, opts in variants:
                    try:
                        if n > 1 and args.launch == "sink":  # (the compile's result counts the collectives)
                            graph, digest = model_json.load(path)
                            res = tensor_parallel_plan.compile_tensor_parallel(
                                graph, digest, pipeline.Options(launch="sink", **opts), n)
                            plans[(n, label)], counted[(n, label)] = res.plan, res.collectives
                            continue
                        plans[(n, label)] = (compiler.compile(path, launch=args.launch) if n == 1 else
                                             compiler.compile(path, launch=args.launch, devices=n, parallel="tensor",
                                                              **opts))
                    except Exception as e:
                        print(f"{path} on {n} devices: {type(e).__name__}: {e}")
            sessions = {k: executor.load(codec.encode(p)) for k, p in plans.items()}
            first = next(iter(sessions.values()))
            feeds = {name: np.random.default_rng(0).standard_normal(shape).astype(dt)
                     for name, dt, shape in first.input_specs}
            ms = _timed(sessions, feeds)
            base = ms.get((counts[0], ""))
            for (n, label), p in plans.items():
                m, mesh = p.memory, p.mesh
                colls = mesh.collectives if mesh is not None else ()
                moved = sum(p.tensors[i].nbytes for c in colls for i in c.reads)
                ratio = f" ({ms[(n, label)] / base:.2f}x {counts[0]} device)" if base else ""
                if (n, label) in counted:  # (a sink plan's: in its program, and in XLA's compiled one)
                    named, colls, moved = counted[(n, label)]
                    said = f"collectives {named} in the program, {colls} compiled, bytes each device sends {moved:>8}"
                else:
                    said = f"collectives {len(colls)}, bytes each device sends {moved:>8}"
                print(f"{os.path.basename(os.path.dirname(path)):18s} {n} device(s){label:10s}: {ms[(n, label)]:8.3f} ms"
                      f"{ratio}; {said}; arena "
                      f"{m.arena_bytes:>9} pool {m.constant_pool_bytes:>10} workspace {m.max_workspace_bytes:>9}",
                      flush=True)
            for s in sessions.values():
                s.close()


def main():
    if args.parallel == "tensor":
        return tensor_main()
    models = args.models or [os.path.join(ROOT, "plans", "examples", n, "model.json") for n in ("mlp", "cnn")]
    print(f"host devices {max(counts)} (forced), batch {args.batch}, {args.rounds} rounds x {args.steps} steps; "
          f"ms per step (median), one device's bytes")
    for path in models:
        with tempfile.TemporaryDirectory() as work:
            model = _at_batch(path, args.batch, work)
            sessions = {}
            for n in counts:
                try:
                    sessions[n] = executor.load(codec.encode(compiler.compile(model, devices=n)))
                except Exception as e:  # (one error line: a model it cannot split)
                    print(f"{path} on {n} devices: {type(e).__name__}: {e}")
            if not sessions:
                continue
            first = next(iter(sessions.values()))
            feeds = {name: np.random.default_rng(0).standard_normal(shape).astype(dt)
                     for name, dt, shape in first.input_specs}
            median = _timed(sessions, feeds)
            base = median.get(counts[0])
            for n, s in sessions.items():
                m, ms = s.memory, median[n]
                ratio = f" ({ms / base:.2f}x {counts[0]} device)" if base else ""
                print(f"{os.path.relpath(path, ROOT):36s} {n} device(s): {ms:9.3f} ms{ratio}; arena {m.arena_bytes:>10} "
                      f"pool {m.constant_pool_bytes:>10} inline {m.inline_constant_bytes:>9} workspace "
                      f"{m.max_workspace_bytes:>10}; collectives 0, bytes moved between devices 0", flush=True)
                s.close()


if __name__ == "__main__":
    main()
