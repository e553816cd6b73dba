"""The plan verifier: a plan is untrusted input.

Run by the compiler after planning and by the executor on every load. Checks types'
ranges and every reference between fields, recomputes each tensor's bytes from its
dtype and shape, checks that every launch reads only inputs, constants and tensors an
earlier launch wrote and that every output is written, gives each kernel one role
(launch, input, output or place kernel) whose flags agree with it, derives lifetimes
from the launches (it does not trust the planner), and sweeps them for two tensors that
share bytes while both are live. Lifetimes are in phases (`intervals.phases`): a
launch reads, then writes, so its output may take the bytes of an input that dies in it
(in-place). The declared sharing is a tensor inside its `base`: a view (same offset and
bytes) or the parts of a placed concat (which must tile it), covered by the base's
lifetime; any other overlap of live tensors is refused, naming both. The cost is
O(n log n) in the plan's size (`intervals.find_overlap`, a sweep, not all-pairs, however
many tensors are live at once): a plan file cannot make it slow.
"""

from aotplan.core import dtypes, formats, intervals, verify_mesh, verify_methods, verify_state
from aotplan.core.errors import LimitError, PlanError
from aotplan.core.plan import LAUNCH_MODES, TENSOR_KINDS, WEIGHT_PLACEMENTS, run_order


MAX_RANK = 64  # XLA has no fixed limit; nothing real comes close, and shapes are printed in messages
MAX_RUNS = 1 << 16  # a part's runs (the compiler places concat inputs with at most 64)


def _fail(msg):
    raise PlanError(f"plan fails verification: {msg}")


def _index(i, n, field):
    if not 0 <= i < n:
        _fail(f"{field} = {i} is out of range (0..{n - 1})")
    return i


def verify(plan):
    """-> `plan`, or PlanError naming the first broken invariant: each method checked
    as a plan of its own, then what the methods share (`verify_methods`)."""
    verify_one(plan)
    for name, m in plan.all_methods()[1:]:
        try:
            verify_one(m)
        except PlanError as e:
            raise PlanError(f"method {name!r}: {e}") from None
    verify_methods.check(plan)
    verify_mesh.check(plan)  # (after the inputs and outputs were checked)
    return plan


def verify_one(plan):
    """One method. The checks run in this order, each after those whose facts it
    relies on (indices in range, bytes recomputed, roles assigned)."""
    check_header(plan)
    parts = check_tensors(plan)
    check_parts_tile_their_base(plan, parts)
    olds, updates = verify_state.check_states(plan)
    check_constants_have_data(plan, olds)
    check_kernel_fields(plan)
    special = check_kernel_roles(plan)
    check_launches(plan, special)
    check_memory_figures(plan)
    check_inputs_and_outputs_listed(plan)
    verify_mesh.check_positions(plan)
    steps = check_reads_follow_writes(plan, parts)
    verify_state.check_launches(plan, olds, updates)
    check_inline_constants_read_once(plan)
    check_every_kernel_runs(plan, special)
    check_no_live_tensors_overlap(plan, steps)
    return plan


def _launch_written(plan):
    """The tensors some launch (or collective) writes (indices in range)."""
    n = len(plan.tensors)
    colls = plan.mesh.collectives if plan.mesh is not None else ()
    return {j for l in (*plan.launches, *colls) for j in l.writes if 0 <= j < n}


def check_header(plan):
    """Launch mode, weights placement, alignment and the arena's size."""
    if plan.launch_mode not in LAUNCH_MODES:
        _fail(f"launch mode {plan.launch_mode!r} is not supported (supported: {', '.join(LAUNCH_MODES)})")
    if plan.weights not in WEIGHT_PLACEMENTS:
        _fail(f"weights placement {plan.weights!r} is unknown")
    a = plan.alignment
    if a < formats.ALIGNMENT or a & (a - 1):
        _fail(f"alignment {a} must be a power of two >= {formats.ALIGNMENT}")
    if plan.arena_bytes < 0 or plan.arena_bytes % formats.WORD_BYTES:
        _fail(f"arena_bytes {plan.arena_bytes} must be a non-negative multiple of {formats.WORD_BYTES}")
    try:
        formats.check_arena_bytes(plan.arena_bytes)
    except LimitError as e:
        _fail(str(e))
    if plan.memory.arena_bytes != plan.arena_bytes:
        _fail(f"memory.arena_bytes {plan.memory.arena_bytes} != arena_bytes {plan.arena_bytes}")


def check_tensors(plan):
    """Each tensor's kind, dtype, format, shape and bytes (recomputed), its storage and
    offset inside the arena, and the tensor it lives inside, if any (a view or a part)
    -> {base tensor: its parts}."""
    a = plan.alignment
    n = len(plan.tensors)
    launch_written = _launch_written(plan)
    parts = {}  # base tensor -> its parts
    names = set()
    for i, t in enumerate(plan.tensors):
        w = f"tensor {t.name!r}"
        if t.name in names:
            _fail(f"duplicate tensor name {t.name!r}")
        names.add(t.name)
        if t.kind not in TENSOR_KINDS:
            _fail(f"{w}: unknown kind {t.kind!r}")
        if t.dtype not in dtypes.DTYPES:
            _fail(f"{w}: unknown dtype {t.dtype!r}")
        if not formats.is_known(t.format):
            _fail(f"{w}: unknown format {t.format!r}")
        if not formats.accepts(t.format, len(t.shape)):
            _fail(f"{w}: format {t.format} does not hold rank-{len(t.shape)} tensors (shape {list(t.shape)[:8]})")
        if len(t.shape) > MAX_RANK:
            _fail(f"{w}: rank {len(t.shape)} is more than {MAX_RANK}")
        if any(d < 0 or d > 2**31 - 1 for d in t.shape):
            _fail(f"{w}: bad shape {t.shape}")
        if t.device_shape != formats.device_shape(t.shape, t.format):
            _fail(f"{w}: device shape {t.device_shape} does not follow from shape {t.shape} in format {t.format}")
        if t.padding != formats.padding(t.shape, t.format):
            _fail(f"{w}: padding {list(t.padding)} does not follow from shape {t.shape} in format {t.format}")
        want = formats.nbytes(t.shape, t.dtype, t.format)
        if t.nbytes != want:
            _fail(f"{w}: nbytes {t.nbytes} != {want} for {t.dtype}{list(t.shape)}")
        if t.storage == "arena":
            align = formats.WORD_BYTES if t.base != -1 else a  # parts start inside their base
            if t.offset < 0 or t.offset % align:
                _fail(f"{w}: offset {t.offset} is not a non-negative multiple of the alignment {align}")
            if not 1 <= t.runs <= MAX_RUNS or t.nbytes % t.runs or t.stride < 0:
                _fail(f"{w}: {t.runs} runs of a {t.nbytes}-byte tensor (stride {t.stride})")
            run = t.nbytes // t.runs
            if t.runs > 1 and (t.base == -1 or t.stride < run or t.stride % formats.WORD_BYTES
                               or run % formats.WORD_BYTES):
                _fail(f"{w}: runs of {run} bytes every {t.stride} bytes: only a part of another tensor has runs, "
                      f"whole words apart and not overlapping")
            end = t.offset + (t.runs - 1) * t.stride + run
            if end > plan.arena_bytes:
                _fail(f"{w}: bytes [{t.offset}, {end}) exceed the arena ({plan.arena_bytes} bytes)")
        elif t.storage == "pool":
            if t.kind != "constant" or t.offset != -1 or t.base != -1 or t.runs != 1:
                _fail(f"{w}: only constants live in the pool, with offset -1, in one run")
        elif t.storage == "state":
            verify_state.check_tensor(plan, t, w)
        elif t.storage == "inline":
            if t.kind != "constant" or t.offset != -1 or t.base != -1 or t.runs != 1 or t.format != "default":
                _fail(f"{w}: only constants are inline, with offset -1, in one run, in the default format")
            if plan.launch_mode == "kernel":
                _fail(f"{w}: a kernel-mode plan compiles no constants into its kernels")
        else:
            _fail(f"{w}: unknown storage {t.storage!r}")
        if t.kind == "state" and t.storage != "state":
            _fail(f"{w}: a state tensor lives in the state buffer, not in storage {t.storage!r}")
        if t.base != -1:
            b = plan.tensors[_index(t.base, n, f"{w}: base")]
            if b.base != -1 or t.base == i:
                _fail(f"{w} lives inside {b.name!r}, which itself lives inside another tensor")
            if t.storage != "arena" or b.storage != "arena" or b.runs != 1:
                _fail(f"{w} and its base {b.name!r} must both be arena tensors, the base in one run")
            if t.kind not in ("intermediate", "output") or b.kind == "constant":
                _fail(f"{w} ({t.kind}) cannot live inside {b.name!r} ({b.kind})")
            if t.format != "default" or b.format != "default":  # views and runs are of row-major bytes
                _fail(f"{w} ({t.format}) lives inside {b.name!r} ({b.format}): only default-format tensors share "
                      f"bytes as views or parts")
            if i in launch_written:  # a part: written into its slice of the base
                if b.kind not in ("intermediate", "output"):
                    _fail(f"{w} is written by a launch inside {b.name!r}, a {b.kind}")
                if any(o < b.offset or o + r > b.offset + b.nbytes for o, r in t.segments()):
                    _fail(f"{w}: its bytes leave its base {b.name!r} (bytes {b.offset}..{b.offset + b.nbytes})")
                parts.setdefault(t.base, []).append(i)
            elif t.offset != b.offset or t.nbytes != b.nbytes or t.runs != 1:
                _fail(f"{w} is a view of {b.name!r}: both must have the same offset and bytes "
                      f"(offsets {t.offset}, {b.offset}; bytes {t.nbytes}, {b.nbytes})")
    return parts


def check_parts_tile_their_base(plan, parts):
    """A base's parts tile it exactly, and no launch writes it whole."""
    launch_written = _launch_written(plan)
    for b, ps in parts.items():
        base = plan.tensors[b]
        if b in launch_written:
            _fail(f"tensor {base.name!r} is written by a launch and also made of parts")
        at = base.offset
        for o, r in sorted(seg for j in ps for seg in plan.tensors[j].segments()):
            if o != at:
                _fail(f"the parts of {base.name!r} do not tile it: {'gap' if o > at else 'overlap'} at byte {min(o, at)}")
            at = o + r
        if at != base.offset + base.nbytes:
            _fail(f"the parts of {base.name!r} do not tile it: they end at byte {at}, it ends at "
                  f"{base.offset + base.nbytes}")


def check_constants_have_data(plan, olds=()):
    """Every constant that is not inline has data of its bytes, given once; a state's
    value before the first step (`olds`: its tensor) may have data (else zeros)."""
    n = len(plan.tensors)
    seen = set()
    for i, c in enumerate(plan.constants):
        _index(c.tensor, n, f"constants[{i}].tensor")
        t = plan.tensors[c.tensor]
        if (t.kind != "constant" and c.tensor not in olds) or c.tensor in seen:
            _fail(f"constants[{i}] refers to {t.name!r}, which is not a constant or a state's initial value, or "
                  f"already has data")
        if t.storage == "inline":
            _fail(f"constants[{i}] refers to {t.name!r}, an inline constant (its values are in the kernel)")
        if len(c.data) != t.nbytes:
            _fail(f"constant {t.name!r}: {len(c.data)} bytes of data, tensor needs {t.nbytes}")
        seen.add(c.tensor)
    for i, t in enumerate(plan.tensors):
        if t.kind == "constant" and i not in seen and t.storage != "inline":
            _fail(f"constant {t.name!r} has no data")


def check_kernel_fields(plan):
    """Each kernel's workspace, offsets count, feeds/returns flags and native code."""
    for i, k in enumerate(plan.kernels):
        if k.workspace_bytes < 0:
            _fail(f"kernel {k.name!r}: negative workspace")
        if not 0 <= k.n_offsets <= 1 << 20:
            _fail(f"kernel {k.name!r}: n_offsets {k.n_offsets} is out of range")
        if (k.feeds or k.returns) and (plan.launch_mode == "kernel" or k.n_offsets):
            _fail(f"kernel {k.name!r} takes the feeds or returns the outputs, which only the first and last "
                  f"launch of a sink or fused plan do")
        if k.native and not plan.provenance.native_fingerprint:
            _fail(f"kernel {k.name!r} carries a native executable, but the plan names no host fingerprint")
        if k.state and not plan.states:
            _fail(f"kernel {k.name!r} takes the state buffer, but the plan has no states")


def check_kernel_roles(plan):
    """The launches' count for the mode; the feeds enter through the first launch or the
    input kernel and the outputs leave through the last launch or the output kernel;
    each kernel has one role whose flags agree with it -> the input, output and place
    kernels' indices."""
    nk = len(plan.kernels)
    sink = plan.launch_mode == "sink"
    if sink and len(plan.launches) != 1:
        _fail(f"a sink plan has exactly one launch, not {len(plan.launches)}")
    if not plan.launches:
        _fail("the plan has no launches")
    # the inputs enter through the first launch or the input kernel, the outputs leave
    # through the last launch or the output kernel: exactly one of each
    ends = ((plan.launches[0].kernel, "feeds", "input_kernel", plan.input_kernel, "first"),
            (plan.launches[-1].kernel, "returns", "output_kernel", plan.output_kernel, "last"))
    for k, flag, field, special_k, which in ends:
        _index(k, nk, f"the {which} launch's kernel")
        if getattr(plan.kernels[k], flag):
            if special_k != -1:
                _fail(f"the {which} launch's kernel has `{flag}`, so {field} must be -1, not {special_k}")
        else:
            if sink:
                _fail(f"the launch of a sink plan must run a kernel with `{flag}`")
            _index(special_k, nk, field)
    for s, l in enumerate(plan.launches):
        k = plan.kernels[l.kernel] if 0 <= l.kernel < nk else None
        if k is not None and ((k.feeds and s != 0) or (k.returns and s != len(plan.launches) - 1)):
            _fail(f"launch {s} ({l.node!r}) runs {k.name!r}, which takes the feeds or returns the outputs, but it "
                  f"is not the first or last launch")
    arena_consts = [i for i, t in enumerate(plan.tensors) if t.kind == "constant" and t.storage == "arena"]
    if arena_consts or plan.place_kernel != -1:
        _index(plan.place_kernel, nk, "place_kernel")
    # each kernel has one role: its signature and what it returns follow from the role
    special = [k for k in (plan.input_kernel, plan.output_kernel, plan.place_kernel) if k != -1]
    if len(set(special)) != len(special):
        _fail("input_kernel, output_kernel and place_kernel must be different kernels")
    for field in ("input_kernel", "output_kernel", "place_kernel"):
        ki = getattr(plan, field)
        if ki != -1:
            k = plan.kernels[_index(ki, nk, field)]
            if k.n_offsets or k.feeds or k.returns or k.state:
                _fail(f"kernel {k.name!r} is the {field.replace('_', ' ')}, which takes no offsets, feeds or "
                      f"returns flags, nor the state buffer (n_offsets {k.n_offsets}, feeds {k.feeds}, returns "
                      f"{k.returns}, state {k.state})")
    return special


def check_launches(plan, special):
    """Each launch runs a kernel of a launch (a kernel with fixed offsets runs once) and
    its own graph nodes (one in kernel mode)."""
    nk = len(plan.kernels)
    node_names, runs = set(), {}
    for s, l in enumerate(plan.launches):
        if 0 <= l.kernel < nk and not plan.kernels[l.kernel].n_offsets:
            if l.kernel in runs:
                _fail(f"launch {s} ({l.node!r}) runs kernel {plan.kernels[l.kernel].name!r}, which has fixed "
                      f"offsets and is already run by launch {runs[l.kernel]}")
            runs[l.kernel] = s
        w = f"launch {s} ({l.node!r})"
        _index(l.kernel, nk, f"{w} kernel")
        if l.kernel in special:
            _fail(f"{w} runs kernel {plan.kernels[l.kernel].name!r}, which is the input, output or place kernel")
        if not l.nodes or (plan.launch_mode == "kernel" and len(l.nodes) != 1):
            _fail(f"{w} must run {'one graph node' if plan.launch_mode == 'kernel' else 'at least one graph node'}, "
                  f"it lists {len(l.nodes)}")
        for name in l.nodes:
            if name in node_names:
                _fail(f"{w}: node {name!r} is already run by an earlier launch")
            node_names.add(name)


def check_memory_figures(plan):
    """The plan's memory figures are those of its tensors and kernels."""
    m = plan.memory
    pool = sum(t.nbytes for t in plan.tensors if t.storage == "pool")
    if m.constant_pool_bytes != pool:
        _fail(f"memory.constant_pool_bytes {m.constant_pool_bytes} != {pool}, the bytes of the pool constants")
    inline = sum(t.nbytes for t in plan.tensors if t.storage == "inline")
    if m.inline_constant_bytes != inline:
        _fail(f"memory.inline_constant_bytes {m.inline_constant_bytes} != {inline}, the bytes of the inline constants")
    ws = max((k.workspace_bytes for k in plan.kernels), default=0)
    if m.max_workspace_bytes != ws:
        _fail(f"memory.max_workspace_bytes {m.max_workspace_bytes} != {ws}, the largest kernel workspace")
    if m.plain_bound_bytes < 0 or m.shared_bound_bytes < 0:
        _fail(f"memory: model bounds {m.plain_bound_bytes}, {m.shared_bound_bytes} must be >= 0")
    if not 0 <= m.lower_bound_bytes <= plan.arena_bytes or m.naive_bytes < 0:
        _fail(f"memory: lower bound {m.lower_bound_bytes} must lie in [0, arena_bytes], naive bytes >= 0")
    end = max((t.offset + t.nbytes for t in plan.tensors if t.storage == "state"), default=0)
    if m.state_bytes != formats.align_up(end, formats.WORD_BYTES):
        _fail(f"memory.state_bytes {m.state_bytes} != {formats.align_up(end, formats.WORD_BYTES)}, where the "
              f"last state ends")


def check_inputs_and_outputs_listed(plan):
    """`inputs` and `outputs` list every input and output tensor once; outputs are named once."""
    n = len(plan.tensors)
    for field, kind in (("inputs", "input"), ("outputs", "output")):
        listed = getattr(plan, field)
        for j in listed:
            _index(j, n, field)
            if plan.tensors[j].kind != kind:
                _fail(f"{field} lists {plan.tensors[j].name!r}, whose kind is {plan.tensors[j].kind!r}")
        if sorted(listed) != [i for i, t in enumerate(plan.tensors) if t.kind == kind] or len(set(listed)) != len(listed):
            _fail(f"{field} must list every {kind} tensor exactly once")

    if len(plan.output_names) != len(plan.outputs) or len(set(plan.output_names)) != len(plan.output_names):
        _fail("output_names must name each output once")


def check_reads_follow_writes(plan, parts):
    """Every launch reads only what holds its value (inputs, constants, what an earlier
    launch wrote), writes arena tensors no launch wrote before, and is given one offset
    per arena tensor its kernel takes; every output is written -> each launch's (reads,
    writes)."""
    n = len(plan.tensors)
    launch_written = _launch_written(plan)
    written = set()
    steps = []

    def ready(j):
        """Tensor j holds its value: written by a launch, an input, or (a view of) a
        tensor whose parts have all been written."""
        t = plan.tensors[j]
        if j in written or t.kind == "input":
            return True
        r = t.base if t.base != -1 and j not in launch_written else j
        root = plan.tensors[r]
        return r in written or root.kind == "input" or (r in parts and all(p in written for p in parts[r]))

    for s, coll in run_order(plan):  # (a tensor-parallel plan's collectives between its launches)
        l = coll if coll is not None else plan.launches[s]
        w = f"launch {s} ({l.node!r})" if coll is None else f"collective {coll.op} after launch {coll.after}"
        for j in l.reads:
            _index(j, n, f"{w} read")
            t = plan.tensors[j]
            if t.kind in ("intermediate", "output") and not ready(j):
                _fail(f"{w} reads {t.name!r} before any launch writes it")
        for j in l.writes:
            _index(j, n, f"{w} write")
            t = plan.tensors[j]
            if t.kind in ("input", "constant") or t.storage not in ("arena", "state"):
                _fail(f"{w} writes {t.name!r}, a {t.kind}")
            if j in written:
                _fail(f"{w} writes {t.name!r}, which an earlier launch already wrote")
            written.add(j)
        if coll is None:
            k = plan.kernels[l.kernel]
            if k.n_offsets and len(plan.kernel_args(l)[1]) != k.n_offsets:
                _fail(f"{w}: kernel {k.name!r} takes {k.n_offsets} offsets, the launch has "
                      f"{len(plan.kernel_args(l)[1])} arena tensors")
        steps.append((l.reads, l.writes))
    for i, t in enumerate(plan.tensors):
        if t.kind == "output" and not ready(i):
            _fail(f"output {t.name!r} is never written")
    return steps


def check_inline_constants_read_once(plan):
    """An inline constant is in one kernel's program: read by one launch, whose kernel
    runs no other launch (so its bytes are held once, as memory states them)."""
    kernel_runs, readers = {}, {}
    for l in plan.launches:
        kernel_runs[l.kernel] = kernel_runs.get(l.kernel, 0) + 1
        for i in set(l.reads):
            if plan.tensors[i].storage == "inline":
                readers.setdefault(i, []).append(l.kernel)
    for i, t in enumerate(plan.tensors):
        if t.storage == "inline":
            ks = readers.get(i, [])
            if len(ks) != 1 or kernel_runs[ks[0]] != 1:
                _fail(f"inline constant {t.name!r} must be read by one launch, whose kernel runs no other launch")


def check_every_kernel_runs(plan, special):
    """No kernel is dead weight: each is run by a launch or has a role."""
    used = set(special) | {l.kernel for l in plan.launches}
    for i, k in enumerate(plan.kernels):
        if i not in used:
            _fail(f"kernel {k.name!r} is not run by any launch, nor the input, output or place kernel")


def check_no_live_tensors_overlap(plan, steps):
    """Lifetimes derived from the launches (not the planner's), swept for two tensors
    that share bytes while both are live, apart from the declared sharing."""
    a = plan.alignment
    kinds = [t.kind if t.storage == "arena" else None for t in plan.tensors]
    ivs = intervals.phases(kinds, [t.nbytes for t in plan.tensors], steps, a, feeds_first=plan.input_kernel == -1,
                           base=[t.base for t in plan.tensors])
    clash = intervals.find_overlap(ivs, [plan.tensors[iv.tensor].offset for iv in ivs])
    if clash:
        x, y = (plan.tensors[iv.tensor] for iv in clash)
        _fail(f"tensors {x.name!r} (bytes {x.offset}..{x.offset + x.nbytes}, {_live(clash[0])}) "
              f"and {y.name!r} (bytes {y.offset}..{y.offset + y.nbytes}, {_live(clash[1])}) "
              f"overlap while both are live")

def _live(iv):
    """An interval's phases (intervals.phases) in words: launch s reads in phase 2s + 2
    and writes in phase 2s + 3."""
    def at(p):
        s, w = divmod(p - 2, 2)
        return "before the first launch" if s < 0 else f"{'written' if w else 'read'} by launch {s}"
    return f"live from {at(iv.first)} to {at(iv.last)}"
