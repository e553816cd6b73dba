"""Lifetimes of arena tensors over a launch schedule, shared by the compiler's
liveness pass and the plan verifier (which derives them from the launches itself
rather than trusting the plan).

Lifetimes are counted in phases, two per launch (it reads in the first, writes in
the second: `phases`). Inputs are written before the first launch (or by it) and live
until their last read; arena constants live for the whole step and graph outputs from
their write to its end (the caller or the output kernel reads them after the last
launch); an intermediate lives from the launch that writes it to its last read. Two
tensors conflict when their closed phase ranges intersect and their byte ranges
intersect.
"""

from bisect import bisect_left
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """Tensor `tensor` (an index) needs `nbytes` bytes from `first` to `last`
    (inclusive phases), starting at a multiple of `alignment`."""

    tensor: int
    first: int
    last: int
    nbytes: int
    alignment: int
    kind: str


class _SortedInts:
    """A sorted set of ints kept in blocks (insert, which also names the neighbours, and
    remove: O(log n + block)), so a sweep with 100,000 intervals live at once does not
    pay a memmove of the whole list on every insertion."""

    __slots__ = ("blocks", "maxes")
    LOAD = 512

    def __init__(self):
        self.blocks, self.maxes = [], []

    def insert(self, x):
        """Insert x (not present); returns (the largest element < x or None, the
        smallest element > x or None) as they were."""
        blocks, maxes = self.blocks, self.maxes
        if not maxes:
            blocks.append([x])
            maxes.append(x)
            return None, None
        k = bisect_left(maxes, x)
        if k == len(maxes):  # above everything: append to the last block
            k -= 1
            block = blocks[k]
            pred, succ = maxes[k], None
            block.append(x)
            maxes[k] = x
        else:
            block = blocks[k]
            i = bisect_left(block, x)
            pred = block[i - 1] if i else (maxes[k - 1] if k else None)
            succ = block[i]
            block.insert(i, x)
        if len(block) > 2 * self.LOAD:
            half = len(block) // 2
            blocks[k:k + 1] = [block[:half], block[half:]]
            maxes[k:k + 1] = [block[half - 1], block[-1]]
        return pred, succ

    def remove(self, x):
        k = bisect_left(self.maxes, x)
        block = self.blocks[k]
        del block[bisect_left(block, x)]
        if block:
            self.maxes[k] = block[-1]
        else:
            del self.blocks[k], self.maxes[k]


def find_overlap(intervals, offsets):
    """First pair (a, b) of intervals that overlap in both steps and bytes, or None
    (`a` began no later than `b`). Zero-byte intervals never conflict.

    A sweep over start steps, O(n log n) however many intervals are live at once. The
    intervals live when `b` starts are kept ordered by offset; they are pairwise
    disjoint in bytes (else the sweep would have stopped), so their starts are distinct
    and their ends increase with their starts. Hence `b` overlaps one of them iff it
    overlaps its predecessor (the live interval with the largest start <= b's start:
    among those starting at or below b, it reaches furthest) or its successor (the
    smallest start above b's start: no later one starts lower)."""
    first = [iv.first for iv in intervals]
    last = [iv.last for iv in intervals]
    size = [iv.nbytes for iv in intervals]
    live = [k for k in range(len(intervals)) if size[k] > 0 and first[k] <= last[k]]
    if len(live) < 2:
        return None
    starts = sorted(live, key=first.__getitem__)  # stable: ties by index
    ends = sorted(live, key=last.__getitem__)
    at = {}  # offset -> the live interval there
    keys = _SortedInts()
    e = 0
    for k in starts:
        f = first[k]
        while last[ends[e]] < f:  # ended before k starts (so swept before it): drop it
            gone = offsets[ends[e]]
            keys.remove(gone)
            del at[gone]
            e += 1
        lo = offsets[k]
        j = at.get(lo)
        if j is not None:
            return intervals[j], intervals[k]
        p, q = keys.insert(lo)
        if p is not None and p + size[at[p]] > lo:
            return intervals[at[p]], intervals[k]
        if q is not None and q < lo + size[k]:
            return intervals[at[q]], intervals[k]
        at[lo] = k
    return None


def peak_live_bytes(intervals, align):
    """Lower bound of any placement: the largest sum of live (aligned) bytes at a step.
    O(n + steps): a difference array over the steps."""
    if not intervals:
        return 0
    n = max(iv.last for iv in intervals) + 2
    delta = [0] * (n + 1)
    for iv in intervals:
        if iv.nbytes and iv.first <= iv.last:
            b = align(iv.nbytes)
            delta[iv.first] += b
            delta[iv.last + 1] -= b
    peak = cur = 0
    for d in delta:
        cur += d
        if cur > peak:
            peak = cur
    return peak


def phases(kinds, nbytes, launches, alignment, feeds_first=False, inplace=True, base=None):
    """Lifetimes in phases: launch s reads in phase 2s + 2 and writes in phase 2s + 3
    (phases 0 and 1 are before the first launch: the input and place kernels).
    Kernels are pure functions of the arena they are given (XLA copies where it must),
    so a launch's output may take the bytes of an input whose last read is that launch:
    in-place reuse for any op. With `inplace=False` a launch's reads and writes all
    occupy both of its phases (closed steps: inputs and outputs of a launch never share).

    kinds/nbytes: per tensor (kind None: not in the arena); launches: (reads, writes)
    per launch; `feeds_first`: the first launch writes the inputs (sink and fused
    plans), else an input kernel writes them before launch 0; `base`: per tensor, the
    tensor a view shares its bytes with, or -1 (views are covered by their base's
    interval: every read of a view is a read of its base). Arena constants live from
    before the first launch to the end, outputs from their write to the end (the step's
    outputs are read after the last launch). -> one Interval per arena tensor that is
    not a view, ordered by tensor index."""
    rd, wr = (0, 1) if inplace else (1, 0)
    n = len(launches)
    end = 2 * n + 2 + rd  # the output kernel (or the caller) reads the outputs
    root = (lambda t: t) if base is None else (lambda t: t if base[t] < 0 else base[t])
    first, last = {}, {}

    def use(t, p):
        if p > last.get(t, p - 1):
            last[t] = p

    for s, (reads, writes) in enumerate(launches):
        for t in writes:
            r = root(t)
            first.setdefault(r, 2 * s + 2 + wr)
            use(r, 2 * s + 3)
        for t in reads:
            use(root(t), 2 * s + 2 + rd)
    for t, kind in enumerate(kinds):
        if kind == "output":
            use(root(t), end)
    out = []
    before = wr  # before the first launch
    for t, kind in enumerate(kinds):
        if kind is None or (base is not None and base[t] >= 0):
            continue
        if kind == "input":
            f = (2 + wr) if feeds_first else before
        elif kind == "constant":
            f = before
        else:
            f = first.get(t, 0)
        l = end if kind == "constant" else max(last.get(t, f), f)
        out.append(Interval(t, f, l, nbytes[t], alignment, kind))
    return out
