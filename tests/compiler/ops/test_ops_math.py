"""compiler/ops/math_ops.py: every op and attribute branch, through a real plan
(compile -> codec -> executor), against independent numpy written here from the ONNX
operator definitions. Bad inputs must raise errors that name the node."""

import math

import ml_dtypes
import numpy as np
import pytest

from aotplan.core import dtypes
from aotplan.core.errors import ModelError, ShapeError
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
from conftest import compile_and_load, one_node_graph

R = np.random.default_rng(4321)
BF16 = ml_dtypes.bfloat16


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def ints(lo, hi, shape, dt=np.int32):
    return R.integers(lo, hi, shape).astype(dt)


def run_graph(g, feeds):
    _, sess = compile_and_load(g)
    return sess.run(feeds)["y0"]


def run_case(op, inputs, consts=(), **attrs):
    return run_graph(one_node_graph(op, inputs, consts, **attrs), dict(inputs))


def graph_with(op, inputs, input_names, consts=(), **attrs):
    """One node whose input list is given explicitly ("" = an omitted optional input)."""
    ins = tuple(TensorInfo(n, dtypes.dtype_name(a.dtype), a.shape) for n, a in inputs)
    cs = tuple(Constant(n, dtypes.dtype_name(a.dtype), a.shape, a) for n, a in consts)
    return Graph("t", ins, ("y0",), (Node("n", op, tuple(input_names), ("y0",), freeze(attrs)),), cs)


def close(got, want, dtype=None, rtol=1e-5, atol=1e-6):
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def exact(got, want, dtype):
    want = np.asarray(want)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def wrap(v, dt):
    """A Python int wrapped into integer dtype `dt` (two's complement)."""
    bits = np.iinfo(dt).bits
    v %= 1 << bits
    if np.iinfo(dt).min < 0 and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def elementwise(fn, *arrays, dt):
    """fn applied to Python scalars over the broadcast of `arrays`."""
    bs = np.broadcast_arrays(*arrays)
    out = [fn(*(a.item() for a in vals)) for vals in zip(*(b.reshape(-1) for b in bs))]
    return np.array(out, dt).reshape(bs[0].shape)


# ---------------------------------------------------------------- sum

@pytest.mark.parametrize("case", ["one", "three_broadcast", "int32_const"])
def test_sum(case):
    if case == "one":
        a = f32(3, 4)
        exact(run_case("sum", [("a", a)]), a, np.float32)
    elif case == "three_broadcast":
        a, b, c = f32(2, 1, 4), f32(3, 1), f32(4)
        want = a.astype(np.float64) + b.astype(np.float64) + c.astype(np.float64)
        close(run_case("sum", [("a", a), ("b", b), ("c", c)]), want, np.float32)
    else:
        a, b = ints(-100, 100, (2, 5)), ints(-100, 100, (5,))
        exact(run_case("sum", [("a", a)], [("b", b)]), a.astype(np.int64) + b, np.int32)


# ---------------------------------------------------------------- pow

def test_pow_float_broadcast():
    b = np.abs(f32(3, 4)) + 0.1
    e = f32(4)
    close(run_case("pow", [("b", b), ("e", e)]), np.power(b.astype(np.float64), e), np.float32, rtol=1e-5)


def test_pow_float_base_int_exponent():
    b = f32(2, 5)
    e = np.array([0, 1, 2, 3, -2], np.int32)  # negative bases with integer powers stay real
    close(run_case("pow", [("b", b)], [("e", e)]), np.power(b.astype(np.float64), e.astype(np.float64)),
          np.float32, rtol=1e-5)


def test_pow_float16_base_float32_exponent():
    b = (np.abs(f32(3, 4)) + 0.5).astype(np.float16)
    e = f32(3, 1)
    e16 = e.astype(np.float16)  # ONNX: the exponent takes the base's type
    want = np.power(b.astype(np.float64), e16.astype(np.float64))
    close(run_case("pow", [("b", b), ("e", e)]), want, np.float16, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("bdt,edt", [(np.int32, np.int32), (np.int8, np.int64), (np.uint8, np.int32)])
def test_pow_int_exact(bdt, edt):
    lo = 0 if bdt == np.uint8 else -5
    b = np.array([[2, 3, -2, 1, -1, 7, 5, 0, 4, -3]], np.int64).clip(lo, None).astype(bdt)
    e = np.array([[0, 1, 3, -4, -3, 11, 2, 5, -1, 9], [30, 19, 7, 2, -2, 4, 1, 0, 3, 31]], edt)
    if bdt == np.uint8:
        e = np.abs(e)

    def ref(x, y):  # the real power, truncated toward zero, wrapped into the base type
        return wrap(math.trunc(x ** y) if y < 0 else x ** y, bdt)

    exact(run_case("pow", [("b", b), ("e", e)]), elementwise(ref, b, e, dt=bdt), bdt)


def test_pow_int_base_float_exponent():
    b = np.array([2, 3, 5, 7, 10, -3, 6], np.int32)
    e = np.array([2.0, 3.0, 0.5, 1.5, -1.0, 3.0, 0.0], np.float32)
    want = elementwise(lambda x, y: math.trunc(math.pow(x, y)), b, e, dt=np.int32)
    exact(run_case("pow", [("b", b), ("e", e)]), want, np.int32)


# ---------------------------------------------------------------- unary

@pytest.mark.parametrize("op", ["reciprocal", "neg", "log", "abs"])
def test_unary_float(op):
    x = f32(3, 7)
    if op in ("log", "reciprocal"):
        x = np.abs(x) + 0.05
    x64 = x.astype(np.float64)
    want = {"reciprocal": lambda: 1.0 / x64, "neg": lambda: -x64, "log": lambda: np.log(x64),
            "abs": lambda: np.abs(x64)}[op]()
    close(run_case(op, [("x", x)]), want, np.float32, rtol=2e-6)


@pytest.mark.parametrize("op,dt", [("neg", np.int8), ("abs", np.int32), ("abs", np.uint8), ("neg", np.int64)])
def test_unary_int(op, dt):
    x = ints(-100 if dt != np.uint8 else 0, 100 if dt != np.uint8 else 256, (4, 6), dt)
    want = np.array([[-int(v) if op == "neg" else abs(int(v)) for v in row] for row in x], dt)
    exact(run_case(op, [("x", x)]), want, dt)


@pytest.mark.parametrize("op", ["log", "reciprocal"])
def test_unary_float16(op):
    x = (np.abs(f32(5, 6)) + 0.1).astype(np.float16)
    x64 = x.astype(np.float64)
    want = np.log(x64) if op == "log" else 1.0 / x64
    close(run_case(op, [("x", x)]), want, np.float16, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- hard_sigmoid / hard_swish

@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.5, "beta": 0.25}])
def test_hard_sigmoid(attrs):
    x = f32(4, 8) * 4
    a, b = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
    want = np.maximum(0.0, np.minimum(1.0, a * x.astype(np.float64) + b))
    close(run_case("hard_sigmoid", [("x", x)], **attrs), want, np.float32)


@pytest.mark.parametrize("dt,tol", [(np.float32, 1e-6), (np.float16, 2e-3), (BF16, 1.6e-2)])
def test_hard_swish(dt, tol):
    x = (f32(4, 8) * 5).astype(dt)
    x64 = x.astype(np.float64)
    want = x64 * np.maximum(0.0, np.minimum(1.0, x64 / 6.0 + 0.5))
    close(run_case("hard_swish", [("x", x)]), want, dt, rtol=tol, atol=tol)


# ---------------------------------------------------------------- where / equal

def test_where_float_broadcast():
    c = R.random((2, 1, 4)) > 0.5
    x, y = f32(3, 1), f32(2, 3, 4)
    got = run_case("where", [("c", c), ("x", x), ("y", y)])
    want = np.array([[[x[j, 0] if c[i, 0, k] else y[i, j, k] for k in range(4)] for j in range(3)] for i in range(2)],
                    np.float32)
    exact(got, want, np.float32)


def test_where_int32_with_constant():
    c = R.random((3, 5)) > 0.5
    x, y = ints(-9, 9, (3, 5)), ints(-9, 9, (1,))
    got = run_case("where", [("c", c), ("x", x)], [("y", y)])
    exact(got, [[x[i, j] if c[i, j] else y[0] for j in range(5)] for i in range(3)], np.int32)


@pytest.mark.parametrize("dt", [np.float32, np.int32, np.bool_])
def test_equal(dt):
    if dt == np.bool_:
        a, b = R.random((3, 4)) > 0.5, R.random((4,)) > 0.5
    else:
        a, b = ints(0, 3, (3, 4)).astype(dt), ints(0, 3, (4,)).astype(dt)
    want = [[bool(a[i, j]) == bool(b[j]) if dt == np.bool_ else int(a[i, j]) == int(b[j]) for j in range(4)]
            for i in range(3)]
    exact(run_case("equal", [("a", a), ("b", b)]), want, np.bool_)


# ---------------------------------------------------------------- cast

CAST_X = np.array([-2.75, -1.5, -0.25, 0.0, 0.5, 1.0, 2.99, 100.4], np.float32)


@pytest.mark.parametrize("src,to", [
    ("float32", "int32"), ("float32", "int64"), ("float32", "int8"), ("float32", "bool"), ("bool", "float32"),
    ("int32", "float16"), ("float32", "bfloat16"), ("int32", "int8"), ("uint8", "float32"),
])
def test_cast(src, to):
    if src == "float32":
        x = CAST_X
    elif src == "bool":
        x = np.array([True, False, True, True])
    elif src == "uint8":
        x = np.array([0, 1, 128, 255], np.uint8)
    else:
        x = np.array([-128, -7, 0, 5, 127, 1000], np.int32) if to == "float16" else np.array([-128, -7, 0, 127], np.int32)
    if to == "bool":
        want = [v != 0 for v in x.tolist()]
    elif to in ("int32", "int64", "int8"):
        want = [math.trunc(v) for v in x.tolist()]  # toward zero
    else:
        want = np.array([float(v) for v in x.tolist()]).astype(dtypes.np_dtype(to))
    exact(run_case("cast", [("x", x)], to=to), np.array(want, dtypes.np_dtype(to)), dtypes.np_dtype(to))


# ---------------------------------------------------------------- clip

def _clip_ref(x, lo, hi):
    out = x.astype(np.float64)
    if lo is not None:
        out = np.where(out < lo, lo, out)
    if hi is not None:
        out = np.where(out > hi, hi, out)  # min > max: everything becomes max
    return out


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.75), (-0.25, None), (None, 0.3), (None, None), (0.5, -0.5)])
def test_clip_float(lo, hi):
    x = f32(4, 6)
    names = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
    consts = [(n, np.array(v, np.float32)) for n, v in (("lo", lo), ("hi", hi)) if v is not None]
    while names[-1] == "":
        names.pop()  # a trailing omitted input may be left off entirely
    got = run_graph(graph_with("clip", [("x", x)], names, consts), {"x": x})
    exact(got, _clip_ref(x, lo, hi).astype(np.float32), np.float32)


def test_clip_int32_and_float16():
    x = ints(-50, 50, (3, 7))
    g = graph_with("clip", [("x", x)], ["x", "lo", "hi"], [("lo", np.array(-10, np.int32)), ("hi", np.array(20, np.int32))])
    exact(run_graph(g, {"x": x}), _clip_ref(x, -10, 20).astype(np.int32), np.int32)
    h = f32(3, 7).astype(np.float16)
    g = graph_with("clip", [("x", h)], ["x", "", "hi"], [("hi", np.array(0.25, np.float16))])
    exact(run_graph(g, {"x": h}), _clip_ref(h, None, 0.25).astype(np.float16), np.float16)


def test_clip_int64_bound_beyond_int32_storage():
    x = np.array([-(2 ** 31), -5, 0, 7, 2 ** 31 - 1], np.int64)
    g = graph_with("clip", [("x", x)], ["x", "lo", "hi"],
                   [("lo", np.array(-3, np.int64)), ("hi", np.array(2 ** 63 - 1, np.int64))])
    exact(run_graph(g, {"x": x}), _clip_ref(x, -3, None).astype(np.int64), np.int64)


# ---------------------------------------------------------------- reductions

def _reduce_ref(op, x, axes, keepdims, noop=0):
    if not axes:
        if noop:
            return x
        axes = tuple(range(x.ndim))
    axes = tuple(sorted(a % x.ndim for a in axes))
    xi = x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float64)
    out = xi
    for a in reversed(axes):
        out = out.sum(axis=a, keepdims=True)
    if op == "reduce_mean":
        n = math.prod(x.shape[a] for a in axes)
        out = np.sign(out) * (np.abs(out) // n) if x.dtype.kind in "iu" else out / n
    if not keepdims:
        out = out.reshape([d for i, d in enumerate(out.shape) if i not in axes])
    return out


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean"])
@pytest.mark.parametrize("axes,keepdims", [([1], None), ([-1, 0], 0), (None, None)])
def test_reduce_float(op, axes, keepdims):
    x = f32(2, 3, 4)
    consts = [("axes", np.array(axes, np.int64))] if axes is not None else []
    attrs = {} if keepdims is None else {"keepdims": keepdims}
    got = run_case(op, [("x", x)], consts, **attrs)
    close(got, _reduce_ref(op, x, axes, 1 if keepdims is None else keepdims), np.float32, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean"])
def test_reduce_empty_axes(op):
    x = f32(2, 3)
    empty = [("axes", np.zeros((0,), np.int64))]
    exact(run_case(op, [("x", x)], empty, noop_with_empty_axes=1), x, np.float32)  # identity
    close(run_case(op, [("x", x)], empty, keepdims=0), _reduce_ref(op, x, [], 0), np.float32, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean"])
def test_reduce_int32(op):
    x = ints(-100, 100, (3, 4, 5))
    got = run_case(op, [("x", x)], [("axes", np.array([2, -3], np.int64))], keepdims=0)
    exact(got, _reduce_ref(op, x, [2, -3], 0).astype(np.int32), np.int32)  # mean truncates toward zero


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean"])
def test_reduce_float16(op):
    x = (f32(4, 64) * 3).astype(np.float16)
    got = run_case(op, [("x", x)], [("axes", np.array([1], np.int64))])
    want = _reduce_ref(op, x, [1], 1).astype(np.float16)  # accumulated wide, rounded once
    close(got, want, np.float16, rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------- lrn

def _lrn_ref(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    x64 = x.astype(np.float64)
    c = x.shape[1]
    out = np.empty_like(x64)
    for ch in range(c):
        lo = max(0, ch - (size - 1) // 2)
        hi = min(c - 1, ch + math.ceil((size - 1) / 2))
        sq = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
        out[:, ch] = x64[:, ch] / (bias + alpha / size * sq) ** beta
    return out


@pytest.mark.parametrize("shape,attrs,dt,tol", [
    ((2, 5, 3, 4), {"size": 3}, np.float32, 1e-5),
    ((2, 6, 3, 3), {"size": 4, "alpha": 0.5, "beta": 0.6, "bias": 2.0}, np.float32, 1e-5),
    ((1, 4, 7), {"size": 1, "alpha": 0.3, "beta": 1.0, "bias": 0.5}, np.float32, 1e-5),
    ((2, 5, 3, 4), {"size": 5, "alpha": 0.1}, np.float16, 2e-3),
])
def test_lrn(shape, attrs, dt, tol):
    x = (f32(*shape) * 2).astype(dt)
    close(run_case("lrn", [("x", x)], **attrs), _lrn_ref(x, **attrs), dt, rtol=tol, atol=tol)


# ---------------------------------------------------------------- errors name the node

def _raises(g, *pieces, kind=ShapeError):
    with pytest.raises(kind) as e:
        compile_and_load(g)
    msg = str(e.value)
    assert "'n'" in msg, msg
    for p in pieces:
        assert p in msg, msg


X = f32(2, 3)
I = ints(0, 5, (2, 3))


@pytest.mark.parametrize("g,pieces", [
    (one_node_graph("where", [("c", X > 0), ("x", X), ("y", I)]), ["'x' float32[2, 3]", "'y' int32[2, 3]"]),
    (one_node_graph("where", [("c", I), ("x", X), ("y", X)]), ["'c' int32[2, 3]", "bool"]),
    (one_node_graph("where", [("c", X > 0), ("x", X), ("y", f32(4))]), ["broadcast"]),
    (one_node_graph("sum", [("a", X), ("b", I)]), ["'a' float32[2, 3]", "'b' int32[2, 3]"]),
    (one_node_graph("equal", [("a", X), ("b", I)]), ["'b' int32[2, 3]"]),
    (one_node_graph("pow", [("b", X > 0), ("e", X)]), ["'b' bool[2, 3]"]),
    (one_node_graph("log", [("x", I)]), ["'x' int32[2, 3]"]),
    (one_node_graph("neg", [("x", I.astype(np.uint8))]), ["'x' uint8[2, 3]"]),
    (one_node_graph("cast", [("x", X)], to="complex64"), ["'to'", "complex64"]),
    (one_node_graph("cast", [("x", X)]), ["'to'", "None"]),
    (one_node_graph("reduce_sum", [("x", X)], [("axes", np.array([2], np.int64))]), ["axes entry 2", "rank 2"]),
    (one_node_graph("reduce_mean", [("x", X)], [("axes", np.array([1, -1], np.int64))]), ["twice"]),
    (one_node_graph("reduce_sum", [("x", X)], keepdims=2), ["'keepdims'", "0 or 1"]),
    (one_node_graph("reduce_sum", [("x", X)], noop_with_empty_axes=True), ["'noop_with_empty_axes'"]),
    (one_node_graph("reduce_sum", [("x", X)], [("axes", np.array(1, np.int64))]),
     ["input 'axes' (axes) must be a 1-D integer tensor, got int64[]"]),
    (one_node_graph("clip", [("x", I)], [("lo", np.array(0.5, np.float32))]), ["'min'", "integer", "int32"]),
    (one_node_graph("clip", [("x", I.astype(np.uint8))], [("lo", np.array(-1, np.int32))]), ["'min' -1", "uint8"]),
    (one_node_graph("clip", [("x", X)], [("lo", np.zeros(2, np.float32))]), ["'min'", "scalar"]),
    (one_node_graph("lrn", [("x", f32(1, 3, 2, 2))]), ["'size'", "required"]),
    (one_node_graph("lrn", [("x", f32(1, 3, 2, 2))], size=0), ["'size'", ">= 1"]),
    (one_node_graph("lrn", [("x", X)], size=3), ["'x' float32[2, 3]", "rank >= 3"]),
    (one_node_graph("hard_sigmoid", [("x", X)], alpha="big"), ["'alpha'"]),
])
def test_bad_input_names_the_node(g, pieces):
    _raises(g, *pieces)


def test_clip_bound_from_graph_input_is_rejected():
    g = one_node_graph("clip", [("x", X), ("lo", np.array(0.0, np.float32))])
    _raises(g, "'lo'", "compile time", kind=ModelError)
    g = one_node_graph("reduce_sum", [("x", X), ("axes", np.array([0], np.int64))])
    _raises(g, "'axes'", "compile time", kind=ModelError)


def test_unknown_attribute_is_rejected():
    _raises(one_node_graph("reduce_sum", [("x", X)], keepdim=0), "'keepdim'", kind=ModelError)
