#!/usr/bin/env python3
"""Plans for several devices against the one-device plan, per step: latency and one
device's memory (arena, constant pool, workspace), for data-parallel plans on 1, 2, 4
host devices (forced: XLA_FLAGS before jax starts, so this script sets it), the
one-device plan measured in the same run, rounds interleaved.

    python scripts/bench_parallel.py [MODEL ...] [--devices 1,2,4] [--batch 4] [--steps 20] [--rounds 3]

MODEL: a model.json (default: the example MLP and CNN); `--batch` sets every input's
first axis (a model that writes its batch into a shape cannot take another one).
Data-parallel plans move no bytes between devices (no collective); on a CPU the host
devices share the same cores, so no speed-up is expected there: the memory split is
the point (docs/design.md, "Several devices").
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("models", nargs="*", metavar="MODEL")
ap.add_argument("--devices", default="1,2,4")
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--rounds", type=int, default=3)
args = ap.parse_args()
counts = [int(n) for n in args.devices.split(",")]
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_force_host_platform_device_count={max(counts)}").strip()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler  # noqa: E402
import executor  # noqa: E402
from aotplan.core import codec  # noqa: E402


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


def main():
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
            times = {n: [] for n in sessions}
            for s in sessions.values():
                s.run(feeds)
            for _ in range(args.rounds):
                for n, s in sessions.items():
                    for _ in range(args.steps):
                        t0 = time.perf_counter()
                        s.run(feeds)
                        times[n].append(time.perf_counter() - t0)
            base = np.median(times[counts[0]]) if counts[0] in times else None
            for n, s in sessions.items():
                m, ms = s.memory, np.median(times[n]) * 1e3
                ratio = f" ({ms / (base * 1e3):.2f}x {counts[0]} device)" if base else ""
                print(f"{os.path.relpath(path, ROOT):36s} {n} device(s): {ms:9.3f} ms{ratio}; arena {m.arena_bytes:>10} "
                      f"pool {m.constant_pool_bytes:>10} inline {m.inline_constant_bytes:>9} workspace "
                      f"{m.max_workspace_bytes:>10}; collectives 0, bytes moved between devices 0", flush=True)
                s.close()


if __name__ == "__main__":
    main()
