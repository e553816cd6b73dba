"""Operators imported as functions: a node whose operator is a model-local function,
or one with no converter whose ONNX schema defines it by a function body (built from
the input types where the body depends on them), is replaced by the body's nodes,
bound to the node's inputs, outputs and attributes, as onnxruntime runs an operator
it has no kernel for."""

from aotplan.core.errors import ModelError

from . import walk
from .opsets import opset_version
from .tensors import require_onnx


def function_of(node, original, nname, opset, out):
    """The FunctionProto that defines `node`: a model-local function, or the body ONNX
    gives the operator (onnxruntime runs an operator it has no kernel for so), built from
    the input types where it depends on them; None if there is none. `original`: the node
    before a subgraph's or function's renaming (ONNX's inference names its values so)."""
    onnx = require_onnx()
    local = out.functions.get((node.domain, node.op_type, node.overload))
    if local is not None:
        return local
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:
        return None
    fn = onnx.FunctionProto()
    if schema.has_function:
        v = max(v for v in schema.function_opset_versions if v <= opset)
        fn.ParseFromString(schema.get_function_with_opset_version(v))
        have = {a.name for a in fn.attribute_proto}
        fn.attribute_proto.extend(a.default_value for k, a in sorted(schema.attributes.items())  # the
                                  if k not in have and a.default_value.name)                 # schema's defaults
        return fn
    if schema.has_context_dependent_function:
        types = out.types()
        found = [types.get(i, types.get(o)) if i else onnx.TypeProto() for i, o in zip(node.input, original.input)]
        missing = [i for i, t in zip(node.input, found) if t is None]
        if missing:
            raise ModelError(f"node {nname!r} ({node.op_type}): ONNX defines it by a function that depends on its "
                             f"input types, and the type of {missing[0]!r} is unknown (ONNX's shape inference did "
                             f"not give it)")
        try:
            v = max(v for v in schema.context_dependent_function_opset_versions if v <= opset)
            fn.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                v, node.SerializeToString(), [t.SerializeToString() for t in found]))
        except Exception as e:  # the builder refuses the node (an attribute it cannot take, ...)
            raise ModelError(f"node {nname!r} ({node.op_type}): cannot expand ONNX's function for it: {e}") from None
        return fn if fn.node else None
    return None


def expand(node, nname, fn, out, used_names, top):
    """`node` replaced by its function's nodes: the formal inputs and outputs bound to the
    node's (the scope the function's nodes, and any subgraph in them, are renamed by),
    attribute references to the node's attributes (or the function's defaults), the
    function's own values renamed `NODE:fn:NAME`; converted with the function's opset
    for the default domain."""
    onnx = require_onnx()
    where = f"node {nname!r} ({node.op_type})"
    if len(node.input) > len(fn.input) or len(node.output) > len(fn.output):
        raise ModelError(f"{where}: {len(node.input)} inputs and {len(node.output)} outputs, its function "
                         f"{len(fn.input)} and {len(fn.output)}")
    bind = dict(zip(fn.input, list(node.input) + [""] * (len(fn.input) - len(node.input))))
    outs = list(node.output) + [""] * (len(fn.output) - len(node.output))
    bind.update((f, o or f"{nname}:fn:{f}") for f, o in zip(fn.output, outs))  # (the body may read one left out)
    attrs = {a.name: a for a in fn.attribute_proto} | {a.name: a for a in node.attribute}
    inner = {}
    for n in fn.node:
        for o in n.output:
            if o and o not in bind:
                inner[o] = f"{nname}:fn:{o}"
    names = bind | inner
    body = []
    for i, n in enumerate(fn.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.name = f"{n.name or n.op_type}_{i}"
        _bind_attributes(copy, attrs)
        body.append(copy)
    default = [o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")]
    _learn_types(body, names, fn, out)
    out.consumed |= set(walk.read_names(body, names))
    walk.convert_nodes(body, out, default[0] if default else opset_version(out.model), used_names, names,
                       f"{nname}:fn:", top)


def _bind_attributes(node, attrs):
    """Replace `node`'s attribute references (`ref_attr_name`) by the calling node's
    attributes `attrs`, in its subgraphs too; a reference to an attribute the call does
    not set (and has no default) is dropped: an optional attribute left unset."""
    onnx = require_onnx()
    kept = []
    for a in node.attribute:
        if a.ref_attr_name:
            if a.ref_attr_name in attrs:
                b = onnx.AttributeProto()
                b.CopyFrom(attrs[a.ref_attr_name])
                b.name = a.name
                kept.append(b)
            continue
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for n in g.node:
                _bind_attributes(n, attrs)
        kept.append(a)
    del node.attribute[:]
    node.attribute.extend(kept)


def _learn_types(body, names, fn, out):
    """Add the types of a function body's values to `out.types()` (ONNX's shape inference
    on the body alone), for the context-dependent functions nested in it."""
    onnx = require_onnx()
    types = out.types()
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in body for a in n.attribute):
        return  # (its subgraphs' outer names would need renaming too: no nested functions typed there)
    renamed = [walk.renamed(n, names) for n in body]
    reads = {x for n in renamed for x in n.input if x} - {x for n in renamed for x in n.output}
    if not all(x in types for x in reads):
        return
    g = onnx.helper.make_graph(renamed, "fn", [onnx.helper.make_value_info(x, types[x]) for x in sorted(reads)], [])
    try:
        m = onnx.shape_inference.infer_shapes(onnx.helper.make_model(g, opset_imports=list(fn.opset_import),
                                                                     functions=list(out.model.functions)))
    except Exception:
        return
    for vi in m.graph.value_info:
        types.setdefault(vi.name, vi.type)
