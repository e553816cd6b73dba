"""TFLite's greedy planners (Pisarchyk & Lee, arXiv 2001.03288), greedy_by_size and
greedy_by_breadth: their orders of placement; both place by best fit (`best_fit.place`)."""

import numpy as np

from compiler.planners.best_fit import no_gc, place
from compiler.planners.layout import Layout, columns, permute, unpermute
from compiler.planners.segment_tree import leaf_ranges


def size_order(cols):
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


def greedy_by_size(ivs, alignment):
    """TFLite's greedy by size: whole-run tensors first (by tensor id), then the rest by
    decreasing size (ties: first use, then tensor id), each into the best-fitting gap
    between the conflicting tensors already placed, or above them."""
    with no_gc():
        cols = columns(ivs)
        order = size_order(cols)
        return unpermute(place(Layout(permute(cols, order), alignment), range(len(order))), order)


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


def breadth_order(cols, alignment):
    """TFLite's greedy-by-breadth order (see greedy_by_breadth): positions of the
    tensors with bytes (an int64 array)."""
    first, last, size, tensor = cols
    live = np.flatnonzero((size > 0) & (first <= last))
    if not len(live):
        return live
    first, last, size, tensor = first[live], last[live], size[live], tensor[live]
    n_points, lo, hi = leaf_ranges(first, last)
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


def greedy_by_breadth(ivs, alignment):
    """TFLite's greedy by breadth: steps by decreasing breadth (the aligned bytes live at
    the step; ties by step), and at each step its tensors not yet placed, by decreasing
    size (ties: first use, then tensor id), each into the best-fitting gap.

    Only steps where some tensor starts need visiting (any other step's live set is a
    subset of the one at the last start before it, with no more bytes), and a tensor is
    placed at the first visited step of its window: its rank is a range minimum."""
    with no_gc():
        cols = columns(ivs)
        order = breadth_order(cols, alignment)  # the tensors with bytes; then the others
        rest = np.ones(len(cols[0]), bool)
        rest[order] = False
        perm = np.concatenate((order, np.flatnonzero(rest)))
        return unpermute(place(Layout(permute(cols, perm), alignment), range(len(order))), perm)
