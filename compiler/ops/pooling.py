"""Pooling: maxpool, avgpool, lppool (windows, ONNX semantics) and the global pools.
Averages in float16/bfloat16 are computed in float32."""

import jax.numpy as jnp
import numpy as np
from jax import lax

from compiler.ops.precision import widen
from compiler.ops.registry import fail, flag_attr, fmt, int_list, register, require_float
from compiler.ops.spatial import out_size, spatial_attrs, spatial_input


def pool_geometry(node, x):
    """-> kernel, strides, dilations, [(begin, end, ceil extra)] per spatial axis, out shape."""
    spatial_input(node, x, node.op)
    nd = len(x.shape) - 2
    k = int_list(node, "kernel_shape", nd, minimum=1)
    s, d, pads = spatial_attrs(node, x, k)
    ceil = flag_attr(node, "ceil_mode", 0)
    geo, out = [], []
    for size, kk, ss, p, dd in zip(x.shape[2:], k, s, pads, d):
        if p[0] >= dd * (kk - 1) + 1 or p[1] >= dd * (kk - 1) + 1:
            fail(node, f"pads {list(node.attr('pads'))} must be smaller than the window {list(k)}")
        o, extra = out_size(node, size, kk, ss, p, dd, bool(ceil))
        geo.append((p[0], p[1], extra))
        out.append(o)
    return k, s, d, geo, tuple(x.shape[:2]) + tuple(out)


def _pool_infer(node, ins, float_only):
    x = ins[0]
    if float_only:
        require_float(node, x)
        flag_attr(node, "count_include_pad", 0)
    elif x.dtype == "bool":
        fail(node, f"input {fmt(x)} must be numeric")
    else:
        flag_attr(node, "storage_order", 0)
    return [(x.dtype, pool_geometry(node, x)[4])]


def _reduce(x, init, op, k, s, d, pads):
    return lax.reduce_window(x, init, op, (1, 1) + tuple(k), (1, 1) + tuple(s), ((0, 0), (0, 0)) + tuple(pads),
                             window_dilation=(1, 1) + tuple(d))


def _maxpool(node, x):
    k, s, d, geo, _ = pool_geometry(node, x)
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    return (_reduce(x, jnp.array(init, x.dtype), lax.max, k, s, d, [(b, e + extra) for b, e, extra in geo]),)


def _avgpool(node, x):
    k, s, d, geo, _ = pool_geometry(node, x)
    total = _reduce(widen(x), 0.0, lax.add, k, s, d, [(b, e + extra) for b, e, extra in geo])
    return ((total / window_counts(x.shape[2:], k, s, d, geo, node.attr("count_include_pad", 0))).astype(x.dtype),)


def window_counts(spatial, k, s, d, geo, include_pad):
    """Cells each window averages over: input cells, plus explicit pads with
    count_include_pad, never ceil_mode's extra. Static, so computed here in numpy (XLA
    would constant-fold a reduce_window of ones, slowly)."""
    from numpy.lib.stride_tricks import sliding_window_view

    inside = np.pad(np.ones(spatial), [(b, e) for b, e, _ in geo], constant_values=float(include_pad))
    mask = np.pad(inside, [(0, extra) for _, _, extra in geo])
    axes = tuple(range(len(spatial)))
    spans = tuple(dd * (kk - 1) + 1 for kk, dd in zip(k, d))
    win = sliding_window_view(mask, spans, axis=axes)
    win = win[tuple(slice(None, None, ss) for ss in s) + tuple(slice(None, None, dd) for dd in d)]
    return jnp.asarray(win.sum(axis=tuple(range(len(spatial), 2 * len(spatial)))).astype(np.float32))


def _lppool_infer(node, ins):
    p = node.attr("p", 2)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or p < 1:
        fail(node, f"attribute 'p' must be a number >= 1, got {p!r}")
    return _pool_infer(node, ins, True)


def _lppool(node, x):
    """ONNX LpPool: (sum over the window of |x|^p)^(1/p), padding counting as zeros."""
    k, s, d, geo, _ = pool_geometry(node, x)
    p = float(node.attr("p", 2))
    y = jnp.abs(widen(x))
    total = _reduce(y * y if p == 2 else y ** p, 0.0, lax.add, k, s, d, [(b, e + extra) for b, e, extra in geo])
    return ((jnp.sqrt(total) if p == 2 else total ** (1.0 / p)).astype(x.dtype),)


POOL_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode")
register("maxpool", (1, 1), POOL_ATTRS + ("storage_order",), formats=("nhwc", "nc1hwc0"))((
    lambda node, ins: _pool_infer(node, ins, False), _maxpool))
register("avgpool", (1, 1), POOL_ATTRS + ("count_include_pad",), formats=("nhwc", "nc1hwc0"))((
    lambda node, ins: _pool_infer(node, ins, True), _avgpool))
register("lppool", (1, 1), POOL_ATTRS + ("p",))((_lppool_infer, _lppool))


def _gap_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    if len(x.shape) < 3:
        fail(node, f"{node.op} needs rank >= 3 (N, C, spatial...), got {fmt(x)}")
    if node.op == "global_maxpool" and 0 in x.shape[2:]:
        fail(node, f"global_maxpool over an empty spatial extent of {fmt(x)}")
    return [(x.dtype, x.shape[:2] + (1,) * (len(x.shape) - 2))]


register("global_avgpool", (1, 1), formats=("nhwc", "nc1hwc0"))((_gap_infer, lambda node, x: (
    jnp.mean(widen(x), axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype),)))
register("global_maxpool", (1, 1), formats=("nhwc", "nc1hwc0"))((_gap_infer, lambda node, x: (
    jnp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True),)))
