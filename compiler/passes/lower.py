"""lower: each launch -> one exported XLA program over the arena.

Launch kernels are `(arena, *pool_constants) -> arena`, jitted with the arena donated
so XLA updates it in place, and exported with `jax.export` (portable StableHLO) with
source locations stripped (plans must not depend on the directory they were built in).
Each is also compiled once for the build host to record XLA's temp bytes as the
launch's workspace. Three more kernels move data across the arena's edge: the input
kernel `(arena, *inputs) -> arena`, the output kernel `arena -> outputs`, and the
place kernel `(arena, *arena_constants) -> arena` that the executor runs once at load.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax._src import config as jax_config

from aotplan import dtypes, formats
from aotplan.errors import ModelError
from compiler import arena_io, ops


@dataclass(frozen=True)
class LoweredKernel:
    name: str
    exported: bytes
    workspace_bytes: int
    pool_args: tuple


def _spec(t):
    return jax.ShapeDtypeStruct(t.shape, arena_io.jnp_dtype(dtypes.storage_dtype(t.dtype)))


def _export(name, fn, specs, donate=True):
    fn.__name__ = name
    jitted = jax.jit(fn, donate_argnums=0) if donate else jax.jit(fn)
    with jax_config.traceback_in_locations_limit(0):
        exp = jax.export.export(jitted)(*specs)
    workspace = jitted.lower(*specs).compile().memory_analysis()
    temp = int(getattr(workspace, "temp_size_in_bytes", 0) or 0) if workspace is not None else 0
    return bytes(exp.serialize()), temp, tuple(exp.platforms)


def _node_kernel(node, recs, idx, offsets, pool):
    op = ops.get(node.op)
    ins = [recs[idx[i]] for i in node.inputs]
    outs = [recs[idx[o]] for o in node.outputs]
    pool_args = tuple(sorted({idx[i] for i in node.inputs if idx[i] in pool}))
    slot = {t: k for k, t in enumerate(pool_args)}

    def kernel(arena, *consts):
        args = []
        for name in node.inputs:
            t = idx[name]
            r = recs[t]
            args.append(consts[slot[t]] if t in slot else arena_io.read(arena, offsets[t], r.dtype, r.shape))
        results = op.lower(node, *args)
        for r, v in zip(outs, results):
            want = arena_io.jnp_dtype(dtypes.storage_dtype(r.dtype))
            if v.shape != r.shape or v.dtype != want:
                raise ModelError(f"node {node.name!r} ({node.op}): lowering produced {v.dtype}{list(v.shape)}, "
                                 f"shape rule said {r.dtype}{list(r.shape)} (an op library bug)")
            arena = arena_io.write(arena, offsets[idx[r.name]], r.dtype, v)
        return arena

    return kernel, pool_args, ins


def run(order, liveness, mem, output_names, progress=None):
    """Returns (kernels, launches as (kernel index, node name), input/output/place kernel
    indices, platforms)."""
    recs, idx, offsets = liveness.tensors, liveness.index(), mem.offsets
    arena_spec = jax.ShapeDtypeStruct((mem.arena_bytes // formats.WORD_BYTES,), jnp.uint32)
    pool = {i for i, t in enumerate(recs) if t.storage == "pool"}
    kernels, launches, platforms = [], [], set()

    def add(name, fn, specs, pool_args=(), donate=True):
        blob, temp, plats = _export(name, fn, specs, donate)
        platforms.update(plats)
        kernels.append(LoweredKernel(name, blob, temp, pool_args))
        return len(kernels) - 1

    for step, node in enumerate(order):
        fn, pool_args, _ = _node_kernel(node, recs, idx, offsets, pool)
        k = add(f"launch{step}_{node.op}", fn, [arena_spec] + [_spec(recs[t]) for t in pool_args], pool_args)
        launches.append((k, node.name))
        if progress:
            progress(1)

    inputs = [i for i, t in enumerate(recs) if t.kind == "input"]
    outputs = [idx[o] for o in output_names]

    def write_inputs(arena, *xs):
        for t, x in zip(inputs, xs):
            arena = arena_io.write(arena, offsets[t], recs[t].dtype, x)
        return arena

    def read_outputs(arena):
        return tuple(arena_io.read(arena, offsets[t], recs[t].dtype, recs[t].shape) for t in outputs)

    in_k = add("write_inputs", write_inputs, [arena_spec] + [_spec(recs[t]) for t in inputs])
    out_k = add("read_outputs", read_outputs, [arena_spec], donate=False)
    arena_consts = [i for i, t in enumerate(recs) if t.kind == "constant" and t.storage == "arena"]
    place_k = -1
    if arena_consts:
        def place_constants(arena, *cs):
            for t, c in zip(arena_consts, cs):
                arena = arena_io.write(arena, offsets[t], recs[t].dtype, c)
            return arena

        place_k = add("place_constants", place_constants, [arena_spec] + [_spec(recs[t]) for t in arena_consts])
    return kernels, launches, in_k, out_k, place_k, tuple(sorted(platforms))
