"""Memory planners: intervals -> byte offsets. They see intervals, never the graph.

`plan(intervals, alignment) -> offsets` (one per interval, same order, each a multiple
of `alignment`). Registered by name in `PLANNERS`:

  naive              no reuse: every tensor its own bytes, in table order (the baseline)
  greedy_by_size     TFLite's greedy by size (Pisarchyk & Lee, arXiv 2001.03288)
  greedy_by_breadth  TFLite's greedy by breadth (same paper)
  exact              branch and bound when at most EXACT_MAX_INTERVALS tensors have
                     bytes (at most EXACT_NODE_BUDGET search nodes), else greedy_by_size
  best               every member of PORTFOLIO; the smallest arena, ties to the earlier

Two tensors conflict when their closed step ranges intersect and both have bytes;
zero-byte tensors conflict with nothing and go to offset 0 (except under `naive`).
Every planner but `naive` depends on the tensor ids, not the list order: permuting the
input permutes the output alike (ties end with the tensor id). The greedy planners and
`exact` never exceed `naive`'s arena: a tensor goes into a gap or onto the conflicting
tensors below it, never above the sum of the aligned sizes placed so far.

The greedy planners share one engine (`_Engine`): tensors are placed in a given order,
each into the smallest gap that holds it between the already placed tensors that
conflict with it (the lowest such gap on ties), else above the highest of them; a gap
starts at the aligned end of the tensor below it. The conflicting tensors' bytes come
from a segment tree over time holding merged byte runs, so a tensor costs O(log steps)
list operations plus the runs in the lists it reads, and a stack of tensors live at
once is read as one run however many they are. Where the conflicting tensors leave
many separate gaps (say 1,000 long-lived inputs among short tensors), each tensor still
scans them, as any exact best fit must without an index of gaps by size; TFLite scans
every placed tensor (O(n^2)). scripts/bench_planners.py measures both kinds.
"""

from bisect import bisect_left, bisect_right

import numpy as np

from aotplan import formats, intervals as _intervals

PLANNERS = {}


def register(name):
    def deco(fn):
        PLANNERS[name] = fn
        return fn
    return deco


def arena_size(ivs, offsets, alignment):
    end = max((o + iv.nbytes for iv, o in zip(ivs, offsets)), default=0)
    return formats.align_up(end, alignment)


@register("naive")
def naive(ivs, alignment):
    """Every tensor its own bytes, in table order."""
    offsets, end = [], 0
    for iv in ivs:
        end = formats.align_up(end, alignment)
        offsets.append(end)
        end += iv.nbytes
    return offsets


# ---------------------------------------------------------------------------------------
# The best-fit placement engine


def _union_into(runs, a, b):
    """Add the byte range [a, b) to `runs`: disjoint runs as one sorted list of tagged
    boundaries, 2 * start + 1 and 2 * end (so at one byte an end sorts before a start,
    and lists concatenate and sort into a sweep). Touching runs merge."""
    i = bisect_left(runs, 2 * a)
    j = bisect_right(runs, 2 * b + 1)
    if i & 1:
        runs[i:j] = [] if j & 1 else [2 * b]
    else:
        runs[i:j] = [2 * a + 1] if j & 1 else [2 * a + 1, 2 * b]


def _best_gap(runs, size):
    """The start of the smallest gap of `runs` (tagged, see `_union_into`) from 0 that
    holds `size` bytes, the lowest on ties; else the end of the last run."""
    best, best_len, prev = -1, 0, 0
    for k in range(0, len(runs), 2):
        gap = (runs[k] >> 1) - prev
        if gap >= size and (best < 0 or gap < best_len):
            best, best_len = prev, gap
            if gap == size:
                break
        prev = runs[k + 1] >> 1
    return best if best >= 0 else prev


_NUMPY_EVENTS = 128  # boundaries; past this many a union of lists goes through numpy
_SKIP_EVENTS = 1024  # past this many, first try merging list by list, skipping covered runs
_SKIP_BUDGET = 32  # runs merged (not skipped) before giving that up for numpy


def _best_gap_many(lists, size):
    """`_best_gap` of the union of many lists (many boundaries). A packed stack that the
    tree holds in many pieces is merged list by list, from the list whose runs are
    widest on average, skipping each stretch of a list that lies inside one run of the
    union so far after one bisection; once that has merged more than _SKIP_BUDGET runs
    (the union itself has many gaps), numpy merges them all."""
    if sum(map(len, lists)) > _SKIP_EVENTS:
        # widest span per run first: the lists a packed stack lies in as a few long runs
        lists.sort(key=lambda runs: (runs[0] - runs[-1]) / len(runs))
        acc, budget = list(lists[0]), [_SKIP_BUDGET]
        for runs in lists[1:]:
            if not _merge_skipping(acc, runs, budget):
                break
        else:
            return _best_gap(acc, size)
    events = []
    for runs in lists:
        events += runs
    return _best_gap_np(events, size)


def _merge_skipping(acc, runs, budget):
    """Add `runs` to `acc` (tagged, see `_union_into`), skipping in O(log) each stretch
    of `runs` inside one run of `acc`; False once more than budget[0] runs were merged."""
    k, n = 0, len(runs)
    while k < n:
        s, e = runs[k], runs[k + 1]
        i = bisect_right(acc, s)
        if i & 1 and e <= acc[i]:  # inside acc's run [acc[i - 1], acc[i])
            k = bisect_right(runs, acc[i], k)  # the runs that end by then are covered
            if k & 1:  # this one straddles its end: merge it next
                k -= 1
            continue
        budget[0] -= 1
        if budget[0] < 0:
            return False
        _union_into(acc, s >> 1, e >> 1)
        k += 2
    return True


def _best_gap_np(events, size):
    """`_best_gap` of the union of several tagged run lists, concatenated (`events`)."""
    ev = np.sort(np.array(events, dtype=np.int64))
    start = (ev & 1).astype(bool)
    depth = np.cumsum(np.where(start, 1, -1))
    starts = ev[start & (depth == 1)] >> 1  # the union's runs
    ends = ev[~start & (depth == 0)] >> 1
    gaps = starts - np.concatenate(([0], ends[:-1]))
    fits = np.flatnonzero(gaps >= size)
    if not len(fits):
        return int(ends[-1])
    k = int(fits[np.argmin(gaps[fits])])  # the first smallest: the lowest
    return int(ends[k - 1]) if k else 0


class _Engine:
    """Placed tensors as rectangles (steps x bytes), for the query "the runs of bytes of
    the placed tensors that conflict with this one".

    Time is the distinct first steps of the tensors with bytes (leaf k of a segment tree:
    the k-th); a tensor covers the leaves of the first steps in its range, and two
    tensors conflict iff their leaf ranges meet (closed step ranges intersect iff one
    contains the other's first step). Runs are kept merged (`_union_into`). Per tree:

      full[v]   runs of the tensors that have v among their canonical nodes
      touch[v]  (nodes at height >= PUSH_HEIGHT) runs of the tensors with a canonical
                node under v; kept only while a tensor still to come has v as one

    A query reads, per canonical node c of its range, touch[c] (high c) or full of each
    node under c (low c), plus full of the strict ancestors of its two end leaves (the
    tensors covering an ancestor of c), walking only nodes canonical for some tensor
    (`up`). Alongside: `every` (tensors covering every leaf), `placed` (all so far) and
    `hot` (those live at the leaf where most tensors are, which have a tree of their
    own). A query whose range holds the hot leaf reads `hot` instead of that tree; one
    that every placed tensor meets reads `placed` alone; tensors enter a tree only
    before a query reads it (`pending`). So a stack of tensors live at once is read as
    one merged list, not as the tree's pieces of it (which would make planning them
    quadratic). The union of several lists is merged by a sort, numpy, or list by
    list skipping what is already covered (`_best_gap_many`)."""

    PUSH_HEIGHT = 3

    def __init__(self, ivs, alignment):
        self.alignment = alignment
        first, last, size, _ = _columns(ivs)
        live = (size > 0) & (first <= last)
        points = np.unique(first[live])
        n = 1
        while n < len(points):
            n *= 2
        self.size, self.n_points = n, len(points)
        self.sizes = size.tolist()
        lo = (np.searchsorted(points, first) + n).tolist()
        hi = (np.searchsorted(points, last, "right") - 1 + n).tolist()
        self.window = [(a, b) if ok else None for a, b, ok in zip(lo, hi, live.tolist())]

    def place_all(self, order):
        """Place the tensors at positions `order` one after another; returns offsets
        (zero-byte tensors at 0)."""
        align, window, sizes = self.alignment, self.window, self.sizes
        n_nodes = 2 * self.size
        leaf_bits = n_nodes.bit_length() - 1  # bit length of a leaf's index
        high = 1 << max(0, leaf_bits - self.PUSH_HEIGHT)  # nodes below this: height >= PUSH_HEIGHT
        canonical = [None] * len(sizes)
        need = [0] * n_nodes  # tensors still to be placed that have v as a canonical node
        live = [0] * (n_nodes + 1)  # tensors live at each leaf (a difference array)
        whole = (self.size, self.size + self.n_points - 1)
        for i in order:
            w = window[i]
            if w is None:
                continue
            live[w[0]] += 1
            live[w[1] + 1] -= 1
            if w == whole:
                continue
            lo, r = w[0], w[1] + 1
            canonical[i] = c = []
            while lo < r:
                if lo & 1:
                    c.append(lo)
                    need[lo] += 1
                    lo += 1
                if r & 1:
                    r -= 1
                    c.append(r)
                    need[r] += 1
                lo >>= 1
                r >>= 1
        up = [0] * n_nodes  # nearest strict ancestor that is canonical for some tensor
        for v in range(2, n_nodes):
            p = v >> 1
            up[v] = p if need[p] else up[p]
        # The hot leaf: where most tensors are live. Tensors live there ("hot") have a tree
        # of their own and `hot`, the union of their runs, which is what they add to any
        # query whose range holds the hot leaf: a stack of tensors live at once is read
        # as one list, not as the tree's pieces of it.
        count, most, hot_leaf = 0, -1, self.size
        for v in range(self.size, n_nodes):
            count += live[v]
            if count > most:
                most, hot_leaf = count, v
        # (full, touch, pending) of the hot tensors' tree and of the others'
        trees = tuple(([None] * n_nodes, [None] * n_nodes, []) for _ in range(2))
        every, placed, hot = [], [], []
        max_lo, min_hi = 0, n_nodes  # all placed tree tensors meet lo..hi iff max_lo <= hi and min_hi >= lo
        offsets = [0] * len(sizes)
        for i in order:
            w = window[i]
            if w is None:
                continue
            size = sizes[i]
            canon = canonical[i]
            if canon is None:  # live throughout
                off = _best_gap(placed, size)
                offsets[i] = off
                end = off + size
                end += -end % align
                _union_into(every, off, end)
                _union_into(placed, off, end)
                _union_into(hot, off, end)
                continue
            lo, hi = w
            path = []  # the canonical nodes' high strict ancestors, for touch
            x = up[lo]
            while x:
                if x < high:
                    path.append(x)
                x = up[x]
            below = 1 << (lo >> (lo ^ hi).bit_length()).bit_length()  # nodes deeper than the LCA
            x = up[hi] if hi != lo else 0
            while x >= below:
                if x < high:
                    path.append(x)
                x = up[x]
            if max_lo <= hi and min_hi >= lo:  # everything placed conflicts
                lists = [placed] if placed else []
            else:
                has_hot = lo <= hot_leaf <= hi
                lists = [hot] if has_hot and hot else [every] if every else []
                for full, touch, pending in trees[1:] if has_hot else trees:
                    for nodes, ancestors, a, b in pending:  # into the tree, now it is read
                        for v in nodes:
                            runs = full[v]
                            if runs is None:
                                full[v] = [2 * a + 1, 2 * b]
                            else:
                                _union_into(runs, a, b)
                            if v < high and need[v]:
                                runs = touch[v]
                                if runs is None:
                                    touch[v] = [2 * a + 1, 2 * b]
                                else:
                                    _union_into(runs, a, b)
                        for v in ancestors:
                            if need[v]:
                                runs = touch[v]
                                if runs is None:
                                    touch[v] = [2 * a + 1, 2 * b]
                                else:
                                    _union_into(runs, a, b)
                    pending.clear()
                    for c in canon:
                        if c < high:
                            if touch[c]:
                                lists.append(touch[c])
                        else:
                            first, width = c, 1
                            while first < n_nodes:
                                for u in range(first, first + width):
                                    if full[u]:
                                        lists.append(full[u])
                                first <<= 1
                                width <<= 1
                    x = up[lo]
                    while x:
                        if full[x]:
                            lists.append(full[x])
                        x = up[x]
                    x = up[hi] if hi != lo else 0
                    while x >= below:
                        if full[x]:
                            lists.append(full[x])
                        x = up[x]
            # the smallest gap that holds `size` (the lowest on ties), else the top
            best, best_len, prev = -1, 0, 0
            if len(lists) == 1:
                best = _best_gap(lists[0], size)
            elif sum(map(len, lists)) <= _NUMPY_EVENTS:
                events = []
                for runs in lists:
                    events += runs
                events.sort()
                depth = 0
                for e in events:
                    if e & 1:
                        if not depth:
                            gap = (e >> 1) - prev
                            if gap >= size and (best < 0 or gap < best_len):
                                best, best_len = prev, gap
                                if gap == size:
                                    break
                        depth += 1
                    else:
                        depth -= 1
                        if not depth:
                            prev = e >> 1
            else:
                best = _best_gap_many(lists, size)
            off = best if best >= 0 else prev
            offsets[i] = off
            # record the placed rectangle [off, end) (aligned end: gaps start aligned);
            # into its tree before the next query that reads that tree
            end = off + size
            end += -end % align
            _union_into(placed, off, end)
            if lo > max_lo:
                max_lo = lo
            if hi < min_hi:
                min_hi = hi
            for v in canon:
                need[v] -= 1
            if lo <= hot_leaf <= hi:
                _union_into(hot, off, end)
                trees[0][2].append((canon, path, off, end))
            else:
                trees[1][2].append((canon, path, off, end))
        return offsets


def _best_fit(ivs, alignment, order):
    return _Engine(ivs, alignment).place_all(order)


def _columns(ivs):
    """(first, last, nbytes, tensor) as int64 arrays."""
    cols = np.array([[iv.first for iv in ivs], [iv.last for iv in ivs], [iv.nbytes for iv in ivs],
                     [iv.tensor for iv in ivs]], dtype=np.int64).reshape(4, -1)
    return cols[0], cols[1], cols[2], cols[3]


def _size_order(ivs):
    """TFLite's arena order: whole-run tensors (live over the whole step range of the
    set) first, by tensor id; then by decreasing size, ties by first use, then tensor id
    (then position, for duplicate ids)."""
    if not ivs:
        return []
    first, last, size, tensor = _columns(ivs)
    live = (size > 0) & (first <= last)
    if live.any():
        rest = ~(live & (first == first[live].min()) & (last == last[live].max()))
    else:
        rest = np.ones(len(ivs), dtype=bool)
    keys = (np.arange(len(ivs)), tensor, np.where(rest, first, 0), np.where(rest, -size, 0), rest)
    return np.lexsort(keys).tolist()


@register("greedy_by_size")
def greedy_by_size(ivs, alignment):
    """TFLite's greedy by size: whole-run tensors first (by tensor id), then the rest by
    decreasing size (ties: first use, then tensor id), each into the best-fitting gap
    between the conflicting tensors already placed, or above them."""
    return _best_fit(ivs, alignment, _size_order(ivs))


def _range_min(values, lo, hi):
    """min(values[lo[k]..hi[k]]) for each k (int64 arrays): a sparse table."""
    table = [values]
    span = 1
    while 2 * span <= len(values):
        prev = table[-1]
        table.append(np.minimum(prev[:-span], prev[span:]))
        span *= 2
    length = hi - lo + 1
    level = np.zeros(len(lo), dtype=np.int64)
    while True:  # floor(log2(length)), exactly, without floats
        more = (length >> (level + 1)) > 0
        if not more.any():
            break
        level += more
    out = np.empty(len(lo), dtype=np.int64)
    for k in np.unique(level).tolist():
        sel = level == k
        row = table[k]
        out[sel] = np.minimum(row[lo[sel]], row[hi[sel] - (1 << k) + 1])
    return out


@register("greedy_by_breadth")
def greedy_by_breadth(ivs, alignment):
    """TFLite's greedy by breadth: steps by decreasing breadth (the aligned bytes live at
    the step; ties by step), and at each step its tensors not yet placed, by decreasing
    size (ties: first use, then tensor id), each into the best-fitting gap.

    Only steps where some tensor starts need visiting (any other step's live set is a
    subset of the one at the last start before it, with no more bytes), and a tensor is
    placed at the first visited step of its window: its rank is a range minimum."""
    first, last, size, tensor = _columns(ivs)
    live = np.flatnonzero((size > 0) & (first <= last))
    if not len(live):
        return [0] * len(ivs)
    first, last, size, tensor = first[live], last[live], size[live], tensor[live]
    points = np.unique(first)
    lo = np.searchsorted(points, first)
    hi = np.searchsorted(points, last, "right") - 1
    aligned = -(-size // alignment) * alignment
    delta = np.zeros(len(points) + 1, dtype=np.int64)
    np.add.at(delta, lo, aligned)
    np.add.at(delta, hi + 1, -aligned)
    breadth = np.cumsum(delta[:-1])
    visit = np.lexsort((np.arange(len(points)), -breadth))  # by decreasing breadth, ties by step
    rank = np.empty(len(points), dtype=np.int64)
    rank[visit] = np.arange(len(points))
    ranks = _range_min(rank, lo, hi)
    order = np.lexsort((live, tensor, first, -size, ranks))
    return _best_fit(ivs, alignment, live[order].tolist())


# ---------------------------------------------------------------------------------------
# Exact search for small sets

EXACT_MAX_INTERVALS = 12  # tensors with bytes; more and `exact` is greedy_by_size
EXACT_NODE_BUDGET = 20000  # search nodes (~0.15 s); past it, the best placement found so far


def _n_live(ivs):
    return sum(1 for iv in ivs if iv.nbytes > 0 and iv.first <= iv.last)


def _exact_search(ivs, alignment, seed):
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
    floor = align(_intervals.peak_live_bytes([ivs[i] for i in items], align))
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


@register("exact")
def exact(ivs, alignment):
    """The smallest arena by branch and bound when at most EXACT_MAX_INTERVALS tensors
    have bytes (within EXACT_NODE_BUDGET search nodes, else the best found, never worse
    than greedy_by_size); greedy_by_size for larger sets."""
    seed = greedy_by_size(ivs, alignment)
    if _n_live(ivs) > EXACT_MAX_INTERVALS:
        return seed
    return _exact_search(ivs, alignment, seed)


PORTFOLIO = ("greedy_by_size", "greedy_by_breadth", "exact", "naive")


@register("best")
def best(ivs, alignment):
    """Every member of PORTFOLIO; the smallest arena, ties to the earlier member.
    (`exact` is seeded with the best greedy answer rather than recomputing it.)"""
    choice, choice_size = None, None
    for name in PORTFOLIO:
        if name == "exact":
            if _n_live(ivs) > EXACT_MAX_INTERVALS:
                continue  # exact is greedy_by_size here
            offsets = _exact_search(ivs, alignment, choice)
        else:
            offsets = PLANNERS[name](ivs, alignment)
        n = arena_size(ivs, offsets, alignment)
        if choice is None or n < choice_size:
            choice, choice_size = offsets, n
    return choice
