"""Data-movement ops: reshape, flatten, transpose, concat, depth_to_space,
space_to_depth (ONNX semantics: NCHW, in DCR or CRD mode)."""

import math

import jax.numpy as jnp

from compiler.ops.registry import fail, flag_attr, fmt, int_attr, int_list, norm_axis, register


def _reshape_target(node, shape):
    """ONNX rules: 0 copies the input's dimension (unless allowzero=1), one -1 is inferred."""
    spec = int_list(node, "shape", minimum=-1)
    allowzero = flag_attr(node, "allowzero", 0)
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(shape):
                fail(node, f"shape {list(spec)}: 0 at position {i} has no input dimension to copy")
            out.append(shape[i])
        else:
            out.append(d)
    total = math.prod(shape)
    if out.count(-1) > 1:
        fail(node, f"shape {list(spec)} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            fail(node, f"cannot reshape {list(shape)} ({total} elements) to {list(spec)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        fail(node, f"cannot reshape {list(shape)} ({total} elements) to {list(spec)}")
    return tuple(out)


register("reshape", (1, 1), ("allowzero",), static_inputs=((1, "shape"),))((
    lambda node, ins: [(ins[0].dtype, _reshape_target(node, ins[0].shape))],
    lambda node, x: (x.reshape(_reshape_target(node, x.shape)),)))


def _flatten_shape(node, shape):
    r = len(shape)
    axis = int_attr(node, "axis", 1)
    if not -r <= axis <= r:
        fail(node, f"axis {axis} is out of range for rank {r}")
    if axis < 0:
        axis += r
    return (math.prod(shape[:axis]), math.prod(shape[axis:]))


register("flatten", (1, 1), ('axis',))((
    lambda node, ins: [(ins[0].dtype, _flatten_shape(node, ins[0].shape))],
    lambda node, x: (x.reshape(_flatten_shape(node, x.shape)),)))


def _perm(node, rank):
    perm = node.attr("perm")
    if perm is None:
        return tuple(range(rank - 1, -1, -1))
    perm = int_list(node, "perm")
    if sorted(perm) != list(range(rank)):
        fail(node, f"perm {list(perm)} is not a permutation of 0..{rank - 1}")
    return perm


def _transpose_infer(node, ins):
    x = ins[0]
    return [(x.dtype, tuple(x.shape[i] for i in _perm(node, len(x.shape))))]


register("transpose", (1, 1), ('perm',))((_transpose_infer, lambda node, x: (jnp.transpose(x, _perm(node, x.ndim)),)))


def _concat_infer(node, ins):
    dts = {t.dtype for t in ins}
    if len(dts) > 1:
        fail(node, "inputs must share one dtype, got " + ", ".join(fmt(t) for t in ins))
    r = len(ins[0].shape)
    axis = norm_axis(node, int_attr(node, "axis", 0), r)
    for t in ins[1:]:
        if len(t.shape) != r or any(a != b for i, (a, b) in enumerate(zip(t.shape, ins[0].shape)) if i != axis):
            fail(node, f"inputs differ outside axis {axis}: " + ", ".join(fmt(t) for t in ins))
    out = list(ins[0].shape)
    out[axis] = sum(t.shape[axis] for t in ins)
    return [(ins[0].dtype, tuple(out))]


register("concat", (1, 1 << 16), ('axis',), formats=("nhwc", "nc1hwc0", "aligned"))((_concat_infer, lambda node, *xs: (
    jnp.concatenate(xs, axis=node.attr("axis", 0)),)))


def _block_params(node, x):
    if len(x.shape) != 4:
        fail(node, f"input {fmt(x)} must be 4-D (N, C, H, W)")
    if node.attr("blocksize") is None:
        fail(node, "attribute 'blocksize' is required")
    bs = int_attr(node, "blocksize", None)
    if bs < 1:
        fail(node, f"attribute 'blocksize' must be >= 1, got {bs}")
    return bs


def _block_mode(node):
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        fail(node, f"attribute 'mode' must be 'DCR' or 'CRD', got {mode!r}")
    return mode


def _d2s_params(node, x):
    bs = _block_params(node, x)
    n, c, h, w = x.shape
    mode = _block_mode(node)
    if c % (bs * bs):
        fail(node, f"channels of {fmt(x)} must be a multiple of blocksize^2 = {bs * bs}")
    return bs, mode, (n, c // (bs * bs), h * bs, w * bs)


def _d2s(node, x):
    bs, mode, out = _d2s_params(node, x)
    n, c, h, w = x.shape
    if mode == "DCR":  # channels are (block row, block column, output channel)
        y = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD: (output channel, block row, block column)
        y = x.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return (y.reshape(out),)


register("depth_to_space", (1, 1), ("blocksize", "mode"))((
    lambda node, ins: [(ins[0].dtype, _d2s_params(node, ins[0])[2])], _d2s))


def _s2d_params(node, x):
    bs = _block_params(node, x)
    n, c, h, w = x.shape
    if h % bs or w % bs:
        fail(node, f"height and width of {fmt(x)} must be multiples of blocksize {bs}")
    return bs, _block_mode(node), (n, c * bs * bs, h // bs, w // bs)


def _s2d(node, x):
    bs, mode, out = _s2d_params(node, x)
    n, c, h, w = x.shape
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)  # (the inverse of depth_to_space's)
    return (x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(perm).reshape(out),)


register("space_to_depth", (1, 1), ("blocksize", "mode"))((
    lambda node, ins: [(ins[0].dtype, _s2d_params(node, ins[0])[2])], _s2d))


def _transdata_infer(node, ins):
    from aotplan.core import formats

    for key in ("src", "dst"):
        f = node.attr(key, "default")
        if not formats.is_known(f) or not formats.accepts(f, len(ins[0].shape)):
            fail(node, f"attribute {key!r}: {f!r} is not a format that holds {fmt(ins[0])}")
    return [(ins[0].dtype, ins[0].shape)]


# transdata: a storage-format conversion the layout pass inserts (passes/layout.py). On
# logical arrays (the reference, constant folding) it is the identity; kernels convert
# device arrays (compiler/formats.py)
register("transdata", (1, 1), ("src", "dst"), internal=True)((_transdata_infer, lambda node, x: (x,)))
