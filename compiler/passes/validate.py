"""validate: structural checks of a Graph, before any shape is known.

Rejects (naming the node or tensor): unknown ops and attributes, wrong input counts, duplicate node or
tensor names, names with control characters, inputs nobody produces, outputs nobody produces, cycles. Returns the
graph with two changes: empty names (`""`) at the end of a node's inputs, ONNX's omitted
optional inputs, are dropped; and a graph output that is a graph input or a constant
gets an `identity` node, so that every output is written by a launch (a state's
output follows the rename). States (`Graph.states`) pair a graph input with a graph
output, each once.
"""

import dataclasses

from aotplan.core import dtypes
from aotplan.core.errors import ModelError
from aotplan.core.graph import Node, has_control_char
from compiler import ops


def _check_name(kind, name):
    if has_control_char(name):
        raise ModelError(f"{kind} name {name!r} holds a control character")


def run(graph):
    if not graph.outputs:
        raise ModelError("model has no outputs")
    for kind, names in (("input", [t.name for t in graph.inputs]), ("constant", [c.name for c in graph.constants]),
                        ("node", [n.name for n in graph.nodes]),
                        ("tensor", [o for n in graph.nodes for o in n.outputs])):
        for name in names:
            _check_name(kind, name)
    if len(set(graph.outputs)) != len(graph.outputs):
        dup = next(o for o in graph.outputs if graph.outputs.count(o) > 1)
        raise ModelError(f"output {dup!r} is listed twice")
    producer = {}
    for t in graph.inputs:
        if t.name in producer:
            raise ModelError(f"input {t.name!r} is declared twice")
        producer[t.name] = "graph input"
    for c in graph.constants:
        if c.name in producer:
            raise ModelError(f"constant {c.name!r} clashes with the {producer[c.name]} of the same name")
        producer[c.name] = "constant"
    node_names = set()
    nodes = []
    for n in graph.nodes:
        if n.name in node_names:
            raise ModelError(f"node name {n.name!r} is used twice")
        node_names.add(n.name)
        op = ops.get(n.op)
        if op is None or op.internal:  # (an internal op is the layout pass's, on device formats: not a model's)
            raise ModelError(f"node {n.name!r}: unknown op {n.op!r} ({_suggest(n.op)}{len(ops.model_ops())} ops "
                             f"are known: docs/formats.md lists them)")
        lo, hi = op.arity
        static = op.static_positions
        ins = list(n.inputs)
        # omitted optional inputs at the end (ONNX's convention: gemm's C, conv's bias): a
        # trailing "" in a dynamic slot the op may leave empty (its count within the arity)
        while ins and ins[-1] == "" and len(ins) - 1 not in static and \
                lo <= sum(1 for p in range(len(ins) - 1) if p not in static) < hi:
            ins.pop()
        if len(ins) != len(n.inputs):
            n = dataclasses.replace(n, inputs=tuple(ins))
        nodes.append(n)
        n_dynamic = sum(1 for p, _ in enumerate(n.inputs) if p not in static)
        if not lo <= n_dynamic <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise ModelError(f"node {n.name!r} ({n.op}): takes {want} inputs, got {n_dynamic}")
        for p, i in enumerate(n.inputs):
            if p in static and i and n.attr(static[p]) is not None:
                raise ModelError(f"node {n.name!r} ({n.op}): {static[p]!r} is given both as input {i!r} "
                                 f"and as an attribute")
        unknown = sorted(k for k, _ in n.attrs if k not in op.attrs)
        if unknown:
            accepted = ", ".join(op.attrs) if op.attrs else "none"
            raise ModelError(f"node {n.name!r} ({n.op}): unknown attribute {unknown[0]!r} (accepted: {accepted})")
        if op.n_outputs is None and not n.outputs:
            raise ModelError(f"node {n.name!r} ({n.op}): needs at least one output")
        if op.n_outputs is not None and len(n.outputs) != op.n_outputs:
            raise ModelError(f"node {n.name!r} ({n.op}): has {op.n_outputs} output(s), got {len(n.outputs)}")
        for o in n.outputs:
            if not o:
                raise ModelError(f"node {n.name!r} ({n.op}): an output has an empty name")
            if o in producer:
                raise ModelError(f"node {n.name!r}: output {o!r} is already produced by {producer[o]}")
            producer[o] = f"node {n.name!r}"
    graph = dataclasses.replace(graph, nodes=tuple(nodes))
    for n in graph.nodes:
        static = ops.get(n.op).static_positions
        for p, i in enumerate(n.inputs):
            if i == "" and p in static:
                continue  # an omitted optional input
            if i == "":
                raise ModelError(f"node {n.name!r} ({n.op}): input {p} is empty (\"\"): only the optional inputs "
                                 f"at the end of the list, or a static input, may be omitted")
            if i not in producer:
                raise ModelError(f"node {n.name!r}: input {i!r} is not a graph input, constant or node output")
    for o in graph.outputs:
        if o not in producer:
            raise ModelError(f"output {o!r} is not produced by any node, input or constant")
    _check_acyclic(graph)

    _check_states(graph, producer)

    extra, outputs, renamed = [], [], {}
    for o in graph.outputs:
        if producer[o] in ("graph input", "constant"):
            name = _fresh(f"{o}.out", producer, node_names)
            producer[name] = "identity"
            node_names.add(name)
            extra.append(Node(name, "identity", (o,), (name,)))
            outputs.append(name)
            renamed[o] = name
        else:
            outputs.append(o)
    if extra:
        states = tuple(dataclasses.replace(st, output=renamed.get(st.output, st.output)) for st in graph.states)
        return dataclasses.replace(graph, nodes=graph.nodes + tuple(extra), outputs=tuple(outputs), states=states)
    return graph


def _check_states(graph, producer):
    """Each state pairs a graph input with a graph output, each in one state; an initial
    value has the input's dtype and shape. (Their shapes must agree too: `infer` knows
    the output's, `compiler.passes.state` checks it.)"""
    inputs = {t.name: t for t in graph.inputs}
    seen = {}
    for st in graph.states:
        w = f"state {st.output}={st.input}"
        if st.input not in inputs:
            kind = producer.get(st.input)
            raise ModelError(f"{w}: {st.input!r} is not a graph input"
                             + (f" (it is {'a ' + kind if kind in ('constant', 'graph input') else kind})"
                                if kind else ""))
        if st.output not in graph.outputs:
            raise ModelError(f"{w}: {st.output!r} is not a graph output")
        for name in (st.input, st.output):
            if name in seen:
                raise ModelError(f"{w}: {name!r} is already in state {seen[name]}")
            seen[name] = w[len("state "):]
        t = inputs[st.input]
        if st.init is not None and (str(st.init.dtype) != dtypes.np_dtype(t.dtype).name
                                    or tuple(st.init.shape) != t.shape):
            raise ModelError(f"{w}: its initial value is {st.init.dtype}{list(st.init.shape)}, the input "
                             f"{st.input!r} is {t.dtype}{list(t.shape)}")


def _fresh(base, *taken):
    name, k = base, 1
    while any(name in t for t in taken):
        name, k = f"{base}{k}", k + 1
    return name


def _check_acyclic(graph):
    made_by = {o: n for n in graph.nodes for o in n.outputs}
    state = {}  # node name -> 1 visiting, 2 done
    for start in graph.nodes:
        if state.get(start.name):
            continue
        stack = [(start, iter(start.inputs))]
        state[start.name] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node.name] = 2
                stack.pop()
                continue
            dep = made_by.get(nxt)
            if dep is None or state.get(dep.name) == 2:
                continue
            if state.get(dep.name) == 1:
                cycle = [n.name for n, _ in stack]
                cycle = cycle[cycle.index(dep.name):] + [dep.name]
                raise ModelError(f"graph has a cycle: {' -> '.join(repr(c) for c in cycle)}")
            state[dep.name] = 1
            stack.append((dep, iter(dep.inputs)))


def _suggest(op):
    """'did you mean ...? ' for ops whose names are close to a misspelt one."""
    import difflib

    close = difflib.get_close_matches(str(op), ops.model_ops(), n=3, cutoff=0.7)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
