"""Each arena tensor's lifetime in a verified plan, in launches, as the verifier derives
it (aotplan/core/intervals.py: from the launches, not from the planner), for
`inspect --json` and `inspect --plot`.

A lifetime [first, last) is in launch numbers, in halves: launch s reads at s and writes
at s + 0.5, so a tensor written by launch s and last read by launch u holds its bytes
from s + 0.5 up to u + 0.5; inputs are written at -0.5 (before the first launch: the
input kernel) or 0 (the first launch takes them), and outputs are read at n = the
number of launches (by the caller or the output kernel), so they last to n + 0.5. A
view or a placed part shares its base's bytes and lifetime. A tensor-parallel plan's
collectives count as launches here, in the order a step runs them (`plan.run_order`).
"""

from dataclasses import dataclass

from aotplan.core import intervals
from aotplan.core.plan import run_order


@dataclass(frozen=True)
class Lifetime:
    tensor: int
    first: float  # launch numbers, half-open (see above)
    last: float
    nbytes: int  # aligned, as the planner and the lower bound count them
    kind: str


def _at(phase):
    return (phase - 2) / 2


def lifetimes(plan):
    """-> [Lifetime] of the arena tensors that have bytes of their own (not views or
    parts), in tensor order."""
    kinds = [t.kind if t.storage == "arena" else None for t in plan.tensors]
    steps = [(x.reads, x.writes) for x in (plan.launches[s] if c is None else c for s, c in run_order(plan))]
    ivs = intervals.phases(kinds, [t.nbytes for t in plan.tensors], steps, plan.alignment,
                           feeds_first=plan.input_kernel == -1, base=[t.base for t in plan.tensors])
    a = plan.alignment
    return [Lifetime(iv.tensor, _at(iv.first), _at(iv.last + 1), -(-iv.nbytes // a) * a, iv.kind) for iv in ivs]


def live_bytes(lives):
    """-> ([x], [bytes live]) as a step curve over the lifetimes' ends: the lower bound
    any placement needs at each moment; its maximum is the plan's lower bound."""
    edges = sorted({x for lt in lives for x in (lt.first, lt.last)})
    ys = [sum(lt.nbytes for lt in lives if lt.first <= x < lt.last) for x in edges]
    return edges, ys


def per_tensor(plan):
    """-> {tensor index: (first, last)} for every arena tensor, views and parts taking
    their base's lifetime."""
    own = {lt.tensor: (lt.first, lt.last) for lt in lifetimes(plan)}
    out = {}
    for i, t in enumerate(plan.tensors):
        root = t.base if t.base >= 0 else i
        if root in own:
            out[i] = own[root]
    return out
