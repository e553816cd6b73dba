"""The plan fuzzer's targeted family (tests/fuzz/plan_mutators.py): semantic breakage
the verifier must name (offsets past the arena or misaligned, overlapping live
tensors, a 2**60 arena, duplicate names, reads before writes, outputs never written,
missing kernels or tensors, broken sharing), each with the message it must give."""

import re


from aotplan.core import formats
from plan_seeds import (
    Case, K_FEEDS, K_NATIVE, K_NOFF, K_RETURNS, K_WS, L_KERNEL, L_READS, L_WRITES, T_BASE, T_DSHAPE, T_DTYPE,
    T_FORMAT, T_KIND, T_NAME, T_OFFSET, T_PADDING, T_RUNS, T_SHAPE, T_STORAGE, T_STRIDE, frame, load_payload,
)


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
    the base of one (moving it must be refused as an overlap, not as a broken view).
    A tensor-parallel plan's collectives are steps too, in their places."""
    from aotplan.core import intervals
    from aotplan.core.plan import run_order

    steps = [(x.reads, x.writes) for x in (plan.launches[s] if c is None else c for s, c in run_order(plan))]
    ivs = intervals.phases([t.kind if t.storage == "arena" else None for t in plan.tensors],
                           [t.nbytes for t in plan.tensors], steps,
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


