"""`aotplan check`: a plan, replayed launch by launch, against the direct evaluation.

The tool for "a number is off": it replays a plan launch by launch and compares every
tensor each launch writes with the direct evaluation of the same cleaned-up graph,
naming the first launch whose output differs beyond tolerance. A kernel-mode plan
writes every tensor; a fused plan only those crossing its launches and a sink plan only
its outputs (the rest live inside their kernels), so the CLI also checks a kernel-mode
plan compiled from the model. `check_constants` compares the plan's constants with the
model's.
"""

from dataclasses import dataclass

import numpy as np

from aotplan.core import formats

# per storage kind: (rtol, atol); integers and bools must match exactly
# float64 is computed as float32 on the device (docs/design.md): float32's tolerance
TOLERANCES = {"float32": (1e-4, 1e-5), "float64": (1e-4, 1e-5), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}


@dataclass(frozen=True)
class Diff:
    launch: int
    label: str
    tensor: str
    max_abs: float
    max_rel: float
    where: tuple
    got: float
    want: float
    shapes: tuple = ()  # (got, expected) where the shapes differ


def compare(got, want, rtol, atol):
    """-> (ok, max abs err, max rel err, index of the worst element, got, want)."""
    if got.shape != want.shape:
        return False, float("inf"), float("inf"), (), float("nan"), float("nan")
    if got.size == 0:
        return True, 0.0, 0.0, (), 0.0, 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(g) & np.isnan(w)
    same_inf = np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w))
    with np.errstate(invalid="ignore"):  # inf - inf: nan, matched or made inf below
        err = np.where(same_nan | same_inf, 0.0, np.abs(g - w))
    err = np.where(np.isnan(err), np.inf, err)
    bad = err > atol + rtol * np.abs(np.where(np.isfinite(w), w, 0.0))
    worst = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0) if bad.any() else err)), err.shape)
    # relative to the expected value where it is not 0 (against 0 any error is infinitely
    # relative, which says nothing the absolute error does not); an unmatched
    # non-finite expected value is infinitely off
    matched = same_nan | same_inf
    finite = np.isfinite(w)
    scaled = (w != 0) & finite & ~matched
    relv = np.where(scaled, err / np.where(scaled, np.abs(w), 1.0), 0.0)
    rel = float(np.where(~finite & ~matched, np.inf, relv).max())
    return not bad.any(), float(err.max()), rel, tuple(int(i) for i in worst), float(g[worst]), float(w[worst])


def tolerance(dtype, rtol=None, atol=None):
    r, a = TOLERANCES.get(dtype, (0.0, 0.0))
    return (r if rtol is None else rtol), (a if atol is None else atol)


def logical_name(name):
    """A tensor the layout pass copied into another format ("x@nhwc", "x@logical", or
    with a suffix that keeps it apart from a model tensor of that name: "x@nhwc.2") ->
    the graph tensor it holds ("x")."""
    base, sep, fmt = name.rpartition("@")
    if not sep:
        return name
    head, dot, k = fmt.rpartition(".")
    if dot and k.isdigit() and (head == "logical" or formats.is_known(head)):
        fmt = head
    return base if fmt == "logical" or formats.is_known(fmt) else name


def _reference_name(name, ref):
    """The name of plan tensor `name` among the direct evaluation's tensors, or None: the
    name itself (a model may name a tensor "a@nhwc"), else the tensor it is a format copy of."""
    if name in ref:
        return name
    name = logical_name(name)
    return name if name in ref else None


def check(session, graph, feeds, options, rtol=None, atol=None):
    """Replay `session` launch by launch -> (diffs, n_compared): every tensor a launch
    writes whose value the direct evaluation has (a kernel-mode plan: every tensor; a
    fused plan: those crossing its launches; a sink plan: its outputs), beyond
    tolerance, in launch order: `diffs[0]` names the first launch whose output is off.
    A format conversion of an input is compared with the input."""
    from aotplan.core import dtypes
    from compiler import reference
    from executor import tools

    ref = reference.evaluate_all(graph, feeds, options)
    for t in graph.inputs:  # a launch converting an input (transdata) is checked against it
        if t.name in feeds:
            ref.setdefault(t.name, dtypes.from_storage(dtypes.to_storage(feeds[t.name], t.dtype, t.name), t.dtype))
    T = session.plan.tensors
    diffs, n = [], [0]

    def on_tensor(s, launch, i, v):
        t = T[i]
        name = _reference_name(t.name, ref)
        if name is None:
            return
        n[0] += 1
        r, a = tolerance(t.dtype, rtol, atol)
        ok, mabs, mrel, where, got, want = compare(v, ref[name], r, a)
        if not ok:
            shapes = (v.shape, ref[name].shape) if v.shape != ref[name].shape else ()
            diffs.append(Diff(s, launch.node, t.name, mabs, mrel, where, got, want, shapes))

    # (feeds hold the states' initial values for the direct evaluation: the plan starts
    # from them, and takes no feed for them)
    session.reset_state()
    own = {name for name, _, _ in session.input_specs}
    tools.replay_tensors(session, {k: v for k, v in feeds.items() if k in own}, on_tensor)
    return diffs, n[0]


@dataclass(frozen=True)
class ConstantDiff:
    tensor: str
    max_abs: float
    where: tuple
    got: float
    want: float


def check_constants(plan, graph, options, rtol=None, atol=None):
    """`plan`'s constants (their bytes in the plan) against `graph`'s after the clean-up
    passes `options` run (the compiler's own folding, weight layouts, ...) ->
    (diffs, n_compared), beyond the tolerance of each dtype (folding may round
    differently on another build). Constants the graph lacks are not compared."""
    from compiler import pipeline
    from executor import tools

    cleaned, _, _ = pipeline.prepare(graph, options)
    want = {c.name: c for c in cleaned.constants}
    T = plan.tensors
    diffs, n = [], 0
    for c in plan.constants:
        t = T[c.tensor]
        w = want.get(t.name)
        if w is None:
            continue
        n += 1
        got = tools.constant_value(t, c.data)
        ok, mabs, _, where, g, wv = compare(got, np.asarray(w.data), *tolerance(t.dtype, rtol, atol))
        if not ok:
            diffs.append(ConstantDiff(t.name, mabs, where, g, wv))
    return diffs, n
