"""Walking ONNX nodes into our IR (`convert_nodes`): each node becomes a constant
(Constant), the nodes of the function that defines it (functions), an If, Loop or
Scan (control_flow), or our op(s) by its converter (converters). Also a graph's
initializers as constants, and the value names nodes read, as a scope renames them
(a subgraph's or a function body's own values).

control_flow and functions convert their subgraphs and bodies with `convert_nodes`,
and the walk calls them: the modules import each other, and use each other's names
only when called."""

import numpy as np

from aotplan.core.errors import ModelError
from aotplan.core.graph import Constant

from . import control_flow, functions
from .context import Ctx
from .converters import CONVERTERS, SUPPORTED_OPS
from .tensors import attr_value, require_onnx, sparse_array, subgraphs, tensor_array


def initializers(g, out, scope):
    """The graph's initializers (sparse ones densified) as constants of `out`, named as
    `scope` renames them."""
    for t in g.initializer:
        dt, arr = tensor_array(t, f"initializer {t.name!r}")
        out.constants.append(Constant(scope.get(t.name, t.name), dt, tuple(arr.shape), arr))
    for sp in g.sparse_initializer:  # densified: plans hold dense constants
        dt, arr = sparse_array(sp, f"sparse initializer {sp.values.name!r}")
        out.constants.append(Constant(scope.get(sp.values.name, sp.values.name), dt, tuple(arr.shape), arr))


def read_names(nodes, scope):
    """Every value name the nodes read, their subgraphs (If branches) included, as
    `scope` renames them: what `Ctx.single_output` asks about."""
    for n in nodes:
        yield from (scope.get(i, i) for i in n.input if i)
        for _, sub in subgraphs(n):
            yield from read_names(sub.node, scope)
            yield from (scope.get(o.name, o.name) for o in sub.output)


def renamed(node, scope):
    """The node with its value names renamed by `scope` (an If branch's own values)."""
    if not any(x in scope for x in list(node.input) + list(node.output)):
        return node
    onnx = require_onnx()
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.input[:] = [scope.get(i, i) for i in node.input]
    copy.output[:] = [scope.get(o, o) for o in node.output]
    return copy


def convert_nodes(nodes, out, opset, used_names, scope, prefix, top):
    """Convert ONNX nodes into `out`; `scope` renames the values an If branch defines
    (others are the enclosing graphs'), `prefix` its node names; `top`: the model's
    graph, for the unsupported-operator error."""
    onnx = require_onnx()
    for i, node in enumerate(nodes):
        nname = prefix + (node.name or f"{node.op_type}_{i}")
        while nname in used_names:
            nname = f"{nname}_{i}"
        used_names.add(nname)
        original, node = node, renamed(node, scope)
        if (node.domain, node.op_type, node.overload) in out.functions or (
                node.domain in ("", "ai.onnx") and node.op_type not in CONVERTERS
                and node.op_type not in control_flow.CONTROL and node.op_type != "Constant"):
            fn = functions.function_of(node, original, nname, opset, out)
            if fn is not None:
                functions.expand(node, nname, fn, out, used_names, top)
                continue
        if node.domain not in ("", "ai.onnx"):
            raise ModelError(f"node {nname!r}: operator {node.domain}.{node.op_type} is not supported")
        if node.op_type == "Constant":
            dt, arr = _constant_node(node, nname)
            out.constants.append(Constant(node.output[0], dt, tuple(arr.shape), np.asarray(arr, order="C")))
            continue
        if node.op_type in control_flow.CONTROL:
            control_flow.CONTROL[node.op_type](node, nname, out, opset, used_names, scope, top)
            continue
        conv = CONVERTERS.get(node.op_type)
        if conv is None:
            raise ModelError(f"node {nname!r}: ONNX operator {node.op_type!r} is not supported"
                             + _unsupported_others(top, node.op_type) + f" ({len(SUPPORTED_OPS)} are: `aotplan "
                             f"import onnx --list-ops` lists them)")
        try:
            version = onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version
        except Exception:
            version = opset
        c = Ctx(node, nname, version, out)
        conv(c)
        c.drop("consumed_inputs")
        if c.attrs:
            c.fail(f"attribute {sorted(c.attrs)[0]!r} is not supported")


def _constant_node(node, name):
    where = f"node {name!r} (Constant)"
    attrs = {a.name: a for a in node.attribute}
    if len(attrs) != 1:
        raise ModelError(f"{where}: expected exactly one value attribute, got {sorted(attrs)}")
    key, a = next(iter(attrs.items()))
    v = attr_value(a, where)
    if key in ("value", "sparse_value"):
        return v
    if key == "value_float":
        return "float32", np.array(v, np.float32)
    if key == "value_floats":
        return "float32", np.array(v, np.float32)
    if key == "value_int":
        return "int64", np.array(v, np.int64)
    if key == "value_ints":
        return "int64", np.array(v, np.int64)
    raise ModelError(f"{where}: attribute {key!r} is not supported")


def _unsupported_others(g, first):
    """' (k nodes)' for the first unsupported operator, and '; the model also uses ...'
    for the other unsupported operators of the default domain (so that a user learns
    them all at once), with their node counts."""
    import collections

    seen = collections.Counter(n.op_type for n in g.node if n.domain in ("", "ai.onnx")
                               and n.op_type not in SUPPORTED_OPS)
    k = seen.pop(first, 1)
    count = f" ({k} nodes)" if k > 1 else ""
    if not seen:
        return count
    return count + "; the model also uses " + ", ".join(f"{op} ({k} node{'s' if k > 1 else ''})"
                                                        for op, k in sorted(seen.items())) + ", also unsupported"
