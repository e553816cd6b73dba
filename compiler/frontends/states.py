"""States declared on a loaded graph (`--state OUT=IN`, `aotplan.compile(states=...)`):
graph output OUT is written in place over graph input IN each step (zeros before the
first); the digest covers the pairs, so the plan records them."""

import dataclasses
import hashlib

from aotplan.core.errors import ModelError
from aotplan.core.graph import State


def declare(graph, digest, pairs, flag="--state"):
    """[(OUT, IN)] -> (graph with those states, digest); a name that is not a graph
    input or output is one error naming the pair as `flag` wrote it."""
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
    graph = dataclasses.replace(graph, states=graph.states + tuple(State(inp, out) for out, inp in pairs))
    return graph, hashlib.sha256(f"{digest} states {pairs!r}".encode()).hexdigest()
