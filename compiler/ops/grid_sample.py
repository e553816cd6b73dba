"""grid_sample (ONNX GridSample, opsets 16 and 20; PyTorch's F.grid_sample exports to it).

X [N, C, D1..Dk] sampled at grid [N, O1..Om, k] (normalized coordinates in [-1, 1],
the last spatial axis first, as PyTorch orders them) -> [N, C, O1..Om]. `mode`
`linear`, `nearest` (a coordinate rounded half to even) or `cubic` (Keys, a = -0.75);
`padding_mode` `zeros`, `border` or `reflection`; `align_corners` 0 or 1: as PyTorch's
GridSampler and onnxruntime. (ONNX's reference pads the coordinate before cubic's four
taps too; PyTorch and onnxruntime pad each tap: they differ near the border.) Opset 16 spells the modes `bilinear`
and `bicubic`; the ONNX import maps them. Computed in float32 for half types: per axis
the taps and their weights, then one gather of X per combination of taps (2^k for
linear, 4^k for cubic).
"""

import itertools
import math

import jax.numpy as jnp

from aotplan.core import dtypes
from compiler.ops.registry import fail, flag_attr, fmt, register

MODES = ("linear", "nearest", "cubic")
PADDING = ("zeros", "border", "reflection")
CUBIC_A = -0.75


def _params(node, x, grid):
    if x.dtype not in dtypes.FLOAT_DTYPES:
        fail(node, f"input X {fmt(x)} must be a float type")
    if grid.dtype not in dtypes.FLOAT_DTYPES:
        fail(node, f"grid {fmt(grid)} must be a float type")
    k = len(x.shape) - 2
    if k < 1 or len(grid.shape) != k + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != k:
        fail(node, f"grid {fmt(grid)} must be [N, {k} output dims..., {k}] for X {fmt(x)} (N, C, {k} spatial dims)")
    mode, pad = node.attr("mode", "linear"), node.attr("padding_mode", "zeros")
    if mode not in MODES:
        fail(node, f"attribute 'mode' must be one of {', '.join(MODES)}, got {mode!r}")
    if pad not in PADDING:
        fail(node, f"attribute 'padding_mode' must be one of {', '.join(PADDING)}, got {pad!r}")
    if 0 in x.shape[2:] and math.prod(grid.shape):
        fail(node, f"cannot sample the empty X {fmt(x)}")
    return mode, pad, flag_attr(node, "align_corners", 0)


def _infer(node, ins):
    x, grid = ins
    _params(node, x, grid)
    return [(x.dtype, tuple(x.shape[:2]) + tuple(grid.shape[1:-1]))]


def _reflect(v, lo, hi):
    """v reflected at the borders lo and hi until it lies between them."""
    span = hi - lo
    if span <= 0:
        return jnp.full_like(v, lo)
    below, above = lo - v, v - hi
    nb, na = jnp.floor(below / span), jnp.floor(above / span)
    rb, ra = below - nb * span, above - na * span
    low = jnp.where(nb % 2 == 0, lo + rb, hi - rb)
    high = jnp.where(na % 2 == 0, hi - ra, lo + ra)
    return jnp.where(v < lo, low, jnp.where(v > hi, high, v))


def _cubic_weights(t):
    a = CUBIC_A
    w0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
    w1 = ((a + 2) * t - (a + 3)) * t * t + 1
    w2 = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1
    w3 = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a
    return [w0, w1, w2, w3]


def _taps(v, d, mode, pad, lo, hi):
    """-> [(index, weight, valid)] for one axis of length d at source coordinate v."""
    if mode == "nearest":
        base, offsets, weights = v, (0,), [jnp.ones_like(v)]
    else:
        base = jnp.floor(v)
        t = v - base
        offsets, weights = ((0, 1), [1 - t, t]) if mode == "linear" else ((-1, 0, 1, 2), _cubic_weights(t))
    out = []
    for o, w in zip(offsets, weights):
        i = base + o
        if pad == "zeros":
            valid = (i >= 0) & (i < d)
        elif pad == "border":
            i, valid = jnp.clip(i, 0, d - 1), None
        else:  # reflection: the tap reflected at the borders, truncated to an index
            i, valid = jnp.trunc(_reflect(i, lo, hi)), None
        out.append((jnp.clip(i, 0, d - 1).astype(jnp.int32), w, valid))
    return out


def _grid_sample(node, x, grid):
    mode, pad, align = _params(node, x, grid)
    n, c, dims = x.shape[0], x.shape[1], x.shape[2:]
    k = len(dims)
    cdt = jnp.float32 if x.dtype != jnp.float64 else x.dtype
    g = grid.astype(cdt).reshape(n, -1, k)  # [N, P, k], the last spatial axis first
    xf = x.astype(cdt).reshape(n, c, -1)
    axis_taps = []
    for a, d in enumerate(dims):
        u = g[:, :, k - 1 - a]
        v = (u + 1) / 2 * (d - 1) if align else ((u + 1) * d - 1) / 2
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        if mode == "nearest":
            v = jnp.round(v)  # half to even, as PyTorch and ONNX's reference
        if pad == "border" and mode != "cubic":  # (cubic pads each tap instead, as PyTorch and onnxruntime)
            v = jnp.where((v < lo) | (v > hi), jnp.clip(v, 0, d - 1), v)
        elif pad == "reflection" and mode != "cubic":
            v = _reflect(v, lo, hi)
        axis_taps.append(_taps(v, d, mode, pad, lo, hi))
    strides = [math.prod(dims[a + 1:]) for a in range(k)]
    out = jnp.zeros((n, c, g.shape[1]), cdt)
    for combo in itertools.product(*axis_taps):
        flat = sum(i * s for (i, _, _), s in zip(combo, strides))
        w = math.prod(wt for _, wt, _ in combo) if k > 1 else combo[0][1]
        valid = [ok for _, _, ok in combo if ok is not None]
        if valid:
            w = jnp.where(jnp.logical_and.reduce(jnp.stack(valid)), w, 0)
        out = out + jnp.take_along_axis(xf, flat[:, None, :], axis=2) * w[:, None, :]
    return (out.reshape((n, c) + tuple(grid.shape[1:-1])).astype(x.dtype),)


register("grid_sample", (2, 2), ("mode", "padding_mode", "align_corners"))((_infer, _grid_sample))
