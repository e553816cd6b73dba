"""More reductions and ops along one axis (ONNX semantics): reduce_max, reduce_min,
reduce_prod, argmax, argmin, topk, cumsum.

The reduce ops take `axes` (or input 1), `keepdims` and `noop_with_empty_axes` as
reduce_sum does (compiler/ops/math_ops.py, `reduce_axes`). Over an empty extent
reduce_max gives -inf (the dtype's minimum for integers, false for bool), reduce_min
+inf (the maximum, true) and reduce_prod 1, as ONNX from opset 18 says; for int64 (and
uint64's maximum) that extreme does not fit the 32-bit type the device holds it in, so
an empty extent there is refused at compile time (as a constant out of that range is). reduce_prod in
float16/bfloat16 is computed in float32 and cast back; integer products wrap. max/min
propagate NaN. argmax/argmin return int64 (int32 on the device) indices of the first
extreme value, or the last with `select_last_index`.

topk returns the k largest (or smallest) values along an axis and their int64 indices,
sorted, equal values in index order (what onnxruntime does; ONNX leaves the order
open when `sorted=0`, and we sort then too). cumsum sums along an axis (input 1, a
constant), optionally exclusive and/or reversed; float16/bfloat16 accumulate in
float32, integers wrap in their own type.
"""

import jax
import jax.numpy as jnp
from jax import lax

from aotplan.core import dtypes
from compiler.ops.math_ops import reduce_axes
from compiler.ops.precision import widen
from compiler.ops.registry import fail, flag_attr, fmt, int_attr, norm_axis, register, scalar_attr

NUMERIC_DTYPES = dtypes.FLOAT_DTYPES + dtypes.INT_DTYPES


def _reduce_infer(node, ins):
    x = ins[0]
    allowed = NUMERIC_DTYPES + (("bool",) if node.op in ("reduce_max", "reduce_min") else ())
    if x.dtype not in allowed:
        fail(node, f"input {fmt(x)} must be one of {', '.join(allowed)}")
    axes = reduce_axes(node, len(x.shape))
    if axes is None:
        return [(x.dtype, x.shape)]
    if x.dtype in ("int64", "uint64") and node.op != "reduce_prod" and 0 in [x.shape[a] for a in axes] \
            and not (x.dtype == "uint64" and node.op == "reduce_max"):
        fail(node, f"{node.op} over an empty extent of {fmt(x)} (axes {list(axes)}) gives the {x.dtype} "
                   f"{'minimum' if node.op == 'reduce_max' else 'maximum'}, which the device's "
                   f"{dtypes.NARROWED[x.dtype]} cannot hold")
    if flag_attr(node, "keepdims", 1):
        return [(x.dtype, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))]
    return [(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


def _identity(dt, op):
    """The value a reduction over nothing gives."""
    if dt == jnp.bool_:
        return op == "reduce_min"
    if jnp.issubdtype(dt, jnp.floating):
        return -jnp.inf if op == "reduce_max" else jnp.inf
    info = jnp.iinfo(dt)
    return int(info.min) if op == "reduce_max" else int(info.max)


def _reduce(node, x):
    axes = reduce_axes(node, x.ndim)
    if axes is None:
        return (x,)
    keep = bool(node.attr("keepdims", 1))
    if node.op == "reduce_prod":
        if jnp.issubdtype(x.dtype, jnp.integer):
            return (jnp.prod(x, axis=axes, keepdims=keep, dtype=x.dtype),)
        return (jnp.prod(widen(x), axis=axes, keepdims=keep).astype(x.dtype),)
    f = jnp.max if node.op == "reduce_max" else jnp.min
    init = jnp.array(_identity(x.dtype, node.op), x.dtype)
    return (f(x, axis=axes, keepdims=keep, initial=init),)


_REDUCE_ATTRS = ("keepdims", "noop_with_empty_axes")
for _op in ("reduce_max", "reduce_min", "reduce_prod"):
    register(_op, (1, 1), _REDUCE_ATTRS, static_inputs=((1, "axes"),))((_reduce_infer, _reduce))


def _arg_infer(node, ins):
    x = ins[0]
    if x.dtype not in NUMERIC_DTYPES:
        fail(node, f"input {fmt(x)} must be numeric ({', '.join(NUMERIC_DTYPES)})")
    axis = norm_axis(node, int_attr(node, "axis", 0), len(x.shape))
    flag_attr(node, "select_last_index", 0)
    if x.shape[axis] == 0:
        fail(node, f"{node.op} over the empty axis {axis} of {fmt(x)}")
    if flag_attr(node, "keepdims", 1):
        return [("int64", x.shape[:axis] + (1,) + x.shape[axis + 1:])]
    return [("int64", x.shape[:axis] + x.shape[axis + 1:])]


def _arg(node, x):
    axis = node.attr("axis", 0) % x.ndim
    last = node.attr("select_last_index", 0)
    f = jnp.argmax if node.op == "argmax" else jnp.argmin
    i = f(jnp.flip(x, axis) if last else x, axis=axis, keepdims=bool(node.attr("keepdims", 1)))
    if last:
        i = (x.shape[axis] - 1) - i
    return (i.astype(jax.dtypes.canonicalize_dtype(dtypes.np_dtype("int64"))),)


for _op in ("argmax", "argmin"):
    register(_op, (1, 1), ("axis", "keepdims", "select_last_index"))((_arg_infer, _arg))


# ---------------------------------------------------------------- topk

def _topk_params(node, shape):
    axis = norm_axis(node, int_attr(node, "axis", -1), len(shape))
    if node.attr("k") is None:
        fail(node, "'k' is required (input 1, or the attribute before opset 10)")
    k = scalar_attr(node, "k")
    if not 0 <= k <= shape[axis]:
        fail(node, f"k={k} is out of range for axis {axis} of length {shape[axis]}")
    return axis, k, flag_attr(node, "largest", 1), flag_attr(node, "sorted", 1)


def _topk_infer(node, ins):
    x = ins[0]
    if x.dtype not in NUMERIC_DTYPES:
        fail(node, f"input {fmt(x)} must be numeric ({', '.join(NUMERIC_DTYPES)})")
    axis, k, _, _ = _topk_params(node, x.shape)
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [(x.dtype, shape), ("int64", shape)]


def _order_key(x, largest):
    """What lax.top_k ranks: x for the largest, an order-reversing bijection for the
    smallest (~ for integers: no overflow). lax.top_k orders floats by IEEE total order,
    where -0.0 < +0.0 and a NaN with its sign bit set (x86's default NaN) is the
    smallest: zeros are made +0.0 (equal, so the lower index first, as onnxruntime) and
    every NaN the largest value, as onnxruntime ranks them."""
    if jnp.issubdtype(x.dtype, jnp.integer):
        return x if largest else ~x
    key = jnp.where(x == 0, jnp.zeros((), x.dtype), x if largest else -x)
    return jnp.where(jnp.isnan(x), jnp.array(jnp.nan if largest else -jnp.nan, x.dtype), key)


def _topk(node, x):
    axis, k, largest, _ = _topk_params(node, x.shape)
    xt = jnp.moveaxis(x, axis, -1)
    _, i = lax.top_k(_order_key(xt, largest), k)  # (ties: the lower index first)
    v = jnp.take_along_axis(xt, i, axis=-1)  # (x's own values: -0.0 stays -0.0)
    i = i.astype(jax.dtypes.canonicalize_dtype(dtypes.np_dtype("int64")))
    return jnp.moveaxis(v, -1, axis), jnp.moveaxis(i, -1, axis)


register("topk", (1, 1), ("axis", "largest", "sorted"), n_outputs=2, static_inputs=((1, "k"),))((
    _topk_infer, _topk))


# ---------------------------------------------------------------- cumsum

def _cumsum_axis(node, rank):
    if node.attr("axis") is None:
        fail(node, "'axis' is required (input 1)")
    flag_attr(node, "exclusive", 0)
    flag_attr(node, "reverse", 0)
    return norm_axis(node, scalar_attr(node, "axis"), rank)


def _cumsum_infer(node, ins):
    x = ins[0]
    if x.dtype not in NUMERIC_DTYPES:
        fail(node, f"input {fmt(x)} must be numeric ({', '.join(NUMERIC_DTYPES)})")
    _cumsum_axis(node, len(x.shape))
    return [(x.dtype, x.shape)]


def _cumsum(node, x):
    """cumsum, and cumprod (ONNX CumProd: the same attributes, products)."""
    axis = _cumsum_axis(node, x.ndim)
    y = jnp.flip(x, axis) if node.attr("reverse", 0) else x
    acc = jnp.float32 if x.dtype in (jnp.float16, jnp.bfloat16) else x.dtype
    prod = node.op == "cumprod"
    y = (jnp.cumprod if prod else jnp.cumsum)(y, axis=axis, dtype=acc)
    if node.attr("exclusive", 0):  # shifted by one: the first is 0 (1 for products), the last dropped
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        y = lax.slice_in_dim(jnp.pad(y, pad, constant_values=1 if prod else 0), 0, x.shape[axis], axis=axis)
    y = jnp.flip(y, axis) if node.attr("reverse", 0) else y
    return (y.astype(x.dtype),)


register("cumsum", (1, 1), ("exclusive", "reverse"), static_inputs=((1, "axis"),))((_cumsum_infer, _cumsum))
register("cumprod", (1, 1), ("exclusive", "reverse"), static_inputs=((1, "axis"),))((_cumsum_infer, _cumsum))
