#!/usr/bin/env python3
"""aotplan vs onnxruntime vs jax.jit on the onnx wheel's light architectures (batch 1,
seeded random weights, see tests/onnx_light.py), or on ONNX files of your own.

For each model: median step latency (interleaved rounds, with min-max spread) of the
aotplan plan replayed by the executor, of onnxruntime (CPU, same thread count), and of
`jax.jit` of the direct evaluation of the same graph, twice: `jit(args)` takes the
weights as arguments, as a plan takes its constant pool (the peer aotplan's latency
target is set against, as in scripts/bench_replay.py), and `jit(const)` closes over
them (XLA sees literals and may fold them); plus arena bytes vs the lower bound. Every
runner does the same host round trip: numpy feeds in, numpy outputs out.

    python scripts/bench_onnx.py [--models squeezenet,resnet50] [--steps 20] [--rounds 3] [--launch sink]
                                 [--disable-pass weight_layout]
    python scripts/bench_onnx.py --file model.onnx [--file other.onnx] [--input-shape x=1,64,40]

A --file model's inputs are random: floats standard normal, integers in [0, 10), bools
true; its symbolic dimensions need --input-shape. `--models ''` runs only the files.

The public suite (issue 33): the light models plus the models that
scripts/build_public_models.py exports from public packages into a cache folder
(torchvision classifiers and detection backbones, transformers' BERT/GPT-2/Llama/ViT/
Whisper-encoder shapes with random weights, ONNX files shipped in wheels; its manifest
gives each model's input shapes and value ranges). See docs/onnx.md, "The public
benchmark set".

    python scripts/bench_onnx.py --suite public [--quick] [--cache DIR] [--public resnet18,gpt2_s64]
                                 [--models squeezenet] [--steps 30] [--rounds 3]

Per model, interleaved: aotplan (launch mode --launch, sink by default), onnxruntime
and jit(args) milliseconds (median, min-max), aot/ort and aot/jit, the seconds to
import + compile the plan, to load it (decode + Session: its kernels compiled from
StableHLO, one warm-up step), to create the onnxruntime session and to trace + compile
+ run jit(args) once, and the largest difference of the plan's outputs from
onnxruntime's, relative to onnxruntime's largest output magnitude. A model that
fails (an operator aotplan does not support, ...) prints one line and the run goes on.
At the end: the geometric means of aot/ort and aot/jit over the models that ran, and
how many are above 1.5x and 1.3x onnxruntime. `--quick` runs only the manifest's quick
subset (and no light model unless --models names some): a CI-sized run.
"""

import argparse
import gc
import json
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the repository first: tests/ has folders named like its packages (tests/compiler, ...)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import onnx_light  # noqa: E402
from benchutil import timed  # noqa: E402

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "aotplan", "public-models")


def interleaved_ms(runs, rounds, steps):
    """{name: fn} -> {name: (median, min, max) ms}: `rounds` rounds, each calling every
    runner steps // rounds times in turn, so that drift hits them alike."""
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, f in runs.items():
            times[k] += timed(f, max(steps // rounds, 1))
    return {k: (np.median(v) * 1e3, np.min(v) * 1e3, np.max(v) * 1e3) for k, v in times.items()}


def _shape_arg(text):
    name, _, dims = text.partition("=")
    return name, tuple(int(d) for d in dims.split(","))


def _random_feeds(graph):
    from aotplan.core import dtypes

    rng = np.random.default_rng(0)
    out = {}
    for t in graph.inputs:
        dt = dtypes.np_dtype(t.dtype)
        if t.dtype == "bool":
            out[t.name] = np.ones(t.shape, bool)
        elif t.dtype in dtypes.FLOAT_DTYPES:
            out[t.name] = rng.standard_normal(t.shape).astype(dt)
        else:
            out[t.name] = rng.integers(0, 10, t.shape).astype(dt)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="light", choices=("light", "public"),
                    help="light: the onnx wheel's light models (and --file); public: those plus the models "
                         "scripts/build_public_models.py built into --cache")
    ap.add_argument("--quick", action="store_true", help="public suite: only the manifest's quick subset")
    ap.add_argument("--cache", default=DEFAULT_CACHE, help=f"public suite: the built models (default {DEFAULT_CACHE})")
    ap.add_argument("--public", default=None, metavar="NAMES",
                    help="public suite: the manifest's models to run (default all, or the quick ones)")
    ap.add_argument("--models", default=None, help="light models (default all; none with --suite public --quick)")
    ap.add_argument("--steps", type=int, default=None, help="steps per model, all rounds (default 20; public suite 30)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--launch", default="sink", choices=("sink", "fused", "kernel"))
    ap.add_argument("--file", action="append", default=[], help="an ONNX model to run too (repeatable)")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                    help="fix a --file input's shape (repeatable)")
    ap.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                    help="compile the plans without this clean-up pass (repeatable), as `aotplan compile` does")
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 30 if args.suite == "public" else 20
    if args.models is None:
        args.models = "" if args.suite == "public" and args.quick else ",".join(onnx_light.LIGHT)
    if args.suite == "public":
        return run_public(args)

    import jax
    import onnxruntime as ort

    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline, reference
    from compiler.frontends import onnx_import

    threads = os.cpu_count()
    shapes = dict(_shape_arg(a) for a in args.input_shape)
    print(f"jax {jax.__version__} ({jax.devices()[0].platform}), onnxruntime {ort.__version__} "
          f"({threads} threads), launch mode {args.launch}, {args.rounds} rounds x {args.steps // args.rounds} steps"
          + (f", passes disabled: {', '.join(args.disable_pass)}" if args.disable_pass else ""))
    print(f"{'model':14s} {'launches':>8s} {'aotplan ms':>16s} {'onnxruntime ms':>16s} {'jit(args) ms':>16s} "
          f"{'jit(const) ms':>16s} {'aot/ort':>8s} {'x jit(args)':>11s} {'x jit(const)':>12s} {'arena MiB':>10s} "
          f"{'bound MiB':>10s} {'arena/bound':>11s}")
    models = [(n, None) for n in args.models.split(",") if n] + [(os.path.basename(f), f) for f in args.file]
    for name, path in models:
        if path is None:
            m = onnx_light.load_randomized(name)
            feeds = {onnx_light.data_input(m).name: onnx_light.sample_inputs(onnx_light.input_shape(m), 1)[0]}
            graph = onnx_import.convert(m, name=name)
        else:
            import onnx

            m = onnx.load(path)
            graph = onnx_import.convert(m, input_shapes=shapes, name=os.path.splitext(name)[0])
            feeds = _random_feeds(graph)
        plan = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(
            launch=args.launch, disabled=frozenset(args.disable_pass))).plan
        sess = executor.Session(codec.decode(codec.encode(plan)))
        opts = ort.SessionOptions()
        opts.log_severity_level, opts.intra_op_num_threads = 3, threads
        ort_sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        fn, weights, _ = reference.make_function_of_weights(graph)
        jitted = jax.jit(fn)
        on_host = lambda outs: {k: np.asarray(v) for k, v in outs.items()}  # noqa: E731
        runs = {"aot": lambda: sess.run(feeds),
                "ort": lambda: ort_sess.run(None, feeds),
                "jit": lambda: on_host(jitted(weights, feeds)),
                "const": lambda: on_host(jitted_const(feeds))}
        jitted_const = jax.jit(lambda feeds: fn(weights, feeds))
        for fn_ in runs.values():
            fn_()
        s = interleaved_ms(runs, args.rounds, args.steps)
        fmt = lambda t: f"{t[0]:7.2f} ({t[1]:.1f}-{t[2]:.1f})"  # noqa: E731
        mem = plan.memory
        print(f"{name:14s} {len(plan.launches):8d} {fmt(s['aot']):>16s} {fmt(s['ort']):>16s} {fmt(s['jit']):>16s} "
              f"{fmt(s['const']):>16s} {s['aot'][0] / s['ort'][0]:8.2f} {s['aot'][0] / s['jit'][0]:11.2f} "
              f"{s['aot'][0] / s['const'][0]:12.2f} {mem.arena_bytes / 2**20:10.2f} "
              f"{mem.lower_bound_bytes / 2**20:10.2f} {mem.arena_bytes / max(mem.lower_bound_bytes, 1):11.3f}", flush=True)


def _manifest_feeds(graph, specs):
    """Feeds for a public model: the manifest's value specs ({"fill": v} or {"low", "high"}
    for integers), else as _random_feeds."""
    from aotplan.core import dtypes

    rng = np.random.default_rng(0)
    out = {}
    for t in graph.inputs:
        spec, dt = specs.get(t.name, {}), dtypes.np_dtype(t.dtype)
        if "fill" in spec:
            out[t.name] = np.full(t.shape, spec["fill"], dt)
        elif t.dtype == "bool":
            out[t.name] = np.ones(t.shape, bool)
        elif t.dtype in dtypes.FLOAT_DTYPES:
            out[t.name] = rng.standard_normal(t.shape).astype(dt)
        else:
            out[t.name] = rng.integers(spec.get("low", 0), spec.get("high", 10), t.shape).astype(dt)
    return out


def _symbolic_shapes(model, specs):
    """{input: shape} from the manifest for the inputs whose declared shape is not static
    (fixing a static one too would turn off the import's check of the declared output dims)."""
    out = {}
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in specs and not (len(dims) and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims)):
            out[vi.name] = tuple(specs[vi.name]["shape"])
    return out


def _one_line(e, n=240):
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text[:n] + ("..." if len(text) > n else "")


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def run_public(args):
    """--suite public: see the module's doc."""
    import jax
    import onnx
    import onnxruntime as ort

    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline, reference
    from compiler.frontends import onnx_import

    mpath = os.path.join(args.cache, "manifest.json")
    if not os.path.exists(mpath):
        sys.exit(f"no {mpath}: build the public models first (docs/onnx.md, \"The public benchmark set\"):\n"
                 f"    <venv with torch>/bin/python scripts/build_public_models.py --out {args.cache}"
                 + (" --quick" if args.quick else ""))
    with open(mpath) as f:
        manifest = json.load(f)
    entries = manifest["models"]
    if args.public is not None:
        chosen = [n for n in args.public.split(",") if n]
        missing = [n for n in chosen if n not in entries]
        if missing:
            sys.exit(f"not in {mpath}: {', '.join(missing)} (built: {', '.join(entries)})")
    else:
        chosen = [n for n, e in entries.items() if e.get("quick") or not args.quick]
        if args.quick and not chosen:
            sys.exit(f"{mpath} has no quick model: run scripts/build_public_models.py --quick")
    models = ([("light", f"light_{n}", n) for n in args.models.split(",") if n] + [("public", n, entries[n]) for n in chosen]
              + [("file", os.path.basename(f), f) for f in args.file])
    shapes = dict(_shape_arg(a) for a in args.input_shape)
    threads = os.cpu_count()
    b = manifest.get("builder", {})
    print(f"jax {jax.__version__} ({jax.devices()[0].platform}), onnxruntime {ort.__version__} ({threads} threads), "
          f"onnx {onnx.__version__}, launch mode {args.launch}, {args.rounds} rounds x {args.steps // args.rounds} steps"
          + (f", passes disabled: {', '.join(args.disable_pass)}" if args.disable_pass else ""))
    print(f"public models: {mpath} (built with torch {b.get('torch')}, torchvision {b.get('torchvision')}, "
          f"transformers {b.get('transformers')}, opset {b.get('opset')}; {len(chosen)} of {len(entries)} models"
          f"{', quick subset' if args.quick else ''}; {len(manifest.get('skipped', {}))} skipped by the build)")
    width = max([len(n) for _, n, _ in models] + [14])
    head = (f"{'model':{width}s} {'launches':>8s} {'aotplan ms':>20s} {'onnxruntime ms':>20s} {'jit(args) ms':>20s} "
            f"{'aot/ort':>7s} {'aot/jit':>7s} {'compile s':>9s} {'load s':>7s} {'ort s':>6s} {'jit s':>6s} "
            f"{'rel diff':>8s}")
    print(head)
    print("-" * len(head), flush=True)
    ratios, failed = [], []
    t_run = time.perf_counter()
    for kind, name, where in models:
        stage = "aotplan import"
        sess = ort_sess = jitted = weights = plan = graph = m = None
        try:
            if kind == "light":
                m = onnx_light.load_randomized(where)
                feeds = {onnx_light.data_input(m).name: onnx_light.sample_inputs(onnx_light.input_shape(m), 1)[0]}
                t0 = time.perf_counter()
                graph = onnx_import.convert(m, name=where)
            else:
                path = os.path.join(args.cache, where["file"]) if kind == "public" else where
                m = onnx.load(path)
                specs = {s["name"]: s for s in where["inputs"]} if kind == "public" else {}
                t0 = time.perf_counter()
                fixed = _symbolic_shapes(m, specs) if kind == "public" else shapes
                graph = onnx_import.convert(m, input_shapes=fixed, name=name)
                feeds = _manifest_feeds(graph, specs)
            stage = "aotplan compile"
            plan = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(
                launch=args.launch, disabled=frozenset(args.disable_pass))).plan
            compile_s = time.perf_counter() - t0
            stage = "aotplan load"
            t0 = time.perf_counter()
            sess = executor.Session(codec.decode(codec.encode(plan)))
            load_s = time.perf_counter() - t0
            launches = len(plan.launches)
            plan = None
            stage = "onnxruntime"
            t0 = time.perf_counter()
            opts = ort.SessionOptions()
            opts.log_severity_level, opts.intra_op_num_threads = 3, threads
            ort_sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            ort_s = time.perf_counter() - t0
            out_names = [o.name for o in ort_sess.get_outputs()]
            stage = "jit"
            fn, weights, _ = reference.make_function_of_weights(graph)
            jitted = jax.jit(fn)
            on_host = lambda outs: {k: np.asarray(v) for k, v in outs.items()}  # noqa: E731
            t0 = time.perf_counter()
            on_host(jitted(weights, feeds))
            jit_s = time.perf_counter() - t0
            stage = "run"
            runs = {"aot": lambda: sess.run(feeds),
                    "ort": lambda: ort_sess.run(None, feeds),
                    "jit": lambda: on_host(jitted(weights, feeds))}
            first = {k: f() for k, f in runs.items()}
            ref = dict(zip(out_names, first["ort"]))
            scale = max([0.0] + [float(np.max(np.abs(np.asarray(v, np.float64)))) for v in ref.values() if np.size(v)])
            scale = scale if scale > 0 and math.isfinite(scale) else 1.0
            diff = max([0.0] + [float(np.max(np.abs(np.asarray(first["aot"][k], np.float64)
                                                    - np.asarray(ref[k], np.float64)))) for k in ref
                                if k in first["aot"] and np.size(ref[k])])
            st = interleaved_ms(runs, args.rounds, args.steps)
            fmt = lambda t: f"{t[0]:8.2f} ({t[1]:.1f}-{t[2]:.1f})"  # noqa: E731
            r_ort, r_jit = st["aot"][0] / st["ort"][0], st["aot"][0] / st["jit"][0]
            ratios.append((name, r_ort, r_jit))
            print(f"{name:{width}s} {launches:8d} {fmt(st['aot']):>20s} {fmt(st['ort']):>20s} {fmt(st['jit']):>20s} "
                  f"{r_ort:7.2f} {r_jit:7.2f} {compile_s:9.1f} {load_s:7.1f} {ort_s:6.1f} {jit_s:6.1f} "
                  f"{diff / scale:8.1e}", flush=True)
        except Exception as e:  # noqa: BLE001 - one line per model that fails, and go on
            failed.append((name, stage))
            print(f"{name:{width}s} FAILED ({stage}): {_one_line(e)}", flush=True)
        sess = ort_sess = jitted = weights = plan = graph = m = runs = first = None  # noqa: F841
        onnx_light.load_randomized.cache_clear()
        jax.clear_caches()
        gc.collect()
    print("-" * len(head))
    n = len(ratios)
    if n:
        print(f"geometric mean over {n} models: aot/ort {_geomean([r for _, r, _ in ratios]):.2f}, "
              f"aot/jit {_geomean([r for _, _, r in ratios]):.2f}; above 1.5x onnxruntime: "
              f"{sum(r > 1.5 for _, r, _ in ratios)}, above 1.3x: {sum(r > 1.3 for _, r, _ in ratios)}; "
              f"at or below 1.0x: {sum(r <= 1.0 for _, r, _ in ratios)}")
    by_stage = {}
    for name, stage in failed:
        by_stage.setdefault(stage, []).append(name)
    print(f"{n} ran, {len(failed)} failed" + ("" if not failed else ": " + "; ".join(
        f"{stage} {len(v)} ({', '.join(v)})" for stage, v in by_stage.items()))
          + f"; {time.perf_counter() - t_run:.0f} s in all")


if __name__ == "__main__":
    main()
