"""The plan file's frame: magic, format version, a msgpack header stating the payload's
size and digest (and its signature: signatures.py), the payload, then (format 5 on) zero padding
and the data section. Checked before any payload byte is decoded."""

import hashlib
import struct

import msgpack

from aotplan.core.codec import signatures
from aotplan.core.codec.data import align
from aotplan.core.codec.fields import check, exact_fields, get
from aotplan.core.codec.payload import FORMAT_VERSION
from aotplan.core.errors import PlanError

MAGIC = b"AOTPLAN\x00"
MIN_SUPPORTED_VERSION = 2
MAX_SUPPORTED_VERSION = FORMAT_VERSION
PREFIX = struct.Struct("<8sII")
MAX_HEADER_BYTES = 4096
HEADER_FIELDS = ("launch_mode", "payload_size", "payload_sha256", "signature")
HEADER_FIELDS_5 = HEADER_FIELDS + ("data_size",)


def has_data_section(version):
    """Format 5 on: the constants' bytes follow the payload (header `data_size`)."""
    return version >= 5


def data_start(header_len, payload_size):
    """Where a format-5 file's data section starts."""
    return align(PREFIX.size + header_len + payload_size)


def _signed_message(version, launch_mode, digest):
    return b"aotplan-signature\0" + struct.pack("<I", version) + launch_mode.encode() + b"\0" + digest


def frame(payload, launch_mode, sign_key=None, version=FORMAT_VERSION, data=b""):
    """Payload bytes -> a plan file: magic, version, a header that states the payload's
    size and digest (signed with `sign_key`), the payload, then (format 5 on) padding
    and the data section `data`. Neither is looked at (fuzzers frame arbitrary bytes)."""
    digest = hashlib.sha256(payload).digest()
    fields = {
        "launch_mode": launch_mode,
        "payload_size": len(payload),
        "payload_sha256": digest,
        "signature": signatures.sign(sign_key, _signed_message(version, launch_mode, digest)) if sign_key else None,
    }
    if has_data_section(version):
        fields["data_size"] = len(data)
    header = msgpack.packb(fields, use_bin_type=True)
    out = PREFIX.pack(MAGIC, version, len(header)) + header + payload
    if has_data_section(version):
        out += bytes(data_start(len(header), len(payload)) - len(out)) + data
    return out


def read_header(data, trust_key=None, require_signature=False):
    """Check magic, version, header, payload size, digest and (with `trust_key`) the
    signature. Returns (header, payload, trusted): trusted means the signature verified.
    The payload is bytes; `split` gives views instead, and the data section."""
    header, payload, _, trusted = split(data, trust_key, require_signature)
    return header, bytes(payload), trusted


def split(data, trust_key=None, require_signature=False):
    """`read_header`'s checks -> (header, payload, data section, trusted), the last two
    read-only memoryviews of `data` (the data section is empty before format 5)."""
    data = memoryview(data).toreadonly()
    version, hlen, header, size = head(data)
    digest = get(header, "payload_sha256", bytes, "header")
    sig = get(header, "signature", (bytes, type(None)), "header")
    start = PREFIX.size + hlen
    if has_data_section(version):
        at, stated = data_start(hlen, size), stated_size(version, hlen, header, size)
        if len(data) != stated:
            raise PlanError(f"plan is truncated or corrupt: {len(data)} bytes, the header says {stated}")
        payload, section = data[start:start + size], data[at:]
        if any(data[start + size:at]):
            raise PlanError("plan is corrupt: the padding before the data section is not zero")
    else:
        payload, section = data[start:], data[:0]
        if len(payload) != size:
            raise PlanError(f"plan is truncated or corrupt: payload has {len(payload)} bytes, header says {size}")
    if hashlib.sha256(payload).digest() != digest:
        raise PlanError("plan is corrupt: digest mismatch")
    trusted = False
    if sig is None:
        if require_signature:
            raise PlanError("plan is not signed, and a signature is required (compile it with --sign-key)")
    elif trust_key is not None:
        if not signatures.verify(trust_key, sig, _signed_message(version, header["launch_mode"], digest)):
            raise PlanError("plan signature does not verify with the trusted key: it was changed after signing, "
                            "or signed with another key")
        trusted = True
    elif require_signature:
        raise PlanError("plan is signed, but no trusted key is configured to check it (--trust-key or "
                        "AOTPLAN_TRUST_KEY)")
    return header, payload, section, trusted


def head(data):
    """The prefix and header of a plan's bytes (at least its first PREFIX.size +
    MAX_HEADER_BYTES, where it has them), checked -> (version, header length, header,
    payload size)."""
    if len(data) < PREFIX.size or data[:len(MAGIC)] != MAGIC:
        raise PlanError("not an aotplan plan (bad magic bytes)")
    _, version, hlen = PREFIX.unpack_from(data)
    if version > MAX_SUPPORTED_VERSION:
        raise PlanError(f"plan format {version} is newer than this executor "
                        f"(supports {MIN_SUPPORTED_VERSION}-{MAX_SUPPORTED_VERSION}); upgrade aotplan")
    if version < MIN_SUPPORTED_VERSION:
        raise PlanError(f"plan format {version} is older than this executor supports "
                        f"({MIN_SUPPORTED_VERSION}-{MAX_SUPPORTED_VERSION}); recompile the model")
    if hlen > MAX_HEADER_BYTES or PREFIX.size + hlen > len(data):
        raise PlanError("plan is truncated or corrupt: bad header length")
    try:
        header = msgpack.unpackb(data[PREFIX.size:PREFIX.size + hlen], raw=False, strict_map_key=True,
                                 max_str_len=256, max_bin_len=1024, max_array_len=64, max_map_len=64)
    except Exception as e:
        raise PlanError(f"plan is corrupt: header is not valid msgpack ({e})") from None
    check(header, dict, "header")
    exact_fields(header, HEADER_FIELDS_5 if has_data_section(version) else HEADER_FIELDS, "header")
    get(header, "launch_mode", str, "header")
    size = get(header, "payload_size", int, "header")
    if size < 0 or (has_data_section(version) and get(header, "data_size", int, "header") < 0):
        raise PlanError("plan is corrupt: negative section size in the header")
    return version, hlen, header, size


def stated_size(version, hlen, header, size):
    """The file's size, as its header states it."""
    if has_data_section(version):
        return data_start(hlen, size) + header["data_size"]
    return PREFIX.size + hlen + size
