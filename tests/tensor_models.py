"""Small graphs for the tensor-parallel tests (tests/compiler/test_tensor_parallel.py,
tests/executor/test_tensor_parallel_session.py)."""

import numpy as np

from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze


def small_graph(nodes, inputs, consts, outputs):
    """[(name, op, inputs, outputs, attrs)], [(input, shape)], [(constant, shape)]
    (seeded normal values), [output] -> a float32 Graph."""
    rng = np.random.default_rng(1)
    return Graph("t", tuple(TensorInfo(n, "float32", s) for n, s in inputs), tuple(outputs),
                 tuple(Node(name, op, tuple(ins), tuple(outs), freeze(attrs)) for name, op, ins, outs, attrs in nodes),
                 tuple(Constant(n, "float32", s, rng.standard_normal(s).astype(np.float32)) for n, s in consts))


def three_heads():
    """Three row-parallel heads of one hidden layer, each a graph output: their partial
    values are summed at one point (the end)."""
    nodes = [("up", "matmul", ("x", "w"), ("h",), {}), ("act", "relu", ("h",), ("a",), {})]
    consts = [("w", (4, 8))]
    for k, n in (("o1", 3), ("o2", 5), ("o3", 16)):
        nodes.append((k, "matmul", ("a", f"{k}.w"), (k,), {}))
        consts.append((f"{k}.w", (8, n)))
    return small_graph(nodes, [("x", (2, 4))], consts, ["o1", "o2", "o3"])
