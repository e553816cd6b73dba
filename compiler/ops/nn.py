"""Neural-network ops: matmul, gemm, softmax, layernorm, batchnorm, conv2d, pooling.

Reductions in float16/bfloat16 (softmax, layernorm, batchnorm, average pooling) are
computed in float32 and cast back, as ONNX's stash_type=1 does."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from aotplan import dtypes
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
    if dt not in dtypes.FLOAT_DTYPES + ("int32", "int64"):
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
    return [(ins[0].dtype, ins[0].shape)]


register("softmax", (1, 1), ('axis',))((_softmax_infer, lambda node, x: (
    jax.nn.softmax(_f32(x), axis=node.attr("axis", -1)).astype(x.dtype),)))


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
    return [(x.dtype, x.shape)]


def _layernorm(node, x, scale, bias=None):
    axis = node.attr("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    xf = _f32(x)
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=axes, keepdims=True)
    y = (xf - mean) * lax.rsqrt(var + float(node.attr("epsilon", 1e-5))) * _f32(scale)
    if bias is not None:
        y = y + _f32(bias)
    return (y.astype(x.dtype),)


register("layernorm", (2, 3), ('axis', 'epsilon'))((_layernorm_infer, _layernorm))


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


def _batchnorm(node, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = lax.rsqrt(_f32(var) + float(node.attr("epsilon", 1e-5))) * _f32(scale)
    y = (_f32(x) - _f32(mean).reshape(shape)) * inv.reshape(shape) + _f32(bias).reshape(shape)
    return (y.astype(x.dtype),)


register("batchnorm", (5, 5), ('epsilon',))((_batchnorm_infer, _batchnorm))


# ---------------------------------------------------------------- conv / pooling

def _window_out(node, size, k, s, p0, p1, d=1):
    span = d * (k - 1) + 1
    if size + p0 + p1 < span:
        fail(node, f"window {k} (dilation {d}) does not fit input extent {size} with pads ({p0}, {p1})")
    return (size + p0 + p1 - span) // s + 1


def _conv_infer(node, ins):
    x, w = ins[0], ins[1]
    require_float(node, x)
    same_dtype(node, ins)
    if len(x.shape) != 4 or len(w.shape) != 4:
        fail(node, f"conv2d needs 4-D NCHW input and OIHW weight, got {fmt(x)} and {fmt(w)}")
    g = int_attr(node, "group", 1)
    strides = int_list(node, "strides", 2, (1, 1), minimum=1)
    pads = int_list(node, "pads", 4, (0, 0, 0, 0), minimum=0)
    dil = int_list(node, "dilations", 2, (1, 1), minimum=1)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    if g < 1 or c % g or m % g or cg != c // g:
        fail(node, f"group={g}: input channels {c} and weight {fmt(w)} do not agree (weight dim 1 must be C/group)")
    if len(ins) == 3 and ins[2].shape != (m,):
        fail(node, f"bias {fmt(ins[2])} must have shape [{m}]")
    oh = _window_out(node, h, kh, strides[0], pads[0], pads[2], dil[0])
    ow = _window_out(node, wd, kw, strides[1], pads[1], pads[3], dil[1])
    return [(x.dtype, (n, m, oh, ow))]


def _conv(node, x, w, b=None):
    p = node.attr("pads", (0, 0, 0, 0))
    y = lax.conv_general_dilated(
        x, w, window_strides=node.attr("strides", (1, 1)), padding=[(p[0], p[2]), (p[1], p[3])],
        rhs_dilation=node.attr("dilations", (1, 1)), feature_group_count=node.attr("group", 1),
        dimension_numbers=("NCHW", "OIHW", "NCHW"))
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return (y,)


register("conv2d", (2, 3), ('strides', 'pads', 'dilations', 'group'))((_conv_infer, _conv))


def _pool_infer(node, ins, float_only):
    x = ins[0]
    if float_only:
        require_float(node, x)
    elif x.dtype == "bool":
        fail(node, f"input {fmt(x)} must be numeric")
    if len(x.shape) != 4:
        fail(node, f"pooling needs a 4-D NCHW input, got {fmt(x)}")
    k = int_list(node, "kernel_shape", 2, minimum=1)
    s = int_list(node, "strides", 2, (1, 1), minimum=1)
    p = int_list(node, "pads", 4, (0, 0, 0, 0), minimum=0)
    if float_only:
        flag_attr(node, "count_include_pad", 0)
    if p[0] >= k[0] or p[2] >= k[0] or p[1] >= k[1] or p[3] >= k[1]:
        fail(node, f"pads {list(p)} must be smaller than the kernel {list(k)}")
    n, c, h, w = x.shape
    return [(x.dtype, (n, c, _window_out(node, h, k[0], s[0], p[0], p[2]),
                       _window_out(node, w, k[1], s[1], p[1], p[3])))]


def _window(node):
    k, s = node.attr("kernel_shape"), node.attr("strides", (1, 1))
    p = node.attr("pads", (0, 0, 0, 0))
    return (1, 1) + tuple(k), (1, 1) + tuple(s), ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3]))


def _maxpool(node, x):
    dims, strides, pads = _window(node)
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    return (lax.reduce_window(x, jnp.array(init, x.dtype), lax.max, dims, strides, pads),)


def _avgpool(node, x):
    dims, strides, pads = _window(node)
    xf = _f32(x)
    total = lax.reduce_window(xf, 0.0, lax.add, dims, strides, pads)
    if node.attr("count_include_pad", 0):
        count = float(np.prod(dims))
    else:
        count = lax.reduce_window(jnp.ones(x.shape[2:], jnp.float32), 0.0, lax.add, dims[2:], strides[2:], pads[2:])
    return ((total / count).astype(x.dtype),)


register("maxpool", (1, 1), ('kernel_shape', 'strides', 'pads'))((lambda node, ins: _pool_infer(node, ins, False), _maxpool))
register("avgpool", (1, 1), ('kernel_shape', 'strides', 'pads', 'count_include_pad'))((lambda node, ins: _pool_infer(node, ins, True), _avgpool))


def _gap_infer(node, ins):
    x = ins[0]
    require_float(node, x)
    if len(x.shape) < 3:
        fail(node, f"global_avgpool needs rank >= 3 (N, C, spatial...), got {fmt(x)}")
    return [(x.dtype, x.shape[:2] + (1,) * (len(x.shape) - 2))]


register("global_avgpool", (1, 1))((_gap_infer, lambda node, x: (
    jnp.mean(_f32(x), axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype),)))
