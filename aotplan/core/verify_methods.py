"""The verifier's checks across a plan's methods (format 7; `aotplan.core.verify`
runs them after checking each method as a plan of its own).

The executor runs every method on one arena, one state buffer and one constant pool,
so the methods must agree on what they share: the arena's size (each kernel takes the
arena as an argument of that size), the alignment, the states (names, dtypes, shapes,
offsets, the buffer's size) and where the weights live (the pool: a method's place
kernel would write weights into bytes another method's tensors use). Names: each
method named, once; a method holds no methods of its own.
"""

from aotplan.core.errors import PlanError

MAX_METHODS = 256  # (a plan holds a few: prefill and decode, a handful of shape profiles)


def _fail(msg):
    raise PlanError(f"plan fails verification: {msg}")


def check(plan):
    """A plan's methods agree with its first (`plan`) on what they share."""
    if not plan.methods:
        return
    if len(plan.methods) + 1 > MAX_METHODS:
        _fail(f"{len(plan.methods) + 1} methods, more than {MAX_METHODS}")
    names = set()
    for name, m in plan.all_methods():
        if not name or name in names:
            _fail(f"method {name!r}: each method of a plan of several has a name of its own")
        names.add(name)
        w = f"method {name!r}"
        if m is not plan and m.methods:
            _fail(f"{w} holds methods of its own")
        if m.weights != "pool" or m.place_kernel != -1:
            _fail(f"{w}: the methods of a plan keep their weights in the pool (one method's place kernel would "
                  f"write weights into arena bytes another method's tensors use)")
        for field in ("arena_bytes", "alignment"):
            if getattr(m, field) != getattr(plan, field):
                _fail(f"{w}: {field} {getattr(m, field)} differs from the first method's ({getattr(plan, field)}): "
                      f"the methods share one arena")
        if m.memory.state_bytes != plan.memory.state_bytes or _states(m) != _states(plan):
            _fail(f"{w}: its states differ from the first method's ({_states(m)} vs {_states(plan)}): the methods "
                  f"share one state buffer")
        if _initial(m) != _initial(plan):
            _fail(f"{w}: its states' initial values differ from the first method's: the methods share the states")


def _states(plan):
    """[(name, dtype, shape, offset)] of a plan's states, in order."""
    return [(s.name, plan.tensors[s.tensor].dtype, tuple(plan.tensors[s.tensor].shape), plan.tensors[s.tensor].offset)
            for s in plan.states]


def _initial(plan):
    """[bytes of each state's initial value, or None for zeros], in order."""
    data = {c.tensor: c.data for c in plan.constants}
    return [bytes(data[s.tensor]) if s.tensor in data else None for s in plan.states]
