"""Control flow: `if` (ONNX If).

A plan is one static program, so both branches of an `if` are nodes of the graph (the
ONNX importer inlines each branch's subgraph, its values renamed `IF:then:NAME` and
`IF:else:NAME`), and the node picks one branch's results:

    if(cond, then_1..then_k, else_1..else_k) -> out_1..out_k

Where `cond` is known at compile time (a constant, a frozen input, or folded from
them), the fold pass replaces the node by the chosen branch's results and removes
the nodes only the other branch reads (passes/fold.py): that branch's outputs may
have any shape, and its nodes need not even fit the model's shapes. Where it is
known only at run time, both branches run and each output is selected on the device,
which needs each pair of results to have the same dtype and shape.
"""

import jax.numpy as jnp
import numpy as np

from compiler.ops.registry import fail, fmt, register


def branches(node):
    """(cond, then results, else results) of an `if` node."""
    k = (len(node.inputs) - 1) // 2
    return node.inputs[0], node.inputs[1:1 + k], node.inputs[1 + k:]


def _check_cond(node, c):
    if c.dtype != "bool" or int(np.prod(c.shape, dtype=np.int64)) != 1:
        fail(node, f"the condition {fmt(c)} must be a bool tensor of one element")


def _infer(node, ins):
    if len(ins) % 2 != 1 or len(ins) - 1 != 2 * len(node.outputs):
        fail(node, f"takes a condition and two results per output ({len(node.outputs)} outputs), "
                   f"got {len(ins)} inputs")
    _check_cond(node, ins[0])
    k = len(node.outputs)
    out = []
    for i, (t, e) in enumerate(zip(ins[1:1 + k], ins[1 + k:])):
        if (t.dtype, t.shape) != (e.dtype, e.shape):
            fail(node, f"output {i} ({node.outputs[i]!r}) is {fmt(t)} from the then branch and {fmt(e)} from the "
                       f"else branch, and the condition {node.inputs[0]!r} is only known at run time: a plan needs one "
                       f"shape and dtype per tensor. Make the condition a constant (freeze the inputs it depends on "
                       f"with --freeze-input NAME=FILE.npy)")
        out.append((t.dtype, t.shape))
    return out


def _lower(node, cond, *results):
    k = len(node.outputs)
    c = jnp.reshape(cond, ())
    return tuple(jnp.where(c, t, e) for t, e in zip(results[:k], results[k:]))


register("if", (3, 1 << 16), n_outputs=None)((_infer, _lower))


# ---------------------------------------------------------------- loops (ONNX Loop, Scan)
#
# The importer writes a loop flat, as its body's nodes between two markers:
#
#     loop_enter([M], [cond], v_1..v_n) -> (iter, cond_in, v_in_1..v_in_n)       ONNX Loop
#     scan_enter(s_1..s_n, x_1..x_k) -> (s_in_1..s_in_n, x_slice_1..x_slice_k)    ONNX Scan
#     loop_exit(body results) -> (final states, stacked scan outputs)
#
# The markers' outputs are the body's parameters, so the body's nodes read them as they
# read any value, and the graph stays acyclic. A plan is one static program: the fold
# pass unrolls each loop once its trip count is known (passes/unroll.py), so the
# markers never reach a lowering. Their rules give the parameters' types for the first
# iteration, which the unrolling pass reads from a lenient first fold.


def _loop_enter_infer(node, ins):
    ins = list(ins)
    if node.attr("trip_count", False):
        m = ins.pop(0)
        if m.dtype not in ("int64", "int32") or int(np.prod(m.shape, dtype=np.int64)) != 1:
            fail(node, f"the trip count {fmt(m)} must be an int64 tensor of one element")
    if node.attr("cond", False):
        _check_cond(node, ins.pop(0))
    if len(node.outputs) != 2 + len(ins):
        fail(node, f"the body takes {len(node.outputs)} inputs; it must take 2 + the {len(ins)} loop-carried values")
    return [("int64", ()), ("bool", ())] + [(t.dtype, t.shape) for t in ins]


def scan_params(node, ins):
    """(n states, [(axis, reverse)] per scan input, their common length) of a scan_enter."""
    n = int(node.attr("n_carried", 0))
    xs = ins[n:]
    axes = list(node.attr("axes", None) or [0] * len(xs))
    dirs = list(node.attr("directions", None) or [0] * len(xs))
    if not xs or len(axes) != len(xs) or len(dirs) != len(xs):
        fail(node, f"{len(xs)} scan inputs, {len(axes)} scan_input_axes and {len(dirs)} scan_input_directions "
                   f"(there must be at least one scan input, and one axis and direction each)")
    out, length = [], None
    for x, a, d in zip(xs, axes, dirs):
        if not -len(x.shape) <= a < len(x.shape):
            fail(node, f"scan input axis {a} is out of range for {fmt(x)}")
        if d not in (0, 1):
            fail(node, f"scan input direction {d} must be 0 (forward) or 1 (reverse)")
        a %= len(x.shape)
        if length is not None and x.shape[a] != length:
            fail(node, f"the scan inputs differ in length: {fmt(x)} has {x.shape[a]} on axis {a}, another {length}")
        length = x.shape[a]
        out.append((a, bool(d)))
    return n, out, length


def _scan_enter_infer(node, ins):
    n, scans, _ = scan_params(node, ins)
    if len(node.outputs) != len(ins):
        fail(node, f"the body takes {len(node.outputs)} inputs, the node has {len(ins)} (states and scan inputs)")
    slices = [(x.dtype, x.shape[:a] + x.shape[a + 1:]) for x, (a, _) in zip(ins[n:], scans)]
    return [(t.dtype, t.shape) for t in ins[:n]] + slices


def _loop_exit_infer(node, ins):
    fail(node, f"the loop entered at {node.attr('enter')!r} was not unrolled")


def _not_lowered(node, *args):
    raise AssertionError(f"{node.op} {node.name!r} reached a lowering: loops are unrolled by the fold pass")


register("loop_enter", (0, 1 << 16), ("trip_count", "cond"), n_outputs=None, foldable=False)((
    _loop_enter_infer, _not_lowered))
register("scan_enter", (1, 1 << 16), ("n_carried", "axes", "directions"), n_outputs=None, foldable=False)((
    _scan_enter_infer, _not_lowered))
register("loop_exit", (0, 1 << 16), ("enter", "kind", "n_carried", "axes", "directions"), n_outputs=None,
         foldable=False)((_loop_exit_infer, _not_lowered))
