"""A KV-cache write lowered onto the state buffer itself.

A `tensor_scatter` whose cache is a state's value before the step and whose result is
that state's update (a decoder's `TensorScatter` with `--state present=past`) changes
a few rows of the cache. Lowered as written, the kernel reads the whole cache out of the
state buffer, scatters into the copy and writes the whole copy back: bytes moved per
step grow with the cache. Here the new rows are scattered straight into the donated
state buffer's words instead (XLA updates it in place), and readers of the update read
it back from the buffer: per step, the write moves the update's bytes alone.

Taken where the cache is rank >= 2 with the sequence axis second to last (the layout
[batch, heads, positions, head dim]), its storage dtype is 4 bytes wide and its format
the default; anything else keeps the general lowering. Positions follow the op's own
rule (`compiler/ops/index_ops.py`, `_tensor_scatter`): write_indices[b] + j, modulo the
cache length in circular mode, dropped past its end in linear mode, negative ones
counted from the end as jax's indexing counts them.
"""

import math

import jax.numpy as jnp
from jax import lax

from aotplan.core import dtypes

_WORD = 4


def direct(node, recs, name_to_rec, state_pairs):
    """-> (old value's record index, update's record index) where `node` is such a
    write, else None. `state_pairs`: {old record index: update record index}."""
    if node.op != "tensor_scatter" or node.attr("format", "default") != "default":
        return None
    old, new = name_to_rec.get(node.inputs[0]), name_to_rec.get(node.outputs[0])
    if old is None or new is None or state_pairs.get(old) != new:
        return None
    t = recs[old]
    rank = len(t.shape)
    axis = node.attr("axis", -2) % rank if rank else 0
    if rank < 2 or axis != rank - 2 or dtypes.itemsize(t.dtype) != _WORD or t.format != "default":
        return None
    return old, new


def scatter(state, word, node, cache_shape, update, indices):
    """The state buffer with `update`'s rows written at their positions of the cache
    that starts at word `word` (shape `cache_shape`)."""
    *outer, length, width = cache_shape
    n = cache_shape[0]
    s = update.shape[-2]
    start = jnp.zeros((n,), jnp.int32) if indices is None else indices.astype(jnp.int32)
    pos = start.reshape((n,) + (1,) * (len(outer) - 1) + (1,)) + jnp.arange(s, dtype=jnp.int32)  # [n, 1.., s]
    if node.attr("mode", "linear") == "circular":
        pos = pos % length
    else:
        pos = jnp.where(pos < 0, pos + length, pos)  # (as jax's .at[] counts a negative index)
    rows = jnp.arange(math.prod(outer), dtype=jnp.int32).reshape(tuple(outer) + (1,))  # [outer.., 1]
    flat = (rows * length + pos)[..., None] * width + jnp.arange(width, dtype=jnp.int32)  # [outer.., s, width]
    valid = (pos >= 0) & (pos < length)
    flat = jnp.where(valid[..., None], flat + word, state.shape[0])  # (out of range: dropped)
    words = lax.bitcast_convert_type(update, jnp.uint32)  # (a 4-byte storage dtype: `direct`)
    return state.at[flat.reshape(-1)].set(words.reshape(-1), mode="drop")
