"""`exact`: the smallest arena by branch and bound, for sets of at most
EXACT_MAX_INTERVALS tensors with bytes (greedy_by_size for larger ones)."""

from aotplan.core import formats, intervals
from compiler.planners.arena import arena_size
from compiler.planners.greedy import greedy_by_size

EXACT_MAX_INTERVALS = 12  # tensors with bytes; more and `exact` is greedy_by_size
EXACT_NODE_BUDGET = 20000  # search nodes (~0.15 s); past it, the best placement found so far


def n_live(ivs):
    """The tensors with bytes (and a step range): what the search places."""
    return sum(1 for iv in ivs if iv.nbytes > 0 and iv.first <= iv.last)


def exact_search(ivs, alignment, seed):
    """Branch and bound. Any placement can be pushed down into one that placing its
    tensors in order of offset, each at the lowest aligned offset where it fits among
    the conflicting ones already placed, reproduces, with no larger arena. So the search
    places tensors at their lowest fit, in non-decreasing offset order (ties by tensor
    id), bounded below by peak live bytes and by each unplaced tensor's lowest fit.
    Returns offsets no worse than `seed`, deterministic (node budget, not time)."""
    align = lambda n: formats.align_up(n, alignment)  # noqa: E731
    items = sorted((i for i, iv in enumerate(ivs) if iv.nbytes > 0 and iv.first <= iv.last),
                   key=lambda i: (ivs[i].tensor, i))
    n = len(items)
    size = [ivs[i].nbytes for i in items]
    conflicts = [[u for u in range(n) if u != t and ivs[items[t]].first <= ivs[items[u]].last
                  and ivs[items[u]].first <= ivs[items[t]].last] for t in range(n)]
    best_offsets = list(seed)
    best = arena_size(ivs, seed, alignment)
    floor = align(intervals.peak_live_bytes([ivs[i] for i in items], align))
    if best <= floor:
        return best_offsets
    off = [None] * n
    nodes = 0

    def fit(t):
        spans = sorted((off[u], align(off[u] + size[u])) for u in conflicts[t] if off[u] is not None)
        at = 0
        for lo, hi in spans:
            if at + size[t] <= lo:
                break
            at = max(at, hi)
        return at

    def search(placed, last_off, last_t, end):
        nonlocal best, best_offsets, nodes
        if placed == n:
            if end < best:
                best = end
                best_offsets = [0] * len(ivs)
                for t in range(n):
                    best_offsets[items[t]] = off[t]
            return
        nodes += 1
        if nodes > EXACT_NODE_BUDGET:
            return
        bound, cands = max(end, floor), []
        for t in range(n):
            if off[t] is None:
                f = fit(t)
                bound = max(bound, align(max(f, last_off) + size[t]))
                if f > last_off or (f == last_off and t > last_t):
                    cands.append((f, t))
        if bound >= best or not cands:
            return
        for f, t in sorted(cands):
            off[t] = f
            search(placed + 1, f, t, max(end, align(f + size[t])))
            off[t] = None
            if best <= floor or nodes > EXACT_NODE_BUDGET:
                return

    search(0, 0, -1, 0)
    return best_offsets


def exact(ivs, alignment):
    """The smallest arena by branch and bound when at most EXACT_MAX_INTERVALS tensors
    have bytes (within EXACT_NODE_BUDGET search nodes, else the best found, never worse
    than greedy_by_size); greedy_by_size for larger sets."""
    seed = greedy_by_size(ivs, alignment)
    if n_live(ivs) > EXACT_MAX_INTERVALS:
        return seed
    return exact_search(ivs, alignment, seed)
