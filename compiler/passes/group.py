"""group: the schedule -> launches, by launch mode.

    kernel   one launch per node
    fused    contiguous runs of the schedule, each holding one "anchor" (a contraction:
             conv, conv_transpose, matmul, gemm, einsum, lstm, gru, rnn, attention; an
             op registered with `anchor=True`) and the cheap ops around it:
             conv + bias + activation + pool, matmul + add + reshape + transpose, matmul + scale +
             softmax. Leading cheap ops join the first anchor's group. A group whose
             work is below MIN_GROUP_FLOPS also takes the next anchor: a fused launch
             costs 50-240 us on this 2-core CPU (dispatch, and the arena traffic of the
             tensors that cross it: scripts/bench_replay.py, "fused overhead per
             launch"), so a group must carry several times that in work. A group
             ends after its last anchor, at the point among the cheap ops that
             follow it where the fewest bytes cross (the latest on ties): upsampling
             or a concat starts the next group rather than ending this one. Unless
             a strictly narrower point lies ahead (up to the first anchor at least
             LOOKAHEAD x min_flops of work past the next one): then the group takes
             the next anchor too, and decides again there. So groups end at local
             minima of the crossing bytes: a transformer layer's Q/K/V projections
             and FFN expansion, or a bottleneck block's inner convs, do not end a
             group where several or wide tensors cross. There is no cap on a
             group's size: a model whose crossing bytes shrink all the way runs as
             one group, like sink. Crossing bytes count every tensor a node made
             before the point and a node reads after it (graph inputs are not
             counted: no node makes them, and the choice between nearby points
             hardly depends on them; constants live in the pool).
    sink     one launch: the whole step

A run of a topological order is always a valid launch: launches execute in schedule
order, so every tensor a group reads was made by an earlier group or is an input.
Only tensors that cross launches (and the graph's inputs and outputs) are given arena
bytes; the others live inside one kernel, where XLA plans them.
"""

import bisect
import itertools
import math

import numpy as np

from aotplan.core import dtypes
from compiler import ops

MODES = ("sink", "fused", "kernel")
# Measured (fused step / sink step, fused launches; 2-core CPU, jax 0.10.2) at 2M, 50M,
# 100M, 200M: squeezenet 1.28 (26), 1.13 (9), 1.10 (5), 0.94 (3); inception_v1 1.40 (57),
# 1.30 (21), 1.19 (15), 1.22 (10); ResNet-50 0.97 (54), 1.09 (53), 1.02 (53), 1.17 (33).
# (Before aotplan 0.4, conv FLOPs of SIO weights were overcounted by about O/kh, so the
# old 2M acted like a far larger threshold on CNNs.)
MIN_GROUP_FLOPS = 100_000_000
LOOKAHEAD = 8


def flops(node, info):
    """A rough count of a node's arithmetic: 2*M*N*K for contractions, one per output
    element for the rest (used only to size fused groups)."""
    out = sum(math.prod(info[o].shape) for o in node.outputs)
    ins = [info[i].shape for i in node.inputs]
    if node.op in ("conv", "conv2d") and len(ins) > 1:
        w = ins[1]  # (Cout, Cin/groups, k...), or (k..., Cin/groups, Cout) with weight_layout SIO
        return 2 * out * (math.prod(w[:-1]) if node.attr("weight_layout", "OIS") == "SIO" else math.prod(w[1:]))
    if node.op == "conv_transpose" and len(ins) > 1:
        x, w = ins[0], ins[1]  # each input element meets (M/group, kernel...) weights
        return 2 * math.prod(x) * math.prod(w[1:])
    if node.op in ("matmul", "gemm") and ins and ins[0]:
        a = ins[0]
        k = a[0] if node.op == "gemm" and node.attr("trans_a", 0) else a[-1]
        return 2 * out * k
    if node.op == "einsum":
        return 2 * max([out] + [math.prod(s) for s in ins])
    if node.op == "attention" and len(ins) > 2:  # Q.K and P.V: about 4 * |Q| * kv length
        return 4 * math.prod(ins[0]) * ins[1][2 if len(ins[1]) == 4 else 1]
    if node.op in ("lstm", "gru", "rnn") and len(ins) > 2:  # X, W [dirs, G*h, in], R [dirs, G*h, h]
        x, w, r = ins[:3]
        return 2 * math.prod(x[:2]) * r[0] * r[1] * (w[2] + r[2])
    return out


def run(order, mode, info=None, min_flops=MIN_GROUP_FLOPS, sizes=None, lookahead=LOOKAHEAD, cuts=frozenset()):
    """-> tuple of tuples of nodes, in schedule order (`info`: tensor name ->
    TensorInfo, needed for fused mode; `sizes`: tensor name -> stored bytes, by
    default its logical bytes; `lookahead`: how far, in multiples of `min_flops`, a
    group looks for a narrower place to end; `cuts`: names of nodes that start a
    fused group, whatever the rules above say: see split_point)."""
    if mode == "kernel":
        return tuple((n,) for n in order)
    if mode == "sink":  # (a tensor-parallel sink plan's collectives too: compiler/spmd_export.py)
        return (tuple(order),) if order else ()
    if mode != "fused":
        raise ValueError(mode)
    if sizes is None:
        sizes = {t: math.prod(ti.shape) * dtypes.itemsize(ti.dtype) for t, ti in info.items()}
    cross = _crossing(order, sizes)
    narrowest = _Narrowest(cross)
    work = list(itertools.accumulate((flops(n, info) for n in order), initial=0))  # work[p]: before p
    anchors = [i for i, n in enumerate(order) if _is_anchor(n)]
    anchor_work = [work[a] for a in anchors]
    budget = lookahead * min_flops
    groups, start = [], 0
    for k in range(1, len(anchors)):
        prev, i = anchors[k - 1], anchors[k]
        if work[i] - work[start] < min_flops:
            continue  # too little work yet: the group takes anchor i (it holds anchor prev)
        p = narrowest(prev + 1, i + 1)
        if budget > 0:  # a narrower place ahead, within `budget` FLOPs of work: end there
            h = bisect.bisect_left(anchor_work, work[i] + budget, k + 1)
            q = narrowest(i + 1, anchors[h] + 1 if h < len(anchors) else len(order))
            if q is not None and cross[q] < cross[p]:
                continue
        groups.append(tuple(order[start:p]))
        start = p
    if start < len(order):
        groups.append(tuple(order[start:]))
    if cuts:
        groups = [part for g in groups for part in _cut(g, cuts)]
    return tuple(part for g in groups for part in _isolate_collectives(g))


def _isolate_collectives(g):
    """A collective (a tensor-parallel plan's all-reduce, all-gather) is a launch of
    its own: the executor runs it between kernels (compiler/collectives.py)."""
    if not any(ops.get(n.op).collective for n in g):
        return [g]
    parts, run = [], []
    for n in g:
        if ops.get(n.op).collective:
            parts += [tuple(run)] if run else []
            parts.append((n,))
            run = []
        else:
            run.append(n)
    return parts + ([tuple(run)] if run else [])


def _is_anchor(node):
    op = ops.get(node.op)
    return op is not None and op.anchor


def _cut(g, cuts):
    at = [0] + [i for i, n in enumerate(g) if i and n.name in cuts] + [len(g)]
    return [g[a:b] for a, b in zip(at, at[1:])]


def split_point(order, g, sizes):
    """The node of fused group `g` (a run of `order`) before which to split it in two:
    the point between its first and last contraction where the fewest bytes cross (the
    latest on ties), or None if it holds fewer than two. The compiler splits the group
    with the plan's largest workspace here, and keeps the split only if the step's
    device memory drops (pipeline.compile_graph)."""
    anchors = [i for i, n in enumerate(g) if _is_anchor(n)]
    if len(anchors) < 2:
        return None
    cross = _crossing(order, sizes)
    base = order.index(g[0])
    p = min(range(anchors[0] + 1, anchors[-1] + 1), key=lambda i: (cross[base + i], -i))
    return g[p].name


def _crossing(order, sizes):
    """cross[p]: the bytes of the tensors made before position p of the order and read
    at or after it: what a cut before order[p] puts in the arena."""
    last = {}
    for i, n in enumerate(order):
        for t in n.inputs:
            last[t] = i
    diff = [0] * (len(order) + 1)
    for i, n in enumerate(order):
        for o in n.outputs:
            if last.get(o, -1) > i:
                diff[i + 1] += sizes.get(o, 0)
                diff[last[o] + 1] -= sizes.get(o, 0)
    return list(itertools.accumulate(diff))


class _Narrowest:
    """narrowest(lo, hi): the position in [lo, hi) with the fewest crossing bytes, the
    latest on ties (None if the range is empty), in O(1) from a sparse table of
    keys cross * N + (N - 1 - position)."""

    def __init__(self, cross):
        self.n = n = len(cross)
        dtype = np.int64 if (max(cross, default=0) + 1) * n < 2**62 else object  # exact either way
        key = np.asarray(cross, dtype=dtype) * n + np.arange(n - 1, -1, -1, dtype=np.int64).astype(dtype)
        self.levels = [key]
        while 2 ** len(self.levels) <= n:
            k, w = self.levels[-1], 2 ** (len(self.levels) - 1)
            self.levels.append(np.minimum(k[:-w], k[w:]))

    def __call__(self, lo, hi):
        if hi <= lo:
            return None
        j = (hi - lo).bit_length() - 1
        t = self.levels[j]
        return self.n - 1 - int(min(t[lo], t[hi - 2 ** j])) % self.n


def label(group, mode, index):
    """The launch's name in profiles and errors."""
    if mode == "kernel" or len(group) == 1:
        return group[0].name
    if mode == "sink":
        return "step"
    return f"group{index}[{group[0].name}..{group[-1].name}]"
