"""A tensor-parallel plan's collectives (`PlanCollective`, format 9), as programs over
the devices' arenas.

Each device's arena is one jax array on that device; at a collective the executor
joins them, without a copy, into one array sharded over the mesh
(`jax.make_array_from_single_device_arrays`), runs a program written with
`jax.shard_map` in which every device reads the collective's operands from its own
arena, sums them (`psum`) or joins them (`all_gather`) across the devices, and writes
the results into its arena, and splits the result back into the devices' arenas. The
program donates the arenas, so every device's arena stays the same buffer. Several
tensors laid out as one block (compiler/collectives.py) are summed as one slice of
the arena (`block`).

The program is built here from the plan's fields, not read from the plan: a plan's
collective touches only the tensors it names, each an arena tensor the verifier
checked (aotplan/core/verify_mesh.py), so a tampered plan cannot make one read or write
elsewhere. Several tensors summed at one point that do not lie as a block are one
`psum` of their values joined.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from aotplan.core import arena_io, formats
from aotplan.core.plan import MESH_AXIS


def block(plan, c):
    """-> (first word, words) where collective `c` sums float32 tensors that lie as one
    block (compiler/collectives.py): its results in place, each part at the aligned
    offset right after the one before. The gaps between parts are alignment padding
    that no live tensor holds (the verifier sweeps aligned extents), so one slice of
    words, summed, moves them all. Else None (a sum of their values joined)."""
    T = plan.tensors
    if c.op != "all_reduce" or len(c.reads) < 2 or any(T[r].dtype != "float32" for r in c.reads):
        return None
    end = T[c.reads[0]].offset
    for r, w in zip(c.reads, c.writes):
        if T[r].offset != end or T[w].offset != T[r].offset:
            return None
        end = formats.align_up(T[r].offset + T[r].nbytes, plan.alignment)
    last = T[c.reads[-1]]
    start = T[c.reads[0]].offset
    return start // formats.WORD_BYTES, (last.offset + last.nbytes - start) // formats.WORD_BYTES


def _program(plan, c):
    T = plan.tensors
    word = lambda i: T[i].offset // formats.WORD_BYTES  # noqa: E731
    one = block(plan, c)

    def body(arena):
        if one is not None:  # (the block: one slice, summed in place)
            first, words = one
            total = jax.lax.psum(arena_io.read(arena, first, "float32", (words,)), MESH_AXIS)
            return arena_io.write(arena, first, "float32", total)
        xs = [arena_io.read(arena, word(r), T[r].dtype, T[r].shape) for r in c.reads]
        if c.op == "all_gather":
            ys = [jax.lax.all_gather(xs[0], MESH_AXIS, axis=c.axis, tiled=True)]
        elif len(xs) == 1:
            ys = [jax.lax.psum(xs[0], MESH_AXIS)]
        else:  # one sum moves them all
            total = jax.lax.psum(jnp.concatenate([x.reshape(-1) for x in xs]), MESH_AXIS)
            cuts = np.cumsum([x.size for x in xs])[:-1]
            ys = [y.reshape(x.shape) for x, y in zip(xs, jnp.split(total, cuts))]
        for w, y in zip(c.writes, ys):
            arena = arena_io.write(arena, word(w), T[w].dtype, y)
        return arena
    return body


class Collectives:
    """The plan's collectives over `devices` (jax Devices, in mesh order), compiled at
    load. `run(s, arenas)`: the collectives that run after launch s, on the arenas of
    `mine` (this process's devices among them, in mesh order; all of them in a run of
    one process) -> their new arenas (the same buffers). Every process of a run calls
    it at once: each program spans the processes (executor/distributed.py)."""

    def __init__(self, plan, devices, mine=None):
        self.devices = list(devices)
        self.mine = list(devices if mine is None else mine)
        self.mesh = Mesh(np.array(self.devices), (MESH_AXIS,))
        self.sharding = NamedSharding(self.mesh, PartitionSpec(MESH_AXIS))
        self.words = plan.arena_bytes // formats.WORD_BYTES
        self.shape = (len(self.devices) * self.words,)
        arena = jax.ShapeDtypeStruct(self.shape, jnp.uint32, sharding=self.sharding)
        self.after = {}
        for c in plan.mesh.collectives:
            fn = jax.shard_map(_program(plan, c), mesh=self.mesh, in_specs=PartitionSpec(MESH_AXIS),
                               out_specs=PartitionSpec(MESH_AXIS))
            compiled = jax.jit(fn, donate_argnums=0).lower(arena).compile()
            self.after.setdefault(c.after, []).append(compiled)
        self.count = len(plan.mesh.collectives)

    def run(self, s, arenas):
        whole = jax.make_array_from_single_device_arrays(self.shape, self.sharding, arenas)
        del arenas
        for program in self.after[s]:
            whole = program(whole)
        by_device = {sh.device: sh.data for sh in whole.addressable_shards}
        return [by_device[d] for d in self.mine]
