"""A loaded plan: one arena, a constant pool, compiled kernels; `run` replays a step.

Per step: check the feeds (the arena is untouched if any is wrong), then
  sink plan:    one launch `(arena, *pool, *feeds) -> (arena, *outputs)`;
  fused plan:   the launches in order; the first takes the feeds, the last returns
                the outputs;
  kernel plan:  the input kernel, the launches in order, the output kernel.
Every kernel that writes the arena donates it, so the arena's device buffer never
changes (tests check the pointer). Per step, the only device buffers made are the
staged feeds (host arrays must be copied to the device: a caller that passes device
arrays of the storage dtype skips this) and the returned outputs (XLA allocates a
program's results); offsets and constants were placed at load.
"""

import dataclasses
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes, formats, verify
from aotplan.core.errors import ArgumentTypeError, FeedError, ForkError, PlanError
from aotplan.core.plan import Plan
from executor import feeds as feed_checks
from executor import kernel_loader, memory_limits, ort_api, process, states
from executor.adoption import NativeAdoption
from executor.arguments import check_progress, resolve_device, short
from executor.method_sessions import Buffers, FirstMethod, buffer
from executor.reader_guard import for_load as reader_guard_for



def _host_is_device(device):
    """Whether the device's memory is the host's (on CPU, XLA uses a plan's weight bytes
    in place: the constant pool is those bytes)."""
    return device.platform == "cpu"


class Session(NativeAdoption, ort_api.InferenceSessionCalls):
    """`warmup`: run one step on zero inputs while loading, so that one-time runtime
    set-up (thread pools, library kernels built on first use, on a GPU module loading)
    is paid in load time, not in the first request. It costs about one step; with
    aotplan's XLA options the first step is only a little slower than the next
    (`scripts/bench_replay.py`, "no warm-up" rows), so `warmup=False` is the faster way
    to a first output.
    `trusted`: the plan's native executables may be used (where the host matches);
    they are called from Python until the first step is done, then through jax's own
    dispatch once a background thread has adopted them (`wait_ready`).
    `progress`: called with a short text before each stage of loading (each kernel,
    the constants, the warm-up step); `aotplan verify` uses it to name the kernel that
    crashed a child process.
    `jobs`: XLA compiles to run at once for the kernels compiled from StableHLO (they
    release the GIL; default `aotplan.core.xla_options.default_jobs()`, one per CPU, at most
    8). `aotplan verify`'s child compiles one at a time, so a crash names its kernel.
    `max_memory`: bytes of device memory this plan may take at most (None: what the
    device has free; on a CPU, most of the host's available memory:
    `memory_limits`), checked against what the plan states before anything is
    allocated and against its compiled kernels' workspace before the arena is; a
    plan that needs more is a LimitError naming the figures. `workspace_bytes`: the
    largest workspace of the kernels as compiled here.
    `reader_guard`: where the plan is not trusted, a helper process reads each kernel's
    module before this one does, so that a module that crashes StableHLO's reader is a
    PlanError, not this process's end (`executor.reader_guard`). None: the process's
    helper (started by the first load, ended after a minute unused) unless
    AOTPLAN_READER_GUARD=0; True or False; or a `ReaderGuard` the caller keeps.
    `device`: a jax Device, a platform name or None, as `load` takes it
    (`resolve_device`); checked before anything else. The kernels are compiled for it
    (native executables are loaded onto it) and the arena, the constants, the offset
    vectors and the outputs live on it. Device-array feeds must be on it too (see
    `check_feeds`).

    Threads: `run` may be called from several threads; steps are serialized (one
    lock per session: the arena is one buffer), each caller gets its own outputs.

    `mesh_device`: for a tensor-parallel plan (format 9), which of its devices this
    session is (it places that device's part of the split weights): `MeshSession`
    makes one per device and runs their steps, with the collectives between launches;
    `run` refuses (a device alone would skip them). Its warm-up step runs the launches
    without the collectives (the numbers do not matter): `aotplan verify` checks a
    tensor-parallel plan's kernels that way, on device 0.

    `plan`: the verified plan. On a device whose memory is not the host's (a GPU), its
    `constants` are dropped once placed, so the host does not keep the weights too."""

    def __init__(self, plan, device=None, warmup=True, trusted=False, progress=None, jobs=None, max_memory=None,
                 reader_guard=None, _parent=None, mesh_device=None):
        self._mesh_device = mesh_device
        if _parent is not None:
            self._reader_guard = _parent._reader_guard
            with jax.transfer_guard("allow"):
                self._load(plan, device, warmup, trusted, progress, jobs, max_memory, _parent)
            return
        # (started first, so that it starts while the plan is verified)
        with reader_guard_for(reader_guard, trusted) as self._reader_guard:
            try:
                with jax.transfer_guard("allow"):  # (the load's own transfers)
                    self._load(plan, device, warmup, trusted, progress, jobs, max_memory, _parent)
            finally:
                self._reader_guard = None

    def _load(self, plan, device, warmup, trusted, progress, jobs, max_memory, parent):
        """`parent`: the session of a plan's first method, where this one loads a further
        method (`Plan.methods`): it shares the parent's device, lock, buffers (arena,
        state), placed weights and checks, and the parent runs the warm-up steps."""
        t0 = time.perf_counter()
        self._closed = False
        self._adopting_here = threading.Lock()  # (wait_ready, where no thread can adopt)
        self._children = {}  # (a plan's further methods: name -> their sessions)
        self._is_method = parent is not None  # (a further method's: its buffers are its parent's)
        if parent is None:
            process.check_not_forked("Session")
            self._pid, self._forks = os.getpid(), process.forks
            self.device = resolve_device(device)
            self._host_memory = _host_is_device(self.device)
            if not isinstance(plan, Plan):
                raise ArgumentTypeError(f"Session takes a decoded plan (aotplan.core.plan.Plan), got {type(plan).__name__}: "
                                f"executor.load(path) loads a plan file")
            check_progress(progress, "Session")
            memory_limits.check_max_memory("Session", max_memory)
            progress = progress or (lambda what: None)
            self._lock = threading.Lock()
            self._buf = Buffers()
            self._placed = {}  # (memory_limits.constant_key) -> a pool constant's device array, shared by methods
            progress("verifying the plan")
            verify.verify(plan)
            if plan.mesh is not None and self._mesh_device is None:
                raise PlanError(f"the plan runs on {plan.mesh.devices} devices ({plan.mesh.parallel} parallel): "
                                f"executor.load opens it, or executor.MeshSession")
            allowed, where = memory_limits.limit(self.device, max_memory)
            memory_limits.check_stated(plan, allowed, where)
            self._limits = (memory_limits.figures(plan), allowed, where)
        else:
            self._pid, self._forks, self.device, self._host_memory = (parent._pid, parent._forks, parent.device,
                                                                     parent._host_memory)
            self._lock, self._buf, self._placed, self._limits = parent._lock, parent._buf, parent._placed, \
                parent._limits
        self.plan = plan
        T = plan.tensors
        self._inputs = [T[i] for i in plan.inputs]
        self._outputs = [T[i] for i in plan.outputs]
        self._output_names = list(plan.output_names)
        # outputs whose storage dtype is their logical one read back as they are
        self._outputs_as_stored = all(dtypes.storage_dtype(t.dtype) == t.dtype for t in self._outputs)
        wants = kernel_loader.kernel_roles(plan)
        self.kernel_source = kernel_loader.kernel_source(plan, self.device, trusted)
        loaded = kernel_loader.load_kernels(plan, wants, self.device, self.kernel_source, jobs, progress,
                                            self._reader_guard)
        # the workspace XLA says the kernels compiled here need (a kernel may want more
        # than the plan states), checked before the arena and the constants are placed
        self.workspace_bytes, widest = memory_limits.compiled_workspace(plan, loaded.callables, loaded.paths)
        whole, allowed, where = self._limits
        memory_limits.check_compiled(whole, self.workspace_bytes, widest, allowed, where)
        self._kernel_paths = {plan.kernels[ki].name: loaded.paths[ki] for ki in sorted(loaded.paths)}
        array_type = type(jax.device_put(np.zeros((), np.float32), self.device))
        self._feeds = feed_checks.FeedCheck(self._inputs, self.device, loaded.feed_avals, array_type,
                                            [st.name for st in plan.states])
        # (a tensor-parallel plan's device holds its own parts of the split weights)
        mine = plan.constants if self._mesh_device is None else plan.mesh.device_constants(plan.constants,
                                                                                           self._mesh_device)
        data = {c.tensor: c.data for c in mine}

        def host_const(i):
            t = T[i]
            return np.frombuffer(data[i], dtype=dtypes.np_dtype(dtypes.storage_dtype(t.dtype))).reshape(t.shape)

        put = lambda a: jax.device_put(a, self.device)  # noqa: E731
        progress("placing the constants")
        self._pool = {}
        for i, t in enumerate(T):  # (a weight several methods share: one device array)
            if t.storage == "pool":
                key = memory_limits.constant_key(data[i], t)
                if key not in self._placed:
                    self._placed[key] = put(host_const(i))
                self._pool[i] = self._placed[key]
        self._to_adopt = self._adopting = self._adopt_here = None  # (`_start_adopting`; set once loaded)
        self.adopt_seconds = None  # how long the background adoption took (`_adopt`), once done
        self._extras = []  # each launch's arguments after the arena: pool constants, offsets
        for l in plan.launches:
            pool, offs = plan.kernel_args(l)
            extra = tuple(self._pool[i] for i in pool)
            if offs:
                extra += (put(np.array([T[i].offset // formats.WORD_BYTES for i in offs], np.int32)),)
            self._extras.append(extra)
        self._bind(loaded.callables)
        self._words = plan.arena_bytes // formats.WORD_BYTES
        # the arena constants' host bytes (views of the plan's), to place them again if a
        # step loses the arena (`_fresh_arena`); dropped below with the plan's constants
        self._arena_consts = [host_const(i) for i, t in enumerate(T) if t.kind == "constant" and t.storage == "arena"]
        # the state buffer (format 7), beside the arena: placed once, updated in place by
        # the kernels that touch it, read or written only through the methods below
        self._states = states.States(plan, data, self.device) if parent is None else parent._states
        if parent is None:
            self._arena = self._fresh_arena()
            self._state = self._states.fresh() if plan.states else None
            self._state_lost = False
            for m in plan.methods:  # (verified with this one: the arena's size, the states)
                progress(f"loading method {m.method!r}")
                self._children[m.method] = Session(m, self.device, False, trusted, progress, jobs, max_memory,
                                                   _parent=self)
        if not self._host_memory:
            # The device holds the weights now: keep no host copy of them (the plan's
            # constants view the file's bytes, which would otherwise stay for the
            # session's life: a second copy of every weight in the host's memory).
            jax.block_until_ready((self._arena, list(self._pool.values())))
            del data
            self.plan = plan = dataclasses.replace(plan, constants=(), methods=tuple(
                dataclasses.replace(m, constants=()) for m in plan.methods))
            self._arena_consts = None
        if warmup and parent is None:
            for name, sess in self.methods.items():
                progress("running a warm-up step" + (f" of method {name!r}" if self._children else ""))
                zeros = {t.name: np.zeros(t.shape, dtypes.np_dtype(t.dtype)) for t in sess._inputs}
                if self._mesh_device is not None:  # (no collectives: see the class docstring)
                    jax.block_until_ready(self._step(self._feeds.args(zeros)[0]))
                else:
                    jax.block_until_ready(self.run(zeros, method=name) if self._children else self.run(zeros))
            if self._state is not None:  # the warm-up steps updated the states: back to their initial values
                self.reset_state()
        self._arena.block_until_ready()
        self.load_seconds = time.perf_counter() - t0
        # native kernels get jax's call path in a background thread started after the
        # first step (or by wait_ready), so that a step right after load runs alone (a
        # further method's: after the first method's load, warm-up steps included)
        if parent is None:
            self._to_adopt = loaded.to_adopt or None
            for child in self._children.values():
                child._to_adopt, child._pending_adopt = child._pending_adopt, None
        else:
            self._pending_adopt = loaded.to_adopt or None

    _arena, _state, _state_lost = buffer("arena"), buffer("state"), buffer("state_lost")

    @property
    def kernel_paths(self):
        """{kernel name: how it was loaded}: kernels.COMPILED (its StableHLO compiled as
        it is) or kernels.NATIVE (its embedded executable) on the fast paths, or a
        slower one (`kernels.paths_note` says which); a further method's kernels as
        "METHOD/NAME"."""
        paths = dict(self._kernel_paths)
        for name, child in self._children.items():
            paths.update((f"{name}/{k}", v) for k, v in child.kernel_paths.items())
        return paths

    @property
    def methods(self):
        """{method name: its session}: this session (the plan's first method) and one per
        further method, which share its arena, state buffer and weights (a plan of one
        method: {"": self}). Each one's `run(feeds)` runs that method."""
        if not self._children:
            return {self.plan.method: self}
        return {self.plan.method: FirstMethod(self), **self._children}

    def _bind(self, kernels_):
        """Point the launches, the sink and the input, output and place kernels at
        `kernels_` (at load, and again under the lock when `_adopt` replaces some); the
        session's state changes only once every part is built."""
        plan = self.plan
        launches = [(kernels_[l.kernel], extra, plan.kernels[l.kernel].feeds, plan.kernels[l.kernel].returns,
                     plan.kernels[l.kernel].state)
                    for l, extra in zip(plan.launches, self._extras)]
        in_kernel = kernels_[plan.input_kernel] if plan.input_kernel >= 0 else None
        out_kernel = kernels_[plan.output_kernel] if plan.output_kernel >= 0 else None
        # a sink (one launch that takes the feeds and returns the outputs): _step calls it
        # alone, without the launch loop (a few microseconds of a small model's step)
        one = launches[0] if len(launches) == 1 else None
        sink = one[:2] if one and one[2] and one[3] and not (in_kernel or out_kernel or one[4]) else None
        state_sink = one[:2] if one and one[2] and one[3] and one[4] and not (in_kernel or out_kernel) else None
        place = kernels_[plan.place_kernel] if plan.place_kernel >= 0 else None
        self._kernels, self._launches, self._in_kernel, self._out_kernel = kernels_, launches, in_kernel, out_kernel
        self._sink, self._state_sink, self._place = sink, state_sink, place

    def _fresh_arena(self):
        """A new arena as load leaves it: zeros, the arena constants placed. Every
        kernel donates the arena, so an exception raised while one runs (Ctrl-C, a
        signal handler's, another thread's async exception: Python raises it as the
        call returns, dropping its result) loses the arena; the next step starts
        from a fresh one (a step reads nothing a previous step left, but constants)."""
        if self._place is not None and self._arena_consts is None:
            raise PlanError("this session lost its arena (a step was interrupted while a kernel held it) and "
                            "the arena constants are no longer on the host (they were dropped once on the "
                            "device): load the plan again")
        with jax.transfer_guard("allow"):  # (the session's own transfers, as at load)
            arena = self._zero_arena(self._words)
            if self._place is not None:
                arena = self._place(arena, *(jax.device_put(c, self.device) for c in self._arena_consts))
        return arena

    def _zero_arena(self, words):
        """The arena, zeroed. From host zeros (no XLA program to compile: `jnp.zeros`
        costs two small compiles, most of a native plan's load) unless it is large,
        where filling it on the device beats copying zeros across."""
        if words * formats.WORD_BYTES <= 64 << 20 or self.device.platform == "cpu":
            return jax.device_put(np.zeros((words,), np.uint32), self.device)
        with jax.default_device(self.device):
            return jnp.zeros((words,), jnp.uint32)

    # ------------------------------------------------------------ unloading
    def close(self):
        """Release what the session holds on the device (the arena, the state buffer,
        the constant pool, the offset vectors) and its compiled kernels, now rather
        than when the garbage collector finds the session; steps after it are a
        PlanError. Idempotent. A host that loads and unloads plans (a model server)
        gets its device memory back this way: `tests/executor/test_close.py` loads and
        closes 50 plans in one process and sees live arrays and RSS settle. The session of
        a plan's first method (so `methods[FIRST]` too) closes every method (they share
        its buffers and weights); a further method's (`methods[NAME]`) closes itself
        alone, keeping what it shares."""
        for child in self._children.values():
            child.close()
        if self._adopting is not None:  # (the background adoption would bind kernels again)
            self._adopting.join()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held = [*self._pool.values(), *(x for e in self._extras for x in e)]
            if self._placed is not None and self._is_method:  # (the arena, the states and the weights are shared)
                held = [x for e in self._extras for x in e if not any(x is p for p in self._pool.values())]
            else:  # (the weights every method placed, the further methods' own too)
                held += [self._arena, self._state, *self._placed.values()]
                self._arena = self._state = None
                self._placed.clear()
            self._pool, self._extras, self._kernels, self._launches = {}, [], {}, []
            self._sink = self._state_sink = self._in_kernel = self._out_kernel = self._place = None
            self._to_adopt = self._adopt_here = None
            self._arena_consts = None
            self.plan = dataclasses.replace(self.plan, constants=())  # (the host's view of the weights)
        for a in held:
            if isinstance(a, jax.Array) and not a.is_deleted():
                a.delete()

    @property
    def closed(self):
        return self._closed

    def _check_open(self):
        if self._closed:
            raise PlanError("this session is closed (Session.close): load the plan again to use it")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
        """The arena's device address (an int): the same after every step when steps
        run in place (`replay --check-alloc`). Taken under the session's lock, so a
        step running in another thread, which donates the arena and gets it back,
        is never caught halfway."""
        self._check_process("Session.arena_pointer")
        with self._lock:
            self._check_open()
            return self._arena.unsafe_buffer_pointer()

    # ------------------------------------------------------------ states
    @property
    def state_specs(self):
        """[(name, dtype, shape)] of the plan's states (tensors kept on the device across
        steps, never fed or returned: a KV cache)."""
        return self._states.specs()

    def reset_state(self):
        """Every state back to its value before the first step (zeros, or the plan's
        initial value), in place."""
        self._check_process("Session.reset_state")
        with self._lock:
            self._check_open()
            if self._state is not None:
                self._state = self._states.reset(self._fresh_state_buffer())
                self._state_lost = False

    def get_state(self, name):
        """-> state `name`'s current value, a numpy array of its logical dtype (a copy
        from the device: for inspection and tests, not for a step's path)."""
        self._check_process("Session.get_state")
        with self._lock:
            self._check_open()
            self._states.tensor(name)
            self._check_state()
            return self._states.get(self._state, name)

    def set_state(self, name, value):
        """State `name` <- `value`, a numpy array of its dtype and shape, in place
        (FeedError naming the state if it is not)."""
        self._check_process("Session.set_state")
        with self._lock:
            self._check_open()
            self._states.tensor(name)
            self._check_state()
            self._state = self._states.set(self._state, name, value)

    def state_pointer(self):
        """The state buffer's device address (None without states): the same from load
        to close, through steps, `reset_state` and `set_state`."""
        self._check_process("Session.state_pointer")
        with self._lock:
            self._check_open()
            return None if self._state is None or self._state.is_deleted() else self._state.unsafe_buffer_pointer()

    def _fresh_state_buffer(self):
        """The state buffer, or a new one where a step lost it."""
        return self._states.fresh() if self._state.is_deleted() else self._state

    def _check_state(self):
        if self._state is not None and self._state.is_deleted():  # (a kernel that held it was interrupted)
            self._state_lost = True
        if self._state_lost:
            raise PlanError("this session lost its state (a step was interrupted while a kernel held it, or "
                            "between launches that update it): call reset_state()")

    # ------------------------------------------------------------ a step
    def check_feeds(self, feeds):
        """-> the feeds in storage dtypes, in the plan's input order (host or device
        arrays), or FeedError naming the input; nothing is written anywhere.

        A device array (`jax.Array`) must live on the session's device alone: one on
        another device (or sharded over several) is refused, not copied, so a step
        never makes a hidden cross-device copy; `jax.device_put(a, session.device)`
        moves it once, where the caller can see the cost."""
        return self._feeds.args(feeds)[0]

    def run(self, feeds, device_outputs=False, method=None):
        """{input name: array} -> {output name: array}.

        Inputs are numpy arrays of the logical dtype, or device arrays (`jax.Array`) of
        the storage dtype (int64 inputs are stored as int32) on the session's device,
        which skip the host copy.
        Outputs are numpy arrays of the logical dtype, or with `device_outputs=True`
        device arrays of the storage dtype, left on the device. Non-contiguous and
        big-endian numpy arrays are accepted (copied while staging); NaN and Inf are values like any
        other. Safe to call from several threads: steps are serialized.
        `method`: which of the plan's methods runs (`methods`); a plan of several
        methods needs it, a plan of one takes None (or its name)."""
        if type(feeds) is not dict and not isinstance(feeds, dict):
            # onnxruntime's order: run(output_names, feeds) -> a list
            return ort_api.run(self, feeds, device_outputs, method)
        if method is not None or self._children:
            if method != self.plan.method:
                return self._method(method).run(feeds, device_outputs)
        if self._mesh_device is not None:
            raise PlanError("this session is one device's part of a tensor-parallel plan: the plan's MeshSession "
                            "runs its steps (every device at once, with the collectives between launches)")
        if process.forks != self._forks:
            self._check_process("Session.run")
        if device_outputs is not False and device_outputs is not True and type(device_outputs) is not np.bool_:
            raise FeedError(f"device_outputs must be True or False, got {type(device_outputs).__name__} "
                            f"{short(device_outputs)}")
        args, host = self._feeds.args(feeds)
        if feed_checks.H2D is not None:
            self._feeds.check_guard(args, host, device_outputs, self._host_memory)
        if host and device_outputs and self._host_memory:
            # On CPU, XLA may read a numpy feed in place, after this call returns (async
            # dispatch): the caller could refill the buffer before the step has read it.
            # The host-output path waits for the outputs, so only this one copies.
            args = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
        with self._lock:
            sink, state_sink = self._sink, self._state_sink
            if sink is not None and not self._arena.is_deleted():  # _step's first case, a call saved
                self._arena, *outs = sink[0](self._arena, *sink[1], *args)
            elif state_sink is not None and not self._arena.is_deleted() and not self._state.is_deleted():
                # (a sink that updates the states: the same, the state buffer donated too)
                self._arena, self._state, *outs = state_sink[0](self._arena, self._state, *state_sink[1], *args)
            else:
                outs = self._step(args)
        outs = dict(zip(self._output_names, outs)) if device_outputs else self.host_outputs(outs)
        if self._to_adopt is not None:  # the first step is done: native kernels get jax's call path
            self._start_adopting()
        return outs

    def _method(self, name):
        if name not in self._children:
            known = ", ".join(repr(n) for n in self.methods)
            if name is None:
                raise FeedError(f"the plan has several methods ({known}): name one, run(feeds, method=NAME)")
            raise FeedError(f"unknown method {name!r} (the plan's methods: {known})")
        return self._children[name]

    def _check_process(self, what):
        """ForkError where this process is a fork of the one that loaded the session.
        Called before the session's lock: a fork may have copied it held. (Forks are
        counted by an os.register_at_fork hook: every fork made through Python.)"""
        if process.forks != self._forks:
            raise ForkError(process.fork_message(what, self._pid))

    def _step(self, args, after=None):
        """One step on checked feeds -> the outputs (device arrays). `after(index,
        launch, arena)` (tools only) runs after the input kernel (index -1, launch
        None) and after each launch; `arena` is the current arena (and `_state` the
        current state buffer): read them, do not keep them."""
        steps = self.steps(args, after)
        try:
            while True:
                next(steps)  # (no pause: a plan of one device)
        except StopIteration as done:
            return done.value

    def steps(self, args, after=None, pauses=frozenset()):
        """`_step` as a generator, for a tensor-parallel plan's device
        (executor.mesh_session): after each launch in `pauses` it yields the arena and
        goes on with the arena it is sent (the collectives' result); it returns the
        outputs. The caller holds the session's lock."""
        self._check_open()
        arena = self._arena
        if arena.is_deleted():  # a step was interrupted while a kernel held it
            arena = self._arena = self._fresh_arena()
        if self._sink is not None and after is None:
            kernel, extra = self._sink
            self._arena, *outs = kernel(arena, *extra, *args)  # (nothing to keep if it raises)
            return outs
        state = self._state
        self._check_state()
        updated = done = False
        try:  # every launch donates the arena (and the state): keep the live ones, whatever stops the step
            if self._in_kernel is not None:
                arena = self._in_kernel(arena, *args)
                if after:
                    after(-1, None, arena)
            outs = ()
            for s, (kernel, extra, feeds, returns, stateful) in enumerate(self._launches):
                if stateful:
                    r = kernel(arena, state, *extra, *args) if feeds else kernel(arena, state, *extra)
                    arena, state, *outs_ = r
                    updated = True
                    self._state = state  # (`after` may read it: tools show the states a launch wrote)
                    if returns:
                        outs = outs_
                else:
                    r = kernel(arena, *extra, *args) if feeds else kernel(arena, *extra)
                    if returns:
                        arena, *outs = r
                    else:
                        arena = r
                if after:
                    after(s, self.plan.launches[s], arena)
                if s in pauses:
                    arena = yield arena
            done = True
        finally:
            self._arena = arena
            self._state = state
            # a kernel that held the state buffer was interrupted, or the step stopped
            # between launches with some states updated and others not: either way the
            # states are no longer a step's (a retried step would count twice)
            if state is not None and (state.is_deleted() or (updated and not done)):
                self._state_lost = True
        if self._out_kernel is not None:
            outs = self._out_kernel(arena)
        return outs

    @property
    def step_lock(self):
        """The lock a step holds (steps are serialized): executor.mesh_session holds
        every device's while it drives their `steps`."""
        return self._lock

    def host_outputs(self, outs):
        """Device outputs -> numpy arrays of the logical dtypes. From a device whose
        memory is not the host's, every output's copy to the host is started before
        the first is waited on (as `jax.device_get` does), not one after another."""
        if not self._host_memory and len(outs) > 1:
            for o in outs:
                o.copy_to_host_async()
        if self._outputs_as_stored:
            return dict(zip(self._output_names, map(np.asarray, outs)))
        return {n: dtypes.from_storage(o, t.dtype) for n, t, o in zip(self._output_names, self._outputs, outs)}

    def run_launches(self, feeds, after, device_outputs=False):
        """Launch-by-launch replay for tools (profile, dump, check): like `run`, with
        `after` as in `_step` (steps of other threads wait, as for `run`); -> outputs as
        `run` returns them."""
        self._check_process("Session.run_launches")
        self.wait_ready()  # (tools time and compare launches on their final call path)
        args, host = self._feeds.args(feeds)
        if feed_checks.H2D is not None:
            self._feeds.check_guard(args, host, False, self._host_memory)
        with self._lock:
            outs = self._step(args, after)
        return dict(zip(self._output_names, outs)) if device_outputs else self.host_outputs(outs)

    def step_state_buffer(self):
        """For `run_launches`'s `after`: the state buffer as the step has left it so far
        (read it, do not keep it); None without states."""
        return self._state
