"""Indexing ops (ONNX semantics): gather_elements, gather_nd, scatter_elements,
scatter_nd, one_hot, hardmax.

Indices are int32 or int64; negative ones count from the end of their axis. ONNX makes
an index out of range an error, which a compiled program cannot raise: gathers clip
such an index into range (as `gather` does, compiler/ops/data_ops.py), scatters drop
the update, one_hot gives a row of off values (ONNX's reference does the same). With
reduction `none`, duplicate scatter indices leave one of the updates (ONNX leaves the
order undefined); `add`, `mul`, `max`, `min` combine them all.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes
from compiler.ops.registry import fail, flag_attr, fmt, int_attr, norm_axis, register

INDEX_DTYPES = ("int32", "int64")
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _check_indices(node, idx, data=None):
    if idx.dtype not in INDEX_DTYPES:
        fail(node, f"indices {fmt(idx)} must be int32 or int64" + (f" (data {fmt(data)})" if data else ""))


def _wrap(idx, n):
    """Negative indices counted from the end (of an axis of length n)."""
    return jnp.where(idx < 0, idx + n, idx)


def _for_gather(idx, n):
    """Wrapped, then clipped into [0, n - 1] (jax would wrap a still-negative index again)."""
    return jnp.clip(_wrap(idx, n), 0, n - 1)


def _for_scatter(idx, n):
    """Wrapped; one still out of range becomes n, which mode="drop" drops."""
    w = _wrap(idx, n)
    return jnp.where((w < 0) | (w >= n), n, w)


def _reduction(node):
    r = node.attr("reduction", "none")
    if r not in REDUCTIONS:
        fail(node, f"attribute 'reduction' must be one of {', '.join(REDUCTIONS)}, got {r!r}")
    return r


def _scatter(ref, r, updates):
    """x.at[...] with ONNX's reduction; out-of-range indices are dropped."""
    if r == "none":
        return ref.set(updates, mode="drop")
    return {"add": ref.add, "mul": ref.multiply, "max": ref.max, "min": ref.min}[r](updates, mode="drop")


# ---------------------------------------------------------------- gather_elements / scatter_elements

def _elements_params(node, data, idx, updates=None):
    _check_indices(node, idx, data)
    r = len(data.shape)
    axis = norm_axis(node, int_attr(node, "axis", 0), r)
    if len(idx.shape) != r:
        fail(node, f"indices {fmt(idx)} must have the rank of data {fmt(data)}")
    if updates is not None and updates.shape != idx.shape:
        fail(node, f"updates {fmt(updates)} must have the shape of indices {fmt(idx)}")
    for a in range(r):
        if a != axis and idx.shape[a] > data.shape[a]:
            fail(node, f"indices {fmt(idx)} exceed data {fmt(data)} on axis {a}")
    if data.shape[axis] == 0 and math.prod(idx.shape):
        fail(node, f"cannot index the empty axis {axis} of {fmt(data)}")
    return axis


def _gather_elements_infer(node, ins):
    data, idx = ins
    _elements_params(node, data, idx)
    return [(data.dtype, idx.shape)]


def _full_index(idx, axis, data_shape, fix):
    """Index arrays for every axis: idx (`fix`ed) on `axis`, the position elsewhere."""
    grids = list(jnp.indices(idx.shape, sparse=True))
    grids[axis] = fix(idx, data_shape[axis])
    return tuple(grids)


def _gather_elements(node, data, idx):
    axis = node.attr("axis", 0) % data.ndim
    return (data[_full_index(idx, axis, data.shape, _for_gather)],)


register("gather_elements", (2, 2), ("axis",))((_gather_elements_infer, _gather_elements))


def _scatter_elements_infer(node, ins):
    data, idx, updates = ins
    if updates.dtype != data.dtype:
        fail(node, f"updates {fmt(updates)} must have data's dtype {data.dtype}")
    _elements_params(node, data, idx, updates)
    _reduction(node)
    return [(data.dtype, data.shape)]


def _scatter_elements(node, data, idx, updates):
    axis = node.attr("axis", 0) % data.ndim
    return (_scatter(data.at[_full_index(idx, axis, data.shape, _for_scatter)], node.attr("reduction", "none"),
                     updates),)


register("scatter_elements", (3, 3), ("axis", "reduction"))((_scatter_elements_infer, _scatter_elements))


# ---------------------------------------------------------------- gather_nd / scatter_nd

def _nd_params(node, data, idx):
    _check_indices(node, idx, data)
    b = int_attr(node, "batch_dims", 0)
    if not idx.shape:
        fail(node, f"indices {fmt(idx)} must have rank >= 1")
    k = idx.shape[-1]
    if not 0 <= b < min(len(data.shape), len(idx.shape)):
        fail(node, f"batch_dims {b} must be in [0, {min(len(data.shape), len(idx.shape)) - 1}] for data "
                   f"{fmt(data)} and indices {fmt(idx)}")
    if data.shape[:b] != idx.shape[:b]:
        fail(node, f"the first {b} (batch) dimensions of data {fmt(data)} and indices {fmt(idx)} differ")
    if not 1 <= k <= len(data.shape) - b:
        fail(node, f"the last dimension of indices {fmt(idx)} must be in [1, {len(data.shape) - b}] "
                   f"(data {fmt(data)}, batch_dims {b})")
    if 0 in data.shape[b:b + k] and math.prod(idx.shape[:-1]):
        fail(node, f"cannot index the empty axis {b + data.shape[b:b + k].index(0)} of {fmt(data)} with indices "
                   f"{fmt(idx)}")
    return b, k


def _gather_nd_infer(node, ins):
    data, idx = ins
    b, k = _nd_params(node, data, idx)
    return [(data.dtype, data.shape[:b] + idx.shape[b:-1] + data.shape[b + k:])]


def _nd_index(idx, shape, fix):
    return tuple(fix(idx[..., j], shape[j]) for j in range(idx.shape[-1]))


def _gather_nd(node, data, idx):
    b, k = node.attr("batch_dims", 0), idx.shape[-1]
    shape = data.shape[:b] + idx.shape[b:-1] + data.shape[b + k:]
    if not math.prod(shape):  # (indexing an empty axis raises, even with no indices)
        return (jnp.zeros(shape, data.dtype),)

    def one(d, i):
        return d[_nd_index(i, d.shape, _for_gather)]
    if b == 0:
        return (one(data, idx),)
    nb = math.prod(data.shape[:b])
    out = jax.vmap(one)(data.reshape((nb,) + data.shape[b:]), idx.reshape((nb,) + idx.shape[b:]))
    return (out.reshape(shape),)


register("gather_nd", (2, 2), ("batch_dims",))((_gather_nd_infer, _gather_nd))


def _scatter_nd_infer(node, ins):
    data, idx, updates = ins
    if updates.dtype != data.dtype:
        fail(node, f"updates {fmt(updates)} must have data's dtype {data.dtype}")
    _, k = _nd_params(node, data, idx)
    want = idx.shape[:-1] + data.shape[k:]
    if updates.shape != want:
        fail(node, f"updates {fmt(updates)} must have shape {list(want)} (indices {fmt(idx)}, data {fmt(data)})")
    _reduction(node)
    return [(data.dtype, data.shape)]


def _scatter_nd(node, data, idx, updates):
    if not (data.size and math.prod(idx.shape[:-1])):  # nothing to write (indexing an empty axis raises)
        return (data,)
    return (_scatter(data.at[_nd_index(idx, data.shape, _for_scatter)], node.attr("reduction", "none"), updates),)


register("scatter_nd", (3, 3), ("reduction",))((_scatter_nd_infer, _scatter_nd))


# ---------------------------------------------------------------- one_hot

def _one_hot_params(node, idx, values):
    if idx.dtype not in dtypes.INT_DTYPES + dtypes.FLOAT_DTYPES:
        fail(node, f"indices {fmt(idx)} must be numeric")
    if node.attr("depth") is None:
        fail(node, "'depth' is required (input 2, a constant)")
    depth = node.attr("depth")
    if isinstance(depth, (list, tuple)):
        depth = depth[0] if len(depth) == 1 else None
    if isinstance(depth, float) and depth.is_integer():
        depth = int(depth)
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        fail(node, f"depth must be one integer >= 1, got {node.attr('depth')!r}")
    if tuple(values.shape) != (2,):
        fail(node, f"values {fmt(values)} must hold two elements (off, on)")
    axis = norm_axis(node, int_attr(node, "axis", -1), len(idx.shape) + 1)
    return depth, axis


def _one_hot_infer(node, ins):
    idx, values = ins
    depth, axis = _one_hot_params(node, idx, values)
    return [(values.dtype, idx.shape[:axis] + (depth,) + idx.shape[axis:])]


def _one_hot(node, idx, values):
    depth, axis = _one_hot_params(node, idx, values)
    i = idx if jnp.issubdtype(idx.dtype, jnp.integer) else jnp.trunc(idx).astype(jnp.int32)
    i = jnp.expand_dims(_wrap(i, depth), axis)
    shape = [1] * i.ndim
    shape[axis] = depth
    hit = i == jnp.arange(depth, dtype=i.dtype).reshape(shape)
    return (jnp.where(hit, values[1], values[0]),)


# (inputs indices, values, depth: ONNX's OneHot has depth second; static inputs come last here)
register("one_hot", (2, 2), ("axis",), static_inputs=((2, "depth"),))((_one_hot_infer, _one_hot))


# ---------------------------------------------------------------- hardmax

def _hardmax_infer(node, ins):
    x = ins[0]
    if x.dtype not in dtypes.FLOAT_DTYPES + dtypes.INT_DTYPES:
        fail(node, f"input {fmt(x)} must be numeric")
    norm_axis(node, int_attr(node, "axis", -1), len(x.shape))
    flag_attr(node, "legacy_flatten", 0)
    return [(x.dtype, x.shape)]


def _hardmax(node, x):
    """1 at the first maximum along `axis`, 0 elsewhere (before opset 13: of x viewed
    as 2-D at axis)."""
    axis = node.attr("axis", -1) % x.ndim
    y = x.reshape(int(np.prod(x.shape[:axis])), -1) if node.attr("legacy_flatten", 0) else x
    a = 1 if node.attr("legacy_flatten", 0) else axis
    if y.size == 0:  # nothing to mark (argmax has no answer on an empty axis)
        return (jnp.zeros(x.shape, x.dtype),)
    hit = jnp.argmax(y, axis=a, keepdims=True) == jax.lax.broadcasted_iota(jnp.int32, y.shape, a)
    return (hit.astype(x.dtype).reshape(x.shape),)


register("hardmax", (1, 1), ("axis", "legacy_flatten"))((_hardmax_infer, _hardmax))


# ---------------------------------------------------------------- tensor_scatter

def _tensor_scatter_params(node, past, update, idx):
    r = len(past.shape)
    if r < 2:
        fail(node, f"past_cache {fmt(past)} must have rank >= 2 (a batch axis and a sequence axis)")
    axis = norm_axis(node, int_attr(node, "axis", -2), r)
    if axis == 0:
        fail(node, "attribute 'axis' must not be the batch axis 0")
    if node.attr("mode", "linear") not in ("linear", "circular"):
        fail(node, f"attribute 'mode' must be linear or circular, got {node.attr('mode')!r}")
    if update.dtype != past.dtype or len(update.shape) != r or any(
            a != b for i, (a, b) in enumerate(zip(update.shape, past.shape)) if i != axis) \
            or update.shape[axis] > past.shape[axis]:
        fail(node, f"update {fmt(update)} must have past_cache {fmt(past)}'s dtype and shape but on axis {axis}, "
                   f"where it may be shorter")
    if idx is not None:
        _check_indices(node, idx)
        if idx.shape != past.shape[:1]:
            fail(node, f"write_indices {fmt(idx)} must hold one index per batch entry ({past.shape[0]})")
    return axis


def _tensor_scatter_infer(node, ins):
    _tensor_scatter_params(node, ins[0], ins[1], ins[2] if len(ins) > 2 else None)
    return [(ins[0].dtype, ins[0].shape)]


def _tensor_scatter(node, past, update, idx=None):
    """ONNX TensorScatter (a KV-cache write): each batch entry's update goes to the
    sequence positions write_indices[b] + j (modulo the cache length in circular mode);
    in linear mode, positions beyond the cache are dropped."""
    axis = node.attr("axis", -2) % past.ndim
    n, length, s = past.shape[0], past.shape[axis], update.shape[axis]
    start = jnp.zeros((n,), jnp.int32) if idx is None else idx.astype(jnp.int32)
    pos = start[:, None] + jnp.arange(s, dtype=jnp.int32)[None, :]  # (N, s)
    if node.attr("mode", "linear") == "circular":
        pos = pos % length
    p, u = jnp.moveaxis(past, axis, -1), jnp.moveaxis(update, axis, -1)  # (N, ..., L), (N, ..., s)
    lead = u.ndim - 1
    grid = [g[..., None] for g in jnp.indices(u.shape[:-1], sparse=True)]
    seq = pos.reshape((n,) + (1,) * (lead - 1) + (s,))
    out = p.at[(*grid, seq)].set(u, mode="drop")
    return (jnp.moveaxis(out, -1, axis),)


register("tensor_scatter", (2, 3), ("mode", "axis"))((_tensor_scatter_infer, _tensor_scatter))
