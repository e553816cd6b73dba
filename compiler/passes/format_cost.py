"""format_cost: the cost model behind `--format-policy auto`, calibrated by measurement.

A table per target platform (compiler/calibration/<platform>.json, written by
scripts/calibrate_formats.py on that platform) holds, per op class and format family,
`seconds = a + b * flops + c * bytes` fitted (non-negative least squares) to measured
kernel times: `flops` of a contraction (conv, matmul; 0 for other ops) and the device
bytes the node reads and writes, so that padding costs what it moves. Conversions (transdata) have their own lines per
(source, destination) family pair; nodes that relayout inside their kernel (nc1hwc0
convs) were measured with that relayout in.

`auto` lays the model out under each policy (default, nhwc, aligned, blocked),
estimates each layout's step (the sum over its nodes), and keeps the cheapest; another
policy replaces `default` only when it is predicted at least `MARGIN` faster, so model
error alone cannot make auto slower than default. The choice depends only on the model
and the table: compiles stay deterministic. Without a table for the target, auto is
`default`.
"""

import json
import os

from aotplan.core import formats
from compiler import ops

CALIBRATION_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "calibration")
CANDIDATES = ("default", "nhwc", "aligned", "blocked")
MARGIN = 0.03  # a policy must be predicted 3% faster than default to be chosen

CLASSES = {
    "conv": ("conv", "conv2d"), "matmul": ("matmul", "gemm"), "pool": ("maxpool", "avgpool"),
    "reduce": ("global_avgpool", "global_maxpool", "softmax", "layernorm", "batchnorm", "lrn"), "concat": ("concat",),
    "elementwise": tuple(sorted(ops.ops_where("elementwise"))),  # the ops registered elementwise=True
}
_CLASS_OF = {op: c for c, ops_ in CLASSES.items() for op in ops_}


def family(fmt):
    return formats.parse(fmt)[0]


def key(node, fmts):
    """The table row a node's time is read from, or None (not format-dependent)."""
    if node.op == "transdata":
        return f"transdata:{family(node.attr('src'))}>{family(node.attr('dst'))}"
    c = _CLASS_OF.get(node.op)
    if c is None:
        return None
    return f"{c}:{family(node.attr('format', 'default'))}"


def features(node, info, fmts):
    """(1, FLOPs of a contraction or 0, device bytes read and written)."""
    from compiler.passes.group import flops

    f = flops(node, info) if _CLASS_OF.get(node.op) in ("conv", "matmul") else 0
    total = 0
    for t in tuple(node.inputs) + tuple(node.outputs):
        if t and t in info:
            i = info[t]
            total += formats.nbytes(i.shape, i.dtype, fmts.get(t, "default"))
    return (1.0, float(f), float(total))


def fit(points):
    """Non-negative least squares of seconds on features: [(features, seconds)] -> coefficients."""
    import numpy as np

    X = np.array([p[0] for p in points], float)
    y = np.array([p[1] for p in points], float)
    active = [j for j in range(X.shape[1]) if X[:, j].any()]
    while active:
        scale = np.abs(X[:, active]).max(axis=0)
        coef = np.linalg.lstsq(X[:, active] / scale, y, rcond=None)[0] / scale
        if (coef >= 0).all():
            out = [0.0] * X.shape[1]
            for j, c in zip(active, coef):
                out[j] = float(f"{c:.4g}")
            return out
        active.pop(int(np.argmin(coef)))
    return [0.0] * X.shape[1]


def load(platform):
    """The calibration table for `platform`, or None."""
    path = os.path.join(CALIBRATION_DIR, f"{platform}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def estimate(order, info, fmts, table):
    """Predicted seconds of the format-dependent nodes of a laid-out graph."""
    rows = table["rows"]
    total = 0.0
    for n in order:
        k = key(n, fmts)
        if k is None:
            continue
        row = rows.get(k)
        if row is None:  # not calibrated: as in default (or, for a conversion, the dearest one measured)
            if k.startswith("transdata:"):
                conv = [r for name, r in rows.items() if name.startswith("transdata:")]
                row = max(conv, key=lambda r: r[2]) if conv else (0.0, 0.0, 0.0)
            else:
                row = rows.get(k.split(":")[0] + ":default", (0.0, 0.0, 0.0))
        total += sum(c * x for c, x in zip(row, features(n, info, fmts)))
    return total


def choose(table, lay_out):
    """-> (chosen layout, {policy: predicted seconds}) under the cost `table` (`load`;
    None: default). `lay_out(policy)` lays the model out under a policy
    (passes/layout.run). Launch-by-launch plans only: layout.run says why sink plans do
    without."""
    default = lay_out("default")
    if table is None:
        return default, {}
    est, lays = {}, {}
    for pol in CANDIDATES:
        lay = default if pol == "default" else lay_out(pol)
        lays[pol] = lay
        est[pol] = estimate(lay.order, lay.info, lay.formats, table)
    best = min(CANDIDATES, key=lambda p: (est[p], CANDIDATES.index(p)))
    if best != "default" and not est[best] < est["default"] * (1 - MARGIN):
        best = "default"
    return lays[best], est

