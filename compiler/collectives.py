"""A tensor-parallel plan's collectives, taken out of its launches.

The planner sees each collective node (compiler/ops/collective_ops.py) as a launch of
its own (passes/group.py isolates them), so lifetimes and offsets account for what it
reads and writes like any launch's: its operands are arena tensors, and its result
may take the bytes of an operand that dies in it (in place). Lowering then skips
them: no kernel holds a collective (but a sink plan's one program over the mesh:
compiler/spmd_export.py). `strip` turns the planned launches into the
kernel launches and the `PlanCollective`s that run between them; the executor builds
each collective's program from those fields (executor/collectives.py).

Collective buffers (`place_blocks`): an all-reduce of several tensors (the sharder
makes one for the partial values summed at one point) gets them laid out as one
contiguous block, each part at an aligned offset right after the one before, the
block aligned, so that one collective moves the block as it lies (the executor reads
it as one slice). The block is placed after the planner's placement, first fit: at
the lowest aligned offset that no tensor live while the block is (from its first
part's write to its last result's read) holds, past the arena if none is free; its
results lie in place over its parts.
"""

import dataclasses

from aotplan.core import formats
from aotplan.core.errors import InternalError
from aotplan.core.plan import PlanCollective
from compiler import ops


def is_collective(group):
    return len(group) == 1 and ops.get(group[0].op).collective


def strip(p):
    """Planned -> (Planned whose groups are the kernel launches, (PlanCollective, ...)).
    A collective runs after the kernel launch before it."""
    keep, colls = [], []
    for s, g in enumerate(p.groups):
        if not is_collective(g):
            keep.append(s)
            continue
        node = g[0]
        if not keep:
            raise InternalError(f"collective {node.name!r} runs before any launch")
        reads, writes = p.live.steps[s]
        if not reads or len(reads) != len(writes) or (node.op == "all_gather" and len(reads) != 1):
            raise InternalError(f"collective {node.name!r}: reads {reads}, writes {writes}")
        axis = node.attr("axis", 0) % len(p.info[node.inputs[0]].shape) if node.op == "all_gather" else -1
        colls.append(PlanCollective(node.op, len(keep) - 1, tuple(reads), tuple(writes), axis))
    if not colls:
        return p, ()
    live = dataclasses.replace(p.live, steps=tuple(p.live.steps[s] for s in keep))
    return dataclasses.replace(p, groups=tuple(p.groups[s] for s in keep), labels=tuple(p.labels[s] for s in keep),
                               live=live), tuple(colls)


def place_blocks(p):
    """Planned -> the same, each all-reduce of several tensors given one contiguous,
    aligned block (module docstring): its parts in the order it names them, each result
    at its part's bytes (written in place). The block is live from its first part's
    write to its last result's read; it takes the lowest aligned offset where no other
    tensor live in that time has bytes (first fit over the planner's placement), past
    the arena where none is free. Views follow their base."""
    a = formats.ALIGNMENT
    offsets, arena, moved = dict(p.mem.offsets), p.mem.arena_bytes, False
    recs = p.live.tensors
    span = {iv.tensor: (iv.first, iv.last, iv.nbytes) for iv in p.live.intervals}
    for s, g in enumerate(p.groups):
        if not is_collective(g) or g[0].op != "all_reduce" or len(g[0].inputs) < 2:
            continue
        reads, writes = p.live.steps[s]
        deltas, size = [], 0
        for r in reads:
            deltas.append(size)
            size = formats.align_up(size + recs[r].nbytes, a)
        mine = set(reads) | set(writes)
        first = min(span[t][0] for t in mine if t in span)
        last = max(span[t][1] for t in mine if t in span)
        busy = sorted((offsets[t], offsets[t] + n) for t, (f, l, n) in span.items()
                      if t not in mine and f <= last and first <= l and n)
        at = 0
        for lo, hi in busy:  # (first fit: the lowest aligned gap of `size` bytes)
            if lo >= at + size:
                break
            at = max(at, formats.align_up(hi, a))
        for r, w, d in zip(reads, writes, deltas):
            offsets[r] = offsets[w] = at + d
            span[r] = span[w] = (first, last, 0)  # (placed: a later block sees them through `busy`)
        span[reads[0]] = (first, last, size)
        arena = max(arena, formats.align_up(at + size, a))
        moved = True
    if not moved:
        return p
    for i, t in enumerate(recs):  # (a view or part lies at its base's offset, plus its delta)
        if t.base >= 0:
            offsets[i] = offsets[t.base] + t.delta
    return dataclasses.replace(p, mem=dataclasses.replace(p.mem, offsets=offsets, arena_bytes=arena))
