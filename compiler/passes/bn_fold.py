"""bn_fold: fold inference batchnorm into the conv or gemm before it.

    conv:  w' = w * f (per output channel),  b' = (b - mean) * f + beta,  f = scale / sqrt(var + eps)
    gemm:  B' = B * f (per output column),   C' = beta_gemm * C * f + (bias - mean * f),  beta_gemm' = 1

Only when the conv/gemm output feeds nothing but that batchnorm, is not a graph output,
and every weight involved is a constant. New weights are computed in float64 and stored
in the weight's dtype; the old ones are left for dce.
"""

import dataclasses

import numpy as np

from aotplan.core.graph import Constant, freeze


def run(graph):
    consts = graph.constant_map()
    users = {}
    for n in graph.nodes:
        for i in n.inputs:
            users.setdefault(i, []).append(n)
    made_by = {o: n for n in graph.nodes for o in n.outputs}
    outputs = set(graph.outputs)
    replaced, dropped, new_consts = {}, set(), []
    for bn in graph.nodes:
        if bn.op != "batchnorm":
            continue
        prod = made_by.get(bn.inputs[0])
        if (prod is None or prod.op not in ("conv", "conv2d", "gemm") or prod.name in replaced
                or len(users.get(prod.outputs[0], [])) != 1 or prod.outputs[0] in outputs
                or not all(i in consts for i in prod.inputs[1:] + bn.inputs[1:])):
            continue
        scale, beta, mean, var = (consts[i].data.astype(np.float64) for i in bn.inputs[1:])
        f = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        shift = beta - mean * f
        w = consts[prod.inputs[1]]
        bias = consts[prod.inputs[2]] if len(prod.inputs) > 2 else None
        if prod.op == "gemm":
            if w.data.ndim != 2 or w.data.shape[0 if prod.attr("trans_b", 0) else 1] != f.size:
                continue
            w2 = w.data.astype(np.float64) * (f[:, None] if prod.attr("trans_b", 0) else f[None, :])
            c = 0.0 if bias is None else bias.data.astype(np.float64) * float(prod.attr("beta", 1.0))
            b2 = np.broadcast_to(c * f + shift, np.broadcast_shapes(np.shape(c), f.shape))
            attrs = freeze({**dict(prod.attrs), "beta": 1.0})
        else:
            w2 = w.data.astype(np.float64) * f.reshape((-1,) + (1,) * (w.data.ndim - 1))
            b2 = (0.0 if bias is None else bias.data.astype(np.float64)) * f + shift
            attrs = prod.attrs
        wn, bn_name = f"{prod.name}:w_bn", f"{prod.name}:b_bn"
        new_consts += [Constant(wn, w.dtype, w.shape, w2.astype(w.data.dtype)),
                       Constant(bn_name, w.dtype, tuple(b2.shape), np.asarray(b2, w.data.dtype))]
        replaced[prod.name] = dataclasses.replace(prod, inputs=(prod.inputs[0], wn, bn_name), outputs=bn.outputs,
                                                  attrs=attrs)
        dropped.add(bn.name)
    if not replaced:
        return graph, 0
    nodes = tuple(replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped)
    return dataclasses.replace(graph, nodes=nodes, constants=graph.constants + tuple(new_consts)), len(replaced)
