"""Shared fixtures. XLA compile time dominates the suite: example plans are compiled
once per session and their sessions reused."""

import os

import numpy as np
import pytest

from aotplan import codec, model_json
from aotplan.graph import Constant, Graph, Node, TensorInfo, freeze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "plans", "examples")
EXAMPLE_NAMES = ("mlp", "cnn", "transformer")


def one_node_graph(op, inputs, consts=(), n_out=1, **attrs):
    """inputs: [(name, array)] graph inputs; consts: [(name, array)] constants."""
    from aotplan import dtypes

    ins = tuple(TensorInfo(n, dtypes.dtype_name(a.dtype), a.shape) for n, a in inputs)
    cs = tuple(Constant(n, dtypes.dtype_name(a.dtype), a.shape, a) for n, a in consts)
    outs = tuple(f"y{i}" for i in range(n_out))
    names = tuple(n for n, _ in inputs) + tuple(n for n, _ in consts)
    return Graph("t", ins, outs, (Node("n", op, names, outs, freeze(attrs)),), cs)


def compile_and_load(graph, **opts):
    """Graph -> (plan, executor Session) through the real codec."""
    import executor
    from compiler import pipeline

    res = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(**opts))
    return res.plan, executor.Session(codec.decode(codec.encode(res.plan)))


def random_feeds(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}


@pytest.fixture(scope="session")
def examples():
    """name -> (graph, plan, session), compiled once per test session."""
    out = {}
    for name in EXAMPLE_NAMES:
        g, _ = model_json.load(os.path.join(EXAMPLES, name, "model.json"))
        plan, sess = compile_and_load(g)
        out[name] = (g, plan, sess)
    return out
