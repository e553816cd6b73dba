"""schedule: a deterministic topological order of the nodes.

Kahn's algorithm; among ready nodes the one first in model.json goes first, so a
model already in order keeps its order. `candidates` adds memory-aware orders (list
scheduling by bytes freed, by depth); the compiler keeps the one with the lowest peak.
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


# ------------------------------------------------------------------ memory-aware orders

def _greedy(graph, order, sizes, key):
    """List scheduling: among the ready nodes, the one with the smallest `key(node,
    freed, alloc, recency)` goes next; ties by the default order's position."""
    pos = {n.name: i for i, n in enumerate(order)}
    made_by = {o: n.name for n in order for o in n.outputs}
    deps = {n.name: {made_by[i] for i in n.inputs if i in made_by} for n in order}
    users = {n.name: [] for n in order}
    readers = {}
    for n in order:
        for d in sorted(deps[n.name], key=pos.get):
            users[d].append(n.name)
        for i in set(n.inputs):
            readers[i] = readers.get(i, 0) + 1
    outputs = set(graph.outputs)
    by_name = {n.name: n for n in order}
    ready = {n.name for n in order if not deps[n.name]}
    produced_at = {}
    out = []
    while ready:
        def score(name):
            node = by_name[name]
            alloc = sum(sizes.get(o, 0) for o in node.outputs)
            freed = sum(sizes.get(i, 0) for i in set(node.inputs)
                        if readers.get(i) == 1 and i not in outputs and i in sizes)
            recency = max((produced_at.get(i, -1) for i in node.inputs), default=-1)
            return key(alloc, freed, recency), pos[name]

        name = min(ready, key=score)
        ready.discard(name)
        node = by_name[name]
        out.append(node)
        produced_at.update((o, len(out)) for o in node.outputs)
        for i in set(node.inputs):
            readers[i] -= 1
        for u in users[name]:
            deps[u].discard(name)
            if not deps[u]:
                ready.add(u)
    return tuple(out)


STRATEGIES = {
    # the most bytes freed net of the bytes allocated first
    "net": lambda alloc, freed, recency: alloc - freed,
    # continue the most recent chain (depth first): finishes a branch before the next
    "depth": lambda alloc, freed, recency: -recency,
    # free first, then follow the chain
    "free_then_depth": lambda alloc, freed, recency: (-freed, -recency),
}


def candidates(graph, order, sizes):
    """-> [(name, order)]: the default order, then one per strategy (duplicates
    dropped). The compiler keeps the one whose planned lifetimes have the lowest peak
    (pipeline.compile_graph), the first such on ties: never worse than the default.
    Graphs over 5,000 nodes keep the default order (the strategies are quadratic in
    the ready set)."""
    out = [("default", tuple(order))]
    if len(order) > 5000:
        return out
    for name, key in STRATEGIES.items():
        cand = _greedy(graph, order, sizes, key)
        if all(cand != o for _, o in out):
            out.append((name, cand))
    return out
