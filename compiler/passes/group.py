"""group: the schedule -> launches, by launch mode.

    kernel   one launch per node
    fused    contiguous runs of the schedule, each holding at most one "anchor" (a
             contraction: conv, matmul, gemm, einsum) and the cheap ops around it:
             conv + bias + activation + pool, matmul + add + reshape + transpose,
             matmul + scale + softmax. Leading cheap ops join the first anchor's group.
    sink     one launch: the whole step

A run of a topological order is always a valid launch: launches execute in schedule
order, so every tensor a group reads was made by an earlier group or is an input.
Only tensors that cross launches (and the graph's inputs and outputs) are given arena
bytes; the others live inside one kernel, where XLA plans them.
"""

ANCHORS = frozenset({"conv", "conv2d", "matmul", "gemm", "einsum"})
MODES = ("sink", "fused", "kernel")


def run(order, mode):
    """-> tuple of tuples of nodes, in schedule order."""
    if mode == "kernel":
        return tuple((n,) for n in order)
    if mode == "sink":
        return (tuple(order),) if order else ()
    if mode != "fused":
        raise ValueError(mode)
    groups, cur, has_anchor = [], [], False
    for n in order:
        if n.op in ANCHORS:
            if has_anchor:
                groups.append(tuple(cur))
                cur = []
            has_anchor = True
        cur.append(n)
    if cur:
        groups.append(tuple(cur))
    return tuple(groups)


def label(group, mode, index):
    """The launch's name in profiles and errors."""
    if mode == "kernel" or len(group) == 1:
        return group[0].name
    if mode == "sink":
        return "step"
    return f"group{index}[{group[0].name}..{group[-1].name}]"
