#!/usr/bin/env python3
"""Per-token decode latency of a plan that keeps its KV cache on the device (a state),
against peers measured in the same run on the same decode step (the example decoder,
plans/examples/decoder/build.py, with a cache of CACHE positions):

  state      the plan compiled with --state (sink mode): feeds token and position only
  stateless  the same step compiled without states: the cache is fed from the host
             and returned to it every step
  jit        jax.jit of the same cleaned-up graph (compiler.reference.make_function),
             the cache donated (updated in place, kept on the device)
  ort        onnxruntime on the stateless ONNX step (the cache carried on the host)

Medians of --steps tokens (microseconds; the peers interleaved in --rounds rounds, so
a noisy machine's slow spells fall on each alike), each peer's ratio to jit, and the step time
at position 1 and CACHE-1 (the state plan's should be flat in position). Then device
memory: what each plan states a step needs, with the inputs and outputs it moves.

    python scripts/bench_decode.py [--cache 32,512,2048] [--steps 300] [--rounds 5]
"""

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from benchutil import interleaved, timed  # noqa: E402


def _build_module():
    spec = importlib.util.spec_from_file_location("decoder_build", os.path.join(ROOT, "plans", "examples", "decoder",
                                                                               "build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _us(ts):
    return statistics.median(ts) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="32,512,2048", help="cache lengths to measure, comma-separated")
    ap.add_argument("--steps", type=int, default=300, help="tokens timed per peer, over the rounds")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, each timing every peer in turn")
    args = ap.parse_args()

    import jax
    import onnx
    import onnxruntime as ort

    import executor
    from aotplan.cli.models import load_model
    from aotplan.core import codec
    from compiler import pipeline, reference

    build = _build_module()
    print(f"jax {jax.__version__}, onnxruntime {ort.__version__}, {jax.devices()[0].device_kind}, "
          f"{os.cpu_count()} CPUs; decoder: {build.LAYERS} layers, dim {build.DIM}, {build.HEADS} heads; "
          f"medians of {args.steps} tokens")
    print(f"{'cache':>6} {'state us':>9} {'stateless':>10} {'jit':>8} {'ort':>8} {'state/jit':>9} "
          f"{'stateless/jit':>13} {'ort/jit':>8} {'state @1':>9} {'@last':>8}  memory: state plan / stateless plan")
    states = [f"{out}={inp}" for out, inp in build.cache_names()]
    for cache in (int(c) for c in args.cache.split(",")):
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "decode.onnx")
            onnx.save(build.build(1, cache=cache), path)
            plans = {}
            for name, st in (("state", states), ("stateless", ())):
                graph, digest = load_model(path, (), states=st)
                plans[name] = pipeline.compile_graph(graph, digest, pipeline.Options(launch="sink")).plan
            stateful = executor.load(codec.encode(plans["state"]))
            stateless = executor.load(codec.encode(plans["stateless"]))
            graph, _ = load_model(path, ())
            fn, _ = reference.make_function(graph, pipeline.Options())
            pairs = build.cache_names()

            def step(kv, tokens, position):
                out = fn({**kv, "tokens": tokens, "position": position})
                return out["logits"], {past: out[present] for present, past in pairs}

            jitted = jax.jit(step, donate_argnums=0)
            so = ort.SessionOptions()
            so.log_severity_level = 3
            osess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            shape = (1, build.HEADS, cache, build.HEAD_DIM)
            host_cache = {past: np.zeros(shape, np.float32) for _, past in pairs}
            dev_cache = {"kv": {past: jax.numpy.zeros(shape, np.float32) for _, past in pairs}}
            token = np.array([[3]], np.int64)
            positions = [np.array([p % cache], np.int64) for p in range(args.steps)]
            at = {"p": 0}

            def next_position():
                at["p"] += 1
                return positions[at["p"] % args.steps]

            def run_state():
                return stateful.run({"tokens": token, "position": next_position()})["logits"]

            def run_stateless():
                out = stateless.run({"tokens": token, "position": next_position(), **host_cache})
                host_cache.update((past, out[present]) for present, past in pairs)
                return out["logits"]

            def run_jit():
                logits, dev_cache["kv"] = jitted(dev_cache["kv"], token.astype(np.int32),
                                                 next_position().astype(np.int32))
                return np.asarray(logits)

            onames = [o.name for o in osess.get_outputs()]
            ocache = {past: np.zeros(shape, np.float32) for _, past in pairs}

            def run_ort():
                out = dict(zip(onames, osess.run(None, {"tokens": token, "position": next_position(), **ocache})))
                ocache.update((past, out[present]) for present, past in pairs)
                return out["logits"]

            per_round = max(1, args.steps // args.rounds)
            times = {name: _us(ts) for name, ts in interleaved(
                {"state": run_state, "stateless": run_stateless, "jit": run_jit, "ort": run_ort},
                per_round, args.rounds).items()}
            flat = {}
            for label, p in (("first", 1), ("last", cache - 1)):
                fixed = np.array([p], np.int64)
                flat[label] = _us(timed(lambda: stateful.run({"tokens": token, "position": fixed}), args.steps))
            mem = {}
            for name, plan in plans.items():
                io = sum(plan.tensors[i].nbytes for i in plan.inputs) + sum(plan.tensors[i].nbytes
                                                                             for i in plan.outputs)
                mem[name] = (plan.memory.step_device_bytes, io)
            j = times["jit"]
            print(f"{cache:>6} {times['state']:>9.1f} {times['stateless']:>10.1f} {j:>8.1f} {times['ort']:>8.1f} "
                  f"{times['state'] / j:>9.2f} {times['stateless'] / j:>13.2f} {times['ort'] / j:>8.2f} "
                  f"{flat['first']:>9.1f} {flat['last']:>8.1f}  "
                  f"{mem['state'][0] / 1024:.1f} KiB + {mem['state'][1]} B moved / "
                  f"{mem['stateless'][0] / 1024:.1f} KiB + {mem['stateless'][1] / 1024:.1f} KiB moved")


if __name__ == "__main__":
    main()
