"""Direct evaluation of a graph with the op library's lowerings, no arena, no plan.

The oracle that plans are compared against in tests (the op library itself is tested
against independent numpy code)."""

import jax.numpy as jnp
import numpy as np

from aotplan import dtypes
from compiler import ops
from compiler.passes import infer, schedule, validate


def evaluate(graph, feeds):
    graph = validate.run(graph)
    order = schedule.run(graph)
    info = infer.run(graph, order)
    env = {t.name: jnp.asarray(dtypes.to_storage(feeds[t.name], t.dtype, t.name)) for t in graph.inputs}
    for c in graph.constants:
        env[c.name] = jnp.asarray(dtypes.to_storage(c.data, c.dtype, c.name))
    for node in order:
        outs = ops.get(node.op).lower(node, *(env[i] for i in node.inputs))
        env.update(zip(node.outputs, outs))
    return {o: dtypes.from_storage(np.asarray(env[o]), info[o].dtype) for o in graph.outputs}
