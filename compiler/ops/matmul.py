"""Matrix products: matmul (numpy semantics) and gemm (ONNX's, with transposes, alpha
and beta)."""

import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes
from compiler.ops.registry import fail, flag_attr, float_attr, fmt, register, same_dtype


def _matmul_infer(node, ins):
    a, b = ins
    dt = same_dtype(node, ins)
    if dt == "bool":
        fail(node, "matmul of bool is not supported")
    if not a.shape or not b.shape:
        fail(node, f"matmul needs inputs of rank >= 1, got {fmt(a)} and {fmt(b)}")
    sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
    sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
    if sa[-1] != sb[-2]:
        fail(node, f"contraction mismatch: {fmt(a)} @ {fmt(b)} ({sa[-1]} != {sb[-2]})")
    try:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        fail(node, f"cannot broadcast batch dimensions of {fmt(a)} and {fmt(b)}")
    out = batch + (sa[-2], sb[-1])
    if len(a.shape) == 1:
        out = out[:-2] + out[-1:]
    if len(b.shape) == 1:
        out = out[:-1]
    return [(dt, out)]


register("matmul", (2, 2), anchor=True, formats=("aligned",))((_matmul_infer, lambda node, a, b: (jnp.matmul(a, b),)))


def _gemm_infer(node, ins):
    a, b = ins[0], ins[1]
    dt = same_dtype(node, ins)
    if dt not in dtypes.FLOAT_DTYPES + ("int32", "int64", "uint32", "uint64"):
        fail(node, f"gemm of {dt} is not supported")
    if len(a.shape) != 2 or len(b.shape) != 2:
        fail(node, f"gemm needs 2-D A and B, got {fmt(a)} and {fmt(b)}")
    ta, tb = flag_attr(node, "trans_a", 0), flag_attr(node, "trans_b", 0)
    m, k = a.shape[::-1] if ta else a.shape
    k2, n = b.shape[::-1] if tb else b.shape
    if k != k2:
        fail(node, f"contraction mismatch: A {fmt(a)} (trans_a={ta}) and B {fmt(b)} (trans_b={tb}) give {k} != {k2}")
    if len(ins) == 3:
        try:
            if tuple(np.broadcast_shapes(ins[2].shape, (m, n))) != (m, n):
                raise ValueError
        except ValueError:
            fail(node, f"bias C {fmt(ins[2])} does not broadcast to ({m}, {n})")
    float_attr(node, "alpha", 1.0), float_attr(node, "beta", 1.0)
    return [(dt, (m, n))]


def _gemm(node, a, b, c=None):
    if node.attr("trans_a", 0):
        a = a.T
    if node.attr("trans_b", 0):
        b = b.T
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = jnp.matmul(a, b)
    if alpha != 1.0:
        y = (y * alpha).astype(a.dtype)
    if c is not None:
        y = y + (c if beta == 1.0 else (c * beta).astype(c.dtype))
    return (y,)


register("gemm", (2, 3), ('trans_a', 'trans_b', 'alpha', 'beta'), anchor=True, formats=("aligned",))((
    _gemm_infer, _gemm))
