"""Memory planners on seeded random interval sets: arena / lower bound, and seconds.

    python scripts/bench_planners.py [--sizes 1000,10000,100000] [--shapes chain,dag]
                                     [--planners naive,greedy_by_size] [--seed 0] [--repeat 1]
    python scripts/bench_planners.py --real [--repeat 1]

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

--real: the interval sets of real graphs instead, as plan_memory sees them (the front half
of a compile, `pipeline.plan_graph`, launch="kernel": every node its own launch, the most
tensors; no XLA), and greedy_by_size / greedy_by_breadth through compiler.planners (the
best-fit engine) against the direct O(n^2) transcriptions of TFLite's planners in
tests/tflite_reference.py (the offsets must be equal). Graphs: plans/examples/*/model.json,
the benchmark families of scripts/gen_models.py (built in memory), the real architectures
that the onnx wheel ships (onnx/backend/test/data/light, as in tests/onnx_light.py; shipped
placeholder weights), and the example decoder (plans/examples/decoder/build.py, KV caches
as states) at the depths of GPT-2 small (12 layers), Llama-2-7B (32) and Llama-2-70B (80),
and `scan-gru:T=...`: a GRU cell (hidden 128, input 64, batch 1) written out in the body of
an ONNX Scan over T timesteps (scan_gru), which the compile unrolls (passes/unroll.py).
Sets run in order of size; a reference run whose estimate (its seconds per n^2 on the
largest set so far) exceeds REF_LIMIT_S is skipped, and the cells show the estimates
(~seconds) of ref and fit. Columns: nodes of the graph, nodes planned (after the front
half: loops unrolled, folded, cleaned up), n intervals (with bytes), the front half's
seconds (with the naive planner; not the import), then for each
planner the seconds of the engine, of the reference and their ratio, and of `fit`: the
package's order of placement (greedy.py) with the reference's O(n^2) best-fit loop in
place of the engine, and its ratio; last the seconds of `best` (the pipeline's default
planner, through the engine).
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
from compiler.planners import greedy, layout  # noqa: E402

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


REF_LIMIT_S = 60.0
DECODER_DEPTHS = (12, 32, 80)
SCAN_STEPS = (128, 512, 2048, 8192)  # scan-gru: timesteps; 8192 x 19 nodes is within MAX_UNROLLED_NODES


def scan_gru(steps, hidden=128, features=64, seed=0):
    """-> onnx.ModelProto: a GRU written out in MatMul/Add/Split/Sigmoid/Tanh/Sub/Mul in
    the body of an ONNX Scan over `steps` timesteps, batch 1, as torch.onnx or tf2onnx
    export a hand-written recurrent cell (PyTorch's GRU equations: gates = x W + b and
    h U + c, each split in three; r, z = sigmoid; n = tanh(x_n + r * h_n); h' = n + z (h - n)).
    x [steps, 1, features] scanned on axis 0; outputs the last state [1, hidden] and every
    step's state [steps, 1, hidden]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    node, vi = helper.make_node, helper.make_tensor_value_info
    f32 = TensorProto.FLOAT

    def weight(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    body = helper.make_graph([
        node("MatMul", ["x", "w_ih"], ["xw"]), node("Add", ["xw", "b_ih"], ["gi"]),
        node("MatMul", ["h", "w_hh"], ["hw"]), node("Add", ["hw", "b_hh"], ["gh"]),
        node("Split", ["gi", "thirds"], ["i_r", "i_z", "i_n"], axis=1),
        node("Split", ["gh", "thirds"], ["h_r", "h_z", "h_n"], axis=1),
        node("Add", ["i_r", "h_r"], ["r0"]), node("Sigmoid", ["r0"], ["r"]),
        node("Add", ["i_z", "h_z"], ["z0"]), node("Sigmoid", ["z0"], ["z"]),
        node("Mul", ["r", "h_n"], ["rh"]), node("Add", ["i_n", "rh"], ["n0"]), node("Tanh", ["n0"], ["n"]),
        node("Sub", ["h", "n"], ["d"]), node("Mul", ["z", "d"], ["zd"]), node("Add", ["n", "zd"], ["h2"]),
        node("Identity", ["h2"], ["y"]),
    ], "gru_cell", [vi("h", f32, [1, hidden]), vi("x", f32, [1, features])],
        [vi("h2", f32, [1, hidden]), vi("y", f32, [1, hidden])])
    inits = {"w_ih": weight(features, 3 * hidden), "b_ih": weight(3 * hidden) * 0.1,
             "w_hh": weight(hidden, 3 * hidden), "b_hh": weight(3 * hidden) * 0.1,
             "thirds": np.array([hidden] * 3, np.int64), "h0": np.zeros((1, hidden), np.float32)}
    g = helper.make_graph([node("Scan", ["h0", "xs"], ["h_last", "ys"], body=body, num_scan_inputs=1)],
                          f"scan_gru{steps}", [vi("xs", f32, [steps, 1, features])],
                          [vi("h_last", f32, [1, hidden]), vi("ys", f32, [steps, 1, hidden])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 8)
    return m


def real_graphs():
    """-> [(label, () -> Graph)]: the real graphs, each built when called."""
    import glob
    import importlib.util

    import gen_models
    from aotplan.cli.models import load_model, with_states

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for path in sorted(glob.glob(os.path.join(root, "plans", "examples", "*", "model.json"))):
        out.append((f"ex:{os.path.basename(os.path.dirname(path))}", lambda path=path: load_model(path, ())[0]))
    for name, fn in gen_models.FAMILIES.items():
        out.append((f"bench:{name}", fn))
    try:
        import onnx  # noqa: F401  (optional dependency)
    except ImportError:
        print("(onnx is not installed: no ONNX models)", flush=True)
        return out
    import onnx_light
    from compiler.frontends import onnx_import

    for name in onnx_light.LIGHT:
        path = onnx_light.light_path(name)
        if os.path.exists(path):
            out.append((f"onnx:{name}", lambda path=path: load_model(path, ())[0]))
    spec = importlib.util.spec_from_file_location("decoder_build", os.path.join(root, "plans", "examples", "decoder",
                                                                                "build.py"))

    def decoder(layers):
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        build.LAYERS = layers  # the module's constant: weights(), build() and cache_names() read it
        g = onnx_import.convert(build.build(build.PROMPT), name=f"decoder{layers}")
        return with_states(g, "", tuple(f"{o}={i}" for o, i in build.cache_names()))[0]

    for layers in DECODER_DEPTHS:
        out.append((f"dec:prefill-x{layers}", lambda layers=layers: decoder(layers)))
    for steps in SCAN_STEPS:
        out.append((f"scan-gru:T={steps}",
                    lambda steps=steps: onnx_import.convert(scan_gru(steps), name=f"scan_gru{steps}")))
    return out


def timed(fn, repeat):
    dt, res = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = fn()
        dt = min(dt, time.perf_counter() - t0)
    return res, dt


def real(repeat=1):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from tflite_reference import ref_best_fit, ref_breadth_order, ref_size_order
    from compiler import pipeline

    alignment = formats.ALIGNMENT
    options = pipeline.Options(launch="kernel", planner="naive", targets=("cpu",))
    sets = []
    for label, build in real_graphs():
        graph = build()
        t0 = time.perf_counter()
        planned = pipeline.plan_graph(graph, options)
        ivs = list(planned.live.intervals)
        sets.append((len(ivs), label, len(graph.nodes), len(planned.graph.nodes), ivs, time.perf_counter() - t0))
    sets.sort(key=lambda s: (s[0], s[1]))
    refs = {
        "greedy_by_size": lambda ivs: ref_best_fit(ivs, alignment, ref_size_order(ivs)),
        "greedy_by_breadth": lambda ivs: ref_best_fit(ivs, alignment, ref_breadth_order(ivs, alignment)),
    }
    # `fit`: the package's order of placement (greedy.py, numpy), then the reference's
    # O(n^2) best-fit loop in place of the engine: what the engine alone saves
    fits = {
        "greedy_by_size": lambda ivs: ref_best_fit(ivs, alignment, greedy.size_order(layout.columns(ivs))),
        "greedy_by_breadth": lambda ivs: ref_best_fit(ivs, alignment,
                                                      greedy.breadth_order(layout.columns(ivs), alignment).tolist()),
    }
    per_n2 = dict.fromkeys(refs, 0.0)  # reference seconds / n^2, of the largest set so far
    fit_n2 = dict.fromkeys(refs, 0.0)  # the same for `fit`
    print(f"{'graph':<20} {'nodes':>5} {'planned':>7} {'n':>6} {'bytes>0':>7} {'front s':>7} | "
          + " | ".join(f"{p + ': engine':>15} {'ref':>8} {'ref/eng':>7} {'fit':>8} {'fit/eng':>7}"
                       for p in ("size", "breadth")) + f" | {'best s':>7}")
    totals = {"engine": 0.0, "ref": 0.0, "fit": 0.0}
    for n, label, nodes, planned_nodes, ivs, front_s in sets:
        cells = []
        for name, ref in refs.items():
            offsets, eng = timed(lambda: planners.PLANNERS[name](ivs, alignment), repeat)
            assert intervals.find_overlap(ivs, offsets) is None, (label, name)
            totals["engine"] += eng
            estimate = per_n2[name] * n * n
            if estimate > REF_LIMIT_S:  # skipped: the estimates, ~seconds
                cells.append(f"{eng:>15.4f} {f'~{estimate:.0f}':>8} {'skip':>7} "
                             f"{f'~{fit_n2[name] * n * n:.0f}':>8} {'skip':>7}")
                continue
            want, dt = timed(lambda: ref(ivs), repeat)
            assert offsets == want, f"{label}: {name} differs from the reference"
            got, fit = timed(lambda: fits[name](ivs), repeat)
            assert got == want, f"{label}: {name}: the package's order + ref_best_fit differs from the reference"
            totals["ref"] += dt
            totals["fit"] += fit
            if n:
                per_n2[name], fit_n2[name] = dt / (n * n), fit / (n * n)
            cells.append(f"{eng:>15.4f} {dt:>8.4f} {dt / eng:>7.1f} {fit:>8.4f} {fit / eng:>7.1f}")
        _, best_s = timed(lambda: planners.best(ivs, alignment), repeat)
        print(f"{label:<20} {nodes:>5} {planned_nodes:>7} {n:>6} {sum(1 for iv in ivs if iv.nbytes):>7} "
              f"{front_s:>7.2f} | "
              + " | ".join(cells) + f" | {best_s:>7.4f}", flush=True)
    print(f"all sets, both planners: engine {totals['engine']:.3f} s, reference {totals['ref']:.3f} s, "
          f"fit {totals['fit']:.3f} s")
    for name, c in per_n2.items():
        if c:
            print(f"{name} reference: {c * 1e6:.3f} us * n^2 on the largest set; 1 s at n ~ {int((1 / c) ** 0.5)}, "
                  f"{REF_LIMIT_S:.0f} s at n ~ {int((REF_LIMIT_S / c) ** 0.5)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--planners", default=",".join(planners.PLANNERS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="time each planner this many times, report the least")
    ap.add_argument("--real", action="store_true",
                    help="real graphs' interval sets: the engine against tests/tflite_reference.py")
    args = ap.parse_args(argv)
    if args.real:
        real(args.repeat)
        return
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
