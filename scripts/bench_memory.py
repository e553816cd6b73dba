#!/usr/bin/env python3
"""Memory planning on the benchmark families: bounds, every planner, device memory vs jax.jit.

    python scripts/gen_models.py          # once: writes plans/bench/ (not committed)
    python scripts/bench_memory.py        # all families
    python scripts/bench_memory.py --models resnet50,unet --no-device

For each family (scripts/gen_models.py) and launch mode (kernel, fused):
  plain      the plain lower bound: every node a launch, the model's order, every tensor
             its own bytes, a launch's inputs and outputs never sharing
  shared     the same order with sharing (in-place reuse, views)
  sched      the bound of the plan's own lifetimes: its schedule, its launch mode
  <planner>  each registered planner's arena (and its time) on those lifetimes
  best/sched the chosen arena over its bound; best/plain the arena against the plain bound
Then (unless --no-device) the fused plan compiled for real: arena + constant pool + max
workspace, against jax.jit of the whole model on the same host: arguments + outputs +
temps from `compiled.memory_analysis()` (weights as arguments, like the plan's pool).
"""

import argparse
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FAMILIES = ("resnet50", "densenet121", "unet", "bert4", "cnn")


def mib(b):
    return f"{b / 2**20:8.2f}"


def jit_memory(graph, aot_options=False):
    """jax.jit of the whole model, weights as arguments: (args + outputs + temps) bytes.
    With aot_options, compiled with the XLA options aotplan's kernels get
    (aotplan/core/xla_options.py), to tell their effect from the plan's own."""
    import jax

    from aotplan.core import dtypes, xla_options
    from compiler import reference
    from compiler.passes.lower import host_platform

    run, consts, _ = reference.make_function_of_weights(graph)
    feeds = {t.name: jax.ShapeDtypeStruct(t.shape, dtypes.np_dtype(dtypes.storage_dtype(t.dtype)))
             for t in graph.inputs}
    low = jax.jit(run).lower(consts, feeds)
    ma = (xla_options.compile(low, host_platform()) if aot_options else low.compile()).memory_analysis()
    return ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes, ma


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(FAMILIES))
    ap.add_argument("--modes", default="kernel,fused")
    ap.add_argument("--no-device", action="store_true", help="skip compiling fused plans and jax.jit")
    a = ap.parse_args()

    import jax

    from aotplan.core import formats, intervals, model_json
    from compiler import pipeline, planners

    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; planners: {', '.join(planners.PLANNERS)}")
    names = [m for m in a.models.split(",") if m]
    members = [p for p in planners.PLANNERS if p not in ("best",)]
    header = (f"{'model':12s} {'mode':6s} {'plain':>8s} {'shared':>8s} {'sched':>8s} "
              + " ".join(f"{p[:14]:>14s}" for p in members) + f" {'best/sched':>10s} {'best/plain':>10s}")
    print("\narena MiB (planner ms)\n" + header)
    ratios, under = [], {}
    graphs = {}
    for name in names:
        path = os.path.join(ROOT, "plans", "bench", name, "model.json")
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run python scripts/gen_models.py")
        graph, _ = model_json.load(path)
        graphs[name] = graph
        for mode in a.modes.split(","):
            p = pipeline.plan_graph(graph, pipeline.Options(launch=mode))
            ivs = list(p.live.intervals)
            sched = intervals.peak_live_bytes(ivs, lambda n: formats.align_up(n, formats.ALIGNMENT))
            cells, sizes = [], {}
            for pl in members + ["best"]:
                t0 = time.perf_counter()
                offs = planners.PLANNERS[pl](ivs, formats.ALIGNMENT)
                dt = (time.perf_counter() - t0) * 1e3
                sizes[pl] = planners.arena_size(ivs, offs, formats.ALIGNMENT)
                if pl != "best":
                    cells.append(f"{mib(sizes[pl])} ({dt:4.0f})")
            best = sizes["best"]
            ratios.append(best / max(sched, 1))
            under[(name, mode)] = 1 - best / p.plain_bound
            print(f"{name:12s} {mode:6s} {mib(p.plain_bound)} {mib(p.shared_bound)} {mib(sched)} "
                  + " ".join(f"{c:>14s}" for c in cells)
                  + f" {best / max(sched, 1):10.3f} {best / p.plain_bound:10.3f}", flush=True)
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"\nbest / its schedule's bound: geometric mean {gm:.4f}, worst {max(ratios):.4f} "
          f"(targets 1.02, 1.10)")
    for k in (("resnet50", "kernel"), ("densenet121", "kernel")):
        if k in under:
            print(f"{k[0]} ({k[1]}): best arena {100 * under[k]:.1f}% under the plain lower bound (target >= 20%)")

    if a.no_device:
        return
    from compiler import pipeline as pl_

    print("\ndevice memory per step, MiB: fused plan (arena + pool + inline constants + max workspace) vs jax.jit "
          "(args + outputs + temp)")
    print("   (jit(opts): jax.jit compiled with aotplan's XLA options, for reference; targets are judged on jit)")
    print(f"{'model':12s} {'arena':>8s} {'pool':>8s} {'inline':>8s} {'wkspace':>8s} {'plan':>8s} {'jit':>8s} "
          f"{'plan/jit':>8s} "
          f"{'jit(opts)':>9s} {'compile s':>9s}")
    for name in names:
        graph = graphs[name]
        t0 = time.perf_counter()
        plan = pl_.compile_graph(graph, "bench", pl_.Options(launch="fused")).plan
        dt = time.perf_counter() - t0
        m = plan.memory
        jit_b, _ = jit_memory(graph)
        jit_o, _ = jit_memory(graph, aot_options=True)
        print(f"{name:12s} {mib(m.arena_bytes)} {mib(m.constant_pool_bytes)} {mib(m.inline_constant_bytes)} "
              f"{mib(m.max_workspace_bytes)} "
              f"{mib(m.step_device_bytes)} {mib(jit_b)} {m.step_device_bytes / jit_b:8.3f}  {mib(jit_o)} {dt:9.1f}",
              flush=True)


if __name__ == "__main__":
    main()
