"""Older plan formats, read by upgrading their payload one version step at a time to
the current schema (`upgrade`), so that the payload decoder and the verifier know one
format only. Each step checks what it reads (the same errors as the decoder's) and
fills in what its version added with the value an older plan means: no sharing, no
padding, no inline constants. The frame (header, data section) is `frame.py`'s."""

from aotplan.core.codec.data import chunk_digests, data_section
from aotplan.core.codec.fields import check, exact_fields, get, ints, row
from aotplan.core.errors import PlanError
from aotplan.core.plan import PlanConstant

PAYLOAD_FIELDS_2 = ("launch_mode", "weights", "planner", "passes", "alignment", "arena_bytes", "tensors", "constants",
                    "kernels", "launches", "inputs", "outputs", "output_names", "input_kernel", "output_kernel",
                    "place_kernel", "memory", "provenance")
PAYLOAD_FIELDS_5 = PAYLOAD_FIELDS_2 + ("data_sha256",)  # format 5's `data_sha256`; 6 added none
PAYLOAD_FIELDS_7 = PAYLOAD_FIELDS_5 + ("states", "method", "methods")
PAYLOAD_FIELDS_8 = PAYLOAD_FIELDS_7 + ("mesh",)
# a further method of a format-7 plan: a plan's own fields (the data section's digests
# and the provenance are the top plan's; a method holds no methods; the mesh is the plan's)
METHOD_FIELDS = tuple(f for f in PAYLOAD_FIELDS_7 if f not in ("data_sha256", "provenance", "methods"))
PAYLOAD_FIELDS = PAYLOAD_FIELDS_8  # the current format's (format 9 added no field: rows to `mesh`)
FIELDS_OF = {2: PAYLOAD_FIELDS_2, 3: PAYLOAD_FIELDS_2, 4: PAYLOAD_FIELDS_2, 5: PAYLOAD_FIELDS_5, 6: PAYLOAD_FIELDS_5,
             7: PAYLOAD_FIELDS_7, 8: PAYLOAD_FIELDS_8, 9: PAYLOAD_FIELDS_8}


def _tensor_rows(m, n):
    return [row(r, n, f"tensors[{i}]") for i, r in enumerate(get(m, "tensors", list))]


def to_3(m, section, version):
    """Format 3 gave tensor rows `base`, `runs`, `stride` (views and placed concat parts)
    and `memory` the model's two reference bounds. A format-2 plan shares no bytes: each
    tensor has its own (base -1, one run), and both bounds are its own lower bound."""
    m["tensors"] = [r + [-1, 1, 0] for r in _tensor_rows(m, 9)]
    mem = list(ints(row(get(m, "memory", list), 5, "memory"), "memory"))
    m["memory"] = mem + [mem[1], mem[1]]
    return m, section


def to_4(m, section, version):
    """Format 4 gave tensor rows `padding` (storage formats): before it every tensor is
    in the default format, with no padding element."""
    rows = _tensor_rows(m, 12)
    m["tensors"] = [r + [[0] * len(ints(r[5], f"tensors[{i}].device_shape"))] for i, r in enumerate(rows)]
    return m, section


def to_5(m, section, version):
    """Format 5 moved the constants' bytes from payload rows [tensor, bytes] into the data
    section, rows [tensor, offset, bytes], with `data_sha256`. An older plan's constants
    are laid out as format 5 would (a copy, once; its digests are the payload's own)."""
    consts = []
    for i, c in enumerate(get(m, "constants", list)):
        c = row(c, 2, f"constants[{i}]")
        consts.append(PlanConstant(check(c[0], int, f"constants[{i}].tensor"), check(c[1], bytes,
                                                                                     f"constants[{i}].data")))
    m["constants"], section = data_section(consts)
    m["data_sha256"] = chunk_digests(section)
    return m, section


def to_6(m, section, version):
    """Format 6 added the "inline" storage and `memory`'s inline_constant_bytes: an older
    plan has no inline constant (and says so, where a row claims one)."""
    for i, r in enumerate(_tensor_rows(m, 13)):
        if r[6] == "inline":
            raise PlanError(f"plan field tensors[{i}].storage: 'inline' is a format 6 storage, this plan says "
                            f"format {version}")
    m["memory"] = list(row(get(m, "memory", list), 7, "memory")) + [0]
    return m, section


def to_7(m, section, version):
    """Format 7 added states (the "state" kind and storage, `states`, kernel rows'
    `state` flag and `memory`'s state_bytes) and methods (`method`, `methods`). An
    older plan has none (and says so, where a row claims a state). Format 7 is written
    only for plans with states or methods."""
    for i, r in enumerate(_tensor_rows(m, 13)):
        if r[1] == "state" or r[6] == "state":
            raise PlanError(f"plan field tensors[{i}]: 'state' is a format 7 kind and storage, this plan says "
                            f"format {version}")
    m["kernels"] = [row(r, 7, f"kernels[{i}]") + [False] for i, r in enumerate(get(m, "kernels", list))]
    m["memory"] = list(row(get(m, "memory", list), 8, "memory")) + [0]
    m["states"], m["method"], m["methods"] = [], "", []
    return m, section


def to_8(m, section, version):
    """Format 8 added `mesh` (a plan for several devices): an older plan runs on one."""
    m["mesh"] = None
    return m, section


def to_9(m, section, version):
    """Format 9 added tensor-parallel plans: `mesh` rows end in their shardings, the
    split weights' parts and the collectives. A data-parallel plan has none of them."""
    mesh = m.get("mesh")
    if mesh is not None:
        m["mesh"] = list(row(mesh, 4, "mesh")) + [[], [], []]
    return m, section


STEPS = {2: to_3, 3: to_4, 4: to_5, 5: to_6, 6: to_7, 7: to_8, 8: to_9}  # format v -> the step to v + 1


def upgrade(m, version, section):
    """A decoded payload map of format `version` (and its data section, empty before
    format 5) -> the same plan as a current-format map and data section."""
    if version not in FIELDS_OF:
        raise PlanError(f"plan format {version}: no payload schema for it (formats {min(FIELDS_OF)}-{max(FIELDS_OF)})")
    exact_fields(m, FIELDS_OF[version], "plan")
    for v in range(version, max(FIELDS_OF)):
        m, section = STEPS[v](m, section, version)
    return m, section
