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

# (before jax starts: a tensor-parallel sink plan's program is exported over 2 devices)
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import numpy as np  # noqa: E402

from aotplan.core import codec, model_json  # noqa: E402
from aotplan.core.fileio import atomic_write  # noqa: E402
from compiler import pipeline, reference  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plans")


def main(argv=None):
    argparse.ArgumentParser(description="Freeze golden plans under plans/golden/v<format>/ (one per launch mode, with "
                                        "seeded inputs and reference outputs), each in the format the plan is written "
                                        "in. Only after a deliberate format change: tests load every golden plan of "
                                        "every version, and a golden plan that exists is never rewritten.").parse_args(argv)
    # the sink plan inlines its four smallest constants and keeps two in the pool (both
    # storages in one plan, and a data section); the fused plan inlines all of its own
    for name, launch, policy, inline in (("mlp", "sink", "default", 4096), ("cnn", "fused", "default", None),
                                         ("transformer", "kernel", "default", None),
                                         ("cnn", "kernel", "blocked", None)):
        graph, digest = model_json.load(os.path.join(ROOT, "examples", name, "model.json"))
        opts = pipeline.Options(launch=launch, format_policy=policy, **({} if inline is None else
                                                                       {"inline_bytes": inline}))
        if policy != "default":  # a plan with storage formats and conversions
            name = f"{name}_{policy}"
        rng = np.random.default_rng(2026)
        feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
        _freeze(name, launch, graph, opts, digest, [feeds])
    # plans with states (format 7): the example decoder, its KV cache on the device,
    # with six steps of greedy decoding (each step's outputs follow from the ones before)
    graph, digest = model_json.load(os.path.join(ROOT, "examples", "decoder", "model.json"))
    for launch in ("sink", "fused", "kernel"):
        _freeze(f"decoder_{launch}", launch, graph, pipeline.Options(launch=launch), digest, _decode_feeds(graph))
    _freeze_methods()
    # plans for several devices (format 8): the example MLP, data parallel on 2 devices
    graph, digest = model_json.load(os.path.join(ROOT, "examples", "mlp", "model.json"))
    rng = np.random.default_rng(2026)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    for launch in ("sink", "fused", "kernel"):
        _freeze(f"mlp_2devices_{launch}", launch, graph, pipeline.Options(launch=launch), digest, [feeds], devices=2)
    # tensor-parallel plans (format 9): the example MLP on 2 devices (sink: one program
    # over the devices, exported on 2 host devices: XLA_FLAGS below)
    for launch in ("fused", "kernel", "sink"):
        _freeze(f"mlp_2devices_tensor_{launch}", launch, graph, pipeline.Options(launch=launch), digest, [feeds],
                devices=2, parallel="tensor")


def _freeze_methods():
    """A plan of two methods (format 7): the decoder's prefill (8 tokens) and decode
    steps over one cache; its io: the prefill on a prompt, then five greedy steps."""
    import importlib.util
    import tempfile

    import onnx

    from aotplan.cli.models import load_methods
    from compiler import methods

    base = os.path.join(ROOT, "golden", "v7", "decoder_methods")
    if os.path.exists(base + ".plan"):
        print(f"kept {base}.plan (golden plans are never rewritten)")
        return
    spec = importlib.util.spec_from_file_location("b", os.path.join(ROOT, "examples", "decoder", "build.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    with tempfile.TemporaryDirectory() as work:
        paths = {}
        for name, t in (("prefill", build.PROMPT), ("decode", 1)):
            paths[name] = os.path.join(work, f"{name}.onnx")
            onnx.save(build.build(t), paths[name])
        named, digest = load_methods(None, [f"{n}={p}" for n, p in paths.items()], (), (), (), False,
                                     [f"{o}={i}" for o, i in build.cache_names()])
    plan = methods.compile_methods(named, digest).plan
    graphs = dict(named)
    prompt = [5, 9, 2, 33, 7, 1, 60, 12]
    steps = [("prefill", {"tokens": np.array([prompt], np.int64), "position": np.array([0], np.int64)})]
    state = _initial_states(graphs["decode"])
    out = reference.evaluate(graphs["prefill"], {**steps[0][1], **state})
    token = int(out["logits"][0, -1].argmax())
    io = {}
    for k in range(6):
        if k:
            steps.append(("decode", {"tokens": np.array([[token]], np.int64),
                                     "position": np.array([len(prompt) + k - 1], np.int64)}))
        name, feeds = steps[-1]
        out = reference.evaluate(graphs[name], {**feeds, **state})
        state = {st.input: out[st.output] for st in graphs[name].states}
        token = int(out["logits"][0, -1].argmax())
        io[f"step{k}.method"] = np.array(name)
        io.update({f"step{k}.in:{n}": v for n, v in feeds.items()})
        io[f"step{k}.out:logits"] = out["logits"]
    atomic_write(base + ".plan", codec.encode(plan))
    np.savez(base + ".io.npz", **io)
    print(f"wrote {base}.plan (methods prefill and decode, format {codec.version_of(plan)})")


def _decode_feeds(graph, steps=6):
    """Greedy decoding's feeds, from token 1, by the direct reference evaluation."""
    feeds, token, state = [], 1, _initial_states(graph)
    for position in range(steps):
        step = {"tokens": np.array([[token]], np.int64), "position": np.array([position], np.int64)}
        feeds.append(step)
        out = reference.evaluate(graph, {**step, **state})
        state = {st.input: out[st.output] for st in graph.states}
        token = int(out["logits"].argmax())
    return feeds


def _initial_states(graph):
    info = {t.name: t for t in graph.inputs}
    return {st.input: st.init if st.init is not None else np.zeros(info[st.input].shape, np.float32)
            for st in graph.states}


def _freeze(name, launch, graph, opts, digest, steps, devices=1, parallel="data"):
    """Write <name>.plan into the folder of its format and <name>.io.npz: per step k,
    "in:NAME" and "out:NAME" (one step) or "step{k}.in:NAME" and "step{k}.out:NAME"
    (steps from the plan's initial states, run in order). `devices` > 1: a data-parallel
    plan (the io: the whole batch's), or a tensor-parallel one."""
    if devices > 1 and parallel == "tensor":
        from compiler import tensor_parallel_plan

        plan = tensor_parallel_plan.compile_tensor_parallel(graph, digest, opts, devices).plan
    elif devices > 1:
        from compiler import data_parallel

        plan = data_parallel.compile_data_parallel(graph, digest, opts, devices).plan
    else:
        plan = pipeline.compile_graph(graph, digest, opts).plan
    version = codec.version_of(plan)
    out = os.path.join(ROOT, "golden", f"v{version}")
    base = os.path.join(out, name)
    if os.path.exists(base + ".plan"):
        print(f"kept {base}.plan (golden plans are never rewritten)")
        return
    os.makedirs(out, exist_ok=True)
    io, state = {}, _initial_states(graph)
    for k, feeds in enumerate(steps):
        want = reference.evaluate(graph, {**feeds, **state})
        state = {st.input: want[st.output] for st in graph.states}
        returned = {o: want[o] for o in graph.returned}
        prefix = f"step{k}." if len(steps) > 1 else ""
        io.update({f"{prefix}in:{n}": v for n, v in feeds.items()})
        io.update({f"{prefix}out:{n}": v for n, v in returned.items()})
    atomic_write(base + ".plan", codec.encode(plan))
    np.savez(base + ".io.npz", **io)
    print(f"wrote {base}.plan ({launch} mode, format {version}, jax {plan.provenance.jax_version})")


if __name__ == "__main__":
    main()
