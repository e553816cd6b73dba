"""conv_transpose (ONNX ConvTranspose): x (N, C, spatial...), w (C, M/group, kernel...),
optional bias (M).

Attributes as ONNX: strides, pads, dilations, group, output_padding, kernel_shape,
auto_pad, output_shape. Each output extent is
`stride * (in - 1) + output_padding + dilation * (kernel - 1) + 1 - pad_begin - pad_end`;
with `output_shape` (or auto_pad SAME_UPPER/SAME_LOWER, whose output is `in * stride`)
the pads follow from it: the total split evenly, the odd one at the end for SAME_UPPER,
at the beginning otherwise (the ONNX text). An output larger than the full result (an
`output_shape` past it, or SAME with a kernel shorter than the stride) grows at the end,
with zeros (plus the bias), as onnxruntime pads an explicit `output_shape`; ONNX's text
would give negative pads there. (For SAME with a kernel shorter than the stride,
onnxruntime's output stops at the full result, short of the `in * stride` that ONNX's
text and shape inference give; we keep ONNX's shape.) `output_shape` may list the
spatial extents or all of (N, M, spatial...).

Lowered as the convolution it is the gradient of: the input dilated by the strides, padded
by `dilation * (kernel - 1)` less the pads (plus output_padding at the end), convolved
with the kernel flipped and its channel axes swapped; pads larger than that crop the
result.
"""

import jax.numpy as jnp
from jax import lax

from compiler.ops.spatial import AUTO_PADS
from compiler.ops.registry import fail, fmt, int_attr, int_list, register, require_float, same_dtype


def _geometry(node, xshape, wshape):
    """-> (strides, dilations, [(pad_begin, pad_end)], output_padding, out channels M,
    output shape); every attribute checked against the shapes."""
    nd = len(xshape) - 2
    k = tuple(wshape[2:])
    if node.attr("kernel_shape") is not None and tuple(int_list(node, "kernel_shape", nd)) != k:
        fail(node, f"kernel_shape {list(node.attr('kernel_shape'))} does not match the weight's {list(k)}")
    s = int_list(node, "strides", nd, (1,) * nd, minimum=1)
    d = int_list(node, "dilations", nd, (1,) * nd, minimum=1)
    op = int_list(node, "output_padding", nd, (0,) * nd, minimum=0)
    for a in range(nd):
        if op[a] >= max(s[a], d[a]):
            fail(node, f"output_padding {list(op)} must be smaller than the stride or the dilation "
                       f"(strides {list(s)}, dilations {list(d)})")
    g = int_attr(node, "group", 1)
    c = xshape[1]
    if g < 1 or c % g or wshape[0] != c:
        fail(node, f"group={g}: input channels {c} and weight (C, M/group, kernel...) {list(wshape)} do not agree")
    m = wshape[1] * g
    ap = node.attr("auto_pad", "NOTSET")
    if ap not in AUTO_PADS:
        fail(node, f"attribute 'auto_pad' must be one of {', '.join(AUTO_PADS)}, got {ap!r}")
    full = [s[a] * (xshape[2 + a] - 1) + op[a] + d[a] * (k[a] - 1) + 1 for a in range(nd)]
    want = None
    if node.attr("output_shape") is not None:
        want = list(int_list(node, "output_shape", minimum=0))
        if len(want) == nd + 2:
            if want[:2] != [xshape[0], m]:
                fail(node, f"output_shape {want} must start with (N, M) = {[xshape[0], m]}")
            want = want[2:]
        if len(want) != nd:
            fail(node, f"output_shape {want} must list the {nd} spatial extents")
    elif ap in ("SAME_UPPER", "SAME_LOWER"):
        want = [xshape[2 + a] * s[a] for a in range(nd)]
    if ap != "NOTSET" and any(node.attr("pads", (0,))):
        fail(node, f"'pads' cannot be combined with auto_pad={ap}")
    if want is not None:  # the pads follow from the output's extents
        pads = []
        for a in range(nd):
            total = full[a] - want[a]
            if total < 0:  # the output grows past the full result: zeros at the end (pads are never
                pads.append((0, total))  # negative; onnxruntime likewise), a negative end pad here
                continue
            small, big = total // 2, total - total // 2
            pads.append((small, big) if ap == "SAME_UPPER" else (big, small))
    elif ap == "VALID":
        pads = [(0, 0)] * nd
    else:
        p = int_list(node, "pads", 2 * nd, (0,) * (2 * nd), minimum=0)
        pads = [(p[a], p[a + nd]) for a in range(nd)]
    out = [full[a] - pads[a][0] - pads[a][1] for a in range(nd)]
    if any(o < 1 for o in out):
        fail(node, f"pads {pads} leave no output (extents {out}) for input {list(xshape)} and kernel {list(k)}")
    return s, d, pads, op, m, (xshape[0], m, *out)


def _conv_transpose_infer(node, ins):
    x, w = ins[0], ins[1]
    require_float(node, x)
    same_dtype(node, ins)
    if len(x.shape) < 3:
        fail(node, f"conv_transpose needs an input (N, C, spatial...) of rank >= 3, got {fmt(x)}")
    if len(w.shape) != len(x.shape):
        fail(node, f"weight {fmt(w)} must have the input's rank {len(x.shape)} (C, M/group, kernel...)")
    *_, m, out = _geometry(node, x.shape, w.shape)
    if len(ins) == 3 and ins[2].shape != (m,):
        fail(node, f"bias {fmt(ins[2])} must have shape [{m}]")
    return [(x.dtype, out)]


def _conv_transpose(node, x, w, b=None):
    s, d, pads, op, m, out = _geometry(node, x.shape, w.shape)
    nd = x.ndim - 2
    g = node.attr("group", 1)
    c, k = x.shape[1], w.shape[2:]
    # (C, M/g, k...) -> (M, C/g, k...), spatially flipped: the forward convolution's kernel
    w = w.reshape((g, c // g, m // g) + k).swapaxes(1, 2).reshape((m, c // g) + k)
    w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
    edge = [dd * (kk - 1) for dd, kk in zip(d, k)]
    conv_pads = [(max(e - pb, 0), max(e - pe + o, 0)) for e, (pb, pe), o in zip(edge, pads, op)]
    sp = "".join(chr(ord("a") + i) for i in range(nd))
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NC" + sp, "OI" + sp, "NC" + sp))
    y = lax.conv_general_dilated(x, w, window_strides=(1,) * nd, padding=conv_pads, lhs_dilation=s, rhs_dilation=d,
                                 feature_group_count=g, dimension_numbers=dn)
    crop = tuple(slice(max(pb - e, 0), max(pb - e, 0) + n) for e, (pb, _), n in zip(edge, pads, out[2:]))
    y = y[(slice(None), slice(None)) + crop]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return (y.astype(x.dtype),)


register("conv_transpose", (2, 3), ("strides", "pads", "dilations", "group", "output_padding", "kernel_shape",
                                    "auto_pad", "output_shape"), anchor=True)((_conv_transpose_infer, _conv_transpose))

