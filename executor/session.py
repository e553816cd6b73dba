"""A loaded plan: one arena, a constant pool, compiled kernels; `run` replays a step.

Per step: check the feeds (the arena is untouched if any is wrong), run the input
kernel, replay the launches in order, run the output kernel. Every kernel that writes
the arena donates it, so the arena's device buffer never changes (tests check the
pointer); nothing but the feeds' and outputs' transfer buffers is allocated per step.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from aotplan import codec, dtypes, formats, verify
from aotplan.errors import FeedError
from executor.kernels import check_signature, compile_kernel, load_kernel


def load(path, device=None, warmup=True):
    """Read, verify and load a plan file -> Session (see `Session` for `warmup`)."""
    return Session(codec.read(path), device=device, warmup=warmup)


def _host_platform(device):
    p = device.platform
    return "cuda" if p == "gpu" else p


class Session:
    """`warmup`: run one step on zero inputs while loading. The first launch of some XLA
    kernels (convolutions on CPU) pays a one-time runtime set-up of tens of ms; an
    inference host wants that in load time, not in its first request."""

    def __init__(self, plan, device=None, warmup=True):
        t0 = time.perf_counter()
        verify.verify(plan)
        self.plan = plan
        self.device = device or jax.devices()[0]
        platform = _host_platform(self.device)
        T = plan.tensors
        self._inputs = [T[i] for i in plan.inputs]
        self._outputs = [T[i] for i in plan.outputs]
        self._output_names = list(plan.output_names)
        words = plan.arena_bytes // formats.WORD_BYTES
        arena_sig = [((words,), "uint32")]
        sig = lambda idx: [(T[i].shape, dtypes.storage_dtype(T[i].dtype)) for i in idx]  # noqa: E731

        arena_consts = [i for i, t in enumerate(T) if t.kind == "constant" and t.storage == "arena"]
        # (role, takes, returns) of every kernel; verify() made the roles distinct
        wants = {}
        for l in plan.launches:
            wants[l.kernel] = ("launch", arena_sig + sig(plan.kernels[l.kernel].pool_args), arena_sig)
        wants[plan.input_kernel] = ("input", arena_sig + sig(plan.inputs), arena_sig)
        wants[plan.output_kernel] = ("output", arena_sig, sig(plan.outputs))
        if plan.place_kernel >= 0:
            wants[plan.place_kernel] = ("place", arena_sig + sig(arena_consts), arena_sig)
        self._kernels = {}
        for ki, (role, takes, returns) in sorted(wants.items()):
            k = plan.kernels[ki]
            exp = load_kernel(k, role != "output")
            check_signature(k.name, exp, takes, returns)
            self._kernels[ki] = compile_kernel(k.name, exp, role != "output", platform)

        data = {c.tensor: c.data for c in plan.constants}

        def host_const(i):
            t = T[i]
            return np.frombuffer(data[i], dtype=dtypes.np_dtype(dtypes.storage_dtype(t.dtype))).reshape(t.shape)

        self._pool = {i: jax.device_put(host_const(i), self.device) for i, t in enumerate(T) if t.storage == "pool"}
        self._launches = [(self._kernels[l.kernel], tuple(self._pool[i] for i in plan.kernels[l.kernel].pool_args))
                          for l in plan.launches]
        self._in_kernel = self._kernels[plan.input_kernel]
        self._out_kernel = self._kernels[plan.output_kernel]
        self._arena = jax.device_put(jnp.zeros((words,), jnp.uint32), self.device)
        if plan.place_kernel >= 0:
            consts = [jax.device_put(host_const(i), self.device) for i in arena_consts]
            self._arena = self._kernels[plan.place_kernel](self._arena, *consts)
            del consts
        if warmup:
            zeros = {t.name: np.zeros(t.shape, dtypes.np_dtype(t.dtype)) for t in self._inputs}
            jax.block_until_ready(self.run(zeros))
        self._arena.block_until_ready()
        self.load_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------ introspection
    @property
    def input_specs(self):
        return [(t.name, t.dtype, t.shape) for t in self._inputs]

    @property
    def output_specs(self):
        return [(n, t.dtype, t.shape) for n, t in zip(self._output_names, self._outputs)]

    @property
    def memory(self):
        return self.plan.memory

    def arena_pointer(self):
        return self._arena.unsafe_buffer_pointer()

    # ------------------------------------------------------------ a step
    def check_feeds(self, feeds):
        if not isinstance(feeds, dict):
            raise FeedError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        want = {t.name for t in self._inputs}
        unknown = sorted(set(feeds) - want)
        if unknown:
            raise FeedError(f"unknown input {unknown[0]!r} (the plan's inputs: {', '.join(sorted(want))})")
        args = []
        for t in self._inputs:
            if t.name not in feeds:
                raise FeedError(f"missing input {t.name!r} ({t.dtype}{list(t.shape)})")
            a = feeds[t.name]
            if not isinstance(a, (np.ndarray, np.generic)):
                a = np.asarray(a)
            ok = a.dtype == dtypes.np_dtype(t.dtype) or (t.dtype == "int64" and a.dtype == np.int32)
            if not ok or tuple(a.shape) != t.shape:
                raise FeedError(f"input {t.name!r}: expected {t.dtype}{list(t.shape)}, got {a.dtype}{list(a.shape)}")
            args.append(dtypes.to_storage(a, t.dtype, f"input {t.name!r}"))
        return args

    def run(self, feeds):
        """{input name: numpy array} -> {output name: numpy array} (logical dtypes)."""
        args = self.check_feeds(feeds)
        arena = self._in_kernel(self._arena, *args)
        for kernel, consts in self._launches:
            arena = kernel(arena, *consts)
        self._arena = arena
        outs = self._out_kernel(arena)
        return {n: dtypes.from_storage(o, t.dtype) for n, t, o in zip(self._output_names, self._outputs, outs)}
