"""The op registry.

An `OpDef` has:
- `infer(node, ins) -> [(dtype, shape), ...]`: `ins` are the inputs' TensorInfo; it
  raises `ShapeError` naming the node and the shapes when the inputs do not fit.
- `lower(node, *arrays) -> tuple of arrays`: the computation in jax.numpy / lax on
  logical arrays (int64 arrives as int32: see aotplan.core.dtypes).
- `arity`: (min, max) number of *dynamic* inputs; `n_outputs` (None: one or more,
  as many as the node lists).
- `attrs`: the attribute names it accepts. Any other is an error naming the node: a
  typo ("stride") must never silently fall back to a default.
- `static_inputs`: ((position, attr), ...): inputs whose *value* decides shapes (ONNX
  passes reshape's shape, slice's starts, ... as tensors). `compiler.passes.fold`
  binds each to its attribute once it is a compile-time constant; `infer` and `lower`
  only ever see the dynamic inputs and the attributes. "" at a static position means
  absent (ONNX's convention for an omitted optional input). Static inputs come after
  every dynamic one (a bound node's dynamic inputs keep their positions); a front end
  reorders ONNX's inputs where it puts one first (OneHot's depth).
- `static_dtype`: the attribute that receives the dtype of the static inputs (range:
  its output has their type, which binding them to numbers would lose).
- `foldable`: constant folding may evaluate it at compile time.
- `internal`: a compiler pass's own op (transdata, which the layout pass inserts), never
  a model's: `validate` refuses it in a model as an unknown op (`model_ops()`).

What the passes need to know of an op is declared here too, by `register`'s keywords,
so that one place says what an op is (`ops_where(prop)` gives the
sets the passes read; an op's `formats` its storage format families):
- `elementwise`: each output element depends only on the elements at the same
  (broadcast) position of the inputs. compiler/formats.py lowers such an op in any
  storage format as is (its operands adapted to the output's device array), so it
  is lowered in every format family (`formats` defaults to `FORMAT_FAMILIES`); the
  layout pass treats every non-constant input as an activation.
- `zero_preserving` (elementwise ops only): the result is 0 wherever every input is
  0, so the padding of a storage format stays zero without masking (relu, add, mul,
  ...); any other elementwise op (sigmoid, div, ...) masks its result.
- `anchor`: a contraction (conv, matmul, gemm, einsum, attention, recurrences) that
  anchors a fused group (compiler/passes/group.py).
- `collective`: a collective over the devices of a tensor-parallel plan
  (compiler/ops/collective_ops.py): its own launch, run by the executor between
  kernels, in no kernel.
- `formats`: the storage format families (besides "default") the op has a lowering
  for in compiler/formats.py; compiler/passes/layout.py checks the shapes each needs
  (`layout.supports`).
"""

import math
from dataclasses import dataclass

from aotplan.core import dtypes
from aotplan.core import formats as storage_formats
from aotplan.core.errors import ShapeError

OPS = {}
# the storage format families an op may have a lowering for (besides "default")
FORMAT_FAMILIES = tuple(f for f in storage_formats.FORMAT_NAMES if f != "default")


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: object
    lower: object
    arity: tuple
    attrs: tuple = ()
    n_outputs: object = 1
    static_inputs: tuple = ()
    foldable: bool = True
    shape_value: object = None  # (node, input infos) -> output values, for ops like `shape`
    internal: bool = False
    static_dtype: str = None
    elementwise: bool = False
    zero_preserving: bool = False
    anchor: bool = False
    formats: tuple = ()  # format families (FORMAT_FAMILIES) with a lowering
    collective: bool = False

    @property
    def static_positions(self):
        return {p: a for p, a in self.static_inputs}


def register(name, arity, attrs=(), n_outputs=1, static_inputs=(), foldable=True, shape_value=None,
             internal=False, static_dtype=None, elementwise=False, zero_preserving=False, anchor=False,
             formats=None, collective=False):
    """`register(name, arity, attrs)((infer, lower))` adds an op to the registry.
    `formats`: by default every family for an elementwise op, none for any other."""
    if static_inputs and min(p for p, _ in static_inputs) < arity[1]:  # (see the module docstring)
        raise ValueError(f"op {name}: static inputs must follow every dynamic one")
    if zero_preserving and not elementwise:
        raise ValueError(f"op {name}: only an elementwise op is zero-preserving")
    if formats is None:
        formats = FORMAT_FAMILIES if elementwise else ()
    unknown = [f for f in formats if f not in FORMAT_FAMILIES]
    if unknown:
        raise ValueError(f"op {name}: unknown format families {unknown} (known: {', '.join(FORMAT_FAMILIES)})")

    def add(pair):
        infer, lower = pair
        all_attrs = tuple(attrs) + tuple(a for _, a in static_inputs if a not in attrs)
        OPS[name] = OpDef(name, infer, lower, arity, all_attrs, n_outputs, tuple(static_inputs), foldable,
                          shape_value, internal, static_dtype, elementwise=elementwise,
                          zero_preserving=zero_preserving, anchor=anchor, formats=tuple(formats),
                          collective=collective)
        return pair
    return add


def get(name):
    return OPS.get(name)


def ops_where(prop):
    """The names of the ops whose `OpDef` field `prop` ("elementwise", "zero_preserving",
    "anchor", ...) is true, as a frozenset."""
    return frozenset(n for n, op in OPS.items() if getattr(op, prop))


def model_ops():
    """The names a model's nodes may use: every op but the passes' own, sorted."""
    return sorted(n for n, op in OPS.items() if not op.internal)


def fail(node, msg):
    raise ShapeError(f"node {node.name!r} ({node.op}): {msg}")


def fmt(info):
    return f"{info.name!r} {info.dtype}{list(info.shape)}"


def broadcast_shape(node, ins):
    """numpy broadcasting of the inputs' shapes, or an error naming them."""
    import numpy as np

    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in ins)))
    except ValueError:
        fail(node, "cannot broadcast " + " with ".join(fmt(t) for t in ins))


def same_dtype(node, ins):
    dts = {t.dtype for t in ins}
    if len(dts) > 1:
        fail(node, "inputs must share one dtype, got " + ", ".join(fmt(t) for t in ins))
    return ins[0].dtype


def require_float(node, t):
    if t.dtype not in dtypes.FLOAT_DTYPES:
        fail(node, f"input {fmt(t)} must be a float type ({', '.join(dtypes.FLOAT_DTYPES)})")


def norm_axis(node, axis, rank, what="axis"):
    if rank == 0:
        fail(node, f"needs an input of rank >= 1 for its {what}, got a scalar")
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        fail(node, f"{what} {axis!r} is out of range for rank {rank}")
    return axis % rank


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # attributes are int64, as in ONNX


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool) and INT64_MIN <= x <= INT64_MAX


def int_list(node, key, n=None, default=None, minimum=None):
    v = node.attr(key, default)
    if not isinstance(v, tuple) or not all(_is_int(x) for x in v):
        fail(node, f"attribute {key!r} must be a list of 64-bit integers, got {v!r}")
    if n is not None and len(v) != n:
        fail(node, f"attribute {key!r} must have {n} entries, got {list(v)}")
    if minimum is not None and any(x < minimum for x in v):
        fail(node, f"attribute {key!r} entries must be >= {minimum}, got {list(v)}")
    return v


def int_attr(node, key, default):
    v = node.attr(key, default)
    if not _is_int(v):
        fail(node, f"attribute {key!r} must be a 64-bit integer, got {v!r}")
    return v


def scalar_attr(node, key):
    """An integer attribute that ONNX passes as a tensor input of one element (TopK's
    k, CumSum's axis): a scalar, or a list of one, once `fold` has bound it."""
    v = node.attr(key)
    if isinstance(v, tuple):
        if len(v) != 1:
            fail(node, f"{key!r} must be one integer, got {list(v)}")
        v = v[0]
    if not _is_int(v):
        fail(node, f"{key!r} must be an integer, got {v!r}")
    return v


def flag_attr(node, key, default):
    """A 0/1 attribute (ONNX's int flags)."""
    v = node.attr(key, default)
    if v not in (0, 1) or isinstance(v, bool) or not isinstance(v, int):
        fail(node, f"attribute {key!r} must be 0 or 1, got {v!r}")
    return v


def float_attr(node, key, default, minimum=None):
    v = node.attr(key, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        fail(node, f"attribute {key!r} must be a number, got {v!r}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        fail(node, f"attribute {key!r} must be finite, got {v!r}")
    if minimum is not None and f < minimum:
        fail(node, f"attribute {key!r} must be >= {minimum}, got {v!r}")
    return f
