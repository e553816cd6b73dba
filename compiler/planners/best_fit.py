"""The best-fit engine that the greedy planners share: `place` over a `layout.Layout`
(everything that does not depend on the order, built once per set and shared by
`best`'s members): tensors are placed in a given order, each into the smallest gap that
holds it between the already placed tensors that conflict with it (the lowest such gap
on ties), else above the highest of them. A gap starts at the aligned end of the tensor
below it, so offsets and gaps are multiples of the alignment and the engine counts in
units of it. The layout lists the tensors in the order of (the first) placement, so that
the engine reads them in memory order (`layout.permute`; the offsets go back to the
caller's order).

Time is the distinct first steps (leaves of a segment tree, see `segment_tree`). A
tensor about to be placed over leaves lo..hi (a query) conflicts with the placed tensors
live at lo and those that start in lo + 1..hi. They are kept as merged byte runs in
lists that the query unions: the runs of the tensors with a given canonical node (live
at lo: the ancestors of leaf lo), and the runs of the tensors that start at a leaf, or
under an internal node (gathered lazily, where a query over layout.SHORT leaves or more
will read them). So a tensor costs O(log steps) list operations (and a bounded number of
copies, on average, into the structures below) plus the runs in the lists it reads, and
a stack of tensors live at once is read as one run however many they are. Some sets have
shapes that would still make the union long, and get structures of their own (`Layout`
picks them from the set, by counts; only the speed depends on them, never the offsets):

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
kinds of sets; tests/compiler/test_planners.py checks every path against a direct
transcription of TFLite (tests/tflite_reference.py).
"""

import gc
from bisect import bisect_left, bisect_right
from contextlib import contextmanager

from compiler.planners import byte_runs
from compiler.planners.byte_runs import (add_ranges, best_gap, best_gap_many, best_gap_union, merge_events,
                                         union_into, union_tagged)
from compiler.planners.gap_index import best_gap_indexed, insert_indexed

INDEXED_RUNS = 32  # runs in a materialized union from which its gap index is used...
INDEXED_EXTRA = 2  # ...if it has this many times the boundaries of the other lists, at least


@contextmanager
def no_gc():
    """Planning allocates many small lists and no reference cycles: collections would
    only walk the caller's objects (the intervals) again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def place(lay, order, limit=None):
    """Place the tensors at positions `order` (of the layout's table) one after another,
    each into the smallest gap between the placed tensors it conflicts with that holds
    it (the lowest on ties), else above them; returns offsets (zero-byte tensors at 0),
    or None as soon as the placed tensors' arena reaches `limit` bytes (> 0). Counts in
    units of the alignment; every list of runs is tagged (see `byte_runs.union_into`)."""
    n_leaves, align, shift, records = lay.n_leaves, lay.alignment, lay.shift, lay.records
    if limit is not None:
        limit = -(-limit // align)
    walks, cnodes, snodes, sup = lay.walks, lay.cnodes, lay.snodes, lay.sup
    need = list(lay.need)  # queries still to come that read starts[v]
    reach_need = list(lay.reach_need)  # ... that read reach_starts[v]
    node_join, joins, hub, cut = lay.node_join, lay.joins, lay.hub, lay.cut
    indexed_runs, indexed_extra = 2 * INDEXED_RUNS, INDEXED_EXTRA
    skip_budget = byte_runs.SKIP_BUDGET
    numpy_events = byte_runs.NUMPY_EVENTS
    n_nodes = 2 * n_leaves
    full = [None] * n_nodes  # the tree's tensors by canonical node, below the cut
    starts = [None] * n_nodes  # by first leaf; at internal nodes, gathered from below
    pending = [None] * n_nodes  # runs (see add_ranges) on their way into starts[v], when it is read
    reach_starts, reach_pending = [None] * n_nodes, [None] * n_nodes  # those reaching node_join[v]
    if cut is not None:  # the nodes at height `cut`: the union of the tensors covering each
        n_cut = n_nodes >> cut
        cut_runs = [[] for _ in range(n_cut)]
        cut_index = [[] for _ in range(n_cut)]  # its gaps by size (see gap_index)
        cut_pending = [[] for _ in range(n_cut)]
    placed, placing, every, at_hub = [], [], [], []  # placing: runs on their way into placed (see add_ranges)
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
                placed = add_ranges(placed, placing)
                placing = []
            off = best_gap(placed, size)
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
                        lists.append(merge_events(events))
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
                        insert_indexed(base, index, shift, ranges[k], ranges[k + 1])
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
                            starts[v] = add_ranges(starts[v], ranges)
                            pending[v] = None
                        runs = starts[v]
                        if runs:
                            lists.append(runs)
                        if node_join[v] != join:
                            reach_need[v] -= 1
                            ranges = reach_pending[v]
                            if ranges:
                                reach_starts[v] = add_ranges(reach_starts[v], ranges)
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
                off = best_gap_indexed(base, cut_index[w], shift, lists, size)
            else:
                if base:
                    lists.append(base)
                if j0 < j1:  # over a join: into its union (which holds what was left out), skipping what that covers
                    acc, budget = list(joined[j1 - 1]), skip_budget
                    for k, runs in enumerate(lists):  # (merge_skipping inlined: the budget is shared)
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
                            union_tagged(acc, s, e)
                            p += 2
                        if budget < 0:  # the union has many gaps: the lists left are read as they are
                            lists[:k] = [acc] if acc else []
                            break
                    else:
                        lists = [acc]
                if len(lists) < 2:
                    off = best_gap(lists[0], size) if lists else 0
                elif sum(map(len, lists)) > numpy_events:
                    off = best_gap_many(lists, size)
                else:
                    off = best_gap_union(lists, size)
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
                    else:  # union_tagged inlined, as below
                        a, b = bisect_left(runs, s - 1), bisect_right(runs, e + 1)
                        if a & 1:
                            runs[a:b] = () if b & 1 else (e,)
                        else:
                            runs[a:b] = (s,) if b & 1 else (s, e)
                    p += p & -p
            for c in cnodes[c0:c1]:  # (the most frequent union: union_tagged inlined)
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
                    union_tagged(joined[k], s, e)
            runs = starts[lo]
            if runs is None:
                starts[lo] = [s, e]
            else:
                union_tagged(runs, s, e)
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
            union_into(at_hub, off, end)
            hub_tensors.append((lo, hi, 2 * off + 1, 2 * end))
            if lo < hub_lo:
                hub_lo = lo
            if hi > hub_hi:
                hub_hi = hi
        else:
            union_into(every, off, end)
            if hub:
                union_into(at_hub, off, end)
    return offsets


