"""identity: remove `identity` nodes (ONNX Identity, and Dropout in inference mode).

Consumers read the identity's input instead. An identity whose output is a graph
output is removed by renaming its input to the output's name when that input is a
node's output and not itself a graph output; otherwise it stays (a graph output must be
written by a launch, and two outputs cannot share one tensor).
"""

import dataclasses

from compiler.passes.rewrite import final_name, rename_inputs


def run(graph):
    outputs = set(graph.outputs)
    made_by = {o for n in graph.nodes if n.op != "identity" for o in n.outputs}
    mapping, renames, removed = {}, {}, set()
    for n in graph.nodes:  # first every identity that feeds no graph output
        if n.op == "identity" and n.outputs[0] not in outputs:
            mapping[n.outputs[0]] = n.inputs[0]
            removed.add(n.name)
    for n in graph.nodes:  # then those that do, reading through the removed ones
        if n.op != "identity" or n.outputs[0] not in outputs:
            continue
        src, dst = final_name(n.inputs[0], mapping), n.outputs[0]
        if src in made_by and src not in outputs and src not in renames:
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
