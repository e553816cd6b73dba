"""Tensor-parallel plans (`--devices N --parallel tensor`) on several host devices: the
example MLP and transformer, a BERT-like model (scripts/gen_models.py's structure,
smaller) and three heads summed as one block (tests/tensor_models.py), on 2 and 4
devices, in fused, kernel and sink mode (one program over the devices, its collectives
inside: an SpmdSession), give the one-device plan's outputs; every device's arena
stays the same buffer across steps (the collectives donate it) and holds its part of
the weights; a sink plan's collectives are counted in its program and in XLA's
compiled HLO; the wrong devices, a device's Session run alone and wrong feeds are
each one clear error. The devices are forced host
devices (XLA_FLAGS before jax starts), so the work runs in one child process."""

import json
import os
import sys

import jax
import pytest

from conftest import EXAMPLES, FOUR_DEVICE_CHILD, ROOT, child_report

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="forced host devices: a CPU host's test")

_CHILD = FOUR_DEVICE_CHILD + r"""
import numpy as np
import compiler, executor
from aotplan.core import codec, model_json
from compiler import pipeline, tensor_parallel_plan

models = json.loads(sys.argv[1])
report.update({"diff": {}, "in_place": {}, "pool": {}, "collectives": {}, "kind": {}, "moved": {}})

rng = np.random.default_rng(0)
for name, path in models.items():
    one_plan = compiler.compile(path, launch="kernel")
    one = executor.Session(one_plan, warmup=False)
    feeds = {n: rng.standard_normal(shape).astype(dt) for n, dt, shape in one.input_specs}
    want = one.run(feeds)
    for launch in ("fused", "kernel", "sink"):
        for n in (2, 4):
            key = f"{name}/{launch}/{n}"
            if launch == "sink":  # (the compile's result: its collectives in the program and compiled)
                g, digest = model_json.load(path)
                res = tensor_parallel_plan.compile_tensor_parallel(g, digest, pipeline.Options(launch="sink"), n)
                plan, report["collectives"][key + "/compiled"] = res.plan, res.collectives
            else:
                plan = compiler.compile(path, launch=launch, devices=n, parallel="tensor")
            sess = executor.load(codec.encode(plan))
            report["kind"][key] = type(sess).__name__
            got = sess.run(feeds)
            before = sess.arena_pointer()
            got = sess.run(feeds)
            report["in_place"][key] = before == sess.arena_pointer() and len(before) == n
            report["diff"][key] = max(float(np.max(np.abs(got[k] - want[k])) / max(float(np.max(np.abs(want[k]))), 1e-30))
                                      for k in want)
            report["pool"][key] = plan.memory.constant_pool_bytes / one_plan.memory.constant_pool_bytes
            report["collectives"][key] = len(plan.mesh.collectives)
            report["moved"][key] = (report["collectives"][key + "/compiled"][2] if launch == "sink" else
                                    sum(plan.tensors[i].nbytes for c in plan.mesh.collectives for i in c.reads))
            sess.close()

mlp = models["mlp"]
plan4 = codec.encode(compiler.compile(mlp, devices=4, parallel="tensor"))
error("from_third_device", lambda: executor.load(plan4, device="cpu:2"))
error("two_devices", lambda: executor.MeshSession(codec.decode(plan4), devices=["cpu:0", "cpu:1"]))
error("one_device_session", lambda: executor.Session(codec.decode(plan4)))
sink4 = codec.encode(compiler.compile(mlp, devices=4, parallel="tensor", launch="sink"))
error("sink_on_two", lambda: executor.load(sink4, device="cpu:2"))
error("sink_mesh_session", lambda: executor.MeshSession(codec.decode(sink4)))
sess = executor.load(sink4)
x = rng.standard_normal((4, 64)).astype(np.float32)
error("sink_wrong_shape", lambda: sess.run({"x": x[:2]}))
error("sink_wrong_dtype", lambda: sess.run({"x": x.astype(np.float64)}))
error("sink_unknown", lambda: sess.run({"x": x, "y": x}))
sess.close()
error("sink_closed", lambda: sess.run({"x": x}))
sess = executor.load(plan4)
error("device_alone", lambda: sess.sessions[1].run({"x": x}))
error("wrong_shape", lambda: sess.run({"x": x[:2]}))
error("missing", lambda: sess.run({}))
error("right", lambda: sess.run({"x": x}))
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("tensor")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import gen_models
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    from aotplan.core import model_json

    from tensor_models import three_heads

    bert = gen_models.bert4(layers=2, seq=16, hid=64, heads=4, ffn=128, name="bert_small")
    for name, graph in (("bert", bert), ("heads", three_heads())):  # (a folder each: its weights file)
        (d / name).mkdir()
        model_json.save(graph, str(d / name / "model.json"))
    models = {"mlp": os.path.join(EXAMPLES, "mlp", "model.json"),
              "transformer": os.path.join(EXAMPLES, "transformer", "model.json"), "bert": str(d / "bert" / "model.json"),
              "heads": str(d / "heads" / "model.json")}
    return child_report(_CHILD, json.dumps(models))


def test_every_model_mode_and_device_count_matches_the_one_device_plan(report):
    want = {f"{m}/{launch}/{n}" for m in ("mlp", "transformer", "bert", "heads")
            for launch in ("fused", "kernel", "sink") for n in (2, 4)}
    assert set(report["diff"]) == want
    assert all(d <= 1e-5 for d in report["diff"].values()), report["diff"]
    assert {k for k, kind in report["kind"].items() if kind == "SpmdSession"} == {k for k in want if "/sink/" in k}


def test_each_device_keeps_its_arena_in_place_and_its_part_of_the_weights(report):
    assert all(report["in_place"].values()), report["in_place"]
    # three heads summed at one point: one collective, their parts one block
    assert all(report["collectives"][f"heads/{launch}/{n}"] == 1 for launch in ("fused", "kernel") for n in (2, 4))
    # BERT's layers split by heads and FFN columns: one all-reduce per block (2 a layer)
    for n in (2, 4):
        assert report["collectives"][f"bert/kernel/{n}"] == 4, report["collectives"]
        # its weights are matmuls but the layer norms': about 1/n of them a device
        assert report["pool"][f"bert/kernel/{n}"] < 1.1 / n, report["pool"]
        # a sink plan: none between launches; its program names them, XLA may combine some
        assert report["collectives"][f"bert/sink/{n}"] == 0
        sink = {k: v for k, v in report["collectives"].items() if "/sink/" in k}
        named, compiled, _ = report["collectives"][f"bert/sink/{n}/compiled"]
        assert named >= 4 and 1 <= compiled <= named, sink
        # three heads' partial sums at one point: jax writes an all-reduce each (or one
        # of three operands), XLA's compiled program runs one
        named, compiled, _ = report["collectives"][f"heads/sink/{n}/compiled"]
        assert named in (1, 3) and compiled == 1, sink
    # the bytes each device puts into the collectives, from the sink plan's compiled HLO,
    # are the fused plan's (the same all-reduces and all-gathers, however XLA groups them)
    for m in ("mlp", "transformer", "bert", "heads"):
        for n in (2, 4):
            assert report["moved"][f"{m}/sink/{n}"] == report["moved"][f"{m}/fused/{n}"] > 0, report["moved"]


def test_bad_devices_and_feeds_are_one_clear_error(report):
    e = report["errors"]
    assert e["from_third_device"].startswith("PlanError: the plan runs on 4 devices (tensor parallel); this host has 4 "
                                             "cpu device(s), 2 from"), e
    assert e["two_devices"] == "PlanError: devices: the plan runs on 4 different devices, got 2 (2 different)", e
    assert e["one_device_session"].startswith("PlanError: the plan runs on 4 devices (tensor parallel): "
                                              "executor.load"), e
    assert e["device_alone"].startswith("PlanError: this session is one device's part of a tensor-parallel plan"), e
    assert e["wrong_shape"] == "FeedError: input 'x': expected float32[4, 64], got float32[2, 64]", e
    assert e["missing"] == "FeedError: input 'x': missing", e
    assert e["right"] is None, e
    assert e["sink_on_two"].startswith("PlanError: the plan runs on 4 devices (tensor parallel); this host has 4 "
                                       "cpu device(s), 2 from"), e
    assert e["sink_mesh_session"].startswith("PlanError: MeshSession: the plan is one program over its devices"), e
    assert e["sink_wrong_shape"] == "FeedError: input 'x': expected float32[4, 64], got float32[2, 64]", e
    assert e["sink_wrong_dtype"].startswith("FeedError: input 'x'"), e
    assert e["sink_unknown"] == "FeedError: unknown input 'y' (the plan's inputs: x)", e
    assert e["sink_closed"].startswith("PlanError: this session is closed"), e
