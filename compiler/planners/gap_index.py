"""Runs of bytes with an index of their gaps by size: the best gap of the runs plus a few
other lists comes from the gaps that those lists touch and the best untouched key of the
index, without reading every gap (the cut's unions, see `layout.Layout`).

`index` holds, for each finite gap [g, g + n) of `runs` (tagged, see
`byte_runs.union_into`; from 0, the space above the last run is not a gap), the key
n << shift | g, sorted, so keys order gaps as the best fit does: smaller first, then
lower."""

from bisect import bisect_left, bisect_right, insort

from compiler.planners.byte_runs import union_into


def index_gaps(runs, shift):
    """The index of the gaps of `runs` (see the module docstring)."""
    keys, prev = [], 0
    for k in range(0, len(runs), 2):
        gap = (runs[k] >> 1) - prev
        if gap:
            keys.append(gap << shift | prev)
        prev = runs[k + 1] >> 1
    keys.sort()
    return keys


def insert_indexed(runs, index, shift, a, b):
    """Add [a, b) to `runs` and keep `index` in step. [a, b) is disjoint from the runs
    (the tensors of one materialized union are all live at once), so it lies in one gap,
    which it splits or closes; were it not, the union is taken and the index rebuilt."""
    i = bisect_right(runs, 2 * a + 1)  # the runs that start at or before a
    n = len(runs)
    g0 = runs[i - 1] >> 1 if i else 0
    if i & 1 or (i < n and b > runs[i] >> 1):
        union_into(runs, a, b)
        index[:] = index_gaps(runs, shift)
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


def best_gap_indexed(runs, index, shift, lists, size):
    """`byte_runs.best_gap` of the union of `runs` (indexed) and the run lists `lists`,
    whose runs lie in the gaps of `runs` or above them (they may touch them, not overlap
    them). The gaps that those runs fall into are read piece by piece; the best of the
    others is the first untouched key of the index from `size` up. The union of `lists`
    is read run by run as in `byte_runs.best_gap_union`."""
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


