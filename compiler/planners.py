"""Memory planners: intervals -> byte offsets. They see intervals, never the graph.

`plan(intervals, alignment) -> offsets` (one per interval, same order, each a multiple
of `alignment`). Registered by name in `PLANNERS`:

  naive              no reuse: every tensor its own bytes, in table order (the baseline)
  greedy_by_size     TFLite's greedy by size (Pisarchyk & Lee, arXiv 2001.03288)
  greedy_by_breadth  TFLite's greedy by breadth (same paper)
  exact              branch and bound when at most EXACT_MAX_INTERVALS tensors have
                     bytes (at most EXACT_NODE_BUDGET search nodes), else greedy_by_size
  best               every member of PORTFOLIO; the smallest arena, ties to the earlier
                     (a member that can no longer win is cut short)

Two tensors conflict when their closed step ranges intersect and both have bytes;
zero-byte tensors conflict with nothing and go to offset 0 (except under `naive`).
Every planner but `naive` depends on the tensor ids, not the list order: permuting the
input permutes the output alike (ties end with the tensor id). The greedy planners and
`exact` never exceed `naive`'s arena: a tensor goes into a gap or onto the conflicting
tensors below it, never above the sum of the aligned sizes placed so far.

The greedy planners share one engine, `_place` over a `_Layout` (everything that does
not depend on the order, built once per set and shared by `best`'s members): tensors are
placed in a given order, each into the smallest gap that holds it between the already
placed tensors that conflict with it (the lowest such gap on ties), else above the
highest of them. A gap starts at the aligned end of the tensor below it, so offsets and
gaps are multiples of the alignment and the engine counts in units of it. The layout
lists the tensors in the order of (the first) placement, so that the engine reads them
in memory order (`_permute`; the offsets go back to the caller's order).

Time is the distinct first steps (leaves of a segment tree). A tensor about to be placed
over leaves lo..hi (a query) conflicts with the placed tensors live at lo and those that
start in lo + 1..hi. They are kept as merged byte runs in lists that the query unions:
the runs of the tensors with a given canonical node (live at lo: the ancestors of leaf
lo), and the runs of the tensors that start at a leaf, or under an internal node
(gathered lazily, where a query over _SHORT leaves or more will read them). So a tensor
costs O(log steps) list operations (and a bounded number of copies, on average, into the
structures below) plus the runs in the lists it reads, and a stack of tensors live at
once is read as one run however many they are. Some sets have shapes that
would still make the union long, and get structures of their own (`_Layout` picks them
from the set, by counts; only the speed depends on them, never the offsets):

  every  tensors live over every leaf: one list, in every query
  hub    tensors live at the leaf where most are (a stack of 100,000 read at the end),
         when few others meet them: a query over that leaf reads their union whole, the
         others pick them out of a list
  cut    many long-lived tensors among short ones (1,000 inputs read along a chain): the
         union of those that cover a stretch of leaves, with an index of its gaps by
         size, so a query reads the few other runs, and the gaps they touch, instead of
         every gap (it finds the best untouched gap in the index)
  join   a leaf where many long queries end (the concat of 256 branches): the union of
         what is live there; such a query merges its lists into it, skipping what it
         covers, and leaves out the lists whose tensors all reach the join
  lead   a query that ends at a join and covers no other (a branch output): besides the
         join's union it meets only the tensors that end in lo..join - 1, and those have
         that join as the next one after their last leaf. Each such tensor also goes into
         the join's lead-in, a Fenwick tree by distance (join - last leaf), so the query
         reads O(log) lists of the lead-in instead of the ancestors of lo and the start
         lists of lo + 1..join (and gathers nothing)

TFLite scans every placed tensor (O(n^2)). scripts/bench_planners.py measures these
kinds of sets; tests/compiler/test_planners.py checks every path against a direct transcription
of TFLite.
"""

import gc
from bisect import bisect_left, bisect_right, insort
from contextlib import contextmanager
from operator import add

import numpy as np

from aotplan.core import formats, intervals as _intervals

PLANNERS = {}


def register(name):
    def deco(fn):
        PLANNERS[name] = fn
        return fn
    return deco


@contextmanager
def _no_gc():
    """Planning allocates many small lists and no reference cycles: collections would
    only walk the caller's objects (the intervals) again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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


def _naive_arena(cols, alignment):
    """`naive`'s arena without placing: the sum of the aligned sizes."""
    size = cols[2]
    return int((-(-size // alignment) * alignment).sum())


# ---------------------------------------------------------------------------------------
# Runs of bytes


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


def _union_tagged(runs, s, e):
    """`_union_into` of the tagged run s = 2 * a + 1, e = 2 * b."""
    i, j = bisect_left(runs, s - 1), bisect_right(runs, e + 1)
    if i & 1:
        runs[i:j] = () if j & 1 else (e,)
    else:
        runs[i:j] = (s,) if j & 1 else (s, e)


def _merge_events(events):
    """Sorted tagged boundaries of possibly overlapping runs -> their union (tagged runs)."""
    out, depth = [], 0
    for e in events:
        if e & 1:
            if not depth:
                if out and out[-1] == e - 1:  # touches the run before
                    out.pop()
                else:
                    out.append(e)
            depth += 1
        else:
            depth -= 1
            if not depth:
                out.append(e)
    return out


def _add_ranges(runs, ranges):
    """`runs` (tagged, or None for none) plus the runs `ranges` (tagged, but they often
    overlap). A few ranges go in one by one; more are merged with the runs in one sweep
    when the runs are not many more than them (else merged among themselves first, then
    added one by one), by numpy past _NUMPY_RANGES boundaries."""
    if runs is None:
        runs = []
    if len(ranges) > 4:
        if len(runs) <= _SWEEP_RUNS * len(ranges):
            return _merge_ranges(ranges, runs)
        ranges = _merge_ranges(ranges, ())
    for k in range(0, len(ranges), 2):  # (_union_tagged inlined)
        s, e = ranges[k], ranges[k + 1]
        i, j = bisect_left(runs, s - 1), bisect_right(runs, e + 1)
        if i & 1:
            runs[i:j] = () if j & 1 else (e,)
        else:
            runs[i:j] = (s,) if j & 1 else (s, e)
    return runs


def _merge_ranges(ranges, runs):
    """The union of the runs `ranges` (tagged, possibly overlapping) and the tagged runs
    `runs` as tagged runs. With the starts and the ends sorted apart, a run of the union
    begins at the k-th start iff the (k - 1)-th end lies below it (touching ranges
    merge), and the run before it ends there (see `_best_gap_union`): start - end > 1."""
    if len(ranges) + len(runs) > _NUMPY_RANGES:
        return _merge_ranges_np(ranges, runs)
    starts, ends = ranges[0::2], ranges[1::2]
    starts += runs[0::2]
    ends += runs[1::2]
    starts.sort()
    ends.sort()
    out = [starts[0]]
    for s, e in zip(starts[1:], ends):
        if s - e > 1:
            out += (e, s)
    out.append(ends[-1])
    return out


def _merge_ranges_np(ranges, runs):
    """`_merge_ranges` by numpy."""
    both = np.array(ranges, dtype=np.int64)
    if len(runs):
        both = np.concatenate((both, np.array(runs, dtype=np.int64)))
    starts, ends = np.sort(both[0::2]), np.sort(both[1::2])
    new = np.flatnonzero(starts[1:] - ends[:-1] > 1) + 1  # the starts that begin a run
    out = np.empty(2 * len(new) + 2, dtype=np.int64)
    out[0] = starts[0]
    out[2::2] = starts[new]
    out[1:-1:2] = ends[new - 1]
    out[-1] = ends[-1]
    return out.tolist()


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


def _best_gap_union(lists, size):
    """`_best_gap` of the union of a few tagged run lists, without a sweep over every
    boundary. With all their starts sorted, and all their ends sorted apart, the union
    has a gap before the k-th start (from 0) iff the (k - 1)-th end comes before it:
    k ends before it can only be those of the k runs that start before it, so all of
    those have ended, and the last of them at that end. So the gaps are
    starts[k] - ends[k - 1] where that is positive (a tagged difference: a gap of g bytes
    is 2g + 1), and the top of the union is the last end."""
    bounds = []
    for runs in lists:
        bounds += runs  # whole runs: the starts stay at the even positions
    starts, ends = bounds[0::2], bounds[1::2]
    ends.append(0)  # the floor below the first start: sorted, ends[k] is the (k - 1)-th end
    starts.sort()
    ends.sort()
    least = 2 * size  # a tagged gap holds `size` bytes iff it is above this
    best, at = 0, 0
    for s, e in zip(starts, ends):
        if s - e > least and (not best or s - e < best):  # the first smallest: the lowest
            best, at = s - e, e
    return at >> 1 if best else ends[-1] >> 1


_NUMPY_EVENTS = 1024  # boundaries; past this many a union of lists goes to _best_gap_many
_SKIP_EVENTS = 1024  # past this many, first try merging list by list, skipping covered runs
_SKIP_BUDGET = 32  # runs merged (not skipped) before giving that up for numpy
_NUMPY_RANGES = 512  # range ends and run boundaries; past this many a batch of ranges is merged by numpy
_SWEEP_RUNS = 8  # a batch of ranges is merged with at most this many times its boundaries in runs in one sweep


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
        _union_tagged(acc, s, e)
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


# Runs with an index of their gaps by size: `index` holds, for each finite gap [g, g + n)
# of `runs` (from 0; the space above the last run is not a gap), the key n << shift | g,
# sorted, so keys order gaps as the best fit does: smaller first, then lower.


def _index_gaps(runs, shift):
    keys, prev = [], 0
    for k in range(0, len(runs), 2):
        gap = (runs[k] >> 1) - prev
        if gap:
            keys.append(gap << shift | prev)
        prev = runs[k + 1] >> 1
    keys.sort()
    return keys


def _insert_indexed(runs, index, shift, a, b):
    """Add [a, b) to `runs` and keep `index` in step. [a, b) is disjoint from the runs
    (the tensors of one materialized union are all live at once), so it lies in one gap,
    which it splits or closes; were it not, the union is taken and the index rebuilt."""
    i = bisect_right(runs, 2 * a + 1)  # the runs that start at or before a
    n = len(runs)
    g0 = runs[i - 1] >> 1 if i else 0
    if i & 1 or (i < n and b > runs[i] >> 1):
        _union_into(runs, a, b)
        index[:] = _index_gaps(runs, shift)
        return
    left = i and g0 == a  # touches the run below
    if i == n:  # above the last run
        if left:
            runs[-1] = 2 * b
        else:
            runs += (2 * a + 1, 2 * b)
            if a > g0:
                insort(index, (a - g0) << shift | g0)
        return
    g1 = runs[i] >> 1
    del index[bisect_left(index, (g1 - g0) << shift | g0)]
    if left:
        if b == g1:  # closes the gap: the two runs become one
            del runs[i - 1:i + 1]
        else:
            runs[i - 1] = 2 * b
            insort(index, (g1 - b) << shift | b)
    elif b == g1:
        runs[i] = 2 * a + 1
        if a > g0:
            insort(index, (a - g0) << shift | g0)
    else:
        runs[i:i] = (2 * a + 1, 2 * b)
        if a > g0:
            insort(index, (a - g0) << shift | g0)
        insort(index, (g1 - b) << shift | b)


def _best_gap_indexed(runs, index, shift, lists, size):
    """`_best_gap` of the union of `runs` (indexed) and the run lists `lists`, whose runs
    lie in the gaps of `runs` or above them (they may touch them, not overlap them). The
    gaps that those runs fall into are read piece by piece; the best of the others is
    the first untouched key of the index from `size` up. The union of `lists` is read
    run by run as in `_best_gap_union`."""
    bounds = []
    for extra in lists:
        bounds += extra
    starts, ends = bounds[0::2], bounds[1::2]
    ends.append(0)
    starts.sort()
    ends.sort()
    n = len(runs)
    best, touched = -1, []
    cur, g1 = -1, -1  # where the free piece at hand starts (-1: none yet); the end of its gap (-1: no end)
    for s, e in zip(starts, ends):  # e: the last end before s (tagged; 0 before the first start)
        if s < e:
            continue  # inside a run of the union
        a = s >> 1  # a run of the union starts at a; the one before it (if any) ended at e
        if e:
            cur = e >> 1
        if cur < 0 or 0 <= g1 <= a:  # a run in another gap: close the one at hand
            if cur >= 0 and g1 - cur >= size:
                key = (g1 - cur) << shift | cur
                if best < 0 or key < best:
                    best = key
            i = bisect_right(runs, s)
            cur = runs[i - 1] >> 1 if i else 0
            g1 = runs[i] >> 1 if i < n else -1
            touched.append(cur)
        if a - cur >= size:
            key = (a - cur) << shift | cur
            if best < 0 or key < best:
                best = key
    if starts:
        cur = ends[-1] >> 1  # the top of the union
    top = runs[-1] >> 1 if n else 0
    if cur >= 0:
        if g1 < 0:
            top = cur
        elif g1 - cur >= size:
            key = (g1 - cur) << shift | cur
            if best < 0 or key < best:
                best = key
    mask = (1 << shift) - 1
    for i in range(bisect_left(index, size << shift), len(index)):
        key = index[i]
        if 0 <= best <= key:
            break
        if key & mask not in touched:
            best = key
            break
    return best & mask if best >= 0 else top


# ---------------------------------------------------------------------------------------
# The best-fit placement engine

_SHORT = 64  # leaves; a query over fewer reads the start lists of its leaves one by one
_CUT_PUSHES = 1.25  # materialized copies per tensor the cut may cost (see _Layout)
_CUT_COVER = 32  # tensors above the cut live at a leaf, on average, for it to pay off...
_CUT_SHARE = 0.1  # ...if they are this share of the tree at most (few long-lived among many short)
_START_ADDS = 8  # additions into gathered start runs per tensor, at most (see _start_cap)
_INDEXED_RUNS = 32  # runs in a materialized union from which its gap index is used...
_INDEXED_EXTRA = 2  # ...if it has this many times the boundaries of the other lists, at least
_HUB_MIN = 64  # tensors live at the hub leaf, at least, to keep them apart
_HUB_FILTER = 16  # (tensors live at the hub) x (others that meet them) per tensor, at most
_JOIN_MIN = 32  # long queries ending at a leaf for the union of the tensors live there to be kept...
_JOIN_SHARE = 16  # ...if at least 1 / _JOIN_SHARE of the tensors end at such leaves


def _decompose(lo, hi, n_leaves):
    """Canonical nodes of the leaf ranges [lo[k], hi[k]] (int64 arrays, lo <= hi) in a
    segment tree over n_leaves leaves (a power of 2; node v has children 2v and 2v + 1,
    leaf p is node n_leaves + p): (owner k, node, height) arrays."""
    left, right = lo + n_leaves, hi + n_leaves + 1
    owner = np.arange(len(lo))
    out, height = [], 0
    while len(owner):
        take = (left & 1).astype(bool)
        out.append((owner[take], left[take], np.full(take.sum(), height)))
        left = left + take
        take = (right & 1).astype(bool)
        right = right - take
        out.append((owner[take], right[take], np.full(take.sum(), height)))
        left, right, height = left >> 1, right >> 1, height + 1
        keep = left < right
        owner, left, right = owner[keep], left[keep], right[keep]
    if not out:
        return (np.zeros(0, np.int64),) * 3
    return tuple(np.concatenate(part) for part in zip(*out))


def _leaf_ranges(first, last):
    """The distinct first steps (points), and each tensor's range of them: (number of
    points, lo, hi) with lo, hi int64 arrays (first <= last). Steps from 0 up to a few
    times the number of tensors are counted in a table; others are searched."""
    if not len(first):
        return 0, first, last
    top = int(first.max())
    if first.min() >= 0 and top <= 8 * len(first) + 4096:
        is_point = np.zeros(top + 1, bool)
        is_point[first] = True
        upto = np.cumsum(is_point)  # points at or before a step
        return int(upto[-1]), upto[first] - 1, upto[np.minimum(last, top)] - 1
    points = np.unique(first)
    return len(points), np.searchsorted(points, first), np.searchsorted(points, last, "right") - 1


def _csr(owner, values, n):
    """Values grouped by owner (0 <= owner < n): (pointers, values) as lists."""
    order = np.argsort(owner, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return ptr.tolist(), values[order].tolist()


def _up_pointers(marked):
    """For each node of a segment tree (bool array over nodes 0 .. 2n - 1), its nearest
    strict ancestor that is marked, or 0."""
    up = np.zeros(len(marked), np.int64)
    width = 2
    while width < len(marked):
        v = np.arange(width, 2 * width)
        p = v >> 1
        up[v] = np.where(marked[p], p, up[p])
        width *= 2
    return up


class _Layout:
    """What the engine needs that does not depend on the order of placement (both greedy
    planners, and `best`'s members, share it), and the choice of structures (see the
    module docstring), by counts over the set.

    Time is the distinct first steps of the tensors with bytes (leaf k of a segment tree,
    node n_leaves + k; node v has children 2v and 2v + 1); a tensor covers the leaves of
    the first steps in its range, and two tensors conflict iff their leaf ranges meet.
    Tensors by kind:

      0  no bytes (or never live): offset 0
      1  `every`: covers every leaf
      2  `hub`: live at the leaf where most tensors are, when that leaf has _HUB_MIN of
         them and (their count) x (the others that meet them) <= _HUB_FILTER per tensor
      3  the tree: in the runs of its canonical nodes below the cut (`cnodes`, read by
         the walks up from the first leaves of the queries, `walks`), of the cut's nodes
         it covers (`cut_a`..`cut_b`), of the joins it covers, and in the start runs of
         its first leaf and of the gathering nodes above it (`sup`; `need`: the queries
         still to read them); and in a join's lead-in (`lead_b`, `lead_p`) if a query
         ending at that join reaches back to its last leaf
      4  the tree, and its query ends at a join and covers no other: it reads the
         join's union and the lead-in (the prefix up to join - lo), nothing else of
         the tree

    The cut is the lowest height whose copies stay within _CUT_PUSHES per tensor, taken
    if on average _CUT_COVER tensors or more are live at a leaf above it and the tensors
    above it are at most _CUT_SHARE of the tree (else the runs below the cut are many
    too, and the index does not pay). Joins are the
    leaves where _JOIN_MIN long queries end, if 1 / _JOIN_SHARE of the tensors end at
    such leaves and their unions cost at most one copy per tensor in all. A query over
    _SHORT leaves or more reads the start runs of the canonical nodes of lo + 1..hi
    (`snodes`), none above a height (`_start_cap`): one above it is read as its
    descendants at that height. An internal node's start runs come in two parts, those
    that reach the first join after the node (`node_join`) and the others: a query over
    that join reads only the others."""

    def __init__(self, cols, alignment):
        first, last, size, _ = cols
        n = len(size)
        self.alignment = alignment
        ids = np.flatnonzero((size > 0) & (first <= last))
        self.n_live = len(ids)
        n_points, lo, hi = _leaf_ranges(first[ids], last[ids])
        n_leaves = 1
        while n_leaves < n_points:
            n_leaves *= 2
        self.n_leaves = n_leaves
        aligned = -(-size[ids] // alignment) * alignment
        self.shift = int(aligned.sum() // alignment).bit_length() + 1  # gap starts (units) < 2 ** shift
        delta = np.zeros(n_points + 1, np.int64)  # live bytes per leaf, as differences
        np.add.at(delta, lo, aligned)
        np.add.at(delta, hi + 1, -aligned)
        self.lower_bound = int(np.cumsum(delta).max()) if n_points else 0
        # the hub: the leaf where most tensors are live
        count = np.zeros(n_points + 1, np.int64)
        np.add.at(count, lo, 1)
        np.add.at(count, hi + 1, -1)
        hub = int(np.argmax(np.cumsum(count))) if n_points else 0
        at_hub = (lo <= hub) & (hi >= hub)
        kind = np.full(len(ids), 3)
        if at_hub.any():
            others = ~at_hub & (hi >= lo[at_hub].min()) & (lo <= hi[at_hub].max())
            n_hub, n_others = int(at_hub.sum()), int(others.sum())
            if n_hub >= _HUB_MIN and n_hub * n_others <= _HUB_FILTER * len(ids):
                kind[at_hub] = 2
        self.hub = n_leaves + hub if (kind == 2).any() else 0  # a leaf node, or 0: none
        kind[(lo == 0) & (hi == n_points - 1)] = 1
        los, his = np.zeros(n, np.int64), np.zeros(n, np.int64)  # as leaf nodes
        los[ids], his[ids] = n_leaves + lo, n_leaves + hi
        los, his = los.tolist(), his.tolist()
        # joins: leaves where many long queries end (say the concat of many branches)
        tree = kind == 3
        longq = tree & (hi - lo >= _SHORT)
        ending = np.bincount(hi[longq], minlength=n_points)
        live_tree = np.zeros(n_points + 1, np.int64)
        np.add.at(live_tree, lo[tree], 1)
        np.add.at(live_tree, hi[tree] + 1, -1)
        live_tree = np.cumsum(live_tree)[:-1]
        joins = np.flatnonzero(ending >= _JOIN_MIN)
        joins = joins[np.argsort(-ending[joins], kind="stable")]
        joins = np.sort(joins[np.cumsum(live_tree[joins]) <= len(ids)])
        if ending[joins].sum() * _JOIN_SHARE < len(ids):
            joins = joins[:0]  # too few queries over them to pay for keeping their unions
        joins += n_leaves  # as leaf nodes
        self.joins = joins.tolist()
        j0, j1 = np.zeros(n, np.int64), np.zeros(n, np.int64)  # the joins a tensor covers: joins[j0:j1]
        j0[ids[tree]] = np.searchsorted(joins, n_leaves + lo[tree])
        j1[ids[tree]] = np.searchsorted(joins, n_leaves + hi[tree], "right")
        query_join = np.full(n, 2 * n_leaves + 1)  # the last join a tensor covers, or above all nodes
        over = j1 > j0
        query_join[over] = joins[j1[over] - 1]
        # lead-ins: a query that ends at a join and covers no other (a branch output read
        # by the concat) conflicts with the join's union and with the tensors of the tree
        # whose last leaf lies in lo..join - 1, which all have that join as the next one
        # after their last leaf: each tensor goes into a Fenwick tree of that join over
        # p = join - last leaf, and the query reads the prefix p <= join - lo
        lead = tree & (j1[ids] - j0[ids] == 1)
        lead[lead] = n_leaves + hi[lead] == joins[j0[ids[lead]]]
        kind[lead] = 4
        lead_len = np.zeros(len(joins), np.int64)  # the longest prefix a lead-in query reads, per join
        np.maximum.at(lead_len, j0[ids[lead]], (hi - lo)[lead])
        self.lead_len = lead_len.tolist()
        nxt = np.searchsorted(joins, n_leaves + hi, "right")  # the first join after the last leaf
        feed = tree & (nxt < len(joins))
        feed[feed] = joins[nxt[feed]] - n_leaves - hi[feed] <= lead_len[nxt[feed]]
        lead_b, lead_p = np.zeros(n, np.int64), np.zeros(n, np.int64)  # into Fenwick tree lead_b - 1 at lead_p
        lead_b[ids[feed]] = nxt[feed] + 1
        lead_p[ids[feed]] = joins[nxt[feed]] - n_leaves - hi[feed]
        lead_b, lead_p = lead_b.tolist(), lead_p.tolist()
        kinds = np.zeros(n, np.int64)
        kinds[ids] = kind
        kinds = kinds.tolist()
        j0, j1 = j0.tolist(), j1.tolist()
        # the tree: canonical nodes, and the cut
        tree = np.flatnonzero(tree)
        owner, node, height = _decompose(lo[tree], hi[tree], n_leaves)
        owner = ids[tree][owner]  # positions in the table
        hi_table = np.zeros(n, np.int64)  # last leaf by position in the table
        hi_table[ids] = hi
        per_height = np.bincount(height, minlength=n_leaves.bit_length() + 1)
        cut = None
        for h in range(1, n_leaves.bit_length() - 1):
            copies = sum(int(c) << (g - h) for g, c in enumerate(per_height[h:].tolist(), h))
            if copies <= _CUT_PUSHES * max(len(tree), 1):
                cover = sum(int(c) << g for g, c in enumerate(per_height[h:].tolist(), h))
                above = len(np.unique(owner[height >= h]))
                if cover >= _CUT_COVER * n_points and above <= _CUT_SHARE * len(tree):
                    cut = h
                break
        self.cut = cut
        low = height < cut if cut is not None else np.ones(len(node), bool)
        cptr, self.cnodes = _csr(owner[low], node[low], n)
        # the lowest last leaf among the tensors of each canonical node below the cut, and
        # among those that start at each leaf (placed or not): a query over a join leaves
        # out a list whose tensors all reach it (they lie in the join's union)
        self.reach = self.start_reach = None
        if len(joins):
            reach = np.full(2 * n_leaves, 2 * n_leaves)
            np.minimum.at(reach, node[low], n_leaves + hi_table[owner[low]])
            self.reach = reach.tolist()
            reach = np.full(2 * n_leaves, 2 * n_leaves)
            np.minimum.at(reach, n_leaves + lo[tree], n_leaves + hi[tree])
            self.start_reach = reach.tolist()
        # above the cut: the nodes at height `cut` that the tensor covers, one stretch
        cut_a, cut_b = [0] * n, [0] * n
        if cut is not None and not low.all():
            high = ~low
            d = height[high] - cut
            a, b = node[high] << d, (node[high] + 1) << d
            first_a = np.full(n, 1 << 62)
            last_b = np.zeros(n, np.int64)
            np.minimum.at(first_a, owner[high], a)
            np.maximum.at(last_b, owner[high], b)
            has = last_b > 0
            first_a[~has] = 0
            cut_a, cut_b = first_a.tolist(), last_b.tolist()
        marked = np.zeros(2 * n_leaves, bool)
        marked[node[low]] = True
        # the walk of a query (kinds 1 to 3): its first leaf and the ancestors of that
        # leaf below the cut that are canonical nodes of some tensor (whose lists hold
        # what is live there), walks[w0:w1], listed as the table is (see _permute)
        up, floor = _up_pointers(marked), (2 * n_leaves) >> cut if cut is not None else 1
        walk = np.flatnonzero((kind >= 1) & (kind <= 3))
        owner, x = ids[walk], n_leaves + lo[walk]
        owners, nodes = [owner], [x]
        while len(x):
            x = up[x]
            keep = x >= floor
            owner, x = owner[keep], x[keep]
            owners.append(owner)
            nodes.append(x)
        wptr, self.walks = _csr(np.concatenate(owners), np.concatenate(nodes), n)
        # start lists: the canonical nodes of lo + 1..hi of the long queries, none above
        # the height `cap`: a node above it is read as its descendants at that height
        longq = np.flatnonzero((kind >= 2) & (kind < 4) & (hi - lo >= _SHORT))
        owner, node, height = _decompose(lo[longq] + 1, hi[longq], n_leaves)
        owner = ids[longq][owner]
        cap = _start_cap(node, height, lo[tree], n_leaves)
        if len(node) and height.max() > cap:
            wide = height > cap
            d = height[wide] - cap
            count = np.ones(len(node), np.int64)
            count[wide] = 1 << d
            first = node.copy()
            first[wide] = node[wide] << d
            owner = np.repeat(owner, count)
            node = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
        sptr, self.snodes = _csr(owner, node, n)
        # an internal node's start runs come in two parts: the tensors that reach the
        # first join after the node's leaves (`node_join`) and the others; a query over
        # that join reads only the others (the first part lies in the join's union)
        last_leaf = np.arange(2 * n_leaves)  # of each node
        while (last_leaf < n_leaves).any():
            inner = last_leaf < n_leaves
            last_leaf[inner] = 2 * last_leaf[inner] + 1
        k = np.searchsorted(joins, last_leaf)
        node_join = np.append(joins, 2 * n_leaves + 1)[k]  # above all nodes: none
        self.node_join = node_join.tolist()
        inner = node < n_leaves
        need = np.bincount(node[inner], minlength=2 * n_leaves)
        reach_need = np.bincount(node[inner & (query_join[owner] != node_join[node])], minlength=2 * n_leaves)
        self.need, self.reach_need = need.tolist(), reach_need.tolist()
        self.sup = _up_pointers((need > 0) | (reach_need > 0)).tolist()
        # per tensor: (kind, size in units, first leaf node, last leaf node, its walk
        # walks[w0:w1], its canonical nodes below the cut cnodes[c0:c1], start nodes
        # snodes[s0:s1], cut nodes a..b - 1, joins j0..j1 - 1, into the lead-in of join
        # lead_b - 1 at lead_p)
        sizes = (-(-size // alignment)).tolist()
        self.records = list(zip(kinds, sizes, los, his, wptr[:-1], wptr[1:], cptr[:-1], cptr[1:], sptr[:-1],
                                sptr[1:], cut_a, cut_b, j0, j1, lead_b, lead_p))


def _start_cap(node, height, lo, n_leaves):
    """The height up to which start runs are gathered in internal nodes: each tensor of
    the tree adds itself (lazily) to the gathering nodes above its first leaf, and a query
    reads one list per canonical node, or 2 ** (h - cap) for one at height h > cap. The
    highest cap whose additions stay within _START_ADDS per tensor (high nodes gather
    dense unions: few runs to read)."""
    if not len(node):
        return 0
    per_leaf = np.bincount(lo, minlength=n_leaves)
    below = np.concatenate(([0], np.cumsum(per_leaf)))  # tensors starting before leaf k
    adds_at = []  # additions into the gathering nodes at each height, below the cap
    for h in range(1, n_leaves.bit_length()):
        nodes = np.unique(node[height == h]) - (n_leaves >> h)
        adds_at.append(int((below[(nodes + 1) << h] - below[nodes << h]).sum()))
    budget = _START_ADDS * len(lo)
    for cap in range(n_leaves.bit_length() - 1, 0, -1):
        top = height >= cap  # read as their descendants at height cap
        d = height[top] - cap
        base = n_leaves >> cap
        mark = np.zeros(base + 1, np.int64)
        np.add.at(mark, (node[top] << d) - base, 1)
        np.add.at(mark, ((node[top] + 1) << d) - base, -1)
        nodes = np.flatnonzero(np.cumsum(mark[:-1]) > 0)
        adds = sum(adds_at[:cap - 1]) + int((below[(nodes + 1) << cap] - below[nodes << cap]).sum())
        if adds <= budget:
            return cap
    return 1


def _place(lay, order, limit=None):
    """Place the tensors at positions `order` (of the layout's table) one after another,
    each into the smallest gap between the placed tensors it conflicts with that holds
    it (the lowest on ties), else above them; returns offsets (zero-byte tensors at 0),
    or None as soon as the placed tensors' arena reaches `limit` bytes (> 0). Counts in
    units of the alignment; every list of runs is tagged (see `_union_into`)."""
    n_leaves, align, shift, records = lay.n_leaves, lay.alignment, lay.shift, lay.records
    if limit is not None:
        limit = -(-limit // align)
    walks, cnodes, snodes, sup = lay.walks, lay.cnodes, lay.snodes, lay.sup
    need = list(lay.need)  # queries still to come that read starts[v]
    reach_need = list(lay.reach_need)  # ... that read reach_starts[v]
    node_join, joins, hub, cut = lay.node_join, lay.joins, lay.hub, lay.cut
    indexed_runs, indexed_extra = 2 * _INDEXED_RUNS, _INDEXED_EXTRA
    skip_budget = _SKIP_BUDGET
    n_nodes = 2 * n_leaves
    full = [None] * n_nodes  # the tree's tensors by canonical node, below the cut
    starts = [None] * n_nodes  # by first leaf; at internal nodes, gathered from below
    pending = [None] * n_nodes  # runs (see _add_ranges) on their way into starts[v], when it is read
    reach_starts, reach_pending = [None] * n_nodes, [None] * n_nodes  # those reaching node_join[v]
    if cut is not None:  # the nodes at height `cut`: the union of the tensors covering each
        n_cut = n_nodes >> cut
        cut_runs = [[] for _ in range(n_cut)]
        cut_index = [[] for _ in range(n_cut)]  # its gaps by size (see _index_gaps)
        cut_pending = [[] for _ in range(n_cut)]
    placed, placing, every, at_hub = [], [], [], []  # placing: runs on their way into placed (see _add_ranges)
    joined = [[] for _ in joins]  # the union of the tree's tensors live at each join
    leads = [[None] * (n + 1) for n in lay.lead_len]  # per join, its lead-in (Fenwick tree, from 1)
    reach, start_reach = lay.reach, lay.start_reach  # (where there are joins)
    hub_tensors, hub_lo, hub_hi = [], n_nodes, -1  # (lo, hi, start, end) of the placed ones
    max_lo, min_hi = -1, n_nodes  # every placed tensor meets lo..hi iff max_lo <= hi and min_hi >= lo
    offsets = [0] * len(records)
    top = 0
    for i in order:
        kind, size, lo, hi, w0, w1, c0, c1, s0, s1, cut_a, cut_b, j0, j1, lead_b, lead_p = records[i]  # (leaf nodes)
        if not kind:
            continue
        if max_lo <= hi and min_hi >= lo:  # everything placed conflicts
            if placing:
                placed = _add_ranges(placed, placing)
                placing = []
            off = _best_gap(placed, size)
            for v in snodes[s0:s1]:
                if v < n_leaves:
                    need[v] -= 1
                    if node_join[v] != (joins[j1 - 1] if j0 < j1 else n_nodes + 1):
                        reach_need[v] -= 1
        else:
            lists = []
            base = None
            if lo <= hub <= hi:
                if at_hub:
                    lists.append(at_hub)
            else:
                if every:
                    lists.append(every)
                if hub_lo <= hi and hub_hi >= lo:
                    events = []
                    for t_lo, t_hi, s, e in hub_tensors:
                        if t_lo <= hi and t_hi >= lo:
                            events += (s, e)
                    if events:
                        events.sort()
                        lists.append(_merge_events(events))
            # live at lo: its walk (the leaf and its ancestors below the cut), then the cut's union
            if kind == 4:  # ends at a join: its lead-in from lo on (and the join's union, below)
                lead, p = leads[j0], hi - lo
                while p:
                    runs = lead[p]
                    if runs:
                        lists.append(runs)
                    p &= p - 1
            elif j0 < j1:  # over a join: leave out what lies in its union
                join = joins[j1 - 1]
                for x in walks[w0:w1]:
                    runs = full[x]
                    if runs and reach[x] < join:
                        lists.append(runs)
            else:
                join = n_nodes + 1  # above every reach
                for x in walks[w0:w1]:
                    runs = full[x]
                    if runs:
                        lists.append(runs)
            if cut is not None and kind != 4:
                w = lo >> cut
                base, ranges = cut_runs[w], cut_pending[w]
                if ranges:
                    index = cut_index[w]
                    for k in range(0, len(ranges), 2):
                        _insert_indexed(base, index, shift, ranges[k], ranges[k + 1])
                    ranges.clear()
            if s0 == s1:  # started in lo + 1..hi, leaf by leaf
                if hi > lo and kind != 4:
                    for v in range(lo + 1, hi + 1):
                        runs = starts[v]
                        if runs:
                            lists.append(runs)
            else:
                for v in snodes[s0:s1]:
                    if v < n_leaves:
                        need[v] -= 1
                        ranges = pending[v]
                        if ranges:
                            starts[v] = _add_ranges(starts[v], ranges)
                            pending[v] = None
                        runs = starts[v]
                        if runs:
                            lists.append(runs)
                        if node_join[v] != join:
                            reach_need[v] -= 1
                            ranges = reach_pending[v]
                            if ranges:
                                reach_starts[v] = _add_ranges(reach_starts[v], ranges)
                                reach_pending[v] = None
                            runs = reach_starts[v]
                            if runs:
                                lists.append(runs)
                    elif join > n_nodes or v > join or start_reach[v] < join:  # (no join) else all live at it
                        runs = starts[v]
                        if runs:
                            lists.append(runs)
            # the smallest gap that holds `size` (the lowest on ties), else the top
            if base and len(base) >= indexed_runs and j0 == j1 and hi >> cut == w \
                    and indexed_extra * sum(map(len, lists)) <= len(base):
                off = _best_gap_indexed(base, cut_index[w], shift, lists, size)
            else:
                if base:
                    lists.append(base)
                if j0 < j1:  # over a join: into its union (which holds what was left out), skipping what that covers
                    acc, budget = list(joined[j1 - 1]), skip_budget
                    for k, runs in enumerate(lists):  # (_merge_skipping inlined: the budget is shared)
                        p, n_runs = 0, len(runs)
                        while p < n_runs:
                            s, e = runs[p], runs[p + 1]
                            q = bisect_right(acc, s)
                            if q & 1 and e <= acc[q]:  # inside a run of acc: skip what it covers
                                p = bisect_right(runs, acc[q], p)
                                if p & 1:
                                    p -= 1
                                continue
                            budget -= 1
                            if budget < 0:
                                break
                            _union_tagged(acc, s, e)
                            p += 2
                        if budget < 0:  # the union has many gaps: the lists left are read as they are
                            lists[:k] = [acc] if acc else []
                            break
                    else:
                        lists = [acc]
                if len(lists) < 2:
                    off = _best_gap(lists[0], size) if lists else 0
                elif sum(map(len, lists)) > _NUMPY_EVENTS:
                    off = _best_gap_many(lists, size)
                else:
                    off = _best_gap_union(lists, size)
        offsets[i] = off * align
        end = off + size  # the placed rectangle [off, end)
        if end > top:
            top = end
            if limit is not None and top >= limit:
                return None
        s, e = 2 * off + 1, 2 * end  # tagged
        placing += (s, e)
        if lo > max_lo:
            max_lo = lo
        if hi < min_hi:
            min_hi = hi
        if kind >= 3:
            if lead_b:
                lead, p = leads[lead_b - 1], lead_p
                n_lead = len(lead)
                while p < n_lead:
                    runs = lead[p]
                    if runs is None:
                        lead[p] = [s, e]
                    else:  # _union_tagged inlined, as below
                        a, b = bisect_left(runs, s - 1), bisect_right(runs, e + 1)
                        if a & 1:
                            runs[a:b] = () if b & 1 else (e,)
                        else:
                            runs[a:b] = (s,) if b & 1 else (s, e)
                    p += p & -p
            for c in cnodes[c0:c1]:  # (the most frequent union: _union_tagged inlined)
                runs = full[c]
                if runs is None:
                    full[c] = [s, e]
                else:
                    a, b = bisect_left(runs, s - 1), bisect_right(runs, e + 1)
                    if a & 1:
                        runs[a:b] = () if b & 1 else (e,)
                    else:
                        runs[a:b] = (s,) if b & 1 else (s, e)
            if cut_b:
                for w in range(cut_a, cut_b):
                    cut_pending[w] += (off, end)
            if j0 < j1:
                for k in range(j0, j1):
                    _union_tagged(joined[k], s, e)
            runs = starts[lo]
            if runs is None:
                starts[lo] = [s, e]
            else:
                _union_tagged(runs, s, e)
            x = sup[lo]  # into the gathering nodes above its first leaf that a query will read
            if joins:
                while x:
                    if hi >= node_join[x]:
                        if reach_need[x]:
                            ranges = reach_pending[x]
                            if ranges is None:
                                reach_pending[x] = [s, e]
                            else:
                                ranges += (s, e)
                    elif need[x]:
                        ranges = pending[x]
                        if ranges is None:
                            pending[x] = [s, e]
                        else:
                            ranges += (s, e)
                    x = sup[x]
            else:
                while x:
                    if need[x]:
                        ranges = pending[x]
                        if ranges is None:
                            pending[x] = [s, e]
                        else:
                            ranges += (s, e)
                    x = sup[x]
        elif kind == 2:
            _union_into(at_hub, off, end)
            hub_tensors.append((lo, hi, 2 * off + 1, 2 * end))
            if lo < hub_lo:
                hub_lo = lo
            if hi > hub_hi:
                hub_hi = hi
        else:
            _union_into(every, off, end)
            if hub:
                _union_into(at_hub, off, end)
    return offsets


def _columns(ivs):
    """(first, last, nbytes, tensor) as int64 arrays."""
    return (np.array([iv.first for iv in ivs], dtype=np.int64), np.array([iv.last for iv in ivs], dtype=np.int64),
            np.array([iv.nbytes for iv in ivs], dtype=np.int64), np.array([iv.tensor for iv in ivs], dtype=np.int64))


def _size_order(cols):
    """TFLite's arena order: whole-run tensors (live over the whole step range of the
    set) first, by tensor id; then by decreasing size, ties by first use, then tensor id
    (then position, for duplicate ids)."""
    first, last, size, tensor = cols
    if not len(size):
        return []
    live = (size > 0) & (first <= last)
    if live.any():
        rest = ~(live & (first == first[live].min()) & (last == last[live].max()))
    else:
        rest = np.ones(len(size), dtype=bool)
    keys = (np.arange(len(size)), tensor, np.where(rest, first, 0), np.where(rest, -size, 0), rest)
    return np.lexsort(keys).tolist()


@register("greedy_by_size")
def greedy_by_size(ivs, alignment):
    """TFLite's greedy by size: whole-run tensors first (by tensor id), then the rest by
    decreasing size (ties: first use, then tensor id), each into the best-fitting gap
    between the conflicting tensors already placed, or above them."""
    with _no_gc():
        cols = _columns(ivs)
        order = _size_order(cols)
        return _unpermute(_place(_Layout(_permute(cols, order), alignment), range(len(order))), order)


def _permute(cols, perm):
    """The columns with position k holding position perm[k] (a permutation of all
    positions). A layout built over the columns in the order of placement has its
    records, and the canonical nodes of each, in memory in the order the engine reads
    them (in a random order they cost the engine about a tenth more time)."""
    perm = np.asarray(perm, dtype=np.int64)
    return tuple(c[perm] for c in cols)


def _unpermute(offsets, perm):
    """Offsets by position in `_permute(cols, perm)` -> by position in `cols`."""
    if offsets is None:
        return None
    out = np.zeros(len(perm), np.int64)
    out[np.asarray(perm, dtype=np.int64)] = offsets
    return out.tolist()


def _range_min(values, lo, hi):
    """min(values[lo[k]..hi[k]]) for each k (int64 arrays): a sparse table."""
    table = [values]
    span = 1
    while 2 * span <= len(values):
        prev = table[-1]
        table.append(np.minimum(prev[:-span], prev[span:]))
        span *= 2
    length = hi - lo + 1
    powers = np.left_shift(1, np.arange(63, dtype=np.int64))
    level = np.searchsorted(powers, length, "right") - 1  # floor(log2(length)), exactly, without floats
    out = np.empty(len(lo), dtype=np.int64)
    for k in np.unique(level).tolist():
        sel = level == k
        row = table[k]
        out[sel] = np.minimum(row[lo[sel]], row[hi[sel] - (1 << k) + 1])
    return out


def _breadth_order(cols, alignment):
    """TFLite's greedy-by-breadth order (see greedy_by_breadth): positions of the
    tensors with bytes (an int64 array)."""
    first, last, size, tensor = cols
    live = np.flatnonzero((size > 0) & (first <= last))
    if not len(live):
        return live
    first, last, size, tensor = first[live], last[live], size[live], tensor[live]
    n_points, lo, hi = _leaf_ranges(first, last)
    aligned = -(-size // alignment) * alignment
    delta = np.zeros(n_points + 1, dtype=np.int64)
    np.add.at(delta, lo, aligned)
    np.add.at(delta, hi + 1, -aligned)
    breadth = np.cumsum(delta[:-1])
    visit = np.lexsort((np.arange(n_points), -breadth))  # by decreasing breadth, ties by step
    rank = np.empty(n_points, dtype=np.int64)
    rank[visit] = np.arange(n_points)
    ranks = _range_min(rank, lo, hi)
    return live[np.lexsort((live, tensor, first, -size, ranks))]


@register("greedy_by_breadth")
def greedy_by_breadth(ivs, alignment):
    """TFLite's greedy by breadth: steps by decreasing breadth (the aligned bytes live at
    the step; ties by step), and at each step its tensors not yet placed, by decreasing
    size (ties: first use, then tensor id), each into the best-fitting gap.

    Only steps where some tensor starts need visiting (any other step's live set is a
    subset of the one at the last start before it, with no more bytes), and a tensor is
    placed at the first visited step of its window: its rank is a range minimum."""
    with _no_gc():
        cols = _columns(ivs)
        order = _breadth_order(cols, alignment)  # the tensors with bytes; then the others
        rest = np.ones(len(cols[0]), bool)
        rest[order] = False
        perm = np.concatenate((order, np.flatnonzero(rest)))
        return _unpermute(_place(_Layout(_permute(cols, perm), alignment), range(len(order))), perm)




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
    (`exact` is seeded with the best greedy answer rather than recomputing it.)

    The members share one `_Layout`, and a member is cut short where it cannot win,
    which leaves the answer as it is: once the choice so far has the lower bound (peak
    live bytes, aligned) no member can do better, and a later member is abandoned as
    soon as its arena reaches the choice's (a tie goes to the earlier member anyway);
    `naive` runs only if its arena, the sum of the aligned sizes, is smaller."""
    with _no_gc():
        return _best(ivs, alignment)


def _best(ivs, alignment):
    cols = _columns(ivs)
    order = _size_order(cols)  # the layout lists the tensors in this order (see _permute)
    layout = _Layout(_permute(cols, order), alignment)
    nbytes = cols[2].tolist()
    choice, choice_size = None, None
    for name in PORTFOLIO:
        if choice is not None and choice_size <= layout.lower_bound:
            break
        if name == "greedy_by_size":
            offsets = _unpermute(_place(layout, range(len(order)), choice_size), order)
        elif name == "greedy_by_breadth":
            rank = np.empty(len(order), np.int64)  # position -> position in the layout
            rank[order] = np.arange(len(order))
            offsets = _place(layout, rank[_breadth_order(cols, alignment)].tolist(), choice_size)
            offsets = _unpermute(offsets, order)
        elif name == "exact":
            if layout.n_live > EXACT_MAX_INTERVALS:
                continue  # exact is greedy_by_size here
            offsets = _exact_search(ivs, alignment, choice)
        elif name == "naive":
            if choice is not None and _naive_arena(cols, alignment) >= choice_size:
                continue
            offsets = naive(ivs, alignment)
        else:
            offsets = PLANNERS[name](ivs, alignment)
        if offsets is None:
            continue  # abandoned: its arena reached the choice's
        n = formats.align_up(max(map(add, offsets, nbytes), default=0), alignment)  # arena_size
        if choice is None or n < choice_size:
            choice, choice_size = offsets, n
    return choice
