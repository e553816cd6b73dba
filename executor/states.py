"""A session's state buffer (format 7): the tensors that persist on the device across
steps (a decoder's KV cache), in one uint32-word buffer beside the arena.

The kernels that touch it take it after the arena and donate it, so a step updates it
in place and moves none of its bytes between host and device. Outside steps it is read
and written only here, in place too: a few small XLA programs (built on first use,
each a slice or an update of the buffer, donated) so its device buffer keeps its
address from load to close, through `reset` and `set` as through steps.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from aotplan.core import dtypes, formats
from aotplan.core.errors import FeedError


@functools.cache
def _zeroed():
    return jax.jit(lambda buf: buf & jnp.uint32(0), donate_argnums=0)  # (zeros_like would not reuse the bytes)


@functools.cache
def _updated():
    return jax.jit(lambda buf, words, at: lax.dynamic_update_slice(buf, words, (at,)), donate_argnums=0)


@functools.cache
def _sliced(n):
    return jax.jit(lambda buf, at: lax.dynamic_slice(buf, (at,), (n,)))


def to_words(value, tensor):
    """A host array of the tensor's logical dtype and shape -> its bytes as uint32 words
    (storage dtype, little-endian, the last word's tail zero), as the kernels hold it."""
    raw = dtypes.to_storage(value, tensor.dtype, f"state {tensor.name!r}").astype(
        np.dtype(dtypes.np_dtype(dtypes.storage_dtype(tensor.dtype))).newbyteorder("<"), copy=False).tobytes()
    raw += b"\0" * (-len(raw) % formats.WORD_BYTES)
    return np.frombuffer(raw, np.uint32)


def from_words(words, tensor):
    """`to_words`'s inverse -> a host array of the logical dtype."""
    store = np.dtype(dtypes.np_dtype(dtypes.storage_dtype(tensor.dtype))).newbyteorder("<")
    n = int(np.prod(tensor.shape, dtype=np.int64))
    flat = np.frombuffer(np.ascontiguousarray(words).astype("<u4", copy=False).tobytes(), store, count=n)
    return dtypes.from_storage(flat.reshape(tensor.shape), tensor.dtype)


class States:
    """What a session knows of its plan's states: each one's tensor (its bytes in the
    buffer) and initial value. The buffer itself is the session's (it passes it to the
    kernels); the methods take it and return it, updated in place."""

    def __init__(self, plan, data, device):
        T = plan.tensors
        self.tensors = {st.name: T[st.tensor] for st in plan.states}
        # initial values that are not zeros (copies: the plan's constants may be dropped)
        self.inits = [(T[st.tensor], bytes(data[st.tensor])) for st in plan.states if st.tensor in data]
        self.words = plan.memory.state_bytes // formats.WORD_BYTES
        self.device = device

    def specs(self):
        return [(name, t.dtype, t.shape) for name, t in self.tensors.items()]

    def tensor(self, name):
        t = self.tensors.get(name) if isinstance(name, str) else None
        if t is None:
            known = ", ".join(repr(n) for n in self.tensors) or "none"
            raise FeedError(f"no state named {name!r} (the plan's states: {known})")
        return t

    def fresh(self):
        """A new buffer holding the initial values."""
        with jax.transfer_guard("allow"):
            return self.reset(jax.device_put(np.zeros((self.words,), np.uint32), self.device))

    def reset(self, buf):
        """Every state back to its initial value, in place."""
        with jax.transfer_guard("allow"):
            buf = _zeroed()(buf)
            for t, data in self.inits:
                buf = self._write(buf, t, np.frombuffer(data + b"\0" * (-len(data) % 4), np.uint32))
        return buf

    def get(self, buf, name):
        """-> state `name`'s value, a host array of its logical dtype."""
        t = self.tensor(name)
        n = formats.words(t.nbytes)
        with jax.transfer_guard("allow"):
            words = np.asarray(_sliced(n)(buf, np.int32(t.offset // formats.WORD_BYTES)))
        return from_words(words, t)

    def set(self, buf, name, value):
        """State `name` <- `value` (a host array of its logical dtype and shape, or a
        FeedError naming the state), in place."""
        t = self.tensor(name)
        if not isinstance(value, np.ndarray) and not isinstance(value, jax.Array):
            raise FeedError(f"state {name!r}: expected an array, got {type(value).__name__}")
        value = np.asarray(value)
        want = dtypes.np_dtype(t.dtype)
        if value.dtype != want or tuple(value.shape) != tuple(t.shape):
            raise FeedError(f"state {name!r}: expected {t.dtype}{list(t.shape)}, got {value.dtype}{list(value.shape)}")
        with jax.transfer_guard("allow"):
            return self._write(buf, t, to_words(value, t))

    def _write(self, buf, t, words):
        return _updated()(buf, jax.device_put(words, self.device), np.int32(t.offset // formats.WORD_BYTES))
