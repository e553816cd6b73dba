"""Every supported dtype through the arena: sub-word packing, bool as a byte, bfloat16
weights in .npz, and the int64 -> int32 narrowing policy with its range checks."""

import functools

import ml_dtypes
import numpy as np
import pytest

from aotplan.core import dtypes, model_json
from aotplan.core.errors import FeedError, LimitError
from aotplan.core.graph import Constant, Graph, Node, TensorInfo
from conftest import compile_and_load, tensor_index

R = np.random.default_rng(7)


def sample(name, shape):
    if name == "bool":
        return R.random(shape) < 0.5
    if name == "int64":
        return R.integers(-(2**31), 2**31 - 1, shape, dtype=np.int64)
    if name == "uint64":
        return R.integers(0, 2**32 - 1, shape, dtype=np.uint64)
    if name in ("int8", "uint8", "int16", "uint16", "int32", "uint32"):
        info = np.iinfo(dtypes.np_dtype(name))
        return R.integers(info.min, info.max, shape, endpoint=True).astype(name)
    return (R.standard_normal(shape) * 100).astype(np.float32).astype(dtypes.np_dtype(name))


@functools.lru_cache(maxsize=None)
def build(name):
    """x (3, 5) -> transpose -> concat with a constant; plus x itself as an output."""
    c = sample(name, (2, 3))
    g = Graph("dt", (TensorInfo("x", name, (3, 5)),), ("cat", "x"),
              (Node("t", "transpose", ("x",), ("xt",)),
               Node("cat", "concat", ("xt", "c"), ("cat",), (("axis", 0),))),
              (Constant("c", name, (2, 3), c),))
    return name, c, compile_and_load(g)


@pytest.fixture(scope="module", params=list(dtypes.DTYPES))
def dtype_plan(request):
    return build(request.param)


def test_dtype_roundtrip(dtype_plan):
    name, c, (plan, sess) = dtype_plan
    for seed in range(2):
        x = sample(name, (3, 5))
        out = sess.run({"x": x})
        assert out["x"].dtype == dtypes.np_dtype(name)
        np.testing.assert_array_equal(out["x"], x)
        np.testing.assert_array_equal(out["cat"], np.concatenate([x.T, c], axis=0))
    storage = dtypes.storage_dtype(name)
    t = plan.tensors[tensor_index(plan)["x"]]
    assert t.nbytes == 15 * dtypes.np_dtype(storage).itemsize  # bool: one byte; int64: four


def test_int64_feed_out_of_range_is_refused():
    _, _, (_, sess) = build("int64")
    x = np.zeros((3, 5), np.int64)
    x[1, 2] = 2**31
    with pytest.raises(LimitError, match=r"input 'x'.*2147483648.*int32 range"):
        sess.run({"x": x})
    with pytest.raises(FeedError, match=r"input 'x'.*2147483648.*int32 range"):  # a feed's error, as callers catch them
        sess.run({"x": x})
    out = sess.run({"x": np.full((3, 5), -(2**31), np.int32)})  # int32 feeds are accepted for int64
    assert out["x"].dtype == np.int64 and out["x"].min() == -(2**31)


def test_int64_constant_out_of_range_fails_at_compile():
    g = Graph("big", (TensorInfo("x", "int64", (2,)),), ("y",), (Node("a", "add", ("x", "c"), ("y",)),),
              (Constant("c", "int64", (2,), np.array([1, 2**40], np.int64)),))
    with pytest.raises(LimitError, match=r"constant 'c'.*1099511627776"):
        compile_and_load(g)


def test_bfloat16_and_bool_weights_survive_npz(tmp_path):
    w = np.linspace(-3, 3, 40).astype(ml_dtypes.bfloat16).reshape(5, 8)
    m = (np.arange(40) % 3 == 0).reshape(5, 8)
    g = Graph("w", (TensorInfo("x", "bfloat16", (5, 8)),), ("y", "m"),
              (Node("a", "add", ("x", "w"), ("y",)), Node("i", "identity", ("mask",), ("m",))),
              (Constant("w", "bfloat16", (5, 8), w), Constant("mask", "bool", (5, 8), m)))
    model_json.save(g, str(tmp_path / "model.json"))
    g2, _ = model_json.load(str(tmp_path / "model.json"))
    got = {c.name: c for c in g2.constants}
    assert got["w"].data.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got["w"].data.view(np.uint16), w.view(np.uint16))
    np.testing.assert_array_equal(got["mask"].data, m)
    _, sess = compile_and_load(g2)
    x = np.ones((5, 8), ml_dtypes.bfloat16)
    out = sess.run({"x": x})
    np.testing.assert_array_equal(out["y"], (x.astype(np.float32) + w.astype(np.float32)).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(out["m"], m)


def test_wrong_feed_dtype_names_input(dtype_plan):
    name, _, (_, sess) = dtype_plan
    wrong = np.zeros((3, 5), np.complex64)
    with pytest.raises(FeedError, match=rf"input 'x': expected {name}\[3, 5\], got complex64\[3, 5\]"):
        sess.run({"x": wrong})
