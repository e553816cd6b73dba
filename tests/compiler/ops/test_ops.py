"""Every op and attribute branch, through a real plan (compile -> codec -> executor),
against the independent numpy code in numpy_ref."""

import ml_dtypes
import numpy as np
import pytest

import numpy_ref as ref
from conftest import compile_and_load, one_node_graph

R = np.random.default_rng(1234)


def f32(*shape, lo=None):
    a = R.standard_normal(shape).astype(np.float32)
    return np.abs(a) + lo if lo is not None else a


def run_case(op, inputs, consts=(), **attrs):
    g = one_node_graph(op, inputs, consts, **attrs)
    _, sess = compile_and_load(g)
    return sess.run(dict(inputs))["y0"]


def close(got, want, rtol=1e-5, atol=1e-6):
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 5), (3, 1))])
def test_binary_float(op, shapes):
    a, b = f32(*shapes[0]), f32(*shapes[1])
    if op == "div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    close(run_case(op, [("a", a), ("b", b)]), ref.binary(op, a, b))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_int32_with_constant(op):
    a = R.integers(-50, 50, (2, 5)).astype(np.int32)
    b = R.integers(1, 7, (5,)).astype(np.int32) * np.array([1, -1, 1, -1, 1], np.int32)
    got = run_case(op, [("a", a)], [("b", b)])
    np.testing.assert_array_equal(got, ref.binary(op, a, b))  # div truncates toward zero


@pytest.mark.parametrize("op", ["relu", "sigmoid", "tanh", "erf", "exp", "sqrt", "identity"])
def test_unary(op):
    x = f32(3, 7, lo=0.01) if op == "sqrt" else f32(3, 7)
    close(run_case(op, [("x", x)]), ref.unary(op, x), rtol=2e-6, atol=1e-6)


def test_relu_int8():
    x = R.integers(-100, 100, (4, 9)).astype(np.int8)
    np.testing.assert_array_equal(run_case("relu", [("x", x)]), np.maximum(x, 0))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = f32(4, 8) * 3
    close(run_case("gelu", [("x", x)], approximate=approximate), ref.unary("gelu", x, approximate), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 3)),
                                    ((2, 3, 4), (4,))])
def test_matmul(shapes):
    a, b = f32(*shapes[0]), f32(*shapes[1])
    close(run_case("matmul", [("a", a), ("b", b)]), np.matmul(a.astype(np.float64), b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,bias_shape", [
    (0, 0, 1.0, 1.0, (5,)), (1, 0, 1.0, 1.0, (3, 5)), (0, 1, 0.5, 2.0, (1, 5)), (1, 1, 1.0, 1.0, None)])
def test_gemm(trans_a, trans_b, alpha, beta, bias_shape):
    a = f32(4, 3) if trans_a else f32(3, 4)
    b = f32(5, 4) if trans_b else f32(4, 5)
    consts = [("b", b)] + ([("c", f32(*bias_shape))] if bias_shape else [])
    got = run_case("gemm", [("a", a)], consts, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta)
    want = ref.gemm(a, b, consts[1][1] if bias_shape else None, alpha, beta, trans_a, trans_b)
    close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(axis):
    x = f32(3, 5, 4) * 4
    close(run_case("softmax", [("x", x)], axis=axis), ref.softmax(x, axis), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("axis,bias", [(-1, True), (1, True), (-1, False)])
def test_layernorm(axis, bias):
    x = f32(2, 3, 8) * 2 + 1
    norm = x.shape[axis % 3:]
    consts = [("s", f32(*norm))] + ([("b", f32(*norm))] if bias else [])
    got = run_case("layernorm", [("x", x)], consts, axis=axis, epsilon=1e-3)
    close(got, ref.layernorm(x, *(c for _, c in consts), axis=axis, epsilon=1e-3), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 6)])
def test_batchnorm(shape):
    c = shape[1]
    x = f32(*shape)
    consts = [("s", f32(c)), ("b", f32(c)), ("m", f32(c)), ("v", f32(c, lo=0.5))]
    got = run_case("batchnorm", [("x", x)], consts, epsilon=1e-4)
    close(got, ref.batchnorm(x, *(a for _, a in consts), epsilon=1e-4), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs,wshape,bias", [
    ({}, (4, 3, 3, 3), False),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, (4, 3, 3, 3), True),
    ({"pads": [0, 1, 2, 0], "dilations": [2, 1]}, (5, 3, 3, 2), True),
    ({"group": 3, "pads": [1, 1, 1, 1]}, (6, 1, 3, 3), True),
    ({"strides": [1, 2]}, (2, 3, 1, 1), False),
])
def test_conv2d(attrs, wshape, bias):
    x = f32(2, 3, 9, 8)
    consts = [("w", f32(*wshape))] + ([("b", f32(wshape[0]))] if bias else [])
    got = run_case("conv2d", [("x", x)], consts, **attrs)
    close(got, ref.conv2d(x, *(a for _, a in consts), **{k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}),
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]},
])
def test_maxpool(attrs):
    x = f32(2, 3, 7, 6)
    close(run_case("maxpool", [("x", x)], **attrs), ref.maxpool(x, **attrs))


def test_maxpool_int32_padding_never_wins():
    x = -R.integers(1, 100, (1, 2, 5, 5)).astype(np.int32)  # all negative: a zero pad would win
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    np.testing.assert_array_equal(run_case("maxpool", [("x", x)], **attrs), ref.maxpool(x, **attrs))


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 1, 0]},
])
def test_avgpool(attrs):
    x = f32(2, 3, 7, 6)
    close(run_case("avgpool", [("x", x)], **attrs), ref.avgpool(x, **attrs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 4, 6)])
def test_global_avgpool(shape):
    x = f32(*shape)
    close(run_case("global_avgpool", [("x", x)]), ref.global_avgpool(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [[4, -1], [0, 3, -1], [-1], [2, 0, 2, 5]])
def test_reshape(shape):
    x = f32(2, 3, 10)
    np.testing.assert_array_equal(run_case("reshape", [("x", x)], shape=shape), ref.reshape(x, shape))


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_flatten(axis):
    x = f32(2, 3, 4)
    np.testing.assert_array_equal(run_case("flatten", [("x", x)], axis=axis), ref.flatten(x, axis))


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose(perm):
    x = f32(2, 3, 4)
    attrs = {} if perm is None else {"perm": perm}
    np.testing.assert_array_equal(run_case("transpose", [("x", x)], **attrs), np.transpose(x, perm))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    a, b, c = f32(2, 3, 4), f32(2, 3, 4), f32(2, 3, 4)
    got = run_case("concat", [("a", a), ("b", b)], [("c", c)], axis=axis)
    np.testing.assert_array_equal(got, np.concatenate([a, b, c], axis=axis))


@pytest.mark.parametrize("dtype,rtol", [(np.float16, 2e-3), (ml_dtypes.bfloat16, 1.6e-2)])
def test_half_precision(dtype, rtol):
    x = f32(3, 7).astype(dtype)
    s = f32(7).astype(dtype)
    got = run_case("layernorm", [("x", x)], [("s", s)])
    assert got.dtype == np.dtype(dtype)
    close(got, ref.layernorm(x.astype(np.float32), s.astype(np.float32)), rtol=rtol, atol=rtol)
    got = run_case("gelu", [("x", x)])
    close(got, ref.unary("gelu", x.astype(np.float32)), rtol=rtol, atol=rtol)
