"""A Plan as a plan file's bytes, and back: the frame around the payload."""

import struct

from aotplan.core.codec.data import chunk_digests, shared_data_section
from aotplan.core.codec.frame import frame, split
from aotplan.core.codec.payload import constant_lists, decode_payload, encode_payload, version_of
from aotplan.core.errors import PlanError


def encode(plan, sign_key=None):
    """Plan -> bytes; `sign_key` (a key file's bytes: an Ed25519 private key in PEM, or a
    deprecated HMAC secret) signs it (codec/signatures.py)."""
    rows, data = shared_data_section(constant_lists(plan))
    return frame(encode_payload(plan, rows, chunk_digests(data)), plan.launch_mode,
                 sign_key, version_of(plan), data=data)


def decode(data, trust_key=None, require_signature=False):
    """bytes -> Plan (checked field by field; `verify` checks it as a whole)."""
    return decode_checked(data, trust_key, require_signature)[0]


def decode_checked(data, trust_key=None, require_signature=False):
    """bytes -> (Plan, trusted); see `read_header`. The plan's constants are views of
    `data` (keep it unchanged: bytes are)."""
    header, payload, section, trusted = split(data, trust_key, require_signature)
    plan = decode_payload(payload, struct.unpack_from("<I", data, 8)[0], section)
    if plan.launch_mode != header["launch_mode"]:
        raise PlanError(f"plan is corrupt: header launch mode {header['launch_mode']!r} "
                        f"!= payload launch mode {plan.launch_mode!r}")
    return plan, trusted
