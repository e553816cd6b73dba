"""What the best-fit engine (`best_fit.place`) needs that does not depend on the order
of placement: `Layout`, built once per set of intervals (both greedy planners, and
`best`'s members, share it), which also picks the engine's structures for the set by
counts; and the intervals as columns (`columns`), listed in the order of placement
(`permute`; the offsets go back to the caller's order with `unpermute`).

The knobs below choose structures; only the speed depends on them, never the offsets."""

import numpy as np

from compiler.planners.segment_tree import decompose, leaf_ranges, up_pointers

SHORT = 64  # leaves; a query over fewer reads the start lists of its leaves one by one
CUT_PUSHES = 1.25  # materialized copies per tensor the cut may cost (see Layout)
CUT_COVER = 32  # tensors above the cut live at a leaf, on average, for it to pay off...
CUT_SHARE = 0.1  # ...if they are this share of the tree at most (few long-lived among many short)
START_ADDS = 8  # additions into gathered start runs per tensor, at most (see _start_cap)
HUB_MIN = 64  # tensors live at the hub leaf, at least, to keep them apart
HUB_FILTER = 16  # (tensors live at the hub) x (others that meet them) per tensor, at most
JOIN_MIN = 32  # long queries ending at a leaf for the union of the tensors live there to be kept...
JOIN_SHARE = 16  # ...if at least 1 / JOIN_SHARE of the tensors end at such leaves


def columns(ivs):
    """(first, last, nbytes, tensor) as int64 arrays."""
    return (np.array([iv.first for iv in ivs], dtype=np.int64), np.array([iv.last for iv in ivs], dtype=np.int64),
            np.array([iv.nbytes for iv in ivs], dtype=np.int64), np.array([iv.tensor for iv in ivs], dtype=np.int64))


def permute(cols, perm):
    """The columns with position k holding position perm[k] (a permutation of all
    positions). A layout built over the columns in the order of placement has its
    records, and the canonical nodes of each, in memory in the order the engine reads
    them (in a random order they cost the engine about a tenth more time)."""
    perm = np.asarray(perm, dtype=np.int64)
    return tuple(c[perm] for c in cols)


def unpermute(offsets, perm):
    """Offsets by position in `permute(cols, perm)` -> by position in `cols`."""
    if offsets is None:
        return None
    out = np.zeros(len(perm), np.int64)
    out[np.asarray(perm, dtype=np.int64)] = offsets
    return out.tolist()


class Layout:
    """What the engine needs that does not depend on the order of placement (both greedy
    planners, and `best`'s members, share it), and the choice of structures (see
    `best_fit`), by counts over the set.

    Time is the distinct first steps of the tensors with bytes (leaf k of a segment tree,
    node n_leaves + k; node v has children 2v and 2v + 1); a tensor covers the leaves of
    the first steps in its range, and two tensors conflict iff their leaf ranges meet.
    Tensors by kind:

      0  no bytes (or never live): offset 0
      1  `every`: covers every leaf
      2  `hub`: live at the leaf where most tensors are, when that leaf has HUB_MIN of
         them and (their count) x (the others that meet them) <= HUB_FILTER per tensor
      3  the tree: in the runs of its canonical nodes below the cut (`cnodes`, read by
         the walks up from the first leaves of the queries, `walks`), of the cut's nodes
         it covers (`cut_a`..`cut_b`), of the joins it covers, and in the start runs of
         its first leaf and of the gathering nodes above it (`sup`; `need`: the queries
         still to read them); and in a join's lead-in (`lead_b`, `lead_p`) if a query
         ending at that join reaches back to its last leaf
      4  the tree, and its query ends at a join and covers no other: it reads the
         join's union and the lead-in (the prefix up to join - lo), nothing else of
         the tree

    The cut is the lowest height whose copies stay within CUT_PUSHES per tensor, taken
    if on average CUT_COVER tensors or more are live at a leaf above it and the tensors
    above it are at most CUT_SHARE of the tree (else the runs below the cut are many
    too, and the index does not pay). Joins are the
    leaves where JOIN_MIN long queries end, if 1 / JOIN_SHARE of the tensors end at
    such leaves and their unions cost at most one copy per tensor in all. A query over
    SHORT leaves or more reads the start runs of the canonical nodes of lo + 1..hi
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
        n_points, lo, hi = leaf_ranges(first[ids], last[ids])
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
            if n_hub >= HUB_MIN and n_hub * n_others <= HUB_FILTER * len(ids):
                kind[at_hub] = 2
        self.hub = n_leaves + hub if (kind == 2).any() else 0  # a leaf node, or 0: none
        kind[(lo == 0) & (hi == n_points - 1)] = 1
        los, his = np.zeros(n, np.int64), np.zeros(n, np.int64)  # as leaf nodes
        los[ids], his[ids] = n_leaves + lo, n_leaves + hi
        los, his = los.tolist(), his.tolist()
        # joins: leaves where many long queries end (say the concat of many branches)
        tree = kind == 3
        longq = tree & (hi - lo >= SHORT)
        ending = np.bincount(hi[longq], minlength=n_points)
        live_tree = np.zeros(n_points + 1, np.int64)
        np.add.at(live_tree, lo[tree], 1)
        np.add.at(live_tree, hi[tree] + 1, -1)
        live_tree = np.cumsum(live_tree)[:-1]
        joins = np.flatnonzero(ending >= JOIN_MIN)
        joins = joins[np.argsort(-ending[joins], kind="stable")]
        joins = np.sort(joins[np.cumsum(live_tree[joins]) <= len(ids)])
        if ending[joins].sum() * JOIN_SHARE < len(ids):
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
        owner, node, height = decompose(lo[tree], hi[tree], n_leaves)
        owner = ids[tree][owner]  # positions in the table
        hi_table = np.zeros(n, np.int64)  # last leaf by position in the table
        hi_table[ids] = hi
        per_height = np.bincount(height, minlength=n_leaves.bit_length() + 1)
        cut = None
        for h in range(1, n_leaves.bit_length() - 1):
            copies = sum(int(c) << (g - h) for g, c in enumerate(per_height[h:].tolist(), h))
            if copies <= CUT_PUSHES * max(len(tree), 1):
                cover = sum(int(c) << g for g, c in enumerate(per_height[h:].tolist(), h))
                above = len(np.unique(owner[height >= h]))
                if cover >= CUT_COVER * n_points and above <= CUT_SHARE * len(tree):
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
        # what is live there), walks[w0:w1], listed as the table is (see permute)
        up, floor = up_pointers(marked), (2 * n_leaves) >> cut if cut is not None else 1
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
        longq = np.flatnonzero((kind >= 2) & (kind < 4) & (hi - lo >= SHORT))
        owner, node, height = decompose(lo[longq] + 1, hi[longq], n_leaves)
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
        self.sup = up_pointers((need > 0) | (reach_need > 0)).tolist()
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
    highest cap whose additions stay within START_ADDS per tensor (high nodes gather
    dense unions: few runs to read)."""
    if not len(node):
        return 0
    per_leaf = np.bincount(lo, minlength=n_leaves)
    below = np.concatenate(([0], np.cumsum(per_leaf)))  # tensors starting before leaf k
    adds_at = []  # additions into the gathering nodes at each height, below the cap
    for h in range(1, n_leaves.bit_length()):
        nodes = np.unique(node[height == h]) - (n_leaves >> h)
        adds_at.append(int((below[(nodes + 1) << h] - below[nodes << h]).sum()))
    budget = START_ADDS * len(lo)
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


def _csr(owner, values, n):
    """Values grouped by owner (0 <= owner < n): (pointers, values) as lists."""
    order = np.argsort(owner, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return ptr.tolist(), values[order].tolist()
