"""ONNX If, Loop and Scan: the nodes of their subgraphs become nodes of the graph
(their own values renamed `NODE:then:NAME`, `NODE:body:NAME`, ...), around nodes of
compiler/ops/control.py that pick the results (if) or iterate (loop_enter or
scan_enter ... loop_exit, which passes/unroll.py unrolls). `CONTROL`: ONNX operator ->
its converter, which the walk calls."""

from aotplan.core.errors import ModelError
from aotplan.core.graph import Node, freeze

from . import walk
from .tensors import require_onnx, subgraphs


def _if(node, nname, out, opset, used_names, scope, top):
    """ONNX If: both branches become nodes of the graph (each branch's own values renamed
    `NODE:then:NAME` / `NODE:else:NAME`), then an `if` node picks the results
    (compiler/ops/control.py: folded to one branch where the condition is constant)."""
    where = f"node {nname!r} (If)"
    branches = dict(subgraphs(node))
    for a in node.attribute:
        if a.name not in ("then_branch", "else_branch"):
            raise ModelError(f"{where}: attribute {a.name!r} is not supported")
    for key in ("then_branch", "else_branch"):
        if key not in branches:
            raise ModelError(f"{where}: attribute {key!r} (a graph) is missing")
    if len(node.input) != 1 or not node.input[0]:
        raise ModelError(f"{where}: takes 1 input (the condition), got {len(node.input)}")
    if not node.output:
        raise ModelError(f"{where}: has no outputs")
    results = []
    for key in ("then_branch", "else_branch"):
        b, tag = branches[key], key.split("_")[0]
        if b.input:
            raise ModelError(f"{where}: {key} declares {len(b.input)} inputs; an If branch takes none")
        if len(b.output) != len(node.output):
            raise ModelError(f"{where}: {key} has {len(b.output)} outputs, the node {len(node.output)}")
        own = [t.name for t in b.initializer] + [sp.values.name for sp in b.sparse_initializer] + \
            [o for n in b.node for o in n.output if o]
        inner = dict(scope) | {x: f"{nname}:{tag}:{x}" for x in own}
        out.consumed |= set(walk.read_names(b.node, inner)) | {inner.get(o.name, o.name) for o in b.output}
        walk.initializers(b, out, inner)
        walk.convert_nodes(b.node, out, opset, used_names, inner, f"{nname}:{tag}:", top)
        results.append([inner.get(o.name, o.name) for o in b.output])
    out.nodes.append(Node(nname, "if", (node.input[0], *results[0], *results[1]), _outputs(node, nname), freeze({})))


def _body(node, key, nname, out, opset, used_names, scope, top):
    """A Loop's or Scan's body inlined: its own values (inputs, initializers, node
    outputs) renamed `NODE:body:NAME` -> (its input names, its output names), renamed."""
    where = f"node {nname!r} ({node.op_type})"
    graphs = dict(subgraphs(node))
    if key not in graphs:
        raise ModelError(f"{where}: attribute {key!r} (a graph) is missing")
    b = graphs[key]
    for vi in b.input:
        if not vi.name:
            raise ModelError(f"{where}: the body has an input with no name")
    own = [vi.name for vi in b.input] + [t.name for t in b.initializer] + \
        [sp.values.name for sp in b.sparse_initializer] + [o for n in b.node for o in n.output if o]
    inner = dict(scope) | {x: f"{nname}:body:{x}" for x in own}
    out.consumed |= set(walk.read_names(b.node, inner)) | {inner.get(o.name, o.name) for o in b.output}
    walk.initializers(b, out, inner)
    walk.convert_nodes(b.node, out, opset, used_names, inner, f"{nname}:body:", top)
    return [inner[vi.name] for vi in b.input], [inner.get(o.name, o.name) for o in b.output]


def _fresh(used_names, name):
    """`name`, or `name_2`, ... : one no node has, reserved."""
    k, fresh = 1, name
    while fresh in used_names:
        k += 1
        fresh = f"{name}_{k}"
    used_names.add(fresh)
    return fresh


def _outputs(node, nname):
    return tuple(o or f"{nname}:unused_output_{i}" for i, o in enumerate(node.output))


def _loop(node, nname, out, opset, used_names, scope, top):
    """ONNX Loop: loop_enter, the body's nodes, loop_exit (ops/control.py); the fold pass
    unrolls it once the trip count is known (passes/unroll.py)."""
    where = f"node {nname!r} (Loop)"
    for a in node.attribute:
        if a.name != "body":
            raise ModelError(f"{where}: attribute {a.name!r} is not supported")
    if len(node.input) < 2:
        raise ModelError(f"{where}: takes at least 2 inputs (M, cond; either may be \"\"), got {len(node.input)}")
    m, cond, init = node.input[0], node.input[1], list(node.input[2:])
    if not all(init):
        raise ModelError(f"{where}: a loop-carried input is empty (\"\"): not supported")
    params, results = _body(node, "body", nname, out, opset, used_names, scope, top)
    if len(params) != 2 + len(init):
        raise ModelError(f"{where}: the body takes {len(params)} inputs; it must take 2 (iteration number, "
                         f"condition) + the {len(init)} loop-carried values")
    if len(results) < 1 + len(init):
        raise ModelError(f"{where}: the body has {len(results)} outputs; it must have 1 (condition) + the "
                         f"{len(init)} loop-carried values + any scan outputs")
    if len(node.output) != len(results) - 1:
        raise ModelError(f"{where}: has {len(node.output)} outputs; its body gives {len(init)} loop-carried values "
                         f"and {len(results) - 1 - len(init)} scan outputs")
    enter_ins = [x for x in (m, cond) if x] + init
    exit_name = _fresh(used_names, f"{nname}:exit")
    out.nodes.append(Node(nname, "loop_enter", tuple(enter_ins), tuple(params),
                          freeze({"trip_count": bool(m), "cond": bool(cond)})))
    out.nodes.append(Node(exit_name, "loop_exit", tuple(results), _outputs(node, nname),
                          freeze({"enter": nname, "kind": "loop", "n_carried": len(init)})))


def _scan(node, nname, out, opset, used_names, scope, top):
    """ONNX Scan: scan_enter, the body's nodes, loop_exit (ops/control.py,
    passes/unroll.py). Scan-8 (a batch axis first, the scan axis second, and a
    `sequence_lens` input, which must be omitted) is a Scan over the batch whose body is
    the Scan-9 form over each batch element."""
    where = f"node {nname!r} (Scan)"
    onnx = require_onnx()
    old = onnx.defs.get_schema("Scan", opset, "").since_version < 9
    names = ("body", "num_scan_inputs") + (("directions",) if old else (
        "scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"))
    attrs = {a.name: a for a in node.attribute}
    for a in attrs:
        if a not in names:
            raise ModelError(f"{where}: attribute {a!r} is not supported")
    if "num_scan_inputs" not in attrs:
        raise ModelError(f"{where}: attribute 'num_scan_inputs' is required")
    inputs = list(node.input)
    if old:
        if inputs and inputs[0]:
            raise ModelError(f"{where}: input 'sequence_lens' ({inputs[0]!r}) is not supported (Scan-8); every "
                             f"sequence must run the whole length")
        inputs = inputs[1:]
    k = int(attrs["num_scan_inputs"].i)
    if not 1 <= k <= len(inputs) or not all(inputs):
        raise ModelError(f"{where}: num_scan_inputs {k} must be in [1, {len(inputs)}] (the node's inputs, none "
                         f"empty)")
    n = len(inputs) - k
    params, results = _body(node, "body", nname, out, opset, used_names, scope, top)
    if len(params) != len(inputs):
        raise ModelError(f"{where}: the body takes {len(params)} inputs; it must take the node's {len(inputs)}")
    if len(results) < n or len(node.output) != len(results):
        raise ModelError(f"{where}: has {len(node.output)} outputs and its body {len(results)}; both must be the "
                         f"{n} states + the scan outputs")
    ints = {a: list(attrs[a].ints) for a in names[2:] if a in attrs}
    if old:
        ints = {"scan_input_directions": ints.get("directions", [0] * k)}
    m, outputs = len(results) - n, _outputs(node, nname)
    for key in ("scan_input_directions", "scan_output_directions", "directions"):
        if any(d not in (0, 1) for d in ints.get(key, ())):
            raise ModelError(f"{where}: attribute {key!r} {ints[key]} must hold 0 (forward) or 1 (reverse)")
    exit_name = _fresh(used_names, f"{nname}:exit")
    if old:  # the outer Scan over the batch: every input a scan input, every output stacked
        batch, batch_exit = _fresh(used_names, f"{nname}:batch"), _fresh(used_names, f"{nname}:batch:exit")
        slices = tuple(f"{batch}:in{i}" for i in range(len(inputs)))  # (one tensor may be two inputs)
        out.nodes.append(Node(batch, "scan_enter", tuple(inputs), slices,
                              freeze({"n_carried": 0, "axes": [0] * len(inputs), "directions": [0] * len(inputs)})))
        inputs, outer_outputs = list(slices), outputs
        outputs = tuple(f"{batch}:out{i}" for i in range(len(outputs)))
    out.nodes.append(Node(nname, "scan_enter", tuple(inputs), tuple(params),
                          freeze({"n_carried": n, "axes": ints.get("scan_input_axes", [0] * k),
                                  "directions": ints.get("scan_input_directions", [0] * k)})))
    out.nodes.append(Node(exit_name, "loop_exit", tuple(results), outputs,
                          freeze({"enter": nname, "kind": "scan", "n_carried": n,
                                  "axes": ints.get("scan_output_axes", [0] * m),
                                  "directions": ints.get("scan_output_directions", [0] * m)})))
    if old:
        out.nodes.append(Node(batch_exit, "loop_exit", outputs, outer_outputs,
                              freeze({"enter": batch, "kind": "scan", "n_carried": 0, "axes": [0] * len(outputs),
                                      "directions": [0] * len(outputs)})))


CONTROL = {"If": _if, "Loop": _loop, "Scan": _scan}
