"""Time as the leaves of a segment tree, in numpy: leaf k is the k-th distinct first
step of the tensors; node v has children 2v and 2v + 1, and over n_leaves leaves (a
power of 2) leaf k is node n_leaves + k. A tensor covers the leaves of the first steps
in its range, and two tensors conflict iff their leaf ranges meet."""

import numpy as np


def leaf_ranges(first, last):
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


def decompose(lo, hi, n_leaves):
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


def up_pointers(marked):
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
