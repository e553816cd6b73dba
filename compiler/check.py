"""`aotplan check`: a plan, replayed launch by launch, against the direct evaluation.

The tool for "a number is off": it replays a kernel-mode plan (compiling one from the
model when the plan under test is sink or fused; tensors that live only inside a
fused kernel cannot be observed) and compares every tensor each launch writes with
the direct evaluation of the same cleaned-up graph, naming the first launch whose
output differs beyond tolerance.
"""

from dataclasses import dataclass

import numpy as np

from aotplan import formats
from aotplan.errors import AotplanError

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


def compare(got, want, rtol, atol):
    """-> (ok, max abs err, max rel err, index of the worst element, got, want)."""
    if got.shape != want.shape:
        return False, float("inf"), float("inf"), (), float("nan"), float("nan")
    if got.size == 0:
        return True, 0.0, 0.0, (), 0.0, 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    same_nan = np.isnan(g) & np.isnan(w)
    same_inf = np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w))
    err = np.where(same_nan | same_inf, 0.0, np.abs(g - w))
    err = np.where(np.isnan(err), np.inf, err)
    bad = err > atol + rtol * np.abs(np.where(np.isfinite(w), w, 0.0))
    worst = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0) if bad.any() else err)), err.shape)
    rel = float(np.max(err / np.maximum(np.abs(w), 1e-30), initial=0.0, where=~(same_nan | same_inf)))
    return not bad.any(), float(err.max()), rel, tuple(int(i) for i in worst), float(g[worst]), float(w[worst])


def tolerance(dtype, rtol=None, atol=None):
    r, a = TOLERANCES.get(dtype, (0.0, 0.0))
    return (r if rtol is None else rtol), (a if atol is None else atol)


def logical_name(name):
    """A tensor the layout pass copied into another format ("x@nhwc", "x@logical") ->
    the graph tensor it holds ("x")."""
    base, sep, fmt = name.rpartition("@")
    return base if sep and (fmt == "logical" or formats.is_known(fmt)) else name


def check(session, graph, feeds, options, rtol=None, atol=None):
    """Replay `session` (a kernel-mode plan) launch by launch -> (diffs, n_compared):
    every written tensor beyond tolerance, in launch order."""
    from compiler import reference
    from executor import tools

    if session.plan.launch_mode != "kernel":
        raise AotplanError("check needs a kernel-mode plan")
    ref = reference.evaluate_all(graph, feeds, options)
    T = session.plan.tensors
    diffs, n = [], [0]

    def on_tensor(s, launch, i, v):
        t = T[i]
        name = logical_name(t.name)
        if name not in ref:
            return
        n[0] += 1
        r, a = tolerance(t.dtype, rtol, atol)
        ok, mabs, mrel, where, got, want = compare(v, ref[name], r, a)
        if not ok:
            diffs.append(Diff(s, launch.node, t.name, mabs, mrel, where, got, want))

    tools.replay_tensors(session, feeds, on_tensor)
    return diffs, n[0]
