"""Plans of several methods: entry points over one set of weights, one state buffer
and one arena (a decoder's prefill and decode steps; shape profiles of one model).

Each method is compiled as a plan of its own (`pipeline.compile_graph`), all with the
largest arena any of them needs (the executor runs them on one arena buffer, and every
kernel takes the arena at its size), then the first holds the others
(`Plan.methods`). Weights equal byte for byte are stored once in the file (the codec's
`shared_data_section`) and placed once on the device (the executor shares the pool
arrays of equal bytes). States must agree: the same names, dtypes and shapes, in the
same order.
"""

import dataclasses
import time

import numpy as np

from aotplan.core import verify
from aotplan.core.errors import ModelError
from compiler import pipeline


@dataclasses.dataclass(frozen=True)
class Result:
    plan: object
    seconds: float
    n_nodes: int
    formats: object  # the first method's pipeline.FormatStats
    shared_bytes: int  # constant bytes the file holds once though several methods read them
    collectives: tuple = (0, 0, 0)  # a tensor-parallel sink plan's (pipeline.Result.collectives)


def compile_methods(methods, digest, options=pipeline.Options(), progress=None, on_start=None):
    """[(name, Graph)] -> Result: the first method's plan, holding the others."""
    t0 = time.perf_counter()
    names = [n for n, _ in methods]
    if names == [""]:  # a plan of one method, as `compile MODEL` makes it
        return _one(pipeline.compile_graph(methods[0][1], digest, options, progress=progress, on_start=on_start), t0)
    for name in names:
        if not name or not name.replace("_", "").replace("-", "").isalnum() or not name.isascii():
            raise ModelError(f"method name {name!r}: use letters, digits, '-' and '_'")
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ModelError(f"method {dup!r} is given twice")
    if len(methods) == 1:  # (named: session.run(feeds, method=NAME) takes it)
        res = _one(pipeline.compile_graph(methods[0][1], digest, options, progress=progress, on_start=on_start), t0)
        return dataclasses.replace(res, plan=dataclasses.replace(res.plan, method=names[0]))
    if options.inline_bytes == pipeline.INLINE_BYTES:
        # weights compiled into each method's kernels would be held once per method:
        # by default the methods' weights stay in the pool, held once (an explicit
        # --inline-constants keeps its bytes)
        options = dataclasses.replace(options, inline_bytes=0)
    if options.weights != "pool":
        raise ModelError("the methods of a plan keep their weights in the pool (--weights arena would place them in "
                         "the arena, which the methods share): leave out --weights arena")
    _check_states(methods)
    _check_initial_values(methods)
    # the largest arena any method needs (planning only: no XLA yet)
    arena = max(pipeline.plan_graph(g, options).mem.arena_bytes for _, g in methods)
    total = {}

    def started(n):
        total[len(total)] = n
        if on_start and len(total) == len(methods):
            on_start(sum(total.values()))

    results = [pipeline.compile_graph(g, digest, options, progress=progress, on_start=started, arena_bytes=arena)
               for _, g in methods]
    plans = [dataclasses.replace(r.plan, method=name) for name, r in zip(names, results)]
    plan = dataclasses.replace(plans[0], methods=tuple(plans[1:]))
    verify.verify(plan)
    return Result(plan, time.perf_counter() - t0, sum(r.n_nodes for r in results), results[0].formats,
                  shared_bytes(plan))


def _one(res, t0):
    return Result(res.plan, time.perf_counter() - t0, res.n_nodes, res.formats, 0, res.collectives)


def _check_states(methods):
    """Every method declares the same states, in the same order, of one dtype and shape."""
    first_name, first = methods[0]
    want = _declared(first)
    for name, g in methods[1:]:
        got = _declared(g)
        if got != want:
            raise ModelError(f"method {name!r} declares states {_fmt(got)}, method {first_name!r} {_fmt(want)}: the "
                             f"methods of a plan share its states (the same names, dtypes and shapes, in the same "
                             f"order)")


def _declared(graph):
    info = {t.name: t for t in graph.inputs}
    return [(st.input, info[st.input].dtype, tuple(info[st.input].shape)) if st.input in info else (st.input,)
            for st in graph.states]


def _check_initial_values(methods):
    """Every method gives each state the same initial value (zeros, or the same bytes)."""
    first_name, first = methods[0]
    want = [None if st.init is None else np.ascontiguousarray(st.init).tobytes() for st in first.states]
    for name, g in methods[1:]:
        for st, w in zip(g.states, want):
            got = None if st.init is None else np.ascontiguousarray(st.init).tobytes()
            if got != w:
                raise ModelError(f"state {st.input!r}: method {name!r} gives it another initial value than method "
                                 f"{first_name!r}: the methods of a plan share its states")


def _fmt(states):
    return "(" + ", ".join(f"{s[0]} {s[1]}{list(s[2])}" if len(s) == 3 else s[0] for s in states) + ")" \
        if states else "(none)"


def shared_bytes(plan):
    """Constant bytes the plan's file holds once though several of its methods read
    them: what storing each method's weights apart would have added (the first
    method's are laid out as they are; a further method's are stored unless equal to
    some already there: `codec.shared_data_section`)."""
    import hashlib

    seen, total, stored = set(), 0, 0
    for k, (_, m) in enumerate(plan.all_methods()):
        for c in m.constants:
            key = hashlib.sha256(c.data).digest()
            total += len(c.data)
            if k == 0 or key not in seen:
                stored += len(c.data)
            seen.add(key)
    return total - stored
