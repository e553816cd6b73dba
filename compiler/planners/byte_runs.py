"""Runs of bytes: the occupied bytes of placed tensors as disjoint runs, each list one
sorted list of tagged boundaries (see `union_into`). Adding ranges, merging lists, and
finding the best-fitting gap of a union of lists, by plain loops or by numpy past the
thresholds below (only the speed depends on them, never the result)."""

from bisect import bisect_left, bisect_right

import numpy as np

NUMPY_EVENTS = 1024  # boundaries; past this many a union of lists goes to best_gap_many (see best_fit.place)
SKIP_EVENTS = 1024  # past this many, first try merging list by list, skipping covered runs
SKIP_BUDGET = 32  # runs merged (not skipped) before giving that up for numpy
NUMPY_RANGES = 512  # range ends and run boundaries; past this many a batch of ranges is merged by numpy
SWEEP_RUNS = 8  # a batch of ranges is merged with at most this many times its boundaries in runs in one sweep


def union_into(runs, a, b):
    """Add the byte range [a, b) to `runs`: disjoint runs as one sorted list of tagged
    boundaries, 2 * start + 1 and 2 * end (so at one byte an end sorts before a start,
    and lists concatenate and sort into a sweep). Touching runs merge."""
    i = bisect_left(runs, 2 * a)
    j = bisect_right(runs, 2 * b + 1)
    if i & 1:
        runs[i:j] = [] if j & 1 else [2 * b]
    else:
        runs[i:j] = [2 * a + 1] if j & 1 else [2 * a + 1, 2 * b]


def union_tagged(runs, s, e):
    """`union_into` of the tagged run s = 2 * a + 1, e = 2 * b."""
    i, j = bisect_left(runs, s - 1), bisect_right(runs, e + 1)
    if i & 1:
        runs[i:j] = () if j & 1 else (e,)
    else:
        runs[i:j] = (s,) if j & 1 else (s, e)


def merge_events(events):
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


def add_ranges(runs, ranges):
    """`runs` (tagged, or None for none) plus the runs `ranges` (tagged, but they often
    overlap). A few ranges go in one by one; more are merged with the runs in one sweep
    when the runs are not many more than them (else merged among themselves first, then
    added one by one), by numpy past NUMPY_RANGES boundaries."""
    if runs is None:
        runs = []
    if len(ranges) > 4:
        if len(runs) <= SWEEP_RUNS * len(ranges):
            return merge_ranges(ranges, runs)
        ranges = merge_ranges(ranges, ())
    for k in range(0, len(ranges), 2):  # (union_tagged inlined)
        s, e = ranges[k], ranges[k + 1]
        i, j = bisect_left(runs, s - 1), bisect_right(runs, e + 1)
        if i & 1:
            runs[i:j] = () if j & 1 else (e,)
        else:
            runs[i:j] = (s,) if j & 1 else (s, e)
    return runs


def merge_ranges(ranges, runs):
    """The union of the runs `ranges` (tagged, possibly overlapping) and the tagged runs
    `runs` as tagged runs. With the starts and the ends sorted apart, a run of the union
    begins at the k-th start iff the (k - 1)-th end lies below it (touching ranges
    merge), and the run before it ends there (see `best_gap_union`): start - end > 1."""
    if len(ranges) + len(runs) > NUMPY_RANGES:
        return merge_ranges_np(ranges, runs)
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


def merge_ranges_np(ranges, runs):
    """`merge_ranges` by numpy."""
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


def best_gap(runs, size):
    """The start of the smallest gap of `runs` (tagged, see `union_into`) from 0 that
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


def best_gap_union(lists, size):
    """`best_gap` of the union of a few tagged run lists, without a sweep over every
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


def best_gap_many(lists, size):
    """`best_gap` of the union of many lists (many boundaries). A packed stack that the
    tree holds in many pieces is merged list by list, from the list whose runs are
    widest on average, skipping each stretch of a list that lies inside one run of the
    union so far after one bisection; once that has merged more than SKIP_BUDGET runs
    (the union itself has many gaps), numpy merges them all."""
    if sum(map(len, lists)) > SKIP_EVENTS:
        # widest span per run first: the lists a packed stack lies in as a few long runs
        lists.sort(key=lambda runs: (runs[0] - runs[-1]) / len(runs))
        acc, budget = list(lists[0]), [SKIP_BUDGET]
        for runs in lists[1:]:
            if not merge_skipping(acc, runs, budget):
                break
        else:
            return best_gap(acc, size)
    events = []
    for runs in lists:
        events += runs
    return best_gap_np(events, size)


def merge_skipping(acc, runs, budget):
    """Add `runs` to `acc` (tagged, see `union_into`), skipping in O(log) each stretch
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
        union_tagged(acc, s, e)
        k += 2
    return True


def best_gap_np(events, size):
    """`best_gap` of the union of several tagged run lists, concatenated (`events`)."""
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

