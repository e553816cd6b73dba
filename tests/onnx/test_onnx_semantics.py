"""ONNX import semantics that ONNX's node tests (tests/onnx/test_onnx_node.py) do not reach:
opset-dependent defaults and attributes of old opsets, omitted optional inputs written
as "", graph-level quirks. Each model is imported, compiled, replayed and compared with
onnxruntime where it implements the case, else with numpy (onnxruntime has no kernels
for several opset-1 schemas)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper, numpy_helper  # noqa: E402

from aotplan.core.errors import ModelError  # noqa: E402
import onnx_models as om  # noqa: E402

R = np.random.default_rng(11)


def test_concat_before_opset_4_defaults_to_axis_1():
    # Concat-1 (opsets 1-3): 'axis' is optional, default 1. Equal shapes: axis 0 would also fit
    a, b = R.standard_normal((2, 3)).astype(np.float32), R.standard_normal((2, 3)).astype(np.float32)
    m = om.model([helper.make_node("Concat", ["a", "b"], ["y"])], [om.vi("a", TP.FLOAT, [2, 3]), om.vi("b", TP.FLOAT, [2, 3])],
               [om.vi("y", TP.FLOAT)], opset=3)
    y = om.run_aotplan(m, {"a": a, "b": b})["y"]
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=1))


def test_trailing_empty_optional_inputs_are_absent():
    """Conv(x, W, ""), Gemm(A, B, ""), LayerNormalization(X, scale, ""): "" is an omitted
    optional input. onnxruntime runs the same model with those entries left out (it
    crashes on LayerNormalization's "")."""
    x = R.standard_normal((1, 2, 5, 5)).astype(np.float32)
    inits = [("w", R.standard_normal((3, 2, 3, 3)).astype(np.float32)),
             ("gw", R.standard_normal((4, 27)).astype(np.float32)), ("s", R.random(4).astype(np.float32) + 0.5)]

    def build(tail):
        return om.model([helper.make_node("Conv", ["x", "w"] + tail, ["c"]),
                       helper.make_node("Flatten", ["c"], ["f"]),
                       helper.make_node("Gemm", ["f", "gw"] + tail, ["g"], transB=1),
                       helper.make_node("LayerNormalization", ["g", "s"] + tail, ["y"])],
                      [om.vi("x", TP.FLOAT, [1, 2, 5, 5])], [om.vi("y", TP.FLOAT)], inits)

    got = om.run_aotplan(build([""]), {"x": x})["y"]
    np.testing.assert_allclose(got, om.run_ort(build([]), {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_legacy_broadcast_attribute_of_equal_and_pow():
    # Equal-1 and Pow-1 (opsets 1-6) take broadcast=1 like Add-1: B broadcasts as a suffix of A
    a = np.array([[1, 2, 3], [3, 2, 1]], np.float32)
    b = np.array([1, 2, 1], np.float32)
    m = om.model([helper.make_node("Equal", ["a", "b"], ["eq"], broadcast=1),
                helper.make_node("Pow", ["a", "b"], ["p"], broadcast=1)],
               [om.vi("a", TP.FLOAT, [2, 3]), om.vi("b", TP.FLOAT, [3])], [om.vi("eq", TP.BOOL), om.vi("p", TP.FLOAT)], opset=6)
    out = om.run_aotplan(m, {"a": a, "b": b})
    np.testing.assert_array_equal(out["eq"], a == b)
    np.testing.assert_allclose(out["p"], a ** b)


def test_cast_1_names_its_type_as_a_string():
    # Cast-1 (opsets 1-5): 'to' is a string ("INT32"), not a TensorProto enum value
    x = np.array([1.5, -2.5, 3.0], np.float32)
    m = om.model([helper.make_node("Cast", ["x"], ["y"], to="INT32")], [om.vi("x", TP.FLOAT, [3])], [om.vi("y", TP.INT32)], opset=5)
    y = om.run_aotplan(m, {"x": x})["y"]
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [1, -2, 3])
    from compiler.frontends import onnx_import

    bad = om.model([helper.make_node("Cast", ["x"], ["y"], to="INT33")], [om.vi("x", TP.FLOAT, [3])], [om.vi("y", TP.INT32)], opset=5)
    with pytest.raises(ModelError, match=r"Cast_0.*'INT33' is not an ONNX data type name"):
        onnx_import.convert(bad)


def test_output_listed_twice_is_one_output():
    # valid ONNX (the checker and onnxruntime accept it); results are keyed by name
    x = R.standard_normal((2, 3)).astype(np.float32)
    m = om.model([helper.make_node("Relu", ["x"], ["y"])], [om.vi("x", TP.FLOAT, [2, 3])],
               [om.vi("y", TP.FLOAT, [2, 3]), om.vi("y", TP.FLOAT, [2, 3])])
    onnx.checker.check_model(m)
    got = om.run_aotplan(m, {"x": x})
    assert list(got) == ["y"]
    np.testing.assert_array_equal(got["y"], om.run_ort(m, {"x": x})["y"])


def test_dropout_mask_before_opset_10_is_refused():
    """Dropout-7's mask has the input's type (bool only from opset 10) and no defined
    inference value (onnxruntime: zeros); it must not silently become a bool mask."""
    from compiler.frontends import onnx_import

    m = om.model([helper.make_node("Dropout", ["x"], ["y", "mask"])], [om.vi("x", TP.FLOAT, [2, 3])],
               [om.vi("y", TP.FLOAT), om.vi("mask", TP.UNDEFINED)], opset=7)
    with pytest.raises(ModelError, match=r"Dropout_0.*opset 7.*'mask'"):
        onnx_import.convert(m)
    # unused, it is fine: the output is the identity
    m = om.model([helper.make_node("Dropout", ["x"], ["y", "mask"])], [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("y", TP.FLOAT)],
               opset=7)
    assert [n.op for n in onnx_import.convert(m).nodes] == ["identity"]


def test_abs_and_gelu_map_to_the_library_ops():
    # both ops are in the op library (abs, gelu); the importer refused them
    x = np.concatenate([R.standard_normal(9).astype(np.float32) * 3, np.array([np.inf, -np.inf, 0.0], np.float32)])
    m = om.model([helper.make_node("Abs", ["x"], ["a"]),
                helper.make_node("Gelu", ["x"], ["g"]),
                helper.make_node("Gelu", ["x"], ["t"], approximate="tanh")],
               [om.vi("x", TP.FLOAT, [12])], [om.vi(n, TP.FLOAT) for n in "agt"], opset=20)
    got, want = om.run_aotplan(m, {"x": x}), om.run_ort(m, {"x": x})
    for k in "agt":
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_sparse_initializers_and_sparse_constants_are_densified():
    """graph.sparse_initializer and Constant(sparse_value) are valid ONNX that onnxruntime
    reads as dense tensors; they were not found ("input 'w' is not a graph input ...")."""
    from compiler.frontends import onnx_import

    vals = numpy_helper.from_array(np.array([1.5, -2.0, 3.0], np.float32), "w")
    linear = helper.make_sparse_tensor(vals, numpy_helper.from_array(np.array([1, 4, 5], np.int64), ""), [2, 3])
    coords = helper.make_sparse_tensor(numpy_helper.from_array(np.array([7.0, 8.0], np.float32), "v"),
                                       numpy_helper.from_array(np.array([[0, 2], [1, 0]], np.int64), ""), [2, 3])
    nodes = [helper.make_node("Constant", [], ["v"], sparse_value=coords), helper.make_node("Add", ["x", "w"], ["s"]),
             helper.make_node("Add", ["s", "v"], ["y"])]
    g = helper.make_graph(nodes, "m", [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("y", TP.FLOAT, [2, 3])], sparse_initializer=[linear])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = R.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(om.run_aotplan(m, {"x": x})["y"], om.run_ort(m, {"x": x})["y"])
    bad = helper.make_sparse_tensor(vals, numpy_helper.from_array(np.array([1, 4, 6], np.int64), ""), [2, 3])
    del m.graph.sparse_initializer[:]
    m.graph.sparse_initializer.append(bad)
    with pytest.raises(ModelError, match=r"sparse initializer 'w'.*out of range"):
        onnx_import.convert(m)


def test_model_name_is_the_file_stem_not_the_last_node(tmp_path):
    # convert() once reused its `name` argument as the node loop's variable: a model
    # loaded from tiny.onnx was named after its last node ("Softmax_1")
    from compiler.frontends import onnx_import

    m = om.model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"])],
               [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("y", TP.FLOAT)])
    m.graph.name = "g"
    path = tmp_path / "tiny.onnx"
    onnx.save(m, str(path))
    assert onnx_import.load(str(path))[0].name == "tiny"
    assert onnx_import.convert(m).name == "g"


@pytest.mark.parametrize("step", [2**63 - 1, -(2**63), 2**31, 7])
def test_slice_steps_longer_than_the_axis(step):
    """A step of INT64_MAX (exporters write it) takes one element, as onnxruntime does,
    in every launch mode: it overflowed in XLA and a sink plan returned float32[0] where
    it declared [1]."""
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    start, end = (0, 5) if step > 0 else (4, -6)
    inits = [("s", np.array([start], np.int64)), ("e", np.array([end], np.int64)), ("a", np.array([1], np.int64)),
             ("t", np.array([step], np.int64))]
    m = om.model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], [om.vi("x", TP.FLOAT, [2, 5])],
                 [om.vi("y", TP.FLOAT, None)], inits)
    om.check(m, {"x": x}, modes=("kernel", "fused", "sink"))
