"""liveness: the tensor table and each arena tensor's lifetime over the launches.

Tensor order is fixed: graph inputs, then the constants some node reads (unused ones
are dropped), then the node outputs that need arena bytes, in schedule order: in
kernel mode every node output; otherwise the graph's outputs and the tensors a later
launch reads (see passes/group.py). With weights in the pool, constants are not arena
tensors and get no interval.

A state's input and output (`Graph.states`) are "state" tensors in the state buffer,
outside the arena: they get no interval.

Lifetimes are in phases (aotplan.core.intervals.phases): with `inplace`, a launch's output
may take the bytes of an input that dies in it. `views`: names of node outputs that
are views (a reshape of an arena tensor, passes/views.py: no launch, no bytes of their
own); their records name their base, and the base's lifetime covers their reads.
"""

import dataclasses
from dataclasses import dataclass

from aotplan.core import formats, intervals


@dataclass(frozen=True)
class TensorRecord:
    name: str
    kind: str
    dtype: str
    shape: tuple
    nbytes: int
    storage: str  # "arena" | "pool" | "inline" | "state"
    base: int = -1  # a view or a part: the index of the tensor whose bytes it is in
    runs: int = 1  # a part: runs of nbytes/runs bytes, `stride` bytes apart, the first
    stride: int = 0  # `delta` bytes after its base's offset
    delta: int = 0
    format: str = "default"  # storage format (aotplan/core/formats.py); nbytes follow from it


@dataclass(frozen=True)
class Liveness:
    tensors: tuple  # of TensorRecord
    steps: tuple  # per launch: (reads, writes) as tensor indices
    intervals: tuple  # of aotplan.core.intervals.Interval, arena tensors only

    def index(self):
        return {t.name: i for i, t in enumerate(self.tensors)}


def run(graph, groups, info, weights, materialize_all=True, alignment=formats.ALIGNMENT, inplace=True,
        views=None, feeds_first=None, parts=None, fmts=None, inline=frozenset()):
    """`groups`: the launches, each a tuple of nodes (passes/group.py); `views`: {view
    tensor name: base tensor name} for view nodes, which are in no group; `parts`:
    {tensor name: views.Part} for concat inputs placed in their concat, whose concat
    node is in no group; `feeds_first`: the first launch writes the inputs (default:
    not materialize_all); `fmts`: tensor name -> storage format (passes/layout.py;
    default: every tensor `default`); `inline`: names of constants compiled into their
    kernel as literals (small constants of sink and fused plans, pipeline.inline_choice)."""
    views, parts, fmts = views or {}, parts or {}, fmts or {}

    def rec(name, kind, t, storage, base=-1):
        f = fmts.get(name, "default")
        return TensorRecord(name, kind, t.dtype, t.shape, formats.nbytes(t.shape, t.dtype, f), storage, base,
                            format=f)
    order = [n for g in groups for n in g]
    outputs = set(graph.outputs)
    read = {i for n in order for i in n.inputs}
    crossing = set(outputs)
    made_in = {}
    for gi, g in enumerate(groups):
        for n in g:
            crossing.update(i for i in n.inputs if made_in.get(i, gi) != gi)
            made_in.update((o, gi) for o in n.outputs)
    stated = {n for st in graph.states for n in (st.input, st.output)}  # in the state buffer, not the arena
    recs = [rec(t.name, "state", t, "state") if t.name in stated else rec(t.name, "input", t, "arena")
            for t in graph.inputs]
    recs += [rec(c.name, "constant", c, "inline" if c.name in inline else "pool" if weights == "pool" else "arena")
             for c in graph.constants if c.name in read]
    by_output = {o: n for n in graph.nodes for o in n.outputs}
    view_nodes = [by_output[v] for v in views]
    concats = {p.concat for p in parts.values()}
    placed_nodes = [n for n in graph.nodes if n.outputs[0] in concats]
    for n in view_nodes + placed_nodes:
        crossing.update(n.inputs)  # read through a view, or written into the concat: in the arena
    for n in order + placed_nodes + view_nodes:
        for o in n.outputs:
            if o in views:
                continue
            if o in stated:
                recs.append(rec(o, "state", info[o], "state"))
            elif materialize_all or o in crossing:
                t = info[o]
                recs.append(rec(o, "output" if o in outputs else "intermediate", t, "arena"))
    idx = {t.name: i for i, t in enumerate(recs)}
    for x, p in parts.items():
        recs[idx[x]] = dataclasses.replace(recs[idx[x]], base=idx[p.concat], runs=p.runs, stride=p.stride,
                                           delta=p.delta)
    for n in view_nodes:  # in schedule order: a view's base has its record already
        o, b = n.outputs[0], views[n.outputs[0]]
        b = idx[b]
        if recs[b].base >= 0:
            b = recs[b].base
        t = info[o]
        recs.append(rec(o, "output" if o in outputs else "intermediate", t, "arena", b))
        idx[o] = len(recs) - 1
    steps = []
    for g in groups:
        made = {o for n in g for o in n.outputs}
        reads = list(dict.fromkeys(i for n in g for i in n.inputs if i not in made))
        writes = [o for n in g for o in n.outputs if o in idx]
        steps.append((tuple(idx[i] for i in reads), tuple(idx[o] for o in writes)))
    steps = tuple(steps)
    ivs = intervals.phases([t.kind if t.storage == "arena" else None for t in recs], [t.nbytes for t in recs], steps,
                           alignment, feeds_first=not materialize_all if feeds_first is None else feeds_first,
                           inplace=inplace, base=[t.base for t in recs])
    return Liveness(tuple(recs), steps, tuple(ivs))
