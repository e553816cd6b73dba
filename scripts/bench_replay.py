#!/usr/bin/env python3
"""Replaying plans vs jax.jit on the example models: compile, step latency, readiness.

For each model (plans/examples: mlp, cnn, transformer; `--onnx` adds the onnx wheel's
light architectures, see tests/onnx_light.py):

1. compile: sink, fused and kernel plans (and a sink plan with embedded native
   executables); compile time, launches, unique launch kernels, device bytes per
   step, and each plan's largest difference from the jax.jit peer's outputs.
2. step latency: interleaved rounds (as scripts/bench_onnx.py), median with min-max,
   of the three launch modes' sessions, the sink plan compiled with `--inline-constants 0`
   (`sink-pool`: every weight an argument, to show what inline constants save), the
   sink plan with its native executables
   (`native`, trust_executables=True: what a host deploys; `native-py`: the same
   executables called from Python, the fallback) and the jax.jit peers,
   numpy in -> numpy out
   (the same host round trip for all) and device in -> device out. Two peers:
   `jit(args)` takes the weights as arguments (as a plan takes its constant pool: the
   way a JAX model is usually called, and the peer ratios are taken to) and `jit(const)` is
   `jax.jit(reference.make_function(graph))`, whose weights are closed-over constants
   that XLA sees as literals (it may fold them). `jit(opts)` is jit(args) compiled
   with the XLA options aotplan's kernels get (aotplan/core/xla_options.py): how much of a
   plan's lead is those options. Targets: sink and native <= 1.0x, fused <= 1.2x.
3. readiness in this process (jax already imported; `jax.clear_caches()` before each
   measurement, so no kernel is reused from an earlier compile in this process):
   plan load + first output (StableHLO sink plan; sink plan with native executables,
   trust_executables=True) vs the peer's model.json load + build + jax.jit + first
   output. Target: peer/plan >= 10x with native executables.
4. readiness in fresh processes, from process start (python start-up and `import jax`
   included) to the first output, median of a few repeats, with no persistent
   compilation cache (JAX_COMPILATION_CACHE_DIR and AOTPLAN_CACHE_DIR are unset).

    python scripts/bench_replay.py [--models mlp,cnn,transformer] [--onnx squeezenet,resnet50]
        [--steps 1000] [--rounds 5] [--no-readiness] [--quick] [--cpu-dispatch sync|async]
"""

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from benchutil import entry_ops, fmt_ops, timed  # noqa: E402

EXAMPLES = ("mlp", "cnn", "transformer")
MODES = ("sink", "fused", "kernel")
TARGETS = {"sink": 1.0, "fused": 1.2, "native": 1.0}  # step latency, x jit(args)
READY_TARGET = 10.0  # peer / native plan, time to first output


# ------------------------------------------------------------------ helpers shared with the child processes
# (kept free of module-level jax/compiler imports: a replay child imports only the executor)

def random_feeds(specs, seed=0):
    """[(name, dtype, shape)] -> {name: numpy array of the logical dtype}, seeded."""
    from aotplan.core import dtypes

    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dtype, shape in specs:
        dt = dtypes.np_dtype(dtype)
        if dtype == "bool":
            feeds[name] = rng.random(shape) < 0.5
        elif dtype in dtypes.INT_DTYPES:
            feeds[name] = rng.integers(0, 10, size=shape).astype(dt)
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32).astype(dt)
    return feeds


def graph_specs(graph):
    return [(t.name, t.dtype, tuple(t.shape)) for t in graph.inputs]


def to_storage(feeds, specs):
    from aotplan.core import dtypes

    return {name: dtypes.to_storage(feeds[name], dtype, name) for name, dtype, _ in specs}


def make_peer(graph, weights_as_args=True, aot_options=False):
    """The jax.jit peer: -> (step, out_info) where step(feeds in storage dtypes) ->
    {output: array}. With weights_as_args, the jitted function takes the weights as
    arguments (device arrays made once here), as a sink plan takes its constant pool;
    otherwise it is `jax.jit(reference.make_function(graph))`, weights closed over.
    With aot_options, compiled with the XLA options aotplan's kernels get
    (aotplan/core/xla_options.py), to tell their effect from the plan's own."""
    import jax

    from aotplan.core import xla_options
    from compiler import reference
    from compiler.passes.lower import host_platform

    if not weights_as_args:
        fn, info = reference.make_function(graph)
        jitted = jax.jit(fn)
        return jitted, info
    fn, weights, info = reference.make_function_of_weights(graph)
    jitted = jax.jit(fn)
    if not aot_options:
        return (lambda feeds: jitted(weights, feeds)), info
    compiled = {}

    def step(feeds):
        if not compiled:  # lowered on the first call, for the feeds it is given
            compiled[0] = xla_options.compile(jitted.lower(weights, feeds), host_platform())
        return compiled[0](weights, feeds)
    return step, info


def host_outputs(outs, info):
    """Device outputs -> numpy arrays of the logical dtype (what Session.run returns):
    `np.asarray` where the device holds that dtype already, as a user would write."""
    from aotplan.core import dtypes

    return {n: np.asarray(v) if dtypes.storage_dtype(info[n].dtype) == info[n].dtype else
            dtypes.from_storage(v, info[n].dtype) for n, v in outs.items()}


def child_replay(plan_path, native, t_py):
    """Fresh-process readiness of a plan: run from `python -c` (see fresh_readiness);
    t_py: time.time() at the first line of the child's code."""
    import jax  # noqa: F401

    import executor

    t_imp = time.time()
    rss = _rss_mib()
    sess = executor.load(plan_path, trust_executables=native)
    t_load = time.time()
    out = sess.run(random_feeds(sess.input_specs))
    t_out = time.time()
    sess.wait_ready()  # (not timed: native kernels get jax's call path after the first output)
    assert all(np.all(np.isfinite(v)) for v in out.values() if v.dtype.kind == "f")
    print(json.dumps({"py": t_py, "import": t_imp, "load": t_load, "out": t_out, "source": sess.kernel_source,
                      "peak": _peak_mib() - rss}))


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib():
    """Peak resident memory of this process image (VmHWM; ru_maxrss would carry the
    parent's peak across fork and exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child_peer(model_path, weights_as_args, t_py):
    """Fresh-process readiness of the jax.jit peer: model.json -> first output."""
    import jax  # noqa: F401

    from aotplan.core import model_json

    t_imp = time.time()
    rss = _rss_mib()
    graph, _ = model_json.load(model_path)
    step, info = make_peer(graph, weights_as_args)
    t_load = time.time()
    specs = graph_specs(graph)
    out = host_outputs(step(to_storage(random_feeds(specs), specs)), info)
    t_out = time.time()
    assert all(np.all(np.isfinite(v)) for v in out.values() if v.dtype.kind == "f")
    print(json.dumps({"py": t_py, "import": t_imp, "load": t_load, "out": t_out, "source": "jit",
                      "peak": _peak_mib() - rss}))


def child_import_only(t_py):
    import jax

    jax.devices()
    t = time.time()
    print(json.dumps({"py": t_py, "import": t, "load": t, "out": t, "source": "-"}))


# ------------------------------------------------------------------ formatting

def fmt_ms(v):
    return f"{np.median(v) * 1e3:8.3f} ({np.min(v) * 1e3:.3f}-{np.max(v) * 1e3:.3f})"


def fmt_s(s):
    return f"{s * 1e3:9.1f}"


def rule(title):
    print()
    print(f"== {title}")


# ------------------------------------------------------------------ the benchmark

class Model:
    def __init__(self, name, graph, digest, model_path):
        self.name, self.graph, self.digest, self.model_path = name, graph, digest, model_path
        self.plans, self.paths, self.compile_s = {}, {}, {}


def load_models(args, tmp):
    from aotplan.core import model_json

    models = []
    for name in [m for m in args.models.split(",") if m]:
        path = os.path.join(ROOT, "plans", "examples", name, "model.json")
        if not os.path.exists(path):
            have = sorted(os.listdir(os.path.join(ROOT, "plans", "examples")))
            sys.exit(f"no example model {name!r} (plans/examples has: {', '.join(have)})")
        g, d = model_json.load(path)
        models.append(Model(name, g, d, path))
    for name in [m for m in args.onnx.split(",") if m]:
        import onnx_light
        from compiler.frontends import onnx_import

        if name not in onnx_light.LIGHT:
            sys.exit(f"no light ONNX model {name!r} (choose from {', '.join(onnx_light.LIGHT)})")
        g = onnx_import.convert(onnx_light.load_randomized(name), name=name)
        path = os.path.join(tmp, name, "model.json")  # saved, so the peer starts from model.json too
        os.makedirs(os.path.dirname(path))
        model_json.save(g, path)
        g, d = model_json.load(path)
        models.append(Model(name, g, d, path))
    return models


def compile_all(models, tmp):
    import jax

    import executor
    from aotplan.core import codec
    from aotplan.core.fileio import atomic_write
    from compiler import pipeline
    from aotplan.core import kernels

    rule("1. compile (plans written to a temp dir; 'native' = sink plan with embedded native executables; "
         "'sink-both' = sink plan exported for cpu and cuda, --target both)")
    print(f"{'model':12s} {'mode':9s} {'compile s':>7s} {'launches':>8s} {'unique k':>8s} {'kernels':>7s} "
          f"{'step dev B':>11s} {'arena B':>9s} {'pool B':>10s} {'inline B':>9s} {'wkspace B':>9s} {'plan KiB':>9s} "
          f"{'max|d| vs jit':>13s}")
    for m in models:
        step, info = make_peer(m.graph, True)
        specs = graph_specs(m.graph)
        m.feeds = random_feeds(specs)
        ref = host_outputs(step(to_storage(m.feeds, specs)), info)
        for mode in MODES + ("sink-pool", "native", "sink-both"):
            opts = pipeline.Options(launch="sink" if mode in ("native", "sink-pool", "sink-both") else mode,
                                    embed_native=mode == "native",
                                    **({"inline_bytes": 0} if mode == "sink-pool" else {}),
                                    **({"targets": ("cpu", "cuda")} if mode == "sink-both" else {}))
            jax.clear_caches()
            res = pipeline.compile_graph(m.graph, m.digest, opts)
            data = codec.encode(res.plan)
            path = os.path.join(tmp, f"{m.name}.{mode}.plan")
            atomic_write(path, data)
            m.plans[mode], m.paths[mode], m.compile_s[mode] = res.plan, path, res.seconds
            trust = mode == "native"
            sess = executor.load(path, trust_executables=trust)
            sess.wait_ready()
            if trust and sess.kernel_source != "native":
                print(f"  note: {m.name}: the native plan loaded from {sess.kernel_source} (no executables for this "
                      f"host?)")
            if kernels.paths_note(sess.kernel_paths):  # a kernel loaded on a slower path than the plan's own
                print(f"  note: {m.name} {mode}: {kernels.paths_note(sess.kernel_paths)[2:]}")
            out = sess.run(m.feeds)
            diff = max(float(np.max(np.abs(out[k].astype(np.float64) - ref[k].astype(np.float64))))
                       if out[k].size else 0.0 for k in ref)
            p, mem = res.plan, res.plan.memory
            print(f"{m.name:12s} {mode:9s} {res.seconds:7.2f} {len(p.launches):8d} "
                  f"{len({l.kernel for l in p.launches}):8d} {len(p.kernels):7d} {mem.step_device_bytes:11,d} "
                  f"{mem.arena_bytes:9,d} {mem.constant_pool_bytes:10,d} {mem.inline_constant_bytes:9,d} "
                  f"{mem.max_workspace_bytes:9,d} "
                  f"{len(data) / 1024:9.1f} {diff:13.2e}", flush=True)
            del sess


def latency(models, args):
    import jax

    import executor
    from compiler import reference

    rule(f"2. step latency, ms: median (min-max) over {args.rounds} interleaved rounds")
    print("   host = numpy in -> numpy out (feeds copied to the device, outputs read back: the same round trip for "
          "all);\n   device = device arrays in (storage dtype) -> device arrays out, synchronised;\n"
          "   x jit = ratio to jit(args) (weights as arguments, like the plans' constant pool), x const = ratio to "
          "jit(const);\n   sink-pool = the sink plan compiled with --inline-constants 0 (every weight an argument "
          "from the pool);\n   targets are judged on the host round trip's x jit")
    print(f"{'model':12s} {'runner':10s} {'steps':>5s} {'host ms':>26s} {'x jit':>6s} {'x const':>7s} "
          f"{'device ms':>26s} {'x jit':>6s} {'target':>7s} {'':4s}")
    for m in models:
        specs = graph_specs(m.graph)
        stor = to_storage(m.feeds, specs)
        dev_feeds = {k: jax.device_put(v) for k, v in stor.items()}
        host, device = {}, {}
        # native: the sink plan with its executables (what a host deploys), called through
        # jax's dispatch; native-py: the same executables called from Python (the fallback)
        for mode in MODES + ("sink-pool", "native", "native-py"):
            sess = load_native_py(m.paths["native"]) if mode == "native-py" else \
                executor.load(m.paths[mode], trust_executables=mode == "native")
            sess.wait_ready()  # steady steps: every kernel on its final call path
            host[mode] = (lambda s: lambda: s.run(m.feeds))(sess)
            device[mode] = (lambda s: lambda: jax.block_until_ready(s.run(dev_feeds, device_outputs=True)))(sess)
        for label, as_args, opts in (("jit(args)", True, False), ("jit(const)", False, False),
                                     ("jit(opts)", True, True)):
            step, info = make_peer(m.graph, as_args, opts)
            host[label] = (lambda st, inf: lambda: host_outputs(st(stor), inf))(step, info)
            device[label] = (lambda st: lambda: jax.block_until_ready(st(dev_feeds)))(step)
        runners = [(k, "host", f) for k, f in host.items()] + [(k, "device", f) for k, f in device.items()]
        for _, _, f in runners:  # compile and warm up
            for _ in range(3):
                f()
        # cap the steps so that one model's timing takes about --budget-s seconds
        one = sum(min(timed(f, 3)) for _, _, f in runners)
        steps = max(args.rounds, min(args.steps, int(args.budget_s / max(one, 1e-9))))
        per_round = max(steps // args.rounds, 1)
        times = {(k, w): [] for k, w, _ in runners}
        for _ in range(args.rounds):
            for k, w, f in runners:
                times[(k, w)] += timed(f, per_round)
        med = {key: float(np.median(v)) for key, v in times.items()}
        for k in host:
            rh = med[(k, "host")] / med[("jit(args)", "host")]
            rc = med[(k, "host")] / med[("jit(const)", "host")]
            rd = med[(k, "device")] / med[("jit(args)", "device")]
            target = TARGETS.get(k)
            verdict = "" if target is None else ("ok" if rh <= target else "MISS")
            print(f"{m.name:12s} {k:10s} {per_round * args.rounds:5d} {fmt_ms(times[(k, 'host')]):>26s} {rh:6.2f} "
                  f"{rc:7.2f} {fmt_ms(times[(k, 'device')]):>26s} {rd:6.2f} {'<=' + str(target) if target else '':>7s} "
                  f"{verdict:4s}", flush=True)
        for mode in ("kernel", "fused"):
            n = len(m.plans[mode].launches)
            per = [(med[(mode, w)] - med[("sink", w)]) / n * 1e6 for w in ("host", "device")]
            print(f"{'':12s} {mode} overhead per launch (({mode} - sink) / {n} launches): host {per[0]:.1f} us, "
                  f"device {per[1]:.1f} us")
        print(f"{'':12s} jit(const) / jit(args): host {med[('jit(const)', 'host')] / med[('jit(args)', 'host')]:.2f}, "
              f"device {med[('jit(const)', 'device')] / med[('jit(args)', 'device')]:.2f} (closed-over weights vs "
              f"weights as arguments)")
        sess = executor.load(m.paths["sink"])
        peer_fn, weights, _ = reference.make_function_of_weights(m.graph)
        peer_ops = entry_ops(jax.jit(peer_fn).lower(weights, stor).compile().as_text() or "")
        print(f"{'':12s} compiled step program, ops run (on a GPU about a kernel launch each): sink "
              f"{fmt_ops(entry_ops(next(iter(sess._kernels.values())).as_text() or ''))}; jit(args) "
              f"{fmt_ops(peer_ops)}")
        chk = [timed(lambda: sess.check_feeds(f), max(per_round, 20)) for f in (m.feeds, dev_feeds)]
        print(f"{'':12s} Session.check_feeds alone (part of every run): host feeds {np.median(chk[0]) * 1e6:.1f} us, "
              f"device feeds {np.median(chk[1]) * 1e6:.1f} us")
        del host, device, runners, sess


def load_native_py(path):
    """A session whose native kernels are called from Python (`native.NativeKernel`,
    the fallback where jax's internals differ), for comparison."""
    import executor
    from aotplan.core import native

    adopt, native.adopt = native.adopt, lambda *a: None
    log = logging.getLogger("aotplan")
    level = log.level
    log.setLevel(logging.ERROR)  # (its warning that they stay so is this runner's point)
    try:
        sess = executor.load(path, trust_executables=True)
        sess.wait_ready()  # (the background adoption, with the patch, leaves them so)
        return sess
    finally:
        native.adopt = adopt
        log.setLevel(level)


def ready_plan(path, native, feeds, warmup=True):
    import executor

    t0 = time.perf_counter()
    sess = executor.load(path, trust_executables=native, warmup=warmup)
    t1 = time.perf_counter()
    sess.run(feeds)
    t2 = time.perf_counter()
    sess.wait_ready()  # (not timed: native kernels get jax's call path after the first output)
    return t2 - t0, t1 - t0, t2 - t1, sess.kernel_source


def ready_peer(model_path, as_args):
    from aotplan.core import model_json

    t0 = time.perf_counter()
    graph, _ = model_json.load(model_path)
    step, info = make_peer(graph, as_args)
    t1 = time.perf_counter()
    specs = graph_specs(graph)
    host_outputs(step(to_storage(random_feeds(specs), specs)), info)
    t2 = time.perf_counter()
    return t2 - t0, t1 - t0, t2 - t1, "jit"


def readiness(models, args):
    import jax

    rule(f"3. readiness in this process, ms (jax imported; jax.clear_caches() before each; median of "
         f"{args.ready_repeats})")
    print("   plan: executor.load (read, verify, kernels, constants, one warm-up step) + first run;\n"
          "   peer: model_json.load + build + jax.jit + first output (numpy out)")
    if jax.devices()[0].platform != "cpu":
        print("   note: XLA's GPU autotuning results are cached per process and not cleared by jax.clear_caches(); "
              "section 4 is the cold figure")
    print(f"{'model':12s} {'what':22s} {'total':>9s} {'load/build':>10s} {'1st run':>9s} {'kernels':>9s} "
          f"{'peer/this':>9s} {'target':>7s} {'':4s}")
    for m in models:
        variants = [("plan sink (stablehlo)", lambda: ready_plan(m.paths["sink"], False, m.feeds)),
                    ("plan sink (native)", lambda: ready_plan(m.paths["native"], True, m.feeds)),
                    ("  same, no warm-up", lambda: ready_plan(m.paths["native"], True, m.feeds, False)),
                    ("peer jit(args)", lambda: ready_peer(m.model_path, True)),
                    ("peer jit(const)", lambda: ready_peer(m.model_path, False))]
        res = {k: [] for k, _ in variants}
        # A load right after an XLA compile (a peer's, the StableHLO plan's) was measured
        # about 2 ms slower than the same load after a light one (the example MLP: 16.2 vs
        # 14.2 ms, warm-up or not, whichever came first), so a fixed order favours some
        # variants: each repeat takes them in a new (seeded) order.
        rng = random.Random(0)
        for _ in range(args.ready_repeats):
            for k, f in rng.sample(variants, len(variants)):
                jax.clear_caches()
                res[k].append(f())
        med = {k: [float(np.median([r[j] for r in v])) for j in range(3)] + [v[0][3]] for k, v in res.items()}
        peer = min(med["peer jit(args)"][0], med["peer jit(const)"][0])
        for k, _ in variants:
            total, a, b, src = med[k]
            ratio = f"{peer / total:9.1f}" if not k.startswith("peer") else ""
            target = f">={READY_TARGET:g}" if "native" in k or "warm-up" in k else ""
            verdict = ("ok" if peer / total >= READY_TARGET else "MISS") if target else ""
            print(f"{m.name:12s} {k:22s} {fmt_s(total)} {a * 1e3:10.1f} {b * 1e3:9.1f} {src:>9s} {ratio:>9s} "
                  f"{target:>7s} {verdict:4s}", flush=True)
    print("   peer/this: the faster peer's total over this plan's total. 'no warm-up': executor.load(warmup=False); "
          "its first run then pays XLA's one-time set-up of each executable (the warm-up step's cost moves there)")


def fresh_readiness(models, args):
    rule(f"4. readiness in fresh processes, ms from process start to first output (median of {args.fresh_repeats}; "
         f"no persistent compilation cache)")
    env = dict(os.environ)
    for k in ("JAX_COMPILATION_CACHE_DIR", "AOTPLAN_CACHE_DIR", "AOTPLAN_TRUST_KEY"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join([HERE, ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    pre = "import time; t = time.time(); import bench_replay as b; "
    jobs = [("-", "import jax only", pre + "b.child_import_only(t)")]
    for m in models:
        jobs += [(m.name, "plan sink (native)", pre + f"b.child_replay({m.paths['native']!r}, True, t)"),
                 (m.name, "plan sink (stablehlo)", pre + f"b.child_replay({m.paths['sink']!r}, False, t)"),
                 (m.name, "  same, --target both", pre + f"b.child_replay({m.paths['sink-both']!r}, False, t)"),
                 (m.name, "peer jit(args)", pre + f"b.child_peer({m.model_path!r}, True, t)"),
                 (m.name, "peer jit(const)", pre + f"b.child_peer({m.model_path!r}, False, t)")]
    res = {(n, k): [] for n, k, _ in jobs}
    for _ in range(args.fresh_repeats):  # interleaved, so machine noise spreads over all of them
        for n, k, code in jobs:
            t0 = time.time()
            p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"  {n} {k}: child failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
                res[(n, k)].append(None)
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            res[(n, k)].append((r["out"] - t0, r["py"] - t0, r["import"] - r["py"], r["load"] - r["import"],
                                r["out"] - r["load"], r.get("peak", 0.0), r["source"]))
    print(f"{'model':12s} {'what':22s} {'total':>9s} {'py start':>9s} {'imports':>9s} {'load':>9s} "
          f"{'1st run':>9s} {'peak MiB':>9s} {'kernels':>9s} {'peer/this':>9s} {'after imp':>9s} {'target':>7s} "
          f"{'':4s}")
    for n, k, _ in jobs:
        rs = [r for r in res[(n, k)] if r is not None]
        if not rs:
            continue
        med = [float(np.median([r[j] for r in rs])) for j in range(6)]
        ratio = after = target = verdict = ""
        if k.startswith("plan") or k.startswith("  same"):
            peers = [(float(np.median([r[0] for r in res[(n, p)] if r])),
                      float(np.median([r[3] + r[4] for r in res[(n, p)] if r])))
                     for p in ("peer jit(args)", "peer jit(const)") if any(res[(n, p)])]
            if peers:
                ratio = f"{min(p[0] for p in peers) / med[0]:9.1f}"
                after_x = min(p[1] for p in peers) / float(np.median([r[3] + r[4] for r in rs]))
                after = f"{after_x:9.1f}"
                if k == "plan sink (native)":
                    target = f">={READY_TARGET:g}"
                    verdict = "ok" if after_x >= READY_TARGET else "MISS"
        print(f"{n:12s} {k:22s} " + " ".join(fmt_s(v) for v in med[:5]) + f" {med[5]:9.0f} {rs[0][6]:>9s} "
              f"{ratio:>9s} {after:>9s} {target:>7s} {verdict:4s}", flush=True)
    print("   imports: import jax + executor (plans) or + aotplan.core.model_json (peers; the compiler is imported while "
          "building)\n   peak MiB: the process's peak resident memory over its resident memory before loading "
          "(host memory the load and first run took)\n   peer/this: the faster peer's total over this one's; "
          "after imp: the same for load + 1st run (readiness after `import jax`, as section 3, but with JAX's "
          "one-time set-up in the process: its CPU client, its first lowering), the ratio the target is judged on")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(EXAMPLES), help="example models (plans/examples), comma-separated")
    ap.add_argument("--onnx", default="", help="also these light ONNX models, e.g. squeezenet,resnet50 (slow to "
                                               "compile; needs onnx and onnxruntime)")
    ap.add_argument("--steps", type=int, default=1000, help="timed steps per runner (capped by --budget-s)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=20.0, help="about how long one model's latency timing may take")
    ap.add_argument("--ready-repeats", type=int, default=7, help="in-process readiness repeats")
    ap.add_argument("--fresh-repeats", type=int, default=5, help="fresh-process readiness repeats")
    ap.add_argument("--no-readiness", action="store_true", help="skip sections 3 and 4")
    ap.add_argument("--quick", action="store_true", help="small repeats (a smoke test)")
    ap.add_argument("--cpu-dispatch", choices=("sync", "async"), default=None,
                    help="JAX's CPU dispatch for this process, plans and peers alike (executor.set_cpu_dispatch; "
                         "default: JAX's own, async)")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.rounds, args.budget_s = min(args.steps, 60), min(args.rounds, 2), min(args.budget_s, 2.0)
        args.ready_repeats, args.fresh_repeats = 1, 1

    t_start = time.perf_counter()
    import executor  # noqa: F401  (first: it turns JAX's GPU preallocation off before the backend starts, and the
    import jax  # fresh processes of section 4 inherit that setting, peers included)
    import jaxlib

    if args.cpu_dispatch:
        executor.set_cpu_dispatch(args.cpu_dispatch)
    d = jax.devices()[0]
    dispatch = "async" if jax.config.read("jax_cpu_enable_async_dispatch") else "sync"
    print(f"device {d} ({d.platform}, {d.device_kind}), {len(jax.devices())} device(s); jax {jax.__version__}, "
          f"jaxlib {jaxlib.__version__}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}; "
          f"cpu dispatch {dispatch} (plans and peers alike)")
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp:
        models = load_models(args, tmp)
        compile_all(models, tmp)
        latency(models, args)
        if not args.no_readiness:
            readiness(models, args)
            fresh_readiness(models, args)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
