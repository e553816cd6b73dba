"""infer: every tensor's dtype and shape, from the op library's rules.

Returns {tensor name: TensorInfo} (an analysis record; the graph is not changed).
"""

from aotplan import dtypes
from aotplan.errors import InternalError, ShapeError
from aotplan.graph import TensorInfo
from compiler import ops


def run(graph, order):
    info = {t.name: t for t in graph.inputs}
    for c in graph.constants:
        dtypes.to_storage(c.data, c.dtype, f"constant {c.name!r}")  # int64 range check
        info[c.name] = c.info
    for node in order:
        op = ops.get(node.op)
        ins = [info[i] for i in node.inputs]
        try:
            outs = op.infer(node, ins)
        except ShapeError:
            raise
        except (TypeError, ValueError, KeyError, IndexError) as e:
            raise ShapeError(f"node {node.name!r} ({node.op}): bad attributes or inputs: {e}") from None
        if len(outs) != len(node.outputs):
            raise InternalError(f"op {node.op}: rule returned {len(outs)} outputs for {len(node.outputs)}")
        for name, (dt, shape) in zip(node.outputs, outs):
            info[name] = TensorInfo(name, dt, tuple(int(d) for d in shape))
    return info
