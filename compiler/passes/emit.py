"""emit: the decisions of every pass -> a `Plan` record (the codec makes the bytes)."""

import jax
import jaxlib
import numpy as np

import aotplan
from aotplan.core import dtypes, formats
from aotplan.core.plan import Launch, MemoryStats, Plan, PlanConstant, PlanKernel, PlanState, PlanTensor, Provenance


def run(graph, output_names, digest, liveness, mem, lowered, weights, passes, launch_mode, bounds=(0, 0),
        state=({}, 0)):
    """`bounds`: (plain, shared) reference bounds of the model (see MemoryStats);
    `state`: (tensor index -> byte offset in the state buffer, its bytes)."""
    kernels = lowered.kernels
    recs, idx = liveness.tensors, liveness.index()
    state_offsets, state_bytes = state
    tensors = tuple(
        PlanTensor(t.name, t.kind, t.dtype, t.shape, t.format, formats.device_shape(t.shape, t.format), t.storage,
                   state_offsets[i] if t.storage == "state" else _offset(mem, recs, i), t.nbytes, t.base, t.runs,
                   t.stride, formats.padding(t.shape, t.format))
        for i, t in enumerate(recs))
    cmap = graph.constant_map()
    constants = [
        (i, le_bytes(dtypes.to_storage(cmap[t.name].data, t.dtype, f"constant {t.name!r}")))
        for i, t in enumerate(recs) if t.kind == "constant" and t.storage != "inline"]  # those are in the kernel
    states = tuple(PlanState(st.input, idx[st.input], idx[st.output]) for st in graph.states)
    # a state's initial value, where it is not zeros, is a constant row of its tensor
    constants += [(idx[st.input], le_bytes(dtypes.to_storage(st.init, recs[idx[st.input]].dtype,
                                                              f"state {st.input!r}")))
                  for st in graph.states if st.init is not None]
    constants = tuple(PlanConstant(i, data) for i, data in sorted(constants))
    pool_bytes = sum(t.nbytes for t in recs if t.storage == "pool")
    memory = MemoryStats(mem.arena_bytes, mem.lower_bound_bytes, mem.naive_bytes, pool_bytes,
                         max((k.workspace_bytes for k in kernels), default=0), *bounds,
                         sum(t.nbytes for t in recs if t.storage == "inline"), state_bytes)
    return Plan(
        launch_mode=launch_mode, weights=weights, planner=mem.planner, passes=tuple(passes), alignment=formats.ALIGNMENT,
        arena_bytes=mem.arena_bytes, tensors=tensors, constants=constants,
        kernels=tuple(PlanKernel(k.name, k.exported, k.workspace_bytes, k.n_offsets, k.feeds, k.returns,
                                 k.native, k.state)
                      for k in kernels),
        launches=tuple(Launch(k, label, *liveness.steps[s], nodes)
                       for s, (k, label, nodes) in enumerate(lowered.launches)),
        inputs=tuple(i for i, t in enumerate(recs) if t.kind == "input"),
        outputs=tuple(idx[o] for o in graph.returned),
        output_names=tuple(output_names),
        input_kernel=lowered.input_kernel, output_kernel=lowered.output_kernel, place_kernel=lowered.place_kernel,
        memory=memory,
        provenance=Provenance(graph.name, digest, aotplan.__version__, jax.__version__, jaxlib.__version__,
                              lowered.platforms, lowered.native_fingerprint),
        states=states)


def _offset(mem, recs, i):
    t = recs[i]
    if t.storage != "arena":
        return -1
    return mem.offsets[i]


def le_bytes(a):
    """An array's bytes, little-endian (a plan's constants are)."""
    a = np.asarray(a, order="C")
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()
