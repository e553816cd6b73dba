#!/usr/bin/env python3
"""Freeze golden plans: plans/golden/v<format>/<name>.plan with <name>.io.npz holding
seeded inputs and the outputs of the direct reference evaluation, one example per
launch mode. Tests load every golden plan of every version on every change, so a plan
written by an older aotplan keeps loading (or is refused with a clear message once its
format leaves the supported window).

    python scripts/make_golden.py            # only after a deliberate format change
"""

import argparse
import os

import numpy as np

from aotplan.core import codec, model_json
from aotplan.core.fileio import atomic_write
from compiler import pipeline, reference

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plans")


def main(argv=None):
    argparse.ArgumentParser(description="Freeze golden plans under plans/golden/v<format>/ (one per launch mode, with "
                                        "seeded inputs and reference outputs). Only after a deliberate format change: "
                                        "tests load every golden plan of every version.").parse_args(argv)
    out = os.path.join(ROOT, "golden", f"v{codec.FORMAT_VERSION}")
    os.makedirs(out, exist_ok=True)
    # the sink plan inlines its four smallest constants and keeps two in the pool (both
    # storages in one plan, and a data section); the fused plan inlines all of its own
    for name, launch, policy, inline in (("mlp", "sink", "default", 4096), ("cnn", "fused", "default", None),
                                         ("transformer", "kernel", "default", None),
                                         ("cnn", "kernel", "blocked", None)):
        graph, digest = model_json.load(os.path.join(ROOT, "examples", name, "model.json"))
        opts = pipeline.Options(launch=launch, format_policy=policy, **({} if inline is None else
                                                                       {"inline_bytes": inline}))
        plan = pipeline.compile_graph(graph, digest, opts).plan
        if policy != "default":  # a plan with storage formats and conversions
            name = f"{name}_{policy}"
        rng = np.random.default_rng(2026)
        feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
        want = reference.evaluate(graph, feeds)
        base = os.path.join(out, name)
        atomic_write(base + ".plan", codec.encode(plan))
        np.savez(base + ".io.npz", **{f"in:{k}": v for k, v in feeds.items()}, **{f"out:{k}": v for k, v in want.items()})
        print(f"wrote {base}.plan ({launch} mode, format {codec.FORMAT_VERSION}, jax {plan.provenance.jax_version})")


if __name__ == "__main__":
    main()
