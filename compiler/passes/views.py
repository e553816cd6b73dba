"""views: reshapes that cost nothing. A reshape, flatten, squeeze or unsqueeze of a
tensor in the arena (row-major, contiguous) is the same bytes read with another shape:
in kernel mode it gets no launch and no bytes of its own; its output is a view of its
input (`base` in the plan), whose lifetime covers the view's reads.

Not views: a reshape whose output is a graph output (outputs are written by launches
and own their bytes), or whose input is a constant (folded, or read from the pool).

Placement: the inputs of a concat are written by their launches straight into their
slices of the concat's bytes (`placements`), so the concat runs no launch and copies
nothing. Concatenating along an axis with dimensions before it (NCHW channels with
batch > 1) gives each input one run per outer index: the launch writes each run.
"""

from dataclasses import dataclass

VIEW_OPS = ("reshape", "flatten", "squeeze", "unsqueeze")


def find(order, graph, info):
    """-> {view tensor: the tensor it reshapes}, in schedule order."""
    consts = {c.name for c in graph.constants}
    outputs = set(graph.outputs)
    held = consts | {t for st in graph.states for t in (st.input, st.output)}  # (a state is in the state buffer)
    views = {}
    for n in order:
        if n.op not in VIEW_OPS or len(n.outputs) != 1:
            continue
        x, y = n.inputs[0], n.outputs[0]
        if y in outputs or x in held or info[x].dtype != info[y].dtype:
            continue
        views[y] = x
    return views


# ------------------------------------------------------------------ placement

MAX_RUNS = 64  # a part written as more runs than this is not worth the launch's extra ops


@dataclass(frozen=True)
class Part:
    """A concat input written straight into its slice of the concat's bytes."""

    concat: str  # the concat's output tensor
    delta: int  # bytes from the concat's offset to the part's first run
    runs: int  # one run per index of the dimensions before the concat axis
    stride: int  # bytes between runs: one row of the concat


def placements(order, graph, info, views):
    """-> {tensor: Part} for the inputs of concats whose inputs can all be placed: each
    made by a launch (not a graph input, constant, view or output), named once among
    the concat's inputs and placed in no other concat, with runs of whole 4-byte words
    (other nodes may read it too: from its slice). The concat then runs no launch
    (kernel mode)."""
    from aotplan.core import dtypes

    consts = {c.name for c in graph.constants}
    inputs = {t.name for t in graph.inputs}
    outputs = set(graph.outputs)
    viewed = set(views.values())
    out = {}
    for n in order:
        if n.op != "concat" or n.attr("format", "default") != "default" or n.outputs[0] in outputs or n.outputs[0] in views or n.outputs[0] in out:
            continue
        y = info[n.outputs[0]]
        rank = len(y.shape)
        axis = n.attr("axis", 0)
        axis = axis + rank if axis < 0 else axis
        isz = dtypes.itemsize(y.dtype)
        runs = 1
        for d in y.shape[:axis]:
            runs *= d
        row = isz
        for d in y.shape[axis:]:
            row *= d
        ok = 0 < runs <= MAX_RUNS and len(set(n.inputs)) == len(n.inputs)
        parts, delta = {}, 0
        for x in n.inputs:
            t = info[x]
            chunk = isz
            for d in t.shape[axis:]:
                chunk *= d
            if (x in consts or x in inputs or x in outputs or x in views or x in viewed or x in out
                    or any(x == p.concat for p in out.values()) or t.dtype != y.dtype
                    or chunk % 4 or delta % 4 or row % 4 or chunk == 0):
                ok = False
                break
            parts[x] = Part(n.outputs[0], delta, runs, row)
            delta += chunk
        if ok:
            out.update(parts)
    return out
