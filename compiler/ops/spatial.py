"""What convolutions and pools share: ONNX's spatial attributes (strides, dilations,
pads, auto_pad) resolved against a static input shape, and output extents."""

from compiler.ops.registry import fail, fmt, int_list


AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def spatial_attrs(node, x, kernel):
    """Strides, dilations and (begin, end) pads per spatial axis, auto_pad resolved
    from the static input shape (ONNX rules). `x`: the input's TensorInfo in shape rules,
    the array itself in lowerings (only `.shape` is read)."""
    nd = len(kernel)
    s = int_list(node, "strides", nd, (1,) * nd, minimum=1)
    d = int_list(node, "dilations", nd, (1,) * nd, minimum=1)
    ap = node.attr("auto_pad", "NOTSET")
    if ap not in AUTO_PADS:
        fail(node, f"attribute 'auto_pad' must be one of {', '.join(AUTO_PADS)}, got {ap!r}")
    if ap == "NOTSET":
        p = int_list(node, "pads", 2 * nd, (0,) * (2 * nd), minimum=0)
        return s, d, [(p[i], p[i + nd]) for i in range(nd)]
    if any(node.attr("pads", (0,))):
        fail(node, f"'pads' cannot be combined with auto_pad={ap}")
    pads = []
    for size, k, st, dl in zip(x.shape[2:], kernel, s, d):
        if ap == "VALID":
            pads.append((0, 0))
            continue
        out = -(-size // st)
        total = max((out - 1) * st + (k - 1) * dl + 1 - size, 0)
        small, big = total // 2, total - total // 2
        pads.append((small, big) if ap == "SAME_UPPER" else (big, small))
    return s, d, pads


def out_size(node, size, k, s, p, d=1, ceil=False):
    """Output extent and the extra end padding that ceil_mode needs."""
    span = d * (k - 1) + 1
    room = size + p[0] + p[1] - span
    if room < 0:
        fail(node, f"window {k} (dilation {d}) does not fit input extent {size} with pads {p}")
    out = (-(-room // s) if ceil else room // s) + 1
    if ceil and (out - 1) * s >= size + p[0]:  # the last window must start inside the input
        out -= 1
    return out, max((out - 1) * s + span - (size + p[0] + p[1]), 0)


def spatial_input(node, x, what):
    if len(x.shape) < 3:
        fail(node, f"{what} needs an input (N, C, spatial...) of rank >= 3, got {fmt(x)}")
