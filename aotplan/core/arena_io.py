"""Typed views of a uint32-word arena inside kernels.

`read` slices a tensor's words and bitcasts them to its storage dtype; `write` bitcasts
a value to words and `dynamic_update_slice`s it in. `word` offsets are Python ints
(static: baked into the program) or traced int32 scalars (a kernel shared by several
launches takes its offsets at run time; the executor passes verified ones, so
`dynamic_slice`'s clamping never applies). For 1- and 2-byte dtypes the tail of the last word is zero
padding, written with the tensor. bool is stored as one byte, 0 or 1.
"""

import math

import jax.numpy as jnp
from jax import lax

from aotplan.core import dtypes, formats


def jnp_dtype(storage):
    return jnp.dtype(dtypes.np_dtype(storage))


def read(arena, word, dtype, shape):
    storage = dtypes.storage_dtype(dtype)
    n = math.prod(shape)
    isz = dtypes.itemsize(dtype)
    if n == 0:
        return jnp.zeros(shape, jnp_dtype(storage))
    nw = formats.words(n * isz)
    w = lax.slice(arena, (word,), (word + nw,)) if isinstance(word, int) else lax.dynamic_slice(arena, (word,), (nw,))
    if isz == 4:
        flat = lax.bitcast_convert_type(w, jnp_dtype(storage))
    elif isz == 2:
        flat = lax.bitcast_convert_type(lax.bitcast_convert_type(w, jnp.uint16).reshape(-1)[:n], jnp_dtype(storage))
    else:
        u8 = lax.bitcast_convert_type(w, jnp.uint8).reshape(-1)[:n]
        flat = u8 != 0 if storage == "bool" else lax.bitcast_convert_type(u8, jnp_dtype(storage))
    return flat.reshape(shape)


def to_words(value, dtype):
    isz = dtypes.itemsize(dtype)
    flat = value.reshape(-1)
    if dtypes.storage_dtype(dtype) == "bool":
        flat = flat.astype(jnp.uint8)
    if isz == 4:
        return lax.bitcast_convert_type(flat, jnp.uint32)
    k = formats.WORD_BYTES // isz
    pad = (-flat.shape[0]) % k
    if pad:
        flat = jnp.concatenate([flat, jnp.zeros((pad,), flat.dtype)])
    return lax.bitcast_convert_type(flat.reshape(-1, k), jnp.uint32)


def write(arena, word, dtype, value):
    if value.size == 0:
        return arena
    return lax.dynamic_update_slice(arena, to_words(value, dtype), (word,))


def read_runs(arena, word, dtype, shape, runs=1, stride=0):
    """A tensor stored as `runs` runs of whole words, `stride` words apart (a concat
    input placed in its slice of the concat: one run per outer index)."""
    if runs == 1:
        return read(arena, word, dtype, shape)
    per = math.prod(shape) // runs
    rows = [read(arena, word + r * stride, dtype, (per,)) for r in range(runs)]
    return jnp.concatenate(rows).reshape(shape)


def write_runs(arena, word, dtype, value, runs=1, stride=0):
    if runs == 1:
        return write(arena, word, dtype, value)
    rows = value.reshape(runs, -1)
    for r in range(runs):
        arena = write(arena, word + r * stride, dtype, rows[r])
    return arena
