"""Device-shape math: what a tensor of a logical shape and dtype occupies.

Version 1 has one format, `default`: row-major logical shape (NCHW for 4-D
activations), no padding inside the tensor. Other formats (nhwc, aligned, blocked)
are a later issue; each will state its device shape and bytes here.

The arena is an array of 4-byte words (uint32): XLA reads a float32 view of a uint32
arena as one bitcast, where a uint8 arena makes it assemble every float from bytes
(measured 2x slower on a tanh kernel). Every tensor starts at a multiple of
`ALIGNMENT` bytes. Offsets inside kernels are word indices held in int32, so the
largest arena is (2**31 - 1) words, rounded down to the alignment: just under 8 GiB.
"""

import math

from aotplan import dtypes
from aotplan.errors import LimitError

FORMATS = ("default",)
WORD_BYTES = 4
ALIGNMENT = 64  # bytes; a cache line, and the widest vector load on this CPU
MAX_ARENA_WORDS = 2**31 - 1
MAX_ARENA_BYTES = (MAX_ARENA_WORDS * WORD_BYTES) // ALIGNMENT * ALIGNMENT


def num_elements(shape):
    return math.prod(shape)


def device_shape(shape, fmt="default"):
    if fmt != "default":
        raise LimitError(f"format {fmt!r} is not supported (supported: {', '.join(FORMATS)})")
    return tuple(shape)


def nbytes(shape, dtype, fmt="default"):
    """Bytes the device holds for this tensor (storage dtype, device shape)."""
    return num_elements(device_shape(shape, fmt)) * dtypes.itemsize(dtype)


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
