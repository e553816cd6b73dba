"""dce: dead-code elimination. Nodes none of whose outputs reach a graph output, and
constants no remaining node reads, are dropped. Graph inputs stay (they are the
model's interface, fed whether used or not)."""

import dataclasses


def run(graph):
    live = set(graph.outputs)
    keep = []
    for n in reversed(graph.nodes):  # nodes are in topological order by now
        if any(o in live for o in n.outputs):
            keep.append(n)
            live.update(i for i in n.inputs if i)
    keep.reverse()
    consts = tuple(c for c in graph.constants if c.name in live)
    removed = len(graph.nodes) - len(keep) + len(graph.constants) - len(consts)
    return dataclasses.replace(graph, nodes=tuple(keep), constants=consts), removed
