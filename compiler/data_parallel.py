"""Data-parallel plans (`aotplan compile --devices N --parallel data`): one device's
plan, run on each of N devices on its slice of the batch.

The batch is every input's first axis; the plan is the model compiled for batch / N
(`shard_graph`), and records the mesh (`PlanMesh`): N devices, inputs split and outputs
joined along axis 0. Weights are replicated (each device's Session places its own
copy) and no collective runs: in inference no sample reads another's.

That last sentence is the model's to keep, not ours: a model that mixes samples (a
reshape that folds the batch into another axis, a reduction over it, a batch-1 shape
written into a Reshape) would give other numbers split. So the compiler checks that
the model, evaluated by the reference on random inputs (`compiler.reference`), gives
the same outputs at the whole batch as its N slices joined (`check_batch_independent`),
and refuses the model otherwise, naming the output.
"""

import dataclasses

import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import ModelError
from aotplan.core.plan import PARALLEL_KINDS, PlanMesh
from aotplan.core.verify_mesh import MAX_DEVICES
# The largest difference between the whole batch's outputs and the slices' joined,
# relative to the output's largest magnitude, still taken for float rounding (the
# same programs over a batch of another size may sum in another order).
BATCH_RTOL = 1e-4
# (graph digest, devices) pairs this process has found batch-independent: the check
# depends on the model alone (`model_json.graph_digest` covers its graph and weights)
_INDEPENDENT = set()


def check_devices(devices, parallel):
    if type(devices) is not int or not 1 <= devices <= MAX_DEVICES:
        raise ModelError(f"--devices: expected a count of 1 to {MAX_DEVICES}, got {devices!r}")
    if parallel not in PARALLEL_KINDS:
        raise ModelError(f"--parallel {parallel!r}: not supported (supported: {', '.join(PARALLEL_KINDS)})")


def shard_graph(graph, devices):
    """The model's graph -> one device's: every input's first axis divided by `devices`.
    Inputs that disagree on that axis, or that it does not divide, are a ModelError."""
    if not graph.inputs:
        raise ModelError(f"--devices {devices}: the model has no inputs to split")
    first = graph.inputs[0]
    for t in graph.inputs:
        if not t.shape:
            raise ModelError(f"--devices {devices}: input {t.name!r} is a scalar; data parallel splits every input "
                             f"along its first axis (the batch)")
        if t.shape[0] != first.shape[0]:
            raise ModelError(f"--devices {devices}: input {t.name!r} has {t.shape[0]} on its first axis, input "
                             f"{first.name!r} {first.shape[0]}: data parallel splits every input along its first "
                             f"axis (the batch), which must be the same")
    batch = first.shape[0]
    if batch % devices:
        raise ModelError(f"--devices {devices} does not divide the batch: input {first.name!r} has {batch} on its "
                         f"first axis")
    inputs = tuple(dataclasses.replace(t, shape=(batch // devices,) + tuple(t.shape[1:])) for t in graph.inputs)
    return dataclasses.replace(graph, inputs=inputs)


def mesh_for(plan, devices, parallel, batch):
    """The mesh a compiled one-device plan records; an output whose first axis is not
    its slice of the batch is a ModelError."""
    for name, i in zip(plan.output_names, plan.outputs):
        t = plan.tensors[i]
        if not t.shape or t.shape[0] != batch // devices:
            raise ModelError(f"--devices {devices}: output {name!r} of one device's slice has shape {list(t.shape)}, "
                             f"whose first axis is not the slice's batch ({batch // devices} of {batch}): data parallel "
                             f"joins every output along its first axis")
    return PlanMesh(devices=devices, parallel=parallel, input_axes=(0,) * len(plan.inputs),
                    output_axes=(0,) * len(plan.outputs))


def random_feeds(graph, seed=0):
    """Inputs for the check: floats standard normal, integers 0 and 1 (valid indices
    for any gather), bools random."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in graph.inputs:
        dt = dtypes.np_dtype(t.dtype)
        if dt == np.bool_:
            feeds[t.name] = rng.random(t.shape) < 0.5
        elif np.issubdtype(dt, np.integer):
            feeds[t.name] = rng.integers(0, 2, t.shape).astype(dt)
        else:
            feeds[t.name] = rng.standard_normal(t.shape).astype(dt)
    return feeds


def check_batch_independent(graph, shard, devices):
    """The reference evaluation of the whole batch equals its `devices` slices', joined
    (see the module docstring), else a ModelError naming the first output that differs."""
    from compiler import reference

    feeds = random_feeds(graph)
    whole = reference.evaluate(graph, feeds)
    parts = [reference.evaluate(shard, {k: np.split(v, devices)[d] for k, v in feeds.items()}) for d in range(devices)]
    for name in graph.outputs:
        want = np.asarray(whole[name])
        if np.ndim(parts[0][name]) == 0:
            raise ModelError(f"--devices {devices}: output {name!r} is a scalar: data parallel joins every output's "
                             f"slices along its first axis (the batch)")
        got = np.concatenate([np.asarray(p[name]) for p in parts])
        if got.shape != want.shape:
            raise ModelError(f"--devices {devices}: output {name!r} has shape {list(want.shape)} at the whole batch, "
                             f"{list(got.shape)} from its slices joined: the model does not keep its batch on the "
                             f"first axis")
        if want.dtype.kind in "fc":
            scale = float(np.max(np.abs(want))) if want.size else 0.0
            diff = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
            same = diff <= BATCH_RTOL * max(scale, 1e-30) or not np.isfinite(scale)
        else:
            same, diff = bool(np.array_equal(got, want)), None
        if not same:
            raise ModelError(f"--devices {devices}: output {name!r} differs between the whole batch and its slices "
                             f"joined" + (f" (by {diff:.3g}, its largest magnitude {scale:.3g})" if diff is not None
                                          else "") + ": the model mixes samples across the batch, so it cannot be "
                             "split across devices")


def compile_data_parallel(graph, digest, options, devices, parallel="data", progress=None, on_start=None):
    """The model's graph -> methods.Result whose plan runs on `devices` devices (one
    device's plan, with its mesh). A model with states is refused (one state per device
    would have to be kept in step)."""
    from compiler import methods

    check_devices(devices, parallel)
    if graph.states:
        raise ModelError(f"--devices {devices}: a model with states (--state) runs on one device")
    shard = shard_graph(graph, devices)
    from aotplan.core.model_json import graph_digest

    key = (graph_digest(graph), devices)  # (its own digest: a caller's may name another graph)
    if key not in _INDEPENDENT:  # (a model compiled again, in another launch mode: checked once)
        check_batch_independent(graph, shard, devices)
        _INDEPENDENT.add(key)
    res = methods.compile_methods([("", shard)], digest, options, progress=progress, on_start=on_start)
    mesh = mesh_for(res.plan, devices, parallel, graph.inputs[0].shape[0])
    return dataclasses.replace(res, plan=dataclasses.replace(res.plan, mesh=mesh))
