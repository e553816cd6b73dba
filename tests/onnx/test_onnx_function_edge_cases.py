"""Operators expanded from functions, and local functions (onnx_import/functions.py:
function_of, expand, _learn_types), and the norm reductions with noop_with_empty_axes: edge cases,
each against onnxruntime: an output the call
leaves out but the body reads, an attribute reference inside a branch, overloads, the
input types of a context-dependent function inside a Loop body, an If branch or a
nested local function, and |x|, x², log x still applied when no axis is reduced."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402
import onnx_models as om  # noqa: E402


N = helper.make_node
R = np.random.default_rng(51)
OPS = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
X = R.standard_normal((3, 5)).astype(np.float32)


def _local(nodes, inputs, outputs, funcs, ir=8):
    m = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs), opset_imports=OPS, functions=funcs)
    m.ir_version = ir
    return m


def test_function_output_omitted_by_call_but_read_in_body():
    # F(X) -> (A, B), B = Neg(A); the call omits A (""): the body still needs A.
    # got: ModelError "node 'F_0:fn:Neg_1' (neg): takes 1 inputs, got 0" (A bound to "")
    fn = helper.make_function("local", "F", ["X"], ["A", "B"], [N("Relu", ["X"], ["A"]), N("Neg", ["A"], ["B"])],
                              [helper.make_opsetid("", 18)])
    m = _local([N("F", ["x"], ["", "y"], domain="local")], [om.vi("x", TP.FLOAT, [3, 5])], [om.vi("y", TP.FLOAT)], [fn])
    om.check(m, {"x": X}, modes=("sink",))


def test_function_attribute_reference_inside_if_branch():
    # a ref_attr_name inside a subgraph of the function body is not substituted:
    # got: ValueError "Cannot get value of reference attribute" (onnx.helper, from context.Ctx)
    lr = N("LeakyRelu", ["X"], ["t"])
    a = onnx.AttributeProto(name="alpha", ref_attr_name="a", type=onnx.AttributeProto.FLOAT)
    lr.attribute.append(a)
    then = helper.make_graph([lr], "then", [], [om.vi("t", TP.FLOAT)])
    els = helper.make_graph([N("Neg", ["X"], ["e"])], "else", [], [om.vi("e", TP.FLOAT)])
    fn = helper.make_function("local", "F", ["C", "X"], ["Y"], [N("If", ["C"], ["Y"], then_branch=then, else_branch=els)],
                              [helper.make_opsetid("", 18)], attributes=["a"])
    m = _local([N("F", ["c", "x"], ["y"], domain="local", a=0.25)], [om.vi("c", TP.BOOL, []), om.vi("x", TP.FLOAT, [3, 5])],
               [om.vi("y", TP.FLOAT)], [fn])
    om.check(m, {"x": X, "c": np.array(True)}, modes=("sink",))


def test_function_overloads_are_told_apart():
    # IR 10 overloads: two local functions local.F, overloads "a" (Abs) and "b" (Neg).
    # onnxruntime gives y = |x|, z = -x; we key functions by (domain, name): both are Neg
    f1 = helper.make_function("local", "F", ["X"], ["Y"], [N("Abs", ["X"], ["Y"])], [helper.make_opsetid("", 18)],
                              overload="a")
    f2 = helper.make_function("local", "F", ["X"], ["Y"], [N("Neg", ["X"], ["Y"])], [helper.make_opsetid("", 18)],
                              overload="b")
    n1, n2 = N("F", ["x"], ["y"], domain="local"), N("F", ["x"], ["z"], domain="local")
    n1.overload, n2.overload = "a", "b"
    m = _local([n1, n2], [om.vi("x", TP.FLOAT, [3, 5])], [om.vi("y", TP.FLOAT), om.vi("z", TP.FLOAT)], [f1, f2], ir=10)
    om.check(m, {"x": X}, modes=("sink",))


def test_context_dependent_op_in_loop_body():
    # out.types() is keyed by the body's own names, the node's inputs are renamed
    # 'Loop_0:body:acc': got ModelError "ONNX operator 'CenterCropPad' is not supported"
    body = helper.make_graph(
        [N("Identity", ["cond"], ["co"]), N("CenterCropPad", ["acc", "s"], ["cp"]), N("Add", ["cp", "cp"], ["acc2"])],
        "body", [om.vi("i", TP.INT64, []), om.vi("cond", TP.BOOL, []), om.vi("acc", TP.FLOAT, [3, 5])],
        [om.vi("co", TP.BOOL, []), om.vi("acc2", TP.FLOAT, [3, 5])])
    m = om.model([N("Loop", ["m", "", "x"], ["y"], body=body)], [om.vi("x", TP.FLOAT, [3, 5])], [om.vi("y", TP.FLOAT)],
               [("m", np.array(2, np.int64)), ("s", np.array([3, 5], np.int64))], opset=18)
    om.check(m, {"x": X}, modes=("sink",))


def test_context_dependent_op_reading_if_branch_value():
    # same cause: 'r' is renamed 'If_0:then:r'; got "'NegativeLogLikelihoodLoss' is not supported"
    then = helper.make_graph([N("Relu", ["x"], ["r"]), N("NegativeLogLikelihoodLoss", ["r", "t"], ["o"])], "then", [],
                             [om.vi("o", TP.FLOAT)])
    els = helper.make_graph([N("ReduceSum", ["x"], ["o2"], keepdims=0)], "else", [], [om.vi("o2", TP.FLOAT)])
    m = om.model([N("If", ["c"], ["y"], then_branch=then, else_branch=els)],
               [om.vi("c", TP.BOOL, []), om.vi("x", TP.FLOAT, [3, 5]), om.vi("t", TP.INT64, [3])], [om.vi("y", TP.FLOAT)],
               opset=18)
    om.check(m, {"x": X, "c": np.array(True), "t": np.array([1, 0, 4], np.int64)}, modes=("sink",))


def test_context_dependent_op_after_nested_local_function():
    # _learn_types infers the body alone, without model.functions: G's outputs have no
    # type, nor Neg's output v (G's own expansion types u later, v never): the NLL
    # reading v is "not supported"
    g = helper.make_function("local", "G", ["X"], ["Y"], [N("Exp", ["X"], ["Y"])], [helper.make_opsetid("", 18)])
    f = helper.make_function("local", "F", ["X", "T"], ["Y"],
                             [N("G", ["X"], ["u"], domain="local"), N("Neg", ["u"], ["v"]),
                              N("NegativeLogLikelihoodLoss", ["v", "T"], ["Y"])],
                             OPS)
    m = _local([N("F", ["x", "t"], ["y"], domain="local")], [om.vi("x", TP.FLOAT, [3, 5]), om.vi("t", TP.INT64, [3])],
               [om.vi("y", TP.FLOAT)], [f, g])
    om.check(m, {"x": X, "t": np.array([1, 0, 4], np.int64)}, modes=("sink",))


@pytest.mark.parametrize("op", ["ReduceLogSum", "ReduceSumSquare", "ReduceL1", "ReduceL2"])
def test_composite_reduction_noop_with_empty_axes(op):
    # ONNX: with no axes and noop_with_empty_axes=1 "composite-reduction operators still
    # perform the non-reduction steps" (ReduceLogSum -> log(x), ReduceSumSquare -> x*x);
    # onnxruntime and onnx.reference do; math_ops._norm returns x unchanged
    x = ((R.random((3, 4)) + 0.5) * np.array([1, -1, 1, -1])).astype(np.float32)  # (LogSum: NaN where < 0)
    m = om.model([N(op, ["x"], ["y"], noop_with_empty_axes=1)], [om.vi("x", TP.FLOAT, [3, 4])], [om.vi("y", TP.FLOAT)],
               opset=18)
    om.check(m, {"x": x}, modes=("sink",))
