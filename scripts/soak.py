"""Soak a plan: many steps, identical outputs for identical inputs, nothing growing.

    python scripts/soak.py --steps 100000                      # the example CNN, sink mode
    python scripts/soak.py --model plans/examples/transformer/model.json --launch kernel
    python scripts/soak.py --plan model.plan --steps 1000000

Cycles over --inputs seeded random feeds; every step's outputs must equal, bit for bit,
the first outputs for the same feeds; the count of live jax arrays must stay flat and
RSS must not grow past --rss-slack-mib after warm-up. Prints a line per sample and
exits 1 on any failure.
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--plan", help="a compiled plan to soak")
    src.add_argument("--model", default=os.path.join(ROOT, "plans", "examples", "cnn", "model.json"),
                     help="a model.json to compile first (default: the example CNN)")
    ap.add_argument("--launch", default="sink", choices=["sink", "fused", "kernel"], help="launch mode for --model")
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--inputs", type=int, default=4, help="distinct seeded feeds to cycle over")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rss-slack-mib", type=float, default=8.0)
    ap.add_argument("--samples", type=int, default=20, help="progress lines (live arrays, RSS) to print")
    a = ap.parse_args()

    import numpy as np

    import executor
    from aotplan.core import dtypes
    from executor import tools

    plan_path = a.plan
    if plan_path is None:
        from click.testing import CliRunner

        from aotplan.cli import main as cli

        plan_path = os.path.join(tempfile.mkdtemp(prefix="soak"), "model.plan")
        r = CliRunner().invoke(cli, ["compile", a.model, "-o", plan_path, "--launch", a.launch])
        if r.exit_code:
            sys.exit(r.output)
    session = executor.load(plan_path)
    rng = np.random.default_rng(a.seed)
    feeds_list = []
    for _ in range(a.inputs):
        feeds = {}
        for name, dtype, shape in session.input_specs:
            if dtype.startswith(("float", "bfloat")):
                feeds[name] = rng.standard_normal(shape).astype(dtypes.np_dtype(dtype))
            elif dtype == "bool":
                feeds[name] = rng.integers(0, 2, shape).astype(bool)
            else:
                feeds[name] = rng.integers(0, 8, shape).astype(dtypes.np_dtype(dtype))
        feeds_list.append(feeds)
    print(f"soaking {plan_path} ({session.plan.launch_mode}, {len(session.plan.launches)} launches) for "
          f"{a.steps} steps over {a.inputs} feeds", flush=True)
    report = tools.soak(session, feeds_list, a.steps, samples=a.samples, rss_slack=int(a.rss_slack_mib * 2**20),
                        on_sample=lambda s, live, rss: print(f"  step {s:>9d}: live arrays {live}, RSS "
                                                             f"{rss / 2**20:.1f} MiB", flush=True))
    for line in report.lines():
        print(line)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
