"""cse: common-subexpression elimination.

Constants with the same dtype, shape and bytes become one. Then, in topological order,
a node with the same op, inputs and attributes as an earlier one is dropped and its
outputs are read from the earlier node's (unless one of them is a graph output, which
must keep its own tensor).
"""

import dataclasses
import hashlib

from compiler.passes.rewrite import rename_inputs


def run(graph):
    outputs = set(graph.outputs)
    mapping, consts, seen_c = {}, [], {}
    for c in graph.constants:
        key = (c.dtype, c.shape, hashlib.sha256(c.data.tobytes()).digest())
        if key in seen_c and c.name not in outputs:
            mapping[c.name] = seen_c[key]
        else:
            seen_c.setdefault(key, c.name)
            consts.append(c)
    nodes, seen_n = [], {}
    for n in graph.nodes:
        n = rename_inputs((n,), mapping)[0]
        key = (n.op, n.inputs, n.attrs, len(n.outputs))
        first = seen_n.get(key)
        if first is not None and not outputs.intersection(n.outputs):
            mapping.update(zip(n.outputs, first.outputs))
            continue
        seen_n.setdefault(key, n)
        nodes.append(n)
    removed = len(graph.nodes) - len(nodes) + len(graph.constants) - len(consts)
    return dataclasses.replace(graph, nodes=tuple(nodes), constants=tuple(consts)), removed
