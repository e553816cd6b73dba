"""The dtypes aotplan accepts, and how each is stored on the device.

Policy (docs/design.md, "Dtypes"):
- float32, float16, bfloat16 (ml_dtypes), int8, uint8, int32 are stored as themselves.
- bool is stored as one byte (0 or 1).
- int64 is *narrowed* to int32 on the device: JAX runs with x64 off, and the executor
  must not flip a process-wide switch. Constants are range-checked when compiling;
  inputs are range-checked on every feed; int64 outputs are widened back on the host.
"""

import ml_dtypes
import numpy as np

from aotplan.errors import LimitError, ModelError

DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}

# logical dtype -> the dtype the device holds
STORAGE = {name: ("int32" if name == "int64" else name) for name in DTYPES}

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int8", "uint8", "int32", "int64")

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


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
    """Convert a host array of dtype `logical` to its storage dtype.

    int64 -> int32 after a range check that names `where`; everything else unchanged.
    """
    if logical != "int64":
        return np.asarray(array, dtype=DTYPES[logical], order="C")
    a = np.asarray(array, dtype=np.int64)
    if a.size and (a.min() < INT32_MIN or a.max() > INT32_MAX):
        bad = a.min() if a.min() < INT32_MIN else a.max()
        raise LimitError(
            f"{where}: int64 value {int(bad)} is outside the int32 range that aotplan stores "
            f"int64 as ([{INT32_MIN}, {INT32_MAX}])"
        )
    return np.asarray(a.astype(np.int32), order="C")


def from_storage(array, logical):
    """Convert a device-read array back to its logical dtype on the host."""
    return np.asarray(array).astype(DTYPES[logical], copy=False)
