"""More elementwise and reduction ops (ONNX semantics).

sum, pow, reciprocal, neg, log, abs, where, equal, cast, clip, hard_sigmoid,
hard_swish, reduce_mean, reduce_sum, lrn.

Float math in float16/bfloat16 (pow, hard_sigmoid, hard_swish, the reductions, lrn) is
computed in float32 and cast back. int64 arrives as int32 (aotplan.core.dtypes), except
when constant folding evaluates a lowering with 64-bit types enabled: the lowerings
below stay generic over the integer width.
"""

import dataclasses
import math

import jax
import jax.scipy.special  # noqa: F401  (logsumexp)
import jax.numpy as jnp
import numpy as np
from jax import lax

from aotplan.core import dtypes
from aotplan.core.graph import freeze
from compiler.ops.precision import widen
from compiler.ops.registry import (
    broadcast_shape, fail, flag_attr, float_attr, fmt, int_attr, int_list, norm_axis, register, require_float, same_dtype,
)

SIGNED_INT_DTYPES = ("int8", "int16", "int32", "int64")
NUMERIC_DTYPES = dtypes.FLOAT_DTYPES + dtypes.INT_DTYPES


def _is_int(x):
    return jnp.issubdtype(x.dtype, jnp.integer)


def _require_numeric(node, t):
    if t.dtype not in NUMERIC_DTYPES:
        fail(node, f"input {fmt(t)} must be numeric ({', '.join(NUMERIC_DTYPES)})")


# ---------------------------------------------------------------- sum / pow

def _sum_infer(node, ins):
    dt = same_dtype(node, ins)
    _require_numeric(node, ins[0])
    return [(dt, broadcast_shape(node, ins))]


def _sum(node, *xs):
    shape = jnp.broadcast_shapes(*(x.shape for x in xs))
    y = jnp.broadcast_to(xs[0], shape)
    for x in xs[1:]:
        y = y + x
    return (y,)


register("sum", (1, 1 << 16), elementwise=True, zero_preserving=True)((_sum_infer, _sum))  # 0 + ... + 0 = 0


def _pow_infer(node, ins):
    base, exp = ins
    if base.dtype not in NUMERIC_DTYPES or exp.dtype not in NUMERIC_DTYPES:
        fail(node, f"base {fmt(base)} and exponent {fmt(exp)} must both be numeric "
                   f"({', '.join(NUMERIC_DTYPES)})")
    return [(base.dtype, broadcast_shape(node, ins))]


def _int_pow(b, e):
    """b ** e for integer b and integer e, exactly (wrapping like C on overflow).

    Negative exponents give what truncating the real result toward zero gives:
    1 for b == 1, +-1 for b == -1, 0 otherwise (0 too for b == 0)."""
    shape = jnp.broadcast_shapes(b.shape, e.shape)
    b, e = jnp.broadcast_to(b, shape), jnp.broadcast_to(e, shape)
    signed_e = jnp.issubdtype(e.dtype, jnp.signedinteger)
    neg = e < 0 if signed_e else jnp.zeros(shape, bool)
    k = jnp.where(neg, jnp.zeros((), e.dtype), e)
    one = jnp.ones((), b.dtype)
    r, p = jnp.broadcast_to(one, shape), b
    for i in range(jnp.iinfo(e.dtype).bits - (1 if signed_e else 0)):
        r = jnp.where(((k >> i) & 1) == 1, r * p, r)
        p = p * p
    if signed_e:
        if jnp.issubdtype(b.dtype, jnp.signedinteger):
            odd = (e & 1) == 1
            at_neg = jnp.where(b == 1, one, jnp.where(b == -one, jnp.where(odd, -one, one), jnp.zeros((), b.dtype)))
        else:
            at_neg = jnp.where(b == 1, one, jnp.zeros((), b.dtype))
        r = jnp.where(neg, at_neg, r)
    return r


def _pow(node, b, e):
    if not _is_int(b):
        # ONNX: the exponent is converted to the base's type.
        y = jnp.power(widen(b), widen(e.astype(b.dtype)))
        return (y.astype(b.dtype),)
    if _is_int(e):
        return (_int_pow(b, e),)
    # integer base, float exponent: integral exponents exactly; others in float32,
    # truncated toward zero (as C's (T)pow(double(b), double(e)) does).
    ef = widen(e)
    ei = ef.astype(jnp.int32)
    integral = (ei.astype(ef.dtype) == ef) & (jnp.abs(ef) < 2.0 ** 31)
    exact = _int_pow(b, jnp.where(integral, ei, 0))
    approx = jnp.power(b.astype(jnp.float32), ef.astype(jnp.float32)).astype(b.dtype)
    return (jnp.where(integral, exact, approx),)


register("pow", (2, 2), elementwise=True)((_pow_infer, _pow))  # 0 ** 0 = 1: masked


# ---------------------------------------------------------------- unary

def _float_unary_infer(node, ins):
    require_float(node, ins[0])
    return [(ins[0].dtype, ins[0].shape)]


def _signed_unary_infer(node, ins):
    x = ins[0]
    if x.dtype not in dtypes.FLOAT_DTYPES + SIGNED_INT_DTYPES:
        fail(node, f"input {fmt(x)} must be a float or signed integer type")
    return [(x.dtype, x.shape)]


def _abs_infer(node, ins):
    _require_numeric(node, ins[0])
    return [(ins[0].dtype, ins[0].shape)]


def _float_unary(fn):
    return lambda node, x: (fn(widen(x)).astype(x.dtype),)


# zero-preserving (compiler/ops/registry.py): -0 and |0| are 0; 1 / 0 = inf and log(0) = -inf are not, so the
# padding of reciprocal and log is masked
register("reciprocal", (1, 1), elementwise=True)((_float_unary_infer, _float_unary(lambda x: 1.0 / x)))
register("log", (1, 1), elementwise=True)((_float_unary_infer, _float_unary(jnp.log)))
register("neg", (1, 1), elementwise=True, zero_preserving=True)((_signed_unary_infer, lambda node, x: (-x,)))
register("abs", (1, 1), elementwise=True, zero_preserving=True)((
    _abs_infer, lambda node, x: (x if jnp.issubdtype(x.dtype, jnp.unsignedinteger) else jnp.abs(x),)))


def _hard_sigmoid_infer(node, ins):
    float_attr(node, "alpha", 0.2), float_attr(node, "beta", 0.5)
    return _float_unary_infer(node, ins)


def _hard_sigmoid(node, x):
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    return (jnp.clip(alpha * widen(x) + beta, 0.0, 1.0).astype(x.dtype),)


def _hard_swish(node, x):
    xf = widen(x)
    return ((xf * jnp.clip(xf / 6.0 + 0.5, 0.0, 1.0)).astype(x.dtype),)


# zero-preserving: hard_swish(0) = 0 * relu6(3) / 6 = 0; hard_sigmoid(0) = beta (0.5), masked
register("hard_sigmoid", (1, 1), ("alpha", "beta"), elementwise=True)((_hard_sigmoid_infer, _hard_sigmoid))
register("hard_swish", (1, 1), elementwise=True, zero_preserving=True)((_float_unary_infer, _hard_swish))


# ---------------------------------------------------------------- where / equal / cast

def _where_infer(node, ins):
    cond, x, y = ins
    if cond.dtype != "bool":
        fail(node, f"condition {fmt(cond)} must be bool")
    if x.dtype != y.dtype:
        fail(node, f"x {fmt(x)} and y {fmt(y)} must share one dtype")
    return [(x.dtype, broadcast_shape(node, ins))]


register("where", (3, 3), elementwise=True)((_where_infer, lambda node, c, x, y: (jnp.where(c, x, y),)))


def _equal_infer(node, ins):
    same_dtype(node, ins)
    return [("bool", broadcast_shape(node, ins))]


register("equal", (2, 2), elementwise=True)((_equal_infer, lambda node, a, b: (a == b,)))  # 0 == 0: true, masked


def _cast_to(node):
    to = node.attr("to")
    if not isinstance(to, str) or to not in dtypes.DTYPES:
        fail(node, f"attribute 'to' must be one of {', '.join(dtypes.DTYPES)}, got {to!r}")
    return to


def _cast_infer(node, ins):
    return [(_cast_to(node), ins[0].shape)]


def _cast(node, x):
    to = _cast_to(node)
    if to == "bool":
        return (x != jnp.zeros((), x.dtype),)
    # int64 is int32 on the device, int64 while folding with 64-bit types enabled.
    target = jax.dtypes.canonicalize_dtype(dtypes.np_dtype(to))
    return (x.astype(target),)  # float -> int truncates toward zero; bool -> 0/1


register("cast", (1, 1), ("to",), elementwise=True, zero_preserving=True)((_cast_infer, _cast))  # 0 in every dtype


def as_cast(node, target):
    """A cast_like (ONNX CastLike: x cast to the dtype of a second input) as the cast it
    is once that dtype is known (the fold pass rewrites it so)."""
    return dataclasses.replace(node, op="cast", inputs=node.inputs[:1], attrs=freeze({"to": target.dtype}))


def _cast_like(node, x, like):
    if like.dtype == jnp.bool_:
        return (x != jnp.zeros((), x.dtype),)
    return (x.astype(like.dtype),)


register("cast_like", (2, 2))((lambda node, ins: [(ins[1].dtype, ins[0].shape)], _cast_like))


# ---------------------------------------------------------------- clip

def _clip_bound(node, key, dt):
    """The bound as a Python number of the right kind, or None when absent."""
    v = node.attr(key)
    if v is None:
        return None
    if isinstance(v, tuple):  # a shape-[1] constant; ONNX wants a scalar, runtimes take [1] too
        if len(v) != 1:
            fail(node, f"{key!r} must be a scalar, got {list(v)!r}")
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fail(node, f"{key!r} must be a number, got {v!r}")
    if dt in dtypes.FLOAT_DTYPES:
        if math.isnan(v):
            fail(node, f"{key!r} must not be NaN")
        return float(v)
    if not isinstance(v, int):
        fail(node, f"{key!r} must be an integer for an input of dtype {dt}, got {v!r}")
    info = np.iinfo(dtypes.np_dtype(dtypes.storage_dtype(dt)))
    if dt == "int64":
        # int64 data lives in the int32 range (range-checked); a wider bound acts like
        # the edge of that range, unless it would push the result out of it.
        if (key == "min" and v > info.max) or (key == "max" and v < info.min):
            fail(node, f"{key!r} {v} is outside the int32 range that int64 is stored as")
        return min(max(v, int(info.min)), int(info.max))
    if not info.min <= v <= info.max:
        fail(node, f"{key!r} {v} is out of range for dtype {dt} ([{info.min}, {info.max}])")
    return v


def _clip_infer(node, ins):
    x = ins[0]
    _require_numeric(node, x)
    _clip_bound(node, "min", x.dtype), _clip_bound(node, "max", x.dtype)
    return [(x.dtype, x.shape)]


def _clip_value(node, key, x):
    """The bound as a scalar of x's dtype (the shape rule has validated it)."""
    v = node.attr(key)
    if v is None:
        return None
    v = v[0] if isinstance(v, tuple) else v
    if _is_int(x):
        info = jnp.iinfo(x.dtype)  # int64 stored as int32: a wider bound is that range's edge
        v = min(max(int(v), int(info.min)), int(info.max))
    return jnp.asarray(v, x.dtype)


def _clip(node, x):
    lo, hi = _clip_value(node, "min", x), _clip_value(node, "max", x)
    # ONNX: min(max(x, min), max); with min > max every value becomes max.
    if lo is not None:
        x = jnp.maximum(x, lo)
    if hi is not None:
        x = jnp.minimum(x, hi)
    return (x,)


register("clip", (1, 1), static_inputs=((1, "min"), (2, "max")), elementwise=True)((  # min may be > 0: masked
    _clip_infer, _clip))


# ---------------------------------------------------------------- reductions

def reduce_axes(node, rank):
    """Normalized, sorted axes to reduce, or None for the identity
    (empty axes with noop_with_empty_axes=1)."""
    noop = flag_attr(node, "noop_with_empty_axes", 0)
    flag_attr(node, "keepdims", 1)
    axes = () if node.attr("axes") is None else int_list(node, "axes")
    if not axes:
        return None if noop else tuple(range(rank))
    norm = [norm_axis(node, a, rank, "axes entry") for a in axes]
    if len(set(norm)) != len(norm):
        fail(node, f"axes {list(axes)} name an axis twice (rank {rank})")
    return tuple(sorted(norm))


def _reduce_infer(node, ins):
    x = ins[0]
    _require_numeric(node, x)
    axes = reduce_axes(node, len(x.shape))
    if axes is None:
        return [(x.dtype, x.shape)]
    if node.op == "reduce_mean" and x.dtype in dtypes.INT_DTYPES and math.prod(x.shape[a] for a in axes) == 0:
        fail(node, f"integer mean over an empty extent of {fmt(x)} (axes {list(axes)})")
    if flag_attr(node, "keepdims", 1):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [(x.dtype, shape)]


def _reduce(node, x):
    axes = reduce_axes(node, x.ndim)
    if axes is None:
        return (x,)
    keep = bool(node.attr("keepdims", 1))
    if not _is_int(x):
        xf = widen(x)
        f = jnp.mean if node.op == "reduce_mean" else jnp.sum
        return (f(xf, axis=axes, keepdims=keep).astype(x.dtype),)
    if node.op == "reduce_sum":
        return (jnp.sum(x, axis=axes, keepdims=keep, dtype=x.dtype),)
    # integer mean: sum / count, truncated toward zero (as ONNX Runtime's T division)
    acc = jnp.int64 if x.dtype == jnp.int64 else jnp.int32
    s = jnp.sum(x.astype(acc), axis=axes, keepdims=keep, dtype=acc)  # (with x64 on, jnp.sum would widen int32)
    n = math.prod(x.shape[a] for a in axes)
    return (lax.div(s, jnp.full(s.shape, n, acc)).astype(x.dtype),)


_REDUCE_ATTRS = ("keepdims", "noop_with_empty_axes")
register("reduce_sum", (1, 1), _REDUCE_ATTRS, static_inputs=((1, "axes"),))((_reduce_infer, _reduce))
register("reduce_mean", (1, 1), _REDUCE_ATTRS, static_inputs=((1, "axes"),))((_reduce_infer, _reduce))

# norms of float tensors, in float32 (ONNX ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSumExp, ReduceLogSum)
_NORMS = {"reduce_l1": lambda x, **k: jnp.sum(jnp.abs(x), **k),
          "reduce_l2": lambda x, **k: jnp.sqrt(jnp.sum(jnp.square(x), **k)),
          "reduce_sum_square": lambda x, **k: jnp.sum(jnp.square(x), **k),
          "reduce_log_sum_exp": lambda x, **k: jax.scipy.special.logsumexp(x, **k),
          "reduce_log_sum": lambda x, **k: jnp.log(jnp.sum(x, **k))}


def _norm_infer(node, ins):
    require_float(node, ins[0])
    return _reduce_infer(node, ins)


def _norm(node, x):
    axes = reduce_axes(node, x.ndim)
    if axes is None:  # noop_with_empty_axes: no reduction, but the elementwise part still applies (|x|, x², log x)
        axes = ()
    return (_NORMS[node.op](widen(x), axis=axes, keepdims=bool(node.attr("keepdims", 1))).astype(x.dtype),)


for _name in _NORMS:
    register(_name, (1, 1), _REDUCE_ATTRS, static_inputs=((1, "axes"),))((_norm_infer, _norm))


# ---------------------------------------------------------------- lrn

def _lrn_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    if len(x.shape) < 3:
        fail(node, f"lrn needs rank >= 3 (N, C, D1, ...), got {fmt(x)}")
    if node.attr("size") is None:
        fail(node, "attribute 'size' is required")
    if int_attr(node, "size", None) < 1:
        fail(node, f"attribute 'size' must be >= 1, got {node.attr('size')!r}")
    float_attr(node, "alpha", 1e-4), float_attr(node, "beta", 0.75), float_attr(node, "bias", 1.0)
    return [(x.dtype, x.shape)]


def lrn_over(node, x, axis=1):
    """Local response normalization across `axis`, the channels (1 in NCHW; the last
    axis of a channels-last layout, compiler/formats.py)."""
    size = node.attr("size")
    alpha, beta = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    xf = widen(x)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2  # floor / ceil of (size-1)/2
    window = tuple(size if a == axis else 1 for a in range(x.ndim))
    pads = tuple((before, after) if a == axis else (0, 0) for a in range(x.ndim))
    sq = lax.reduce_window(xf * xf, jnp.zeros((), xf.dtype), lax.add, window, (1,) * x.ndim, pads)
    return (xf / jnp.power(bias + (alpha / size) * sq, beta)).astype(x.dtype)


def _lrn(node, x):
    return (lrn_over(node, x),)


register("lrn", (1, 1), ("size", "alpha", "beta", "bias"), formats=("nhwc",))((_lrn_infer, _lrn))
