"""Softmax and the normalizations: softmax/log_softmax, instance, group, layer and
batch norm, lp_norm and mean-variance normalization.

Reductions in float16/bfloat16 are computed in float32 and cast back, as ONNX's
stash_type=1 does."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from compiler.ops.precision import widen
from compiler.ops.registry import (
    fail, flag_attr, float_attr, fmt, int_attr, int_list, norm_axis, register, require_float, same_dtype,
)


def _softmax_infer(node, ins):
    require_float(node, ins[0])
    norm_axis(node, int_attr(node, "axis", -1), len(ins[0].shape))
    flag_attr(node, "legacy_flatten", 0)
    return [(ins[0].dtype, ins[0].shape)]


def _softmax_like(fn):
    def lower(node, x):
        axis = node.attr("axis", -1) % x.ndim
        if node.attr("legacy_flatten", 0):  # ONNX before opset 13: x viewed as 2-D at axis
            flat = widen(x).reshape(int(np.prod(x.shape[:axis])), -1)
            return (fn(flat, axis=1).reshape(x.shape).astype(x.dtype),)
        return (fn(widen(x), axis=axis).astype(x.dtype),)
    return lower


# formats: over any axis in nhwc, over the last (padding set to -inf) in aligned (compiler/passes/layout.py)
register("softmax", (1, 1), ("axis", "legacy_flatten"), formats=("nhwc", "aligned"))((
    _softmax_infer, _softmax_like(jax.nn.softmax)))
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
    xf, axes = widen(x), tuple(range(2, x.ndim))
    mean = xf.mean(axis=axes, keepdims=True)
    var = jnp.square(xf - mean).mean(axis=axes, keepdims=True)
    sh = (1, -1) + (1,) * (x.ndim - 2)
    y = (xf - mean) * lax.rsqrt(var + node.attr("epsilon", 1e-5)) * widen(scale).reshape(sh) + widen(bias).reshape(sh)
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
    xf = widen(x).reshape((x.shape[0], g, -1))
    mean = xf.mean(axis=2, keepdims=True)
    var = jnp.square(xf - mean).mean(axis=2, keepdims=True)
    y = ((xf - mean) * lax.rsqrt(var + node.attr("epsilon", 1e-5))).reshape(x.shape)
    scale, bias = widen(scale), widen(bias)
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
    y = (xf - mean) * inv * widen(scale)
    if bias is not None:
        y = y + widen(bias)
    return (y.astype(x.dtype), mean.astype(jnp.float32), inv.astype(jnp.float32))[:len(node.outputs)]


register("layernorm", (2, 3), ('axis', 'epsilon'), n_outputs=None, formats=("aligned",))((_layernorm_infer, _layernorm))


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
    inv = lax.rsqrt(widen(var) + float(node.attr("epsilon", 1e-5))) * widen(scale)
    return ((widen(x) - widen(mean)) * inv + widen(bias)).astype(x.dtype)


def _batchnorm(node, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (batchnorm_broadcast(node, x, *(p.reshape(shape) for p in (scale, bias, mean, var))),)


register("batchnorm", (5, 5), ('epsilon',), formats=("nhwc", "nc1hwc0", "aligned"))((_batchnorm_infer, _batchnorm))


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
    xf = widen(x)
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
    xf = widen(x)
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xf), axis=axes, keepdims=True) - jnp.square(mean)
    return (((xf - mean) / (jnp.sqrt(var) + 1e-9)).astype(x.dtype),)


register("mean_variance_norm", (1, 1), ("axes",))((_mvn_infer, _mvn))
