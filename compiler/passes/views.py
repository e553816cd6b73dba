"""views: reshapes that cost nothing. A reshape, flatten, squeeze or unsqueeze of a
tensor in the arena (row-major, contiguous) is the same bytes read with another shape:
in kernel mode it gets no launch and no bytes of its own; its output is a view of its
input (`base` in the plan), whose lifetime covers the view's reads.

Not views: a reshape whose output is a graph output (outputs are written by launches
and own their bytes), or whose input is a constant (folded, or read from the pool).
"""

VIEW_OPS = ("reshape", "flatten", "squeeze", "unsqueeze")


def find(order, graph, info):
    """-> {view tensor: the tensor it reshapes}, in schedule order."""
    consts = {c.name for c in graph.constants}
    outputs = set(graph.outputs)
    views = {}
    for n in order:
        if n.op not in VIEW_OPS or len(n.outputs) != 1:
            continue
        x, y = n.inputs[0], n.outputs[0]
        if y in outputs or x in consts or info[x].dtype != info[y].dtype:
            continue
        views[y] = x
    return views
