"""A tensor-parallel sink plan at work (`aotplan compile --devices N --parallel tensor
--launch sink`): its one kernel is one program over the plan's mesh
(aotplan/core/spmd.py), its collectives inside.

At load: the plan verified, every device's memory checked against the plan's
figures, the program read, checked (aotplan/core/kernel_program_mesh.py: collectives
only over the plan's mesh, where every device reaches them) and compiled once for the
mesh; each device's pool constants (its parts of the split weights) placed on it and
joined, without a copy, into one array over the mesh; each device's arena allocated
once, the same way. A step places the feeds on every device, calls the program (the
arena donated: every device's arena stays its buffer) and returns the outputs, whole
on every device (the first device's are the step's). Nothing is allocated per step
beyond the feeds and outputs (`aotplan replay --check-alloc` checks every arena).

The interface is `MeshSession`'s: `run`, `input_specs`, `output_specs`, `memory`,
`close`, a context manager. Several processes (executor/distributed.py): each places
and reads its own devices, and every process calls the program at once.
"""

import dataclasses
import threading
import time

import jax
import numpy as np
from jax.sharding import NamedSharding

from aotplan.core import dtypes, formats, kernels, spmd, verify
from aotplan.core.errors import FeedError, PlanError
from executor import distributed, kernel_loader, memory_limits
from executor.feeds import FeedCheck
from executor.mesh_session import OneMethodNoStates
from executor.reader_guard import for_load as reader_guard_for


def _shaped(a, shape):
    """A host array reshaped (a view); a device array (a feed) as it is."""
    return a.reshape(shape) if isinstance(a, np.ndarray) else a


class SpmdSession(OneMethodNoStates):
    """A tensor-parallel sink plan loaded on its devices (the module docstring)."""

    def __init__(self, plan, devices, warmup=True, trusted=False, progress=None, jobs=None, max_memory=None,
                 reader_guard=None):
        """`devices`: the plan's devices, in mesh order (executor.mesh_session.mesh_devices)."""
        with reader_guard_for(reader_guard, trusted) as guard, jax.transfer_guard("allow"):  # (the load's own)
            self._load(plan, devices, warmup, progress, jobs, max_memory, guard)

    def _load(self, plan, devices, warmup, progress, jobs, max_memory, guard):
        t0 = time.perf_counter()
        progress = progress or (lambda what: None)
        self.plan, self.mesh = plan, plan.mesh
        self.devices = list(devices)
        self._closed = False
        self._lock = threading.Lock()
        progress("verifying the plan")
        verify.verify(plan)
        if not spmd.is_spmd(plan) or len(plan.launches) != 1 or plan.place_kernel >= 0:
            raise PlanError("SpmdSession takes a tensor-parallel sink plan: one launch, its weights in the pool")
        self._mine = distributed.local(self.devices)  # (this process's devices: all, in a run of one process)
        if not self._mine:
            raise PlanError(f"none of the plan's {len(self.devices)} devices belongs to this process")
        for d in self._mine:
            allowed, where = memory_limits.limit(d, max_memory)
            memory_limits.check_stated(plan, allowed, where)
        self._mesh = spmd.mesh_of(self.devices)
        # (made once: every step joins its feeds with the WHOLE one)
        self._shardings = {r: NamedSharding(self._mesh, spmd.partition(r))
                           for r in (spmd.ARENA, spmd.PARTS, spmd.WHOLE)}
        T = plan.tensors
        self._inputs = [T[i] for i in plan.inputs]
        self._outputs = [T[i] for i in plan.outputs]
        wants = kernel_loader.kernel_roles(plan)
        # (its program spans the devices: no native executable of one device stands for it)
        self.kernel_source = "stablehlo"
        loaded = kernel_loader.load_kernels(plan, wants, self._mine[0], self.kernel_source, jobs, progress, guard,
                                            mesh=self._mesh)
        self._kernel = loaded.callables[plan.launches[0].kernel]
        self._paths = {plan.kernels[ki].name: kernels.OVER_DEVICES for ki in loaded.paths}
        self.workspace_bytes, widest = memory_limits.compiled_workspace(plan, loaded.callables, loaded.paths)
        for d in self._mine:
            allowed, where = memory_limits.limit(d, max_memory)
            memory_limits.check_compiled(plan, self.workspace_bytes, widest, allowed, where)
        progress("placing the constants")
        rows = [{c.tensor: c.data for c in self.mesh.device_constants(plan.constants, d)}
                for d in range(len(self.devices))]  # (each device's bytes of each constant)
        self._pool = [self._parts(i, rows) for i in plan.kernel_args(plan.launches[0])[0]]
        # the devices hold the weights now: no host copy is kept (the plan's constants
        # view the file's bytes, which would otherwise stay for the session's life)
        jax.block_until_ready(self._pool)
        self.plan = plan = dataclasses.replace(plan, constants=(), mesh=dataclasses.replace(plan.mesh, shards=()))
        self.mesh = plan.mesh
        self._words = plan.arena_bytes // formats.WORD_BYTES
        self._arena = self._fresh_arena()
        array_type = type(jax.device_put(np.zeros((), np.float32), self._mine[0]))
        self._check = FeedCheck(self._inputs, self._mine[0], loaded.feed_avals, array_type)
        self.load_seconds = time.perf_counter() - t0
        if warmup:
            progress("running a warm-up step")
            self.run({t.name: np.zeros(t.shape, dtypes.np_dtype(t.dtype)) for t in self._inputs})
        self.load_seconds = time.perf_counter() - t0

    def _joined(self, role, shape, per_device):
        """{mesh position: a host array of one device's shape} -> one array over the
        mesh (this process's devices' parts placed on them)."""
        whole = spmd.global_shape(shape, role, len(self.devices))
        lead = (1,) if role == spmd.PARTS else ()
        parts = [jax.device_put(_shaped(per_device(self.devices.index(d)), lead + tuple(shape)), d)
                 for d in self._mine]
        return jax.make_array_from_single_device_arrays(whole, self._shardings[role], parts)

    def _parts(self, i, rows):
        """Pool constant `i`: each device's own bytes (its part of a split weight;
        `rows[d]`: device d's constants' bytes)."""
        t = self.plan.tensors[i]
        dt = dtypes.np_dtype(dtypes.storage_dtype(t.dtype))
        return self._joined(spmd.PARTS, t.shape, lambda d: np.frombuffer(rows[d][i], dt))

    def _fresh_arena(self):
        """Every device's arena, zeros (a step reads nothing a previous one left)."""
        with jax.transfer_guard("allow"):
            return self._joined(spmd.ARENA, (self._words,), lambda d: np.zeros((self._words,), np.uint32))

    # ------------------------------------------------------------ the interface
    @property
    def input_specs(self):
        return [(t.name, t.dtype, t.shape) for t in self._inputs]

    @property
    def output_specs(self):
        return [(n, t.dtype, t.shape) for n, t in zip(self.plan.output_names, self._outputs)]

    @property
    def local_devices(self):
        """This process's devices of the mesh (`replay --check-alloc` watches each one's memory)."""
        return list(self._mine)

    @property
    def memory(self):
        return self.plan.memory

    @property
    def kernel_paths(self):
        return dict(self._paths)

    adopt_seconds = None  # (nothing adopted: no native executable)

    def wait_ready(self):
        pass

    def run(self, feeds, device_outputs=False, method=None):
        """{input name: numpy array} -> {output name: numpy array} (with
        `device_outputs=True`: the first device's output arrays)."""
        if method is not None and method != self.plan.method:
            raise FeedError(f"method {method!r}: this plan has one method ({self.plan.method!r})")
        args = self._feeds(feeds)
        with self._lock:
            if self._closed:
                raise PlanError("this session is closed (SpmdSession.close): load the plan again to use it")
            arena = self._arena
            if arena.is_deleted():  # (a step was interrupted while the program held it)
                arena = self._fresh_arena()
            self._arena = None
            try:
                arena, *outs = self._kernel(arena, *self._pool, *args)
            finally:
                self._arena = arena if not arena.is_deleted() else self._fresh_arena()
        firsts = [o.addressable_shards[0].data for o in outs]
        if device_outputs:
            return dict(zip(self.plan.output_names, firsts))
        return {n: dtypes.from_storage(np.asarray(o), t.dtype)
                for n, t, o in zip(self.plan.output_names, self._outputs, firsts)}

    def _feeds(self, feeds):
        """The feeds checked as a Session checks them (host arrays, or device arrays on
        the first device) -> each as one array over the mesh, whole on every device, in
        its storage dtype."""
        args = self._check.args(feeds)[0]
        return [self._joined(spmd.WHOLE, t.shape, lambda d, x=a: x) for t, a in zip(self._inputs, args)]

    def arena_pointer(self):
        """(Each of this process's devices' arena address): the same after every step
        when steps run in place (`replay --check-alloc`)."""
        with self._lock:
            if self._closed:
                raise PlanError("this session is closed (SpmdSession.close): load the plan again to use it")
            by_device = {s.device: s.data.unsafe_buffer_pointer() for s in self._arena.addressable_shards}
            return tuple(by_device[d] for d in self._mine)

    def close(self):
        with self._lock:
            self._closed = True
            self._arena = self._pool = self._kernel = None

    @property
    def closed(self):
        return self._closed
