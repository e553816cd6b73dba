#!/usr/bin/env python3
"""What checking each kernel's program (aotplan/core/kernel_program.py) adds to a load:
per plan, the time to read the kernels' modules and check them, against the whole
load (`executor.load`, no warm-up) in the same process, medians over repeats; and
what the reader guard adds (`executor/reader_guard.py`: a helper process reads the
modules first): the load without it (reader_guard=False) against the load with a
helper started for it (a process's first unsigned load) and with a helper already
running (the process's helper, or a kept ReaderGuard: the loads that follow).

    python scripts/bench_kernel_check.py [--repeats 5]

The plans: the three examples and the benchmark families (plans/bench) in kernel mode
(the most kernels), compiled here first.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import jax

    import executor
    from aotplan.core import codec, kernel_program, kernels, model_json
    from compiler import pipeline
    from executor import kernel_loader
    from executor.reader_guard import ReaderGuard

    models = [os.path.join(ROOT, "plans", "examples", n, "model.json") for n in ("mlp", "cnn", "transformer")]
    models += [os.path.join(ROOT, "plans", "bench", n, "model.json") for n in ("resnet50", "bert4")]
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs; medians of {args.repeats}")
    print(f"{'model':<12} {'kernels':>7} {'check ms':>9} {'per kernel ms':>14} {'load ms':>8} {'check/load':>10} "
          f"{'new helper ms':>13} {'warm helper ms':>14} {'new/load':>8} {'warm/load':>9}")
    kept = ReaderGuard()
    with tempfile.TemporaryDirectory() as work:
        for path in models:
            if not os.path.exists(path):
                continue
            graph, digest = model_json.load(path)
            plan = pipeline.compile_graph(graph, digest, pipeline.Options(launch="kernel")).plan
            file = os.path.join(work, "p.plan")
            with open(file, "wb") as f:
                f.write(codec.encode(plan))
            wants = kernel_loader.kernel_roles(plan)
            limit = kernel_program.value_bytes_limit(plan)
            exps = {ki: kernels.load_kernel(plan.kernels[ki]) for ki in wants}
            checks, loads, guarded, kept_loads = [], [], [], []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for ki, (role, takes, returns) in wants.items():
                    module = kernels.read_module(plan.kernels[ki].name, exps[ki])
                    kernel_program.check(plan.kernels[ki].name, module, exps[ki], takes, returns, role != "output",
                                         limit)
                checks.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                executor.load(file, warmup=False, reader_guard=False)
                loads.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                with ReaderGuard() as fresh:  # (a helper started for this load: a process's first)
                    executor.load(file, warmup=False, reader_guard=fresh)
                guarded.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                executor.load(file, warmup=False, reader_guard=kept)
                kept_loads.append(time.perf_counter() - t0)
            c, l = statistics.median(checks) * 1e3, statistics.median(loads) * 1e3
            g, k = statistics.median(guarded) * 1e3, statistics.median(kept_loads) * 1e3
            name = os.path.basename(os.path.dirname(path))
            print(f"{name:<12} {len(wants):>7} {c:>9.1f} {c / len(wants):>14.2f} {l:>8.1f} {c / l:>10.2f} "
                  f"{g:>13.1f} {k:>14.1f} {g / l:>8.2f} {k / l:>9.2f}")
    kept.close()


if __name__ == "__main__":
    main()
