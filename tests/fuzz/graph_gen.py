"""Random model graphs for differential testing: the plan against numbers no compiler
code computed. Shared by tests/fuzz/test_graph_fuzz.py (a fixed, seeded CI run) and
scripts/fuzz_graphs.py (longer runs).

`random_graph(seed, dtype=...)` builds a small DAG (up to `max_nodes` nodes) from the ops
tests/numpy_ref.py implements independently: elementwise chains, broadcasting, matmul
and gemm, conv2d (grouped, strided, dilated, padded), pools, batchnorm, layernorm,
softmax, reductions, reshape/flatten/transpose, slice, split (several outputs), pad and
concat (a tensor concatenated with itself too). Every tensor has the graph's dtype:
float32, float16, bfloat16, int8, uint8 or int16 (sub-word tensors share the arena's
4-byte words; integer graphs take only the ops whose results are exact). Tensors fan
out; some intermediates are graph outputs beside the sinks; a few nodes feed nothing
and are dead. Each node is evaluated with numpy_ref as it is added, so every graph is
valid by construction and carries its oracle: float64 (or int64) arithmetic, each
node's output rounded (or wrapped) to the graph's dtype.

`check(graph, feeds, want, variants)` compiles the graph under each variant (launch
mode, planner, in-place writes, views, concat placement, schedule, kernel reuse,
weights in the arena, storage formats), runs the plan through the executor and
compares its outputs with the oracle's (`RTOL`, relative to each output's scale;
integers exactly), and within a launch mode the variants that only move bytes with the
mode's default bit for bit. It returns a list of failures (strings), empty when all
agree.

Deterministic: the same seed gives the same graph on every machine.
"""

import math
import random

import numpy as np

import numpy_ref
from aotplan.core import dtypes
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

MAX_ELEMENTS = 6000  # per tensor: keeps the oracle's conv and the XLA compiles small

# (label, Options fields). Per launch mode the first is the default; the rest that are
# not marked "numeric" must give its outputs bit for bit (they move bytes, not
# arithmetic); "numeric" ones (storage formats) are compared with the oracle only.
VARIANTS = {
    "sink": (("sink", {}, False),
             ("sink/weights-arena", {"weights": "arena"}, True),
             ("sink/no-inline", {"inline_bytes": 0}, True)),
    # fused: one contraction per group (these small graphs are one group at the default
    # 100 MFLOP: a sink plan by another name), so that tensors cross groups in the arena
    "fused": (("fused", {"fuse_min_flops": 0}, False),
              ("fused/naive", {"fuse_min_flops": 0, "planner": "naive"}, False),
              ("fused/no-inplace", {"fuse_min_flops": 0, "inplace": False}, False),
              ("fused/default-flops", {}, True)),
    "kernel": (("kernel", {}, False),
               ("kernel/naive", {"planner": "naive"}, False),
               ("kernel/greedy_by_breadth", {"planner": "greedy_by_breadth"}, False),
               ("kernel/all-off", {"inplace": False, "views": False, "placement": "off", "schedule": "default",
                                   "reuse": False}, False),
               ("kernel/placement-always", {"placement": "always"}, False),
               ("kernel/weights-arena", {"weights": "arena"}, False),
               ("kernel/nhwc", {"format_policy": "nhwc"}, True),
               ("kernel/blocked", {"format_policy": "blocked"}, True),
               ("kernel/aligned", {"format_policy": "aligned"}, True)),
}
QUICK = ("sink", "fused", "kernel", "kernel/all-off", "kernel/placement-always", "kernel/blocked")


class _Skip(Exception):
    pass


class _Builder:
    def __init__(self, seed, max_nodes, dtype):
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.max_nodes = max_nodes
        self.dtype, self.np_dtype = dtype, dtypes.np_dtype(dtype)
        self.is_int = self.np_dtype.kind in "iu"
        self.low = 0 if self.np_dtype.kind == "u" else -4  # integer graphs: small values, which wrap as they grow
        self.inputs, self.nodes, self.consts = [], [], []
        self.val = {}  # tensor name -> its oracle value: float64, rounded to `dtype`
        self.feeds = {}
        self.used = set()  # tensors some node reads

    # -- tensors
    def tensors(self):
        """Activations a node may read (not constants)."""
        return [n for n in self.val if n not in self._const_names]

    @property
    def _const_names(self):
        return {c.name for c in self.consts}

    def add_input(self, shape):
        name = f"in{len(self.inputs)}"
        self.inputs.append(TensorInfo(name, self.dtype, tuple(shape)))
        if self.is_int:
            x = self.np.integers(self.low, 5, shape).astype(self.np_dtype)
        else:
            x = self.np.standard_normal(shape).astype(self.np_dtype)
        self.feeds[name] = x
        self.val[name] = x.astype(np.int64 if self.is_int else np.float64)
        return name

    def const(self, shape, kind="normal", fan_in=1):
        name = f"c{len(self.consts)}"
        if self.is_int:
            a = self.np.integers(1, 4, shape) if kind == "positive" else self.np.integers(self.low, 4, shape)
        elif kind == "positive":
            a = self.np.uniform(0.5, 2.0, shape)
        else:
            a = self.np.standard_normal(shape) / math.sqrt(max(fan_in, 1))
        a = np.asarray(a).astype(self.np_dtype)
        self.consts.append(Constant(name, self.dtype, tuple(shape), a))
        self.val[name] = a.astype(np.int64 if self.is_int else np.float64)
        return name

    def node(self, op, inputs, n_out=1, **attrs):
        name = f"n{len(self.nodes)}"
        outs = tuple(f"{name}.y{i}" for i in range(n_out))
        n = Node(name, op, tuple(inputs), outs, freeze(attrs))
        ys = numpy_ref.node(n, [self.val[i] for i in inputs])
        # each node's output is stored in the graph's dtype: the oracle rounds it there too
        # (integers: exact, in float64 or int64, then wrapped to the dtype's width)
        if self.is_int:
            ys = [np.rint(np.asarray(y, np.float64)).astype(np.int64).astype(self.np_dtype).astype(np.int64)
                  if np.asarray(y).dtype.kind == "f" else np.asarray(y).astype(self.np_dtype).astype(np.int64)
                  for y in ys]
        else:
            ys = [np.asarray(y, np.float64).astype(self.np_dtype).astype(np.float64) for y in ys]
        if any(y.size == 0 or y.size > MAX_ELEMENTS or not np.all(np.isfinite(y)) for y in ys):
            return None
        self.nodes.append(n)
        self.used.update(inputs)
        self.val.update(zip(outs, ys))
        return outs
        return outs

    # -- the graph
    def pick(self, pred=lambda s: True, optional=False):
        """An activation whose shape satisfies pred, favouring recent ones (deep chains)
        but sometimes an older one (fan-out); where there is none, None if `optional`,
        else _Skip (this node is not drawn)."""
        names = [n for n in self.tensors() if pred(self.val[n].shape)]
        if not names:
            if optional:
                return None
            raise _Skip
        if self.r.random() < 0.7:
            return names[-1 - min(int(self.r.expovariate(1.0)), len(names) - 1)]
        return self.r.choice(names)

    def graph(self, name):
        sinks = [o for n in self.nodes for o in n.outputs if o not in self.used]
        self.r.shuffle(sinks)
        outs = sinks[:4]  # the rest are dead: the cleanup passes drop their nodes
        inner = [o for n in self.nodes for o in n.outputs if o in self.used]
        if inner and self.r.random() < 0.4:
            outs.append(self.r.choice(inner))  # an intermediate that must stay live
        if not outs:
            outs = [self.nodes[-1].outputs[0]]
        outs = sorted(set(outs), key=outs.index)
        g = Graph(name, tuple(self.inputs), tuple(outs), tuple(self.nodes), tuple(self.consts))
        return g, self.feeds, {o: self.val[o] for o in outs}


def _ranked(s):
    return len(s) >= 1


def _rank(k):
    return lambda s: len(s) == k


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _grow(b):
    """Add one random node (or fail to, returning None: the caller tries again)."""
    r = b.r
    if b.is_int:  # the ops whose integer results are exact (and wrap alike in numpy and XLA)
        kind = r.choices(["unary", "binary", "matmul", "pool", "reduce", "reshape", "flatten", "transpose", "slice",
                          "split", "pad", "concat"], weights=[4, 10, 4, 5, 3, 4, 2, 4, 4, 3, 3, 6])[0]
    else:
        kind = r.choices(["unary", "binary", "matmul", "gemm", "conv", "bn", "pool", "gpool", "softmax", "layernorm",
                          "reduce", "reshape", "flatten", "transpose", "slice", "split", "pad", "concat"],
                         weights=[8, 10, 4, 3, 8, 3, 5, 2, 3, 3, 3, 4, 2, 4, 4, 3, 3, 6])[0]
    if kind == "unary" and b.is_int:
        return b.node(r.choice(["relu", "identity"]), [b.pick()])
    if kind == "unary":
        x = b.pick()
        op = r.choice(["relu", "sigmoid", "tanh", "gelu", "erf", "identity", "leaky_relu"])
        return b.node(op, [x], **({"alpha": r.choice([0.01, 0.2])} if op == "leaky_relu" and r.random() < 0.5
                                  else {}))
    if kind == "binary":
        x = b.pick()
        s = b.val[x].shape
        op = r.choice(["add", "add", "sub", "mul"] + ([] if b.is_int else ["div"]))
        if op == "div":  # by a positive constant, broadcast
            return b.node("div", [x, b.const(_broadcast_shape(r, s), "positive")])
        same = [n for n in b.tensors() if b.val[n].shape == s]
        how = r.random()
        if how < 0.45 and same:
            y = r.choice(same)  # (x itself, sometimes: a node reading one tensor twice)
        elif how < 0.6:
            y = b.pick(lambda t: len(t) <= len(s) and all(d in (1, e) for d, e in zip(t[::-1], s[::-1])),
                       optional=True)
            y = y or b.const(_broadcast_shape(r, s))
        else:
            y = b.const(_broadcast_shape(r, s))
        return b.node(op, [x, y] if r.random() < 0.7 else [y, x])
    if kind == "matmul":
        x = b.pick(lambda s: len(s) >= 2)
        k = b.val[x].shape[-1]
        return b.node("matmul", [x, b.const((k, r.randint(1, 12)), fan_in=k)])
    if kind == "gemm":
        x = b.pick(_rank(2))
        k, n, tb = b.val[x].shape[1], r.randint(1, 12), r.random() < 0.5
        ins = [x, b.const((n, k) if tb else (k, n), fan_in=k)]
        if r.random() < 0.6:
            ins.append(b.const((n,) if r.random() < 0.7 else (1, n)))
        return b.node("gemm", ins, trans_b=int(tb), alpha=r.choice([1.0, 0.5]), beta=r.choice([1.0, 2.0]))
    if kind in ("conv", "bn", "pool", "gpool"):
        x = b.pick(_rank(4), optional=True)
        if x is None:
            return _to_image(b)
        n, c, h, w = b.val[x].shape
        if kind == "bn":
            return b.node("batchnorm", [x, b.const((c,)), b.const((c,)), b.const((c,)), b.const((c,), "positive")],
                          epsilon=1e-5)
        if kind == "gpool":
            return b.node(r.choice(["global_avgpool", "global_maxpool"]), [x])
        kh, kw = r.choice([1, 2, 3]), r.choice([1, 2, 3])
        st = [r.choice([1, 1, 2]), r.choice([1, 1, 2])]
        pads = [r.randint(0, kh - 1), r.randint(0, kw - 1), r.randint(0, kh - 1), r.randint(0, kw - 1)]
        if kind == "pool":
            if kh > h + pads[0] + pads[2] or kw > w + pads[1] + pads[3]:
                return None
            if b.is_int or r.random() < 0.5:
                return b.node("maxpool", [x], kernel_shape=[kh, kw], strides=st, pads=pads)
            return b.node("avgpool", [x], kernel_shape=[kh, kw], strides=st, pads=pads,
                          count_include_pad=r.choice([0, 1]))
        group = r.choice([1, 1, 1] + _divisors(c))
        dil = [r.choice([1, 1, 2]), r.choice([1, 1, 2])]
        if dil[0] * (kh - 1) + 1 > h + pads[0] + pads[2] or dil[1] * (kw - 1) + 1 > w + pads[1] + pads[3]:
            return None
        m = group * r.randint(1, 3 if group > 1 else 8)
        ins = [x, b.const((m, c // group, kh, kw), fan_in=c // group * kh * kw)]
        if r.random() < 0.6:
            ins.append(b.const((m,)))
        return b.node("conv2d", ins, strides=st, pads=pads, dilations=dil, group=group)
    if kind == "softmax":
        x = b.pick(_ranked)
        return b.node("softmax", [x], axis=r.randint(-len(b.val[x].shape), len(b.val[x].shape) - 1))
    if kind == "layernorm":
        x = b.pick(_ranked)
        if np.min(np.var(b.val[x], axis=-1)) < 1e-3:
            return None  # (x - mean is all rounding there, and 1/sqrt(epsilon) magnifies it 300 times)
        d = b.val[x].shape[-1]
        ins = [x, b.const((d,))] + ([b.const((d,))] if r.random() < 0.7 else [])
        return b.node("layernorm", ins, axis=-1, epsilon=1e-5)
    if kind == "reduce":
        x = b.pick(_ranked)
        rk = len(b.val[x].shape)
        axes = sorted(r.sample(range(rk), r.randint(1, rk)))
        axes = [a - rk if r.random() < 0.3 else a for a in axes]
        return b.node(r.choice(["reduce_sum", "reduce_max"] + ([] if b.is_int else ["reduce_mean"])), [x], axes=axes,
                      keepdims=r.choice([0, 1]))
    if kind == "reshape":
        x = b.pick()
        shape = _factor(r, b.val[x].size)
        if r.random() < 0.3:
            shape[r.randrange(len(shape))] = -1
        return b.node("reshape", [x], shape=shape)
    if kind == "flatten":
        x = b.pick()
        return b.node("flatten", [x], axis=r.randint(0, len(b.val[x].shape)))
    if kind == "transpose":
        x = b.pick(lambda s: len(s) >= 2)
        perm = list(range(len(b.val[x].shape)))
        r.shuffle(perm)
        return b.node("transpose", [x], perm=perm)
    if kind == "slice":
        x = b.pick(lambda s: max(s, default=0) >= 2)
        s = b.val[x].shape
        axes = [a for a in range(len(s)) if s[a] >= 2]
        axes = sorted(r.sample(axes, r.randint(1, len(axes))))
        starts, ends, steps = [], [], []
        for a in axes:
            lo = r.randrange(s[a] - 1)
            hi = r.choice([r.randint(lo + 1, s[a]), 2**31 - 1])
            starts.append(lo - s[a] if r.random() < 0.3 else lo)
            ends.append(hi)
            steps.append(r.choice([1, 1, 2]))
        return b.node("slice", [x], starts=starts, ends=ends, axes=axes, steps=steps)
    if kind == "split":
        x = b.pick(lambda s: max(s, default=0) >= 2)
        s = b.val[x].shape
        axis = r.choice([a for a in range(len(s)) if s[a] >= 2])
        k = r.randint(2, min(3, s[axis]))
        cuts = sorted(r.sample(range(1, s[axis]), k - 1))
        sizes = [e - a for a, e in zip([0] + cuts, cuts + [s[axis]])]
        return b.node("split", [x], n_out=k, axis=axis, split=sizes)
    if kind == "pad":
        x = b.pick(_ranked)
        rk = len(b.val[x].shape)
        pads = [r.choice([0, 0, 1, 2]) for _ in range(2 * rk)]
        value = r.choice([0, 0, 1]) if b.is_int else r.choice([0.0, 0.0, -1.5])
        return b.node("pad", [x], pads=pads, value=value)
    if kind == "concat":
        x = b.pick(_ranked)
        s = b.val[x].shape
        axis = r.randrange(len(s))
        if r.random() < 0.7:
            # fresh parts: each made by a node of its own and read by the concat alone, so
            # that kernel plans write them straight into their slices (views.placements)
            parts = [b.node("add", [x, b.const(_broadcast_shape(r, s))]) for _ in range(r.randint(2, 3))]
            if any(p is None for p in parts):
                return None
            c = b.node("concat", [p[0] for p in parts], axis=axis)
            if c is None or r.random() < 0.2:
                return c
            # ... and read by a node (a graph output is not placed: it owns its bytes)
            return b.node("mul", [c[0], b.const(_broadcast_shape(r, b.val[c[0]].shape))])
        fits = [n for n in b.tensors()
                if len(b.val[n].shape) == len(s) and all(d == e for i, (d, e) in enumerate(zip(b.val[n].shape, s))
                                                         if i != axis)]
        ins = [x] + [r.choice(fits) for _ in range(r.randint(1, 2))]  # (x again, sometimes)
        r.shuffle(ins)
        return b.node("concat", ins, axis=axis - len(s) if r.random() < 0.3 else axis)
    raise AssertionError(kind)


def _broadcast_shape(r, s):
    """A shape that broadcasts to s: a suffix of s with some dimensions set to 1."""
    t = list(s[r.randint(0, len(s) - 1):]) if s else []
    return tuple(1 if r.random() < 0.4 else d for d in t)


def _factor(r, n):
    """A random shape (rank 1-4) with n elements."""
    dims = []
    rest = n
    for _ in range(r.randint(0, 3)):
        d = r.choice(_divisors(rest))
        dims.append(d)
        rest //= d
    dims.append(rest)
    r.shuffle(dims)
    return dims


def _to_image(b):
    """Reshape an activation into NCHW, so that convolutions and pools have one."""
    x = b.pick(lambda s: math.prod(s) >= 4)
    n = b.val[x].size
    for h in (4, 3, 2):
        if n % (h * h) == 0:
            return b.node("reshape", [x], shape=[1, n // (h * h), h, h])
    return None


def random_graph(seed, max_nodes=12, dtype="float32"):
    """-> (Graph, feeds {input: array of `dtype`}, oracle outputs {output: float64
    array}). dtype: float32, float16 or bfloat16, for every tensor of the graph."""
    b = _Builder(seed, max_nodes, dtype)
    r = b.r
    flavor = r.choice(["image", "image", "sequence", "matrix"])
    if flavor == "image":
        shape = (r.randint(1, 2), r.randint(1, 6), r.randint(3, 9), r.randint(3, 9))
    elif flavor == "sequence":
        shape = (r.randint(1, 2), r.randint(1, 6), r.randint(2, 16))
    else:
        shape = (r.randint(1, 8), r.randint(1, 16))
    b.add_input(shape)
    if r.random() < 0.3:  # a second input: the same shape, or one that broadcasts
        b.add_input(shape if r.random() < 0.5 else _broadcast_shape(r, shape) or (1,))
    target = r.randint(2, max_nodes)
    tries = 0
    while len(b.nodes) < target and tries < 20 * max_nodes:
        tries += 1
        try:
            _grow(b)
        except _Skip:
            pass
    if not b.nodes:
        b.node("relu", [b.inputs[0].name])
    return b.graph(f"fuzz{seed}")


def variants(names=None):
    """[(label, launch, options, numeric)] for these labels (default: all)."""
    out = [(label, mode, opts, numeric) for mode, vs in VARIANTS.items() for label, opts, numeric in vs]
    if names is not None:
        unknown = set(names) - {v[0] for v in out}
        if unknown:
            raise ValueError(f"unknown variants: {', '.join(sorted(unknown))}")
        out = [v for v in out if v[0] in names]
    return out


# relative tolerance per dtype (of the larger of an element and its output's scale):
# float32 2e-5 (170 units of the last place), float16 and bfloat16 4 units (XLA may keep a
# fused chain's intermediates in float32 where the oracle rounds every node's output).
# Measured on 12 seeds of each under sink, fused, kernel and blocked kernel plans
# (2026-12-05): the worst error was 5 units in float32 and 0.42
# in float16 and bfloat16, so these leave 10-30x headroom; a wrong tensor is off by its scale.
RTOL = {"float32": 2e-5, "float16": 4 * 2.0**-10, "bfloat16": 4 * 2.0**-7,
        "int8": 0, "uint8": 0, "int16": 0}  # (integer graphs: exact)


def close(got, want, dtype="float32"):
    """A plan's output vs the oracle's: within RTOL[dtype] of the output's scale (at
    least 0.1 RTOL: an output of exact zeros in float64, such as x - mean(x) over an axis
    of equal values, is rounding noise in float32) and RTOL relative, the shapes equal
    -> None, or what is off."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape}, oracle {want.shape}"
    if RTOL[dtype] == 0:
        bad = got.astype(np.int64) != want
        if np.any(bad):
            i = np.unravel_index(np.argmax(bad), bad.shape)
            return (f"{int(bad.sum())} of {bad.size} elements differ; the first at {tuple(int(j) for j in i)}: "
                    f"{int(got[i])} vs {int(want[i])}")
        return None
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    err = np.abs(got.astype(np.float64) - want)
    rtol = RTOL[dtype]
    bad = ~(err <= rtol * np.abs(want) + rtol * max(scale, 0.1))  # (a NaN is off)
    if np.any(bad):
        i = np.unravel_index(np.argmax(err), err.shape)
        return (f"{int(bad.sum())} of {err.size} elements off; worst at {tuple(int(j) for j in i)}: "
                f"{float(got[i])!r} vs {float(want[i])!r} (output scale {scale:.3g})")
    return None


def check(graph, feeds, want, variant_list, compile_and_run):
    """Run each variant -> [failure strings]. compile_and_run(graph, launch, options)
    -> outputs {name: array} (the caller compiles and loads the plan its way)."""
    failures, base = [], {}
    dtype = graph.inputs[0].dtype
    for label, mode, opts, numeric in variant_list:
        try:
            got = compile_and_run(graph, mode, opts)
        except Exception as e:  # noqa: BLE001 (a valid graph must compile and run)
            failures.append(f"{label}: {type(e).__name__}: {e}")
            continue
        missing = [k for k in want if k not in got]
        if missing:
            failures.append(f"{label}: no output {missing[0]!r}")
            continue
        for k in want:
            off = close(got[k], want[k], dtype)
            if off:
                failures.append(f"{label}: output {k!r}: {off}")
        if numeric:
            continue
        if mode not in base:
            base[mode] = (label, got)
            continue
        ref_label, ref = base[mode]
        for k in want:
            if not np.array_equal(np.asarray(got[k]), np.asarray(ref[k])):
                failures.append(f"{label}: output {k!r} is not bit-identical to {ref_label}'s")
    return failures
