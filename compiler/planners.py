"""Memory planners: intervals -> byte offsets. They see intervals, never the graph.

`plan(intervals, alignment) -> offsets` (one per interval, same order). Registered by
name; `naive` (no reuse) is the baseline every other planner is measured against.
"""

from aotplan import formats

PLANNERS = {}


def register(name):
    def deco(fn):
        PLANNERS[name] = fn
        return fn
    return deco


def _live_together(a, b):
    return a.first <= b.last and b.first <= a.last


@register("naive")
def naive(ivs, alignment):
    """Every tensor its own bytes, in table order."""
    offsets, end = [], 0
    for iv in ivs:
        end = formats.align_up(end, alignment)
        offsets.append(end)
        end += iv.nbytes
    return offsets


@register("greedy_by_size")
def greedy_by_size(ivs, alignment):
    """TFLite's greedy-by-size: place tensors by decreasing size (ties: first use, then
    index), each at the best-fitting gap between tensors already placed that are live
    at the same time; after all of them if no gap fits."""
    order = sorted(range(len(ivs)), key=lambda i: (-ivs[i].nbytes, ivs[i].first, ivs[i].tensor))
    offsets = [None] * len(ivs)
    placed = []
    for i in order:
        iv = ivs[i]
        busy = sorted((offsets[j], offsets[j] + ivs[j].nbytes) for j in placed if _live_together(iv, ivs[j]))
        best, best_gap, prev_end = None, None, 0
        for lo, hi in busy:
            start = formats.align_up(prev_end, alignment)
            gap = lo - start
            if gap >= iv.nbytes and (best_gap is None or gap < best_gap):
                best, best_gap = start, gap
            prev_end = max(prev_end, hi)
        offsets[i] = best if best is not None else formats.align_up(prev_end, alignment)
        placed.append(i)
    return offsets


def arena_size(ivs, offsets, alignment):
    end = max((o + iv.nbytes for iv, o in zip(ivs, offsets)), default=0)
    return formats.align_up(end, alignment)
