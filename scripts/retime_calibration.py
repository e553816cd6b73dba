#!/usr/bin/env python3
"""The calibration kernels (scripts/calibrate_formats.py) timed with aotplan's XLA
options and with one of them left out, interleaved: whether an option change moves
the kernels' times, and so whether compiler/calibration/<platform>.json still holds.

    python scripts/retime_calibration.py [--without xla_cpu_scheduler_type] [--rounds 3] [--steps 10]
    python scripts/retime_calibration.py --old xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT

Prints each kernel's median time both ways and the ratio, then the geomean and median
of the ratios. Run it on an otherwise idle machine.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np
import calibrate_formats as cf
import executor
from aotplan.core import xla_options, model_json, codec
from compiler import pipeline
from compiler.passes import format_cost
from executor import tools
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--without", default="xla_cpu_scheduler_type", help="the option left out of the 'old' kernels")
ap.add_argument("--old", metavar="OPTION=VALUE", help="instead of --without: the 'old' kernels had this value for it")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--steps", type=int, default=10)
args = ap.parse_args()
NEW = dict(xla_options.CPU)
key = args.old.split("=", 1)[0] if args.old else args.without
if key not in NEW:
    sys.exit(f"{key!r} is not among aotplan's CPU options ({', '.join(NEW)})")
OLD = {k: v for k, v in NEW.items() if k != key}
if args.old:
    OLD[key] = args.old.split("=", 1)[1]
ratios = []
for name, inputs, node, consts in cf.samples():
    g = cf.graph_of(name, inputs, node, consts)
    feeds = {t.name: np.random.default_rng(1).standard_normal(t.shape).astype(np.float32) for t in g.inputs}
    for pol in format_cost.CANDIDATES:
        opts = pipeline.Options(launch="kernel", format_policy=pol)
        p = pipeline.plan_graph(g, opts)
        if pol != "default" and not any(n.attr("format", "default") != "default" for grp in p.groups for n in grp):
            continue
        sess = {}
        for lab, o in (("old", OLD), ("new", NEW)):
            xla_options.CPU = o
            res = pipeline.compile_graph(g, model_json.graph_digest(g), opts)
            sess[lab] = executor.Session(codec.decode(codec.encode(res.plan)))
        t = {"old": [], "new": []}
        for _ in range(args.rounds):
            for lab in ("old", "new"):
                prof = tools.profile(sess[lab], feeds, args.steps)
                t[lab].append(sum(ms for *_, ms in prof.launches))
        r = np.median(t["new"]) / np.median(t["old"])
        ratios.append(r)
        print(f"{name:22s} {pol:8s} old {np.median(t['old']):8.4f} ms new {np.median(t['new']):8.4f} ms  {r:.3f}", flush=True)
ratios = np.array(ratios)
print(f"{len(ratios)} kernels: new/old median {np.median(ratios):.3f}, geomean {np.exp(np.log(ratios).mean()):.3f}, "
      f"min {ratios.min():.3f} max {ratios.max():.3f}")
