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


# ------------------------------------------------------------------ memory-aware order

def live_peak(order, graph, sizes):
    """Peak live bytes of `order` with one launch per node and every tensor its own
    bytes: an input lives from step 0 to its last read, a graph output to the end, a
    node's output from its step to its last read. `sizes`: tensor name -> bytes
    (tensors not in it, such as pool constants, count 0)."""
    n = len(order)
    last = {}
    for s, node in enumerate(order):
        for i in node.inputs:
            last[i] = s
    delta = [0] * (n + 2)
    for t in graph.inputs:
        delta[0] += sizes.get(t.name, 0)
        delta[last.get(t.name, 0) + 1] -= sizes.get(t.name, 0)
    outputs = set(graph.outputs)
    for s, node in enumerate(order):
        for o in node.outputs:
            b = sizes.get(o, 0)
            delta[s] += b
            delta[(n if o in outputs else last.get(o, s)) + 1] -= b
    peak = cur = 0
    for d in delta:
        cur += d
        peak = max(peak, cur)
    return peak


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


def memory_aware(graph, order, sizes):
    """-> (order, default peak, peak): of the default order and the strategies' orders,
    the one with the lowest live-bytes peak (the first such in this list: default,
    net, depth, free_then_depth). Deterministic. Large graphs (> 5,000 nodes) keep
    the default order (the strategies are quadratic in the ready set)."""
    base = live_peak(order, graph, sizes)
    if len(order) > 5000:
        return order, base, base
    best, best_peak = order, base
    for key in STRATEGIES.values():
        cand = _greedy(graph, order, sizes, key)
        p = live_peak(cand, graph, sizes)
        if p < best_peak:
            best, best_peak = cand, p
    return best, base, best_peak
