"""model.json, version 1: read and write.

    {
      "format": "aotplan.model", "version": 1, "name": "cnn",
      "inputs":  [{"name": "x", "dtype": "float32", "shape": [1, 3, 32, 32]}],
      "outputs": ["logits"],
      "weights": {"file": "weights.safetensors",
                  "tensors": [{"name": "conv1.w", "dtype": "float32", "shape": [16, 3, 3, 3]}]},
      "constants": [{"name": "axes", "dtype": "int64", "shape": [1], "value": [1]}],
      "nodes": [{"name": "conv1", "op": "conv2d", "inputs": ["x", "conv1.w"],
                 "outputs": ["h1"], "attrs": {"pads": [1, 1, 1, 1]}}],
      "states": [{"input": "past_k", "output": "present_k", "init": "zeros"}]
    }

`states` (optional): tensors kept on the device across steps (a KV cache). Each pairs
a graph input (its value before a step: never fed) with a tensor a node writes (its
value after: never returned, so it is not listed in `outputs`), of the same dtype and
shape; `init` is "zeros" (the default) or the name of a weight or constant holding the
value before the first step.

Weights live in a sidecar file (path relative to model.json): `.safetensors` (what
`save` and `aotplan import onnx` write: safetensors_weights.py), or `.npz` as earlier
releases wrote them (read with `allow_pickle=False`; still read, for one release).
Every weight's dtype is declared in model.json and checked against the file's header
before its bytes are read; `.npz` cannot hold bfloat16, so there a weight may be stored
as raw bits of the same width (bfloat16 as uint16, bool as uint8) and is viewed as its
declared dtype. Small constants may be inline (`value`, a nested list or scalar).
"""

import hashlib
import json
import os
import re
import sys
import tokenize
import zipfile
import zlib

import ml_dtypes
import numpy as np

from aotplan.core import dtypes, fileio, safetensors_weights
from aotplan.core.errors import ModelError
from aotplan.core.graph import Constant, Graph, Node, State, TensorInfo, freeze, has_control_char, thaw

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
WEIGHTS_FILE = "weights.safetensors"  # what `save` (and `aotplan import onnx`) writes
TOP_KEYS = ("format", "version", "name", "inputs", "outputs", "nodes", "weights", "constants", "metadata", "states")
STATE_KEYS = ("input", "output", "init")
NODE_KEYS = ("name", "op", "inputs", "outputs", "attrs")
TENSOR_KEYS = ("name", "dtype", "shape")


def _keys(obj, allowed, where):
    """Unknown keys are errors: a misspelt "attrs" must not silently mean no attributes."""
    if not isinstance(obj, dict):
        raise ModelError(f"{where}: expected an object, got {type(obj).__name__}")
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
    _unicode(value, where)
    if has_control_char(value):
        raise ModelError(f"{where}: name {value!r} holds a control character")
    return value


def _unicode(value, where):
    """Names end up in plans (UTF-8): a lone surrogate (JSON "\\ud800") cannot."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ModelError(f"{where}: {value!r} is not valid Unicode (it holds a lone surrogate)") from None


def _open_weights(path, where):
    """The weights file: .safetensors (safetensors_weights.Reader) or, as earlier
    releases wrote it, .npz (a ZipFile of .npy members)."""
    if path.lower().endswith(".safetensors"):
        if not os.path.isfile(path):
            raise ModelError(f"{where}: weights file {path!r} not found")
        return safetensors_weights.Reader(path, where)
    return _open_npz(path, where)


def _open_npz(path, where):
    if os.path.isdir(path):
        raise ModelError(f"{where}: weights file {path!r} is a directory, not an .npz archive")
    if not os.path.isfile(path):
        raise ModelError(f"{where}: weights file {path!r} not found")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise ModelError(f"{where}: weights file {path!r} is not an .npz archive: {e}") from None


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
# what a damaged or hostile member can raise while being read (never unpickled): numpy's
# header parser lets TypeError (a bytes key) and tokenize's TokenError through; zipfile
# raises RuntimeError for encrypted members, NotImplementedError for unknown compression
_NPY_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError,
               MemoryError, TypeError, SyntaxError, tokenize.TokenError)


def _read_weight(archive, wfile, name, dtype, shape, where):
    """One declared weight from the open .npz: its header is checked against the
    declaration before any data is read (a wrong or huge shape allocates nothing)."""
    member = f"{name}.npy"  # np.savez's naming
    try:
        info = archive.getinfo(member)
    except KeyError:
        raise ModelError(f"{where}: not found in weights file {wfile!r}") from None
    try:
        with archive.open(member) as f:
            version = np.lib.format.read_magic(f)
            if version in _NPY_HEADERS:
                stored_shape, _, stored_dtype = _NPY_HEADERS[version](f)
                _check_declared(stored_dtype, tuple(stored_shape), dtype, shape, where)
                need = int(np.prod(stored_shape, dtype=object)) * stored_dtype.itemsize
                if f.tell() + need > info.file_size:  # a short member: refuse before allocating
                    raise ModelError(f"{where}: weights file {wfile!r} holds {max(info.file_size - f.tell(), 0)} "
                                     f"bytes of it, its shape needs {need}")
        with archive.open(member) as f:
            arr = np.lib.format.read_array(f, allow_pickle=False)
    except ModelError:
        raise
    except _NPY_ERRORS as e:
        raise ModelError(f"{where}: cannot read it from weights file {wfile!r}: {_reason(e)}") from None
    return _as_declared(arr, dtype, shape, where)


def _reason(e, limit=200):
    """An exception from parsing hostile bytes as one short line, without the object
    reprs (`<ast.Name object at 0x...>`) numpy's header parser puts in its messages."""
    text = " ".join(re.sub(r"<[^<>]* object at 0x[0-9a-fA-F]+>", "(?)", str(e)).split())
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _check_declared(stored_dtype, stored_shape, dtype, shape, where):
    """-> how to take the stored array as its declared dtype: None (as it is), "bits"
    (a view: raw bits of the same width) or "byteswap" (the declared dtype in the other
    byte order, as big-endian writers store it: converted)."""
    want = dtypes.np_dtype(dtype)
    if stored_shape != shape:
        raise ModelError(f"{where}: stored shape {stored_shape} != declared {shape}")
    if stored_dtype == want:
        return None
    if not stored_dtype.isnative and stored_dtype.newbyteorder("=") == want:
        return "byteswap"
    if (stored_dtype.kind in "uiV" and stored_dtype.itemsize == want.itemsize and stored_dtype.isnative
            and stored_dtype.fields is None and stored_dtype.subdtype is None
            and dtype in ("bfloat16", "float16", "bool")):
        return "bits"  # raw bits of the same width
    raise ModelError(f"{where}: stored dtype {stored_dtype} does not match declared dtype {dtype}")


def _as_declared(arr, dtype, shape, where):
    """A stored weight as its declared dtype (raw bits of the same width viewed, the
    other byte order converted)."""
    if not isinstance(arr, np.ndarray):
        raise ModelError(f"{where}: stored value is not an array")
    how = _check_declared(arr.dtype, tuple(arr.shape), dtype, shape, where)
    if how is None:
        return arr
    if how == "byteswap":
        return arr.astype(dtypes.np_dtype(dtype))
    out = np.asarray(arr, order="C").view(dtypes.np_dtype(dtype))
    if dtype == "bool" and np.any(out.view(np.uint8) > 1):
        raise ModelError(f"{where}: bool weight holds values other than 0 and 1")
    return out


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
        # (ml_dtypes' finfo knows bfloat16 too; numpy's own refuses it from numpy 2.5)
        finfo = ml_dtypes.finfo(dtypes.np_dtype(dtype))
        # (JSON has no infinity: a literal past float64's range, 1e400, parses as one)
        if not abs(v) <= float(finfo.max):
            shown = (repr(v) if len(repr(v)) <= 24 else f"{v:g}") if abs(v) < 1e308 else \
                f"beyond {'-' if v < 0 else ''}1e308"
            raise ModelError(f"{where}: value {shown} overflows {dtype} (max {float(finfo.max):g}; JSON has no "
                             f"infinity: a constant that holds one goes in the weights file)")
        return float(v)
    if not isinstance(v, int):
        raise ModelError(f"{where}: {dtype} values must be integers, got {v!r}")
    info = np.iinfo(dtypes.np_dtype(dtype))
    if not info.min <= v <= info.max:
        raise ModelError(f"{where}: value {v} is outside the {dtype} range [{info.min}, {info.max}]")
    return v


def _nested_shape(value, where):
    """The shape of a rectangular nested list (a scalar: ()), or an error."""
    if not isinstance(value, list):
        return ()
    if not value:
        return (0,)
    subs = {_nested_shape(v, where) for v in value}
    if len(subs) != 1:
        raise ModelError(f"{where}: inline value is not a rectangular nested list")
    return (len(value),) + subs.pop()


def _inline(value, dtype, shape, where):
    flat = [_check_scalar(v, dtype, where) for v in _scalars(value, where)]
    nested = _nested_shape(value, where)
    # a nested list stops at its first empty dimension: [[], []] is a (2, 0, ...) tensor
    want = shape[:shape.index(0) + 1] if 0 in shape else shape
    if nested != want:
        raise ModelError(f"{where}: inline value has shape {nested}, declared {shape}")
    np_dt = dtypes.np_dtype(dtype)
    return np.array(flat, dtype=np.float64 if dtype in dtypes.FLOAT_DTYPES else np_dt).astype(np_dt).reshape(shape)


def parse(doc, base_dir, allow_outside_weights=False):
    """A parsed model.json document -> Graph (structure only; `validate` checks the rest).
    `base_dir`: model.json's folder, where its weights file lies (`load`)."""
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
    _unicode(name, f"{where}.name")

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
        tensors = _req(weights, "tensors", list, "weights")
        path = _weights_file(base_dir, wfile, allow_outside_weights)
        with _open_weights(path, "weights.file") as archive:
            for i, t in enumerate(tensors):
                w = f"weights.tensors[{i}]"
                n = _name(_req(t, "name", str, w), w + ".name")
                _keys(t, TENSOR_KEYS, f"weight {n!r}")
                dt = dtypes.check_dtype(t.get("dtype"), f"weight {n!r}")
                shape = _shape(_req(t, "shape", list, w), f"weight {n!r}")
                data = (archive.read(n, dt, shape, f"weight {n!r}") if isinstance(archive, safetensors_weights.Reader)
                        else _read_weight(archive, wfile, n, dt, shape, f"weight {n!r}"))
                constants.append(Constant(n, dt, shape, data))
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
    states = _states(doc.get("states", []), outputs, constants)
    return Graph(name, tuple(inputs), tuple(outputs) + tuple(st.output for st in states), tuple(nodes),
                 tuple(constants), states)


def _states(doc_states, outputs, constants):
    """model.json's `states` -> (State, ...); a state's output is appended to the graph's
    outputs by the caller (the Graph IR keeps it there, `Graph.returned` leaves it out)."""
    if not isinstance(doc_states, list):
        raise ModelError("model.json.states: expected a list")
    values = {c.name: c.data for c in constants}
    states = []
    for i, st in enumerate(doc_states):
        w = f"states[{i}]"
        _keys(st, STATE_KEYS, w)
        inp = _name(_req(st, "input", str, w), w + ".input")
        out = _name(_req(st, "output", str, w), w + ".output")
        if out in outputs:
            raise ModelError(f"{w}: output {out!r} is a state's update, which a step does not return: list it in "
                             f"`states` only, not in `outputs`")
        init = st.get("init", "zeros")
        if init == "zeros":
            value = None
        elif isinstance(init, str) and init in values:
            value = values[init]
        else:
            raise ModelError(f"{w}.init: expected \"zeros\" or the name of a weight or constant, got {init!r}")
        states.append(State(inp, out, value))
    return tuple(states)


def _weights_file(base_dir, wfile, allow_outside):
    """The weights file's path: beside model.json or below its folder, unless the caller
    allows any (a model.json that names ../../x or /etc/x would have its file read and
    baked into the plan)."""
    path = os.path.join(base_dir, wfile)
    if allow_outside:
        return path
    inside = not os.path.isabs(wfile) and ".." not in re.split(r"[\\/]", wfile)
    base = os.path.realpath(base_dir)
    if inside and os.path.exists(path):  # a symbolic link on the way may lead out
        inside = os.path.commonpath([os.path.realpath(path), base]) == base
    if not inside:
        raise ModelError(f"weights.file {wfile!r}: a weights file lies beside model.json or in a folder below it "
                         f"(to read one elsewhere: compile --allow-outside-weights, or "
                         f"model_json.load(path, allow_outside_weights=True))")
    return path


def load(path, allow_outside_weights=False):
    """Read model.json (and its weights) -> (Graph, model digest hex). The weights file
    must lie beside model.json or below its folder, unless `allow_outside_weights`."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ModelError(f"cannot read model {path!r}: {fileio.why(e)}") from None
    try:
        # strictly: json.loads(bytes) would let UTF-8-encoded surrogates through
        text = raw.decode(json.detect_encoding(raw))
    except (UnicodeDecodeError, LookupError) as e:
        raise ModelError(f"{path}: not valid JSON: cannot decode the text: {e}") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_nan)
    except _NotStrictJSON as e:
        raise ModelError(f"{path}: {e}") from None
    except RecursionError:
        raise ModelError(f"{path}: JSON is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, huge integers
        raise ModelError(f"{path}: not valid JSON: {e}") from None
    try:
        graph = parse(doc, os.path.dirname(os.path.abspath(path)), allow_outside_weights)
    except RecursionError:
        raise ModelError(f"{path}: a value (an attribute or a constant) is nested too deeply") from None
    return graph, graph_digest(graph)


class _NotStrictJSON(ValueError):
    """What Python's json module lets through and model.json does not (`load` names the file)."""


def _no_nan(token):
    raise _NotStrictJSON(f"{token} is not valid JSON (write numbers only)")


def _no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise _NotStrictJSON(f"key {k!r} appears twice in one object")
        seen[k] = v
    return seen


def graph_digest(graph):
    """sha256 over the graph's structure and constant bytes (independent of file paths,
    and of the byte order a constant's array happens to have: its little-endian bytes)."""
    h = hashlib.sha256()
    h.update(repr((graph.name, graph.inputs, graph.outputs, graph.nodes)).encode())
    for st in graph.states:  # (nothing for a model without: its digest is what it was)
        h.update(repr(("state", st.input, st.output)).encode())
        if st.init is not None:
            h.update(np.ascontiguousarray(st.init).astype(st.init.dtype.newbyteorder("<"), copy=False).tobytes())
    for c in sorted(graph.constants, key=lambda c: c.name):
        h.update(repr((c.name, c.dtype, c.shape)).encode())
        a = np.asarray(c.data, order="C")
        if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
            a = a.astype(a.dtype.newbyteorder("<"))
        h.update(a.tobytes())
    return h.hexdigest()


def to_doc(graph, weights_file=WEIGHTS_FILE, inline_max=16):
    """Graph -> (model.json document, {name: array to store in the weights file}; bfloat16
    as its bits, uint16, which .npz can hold). A state's initial value is written as a
    weight or constant of its own."""
    stored, wt, inline = {}, [], []
    taken = {c.name for c in graph.constants} | {t.name for t in graph.inputs} | {
        o for n in graph.nodes for o in n.outputs}
    states, init_consts = [], []
    for st in graph.states:
        init = "zeros"
        if st.init is not None:
            init = f"{st.input}.init"
            while init in taken:
                init += "_"
            taken.add(init)
            init_consts.append(Constant(init, dtypes.dtype_name(st.init.dtype), tuple(st.init.shape), st.init))
        states.append({"input": st.input, "output": st.output, "init": init})
    for c in graph.constants + tuple(init_consts):
        finite = c.dtype not in dtypes.FLOAT_DTYPES or bool(np.all(np.isfinite(c.data.astype(np.float32))))
        if c.data.size <= inline_max and c.dtype != "bfloat16" and finite:
            inline.append({"name": c.name, "dtype": c.dtype, "shape": list(c.shape), "value": c.data.tolist()})
        else:
            wt.append({"name": c.name, "dtype": c.dtype, "shape": list(c.shape)})
            stored[c.name] = c.data.view(np.uint16) if c.dtype == "bfloat16" else c.data
    doc = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION, "name": graph.name,
        "inputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in graph.inputs],
        "outputs": list(graph.returned),
        "nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs), "outputs": list(n.outputs),
                   "attrs": {k: thaw(v) for k, v in n.attrs}} for n in graph.nodes],
    }
    if wt:
        doc["weights"] = {"file": weights_file, "tensors": wt}
    if inline:
        doc["constants"] = inline
    if states:
        doc["states"] = states
    return doc, stored


def weights_path(path):
    """The weights file a model.json names, as a path; None if it names none or cannot
    be read (`load` says why)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        return os.path.join(os.path.dirname(os.path.abspath(path)), doc["weights"]["file"])
    except Exception:
        return None


def save(graph, path, weights_file=WEIGHTS_FILE):
    """Write model.json and its weights beside it (each atomically) -> whether a
    weights file was written (small constants are inline in model.json). The weights
    file is .safetensors, or .npz where `weights_file` says so."""
    from aotplan.core.fileio import atomic_write

    doc, stored = to_doc(graph, weights_file)
    base = os.path.dirname(os.path.abspath(path))
    if stored:
        if weights_file.lower().endswith(".npz"):
            from aotplan.core.fileio import npz_bytes

            data = npz_bytes(stored)
        else:
            declared = {t["name"]: t["dtype"] for t in doc["weights"]["tensors"]}
            data = safetensors_weights.encode({k: (v.view(dtypes.np_dtype("bfloat16")) if declared[k] == "bfloat16"
                                                   else v) for k, v in stored.items()})
        atomic_write(os.path.join(base, weights_file), data)
    atomic_write(path, dumps(doc).encode())
    return bool(stored)


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
