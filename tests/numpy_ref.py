"""Independent numpy implementations of every op (the oracle for the op library).

Written from the ops' documented semantics (ONNX-style attributes), sharing no code
with compiler/ops. Computed in float64 where that is natural; callers cast.
"""

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_erf = np.vectorize(math.erf, otypes=[np.float64])


def binary(op, a, b):
    if op == "div" and np.issubdtype(a.dtype, np.integer):
        q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
        return (np.sign(a.astype(np.int64)) * np.sign(b.astype(np.int64)) * q).astype(a.dtype)
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op]
    return f(a, b)


def unary(op, x, approximate="none"):
    x = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else x
    if op == "relu":
        return np.where(x > 0, x, 0).astype(x.dtype)
    if op == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if op == "tanh":
        return np.tanh(x)
    if op == "erf":
        return _erf(x)
    if op == "exp":
        return np.exp(x)
    if op == "sqrt":
        return np.sqrt(x)
    if op == "gelu":
        if approximate == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if op == "identity":
        return x
    raise KeyError(op)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=0, trans_b=0):
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    y = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    return y if c is None else y + beta * c


def softmax(x, axis=-1):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm(x, scale, bias=None, axis=-1, epsilon=1e-5):
    x = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + epsilon) * scale
    return y if bias is None else y + bias


def batchnorm(x, scale, bias, mean, var, epsilon=1e-5):
    sh = (1, -1) + (1,) * (x.ndim - 2)
    x = x.astype(np.float64)
    return (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + epsilon) * scale.reshape(sh) + bias.reshape(sh)


def _windows(x, k, s, pads, fill, d=(1, 1)):
    """x: N,C,H,W -> windows N,C,OH,OW,kh,kw (with dilation d)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
    span = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)
    w = sliding_window_view(xp, span, axis=(2, 3))[:, :, :: s[0], :: s[1]]
    return w[..., :: d[0], :: d[1]]


def conv2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    x, w = x.astype(np.float64), w.astype(np.float64)
    m, cg, kh, kw = w.shape
    outs = []
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        ws = w[g * (m // group):(g + 1) * (m // group)]
        win = _windows(xs, (kh, kw), strides, pads, 0.0, dilations)  # N,Cg,OH,OW,kh,kw
        outs.append(np.einsum("nchwij,mcij->nmhw", win, ws))
    y = np.concatenate(outs, axis=1)
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def maxpool(x, kernel_shape, strides=(1, 1), pads=(0, 0, 0, 0)):
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return _windows(x, kernel_shape, strides, pads, fill).max(axis=(-1, -2))


def avgpool(x, kernel_shape, strides=(1, 1), pads=(0, 0, 0, 0), count_include_pad=0):
    x = x.astype(np.float64)
    total = _windows(x, kernel_shape, strides, pads, 0.0).sum(axis=(-1, -2))
    if count_include_pad:
        return total / (kernel_shape[0] * kernel_shape[1])
    ones = np.ones((1, 1) + x.shape[2:])
    return total / _windows(ones, kernel_shape, strides, pads, 0.0).sum(axis=(-1, -2))


def global_avgpool(x):
    return x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True)


def slice_(x, starts, ends, axes=None, steps=None):
    """ONNX Slice for positive steps: negative starts/ends count from the end, and both
    are clamped to the dimension (as Python's slices are)."""
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for a, b, e, s in zip(axes, starts, ends, steps):
        idx[a] = slice(b, e, s)
    return x[tuple(idx)]


def split(x, axis, split):
    """ONNX Split with its sizes given (`split`); other forms are not implemented here."""
    if split is None:
        raise NotImplementedError("numpy_ref.split needs the sizes")
    cuts = np.cumsum(split)[:-1]
    return np.split(x, cuts, axis=axis)


def pad(x, pads, value=0.0, mode="constant", axes=None):
    """ONNX Pad, constant mode, every axis: pads = [begin of each axis..., end of each
    axis...], each >= 0 (other forms are not implemented here)."""
    r = x.ndim
    if mode != "constant" or axes is not None or any(p < 0 for p in pads) or len(pads) != 2 * r:
        raise NotImplementedError(f"numpy_ref.pad: mode {mode!r}, axes {axes!r}, pads {list(pads)}")
    return np.pad(x, [(pads[i], pads[i + r]) for i in range(r)], constant_values=value)


def reduce(op, x, axes=None, keepdims=1, noop_with_empty_axes=0):
    """ONNX ReduceSum/Mean/Max: no axes (or []) reduces every axis, or none with
    noop_with_empty_axes=1; negative axes count from the end."""
    f = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max}[op]
    if not axes:
        if noop_with_empty_axes:
            return x.astype(np.float64)
        axes = range(x.ndim)
    axes = tuple(a % x.ndim for a in axes)
    return f(x.astype(np.float64), axis=axes, keepdims=bool(keepdims))


def reshape(x, shape):
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def flatten(x, axis=1):
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis])), -1 if x.size else int(np.prod(x.shape[axis:])))


def evaluate(graph, feeds):
    """Evaluate a Graph with these functions only (an oracle independent of compiler/)."""
    env = dict(feeds)
    env.update({c.name: c.data for c in graph.constants})
    for n in graph.nodes:  # example graphs are listed in topological order
        ys = node(n, [env[i] for i in n.inputs])
        env.update(zip(n.outputs, ys))
    return {o: env[o] for o in graph.outputs}


def node(n, xs):
    """One node's outputs (a list) from its input arrays."""
    a = n.attr_dict
    if n.op in ("add", "sub", "mul", "div"):
        y = binary(n.op, *xs)
    elif n.op in ("relu", "sigmoid", "tanh", "erf", "exp", "sqrt", "gelu", "identity"):
        y = unary(n.op, xs[0], a.get("approximate", "none"))
    elif n.op == "leaky_relu":
        x = xs[0].astype(np.float64)
        y = np.where(x >= 0, x, a.get("alpha", 0.01) * x)
    elif n.op == "matmul":
        y = xs[0].astype(np.float64) @ xs[1].astype(np.float64)
    elif n.op == "gemm":
        y = gemm(*xs, **a)
    elif n.op == "softmax":
        y = softmax(xs[0], a.get("axis", -1))
    elif n.op == "layernorm":
        y = layernorm(*xs, **a)
    elif n.op == "batchnorm":
        y = batchnorm(*xs, **a)
    elif n.op == "conv2d":
        y = conv2d(*xs, **a)
    elif n.op == "maxpool":
        y = maxpool(xs[0], **a)
    elif n.op == "avgpool":
        y = avgpool(xs[0], **a)
    elif n.op == "global_avgpool":
        y = global_avgpool(xs[0])
    elif n.op == "reshape":
        y = reshape(xs[0], a["shape"])
    elif n.op == "flatten":
        y = flatten(xs[0], a.get("axis", 1))
    elif n.op == "transpose":
        y = np.transpose(xs[0], a.get("perm"))
    elif n.op == "concat":
        y = np.concatenate(xs, axis=a.get("axis", 0))
    elif n.op == "slice":
        y = slice_(xs[0], **a)
    elif n.op == "split":
        return [np.asarray(v) for v in split(xs[0], a.get("axis", 0), a.get("split"))]
    elif n.op == "pad":
        y = pad(xs[0], a["pads"], a.get("value", 0.0), a.get("mode", "constant"), a.get("axes"))
    elif n.op in ("reduce_sum", "reduce_mean", "reduce_max"):
        y = reduce(n.op, xs[0], a.get("axes"), a.get("keepdims", 1), a.get("noop_with_empty_axes", 0))
    elif n.op == "global_maxpool":
        y = xs[0].max(axis=tuple(range(2, xs[0].ndim)), keepdims=True)
    else:
        raise KeyError(n.op)
    return [np.asarray(y)]
