"""The plan file: a fixed header, then a msgpack payload, encoded field by field.

    bytes 0..7    magic b"AOTPLAN\\0"
    bytes 8..11   format version, uint32 little-endian
    bytes 12..15  header length H, uint32 little-endian
    bytes 16..16+H  header, msgpack map:
                    launch_mode   str
                    payload_size  int
                    payload_sha256  bin(32)
                    data_size     int (format 5 on): the data section's bytes
                    signature     nil, or bin(64): Ed25519, or bin(32): HMAC-SHA256 (older
                                  plans), over the version, the launch mode and the
                                  payload digest (`sign_key` at compile time; signatures.py)
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
  7: states, tensors kept on the device across steps (a KV cache): the
    "state" tensor kind and storage (bytes of a state buffer beside the arena),
    payload `states` ([name, tensor, update] rows), kernel rows' `state` flag (the
    kernel takes and returns the state buffer after the arena), `memory`'s
    state_bytes; a constant row may hold a state's initial value. Only plans with
    states are written as format 7: a plan without is written as format 6, byte for
    byte as aotplan 0.6 wrote it, so executors before 0.7 still load it. Versions 2-6
    still load.
  8: a mesh, plans for several devices (`mesh`: nil, or [devices, parallel, input
    axes, output axes]; `aotplan.core.plan.PlanMesh`). Only plans with a mesh are
    written as format 8; the others as 6 or 7, as before. Versions 2-7 still load.
  9: tensor-parallel plans: the `mesh` row adds [shardings, shards, collectives]
    (`PlanSharding` [tensor, kind, axis], `PlanShard` [device, tensor, offset, bytes]
    with its bytes in the data section, `PlanCollective` [op, after, reads, writes,
    axis]). Only tensor-parallel plans are written as format 9; a data-parallel plan
    stays format 8. Versions 2-8 still load.

The modules: `frame` (magic, version, header, signature, the file's layout), `payload`
(a Plan as positional rows, current format), `upgrades` (formats 2-5 upgraded to the
current one, a step per version), `data` (the data section), `fields` (type checks
of decoded values), `plan_file` (encode, decode), `files` (reading a file), `keys`.
"""

from aotplan.core.codec.data import DATA_ALIGN, DATA_CHUNK, chunk_digests, data_section, shared_data_section  # noqa: F401,E501
from aotplan.core.codec.files import named, read, read_bytes, read_checked  # noqa: F401
from aotplan.core.codec.frame import (  # noqa: F401
    HEADER_FIELDS, HEADER_FIELDS_5, MAGIC, MAX_HEADER_BYTES, MAX_SUPPORTED_VERSION, MIN_SUPPORTED_VERSION, data_start,
    frame, read_header, split,
)
from aotplan.core.codec.keys import MAX_KEY_FILE_BYTES, MIN_KEY_BYTES, check_key, env_key, read_key  # noqa: F401
from aotplan.core.codec.payload import (  # noqa: F401
    FORMAT_VERSION, MESH_VERSION, STATE_VERSION, STATELESS_VERSION, decode_payload, encode_payload, version_of,
)
from aotplan.core.codec.plan_file import decode, decode_checked, encode  # noqa: F401
from aotplan.core.codec.upgrades import PAYLOAD_FIELDS  # noqa: F401
