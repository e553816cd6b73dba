"""A tensor-parallel sink plan's kernel: one device's program (the whole step, its
collectives inside) wrapped as one program over the plan's mesh (aotplan/core/spmd.py
says how its arguments lie), for `jax.export`.

Exporting a program over N devices takes N devices of the build host's platform: jax
records the mesh from real devices (an abstract mesh exports a one-device program).
On a CPU host, `XLA_FLAGS=--xla_force_host_platform_device_count=N` before jax starts
gives N (`aotplan compile` sets it where jax has not started yet). The exported
program does not depend on which host devices stood for the mesh, so one exported on
CPU devices runs on GPUs (`--target cuda`).
"""

import jax

from aotplan.core import spmd
from aotplan.core.errors import InternalError, ModelError


def build_mesh(devices, platform):
    """The first `devices` devices of this process's `platform` -> their mesh; fewer is
    one ModelError that says how to get them."""
    have = jax.devices(platform)
    if len(have) < devices:
        cpu = (": set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts (aotplan compile "
               "does where it can)" if platform == "cpu" else "")
        raise ModelError(f"--devices {devices} --parallel tensor --launch sink: the plan's one program spans "
                         f"{devices} devices, and exporting it takes that many devices of this host's platform "
                         f"({platform}); this process has {len(have)}{cpu}; or compile with --launch fused")
    return spmd.mesh_of(have[:devices])


def wrap(fn, specs, constant_args, mesh):
    """One device's kernel `fn` and its argument types `specs` -> (the program over
    `mesh`, its argument types there). It returns the arena split over the mesh and
    the outputs replicated (they are whole after the step's last collective; jax cannot
    prove it through the arena's bytes, so replication is not checked: `check_vma`)."""
    if list(constant_args) != list(range(1, 1 + len(constant_args))):  # (lower: the pool right after the arena)
        raise InternalError(f"a sink kernel over the mesh takes its pool constants right after the arena, not at "
                            f"{list(constant_args)}")
    kinds = spmd.roles(len(specs), len(constant_args))

    def body(*args):
        arena, *outs = fn(*(a[0] if k == spmd.PARTS else a for a, k in zip(args, kinds)))
        return arena, tuple(outs)

    over_mesh = jax.shard_map(body, mesh=mesh, in_specs=tuple(spmd.partition(k) for k in kinds),
                              out_specs=(spmd.partition(spmd.ARENA), spmd.partition(spmd.WHOLE)), check_vma=False)

    def program(*args):
        arena, outs = over_mesh(*args)
        return (arena, *outs)

    program.__name__ = getattr(fn, "__name__", "kernel")
    return program, spmd.avals([(s.shape, s.dtype) for s in specs], kinds, mesh)


def program_collectives(exp):
    """How many collectives the exported program names (before XLA combines any)."""
    text = exp.mlir_module()
    return sum(text.count(f'"stablehlo.{op}"') for op in ("all_reduce", "all_gather", "reduce_scatter"))

