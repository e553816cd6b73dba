"""Signing and trust keys: read from a file (or AOTPLAN_TRUST_KEY's), or given as bytes."""

import os
import stat

from aotplan.core.codec.fields import check_path
from aotplan.core.errors import PlanError

MIN_KEY_BYTES = 16  # a signing/trust key's least length
MAX_KEY_FILE_BYTES = 64 << 10  # a key file's most: HMAC keys are tens of bytes; /dev/zero is endless


def read_key(path):
    """A signing/trust key file -> bytes (its whole content, at least MIN_KEY_BYTES, at
    most MAX_KEY_FILE_BYTES). A regular file only: a FIFO would hang the read until
    someone writes it, a device may never end."""
    check_path(path, "key file")
    try:
        # O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused below)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise PlanError(f"key file {path!r} is not a regular file")
            if st.st_size > MAX_KEY_FILE_BYTES:
                raise PlanError(f"key file {path!r} holds {st.st_size} bytes; a key file holds at most "
                                f"{MAX_KEY_FILE_BYTES}")
            key = f.read(MAX_KEY_FILE_BYTES + 1)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise PlanError(f"cannot read key file {path!r}: {getattr(e, 'strerror', None) or e}") from None
    if len(key) > MAX_KEY_FILE_BYTES:  # (grew while it was read)
        raise PlanError(f"key file {path!r} holds more than {MAX_KEY_FILE_BYTES} bytes")
    if len(key) < MIN_KEY_BYTES:
        raise PlanError(f"key file {path!r} holds {len(key)} bytes; a key needs at least {MIN_KEY_BYTES}")
    return key


def env_key():
    """The key file named by AOTPLAN_TRUST_KEY -> bytes, or None where it is unset; an
    unreadable or short file is a PlanError that names the variable."""
    path = os.environ.get("AOTPLAN_TRUST_KEY")
    if not path:
        return None
    try:
        return read_key(path)
    except PlanError as e:
        raise PlanError(f"AOTPLAN_TRUST_KEY: {e}") from None


def check_key(key, what="key"):
    """A key given as bytes (bytes, bytearray or memoryview) -> bytes, or PlanError if it
    is shorter than MIN_KEY_BYTES (the least a key file may hold)."""
    key = bytes(key)
    if len(key) < MIN_KEY_BYTES:
        raise PlanError(f"{what}: {len(key)} bytes; a key needs at least {MIN_KEY_BYTES}")
    return key
