"""liveness: the tensor table and each arena tensor's lifetime over the schedule.

Tensor order is fixed: graph inputs, then the constants some node reads (unused ones
are dropped), then node outputs in schedule order. With weights in the pool,
constants are not arena tensors and get no interval.
"""

from dataclasses import dataclass

from aotplan import formats, intervals


@dataclass(frozen=True)
class TensorRecord:
    name: str
    kind: str
    dtype: str
    shape: tuple
    nbytes: int
    storage: str  # "arena" | "pool"


@dataclass(frozen=True)
class Liveness:
    tensors: tuple  # of TensorRecord
    steps: tuple  # per launch: (reads, writes) as tensor indices
    intervals: tuple  # of aotplan.intervals.Interval, arena tensors only

    def index(self):
        return {t.name: i for i, t in enumerate(self.tensors)}


def run(graph, order, info, weights, alignment=formats.ALIGNMENT):
    outputs = set(graph.outputs)
    read = {i for n in order for i in n.inputs}
    recs = [TensorRecord(t.name, "input", t.dtype, t.shape, formats.nbytes(t.shape, t.dtype), "arena")
            for t in graph.inputs]
    recs += [TensorRecord(c.name, "constant", c.dtype, c.shape, formats.nbytes(c.shape, c.dtype),
                          "pool" if weights == "pool" else "arena")
             for c in graph.constants if c.name in read]
    for n in order:
        for o in n.outputs:
            t = info[o]
            recs.append(TensorRecord(o, "output" if o in outputs else "intermediate", t.dtype, t.shape,
                                     formats.nbytes(t.shape, t.dtype), "arena"))
    idx = {t.name: i for i, t in enumerate(recs)}
    steps = tuple((tuple(idx[i] for i in n.inputs), tuple(idx[o] for o in n.outputs)) for n in order)
    ivs = intervals.compute([t.kind if t.storage == "arena" else None for t in recs],
                            [t.nbytes for t in recs], steps, len(steps), alignment)
    return Liveness(tuple(recs), steps, tuple(ivs))
