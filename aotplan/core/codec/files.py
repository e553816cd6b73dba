"""Reading a plan file: its bytes into aligned memory (the header checked before the rest
is read; pipes and devices bounded by the size the header states), decoding errors
named after the file."""

import os
import stat

import numpy as np

from aotplan.core.codec.data import DATA_ALIGN
from aotplan.core.codec.fields import check_path
from aotplan.core.codec.frame import MAGIC, MAX_HEADER_BYTES, PREFIX, stated_size
from aotplan.core.codec.frame import head as check_head
from aotplan.core.codec.plan_file import decode_checked
from aotplan.core.errors import PlanError


def read_bytes(path):
    """A plan file's bytes, as a read-only memoryview whose first byte is DATA_ALIGN-
    aligned in memory, so the data section's constants are aligned there too (XLA's CPU
    client then uses their bytes in place instead of copying them). `path`: a str or
    os.PathLike (bytes in memory: `decode`). The header is read and checked first: a
    file that is not a plan, or whose size is not the one its header states, is refused
    before the rest is read (a pipe or device is read up to that size)."""
    check_path(path, "plan file")
    stated = None
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            first = read_into(f, bytearray(PREFIX.size + MAX_HEADER_BYTES))
            try:
                stated = stated_size(*check_head(first))
            except PlanError as e:
                if len(first) == PREFIX.size + MAX_HEADER_BYTES or first[:len(MAGIC)] != MAGIC:
                    raise named(path, e) from None
                stated = len(first)  # a short file: `split` says what is wrong with it
            if stat.S_ISREG(st.st_mode):
                if st.st_size != stated:
                    raise named(path, PlanError(f"plan is truncated or corrupt: {st.st_size} bytes, the header says "
                                                f"{stated}"))
                view = aligned(stated)  # (the header, read, is part of it)
                view[:len(first)] = first
                return view[:len(first) + len(read_into(f, view[len(first):]))].toreadonly()
            # a pipe or a device: its size is not known, and the header's is only a claim: memory
            # grows with the bytes that come
            data = bytearray(first)
            while len(data) < stated:
                chunk = f.read(min(stated - len(data), 1 << 20))
                if not chunk:
                    break
                data += chunk
            if len(data) == stated and f.read(1):
                raise named(path, PlanError(f"plan is corrupt: more bytes than the {stated} its header states"))
            view = aligned(len(data))
            view[:] = data
            return view.toreadonly()
    except MemoryError:
        raise PlanError(f"cannot read plan {path!r}: not enough memory for its {stated} bytes") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise PlanError(f"cannot read plan {path!r}: {getattr(e, 'strerror', None) or e}") from None


def aligned(n):
    """A writable memoryview of n bytes whose first is DATA_ALIGN-aligned in memory."""
    buf = np.empty(n + DATA_ALIGN, np.uint8)
    at = -buf.ctypes.data % DATA_ALIGN
    return memoryview(buf[at:at + n])


def read_into(f, view):
    """Fill `view` from `f` (short reads: pipes, network filesystems) -> the filled part."""
    view, got = memoryview(view), 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return view[:got]


def named(path, e):
    """A decoding error, with the file it came from (a command may read several)."""
    return type(e)(f"{os.fspath(path)}: {e}")


def read(path, trust_key=None, require_signature=False):
    """-> Plan, read from `path` (decoding errors name the file)."""
    return read_checked(path, trust_key, require_signature)[0]


def read_checked(path, trust_key=None, require_signature=False):
    """-> (Plan, trusted)."""
    data = read_bytes(path)
    try:
        return decode_checked(data, trust_key, require_signature)
    except PlanError as e:
        raise named(path, e) from None
