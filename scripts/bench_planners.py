"""Memory planners on seeded random interval sets: arena / lower bound, and seconds.

    python scripts/bench_planners.py [--sizes 1000,10000,100000] [--shapes chain,dag]
                                     [--planners naive,greedy_by_size] [--seed 0] [--repeat 1]

Sizes are log-uniform, 256 B .. 16 MiB, alignment 64; the table order is shuffled. Shapes:
  chain        CNN-like: one tensor per step read by the next step or two, 8% skip
               connections (10..60 steps), 2% whole-run constants, 4 inputs, 8 outputs
  dag          branchy: 1..3 tensors per step, heavy-tailed lifetimes (Pareto, to 2000)
  fanout       many live at once: blocks of 256 parallel branches whose outputs all
               live until the block's concat
  stack        all live at once but a few: a short chain (1%), then the rest written
               over 1,000 steps and all read at the end
  interleaved  a chain plus 1% long-lived inputs (step 0 to a random step) and 0.1%
               outputs: the conflicting tensors leave many separate gaps (slow case)
  random       adversarial: n/100 steps, each tensor live for a random stretch (a third
               of all tensors live at every step), at most 10,000 intervals
plus `paper`, the worked example of Pisarchyk & Lee (arXiv 2001.03288), alignment 1.
The lower bound is the peak live bytes; every plan is checked with find_overlap (its
time is the `(find_overlap)` row). Times are wall-clock seconds on this machine, the
least of --repeat runs (the planners are deterministic; the machine may not be).
"""

import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from aotplan.core import formats, intervals  # noqa: E402
from aotplan.core.intervals import Interval  # noqa: E402
from compiler import planners  # noqa: E402

PAPER = [(0, 1, 32), (1, 4, 28), (2, 5, 36), (3, 5, 16), (4, 5, 8), (5, 7, 64), (6, 8, 10), (7, 8, 40)]


def log_uniform(rng, lo=256, hi=16 << 20):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def chain(n, rng):
    steps, rows = n - 12, []
    for s in range(steps):
        r = rng.random()
        if r < 0.02:
            rows.append((0, steps - 1, "constant"))
        elif r < 0.10:
            rows.append((s, min(steps - 1, s + rng.randrange(10, 61)), "intermediate"))
        else:
            rows.append((s, min(steps - 1, s + rng.choice((1, 1, 1, 2))), "intermediate"))
    rows += [(0, rng.randrange(1, steps // 2 + 2), "input") for _ in range(4)]
    rows += [(rng.randrange(steps), steps - 1, "output") for _ in range(8)]
    return rows


def dag(n, rng):
    rows, s = [], 0
    while len(rows) < n:
        for _ in range(rng.randrange(1, 4)):
            rows.append((s, s + min(int(rng.paretovariate(1.2)), 2000), "intermediate"))
        s += 1
    rows = rows[:n]
    end = max(r[1] for r in rows)
    return [(f, min(l, end), k) for f, l, k in rows]


def fanout(n, rng, branches=256):
    rows, s = [], 0
    while len(rows) < n:
        outs = []
        for _ in range(branches):
            rows.append((s, s + 1, "intermediate"))  # a branch's inner tensor
            s += 1
            outs.append(s)
        rows += [(o, s, "intermediate") for o in outs]  # branch outputs, read by the concat at s
        s += 1
    return rows[:n]


def stack(n, rng):
    head = n // 100
    rows = [(s, s + 1, "intermediate") for s in range(head)]
    rows += [(head + rng.randrange(1000), head + 1000, "intermediate") for _ in range(n - head)]
    return rows


def interleaved(n, rng):
    n_in, n_out = n // 100, n // 1000
    steps = n - n_in - n_out
    rows = [(s, s + rng.choice((1, 1, 1, 2)), "intermediate") for s in range(steps)]
    rows += [(0, rng.randrange(steps), "input") for _ in range(n_in)]
    rows += [(rng.randrange(steps), steps, "output") for _ in range(n_out)]
    return rows


def random_lives(n, rng):
    steps = max(10, n // 100)
    rows = []
    for _ in range(n):
        f = rng.randrange(steps)
        rows.append((f, min(steps - 1, f + rng.randrange(steps // 2)), "intermediate"))
    return rows


SHAPES = {"chain": chain, "dag": dag, "fanout": fanout, "stack": stack, "interleaved": interleaved,
          "random": random_lives}
MAX_N = {"random": 10_000}


def make(shape, n, seed):
    rng = random.Random(f"{seed}:{shape}:{n}")
    ivs = [Interval(t, f, l, log_uniform(rng), 64, k) for t, (f, l, k) in enumerate(SHAPES[shape](n, rng))]
    rng.shuffle(ivs)  # table order is not step order
    return ivs


def row(label, n, name, ratio, seconds):
    print(f"{label:<12} {n:>7} {name:<18} {ratio:>9} {seconds:>8.3f}", flush=True)


def bench(label, ivs, alignment, names, repeat=1):
    bound = intervals.peak_live_bytes(ivs, lambda b: formats.align_up(b, alignment))
    checked = False
    for name in names:
        dt = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            offsets = planners.PLANNERS[name](ivs, alignment)
            dt = min(dt, time.perf_counter() - t0)
        assert all(o % alignment == 0 for o in offsets), name
        t0 = time.perf_counter()
        assert intervals.find_overlap(ivs, offsets) is None, name
        if not checked:
            row(label, len(ivs), "(find_overlap)", "", time.perf_counter() - t0)
            checked = True
        arena = planners.arena_size(ivs, offsets, alignment)
        row(label, len(ivs), name, f"{arena / bound:.4f}" if bound else "-", dt)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--planners", default=",".join(planners.PLANNERS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="time each planner this many times, report the least")
    args = ap.parse_args(argv)
    names = args.planners.split(",")
    print(f"{'set':<12} {'n':>7} {'planner':<18} {'arena/lb':>9} {'seconds':>8}")
    bench("paper", [Interval(t, f, l, b, 1, "intermediate") for t, (f, l, b) in enumerate(PAPER)], 1, names,
          args.repeat)
    for shape in args.shapes.split(","):
        for n in map(int, args.sizes.split(",")):
            if n > MAX_N.get(shape, n):
                print(f"{shape:<12} {n:>7} (skipped: over {MAX_N[shape]})", flush=True)
                continue
            bench(shape, make(shape, n, args.seed), 64, names, args.repeat)


if __name__ == "__main__":
    main()
