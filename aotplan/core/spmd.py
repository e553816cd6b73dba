"""A tensor-parallel sink plan's one program over every device (SPMD), as the compiler
exports it and the executor loads it.

A sink plan is one launch; for a tensor-parallel plan (`--parallel tensor --launch
sink`) that launch holds the collectives too, so its kernel is one program over the
plan's mesh (`jax.shard_map` over the axis `MESH_AXIS`), exported for `devices`
devices: XLA sees every all-reduce and all-gather of the step at once and may combine
them. Its arguments, each as one array over the mesh:

- ARENA: every device's arena, joined (`(devices * words,)` uint32, split along the
  mesh axis: device d's arena is the d-th slice, the same buffer the device's arena is);
- PARTS: a pool constant, each device's own (its part of a split weight, or the
  weight itself where it is replicated), stacked on a leading mesh axis
  (`(devices, *shape)`): each device reads its own `[0]`;
- WHOLE: a feed, the same on every device (replicated).

It returns the arena (ARENA, donated: written in place) and the outputs (WHOLE: every
device's are the same; device 0's are the step's).
"""

import os
import re

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from aotplan.core.plan import MESH_AXIS

ARENA, PARTS, WHOLE = "arena", "parts", "whole"

# the collective operations of a compiled HLO module's text, each instruction's result
# type before its op: `%x = f32[8]{0} all-reduce(...)`, `(f32[4]{0}, f32[8]{0})` where
# XLA combined several; on GPU the asynchronous pairs are `-start` and `-done`: the
# start is counted (an all-gather-start's result is (its operand, its result))
_COLLECTIVE = re.compile(r"= (\S+|\([^=]*?\)) (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
                         r"(-start)?\(")
_SHAPE = re.compile(r"\b(pred|[sfu](?:8|16|32|64)|bf16)\[([\d,]*)\]")
_ITEM = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
         "s64": 8, "u64": 8, "f64": 8}


def is_spmd(plan):
    """Whether `plan` is a tensor-parallel sink plan: its one kernel spans the mesh."""
    return plan.mesh is not None and plan.mesh.parallel == "tensor" and plan.launch_mode == "sink"


def roles(n_args, n_pool):
    """A sink kernel's arguments (the arena, its `n_pool` pool constants, the feeds) ->
    their roles."""
    return [ARENA] + [PARTS] * n_pool + [WHOLE] * (n_args - 1 - n_pool)


def ask_host_devices(devices):
    """Ask XLA for `devices` CPU host devices, where jax's backends have not started
    (XLA reads XLA_FLAGS once, as they start; other platforms' devices are not
    touched). A count the user set is kept."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()


def global_shape(shape, role, devices):
    """One device's shape of an argument of `role` -> the program's (over the mesh)."""
    shape = tuple(shape)
    if role == ARENA:
        return (devices * shape[0],)
    if role == PARTS:
        return (devices,) + shape
    return shape


def partition(role):
    return PartitionSpec(MESH_AXIS) if role in (ARENA, PARTS) else PartitionSpec()


def mesh_of(devices):
    """jax Devices, in mesh order -> the plan's one-axis mesh over them."""
    return Mesh(np.array(list(devices)), (MESH_AXIS,))


def avals(sig, roles, mesh):
    """[(one device's shape, dtype)] and their roles -> the program's argument types,
    each with its sharding over `mesh`."""
    n = mesh.devices.size
    return [jax.ShapeDtypeStruct(global_shape(shape, role, n), jax.numpy.dtype(dtype),
                                 sharding=NamedSharding(mesh, partition(role)))
            for (shape, dtype), role in zip(sig, roles)]


def collectives_in_hlo(hlo_text, devices):
    """A compiled HLO module's text -> (how many collectives it runs, the bytes each
    device puts into them per step). XLA's combining passes have run: several
    all-reduces at one point may be one. An all-reduce's operands are its result's
    size; an all-gather's, its result's over `devices`."""
    count = moved = 0
    for result, op, start in _COLLECTIVE.findall(hlo_text):
        sizes = [_ITEM.get(t, 4) * _elements(dims) for t, dims in _SHAPE.findall(result)]
        count += 1
        if op == "all-gather":
            moved += sizes[0] if start and len(sizes) == 2 else sum(sizes) // devices
        else:
            moved += sum(sizes)
    return count, moved


def _elements(dims):
    n = 1
    for d in dims.split(","):
        n *= int(d) if d else 1
    return n
