"""Storage formats: what a tensor of a logical shape and dtype occupies on the device.

Device-shape math only (numpy): the executor and `aotplan inspect` need it, the
compiler's JAX conversions (compiler/formats.py) follow it. A format is named in the
plan by a string; parameterized formats carry their parameter: "aligned:16",
"nc1hwc0:16". Each format states the logical ranks it accepts:

| format | ranks | device shape of a logical shape | padding |
| --- | --- | --- | --- |
| `default` | any | the logical shape, row-major (NCHW for 4-D activations) | none |
| `nhwc` | 0-4 | lower ranks padded to 4-D (`pad4`), then (N, H, W, C) | none |
| `aligned:M` | >= 1 | the innermost dimension rounded up to a multiple of M elements | innermost |
| `nc1hwc0:C0` | 0-4 | padded to 4-D, then (N, C1, H, W, C0), C1 = ceil(C / C0) | the last block's lanes |

`pad4` (the seed design's rule for lower ranks): () -> (1, 1, 1, 1); (C,) -> (1, C, 1, 1);
(N, C) -> (N, C, 1, 1); (N, C, H) -> (N, C, H, 1).

The parameter rules (`param_for`): one vector register's worth of elements. On the
CPU (AVX-512: 64 bytes) M = C0 = 64 / itemsize (16 for float32, 32 for float16 and
bfloat16, 64 for int8); on CUDA GPUs M = C0 = 16 / itemsize (8 for float16 and
bfloat16: a tensor-core fragment's k; 4 for float32: one 128-bit load).

Padding is zeros: every kernel writes a tensor's whole device shape with zeros in the
padding, and every op that reads a padded tensor keeps the padding out of its result
(docs/formats.md, "Storage formats").

The arena is an array of 4-byte words (uint32): XLA reads a float32 view of a uint32
arena as one bitcast, where a uint8 arena makes it assemble every float from bytes
(measured 2x slower on a tanh kernel). Every tensor starts at a multiple of
`ALIGNMENT` bytes. Offsets inside kernels are word indices held in int32, so the
largest arena is (2**31 - 1) words, rounded down to the alignment: just under 8 GiB.
"""

import math

import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import LimitError

FORMAT_NAMES = ("default", "nhwc", "aligned", "nc1hwc0")
PARAMETERIZED = ("aligned", "nc1hwc0")
MAX_PARAM = 1024  # elements: an aligned multiple or a block's lanes
VECTOR_BYTES = {"cpu": 64, "cuda": 16}  # the parameter rule: one vector's worth of elements
WORD_BYTES = 4
ALIGNMENT = 64  # bytes; a cache line, and the widest vector load on this CPU
MAX_ARENA_WORDS = 2**31 - 1
MAX_ARENA_BYTES = (MAX_ARENA_WORDS * WORD_BYTES) // ALIGNMENT * ALIGNMENT


class FormatError(LimitError):
    """A format name this version does not know, or a shape the format cannot hold."""


def parse(fmt):
    """"nc1hwc0:16" -> ("nc1hwc0", 16); "default" -> ("default", None). Refuses unknown
    names and bad parameters with a FormatError naming them."""
    if not isinstance(fmt, str):
        raise FormatError(f"format {fmt!r} is not a string")
    name, sep, p = fmt.partition(":")
    if name not in FORMAT_NAMES:
        raise FormatError(f"format {fmt!r} is not supported (supported: default, nhwc, aligned:M, nc1hwc0:C0)")
    if name not in PARAMETERIZED:
        if sep:
            raise FormatError(f"format {fmt!r}: {name} takes no parameter")
        return name, None
    if not (p.isdigit() and p == str(int(p)) and 1 <= int(p) <= MAX_PARAM):
        raise FormatError(f"format {fmt!r}: {name} needs a parameter 1..{MAX_PARAM}, as in {name}:16")
    return name, int(p)


def make(name, param=None):
    s = name if param is None else f"{name}:{param}"
    parse(s)
    return s


def param_for(dtype, target="cpu"):
    """The aligned multiple and the nc1hwc0 block C0 for `dtype` on `target`."""
    return max(1, VECTOR_BYTES[target] // dtypes.itemsize(dtype))


def is_known(fmt):
    try:
        parse(fmt)
        return True
    except FormatError:
        return False


def accepts(fmt, rank):
    """Whether `fmt` holds tensors of logical rank `rank`."""
    name, _ = parse(fmt)
    if name in ("nhwc", "nc1hwc0"):
        return 0 <= rank <= 4
    if name == "aligned":
        return rank >= 1
    return True


def pad4(shape):
    """A logical shape of rank <= 4 as the 4-D (N, C, H, W) the 4-D formats see."""
    shape = tuple(shape)
    r = len(shape)
    if r > 4:
        raise FormatError(f"shape {list(shape)}: rank {r} cannot be padded to 4-D")
    if r == 1:
        return (1, shape[0], 1, 1)
    return (shape + (1, 1, 1, 1))[:4] if r else (1, 1, 1, 1)


def _check(shape, fmt):
    if not accepts(fmt, len(shape)):
        raise FormatError(f"format {fmt!r} does not hold rank-{len(shape)} tensors (shape {list(shape)})")


def num_elements(shape):
    return math.prod(shape)


def device_shape(shape, fmt="default"):
    """The device shape of a logical `shape` stored in `fmt`."""
    shape = tuple(shape)
    _check(shape, fmt)
    name, p = parse(fmt)
    if name == "default":
        return shape
    if name == "aligned":
        return shape[:-1] + (-(-shape[-1] // p) * p,)
    n, c, h, w = pad4(shape)
    if name == "nhwc":
        return (n, h, w, c)
    return (n, -(-c // p), h, w, p)


def padding(shape, fmt="default"):
    """Per device dimension, the elements at its end that hold padding (zeros)."""
    shape = tuple(shape)
    dev = device_shape(shape, fmt)
    name, p = parse(fmt)
    pad = [0] * len(dev)
    if name == "aligned":
        pad[-1] = dev[-1] - shape[-1]
    elif name == "nc1hwc0":
        c = pad4(shape)[1]
        # the blocks' lanes past C: C1 * C0 - C lanes, all in the last block
        pad[4] = (dev[1] * p - c) if c else 0
    return tuple(pad)


def padded_elements(shape, fmt="default"):
    return num_elements(device_shape(shape, fmt)) - num_elements(shape)


def nbytes(shape, dtype, fmt="default"):
    """Bytes the device holds for this tensor (storage dtype, device shape)."""
    return num_elements(device_shape(shape, fmt)) * dtypes.itemsize(dtype)


def from_device(y, shape, fmt):
    """A device array in `fmt` -> the logical array of `shape` (padding dropped)."""
    y = np.asarray(y)
    shape = tuple(shape)
    name, _ = parse(fmt)
    if tuple(y.shape) != device_shape(shape, fmt):
        raise FormatError(f"array of shape {list(y.shape)} is not the device shape "
                          f"{list(device_shape(shape, fmt))} of {list(shape)} in {fmt}")
    if name == "default":
        return y
    if name == "aligned":
        return np.ascontiguousarray(y[..., :shape[-1]])
    if name == "nhwc":
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2)).reshape(shape)
    n, c1, h, w, c0 = y.shape
    c = pad4(shape)[1]
    x4 = y.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :c]
    return np.ascontiguousarray(x4).reshape(shape)


def words(nb):
    """4-byte words needed for `nb` bytes."""
    return (nb + WORD_BYTES - 1) // WORD_BYTES


def align_up(n, alignment=ALIGNMENT):
    return (n + alignment - 1) // alignment * alignment


def check_arena_bytes(arena_bytes, what="arena"):
    """Refuse an arena that word indices in int32 cannot address."""
    if arena_bytes > MAX_ARENA_BYTES:
        raise LimitError(
            f"{what} needs {arena_bytes} bytes, more than the {MAX_ARENA_BYTES} bytes "
            f"(~8 GiB) that int32 word offsets can address"
        )
    return arena_bytes
