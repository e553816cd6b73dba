"""infer: every tensor's dtype and shape, from the op library's rules.

Returns {tensor name: TensorInfo} (an analysis record; the graph is not changed).
Constants that some node reads are range-checked here (int64 is stored as int32).
"""

from aotplan import dtypes
from aotplan.errors import InternalError, ShapeError
from aotplan.graph import TensorInfo
from compiler import ops


def infer_node(node, op, ins):
    """One node's [(dtype, shape)] from its inputs' TensorInfo, errors naming the node."""
    try:
        outs = op.infer(node, ins)
    except ShapeError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as e:
        raise ShapeError(f"node {node.name!r} ({node.op}): bad attributes or inputs: {e}") from None
    if len(outs) != len(node.outputs):
        raise InternalError(f"op {node.op}: rule returned {len(outs)} outputs for {len(node.outputs)}")
    return [(dt, tuple(int(d) for d in shape)) for dt, shape in outs]


def run(graph, order):
    info = {t.name: t for t in graph.inputs}
    read = {i for n in order for i in n.inputs}
    for c in graph.constants:
        if c.name in read:
            dtypes.to_storage(c.data, c.dtype, f"constant {c.name!r}")  # int64 range check
        info[c.name] = c.info
    for node in order:
        outs = infer_node(node, ops.get(node.op), [info[i] for i in node.inputs])
        for name, (dt, shape) in zip(node.outputs, outs):
            info[name] = TensorInfo(name, dt, shape)
    return info
