"""weight_layout: store constant conv weights in the layout the target's convolution
reads, so that no kernel transposes weights on every step.

XLA's CPU convolutions read the filter as (spatial..., in, out) ("HWIO"). Given an ONNX
filter (out, in, spatial...) as a constant, XLA folds the transpose away when the
weights are compile-time constants (`jax.jit` of the model closes over them), but our
kernels take the constant pool as arguments, so the transpose runs in every step: on
ResNet-50, 100 MB of weights rewritten per step. This pass transposes each such
constant once at compile time and marks the conv `weight_layout="SIO"`; `conv` reads
either layout (compiler/ops/conv.py). Measured: docs/design.md, "Conv weight layout".

Runs only when every target is the CPU (pipeline.Options.runs): on GPUs cuDNN reads
NCHW/OIHW float32 directly and XLA picks its own layouts; not measured there.
A constant shared by several convs is transposed once; the original is left for dce.
"""

import dataclasses

import numpy as np

from aotplan.core.graph import Constant, freeze

CONV_OPS = ("conv", "conv2d")


def run(graph):
    consts = graph.constant_map()
    made = {}
    new_consts, nodes, changed = [], [], 0
    for n in graph.nodes:
        w = n.inputs[1] if n.op in CONV_OPS and len(n.inputs) > 1 else None
        if w not in consts or n.attr("weight_layout", "OIS") != "OIS" or consts[w].data.ndim < 3:
            nodes.append(n)
            continue
        if w not in made:
            c = consts[w]
            nd = c.data.ndim
            data = np.ascontiguousarray(np.transpose(c.data, tuple(range(2, nd)) + (1, 0)))
            name = f"{w}:sio"
            while name in consts:
                name += "_"
            made[w] = name
            new_consts.append(Constant(made[w], c.dtype, tuple(data.shape), data))
        inputs = (n.inputs[0], made[w]) + tuple(n.inputs[2:])
        nodes.append(dataclasses.replace(n, inputs=inputs, attrs=freeze({**n.attr_dict, "weight_layout": "SIO"})))
        changed += 1
    if not changed:
        return graph, 0
    return dataclasses.replace(graph, nodes=tuple(nodes), constants=graph.constants + tuple(new_consts)), changed
