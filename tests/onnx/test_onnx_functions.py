"""Operators imported as functions: an operator we have no converter for but ONNX defines
by a function body (AffineGrid, CenterCropPad, the window functions, SoftmaxCrossEntropyLoss,
DynamicQuantizeLinear, LinearAttention, ...; built from the input types where the body
depends on them, onnxruntime's own fallback) is replaced by that body; a model-local
function (torch's dynamo exporter writes them) is inlined the same way. Against
onnxruntime; ONNX's node tests of these operators run in tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core.errors import ModelError  # noqa: E402
import onnx_models as om  # noqa: E402

R = np.random.default_rng(2033)
N = helper.make_node


def test_schema_functions_match_onnxruntime():
    """AffineGrid (a function), CenterCropPad (context-dependent: its body depends on the
    input type), HannWindow (attribute defaults from the schema) and
    SoftmaxCrossEntropyLoss (a context-dependent function whose body holds another:
    NegativeLogLikelihoodLoss, typed by inference on the body) in one graph."""
    nodes = [N("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
             N("CenterCropPad", ["x", "crop"], ["cc"], axes=[1, 2]),
             N("HannWindow", ["wlen"], ["win"]),
             N("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], reduction="mean"),
             N("Relu", ["grid"], ["grid_relu"])]
    m = om.model(nodes, [om.vi("theta", TP.FLOAT, [2, 2, 3]), om.vi("x", TP.FLOAT, [2, 5, 4]),
                       om.vi("scores", TP.FLOAT, [3, 5]), om.vi("labels", TP.INT64, [3])],
               [om.vi("grid_relu", TP.FLOAT), om.vi("cc", TP.FLOAT), om.vi("win", TP.FLOAT), om.vi("loss", TP.FLOAT)],
               [("size", np.array([2, 1, 3, 4], np.int64)), ("crop", np.array([3, 6], np.int64)),
                ("wlen", np.array(8, np.int64))], opset=20)
    feeds = {"theta": R.standard_normal((2, 2, 3)).astype(np.float32), "x": R.standard_normal((2, 5, 4)).astype(
        np.float32), "scores": R.standard_normal((3, 5)).astype(np.float32),
        "labels": np.array([0, 4, 2], np.int64)}
    om.check(m, feeds, modes=("sink", "kernel"), rtol=1e-5, atol=1e-6)


def _local_function_model():
    """z = MyGelu(Twice(x)): MyGelu a model-local function (domain 'custom') whose
    constant is its attribute `alpha` by reference; Twice a local function calling it."""
    k = N("Constant", [], ["k"])
    k.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    k.attribute[0].ref_attr_name = "alpha"
    gelu = helper.make_function(
        "custom", "MyGelu", ["a"], ["b"],
        [k, N("Mul", ["a", "k"], ["ak"]), N("Sigmoid", ["ak"], ["s"]), N("Mul", ["a", "s"], ["b"])],
        [helper.make_opsetid("", 17)], attributes=["alpha"])
    twice = helper.make_function("custom", "Twice", ["p"], ["q"],
                                 [N("MyGelu", ["p"], ["r"], domain="custom", alpha=1.702), N("Add", ["r", "r"], ["q"])],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])
    g = helper.make_graph([N("Twice", ["x"], ["y"], domain="custom"),
                           N("MyGelu", ["y"], ["z"], domain="custom", alpha=0.5)],
                          "m", [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("z", TP.FLOAT)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                          functions=[gelu, twice])
    m.ir_version = 8
    return m


def test_model_local_functions_are_inlined():
    m = _local_function_model()
    om.check(m, {"x": R.standard_normal((2, 3)).astype(np.float32)}, modes=("sink",), rtol=1e-6, atol=1e-6)


def test_an_operator_without_a_function_is_still_refused():
    m = om.model([N("Col2Im", ["x", "isz", "bsz"], ["y"])], [om.vi("x", TP.FLOAT, [1, 4, 4])], [om.vi("y", TP.FLOAT)],
               [("isz", np.array([3, 3], np.int64)), ("bsz", np.array([2, 2], np.int64))], opset=18)
    with pytest.raises(ModelError, match=r"node 'Col2Im_0': ONNX operator 'Col2Im' is not supported"):
        om.prepare(m)
    g = helper.make_graph([N("Nope", ["x"], ["y"], domain="other")], "m", [om.vi("x", TP.FLOAT, [2])],
                          [om.vi("y", TP.FLOAT)])
    other = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("other", 1)])
    with pytest.raises(ModelError, match=r"model uses operator domain 'other', which is not supported"):
        om.prepare(other)
