"""GatherElements, GatherND, ScatterElements (and the older Scatter), ScatterND, OneHot,
Hardmax and GridSample (torch.gather, torch.scatter, index_put, F.one_hot,
F.grid_sample export to them) against
onnxruntime: negative indices, indices narrower than data off the gathered axis,
every scatter reduction, batch_dims, one_hot's axis and out-of-range indices, Hardmax
before and from opset 13; in kernel and sink mode. ONNX's own node tests of these ops
run in tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core.errors import ModelError, ShapeError  # noqa: E402
import onnx_models as om  # noqa: E402

R = np.random.default_rng(2030)
N = helper.make_node


def _index_model():
    """data [4, 5, 6] (float32) and ids [4, 5, 6] (int64): every op, several forms."""
    nodes = [
        N("GatherElements", ["data", "ge_i"], ["ge"], axis=1),
        N("GatherElements", ["ids", "ge_j"], ["ge_int"], axis=-1),
        N("GatherND", ["data", "nd_i"], ["gnd"]),
        N("GatherND", ["data", "nd_b"], ["gnd_b"], batch_dims=1),
        N("ScatterND", ["data", "nd_i", "nd_u"], ["snd"]),
        N("ScatterND", ["data", "nd_dup", "nd_du"], ["snd_add"], reduction="add"),
        N("ScatterND", ["ids", "nd_dup", "nd_dui"], ["snd_max"], reduction="max"),
        N("OneHot", ["hot_i", "depth", "hot_v"], ["hot"]),
        N("OneHot", ["hot_i", "depth", "hot_v"], ["hot_ax"], axis=0),
        N("Hardmax", ["data"], ["hard"], axis=1),
    ]
    for r in ("none", "add", "mul", "max", "min"):
        nodes.append(N("ScatterElements", ["data", "se_i", "se_u"], [f"se_{r}"], axis=2, reduction=r))
    outs = [n.output[0] for n in nodes]
    ints = {"ge_int", "snd_max"}
    m = om.model(nodes, [om.vi("data", TP.FLOAT, [4, 5, 6]), om.vi("ids", TP.INT64, [4, 5, 6]),
                       om.vi("ge_i", TP.INT64, [4, 3, 6]), om.vi("hot_i", TP.INT64, [3, 4])],
               [om.vi(o, TP.INT64 if o in ints else TP.FLOAT) for o in outs], _index_consts(), opset=18)
    feeds = {"data": (R.integers(-20, 20, (4, 5, 6)) / 4).astype(np.float32),
             "ids": R.integers(-50, 50, (4, 5, 6)).astype(np.int64),
             "ge_i": R.integers(-5, 5, (4, 3, 6)).astype(np.int64),  # negative ones count from the end
             "hot_i": np.array([[0, 3, -1, -7], [6, 7, 100, 2], [-8, 5, 1, 0]], np.int64)}  # 7, 100, -8: off
    return m, feeds


def _index_consts():
    se_i = R.integers(-6, 6, (4, 5, 2)).astype(np.int64)
    return [
        ("ge_j", R.integers(0, 6, (2, 5, 3)).astype(np.int64)),  # narrower than ids on axes 0 and 2
        ("nd_i", np.array([[0, 1], [3, -1], [2, 4]], np.int64)), ("nd_u", R.standard_normal((3, 6)).astype(np.float32)),
        ("nd_b", np.array([[[1], [4]], [[0], [0]], [[2], [-1]], [[3], [3]]], np.int64)),
        ("nd_dup", np.array([[1, 2, 3], [1, 2, 3], [0, 0, -1]], np.int64)),  # a duplicate: reductions combine
        ("nd_du", R.standard_normal(3).astype(np.float32)), ("nd_dui", np.array([60, 70, -80], np.int64)),
        ("se_i", se_i), ("se_u", (R.integers(-8, 8, (4, 5, 2)) / 2).astype(np.float32)),
        ("depth", np.array(7, np.int64)), ("hot_v", np.array([-1.0, 2.5], np.float32)),
    ]


def test_index_ops_match_onnxruntime():
    m, feeds = _index_model()
    om.check(m, feeds, modes=("kernel", "sink"), rtol=1e-6, atol=0)


def test_scatter_9_and_hardmax_11_forms():
    """Scatter (opset 9-10, ScatterElements' old name) and Hardmax before 13, which
    flattens x to 2-D at axis: the 1 marks the first maximum of each flattened row."""
    x = (R.integers(-3, 3, (2, 3, 4)) / 2).astype(np.float32)  # ties: the first maximum wins
    idx = R.integers(0, 3, (2, 2, 4)).astype(np.int64)
    m = om.model([N("Hardmax", ["x"], ["h"], axis=1), N("Scatter", ["x", "i", "u"], ["s"], axis=1)],
               [om.vi("x", TP.FLOAT, [2, 3, 4]), om.vi("i", TP.INT64, [2, 2, 4]), om.vi("u", TP.FLOAT, [2, 2, 4])],
               [om.vi("h", TP.FLOAT), om.vi("s", TP.FLOAT)], opset=10)
    om.check(m, {"x": x, "i": idx, "u": np.ones((2, 2, 4), np.float32)}, modes=("sink",), rtol=0, atol=0)


def test_one_hot_in_model_json_takes_depth_as_an_attribute():
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
    from conftest import compile_and_load

    g = Graph("t", (TensorInfo("i", "int32", (3,)),), ("y",),
              (Node("n", "one_hot", ("i", "v"), ("y",), freeze({"depth": 4, "axis": 0})),),
              (Constant("v", "int32", (2,), np.array([0, 9], np.int32)),))
    _, sess = compile_and_load(g)
    got = sess.run({"i": np.array([1, -1, 4], np.int32)})["y"]
    np.testing.assert_array_equal(got, np.array([[0, 0, 0], [9, 0, 0], [0, 0, 0], [0, 9, 0]], np.int32))


def _bad(op, inputs, inits=(), shape=(3, 4), **attrs):
    return om.model([N(op, ["x"] + inputs, ["y"], name="bad", **attrs)], [om.vi("x", TP.FLOAT, list(shape))],
                  [om.vi("y", TP.UNDEFINED)], inits, opset=18)


I = lambda *s: R.integers(0, 2, s).astype(np.int64)  # noqa: E731
F = lambda *s: np.zeros(s, np.float32)  # noqa: E731


@pytest.mark.parametrize("model, match", [
    (_bad("GatherElements", ["i"], [("i", I(3))]), r"'bad' \(gather_elements\): indices 'i' int64\[3\] must have "
                                                    r"the rank of data"),
    (_bad("GatherElements", ["i"], [("i", I(3, 5))]), r"'bad' \(gather_elements\).*exceed data .* on axis 1"),
    (_bad("GatherElements", ["i"], [("i", F(3, 4))]), r"'bad' \(gather_elements\).*must be int32 or int64"),
    (_bad("ScatterElements", ["i", "u"], [("i", I(3, 2)), ("u", F(3, 3))]),
     r"'bad' \(scatter_elements\): updates 'u' float32\[3, 3\] must have the shape of indices"),
    (_bad("ScatterElements", ["i", "u"], [("i", I(3, 2)), ("u", F(3, 2))], reduction="sum"),
     r"'bad' \(scatter_elements\).*'reduction' must be one of none, add, mul, max, min"),
    (_bad("GatherND", ["i"], [("i", I(2, 3))]), r"'bad' \(gather_nd\): the last dimension of indices .* must be "
                                                r"in \[1, 2\]"),
    (_bad("GatherND", ["i"], [("i", I(2, 1))], batch_dims=2), r"'bad' \(gather_nd\): batch_dims 2 must be in"),
    (_bad("ScatterND", ["i", "u"], [("i", I(2, 1)), ("u", F(2, 5))]),
     r"'bad' \(scatter_nd\): updates 'u' float32\[2, 5\] must have shape \[2, 4\]"),
    (_bad("OneHot", ["d", "v"], [("d", np.array(0, np.int64)), ("v", F(2))]),
     r"'bad' \(one_hot\): depth must be one integer >= 1, got 0"),
    (_bad("OneHot", ["d", "v"], [("d", np.array(3, np.int64)), ("v", F(3))]),
     r"'bad' \(one_hot\): values 'v' float32\[3\] must hold two elements"),
    (_bad("OneHot", ["d"], [("d", np.array(3, np.int64))]), r"'bad' \(OneHot, opset 11\): takes 3 inputs"),
    (_bad("Hardmax", [], axis=2), r"'bad' \(hardmax\): axis 2 is out of range for rank 2"),
])
def test_refused_forms_name_the_node(model, match):
    with pytest.raises((ModelError, ShapeError), match=match):
        om.prepare(model)


@pytest.mark.parametrize("opset", [pytest.param(16, marks=pytest.mark.slow), 20])  # (16: the same modes, older names)
def test_grid_sample_matches_onnxruntime(opset):
    """GridSample (F.grid_sample): every mode, padding mode and align_corners, with grid
    points well outside [-1, 1] (reflected several times) and exactly on pixel centres;
    opset 16 spells the modes bilinear and bicubic."""
    modes = ("bilinear", "nearest", "bicubic") if opset < 20 else ("linear", "nearest", "cubic")
    nodes, outs = [], []
    for mode in modes:
        for pad in ("zeros", "border", "reflection"):
            for align in (0, 1):
                outs.append(f"{mode}_{pad}_{align}")
                nodes.append(N("GridSample", ["x", "g"], [outs[-1]], mode=mode, padding_mode=pad, align_corners=align))
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [2, 3, 5, 7]), om.vi("g", TP.FLOAT, [2, 4, 6, 2])],
               [om.vi(o, TP.FLOAT) for o in outs], opset=opset)
    g = R.uniform(-2.6, 2.6, (2, 4, 6, 2)).astype(np.float32)
    g[0, 0, :, 0] = (2 * np.arange(6) + 1) / 7 - 1  # pixel centres (align_corners=0)
    om.check(m, {"x": R.standard_normal((2, 3, 5, 7)).astype(np.float32), "g": g}, modes=("sink",), rtol=1e-5,
           atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1])
def test_index_ops_on_empty_tensors(axis):
    """Hardmax over a zero-length axis has no maximum to mark, gather_nd and scatter_nd
    with no index rows into an empty axis read and write nothing: empty results, both
    folded from constants and at run time (the model fuzzer found argmax and jax's
    indexing raising here)."""
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
    from conftest import compile_and_load

    g = Graph("t", (TensorInfo("x", "float32", (0, 3)),), ("y", "z", "w", "g", "s", "gc"),
              (Node("h", "hardmax", ("x",), ("y",), freeze({"axis": axis})),
               Node("c", "hardmax", ("e",), ("z",), freeze({"axis": axis})),
               Node("s", "add", ("one", "one"), ("w",)),
               Node("gn", "gather_nd", ("x", "i"), ("g",)),
               Node("sn", "scatter_nd", ("x", "i", "u"), ("s",)),
               Node("gnc", "gather_nd", ("e", "i2"), ("gc",))),
              (Constant("e", "int64", (3, 0), np.zeros((3, 0), np.int64)),
               Constant("one", "float32", (2,), np.ones(2, np.float32)),
               Constant("i", "int64", (0, 1), np.zeros((0, 1), np.int64)),
               Constant("i2", "int64", (0, 2), np.zeros((0, 2), np.int64)),
               Constant("u", "float32", (0, 3), np.zeros((0, 3), np.float32))))
    _, sess = compile_and_load(g)
    out = sess.run({"x": np.zeros((0, 3), np.float32)})
    assert out["y"].shape == (0, 3) and out["z"].shape == (3, 0) and out["z"].dtype == np.int64
    assert out["g"].shape == (0, 3) and out["s"].shape == (0, 3) and out["gc"].shape == (0,)
    np.testing.assert_array_equal(out["w"], [2, 2])


def test_gather_nd_into_an_empty_axis_is_refused():
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo
    from compiler import pipeline

    g = Graph("t", (TensorInfo("x", "float32", (0, 3)),), ("g",), (Node("gn", "gather_nd", ("x", "i"), ("g",)),),
              (Constant("i", "int64", (2, 1), np.zeros((2, 1), np.int64)),))
    with pytest.raises(ShapeError, match=r"'gn' \(gather_nd\): cannot index the empty axis 0 of 'x' float32\[0, 3\]"):
        pipeline.prepare(g)
