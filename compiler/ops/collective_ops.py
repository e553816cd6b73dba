"""Collectives: the ops a tensor-parallel plan's graph gets where one device's part of
a value is not enough (compiler/tensor_parallel.py). They are written with jax's
named-axis collectives over the mesh axis `MESH_AXIS`, so the same lowering runs
under `jax.vmap(..., axis_name=MESH_AXIS)` (the compiler's check, one device standing
in for all) and under `jax.shard_map` (the executor's collective launches).

- `all_reduce`: every device's addends summed (partial values made whole), one or
  more tensors at once: the planner lays several out as one block that one
  collective moves (compiler/collectives.py);
- `all_gather` (`axis`, `devices`): the devices' parts joined along `axis`.

A fused or kernel plan's collectives run between launches (executor/collectives.py):
no kernel holds one; a sink plan's one program holds them, over the mesh
(compiler/spmd_export.py). A graph with one compiles only for several devices.
"""

from jax import lax

from aotplan.core.plan import MESH_AXIS
from compiler.ops.registry import fail, int_attr, norm_axis, register, require_float


def _all_reduce_infer(node, ins):
    if len(node.outputs) != len(ins):
        fail(node, f"sums {len(ins)} tensors into {len(node.outputs)} outputs (one output per input)")
    for t in ins:
        require_float(node, t)
    return [(t.dtype, t.shape) for t in ins]


def _all_gather_infer(node, ins):
    x = ins[0]
    axis = norm_axis(node, int_attr(node, "axis", 0), len(x.shape))
    devices = int_attr(node, "devices", 0)
    if devices < 2:
        fail(node, f"attribute 'devices' must be at least 2, got {devices}")
    return [(x.dtype, tuple(d * devices if k == axis else d for k, d in enumerate(x.shape)))]


register("all_reduce", (1, 1 << 16), n_outputs=None, foldable=False, collective=True)((
    _all_reduce_infer, lambda node, *xs: tuple(lax.psum(xs, MESH_AXIS))))
register("all_gather", (1, 1), ("axis", "devices"), foldable=False, collective=True)((
    _all_gather_infer,
    lambda node, x: (lax.all_gather(x, MESH_AXIS, axis=node.attr("axis", 0) % x.ndim, tiled=True),)))
