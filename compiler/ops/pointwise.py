"""More elementwise ops (ONNX semantics): parametrized activations, rounding, trigonometry,
variadic max/min, comparisons and logic.

leaky_relu, prelu, elu, selu, celu, softplus, softsign, thresholded_relu, shrink, floor,
ceil, round, sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, sign,
is_nan, is_inf, max, min, mean, greater, less, greater_equal, less_equal, not, and, or,
xor, bitwise_and, bitwise_or, bitwise_xor, bitwise_not, bit_shift, swish, swiglu.

Float math in float16/bfloat16 is computed in float32 and cast back (as the other op
modules do). Round rounds half to even (ONNX). max and min propagate NaN (numpy's
maximum/minimum, as ONNX's reference). prelu broadcasts its slope to x
("unidirectional" broadcasting: the output has x's shape); with `legacy_slope` (ONNX
PRelu before opset 7, which defines no broadcasting) the slope must hold one element or
have x's shape.
"""

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes
from compiler.ops.precision import widen
from compiler.ops.registry import (
    broadcast_shape, fail, flag_attr, float_attr, fmt, register, require_float, same_dtype,
)

NUMERIC_DTYPES = dtypes.FLOAT_DTYPES + dtypes.INT_DTYPES


def _require_numeric(node, t):
    if t.dtype not in NUMERIC_DTYPES:
        fail(node, f"input {fmt(t)} must be numeric ({', '.join(NUMERIC_DTYPES)})")


# ---------------------------------------------------------------- float unary

def _float_unary_infer(node, ins):
    require_float(node, ins[0])
    return [(ins[0].dtype, ins[0].shape)]


def _float_unary(fn):
    return lambda node, x: (fn(node, widen(x)).astype(x.dtype),)


def _with_attrs(**defaults):
    """A float-unary shape rule that also checks the float attributes `defaults` names."""
    def infer(node, ins):
        for key, default in defaults.items():
            float_attr(node, key, default)
        return _float_unary_infer(node, ins)
    return infer


SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _leaky_relu(node, x):
    return jnp.where(x >= 0, x, float(node.attr("alpha", 0.01)) * x)


def _elu(node, x):
    return jnp.where(x > 0, x, float(node.attr("alpha", 1.0)) * jnp.expm1(x))


def _selu(node, x):
    alpha, gamma = float(node.attr("alpha", SELU_ALPHA)), float(node.attr("gamma", SELU_GAMMA))
    return gamma * jnp.where(x > 0, x, alpha * jnp.expm1(x))


# zero-preserving (compiler/ops/registry.py): alpha * 0 = 0, alpha * (exp(0) - 1) = 0, floor, ceil, round and
# sin of 0 are 0; softplus(0) = log 2 and cos(0) = 1 are not, so their padding is masked
register("leaky_relu", (1, 1), ("alpha",), elementwise=True, zero_preserving=True)((
    _with_attrs(alpha=0.01), _float_unary(_leaky_relu)))
register("elu", (1, 1), ("alpha",), elementwise=True, zero_preserving=True)((
    _with_attrs(alpha=1.0), _float_unary(_elu)))
register("selu", (1, 1), ("alpha", "gamma"), elementwise=True, zero_preserving=True)((
    _with_attrs(alpha=SELU_ALPHA, gamma=SELU_GAMMA), _float_unary(_selu)))
register("softplus", (1, 1), elementwise=True)((
    _float_unary_infer, _float_unary(lambda node, x: jax.nn.softplus(x))))
register("mish", (1, 1))((_float_unary_infer, _float_unary(lambda node, x: x * jnp.tanh(jax.nn.softplus(x)))))
register("floor", (1, 1), elementwise=True, zero_preserving=True)((_float_unary_infer, lambda node, x: (jnp.floor(x),)))
register("ceil", (1, 1), elementwise=True, zero_preserving=True)((_float_unary_infer, lambda node, x: (jnp.ceil(x),)))
register("round", (1, 1), elementwise=True, zero_preserving=True)((
    _float_unary_infer, lambda node, x: (jnp.round(x),)))  # half to even
register("sin", (1, 1), elementwise=True, zero_preserving=True)((
    _float_unary_infer, _float_unary(lambda node, x: jnp.sin(x))))
register("cos", (1, 1), elementwise=True)((_float_unary_infer, _float_unary(lambda node, x: jnp.cos(x))))
for _name, _fn in (("tan", jnp.tan), ("asin", jnp.arcsin), ("acos", jnp.arccos), ("atan", jnp.arctan),
                   ("sinh", jnp.sinh), ("cosh", jnp.cosh), ("asinh", jnp.arcsinh), ("acosh", jnp.arccosh),
                   ("atanh", jnp.arctanh), ("softsign", lambda x: x / (1 + jnp.abs(x)))):
    register(_name, (1, 1))((_float_unary_infer, _float_unary(lambda node, x, fn=_fn: fn(x))))


def _celu(node, x):
    a = float(node.attr("alpha", 1.0))
    return jnp.maximum(x, 0) + jnp.minimum(0, a * jnp.expm1(x / a))


def _celu_infer(node, ins):
    if float_attr(node, "alpha", 1.0) == 0:
        fail(node, "attribute 'alpha' must not be 0")
    return _float_unary_infer(node, ins)


register("celu", (1, 1), ("alpha",))((_celu_infer, _float_unary(_celu)))
register("thresholded_relu", (1, 1), ("alpha",))((_with_attrs(alpha=1.0), _float_unary(
    lambda node, x: jnp.where(x > float(node.attr("alpha", 1.0)), x, 0))))


def _shrink_infer(node, ins):
    _require_numeric(node, ins[0])
    float_attr(node, "bias", 0.0)
    float_attr(node, "lambd", 0.5, minimum=0.0)
    return [(ins[0].dtype, ins[0].shape)]


def _shrink(node, x):
    """ONNX Shrink: x + bias below -lambd, x - bias above lambd, else 0 (integers: the
    arithmetic in float32, cast back)."""
    lambd, bias = float(node.attr("lambd", 0.5)), float(node.attr("bias", 0.0))
    xf = x if x.dtype == jnp.float64 else x.astype(jnp.float32)
    y = jnp.where(xf < -lambd, xf + bias, jnp.where(xf > lambd, xf - bias, 0))
    return (y.astype(x.dtype),)


register("shrink", (1, 1), ("bias", "lambd"))((_shrink_infer, _shrink))


def _is_infer(node, ins):
    require_float(node, ins[0])
    if node.op == "is_inf":
        flag_attr(node, "detect_negative", 1)
        flag_attr(node, "detect_positive", 1)
    return [("bool", ins[0].shape)]


def _is_inf(node, x):
    inf, none = jnp.isinf(x), jnp.zeros(x.shape, bool)
    neg = inf & (x < 0) if node.attr("detect_negative", 1) else none
    pos = inf & (x > 0) if node.attr("detect_positive", 1) else none
    return (neg | pos,)


register("is_nan", (1, 1))((_is_infer, lambda node, x: (jnp.isnan(x),)))
register("is_inf", (1, 1), ("detect_negative", "detect_positive"))((_is_infer, _is_inf))


def _sign_infer(node, ins):
    _require_numeric(node, ins[0])
    return [(ins[0].dtype, ins[0].shape)]


register("sign", (1, 1), elementwise=True, zero_preserving=True)((  # sign(0) = 0
    _sign_infer, lambda node, x: (jnp.sign(x).astype(x.dtype),)))


# ---------------------------------------------------------------- prelu

def _prelu_infer(node, ins):
    x, slope = ins
    same_dtype(node, ins)
    _require_numeric(node, x)
    if flag_attr(node, "legacy_slope", 0):
        if int(np.prod(slope.shape)) != 1 and slope.shape != x.shape:
            fail(node, f"slope {fmt(slope)} must hold one element or have the shape of x {fmt(x)} "
                       f"(PRelu before opset 7 defines no broadcasting)")
        return [(x.dtype, x.shape)]
    try:
        fits = tuple(np.broadcast_shapes(x.shape, slope.shape)) == x.shape
    except ValueError:
        fits = False
    if not fits:
        fail(node, f"slope {fmt(slope)} does not broadcast to x {fmt(x)} (unidirectional broadcasting)")
    return [(x.dtype, x.shape)]


def _prelu(node, x, slope):
    if slope.shape != x.shape and slope.size == 1:  # legacy: one element, whatever its rank
        slope = slope.reshape(())
    if jnp.issubdtype(x.dtype, jnp.unsignedinteger):  # never negative
        return (x,)
    xf, sf = widen(x), widen(slope)
    return (jnp.where(xf < 0, xf * sf, xf).astype(x.dtype),)


register("prelu", (2, 2), ("legacy_slope",), elementwise=True, zero_preserving=True)((  # slope * 0 = 0
    _prelu_infer, _prelu))


# ---------------------------------------------------------------- max / min

def _variadic_infer(node, ins):
    dt = same_dtype(node, ins)
    _require_numeric(node, ins[0])
    return [(dt, broadcast_shape(node, ins))]


def _variadic(fn):
    def lower(node, *xs):
        shape = jnp.broadcast_shapes(*(x.shape for x in xs))
        y = jnp.broadcast_to(xs[0], shape)
        for x in xs[1:]:
            y = fn(y, x)
        return (y,)
    return lower


# zero-preserving: the max and the min of zeros are 0
register("max", (1, 1 << 16), elementwise=True, zero_preserving=True)((_variadic_infer, _variadic(jnp.maximum)))
register("min", (1, 1 << 16), elementwise=True, zero_preserving=True)((_variadic_infer, _variadic(jnp.minimum)))


def _mean_infer(node, ins):
    dt = same_dtype(node, ins)
    require_float(node, ins[0])
    return [(dt, broadcast_shape(node, ins))]


def _mean(node, *xs):
    shape = jnp.broadcast_shapes(*(x.shape for x in xs))
    y = jnp.broadcast_to(widen(xs[0]), shape)
    for x in xs[1:]:
        y = y + widen(x)
    return ((y / len(xs)).astype(xs[0].dtype),)


register("mean", (1, 1 << 16))((_mean_infer, _mean))


# ---------------------------------------------------------------- comparisons / logic

def _compare_infer(node, ins):
    same_dtype(node, ins)
    _require_numeric(node, ins[0])
    return [("bool", broadcast_shape(node, ins))]


# zero-preserving: 0 > 0 and 0 < 0 are false (0); 0 >= 0 and 0 <= 0 are true, so their padding is masked
register("greater", (2, 2), elementwise=True, zero_preserving=True)((_compare_infer, lambda node, a, b: (a > b,)))
register("less", (2, 2), elementwise=True, zero_preserving=True)((_compare_infer, lambda node, a, b: (a < b,)))
register("greater_equal", (2, 2), elementwise=True)((_compare_infer, lambda node, a, b: (a >= b,)))
register("less_equal", (2, 2), elementwise=True)((_compare_infer, lambda node, a, b: (a <= b,)))


def _logic_infer(node, ins):
    for t in ins:
        if t.dtype != "bool":
            fail(node, f"input {fmt(t)} must be bool")
    return [("bool", broadcast_shape(node, ins))]


# zero-preserving: and, or, xor of false are false (0); not false is true, so its padding is masked
register("not", (1, 1), elementwise=True)((_logic_infer, lambda node, x: (jnp.logical_not(x),)))
register("and", (2, 2), elementwise=True, zero_preserving=True)((
    _logic_infer, lambda node, a, b: (jnp.logical_and(a, b),)))
register("or", (2, 2), elementwise=True, zero_preserving=True)((
    _logic_infer, lambda node, a, b: (jnp.logical_or(a, b),)))
register("xor", (2, 2), elementwise=True, zero_preserving=True)((
    _logic_infer, lambda node, a, b: (jnp.logical_xor(a, b),)))


# ---------------------------------------------------------------- bitwise (integers)

def _bitwise_infer(node, ins):
    same_dtype(node, ins)
    if ins[0].dtype not in dtypes.INT_DTYPES:
        fail(node, f"input {fmt(ins[0])} must be an integer ({', '.join(dtypes.INT_DTYPES)})")
    return [(ins[0].dtype, broadcast_shape(node, ins))]


def _shift_infer(node, ins):
    if node.attr("direction") not in ("LEFT", "RIGHT"):
        fail(node, f"attribute 'direction' must be LEFT or RIGHT, got {node.attr('direction')!r}")
    return _bitwise_infer(node, ins)


def _shift(node, x, y):
    """ONNX BitShift: a right shift of a signed type is arithmetic; a shift by a negative
    amount or by the bit width or more gives what the sign fill alone gives (-1 for a
    right shift of a negative x, else 0). The width is the stored type's: an int64
    shifted left by 32 or more is 0 in its int32 storage (docs/design.md, Dtypes)."""
    bad = (y < 0) | (y >= 8 * x.dtype.itemsize)
    amount = jnp.where(bad, 0, y).astype(x.dtype)
    if node.attr("direction") == "LEFT":
        return (jnp.where(bad, jnp.zeros((), x.dtype), jnp.left_shift(x, amount)),)
    fill = jnp.where(x < 0, -1, 0).astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.signedinteger) else \
        jnp.zeros((), x.dtype)
    return (jnp.where(bad, fill, jnp.right_shift(x, amount)),)


register("bitwise_and", (2, 2))((_bitwise_infer, lambda node, a, b: (jnp.bitwise_and(a, b),)))
register("bitwise_or", (2, 2))((_bitwise_infer, lambda node, a, b: (jnp.bitwise_or(a, b),)))
register("bitwise_xor", (2, 2))((_bitwise_infer, lambda node, a, b: (jnp.bitwise_xor(a, b),)))
register("bitwise_not", (1, 1))((_bitwise_infer, lambda node, x: (jnp.bitwise_not(x),)))
register("bit_shift", (2, 2), ("direction",))((_shift_infer, _shift))


# ---------------------------------------------------------------- swish, swiglu

def _swiglu_infer(node, ins):
    float_attr(node, "alpha", 1.0)
    a, b = ins
    require_float(node, a)
    if (a.dtype, a.shape) != (b.dtype, b.shape):
        fail(node, f"inputs {fmt(a)} and {fmt(b)} must have one dtype and shape (SwiGLU does not broadcast)")
    return [(a.dtype, a.shape)]


def _swish(node, x):
    return x * jax.nn.sigmoid(float(node.attr("alpha", 1.0)) * x)


register("swish", (1, 1), ("alpha",))((_with_attrs(alpha=1.0), _float_unary(_swish)))
register("swiglu", (2, 2), ("alpha",))((_swiglu_infer, lambda node, a, b: (
    (_swish(node, widen(a)) * widen(b)).astype(a.dtype),)))
