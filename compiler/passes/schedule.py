"""schedule: a deterministic topological order of the nodes.

Kahn's algorithm; among ready nodes the one first in model.json goes first, so a
model already in order keeps its order. Memory-aware orders are a later issue.
"""

import heapq


def run(graph):
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    made_by = {o: n.name for n in graph.nodes for o in n.outputs}
    deps = {n.name: {made_by[i] for i in n.inputs if i in made_by} for n in graph.nodes}
    users = {n.name: [] for n in graph.nodes}
    for name, ds in deps.items():
        for d in sorted(ds):
            users[d].append(name)
    ready = [index[n] for n, ds in deps.items() if not ds]
    heapq.heapify(ready)
    order = []
    while ready:
        node = graph.nodes[heapq.heappop(ready)]
        order.append(node)
        for u in users[node.name]:
            deps[u].discard(node.name)
            if not deps[u]:
                heapq.heappush(ready, index[u])
    return tuple(order)
