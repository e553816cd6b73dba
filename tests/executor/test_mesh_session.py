"""Data-parallel plans (`--devices N --parallel data`) on several host devices: the
example MLP (N = 2 and 4), CNN, a batch-4 transformer and an ONNX light CNN (SqueezeNet at
batch 2) (N = 2), in every launch mode, give
the one-device plan's outputs; each device has its arena (kept in place across steps)
and its weights; a plan for more devices than the host has, a one-device Session of a
mesh plan and wrong feeds are each one clear error. The devices are forced host
devices (XLA_FLAGS before jax starts), so the work runs in one child process."""

import json
import os
import shutil

import jax
import pytest

from conftest import EXAMPLES, FOUR_DEVICE_CHILD, child_report

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="forced host devices: a CPU host's test")

_CHILD = FOUR_DEVICE_CHILD + r"""
import numpy as np
import compiler, executor
from aotplan.core import codec

models = json.loads(sys.argv[1])
report.update({"diff": {}, "devices": {}, "in_place": {}, "memory_same": {}})

rng = np.random.default_rng(0)
for name, path in models.items():
    # (one one-device plan per model: every launch mode's plan for several devices is compared with it)
    one = executor.Session(compiler.compile(path, launch="sink"), warmup=False)
    feeds = {n: rng.standard_normal(shape).astype(dt) for n, dt, shape in one.input_specs}
    want = one.run(feeds)
    for launch in ("sink", "fused", "kernel"):
        for n in ((2, 4) if name == "mlp" else (2,)):  # (4 devices: the MLP's, to keep this test short)
            plan = compiler.compile(path, launch=launch, devices=n)
            sess = executor.load(codec.encode(plan))
            key = f"{name}/{launch}/{n}"
            before = [s.arena_pointer() for s in sess.sessions]
            got = sess.run(feeds)
            got = sess.run(feeds)
            report["in_place"][key] = before == [s.arena_pointer() for s in sess.sessions]
            report["diff"][key] = max(float(np.max(np.abs(got[k] - want[k])) / max(float(np.max(np.abs(want[k]))), 1e-30))
                                      for k in want)
            report["devices"][key] = sorted({str(list(a.devices())[0]) for o in sess.run(feeds, device_outputs=True)
                                             for a in o.values()})
            report["memory_same"][key] = sess.memory == plan.memory and sess.input_specs == one.input_specs
            sess.close()

mlp = models["mlp"]
plan4 = codec.encode(compiler.compile(mlp, devices=4))
error("from_third_device", lambda: executor.load(plan4, device="cpu:2"))
error("one_device_session", lambda: executor.Session(codec.decode(plan4)))
sess = executor.load(plan4)
x = rng.standard_normal((4, 64)).astype(np.float32)
error("wrong_shape", lambda: sess.run({"x": x[:2]}))
error("missing", lambda: sess.run({}))
error("unknown", lambda: sess.run({"x": x, "y": x}))
error("right", lambda: sess.run({"x": x}))
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("mesh")
    with open(os.path.join(EXAMPLES, "transformer", "model.json")) as f:
        doc = json.load(f)
    doc["inputs"][0]["shape"][0] = 4  # (its reshapes name the batch: -1 keeps it)
    for n in doc["nodes"]:
        if n["op"] == "reshape":
            n["attrs"]["shape"][0] = -1
    shutil.copy(os.path.join(EXAMPLES, "transformer", doc["weights"]["file"]), d / doc["weights"]["file"])
    (d / "transformer4.json").write_text(json.dumps(doc))
    # an ONNX light CNN (the onnx wheel's SqueezeNet, seeded weights: tests/onnx_light.py) at batch 2
    import onnx

    import onnx_light

    sq = onnx_light.load_randomized("squeezenet")
    for t in (sq.graph.input[0], *sq.graph.output):
        t.type.tensor_type.shape.dim[0].dim_value = 2
    onnx.save(sq, str(d / "squeezenet2.onnx"))
    models = {"mlp": os.path.join(EXAMPLES, "mlp", "model.json"), "cnn": os.path.join(EXAMPLES, "cnn", "model.json"),
              "transformer4": str(d / "transformer4.json"), "squeezenet2": str(d / "squeezenet2.onnx")}
    return child_report(_CHILD, json.dumps(models))


def test_every_example_and_launch_mode_matches_the_one_device_plan(report):
    want = {f"{m}/{launch}/{n}" for launch in ("sink", "fused", "kernel")
            for m, ns in (("mlp", (2, 4)), ("cnn", (2,)), ("transformer4", (2,)), ("squeezenet2", (2,))) for n in ns}
    assert set(report["diff"]) == want
    assert all(d <= 1e-5 for d in report["diff"].values()), report["diff"]


def test_each_device_keeps_its_own_arena_and_outputs(report):
    for key, devices in report["devices"].items():
        n = int(key.rsplit("/", 1)[1])
        assert devices == [f"TFRT_CPU_{i}" for i in range(n)] or len(devices) == n, (key, devices)
    assert all(report["in_place"].values()), report["in_place"]
    assert all(report["memory_same"].values()), report["memory_same"]


def test_bad_devices_and_feeds_are_one_clear_error(report):
    e = report["errors"]
    assert e["from_third_device"].startswith("PlanError: the plan runs on 4 devices (data parallel); this host has 4 "
                                             "cpu device(s), 2 from"), e
    assert e["one_device_session"].startswith("PlanError: the plan runs on 4 devices (data parallel): executor.load"), e
    assert e["wrong_shape"] == "FeedError: input 'x': expected float32[4, 64], got float32[2, 64]", e
    assert e["missing"] == "FeedError: input 'x': missing", e
    assert e["unknown"].startswith("FeedError: input 'y': not an input of this plan"), e
    assert e["right"] is None, e
