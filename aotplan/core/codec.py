"""The plan file: a fixed header, then a msgpack payload, encoded field by field.

    bytes 0..7    magic b"AOTPLAN\\0"
    bytes 8..11   format version, uint32 little-endian
    bytes 12..15  header length H, uint32 little-endian
    bytes 16..16+H  header, msgpack map:
                    launch_mode   str
                    payload_size  int
                    payload_sha256  bin(32)
                    data_size     int (format 5 on): the data section's bytes
                    signature     nil, or bin(32): HMAC-SHA256 over the version, the launch
                                  mode and the payload digest (`sign_key` at compile time)
    then          payload, msgpack (the Plan, below)
    then          (format 5 on) zero bytes up to a multiple of DATA_ALIGN from the file's
                  start, then the data section: the constants' bytes, each at a
                  DATA_ALIGN-aligned offset (zeros between). The payload lists each
                  constant's (offset, bytes) in it and `data_sha256`, the SHA-256 of each
                  DATA_CHUNK bytes of it, so the payload digest (and the signature) cover
                  the data too.

The magic and the version are checked before any msgpack is decoded; the payload's
size and digest before the payload is decoded; the data section's chunk digests (in
parallel threads: hashlib releases the GIL) before any constant is handed out. A
decoded plan's constants are read-only views of the file's bytes, not copies: loading
holds the weights once in host memory (formats 2-4 held them up to four times), and on
CPU the constant pool's device arrays share those bytes. Decoding uses explicit size limits (no
length field can claim more than the bytes that follow it), refuses missing and unknown
fields and checks every field's type; `aotplan.core.verify` then checks ranges and references.
A plan is untrusted data: every bad file ends in a `PlanError` naming the field
(tests/fuzz and scripts/fuzz_plans.py hold that up against mutated plans).

Version changelog:
  1 (aotplan 0.1): first version. Launch mode "kernel"; weights "arena" or "pool".
  2 (aotplan 0.2): launch modes "sink" (default), "fused", "kernel"; launches list their
    graph nodes; kernels shared by launches take runtime offsets (`n_offsets`), the sink
    and fused plans' first kernel takes the feeds (`feeds`), the last returns the outputs
    (`returns`); pool arguments follow from each launch's reads;
    optional native executables per kernel with a host fingerprint; HMAC signatures.
    Version 1 plans are refused: recompile.
  3 (aotplan 0.3): tensor rows gain `base`, `runs`, `stride` (views of a tensor's
    bytes, and concat inputs placed in their slice of the concat's bytes); `memory`
    gains plain_bound_bytes and shared_bound_bytes. Lifetimes are counted in phases
    (a launch reads, then writes), so a launch's output may take the bytes of an input
    that dies in it (in-place). Version 2 plans still load (no views; their lifetimes
    were planned more strictly, which the phase check accepts).
  4 (aotplan 0.4): storage formats. A tensor's `format` may be `nhwc`, `aligned:M` or
    `nc1hwc0:C0` (aotplan/core/formats.py), its `device_shape` and `nbytes` follow from it,
    and tensor rows gain `padding` (per device dimension, the padding elements at its
    end). Versions 2 and 3 (every tensor `default`, no padding) still load.
  5 (aotplan 0.5): the constants' bytes move out of the msgpack payload into an aligned
    data section after it (header `data_size`; payload `constants` rows are
    [tensor, offset, bytes]; payload `data_sha256`). Decoding no longer copies the
    weights, and their digest is checked in parallel. Versions 2-4 still load.
  6 (aotplan 0.6): a tensor's `storage` may be "inline": a small constant of a sink or
    fused plan compiled into the kernel that reads it as a literal (no argument, no data
    row); `memory` gains inline_constant_bytes (part of the step's device memory).
    Versions 2-5 still load.
"""

import hashlib
import hmac
import os
import stat
import struct
from concurrent.futures import ThreadPoolExecutor

import msgpack
import numpy as np

from aotplan.core.errors import PlanError
from aotplan.core.plan import (
    Launch, MemoryStats, Plan, PlanConstant, PlanKernel, PlanTensor, Provenance,
)

MAGIC = b"AOTPLAN\x00"
FORMAT_VERSION = 6
MIN_SUPPORTED_VERSION = 2
MAX_SUPPORTED_VERSION = 6
DATA_ALIGN = 64  # every constant's bytes start at a multiple of this from the file's start
DATA_CHUNK = 4 << 20  # bytes of the data section per SHA-256 in `data_sha256`
_PREFIX = struct.Struct("<8sII")
MAX_HEADER_BYTES = 4096
# Limits for the payload decoder: a corrupt length field must not allocate gigabytes.
# Each is also capped by the payload's size (`_limits`): an element takes at least a byte.
_LIMITS = dict(max_str_len=1 << 20, max_bin_len=1 << 33, max_array_len=1 << 24, max_map_len=1 << 10)
HEADER_FIELDS = ("launch_mode", "payload_size", "payload_sha256", "signature")
HEADER_FIELDS_5 = HEADER_FIELDS + ("data_size",)
PAYLOAD_FIELDS = ("launch_mode", "weights", "planner", "passes", "alignment", "arena_bytes", "tensors", "constants",
                  "kernels", "launches", "inputs", "outputs", "output_names", "input_kernel", "output_kernel",
                  "place_kernel", "memory", "provenance")
PAYLOAD_FIELDS_5 = PAYLOAD_FIELDS + ("data_sha256",)


def _align(n):
    return -(-n // DATA_ALIGN) * DATA_ALIGN


def data_start(header_len, payload_size):
    """Where a format-5 file's data section starts."""
    return _align(_PREFIX.size + header_len + payload_size)


def chunk_digests(data):
    """SHA-256 of each DATA_CHUNK bytes of `data` (a bytes-like object); large inputs
    are hashed in parallel threads."""
    view = memoryview(data)
    chunks = [view[i:i + DATA_CHUNK] for i in range(0, len(view), DATA_CHUNK)]
    sha = lambda c: hashlib.sha256(c).digest()  # noqa: E731
    workers = min(len(chunks), os.cpu_count() or 1, 8)
    if workers < 2:
        return [sha(c) for c in chunks]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(sha, chunks))


def data_section(constants):
    """Constants -> (rows [tensor, offset, bytes], the data section's bytes): each
    constant at the next DATA_ALIGN-aligned offset, zeros between."""
    rows, parts, end = [], [], 0
    for c in constants:
        start = _align(end)
        if start > end:
            parts.append(bytes(start - end))
        parts.append(c.data)
        rows.append([c.tensor, start, len(c.data)])
        end = start + len(c.data)
    return rows, b"".join(parts)


def _limits(n):
    return {k: min(v, n) for k, v in _LIMITS.items()}


# ---------------------------------------------------------------- encoding

def _tensor(t):
    return [t.name, t.kind, t.dtype, list(t.shape), t.format, list(t.device_shape), t.storage, t.offset, t.nbytes,
            t.base, t.runs, t.stride, list(t.padding)]


def _kernel(k):
    return [k.name, k.exported, k.workspace_bytes, k.n_offsets, k.feeds, k.returns, k.native]


def _launch(l):
    return [l.kernel, l.node, list(l.reads), list(l.writes), list(l.nodes)]


def encode_payload(plan, constant_rows=None, digests=None):
    """The payload's bytes (the current format). It needs the data section's constant
    rows and chunk digests (`data_section`, `chunk_digests`)."""
    m, p = plan.memory, plan.provenance
    if constant_rows is None:
        constant_rows, data = data_section(plan.constants)
        digests = chunk_digests(data)
    return msgpack.packb({
        "launch_mode": plan.launch_mode,
        "weights": plan.weights,
        "planner": plan.planner,
        "passes": list(plan.passes),
        "alignment": plan.alignment,
        "arena_bytes": plan.arena_bytes,
        "tensors": [_tensor(t) for t in plan.tensors],
        "constants": constant_rows,
        "data_sha256": digests,
        "kernels": [_kernel(k) for k in plan.kernels],
        "launches": [_launch(l) for l in plan.launches],
        "inputs": list(plan.inputs),
        "outputs": list(plan.outputs),
        "output_names": list(plan.output_names),
        "input_kernel": plan.input_kernel,
        "output_kernel": plan.output_kernel,
        "place_kernel": plan.place_kernel,
        "memory": [m.arena_bytes, m.lower_bound_bytes, m.naive_bytes, m.constant_pool_bytes, m.max_workspace_bytes,
                   m.plain_bound_bytes, m.shared_bound_bytes, m.inline_constant_bytes],
        "provenance": [p.model_name, p.model_digest, p.aotplan_version, p.jax_version, p.jaxlib_version,
                       list(p.platforms), p.native_fingerprint],
    }, use_bin_type=True)


def _signature(key, version, launch_mode, digest):
    msg = b"aotplan-signature\0" + struct.pack("<I", version) + launch_mode.encode() + b"\0" + digest
    return hmac.new(key, msg, hashlib.sha256).digest()


def encode(plan, sign_key=None):
    """Plan -> bytes; `sign_key` (bytes) signs it with HMAC-SHA256."""
    rows, data = data_section(plan.constants)
    return frame(encode_payload(plan, rows, chunk_digests(data)), plan.launch_mode, sign_key, data=data)


def frame(payload, launch_mode, sign_key=None, version=FORMAT_VERSION, data=b""):
    """Payload bytes -> a plan file: magic, version, a header that states the payload's
    size and digest (signed with `sign_key`), the payload, then (format 5 on) padding
    and the data section `data`. Neither is looked at (fuzzers frame arbitrary bytes)."""
    digest = hashlib.sha256(payload).digest()
    fields = {
        "launch_mode": launch_mode,
        "payload_size": len(payload),
        "payload_sha256": digest,
        "signature": _signature(sign_key, version, launch_mode, digest) if sign_key else None,
    }
    if version >= 5:
        fields["data_size"] = len(data)
    header = msgpack.packb(fields, use_bin_type=True)
    out = _PREFIX.pack(MAGIC, version, len(header)) + header + payload
    if version >= 5:
        out += bytes(data_start(len(header), len(payload)) - len(out)) + data
    return out


# ---------------------------------------------------------------- decoding

def _type_name(kind):
    return kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)


def _check(value, kind, field):
    if isinstance(value, bool) and kind in (int, (int,)):
        raise PlanError(f"plan field {field}: expected int, got bool")
    if not isinstance(value, kind):
        raise PlanError(f"plan field {field}: expected {_type_name(kind)}, got {type(value).__name__}")
    return value


def _get(m, key, kind, where="plan"):
    if key not in m:
        raise PlanError(f"plan field {where}.{key} is missing")
    return _check(m[key], kind, f"{where}.{key}")


def _ints(value, field):
    _check(value, list, field)
    for i, v in enumerate(value):
        _check(v, int, f"{field}[{i}]")
    return tuple(value)


def _strs(value, field):
    for i, v in enumerate(value):
        _check(v, str, f"{field}[{i}]")
    return tuple(value)


def _fields(m, fields, where):
    """`m` (a map) has exactly `fields`."""
    for k in m:
        if k not in fields:
            raise PlanError(f"plan field {where}: unknown field {str(k)[:64]!r}")
    for k in fields:
        if k not in m:
            raise PlanError(f"plan field {where}.{k} is missing")


def _row(value, n, field):
    _check(value, list, field)
    if len(value) != n:
        raise PlanError(f"plan field {field}: expected {n} entries, got {len(value)}")
    return value


def _decode_tensor(r, i, version):
    f = f"tensors[{i}]"
    r = _row(r, {2: 9, 3: 12}.get(version, 13), f)
    if version < 6 and r[6] == "inline":
        raise PlanError(f"plan field {f}.storage: 'inline' is a format 6 storage, this plan says format {version}")
    return PlanTensor(
        name=_check(r[0], str, f + ".name"), kind=_check(r[1], str, f + ".kind"),
        dtype=_check(r[2], str, f + ".dtype"), shape=_ints(r[3], f + ".shape"),
        format=_check(r[4], str, f + ".format"), device_shape=_ints(r[5], f + ".device_shape"),
        storage=_check(r[6], str, f + ".storage"), offset=_check(r[7], int, f + ".offset"),
        nbytes=_check(r[8], int, f + ".nbytes"),
        **({} if version == 2 else dict(base=_check(r[9], int, f + ".base"), runs=_check(r[10], int, f + ".runs"),
                                        stride=_check(r[11], int, f + ".stride"))),
        **({} if version < 4 else dict(padding=_ints(r[12], f + ".padding"))))


def _decode_kernel(r, i):
    f = f"kernels[{i}]"
    r = _row(r, 7, f)
    return PlanKernel(name=_check(r[0], str, f + ".name"), exported=_check(r[1], bytes, f + ".exported"),
                      workspace_bytes=_check(r[2], int, f + ".workspace_bytes"),
                      n_offsets=_check(r[3], int, f + ".n_offsets"), feeds=_check(r[4], bool, f + ".feeds"),
                      returns=_check(r[5], bool, f + ".returns"), native=_check(r[6], bytes, f + ".native"))


def _decode_launch(r, i):
    f = f"launches[{i}]"
    r = _row(r, 5, f)
    return Launch(kernel=_check(r[0], int, f + ".kernel"), node=_check(r[1], str, f + ".node"),
                  reads=_ints(r[2], f + ".reads"), writes=_ints(r[3], f + ".writes"),
                  nodes=_strs(_check(r[4], list, f + ".nodes"), f + ".nodes"))


def _constants_5(rows, digests, section):
    """Format 5's constant rows [tensor, offset, bytes] and chunk digests, checked
    against the data section -> PlanConstants viewing it."""
    section = memoryview(section).toreadonly()
    _check(digests, list, "plan.data_sha256")
    want = -(-len(section) // DATA_CHUNK)
    if len(digests) != want:
        raise PlanError(f"plan field data_sha256: {len(digests)} digests, the data section's "
                        f"{len(section)} bytes need {want}")
    for i, d in enumerate(digests):
        if not isinstance(d, bytes) or len(d) != 32:
            raise PlanError(f"plan field data_sha256[{i}]: expected 32 bytes")
    consts, end = [], 0
    for i, c in enumerate(rows):
        f = f"constants[{i}]"
        c = _row(c, 3, f)
        tensor, at, n = (_check(c[j], int, f + k) for j, k in enumerate((".tensor", ".offset", ".bytes")))
        if at % DATA_ALIGN or at < end or n < 0 or at + n > len(section):
            raise PlanError(f"plan field {f}: bytes [{at}, {at + n}) are not an aligned range of the data "
                            f"section ({len(section)} bytes) after the previous constant's (ending at {end})")
        end = at + n
        consts.append(PlanConstant(tensor, section[at:end]))
    for k, got in enumerate(chunk_digests(section)):
        if got != digests[k]:
            raise PlanError(f"plan is corrupt: digest mismatch in the data section's bytes "
                            f"[{k * DATA_CHUNK}, {min(len(section), (k + 1) * DATA_CHUNK)})")
    return consts


def decode_payload(payload, version=FORMAT_VERSION, section=b""):
    """Payload bytes (and, format 5 on, the data section) -> Plan."""
    try:
        m = msgpack.unpackb(payload, raw=False, strict_map_key=True, use_list=True, **_limits(len(payload)))
    except Exception as e:  # msgpack raises ValueError, TypeError, UnicodeDecodeError, ...
        raise PlanError(f"plan payload is not valid msgpack: {e}") from None
    _check(m, dict, "payload")
    _fields(m, PAYLOAD_FIELDS_5 if version >= 5 else PAYLOAD_FIELDS, "plan")
    if version >= 5:
        consts = _constants_5(_get(m, "constants", list), _get(m, "data_sha256", list), section)
    else:
        consts = []
        for i, c in enumerate(_get(m, "constants", list)):
            c = _row(c, 2, f"constants[{i}]")
            consts.append(PlanConstant(_check(c[0], int, f"constants[{i}].tensor"),
                                       _check(c[1], bytes, f"constants[{i}].data")))
    mem = _ints(_row(_get(m, "memory", list), {2: 5, 6: 8}.get(version, 7), "memory"), "memory")
    if version == 2:  # no sharing: both reference bounds are the plan's own
        mem += (mem[1], mem[1])
    prov = _row(_get(m, "provenance", list), 7, "provenance")
    for i in (0, 1, 2, 3, 4, 6):
        _check(prov[i], str, f"provenance[{i}]")
    _check(prov[5], list, "provenance.platforms")
    for i, p in enumerate(prov[5]):
        _check(p, str, f"provenance.platforms[{i}]")
    return Plan(
        launch_mode=_get(m, "launch_mode", str), weights=_get(m, "weights", str),
        planner=_get(m, "planner", str), passes=_strs(_get(m, "passes", list), "passes"),
        alignment=_get(m, "alignment", int),
        arena_bytes=_get(m, "arena_bytes", int),
        tensors=tuple(_decode_tensor(r, i, version) for i, r in enumerate(_get(m, "tensors", list))),
        constants=tuple(consts),
        kernels=tuple(_decode_kernel(r, i) for i, r in enumerate(_get(m, "kernels", list))),
        launches=tuple(_decode_launch(r, i) for i, r in enumerate(_get(m, "launches", list))),
        inputs=_ints(_get(m, "inputs", list), "inputs"), outputs=_ints(_get(m, "outputs", list), "outputs"),
        output_names=_strs(_get(m, "output_names", list), "output_names"),
        input_kernel=_get(m, "input_kernel", int), output_kernel=_get(m, "output_kernel", int),
        place_kernel=_get(m, "place_kernel", int),
        memory=MemoryStats(*mem),
        provenance=Provenance(prov[0], prov[1], prov[2], prov[3], prov[4], tuple(prov[5]), prov[6]),
    )


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
    version, hlen, header, size = _head(data)
    digest = _get(header, "payload_sha256", bytes, "header")
    sig = _get(header, "signature", (bytes, type(None)), "header")
    start = _PREFIX.size + hlen
    if version >= 5:
        at, stated = data_start(hlen, size), _stated_size(version, hlen, header, size)
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
        if not hmac.compare_digest(sig, _signature(trust_key, version, header["launch_mode"], digest)):
            raise PlanError("plan signature does not verify with the trusted key: it was changed after signing, "
                            "or signed with another key")
        trusted = True
    elif require_signature:
        raise PlanError("plan is signed, but no trusted key is configured to check it (--trust-key or "
                        "AOTPLAN_TRUST_KEY)")
    return header, payload, section, trusted


def _head(data):
    """The prefix and header of a plan's bytes (at least its first _PREFIX.size +
    MAX_HEADER_BYTES, where it has them), checked -> (version, header length, header,
    payload size)."""
    if len(data) < _PREFIX.size or data[:len(MAGIC)] != MAGIC:
        raise PlanError("not an aotplan plan (bad magic bytes)")
    _, version, hlen = _PREFIX.unpack_from(data)
    if version > MAX_SUPPORTED_VERSION:
        raise PlanError(f"plan format {version} is newer than this executor "
                        f"(supports {MIN_SUPPORTED_VERSION}-{MAX_SUPPORTED_VERSION}); upgrade aotplan")
    if version < MIN_SUPPORTED_VERSION:
        raise PlanError(f"plan format {version} is older than this executor supports "
                        f"({MIN_SUPPORTED_VERSION}-{MAX_SUPPORTED_VERSION}); recompile the model")
    if hlen > MAX_HEADER_BYTES or _PREFIX.size + hlen > len(data):
        raise PlanError("plan is truncated or corrupt: bad header length")
    try:
        header = msgpack.unpackb(data[_PREFIX.size:_PREFIX.size + hlen], raw=False, strict_map_key=True,
                                 max_str_len=256, max_bin_len=1024, max_array_len=64, max_map_len=64)
    except Exception as e:
        raise PlanError(f"plan is corrupt: header is not valid msgpack ({e})") from None
    _check(header, dict, "header")
    _fields(header, HEADER_FIELDS_5 if version >= 5 else HEADER_FIELDS, "header")
    _get(header, "launch_mode", str, "header")
    size = _get(header, "payload_size", int, "header")
    if size < 0 or (version >= 5 and _get(header, "data_size", int, "header") < 0):
        raise PlanError("plan is corrupt: negative section size in the header")
    return version, hlen, header, size


def _stated_size(version, hlen, header, size):
    """The file's size, as its header states it."""
    if version >= 5:
        return data_start(hlen, size) + header["data_size"]
    return _PREFIX.size + hlen + size


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


MIN_KEY_BYTES = 16  # a signing/trust key's least length


def read_key(path):
    """A signing/trust key file -> bytes (its whole content, at least MIN_KEY_BYTES)."""
    _check_path(path, "key file")
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


def _check_path(path, what):
    """`open` takes an int as a file descriptor (reads it, then closes it under its
    owner): a path here must be a str or os.PathLike."""
    if not isinstance(path, (str, os.PathLike)):
        raise PlanError(f"{what}: expected a path (str or os.PathLike), got {type(path).__name__}")


def read_bytes(path):
    """A plan file's bytes, as a read-only memoryview whose first byte is DATA_ALIGN-
    aligned in memory, so the data section's constants are aligned there too (XLA's CPU
    client then uses their bytes in place instead of copying them). `path`: a str or
    os.PathLike (bytes in memory: `decode`). The header is read and checked first: a
    file that is not a plan, or whose size is not the one its header states, is refused
    before the rest is read (a pipe or device is read up to that size)."""
    _check_path(path, "plan file")
    stated = None
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            head = _read_into(f, bytearray(_PREFIX.size + MAX_HEADER_BYTES))
            try:
                stated = _stated_size(*_head(head))
            except PlanError as e:
                if len(head) == _PREFIX.size + MAX_HEADER_BYTES or head[:len(MAGIC)] != MAGIC:
                    raise named(path, e) from None
                stated = len(head)  # a short file: `split` says what is wrong with it
            if stat.S_ISREG(st.st_mode):
                if st.st_size != stated:
                    raise named(path, PlanError(f"plan is truncated or corrupt: {st.st_size} bytes, the header says "
                                                f"{stated}"))
                view = _aligned(stated)  # (the header, read, is part of it)
                view[:len(head)] = head
                return view[:len(head) + len(_read_into(f, view[len(head):]))].toreadonly()
            # a pipe or a device: its size is not known, and the header's is only a claim: memory
            # grows with the bytes that come
            data = bytearray(head)
            while len(data) < stated:
                chunk = f.read(min(stated - len(data), 1 << 20))
                if not chunk:
                    break
                data += chunk
            if len(data) == stated and f.read(1):
                raise named(path, PlanError(f"plan is corrupt: more bytes than the {stated} its header states"))
            view = _aligned(len(data))
            view[:] = data
            return view.toreadonly()
    except MemoryError:
        raise PlanError(f"cannot read plan {path!r}: not enough memory for its {stated} bytes") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise PlanError(f"cannot read plan {path!r}: {getattr(e, 'strerror', None) or e}") from None


def _aligned(n):
    """A writable memoryview of n bytes whose first is DATA_ALIGN-aligned in memory."""
    buf = np.empty(n + DATA_ALIGN, np.uint8)
    at = -buf.ctypes.data % DATA_ALIGN
    return memoryview(buf[at:at + n])


def _read_into(f, view):
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
