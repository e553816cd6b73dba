"""The data-movement ops of compiler/ops/data_ops.py (gather, slice, split, squeeze,
unsqueeze, expand, pad, einsum, shape, constant_of_shape), each through a real plan
(compile -> codec -> executor), against independent numpy code written here from the
ONNX operator documents. Bad inputs must raise ShapeError/ModelError naming the node."""

import ml_dtypes
import numpy as np
import pytest

from aotplan.core import dtypes
from aotplan.core.errors import ModelError, ShapeError
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
from conftest import compile_and_load, one_node_graph

R = np.random.default_rng(4321)
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def i64(*v):
    return np.array(v, np.int64)


def build(nodes, inputs=(), consts=(), outputs=None):
    """nodes: [(op, input names, output names, attrs)]; inputs/consts: [(name, array)].
    Node i is named "n{i}"; outputs default to the last node's outputs."""
    ins = tuple(TensorInfo(n, dtypes.dtype_name(a.dtype), a.shape) for n, a in inputs)
    cs = tuple(Constant(n, dtypes.dtype_name(a.dtype), a.shape, a) for n, a in consts)
    ns = tuple(Node(f"n{i}", op, tuple(i_), tuple(o), freeze(a)) for i, (op, i_, o, a) in enumerate(nodes))
    return Graph("t", ins, tuple(outputs or nodes[-1][2]), ns, cs)


def run_graph(graph, feeds, **opts):
    _, sess = compile_and_load(graph, **opts)
    return sess.run(feeds)


def run_case(op, inputs, consts=(), **attrs):
    return run_graph(one_node_graph(op, inputs, consts, **attrs), dict(inputs))["y0"]


def run_const_case(op, x, consts=(), **attrs):
    """x as a constant, folding off: the op still runs as a launch (used for rank-0 x)."""
    return run_graph(one_node_graph(op, [], [("x", x)] + list(consts), **attrs), {}, disabled=frozenset({"fold"}))["y0"]


def same(got, want):
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def raises(graph, exc=ShapeError, match=None, node="n"):
    with pytest.raises(exc, match=match) as e:
        compile_and_load(graph)
    assert f"node {node!r}" in str(e.value), str(e.value)
    return str(e.value)


# ---------------------------------------------------------------- numpy oracles

def np_slice(x, starts, ends, axes=None, steps=None):
    """ONNX Slice via Python slicing (its clamping agrees with ONNX's except for a start
    below -dim with a negative step, tested separately)."""
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[a] = slice(int(s), int(e), int(st))
    return x[tuple(idx)]


def np_split(x, sizes, axis):
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def np_pad(x, pads, mode, value=0):
    r = x.ndim
    lo, hi = pads[:r], pads[r:]
    crop = tuple(slice(-min(b, 0), x.shape[i] + min(e, 0)) for i, (b, e) in enumerate(zip(lo, hi)))
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(lo, hi)]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=value)
    return np.pad(x, width, mode=mode)


# ---------------------------------------------------------------- gather

@pytest.mark.parametrize("case", ["const_2d_neg", "input_int32_axis_neg", "scalar_index", "bool", "int64",
                                  "bfloat16", "uint8_axis2"])
def test_gather(case):
    if case == "const_2d_neg":
        x, idx, axis, const = f32(3, 4, 5), np.array([[0, -1], [2, -4]], np.int64), 1, True
    elif case == "input_int32_axis_neg":
        x, idx, axis, const = f32(2, 3, 6), np.array([5, 0, -2, 3], np.int32), -1, False
    elif case == "scalar_index":
        x, idx, axis, const = f32(4, 3), np.array(-3, np.int64), 0, True
    elif case == "bool":
        x, idx, axis, const = R.random((5, 2)) > 0.5, np.array([4, 0, 4], np.int32), 0, True
    elif case == "int64":
        x, idx, axis, const = R.integers(-2**31, 2**31 - 1, (4, 3)), np.array([[1], [3]], np.int64), 0, False
    elif case == "bfloat16":
        x, idx, axis, const = f32(3, 4).astype(ml_dtypes.bfloat16), np.array([3, -4], np.int64), 1, True
    else:
        x, idx, axis, const = R.integers(0, 256, (2, 3, 4)).astype(np.uint8), np.array(2, np.int32), 2, True
    want = np.take(x, idx, axis=axis)  # numpy takes negative indices from the end, as ONNX does
    if const:
        got = run_case("gather", [("x", x)], [("i", idx)], axis=axis)
    else:
        got = run_case("gather", [("x", x), ("i", idx)], axis=axis)
    same(got, want)


def test_gather_scalar_index_graph_input():
    x, idx = f32(4, 3), np.array(-3, np.int64)
    same(run_case("gather", [("x", x), ("i", idx)]), x[1])


def test_gather_folds_constants():
    """All-constant inputs: fold evaluates the lowering eagerly (with x64 on)."""
    x = np.arange(12, dtype=np.int64).reshape(3, 4) * 1000
    idx = np.array([-1, 0], np.int64)
    g = build([("gather", ["x", "i"], ["y"], {"axis": 1})], consts=[("x", x), ("i", idx)])
    same(run_graph(g, {})["y"], np.take(x, idx, axis=1))


@pytest.mark.parametrize("idx,attrs,match", [
    (np.array([0.0], np.float32), {}, r"indices 'i' float32\[1\] must be int32 or int64"),
    (np.array([0], np.int64), {"axis": 2}, r"axis 2 is out of range for rank 2"),
    (np.array([0], np.int64), {"axis": "0"}, r"'axis' must be a (64-bit )?integer"),
])
def test_gather_errors(idx, attrs, match):
    raises(one_node_graph("gather", [("x", f32(2, 3))], [("i", idx)], **attrs), match=match)


@pytest.mark.parametrize("idx,attrs,match", [
    (np.array([0, 3], np.int64), {"axis": 1},
     r"\(gather\): constant indices 'i' hold 3 at \[1\], out of range for axis 1 of length 3 \(valid: -3\.\.2\)"),
    (np.array([[1], [-3]], np.int32), {}, r"constant indices 'i' hold -3 at \[1, 0\], out of range for axis 0 of length 2"),
])
def test_gather_constant_indices_out_of_range(idx, attrs, match):
    """ONNX makes them an error; run-time indices are clipped (a compiled program cannot
    raise), constant ones are refused at compile time, data constant or not."""
    raises(one_node_graph("gather", [("x", f32(2, 3))], [("i", idx)], **attrs), ModelError, match=match)
    g = one_node_graph("gather", [], [("x", f32(2, 3)), ("i", idx)], **attrs)  # would fold
    raises(g, ModelError, match=match)


# ---------------------------------------------------------------- slice

@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, 2], None, None),  # axes and steps absent
    ([-3, 1], [-1, I64_MAX], [-1, 1], None),  # negative starts/ends/axes, INT64_MAX end
    ([0], [I64_MAX], [2], [2]),
    ([-1], [I64_MIN], [0], [-1]),  # reverse a whole axis: INT64_MIN end
    ([-1, 3], [-4, 0], [2, 1], [-2, -1]),  # negative steps with negative/positive bounds
    ([10, 2], [20, 1], [1, 0], [1, 1]),  # start past the end / start > end: empty
    ([-100], [100], [1], [3]),  # clamped both sides
])
def test_slice(starts, ends, axes, steps):
    x = f32(4, 5, 6)
    consts = [("s", i64(*starts)), ("e", i64(*ends))]
    consts += [("a", i64(*axes))] if axes is not None else []
    consts += [("p", i64(*steps))] if steps is not None else []
    same(run_case("slice", [("x", x)], consts), np_slice(x, starts, ends, axes, steps))


def test_slice_steps_without_axes():
    """"" at the axes position (ONNX's omitted optional input), steps given."""
    x = f32(6, 5)
    g = build([("slice", ["x", "s", "e", "", "p"], ["y"], {})], [("x", x)],
              [("s", i64(5, 0)), ("e", i64(0, I64_MAX)), ("p", i64(-2, 2))])
    same(run_graph(g, {"x": x})["y"], x[5:0:-2, 0::2])


def test_slice_negative_step_clamps_start_into_range():
    """ONNX clamps a negative-step start to [0, dim-1]: start -10 on dim 5 keeps x[0]
    (Python slicing would give nothing)."""
    x = np.arange(5, dtype=np.int32)
    got = run_case("slice", [("x", x)], [("s", i64(-10)), ("e", i64(I64_MIN)), ("a", i64(0)), ("p", i64(-1))])
    same(got, np.array([0], np.int32))


@pytest.mark.parametrize("dtype", [np.int8, np.bool_])
def test_slice_dtypes_int32_bounds(dtype):
    x = (R.integers(-100, 100, (3, 7)) > 0) if dtype is np.bool_ else R.integers(-100, 100, (3, 7)).astype(dtype)
    consts = [("s", np.array([1, -2], np.int32)), ("e", np.array([3, 0], np.int32)), ("a", np.array([0, 1], np.int32)),
              ("p", np.array([1, -3], np.int32))]
    same(run_case("slice", [("x", x)], consts), x[1:3, -2:0:-3])


def test_slice_static_input_from_graph_input():
    x, s = f32(4, 4), i64(1)
    g = one_node_graph("slice", [("x", x), ("s", s)], [("e", i64(3))])
    msg = raises(g, ModelError, match=r"input 's' \(starts\) must be known at compile time")
    assert "depends on a graph input" in msg


@pytest.mark.parametrize("consts,match", [
    ([("s", i64(0)), ("e", i64(2)), ("a", i64(0)), ("p", i64(0))], r"steps \[0\] contains 0"),
    ([("s", i64(0, 0)), ("e", i64(2, 2)), ("a", i64(1, -1))], r"repeats an axis"),
    ([("s", i64(0)), ("e", i64(2, 3))], r"starts \[0\] and ends \[2, 3\] differ in length"),
    ([("s", i64(0)), ("e", i64(2)), ("a", i64(2))], r"axes entry 2 is out of range for rank 2"),
    # (the input is named, not the attribute it binds: the model has no attribute 'starts')
    ([("s", np.array([0.0], np.float32)), ("e", i64(2))], r"input 's' \(starts\) must be a 1-D integer tensor, "
                                                          r"got float32\[1\]"),
    ([("s", i64(0)), ("e", np.array([[2]], np.int64))], r"input 'e' \(ends\) must be a 1-D integer tensor, "
                                                        r"got int64\[1, 1\]"),
])
def test_slice_errors(consts, match):
    raises(one_node_graph("slice", [("x", f32(3, 4))], consts), match=match)


def test_zero_d_static_input_is_named():
    """A 0-D static input where ONNX wants a 1-D one: the error names the input (it named
    an attribute 'starts' the model does not have)."""
    raises(one_node_graph("slice", [("x", f32(3, 4))], [("s", np.array(1, np.int64)), ("e", i64(3))]),
           match=r"input 's' \(starts\) must be a 1-D integer tensor, got int64\[\]")


# ---------------------------------------------------------------- split

@pytest.mark.parametrize("shape,axis,split,num,n_out,sizes", [
    ((3, 6, 2), 1, [2, 3, 1], None, 3, [2, 3, 1]),
    ((4, 7), -1, None, 3, 3, [3, 3, 1]),  # num_outputs, last chunk smaller
    ((8, 3), 0, None, None, 2, [4, 4]),  # neither: equal parts, one per output
    ((9,), 0, None, 4, 4, [3, 3, 3, 0]),  # opset 18: ceil(9/4)=3, the last is empty
    ((5, 2), 0, [0, 5], None, 2, [0, 5]),
    ((2, 3), 1, None, None, 1, [3]),
])
def test_split(shape, axis, split, num, n_out, sizes):
    x = f32(*shape)
    outs = [f"y{i}" for i in range(n_out)]
    attrs = {"axis": axis} if axis else {}
    attrs.update({"num_outputs": num} if num is not None else {})
    consts = [("s", i64(*split))] if split is not None else []
    g = build([("split", ["x"] + (["s"] if split is not None else []), outs, attrs)], [("x", x)], consts)
    got = run_graph(g, {"x": x})
    for o, want in zip(outs, np_split(x, sizes, axis)):
        same(got[o], want)


def test_split_int64_and_bool():
    a = R.integers(-2**31, 2**31 - 1, (2, 5)).astype(np.int64)
    b = R.random((4, 2)) > 0.5
    g = build([("split", ["a", "s"], ["a0", "a1"], {"axis": 1}), ("split", ["b"], ["b0", "b1"], {})],
              [("a", a), ("b", b)], [("s", i64(1, 4))], outputs=["a0", "a1", "b0", "b1"])
    got = run_graph(g, {"a": a, "b": b})
    same(got["a0"], a[:, :1]), same(got["a1"], a[:, 1:]), same(got["b0"], b[:2]), same(got["b1"], b[2:])


@pytest.mark.parametrize("inputs,attrs,n_out,match", [
    (["x", "s"], {}, 2, r"split \[2, 2\] sums to 4, not to dimension 0 of input \[5, 3\] \(5\)"),
    (["x"], {"num_outputs": 3}, 2, r"num_outputs=3 but the node lists 2 outputs"),
    (["x", "s"], {"num_outputs": 2}, 2, r"either the 'split' input or 'num_outputs'"),
    (["x"], {"num_outputs": 4}, 4, r"cannot split dimension 0 \(5\) of input \[5, 3\] into 4 parts"),
    (["x"], {"axis": -3}, 2, r"axis -3 is out of range for rank 2"),
])
def test_split_errors(inputs, attrs, n_out, match):
    g = build([("split", inputs, [f"y{i}" for i in range(n_out)], attrs)], [("x", f32(5, 3))], [("s", i64(2, 2))])
    raises(g, match=match, node="n0")


# ---------------------------------------------------------------- squeeze / unsqueeze

@pytest.mark.parametrize("shape,axes", [((1, 3, 1, 2, 1), None), ((1, 3, 1, 2, 1), [-1, 0]), ((2, 1), [1]),
                                        ((1, 1), [])])
def test_squeeze(shape, axes):
    x = f32(*shape)
    want = np.squeeze(x, axis=tuple(axes)) if axes else np.squeeze(x)
    same(run_case("squeeze", [("x", x)], [("a", i64(*axes))] if axes is not None else []), want)


@pytest.mark.parametrize("shape,axes,out", [((3, 4), [0, -1], (1, 3, 4, 1)), ((3, 4), [1, 3], (3, 1, 4, 1)),
                                            ((), [0], (1,)), ((2,), [-3, 1], (1, 1, 2))])
def test_unsqueeze(shape, axes, out):
    x = R.integers(-5, 5, shape).astype(np.int8)
    want = np.expand_dims(x, tuple(axes))
    assert want.shape == out
    run = run_const_case if x.ndim == 0 else lambda op, x, c: run_case(op, [("x", x)], c)
    same(run("unsqueeze", x, [("a", i64(*axes))]), want)


def test_squeeze_unsqueeze_bool_chain():
    x = R.random((1, 3, 1)) > 0.5
    g = build([("squeeze", ["x", "a"], ["s"], {}), ("unsqueeze", ["s", "b"], ["y"], {})], [("x", x)],
              [("a", i64(0)), ("b", i64(-1))])
    same(run_graph(g, {"x": x})["y"], x.reshape(3, 1, 1))


@pytest.mark.parametrize("op,axes,match", [
    ("squeeze", [1], r"cannot squeeze axes \[1\] of input \[1, 3, 1\]: dimension 1 has size 3, not 1"),
    ("squeeze", [3], r"axes entry 3 is out of range for rank 3"),
    ("unsqueeze", [0, 0], r"repeats an axis"),
    ("unsqueeze", [5], r"axes entry 5 is out of range for rank 4"),
    ("unsqueeze", None, r"'axes' is required"),
])
def test_squeeze_unsqueeze_errors(op, axes, match):
    raises(one_node_graph(op, [("x", f32(1, 3, 1))], [("a", i64(*axes))] if axes is not None else []), match=match)


# ---------------------------------------------------------------- expand

@pytest.mark.parametrize("xshape,shape,dtype", [
    ((3, 1), [2, 1, 4], np.float32),  # bidirectional: the 1 in shape keeps x's 3
    ((2, 3), [1, 1], np.float32),  # a smaller target never shrinks
    ((1,), [4, 0], np.int8),
    ((), [2, 2], np.bool_),
])
def test_expand(xshape, shape, dtype):
    x = R.integers(-9, 9, xshape).astype(dtype)
    want = x * np.ones(shape, dtype)  # numpy broadcasting is ONNX's bidirectional rule
    run = run_const_case if x.ndim == 0 else lambda op, x, c: run_case(op, [("x", x)], c)
    same(run("expand", x, [("s", i64(*shape))]), want.astype(dtype))


@pytest.mark.parametrize("shape,match", [
    ([2, 5], r"input \[3, 4\] cannot be expanded to shape \[2, 5\]"),
    ([-1, 4], r"'shape' entries must be >= 0"),
])
def test_expand_errors(shape, match):
    raises(one_node_graph("expand", [("x", f32(3, 4))], [("s", i64(*shape))]), match=match)


# ---------------------------------------------------------------- pad

@pytest.mark.parametrize("mode,pads,value,dtype", [
    ("constant", [1, 0, 2, 3], 1.5, np.float32),
    ("constant", [0, 2, 1, 0], None, np.int32),  # value absent: 0
    ("constant", [-1, 2, 1, -2], -7, np.int64),  # negative pads crop
    ("constant", [1, 1, 0, 1], True, np.bool_),
    ("reflect", [2, 1, 1, 3], None, np.float32),
    ("reflect", [-1, 1, 2, -1], None, np.float32),  # crop, then reflect the rest
    ("edge", [3, 0, 1, 2], None, np.float16),
    ("edge", [1, -2, 0, 4], None, np.uint8),
    ("wrap", [2, 1, 1, 3], None, np.float32),
])
def test_pad(mode, pads, value, dtype):
    x = (R.random((4, 5)) > 0.5) if dtype is np.bool_ else R.integers(0, 100, (4, 5)).astype(dtype)
    consts = [("p", i64(*pads))]
    if value is not None:
        consts.append(("v", np.array(value, dtype)))
    got = run_case("pad", [("x", x)], consts, mode=mode)
    same(got, np_pad(x, pads, mode, 0 if value is None else value).astype(dtype))


def test_pad_axes_with_absent_value():
    """"" at the constant_value position, negative axes."""
    x = f32(2, 3, 4)
    g = build([("pad", ["x", "p", "", "a"], ["y"], {"mode": "edge"})], [("x", x)],
              [("p", i64(1, 0, 2, 3)), ("a", i64(-1, 0))])
    same(run_graph(g, {"x": x})["y"], np.pad(x, [(0, 3), (0, 0), (1, 2)], mode="edge"))


@pytest.mark.parametrize("x,consts,attrs,match", [
    (f32(3, 4), [("p", i64(3, 0, 0, 0))], {"mode": "reflect"}, r"reflect pads \[3, 0, 0, 0\] must be smaller"),
    (f32(3, 4), [("p", i64(1, 0, 0, 0))], {"mode": "circular"}, r"'mode' must be one of constant, reflect, edge, wrap"),
    (f32(3, 4), [("p", i64(1, 1))], {}, r"pads \[1, 1\] must have 2 x 2 entries"),
    (f32(3, 4), [("p", i64(-2, 0, -2, 0))], {}, r"crop more than dimension 0"),
    (np.zeros((2, 2), np.uint8), [("p", i64(1, 1, 1, 1)), ("v", np.array(-1, np.int32))], {},
     r"'value' value -1 is out of range for uint8"),
    (np.zeros((2, 2), np.int32), [("p", i64(1, 1, 1, 1)), ("v", np.array(0.5, np.float32))], {},
     r"'value' must be an integer for dtype int32"),
])
def test_pad_errors(x, consts, attrs, match):
    raises(one_node_graph("pad", [("x", x)], consts, **attrs), match=match)


# ---------------------------------------------------------------- einsum

@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),  # explicit
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit: output ik
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),  # batched matmul
    ("ij->ji", [(3, 5)]),  # transpose
    ("ba", [(3, 5)]),  # implicit transpose: output letters sorted
    ("ii", [(4, 4)]),  # trace
    ("...ij, ...jk -> ...ik", [(2, 3, 4), (4, 2)]),  # ellipsis, spaces
])
def test_einsum(eq, shapes):
    xs = [f32(*s) for s in shapes]
    got = run_case("einsum", [(f"x{k}", x) for k, x in enumerate(xs)], equation=eq)
    want = np.einsum(eq.replace(" ", ""), *(x.astype(np.float64) for x in xs))
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_int32_three_operands():
    a, b, c = (R.integers(-5, 5, s).astype(np.int32) for s in [(2, 3), (3, 4), (4,)])
    got = run_case("einsum", [("a", a), ("b", b)], [("c", c)], equation="ij,jk,k->i")
    same(got, np.einsum("ij,jk,k->i", a, b, c))


@pytest.mark.parametrize("xs,eq,match", [
    ([f32(3, 4), f32(5, 6)], "ij,jk->ik", r"equation 'ij,jk->ik' does not fit inputs 'x0' float32\[3, 4\], "
                                           r"'x1' float32\[5, 6\]"),
    ([f32(3, 4)], "ij,jk->ik", r"names 2 operands, got 1"),
    ([np.ones((2, 2), bool)], "ij->ji", r"einsum of bool is not supported"),
    ([f32(3, 4)], "i$->i", r"characters other than"),
    ([f32(3, 4)], 5, r"'equation' must be a non-empty string"),
])
def test_einsum_errors(xs, eq, match):
    raises(one_node_graph("einsum", [(f"x{k}", x) for k, x in enumerate(xs)], equation=eq), match=match)


# ---------------------------------------------------------------- shape

@pytest.mark.parametrize("attrs,want", [({}, [2, 3, 4, 5]), ({"start": -2}, [4, 5]),
                                        ({"start": 1, "end": -1}, [3, 4]), ({"start": -9, "end": 99}, [2, 3, 4, 5]),
                                        ({"start": 3, "end": 1}, [])])
def test_shape(attrs, want):
    x = f32(2, 3, 4, 5)
    same(run_case("shape", [("x", x)], **attrs), np.array(want, np.int64))


def test_shape_feeds_slice_ends_through_folding():
    """x -> shape[1:] -> ends of a slice on y: fold evaluates the shape, so the slice's
    static input is a compile-time constant even without general constant folding."""
    x, y = f32(3, 2), f32(5, 4, 6)
    g = build([("shape", ["x"], ["sx"], {"start": 0}),
               ("slice", ["y", "s", "sx", "a"], ["z"], {})],
              [("x", x), ("y", y)], [("s", i64(1, 0)), ("a", i64(-1, 0))])
    for fold in (True, False):
        same(run_graph(g, {"x": x, "y": y}, disabled=frozenset() if fold else frozenset({"fold"}))["z"], y[0:2, :, 1:3])


def test_shape_errors():
    raises(one_node_graph("shape", [("x", f32(2))], start="0"), match=r"'start' must be a (64-bit )?integer")


# ---------------------------------------------------------------- constant_of_shape

@pytest.mark.parametrize("shape,attrs,want_dtype,fold", [
    ([2, 3], {}, np.float32, True),  # defaults: float32 0.0
    ([4], {"value": 7, "dtype": "int32"}, np.int32, False),  # not folded: a launch with no inputs
    ([2, 2], {"value": True, "dtype": "bool"}, np.bool_, False),
    ([3, 1], {"value": -3, "dtype": "int64"}, np.int64, False),
    ([2], {"value": 0.5, "dtype": "bfloat16"}, ml_dtypes.bfloat16, False),
    ([], {"value": 2.0, "dtype": "uint8"}, np.uint8, True),  # integral float for an int dtype, scalar shape
])
def test_constant_of_shape(shape, attrs, want_dtype, fold):
    g = build([("constant_of_shape", ["s"], ["y"], attrs)], consts=[("s", np.array(shape, np.int64))])
    got = run_graph(g, {}, disabled=frozenset() if fold else frozenset({"fold"}))["y"]
    same(got, np.full(shape, attrs.get("value", 0.0)).astype(want_dtype))


@pytest.mark.parametrize("shape,attrs,match", [
    ([2], {"dtype": "complex64"}, r"'dtype' must be one of float32"),
    ([2], {"value": 0.5, "dtype": "int32"}, r"'value' must be an integer for dtype int32"),
    ([2], {"value": 2**40, "dtype": "int64"}, r"out of range for int64 \(int64 is stored as int32\)"),
    ([2], {"value": "x"}, r"'value' must be a number"),
    ([2, -1], {}, r"'shape' entries must be >= 0"),
])
def test_constant_of_shape_errors(shape, attrs, match):
    g = build([("constant_of_shape", ["s"], ["y"], attrs)], consts=[("s", np.array(shape, np.int64))])
    raises(g, match=match, node="n0")


# ---------------------------------------------------------------- range

@pytest.mark.parametrize("attrs,want", [
    ({"start": 0, "limit": 7, "delta": 2}, np.arange(0, 7, 2, dtype=np.int64)),  # all integers: int64
    ({"start": 1, "limit": 0.0, "delta": -0.25}, np.arange(1, 0, -0.25, dtype=np.float32)),  # a float: float32
    ({"start": 5, "limit": 9, "delta": 1, "dtype": "uint8"}, np.arange(5, 9, dtype=np.uint8)),
    ({"start": 3, "limit": 3, "delta": 1, "dtype": "int32"}, np.zeros(0, np.int32)),
])
def test_range_from_attributes(attrs, want):
    """A model.json range takes start/limit/delta as attributes; as a launch (folding
    off) and folded, the same numbers."""
    for disabled in (frozenset({"fold"}), frozenset()):
        same(run_graph(build([("range", [], ["y"], attrs), ("identity", ["y"], ["z"], {})]), {},
                       disabled=disabled)["z"], want)


@pytest.mark.parametrize("attrs,match", [
    ({"start": 0, "limit": 7}, r"'delta' required"),
    ({"start": 0, "limit": 7, "delta": 1, "dtype": "bool"}, r"dtype 'bool' must be numeric"),
    ({"start": 0, "limit": 7, "delta": 0.5, "dtype": "int32"}, r"'delta' must be an integer for dtype int32"),
    ({"start": 0, "limit": 7, "delta": [1, 2]}, r"'delta' must be a scalar"),
])
def test_range_errors(attrs, match):
    raises(build([("range", [], ["y"], attrs)]), match=match, node="n0")
