"""Direct O(n^2) transcriptions of TFLite's greedy memory planners (Pisarchyk & Lee,
arXiv 2001.03288; TFLite's greedy-by-size and greedy-by-breadth arena planners): the
references that tests/compiler/test_planners.py compares compiler.planners' offsets with."""

from aotplan.core import formats


def ref_best_fit(ivs, alignment, order):
    """TFLite's loop, transcribed: every placed tensor, in offset order, is looked at."""
    offsets, placed = [0] * len(ivs), []
    for i in order:
        a = ivs[i]
        if not a.nbytes:
            continue
        busy = sorted((offsets[j], formats.align_up(offsets[j] + ivs[j].nbytes, alignment)) for j in placed
                      if a.first <= ivs[j].last and ivs[j].first <= a.last)
        best, prev = None, 0
        for lo, hi in busy:
            if lo >= prev and lo - prev >= a.nbytes and (best is None or lo - prev < best[1]):
                best = (prev, lo - prev)
            prev = max(prev, hi)
        offsets[i] = best[0] if best else prev
        placed.append(i)
    return offsets


def ref_size_order(ivs):
    live = [a for a in ivs if a.nbytes]
    lo, hi = min((a.first for a in live), default=0), max((a.last for a in live), default=0)
    whole = [i for i, a in enumerate(ivs) if a.nbytes and a.first == lo and a.last == hi]
    rest = [i for i in range(len(ivs)) if i not in whole]
    return sorted(whole, key=lambda i: ivs[i].tensor) + sorted(
        rest, key=lambda i: (-ivs[i].nbytes, ivs[i].first, ivs[i].tensor))


def ref_breadth_order(ivs, alignment):
    live = [i for i, a in enumerate(ivs) if a.nbytes]
    steps = range(max((ivs[i].last for i in live), default=-1) + 1)
    profile = {s: [i for i in live if ivs[i].first <= s <= ivs[i].last] for s in steps}
    breadth = {s: sum(formats.align_up(ivs[i].nbytes, alignment) for i in profile[s]) for s in steps}
    order = []
    for s in sorted(steps, key=lambda s: (-breadth[s], s)):
        for i in sorted(profile[s], key=lambda i: (-ivs[i].nbytes, ivs[i].first, ivs[i].tensor)):
            if i not in order:
                order.append(i)
    return order
