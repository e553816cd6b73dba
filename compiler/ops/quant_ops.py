"""Linear quantization (ONNX semantics): quantize_linear, dequantize_linear.

    quantize_linear(x, scale, zero_point?)    y = saturate(round_half_even(x / scale) + zero_point)
    dequantize_linear(x, scale, zero_point?)  y = (x - zero_point) * scale

Quantized types: int8, uint8, int16, uint16 (dequantize also int32); float8, 4-bit and
2-bit types are not supported. The scale's shape picks the granularity: a scalar (or
one element) is per tensor; a 1-D scale of x's length on `axis` (default 1) per axis;
a scale of x's rank, x's shape but ceil(D / block_size) on `axis`, per block
(`block_size` > 0). zero_point has the scale's shape and the quantized type; absent, 0
(quantize_linear's type then `output_dtype`, default uint8). The division is done in
the scale's float type (or `precision`'s), as ONNX says; the rest in float32, where
every value of the quantized types is exact. A QDQ model runs as float arithmetic
between its quantize/dequantize pairs ("fake quantization"): onnxruntime fuses such
pairs into integer kernels, whose rounding of intermediate sums can differ from ours by
one quantum.
"""

import math

import jax.numpy as jnp

from aotplan.core import dtypes
from compiler.ops.registry import fail, fmt, int_attr, norm_axis, register

QUANT_DTYPES = ("int8", "uint8", "int16", "uint16")
DEQUANT_DTYPES = QUANT_DTYPES + ("int32",)


def _name(dt):
    """A dtype name from a name (shape rules) or a numpy dtype (lowerings)."""
    return dt if isinstance(dt, str) else dtypes.dtype_name(dt)


def _granularity(node, x, scale, zp):
    """-> (axis, block): axis None for per tensor; block 0 for per axis."""
    if zp is not None and zp.shape != scale.shape:
        fail(node, f"zero point {fmt(zp)} must have the shape of scale {fmt(scale)}")
    if scale.dtype not in dtypes.FLOAT_DTYPES:
        fail(node, f"scale {fmt(scale)} must be a float type")
    block = int_attr(node, "block_size", 0)
    if block < 0:
        fail(node, f"attribute 'block_size' must be >= 0, got {block}")
    if math.prod(scale.shape) == 1 and len(scale.shape) <= 1 and not block:
        return None, 0
    if not x.shape:
        fail(node, f"scale {fmt(scale)} must be a scalar for the scalar input {fmt(x)}")
    axis = norm_axis(node, int_attr(node, "axis", 1), len(x.shape))
    if not block:
        if scale.shape != (x.shape[axis],):
            fail(node, f"scale {fmt(scale)} must be a scalar, or 1-D of length {x.shape[axis]} (axis {axis} of "
                       f"{fmt(x)}), or blocked with block_size")
        return axis, 0
    want = tuple(-(-d // block) if a == axis else d for a, d in enumerate(x.shape))
    if scale.shape != want:
        fail(node, f"scale {fmt(scale)} must have shape {list(want)} for blocks of {block} on axis {axis} of "
                   f"{fmt(x)}")
    return axis, block


def _expand(v, x_shape, axis, block):
    """scale or zero point broadcast to x's shape."""
    if axis is None:
        return v.reshape(())
    if not block:
        shape = [1] * len(x_shape)
        shape[axis] = x_shape[axis]
        return v.reshape(shape)
    return jnp.repeat(v, block, axis=axis)[tuple(slice(0, d) for d in x_shape)]


def _out_dtype(node, zp):
    dt = _name(zp.dtype) if zp is not None else node.attr("output_dtype", "uint8")
    if zp is not None and node.attr("output_dtype") not in (None, dt):
        fail(node, f"attribute 'output_dtype' {node.attr('output_dtype')!r} differs from the zero point's "
                   f"{zp.dtype}")
    if dt not in QUANT_DTYPES:
        fail(node, f"quantized type {dt!r} is not supported (supported: {', '.join(QUANT_DTYPES)})")
    return dt


def _precision(node, scale):
    p = node.attr("precision", _name(scale.dtype))
    if p not in dtypes.FLOAT_DTYPES:
        fail(node, f"attribute 'precision' must be a float type, got {p!r}")
    return p


def _quantize_infer(node, ins):
    x, scale, zp = (list(ins) + [None])[:3]
    if x.dtype not in dtypes.FLOAT_DTYPES + ("int32",):
        fail(node, f"input {fmt(x)} must be a float type or int32")
    _granularity(node, x, scale, zp)
    _precision(node, scale)
    return [(_out_dtype(node, zp), x.shape)]


def _quantize(node, x, scale, zp=None):
    axis, block = _granularity(node, x, scale, zp)
    pdt = dtypes.np_dtype(_precision(node, scale))
    pdt = jnp.float32 if pdt == jnp.float64 and x.dtype != jnp.float64 else pdt
    q = jnp.round(x.astype(pdt) / _expand(scale, x.shape, axis, block).astype(pdt)).astype(jnp.float32)
    if zp is not None:
        q = q + _expand(zp, x.shape, axis, block).astype(jnp.float32)
    out = dtypes.np_dtype(_out_dtype(node, zp))
    info = jnp.iinfo(out)
    return (jnp.clip(q, info.min, info.max).astype(out),)


register("quantize_linear", (2, 3), ("axis", "block_size", "output_dtype", "precision"))((
    _quantize_infer, _quantize))


def _dequantize_infer(node, ins):
    x, scale, zp = (list(ins) + [None])[:3]
    if x.dtype not in DEQUANT_DTYPES:
        fail(node, f"input {fmt(x)} must be one of {', '.join(DEQUANT_DTYPES)}")
    if zp is not None and zp.dtype != x.dtype:
        fail(node, f"zero point {fmt(zp)} must have x's dtype {x.dtype}")
    if x.dtype == "int32" and zp is not None:
        fail(node, f"an int32 input takes no zero point (ONNX: it must be 0), got {fmt(zp)}")
    _granularity(node, x, scale, zp)
    out = node.attr("output_dtype", _name(scale.dtype))
    if out not in dtypes.FLOAT_DTYPES:
        fail(node, f"attribute 'output_dtype' must be a float type, got {out!r}")
    return [(out, x.shape)]


def _dequantize(node, x, scale, zp=None):
    axis, block = _granularity(node, x, scale, zp)
    v = x.astype(jnp.int32)
    if zp is not None:
        v = v - _expand(zp, x.shape, axis, block).astype(jnp.int32)
    y = v.astype(jnp.float32) * _expand(scale, x.shape, axis, block).astype(jnp.float32)
    return (y.astype(dtypes.np_dtype(node.attr("output_dtype", _name(scale.dtype)))),)


register("dequantize_linear", (2, 3), ("axis", "block_size", "output_dtype"))((_dequantize_infer, _dequantize))
