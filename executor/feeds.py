"""A step's feeds checked against the plan's inputs: the common cases (numpy arrays of
the exact dtype and shape, or jax arrays already on the session's device) in a few
hundred nanoseconds, anything else by the full check, which names the input at fault;
and jax's transfer guards applied to the step as jax.jit would apply them."""

import jax
import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import FeedError, FeedLimitError, LimitError

# jax's transfer guards (`jax.transfer_guard`): a step checks them itself, so that a
# numpy feed (or numpy outputs from a GPU) is refused the same way on every call path,
# with one FeedError, before anything runs. The session's own transfers (the constants,
# the arena, the warm-up step) are its loading's business and run under "allow".
try:
    from jax._src import config as _jax_config

    H2D, D2H = _jax_config.transfer_guard_host_to_device, _jax_config.transfer_guard_device_to_host
except (ImportError, AttributeError):  # a jax without them: its own errors stand
    H2D = D2H = None
_REFUSING = ("disallow", "disallow_explicit")


_MIN, _MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


def _narrowed(a):
    """An int64 array as int32, or None where a value does not fit. A few elements (a
    token, a position) are checked in Python: numpy's reductions cost microseconds each."""
    if a.size <= 8:
        vals = a.ravel().tolist()
        if min(vals, default=0) >= _MIN and max(vals, default=0) <= _MAX:
            return a.astype(np.int32)
        return None
    a32 = a.astype(np.int32)
    return a32 if (a32 == a).all() else None


class FeedCheck:
    """Checks feeds for one session: `inputs` (the plan's input tensors), `device` (the
    session's), `feed_avals` (the avals of the inputs as the kernel that takes the feeds
    declares them) and `array_type` (jax's array type on this jax)."""

    def __init__(self, inputs, device, feed_avals, array_type, states=()):
        self.inputs = inputs
        self.states = frozenset(states)  # the plan's states' names: never fed
        self.device = device
        self._devices = {device}  # what a device-array feed's devices() must be
        # the common feed, checked in a few hundred ns: every input a C-contiguous numpy
        # array of its exact dtype and shape, where that dtype is also its storage dtype
        # or int64 (narrowed to int32 here where every value fits: token ids, positions);
        # anything else takes the full path, which gives the same arrays or names the input
        self._plain_feeds = None if any(t.dtype in dtypes.NARROWED and t.dtype != "int64" for t in inputs) else \
            [(t.name, tuple(t.shape), dtypes.np_dtype(t.dtype), t.dtype == "int64") for t in inputs]
        # the common device feed (`device_args`): jax's array type, of the storage dtype
        # and shape (its aval, compared in tens of ns), on a sharding already seen to be
        # this device's alone
        self._device_feeds = list(zip((t.name for t in inputs), feed_avals))
        self._array_type = array_type
        self._shardings = set()  # shardings whose devices() is {device}
        self._sharding = None  # the last of them a feed had

    def args(self, feeds):
        """-> (the feeds in storage dtypes, in the plan's input order, whether any is a
        numpy array), or FeedError naming the input."""
        plain = self._plain_feeds
        if type(feeds) is dict and len(feeds) == len(self.inputs):
            if plain is not None:
                args = []
                for name, shape, dtype, narrow in plain:
                    a = feeds.get(name)
                    if type(a) is not np.ndarray or a.shape != shape or not a.flags.c_contiguous:
                        break
                    if a.dtype != dtype:
                        if not (narrow and a.dtype == np.int32):  # (int32 for an int64 input: as stored)
                            break
                    elif narrow:
                        a = _narrowed(a)
                        if a is None:  # (a value int32 cannot hold: the full path names it)
                            break
                    args.append(a)
                else:
                    return args, True
            args = self.device_args(feeds)
            if args is not None:
                return args, False
        args = self.full_check(feeds)
        return args, any(isinstance(a, np.ndarray) for a in args)

    def full_check(self, feeds):
        """Every way a feed can be wrong, each a FeedError naming the input."""
        if not isinstance(feeds, dict):
            raise FeedError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        want = {t.name for t in self.inputs}
        unknown = sorted(set(feeds) - want, key=str)
        if unknown:
            if unknown[0] in self.states:
                raise FeedError(f"input {unknown[0]!r} is a state of the plan: it stays on the device across steps "
                                f"and is not fed (set it with set_state, or reset_state)")
            raise FeedError(f"unknown input {unknown[0]!r} (the plan's inputs: {', '.join(sorted(want))})")
        args = []
        for t in self.inputs:
            if t.name not in feeds:
                raise FeedError(f"missing input {t.name!r} ({t.dtype}{list(t.shape)})")
            a = feeds[t.name]
            if isinstance(a, jax.Array):
                args.append(self._device_feed(t, a))
                continue
            if isinstance(a, np.ma.MaskedArray):
                raise FeedError(f"input {t.name!r}: a masked array (its mask would be ignored): pass "
                                f"`a.filled(value)`")
            if not isinstance(a, (np.ndarray, np.generic)):
                try:
                    a = np.asarray(a)
                except Exception as e:
                    raise FeedError(f"input {t.name!r}: not an array ({type(e).__name__}: {e})") from None
            if a.dtype.hasobject:
                raise FeedError(f"input {t.name!r}: an array of Python objects ({a.dtype}{list(a.shape)}); "
                                f"expected {t.dtype}{list(t.shape)}")
            if not a.dtype.isnative and a.dtype.newbyteorder("=") == dtypes.np_dtype(t.dtype):
                a = a.astype(a.dtype.newbyteorder("="))  # big-endian numbers (copied, as when staged)
            ok = a.dtype == dtypes.np_dtype(t.dtype) or (t.dtype == "int64" and a.dtype == np.int32)
            if not ok or tuple(a.shape) != t.shape:
                raise FeedError(f"input {t.name!r}: expected {t.dtype}{list(t.shape)}, got {a.dtype}{list(a.shape)}")
            try:
                args.append(dtypes.to_storage(a, t.dtype, f"input {t.name!r}"))
            except LimitError as e:  # (a feed's error: FeedError too)
                raise FeedLimitError(str(e)) from None
        return args

    def _device_feed(self, t, a):
        if a.is_deleted():
            raise FeedError(f"input {t.name!r}: the device array has been deleted (donated or freed)")
        if a.devices() != self._devices:
            where = ", ".join(sorted(str(d) for d in a.devices()))
            raise FeedError(f"input {t.name!r}: a device array on {where}, the session runs on "
                            f"{self.device}: pass jax.device_put(array, session.device) or a numpy array")
        storage = dtypes.np_dtype(dtypes.storage_dtype(t.dtype))
        ok = a.dtype == storage or a.dtype == dtypes.np_dtype(t.dtype)
        if not ok or tuple(a.shape) != t.shape:
            raise FeedError(f"input {t.name!r}: expected {t.dtype}{list(t.shape)}, got device array "
                            f"{a.dtype}{list(a.shape)}")
        if a.dtype != storage:
            raise FeedError(f"input {t.name!r}: a device array must hold the storage dtype "
                            f"{dtypes.storage_dtype(t.dtype)}")
        return a

    def device_args(self, feeds):
        """The common device feed, checked in about a microsecond (a small model's step
        is tens): every input a live jax array of its storage dtype and shape on the
        session's device alone (what the full check accepts) -> the arrays in input
        order; None where any is not (the full check then looks closer)."""
        args, array, seen = [], self._array_type, self._shardings
        for name, aval in self._device_feeds:
            a = feeds.get(name)
            if type(a) is not array or a.aval != aval or a.is_deleted():
                return None
            sharding = a.sharding
            if sharding is not self._sharding:  # the last one seen (hashing one takes 0.2 us)
                if sharding not in seen:  # equal shardings place arrays alike
                    if a.devices() != self._devices:
                        return None
                    seen.add(sharding)
                self._sharding = sharding
            args.append(a)
        return args

    def check_guard(self, args, host, device_outputs, host_memory):
        """FeedError where jax's transfer guard refuses the step's transfers, as it would
        refuse jax.jit's: numpy feeds, or numpy outputs from a device whose memory is not
        the host's (`host_memory` False)."""
        if host and H2D.value in _REFUSING:
            name = next(t.name for t, a in zip(self.inputs, args) if isinstance(a, np.ndarray))
            how = ("made under jax.transfer_guard('allow'): this guard refuses even jax.device_put"
                   if H2D.value == "disallow_explicit" else "(jax.device_put(array, session.device))")
            raise FeedError(f"input {name!r}: a numpy array, and jax's transfer guard ({H2D.value}) refuses "
                            f"host-to-device transfers: pass device arrays {how}, as jax.jit would need")
        if not device_outputs and not host_memory and D2H.value in _REFUSING:
            raise FeedError(f"numpy outputs from {self.device}, and jax's transfer guard ({D2H.value}) refuses "
                            f"device-to-host transfers: pass device_outputs=True")
