"""model.json, version 1: read and write.

    {
      "format": "aotplan.model", "version": 1, "name": "cnn",
      "inputs":  [{"name": "x", "dtype": "float32", "shape": [1, 3, 32, 32]}],
      "outputs": ["logits"],
      "weights": {"file": "weights.npz",
                  "tensors": [{"name": "conv1.w", "dtype": "float32", "shape": [16, 3, 3, 3]}]},
      "constants": [{"name": "axes", "dtype": "int64", "shape": [1], "value": [1]}],
      "nodes": [{"name": "conv1", "op": "conv2d", "inputs": ["x", "conv1.w"],
                 "outputs": ["h1"], "attrs": {"pads": [1, 1, 1, 1]}}]
    }

Weights live in a sidecar `.npz` (path relative to model.json), read with
`allow_pickle=False`. Every weight's dtype is declared in model.json: `.npz` cannot
hold bfloat16, so a weight may be stored as raw bits of the same width (bfloat16 as
uint16, bool as uint8) and is viewed as its declared dtype on load. Small constants
may be inline (`value`, a nested list or scalar).
"""

import hashlib
import json
import os
import zipfile

import numpy as np

from aotplan import dtypes
from aotplan.errors import ModelError
from aotplan.graph import Constant, Graph, Node, TensorInfo, freeze, thaw

FORMAT_NAME = "aotplan.model"
FORMAT_VERSION = 1


def _req(obj, key, kind, where):
    if not isinstance(obj, dict):
        raise ModelError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise ModelError(f"{where}: missing field {key!r}")
    val = obj[key]
    if not isinstance(val, kind) or isinstance(val, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ModelError(f"{where}.{key}: expected {names}, got {type(val).__name__}")
    return val


MAX_DIM = 2**31 - 1
TOP_KEYS = ("format", "version", "name", "inputs", "outputs", "nodes", "weights", "constants", "metadata")
NODE_KEYS = ("name", "op", "inputs", "outputs", "attrs")
TENSOR_KEYS = ("name", "dtype", "shape")


def _keys(obj, allowed, where):
    """Unknown keys are errors: a misspelt "attrs" must not silently mean no attributes."""
    extra = sorted(k for k in obj if k not in allowed)
    if extra:
        raise ModelError(f"{where}: unknown field {extra[0]!r} (allowed: {', '.join(allowed)})")


def _shape(value, where):
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in value
    ):
        raise ModelError(f"{where}: shape must be a list of integers in [0, {MAX_DIM}], got {value!r}")
    return tuple(value)


def _name(value, where):
    if not isinstance(value, str) or not value:
        raise ModelError(f"{where}: expected a non-empty name string, got {value!r}")
    return value


def _load_npz(path, where):
    if not os.path.isfile(path):
        raise ModelError(f"{where}: weights file {path!r} not found")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise ModelError(f"{where}: cannot read weights file {path!r}: {e}") from None


def _as_declared(arr, dtype, shape, where):
    """View a stored weight as its declared dtype (raw bits of the same width allowed)."""
    want = dtypes.np_dtype(dtype)
    if tuple(arr.shape) != shape:
        raise ModelError(f"{where}: stored shape {tuple(arr.shape)} != declared {shape}")
    if arr.dtype == want:
        return arr
    if arr.dtype.kind in "uiV" and arr.dtype.itemsize == want.itemsize and dtype in ("bfloat16", "float16", "bool"):
        out = np.asarray(arr, order="C").view(want)
        if dtype == "bool" and np.any(out.view(np.uint8) > 1):
            raise ModelError(f"{where}: bool weight holds values other than 0 and 1")
        return out
    raise ModelError(f"{where}: stored dtype {arr.dtype} does not match declared dtype {dtype}")


def _scalars(value, where):
    """Flatten a nested list of JSON scalars (checking it is rectangular later)."""
    if isinstance(value, list):
        out = []
        for v in value:
            out.extend(_scalars(v, where))
        return out
    return [value]


def _check_scalar(v, dtype, where):
    if dtype == "bool":
        if not isinstance(v, bool):
            raise ModelError(f"{where}: bool values must be true or false, got {v!r}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ModelError(f"{where}: {dtype} values must be numbers, got {v!r}")
    if dtype in dtypes.FLOAT_DTYPES:
        f = float(v) if abs(v) < 1e308 else float("inf")
        finfo = np.finfo(dtypes.np_dtype(dtype))
        if np.isfinite(f) and abs(f) > float(finfo.max):
            raise ModelError(f"{where}: value {v!r} overflows {dtype} (max {float(finfo.max):g})")
        return f
    if not isinstance(v, int):
        raise ModelError(f"{where}: {dtype} values must be integers, got {v!r}")
    info = np.iinfo(dtypes.np_dtype(dtype))
    if not info.min <= v <= info.max:
        raise ModelError(f"{where}: value {v} is outside the {dtype} range [{info.min}, {info.max}]")
    return v


def _inline(value, dtype, shape, where):
    flat = [_check_scalar(v, dtype, where) for v in _scalars(value, where)]
    try:
        nested = np.asarray(value, dtype=object)
    except ValueError:
        raise ModelError(f"{where}: inline value is not a rectangular nested list") from None
    if tuple(nested.shape) != shape or len(flat) != int(np.prod(shape)):
        raise ModelError(f"{where}: inline value has shape {tuple(nested.shape)}, declared {shape}")
    arr = np.array(flat, dtype=np.float64 if dtype in dtypes.FLOAT_DTYPES else None).astype(
        dtypes.np_dtype(dtype)).reshape(shape)
    if tuple(arr.shape) != shape:
        raise ModelError(f"{where}: inline value has shape {tuple(arr.shape)}, declared {shape}")
    return arr


def parse(doc, base_dir):
    """A parsed model.json document -> Graph (structure only; `validate` checks the rest)."""
    where = "model.json"
    if not isinstance(doc, dict):
        raise ModelError(f"{where}: top level must be an object")
    _keys(doc, TOP_KEYS, where)
    if doc.get("format") != FORMAT_NAME:
        raise ModelError(f"{where}.format: expected {FORMAT_NAME!r}, got {doc.get('format')!r}")
    version = doc.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise ModelError(f"{where}.version: version {version!r} is not supported (supported: {FORMAT_VERSION})")
    name = doc.get("name", "model")
    if not isinstance(name, str):
        raise ModelError(f"{where}.name: expected a string")

    inputs = []
    for i, t in enumerate(_req(doc, "inputs", list, where)):
        w = f"inputs[{i}]"
        n = _name(_req(t, "name", str, w), w + ".name")
        _keys(t, TENSOR_KEYS, f"input {n!r}")
        inputs.append(TensorInfo(n, dtypes.check_dtype(t.get("dtype"), f"input {n!r}"),
                                 _shape(_req(t, "shape", list, w), f"input {n!r}")))
    outputs = []
    for i, o in enumerate(_req(doc, "outputs", list, where)):
        outputs.append(_name(o, f"outputs[{i}]"))

    constants = []
    weights = doc.get("weights")
    if weights is not None:
        _keys(weights, ("file", "tensors"), "weights")
        wfile = _req(weights, "file", str, "weights")
        stored = _load_npz(os.path.join(base_dir, wfile), "weights.file")
        for i, t in enumerate(_req(weights, "tensors", list, "weights")):
            w = f"weights.tensors[{i}]"
            n = _name(_req(t, "name", str, w), w + ".name")
            _keys(t, TENSOR_KEYS, f"weight {n!r}")
            dt = dtypes.check_dtype(t.get("dtype"), f"weight {n!r}")
            shape = _shape(_req(t, "shape", list, w), f"weight {n!r}")
            if n not in stored:
                raise ModelError(f"weight {n!r}: not found in weights file {wfile!r}")
            constants.append(Constant(n, dt, shape, _as_declared(stored[n], dt, shape, f"weight {n!r}")))
    if not isinstance(doc.get("constants", []), list):
        raise ModelError(f"{where}.constants: expected a list")
    for i, t in enumerate(doc.get("constants", [])):
        w = f"constants[{i}]"
        n = _name(_req(t, "name", str, w), w + ".name")
        _keys(t, TENSOR_KEYS + ("value",), f"constant {n!r}")
        dt = dtypes.check_dtype(t.get("dtype"), f"constant {n!r}")
        shape = _shape(_req(t, "shape", list, w), f"constant {n!r}")
        if "value" not in t:
            raise ModelError(f"constant {n!r}: missing field 'value'")
        constants.append(Constant(n, dt, shape, _inline(t["value"], dt, shape, f"constant {n!r}")))

    nodes = []
    for i, nd in enumerate(_req(doc, "nodes", list, where)):
        w = f"nodes[{i}]"
        n = _name(_req(nd, "name", str, w), w + ".name")
        _keys(nd, NODE_KEYS, f"node {n!r}")
        op = _name(_req(nd, "op", str, f"node {n!r}"), f"node {n!r}.op")
        # "" marks an omitted optional input (ONNX's convention); validate checks where
        ins = tuple(x if x == "" else _name(x, f"node {n!r}.inputs")
                    for x in _req(nd, "inputs", list, f"node {n!r}"))
        outs = tuple(_name(x, f"node {n!r}.outputs") for x in _req(nd, "outputs", list, f"node {n!r}"))
        attrs = nd.get("attrs", {})
        if not isinstance(attrs, dict):
            raise ModelError(f"node {n!r}.attrs: expected an object")
        nodes.append(Node(n, op, ins, outs, freeze(attrs)))
    return Graph(name, tuple(inputs), tuple(outputs), tuple(nodes), tuple(constants))


def load(path):
    """Read model.json (and its weights) -> (Graph, model digest hex)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ModelError(f"cannot read model {path!r}: {e.strerror}") from None
    try:
        doc = json.loads(raw, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_nan)
    except ModelError:
        raise
    except RecursionError:
        raise ModelError(f"{path}: JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, huge integers
        raise ModelError(f"{path}: not valid JSON: {e}") from None
    try:
        graph = parse(doc, os.path.dirname(os.path.abspath(path)))
    except RecursionError:
        raise ModelError(f"{path}: an attribute is nested too deeply") from None
    return graph, graph_digest(graph)


def _no_nan(token):
    raise ModelError(f"model.json: {token} is not valid JSON (write numbers only)")


def _no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ModelError(f"model.json: key {k!r} appears twice in one object")
        seen[k] = v
    return seen


def graph_digest(graph):
    """sha256 over the graph's structure and constant bytes (independent of file paths)."""
    h = hashlib.sha256()
    h.update(repr((graph.name, graph.inputs, graph.outputs, graph.nodes)).encode())
    for c in sorted(graph.constants, key=lambda c: c.name):
        h.update(repr((c.name, c.dtype, c.shape)).encode())
        h.update(np.asarray(c.data, order="C").tobytes())
    return h.hexdigest()


def to_doc(graph, weights_file="weights.npz", inline_max=16):
    """Graph -> (model.json document, {name: array to store in the npz})."""
    stored, wt, inline = {}, [], []
    for c in graph.constants:
        finite = c.dtype not in dtypes.FLOAT_DTYPES or bool(np.all(np.isfinite(c.data.astype(np.float32))))
        if c.data.size <= inline_max and c.dtype != "bfloat16" and finite:
            inline.append({"name": c.name, "dtype": c.dtype, "shape": list(c.shape), "value": c.data.tolist()})
        else:
            wt.append({"name": c.name, "dtype": c.dtype, "shape": list(c.shape)})
            stored[c.name] = c.data.view(np.uint16) if c.dtype == "bfloat16" else c.data
    doc = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION, "name": graph.name,
        "inputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in graph.inputs],
        "outputs": list(graph.outputs),
        "nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs), "outputs": list(n.outputs),
                   "attrs": {k: thaw(v) for k, v in n.attrs}} for n in graph.nodes],
    }
    if wt:
        doc["weights"] = {"file": weights_file, "tensors": wt}
    if inline:
        doc["constants"] = inline
    return doc, stored


def save(graph, path, weights_file="weights.npz"):
    """Write model.json and its weights beside it (each atomically)."""
    from aotplan.fileio import atomic_write

    doc, stored = to_doc(graph, weights_file)
    base = os.path.dirname(os.path.abspath(path))
    if stored:
        import io

        buf = io.BytesIO()
        np.savez(buf, **stored)
        atomic_write(os.path.join(base, weights_file), buf.getvalue())
    atomic_write(path, dumps(doc).encode())


def dumps(doc):
    """model.json text: one line per input, weight, constant and node (diff-friendly)."""
    parts = []
    for key, val in doc.items():
        if isinstance(val, list) and val and isinstance(val[0], dict):
            body = ",\n".join("    " + json.dumps(v) for v in val)
            parts.append(f'  {json.dumps(key)}: [\n{body}\n  ]')
        elif isinstance(val, dict) and isinstance(val.get("tensors"), list):
            body = ",\n".join("      " + json.dumps(v) for v in val["tensors"])
            rest = "".join(f"{json.dumps(k)}: {json.dumps(v)}, " for k, v in val.items() if k != "tensors")
            parts.append(f'  {json.dumps(key)}: {{{rest}"tensors": [\n{body}\n  ]}}')
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(val)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"
