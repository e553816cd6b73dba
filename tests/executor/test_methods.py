"""Plans of several methods over one set of weights, states and arena: the decoder's
prefill and decode steps in one plan give what they give as plans of their own (and
onnxruntime), sharing the cache; shape profiles of one CNN give each profile's
single-profile answers; the file holds the shared weights once; naming methods."""

import numpy as np
import pytest
from click.testing import CliRunner

import executor
from aotplan.cli import main
from aotplan.core import codec
from aotplan.core.errors import FeedError
from decoder_model import STATES, OrtStateless, build, feeds, write_onnx

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _compile(*args):
    r = CliRunner().invoke(main, ["compile", *map(str, args)])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def decoder_plans(tmp_path_factory):
    """{"both": prefill + decode in one plan, "decode": the decode step alone}, sink mode."""
    work = tmp_path_factory.mktemp("methods")
    paths = write_onnx(str(work))
    states = [a for s in STATES for a in ("--state", s)]
    out = {"both": _compile("--method", f"prefill={paths['prefill']}", "--method", f"decode={paths['decode']}",
                            "-o", work / "both.plan", *states)}
    _compile(paths["decode"], "-o", work / "decode.plan", "--inline-constants", "0", *states)
    return {"both": str(work / "both.plan"), "decode": str(work / "decode.plan"), "paths": paths,
            "summary": out["both"]}


def test_prefill_then_decode_in_one_plan_match_onnxruntime_and_the_decode_plan(decoder_plans):
    prompt = [5, 9, 2, 33, 7, 1, 60, 12]
    sess = executor.load(decoder_plans["both"])
    assert list(sess.methods) == ["prefill", "decode"]
    alone = executor.load(decoder_plans["decode"])
    ort = OrtStateless(decoder_plans["paths"]["decode"])
    for p, t in enumerate(prompt):
        want = ort.step([t], p)
        alone.run(feeds([t], p))
    got = sess.run(feeds(prompt, 0), method="prefill")["logits"]
    np.testing.assert_allclose(got[0, -1], want[0, 0], rtol=1e-4, atol=1e-5)
    token = int(got[0, -1].argmax())
    for position in range(len(prompt), len(prompt) + 8):  # the cache the prefill wrote, read by decode
        a = sess.run(feeds([token], position), method="decode")["logits"]
        np.testing.assert_allclose(a, ort.step([token], position), rtol=1e-4, atol=1e-5)
        # (the prefill wrote the cache from 8 tokens at once, the decode plan one at a
        # time: the same values summed in another order, so not to the last bit)
        np.testing.assert_allclose(a, alone.run(feeds([token], position))["logits"], rtol=1e-4, atol=1e-5)
        token = int(a.argmax())
    for _, past in build.cache_names():
        np.testing.assert_allclose(sess.methods["prefill"].get_state(past), ort.cache[past], rtol=1e-4, atol=1e-6)


def test_the_methods_share_one_copy_of_the_weights(decoder_plans):
    """The file's data section holds the weights once (those of the decode plan alone,
    which has them all), and the session places them once."""
    both, alone = codec.read(decoder_plans["both"]), codec.read(decoder_plans["decode"])
    section = lambda path: len(codec.split(open(path, "rb").read())[2])  # noqa: E731
    weights = sum(len(c.data) for c in alone.constants)
    assert weights > 100_000
    assert section(decoder_plans["both"]) < section(decoder_plans["decode"]) + 4096
    assert sum(len(c.data) for _, m in both.all_methods() for c in m.constants) > 1.9 * weights
    assert "weights they share stored and placed once" in decoder_plans["summary"]
    sess = executor.load(decoder_plans["both"])
    pre, dec = sess.methods["prefill"], sess.methods["decode"]
    shared = {id(a) for a in pre._pool.values()} & {id(a) for a in dec._pool.values()}
    assert len(shared) >= 20, len(shared)


def test_naming_methods(decoder_plans):
    sess = executor.load(decoder_plans["both"])
    with pytest.raises(FeedError, match=r"several methods \('prefill', 'decode'\): name one"):
        sess.run(feeds([1], 0))
    with pytest.raises(FeedError, match=r"unknown method 'encode' \(the plan's methods: 'prefill', 'decode'\)"):
        sess.run(feeds([1], 0), method="encode")
    out = sess.methods["decode"].run(feeds([1], 0))
    assert out["logits"].shape == (1, 1, build.VOCAB)
    sess.reset_state()
    np.testing.assert_array_equal(sess.run(feeds([1], 0), method="decode")["logits"], out["logits"])
    with pytest.raises(FeedError, match=r"input 'tokens': expected int64\[1, 8\]"):
        sess.methods["prefill"].run(feeds([1], 0))
    sess.close()
    assert sess.methods["decode"].closed


def _cnn(path):
    """A small CNN whose batch dimension is symbolic ("N")."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in
             (("w1", (8, 3, 3, 3)), ("b1", (8,)), ("w2", (16, 8, 3, 3)), ("fc", (16, 10)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return sum(i.nbytes for i in (numpy_helper.to_array(t) for t in inits))


def test_shape_profiles_give_each_single_profile_plans_answers_with_the_weights_once(tmp_path):
    model = str(tmp_path / "cnn.onnx")
    weights = _cnn(model)
    _compile(model, "-o", tmp_path / "profiles.plan", *[a for b in (1, 4, 8) for a in
                                                         ("--profile", f"b{b}:x={b},3,16,16")])
    sess = executor.load(str(tmp_path / "profiles.plan"))
    assert list(sess.methods) == ["b1", "b4", "b8"]
    rng = np.random.default_rng(1)
    for b in (1, 4, 8):
        _compile(model, "-o", tmp_path / f"b{b}.plan", "--input-shape", f"x={b},3,16,16")
        x = rng.standard_normal((b, 3, 16, 16)).astype(np.float32)
        want = executor.load(str(tmp_path / f"b{b}.plan")).run({"x": x})["y"]
        np.testing.assert_allclose(sess.run({"x": x}, method=f"b{b}")["y"], want, rtol=1e-5, atol=1e-6)
    # the data section holds the weights once, not once a profile (aligned to 64 bytes each)
    section = len(codec.split((tmp_path / "profiles.plan").read_bytes())[2])
    assert weights <= section < weights + 4 * 64, (section, weights)
    plan = codec.read(str(tmp_path / "profiles.plan"))
    assert sum(len(c.data) for _, m in plan.all_methods() for c in m.constants) == 3 * weights


def test_closing_a_plan_of_several_methods_releases_every_methods_buffers(decoder_plans):
    import gc

    import jax

    gc.collect()
    before = len(jax.live_arrays())
    with executor.load(decoder_plans["both"]) as sess:
        sess.run(feeds([1], 0), method="decode")
        assert len(jax.live_arrays()) > before
    gc.collect()
    assert len(jax.live_arrays()) == before
