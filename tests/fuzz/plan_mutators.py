"""Plan mutators: the fuzz corpus for the plan decoder and verifier (issue 6, "plans
as untrusted data"). Shared by tests/fuzz/test_plan_fuzz.py (a fixed, seeded CI run)
and scripts/fuzz_plans.py (longer runs).

A case is a mutated plan file. Checking it runs what an executor runs before it
touches XLA: `codec.decode_checked` (header, digest, signature, field types) and
`verify.verify` (ranges, references, lifetimes). Every case must end in one of

    refused    PlanError (or a subclass), with a message that matches `case.match`
    accepted   decoded and verified; allowed only where the mutation may be harmless:
               a byte-level case must then decode to exactly the seed plan (the
               digest covers the payload), a structural one must verify

and never in any other exception. `classify` says which, and why a case is bad.

Families:
    bytes      byte-level mutations of real plan files (truncation, bit flips, byte
               overwrites, chunk duplication/deletion/swaps, prefix and header fields)
    struct     the payload decoded with msgpack, mutated as data (fields deleted,
               swapped, retyped, set to extreme values; lists emptied, duplicated,
               nested deeply), re-framed with a valid header and digest
    targeted   semantic breakage the verifier must name: offsets past the arena or
               misaligned, overlapping live tensors, a 2**60 arena, duplicate names,
               reads before writes, outputs never written, missing kernels/tensors
"""

import dataclasses
import os
import random
import re
import struct
import time

import msgpack

from aotplan.core import codec, formats, verify
from aotplan.core.errors import PlanError
from aotplan.core.plan import PlanKernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "plans", "golden", f"v{codec.STATELESS_VERSION}")  # plans without states
GOLDEN_STATES = os.path.join(ROOT, "plans", "golden", f"v{codec.FORMAT_VERSION}")  # the decoder, its cache a state
SIGN_KEY = b"fuzz-signing-key-0123456789abcdef"
FAMILIES = ("bytes", "struct", "targeted")

# tensor / kernel / launch rows as codec encodes them
(T_NAME, T_KIND, T_DTYPE, T_SHAPE, T_FORMAT, T_DSHAPE, T_STORAGE, T_OFFSET, T_NBYTES, T_BASE, T_RUNS, T_STRIDE,
 T_PADDING) = range(13)
K_NAME, K_EXPORTED, K_WS, K_NOFF, K_FEEDS, K_RETURNS, K_NATIVE = range(7)
L_KERNEL, L_NODE, L_READS, L_WRITES, L_NODES = range(5)
ROWS = {"tensors": 13, "kernels": 7, "launches": 5, "constants": 3}
FIXED = ("memory", "provenance")  # fixed-length lists


# ---------------------------------------------------------------- seed plans

@dataclasses.dataclass(frozen=True)
class Seed:
    name: str
    data: bytes  # the plan file
    plan: object  # what it decodes to
    trust_key: bytes = None
    require_signature: bool = False

    @property
    def payload(self):
        return codec.read_header(self.data)[1]

    @property
    def version(self):
        return struct.unpack_from("<I", self.data, 8)[0]

    @property
    def section(self):
        """The data section (format 5 on: the constants' bytes)."""
        return bytes(codec.split(self.data)[2])


def _arena_weights(plan):
    """`plan` with its pool constants moved into the arena behind its tensors, placed by
    a place kernel (a copy of another kernel's bytes: decode and verify never run it)."""
    ts, off = list(plan.tensors), formats.align_up(plan.arena_bytes, plan.alignment)
    for i, t in enumerate(ts):
        if t.storage == "pool":
            ts[i] = dataclasses.replace(t, storage="arena", offset=off)
            off = formats.align_up(off + t.nbytes, plan.alignment)
    plan = dataclasses.replace(plan, tensors=tuple(ts), weights="arena", arena_bytes=off,
                               place_kernel=len(plan.kernels),
                               memory=dataclasses.replace(plan.memory, arena_bytes=off, constant_pool_bytes=0))
    ks = list(plan.kernels)
    for l in plan.launches:  # shared kernels now take offsets for the constants too
        if ks[l.kernel].n_offsets:
            ks[l.kernel] = dataclasses.replace(ks[l.kernel], n_offsets=len(plan.kernel_args(l)[1]))
    ks.append(PlanKernel("place_constants", plan.kernels[0].exported, 0, 0, False, False))
    return dataclasses.replace(plan, kernels=tuple(ks))


def seeds():
    """The golden plans of the current formats (sink, fused, kernel, and kernel with blocked
    storage formats and conversions), two with arena-resident weights and a place
    kernel, and one signed plan checked with its trust key."""
    out = []
    for name in ("mlp", "cnn", "transformer", "cnn_blocked"):
        with open(os.path.join(GOLDEN, name + ".plan"), "rb") as f:
            data = f.read()
        out.append(Seed(name, data, codec.decode(data)))
    by = {s.name: s.plan for s in out}
    for name in ("cnn", "transformer"):
        p = verify.verify(_arena_weights(by[name]))
        out.append(Seed(name + "-arena", codec.encode(p), p))
    out.append(Seed("mlp-signed", codec.encode(by["mlp"], sign_key=SIGN_KEY), by["mlp"], SIGN_KEY, True))
    for name in ("decoder_sink", "decoder_kernel", "decoder_methods"):  # format 7: states, methods
        with open(os.path.join(GOLDEN_STATES, name + ".plan"), "rb") as f:
            data = f.read()
        out.append(Seed(name, data, codec.decode(data)))
    for s in out:  # every seed is a good plan
        assert verify.verify(codec.decode_checked(s.data, s.trust_key, s.require_signature)[0]) == s.plan, s.name
    return tuple(out)


# ---------------------------------------------------------------- cases

@dataclasses.dataclass
class Case:
    family: str
    mutator: str
    data: bytes
    certain: bool  # the mutation surely breaks the plan: it must be refused
    match: str = None  # regex the refusal must match
    note: str = ""

    def label(self):
        return f"{self.family}/{self.mutator}" + (f" ({self.note})" if self.note else "")


def frame(obj, launch_mode=None, sign_key=None, raw=None, data=b"", version=codec.STATELESS_VERSION):
    """A payload object (or `raw` payload bytes) and a data section -> a plan file with
    a valid header, of format `version` (the seed's)."""
    payload = raw if raw is not None else msgpack.packb(obj, use_bin_type=True)
    if launch_mode is None:
        launch_mode = obj.get("launch_mode") if isinstance(obj, dict) else None
        launch_mode = launch_mode if isinstance(launch_mode, str) and len(launch_mode) < 100 else "sink"
    return codec.frame(payload, launch_mode, sign_key, version, data=data)


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


# ---------------------------------------------------------------- structural

def load_payload(seed):
    return msgpack.unpackb(seed.payload, raw=False, strict_map_key=False)


def _paths(obj, path=()):
    """Every path (tuple of keys/indices) into a payload, the root included."""
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, path + (i,))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _set(obj, path, value):
    if not path:
        return value
    _get(obj, path[:-1])[path[-1]] = value
    return obj


def _fixed_list(path):
    """Whether the list at `path` has a fixed length (a row, memory, provenance, a shape)."""
    if len(path) == 2 and path[0] in ROWS:
        return True
    if len(path) == 1 and path[0] in FIXED:
        return True
    return len(path) == 3 and path[0] == "tensors" and path[2] in (T_SHAPE, T_DSHAPE)


def _type_class(v):
    if isinstance(v, bool):
        return "bool"
    for cls, kind in ((int, "int"), (float, "float"), (str, "str"), (bytes, "bytes"), (list, "list"),
                      (dict, "dict"), (msgpack.ExtType, "ext")):
        if isinstance(v, cls):
            return kind
    return "none" if v is None else type(v).__name__


def _values_of(rng, cls):
    return {
        "int": lambda: rng.choice([0, -1, 1, 2**31, 2**60, 2**64 - 1, -2**63]),
        "bool": lambda: rng.choice([True, False]),
        "float": lambda: rng.choice([0.0, 1.5, -1e300, float("nan"), float("inf")]),
        "str": lambda: rng.choice(["", "x", "0", "sink", "\u2603" * 3, "a" * 1000]),
        "bytes": lambda: rng.choice([b"", b"\0" * 8, b"\xff" * 33]),
        "list": lambda: rng.choice([[], [0], [[]], ["a", 1], [None] * 9]),
        "dict": lambda: rng.choice([{}, {"a": 1}, {"tensors": []}]),
        "none": lambda: None,
        "ext": lambda: msgpack.ExtType(rng.randrange(128), rng.randbytes(rng.choice([0, 1, 8]))),
    }[cls]()


def _retype(rng, m, path):
    cls = _type_class(_get(m, path))
    new = rng.choice([c for c in ("int", "bool", "float", "str", "bytes", "list", "dict", "none", "ext") if c != cls])
    return _set(m, path, _values_of(rng, new)), True


def _delete(rng, m, path):
    if not path:
        return {}, True
    parent = _get(m, path[:-1])
    del parent[path[-1]]
    return m, isinstance(parent, dict) or _fixed_list(path[:-1])


def _int_value(rng, v):
    return rng.choice([0, -1, 1, -v, v + 1, v - 1, v * 2, v + 64, v + 4, 2**31 - 1, 2**31, 2**32, 2**60,
                       2**63 - 1, 2**64 - 1, -2**63, rng.randrange(-2**20, 2**20)])


def _extreme(rng, m, path):
    """An int, bool, str or bytes leaf set to another value of its type."""
    v = _get(m, path)
    cls = _type_class(v)
    if cls == "int":
        new = _int_value(rng, v)
    elif cls == "bool":
        new = not v
    elif cls == "str":
        new = rng.choice(["", v + "_", v[:-1], "x" * 300, "\x00", "\U0001F600", "input", "output", "arena", "pool",
                          "float32", "kernel"])
    elif cls == "bytes":
        new = rng.choice([b"", v[:len(v) // 2], v + b"\0", bytes(len(v))])
    elif cls == "list":
        new = rng.choice([[], v + v, v[::-1], v[:1]])
    else:
        return m, False
    return _set(m, path, new), False


def _swap(rng, m, path):
    """Swap a value with a sibling (or any other node of the payload)."""
    others = [p for p in _paths(m) if p and p[:len(path)] != path and path[:len(p)] != p]
    if not path or not others:
        return m, False
    q = rng.choice([p for p in others if p[:-1] == path[:-1]] or others) if rng.random() < 0.7 else rng.choice(others)
    a, b = _get(m, path), _get(m, q)
    _set(m, path, b)
    _set(m, q, a)
    return m, False


def _dup(rng, m, path):
    """Duplicate an element of a list."""
    v = _get(m, path)
    if isinstance(v, list) and v:
        v.insert(rng.randrange(len(v) + 1), rng.choice(v))
        return m, _fixed_list(path)
    return m, False


def _empty(rng, m, path):
    v = _get(m, path)
    if isinstance(v, list) and v:
        return _set(m, path, []), _fixed_list(path) or path == ("launches",) or path == ("tensors",)
    if isinstance(v, dict) and v:
        return _set(m, path, {}), True
    return m, False


def _extra_key(rng, m, path):
    v = _get(m, path)
    if isinstance(v, dict):
        v[rng.choice(["extra", "tensor", "Tensors", "launches2"])] = rng.choice([0, [], "x"])
        return m, True
    return m, False


STRUCT_OPS = {"retype": _retype, "delete": _delete, "extreme": _extreme, "swap": _swap, "dup": _dup,
              "empty": _empty, "extra_key": _extra_key}
NEST = b"NESTING-PLACEHOLDER"


def _nest(rng, m, path):
    """A value replaced by lists (or maps) nested thousands deep: raw msgpack, since
    msgpack.packb refuses to nest that deep."""
    depth = rng.choice([600, 2000, 100000])
    inner = (b"\x91" * depth + b"\xc0") if rng.random() < 0.5 else (b"\x81\xa1k" * depth + b"\xc0")
    m = _set(m, path, NEST)
    packed_marker = msgpack.packb(NEST, use_bin_type=True)
    raw = msgpack.packb(m, use_bin_type=True)
    assert raw.count(packed_marker) == 1
    return raw.replace(packed_marker, inner)


# where each op applies: leaves for the value changes, containers for the list ones
_APPLIES = {"extreme": ("int", "bool", "str", "bytes", "list"), "dup": ("list",), "empty": ("list", "dict"),
            "extra_key": ("dict",)}


_RAW_TOKENS = [
    b"\xc1",  # never used
    b"\xd6\xff\x00\x00\x00\x01",  # a timestamp
    b"\xc7\x03\xff\x00\x00\x00",  # a timestamp of a length timestamps cannot have
    b"\xd4\x05\x00",  # an ext type
    b"\xdd\xff\xff\xff\xff",  # array of 2**32 - 1, and nothing after
    b"\xdf\x00\x00\x04\x01",  # map of 1025 entries
    b"\xc6\x7f\xff\xff\xff",  # bin of 2 GiB
    b"\xdb\x00\x10\x00\x01" + b"a" * 8,  # str of 1 MiB + 1
    b"\xa2\xed\xa0",  # UTF-8 of a lone surrogate
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",  # NaN
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",  # 2**64 - 1
    b"\x82\xc0\x00\xc0\x00",  # a map with nil keys
    b"\x81\x91\x00\x00",  # a map with a list key
]


def _raw_splice(rng, m, path):
    """A value's msgpack bytes replaced by raw bytes: a token the decoder must refuse, or
    random bytes."""
    m = _set(m, path, NEST)
    raw = msgpack.packb(m, use_bin_type=True)
    junk = rng.choice(_RAW_TOKENS) if rng.random() < 0.6 else rng.randbytes(rng.choice([1, 2, 5, 9]))
    return raw.replace(msgpack.packb(NEST, use_bin_type=True), junk)


_SKELETON = {}


def _skeleton(seed):
    """Positions in the seed's payload outside the kernel and constant blobs (most of its
    bytes, and nothing but the kernels ever reads them)."""
    if seed.name not in _SKELETON:
        payload, blob = seed.payload, bytearray(len(seed.payload))
        for b in [k.exported for k in seed.plan.kernels] + [k.native for k in seed.plan.kernels] + \
                 [c.data for c in seed.plan.constants]:
            i = payload.find(b) if len(b) > 16 else -1
            if i >= 0:
                blob[i:i + len(b)] = b"\1" * len(b)
        _SKELETON[seed.name] = [i for i, x in enumerate(blob) if not x]
    return _SKELETON[seed.name]


def _payload_bits(rng, seed):
    """Bits flipped / bytes overwritten in the payload itself (framed with a matching
    digest, so the msgpack decoder and the field checks see them), mostly outside blobs."""
    b = bytearray(seed.payload)
    skeleton = _skeleton(seed)
    for _ in range(rng.choice([1, 1, 2, 4, 16])):
        i = rng.choice(skeleton) if rng.random() < 0.9 else rng.randrange(len(b))
        if rng.random() < 0.5:
            b[i] ^= 1 << rng.randrange(8)
        else:
            b[i] = rng.choice([0xc0, 0xc1, 0xc2, 0xc3, 0x90, 0x80, 0xa0, 0xdd, 0xdc, 0xcf, 0xd3, rng.randrange(256)])
    return bytes(b)


def struct_case(rng, seed):
    m = load_payload(seed)
    paths = list(_paths(m))
    path = rng.choice(paths)
    r = rng.random()
    if r < 0.03:
        return Case("struct", "nest", frame(None, seed.plan.launch_mode, seed.trust_key, version=seed.version,
                                            raw=_nest(rng, m, path),
                                            data=seed.section), True, note=_fmt_path(path))
    if r < 0.15:
        return Case("struct", "raw_splice", frame(None, seed.plan.launch_mode, seed.trust_key, version=seed.version,
                                                  raw=_raw_splice(rng, m, path), data=seed.section), False,
                    note=_fmt_path(path))
    if r < 0.30:
        return Case("struct", "payload_bits", frame(None, seed.plan.launch_mode, seed.trust_key, version=seed.version,
                                                    raw=_payload_bits(rng, seed), data=seed.section), False)
    op = rng.choice(list(STRUCT_OPS))
    if op in _APPLIES:
        path = rng.choice([p for p in paths if _type_class(_get(m, p)) in _APPLIES[op]])
    m, certain = STRUCT_OPS[op](rng, m, path)
    return Case("struct", op, frame(m, sign_key=seed.trust_key, data=seed.section, version=seed.version), certain,
                note=_fmt_path(path))


def _fmt_path(path):
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) or "<root>"


# ---------------------------------------------------------------- targeted

def _arena_tensors(plan, nonempty=True):
    return [i for i, t in enumerate(plan.tensors) if t.storage == "arena" and (t.nbytes or not nonempty)]


def _name(plan, i):
    return re.escape(repr(plan.tensors[i].name))


def _t_arena_huge(rng, m, plan):
    m["arena_bytes"] = m["memory"][0] = rng.choice([2**60, 2**40, formats.MAX_ARENA_BYTES + 64, 2**63 - 64])
    return True, r"arena needs \d+ bytes, more than"


def _t_offset(rng, m, plan):
    i = rng.choice(_arena_tensors(plan))
    a, end = plan.alignment, plan.arena_bytes
    how = rng.choice(["past", "straddle", "huge", "misaligned", "negative"])
    if how == "past":
        m["tensors"][i][T_OFFSET] = formats.align_up(end, a) + a * rng.randrange(4)
        return True, _name(plan, i) + r".*exceed the arena"
    if how == "straddle":
        m["tensors"][i][T_OFFSET] = (end - plan.tensors[i].nbytes) // a * a + a
        return True, _name(plan, i) + r".*exceed the arena"
    if how == "huge":
        m["tensors"][i][T_OFFSET] = rng.choice([2**62, 2**63 - a, 2**64 - a])
        return True, _name(plan, i) + r".*exceed the arena"
    if how == "misaligned":
        m["tensors"][i][T_OFFSET] += rng.choice([1, 2, 4, 8, 32, a // 2])
        # a tensor inside another (a view, a part) need only be word-aligned: moving it
        # breaks what ties it to its base instead
        shared = plan.tensors[i].base >= 0 or any(t.base == i for t in plan.tensors)
        return True, _name(plan, i) + (r".*(alignment|is a view of|leave its base|do not tile)" if shared
                                       else r".*alignment")
    m["tensors"][i][T_OFFSET] = rng.choice([-a, -1, -2**63])
    return True, _name(plan, i) + r".*(alignment|offset)"


def _live_pairs(plan):
    """Ordered pairs (a, b) of distinct non-empty arena tensors live at one phase (as
    the verifier counts lifetimes: aotplan.core.intervals.phases); `b` is neither a view nor
    the base of one (moving it must be refused as an overlap, not as a broken view)."""
    from aotplan.core import intervals

    ivs = intervals.phases([t.kind if t.storage == "arena" else None for t in plan.tensors],
                           [t.nbytes for t in plan.tensors], [(l.reads, l.writes) for l in plan.launches],
                           plan.alignment, feeds_first=plan.input_kernel == -1, base=[t.base for t in plan.tensors])
    bases = {t.base for t in plan.tensors if t.base >= 0}
    ivs = [iv for iv in ivs if iv.nbytes]
    pairs = []
    for x in ivs:
        for y in ivs:
            if x.tensor != y.tensor and max(x.first, y.first) <= min(x.last, y.last) and y.tensor not in bases:
                pairs.append((x.tensor, y.tensor))
    return sorted(pairs)


def _t_overlap(rng, m, plan):
    """Two tensors live at the same step placed on the same bytes (the arena grown if
    needed, so the refusal is the overlap)."""
    pairs = _live_pairs(plan)
    if not pairs:
        return None
    a, b = rng.choice(pairs)
    ta, tb = plan.tensors[a], plan.tensors[b]
    shift = rng.choice([0, 0, formats.align_up(max(ta.nbytes // 2, 1), plan.alignment) if ta.nbytes > plan.alignment
                        else 0])
    off = ta.offset + shift
    m["tensors"][b][T_OFFSET] = off
    if off + tb.nbytes > plan.arena_bytes:
        m["arena_bytes"] = m["memory"][0] = formats.align_up(off + tb.nbytes, plan.alignment)
    # b now overlaps a; it is named whichever clash the sweep meets first
    return True, rf"(?=.*{_name(plan, b)})tensors '.*' \(bytes .* and '.*' .* overlap while both are live"


def _t_dup_name(rng, m, plan):
    i, j = rng.sample(range(len(plan.tensors)), 2)
    m["tensors"][j][T_NAME] = plan.tensors[i].name
    return True, "duplicate tensor name " + _name(plan, i)


def _t_missing_ref(rng, m, plan):
    n, nk, s = len(plan.tensors), len(plan.kernels), rng.randrange(len(plan.launches))
    what = rng.choice(["read", "write", "kernel", "input", "output", "constant", "place"])
    bad = rng.choice([n, n + 1, n + 1000, -1, -n - 1, 2**31, 2**63 - 1, 2**64 - 1, -2**63])
    bad_k = rng.choice([nk, nk + 1, nk + 1000, -2, -nk - 1, 2**31, 2**64 - 1, -2**63])
    if what == "read":
        m["launches"][s][L_READS].insert(rng.randrange(len(plan.launches[s].reads) + 1), bad)
        return True, rf"launch {s} .* read = {bad} is out of range"
    if what == "write":
        m["launches"][s][L_WRITES].append(bad)
        return True, rf"launch {s} .* write = {bad} is out of range"
    if what == "kernel":
        m["launches"][s][L_KERNEL] = bad_k
        return True, rf"kernel = {bad_k} is out of range"
    if what in ("input", "output"):
        m[what + "s"].append(bad)
        return True, rf"{what}s = {bad} is out of range"
    if what == "constant":
        if not m["constants"]:
            return None
        m["constants"][rng.randrange(len(m["constants"]))][0] = bad
        return True, rf"constants\[\d+\]\.tensor = {bad} is out of range"
    m["place_kernel"] = bad_k
    return True, rf"place_kernel = {bad_k} is out of range"


def _t_read_before_write(rng, m, plan):
    """A launch reads a tensor that only it or a later launch writes."""
    cands = [(s, j) for s, l in enumerate(plan.launches) for t in plan.launches[s:] for j in t.writes]
    s, j = rng.choice(cands)
    m["launches"][s][L_READS].append(j)  # refused before its kernel's offsets count is looked at
    return True, rf"launch {s} .* reads {_name(plan, j)} before any launch writes it"


def _t_output_unwritten(rng, m, plan):
    o = rng.choice(plan.outputs)
    s = next(s for s, l in enumerate(plan.launches) if o in l.writes)
    m["launches"][s][L_WRITES].remove(o)
    k = plan.launches[s].kernel
    if plan.kernels[k].n_offsets:
        m["kernels"][k][K_NOFF] -= 1
    # a later launch that reads it (kernel mode) is refused first, naming it too
    return True, rf"output {_name(plan, o)} is never written|reads {_name(plan, o)} before any launch writes it|" \
                 r"takes \d+ offsets"


def _t_write_readonly(rng, m, plan):
    i = rng.choice(list(plan.inputs) + [c.tensor for c in plan.constants])
    s = rng.randrange(len(plan.launches))
    m["launches"][s][L_WRITES].append(i)
    return True, rf"launch {s} .* writes {_name(plan, i)}, a (input|constant)"


def _t_rewrite(rng, m, plan):
    """A second launch writes what an earlier one wrote (or the same launch twice)."""
    s = rng.randrange(len(plan.launches))
    j = rng.choice(plan.launches[s].writes)
    t = rng.randrange(s, len(plan.launches))
    m["launches"][t][L_WRITES].append(j)
    return True, rf"writes {_name(plan, j)}, which an earlier launch already wrote"


def _t_constant_data(rng, m, plan):
    if not plan.constants:
        return None
    c = rng.randrange(len(plan.constants))
    row = m["constants"][c]  # [tensor, offset, bytes] in the data section
    how = rng.choice(["short", "long", "empty", "half", "misaligned", "beyond"])
    if how == "misaligned":
        row[1] += rng.choice([1, 4, 32])
    elif how == "beyond":
        row[1] = 1 << 40
    else:
        n = row[2]
        row[2] = {"short": n - 1, "long": n + 1, "empty": 0, "half": n // 2}[how] if n else 1
    return True, (rf"constant {_name(plan, plan.constants[c].tensor)}: \d+ bytes of data"
                  r"|constants\[\d+\]: bytes \[-?\d+, \d+\) are not an aligned range")


def _t_shape(rng, m, plan):
    i = rng.randrange(len(plan.tensors))
    row = m["tensors"][i]
    how = rng.choice(["rank", "huge_dims", "dim", "negative", "device"])
    if how == "rank":
        row[T_SHAPE] = row[T_DSHAPE] = [1] * rng.choice([65, 1000, 200000])
        return True, _name(plan, i) + r".*rank"
    if how == "huge_dims":
        row[T_SHAPE] = row[T_DSHAPE] = [2**31 - 1] * rng.choice([3, 10, 64])
        return True, _name(plan, i)
    if how == "dim":
        if not row[T_SHAPE]:
            return None
        k = rng.randrange(len(row[T_SHAPE]))
        row[T_SHAPE][k] = row[T_DSHAPE][k] = row[T_SHAPE][k] + rng.choice([1, 2, 100])
        if row[T_FORMAT] != "default":  # device dims are not the logical ones
            return True, _name(plan, i) + r".*(nbytes|device shape|padding)"
        return True, _name(plan, i) + r".*nbytes"
    if how == "negative":
        row[T_SHAPE] = row[T_DSHAPE] = [-1] + row[T_SHAPE]
        return True, _name(plan, i) + r".*shape"
    row[T_DSHAPE] = row[T_DSHAPE] + [1]
    return True, _name(plan, i) + r".*device shape"


def _t_enum(rng, m, plan):
    i = rng.randrange(len(plan.tensors))
    field, what = rng.choice([(T_KIND, "kind"), (T_DTYPE, "dtype"), (T_FORMAT, "format"), (T_STORAGE, "storage")])
    m["tensors"][i][field] = rng.choice(["", "float8", "nchw", "INPUT", "heap", "intermediat", "aligned:0"])
    return True, _name(plan, i) + rf": unknown {what}"


def _t_format(rng, m, plan):
    """Another real format (or padding) than the one the device shape was made for."""
    i = rng.randrange(len(plan.tensors))
    row = m["tensors"][i]
    if rng.random() < 0.3:
        row[T_PADDING] = row[T_PADDING][:-1] + [row[T_PADDING][-1] + 1] if row[T_PADDING] else [1]
        return True, _name(plan, i) + r".*padding"
    new = rng.choice([f for f in ("default", "nhwc", "aligned:16", "nc1hwc0:16", "aligned:3") if f != row[T_FORMAT]])
    if formats.accepts(new, len(row[T_SHAPE])) and \
            tuple(formats.device_shape(row[T_SHAPE], new)) == tuple(row[T_DSHAPE]) and \
            tuple(formats.padding(row[T_SHAPE], new)) == tuple(row[T_PADDING]):
        return None  # the same bytes either way (e.g. nhwc of an (N, C, 1, 1) tensor)
    row[T_FORMAT] = new
    return True, _name(plan, i) + r".*(does not hold|device shape|padding)"


def _t_launches(rng, m, plan):
    how = rng.choice(["none", "dup", "swap", "drop_first", "drop_last"])
    L = m["launches"]
    if how == "none":
        m["launches"] = []
        return True, "no launches|exactly one launch"
    if how == "dup":
        s = rng.randrange(len(L))
        L.insert(rng.randrange(len(L) + 1), L[s][:])
        return True, None
    if len(L) < 2:
        return None
    if how == "swap":  # a launch and one it reads from
        pairs = [(s, t) for t in range(len(plan.launches)) for s in range(t)
                 if set(plan.launches[s].writes) & set(plan.launches[t].reads)]
        s, t = rng.choice(pairs)
        L[s], L[t] = L[t], L[s]
        return True, None
    del L[0 if how == "drop_first" else -1]
    return True, None


def _t_kernel_flags(rng, m, plan):
    k = rng.randrange(len(plan.kernels))
    how = rng.choice(["feeds", "returns", "n_offsets", "workspace", "native"])
    row = m["kernels"][k]
    if how in ("feeds", "returns"):
        f = K_FEEDS if how == "feeds" else K_RETURNS
        row[f] = not row[f]
        return True, None
    if how == "n_offsets":
        row[K_NOFF] = rng.choice([row[K_NOFF] + 1, -1, 2**40]) if row[K_NOFF] else rng.choice([1, 2**40, -1])
        return True, None
    if how == "workspace":
        row[K_WS] = rng.choice([-1, -2**63, max(k.workspace_bytes for k in plan.kernels) + 1, 2**62])
        return True, rf"{re.escape(repr(plan.kernels[k].name))}: negative workspace|max_workspace_bytes"
    if plan.provenance.native_fingerprint:
        return None
    row[K_NATIVE] = b"\x7fELF"
    return True, rf"kernel {re.escape(repr(plan.kernels[k].name))} carries a native executable"


def _t_memory(rng, m, plan):
    f = rng.choice([0, 1, 3, 4])
    m["memory"][f] = rng.choice([-1, m["memory"][f] + 1, 2**63 - 1, -2**63]) if f != 1 else \
        rng.choice([-1, plan.arena_bytes + 1, 2**63 - 1])
    return True, "memory"


def _t_special_kernels(rng, m, plan):
    nk = len(plan.kernels)
    field = rng.choice(["input_kernel", "output_kernel", "place_kernel"])
    cur = m[field]
    choices = [k for k in range(-1, nk) if k != cur]
    m[field] = rng.choice(choices)
    return True, None


def _t_sharing(rng, m, plan):
    """A view moved off its base, a base pointing nowhere or at a view, runs on a
    tensor that is no part, a run count that does not divide the bytes."""
    views = [i for i, t in enumerate(plan.tensors) if t.base >= 0]
    arena = [i for i in _arena_tensors(plan) if plan.tensors[i].base < 0]
    how = rng.choice(["move", "base_range", "base_view", "runs_plain", "runs_split"] if views
                     else ["base_range", "runs_plain", "runs_split"])
    if how == "move":
        i = rng.choice(views)
        t = plan.tensors[i]
        m["tensors"][i][T_OFFSET] = t.offset + plan.alignment
        m["arena_bytes"] = m["memory"][0] = plan.arena_bytes + plan.alignment
        return True, rf"tensor {_name(plan, i)} is a view of .*: both must have the same offset and bytes"
    if not arena:
        return None
    i = rng.choice(arena)
    if how == "base_range":
        bad = rng.choice([len(plan.tensors), 2**40, -2])
        m["tensors"][i][T_BASE] = bad
        return True, rf"tensor {_name(plan, i)}: base = {bad} is out of range"
    if how == "base_view":
        m["tensors"][i][T_BASE] = rng.choice(views)
        return True, r"lives inside|is a view of|cannot live inside"
    if how == "runs_plain":
        m["tensors"][i][T_RUNS], m["tensors"][i][T_STRIDE] = 2, 64
        return True, rf"tensor {_name(plan, i)}: .*runs"
    m["tensors"][i][T_RUNS] = rng.choice([0, -1, plan.tensors[i].nbytes + 1, 2**20])
    return True, rf"tensor {_name(plan, i)}: .*runs"


TARGETED = {
    "sharing": _t_sharing,
    "arena_huge": _t_arena_huge, "offset": _t_offset, "overlap": _t_overlap, "dup_name": _t_dup_name,
    "missing_ref": _t_missing_ref, "read_before_write": _t_read_before_write,
    "output_unwritten": _t_output_unwritten, "write_readonly": _t_write_readonly, "rewrite": _t_rewrite,
    "constant_data": _t_constant_data, "shape": _t_shape, "enum": _t_enum, "format": _t_format, "launches": _t_launches,
    "kernel_flags": _t_kernel_flags, "memory": _t_memory, "special_kernels": _t_special_kernels,
}


def targeted_case(rng, seed, name=None):
    while True:
        mut = name or rng.choice(list(TARGETED))
        m = load_payload(seed)
        r = TARGETED[mut](rng, m, seed.plan)
        if r is not None:
            certain, match = r
            return Case("targeted", mut, frame(m, sign_key=seed.trust_key, data=seed.section, version=seed.version),
                        certain, match)
        if name:
            raise ValueError(f"mutator {name} does not apply to {seed.name}")


# ---------------------------------------------------------------- running

def make_case(rng, seed, all_seeds, family):
    if family == "bytes":
        return byte_case(rng, seed, all_seeds)
    if family == "struct":
        return struct_case(rng, seed)
    return targeted_case(rng, seed)


def check(data, seed):
    """What an executor does to a plan file before XLA sees it."""
    plan, trusted = codec.decode_checked(data, seed.trust_key, seed.require_signature)
    verify.verify(plan)
    return plan, trusted


def classify(case, seed):
    """-> (outcome, detail): outcome "refused", "accepted", or "BAD ..." (a bug)."""
    t0 = time.perf_counter()
    try:
        plan, trusted = check(case.data, seed)
    except PlanError as e:
        msg = str(e)
        if case.match and not re.search(case.match, msg):
            return "BAD message", f"{msg!r} does not match {case.match!r}"
        if time.perf_counter() - t0 > 1.0:
            return "BAD slow", f"{time.perf_counter() - t0:.1f} s"
        return "refused", type(e).__name__
    except Exception as e:  # noqa: BLE001 -- the point: nothing but PlanError
        return f"BAD {type(e).__name__}", f"{type(e).__name__}: {str(e)[:300]}"
    if time.perf_counter() - t0 > 1.0:
        return "BAD slow", f"{time.perf_counter() - t0:.1f} s"
    if case.certain:
        return "BAD accepted", "a plan that must be refused decoded and verified"
    if case.family == "bytes" and (plan != seed.plan or trusted != bool(seed.trust_key)):
        return "BAD accepted", "a byte-level mutation decoded to a different plan"
    return "accepted", ""


def cases(seed_value, n, family, all_seeds):
    """`n` cases of one family from one integer seed; deterministic."""
    rng = random.Random(f"{family}:{seed_value}")
    for _ in range(n):
        seed = rng.choice(all_seeds)
        yield seed, make_case(rng, seed, all_seeds, family)
