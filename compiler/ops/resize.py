"""resize (ONNX Resize, opsets 10-19; compiler/frontends/onnx_import/converters_nn.py maps
opset 10's inputs and defaults onto this op).

Supported: mode `nearest` (any dtype) with nearest_mode round_prefer_floor,
round_prefer_ceil, floor or ceil, and modes `linear` and `cubic` (float dtypes;
cubic_coeff_a, exclude_outside, antialias), each with coordinate_transformation_mode
half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric or
tf_crop_and_resize (the only mode that reads `roi`; extrapolation_value outside the
input); the output size from `scales` (size * scale, truncated) or `sizes` (with
keep_aspect_ratio_policy stretch, not_larger or not_smaller), all static inputs, over
every axis or the listed `axes`. Refused, naming the node and the attribute:
tf_half_pixel_for_nn, antialias or exclude_outside with nearest.
nearest_mode `simple` is ONNX Resize-10's rounding as onnxruntime implements it (the
opset-10 text leaves it open): the floor on an axis scaled up, the ceiling on one scaled
down.

Every source coordinate is static: the compiler computes them with numpy, so a kernel
is one gather per resized axis (nearest) or two gathers and a blend with constant
weights (linear, separable per axis, in float32 for float16/bfloat16). Linear clamps
source coordinates into the input, as the reference's edge padding and onnxruntime do.
Cubic, antialias and tf_crop_and_resize take K taps per output (`filter_taps`: ONNX's
reference's windows and weights, indices clamped to the edge), gathered and summed.

Sizes, scales and source coordinates follow onnxruntime's CPU kernel to the bit: they
are float32 arithmetic with its expressions (an output extent is the float32 product
`scale * size` truncated; a scale from `sizes` is the float32 quotient), and an output
of the input's shape is the input unchanged (onnxruntime copies it, whatever the
scales), as is, with antialias, an axis whose extent does not change (onnxruntime's
antialias kernel leaves it alone; its plain linear kernel does not). The round_prefer_*
modes take a coordinate within 1e-6 of a half for the tie, as onnxruntime does.
ONNX's reference evaluator and shape inference compute in float64 instead:
with a scale that is not a power of two they can differ by one in an output extent
(0.7 on 10: 7 here and in onnxruntime, 6 there) or round a nearest-mode tie the other
way (the float32 scale 2/3 puts index 1 at 1.5 in float32, below it in float64).
"""

import math

import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes
from compiler.ops.registry import fail, flag_attr, float_attr, fmt, int_list, norm_axis, register

MODES = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")
F32 = np.float32


def _choice(node, key, default, allowed, refused=()):
    v = node.attr(key, default)
    if v in refused:
        fail(node, f"attribute {key!r} {v!r} is not supported (supported: {', '.join(allowed)})")
    if v not in allowed:
        fail(node, f"attribute {key!r} must be one of {', '.join(allowed + tuple(refused))}, got {v!r}")
    return v


def _floats(node, key):
    v = node.attr(key)
    v = () if v is None else (v if isinstance(v, tuple) else (v,))
    if not all(isinstance(f, (int, float)) and not isinstance(f, bool) and math.isfinite(f) for f in v):
        fail(node, f"{key!r} must be a list of finite numbers, got {v!r}")
    return tuple(float(f) for f in v)


def _plan(node, shape):
    """-> (mode, coordinate mode, nearest mode, [(axis, out extent, scale)] for each
    resized axis, output shape); every attribute checked."""
    rank = len(shape)
    mode = _choice(node, "mode", "nearest", MODES)
    ctm = _choice(node, "coordinate_transformation_mode", "half_pixel", COORD_MODES, ("tf_half_pixel_for_nn",))
    nearest = _choice(node, "nearest_mode", "round_prefer_floor", NEAREST_MODES)
    policy = _choice(node, "keep_aspect_ratio_policy", "stretch", ASPECT_POLICIES)
    float_attr(node, "cubic_coeff_a", -0.75), float_attr(node, "extrapolation_value", 0.0)
    roi = _floats(node, "roi")  # read by tf_crop_and_resize only
    if flag_attr(node, "exclude_outside", 0) and mode == "nearest":
        fail(node, "attribute 'exclude_outside' 1 is not supported with mode 'nearest'")
    if node.attr("axes") is None:
        axes = list(range(rank))
    else:
        axes = [norm_axis(node, a, rank, "axes entry") for a in int_list(node, "axes")]
        if len(set(axes)) != len(axes):
            fail(node, f"attribute 'axes' {list(node.attr('axes'))} repeats an axis (rank {rank})")
    scales = _floats(node, "scales")
    sizes = () if node.attr("sizes") is None else tuple(int_list(node, "sizes", minimum=0))
    if bool(scales) == bool(sizes):
        fail(node, f"needs exactly one of 'scales' and 'sizes' (non-empty), got scales {list(scales)} and "
                   f"sizes {list(sizes)}")
    given = scales or sizes
    if len(given) != len(axes):
        fail(node, f"{'scales' if scales else 'sizes'} {list(given)} must have one entry per axis {axes} "
                   f"of input {list(shape)}")
    if scales:
        if any(s <= 0 for s in scales):
            fail(node, f"scales {list(scales)} must be > 0")
        with np.errstate(over="ignore"):
            extents = [F32(s) * F32(shape[a]) for a, s in zip(axes, scales)]
        if not all(np.isfinite(extents)):
            fail(node, f"scales {list(scales)} overflow float32 on input {list(shape)}")
        per = [(a, int(n), float(F32(s))) for a, n, s in zip(axes, extents, scales)]
    else:
        for a, n in zip(axes, sizes):
            if shape[a] == 0 and n != 0:
                fail(node, f"cannot resize the empty axis {a} of input {list(shape)} to {n}")
        ratio = [F32(n) / F32(shape[a]) if shape[a] else F32(1) for a, n in zip(axes, sizes)]
        if policy == "stretch":
            per = [(a, n, float(r)) for a, n, r in zip(axes, sizes, ratio)]
        else:
            r = min(ratio) if policy == "not_larger" else max(ratio)
            per = [(a, int(_round_away(np.float64(r * F32(shape[a])))), float(r)) for a in axes]
    if flag_attr(node, "antialias", 0) and mode == "nearest":
        fail(node, "attribute 'antialias' 1 is not supported with mode 'nearest'")
    if ctm == "tf_crop_and_resize":
        if len(roi) != 2 * len(axes):
            fail(node, f"roi {list(roi)} must hold a start and an end for each axis {axes} "
                       f"({2 * len(axes)} numbers) for coordinate_transformation_mode 'tf_crop_and_resize'")
        box = dict(zip(axes, zip(roi[:len(axes)], roi[len(axes):])))
        per = [(a, n, s, box[a]) for a, n, s in per]
    else:
        per = [(a, n, s, None) for a, n, s in per]
    out = list(shape)
    for a, n, _, _ in per:
        if n > 0 and shape[a] == 0:
            fail(node, f"cannot resize the empty axis {a} of input {list(shape)} to {n}")
        out[a] = n
    if ctm == "tf_crop_and_resize":  # a crop of the same size is no copy
        return mode, ctm, nearest, [p for p in per if p[1]], tuple(out)
    changed = [p for p in per if not (p[1] == shape[p[0]] and p[2] == 1.0)]
    if tuple(out) == tuple(shape):  # onnxruntime copies the input, whatever the scales
        changed = []
    if flag_attr(node, "antialias", 0):  # onnxruntime's antialias kernel leaves such an axis alone
        changed = [p for p in changed if p[1] != shape[p[0]]]
    return mode, ctm, nearest, changed, tuple(out)


def _resize_infer(node, ins):
    x = ins[0]
    mode, _, _, _, out = _plan(node, x.shape)
    if mode != "nearest" and x.dtype not in dtypes.FLOAT_DTYPES:
        fail(node, f"mode {mode!r} needs a float input, got {fmt(x)} (mode 'nearest' takes any dtype)")
    return [(x.dtype, out)]


def _round_away(x):
    """C's round(): halves away from zero (float64, exact on float32 values)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def source_coords(ctm, n_in, n_out, scale, box=None):
    """The input coordinate of each output index along one axis: float32, with
    onnxruntime's expressions and order of operations (half_pixel_symmetric in float64
    from float32 terms, as it does). `box`: tf_crop_and_resize's (start, end) on this axis."""
    y = np.arange(n_out, dtype=F32)
    s, length, resized = F32(scale), F32(n_in), F32(n_out)
    if ctm == "tf_crop_and_resize":
        a, b = F32(box[0]), F32(box[1])
        if n_out == 1:
            return np.full(n_out, F32(0.5) * (a + b) * (length - F32(1)), F32)
        return a * (length - F32(1)) + (y * (b - a) * (length - F32(1))) / (resized - F32(1))
    if ctm == "asymmetric":
        return y / s
    if ctm == "align_corners":
        return np.zeros(n_out, F32) if n_out == 1 else y * (length - F32(1)) / (resized - F32(1))
    if ctm == "pytorch_half_pixel" and n_out == 1:
        return np.zeros(n_out, F32)
    if ctm == "half_pixel_symmetric":
        offset = (length / F32(2)) * (F32(1) - resized / (s * length))
        return (np.float64(offset) + (y.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(F32)
    return (y + F32(0.5)) / s - F32(0.5)


def nearest_index(x, mode, n_in, scale):
    """Round float32 coordinates `x` to input indices as onnxruntime does, clamped. Its
    round_prefer_* modes take a coordinate within 1e-6 of a half for the tie (a float32
    coordinate from a rounded scale, 2/7 say, misses the half by an ulp or so)."""
    x = np.asarray(x, np.float64)  # the float32 values exactly: the tests below are exact
    lo = np.floor(x)
    tie = np.abs(x - lo - 0.5) <= np.float64(F32(1e-6))
    if mode == "simple":
        i = np.ceil(x) if scale < 1 else np.trunc(x)
    elif mode == "round_prefer_floor":
        i = np.where(tie, lo, _round_away(x))
    elif mode == "round_prefer_ceil":
        i = np.where(tie, lo + 1, _round_away(x))
    elif mode == "ceil":
        i = np.ceil(x)
    else:
        i = np.floor(x)
    return np.clip(i, 0, n_in - 1).astype(np.int32)


def resized_axes(node, shape):
    """The axes a resize of an input of `shape` changes."""
    return [p[0] for p in _plan(node, tuple(shape))[3]]


def _kernel(mode, d, a):
    """The interpolation kernel at distances `d` (cubic: Keys' with coefficient `a`)."""
    d = np.abs(d)
    if mode == "linear":
        return np.clip(1 - d, 0, 1)
    d2, d3 = d * d, d * d * d
    return np.where(d <= 1, (a + 2) * d3 - (a + 3) * d2 + 1,
                    np.where(d < 2, a * d3 - 5 * a * d2 + 8 * a * d - 4 * a, 0.0))


def filter_taps(mode, src, n_in, scale, antialias, a=-0.75, exclude_outside=False):
    """(indices [n_out, K], weights [n_out, K]) of a linear or cubic filter at source
    coordinates `src`, as ONNX's reference computes them: K taps around each coordinate
    (2 or 4; with antialias on an axis scaled down by s, the kernel stretched by 1/s and
    the weights normalized to sum 1), indices beyond the input clamped to its edge, or
    with exclude_outside given weight 0 (the rest renormalized)."""
    x = np.asarray(src, np.float64)
    support = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    start = int(np.floor(-support / s) + 1) if antialias else 1 - support
    base = np.floor(x)
    ratio = x - base
    base = np.where(ratio == 0, base - 1, base)  # the reference takes the ratio in (0, 1]
    ratio = np.where(ratio == 0, 1.0, ratio)
    i = np.arange(start, 2 - start, dtype=np.float64)
    pos = base[:, None] + i[None, :]
    w = _kernel(mode, (i[None, :] - ratio[:, None]) * s, a)
    if exclude_outside:
        w = np.where((pos >= 0) & (pos <= n_in - 1), w, 0.0)
    if antialias or exclude_outside:
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(pos, 0, n_in - 1).astype(np.int32), w


def resize_on(node, x, shape, axis_of=lambda a: a):
    """Resize array `x`, which holds a tensor of logical `shape`: logical axis `a` is
    x's axis `axis_of(a)` (a storage format's device axis; compiler/formats.py)."""
    mode, ctm, nearest, changed, _ = _plan(node, tuple(shape))
    y = x if mode == "nearest" else x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x
    antialias, crop = bool(node.attr("antialias", 0)), ctm == "tf_crop_and_resize"
    for axis, n_out, scale, box in changed:
        n_in, dev = shape[axis], axis_of(axis)
        src = source_coords(ctm, n_in, n_out, scale, box)
        bshape = (-1,) + (1,) * (y.ndim - dev - 1)
        if mode == "nearest":
            y = jnp.take(y, nearest_index(src, nearest, n_in, scale), axis=dev)
        elif mode == "cubic" or antialias or crop:
            idx, w = filter_taps(mode, src, n_in, scale, antialias, float(node.attr("cubic_coeff_a", -0.75)),
                                 bool(node.attr("exclude_outside", 0)))
            w = w.astype(np.dtype(y.dtype))
            y = sum(jnp.take(y, idx[:, k], axis=dev) * w[:, k].reshape(bshape) for k in range(idx.shape[1]))
        else:
            y = _linear(y, src, n_in, dev)
        if crop:  # a coordinate outside the input gives extrapolation_value
            out = ((src < 0) | (src > F32(n_in - 1))).reshape(bshape)
            y = jnp.where(out, jnp.asarray(float(node.attr("extrapolation_value", 0.0)), y.dtype), y)
    return y.astype(x.dtype)


def _linear(y, src, n_in, dev):
    """Plain linear interpolation along device axis `dev`: two gathers and a blend, the
    coordinates clamped into the input (onnxruntime's arithmetic, to the bit)."""
    src = np.clip(src, 0, n_in - 1).astype(np.float64)
    i0 = np.floor(src).astype(np.int32)
    i1 = np.minimum(i0 + 1, n_in - 1).astype(np.int32)
    w = (src - i0).reshape((-1,) + (1,) * (y.ndim - dev - 1)).astype(np.dtype(y.dtype))
    return jnp.take(y, i0, axis=dev) * (1 - w) + jnp.take(y, i1, axis=dev) * w


def _resize(node, x):
    return (resize_on(node, x, x.shape),)


RESIZE_ATTRS = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy")
register("resize", (1, 1), RESIZE_ATTRS, static_inputs=((1, "roi"), (2, "scales"), (3, "sizes")),
         formats=("nhwc", "nc1hwc0"))((_resize_infer, _resize))
