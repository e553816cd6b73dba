"""States declared on a loaded graph (`--state OUT=IN`, `compiler.compile(states=...)`):
graph output OUT is written in place over graph input IN each step (zeros before the
first); the digest covers the pairs, so the plan records them."""

import dataclasses
import hashlib

import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import ModelError
from aotplan.core.graph import State


def declare(graph, digest, pairs, flag="--state", inits=None):
    """[(OUT, IN)] -> (graph with those states, digest); a name that is not a graph
    input or output is one error naming the pair as `flag` wrote it. `inits`: {IN:
    array}, a state's value before the first step (default zeros), of the input's dtype
    and shape."""
    inits = dict(inits or {})
    label = "--state-init" if flag == "--state" else "state_inits"
    if inits and not pairs:
        raise ModelError(f"{label} {next(iter(inits))}: no state is declared ({flag} OUT=IN first)")
    if not pairs:
        return graph, digest
    inputs = {t.name for t in graph.inputs}
    for out, inp in pairs:
        if inp not in inputs:
            raise ModelError(f"{flag} {out}={inp}: {inp!r} is not a graph input (inputs: "
                             f"{', '.join(sorted(inputs)) or 'none'})")
        if out not in graph.outputs:
            raise ModelError(f"{flag} {out}={inp}: {out!r} is not a graph output (outputs: "
                             f"{', '.join(graph.outputs) or 'none'})")
    pairs = [tuple(p) for p in pairs]
    declared = {inp for _, inp in pairs}
    infos = {t.name: t for t in graph.inputs}
    for inp, value in inits.items():
        if inp not in declared:
            raise ModelError(f"{label} {inp}: not the input of a state declared here (states' inputs: "
                             f"{', '.join(sorted(declared))})")
        t, value = infos[inp], np.asarray(value)
        if value.dtype != dtypes.np_dtype(t.dtype) or tuple(value.shape) != tuple(t.shape):
            raise ModelError(f"{label} {inp}: the value is {value.dtype}{list(value.shape)}, the state is "
                             f"{t.dtype}{list(t.shape)}")
    graph = dataclasses.replace(graph, states=graph.states + tuple(State(inp, out, inits.get(inp))
                                                                   for out, inp in pairs))
    h = hashlib.sha256(f"{digest} states {pairs!r}".encode())
    for inp in sorted(inits):  # (nothing for states of zeros: such a plan's digest is what it was)
        h.update(f" init {inp} ".encode() + np.ascontiguousarray(inits[inp]).tobytes())
    return graph, h.hexdigest()
