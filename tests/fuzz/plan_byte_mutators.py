"""The plan fuzzer's byte-level family (tests/fuzz/plan_mutators.py): real plan files
truncated, bit-flipped, overwritten, chunks duplicated, deleted or swapped, the
prefix and header fields rewritten."""

import struct

import msgpack

from aotplan.core import codec
from plan_seeds import Case


# ---------------------------------------------------------------- byte level

def _header_span(data):
    return 16 + struct.unpack_from("<I", data, 12)[0]


def _b_truncate(rng, d):
    return d[:rng.randrange(len(d))], True, None


def _b_extend(rng, d):
    return d + rng.randbytes(rng.choice([1, 2, 7, 100])), True, None


def _pos(rng, d):
    """A position, one time in two inside the prefix and header."""
    return rng.randrange(_header_span(d)) if rng.random() < 0.5 else rng.randrange(len(d))


def _b_bitflip(rng, d):
    b = bytearray(d)
    for _ in range(rng.choice([1, 1, 2, 8])):
        b[_pos(rng, d)] ^= 1 << rng.randrange(8)
    return bytes(b), False, None


def _b_overwrite(rng, d):
    b = bytearray(d)
    for _ in range(rng.choice([1, 3, 16])):
        b[_pos(rng, d)] = rng.choice([0, 0xff, 0xc0, 0xc1, 0xdd, 0xdf, 0xc6, 0x7f, rng.randrange(256)])
    return bytes(b), False, None


def _b_dup_chunk(rng, d):
    i = _pos(rng, d)
    j = min(len(d), i + rng.choice([1, 4, 16, 300]))
    k = _pos(rng, d)
    return d[:k] + d[i:j] + d[k:], False, None


def _b_del_chunk(rng, d):
    i = _pos(rng, d)
    j = min(len(d), i + rng.choice([1, 4, 16, 300]))
    return d[:i] + d[j:], False, None


def _b_swap_chunks(rng, d):
    n = rng.choice([2, 8, 64])
    i, j = sorted(rng.sample(range(len(d) - n), 2))
    if j < i + n:
        return d, False, None
    return d[:i] + d[j:j + n] + d[i + n:j] + d[i:i + n] + d[j + n:], False, None


def _b_zero_fill(rng, d):
    i = _pos(rng, d)
    j = min(len(d), i + rng.choice([4, 32, 1000]))
    return d[:i] + bytes(j - i) + d[j:], False, None


def _b_prefix(rng, d):
    """The fixed prefix: magic, version, header length."""
    b = bytearray(d)
    what = rng.choice(["magic", "version", "hlen"])
    if what == "magic":
        b[rng.randrange(8)] ^= 1 << rng.randrange(8)
        return bytes(b), True, "not an aotplan plan"
    if what == "version":
        own = struct.unpack_from("<I", d, 8)[0]
        v = rng.choice([0, 1, 2, 3, 4, 255, 2**31, 2**32 - 1, rng.randrange(2**32)])
        v = v if v != own else own + 1
        struct.pack_into("<I", b, 8, v)
        # a version inside the window is refused by the payload's shape or the signature
        inside = codec.MIN_SUPPORTED_VERSION <= v <= codec.MAX_SUPPORTED_VERSION
        return bytes(b), True, None if inside else "plan format"
    h = struct.unpack_from("<I", d, 12)[0]
    v = rng.choice([0, 1, h - 1, h + 1, h + 7, len(d), len(d) - 16, 4096, 4097, 2**31, 2**32 - 1])
    struct.pack_into("<I", b, 12, v if v != h else h + 1)
    return bytes(b), True, None


def _b_header(rng, d):
    """One header field rewritten; the payload unchanged."""
    hl = struct.unpack_from("<I", d, 12)[0]
    header = msgpack.unpackb(d[16:16 + hl], raw=False)
    size = header["payload_size"]
    payload, data = d[16 + hl:16 + hl + size], d[codec.data_start(hl, size):]
    field = rng.choice(["payload_size", "payload_sha256", "signature", "launch_mode", "extra", "missing",
                        "data_size"])
    certain, match, before = True, None, dict(header)
    if field == "data_size":
        header[field] = rng.choice([header[field] + 1, header[field] - 1, header[field] + 64, 0, -1, 2**63, "1",
                                    None])
    elif field == "payload_size":
        header[field] = rng.choice([header[field] + 1, header[field] - 1, 0, -1, 2**63, 2**64 - 1, "12", 1.5, None,
                                    True])
    elif field == "payload_sha256":
        header[field] = rng.choice([b"", b"\0" * 32, header[field][:31], header[field] + b"\0", "x" * 32, None])
    elif field == "signature":
        # a signature nobody checks (no trust key) leaves the plan untrusted but readable
        header[field] = rng.choice([b"", b"\0" * 32, rng.randbytes(32), "sig", 0, [], True])
        certain = False
    elif field == "launch_mode":
        other = "kernel" if header[field] != "kernel" else "fused"
        header[field] = rng.choice(["", other, "x" * 200, 7, None, b"sink"])
    elif field == "extra":
        header["comment"] = "hello"
        match = "unknown field"
    else:
        del header[rng.choice(sorted(header))]
    if header == before:  # (a plan with no data section: data_size 0 "rewritten" to 0)
        certain = False
    h = msgpack.packb(header, use_bin_type=True)
    out = struct.pack("<8sII", codec.MAGIC, struct.unpack_from("<I", d, 8)[0], len(h)) + h + payload
    return out + bytes(codec.data_start(len(h), size) - len(out)) + data, certain, match


def _b_splice(rng, d, other):
    """This plan's prefix and header with another plan's payload."""
    return d[:_header_span(d)] + other[_header_span(other):], True, "truncated or corrupt|digest mismatch"


BYTE_MUTATORS = {
    "truncate": _b_truncate, "extend": _b_extend, "bitflip": _b_bitflip, "overwrite": _b_overwrite,
    "dup_chunk": _b_dup_chunk, "del_chunk": _b_del_chunk, "swap_chunks": _b_swap_chunks,
    "zero_fill": _b_zero_fill, "prefix": _b_prefix, "header": _b_header,
}


def byte_case(rng, seed, all_seeds):
    name = rng.choice(list(BYTE_MUTATORS) + ["splice"])
    if name == "splice":
        other = rng.choice([s for s in all_seeds if s.payload != seed.payload])
        data, certain, match = _b_splice(rng, seed.data, other.data)
    else:
        data, certain, match = BYTE_MUTATORS[name](rng, seed.data)
    return Case("bytes", name, data, certain, match)


