"""Direct evaluation of a graph with the op library's lowerings, no arena, no plan.

The oracle that plans are compared against in tests (the op library itself is tested
against independent numpy code): `evaluate` runs the graph as written, without the
clean-up passes the compiler runs, so those passes are checked too. And the `jax.jit`
peer that benchmarks measure against (`make_function`: the cleaned-up graph, the same
graph-level work the plan gets)."""

import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes
from compiler import ops


def make_function(graph, options=None):
    """Graph -> (fn, info): fn maps {input: array in storage dtype} to {output: array},
    a pure JAX function (jit it for a whole-model peer), the weights closed over."""
    fn, weights, info = make_function_of_weights(graph, options)
    return (lambda feeds: fn(weights, feeds)), info


def make_function_of_weights(graph, options=None):
    """Graph -> (fn, weights, info): fn(weights, feeds) -> {output: array}, the weights
    (device arrays in storage dtypes) as an argument, as a plan takes its constant pool."""
    from compiler import pipeline

    names = graph.outputs
    graph, order, info = pipeline.prepare(graph, options or pipeline.Options())
    read = {i for n in order for i in n.inputs}
    consts = {c.name: jnp.asarray(dtypes.to_storage(c.data, c.dtype, c.name)) for c in graph.constants if c.name in read}

    def fn(weights, feeds):
        env = dict(feeds)
        env.update(weights)
        for node in order:
            env.update(zip(node.outputs, ops.get(node.op).lower(node, *(env[i] for i in node.inputs))))
        return {n: env[o] for n, o in zip(names, graph.outputs)}

    return fn, consts, {n: info[o] for n, o in zip(names, graph.outputs)}


def oracle_options():
    """The options of the test oracle: no clean-up pass (folding, batchnorm folding,
    CSE, ...), so a plan, which runs them, is compared with the graph as written."""
    from compiler import pipeline

    return pipeline.Options(disabled=frozenset(pipeline.CLEANUP_PASSES))


def evaluate(graph, feeds, options=None):
    """{input: numpy array (logical dtype)} -> {output: numpy array (logical dtype)}:
    the graph as written (`oracle_options`: no clean-up pass) unless `options` say
    otherwise."""
    fn, out_info = make_function(graph, options or oracle_options())
    args = {t.name: jnp.asarray(dtypes.to_storage(feeds[t.name], t.dtype, t.name)) for t in graph.inputs}
    return {o: dtypes.from_storage(np.asarray(v), out_info[o].dtype) for o, v in fn(args).items()}


def evaluate_all(graph, feeds, options=None):
    """Like `evaluate`, but -> {tensor name: value} for every tensor of the cleaned-up
    graph (the names plans use), node by node, for `aotplan check`."""
    from compiler import pipeline

    graph, order, info = pipeline.prepare(graph, options or pipeline.Options())
    env = {t.name: jnp.asarray(dtypes.to_storage(feeds[t.name], t.dtype, t.name)) for t in graph.inputs}
    env.update((c.name, jnp.asarray(dtypes.to_storage(c.data, c.dtype, c.name))) for c in graph.constants)
    out = {}
    for node in order:
        vals = ops.get(node.op).lower(node, *(env[i] for i in node.inputs))
        for name, v in zip(node.outputs, vals):
            env[name] = v
            out[name] = dtypes.from_storage(np.asarray(v), info[name].dtype)
    return out
