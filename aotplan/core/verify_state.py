"""The verifier's checks of a plan's states (format 7; `aotplan.core.verify` runs them).

A state is two tensors of kind "state" at the same bytes of the state buffer: its
value before a step (`PlanState.tensor`, read, never fed) and after (`update`, the
ref output, written in place by exactly one launch, never returned). Checked here:
every state tensor belongs to one state, a state's two tensors agree (dtype, shape,
format, bytes, offset), states do not overlap and lie inside `memory.state_bytes`,
only a state's update is written into the state buffer, no launch reads a state's
old value after the launch that updated it (the bytes hold the new one by then),
and the launches that touch the state buffer run kernels that take it.
"""

from aotplan.core import formats
from aotplan.core.errors import LimitError, PlanError


def _fail(msg):
    raise PlanError(f"plan fails verification: {msg}")


def check_tensor(plan, t, w):
    """A tensor stored in the state buffer (`storage` "state")."""
    if t.kind != "state":
        _fail(f"{w}: only state tensors live in the state buffer, not a {t.kind}")
    if t.base != -1 or t.runs != 1 or t.format != "default":
        _fail(f"{w}: a state tensor has its own bytes, in one run, in the default format")
    if t.offset < 0 or t.offset % plan.alignment or t.offset + t.nbytes > plan.memory.state_bytes:
        _fail(f"{w}: bytes [{t.offset}, {t.offset + t.nbytes}) are not an aligned range of the state buffer "
              f"({plan.memory.state_bytes} bytes)")


def check_states(plan):
    """The state table: -> ({old-value tensor: state index}, {update tensor: state index})."""
    n = len(plan.tensors)
    sb = plan.memory.state_bytes
    if sb < 0 or sb % formats.WORD_BYTES:
        _fail(f"memory.state_bytes {sb} must be a non-negative multiple of {formats.WORD_BYTES}")
    try:
        formats.check_arena_bytes(sb, "the state buffer")
    except LimitError as e:
        _fail(str(e))
    olds, updates, names = {}, {}, set()
    for i, s in enumerate(plan.states):
        w = f"state {s.name!r}"
        if s.name in names:
            _fail(f"states[{i}]: the name {s.name!r} is used twice")
        names.add(s.name)
        for field, j in (("tensor", s.tensor), ("update", s.update)):
            if not 0 <= j < n:
                _fail(f"{w}: {field} = {j} is out of range (0..{n - 1})")
            if plan.tensors[j].kind != "state" or j in olds or j in updates:
                _fail(f"{w}: its {field} {plan.tensors[j].name!r} is not a state tensor of its own")
        if s.tensor == s.update:
            _fail(f"{w}: its value before and after a step are one tensor")
        a, b = plan.tensors[s.tensor], plan.tensors[s.update]
        if (a.dtype, a.shape, a.format, a.offset, a.nbytes) != (b.dtype, b.shape, b.format, b.offset, b.nbytes):
            _fail(f"{w}: {a.name!r} {a.dtype}{list(a.shape)} at byte {a.offset} and its update {b.name!r} "
                  f"{b.dtype}{list(b.shape)} at byte {b.offset} must be the same tensor's bytes")
        olds[s.tensor], updates[s.update] = i, i
    for i, t in enumerate(plan.tensors):
        if t.kind == "state" and i not in olds and i not in updates:
            _fail(f"tensor {t.name!r}: a state tensor that no state lists")
    spans = sorted((plan.tensors[s.tensor].offset, plan.tensors[s.tensor].nbytes, s.name) for s in plan.states)
    for (o1, n1, a), (o2, _, b) in zip(spans, spans[1:]):
        if o1 + n1 > o2:
            _fail(f"states {a!r} and {b!r} overlap in the state buffer (bytes {o1}..{o1 + n1} and from {o2})")
    return olds, updates


def check_launches(plan, olds, updates):
    """Per launch, in order: it writes the state buffer only at a state's update, reads
    no state's old value after its update was written, and runs a kernel that takes
    the state buffer if (and only if) it touches it; every update is written."""
    updated = {}  # state index -> the launch that wrote its update
    takers = set()
    for s, l in enumerate(plan.launches):
        w = f"launch {s} ({l.node!r})"
        touches = False
        for j in l.reads:
            if j in olds:
                touches = True
                if olds[j] in updated:
                    _fail(f"{w} reads {plan.tensors[j].name!r}, the value of state {plan.states[olds[j]].name!r} "
                          f"before the step, after launch {updated[olds[j]]} updated it in place")
            elif j in updates:
                touches = True
                if updates[j] not in updated:
                    _fail(f"{w} reads {plan.tensors[j].name!r} before any launch writes it (the update of state "
                          f"{plan.states[updates[j]].name!r})")
        for j in l.writes:
            t = plan.tensors[j]
            if t.storage == "state":
                if j not in updates:
                    _fail(f"{w} writes {t.name!r} into the state buffer, which is no state's update")
                touches = True
                if updates[j] in updated:
                    _fail(f"{w} writes {t.name!r}, which launch {updated[updates[j]]} already wrote")
                updated[updates[j]] = s
        k = plan.kernels[l.kernel]
        if touches != k.state:
            _fail(f"{w} {'touches' if touches else 'does not touch'} the state buffer, but its kernel {k.name!r} "
                  f"{'does not take' if touches else 'takes'} it")
        if k.state:
            takers.add(l.kernel)
    for i, st in enumerate(plan.states):
        if i not in updated:
            _fail(f"state {st.name!r}: no launch writes its update {plan.tensors[st.update].name!r}")
    for k in plan.kernels:
        if k.state and k.n_offsets:
            _fail(f"kernel {k.name!r} takes the state buffer and runtime offsets: a kernel that touches the state "
                  f"runs one launch")
    for ki, k in enumerate(plan.kernels):
        if k.state and ki not in takers:
            _fail(f"kernel {k.name!r} takes the state buffer, but no launch that touches it runs it")
