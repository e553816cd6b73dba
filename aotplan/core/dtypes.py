"""The dtypes aotplan accepts, and how each is stored on the device.

Policy (docs/design.md, "Dtypes"):
- float32, float16, bfloat16 (ml_dtypes), int8, uint8, int16, uint16, int32, uint32 are
  stored as themselves; bool is stored as one byte (0 or 1).
- The 64-bit types are *narrowed* on the device: int64 -> int32, uint64 -> uint32,
  float64 -> float32. JAX runs with x64 off, and the executor must not flip a
  process-wide switch. Integer constants are range-checked when compiling and integer
  inputs on every feed; a float64 value beyond float32's range is refused the same
  way; float64 arithmetic has float32 precision. Outputs are widened back on the host.
"""

import ml_dtypes
import numpy as np

from aotplan.core.errors import LimitError, ModelError

DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float64": np.dtype(np.float64),
}

NARROWED = {"int64": "int32", "uint64": "uint32", "float64": "float32"}
# logical dtype -> the dtype the device holds
STORAGE = {name: NARROWED.get(name, name) for name in DTYPES}

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def check_dtype(name, where):
    """Return `name` if it is a supported dtype, else raise naming `where`."""
    if not isinstance(name, str) or name not in DTYPES:
        raise ModelError(f"{where}: unsupported dtype {name!r} (supported: {', '.join(DTYPES)})")
    return name


def np_dtype(name):
    return DTYPES[name]


def storage_dtype(name):
    return STORAGE[name]


def itemsize(name):
    """Bytes per element on the device (the storage dtype's width)."""
    return DTYPES[STORAGE[name]].itemsize


def dtype_name(dt):
    """Our name for a numpy dtype, or None."""
    dt = np.dtype(dt)
    for name, d in DTYPES.items():
        if d == dt:
            return name
    return None


def to_storage(array, logical, where):
    """Convert a host array of dtype `logical` to its storage dtype: the 64-bit types are
    narrowed after a range check that names `where`; everything else is unchanged."""
    a = np.asarray(array, dtype=DTYPES[logical], order="C")
    if logical not in NARROWED:
        return a
    store = STORAGE[logical]
    if logical == "float64":
        lim = float(np.finfo(np.float32).max)
        big = np.isfinite(a) & (np.abs(a) > lim)
        if big.any():
            raise LimitError(f"{where}: float64 value {float(a[big].flat[0])!r} is beyond the float32 range that "
                             f"aotplan computes float64 in (|x| <= {lim:g})")
    else:
        info = np.iinfo(DTYPES[store])
        if a.size and (a.min() < info.min or a.max() > info.max):
            bad = a.min() if a.min() < info.min else a.max()
            raise LimitError(f"{where}: {logical} value {int(bad)} is outside the {store} range that aotplan "
                             f"stores {logical} as ([{info.min}, {info.max}])")
    return np.asarray(a.astype(DTYPES[store]), order="C")


def from_storage(array, logical):
    """Convert a device-read array back to its logical dtype on the host."""
    return np.asarray(array).astype(DTYPES[logical], copy=False)
