"""A tensor-parallel plan's collectives, taken out of its launches.

The planner sees each collective node (compiler/ops/collective_ops.py) as a launch of
its own (passes/group.py isolates them), so lifetimes and offsets account for what it
reads and writes like any launch's: its operands are arena tensors, and its result
may take the bytes of an operand that dies in it (in place). Lowering then skips
them: no kernel holds a collective. `strip` turns the planned launches into the
kernel launches and the `PlanCollective`s that run between them; the executor builds
each collective's program from those fields (executor/collectives.py).

Collective buffers (`place_blocks`): an all-reduce of several tensors (the sharder
makes one for the partial values summed at one point) gets them laid out as one
contiguous block, each part at an aligned offset right after the one before, the
block aligned, so that one collective moves the block as it lies (the executor reads
it as one slice). The block takes bytes of its own past the planner's arena, its
results in place over its parts; the planner's reuse of those bytes around the
collective is not attempted (the block is a few activations, next to the weights).
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
    aligned block past the arena (module docstring): its parts in the order it names
    them, each result at its part's bytes (written in place). Views follow their base."""
    offsets, end, moved = dict(p.mem.offsets), formats.align_up(p.mem.arena_bytes, formats.ALIGNMENT), False
    recs = p.live.tensors
    for s, g in enumerate(p.groups):
        if not is_collective(g) or g[0].op != "all_reduce" or len(g[0].inputs) < 2:
            continue
        for r, w in zip(*p.live.steps[s]):
            offsets[r] = offsets[w] = end
            end = formats.align_up(end + recs[r].nbytes, formats.ALIGNMENT)
        moved = True
    if not moved:
        return p
    for i, t in enumerate(recs):  # (a view or part lies at its base's offset, plus its delta)
        if t.base >= 0:
            offsets[i] = offsets[t.base] + t.delta
    return dataclasses.replace(p, mem=dataclasses.replace(p.mem, offsets=offsets, arena_bytes=end))
