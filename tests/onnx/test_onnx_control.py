"""ONNX If against onnxruntime: both branches inlined and selected on the device where
the condition is known only at run time; folded to one branch where it is a constant,
folded from shapes or a frozen input (then the branches may give different shapes);
nested Ifs, branch-local names that repeat across branches, branch initializers and
outer values as branch outputs; and the errors. ONNX's own `test_if` node test runs in
tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper, numpy_helper  # noqa: E402

from aotplan.core.errors import ModelError, ShapeError  # noqa: E402
import onnx_models as om  # noqa: E402

R = np.random.default_rng(2031)
N = helper.make_node


def _branch(name, nodes, outputs, inits=()):
    return helper.make_graph(nodes, name, [], outputs, [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])


def _run_time_if_model():
    """cond = sum(x) > 0, known only at run time. The then branch reads x and w (outer)
    and a branch initializer, with a nested If on a second run-time condition; the else
    branch reuses the then branch's local names ('y', 'z') and returns the outer x
    (through an Identity: onnxruntime refuses an outer value as a branch output) as its
    second output."""
    inner_then = _branch("it", [N("Sigmoid", ["y"], ["z"])], [om.vi("z", TP.FLOAT, [2, 3])])
    inner_else = _branch("ie", [N("Neg", ["y"], ["z"])], [om.vi("z", TP.FLOAT, [2, 3])])
    then = _branch("then", [
        N("Mul", ["x", "w"], ["y"]), N("Add", ["y", "b"], ["y2"]),
        N("If", ["c2"], ["z"], then_branch=inner_then, else_branch=inner_else),
    ], [om.vi("y2", TP.FLOAT, [2, 3]), om.vi("z", TP.FLOAT, [2, 3])], [("b", np.full((3,), 0.5, np.float32))])
    other = _branch("else", [
        N("Constant", [], ["k"], value=numpy_helper.from_array(np.full((2, 3), 7, np.float32))),
        N("Sub", ["x", "k"], ["y"]), N("Abs", ["y"], ["z"]), N("Identity", ["x"], ["xo"]),
    ], [om.vi("z", TP.FLOAT, [2, 3]), om.vi("xo", TP.FLOAT, [2, 3])])
    nodes = [N("ReduceSum", ["x"], ["s"], keepdims=0), N("Greater", ["s", "zero"], ["c"]),
             N("ReduceMax", ["x"], ["mx"], keepdims=0), N("Less", ["mx", "one"], ["c2"]),
             N("If", ["c"], ["a", "b_out"], then_branch=then, else_branch=other),
             N("Add", ["a", "b_out"], ["sum"])]
    return om.model(nodes, [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("a", TP.FLOAT), om.vi("b_out", TP.FLOAT),
                                                          om.vi("sum", TP.FLOAT)],
                  [("zero", np.float32(0)), ("one", np.float32(1)),
                   ("w", R.standard_normal((2, 3)).astype(np.float32))], opset=17)


@pytest.mark.parametrize("x", [np.full((2, 3), 0.25, np.float32), np.full((2, 3), 2.0, np.float32),
                               -np.ones((2, 3), np.float32)], ids=["then-then", "then-else", "else"])
def test_run_time_condition_matches_onnxruntime(x):
    m = _run_time_if_model()
    om.check(m, {"x": x}, modes=("kernel", "fused", "sink"), rtol=1e-6, atol=1e-6)


def test_run_time_condition_keeps_both_branches():
    from compiler.frontends import onnx_import

    g = onnx_import.convert(_run_time_if_model(), name="m")
    ifs = [n for n in g.nodes if n.op == "if"]
    assert [n.name for n in ifs] == ["If_4:then:If_2", "If_4"]  # the nested one first: it feeds the outer
    names = {o for n in g.nodes for o in n.outputs}
    assert {"If_4:then:y", "If_4:else:y", "If_4:then:z", "If_4:else:z"} <= names  # renamed per branch
    assert ifs[1].inputs == ("c", "If_4:then:y2", "If_4:then:z", "If_4:else:z", "If_4:else:xo")
    _, order, _ = om.prepare(_run_time_if_model())
    assert sum(n.op == "if" for n in order) == 2  # not folded: the conditions are inputs' functions


def test_outer_value_as_a_branch_output():
    """ONNX lets a branch return an outer value itself (onnxruntime asks for an Identity
    between): against numpy, the condition at run time."""
    then = _branch("then", [], [om.vi("x", TP.FLOAT, [2])])
    other = _branch("else", [], [om.vi("w", TP.FLOAT, [2])])
    m = om.model([N("If", ["c"], ["out"], then_branch=then, else_branch=other)],
               [om.vi("x", TP.FLOAT, [2]), om.vi("c", TP.BOOL, [1])], [om.vi("out", TP.FLOAT)],
               [("w", np.array([5, 6], np.float32))])
    x = np.array([1, 2], np.float32)
    for c in (True, False):
        om.check(m, {"x": x, "c": np.array([c])}, modes=("sink",), rtol=0, atol=0,
               want={"out": x if c else np.array([5, 6], np.float32)})


def _shape_decided_model(freeze=False):
    """An If whose branches give different shapes: cond = (size(x) == 6), a constant once
    shapes are known (folded), or a graph input `c` that the user freezes."""
    then = _branch("then", [N("Reshape", ["x", "s"], ["r"]), N("Relu", ["r"], ["y"])],
                   [om.vi("y", TP.FLOAT, [3, 2])], [("s", np.array([3, 2], np.int64))])
    other = _branch("else", [N("ReduceSum", ["x"], ["y"], keepdims=1)], [om.vi("y", TP.FLOAT, [1, 1])])
    nodes = [N("If", ["c"], ["y"], then_branch=then, else_branch=other), N("Sigmoid", ["y"], ["out"])]
    inputs = [om.vi("x", TP.FLOAT, [2, 3])]
    if freeze:
        inputs.append(om.vi("c", TP.BOOL, []))
    else:
        nodes[:0] = [N("Size", ["x"], ["n"]), N("Equal", ["n", "six"], ["c"])]
    return om.model(nodes, inputs, [om.vi("out", TP.FLOAT)], [] if freeze else [("six", np.int64(6))], opset=17)


def test_condition_folded_from_shapes_picks_one_branch():
    x = R.standard_normal((2, 3)).astype(np.float32)
    m = _shape_decided_model()
    plan, sess = om.check(m, {"x": x}, modes=("kernel", "sink"), rtol=1e-6, atol=1e-7)
    assert sess.run({"x": x})["out"].shape == (3, 2)
    _, order, _ = om.prepare(m)
    assert [n.op for n in order] == ["reshape", "relu", "sigmoid"]  # the if and the else branch are gone


def test_dead_branch_need_not_fit_the_shapes():
    """`if x.shape[0] == 1: x.squeeze(0) else: ...` compiled for batch 2: the dead branch
    cannot even be shaped (it once stopped the compile); with folding off too.
    A node outside every dead branch is still checked, even one nobody reads."""
    then = _branch("then", [N("Squeeze", ["x", "ax"], ["y"])], [om.vi("y", TP.FLOAT)], [("ax", np.array([0], np.int64))])
    other = _branch("else", [N("ReduceSum", ["x", "ax0"], ["y"], keepdims=0)], [om.vi("y", TP.FLOAT)])
    nodes = [N("Shape", ["x"], ["s"]), N("Gather", ["s", "zero"], ["n"], axis=0), N("Equal", ["n", "one"], ["c"]),
             N("If", ["c"], ["y"], then_branch=then, else_branch=other), N("Relu", ["y"], ["out"])]
    inits = [("zero", np.int64(0)), ("one", np.int64(1)), ("ax0", np.array([0], np.int64))]
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("out", TP.FLOAT)], inits, opset=17)
    x = R.standard_normal((2, 3)).astype(np.float32)
    want = {"out": np.maximum(x.sum(0), 0)}
    for disabled in (frozenset(), frozenset({"fold"})):
        om.check(m, {"x": x}, modes=("sink",), rtol=1e-6, atol=1e-6, want=want, disabled=disabled)
    m.graph.node.append(N("Squeeze", ["x", "ax"], ["unread"], name="dangling"))
    m.graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "ax"))
    with pytest.raises(ShapeError, match=r"node 'dangling' \(squeeze\): cannot squeeze axes \[0\]"):
        om.prepare(m)


def test_condition_folded_from_shapes_with_folding_disabled():
    """`--disable-pass fold` still evaluates what shapes need: an `if`'s condition is
    one of those (it was once left to run time, and the error said to freeze an
    input the model does not have); so is a branch result that feeds a static input."""
    x = R.standard_normal((2, 3)).astype(np.float32)
    om.check(_shape_decided_model(), {"x": x}, modes=("kernel",), rtol=1e-6, atol=1e-7, disabled=frozenset({"fold"}))
    then = _branch("then", [N("Identity", ["s6"], ["s"])], [om.vi("s", TP.INT64, [2])])
    other = _branch("else", [N("Identity", ["s2"], ["s"])], [om.vi("s", TP.INT64, [2])])
    m = om.model([N("If", ["c"], ["shp"], then_branch=then, else_branch=other), N("Reshape", ["x", "shp"], ["y"])],
               [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("y", TP.FLOAT)],
               [("c", np.array(True)), ("s6", np.array([3, 2], np.int64)), ("s2", np.array([1, 6], np.int64))])
    om.check(m, {"x": x}, modes=("kernel",), rtol=0, atol=0, disabled=frozenset({"fold"}))


def test_declared_outputs_are_checked_behind_a_folded_if():
    m = _shape_decided_model()
    m.graph.output[0].CopyFrom(om.vi("out", TP.INT32, [7, 7]))
    from compiler.frontends import onnx_import

    with pytest.raises(ModelError, match=r"output 'out': the model declares it int32\[7, 7\], but the graph "
                                         r"computes float32\[3, 2\]"):
        onnx_import.convert(m, name="m")


@pytest.mark.parametrize("c", [True, False])
def test_frozen_condition_picks_one_branch(tmp_path, c):
    """`--freeze-input c=FILE.npy` makes the condition a constant: the branches may give
    different shapes (an optimum 'merged' decoder's use_cache_branch is such an input)."""
    from click.testing import CliRunner

    import executor
    from aotplan.cli import main

    onnx.save(_shape_decided_model(freeze=True), tmp_path / "m.onnx")
    np.save(tmp_path / "c.npy", np.array(c))
    plan = str(tmp_path / "m.plan")
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o", plan])
    assert r.exit_code == 2 and "--freeze-input" in r.output and "'If_0'" in r.output, r.output
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o", plan,
                                  "--freeze-input", f"c={tmp_path / 'c.npy'}"])
    assert r.exit_code == 0, r.output
    x = R.standard_normal((2, 3)).astype(np.float32)
    got = executor.load(plan).run({"x": x})["out"]
    want = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x, "c": np.array(c)})[0]
    assert got.shape == want.shape == ((3, 2) if c else (1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_run_time_condition_with_different_shapes_is_one_error():
    with pytest.raises(ShapeError, match=r"node 'If_0' \(if\): output 0 \('y'\) is 'If_0:then:y' float32\[3, 2\] "
                                         r"from the then branch and 'If_0:else:y' float32\[1, 1\].*--freeze-input"):
        om.prepare(_shape_decided_model(freeze=True))


def _if(cond="c", then=None, other=None, **extra):
    one = _branch("b", [N("Identity", ["x"], ["y"])], [om.vi("y", TP.FLOAT, [2])])
    return N("If", [cond] if cond is not None else [], ["out"], name="bad", then_branch=then or one,
             else_branch=other or one, **extra)


@pytest.mark.parametrize("node, ctype, match", [
    (_if(), TP.FLOAT, r"'bad' \(if\): the condition 'c' float32\[\] must be a bool tensor of one element"),
    (_if(), TP.INT64, r"'bad' \(if\): the condition 'c' int64\[\] must be a bool"),
    (_if(cond=None), TP.BOOL, r"'bad' \(If\): takes 1 input \(the condition\), got 0"),
    (_if(other=_branch("e", [N("Identity", ["x"], ["y"]), N("Identity", ["x"], ["y2"])],
                       [om.vi("y", TP.FLOAT, [2]), om.vi("y2", TP.FLOAT, [2])])),
     TP.BOOL, r"'bad' \(If\): else_branch has 2 outputs, the node 1"),
    (_if(other=_branch("e", [N("Cast", ["x"], ["y"], to=TP.INT32)], [om.vi("y", TP.INT32, [2])])),
     TP.BOOL, r"'bad' \(if\): output 0 \('out'\) is 'bad:then:y' float32\[2\] from the then branch and "
              r"'bad:else:y' int32\[2\]"),
    (_if(other=_branch("e", [N("NonZero", ["x"], ["y"])], [om.vi("y", TP.INT64)])),
     TP.BOOL, r"node 'bad:else:NonZero_0': ONNX operator 'NonZero' is not supported"),
])
def test_bad_if_is_one_error(node, ctype, match):
    m = om.model([node], [om.vi("x", TP.FLOAT, [2]), om.vi("c", ctype, [])], [om.vi("out", TP.FLOAT)])
    with pytest.raises((ModelError, ShapeError), match=match):
        om.prepare(m)


def test_constant_condition_that_is_not_bool_is_one_error():
    m = om.model([_if()], [om.vi("x", TP.FLOAT, [2])], [om.vi("out", TP.FLOAT)], [("c", np.float32(1))])
    with pytest.raises(ShapeError, match=r"'bad' \(if\): the condition 'c' must be a bool tensor of one element, "
                                         r"got float32\[\]"):
        om.prepare(m)
