"""group: the schedule -> launches, by launch mode.

    kernel   one launch per node
    fused    contiguous runs of the schedule, each holding one "anchor" (a contraction:
             conv, matmul, gemm, einsum) and the cheap ops around it: conv + bias +
             activation + pool, matmul + add + reshape + transpose, matmul + scale +
             softmax. Leading cheap ops join the first anchor's group. A group whose
             work is below MIN_GROUP_FLOPS also takes the next anchor: a fused launch
             costs 50-240 us on this 2-core CPU (dispatch, and the arena traffic of the
             tensors that cross it: scripts/bench_replay.py, "fused overhead per
             launch"), so a group must carry several times that in work. A group
             ends after its last anchor, at the point among the cheap ops that
             follow it where the fewest bytes cross (`_cheapest_cut`): upsampling
             or a concat starts the next group rather than ending this one.
    sink     one launch: the whole step

A run of a topological order is always a valid launch: launches execute in schedule
order, so every tensor a group reads was made by an earlier group or is an input.
Only tensors that cross launches (and the graph's inputs and outputs) are given arena
bytes; the others live inside one kernel, where XLA plans them.
"""

import math

from aotplan import dtypes

ANCHORS = frozenset({"conv", "conv2d", "matmul", "gemm", "einsum"})
MODES = ("sink", "fused", "kernel")
# Measured (fused step / sink step, fused launches; 2-core CPU, jax 0.10.2) at 2M, 50M,
# 100M, 200M: squeezenet 1.28 (26), 1.13 (9), 1.10 (5), 0.94 (3); inception_v1 1.40 (57),
# 1.30 (21), 1.19 (15), 1.22 (10); ResNet-50 0.97 (54), 1.09 (53), 1.02 (53), 1.17 (33).
# (Before aotplan 0.4, conv FLOPs of SIO weights were overcounted by about O/kh, so the
# old 2M acted like a far larger threshold on CNNs.)
MIN_GROUP_FLOPS = 100_000_000


def flops(node, info):
    """A rough count of a node's arithmetic: 2*M*N*K for contractions, one per output
    element for the rest (used only to size fused groups)."""
    out = sum(math.prod(info[o].shape) for o in node.outputs)
    ins = [info[i].shape for i in node.inputs]
    if node.op in ("conv", "conv2d") and len(ins) > 1:
        w = ins[1]  # (Cout, Cin/groups, k...), or (k..., Cin/groups, Cout) with weight_layout SIO
        return 2 * out * (math.prod(w[:-1]) if node.attr("weight_layout", "OIS") == "SIO" else math.prod(w[1:]))
    if node.op in ("matmul", "gemm") and ins and ins[0]:
        a = ins[0]
        k = a[0] if node.op == "gemm" and node.attr("trans_a", 0) else a[-1]
        return 2 * out * k
    if node.op == "einsum":
        return 2 * max([out] + [math.prod(s) for s in ins])
    return out


def run(order, mode, info=None, min_flops=MIN_GROUP_FLOPS, sizes=None):
    """-> tuple of tuples of nodes, in schedule order (`info`: tensor name ->
    TensorInfo, needed for fused mode; `sizes`: tensor name -> stored bytes, by
    default its logical bytes)."""
    if mode == "kernel":
        return tuple((n,) for n in order)
    if mode == "sink":
        return (tuple(order),) if order else ()
    if mode != "fused":
        raise ValueError(mode)
    last = {}  # tensor -> position of its last reader in `order`
    for i, n in enumerate(order):
        for t in n.inputs:
            last[t] = i
    if sizes is None:
        sizes = {t: math.prod(ti.shape) * dtypes.itemsize(ti.dtype) for t, ti in info.items()}
    groups, cur, anchor, work = [], [], -1, 0
    for i, n in enumerate(order):
        if n.op in ANCHORS:
            if anchor >= 0 and work >= min_flops:
                j = _cheapest_cut(cur, anchor, i - len(cur), last, sizes)
                groups.append(tuple(cur[:j]))
                cur = cur[j:]
                work = sum(flops(m, info) for m in cur)
            anchor = len(cur)
        cur.append(n)
        work += flops(n, info)
    if cur:
        groups.append(tuple(cur))
    return tuple(groups)


def _cheapest_cut(cur, anchor, base, last, sizes):
    """Where the group `cur` (starting at position `base` of the order) ends: after
    its last anchor (index `anchor`), at the point among the cheap ops that follow it
    whose crossing tensors (made before the cut, read after it) have the fewest bytes;
    the latest such point on ties. A UNet decoder block's upsampling then starts the
    next group instead of ending this one, so the 4x larger upsampled tensor stays
    inside a kernel instead of crossing in the arena."""
    best, best_j = None, len(cur)
    for j in range(len(cur), anchor, -1):
        cross = sum(sizes.get(o, 0) for n in cur[:j] for o in n.outputs if last.get(o, -1) >= base + j)
        if best is None or cross < best:
            best, best_j = cross, j
    return best_j


def label(group, mode, index):
    """The launch's name in profiles and errors."""
    if mode == "kernel" or len(group) == 1:
        return group[0].name
    if mode == "sink":
        return "step"
    return f"group{index}[{group[0].name}..{group[-1].name}]"
