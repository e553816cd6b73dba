"""Tensors on the open inference protocol (KServe v2 / Triton): datatype names, and a
request's input checked against the plan before anything runs.

A request tensor is checked for its name, datatype, shape and element count before its
data is turned into an array, so a wrong request is one error naming the input (HTTP
400 / gRPC INVALID_ARGUMENT) and nothing reaches the session.
"""

from dataclasses import dataclass

import ml_dtypes
import numpy as np

# aotplan's logical dtypes -> the protocol's datatype names (Triton's table)
DATATYPES = {
    "bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
    "float16": "FP16", "bfloat16": "BF16", "float32": "FP32", "float64": "FP64",
}
_NUMPY = {DATATYPES[k]: np.dtype(ml_dtypes.bfloat16 if k == "bfloat16" else k) for k in DATATYPES}


class RequestError(ValueError):
    """A request the plan cannot take; its message names the input or field."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the protocol shows it: `shape[0]` is -1 where the model
    takes a variable number of rows (batch profiles, or batching on)."""

    name: str
    dtype: str  # aotplan's logical dtype
    shape: tuple

    @property
    def datatype(self):
        return DATATYPES[self.dtype]

    def metadata(self):
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def decode(spec, datatype, shape, raw, data, max_rows):
    """-> the request tensor as a numpy array of `spec`'s dtype, or RequestError naming it.

    `raw`: its binary data (bytes) or None; `data`: its JSON values (a flat or nested
    list) where `raw` is None. `max_rows`: the most rows a variable first axis takes."""
    if datatype != spec.datatype:
        raise RequestError(f"input {spec.name!r}: datatype {datatype}, the model takes {spec.datatype}")
    shape = _check_shape(spec, shape, max_rows)
    want = int(np.prod(shape, dtype=np.int64))
    dtype = _NUMPY[datatype]
    if raw is not None:
        if len(raw) != want * dtype.itemsize:
            raise RequestError(f"input {spec.name!r}: {len(raw)} bytes of data, shape {list(shape)} of {datatype} "
                               f"is {want * dtype.itemsize}")
        if datatype == "BOOL" and raw and max(raw) > 1:
            raise RequestError(f"input {spec.name!r}: BOOL data holds a byte other than 0 or 1")
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
    return _from_json(spec, data, shape, dtype, want)


def _check_shape(spec, shape, max_rows):
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise RequestError(f"input {spec.name!r}: shape must be a list of integers, got {shape!r}")
    shape = tuple(int(d) for d in shape)
    want = spec.shape
    if len(shape) != len(want) or any(w != -1 and d != w for d, w in zip(shape, want)):
        raise RequestError(f"input {spec.name!r}: shape {list(shape)}, the model takes {_shape_text(want, max_rows)}")
    if want and want[0] == -1 and not 1 <= shape[0] <= max_rows:
        raise RequestError(f"input {spec.name!r}: {shape[0]} rows, the model takes 1 to {max_rows}")
    return shape


def _shape_text(shape, max_rows):
    if shape and shape[0] == -1:
        return f"[N, {', '.join(str(d) for d in shape[1:])}] with N from 1 to {max_rows}".replace(", ]", "]")
    return str(list(shape))


def _from_json(spec, data, shape, dtype, want):
    if not isinstance(data, list):
        raise RequestError(f"input {spec.name!r}: no data (give 'data' or binary data)")
    flat = _flatten(spec, data, want)
    if len(flat) != want:
        raise RequestError(f"input {spec.name!r}: {len(flat)} values, shape {list(shape)} holds {want}")
    values = np.array(flat)
    datatype = spec.datatype
    if values.dtype == object:  # (only integers past 64 bits make one: _flatten admits numbers alone)
        raise RequestError(f"input {spec.name!r}: a value outside {datatype}'s range")
    if values.size and values.dtype.kind not in _TAKES[dtype.kind]:
        raise RequestError(f"input {spec.name!r}: {values.dtype.name} values for a {datatype} input")
    if dtype.kind in "iu" and values.size:
        info = np.iinfo(dtype)
        if int(values.min()) < info.min or int(values.max()) > info.max:
            raise RequestError(f"input {spec.name!r}: a value outside {datatype}'s range [{info.min}, {info.max}]")
    return values.astype(dtype).reshape(shape)


# the JSON values numpy reads (its kinds) that each datatype's kind takes: no silent
# truncation of 1.5 to an integer, no number read as a bool
_TAKES = {"b": "b", "i": "iu", "u": "iu", "f": "iuf", "V": "iuf"}


def _flatten(spec, data, want):
    """The numbers of a flat or nested list, depth first; one error for anything else
    (strings, objects, nulls), and no more than `want` + 1 values read."""
    out, stack = [], [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            if len(stack) > 32:
                raise RequestError(f"input {spec.name!r}: data nested too deeply")
            stack.append(iter(item))
        elif isinstance(item, (bool, int, float)):
            out.append(item)
            if len(out) > want:
                break
        else:
            raise RequestError(f"input {spec.name!r}: data holds {type(item).__name__} {str(item)[:40]!r}, not a number")
    return out


_END = object()


def describe(array):
    """-> (datatype, shape) of an output array."""
    return DATATYPES[_dtype_name(array.dtype)], list(array.shape)


def _dtype_name(dtype):
    return "bfloat16" if dtype == ml_dtypes.bfloat16 else np.dtype(dtype).name
