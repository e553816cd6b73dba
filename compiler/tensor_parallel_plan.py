"""Tensor-parallel plans (`aotplan compile --devices N --parallel tensor`): the model
sharded (compiler/tensor_parallel.py), checked, and compiled as one device's plan whose
mesh lists the collectives, the shardings and the other devices' parts of the split
weights.

Every device runs the same kernels at the same arena offsets on its own part of the
weights; between launches the collectives (all-reduce, all-gather) join what the
devices hold, so each device's arena and pool hold about 1/N of what the model's
split weights and activations need. The plan takes its feeds through an input kernel
and gives its outputs through an output kernel (a collective may be the step's last
work), and compiles no small weight into a kernel (`inline_bytes` 0: a kernel is the
same on every device, a split weight is not); its activations stay in the default
storage format (a collective moves default-format tensors).

A sink plan (`--launch sink`) is one kernel that holds the collectives: one program
over the mesh (compiler/spmd_export.py), in which XLA may combine the all-reduces of
one point; exporting it takes `devices` devices of the build host's platform.
"""

import dataclasses

import jax
import numpy as np

from aotplan.core import dtypes, model_json, verify
from aotplan.core.errors import InternalError, ModelError
from aotplan.core.plan import MESH_AXIS, PlanShard, PlanSharding
from compiler import data_parallel, pipeline, tensor_parallel
from compiler.passes import emit

# The largest difference between the model's outputs and the sharded graph's, relative
# to the output's largest magnitude, still taken for float rounding (a split sum adds
# in another order).
SHARDED_RTOL = 1e-4
_CHECKED = set()  # (cleaned graph's digest, devices, blocks) whose sharding this process has checked


def check_same_outputs(graph, sharded, devices, options):
    """The sharded graph, every device evaluated at once (`jax.vmap` over the devices,
    its collectives over the vmapped axis), gives the cleaned-up model's outputs on
    random inputs: else an InternalError naming the output (a sharding rule is wrong)."""
    from compiler import reference

    feeds = data_parallel.random_feeds(graph)
    whole = reference.evaluate(graph, feeds, options)
    fn, weights, out_info = reference.make_function_of_weights(sharded.graph, options)
    logical = {c.name: c.dtype for c in sharded.graph.constants}
    stacked = {k: (jax.numpy.stack([jax.numpy.asarray(dtypes.to_storage(p, logical[k], k)) for p in sharded.parts[k]])
                   if k in sharded.parts else v) for k, v in weights.items()}
    axes = {k: 0 if k in sharded.parts else None for k in weights}
    args = {t.name: jax.numpy.asarray(dtypes.to_storage(feeds[t.name], t.dtype, t.name)) for t in graph.inputs}
    every = jax.vmap(fn, in_axes=(axes, None), axis_name=MESH_AXIS)(stacked, args)
    for name in graph.outputs:
        want = np.asarray(whole[name], np.float64)
        got = np.asarray(dtypes.from_storage(np.asarray(every[name][0]), out_info[name].dtype), np.float64)
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        diff = float(np.max(np.abs(got - want))) if want.size else 0.0
        if got.shape != want.shape or not (diff <= SHARDED_RTOL * max(scale, 1e-30) or not np.isfinite(scale)):
            raise InternalError(f"--parallel tensor: output {name!r} of the sharded graph differs from the model's "
                                f"(by {diff:.3g}, its largest magnitude {scale:.3g}): a sharding rule is wrong")


def compile_tensor_parallel(graph, digest, options, devices, progress=None, on_start=None):
    """The model's graph -> methods.Result whose plan runs on `devices` devices, tensor
    parallel (see the module docstring)."""
    from compiler import methods

    data_parallel.check_devices(devices, "tensor")
    if devices < 2:
        raise ModelError(f"--devices {devices} --parallel tensor: tensor parallel needs at least 2 devices")
    if graph.states:
        raise ModelError(f"--devices {devices}: a model with states (--state) runs on one device")
    if options.launch == "sink" and options.embed_native:
        raise ModelError(f"--devices {devices} --parallel tensor --launch sink: the plan's one program spans the "
                         f"devices, and an executable for one device cannot be embedded for it: leave out "
                         f"--embed-executables")
    if options.launch == "sink" and options.weights != "pool":
        raise ModelError(f"--devices {devices} --parallel tensor --launch sink: the program takes each device's "
                         f"part of the split weights from its pool: leave out --weights {options.weights}")
    if options.format_policy not in ("auto", "default"):
        raise ModelError(f"--devices {devices} --parallel tensor: activations stay in the default storage format "
                         f"(a collective moves default-format tensors): leave out --formats {options.format_policy}")
    options = pipeline.resolve(options)
    cleaned, order, info = pipeline.prepare(graph, options)
    sharded = tensor_parallel.shard(cleaned, info, devices, options.collective_blocks)
    # the sharded graph is cleaned up already: its passes would rewrite device 0's
    # part of a weight alone (CSE merging two parts equal on device 0, a layout change)
    every_pass = frozenset(pipeline.CLEANUP_PASSES)
    key = (model_json.graph_digest(cleaned), devices, options.collective_blocks)  # (the sharding's inputs)
    if key not in _CHECKED:  # (a model compiled again, in another launch mode: checked once)
        check_same_outputs(cleaned, sharded, devices, dataclasses.replace(options, disabled=every_pass))
        _CHECKED.add(key)
    device_options = dataclasses.replace(options, disabled=every_pass, devices=devices, inline_bytes=0,
                                         split_groups=False, format_policy="default")
    res = methods.compile_methods([("", sharded.graph)], digest, device_options, progress=progress,
                                  on_start=on_start)
    plan = res.plan
    plan = dataclasses.replace(plan, passes=tuple(p for p in pipeline.CLEANUP_PASSES if options.runs(p)),
                               mesh=_mesh(plan, sharded, devices))
    verify.verify(plan)
    return dataclasses.replace(res, plan=plan)


def _mesh(plan, sharded, devices):
    """The compiled plan's mesh (collectives only) -> with its shardings and shards."""
    index = {t.name: i for i, t in enumerate(plan.tensors)}
    shardings = tuple(sorted((PlanSharding(index[name], s.kind, s.axis if s.kind == tensor_parallel.SPLIT else -1)
                              for name, s in sharded.shardings.items() if name in index), key=lambda s: s.tensor))
    rows = {c.tensor: c.data for c in plan.constants}
    shards = []
    for name, parts in sorted(sharded.parts.items(), key=lambda kv: index.get(kv[0], -1)):
        if name not in index:
            continue
        i = index[name]
        t = plan.tensors[i]
        as_stored = [emit.le_bytes(dtypes.to_storage(p, t.dtype, f"constant {name!r}")) for p in parts]
        if t.format != "default" or bytes(rows.get(i, b"")) != as_stored[0]:
            raise InternalError(f"--parallel tensor: split weight {name!r} is not stored as the sharding made it "
                                f"(format {t.format}): its other devices' parts would not match")
        shards += [PlanShard(i, d, as_stored[d]) for d in range(1, devices)]
    return dataclasses.replace(plan.mesh, shardings=shardings, shards=tuple(shards))
