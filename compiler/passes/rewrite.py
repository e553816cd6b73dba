"""Helpers the graph clean-up passes share: renaming tensors in node inputs."""

import dataclasses


def final_name(name, mapping):
    """`name` renamed through `mapping`, followed to its end."""
    seen = set()
    while name in mapping and name not in seen:
        seen.add(name)
        name = mapping[name]
    return name


def rename_inputs(nodes, mapping):
    """Nodes with every input renamed through `mapping` (followed to its end)."""
    out = []
    for n in nodes:
        ins = tuple(final_name(i, mapping) if i else i for i in n.inputs)
        out.append(n if ins == n.inputs else dataclasses.replace(n, inputs=ins))
    return tuple(out)
