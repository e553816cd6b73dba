#!/usr/bin/env python3
"""Storage-format policies per model and launch mode: memory, conversions, relayouts, latency.

    python scripts/bench_formats.py                         # cnn, transformer, resnet50
    python scripts/bench_formats.py --models cnn --modes kernel --rounds 7

For each model and launch mode, every policy (--format-policy) is compiled, loaded and
replayed on the same inputs; latencies are measured interleaved (policy after policy,
`--rounds` times, `--steps` steps each) and reported as the median of the rounds'
medians with the rounds' spread. Columns:
  arena      the plan's arena (KiB)
  conv       conversion (transdata) nodes, and the bytes they write per step
  inside     nodes that relayout inside their kernel (nc1hwc0 convs)
  hlo t+c    transposes + copies in the compiled kernels' HLO, per step (the hidden ones too)
  ms         median step latency; x default: the ratio to the default policy in this run
  err        max |output - default policy's output| / max |default policy's output|
resnet50 is the structure scripts/gen_models.py writes to plans/bench/ (generated here
when missing); `onnx:NAME` is a light ONNX architecture (tests/onnx_light.py, needs the
onnx wheel), e.g. --models onnx:squeezenet,onnx:inception_v1.
"""

import argparse
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

POLICIES = ("default", "nhwc", "aligned", "blocked", "auto")


def model_path(name):
    ex = os.path.join(ROOT, "plans", "examples", name, "model.json")
    if os.path.exists(ex):
        return ex
    bench = os.path.join(ROOT, "plans", "bench", name, "model.json")
    if not os.path.exists(bench):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_models.py"), name], check=True)
    return bench


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn,transformer,resnet50")
    ap.add_argument("--modes", default="kernel,fused,sink")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()

    import jax

    import executor
    from aotplan.core import codec, model_json
    from benchutil import timed
    from compiler import pipeline

    print(f"jax {jax.__version__}, {jax.devices()[0].platform} ({jax.devices()[0].device_kind}); "
          f"{a.rounds} rounds x {a.steps} steps, interleaved")
    print(f"{'model':12s} {'mode':6s} {'policy':14s} {'arena KiB':>9s} {'conv':>4s} {'conv KiB':>8s} {'inside':>6s} "
          f"{'hlo t+c':>7s} {'ms':>8s} {'x default':>9s} {'spread':>13s} {'err':>8s}")
    for name in [m for m in a.models.split(",") if m]:
        if name.startswith("onnx:"):
            sys.path.insert(0, os.path.join(ROOT, "tests"))
            import onnx_light
            from compiler.frontends import onnx_import

            graph = onnx_import.convert(onnx_light.load_randomized(name[5:]), name=name[5:])
            digest = model_json.graph_digest(graph)
        else:
            graph, digest = model_json.load(model_path(name))
        rng = np.random.default_rng(0)
        feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
        for mode in a.modes.split(","):
            rows = {}
            for pol in a.policies.split(","):
                res = pipeline.compile_graph(graph, digest, pipeline.Options(launch=mode, format_policy=pol))
                sess = executor.Session(codec.decode(codec.encode(res.plan)))
                out = sess.run(feeds)
                for _ in range(3):
                    sess.run(feeds)
                rows[pol] = dict(res=res, sess=sess, out=out, meds=[])
            for _ in range(a.rounds):
                for pol, r in rows.items():
                    r["meds"].append(float(np.median(timed(lambda: r["sess"].run(feeds), a.steps))) * 1e3)
            base = float(np.median(rows["default"]["meds"])) if "default" in rows else None
            ref = rows["default"]["out"] if "default" in rows else None
            for pol, r in rows.items():
                fs, plan = r["res"].formats, r["res"].plan
                ms = float(np.median(r["meds"]))
                ratio = f"{ms / base:9.3f}" if base else f"{'':9s}"
                spread = f"{min(r['meds']) / base:.2f}-{max(r['meds']) / base:.2f}" if base else ""
                err = max(float(np.max(np.abs(r["out"][k] - ref[k])) / max(float(np.max(np.abs(ref[k]))), 1e-30))
                          for k in ref) if ref else float("nan")
                label = pol if pol != "auto" else f"auto={fs.policy}"
                print(f"{name:12s} {mode:6s} {label:14s} {plan.arena_bytes / 1024:9.1f} {fs.conversions:4d} "
                      f"{fs.conversion_bytes / 1024:8.1f} {fs.relayouts:6d} {fs.transposes + fs.copies:7d} {ms:8.3f} "
                      f"{ratio} {spread:>13s} {err:8.1e}", flush=True)


if __name__ == "__main__":
    main()
