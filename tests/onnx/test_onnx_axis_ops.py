"""TopK, CumSum, Range, DepthToSpace and SpaceToDepth (added for PyTorch and
HuggingFace exports: beam search and detection heads, position ids, torch.arange,
PixelShuffle), and more elementwise operators (trigonometry, Celu, Shrink, IsNaN, ...), against
onnxruntime.

One model per dtype holds every form (XLA compile time dominates), compiled in kernel
and sink mode: TopK along each axis, largest and smallest, k = 0 and k = the whole
axis, ties (resolved to the lower index), only its indices used; CumSum exclusive
and/or reversed along a middle and a negative axis; Range folded from a shape and
kept as a launch; DepthToSpace in DCR and CRD mode, and SpaceToDepth undoing it.
ONNX's own node tests of these ops run in tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core.errors import ModelError, ShapeError  # noqa: E402
import onnx_models as om  # noqa: E402
from onnx_cases import static_graph_inputs  # noqa: E402

R = np.random.default_rng(2028)
N = helper.make_node
I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def _axis_model(elem, opset=18):
    """x [2, 8, 3, 4]: TopK (four forms), CumSum (four), DepthToSpace (two) and
    SpaceToDepth back; a Range over x's second dimension, folded."""
    nodes = [
        N("TopK", ["x", "k3"], ["top_v", "top_i"], axis=1),
        N("TopK", ["x", "k2"], ["low_v", "low_i"], axis=-1, largest=0),
        N("TopK", ["x", "k0"], ["none_v", "none_i"], axis=2),
        N("TopK", ["x", "k8"], ["unused", "all_i"], axis=1, largest=0),  # only its indices are used
        N("CumSum", ["x", "ax1"], ["cs"]),
        N("CumSum", ["x", "axm1"], ["cs_ex"], exclusive=1),
        N("CumSum", ["x", "ax1"], ["cs_rev"], reverse=1),
        N("CumSum", ["x", "ax2"], ["cs_ex_rev"], exclusive=1, reverse=1),
        N("DepthToSpace", ["x"], ["d2s"], blocksize=2),
        N("DepthToSpace", ["x"], ["d2s_crd"], blocksize=2, mode="CRD"),
        N("SpaceToDepth", ["d2s"], ["s2d"], blocksize=2),
        N("Shape", ["x"], ["shp"]), N("Gather", ["shp", "one"], ["n"]),
        N("Range", ["zero", "n", "step"], ["pos"], name="rng"),
    ]
    outs = ["top_v", "top_i", "low_v", "low_i", "none_v", "none_i", "all_i", "cs", "cs_ex", "cs_rev", "cs_ex_rev",
            "d2s", "d2s_crd", "s2d", "pos"]
    inits = [("k3", I64(3)), ("k2", I64(2)), ("k0", I64(0)), ("k8", I64(8)), ("ax1", np.array(1, np.int32)),
             ("axm1", np.array(-1, np.int64)), ("ax2", np.array(2, np.int64)), ("one", np.array(1, np.int64)),
             ("zero", np.array(0, np.int64)), ("step", np.array(3, np.int64))]
    return om.model(nodes, [om.vi("x", elem, [2, 8, 3, 4])],
                  [om.vi(o, TP.INT64 if o.endswith("_i") or o == "pos" else elem) for o in outs], inits, opset)


def _ties(dt):
    """Values with many ties (TopK picks the lower index among equals) and sign changes."""
    if np.dtype(dt).kind == "u":
        return R.integers(0, 6, (2, 8, 3, 4)).astype(dt)
    if np.dtype(dt).kind == "i":
        return R.integers(-5, 6, (2, 8, 3, 4)).astype(dt)
    return (R.integers(-12, 13, (2, 8, 3, 4)) / 4).astype(dt)


@pytest.mark.parametrize("elem, dt, rtol", [(TP.FLOAT, np.float32, 1e-6), (TP.FLOAT16, np.float16, 1e-3),
                                            (TP.INT32, np.int32, 0), (TP.INT64, np.int64, 0)])
def test_axis_ops_match_onnxruntime(elem, dt, rtol):
    feeds, m = {"x": _ties(dt)}, _axis_model(elem)
    want = None
    if elem in (TP.INT32, TP.INT64):  # onnxruntime has no integer DepthToSpace: ONNX's reference evaluator
        from onnx.reference import ReferenceEvaluator

        names = [o.name for o in m.graph.output]
        want = dict(zip(names, ReferenceEvaluator(m).run(names, feeds)))
    plan, sess = om.check(m, feeds, rtol=rtol, atol=0, want=want)
    out = sess.run(feeds)
    assert out["none_v"].shape == (2, 8, 0, 4) and out["all_i"].shape == (2, 8, 3, 4)
    np.testing.assert_array_equal(out["pos"], np.arange(0, 8, 3))
    np.testing.assert_array_equal(out["s2d"], feeds["x"])  # SpaceToDepth undoes DepthToSpace (DCR)
    assert not any("rng" in (la.node,) + la.nodes for la in plan.launches)  # folded: a shape decides it


def test_an_unnamed_onnx_output_gets_a_name():
    """TopK(x, k) -> ("", i): onnxruntime runs it; the values get a name of their own
    (a tensor named "" would reach the plan)."""
    from compiler.frontends import onnx_import

    m = om.model([N("TopK", ["x", "k"], ["", "i"])], [om.vi("x", TP.FLOAT, [2, 5])], [om.vi("i", TP.INT64)],
               [("k", I64(2))], opset=11)
    (node,) = onnx_import.convert(m, name="m").nodes
    assert node.outputs == ("TopK_0:unused_output_0", "i")
    x = R.standard_normal((2, 5)).astype(np.float32)
    om.check(m, {"x": x}, modes=("sink",), want={"i": np.argsort(-x, axis=1, kind="stable")[:, :2]})


def test_topk_on_uint8_and_int8_extremes():
    """Smallest-k of integers uses the bitwise complement as its order key: the type's
    minimum and maximum come out exact (negation would overflow)."""
    for elem, dt in ((TP.UINT8, np.uint8), (TP.INT8, np.int8)):
        info = np.iinfo(dt)
        x = np.array([[3, info.max, info.min, 0, info.min, info.max, 1]], dt)
        m = om.model([N("TopK", ["x", "k"], ["lo", "lo_i"], largest=0), N("TopK", ["x", "k"], ["hi", "hi_i"])],
                   [om.vi("x", elem, [1, 7])], [om.vi(o, TP.INT64 if o.endswith("_i") else elem)
                                              for o in ("lo", "lo_i", "hi", "hi_i")],
                   [("k", I64(3))], opset=11)
        # (onnxruntime has no int8/uint8 TopK: the expected values are numpy's stable sort)
        order = np.argsort(x, axis=-1, kind="stable")[:, :3]
        rorder = np.argsort(-x.astype(np.int64), axis=-1, kind="stable")[:, :3]
        want = {"lo": np.take_along_axis(x, order, -1), "lo_i": order.astype(np.int64),
                "hi": np.take_along_axis(x, rorder, -1), "hi_i": rorder.astype(np.int64)}
        om.check(m, {"x": x}, modes=("sink",), want=want)


def test_topk_1_takes_k_as_attribute_and_cumsum_reads_bfloat16_in_float32():
    x = R.standard_normal((3, 50)).astype(np.float32)
    m = om.model([N("TopK", ["x"], ["v", "i"], k=5)], [om.vi("x", TP.FLOAT, [3, 50])],
               [om.vi("v", TP.FLOAT), om.vi("i", TP.INT64)], opset=9)
    om.check(m, {"x": x}, modes=("sink",))
    # bfloat16: onnxruntime has no CumSum for it; float32 sums rounded once to bfloat16
    import ml_dtypes

    xb = x.astype(ml_dtypes.bfloat16)
    m = om.model([N("CumSum", ["x", "a"], ["y"])], [om.vi("x", TP.BFLOAT16, [3, 50])], [om.vi("y", TP.BFLOAT16)],
               [("a", I64(1))], opset=14)
    want = np.cumsum(xb.astype(np.float32), axis=1).astype(ml_dtypes.bfloat16)
    om.check(m, {"x": xb}, modes=("sink",), want={"y": want}, rtol=0)


@pytest.mark.parametrize("start, limit, delta, elem, dt", [
    (1.5, -2.0, -0.25, TP.FLOAT, np.float32), (0.1, 1.0, 0.3, TP.FLOAT, np.float32),
    (10, -7, -4, TP.INT32, np.int32), (5, 5, 1, TP.INT64, np.int64), (-3, 40, 7, TP.INT16, np.int16),
])
def test_range_folds_like_onnxruntime(start, limit, delta, elem, dt):
    """Range's length is ceil((limit - start) / delta), at least 0; its inputs' dtype is
    the output's. The inputs are graph inputs frozen to constants (as --freeze-input)."""
    from compiler.frontends import onnx_import
    from compiler.passes import fold

    feeds = {k: np.array(v, dt) for k, v in (("s", start), ("l", limit), ("d", delta))}
    m = om.model([N("Range", ["s", "l", "d"], ["y"]), N("Identity", ["y"], ["z"])],
               [om.vi(k, elem, []) for k in feeds], [om.vi("z", elem)], opset=11)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(["z"], feeds)[0]
    g = onnx_import.convert(m, name="m")
    assert static_graph_inputs(g) == ["d", "l", "s"]
    g, _ = fold.run(fold.freeze_inputs(g, feeds))
    (c,) = [c for c in g.constants if c.name == "y"]
    assert c.data.dtype == want.dtype
    np.testing.assert_allclose(c.data, want, rtol=1e-6)


def test_range_27_in_float16_counts_in_float32():
    """Range-27 takes float16 with stash_type 1: limit - start in float32 (in float16,
    1025 - 0.5 rounds to 1024, one element short)."""
    for start, limit in ((0.5, 1025.0), (-0.5, 1024.0)):
        m = om.model([N("Range", ["s", "l", "d"], ["r"], stash_type=1)], [], [om.vi("r", TP.FLOAT16)],
                   [("s", np.float16(start)), ("l", np.float16(limit)), ("d", np.float16(1.0))], opset=27)
        plan, sess = om.check(m, {}, modes=("sink",), rtol=0, atol=0)
        assert sess.run({})["r"].shape == (1025,)


def test_range_as_a_launch_when_folding_is_off():
    """With folding off a Range that no shape depends on stays a launch: the lowering
    itself gives onnxruntime's numbers."""
    m = om.model([N("Range", ["s", "l", "d"], ["r"], name="rng"), N("Add", ["x", "r"], ["y"])], [om.vi("x", TP.FLOAT, [7])],
               [om.vi("y", TP.FLOAT)], [("s", np.array(-1.0, np.float32)), ("l", np.array(2.4, np.float32)),
                                      ("d", np.array(0.5, np.float32))], opset=11)
    x = R.standard_normal(7).astype(np.float32)
    plan, _ = om.check(m, {"x": x}, modes=("kernel",), disabled=frozenset({"fold"}))
    assert any(la.node == "rng" for la in plan.launches)


def _topk(k, elem=TP.FLOAT, **attrs):
    return om.model([N("TopK", ["x", "k"], ["y", "i"], name="bad", **attrs)], [om.vi("x", elem, [1, 2, 4, 4])],
                  [om.vi("y", elem), om.vi("i", TP.INT64)], [("k", k)], opset=11)


@pytest.mark.parametrize("model, match", [
    (_topk(I64(5)), r"'bad' \(topk\): k=5 is out of range for axis 3 of length 4"),
    (_topk(I64(1, 2)), r"'bad' \(topk\): 'k' must be one integer, got \[1, 2\]"),
    (_topk(I64(1), largest=2), r"'bad' \(topk\).*'largest' must be 0 or 1"),
    (_topk(I64(1), elem=TP.BOOL), r"'bad' \(topk\).*must be numeric"),
    (om.one_node("CumSum", ["a"], [("a", I64(4))], opset=14), r"'bad' \(cumsum\): axis 4 is out of range for rank 4"),
    (om.one_node("CumSum", ["a"], [("a", np.array(1.0, np.float32))], opset=14),
     r"'bad' \(cumsum\): 'axis' must be an integer, got 1.0"),
    (om.one_node("DepthToSpace", [], blocksize=3), r"'bad' \(depth_to_space\): channels of 'x' float32\[1, 2, 4, 4\] must "
                                            r"be a multiple of blocksize\^2 = 9"),
    (om.one_node("DepthToSpace", [], blocksize=1, mode="XYZ"), r"'bad' \(depth_to_space\).*'mode' must be 'DCR' or 'CRD'"),
    (om.one_node("SpaceToDepth", [], blocksize=3), r"'bad' \(space_to_depth\).*must be multiples of blocksize 3"),
    (om.one_node("SpaceToDepth", [], shape=(2, 4, 4)), r"'bad' \(space_to_depth\).*must be 4-D"),
    (om.one_node("DepthToSpace", [], blocksize=2, shape=(2, 4, 4, 1, 1)),
     r"'bad' \(depth_to_space\): input 'x' float32\[2, 4, 4, 1, 1\] must be 4-D"),
])
def test_refused_forms_name_the_node(model, match):
    with pytest.raises((ModelError, ShapeError), match=match):
        om.prepare(model)


@pytest.mark.parametrize("consts, match", [
    ([("s", np.array(0, np.int64)), ("l", np.array(4, np.int64)), ("d", np.array(0, np.int64))],
     r"'bad' \(range\): delta must not be 0"),
    ([("s", np.array(0, np.int64)), ("l", np.array(4, np.int32)), ("d", np.array(1, np.int64))],
     r"'bad' \(range\): input 'l' \(limit\) is int32, not int64 as the node's other inputs"),
    ([("s", np.array(0, np.int64)), ("l", np.array(2**40, np.int64)), ("d", np.array(1, np.int64))],
     r"'bad' \(range\): attribute 'limit' value 1099511627776 is out of range for int64 \(int64 is stored as int32"),
    ([("s", np.array(0.0, np.float32)), ("l", np.array(np.inf, np.float32)), ("d", np.array(1, np.float32))],
     r"'bad' \(range\): start, limit and delta must be finite, got 0.0, inf, 1.0"),
    ([("s", np.array(0.0, np.float32)), ("l", np.array(1e12, np.float32)), ("d", np.array(1e-3, np.float32))],
     r"'bad' \(range\).*too many elements"),
])
def test_range_refusals_name_the_node(consts, match):
    m = om.model([N("Range", ["s", "l", "d"], ["y"], name="bad")], [], [om.vi("y", TP.UNDEFINED)], consts, opset=11)
    with pytest.raises((ModelError, ShapeError), match=match):
        om.prepare(m)


def test_more_elementwise_ops_match_onnxruntime():
    """Tan, the inverse and hyperbolic functions, Softsign, Celu, ThresholdedRelu,
    Shrink (float and int32), IsNaN, IsInf (each detect flag) and Mean, over values
    that include inf and NaN where the functions meet them. (Acosh reads |x| + 1.25:
    near 1 it magnifies one ulp of its input beyond the tolerance.)"""
    ops = [("Tan", "u", {}), ("Asin", "u", {}), ("Acos", "u", {}), ("Atan", "x", {}), ("Sinh", "x", {}),
           ("Cosh", "x", {}), ("Asinh", "x", {}), ("Acosh", "big", {}), ("Atanh", "u", {}), ("Softsign", "x", {}),
           ("Celu", "x", {"alpha": 0.7}), ("ThresholdedRelu", "x", {"alpha": 0.3}),
           ("Shrink", "x", {"bias": 0.25, "lambd": 0.6}), ("IsNaN", "odd", {}), ("IsInf", "odd", {}),
           ("IsInf", "odd", {"detect_negative": 0}), ("IsInf", "odd", {"detect_positive": 0})]
    nodes = [N(op, [src], [f"y{i}"], **a) for i, (op, src, a) in enumerate(ops)]
    nodes += [N("Abs", ["x"], ["ax"]), N("Add", ["ax", "one"], ["big"]), N("Mean", ["x", "u", "row"], ["mean"]),
              N("Shrink", ["ix"], ["ishrink"], bias=2.0, lambd=3.0)]
    outs = [(f"y{i}", TP.BOOL if op.startswith("Is") else TP.FLOAT) for i, (op, _, _) in enumerate(ops)]
    outs += [("mean", TP.FLOAT), ("ishrink", TP.INT32)]
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [3, 8]), om.vi("u", TP.FLOAT, [3, 8]), om.vi("odd", TP.FLOAT, [3, 8]),
                       om.vi("row", TP.FLOAT, [8]), om.vi("ix", TP.INT32, [3, 8])],
               [om.vi(o, t) for o, t in outs], [("one", np.array(1.25, np.float32))], opset=18)
    rng = np.random.default_rng(7)  # (its own: the draws do not depend on which tests ran before)
    odd = rng.standard_normal((3, 8)).astype(np.float32)
    odd.flat[[0, 5, 9, 17]] = [np.inf, -np.inf, np.nan, -np.inf]
    feeds = {"x": (rng.standard_normal((3, 8)) * 2).astype(np.float32),
             "u": rng.uniform(-0.95, 0.95, (3, 8)).astype(np.float32), "odd": odd,
             "row": rng.standard_normal(8).astype(np.float32), "ix": rng.integers(-8, 9, (3, 8)).astype(np.int32)}
    om.check(m, feeds, modes=("sink",), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("opset", [7, 9])
def test_upsample_matches_onnxruntime(opset):
    """Upsample (old YOLO and FPN exports), nearest and linear, integer and fractional
    scales: Upsample-7 takes `scales` as an attribute, Upsample-9 as an input."""
    scales = [np.array([1, 1, 2, 2], np.float32), np.array([1, 1, 1.5, 2.5], np.float32)]
    nodes, inits = [], []
    for i, (s, mode) in enumerate([(s, m) for s in scales for m in ("nearest", "linear")]):
        if opset < 9:
            nodes.append(N("Upsample", ["x"], [f"y{i}"], mode=mode, scales=s.tolist()))
        else:
            nodes.append(N("Upsample", ["x", f"s{i}"], [f"y{i}"], mode=mode))
            inits.append((f"s{i}", s))
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [1, 2, 3, 4])], [om.vi(f"y{i}", TP.FLOAT) for i in range(4)], inits,
               opset=opset)
    om.check(m, {"x": R.standard_normal((1, 2, 3, 4)).astype(np.float32)}, modes=("sink",), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_matches_onnxruntime(opset):
    """GroupNormalization-18 scales per group, -21 per channel (nn.GroupNorm exports)."""
    x = (R.standard_normal((2, 6, 3, 5)) * 3 + 1).astype(np.float32)
    n = 3 if opset < 21 else 6
    m = om.model([N("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3)],
               [om.vi("x", TP.FLOAT, [2, 6, 3, 5])], [om.vi("y", TP.FLOAT)],
               [("s", R.standard_normal(n).astype(np.float32)), ("b", R.standard_normal(n).astype(np.float32))],
               opset=opset)
    om.check(m, {"x": x}, modes=("sink",), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("elem, dt", [(TP.FLOAT, np.float32), (TP.FLOAT16, np.float16)])
def test_topk_ranks_signed_zeros_and_nans_as_onnxruntime(elem, dt):
    """lax.top_k orders floats by IEEE total order: -0.0 below +0.0, and a NaN with its
    sign bit set (what 0/0 gives on x86) below everything. onnxruntime ranks the zeros
    equal (the lower index first) and every NaN the largest."""
    x = np.array([[-0.0, 0.0, 1.0, -0.0], [0.0, -np.nan, 2.0, np.nan], [-np.inf, -np.nan, np.inf, 0.0]], dt)
    nodes = [N("TopK", ["x", k], [f"v{k}_{lg}", f"i{k}_{lg}"], largest=lg) for k in ("k1", "k3") for lg in (0, 1)]
    nodes.append(N("Div", ["z", "z"], ["nan"]))  # NaN made in the graph: 0/0
    nodes += [N("TopK", ["nan", "k1"], ["vn", "in"])]
    outs = [o for n in nodes if n.op_type == "TopK" for o in n.output]
    m = om.model(nodes, [om.vi("x", elem, [3, 4]), om.vi("z", elem, [3, 4])],
               [om.vi(o, TP.INT64 if o.startswith("i") else elem) for o in outs],
               [("k1", I64(1)), ("k3", I64(3))], opset=11)
    feeds = {"x": x, "z": np.array([[0, 1, 2, 3], [1, 0, 3, 0], [2, 2, 0, 1]], dt)}
    # the expected values by that rule, in numpy (onnxruntime 1.30 orders NaNs otherwise; 1.32 agrees)
    want = {}
    for k in (1, 3):
        for lg in (0, 1):
            def key(j, r, lg=lg):  # NaNs first (largest) or last (smallest); then by value; python's sort is stable
                nan = bool(np.isnan(r[j]))
                return (not nan if lg else nan, 0.0 if nan else -float(r[j]) if lg else float(r[j]))
            order = [sorted(range(4), key=lambda j, r=r: key(j, r))[:k] for r in x]
            idx = np.array(order, np.int64)
            want[f"vk{k}_{lg}"], want[f"ik{k}_{lg}"] = np.take_along_axis(x, idx, 1), idx
    with np.errstate(invalid="ignore"):
        nan = feeds["z"] / feeds["z"]
    want["in"] = np.array([[int(np.argmax(np.isnan(r)))] for r in nan], np.int64)
    want["vn"] = np.take_along_axis(nan, want["in"], 1)
    got = om.check(m, feeds, modes=("sink",), rtol=0, atol=0, want=want)[1].run(feeds)
    for k, w in want.items():  # (allclose takes -0.0 for +0.0)
        assert np.array_equal(np.signbit(got[k]), np.signbit(w)) or k == "vn", k  # (vn: the sign of 0/0's NaN)


def test_lp_mvn_and_reverse_sequence_match_onnxruntime():
    """LpNormalization (p 1 and 2, a zero row gives zeros), MeanVarianceNormalization
    (default axes) and ReverseSequence with lengths fed at run time (0 and full too)."""
    m = om.model([N("LpNormalization", ["x"], ["l1"], p=1, axis=1), N("LpNormalization", ["x"], ["l2"]),
                N("MeanVarianceNormalization", ["x"], ["mvn"]),
                N("ReverseSequence", ["s", "lens"], ["rev"], batch_axis=1, time_axis=0),
                N("ReverseSequence", ["s2", "lens"], ["rev_b"], batch_axis=0, time_axis=1)],
               [om.vi("x", TP.FLOAT, [2, 3, 4, 5]), om.vi("s", TP.FLOAT, [6, 4, 3]), om.vi("s2", TP.FLOAT, [4, 6]),
                om.vi("lens", TP.INT64, [4])], [om.vi(o, TP.FLOAT) for o in ("l1", "l2", "mvn", "rev", "rev_b")], opset=13)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    x[1, :, 2, :] = 0  # a zero vector along axis 1 (and rows along the last axis)
    feeds = {"x": x, "s": rng.standard_normal((6, 4, 3)).astype(np.float32),
             "s2": rng.standard_normal((4, 6)).astype(np.float32), "lens": np.array([6, 0, 3, 1], np.int64)}
    _, sess = om.check(m, feeds, modes=("sink",), rtol=1e-5, atol=1e-6)

    feeds["lens"] = np.array([2, 6, 5, 4], np.int64)  # other lengths, the same plan
    for k, w in om.run_ort(m, feeds).items():
        np.testing.assert_allclose(sess.run(feeds)[k], w, rtol=1e-5, atol=1e-6, err_msg=k)
