"""Lifetimes of arena tensors over a launch schedule, shared by the compiler's
liveness pass and the plan verifier (which derives them from the launches itself
rather than trusting the plan).

Step i is launch i. Inputs are written before launch 0 and live until their last
read; arena constants and graph outputs live for the whole step (outputs until the
output kernel reads them after the last launch); an intermediate lives from the launch
that writes it to its last read. Two tensors conflict when their closed step ranges
intersect and their byte ranges intersect.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """Tensor `tensor` (an index) needs `nbytes` bytes from `first` to `last`
    (inclusive launch steps), starting at a multiple of `alignment`."""

    tensor: int
    first: int
    last: int
    nbytes: int
    alignment: int
    kind: str


def compute(kinds, nbytes, launches, n_steps, alignment):
    """kinds/nbytes: per tensor (None kind = not in the arena); launches: (reads, writes)
    per step. Returns one Interval per arena tensor, ordered by tensor index."""
    end = max(n_steps - 1, 0)
    first, last = {}, {}
    for step, (reads, writes) in enumerate(launches):
        for t in writes:
            first.setdefault(t, step)
            last[t] = max(last.get(t, step), step)
        for t in reads:
            last[t] = max(last.get(t, step), step)
    out = []
    for t, kind in enumerate(kinds):
        if kind is None:
            continue
        if kind == "input":
            f, l = 0, last.get(t, 0)
        elif kind in ("constant", "output"):
            f, l = (0 if kind == "constant" else first.get(t, 0)), end
        else:
            f = first.get(t, 0)
            l = last.get(t, f)
        out.append(Interval(t, f, l, nbytes[t], alignment, kind))
    return out


def find_overlap(intervals, offsets):
    """First pair (a, b) of intervals that overlap in both steps and bytes, or None.

    A sweep over start steps keeps only the intervals still live."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i].first, i))
    active = []
    for i in order:
        iv = intervals[i]
        active = [j for j in active if intervals[j].last >= iv.first]
        lo, hi = offsets[i], offsets[i] + iv.nbytes
        for j in active:
            jo = offsets[j]
            if iv.nbytes and intervals[j].nbytes and lo < jo + intervals[j].nbytes and jo < hi:
                return intervals[j], iv
        active.append(i)
    return None


def peak_live_bytes(intervals, align):
    """Lower bound of any placement: the largest sum of live (aligned) bytes at a step."""
    if not intervals:
        return 0
    n = max(iv.last for iv in intervals) + 2
    delta = [0] * (n + 1)
    for iv in intervals:
        b = align(iv.nbytes)
        delta[iv.first] += b
        delta[iv.last + 1] -= b
    peak = cur = 0
    for d in delta:
        cur += d
        peak = max(peak, cur)
    return peak
