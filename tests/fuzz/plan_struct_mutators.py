"""The plan fuzzer's structural family (tests/fuzz/plan_mutators.py): the payload
decoded with msgpack and mutated as data (fields deleted, swapped, retyped, set to
extreme values; lists emptied, duplicated, nested deeply), framed again with a valid
header and digest."""


import msgpack
from plan_seeds import Case, FIXED, ROWS, T_DSHAPE, T_SHAPE, frame, load_payload



# ---------------------------------------------------------------- structural



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


