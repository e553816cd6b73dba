"""More data-movement ops (ONNX semantics): gather, slice, split, squeeze, unsqueeze,
expand, tile, pad, einsum, shape, size, eye_like, constant_of_shape, range.

Static inputs (slice's starts/ends/axes/steps, split's sizes, squeeze/unsqueeze's axes,
expand's shape, tile's repeats, pad's pads/constant_value/axes, constant_of_shape's shape, range's
start/limit/delta) arrive as
attributes (see `compiler.passes.fold`); the shape rules and the lowerings share one
helper per op, so they cannot disagree.

Deliberate choices where ONNX leaves a runtime error that a compiled program cannot
raise: gather clips out-of-range indices that arrive at run time (after adding the
axis length to negative ones); constant ones are refused at compile time (`fold`). Squeeze with an explicitly empty `axes` is treated like absent `axes` (every
size-1 dimension is removed). Slice clamps per the ONNX text (a negative-step start is
clamped into [0, dim-1]), which differs from Python slicing for starts below -dim.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes
from compiler.ops.registry import fail, flag_attr, fmt, int_attr, int_list, norm_axis, register, same_dtype

INDEX_DTYPES = ("int32", "int64")


def _device_dtype(name):
    """The jnp dtype a lowering produces for logical dtype `name`: the storage dtype on
    the device (int64 -> int32), int64 while fold evaluates with x64 enabled."""
    return jax.dtypes.canonicalize_dtype(dtypes.np_dtype(name))


def _axes(node, key, rank, required=False):
    """A list attribute of distinct axes in [-rank, rank), normalized; None if absent."""
    if node.attr(key) is None:
        if required:
            fail(node, f"attribute {key!r} is required")
        return None
    axes = int_list(node, key)
    if rank == 0 and axes:
        fail(node, f"attribute {key!r} {list(axes)} is out of range for rank 0")
    out = [norm_axis(node, a, rank, f"{key} entry") for a in axes]
    if len(set(out)) != len(out):
        fail(node, f"attribute {key!r} repeats an axis: {list(axes)} (rank {rank})")
    return out


def _unwrap(node, key, value):
    """A scalar attribute, or a one-element list of one (a 1-element tensor input)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            fail(node, f"attribute {key!r} must be a scalar (or one-element list), got {value!r}")
        value = value[0]
    return value


def _scalar(node, key, value, dt):
    """A python scalar attribute checked against (and converted to) dtype `dt`."""
    value = _unwrap(node, key, value)
    if dt == "bool":
        if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
            return bool(value)
        fail(node, f"attribute {key!r} must be a bool (or 0/1) for dtype bool, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(node, f"attribute {key!r} must be a number for dtype {dt}, got {value!r}")
    if dt in dtypes.FLOAT_DTYPES:
        return float(value)
    if isinstance(value, float) and not value.is_integer():
        fail(node, f"attribute {key!r} must be an integer for dtype {dt}, got {value!r}")
    value = int(value)
    info = np.iinfo(dtypes.np_dtype(dtypes.storage_dtype(dt)))
    if not info.min <= value <= info.max:
        extra = " (int64 is stored as int32)" if dt == "int64" else ""
        fail(node, f"attribute {key!r} value {value} is out of range for {dt}{extra}")
    return value


# ---------------------------------------------------------------- gather

def _gather_infer(node, ins):
    data, idx = ins
    if idx.dtype not in INDEX_DTYPES:
        fail(node, f"indices {fmt(idx)} must be int32 or int64 (data {fmt(data)})")
    if not data.shape:
        fail(node, f"data {fmt(data)} must have rank >= 1 (indices {fmt(idx)})")
    axis = norm_axis(node, int_attr(node, "axis", 0), len(data.shape))
    if data.shape[axis] == 0 and math.prod(idx.shape):
        fail(node, f"cannot gather from the empty axis {axis} of {fmt(data)} with indices {fmt(idx)}")
    return [(data.dtype, data.shape[:axis] + idx.shape + data.shape[axis + 1:])]


def _gather(node, data, idx):
    axis = node.attr("axis", 0) % data.ndim
    n = data.shape[axis]
    idx = jnp.where(idx < 0, idx + n, idx)
    return (jnp.take(data, idx, axis=axis, mode="clip"),)


register("gather", (2, 2), ("axis",))((_gather_infer, _gather))


# ---------------------------------------------------------------- slice

def _slice_params(node, shape):
    """-> [(axis, start, stop, step, count)] for every sliced axis, ONNX clamping."""
    rank = len(shape)
    if node.attr("starts") is None or node.attr("ends") is None:
        fail(node, f"'starts' and 'ends' are required (input {list(shape)})")
    starts, ends = int_list(node, "starts"), int_list(node, "ends")
    n = len(starts)
    if len(ends) != n:
        fail(node, f"starts {list(starts)} and ends {list(ends)} differ in length (input {list(shape)})")
    axes = _axes(node, "axes", rank)
    if axes is None:
        if n > rank:
            fail(node, f"{n} starts for an input of rank {rank} {list(shape)}")
        axes = list(range(n))
    elif len(axes) != n:
        fail(node, f"axes {list(node.attr('axes'))} and starts {list(starts)} differ in length (input {list(shape)})")
    steps = int_list(node, "steps", default=(1,) * n)
    if len(steps) != n:
        fail(node, f"steps {list(steps)} and starts {list(starts)} differ in length (input {list(shape)})")
    out = []
    for ax, s, e, st in zip(axes, starts, ends, steps):
        d = shape[ax]
        if st == 0:
            fail(node, f"steps {list(steps)} contains 0 (input {list(shape)})")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        count = max(0, -(-(e - s) // st))
        # a step longer than the axis takes one element, as the axis' length does; a
        # step beyond int32 (INT64_MAX in exported models) would overflow in XLA
        st = max(min(st, max(d, 1)), -max(d, 1))
        out.append((ax, s, e, st, count))
    return out


def _slice_infer(node, ins):
    x = ins[0]
    shape = list(x.shape)
    for ax, _, _, _, count in _slice_params(node, x.shape):
        shape[ax] = count
    return [(x.dtype, tuple(shape))]


def _slice(node, x):
    index = [slice(None)] * x.ndim
    for ax, s, e, st, count in _slice_params(node, x.shape):
        if count == 0:
            index[ax] = slice(0, 0)
        elif st > 0:
            index[ax] = slice(s, e, st)
        else:
            index[ax] = slice(s, e if e >= 0 else None, st)
    return (x[tuple(index)],)


register("slice", (1, 1), static_inputs=((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")))((
    _slice_infer, _slice))


# ---------------------------------------------------------------- split

def _split_sizes(node, shape, n_out):
    if not shape:
        fail(node, f"cannot split a scalar input {list(shape)}")
    axis = norm_axis(node, int_attr(node, "axis", 0), len(shape))
    d = shape[axis]
    num = node.attr("num_outputs")
    if num is not None:
        num = int_attr(node, "num_outputs", None)
        if num < 1:
            fail(node, f"num_outputs must be >= 1, got {num}")
        if num != n_out:
            fail(node, f"num_outputs={num} but the node lists {n_out} outputs (input {list(shape)})")
    if node.attr("split") is not None:
        if num is not None:
            fail(node, "give either the 'split' input or 'num_outputs', not both")
        sizes = list(int_list(node, "split", minimum=0))
        if len(sizes) != n_out:
            fail(node, f"split {sizes} has {len(sizes)} entries for {n_out} outputs (input {list(shape)})")
        if sum(sizes) != d:
            fail(node, f"split {sizes} sums to {sum(sizes)}, not to dimension {axis} of input {list(shape)} ({d})")
        return axis, sizes
    chunk = -(-d // n_out)
    sizes = [chunk] * (n_out - 1) + [d - chunk * (n_out - 1)]
    if sizes[-1] < 0:
        fail(node, f"cannot split dimension {axis} ({d}) of input {list(shape)} into {n_out} parts of "
                   f"{chunk} with a smaller last one")
    return axis, sizes


def _split_infer(node, ins):
    x = ins[0]
    axis, sizes = _split_sizes(node, x.shape, len(node.outputs))
    return [(x.dtype, x.shape[:axis] + (s,) + x.shape[axis + 1:]) for s in sizes]


def _split(node, x):
    axis, sizes = _split_sizes(node, x.shape, len(node.outputs))
    offs = np.cumsum([0] + sizes)
    return tuple(jax.lax.slice_in_dim(x, int(a), int(b), axis=axis) for a, b in zip(offs[:-1], offs[1:]))


register("split", (1, 1), ("axis", "num_outputs"), n_outputs=None, static_inputs=((1, "split"),))((
    _split_infer, _split))


# ---------------------------------------------------------------- squeeze / unsqueeze

def _squeeze_shape(node, shape):
    axes = _axes(node, "axes", len(shape))
    if not axes:  # absent or empty: every size-1 dimension
        return tuple(d for d in shape if d != 1)
    bad = [a for a in axes if shape[a] != 1]
    if bad:
        fail(node, f"cannot squeeze axes {list(node.attr('axes'))} of input {list(shape)}: "
                   f"dimension {bad[0]} has size {shape[bad[0]]}, not 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _unsqueeze_shape(node, shape):
    if node.attr("axes") is None:
        fail(node, f"attribute 'axes' is required (input {list(shape)})")
    r = len(shape) + len(int_list(node, "axes"))
    axes = _axes(node, "axes", r, required=True)
    it = iter(shape)
    return tuple(1 if i in axes else next(it) for i in range(r))


register("squeeze", (1, 1), static_inputs=((1, "axes"),))((
    lambda node, ins: [(ins[0].dtype, _squeeze_shape(node, ins[0].shape))],
    lambda node, x: (x.reshape(_squeeze_shape(node, x.shape)),)))
register("unsqueeze", (1, 1), static_inputs=((1, "axes"),))((
    lambda node, ins: [(ins[0].dtype, _unsqueeze_shape(node, ins[0].shape))],
    lambda node, x: (x.reshape(_unsqueeze_shape(node, x.shape)),)))


# ---------------------------------------------------------------- expand

def _expand_shape(node, shape):
    if node.attr("shape") is None:
        fail(node, f"attribute 'shape' is required (input {list(shape)})")
    target = int_list(node, "shape", minimum=0)
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(target)))
    except ValueError:
        fail(node, f"input {list(shape)} cannot be expanded to shape {list(target)} (dimensions must be equal or 1)")


register("expand", (1, 1), static_inputs=((1, "shape"),))((
    lambda node, ins: [(ins[0].dtype, _expand_shape(node, ins[0].shape))],
    lambda node, x: (jnp.broadcast_to(x, _expand_shape(node, x.shape)),)))


# ---------------------------------------------------------------- tile

def _tile_shape(node, shape):
    if node.attr("repeats") is None:
        fail(node, f"'repeats' is required (input {list(shape)})")
    reps = int_list(node, "repeats", minimum=0)
    if len(reps) != len(shape):
        fail(node, f"repeats {list(reps)} must have one entry per dimension of input {list(shape)}")
    return tuple(d * r for d, r in zip(shape, reps))


def _tile(node, x):
    _tile_shape(node, x.shape)
    return (jnp.tile(x, tuple(node.attr("repeats"))) if x.ndim else x,)


register("tile", (1, 1), static_inputs=((1, "repeats"),))((
    lambda node, ins: [(ins[0].dtype, _tile_shape(node, ins[0].shape))], _tile))


# ---------------------------------------------------------------- trilu

def _trilu_infer(node, ins):
    x = ins[0]
    if len(x.shape) < 2:
        fail(node, f"input {fmt(x)} must have rank 2 or more")
    flag_attr(node, "upper", 1)
    int_attr(node, "k", 0)
    return [(x.dtype, x.shape)]


def _trilu(node, x):
    """ONNX Trilu: the upper (upper=1) or lower triangle of the last two axes, from
    diagonal k on; the rest zeros."""
    k = node.attr("k", 0)
    return (jnp.triu(x, k) if node.attr("upper", 1) else jnp.tril(x, k),)


register("trilu", (1, 1), ("upper",), static_inputs=((1, "k"),))((_trilu_infer, _trilu))


# ---------------------------------------------------------------- pad

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_params(node, shape):
    """-> (mode, [(lo, hi)] per dimension); negative entries crop."""
    rank = len(shape)
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        fail(node, f"attribute 'mode' must be one of {', '.join(PAD_MODES)}, got {mode!r}")
    if node.attr("pads") is None:
        fail(node, f"'pads' is required (input {list(shape)})")
    pads = int_list(node, "pads")
    axes = _axes(node, "axes", rank)
    if axes is None:
        axes = list(range(rank))
    if len(pads) != 2 * len(axes):
        fail(node, f"pads {list(pads)} must have 2 x {len(axes)} entries (begins then ends) for input {list(shape)}")
    widths = [(0, 0)] * rank
    for k, ax in enumerate(axes):
        lo, hi = pads[k], pads[k + len(axes)]
        d = shape[ax]
        cropped = d + min(lo, 0) + min(hi, 0)
        if cropped < 0:
            fail(node, f"pads {list(pads)} crop more than dimension {ax} of input {list(shape)} holds")
        widths[ax] = (lo, hi)
        grow = max(lo, hi, 0)
        if mode in ("edge", "wrap") and grow and cropped == 0:
            fail(node, f"edge padding of the empty dimension {ax} of input {list(shape)}")
        if mode == "reflect" and grow and grow > cropped - 1:
            fail(node, f"reflect pads {list(pads)} must be smaller than dimension {ax} of input {list(shape)} "
                       f"({cropped} after cropping)")
    return mode, widths


def _pad_infer(node, ins):
    x = ins[0]
    _, widths = _pad_params(node, x.shape)
    _scalar(node, "value", node.attr("value", 0), x.dtype)
    return [(x.dtype, tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, widths)))]


def _pad(node, x):
    mode, widths = _pad_params(node, x.shape)
    if mode == "constant":  # the shape rule has checked the value against the dtype
        value = jnp.array(_unwrap(node, "value", node.attr("value", 0)), x.dtype)
        return (jax.lax.pad(x, value, [(lo, hi, 0) for lo, hi in widths]),)
    x = x[tuple(slice(max(-lo, 0), x.shape[i] - max(-hi, 0)) for i, (lo, hi) in enumerate(widths))]
    return (jnp.pad(x, [(max(lo, 0), max(hi, 0)) for lo, hi in widths], mode=mode),)


register("pad", (1, 1), ("mode",), static_inputs=((1, "pads"), (2, "value"), (3, "axes")))((_pad_infer, _pad))


# ---------------------------------------------------------------- einsum

def _equation(node):
    eq = node.attr("equation")
    if not isinstance(eq, str) or not eq.strip():
        fail(node, f"attribute 'equation' must be a non-empty string, got {eq!r}")
    eq = eq.replace(" ", "")
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,.->")
    if set(eq) - allowed:
        fail(node, f"equation {eq!r} has characters other than letters, ',', '...' and '->'")
    return eq


def _einsum_infer(node, ins):
    dt = same_dtype(node, ins)
    if dt == "bool":
        fail(node, "einsum of bool is not supported: " + ", ".join(fmt(t) for t in ins))
    eq = _equation(node)
    lhs = eq.split("->")[0]
    if lhs.count(",") + 1 != len(ins):
        fail(node, f"equation {eq!r} names {lhs.count(',') + 1} operands, got {len(ins)}: "
                   + ", ".join(fmt(t) for t in ins))
    specs = [jax.ShapeDtypeStruct(t.shape, _device_dtype(t.dtype)) for t in ins]
    try:
        out = jax.eval_shape(lambda *xs: jnp.einsum(eq, *xs), *specs)
    except Exception as e:  # noqa: BLE001  (any jnp complaint is the model's fault)
        fail(node, f"equation {eq!r} does not fit inputs " + ", ".join(fmt(t) for t in ins) + f": {e}")
    return [(dt, tuple(out.shape))]


def _einsum(node, *xs):
    return (jnp.einsum(_equation(node), *xs).astype(xs[0].dtype),)


register("einsum", (1, 1 << 16), ("equation",), anchor=True)((_einsum_infer, _einsum))


# ---------------------------------------------------------------- shape / constant_of_shape

def _shape_range(node, rank):
    start, end = int_attr(node, "start", 0), int_attr(node, "end", rank)
    start, end = (start + rank if start < 0 else start), (end + rank if end < 0 else end)
    return min(max(start, 0), rank), min(max(end, 0), rank)


def _shape_value(node, ins):
    s, e = _shape_range(node, len(ins[0].shape))
    return [np.array(ins[0].shape[s:e], dtype=np.int64).reshape(-1)]


def _shape_infer(node, ins):
    return [("int64", _shape_value(node, ins)[0].shape)]


def _shape(node, x):
    s, e = _shape_range(node, x.ndim)
    return (jnp.asarray(np.array(x.shape[s:e], np.int64).reshape(-1), _device_dtype("int64")),)


register("shape", (1, 1), ("start", "end"), shape_value=_shape_value)((_shape_infer, _shape))


# size and eye_like depend on their input's shape only: constants at compile time
register("size", (1, 1), shape_value=lambda node, ins: [np.array(math.prod(ins[0].shape), np.int64)])((
    lambda node, ins: [("int64", ())],
    lambda node, x: (jnp.asarray(math.prod(x.shape), _device_dtype("int64")),)))


def _eye_params(node, x):
    if len(x.shape) != 2:
        fail(node, f"input {fmt(x) if hasattr(x, 'name') else list(x.shape)} must be 2-D")
    dt = node.attr("dtype", x.dtype if isinstance(x.dtype, str) else dtypes.dtype_name(x.dtype))
    if dt not in dtypes.DTYPES:
        fail(node, f"attribute 'dtype' must be one of {', '.join(dtypes.DTYPES)}, got {dt!r}")
    return dt, int_attr(node, "k", 0)


def _eye_value(node, ins):
    dt, k = _eye_params(node, ins[0])
    return [np.eye(*ins[0].shape, k=k, dtype=dtypes.np_dtype(dt))]


def _eye_like(node, x):
    dt, k = _eye_params(node, x)
    return (jnp.eye(*x.shape, k=k, dtype=_device_dtype(dt)),)


register("eye_like", (1, 1), ("dtype", "k"), shape_value=_eye_value)((
    lambda node, ins: [(_eye_params(node, ins[0])[0], ins[0].shape)], _eye_like))


def _cos_params(node):
    dt = node.attr("dtype", "float32")
    if not isinstance(dt, str) or dt not in dtypes.DTYPES:
        fail(node, f"attribute 'dtype' must be one of {', '.join(dtypes.DTYPES)}, got {dt!r}")
    if node.attr("shape") is None:
        fail(node, "'shape' is required")
    shape = int_list(node, "shape", minimum=0)
    return dt, tuple(shape), _scalar(node, "value", node.attr("value", 0.0), dt)


def _cos_infer(node, ins):
    dt, shape, _ = _cos_params(node)
    return [(dt, shape)]


def _cos(node):
    dt, shape, value = _cos_params(node)
    return (jnp.full(shape, value, _device_dtype(dt)),)


register("constant_of_shape", (0, 0), ("value", "dtype"), static_inputs=((0, "shape"),))((_cos_infer, _cos))


# ---------------------------------------------------------------- range

RANGE_DTYPES = dtypes.FLOAT_DTYPES + dtypes.INT_DTYPES


def _range_params(node):
    """(dtype, start, delta, n): n = max(ceil((limit - start) / delta), 0), the ONNX
    rule, with the difference taken in the op's dtype as onnxruntime does (float32 for
    float16/bfloat16: Range-27's stash_type 1)."""
    vals = {k: _unwrap(node, k, node.attr(k)) for k in ("start", "limit", "delta")}
    missing = [k for k, v in vals.items() if v is None]
    if missing:
        fail(node, f"{', '.join(repr(k) for k in missing)} required (inputs 0-2, constants)")
    default = "int64" if all(isinstance(v, int) and not isinstance(v, bool) for v in vals.values()) else "float32"
    dt = node.attr("dtype", default)
    if dt not in RANGE_DTYPES:
        fail(node, f"dtype {dt!r} must be numeric ({', '.join(RANGE_DTYPES)})")
    start, limit, delta = (_scalar(node, k, vals[k], dt) for k in ("start", "limit", "delta"))
    if delta == 0:
        fail(node, "delta must not be 0")
    if int_attr(node, "stash_type", 1) != 1:
        fail(node, f"attribute 'stash_type' {node.attr('stash_type')} is not supported (1: float32 arithmetic)")
    if dt in dtypes.FLOAT_DTYPES:
        if not all(math.isfinite(v) for v in (start, limit, delta)):
            fail(node, f"start, limit and delta must be finite, got {start}, {limit}, {delta}")
        work = np.float32 if dt in ("float16", "bfloat16") else dtypes.np_dtype(dt)  # (stash_type 1)
        diff = float(np.asarray(limit, work) - np.asarray(start, work))
        n = max(math.ceil(diff / delta), 0) if math.isfinite(diff / delta) else -1
    else:
        n = max(-((start - limit) // delta), 0)
    if not 0 <= n <= 1 << 31:
        fail(node, f"range({start}, {limit}, {delta}) has too many elements")
    return dt, start, delta, n


def _range_infer(node, ins):
    dt, _, _, n = _range_params(node)
    return [(dt, (n,))]


def _range(node):
    dt, start, delta, n = _range_params(node)
    acc = jnp.float32 if dt in ("float16", "bfloat16") else _device_dtype(dt)
    return ((start + jnp.arange(n, dtype=acc) * jnp.asarray(delta, acc)).astype(_device_dtype(dt)),)


register("range", (0, 0), ("dtype", "stash_type"), static_inputs=((0, "start"), (1, "limit"), (2, "delta")),
         static_dtype="dtype")((_range_infer, _range))


# ---------------------------------------------------------------- reverse_sequence

def _rev_params(node, x, lens):
    if len(x.shape) < 2:
        fail(node, f"input {fmt(x)} must have rank >= 2")
    b = norm_axis(node, int_attr(node, "batch_axis", 1), len(x.shape), "batch_axis")
    t = norm_axis(node, int_attr(node, "time_axis", 0), len(x.shape), "time_axis")
    if {b, t} != {0, 1}:
        fail(node, f"batch_axis {b} and time_axis {t} must be 0 and 1 (ONNX)")
    if lens.dtype not in INDEX_DTYPES or tuple(lens.shape) != (x.shape[b],):
        fail(node, f"sequence_lens {fmt(lens)} must be integers of shape [{x.shape[b]}]")
    return b, t


def _rev_infer(node, ins):
    _rev_params(node, *ins)
    return [(ins[0].dtype, ins[0].shape)]


def _reverse_sequence(node, x, lens):
    """ONNX ReverseSequence: along time_axis, the first sequence_lens[b] entries of each
    batch entry b reversed, the rest kept (lengths clipped into [0, time])."""
    b, t = _rev_params(node, x, lens)
    n = x.shape[t]
    steps = jnp.arange(n)[:, None]  # [time, 1]
    ln = jnp.clip(lens.astype(jnp.int32), 0, n)[None, :]  # [1, batch]
    src = jnp.where(steps < ln, ln - 1 - steps, steps)  # [time, batch]
    xt = jnp.moveaxis(x, (t, b), (0, 1))
    idx = src.reshape(src.shape + (1,) * (xt.ndim - 2))
    return (jnp.moveaxis(jnp.take_along_axis(xt, idx, axis=0), (0, 1), (t, b)),)


register("reverse_sequence", (2, 2), ("batch_axis", "time_axis"))((_rev_infer, _reverse_sequence))
