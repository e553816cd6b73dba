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
