"""A tensor-parallel plan's collectives, taken out of its launches.

The planner sees each collective node (compiler/ops/collective_ops.py) as a launch of
its own (passes/group.py isolates them), so lifetimes and offsets account for what it
reads and writes like any launch's: its operands are arena tensors, and its result
may take the bytes of an operand that dies in it (in place). Lowering then skips
them: no kernel holds a collective. `strip` turns the planned launches into the
kernel launches and the `PlanCollective`s that run between them; the executor builds
each collective's program from those fields (executor/collectives.py).
"""

import dataclasses

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
        if len(reads) != 1 or len(writes) != 1:
            raise InternalError(f"collective {node.name!r}: reads {reads}, writes {writes} (one of each)")
        axis = node.attr("axis", 0) % len(p.info[node.inputs[0]].shape) if node.op == "all_gather" else -1
        colls.append(PlanCollective(node.op, len(keep) - 1, tuple(reads), tuple(writes), axis))
    if not colls:
        return p, ()
    live = dataclasses.replace(p.live, steps=tuple(p.live.steps[s] for s in keep))
    return dataclasses.replace(p, groups=tuple(p.groups[s] for s in keep), labels=tuple(p.labels[s] for s in keep),
                               live=live), tuple(colls)
