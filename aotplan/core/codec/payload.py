"""The payload: a Plan as a msgpack map of positional rows (the current format), and
back, every field's type checked. An older format's payload is upgraded first."""

import dataclasses

import msgpack

from aotplan.core.codec import upgrades
from aotplan.core.codec.data import DATA_ALIGN, DATA_CHUNK, chunk_digests, shared_data_section
from aotplan.core.codec.fields import check, exact_fields, get, ints, row, strs
from aotplan.core.codec.upgrades import METHOD_FIELDS, PAYLOAD_FIELDS
from aotplan.core.errors import PlanError
from aotplan.core.plan import (
    Launch, MemoryStats, Plan, PlanCollective, PlanConstant, PlanKernel, PlanMesh, PlanShard, PlanSharding, PlanState,
    PlanTensor, Provenance,
)

FORMAT_VERSION = 9  # the newest format, what `encode_payload` writes for a tensor-parallel plan
MESH_VERSION = 8  # what it writes for a data-parallel plan
STATE_VERSION = 7  # what it writes for a plan with states or methods and no mesh
STATELESS_VERSION = 6  # what it writes for a plan of one method without: the bytes executors before 7 read

# Limits for the payload decoder: a corrupt length field must not allocate gigabytes.
# Each is also capped by the payload's size (`_limits`): an element takes at least a byte.
_LIMITS = dict(max_str_len=1 << 20, max_bin_len=1 << 33, max_array_len=1 << 24, max_map_len=1 << 10)


def _limits(n):
    return {k: min(v, n) for k, v in _LIMITS.items()}


# ---------------------------------------------------------------- encoding

def _tensor(t):
    return [t.name, t.kind, t.dtype, list(t.shape), t.format, list(t.device_shape), t.storage, t.offset, t.nbytes,
            t.base, t.runs, t.stride, list(t.padding)]


def _kernel(k, version):
    return [k.name, k.exported, k.workspace_bytes, k.n_offsets, k.feeds, k.returns, k.native] + (
        [k.state] if version >= 7 else [])


def has_state(plan):
    return bool(plan.states or plan.memory.state_bytes or any(k.state for k in plan.kernels)
                or any(t.kind == "state" or t.storage == "state" for t in plan.tensors))


def version_of(plan):
    """The format a plan is written in: the oldest that holds it (6 without states,
    methods or a mesh, so such a plan's bytes are those of aotplan 0.6 and its executors
    read them; 7 without a mesh, read by executors since states; 8 for a data-parallel
    plan; 9 for a tensor-parallel one)."""
    if plan.mesh is not None:
        m = plan.mesh
        return FORMAT_VERSION if m.parallel != "data" or m.shardings or m.shards or m.collectives else MESH_VERSION
    return STATE_VERSION if has_state(plan) or plan.methods or plan.method else STATELESS_VERSION


def _launch(l):
    return [l.kernel, l.node, list(l.reads), list(l.writes), list(l.nodes)]


def constant_lists(plan):
    """What the data section holds, as lists of rows (`shared_data_section`): the
    plan's constants, each further method's, then (format 9) the devices' parts of the
    split weights."""
    lists = [plan.constants] + [m.constants for m in plan.methods]
    if plan.mesh is not None and plan.mesh.shards:
        lists.append(plan.mesh.shards)
    return lists


def encode_payload(plan, constant_rows=None, digests=None):
    """The payload's bytes, in format `version_of(plan)`. It needs the data section's
    rows, as `shared_data_section(constant_lists(plan))` gives them, and its chunk
    digests (`chunk_digests`)."""
    version = version_of(plan)
    if constant_rows is None:
        constant_rows, data = shared_data_section(constant_lists(plan))
        digests = chunk_digests(data)
    rows = list(constant_rows)
    p = plan.provenance
    fields = _fields(plan, rows[0], version, {
        "data_sha256": digests,
        "provenance": [p.model_name, p.model_digest, p.aotplan_version, p.jax_version, p.jaxlib_version,
                       list(p.platforms), p.native_fingerprint]})
    if version >= 7:
        fields["method"] = plan.method
        fields["methods"] = [_fields(m, r, version, {}) | {"method": m.method} for m, r in zip(plan.methods, rows[1:])]
    if version >= 8:
        fields["mesh"] = _mesh(plan.mesh, rows[-1] if plan.mesh is not None and plan.mesh.shards else [], version)
    return msgpack.packb(fields, use_bin_type=True)


def _mesh(mesh, shard_rows, version):
    """The payload's `mesh`: nil, or [devices, parallel, input axes, output axes] and,
    format 9, [shardings, shards, collectives] rows: shardings [tensor, kind, axis],
    shards [tensor, device, offset, bytes] (their bytes in the data section),
    collectives [op, after, reads, writes, axis]."""
    if mesh is None:
        return None
    row_ = [mesh.devices, mesh.parallel, list(mesh.input_axes), list(mesh.output_axes)]
    if version >= 9:
        row_ += [[[s.tensor, s.kind, s.axis] for s in mesh.shardings],
                 [[s.device, *r] for s, r in zip(mesh.shards, shard_rows)],
                 [[c.op, c.after, list(c.reads), list(c.writes), c.axis] for c in mesh.collectives]]
    return row_


def _fields(plan, constant_rows, version, shared):
    """A plan's own fields, in the order format 6 wrote them (its bytes depend on it);
    `shared`: data_sha256 and provenance, the top plan's alone."""
    m = plan.memory
    memory = [m.arena_bytes, m.lower_bound_bytes, m.naive_bytes, m.constant_pool_bytes, m.max_workspace_bytes,
              m.plain_bound_bytes, m.shared_bound_bytes, m.inline_constant_bytes]
    fields = {
        "launch_mode": plan.launch_mode,
        "weights": plan.weights,
        "planner": plan.planner,
        "passes": list(plan.passes),
        "alignment": plan.alignment,
        "arena_bytes": plan.arena_bytes,
        "tensors": [_tensor(t) for t in plan.tensors],
        "constants": constant_rows,
        **({"data_sha256": shared["data_sha256"]} if shared else {}),
        "kernels": [_kernel(k, version) for k in plan.kernels],
        "launches": [_launch(l) for l in plan.launches],
        "inputs": list(plan.inputs),
        "outputs": list(plan.outputs),
        "output_names": list(plan.output_names),
        "input_kernel": plan.input_kernel,
        "output_kernel": plan.output_kernel,
        "place_kernel": plan.place_kernel,
        "memory": memory + ([m.state_bytes] if version >= 7 else []),
        **({"provenance": shared["provenance"]} if shared else {}),
    }
    if version >= 7:
        fields["states"] = [[s.name, s.tensor, s.update] for s in plan.states]
    return fields


# ---------------------------------------------------------------- decoding

def _decode_tensor(r, i):
    f = f"tensors[{i}]"
    r = row(r, 13, f)
    return PlanTensor(
        name=check(r[0], str, f + ".name"), kind=check(r[1], str, f + ".kind"),
        dtype=check(r[2], str, f + ".dtype"), shape=ints(r[3], f + ".shape"),
        format=check(r[4], str, f + ".format"), device_shape=ints(r[5], f + ".device_shape"),
        storage=check(r[6], str, f + ".storage"), offset=check(r[7], int, f + ".offset"),
        nbytes=check(r[8], int, f + ".nbytes"), base=check(r[9], int, f + ".base"), runs=check(r[10], int, f + ".runs"),
        stride=check(r[11], int, f + ".stride"), padding=ints(r[12], f + ".padding"))


def _decode_kernel(r, i):
    f = f"kernels[{i}]"
    r = row(r, 8, f)
    return PlanKernel(name=check(r[0], str, f + ".name"), exported=check(r[1], bytes, f + ".exported"),
                      workspace_bytes=check(r[2], int, f + ".workspace_bytes"),
                      n_offsets=check(r[3], int, f + ".n_offsets"), feeds=check(r[4], bool, f + ".feeds"),
                      returns=check(r[5], bool, f + ".returns"), native=check(r[6], bytes, f + ".native"),
                      state=check(r[7], bool, f + ".state"))


def _decode_state(r, i):
    f = f"states[{i}]"
    r = row(r, 3, f)
    return PlanState(name=check(r[0], str, f + ".name"), tensor=check(r[1], int, f + ".tensor"),
                     update=check(r[2], int, f + ".update"))


def _decode_mesh(m, section):
    """The payload's `mesh` (format 8 on; `_mesh`): nil or a row."""
    if m is None:
        return None
    r = row(m, 7, "mesh")
    shards = []
    for i, sr in enumerate(check(r[5], list, "mesh.shards")):
        sr = row(sr, 4, f"mesh.shards[{i}]")
        device = check(sr[0], int, f"mesh.shards[{i}].device")
        (c,) = rows_in([sr[1:]], section, ascending=False)
        shards.append(PlanShard(c.tensor, device, c.data))
    shardings = []
    for i, sr in enumerate(check(r[4], list, "mesh.shardings")):
        sr = row(sr, 3, f"mesh.shardings[{i}]")
        shardings.append(PlanSharding(check(sr[0], int, f"mesh.shardings[{i}].tensor"),
                                      check(sr[1], str, f"mesh.shardings[{i}].kind"),
                                      check(sr[2], int, f"mesh.shardings[{i}].axis")))
    collectives = []
    for i, cr in enumerate(check(r[6], list, "mesh.collectives")):
        f = f"mesh.collectives[{i}]"
        cr = row(cr, 5, f)
        collectives.append(PlanCollective(check(cr[0], str, f + ".op"), check(cr[1], int, f + ".after"),
                                          ints(cr[2], f + ".reads"), ints(cr[3], f + ".writes"),
                                          check(cr[4], int, f + ".axis")))
    return PlanMesh(devices=check(r[0], int, "mesh.devices"), parallel=check(r[1], str, "mesh.parallel"),
                    input_axes=ints(r[2], "mesh.input_axes"), output_axes=ints(r[3], "mesh.output_axes"),
                    shardings=tuple(shardings), shards=tuple(shards), collectives=tuple(collectives))


def _decode_launch(r, i):
    f = f"launches[{i}]"
    r = row(r, 5, f)
    return Launch(kernel=check(r[0], int, f + ".kernel"), node=check(r[1], str, f + ".node"),
                  reads=ints(r[2], f + ".reads"), writes=ints(r[3], f + ".writes"),
                  nodes=strs(check(r[4], list, f + ".nodes"), f + ".nodes"))


def constants_in(rows, digests, section):
    """The constant rows [tensor, offset, bytes] and chunk digests, checked
    against the data section -> PlanConstants viewing it."""
    section = memoryview(section).toreadonly()
    check(digests, list, "plan.data_sha256")
    want = -(-len(section) // DATA_CHUNK)
    if len(digests) != want:
        raise PlanError(f"plan field data_sha256: {len(digests)} digests, the data section's "
                        f"{len(section)} bytes need {want}")
    for i, d in enumerate(digests):
        if not isinstance(d, bytes) or len(d) != 32:
            raise PlanError(f"plan field data_sha256[{i}]: expected 32 bytes")
    consts = rows_in(rows, section)
    for k, got in enumerate(chunk_digests(section)):
        if got != digests[k]:
            raise PlanError(f"plan is corrupt: digest mismatch in the data section's bytes "
                            f"[{k * DATA_CHUNK}, {min(len(section), (k + 1) * DATA_CHUNK)})")
    return consts


def rows_in(rows, section, ascending=True):
    """Constant rows [tensor, offset, bytes] -> PlanConstants viewing the data section
    (read-only): each an aligned range inside it, after the previous one's (a further
    method's rows, `ascending` False, may point anywhere in it: at bytes a constant of
    another method holds too)."""
    consts, end = [], 0
    for i, c in enumerate(rows):
        f = f"constants[{i}]"
        c = row(c, 3, f)
        tensor, at, n = (check(c[j], int, f + k) for j, k in enumerate((".tensor", ".offset", ".bytes")))
        if at % DATA_ALIGN or (ascending and at < end) or at < 0 or n < 0 or at + n > len(section):
            raise PlanError(f"plan field {f}: bytes [{at}, {at + n}) are not an aligned range of the data "
                            f"section ({len(section)} bytes)" + (f" after the previous constant's (ending at {end})"
                                                                 if ascending else ""))
        end = at + n
        consts.append(PlanConstant(tensor, section[at:end]))
    return consts


def decode_payload(payload, version=FORMAT_VERSION, section=b""):
    """Payload bytes of format `version` (and, format 5 on, the data section) -> Plan.
    An older format is upgraded to the current one first (`upgrades`)."""
    try:
        m = msgpack.unpackb(payload, raw=False, strict_map_key=True, use_list=True, **_limits(len(payload)))
    except Exception as e:  # msgpack raises ValueError, TypeError, UnicodeDecodeError, ...
        raise PlanError(f"plan payload is not valid msgpack: {e}") from None
    check(m, dict, "payload")
    m, section = upgrades.upgrade(m, version, section)
    exact_fields(m, PAYLOAD_FIELDS, "plan")
    consts = constants_in(get(m, "constants", list), get(m, "data_sha256", list), section)
    prov = row(get(m, "provenance", list), 7, "provenance")
    for i in (0, 1, 2, 3, 4, 6):
        check(prov[i], str, f"provenance[{i}]")
    check(prov[5], list, "provenance.platforms")
    for i, p in enumerate(prov[5]):
        check(p, str, f"provenance.platforms[{i}]")
    provenance = Provenance(prov[0], prov[1], prov[2], prov[3], prov[4], tuple(prov[5]), prov[6])
    methods = []
    section = memoryview(section).toreadonly()
    for i, sub in enumerate(get(m, "methods", list)):
        check(sub, dict, f"methods[{i}]")
        exact_fields(sub, METHOD_FIELDS, f"methods[{i}]")
        try:
            methods.append(_decode_plan(sub, rows_in(get(sub, "constants", list), section, ascending=False),
                                        provenance, ()))
        except PlanError as e:
            raise PlanError(f"methods[{i}]: {e}") from None
    mesh = _decode_mesh(m.get("mesh"), section)
    return dataclasses.replace(_decode_plan(m, consts, provenance, tuple(methods)), mesh=mesh)


def _decode_plan(m, consts, provenance, methods):
    mem = ints(row(get(m, "memory", list), 9, "memory"), "memory")
    return Plan(
        launch_mode=get(m, "launch_mode", str), weights=get(m, "weights", str),
        planner=get(m, "planner", str), passes=strs(get(m, "passes", list), "passes"),
        alignment=get(m, "alignment", int),
        arena_bytes=get(m, "arena_bytes", int),
        tensors=tuple(_decode_tensor(r, i) for i, r in enumerate(get(m, "tensors", list))),
        constants=tuple(consts),
        kernels=tuple(_decode_kernel(r, i) for i, r in enumerate(get(m, "kernels", list))),
        launches=tuple(_decode_launch(r, i) for i, r in enumerate(get(m, "launches", list))),
        inputs=ints(get(m, "inputs", list), "inputs"), outputs=ints(get(m, "outputs", list), "outputs"),
        output_names=strs(get(m, "output_names", list), "output_names"),
        input_kernel=get(m, "input_kernel", int), output_kernel=get(m, "output_kernel", int),
        place_kernel=get(m, "place_kernel", int),
        memory=MemoryStats(*mem),
        provenance=provenance,
        states=tuple(_decode_state(r, i) for i, r in enumerate(get(m, "states", list))),
        method=get(m, "method", str),
        methods=methods,
    )
