"""Elementwise ops: numpy broadcasting, one dtype per op."""

import math

import jax
import jax.numpy as jnp
from jax import lax

from aotplan.core import dtypes
from compiler.ops.registry import broadcast_shape, fail, flag_attr, fmt, register, require_float, same_dtype


def _binary_infer(node, ins):
    dt = same_dtype(node, ins)
    if dt == "bool":
        fail(node, f"arithmetic on bool input {fmt(ins[0])} is not supported")
    return [(dt, broadcast_shape(node, ins))]


def _div(node, a, b):
    if jnp.issubdtype(a.dtype, jnp.integer):
        # C/ONNX semantics: integer division truncates toward zero.
        shape = jnp.broadcast_shapes(a.shape, b.shape)
        return (lax.div(jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)),)
    return (a / b,)


# elementwise and zero-preserving: see compiler/ops/registry.py (0 + 0, 0 - 0, 0 * 0 are 0; 0 / 0 is not)
register("add", (2, 2), elementwise=True, zero_preserving=True)((_binary_infer, lambda node, a, b: (a + b,)))
register("sub", (2, 2), elementwise=True, zero_preserving=True)((_binary_infer, lambda node, a, b: (a - b,)))
register("mul", (2, 2), elementwise=True, zero_preserving=True)((_binary_infer, lambda node, a, b: (a * b,)))
register("div", (2, 2), elementwise=True)((_binary_infer, _div))  # 0 / 0 = nan: masked


def _mod_infer(node, ins):
    flag_attr(node, "fmod", 0)
    return _binary_infer(node, ins)


def _mod(node, a, b):
    """ONNX Mod: fmod=1, C's fmod (the sign of the dividend); fmod=0, the sign of the
    divisor (Python's %, numpy's remainder). float16/bfloat16 in float32."""
    shape = jnp.broadcast_shapes(a.shape, b.shape)
    dt = a.dtype
    a, b = jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)
    if jnp.issubdtype(dt, jnp.floating) and dt != jnp.float32:
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    y = lax.rem(a, b) if node.attr("fmod", 0) else jnp.remainder(a, b)
    return (y.astype(dt),)


register("mod", (2, 2), ("fmod",))((_mod_infer, _mod))


def _float_unary_infer(node, ins):
    require_float(node, ins[0])
    return [(ins[0].dtype, ins[0].shape)]


def _numeric_unary_infer(node, ins):
    if ins[0].dtype == "bool":
        fail(node, f"input {fmt(ins[0])} must be numeric")
    return [(ins[0].dtype, ins[0].shape)]


def _unary(fn):
    return lambda node, x: (fn(x).astype(x.dtype),)


def _gelu(node, x):
    approx = node.attr("approximate", "none")
    xf = x.astype(jnp.float32)
    if approx == "tanh":
        y = 0.5 * xf * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (xf + 0.044715 * xf ** 3)))
    else:
        y = 0.5 * xf * (1.0 + lax.erf(xf / math.sqrt(2.0)))
    return (y.astype(x.dtype),)


def _gelu_infer(node, ins):
    if node.attr("approximate", "none") not in ("none", "tanh"):
        fail(node, f"attribute 'approximate' must be 'none' or 'tanh', got {node.attr('approximate')!r}")
    return _float_unary_infer(node, ins)


# zero-preserving: relu, tanh, erf, sqrt and gelu (0 * Phi(0)) are 0 at 0; sigmoid and exp are not
register("relu", (1, 1), elementwise=True, zero_preserving=True)((
    _numeric_unary_infer, lambda node, x: (jnp.maximum(x, jnp.zeros((), x.dtype)),)))
register("sigmoid", (1, 1), elementwise=True)((_float_unary_infer, _unary(jax.nn.sigmoid)))  # sigmoid(0) = 0.5: masked
register("tanh", (1, 1), elementwise=True, zero_preserving=True)((_float_unary_infer, _unary(jnp.tanh)))
register("erf", (1, 1), elementwise=True, zero_preserving=True)((_float_unary_infer, _unary(lax.erf)))
register("exp", (1, 1), elementwise=True)((_float_unary_infer, _unary(jnp.exp)))  # exp(0) = 1: masked
register("sqrt", (1, 1), elementwise=True, zero_preserving=True)((_float_unary_infer, _unary(jnp.sqrt)))
register("gelu", (1, 1), ('approximate',), elementwise=True, zero_preserving=True)((_gelu_infer, _gelu))


def _identity_infer(node, ins):
    return [(ins[0].dtype, ins[0].shape)]


register("identity", (1, 1), elementwise=True, zero_preserving=True)((_identity_infer, lambda node, x: (x,)))

__all__ = ["dtypes"]
