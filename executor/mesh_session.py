"""A plan for several devices (`PlanMesh`, format 8 on) at work: data or tensor parallel.

Each device gets a `Session` of the plan's one-device program: its own arena (at the
same offsets on every device), its own copy of the weights, its kernels compiled for
it. A step splits each input along its mesh axis into one slice per device (numpy
views, no copy), dispatches every device's step before reading any output (jax's
dispatch is asynchronous, so the devices run at once), then joins each output's
slices along its axis. No device reads another's bytes: data-parallel inference needs
no collective. Nothing is allocated on a device per step beyond what each device's
Session allocates (nothing: `aotplan replay --check-alloc`).

Tensor parallel (format 9): each device's Session holds its part of the split weights
(`PlanMesh.device_constants`) and every device takes the whole inputs. A step runs
every device's launches up to a collective (`Session.steps` pauses there), the
collective over all the arenas (executor/collectives.py), and on to the next; the
outputs are whole on every device, and device 0's are returned.
"""

import dataclasses

import jax
import numpy as np

from aotplan.core import dtypes, spmd, verify
from aotplan.core.errors import FeedError, InternalError, PlanError
from aotplan.core.plan import Plan
from executor.arguments import resolve_device, short
from executor import distributed
from executor.collectives import Collectives
from executor.session import Session


def _send(step, arena):
    """-> (True, the outputs) where a device's step ended, else (False, its arena at
    the next collective)."""
    try:
        return False, (next(step) if arena is None else step.send(arena))
    except StopIteration as done:
        return True, done.value


def mesh_devices(n, devices=None, parallel="data"):
    """The `n` devices a mesh plan runs on: `devices` (a list of jax Devices or names),
    or the first `n` of the default platform's. Fewer than `n` is one PlanError."""
    if devices is None or isinstance(devices, (str, jax.Device)):
        first = resolve_device(devices)
        every = jax.devices(first.platform)
        found = every[every.index(first):] if first in every else every
        if len(found) < n:
            cpu = (" (on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts gives N host "
                   "devices)" if first.platform == "cpu" else "")
            start = f", {len(found)} from {first}" if len(found) < len(every) else ""
            raise PlanError(f"the plan runs on {n} devices ({parallel} parallel); this host has {len(every)} "
                            f"{first.platform} device(s){start}{cpu}")
        return list(found[:n])
    devices = [resolve_device(d) for d in devices]
    if len(devices) != n or len(set(devices)) != n:
        raise PlanError(f"devices: the plan runs on {n} different devices, got {len(devices)} "
                        f"({len(set(devices))} different)")
    return devices


def open_mesh(plan, devices=None, **session_args):
    """A plan for several devices -> its session: a `MeshSession`, or for a
    tensor-parallel sink plan (one program over the mesh) an `SpmdSession`."""
    if isinstance(plan, Plan) and spmd.is_spmd(plan):
        from executor.spmd_session import SpmdSession

        verify.verify(plan)
        return SpmdSession(plan, mesh_devices(plan.mesh.devices, devices, "tensor"), **session_args)
    return MeshSession(plan, devices, **session_args)


class OneMethodNoStates:
    """What a plan for several devices' sessions share: one method, no states (the
    verifier refuses both with a mesh), and a context manager that closes them."""

    @property
    def methods(self):
        return {self.plan.method: self}

    @property
    def state_specs(self):
        return []

    def state_pointer(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class MeshSession(OneMethodNoStates):
    """`Session`'s interface for a plan for several devices: `run`, `input_specs`,
    `output_specs`, `memory`, `close`, a context manager. `sessions`: one Session per
    device of this process, in mesh order (several processes: executor/distributed.py;
    a data-parallel plan's outputs are then joined across the processes). `devices`: as `mesh_devices` takes them; the other arguments
    are each device's Session's."""

    def __init__(self, plan, devices=None, **session_args):
        if not isinstance(plan, Plan):
            raise PlanError(f"MeshSession takes a decoded plan (aotplan.core.plan.Plan), got {type(plan).__name__}")
        verify.verify(plan)
        if plan.mesh is None:
            raise PlanError("MeshSession: the plan runs on one device (no mesh): executor.load opens it as a Session")
        if spmd.is_spmd(plan):
            raise PlanError("MeshSession: the plan is one program over its devices (tensor parallel, sink): "
                            "executor.load opens it (an SpmdSession)")
        self.plan, self.mesh = plan, plan.mesh
        self.devices = mesh_devices(self.mesh.devices, devices, self.mesh.parallel)
        self.tensor = self.mesh.parallel == "tensor"
        mine = distributed.local(self.devices)  # (several processes: each drives its own devices)
        self._mine = [self.devices.index(d) for d in mine]  # (their places in the mesh)
        if not mine:
            raise PlanError(f"none of the plan's {len(self.devices)} devices belongs to this process (process "
                            f"{jax.process_index()} of {jax.process_count()}): the first {len(self.devices)} "
                            f"devices of the run make its mesh")
        self.sessions = []
        try:
            if self.tensor:
                warmup = session_args.pop("warmup", True)
                for d in mine:  # (the mesh's own warm-up step below)
                    self.sessions.append(Session(plan, device=d, warmup=False, mesh_device=self.devices.index(d),
                                                 **session_args))
                self._collectives = Collectives(plan, self.devices, mine)
                self._pauses = frozenset(self._collectives.after)
            else:
                one = dataclasses.replace(plan, mesh=None)
                for d in mine:
                    self.sessions.append(Session(one, device=d, **session_args))
        except BaseException:
            self.close()
            raise
        T = plan.tensors
        self._inputs = [(T[i], a) for i, a in zip(plan.inputs, self.mesh.input_axes)]
        self._outputs = [(name, a) for name, a in zip(plan.output_names, self.mesh.output_axes)]
        self.load_seconds = sum(s.load_seconds for s in self.sessions)
        if self.tensor and warmup:
            self.run({name: np.zeros(shape, dtypes.np_dtype(dt)) for name, dt, shape in self.input_specs})

    @property
    def input_specs(self):
        """[(name, logical dtype, the model's shape)], as Session's: each device's slices joined."""
        return [(t.name, t.dtype, self.mesh.whole_shape(t.shape, a)) for t, a in self._inputs]

    @property
    def output_specs(self):
        T = self.plan.tensors
        return [(name, T[i].dtype, self.mesh.whole_shape(T[i].shape, a))
                for (name, a), i in zip(self._outputs, self.plan.outputs)]

    @property
    def kernel_source(self):
        return self.sessions[0].kernel_source

    @property
    def kernel_paths(self):
        return self.sessions[0].kernel_paths

    @property
    def adopt_seconds(self):
        took = [s.adopt_seconds for s in self.sessions]
        return None if None in took else max(took)

    def wait_ready(self):
        for s in self.sessions:
            s.wait_ready()

    @property
    def memory(self):
        """One device's MemoryStats (every device holds the same)."""
        return self.sessions[0].memory

    def run(self, feeds, device_outputs=False, method=None):
        """{input name: numpy array of the model's shape} -> {output name: array}: numpy,
        or with `device_outputs=True` device arrays: data parallel, a list of each
        device's outputs (its slices); tensor parallel, device 0's outputs (whole).
        `method`: None or the plan's one method's name, as Session takes it."""
        if method is not None and method != self.plan.method:
            raise FeedError(f"method {method!r}: this plan has one method ({self.plan.method!r})")
        if not isinstance(feeds, dict):
            raise FeedError(f"feeds: expected a dict of input name -> array, got {type(feeds).__name__}")
        want = {name: shape for name, _, shape in self.input_specs}
        unknown = sorted(set(feeds) - set(want))
        missing = [n for n in want if n not in feeds]
        if unknown or missing:
            raise FeedError(f"input {(missing or unknown)[0]!r}: " + ("missing" if missing else
                            f"not an input of this plan (inputs: {', '.join(want)})"))
        if self.tensor:
            return self._tensor_step(feeds, device_outputs)
        parts = [{} for _ in self.sessions]
        for t, axis in self._inputs:
            a = feeds[t.name]
            if not isinstance(a, np.ndarray):
                raise FeedError(f"input {t.name!r}: a plan for several devices takes numpy arrays, got "
                                f"{type(a).__name__} {short(a)}")
            shape = want[t.name]
            if a.shape != shape:
                raise FeedError(f"input {t.name!r}: expected {t.dtype}{list(shape)}, got {a.dtype}{list(a.shape)}")
            pieces = np.split(a, self.mesh.devices, axis=axis)
            for part, k in zip(parts, self._mine):
                part[t.name] = pieces[k]
        outs = [s.run(p, device_outputs=True) for s, p in zip(self.sessions, parts)]  # (all dispatched first)
        if device_outputs:
            return outs
        T = self.plan.tensors
        if len(self.sessions) < len(self.devices):  # (several processes: each joins all the devices' slices)
            return {name: dtypes.from_storage(self._joined(name, axis, [o[name] for o in outs]), T[i].dtype)
                    for (name, axis), i in zip(self._outputs, self.plan.outputs)}
        return {name: np.concatenate([dtypes.from_storage(np.asarray(o[name]), T[i].dtype) for o in outs], axis=axis)
                for (name, axis), i in zip(self._outputs, self.plan.outputs)}

    def _joined(self, name, axis, slices):
        """This process's slices of output `name` -> the whole output (numpy, storage
        dtype), every process's slices joined by one program all the processes run."""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        from aotplan.core.plan import MESH_AXIS

        mesh = Mesh(np.array(self.devices), (MESH_AXIS,))
        shape = dict((n, s) for n, _, s in self.output_specs)[name]
        spec = PartitionSpec(*([None] * axis + [MESH_AXIS]))
        whole = jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, spec), slices)
        every = jax.jit(lambda x: x, out_shardings=NamedSharding(mesh, PartitionSpec()))(whole)
        return np.asarray(every.addressable_shards[0].data)

    def _tensor_step(self, feeds, device_outputs):
        """Every device's launches, the collectives between them (module docstring)."""
        args = [s.check_feeds(feeds) for s in self.sessions]
        locks = [s.step_lock for s in self.sessions]
        for lock in locks:
            lock.acquire()
        steps = [s.steps(a, None, self._pauses) for s, a in zip(self.sessions, args)]
        try:
            got = [_send(st, None) for st in steps]  # (up to the first collective)
            for s in sorted(self._pauses):
                if any(ended for ended, _ in got):
                    raise InternalError(f"a device's step ended before the collectives after launch {s}")
                arenas = self._collectives.run(s, [a for _, a in got])
                got = [_send(st, a) for st, a in zip(steps, arenas)]
            if not all(ended for ended, _ in got):
                raise InternalError("a device's step paused after the plan's last collective")
            outs = got[0][1]  # (every device's outputs are whole: device 0's are the step's)
        finally:
            for st in steps:
                st.close()
            for lock in locks:
                lock.release()
        if device_outputs:
            return dict(zip(self.plan.output_names, outs))
        return self.sessions[0].host_outputs(outs)

    def arena_pointer(self):
        """(Each device's arena's device address, in mesh order): the same after every
        step when steps run in place (`replay --check-alloc`)."""
        return tuple(s.arena_pointer() for s in self.sessions)

    def close(self):
        for s in self.sessions:
            s.close()

    @property
    def closed(self):
        return all(s.closed for s in self.sessions)
