"""weight_layout: store constant weights in the layout the target's kernels read, so
that no kernel relayouts weights on every step.

XLA's CPU convolutions read the filter as (spatial..., in, out) ("HWIO"). Given an ONNX
filter (out, in, spatial...) as a constant, XLA folds the transpose away when the
weights are compile-time constants (`jax.jit` of the model closes over them), but our
kernels take the constant pool as arguments, so the transpose runs in every step: on
ResNet-50, 100 MB of weights rewritten per step. This pass transposes each such
constant once at compile time and marks the conv `weight_layout="SIO"`; `conv` reads
either layout (compiler/ops/conv.py).

A Gemm with `trans_b=1` (ONNX's fully connected layers: B is (N, K)) lowers to a dot
of B's transpose, and XLA's CPU backend materializes that transpose in every step
(AlexNet's 9216x4096 weight: 144 MiB of workspace, rewritten each step). Its constant
B is stored as (K, N) and the Gemm's `trans_b` cleared. Measured: docs/design.md,
"Weight layout".

Runs only when every target is the CPU (pipeline.Options.runs): on GPUs cuDNN reads
NCHW/OIHW float32 directly and XLA picks its own layouts; not measured there.
A constant shared by several consumers is transposed once; the original is left for dce.
"""

import dataclasses

import numpy as np

from aotplan.core.graph import Constant, freeze

CONV_OPS = ("conv", "conv2d")


def _relayout(n, consts):
    """-> (input index, suffix, permutation, new attrs) where node `n` reads a constant
    in a layout its kernel would relayout every step, else None."""
    if n.op in CONV_OPS and len(n.inputs) > 1 and n.inputs[1] in consts:
        nd = consts[n.inputs[1]].data.ndim
        if n.attr("weight_layout", "OIS") == "OIS" and nd >= 3:
            return 1, "sio", tuple(range(2, nd)) + (1, 0), {"weight_layout": "SIO"}
    if n.op == "gemm" and n.inputs[1] in consts and n.attr("trans_b", 0) and consts[n.inputs[1]].data.ndim == 2:
        return 1, "kn", (1, 0), {"trans_b": 0}
    return None


def run(graph):
    consts = graph.constant_map()
    made = {}
    new_consts, nodes, changed = [], [], 0
    for n in graph.nodes:
        how = _relayout(n, consts)
        if how is None:
            nodes.append(n)
            continue
        at, suffix, perm, attrs = how
        w = n.inputs[at]
        if (w, suffix) not in made:
            c = consts[w]
            data = np.ascontiguousarray(np.transpose(c.data, perm))
            name = f"{w}:{suffix}"
            while name in consts:
                name += "_"
            made[w, suffix] = name
            new_consts.append(Constant(name, c.dtype, tuple(data.shape), data))
        inputs = n.inputs[:at] + (made[w, suffix],) + n.inputs[at + 1:]
        nodes.append(dataclasses.replace(n, inputs=inputs, attrs=freeze({**n.attr_dict, **attrs})))
        changed += 1
    if not changed:
        return graph, 0
    return dataclasses.replace(graph, nodes=tuple(nodes), constants=graph.constants + tuple(new_consts)), changed
