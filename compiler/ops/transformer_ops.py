"""Transformer building blocks of ONNX opset 23 (ONNX semantics): rms_norm,
rotary_embedding.

rms_norm: y = x / sqrt(mean(x^2 over axes axis..rank-1) + epsilon) * scale, the first
stage in float32 (`stash_type` 1, ONNX's default and the only one taken), scale
broadcasting to x.

rotary_embedding: x [batch, heads, seq, head] (or [batch, seq, hidden] with
`num_heads`) rotated by cos/sin caches: [max_pos, dim/2] indexed by position_ids
[batch, seq], or [batch, seq, dim/2] without position_ids; the first
`rotary_embedding_dim` (default: all) of each head rotate, as two halves or, with
`interleaved`, as even/odd pairs. Positions past the cache are clipped into it (ONNX:
an error, which a compiled program cannot raise).
"""

import jax.numpy as jnp
import numpy as np
from jax import lax

from compiler.ops.registry import fail, flag_attr, float_attr, fmt, int_attr, norm_axis, register, require_float


def _f32(x):
    return x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x


def _stash(node):
    if int_attr(node, "stash_type", 1) != 1:
        fail(node, f"attribute 'stash_type' {node.attr('stash_type')} is not supported (1: float32 statistics)")


# ---------------------------------------------------------------- rms_norm

def _rms_infer(node, ins):
    x, scale = ins
    require_float(node, x)
    if scale.dtype != x.dtype:
        fail(node, f"scale {fmt(scale)} must have x's dtype {x.dtype}")
    norm_axis(node, int_attr(node, "axis", -1), len(x.shape))
    try:
        if tuple(np.broadcast_shapes(scale.shape, x.shape)) != tuple(x.shape):
            raise ValueError
    except ValueError:
        fail(node, f"scale {fmt(scale)} does not broadcast to x {fmt(x)}")
    float_attr(node, "epsilon", 1e-5, minimum=0.0)
    _stash(node)
    return [(x.dtype, x.shape)]


def _rms(node, x, scale):
    axis = node.attr("axis", -1) % x.ndim
    xf = x.astype(jnp.float32) if x.dtype != jnp.float64 else x
    ms = jnp.mean(jnp.square(xf), axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = (xf * lax.rsqrt(ms + float(node.attr("epsilon", 1e-5)))).astype(x.dtype)
    return (y * scale,)


register("rms_norm", (2, 2), ("axis", "epsilon", "stash_type"))((_rms_infer, _rms))


# ---------------------------------------------------------------- rotary_embedding

def _rope_params(node, ins):
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    require_float(node, x)
    for t in (cos, sin):
        if t.dtype != x.dtype:
            fail(node, f"cache {fmt(t)} must have x's dtype {x.dtype}")
    if cos.shape != sin.shape:
        fail(node, f"cos cache {fmt(cos)} and sin cache {fmt(sin)} differ in shape")
    interleaved = flag_attr(node, "interleaved", 0)
    if len(x.shape) == 4:
        batch, heads, seq, head = x.shape
        if node.attr("num_heads") is not None and int_attr(node, "num_heads", 0) != heads:
            fail(node, f"num_heads {node.attr('num_heads')} does not match x {fmt(x)} (batch, heads, seq, head)")
    elif len(x.shape) == 3:
        heads = int_attr(node, "num_heads", 0)
        batch, seq, hidden = x.shape
        if heads < 1 or hidden % heads:
            fail(node, f"a 3-D x {fmt(x)} needs num_heads dividing its hidden size, got {node.attr('num_heads')!r}")
        head = hidden // heads
    else:
        fail(node, f"x {fmt(x)} must be 4-D (batch, heads, seq, head) or 3-D (batch, seq, hidden)")
    dim = int_attr(node, "rotary_embedding_dim", 0) or head
    if dim > head or dim % 2:
        fail(node, f"rotary_embedding_dim {dim} must be even and at most the head size {head}")
    if pos is not None:
        if pos.dtype not in ("int32", "int64") or pos.shape != (batch, seq):
            fail(node, f"position_ids {fmt(pos)} must be integers of shape [{batch}, {seq}]")
        if len(cos.shape) != 2 or cos.shape[1] != dim // 2 or cos.shape[0] < 1:
            fail(node, f"with position_ids, the caches {fmt(cos)} must be [max_position, {dim // 2}]")
    elif cos.shape != (batch, seq, dim // 2):
        fail(node, f"without position_ids, the caches {fmt(cos)} must be [{batch}, {seq}, {dim // 2}]")
    return heads, head, dim, interleaved


def _rope_infer(node, ins):
    _rope_params(node, ins)
    return [(ins[0].dtype, ins[0].shape)]


def _rope(node, x, cos, sin, pos=None):
    heads, head, dim, interleaved = _rope_params(node, (x, cos, sin) + ((pos,) if pos is not None else ()))
    shape = x.shape
    xs = jnp.transpose(x, (0, 2, 1, 3)) if x.ndim == 4 else x.reshape(shape[0], shape[1], heads, head)
    if pos is not None:
        p = jnp.clip(pos, 0, cos.shape[0] - 1)
        cos, sin = cos[p], sin[p]
    cos, sin = _f32(cos)[:, :, None, :], _f32(sin)[:, :, None, :]
    rot, rest = _f32(xs[..., :dim]), xs[..., dim:]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :dim // 2], rot[..., dim // 2:])
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rot = jnp.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = jnp.concatenate([real, imag], axis=-1)
    out = jnp.concatenate([rot.astype(x.dtype), rest], axis=-1)
    return (jnp.transpose(out, (0, 2, 1, 3)) if x.ndim == 4 else out.reshape(shape),)


register("rotary_embedding", (3, 4), ("interleaved", "num_heads", "rotary_embedding_dim"))((_rope_infer, _rope))
