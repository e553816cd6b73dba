"""Storage formats inside kernels: conversions in JAX, and ops lowered for a format.

The device-shape math is aotplan/core/formats.py (numpy); this module mirrors its
`to_device`/`from_device` in jax.numpy, so that a kernel converts on the device, and
lowers the ops that read and write a format without converting (passes/layout.py
decides which node runs in which format; an op's `formats`, declared where it is
registered (compiler/ops), name the families it may choose).

Inside a kernel a tensor in format F is its device array (padding included). A node
that runs in F (its attribute `format`) reads its activation inputs in F and writes
its outputs in F; its parameter inputs (weights, scales, biases, and every constant)
are read in `default` and adapted in the kernel (broadcast to the padded axes, then
converted, zeros in the padding): they are small, and XLA folds the adaptation into
the consumer.

Padding rules (checked after every launch by tests/compiler/passes/test_formats.py):
- every kernel writes zeros in its outputs' padding: an op whose result on zero
  inputs is zero (relu, add, mul, ...: registered `zero_preserving`) keeps it so; any
  other (sigmoid, div, softmax, ...) masks its result (`where(valid, y, 0)`);
- reductions keep padding out: a mean divides by the logical count, a softmax over a
  padded axis sets the padding to -inf first, a max pool sees zeros only on padding
  lanes (never mixed with real ones), a matmul over a padded contraction relies on
  zeros in both operands (the weights are padded with zeros in the kernel).
"""

import re
import types

import jax
import jax.numpy as jnp
from jax import lax

from aotplan.core import formats as F
from compiler import ops
from compiler.ops.math_ops import lrn_over
from compiler.ops.resize import resize_on
from compiler.ops.conv import conv_lowered
from compiler.ops.norms import batchnorm_broadcast
from compiler.ops.pooling import pool_geometry, window_counts
from compiler.ops.precision import widen

# Which ops are elementwise (lowered below in any format as they are), zero-preserving
# (their padding stays zero unmasked) and lowered in which format family (the others:
# `_LOWER`) is declared where each op is registered (compiler/ops/registry.py).

# ops that relayout inside their kernel (XLA's conv takes one feature dimension): a
# conversion, counted as one (`hidden_conversions`)
RELAYOUT_INSIDE = {"nc1hwc0": frozenset(("conv", "conv2d"))}


# ---------------------------------------------------------------- conversions

def to_device(x, fmt):
    """A logical array -> its device array in `fmt`, padding zeroed (mirrors
    aotplan.core.formats.to_device)."""
    name, p = F.parse(fmt)
    if name == "default":
        return x
    dev = F.device_shape(x.shape, fmt)
    if name == "aligned":
        return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, dev[-1] - x.shape[-1])])
    x4 = x.reshape(F.pad4(x.shape))
    if name == "nhwc":
        return x4.transpose(0, 2, 3, 1)
    n, c1, h, w, c0 = dev
    x4 = jnp.pad(x4, [(0, 0), (0, c1 * c0 - x4.shape[1]), (0, 0), (0, 0)])
    return x4.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2)


def from_device(y, shape, fmt):
    """A device array in `fmt` -> the logical array of `shape`."""
    name, _ = F.parse(fmt)
    if name == "default":
        return y
    if name == "aligned":
        return y[..., :shape[-1]]
    if name == "nhwc":
        return y.transpose(0, 3, 1, 2).reshape(shape)
    n, c1, h, w, c0 = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :F.pad4(shape)[1]].reshape(shape)


def convert(x, shape, src, dst):
    """A device array in `src` -> the same tensor in `dst` (the transdata op)."""
    if src == dst:
        return x
    sn, dn = F.parse(src)[0], F.parse(dst)[0]
    if {sn, dn} == {"nhwc", "nc1hwc0"} and len(shape) == 4:  # one transpose, not two
        n, c, h, w = shape
        if sn == "nhwc":
            c1, c0 = F.device_shape(shape, dst)[1], F.device_shape(shape, dst)[4]
            x = jnp.pad(x, [(0, 0)] * 3 + [(0, c1 * c0 - c)])
            return x.reshape(n, h, w, c1, c0).transpose(0, 3, 1, 2, 4)
        return x.transpose(0, 2, 3, 1, 4).reshape(n, h, w, -1)[..., :c]
    return to_device(from_device(x, shape, src), dst)


def valid(shape, fmt):
    """Bool array of the device shape, True on logical lanes, built from iotas (no
    constant of the tensor's size in the program); None when `fmt` pads nothing."""
    if not F.padded_elements(shape, fmt):
        return None
    name, p = F.parse(fmt)
    dev = F.device_shape(shape, fmt)
    if name == "aligned":
        return lax.broadcasted_iota(jnp.int32, dev, len(dev) - 1) < shape[-1]
    c = F.pad4(shape)[1]
    return lax.broadcasted_iota(jnp.int32, dev, 1) * p + lax.broadcasted_iota(jnp.int32, dev, 4) < c


def zero_padding(y, shape, fmt):
    m = valid(shape, fmt)
    return y if m is None else jnp.where(m, y, jnp.zeros((), y.dtype))


def adapt(v, out_shape, fmt):
    """A logical operand that broadcasts against `out_shape` -> its device form, which
    broadcasts against the output's device array (zeros in the padding)."""
    name, _ = F.parse(fmt)
    r = len(out_shape)
    v = v.reshape((1,) * (r - v.ndim) + tuple(v.shape))
    axis = {"aligned": r - 1, "nc1hwc0": 1 if r > 1 else None}.get(name)
    if r == 1 and name == "nc1hwc0":
        axis = 0
    if axis is not None and v.shape[axis] == 1 and out_shape[axis] != 1:
        v = jnp.broadcast_to(v, v.shape[:axis] + (out_shape[axis],) + v.shape[axis + 1:])
    return to_device(v, fmt)


# ---------------------------------------------------------------- axes

def spatial_axes(fmt):
    """Device axes of H and W of a 4-D tensor."""
    return {"default": (2, 3), "nhwc": (1, 2), "nc1hwc0": (2, 3)}[F.parse(fmt)[0]]


def device_axis(fmt, axis, rank):
    """The device axis of logical `axis`, or None where the format splits it."""
    name, _ = F.parse(fmt)
    axis %= rank
    if name in ("default",):
        return axis
    if name == "aligned":
        return None if axis == rank - 1 else axis
    if rank != 4:
        return None
    if name == "nhwc":
        return (0, 3, 1, 2)[axis]
    return None if axis == 1 else axis


# ---------------------------------------------------------------- lowering

def lower_node(node, vals, infos, in_fmts, out_infos):
    """Run `node` on device arrays. `infos`/`out_infos`: logical TensorInfo of the
    inputs/outputs; `in_fmts`: the inputs' formats."""
    if node.op == "transdata":
        return (convert(vals[0], infos[0].shape, node.attr("src"), node.attr("dst")),)
    fmt = node.attr("format", "default")
    op = ops.get(node.op)
    if fmt == "default":
        return op.lower(node, *vals)
    name, _ = F.parse(fmt)
    out = out_infos[0].shape
    if op.elementwise:
        args = [v if f == fmt else adapt(v, out, fmt) for v, f in zip(vals, in_fmts)]
        (y,) = op.lower(node, *args)
        return (y if op.zero_preserving else zero_padding(y, out, fmt),)
    fn = _LOWER[node.op]
    return fn(node, fmt, name, vals, infos, out)


def _logical(shape):
    return types.SimpleNamespace(shape=tuple(shape))


def _batchnorm_dev(node, fmt, name, vals, infos, out):
    x, params = vals[0], vals[1:]
    shape = (1, -1) + (1,) * (len(out) - 2)
    ps = [adapt(p.reshape(shape), out, fmt) for p in params]
    return (zero_padding(batchnorm_broadcast(node, x, *ps), out, fmt),)


def _to_nhwc(x, shape, fmt):
    return x if F.parse(fmt)[0] == "nhwc" else convert(x, shape, fmt, "nhwc")


def _conv(node, fmt, name, vals, infos, out):
    x = _to_nhwc(vals[0], infos[0].shape, fmt)  # nc1hwc0: a relayout inside the kernel
    y = conv_lowered(node, x, *vals[1:], logical=_logical(infos[0].shape), channels_last=True)
    return (y if name == "nhwc" else convert(y, out, "nhwc", fmt),)


def _pool(node, fmt, name, vals, infos, out):
    x = vals[0]
    k, s, d, geo, _ = pool_geometry(node, _logical(infos[0].shape))
    axes = spatial_axes(fmt)
    win, st, dil, pads = [1] * x.ndim, [1] * x.ndim, [1] * x.ndim, [(0, 0)] * x.ndim
    for j, a in enumerate(axes):
        win[a], st[a], dil[a] = k[j], s[j], d[j]
        pads[a] = (geo[j][0], geo[j][1] + geo[j][2])
    if node.op == "maxpool":
        init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
        return (lax.reduce_window(x, jnp.array(init, x.dtype), lax.max, win, st, pads, window_dilation=dil),)
    total = lax.reduce_window(widen(x), 0.0, lax.add, win, st, pads, window_dilation=dil)
    counts = window_counts(infos[0].shape[2:], k, s, d, geo, node.attr("count_include_pad", 0))
    cshape = [1] * x.ndim
    cshape[axes[0]], cshape[axes[1]] = counts.shape
    return ((total / counts.reshape(cshape)).astype(x.dtype),)


def _global_avgpool(node, fmt, name, vals, infos, out):
    x = vals[0]
    return (jnp.mean(widen(x), axis=spatial_axes(fmt), keepdims=True).astype(x.dtype),)


def _global_maxpool(node, fmt, name, vals, infos, out):
    return (jnp.max(vals[0], axis=spatial_axes(fmt), keepdims=True),)  # nc1hwc0: padding lanes stay 0


def _resize(node, fmt, name, vals, infos, out):
    """Over H and W only (layout.supports): each a device axis of its own in nhwc and
    nc1hwc0; blocked channel padding stays zero (gathered or blended zeros)."""
    return (resize_on(node, vals[0], infos[0].shape, lambda a: device_axis(fmt, a, 4)),)


def _concat(node, fmt, name, vals, infos, out):
    return (jnp.concatenate(vals, axis=device_axis(fmt, node.attr("axis", 0), len(out))),)


def _softmax(node, fmt, name, vals, infos, out):
    x = vals[0]
    axis = node.attr("axis", -1) % len(out)
    if name == "nhwc":
        return (jax.nn.softmax(widen(x), axis=device_axis(fmt, axis, len(out))).astype(x.dtype),)
    m = valid(out, fmt)  # aligned, softmax over the padded last axis
    xf = widen(x)
    if m is not None:
        xf = jnp.where(m, xf, -jnp.inf)
    y = jax.nn.softmax(xf, axis=x.ndim - 1)
    return (zero_padding(y.astype(x.dtype), out, fmt),)


def _layernorm(node, fmt, name, vals, infos, out):
    x, scale = vals[0], vals[1]
    bias = vals[2] if len(vals) > 2 else None
    n = out[-1]
    xf = widen(x)
    mean = jnp.sum(xf, axis=-1, keepdims=True) / n  # padding lanes are zero: the logical mean
    diff = zero_padding(xf - mean, out, fmt)
    var = jnp.sum(diff * diff, axis=-1, keepdims=True) / n
    y = diff * lax.rsqrt(var + float(node.attr("epsilon", 1e-5))) * widen(adapt(scale, out, fmt))
    if bias is not None:
        y = y + widen(adapt(bias, out, fmt))
    return (y.astype(x.dtype),)


def _lrn(node, fmt, name, vals, infos, out):
    return (lrn_over(node, vals[0], axis=vals[0].ndim - 1),)  # nhwc: channels are the last axis


def _padded_weight(b, k_dev, n_dev):
    """A 2-D (K, N) operand padded with zeros to (k_dev, n_dev)."""
    return jnp.pad(b, [(0, k_dev - b.shape[0]), (0, n_dev - b.shape[1])])


def _matmul(node, fmt, name, vals, infos, out):
    a, b = vals  # a: (..., M, Kp) aligned; b: (K, N) default, padded here to (Kp, Np)
    return ops.get("matmul").lower(node, a, _padded_weight(b, a.shape[-1], F.device_shape(out, fmt)[-1]))


def _gemm(node, fmt, name, vals, infos, out):
    a, b = vals[0], vals[1]  # a: (M, Kp) aligned (trans_a = 0); b: (K, N) or, trans_b, (N, K)
    kp, n_dev = a.shape[-1], F.device_shape(out, fmt)[-1]
    b = _padded_weight(b, n_dev, kp) if node.attr("trans_b", 0) else _padded_weight(b, kp, n_dev)
    return ops.get("gemm").lower(node, a, b, *[adapt(c, out, fmt) for c in vals[2:]])


_LOWER = {
    "batchnorm": _batchnorm_dev, "conv": _conv, "conv2d": _conv, "maxpool": _pool, "avgpool": _pool,
    "global_avgpool": _global_avgpool, "global_maxpool": _global_maxpool, "concat": _concat, "softmax": _softmax,
    "layernorm": _layernorm, "matmul": _matmul, "gemm": _gemm, "lrn": _lrn, "resize": _resize,
}


_HLO_OP = re.compile(r"= [^ ]+ ([a-z][a-z0-9-]*)\(")


def count_relayouts(hlo_text):
    """-> (transposes, copies) among the instructions of a compiled XLA program's HLO
    text (fused computations included): the data movement a kernel does besides its
    arithmetic, e.g. XLA's CPU convolution relayouting an NCHW operand."""
    ops_ = _HLO_OP.findall(hlo_text)
    return ops_.count("transpose"), ops_.count("copy")


def hidden_conversions(node):
    """1 when the node relayouts inside its kernel (see RELAYOUT_INSIDE), else 0."""
    fmt = node.attr("format", "default")
    return int(node.op in RELAYOUT_INSIDE.get(F.parse(fmt)[0], ()))

