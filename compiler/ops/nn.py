"""Neural-network ops: matmul, gemm, softmax, layernorm, batchnorm, conv2d, pooling
(maxpool, avgpool, lppool, global_avgpool, global_maxpool).

Reductions in float16/bfloat16 (softmax, layernorm, batchnorm, average pooling) are
computed in float32 and cast back, as ONNX's stash_type=1 does."""

import contextlib
import contextvars
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from aotplan.core import dtypes
from compiler.ops.registry import (
    fail, flag_attr, float_attr, fmt, int_attr, int_list, norm_axis, register, require_float, same_dtype,
)


def _f32(x):
    return x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x


# ---------------------------------------------------------------- matmul / gemm

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


register("matmul", (2, 2))((_matmul_infer, lambda node, a, b: (jnp.matmul(a, b),)))


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


register("gemm", (2, 3), ('trans_a', 'trans_b', 'alpha', 'beta'))((_gemm_infer, _gemm))


# ---------------------------------------------------------------- softmax / norms

def _softmax_infer(node, ins):
    require_float(node, ins[0])
    norm_axis(node, int_attr(node, "axis", -1), len(ins[0].shape))
    flag_attr(node, "legacy_flatten", 0)
    return [(ins[0].dtype, ins[0].shape)]


def _softmax_like(fn):
    def lower(node, x):
        axis = node.attr("axis", -1) % x.ndim
        if node.attr("legacy_flatten", 0):  # ONNX before opset 13: x viewed as 2-D at axis
            flat = _f32(x).reshape(int(np.prod(x.shape[:axis])), -1)
            return (fn(flat, axis=1).reshape(x.shape).astype(x.dtype),)
        return (fn(_f32(x), axis=axis).astype(x.dtype),)
    return lower


register("softmax", (1, 1), ("axis", "legacy_flatten"))((_softmax_infer, _softmax_like(jax.nn.softmax)))
register("log_softmax", (1, 1), ("axis", "legacy_flatten"))((_softmax_infer, _softmax_like(jax.nn.log_softmax)))


def _norm_input(node, ins):
    """x, scale, bias of instance_norm/group_norm: x float, (N, C, spatial...)."""
    x = ins[0]
    require_float(node, x)
    same_dtype(node, ins)
    if len(x.shape) < 3:
        fail(node, f"input {fmt(x)} must have rank 3 or more (N, C, spatial...)")
    return ins


def _instance_norm_infer(node, ins):
    x, scale, bias = _norm_input(node, ins)
    for t in (scale, bias):
        if tuple(t.shape) != (x.shape[1],):
            fail(node, f"scale/bias {fmt(t)} must have shape [{x.shape[1]}] (the channels of {fmt(x)})")
    float_attr(node, "epsilon", 1e-5, minimum=0.0)
    return [(x.dtype, x.shape)]


def _instance_norm(node, x, scale, bias):
    """ONNX InstanceNormalization: each (n, c) normalized over the spatial axes (float32 math)."""
    xf, axes = _f32(x), tuple(range(2, x.ndim))
    mean = xf.mean(axis=axes, keepdims=True)
    var = jnp.square(xf - mean).mean(axis=axes, keepdims=True)
    sh = (1, -1) + (1,) * (x.ndim - 2)
    y = (xf - mean) * lax.rsqrt(var + node.attr("epsilon", 1e-5)) * _f32(scale).reshape(sh) + _f32(bias).reshape(sh)
    return (y.astype(x.dtype),)


register("instance_norm", (3, 3), ("epsilon",))((_instance_norm_infer, _instance_norm))


def _group_norm_infer(node, ins):
    x, scale, bias = _norm_input(node, ins)
    if node.attr("num_groups") is None:
        fail(node, "attribute 'num_groups' is required")
    g = int_attr(node, "num_groups", 1)
    if g < 1 or x.shape[1] % g:
        fail(node, f"num_groups {g} must divide the {x.shape[1]} channels of {fmt(x)}")
    n = g if flag_attr(node, "per_group_affine", 0) else x.shape[1]
    for t in (scale, bias):
        if tuple(t.shape) != (n,):
            fail(node, f"scale/bias {fmt(t)} must have shape [{n}] (one per "
                       f"{'group' if n == g else 'channel'} of {fmt(x)})")
    float_attr(node, "epsilon", 1e-5, minimum=0.0)
    return [(x.dtype, x.shape)]


def _group_norm(node, x, scale, bias):
    """ONNX GroupNormalization: each (n, group of channels) normalized over its channels
    and the spatial axes (float32 math); scale and bias per channel (per group with
    `per_group_affine`: GroupNormalization-18)."""
    g = node.attr("num_groups")
    xf = _f32(x).reshape((x.shape[0], g, -1))
    mean = xf.mean(axis=2, keepdims=True)
    var = jnp.square(xf - mean).mean(axis=2, keepdims=True)
    y = ((xf - mean) * lax.rsqrt(var + node.attr("epsilon", 1e-5))).reshape(x.shape)
    scale, bias = _f32(scale), _f32(bias)
    if node.attr("per_group_affine", 0):
        scale, bias = jnp.repeat(scale, x.shape[1] // g), jnp.repeat(bias, x.shape[1] // g)
    sh = (1, -1) + (1,) * (x.ndim - 2)
    return ((y * scale.reshape(sh) + bias.reshape(sh)).astype(x.dtype),)


register("group_norm", (3, 3), ("epsilon", "num_groups", "per_group_affine"))((_group_norm_infer, _group_norm))


def _layernorm_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    same_dtype(node, ins)
    axis = norm_axis(node, int_attr(node, "axis", -1), len(x.shape))
    norm_shape = x.shape[axis:]
    for t in ins[1:]:
        try:
            if tuple(np.broadcast_shapes(t.shape, norm_shape)) != norm_shape:
                raise ValueError
        except ValueError:
            fail(node, f"scale/bias {fmt(t)} does not broadcast to the normalized shape {list(norm_shape)}")
    float_attr(node, "epsilon", 1e-5, minimum=0.0)
    if len(node.outputs) > 3:
        fail(node, f"has at most 3 outputs (y, mean, inv_std_dev), got {len(node.outputs)}")
    stat = x.shape[:axis] + (1,) * (len(x.shape) - axis)  # ONNX: statistics in float32 (stash_type 1)
    return [(x.dtype, x.shape)] + [("float32", stat)] * (len(node.outputs) - 1)


def _layernorm(node, x, scale, bias=None):
    axis = node.attr("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    xf = x.astype(jnp.float32) if x.dtype != jnp.float64 else x
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=axes, keepdims=True)
    inv = lax.rsqrt(var + float(node.attr("epsilon", 1e-5)))
    y = (xf - mean) * inv * _f32(scale)
    if bias is not None:
        y = y + _f32(bias)
    return (y.astype(x.dtype), mean.astype(jnp.float32), inv.astype(jnp.float32))[:len(node.outputs)]


register("layernorm", (2, 3), ('axis', 'epsilon'), n_outputs=None)((_layernorm_infer, _layernorm))


def _batchnorm_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    same_dtype(node, ins)
    if len(x.shape) < 2:
        fail(node, f"batchnorm needs rank >= 2 (N, C, ...), got {fmt(x)}")
    for t, what in zip(ins[1:], ("scale", "bias", "mean", "var")):
        if t.shape != (x.shape[1],):
            fail(node, f"{what} {fmt(t)} must have shape [{x.shape[1]}] (the channel count)")
    float_attr(node, "epsilon", 1e-5, minimum=0.0)
    return [(x.dtype, x.shape)]


def batchnorm_broadcast(node, x, scale, bias, mean, var):
    """Inference batchnorm with parameters already shaped to broadcast against x (NCHW
    here; a storage format's layout in compiler/formats.py)."""
    inv = lax.rsqrt(_f32(var) + float(node.attr("epsilon", 1e-5))) * _f32(scale)
    return ((_f32(x) - _f32(mean)) * inv + _f32(bias)).astype(x.dtype)


def _batchnorm(node, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (batchnorm_broadcast(node, x, *(p.reshape(shape) for p in (scale, bias, mean, var))),)


register("batchnorm", (5, 5), ('epsilon',))((_batchnorm_infer, _batchnorm))


# ---------------------------------------------------------------- conv / pooling

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _spatial_attrs(node, x, kernel):
    """Strides, dilations and (begin, end) pads per spatial axis, auto_pad resolved
    from the static input shape (ONNX rules). `x`: the input's TensorInfo in shape rules,
    the array itself in lowerings (only `.shape` is read)."""
    nd = len(kernel)
    s = int_list(node, "strides", nd, (1,) * nd, minimum=1)
    d = int_list(node, "dilations", nd, (1,) * nd, minimum=1)
    ap = node.attr("auto_pad", "NOTSET")
    if ap not in AUTO_PADS:
        fail(node, f"attribute 'auto_pad' must be one of {', '.join(AUTO_PADS)}, got {ap!r}")
    if ap == "NOTSET":
        p = int_list(node, "pads", 2 * nd, (0,) * (2 * nd), minimum=0)
        return s, d, [(p[i], p[i + nd]) for i in range(nd)]
    if any(node.attr("pads", (0,))):
        fail(node, f"'pads' cannot be combined with auto_pad={ap}")
    pads = []
    for size, k, st, dl in zip(x.shape[2:], kernel, s, d):
        if ap == "VALID":
            pads.append((0, 0))
            continue
        out = -(-size // st)
        total = max((out - 1) * st + (k - 1) * dl + 1 - size, 0)
        small, big = total // 2, total - total // 2
        pads.append((small, big) if ap == "SAME_UPPER" else (big, small))
    return s, d, pads


def _out_size(node, size, k, s, p, d=1, ceil=False):
    """Output extent and the extra end padding that ceil_mode needs."""
    span = d * (k - 1) + 1
    room = size + p[0] + p[1] - span
    if room < 0:
        fail(node, f"window {k} (dilation {d}) does not fit input extent {size} with pads {p}")
    out = (-(-room // s) if ceil else room // s) + 1
    if ceil and (out - 1) * s >= size + p[0]:  # the last window must start inside the input
        out -= 1
    return out, max((out - 1) * s + span - (size + p[0] + p[1]), 0)


def _spatial_input(node, x, what):
    if len(x.shape) < 3:
        fail(node, f"{what} needs an input (N, C, spatial...) of rank >= 3, got {fmt(x)}")


def _conv_infer(node, ins):
    x, w = ins[0], ins[1]
    require_float(node, x)
    same_dtype(node, ins)
    _spatial_input(node, x, node.op)
    if node.op == "conv2d" and len(x.shape) != 4:
        fail(node, f"conv2d needs a 4-D NCHW input, got {fmt(x)} (use conv for other ranks)")
    if len(w.shape) != len(x.shape):
        fail(node, f"weight {fmt(w)} must have the input's rank {len(x.shape)} (M, C/group, kernel...)")
    m, cg, k = _weight_dims(node, w.shape)
    if node.attr("kernel_shape") is not None and tuple(int_list(node, "kernel_shape", len(k))) != k:
        fail(node, f"kernel_shape {list(node.attr('kernel_shape'))} does not match weight {fmt(w)}")
    g = int_attr(node, "group", 1)
    s, d, pads = _spatial_attrs(node, x, k)
    c = x.shape[1]
    if g < 1 or c % g or m % g or cg != c // g:
        fail(node, f"group={g}: input channels {c} and weight {fmt(w)} do not agree (weight dim 1 must be C/group)")
    if len(ins) == 3 and ins[2].shape != (m,):
        fail(node, f"bias {fmt(ins[2])} must have shape [{m}]")
    out = [_out_size(node, n, kk, ss, p, dd)[0] for n, kk, ss, p, dd in zip(x.shape[2:], k, s, pads, d)]
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
    s, d, pads = _spatial_attrs(node, logical if logical is not None else x, k)
    nd = x.ndim - 2
    sp = "DHW"[-nd:] if nd <= 3 else "".join(chr(ord("a") + i) for i in range(nd))
    wspec = sp + "IO" if node.attr("weight_layout", "OIS") == "SIO" else "OI" + sp
    act = "N" + sp + "C" if channels_last else "NC" + sp
    dn = lax.conv_dimension_numbers(x.shape, w.shape, (act, wspec, act))
    conv = lambda x, pads: lax.conv_general_dilated(  # noqa: E731
        x, w, window_strides=s, padding=pads, rhs_dilation=d, feature_group_count=node.attr("group", 1),
        dimension_numbers=dn)
    if _DEPTHWISE_TAPS.get() and _is_depthwise(node, x, w, k, channels_last):
        conv = lambda x, pads: _depthwise_taps(x, w, s, d, pads, k, channels_last,  # noqa: E731
                                               node.attr("weight_layout", "OIS") == "SIO")
    bands = _CONV_BANDS.get().get(node.name, 1)
    y = _in_bands(conv, x, k[0], s[0], d[0], pads, 1 if channels_last else 2, bands) if bands > 1 else conv(x, pads)
    if b is not None:
        y = y + (b if channels_last else b.reshape((1, -1) + (1,) * nd))
    return y


def _conv(node, x, w, b=None):
    return (conv_lowered(node, x, w, b),)


# Depthwise convolutions as sums of shifted slices (below): set by the lowering for
# CPU targets (compiler/passes/lower.py); the reference evaluation keeps lax.conv.
_DEPTHWISE_TAPS = contextvars.ContextVar("depthwise_taps", default=False)
MAX_DEPTHWISE_TAPS = 64  # kernel taps (3x3: 9, ConvNeXt's 7x7: 49, a conformer's 1-D 31)


@contextlib.contextmanager
def _setting(var, value):
    """`var` holds `value` inside the block (the lowering's per-kernel settings)."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def depthwise_taps(on):
    return _setting(_DEPTHWISE_TAPS, bool(on))


def _is_depthwise(node, x, w, k, channels_last):
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


# Convolutions lowered in row bands (node name -> bands), set by the lowering while it
# traces a kernel (compiler/passes/lower.py: where a launch's workspace sets the plan's).
_CONV_BANDS = contextvars.ContextVar("conv_bands", default={})


def conv_bands(bands):
    return _setting(_CONV_BANDS, dict(bands))


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
register("conv", (2, 3), CONV_ATTRS)((_conv_infer, _conv))
register("conv2d", (2, 3), CONV_ATTRS)((_conv_infer, _conv))


def _pool_geometry(node, x):
    """-> kernel, strides, dilations, [(begin, end, ceil extra)] per spatial axis, out shape."""
    _spatial_input(node, x, node.op)
    nd = len(x.shape) - 2
    k = int_list(node, "kernel_shape", nd, minimum=1)
    s, d, pads = _spatial_attrs(node, x, k)
    ceil = flag_attr(node, "ceil_mode", 0)
    geo, out = [], []
    for size, kk, ss, p, dd in zip(x.shape[2:], k, s, pads, d):
        if p[0] >= dd * (kk - 1) + 1 or p[1] >= dd * (kk - 1) + 1:
            fail(node, f"pads {list(node.attr('pads'))} must be smaller than the window {list(k)}")
        o, extra = _out_size(node, size, kk, ss, p, dd, bool(ceil))
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
    return [(x.dtype, _pool_geometry(node, x)[4])]


def _reduce(x, init, op, k, s, d, pads):
    return lax.reduce_window(x, init, op, (1, 1) + tuple(k), (1, 1) + tuple(s), ((0, 0), (0, 0)) + tuple(pads),
                             window_dilation=(1, 1) + tuple(d))


def _maxpool(node, x):
    k, s, d, geo, _ = _pool_geometry(node, x)
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    return (_reduce(x, jnp.array(init, x.dtype), lax.max, k, s, d, [(b, e + extra) for b, e, extra in geo]),)


def _avgpool(node, x):
    k, s, d, geo, _ = _pool_geometry(node, x)
    total = _reduce(_f32(x), 0.0, lax.add, k, s, d, [(b, e + extra) for b, e, extra in geo])
    return ((total / _window_counts(x.shape[2:], k, s, d, geo, node.attr("count_include_pad", 0))).astype(x.dtype),)


def _window_counts(spatial, k, s, d, geo, include_pad):
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
    k, s, d, geo, _ = _pool_geometry(node, x)
    p = float(node.attr("p", 2))
    y = jnp.abs(_f32(x))
    total = _reduce(y * y if p == 2 else y ** p, 0.0, lax.add, k, s, d, [(b, e + extra) for b, e, extra in geo])
    return ((jnp.sqrt(total) if p == 2 else total ** (1.0 / p)).astype(x.dtype),)


POOL_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode")
register("maxpool", (1, 1), POOL_ATTRS + ("storage_order",))((lambda node, ins: _pool_infer(node, ins, False), _maxpool))
register("avgpool", (1, 1), POOL_ATTRS + ("count_include_pad",))((lambda node, ins: _pool_infer(node, ins, True), _avgpool))
register("lppool", (1, 1), POOL_ATTRS + ("p",))((_lppool_infer, _lppool))


def _gap_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    if len(x.shape) < 3:
        fail(node, f"{node.op} needs rank >= 3 (N, C, spatial...), got {fmt(x)}")
    if node.op == "global_maxpool" and 0 in x.shape[2:]:
        fail(node, f"global_maxpool over an empty spatial extent of {fmt(x)}")
    return [(x.dtype, x.shape[:2] + (1,) * (len(x.shape) - 2))]


register("global_avgpool", (1, 1))((_gap_infer, lambda node, x: (
    jnp.mean(_f32(x), axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype),)))
register("global_maxpool", (1, 1))((_gap_infer, lambda node, x: (
    jnp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True),)))


# ---------------------------------------------------------------- lp_norm / mean_variance_norm

def _lp_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    norm_axis(node, int_attr(node, "axis", -1), len(x.shape))
    if int_attr(node, "p", 2) not in (1, 2):
        fail(node, f"attribute 'p' must be 1 or 2, got {node.attr('p')}")
    return [(x.dtype, x.shape)]


def _lp_norm(node, x):
    """ONNX LpNormalization: x over its L1 or L2 norm along `axis`; a zero norm gives 0
    (float32 math)."""
    axis, p = node.attr("axis", -1) % x.ndim, node.attr("p", 2)
    xf = _f32(x)
    norm = jnp.sum(jnp.abs(xf), axis=axis, keepdims=True) if p == 1 else \
        jnp.sqrt(jnp.sum(jnp.square(xf), axis=axis, keepdims=True))
    return (jnp.where(norm == 0, 0.0, xf / jnp.where(norm == 0, 1.0, norm)).astype(x.dtype),)


register("lp_norm", (1, 1), ("axis", "p"))((_lp_infer, _lp_norm))


def _mvn_axes(node, rank):
    axes = [norm_axis(node, a, rank, "axes entry") for a in int_list(node, "axes", default=(0, 2, 3))]
    if not axes or len(set(axes)) != len(axes):
        fail(node, f"attribute 'axes' must name distinct axes, got {list(node.attr('axes', ()))}")
    return tuple(sorted(axes))


def _mvn_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    _mvn_axes(node, len(x.shape))
    return [(x.dtype, x.shape)]


def _mvn(node, x):
    """ONNX MeanVarianceNormalization: (x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9) over
    `axes` (default [0, 2, 3]), as its function body computes it (float32 math)."""
    axes = _mvn_axes(node, x.ndim)
    xf = _f32(x)
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xf), axis=axes, keepdims=True) - jnp.square(mean)
    return (((xf - mean) / (jnp.sqrt(var) + 1e-9)).astype(x.dtype),)


register("mean_variance_norm", (1, 1), ("axes",))((_mvn_infer, _mvn))
