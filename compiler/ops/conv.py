"""Convolution (ONNX Conv, NCHW or channels-last) and the two lowerings chosen for it
at compile time: depthwise convolutions as sums of shifted slices, and convolutions
in row bands where that lowers a kernel's workspace."""

import dataclasses
import itertools
import math

import jax.numpy as jnp
from jax import lax

from compiler.ops.registry import fail, fmt, int_attr, int_list, register, require_float, same_dtype
from compiler.ops.spatial import out_size, spatial_attrs, spatial_input


def _conv_infer(node, ins):
    x, w = ins[0], ins[1]
    require_float(node, x)
    same_dtype(node, ins)
    spatial_input(node, x, node.op)
    if node.op == "conv2d" and len(x.shape) != 4:
        fail(node, f"conv2d needs a 4-D NCHW input, got {fmt(x)} (use conv for other ranks)")
    if len(w.shape) != len(x.shape):
        fail(node, f"weight {fmt(w)} must have the input's rank {len(x.shape)} (M, C/group, kernel...)")
    m, cg, k = _weight_dims(node, w.shape)
    if node.attr("kernel_shape") is not None and tuple(int_list(node, "kernel_shape", len(k))) != k:
        fail(node, f"kernel_shape {list(node.attr('kernel_shape'))} does not match weight {fmt(w)}")
    g = int_attr(node, "group", 1)
    s, d, pads = spatial_attrs(node, x, k)
    c = x.shape[1]
    if g < 1 or c % g or m % g or cg != c // g:
        fail(node, f"group={g}: input channels {c} and weight {fmt(w)} do not agree (weight dim 1 must be C/group)")
    if len(ins) == 3 and ins[2].shape != (m,):
        fail(node, f"bias {fmt(ins[2])} must have shape [{m}]")
    out = [out_size(node, n, kk, ss, p, dd)[0] for n, kk, ss, p, dd in zip(x.shape[2:], k, s, pads, d)]
    return [(x.dtype, (x.shape[0], m, *out))]


WEIGHT_LAYOUTS = ("OIS", "SIO")  # (out, in/group, spatial...) as ONNX; (spatial..., in/group, out)


def _weight_dims(node, wshape):
    """-> (out channels M, in channels per group, kernel extents) of a conv weight."""
    layout = node.attr("weight_layout", "OIS")
    if layout not in WEIGHT_LAYOUTS:
        fail(node, f"attribute 'weight_layout' must be one of {', '.join(WEIGHT_LAYOUTS)}, got {layout!r}")
    if layout == "SIO":
        return wshape[-1], wshape[-2], tuple(wshape[:-2])
    return wshape[0], wshape[1], tuple(wshape[2:])


def conv_lowered(node, x, w, b=None, logical=None, channels_last=False):
    """The convolution of x, NCHW-like or (channels_last) NHWC-like. `logical`: the
    input's logical NC... shape when x is stored channels-last (auto_pad reads it)."""
    _, _, k = _weight_dims(node, w.shape)
    s, d, pads = spatial_attrs(node, logical if logical is not None else x, k)
    nd = x.ndim - 2
    sp = "DHW"[-nd:] if nd <= 3 else "".join(chr(ord("a") + i) for i in range(nd))
    wspec = sp + "IO" if node.attr("weight_layout", "OIS") == "SIO" else "OI" + sp
    act = "N" + sp + "C" if channels_last else "NC" + sp
    dn = lax.conv_dimension_numbers(x.shape, w.shape, (act, wspec, act))
    conv = lambda x, pads: lax.conv_general_dilated(  # noqa: E731
        x, w, window_strides=s, padding=pads, rhs_dilation=d, feature_group_count=node.attr("group", 1),
        dimension_numbers=dn)
    if node.attr(DEPTHWISE_TAPS, False) and is_depthwise(node, x, w, k, channels_last):
        conv = lambda x, pads: _depthwise_taps(x, w, s, d, pads, k, channels_last,  # noqa: E731
                                               node.attr("weight_layout", "OIS") == "SIO")
    bands = node.attr(CONV_BANDS, 1)
    y = _in_bands(conv, x, k[0], s[0], d[0], pads, 1 if channels_last else 2, bands) if bands > 1 else conv(x, pads)
    if b is not None:
        y = y + (b if channels_last else b.reshape((1, -1) + (1,) * nd))
    return y


def _conv(node, x, w, b=None):
    return (conv_lowered(node, x, w, b),)


# How the lowering computes a convolution, chosen at compile time and written on the
# node the kernel is traced from (compiler/passes/lower.py, `with_strategy`): never in
# a model (they are not among CONV_ATTRS), never in kernel-sharing keys (the strategy
# follows from the launch's key and the plan's targets). The reference evaluation
# traces the model's own nodes: lax.conv, one band.
# Depthwise convolutions as sums of shifted slices (below), for CPU targets.
DEPTHWISE_TAPS = "_depthwise_taps"
MAX_DEPTHWISE_TAPS = 64  # kernel taps (3x3: 9, ConvNeXt's 7x7: 49, a conformer's 1-D 31)
# Convolutions in row bands: how many (where a launch's workspace sets the plan's).
CONV_BANDS = "_conv_bands"


def with_strategy(node, bands=1, depthwise_taps=False):
    """`node` (a conv) annotated with the lowering's choices for it: `bands` row bands
    (1: one convolution) and `depthwise_taps` (a depthwise convolution as taps)."""
    extra = ((CONV_BANDS, int(bands)),) if bands > 1 else ()
    extra += ((DEPTHWISE_TAPS, True),) if depthwise_taps else ()
    if not extra:
        return node
    keep = tuple((k, v) for k, v in node.attrs if k not in (CONV_BANDS, DEPTHWISE_TAPS))
    return dataclasses.replace(node, attrs=tuple(sorted(keep + extra)))


def is_depthwise(node, x, w, k, channels_last):
    """One filter per input channel (group = C = M), a float32 input, a small kernel."""
    c = x.shape[-1] if channels_last else x.shape[1]
    m, cg, _ = _weight_dims(node, w.shape)
    return (node.attr("group", 1) == c == m and cg == 1 and c > 1 and x.dtype == jnp.float32
            and 0 < math.prod(k) <= MAX_DEPTHWISE_TAPS)


def _depthwise_taps(x, w, s, d, pads, k, channels_last, sio):
    """A depthwise convolution as the sum over the kernel's taps of a strided slice of
    the padded input times that tap's per-channel weights: one elementwise loop that
    XLA fuses and vectorizes over the channels. XLA's CPU convolution with
    feature_group_count = C runs a generic loop instead; measured on MobileNet-v2's
    3x3 layers (NHWC, batch 1, 2 cores): 15-21x faster, e.g. 112x112x32 8.47 -> 0.40 ms
    (docs/design.md, "Depthwise convolutions as taps"). The products are summed in tap order,
    not XLA's: float rounding apart, the same numbers. float32 only (a half-precision
    sum of taps would round at each one)."""
    nd = len(k)
    c = x.shape[-1] if channels_last else x.shape[1]
    taps = w.reshape(tuple(k) + (c,)) if sio else jnp.moveaxis(w.reshape((c,) + tuple(k)), 0, -1)  # (k..., C)
    axes = tuple(range(1, 1 + nd)) if channels_last else tuple(range(2, 2 + nd))
    cfg = [(0, 0, 0)] * x.ndim
    for a, (lo, hi) in zip(axes, pads):
        cfg[a] = (lo, hi, 0)
    xp = lax.pad(x, jnp.array(0, x.dtype), cfg)
    out = [(xp.shape[a] - d[j] * (k[j] - 1) - 1) // s[j] + 1 for j, a in enumerate(axes)]
    acc = None
    for tap in itertools.product(*(range(kk) for kk in k)):
        start, limit, step = [0] * x.ndim, list(xp.shape), [1] * x.ndim
        for j, a in enumerate(axes):
            start[a] = tap[j] * d[j]
            limit[a] = start[a] + (out[j] - 1) * s[j] + 1
            step[a] = s[j]
        wt = taps[tap] if channels_last else taps[tap].reshape((c,) + (1,) * nd)
        term = lax.slice(xp, start, limit, step) * wt
        acc = term if acc is None else acc + term
    return acc


def _in_bands(conv, x, k, s, d, pads, axis, bands):
    """conv(x, pads) computed as up to `bands` convolutions over bands of output rows
    (the first spatial axis, `axis` of x), each reading only the input rows its band's
    windows cover, then concatenated: each output element sums the same products
    (XLA may sum a band in another order: float rounding apart). XLA copies a
    convolution's input out of the arena; a band's copy is a band's rows, made just
    before its convolution, and the concatenation fuses into the loop that consumes
    it (e.g. bias + relu + the write to the arena). Whether that lowers a kernel's
    temp bytes depends on what else the kernel holds: passes/lower.py measures it.
    Zero padding at the top and bottom becomes each band's own."""
    size = x.shape[axis]
    (top, bottom), rest = pads[0], list(pads[1:])
    span = d * (k - 1) + 1
    out = (size + top + bottom - span) // s + 1
    rows = -(-out // bands)  # output rows per band (the last band may have fewer)
    ys = []
    for r0 in range(0, out, rows):
        r1 = min(r0 + rows, out)
        first, end = r0 * s - top, (r1 - 1) * s - top + span  # the input rows the band reads
        lo, hi = max(first, 0), min(end, size)
        if hi <= lo:  # a band inside the padding alone: no input rows to slice
            return conv(x, pads)
        ys.append(conv(lax.slice_in_dim(x, lo, hi, axis=axis), [(lo - first, end - hi)] + rest))
    return lax.concatenate(ys, axis) if len(ys) > 1 else ys[0]


CONV_ATTRS = ("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape", "weight_layout")
# an anchor (a contraction: compiler/passes/group.py); lowered in nhwc, and in nc1hwc0 by a relayout to nhwc
# inside its kernel (compiler/formats.py)
register("conv", (2, 3), CONV_ATTRS, anchor=True, formats=("nhwc", "nc1hwc0"))((_conv_infer, _conv))
register("conv2d", (2, 3), CONV_ATTRS, anchor=True, formats=("nhwc", "nc1hwc0"))((_conv_infer, _conv))
