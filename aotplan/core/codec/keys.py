"""Signing and trust keys: read from a file (or AOTPLAN_TRUST_KEY's), or given as bytes."""

import os

from aotplan.core.codec.fields import check_path
from aotplan.core.errors import PlanError

MIN_KEY_BYTES = 16  # a signing/trust key's least length


def read_key(path):
    """A signing/trust key file -> bytes (its whole content, at least MIN_KEY_BYTES)."""
    check_path(path, "key file")
    try:
        with open(path, "rb") as f:
            key = f.read()
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise PlanError(f"cannot read key file {path!r}: {getattr(e, 'strerror', None) or e}") from None
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
