"""identity: remove `identity` nodes (ONNX Identity, and Dropout in inference mode).

Consumers read the identity's input instead. An identity whose output is a graph
output is removed by renaming its input to the output's name when that input is a
node's output and not itself a graph output; otherwise it stays (a graph output must be
written by a launch, and two outputs cannot share one tensor).
"""

import dataclasses

from compiler.passes.rewrite import rename_inputs


def run(graph):
    outputs = set(graph.outputs)
    made_by = {o for n in graph.nodes for o in n.outputs}
    mapping, renames, removed = {}, {}, set()
    for n in graph.nodes:
        if n.op != "identity":
            continue
        src, dst = n.inputs[0], n.outputs[0]
        if dst not in outputs:
            mapping[dst] = src
            removed.add(n.name)
        elif src in made_by and src not in outputs and src not in renames:
            renames[src] = dst
            removed.add(n.name)
    if not removed:
        return graph, 0
    nodes = []
    for n in graph.nodes:
        if n.name in removed:
            continue
        outs = tuple(renames.get(o, o) for o in n.outputs)
        nodes.append(n if outs == n.outputs else dataclasses.replace(n, outputs=outs))
    nodes = rename_inputs(rename_inputs(nodes, mapping), renames)
    return dataclasses.replace(graph, nodes=nodes), len(removed)
