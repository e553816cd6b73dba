"""fold: bind static inputs and evaluate what is known at compile time.

Walks the nodes in topological order, inferring shapes as it goes:
1. Static inputs (reshape's shape, slice's starts, ...: see `OpDef.static_inputs`) are
   bound to their attributes. The tensor must be a constant by then (an initializer,
   or something folded from constants and shapes), else the error names the node.
2. `shape` nodes become constants: every shape is static. An `if` whose condition is
   a constant becomes identities of the chosen branch's results (ops/control.py).
3. With `fold_constants` on, a node whose inputs are all constants is evaluated now and
   replaced by constants, unless that would store much more than it reads (an expand
   of a scalar to a large tensor stays a launch). With it off, only the nodes that
   feed static inputs are evaluated: the plan cannot be built without them.

Evaluation uses the op's own lowering, eagerly, with 64-bit types enabled for the
duration (ONNX shape arithmetic is int64, and `ends = INT64_MAX` is common).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import LimitError, ModelError, ShapeError
from aotplan.core.graph import Constant, TensorInfo, freeze
from compiler import ops
from compiler.ops import math_ops
from compiler.passes import infer as infer_pass
from compiler.passes import schedule, unroll

FOLD_MIN_BYTES = 64 * 1024  # a folded result up to this size is always fine to store
FOLD_MAX_BYTES = 256 * 1024 * 1024  # the most a node that decides a shape may produce


@dataclasses.dataclass(frozen=True)
class FoldStats:
    bound: int  # static inputs bound to attributes
    folded: int  # nodes replaced by constants


def run(graph, fold_constants=True, max_unrolled_nodes=unroll.MAX_UNROLLED_NODES):
    if any(n.op == "if" for n in graph.nodes):
        graph = _without_dead_branches(graph, fold_constants)
    if any(n.op in unroll.ENTERS for n in graph.nodes):
        graph = unroll.run(graph, lambda g: _lenient(g, fold_constants),  # (it prunes dead branches after
                           lambda g: _without_dead_branches(g, fold_constants),  # each round, the last one too)
                           max_unrolled_nodes)
    kept, consts, bound, folded = _walk(graph, fold_constants)
    g = dataclasses.replace(graph, nodes=tuple(kept), constants=tuple(consts.values()))
    return g, FoldStats(bound, folded)


def _lenient(graph, fold_constants):
    """(tensor types, constants) from a fold in which a failing node only poisons what
    reads it (passes/unroll.py reads the first iteration's types from it)."""
    info = {}
    _, consts, _, _ = _walk(graph, fold_constants, poisoned={}, info=info)
    return info, consts


def _walk(graph, fold_constants, poisoned=None, chosen=None, info=None):
    """The fold proper -> (kept nodes, constants, bound, folded). `poisoned`: None, or
    a dict in which a node whose rule or evaluation fails maps its outputs to the
    error, its consumers' too, instead of raising (`_without_dead_branches`).
    `chosen`: filled with {if node: (results it takes, results it drops)} for each `if`
    it resolved."""
    order = schedule.run(graph)
    consts = {c.name: c for c in graph.constants}
    info = {} if info is None else info
    info.update({t.name: t for t in graph.inputs})
    info.update({c.name: c.info for c in graph.constants})
    needed = _static_closure(graph, order)
    kept, bound, folded = [], 0, 0
    for node in _expanded(order, consts, needed, chosen if chosen is not None else {}):
        if poisoned is not None:
            bad = next((poisoned[i] for i in node.inputs if i in poisoned), None)
            if bad is not None:
                poisoned.update((o, bad) for o in node.outputs)
                continue
        try:
            op = ops.get(node.op)
            if node.op == "cast_like":  # a cast, now that the dtype to cast to is known
                node, op = math_ops.as_cast(node, info[node.inputs[1]]), ops.get("cast")
            node, nb = _bind(node, op, consts)
            outs = infer_pass.infer_node(node, op, [info[i] for i in node.inputs])
            if node.op == "gather" and node.inputs[1] in consts:
                _check_gather_indices(node, info[node.inputs[0]], consts[node.inputs[1]])
            fold = _should_fold(node, op, outs, consts, needed, fold_constants)
            if fold:
                _check_fold_size(node, op, outs, consts, needed)
                values = _evaluate(node, op, [consts.get(i) for i in node.inputs], [info[i] for i in node.inputs],
                                   outs)
        except (ModelError, LimitError) as e:
            if poisoned is None:
                raise
            poisoned.update((o, e) for o in node.outputs)
            continue
        bound += nb
        for name, (dt, shape) in zip(node.outputs, outs):
            info[name] = TensorInfo(name, dt, shape)
        if fold:
            for name, (dt, shape), v in zip(node.outputs, outs, values):
                consts[name] = Constant(name, dt, shape, v)
            folded += 1
        else:
            kept.append(node)
    return kept, consts, bound, folded


def _without_dead_branches(graph, fold_constants):
    """The graph without the nodes that only an `if`'s untaken branch reads, where its
    condition folds to a constant: such a branch may not even be valid for the model's
    shapes (`if x.shape[0] == 1: x.squeeze(0)`), as it never runs. A first, lenient
    fold finds the conditions (a failing node only poisons what reads it); each
    resolved `if` becomes identities of its taken results. Nodes that read nothing
    dropped stay, whatever they are: their errors are the strict fold's to report."""
    chosen = {}
    _walk(graph, fold_constants, poisoned={}, chosen=chosen)
    if not chosen:
        return graph
    consts = {c.name for c in graph.constants}
    made_by = {o: n for n in graph.nodes for o in n.outputs}

    def reach(names, skip_dropped):
        seen, want = set(), list(names)
        while want:
            n = made_by.get(want.pop())
            if n is None or n.name in seen:
                continue
            seen.add(n.name)
            reads = n.inputs
            if skip_dropped and n.name in chosen:
                reads = (n.inputs[0],) + chosen[n.name][0]
            want.extend(i for i in reads if i and i not in consts)
        return seen

    live = reach(graph.outputs, True)
    feed_dropped = reach([d for _, dropped in chosen.values() for d in dropped], False)
    live |= reach([o for n in graph.nodes if n.name not in feed_dropped for o in n.outputs], True)  # dangling too
    nodes = []
    for n in graph.nodes:
        if n.name in chosen and n.name in live:
            nodes.extend(_identities(n, chosen[n.name][0]))
        elif n.name in live:
            nodes.append(n)
    return dataclasses.replace(graph, nodes=tuple(nodes))


def _expanded(order, consts, needed, chosen):
    """The nodes in order, each `if` with a constant condition (by the time it is
    reached) replaced by `_chosen_branch`'s identities, needed where it was; `chosen`
    gets {if node: (the results it takes, those it drops)}."""
    for node in order:
        nodes, dropped = _chosen_branch(node, consts)
        if dropped is not None:
            chosen[node.name] = (tuple(n.inputs[0] for n in nodes), tuple(dropped))
            if node.name in needed:
                needed.update(n.name for n in nodes)
        yield from nodes


def _chosen_branch(node, consts):
    """An `if` whose condition is a constant -> (identities from the chosen branch's
    results (the identity pass removes them, dce the other branch), the other
    branch's results); any other node -> ((node,), None) (ops/control.py)."""
    if node.op != "if" or node.inputs[0] not in consts:
        return (node,), None
    from compiler.ops import control

    cond, then, other = control.branches(node)
    c = consts[cond]
    if c.dtype != "bool" or np.asarray(c.data).size != 1:
        raise ShapeError(f"node {node.name!r} (if): the condition {cond!r} must be a bool tensor of one element, "
                         f"got {c.dtype}{list(c.shape)}")
    if len(then) != len(node.outputs) or len(other) != len(node.outputs):
        raise ShapeError(f"node {node.name!r} (if): takes a condition and two results per output "
                         f"({len(node.outputs)} outputs), got {len(node.inputs)} inputs")
    taken = bool(np.asarray(c.data).reshape(()))
    return _identities(node, then if taken else other), (other if taken else then)


def _identities(node, results):
    return tuple(dataclasses.replace(node, name=f"{node.name}:{i}", op="identity", inputs=(s,), outputs=(o,), attrs=())
                 for i, (s, o) in enumerate(zip(results, node.outputs)))


def _check_gather_indices(node, data, indices):
    """A gather's constant indices must lie in [-n, n - 1] for the gathered axis of
    length n: ONNX makes out-of-range indices an error, which a compiled program
    cannot raise at run time (it clips, docs/onnx.md), but a constant can be refused now."""
    idx = np.asarray(indices.data).astype(np.int64)
    if not idx.size:
        return
    axis = node.attr("axis", 0) % len(data.shape)
    n = data.shape[axis]
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        k = np.unravel_index(int(np.argmax(bad)), idx.shape)
        raise ModelError(f"node {node.name!r} (gather): constant indices {indices.name!r} hold {int(idx[k])} at "
                         f"{list(int(i) for i in k)}, out of range for axis {axis} of length {n} "
                         f"(valid: {-n}..{n - 1})")


def freeze_inputs(graph, values):
    """Turn graph inputs into constants with the given values (checked against their
    declared dtype and shape)."""
    from aotplan.core.errors import FeedError

    consts = []
    for t in graph.inputs:
        if t.name in values:
            v = np.asarray(values[t.name])
            if v.dtype != dtypes.np_dtype(t.dtype) or tuple(v.shape) != t.shape:
                raise FeedError(f"frozen input {t.name!r}: expected {t.dtype}{list(t.shape)}, got {v.dtype}{list(v.shape)}")
            consts.append(Constant(t.name, t.dtype, t.shape, v))
    unknown = sorted(set(values) - {t.name for t in graph.inputs})
    if unknown:
        raise ModelError(f"cannot freeze {unknown[0]!r}: it is not a graph input")
    return dataclasses.replace(graph, inputs=tuple(t for t in graph.inputs if t.name not in values),
                               constants=graph.constants + tuple(consts))


def shape_deciding(nodes):
    """The values that decide shapes: the nodes' static inputs and the loops' trip counts
    (passes/unroll.py: a loop is unrolled at compile time)."""
    return [n.inputs[p] for n in nodes for p, _ in ops.get(n.op).static_inputs if p < len(n.inputs) and n.inputs[p]] \
        + [n.inputs[0] for n in nodes if n.op == "loop_enter" and n.attr("trip_count", False) and n.inputs
           and n.inputs[0]]


def _static_closure(graph, order):
    """Names of the nodes whose values some static input, a loop's trip count or an
    `if`'s condition (it decides which branch's shapes count) needs."""
    made_by = {o: n for n in order for o in n.outputs}
    want = shape_deciding(order) + [n.inputs[0] for n in order if n.op == "if"]
    needed = set()
    while want:
        t = want.pop()
        n = made_by.get(t)
        if n is not None and n.name not in needed:
            needed.add(n.name)
            want.extend(i for i in n.inputs if i)
    return needed


# static inputs whose values are numbers (scalars, or lists of floats) the op checks
# itself; the others are integer lists
_VALUE_STATICS = frozenset({"value", "min", "max", "roi", "scales", "k", "axis", "start", "limit", "delta", "depth"})


def _bind(node, op, consts):
    if not op.static_inputs:
        return node, 0
    static = op.static_positions
    attrs, inputs, n = dict(node.attrs), [], 0
    for p, name in enumerate(node.inputs):
        if p not in static:
            inputs.append(name)
            continue
        if not name:
            continue
        c = consts.get(name)
        if c is None:
            raise ModelError(f"node {node.name!r} ({node.op}): input {name!r} ({static[p]}) must be known at compile "
                             f"time, but it depends on a graph input (freeze it: --freeze-input NAME=FILE.npy)")
        if op.static_dtype:  # (range: the output's dtype is the inputs')
            if attrs.setdefault(op.static_dtype, c.dtype) != c.dtype:
                raise ShapeError(f"node {node.name!r} ({node.op}): input {name!r} ({static[p]}) is {c.dtype}, "
                                 f"not {attrs[op.static_dtype]} as the node's other inputs (or its "
                                 f"{op.static_dtype!r}): they must share one dtype")
        if static[p] in _VALUE_STATICS:
            attrs[static[p]] = c.data.item() if c.data.ndim == 0 else c.data.tolist()
        elif node.op in ("unsqueeze", "squeeze") and c.data.dtype.kind in "iu" and c.data.ndim == 0:
            attrs["axes"] = [c.data.item()]  # one axis as a scalar (ONNX's AffineGrid body; onnxruntime takes it)
        elif c.data.dtype.kind not in "iu" or c.data.ndim != 1:  # (named: the model has no such attribute)
            raise ShapeError(f"node {node.name!r} ({node.op}): input {name!r} ({static[p]}) must be a 1-D integer "
                             f"tensor, got {c.dtype}{list(c.data.shape)}")
        else:
            attrs[static[p]] = c.data.tolist()
        n += 1
    return dataclasses.replace(node, inputs=tuple(inputs), attrs=freeze(attrs)), n


def _out_bytes(outs):
    return sum(int(np.prod(s)) * dtypes.np_dtype(d).itemsize for d, s in outs)


def _check_fold_size(node, op, outs, consts, needed):
    """A node evaluated only because some shape depends on it must not make the
    compiler allocate gigabytes (`_should_fold` bounds the others by their inputs)."""
    if op.shape_value is not None or node.name not in needed:
        return
    out_bytes = _out_bytes(outs)
    if out_bytes > max(FOLD_MAX_BYTES, 2 * sum(consts[i].data.nbytes for i in node.inputs)):
        desc = ", ".join(f"{d}{list(s)}" for d, s in outs)
        raise LimitError(f"node {node.name!r} ({node.op}): must be evaluated at compile time (a shape depends on "
                         f"it), but its output {desc} is {out_bytes} bytes, more than the {FOLD_MAX_BYTES} bytes "
                         f"that constant folding evaluates")


def _should_fold(node, op, outs, consts, needed, fold_constants):
    if op.shape_value is not None:
        return True
    if not op.foldable or not all(i in consts for i in node.inputs):
        return False
    if node.name in needed:
        return True
    if not fold_constants:
        return False
    out_bytes = _out_bytes(outs)
    in_bytes = sum(consts[i].data.nbytes for i in node.inputs)
    return out_bytes <= max(FOLD_MIN_BYTES, 2 * in_bytes)


def _evaluate(node, op, in_consts, in_infos, outs):
    if op.shape_value is not None:
        vals = op.shape_value(node, in_infos)
    else:
        with _x64():
            args = [jnp.asarray(c.data) for c in in_consts]
            vals = [np.asarray(v) for v in op.lower(node, *args)]
    return [np.asarray(np.asarray(v).astype(dtypes.np_dtype(d)).reshape(s), order="C") for v, (d, s) in zip(vals, outs)]


def _x64():
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # older jax spells it as a config state
        from jax._src import config

        enable = config.enable_x64
    return enable(True)
