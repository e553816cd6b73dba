"""The plan fuzzer's seeds and cases (tests/fuzz/plan_mutators.py): the golden plans it
mutates, a case, framing a mutated payload into a plan file, and the row layout of
the payload's tensors, kernels and launches."""

import dataclasses
import os
import struct

import msgpack

from aotplan.core import codec, formats, verify
from aotplan.core.plan import PlanKernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "plans", "golden", f"v{codec.STATELESS_VERSION}")  # plans without states
GOLDEN_STATES = os.path.join(ROOT, "plans", "golden", f"v{codec.STATE_VERSION}")
GOLDEN_MESH = os.path.join(ROOT, "plans", "golden", f"v{codec.MESH_VERSION}")  # data parallel
GOLDEN_TENSOR = os.path.join(ROOT, "plans", "golden", f"v{codec.FORMAT_VERSION}")  # tensor parallel
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
    with open(os.path.join(GOLDEN_MESH, "mlp_2devices_kernel.plan"), "rb") as f:  # format 8: a mesh
        data = f.read()
    out.append(Seed("mlp_2devices_kernel", data, codec.decode(data)))
    # format 9: tensor parallel (shardings, the weights' parts, collectives)
    with open(os.path.join(GOLDEN_TENSOR, "mlp_2devices_tensor_kernel.plan"), "rb") as f:
        data = f.read()
    out.append(Seed("mlp_2devices_tensor_kernel", data, codec.decode(data)))
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



def load_payload(seed):
    return msgpack.unpackb(seed.payload, raw=False, strict_map_key=False)

