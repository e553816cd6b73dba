"""infer: every tensor's dtype and shape, from the op library's rules.

Returns {tensor name: TensorInfo} (an analysis record; the graph is not changed).
Constants that some node reads are range-checked here (int64 is stored as int32).
"""

from aotplan.core import dtypes, formats
from aotplan.core.errors import InternalError, LimitError, ShapeError
from aotplan.core.graph import TensorInfo
from aotplan.core.model_json import MAX_DIM
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
    outs = [(dt, tuple(int(d) for d in shape)) for dt, shape in outs]
    for name, (dt, shape) in zip(node.outputs, outs):
        if any(d < 0 for d in shape):
            raise InternalError(f"op {node.op}: rule gave node {node.name!r} output {name!r} the shape {list(shape)}")
        check_size(f"node {node.name!r} ({node.op}): output {name!r}", dt, shape)
    return outs


def check_size(what, dt, shape):
    """Computed shapes obey the limits model.json puts on declared ones, and a tensor
    must fit the arena: numpy refuses some larger ones, and XLA aborts the process."""
    if any(d > MAX_DIM for d in shape):
        raise LimitError(f"{what} would have shape {list(shape)}; dimensions are limited to {MAX_DIM}")
    # an empty tensor's other dimensions count too: numpy (and XLA) refuse [0, 2**31-1, 2**31-1, 2**31-1]
    nbytes = formats.nbytes(tuple(max(d, 1) for d in shape), dt)
    if nbytes > formats.MAX_ARENA_BYTES:
        empty = " (counting its empty dimensions as 1)" if 0 in shape else ""
        raise LimitError(f"{what} {dt}{list(shape)} needs {nbytes} bytes{empty}, more than the "
                         f"{formats.MAX_ARENA_BYTES} bytes (~8 GiB, the arena's limit) a tensor may have")


def run(graph, order):
    info = {t.name: t for t in graph.inputs}
    for t in graph.inputs:
        check_size(f"input {t.name!r}", t.dtype, t.shape)
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
