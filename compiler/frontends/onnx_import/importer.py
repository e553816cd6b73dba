"""The entry points: `convert` (an onnx.ModelProto) and `load` (an .onnx file) -> our
Graph. Around the walk of the graph's nodes, the checks of the model as a whole: its
opset and operator domains, its inputs (and --input-shape's names and dimensions),
and each declared output against what the graph computes."""

import os

from aotplan.core import model_json
from aotplan.core.errors import ModelError
from aotplan.core.graph import Graph, TensorInfo

from . import walk
from .context import Out
from .opsets import check_opset, opset_version
from .tensors import ELEM_DTYPES, elem_dtype, require_onnx


def convert(model, input_shapes=None, name=None, freeze=None):
    """onnx.ModelProto -> Graph. `input_shapes`: {input name: dims} for symbolic dims;
    `freeze`: Graph -> Graph, applied before the declared outputs are checked (it makes
    the --freeze-input values constants, so that every shape is known there)."""
    fixed = dict(input_shapes or {})
    g = model.graph
    opset = opset_version(model)
    check_opset(opset)
    local = {(f.domain, f.name, f.overload) for f in model.functions}
    for o in model.opset_import:
        if o.domain not in ("", "ai.onnx") and any(n.domain == o.domain and (n.domain, n.op_type, n.overload)
                                                   not in local for n in g.node):
            raise ModelError(f"model uses operator domain {o.domain!r}, which is not supported")
    inits = {t.name: t for t in g.initializer} | {sp.values.name: sp for sp in g.sparse_initializer}
    unknown = sorted(set(fixed) - {i.name for i in g.input})
    if unknown:
        raise ModelError(f"--input-shape names {unknown[0]!r}, which is not an input of the model")
    init_inputs = [vi.name for vi in g.input if vi.name in inits]
    fixed_inits = sorted(set(fixed) & set(init_inputs))
    if fixed_inits:
        raise ModelError(f"--input-shape names {fixed_inits[0]!r}, an input with an initializer: it is imported as "
                         f"a constant of shape {list(inits[fixed_inits[0]].dims)}")
    if init_inputs and model.ir_version >= 4:
        # From IR 4 on, an input with an initializer is an input whose initializer is a default value
        # (onnxruntime lets a feed override it). Plans are frozen: we keep the value. Before IR 4 every
        # initializer had to be listed as an input, so there it says nothing.
        shown = ", ".join(repr(n) for n in init_inputs[:8]) + (f" and {len(init_inputs) - 8} more"
                                                                if len(init_inputs) > 8 else "")
        one = len(init_inputs) == 1
        _note(f"{'input' if one else f'{len(init_inputs)} inputs'} {shown} "
              f"{'has an initializer' if one else 'have initializers'}: imported as "
              f"{'a constant' if one else 'constants'} with the initializer's value (ONNX lets a runtime "
              f"feed override it; a plan cannot)")
    inputs = []
    for vi in g.input:
        if vi.name in inits:
            continue  # a constant: see above
        where = f"input {vi.name!r}"
        if not vi.type.HasField("tensor_type"):
            raise ModelError(f"{where}: only tensor inputs are supported")
        inputs.append(TensorInfo(vi.name, elem_dtype(vi.type.tensor_type.elem_type, where), _dims(vi, fixed, where)))
    out = Out(set(walk.read_names(g.node, {})) | {o.name for o in g.output}, model)
    walk.initializers(g, out, {})
    walk.convert_nodes(g.node, out, opset, set(), {}, "", g)
    outputs = tuple(dict.fromkeys(o.name for o in g.output))  # an output listed twice is one output
    graph = Graph(name or g.name or "model", tuple(inputs), outputs, tuple(out.nodes), tuple(out.constants))
    if freeze is not None:
        graph = freeze(graph)
    _check_outputs(graph, g.output, dims_too=not fixed)
    return graph


def load(path, input_shapes=None, freeze=None):
    """Read an .onnx file -> (Graph, digest); `freeze`: see `convert`."""
    if not os.path.isfile(path):  # before asking for the onnx package: a typo'd path says so
        raise ModelError(f"cannot read model {path!r}: no such file")
    onnx = require_onnx()
    try:
        model = onnx.load(path)
    except Exception as e:  # protobuf raises its own DecodeError, and more
        raise ModelError(f"{path}: not a readable ONNX model: {e}") from None
    if not model.graph.output:  # protobuf reads any empty message, an empty file included
        raise ModelError(f"{path}: not a usable ONNX model: its graph has no outputs"
                         + (" (the file is empty)" if os.path.getsize(path) == 0 else ""))
    graph = convert(model, input_shapes, name=os.path.splitext(os.path.basename(path))[0], freeze=freeze)
    return graph, model_json.graph_digest(graph)


def _dims(vi, fixed, where):
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        if vi.name in fixed:
            return tuple(fixed[vi.name])
        raise ModelError(f"{where}: has no shape; fix it with --input-shape {vi.name}=D0,D1,...")
    if vi.name in fixed:
        dims = tuple(fixed[vi.name])
        if len(dims) != len(t.shape.dim):
            raise ModelError(f"{where}: --input-shape gives rank {len(dims)}, the model says rank {len(t.shape.dim)}")
        for i, (d, given) in enumerate(zip(t.shape.dim, dims)):
            if d.HasField("dim_value") and d.dim_value >= 0 and d.dim_value != given:
                raise ModelError(f"{where}: --input-shape gives dimension {i} = {given}, the model fixes it to {d.dim_value}")
        return dims
    out = []
    for i, d in enumerate(t.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            out.append(int(d.dim_value))
        else:  # (some exporters write a dynamic dimension as -1)
            what = f"symbolic ({d.dim_param or '?'!r})" if not d.HasField("dim_value") else \
                f"{d.dim_value} (dynamic)"
            raise ModelError(f"{where}: dimension {i} is {what}; fix it with "
                             f"--input-shape {vi.name}=" + ",".join(
                                 str(x.dim_value) if x.HasField("dim_value") and x.dim_value >= 0 else "N"
                                 for x in t.shape.dim))
    return tuple(out)


def _check_outputs(graph, declared, dims_too=True):
    """Each graph output's declared element type and static dimensions agree with what
    the graph computes (our own shape rules). Symbolic or missing dimensions, a missing
    shape and an undefined element type are not checked, nor are the dimensions (the
    rank is) where `dims_too` is false: the user's --input-shape may have changed them. Needs every shape to be known
    here (the --freeze-input values are constants by now): if inference fails (an
    error that the compile reports itself, naming the node), nothing is checked.
    This is the front of `pipeline.prepare` with nothing folded but what shapes need."""
    from compiler.passes import fold, infer, schedule, validate

    try:
        g, _ = fold.run(validate.run(graph), fold_constants=False)
        info = infer.run(g, schedule.run(g))
    except Exception:  # noqa: BLE001 - the compile meets the same error and reports it properly
        return
    for vi in declared:
        t = vi.type.tensor_type
        got = info.get(vi.name)
        if got is None or not vi.type.HasField("tensor_type"):
            continue
        dt = ELEM_DTYPES.get(t.elem_type)
        dt_ok = t.elem_type == 0 or dt == got.dtype
        shape_ok = True
        if t.HasField("shape"):
            dims = t.shape.dim
            shape_ok = len(dims) == len(got.shape) and (not dims_too or all(
                not d.HasField("dim_value") or d.dim_value == g_d for d, g_d in zip(dims, got.shape)))
        if dt_ok and shape_ok:
            continue
        onnx = require_onnx()
        if t.elem_type == 0:
            want_dt = "?"
        elif dt is None:
            want_dt = onnx.TensorProto.DataType.Name(t.elem_type) if t.elem_type in onnx.TensorProto.DataType.values() \
                else str(t.elem_type)
        else:
            want_dt = dt
        want = _type_str(want_dt, [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                   for d in t.shape.dim]) if t.HasField("shape") else f"{want_dt} (shape not declared)"
        raise ModelError(f"output {vi.name!r}: the model declares it {want}, but the graph computes "
                         f"{_type_str(got.dtype, got.shape)}")


def _type_str(dt, dims):
    return f"{dt}[{', '.join(str(d) for d in dims)}]"


def _note(msg):
    """A note for the user, once per import: a warning of the `aotplan` logger (printed on
    stderr unless the application configures logging), as the executor's notes are."""
    import logging

    logging.getLogger("aotplan.import").warning("aotplan: %s", msg)
