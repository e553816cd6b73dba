"""layout: choose each tensor's storage format and insert the conversions.

A policy names the format activations should take (`--format-policy`):

    default   row-major logical shapes (NCHW): no conversions, the plan of earlier versions
    nhwc      4-D activations channels-last
    aligned   the innermost dimension padded to `aligned:M` (M: aotplan/core/formats.py)
    blocked   4-D activations as `nc1hwc0:C0` (blocked channels)
    auto      per model, the policy the target's calibrated cost model says is fastest
              (passes/format_cost.py)

Each node runs in the policy's format when its op has a lowering for it (the op's
`formats`, declared where it is registered) and its shapes fit (`supports`), otherwise
in `default`. A node running in format F reads its activation inputs in F and its
parameter inputs (weights, scales, biases, constants) in `default`; it writes its
outputs in F. Where a consumer needs a tensor in another format than its producer
wrote, a `transdata` node converts it (one per tensor and format, shared by every
consumer that needs it). Graph inputs and constants are `default`; a graph output made
in F gets a conversion back, so the executor exchanges logical arrays only.

A node's format is its attribute `format` (absent: default); the kernels lower it by
compiler/formats.py. Under `aligned`, a tensor whose innermost dimension is already a
multiple of M would hold the same bytes as in `default`: its node stays default.
"""

import dataclasses
from dataclasses import dataclass

from aotplan.core import formats
from aotplan.core.errors import ModelError
from aotplan.core.graph import Node, TensorInfo
from compiler import ops
from compiler.formats import device_axis

POLICIES = ("default", "nhwc", "aligned", "blocked", "auto")
FAMILY = {"nhwc": "nhwc", "aligned": "aligned", "blocked": "nc1hwc0"}


@dataclass(frozen=True)
class Layout:
    graph: object
    order: tuple
    info: dict
    formats: dict  # tensor name -> format string (every tensor in info)
    policy: str  # the policy applied ("auto" resolved)
    conversions: int  # transdata nodes inserted
    estimates: tuple = ()  # auto: ((policy, predicted seconds), ...) from passes/format_cost.py


def policy_format(policy, dtype, target="cpu"):
    fam = FAMILY[policy]
    if fam == "nhwc":
        return "nhwc"
    return formats.make(fam, formats.param_for(dtype, target))


def _activation_positions(node, consts):
    if ops.get(node.op).elementwise or node.op == "concat":
        return tuple(j for j, i in enumerate(node.inputs) if i not in consts)
    return (0,)


def _compatible(fam, shape, out):
    if len(shape) != len(out):
        return False
    if fam == "nc1hwc0":
        return shape[1] == out[1]
    if fam == "aligned":
        return shape[-1] == out[-1]
    return True


def supports(node, fmt, info, consts):
    """Whether `node` can run in `fmt` (its op has a lowering and its shapes fit)."""
    fam, _ = formats.parse(fmt)
    opdef = ops.get(node.op)
    if opdef is None or fam not in opdef.formats or len(node.outputs) != 1:
        return False
    out = info[node.outputs[0]].shape
    if 0 in out or not formats.accepts(fmt, len(out)):
        return False
    if fam in ("nhwc", "nc1hwc0") and len(out) != 4:
        return False
    if fam == "aligned" and not formats.padded_elements(out, fmt):
        return False
    act = _activation_positions(node, consts)
    if not act or any(node.inputs[j] in consts for j in act):
        return False
    from aotplan.core import dtypes

    size = dtypes.itemsize(info[node.outputs[0]].dtype)
    if fam != "nhwc" and any(dtypes.itemsize(info[node.inputs[j]].dtype) != size for j in act):
        return False  # the format's parameter follows the itemsize
    ins = [info[node.inputs[j]].shape for j in act]
    rank = len(out)
    op = node.op
    if opdef.elementwise:
        return all(_compatible(fam, s, out) for s in ins)
    if op == "concat":
        return len(act) == len(node.inputs) and device_axis(fmt, node.attr("axis", 0), rank) is not None
    if op == "batchnorm":
        return rank >= 2
    if op in ("conv", "conv2d", "maxpool", "avgpool", "global_avgpool", "global_maxpool", "lrn"):
        return rank == 4 and len(ins[0]) == 4
    if op == "resize":  # over H and W (an FPN's or a UNet's upsampling), never N or C
        from compiler.ops.resize import resized_axes

        return rank == 4 and len(ins[0]) == 4 and set(resized_axes(node, ins[0])) <= {2, 3}
    if op == "softmax":
        axis = node.attr("axis", -1) % rank
        return not node.attr("legacy_flatten", 0) and (fam == "nhwc" or axis == rank - 1)
    if op == "layernorm":
        return node.attr("axis", -1) % rank == rank - 1 and len(node.inputs) >= 2
    if op == "matmul":
        b = info[node.inputs[1]].shape
        return len(ins[0]) >= 2 and len(b) == 2 and ins[0][:-1] == out[:-1]
    if op == "gemm":
        return not node.attr("trans_a", 0)
    return False


def _unique(base, taken):
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}.{k}"
    taken.add(name)
    return name


def run(graph, order, info, policy="default", target="cpu", launch="kernel", table=None):
    """-> Layout. `launch`: the plan's launch mode; `table`: the target's storage-format
    cost table (passes/format_cost.py; None where it was not measured), which `auto`
    reads. `auto` in a sink plan, on a target with a cost table, is `nhwc` where some
    convolution can run in it, else `default`: XLA plans the one program's
    intermediates itself, but its CPU convolutions still transpose NCHW operands, which
    nhwc saves. Measured on 10 CNNs, nhwc was 0.60-1.01x default's sink step, where the
    per-node table (built for launches) picked default for two of them, 1.19x and 1.66x
    slower (docs/design.md, "Storage formats"); aligned and blocked slow a sink step."""
    if policy not in POLICIES:
        raise ModelError(f"unknown format policy {policy!r} (choose from {', '.join(POLICIES)})")
    if policy == "auto" and launch == "sink":
        if table is None:  # not measured on this target
            return run(graph, order, info, "default", target)
        lay = run(graph, order, info, "nhwc", target)
        if not any(n.op in ("conv", "conv2d") and n.attr("format", "default") != "default" for n in lay.order):
            lay = run(graph, order, info, "default", target)
        return dataclasses.replace(lay, estimates=(("sink", 0.0),))
    if policy == "auto":
        from compiler.passes import format_cost

        lay, est = format_cost.choose(table, lambda p: run(graph, order, info, p, target))
        return dataclasses.replace(lay, estimates=tuple(sorted(est.items())))
    fmts = {t: "default" for t in info}
    if policy == "default":
        return Layout(graph, tuple(order), dict(info), fmts, policy, 0)
    consts = {c.name for c in graph.constants}
    outputs = set(graph.outputs)
    info = dict(info)
    taken_t = set(info)
    taken_n = {n.name for n in graph.nodes}
    home = {t: "default" for t in list(consts) + [t.name for t in graph.inputs]}
    avail = {(t, "default"): t for t in home}
    nodes = []
    n_conv = 0

    def convert(t, f):
        nonlocal n_conv
        if (t, f) in avail:
            return avail[t, f]
        src_f = home[t]
        src = avail[t, src_f]
        dst = _unique(f"{t}@{f}" if f != "default" else f"{t}@logical", taken_t)
        nodes.append(Node(_unique(f"transdata:{t}:{f}", taken_n), "transdata", (src,), (dst,),
                          (("dst", f), ("src", src_f))))
        info[dst] = TensorInfo(dst, info[t].dtype, info[t].shape)
        fmts[dst] = f
        avail[t, f] = dst
        n_conv += 1
        return dst

    for n in order:
        f = policy_format(policy, info[n.outputs[0]].dtype, target) if n.outputs else "default"
        if f == "default" or not supports(n, f, info, consts):
            f = "default"
        act = set(_activation_positions(n, consts)) if f != "default" else set()
        ins = tuple(convert(i, f if j in act else "default") if i else i for j, i in enumerate(n.inputs))
        outs = []
        for o in n.outputs:
            home[o] = f
            if f != "default" and o in outputs:
                inner = _unique(f"{o}@{f}", taken_t)
                info[inner] = TensorInfo(inner, info[o].dtype, info[o].shape)
                fmts[inner] = f
                avail[o, f] = inner
                outs.append(inner)
            else:
                fmts[o] = f
                avail[o, f] = o
                outs.append(o)
        attrs = n.attrs if f == "default" else tuple(sorted(n.attrs + (("format", f),)))
        nodes.append(dataclasses.replace(n, inputs=ins, outputs=tuple(outs), attrs=attrs))
        for o in n.outputs:
            if f != "default" and o in outputs:  # back to the logical layout for the caller
                src = avail[o, f]
                nodes.append(Node(_unique(f"transdata:{o}:default", taken_n), "transdata", (src,), (o,),
                                  (("dst", "default"), ("src", f))))
                avail[o, "default"] = o
                fmts[o] = "default"
                n_conv += 1
    g = dataclasses.replace(graph, nodes=tuple(nodes))
    return Layout(g, tuple(nodes), info, fmts, policy, n_conv)
