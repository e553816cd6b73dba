"""A model.json's weights in a `.safetensors` file (the safetensors package: a JSON
header the library checks, then raw little-endian tensors; never pickle), read and
written. Each weight's dtype and shape are checked against model.json's declaration from
the header, before its bytes are read. (`.npz` weights files are still read:
model_json.py.)"""

import ml_dtypes
import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import ModelError

# safetensors' dtype names -> aotplan's
DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8", "U8": "uint8",
          "I16": "int16", "U16": "uint16", "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64",
          "BOOL": "bool"}


class Reader:
    """`with Reader(path, where) as r: r.read(name, dtype, shape, where)`."""

    def __init__(self, path, where):
        try:
            from safetensors import safe_open
        except ImportError:
            raise ModelError(f"{where}: {path!r} is a .safetensors file: pip install safetensors") from None
        try:
            self._open = safe_open(path, framework="np")
            self._file = self._open.__enter__()  # (closed, its mapping released, in __exit__)
            self._names = set(self._file.keys())
        except Exception as e:  # (the library's SafetensorError, OSError, ...: a damaged file)
            raise ModelError(f"{where}: weights file {path!r} is not a readable .safetensors file: "
                             f"{' '.join(str(e).split())[:200]}") from None
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file = None
        self._open.__exit__(*exc)

    def read(self, name, dtype, shape, where):
        if name not in self._names:
            raise ModelError(f"{where}: not found in weights file {self.path!r}")
        try:
            part = self._file.get_slice(name)
            stored, stored_shape = part.get_dtype(), tuple(part.get_shape())
        except Exception as e:
            raise ModelError(f"{where}: cannot read it from {self.path!r}: {e}") from None
        if stored_shape != tuple(shape):
            raise ModelError(f"{where}: stored shape {stored_shape} != declared {tuple(shape)}")
        if DTYPES.get(stored) != dtype:
            raise ModelError(f"{where}: stored dtype {stored} ({DTYPES.get(stored, 'unsupported')}) != declared "
                             f"{dtype}")
        try:
            arr = self._file.get_tensor(name)
        except Exception as e:
            raise ModelError(f"{where}: cannot read it from {self.path!r}: {e}") from None
        want = dtypes.np_dtype(dtype)
        if arr.dtype != want:  # (a view of the same bits: the library's numpy type for BF16, say)
            arr = np.ascontiguousarray(arr).view(want)
        return arr.reshape(shape)


def encode(arrays):
    """{name: array} -> the bytes of a .safetensors file (deterministic: no metadata)."""
    from safetensors.numpy import save

    out = {}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        if a.dtype == ml_dtypes.bfloat16 or a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        out[name] = a
    return save(out)
