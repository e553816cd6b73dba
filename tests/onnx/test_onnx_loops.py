"""ONNX Loop and Scan (unrolled at compile time, passes/unroll.py) and CastLike against
onnxruntime: Scan with several states, reversed and non-zero scan axes and directions
on inputs and outputs; Loop with scan outputs, outer values read in the body, a trip
count folded from shapes or frozen, zero iterations, a condition computed at run time
(each iteration's results kept while it holds), nested loops, a model.json round trip;
and the errors. ONNX's own Loop/Scan node tests (loop11, scan9_*, scan_sum, the
Range and linear-attention expansions) run in tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core.errors import LimitError, ModelError  # noqa: E402
import onnx_models as om  # noqa: E402
from onnx_cases import static_graph_inputs  # noqa: E402

R = np.random.default_rng(2032)
N = helper.make_node


def _graph(name, nodes, inputs, outputs):
    return helper.make_graph(nodes, name, inputs, outputs)


def _scan_model():
    """Two states (a running sum and a running product-ish) over two scan inputs: x [3, 5, 4]
    scanned on axis 1, forward; y [4, 5] on axis 1 reversed. Outputs: the states, the
    per-step sums stacked on axis 0 and the per-step products stacked on axis 1, reversed;
    the body reads the outer `w`."""
    body = _graph("body", [
        N("Add", ["s", "xs"], ["s2"]),                   # s [3, 4] + xs [3, 4]
        N("Mul", ["p", "ys"], ["p2"]),                   # p [4] * ys [4]
        N("Add", ["p2", "w"], ["p3"]),
        N("Tanh", ["p3"], ["p4"]),
        N("ReduceSum", ["s2"], ["sum"], keepdims=0),
        N("Identity", ["p4"], ["pout"]),
    ], [om.vi("s", TP.FLOAT, [3, 4]), om.vi("p", TP.FLOAT, [4]), om.vi("xs", TP.FLOAT, [3, 4]), om.vi("ys", TP.FLOAT, [4])],
        [om.vi("s2", TP.FLOAT, [3, 4]), om.vi("p4", TP.FLOAT, [4]), om.vi("sum", TP.FLOAT, []),
         om.vi("pout", TP.FLOAT, [4])])
    nodes = [N("Scan", ["s0", "p0", "x", "y"], ["s_final", "p_final", "sums", "prods"], body=body,
               num_scan_inputs=2, scan_input_axes=[1, -1], scan_input_directions=[0, 1], scan_output_axes=[0, 1],
               scan_output_directions=[0, 1])]
    return om.model(nodes, [om.vi("s0", TP.FLOAT, [3, 4]), om.vi("p0", TP.FLOAT, [4]), om.vi("x", TP.FLOAT, [3, 5, 4]),
                          om.vi("y", TP.FLOAT, [4, 5])],
                  [om.vi(o, TP.FLOAT) for o in ("s_final", "p_final", "sums", "prods")],
                  [("w", R.standard_normal(4).astype(np.float32))], opset=16)


def test_scan_matches_onnxruntime():
    feeds = {"s0": R.standard_normal((3, 4)).astype(np.float32), "p0": R.standard_normal(4).astype(np.float32),
             "x": R.standard_normal((3, 5, 4)).astype(np.float32), "y": R.standard_normal((4, 5)).astype(np.float32)}
    om.check(_scan_model(), feeds, modes=("kernel", "fused", "sink"), rtol=1e-5, atol=1e-5)


def _loop_model(m=None, cond_body=None, scan=True, opset=16):
    """v' = v * 0.5 + x[i] (i the iteration number, x an outer [6, 3]), a scan output of
    each iteration's v'. `m`: the trip count as an initializer (None: a graph input
    'm'); `cond_body`: nodes computing 'c_out' from 'v2' (None: the condition passed
    through)."""
    body_nodes = [N("Unsqueeze", ["i", "ax0"], ["i1"]), N("Gather", ["x", "i"], ["xi"]),
                  N("Mul", ["v", "half"], ["vh"]), N("Add", ["vh", "xi"], ["v2"]), N("Identity", ["v2"], ["vs"])]
    body_nodes += cond_body or [N("Identity", ["c"], ["c_out"])]
    outs = [om.vi("c_out", TP.BOOL, []), om.vi("v2", TP.FLOAT, [3])] + ([om.vi("vs", TP.FLOAT, [3])] if scan else [])
    body = _graph("body", body_nodes, [om.vi("i", TP.INT64, []), om.vi("c", TP.BOOL, []), om.vi("v", TP.FLOAT, [3])], outs)
    inits = [("x", R.standard_normal((6, 3)).astype(np.float32)), ("half", np.float32(0.5)),
             ("ax0", np.array([0], np.int64)), ("t", np.array(True))]
    inputs = [om.vi("v0", TP.FLOAT, [3])]
    if m is None:
        inputs.append(om.vi("m", TP.INT64, []))
    else:
        inits.append(("m", np.array(m, np.int64)))
    loop_outs = ["v_final"] + (["vs_all"] if scan else [])
    return om.model([N("Loop", ["m", "t", "v0"], loop_outs, body=body)], inputs,
                  [om.vi(o, TP.FLOAT) for o in loop_outs], inits, opset=opset)


@pytest.mark.parametrize("m", [6, 1, 0])
def test_loop_with_scan_outputs_matches_onnxruntime(m):
    om.check(_loop_model(m), {"v0": R.standard_normal(3).astype(np.float32)}, modes=("kernel", "sink"), rtol=1e-6,
           atol=1e-6)


def test_loop_trip_count_from_a_graph_input_must_be_frozen():
    from compiler import pipeline
    from compiler.frontends import onnx_import
    from compiler.passes import fold

    model = _loop_model(None)
    g = onnx_import.convert(model, name="m")
    assert static_graph_inputs(g) == ["m"]
    with pytest.raises(ModelError, match=r"node 'Loop_0' \(Loop\): the trip count 'm' is known only at run time.*"
                                         r"\(freeze 'm' with --freeze-input"):
        pipeline.prepare(g)
    v0 = R.standard_normal(3).astype(np.float32)
    want = om.run_ort(model, {"v0": v0, "m": np.array(4, np.int64)})
    frozen = fold.freeze_inputs(g, {"m": np.array(4, np.int64)})
    plan = pipeline.compile_graph(frozen, "d").plan
    import executor
    got = executor.Session(plan, warmup=False).run({"v0": v0})
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-6, atol=1e-6)


def _threshold_cond():
    """c_out = sum(v2) < 3: known only at run time."""
    return [N("ReduceSum", ["v2"], ["sv"], keepdims=0), N("Less", ["sv", "three"], ["c_out"])]


@pytest.mark.parametrize("v0", [np.zeros(3, np.float32), np.full(3, 0.5, np.float32), np.full(3, 5.0, np.float32)],
                         ids=["v0=0", "v0=0.5", "v0=5"])
def test_loop_condition_known_at_run_time_matches_onnxruntime(v0):
    m = _loop_model(6, cond_body=_threshold_cond(), scan=False)
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(3), "three"))
    plan, _ = om.check(m, {"v0": v0}, modes=("sink",), rtol=1e-6, atol=1e-6)


def test_loop_condition_at_run_time_with_scan_outputs_is_refused():
    m = _loop_model(6, cond_body=_threshold_cond(), scan=True)
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(3), "three"))
    with pytest.raises(ModelError, match=r"'Loop_0' \(Loop\): its condition is known only at run time, and it has "
                                         r"scan outputs"):
        om.prepare(m)


def test_loop_condition_from_a_constant_false_runs_once():
    cond = [N("Constant", [], ["c_out"], value=onnx.numpy_helper.from_array(np.array(False)))]
    om.check(_loop_model(6, cond_body=cond), {"v0": np.ones(3, np.float32)}, modes=("sink",), rtol=1e-6, atol=1e-6)


def test_nested_loop_in_a_scan_body_and_a_loop_invariant_node():
    """A Scan whose body runs a Loop (trip count 3) on each step's state; the Loop's
    body reads the Scan's slice (an outer value for it) and a node reading only outer
    values (loop-invariant) feeds both."""
    inner = _graph("inner", [N("Add", ["acc", "xs"], ["a1"]), N("Mul", ["a1", "k2"], ["a2"]),
                             N("Identity", ["c"], ["co"])],
                   [om.vi("i", TP.INT64, []), om.vi("c", TP.BOOL, []), om.vi("acc", TP.FLOAT, [2])],
                   [om.vi("co", TP.BOOL, []), om.vi("a2", TP.FLOAT, [2])])
    body = _graph("body", [N("Loop", ["three", "t", "s"], ["s2"], body=inner), N("Neg", ["s2"], ["o"])],
                  [om.vi("s", TP.FLOAT, [2]), om.vi("xs", TP.FLOAT, [2])], [om.vi("s2", TP.FLOAT, [2]), om.vi("o", TP.FLOAT, [2])])
    nodes = [N("Mul", ["k", "k"], ["k2"]),
             N("Scan", ["s0", "x"], ["s_final", "os"], body=body, num_scan_inputs=1)]
    m = om.model(nodes, [om.vi("s0", TP.FLOAT, [2]), om.vi("x", TP.FLOAT, [4, 2])], [om.vi("s_final", TP.FLOAT),
                                                                               om.vi("os", TP.FLOAT)],
               [("k", np.float32(0.9)), ("three", np.array(3, np.int64)), ("t", np.array(True))], opset=16)
    om.check(m, {"s0": R.standard_normal(2).astype(np.float32), "x": R.standard_normal((4, 2)).astype(np.float32)},
           modes=("sink", "kernel"), rtol=1e-5, atol=1e-6)


def test_loop_survives_a_model_json_round_trip(tmp_path):
    """`aotplan import onnx` writes the loop markers into model.json; compiling that
    file unrolls them as compiling the .onnx does."""
    import executor
    from aotplan.core import model_json
    from compiler import pipeline
    from compiler.frontends import onnx_import

    model = _loop_model(5)
    g = onnx_import.convert(model, name="m")
    assert {"loop_enter", "loop_exit"} <= {n.op for n in g.nodes}
    path = str(tmp_path / "model.json")
    model_json.save(g, path)
    again, digest = model_json.load(path)
    v0 = R.standard_normal(3).astype(np.float32)
    got = executor.Session(pipeline.compile_graph(again, digest).plan, warmup=False).run({"v0": v0})
    want = om.run_ort(model, {"v0": v0})
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-6, atol=1e-6)


def test_cast_like_matches_onnxruntime():
    nodes = [N("CastLike", ["x", "like_i"], ["xi"]), N("CastLike", ["x", "like_h"], ["xh"]),
             N("CastLike", ["x", "like_b"], ["xb"]), N("CastLike", ["n", "x"], ["nf"])]
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [2, 3]), om.vi("n", TP.INT32, [4])],
               [om.vi("xi", TP.INT32), om.vi("xh", TP.FLOAT16), om.vi("xb", TP.BOOL), om.vi("nf", TP.FLOAT)],
               [("like_i", np.zeros(1, np.int32)), ("like_h", np.zeros(2, np.float16)), ("like_b", np.array(True))],
               opset=19)
    x = np.array([[-2.7, 0.0, 1.5], [3.9, -0.0, 7.25]], np.float32)
    om.check(m, {"x": x, "n": np.array([-3, 0, 5, 9], np.int32)}, modes=("sink",), rtol=0, atol=0)


def _while_model():
    body = _graph("body", [N("Identity", ["c"], ["co"]), N("Identity", ["v"], ["v2"])],
                  [om.vi("i", TP.INT64, []), om.vi("c", TP.BOOL, []), om.vi("v", TP.FLOAT, [3])],
                  [om.vi("co", TP.BOOL, []), om.vi("v2", TP.FLOAT, [3])])
    return om.model([N("Loop", ["", "t", "x"], ["y"], body=body)], [om.vi("x", TP.FLOAT, [3])], [om.vi("y", TP.FLOAT)],
                  [("t", np.array(True))], opset=16)


def _scan8_with_lens():
    body = _graph("body", [N("Add", ["s", "xs"], ["s2"])], [om.vi("s", TP.FLOAT, [2]), om.vi("xs", TP.FLOAT, [2])],
                  [om.vi("s2", TP.FLOAT, [2])])
    return om.model([N("Scan", ["lens", "s0", "x"], ["y"], body=body, num_scan_inputs=1)],
                  [om.vi("s0", TP.FLOAT, [1, 2]), om.vi("x", TP.FLOAT, [1, 3, 2])], [om.vi("y", TP.FLOAT)],
                  [("lens", np.array([3], np.int32))], opset=8)


@pytest.mark.parametrize("make, err, match", [
    (_while_model, ModelError, r"'Loop_0' \(Loop\): a Loop without a trip count \(M\), a while loop, is not supported"),
    (lambda: _loop_model(10 ** 6), LimitError, r"'Loop_0' \(Loop\): unrolling 1000000 iterations of a \d+-node body"),
    (_scan8_with_lens, ModelError, r"'Scan_0' \(Scan\): input 'sequence_lens' \('lens'\) is not supported"),
])
def test_loop_errors(make, err, match):
    with pytest.raises(err, match=match):
        om.prepare(make())


def _marker_graph(enter_attrs=None, exit_attrs=None, exit_inputs=("c", "v1"), exit_outputs=("y",), enter="L"):
    """x -> loop_enter(M, x) -> (i, c, v) ; v1 = v + v ; loop_exit -> y, as a model.json may hold it."""
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

    nodes = [Node("L", "loop_enter", ("m", "x"), ("i", "c", "v"), freeze(enter_attrs or {"trip_count": True})),
             Node("a", "add", ("v", "v"), ("v1",))]
    if exit_attrs is not False:
        nodes.append(Node("X", "loop_exit", exit_inputs, exit_outputs,
                          freeze({"enter": enter, "kind": "loop", "n_carried": 1} | (exit_attrs or {}))))
    return Graph("t", (TensorInfo("x", "float32", (2,)),), ("y",) if exit_attrs is not False else ("v1",),
                 tuple(nodes), (Constant("m", "int64", (), np.array(3, np.int64)),))


def test_loop_markers_written_by_hand():
    """The markers in a model.json: well formed, they unroll (x * 2**3); malformed, one
    error names the node and what is wrong."""
    import executor
    from compiler import pipeline

    got = executor.Session(pipeline.compile_graph(_marker_graph(), "d").plan, warmup=False).run(
        {"x": np.array([1, -2], np.float32)})
    np.testing.assert_array_equal(got["y"], [8, -16])


@pytest.mark.parametrize("kw, match", [
    (dict(enter="nope"), r"node 'X' \(loop_exit\): attribute 'enter' 'nope' must name a loop_enter or scan_enter"),
    (dict(exit_attrs=False), r"node 'L' \(loop_enter\): no loop_exit names it as its 'enter'"),
    (dict(exit_attrs={"kind": "scan"}), r"node 'X' \(loop_exit\): attribute 'kind' 'scan' does not match"),
    (dict(exit_attrs={"n_carried": 2}), r"node 'X' \(loop_exit\): attribute 'n_carried' 2 does not match 'L'"),
    (dict(exit_outputs=("y", "z")), r"node 'X' \(loop_exit\): takes 2 inputs and gives 2 outputs"),
    (dict(enter_attrs={"trip_count": "yes"}), r"node 'L' \(loop_enter\): attribute 'trip_count' must be a bool"),
    (dict(enter_attrs={"trip_count": False}), r"node 'L' \(loop_enter\): 2 inputs and 3 outputs"),
])
def test_malformed_loop_markers(kw, match):
    from compiler import pipeline

    with pytest.raises(ModelError, match=match):
        pipeline.prepare(_marker_graph(**kw))
