"""unroll: ONNX Loop and Scan, written out iteration by iteration.

A plan is one static program with static shapes, so a loop runs a number of times
known at compile time: a Scan as many times as its scan inputs are long, a Loop its
trip count `M` (a constant, a frozen input, or folded from them). The importer writes
each loop as its body's nodes between a `loop_enter`/`scan_enter` and a `loop_exit`
marker (ops/control.py); this pass replaces them by one copy of the body per iteration
(nodes and values renamed `NAME#k`), the loop-carried values chained from one copy to
the next, each Scan input's slice a `gather` and each scan output a `concat` of the
iterations' values. Body nodes that read no parameter (loop-invariant) stay as they
are, run once.

A Loop's condition: where the body passes its condition input through (or computes a
constant) and the initial condition is a constant, the number of iterations is known
and the loop is unrolled plainly. Otherwise the loop runs `M` copies and each copy's
loop-carried results are kept only while the condition has held, selected on the
device (`where`): ONNX's "stop when cond is false", with the same results. That needs
the carried values to keep their dtype and shape, and no scan outputs (their length
would depend on the condition). A Loop without a trip count (a `while` loop) is refused.

The pass works from a lenient first fold (passes/fold.py) that gives the types of the
first iteration and the constants; loops nested in a body are copied with it and
unrolled in the next round.
"""

import dataclasses

import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import LimitError, ModelError
from aotplan.core.graph import Constant, Node, freeze
from compiler.ops import control

ENTERS = ("loop_enter", "scan_enter")
# nodes written out over all iterations of all the model's loops (a 457-byte model of
# two loops of 200,000 copies each took 39 s and 0.9 GB); compile --max-unrolled-nodes
MAX_UNROLLED_NODES = 200_000
MAX_DEPTH = 64  # loops inside loops inside loops...
CONCAT_INPUTS = 4096  # a scan output's iterations are concatenated in groups of this many


@dataclasses.dataclass
class Budget:
    """The nodes the model's loops may still write (`MAX_UNROLLED_NODES` by default)."""
    limit: int
    left: int = None

    def __post_init__(self):
        self.left = self.limit if self.left is None else self.left

    def spend(self, where, n_iter, body, nodes):
        if nodes > self.left:
            raise LimitError(f"{where}: unrolling {n_iter} iterations of a {body}-node body would write {nodes} "
                             f"nodes, and the model's loops may write {self.limit} in all "
                             f"({self.limit - self.left} written already; compile --max-unrolled-nodes N raises it)")
        self.left -= nodes


def run(graph, lenient_fold, prune=lambda g: g, max_nodes=MAX_UNROLLED_NODES):
    """The graph with every loop unrolled. `lenient_fold(graph)` -> (info, consts): the
    tensor types and constants a lenient fold found (a failing node poisons only what
    reads it). `prune(graph)`: the graph without the untaken branches of the `if`s
    whose conditions are now constants (a copy's `i < 2`), run after each round so that
    a loop in a dead branch is never unrolled. `max_nodes`: the nodes all the loops may
    write together.

    Each round unrolls the outermost loops whose inputs are typed: a loop that reads
    another's results waits a round for it, and the copies of a loop nested in another
    follow each other, so rounds are not nesting; the nesting is checked by itself
    (`MAX_DEPTH`). The rounds end: each removes a loop, and what it copies counts against
    the budget."""
    check(graph)
    budget = Budget(max_nodes)
    while True:
        enters = [n for n in graph.nodes if n.op in ENTERS]
        if not enters:
            return graph
        info, consts = lenient_fold(graph)
        graph, progressed = _round(graph, enters, info, consts, budget)
        if not progressed:  # a loop whose inputs failed to infer: the strict fold reports that failure
            return graph
        if any(n.op == "if" for n in graph.nodes):
            graph = prune(graph)


def _flag(node, key):
    v = node.attr(key, False)
    if not isinstance(v, (bool, int)) or v not in (0, 1):
        raise ModelError(f"node {node.name!r} ({node.op}): attribute {key!r} must be a bool, got {v!r}")
    return bool(v)


def _ints(node, key, n):
    v = node.attr(key, None)
    v = [0] * n if v is None else v
    if not isinstance(v, (list, tuple)) or len(v) != n or not all(type(a) is int for a in v):
        raise ModelError(f"node {node.name!r} ({node.op}): attribute {key!r} must be a list of {n} integers, "
                         f"got {v!r}")
    return list(v)


def check(graph):
    """The loop markers as the importer writes them (a model.json may hold anything):
    each enter has one exit naming it, of its kind, and the counts agree."""
    enters = {n.name: n for n in graph.nodes if n.op in ENTERS}
    for e in enters.values():
        where = f"node {e.name!r} ({e.op})"
        if e.op == "loop_enter":
            carried = len(e.inputs) - _flag(e, "trip_count") - _flag(e, "cond")
            if carried < 0 or len(e.outputs) != 2 + carried:
                raise ModelError(f"{where}: {len(e.inputs)} inputs and {len(e.outputs)} outputs; it takes [M], "
                                 f"[cond] and the loop-carried values, and gives 2 + those")
        else:
            n = e.attr("n_carried", 0)
            if type(n) is not int or not 0 <= n < len(e.inputs) or len(e.outputs) != len(e.inputs):
                raise ModelError(f"{where}: 'n_carried' {n!r}, {len(e.inputs)} inputs and {len(e.outputs)} outputs; "
                                 f"it takes the states and at least one scan input, and gives one output per input")
            _ints(e, "axes", len(e.inputs) - n)
            _ints(e, "directions", len(e.inputs) - n)
    exits = {}
    for n in graph.nodes:
        if n.op != "loop_exit":
            continue
        where = f"node {n.name!r} (loop_exit)"
        e = enters.get(n.attr("enter")) if isinstance(n.attr("enter"), str) else None
        if e is None:
            raise ModelError(f"{where}: attribute 'enter' {n.attr('enter')!r} must name a loop_enter or scan_enter "
                             f"node")
        if e.name in exits:
            raise ModelError(f"{where}: loop {e.name!r} already has the exit {exits[e.name].name!r}")
        exits[e.name] = n
        kind = "scan" if e.op == "scan_enter" else "loop"
        if n.attr("kind", kind) != kind:
            raise ModelError(f"{where}: attribute 'kind' {n.attr('kind')!r} does not match {e.op} {e.name!r} ({kind})")
        carried = len(e.inputs) - _flag(e, "trip_count") - _flag(e, "cond") if kind == "loop" else \
            e.attr("n_carried", 0)
        if n.attr("n_carried", carried) != carried:
            raise ModelError(f"{where}: attribute 'n_carried' {n.attr('n_carried')!r} does not match {e.name!r}'s "
                             f"{carried} loop-carried values")
        results = len(n.inputs) - (kind == "loop")
        if results < carried or len(n.outputs) != results:
            raise ModelError(f"{where}: takes {len(n.inputs)} inputs and gives {len(n.outputs)} outputs; "
                             f"{'a condition, ' if kind == 'loop' else ''}{carried} loop-carried values and one "
                             f"output per value and scan output")
        if kind == "scan":
            _ints(n, "axes", results - carried)
            if any(d not in (0, 1) for d in _ints(n, "directions", results - carried)):
                raise ModelError(f"{where}: scan output directions {list(n.attr('directions'))} must be 0 (forward) "
                                 f"or 1 (reverse)")
    for e in enters.values():
        if e.name not in exits:
            raise ModelError(f"node {e.name!r} ({e.op}): no loop_exit names it as its 'enter'")


def _where(node):
    return f"node {node.name!r} ({'Scan' if node.op == 'scan_enter' else 'Loop'})"


def _round(graph, enters, info, consts, budget):
    exits = {n.attr("enter"): n for n in graph.nodes if n.op == "loop_exit"}
    readers = {}
    for n in graph.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    by_name = {n.name: n for n in graph.nodes}
    bodies = {}
    for e in enters:
        bodies[e.name] = _body(e, exits, readers, by_name)
    inner = set().union(*bodies.values())
    for e in enters:
        depth = 1 + sum(e.name in bodies[o.name] for o in enters)
        if depth > MAX_DEPTH:
            raise LimitError(f"{_where(e)}: loops nested more than {MAX_DEPTH} deep")
    outermost = [e for e in enters if e.name not in inner and _ready(e, exits[e.name], bodies[e.name], by_name, info)]
    if not outermost:
        return graph, False
    order = {n.name: k for k, n in enumerate(graph.nodes)}
    replaced, new_consts = {}, {}
    for e in outermost:
        x = exits[e.name]
        body = sorted((by_name[b] for b in bodies[e.name]), key=lambda n: order[n.name])
        replaced[x.name] = _unroll(e, x, body, info, consts, new_consts, lambda v: graph.inputs_feeding([v]),
                                   budget)
        replaced.update((b.name, ()) for b in body)
        replaced[e.name] = ()
    nodes = []
    for n in graph.nodes:
        nodes.extend(replaced.get(n.name, (n,)))
    return dataclasses.replace(graph, nodes=tuple(nodes),
                               constants=graph.constants + tuple(new_consts.values())), True


def _ready(enter, exit_, body, by_name, info):
    """Whether the lenient fold typed every value the loop reads from outside: another
    loop's results are typed only once that loop is unrolled (a round later)."""
    inside = {o for b in body for o in by_name[b].outputs} | set(enter.outputs)
    reads = list(enter.inputs) + list(exit_.inputs) + [i for b in body for i in by_name[b].inputs]
    return all(i in info for i in reads if i and i not in inside)


def _body(enter, exits, readers, by_name):
    """Names of the nodes that run once per iteration: those reading the parameters,
    directly or not, up to the loop's exit; with a nested loop's enter and exit
    together (a nested exit in the body brings its enter, which may read no parameter)."""
    stop = exits[enter.name].name
    body, want = set(), [o for o in enter.outputs if o]
    while want:
        for r in readers.get(want.pop(), ()):
            if r.name == stop or r.name in body:
                continue
            body.add(r.name)
            want.extend(o for o in r.outputs if o)
            if r.op == "loop_exit" and r.attr("enter") in by_name:
                mate = by_name[r.attr("enter")]
            elif r.op in ENTERS and r.name in exits:
                mate = exits[r.name]
            else:
                continue
            if mate.name not in body and mate.name != stop:
                body.add(mate.name)
                want.extend(o for o in mate.outputs if o)
    return body


def _const(new_consts, name, value, dtype):
    if name not in new_consts:
        new_consts[name] = Constant(name, dtype, tuple(np.shape(value)), np.asarray(value, dtype))
    return name


def _unroll(enter, exit_, body, info, consts, new_consts, inputs_of, budget):
    """The nodes that replace `exit_`: every iteration's copy of `body`, then the final
    values under the exit's output names."""
    where = _where(enter)
    body_values = {o for b in body for o in b.outputs if o}
    nodes = []
    if enter.op == "scan_enter":
        n_state, scans, length = control.scan_params(enter, [info[i] for i in enter.inputs])
        init, n_iter, masked = list(enter.inputs[:n_state]), length, None
        results = list(exit_.inputs)
        outs_axes = list(exit_.attr("axes", None) or [0] * (len(results) - n_state))
        outs_dirs = list(exit_.attr("directions", None) or [0] * (len(results) - n_state))
        if len(outs_axes) != len(results) - n_state or len(outs_dirs) != len(results) - n_state:
            raise ModelError(f"{where}: {len(results) - n_state} scan outputs, {len(outs_axes)} scan_output_axes and "
                             f"{len(outs_dirs)} scan_output_directions")
        carried_out, scan_out = results[:n_state], results[n_state:]
        cond_out = None
    else:
        ins = list(enter.inputs)
        if not enter.attr("trip_count", False):
            raise ModelError(f"{where}: a Loop without a trip count (M), a while loop, is not supported: a plan "
                             f"unrolls each loop at compile time")
        m = ins.pop(0)
        if m in consts and (consts[m].dtype != "int64" or np.asarray(consts[m].data).size != 1):
            raise ModelError(f"{where}: the trip count {m!r} must be an int64 tensor of one element, got "
                             f"{consts[m].dtype}{list(consts[m].shape)}")
        if m not in consts:
            names = inputs_of(m)
            hint = (f"freeze {', '.join(repr(n) for n in names)} with --freeze-input NAME=FILE.npy" if names else
                    "it must be a constant or follow from constants and shapes")
            raise ModelError(f"{where}: the trip count {m!r} is known only at run time; a plan unrolls each loop at "
                             f"compile time ({hint})")
        n_iter = max(0, int(np.asarray(consts[m].data).reshape(())))
        cond0 = ins.pop(0) if enter.attr("cond", False) else None
        init, n_state = ins, len(ins)
        cond_out, carried_out = exit_.inputs[0], list(exit_.inputs[1:1 + n_state])
        scan_out = list(exit_.inputs[1 + n_state:])
        outs_axes, outs_dirs = [0] * len(scan_out), [0] * len(scan_out)
        n_iter, masked = _loop_count(enter, cond0, cond_out, n_iter, body, consts, bool(scan_out))
        if masked not in (None, True):
            masked = _scalar(nodes, f"{exit_.name}:cond", masked, info.get(masked))
    if len(exit_.outputs) != n_state + len(scan_out):
        raise ModelError(f"{where}: {len(exit_.outputs)} outputs for {n_state} loop-carried values and "
                         f"{len(scan_out)} scan outputs")
    per_iteration = len(body) + len(scan_out) + (len(enter.inputs) - n_state if enter.op == "scan_enter" else 0) \
        + (n_state + 2 if masked is not None else 0)
    budget.spend(where, n_iter, len(body), n_iter * max(1, per_iteration))
    if masked is not None:
        for v0, v1 in zip(init, carried_out):
            a, b = info.get(v0), info.get(v1)
            if a is not None and b is not None and (a.dtype, a.shape) != (b.dtype, b.shape):
                raise ModelError(f"{where}: the loop-carried value {v1!r} is {b.dtype}{list(b.shape)} after an "
                                 f"iteration and {a.dtype}{list(a.shape)} before, and the loop's condition is known "
                                 f"only at run time: the results need one shape")
    carried, stacked = list(init), [[] for _ in scan_out]
    active = masked  # None: every iteration runs; True or a bool value's name: this one runs while it holds
    for k in range(n_iter):
        sub = {}
        params = list(enter.outputs)
        if enter.op == "loop_enter":
            it, cond_in = params[:2]
            params = params[2:]
            if it:
                sub[it] = _const(new_consts, f"{enter.name}:i{k}", k, "int64")
            if cond_in:
                sub[cond_in] = _const(new_consts, f"{enter.name}:true", True, "bool") if active in (None, True) \
                    else active
        else:
            for s, x, (axis, rev) in zip(params[n_state:], enter.inputs[n_state:], scans):
                if s:
                    j = _const(new_consts, f"{enter.name}:i{length - 1 - k if rev else k}",
                               length - 1 - k if rev else k, "int64")
                    nodes.append(Node(f"{enter.name}:slice#{k}:{s}", "gather", (x, j), (f"{s}#{k}",),
                                      freeze({"axis": axis})))
                    sub[s] = f"{s}#{k}"
            params = params[:n_state]
        sub.update((p, v) for p, v in zip(params, carried) if p)

        def rn(v, k=k, sub=sub):
            return sub[v] if v in sub else f"{v}#{k}" if v in body_values else v
        for b in body:
            attrs = b.attrs
            if b.op == "loop_exit" and any(b.attr("enter") == e.name for e in body):
                attrs = freeze(dict(b.attrs) | {"enter": f"{b.attr('enter')}#{k}"})
            nodes.append(dataclasses.replace(b, name=f"{b.name}#{k}", inputs=tuple(rn(i) if i else i for i in b.inputs),
                                             outputs=tuple(f"{o}#{k}" if o else o for o in b.outputs), attrs=attrs))
        new = [rn(v) for v in carried_out]
        if active not in (None, True):
            new = [_node(nodes, f"{exit_.name}:keep#{k}:{i}", "where", (active, v, old))
                   for i, (v, old) in enumerate(zip(new, carried))]
        carried = new
        for s, v in zip(stacked, scan_out):
            s.append(rn(v))
        if active is not None:
            c = _scalar(nodes, f"{exit_.name}:cond#{k}", rn(cond_out), info.get(cond_out))
            active = c if active is True else _node(nodes, f"{exit_.name}:active#{k}", "and", (active, c))
    for i, (v, o) in enumerate(zip(carried, exit_.outputs[:n_state])):
        nodes.append(Node(f"{exit_.name}:{i}", "identity", (v,), (o,), freeze({})))
    for i, (vals, o, v, axis, rev) in enumerate(zip(stacked, exit_.outputs[n_state:], scan_out, outs_axes, outs_dirs)):
        t = info.get(v)
        if t is not None and not -len(t.shape) - 1 <= axis <= len(t.shape):
            raise ModelError(f"{where}: scan output axis {axis} is out of range for {o!r}, of rank {len(t.shape) + 1}")
        if not vals:
            if t is None:
                raise ModelError(f"{where}: runs no iteration, and the type of its scan output {o!r} is unknown")
            r = len(t.shape) + 1
            shape = list(t.shape)
            shape.insert(axis % r, 0)
            c = Constant(f"{exit_.name}:empty{i}", t.dtype, tuple(shape), np.zeros(shape, dtypes.np_dtype(t.dtype)))
            new_consts[c.name] = c
            nodes.append(Node(f"{exit_.name}:s{i}", "identity", (c.name,), (o,), freeze({})))
            continue
        ups = [_node(nodes, f"{exit_.name}:u{i}#{k}", "unsqueeze", (x,), axes=[axis]) for k, x in enumerate(vals)]
        ups = ups[::-1] if rev else ups
        while len(ups) > CONCAT_INPUTS:  # concat takes at most 65536 inputs: in groups first
            ups = [_node(nodes, f"{exit_.name}:s{i}:{len(ups)}:{g}", "concat", ups[g:g + CONCAT_INPUTS], axis=axis)
                   for g in range(0, len(ups), CONCAT_INPUTS)]
        nodes.append(Node(f"{exit_.name}:s{i}", "concat", tuple(ups), (o,), freeze({"axis": axis})))
    return tuple(nodes)


def _loop_count(enter, cond0, cond_out, n_iter, body, consts, has_scan_outputs):
    """-> (iterations to write, None or True or the initial condition's name): None when
    the count is known, else the condition that the first iteration runs under."""
    made_by = {o: b for b in body for o in b.outputs}
    c = cond_out
    while c in made_by and made_by[c].op == "identity":
        c = made_by[c].inputs[0]
    where = _where(enter)
    start = True if cond0 is None else _bool(consts[cond0], where) if cond0 in consts else cond0
    if start is False or n_iter == 0:
        return 0, None
    if c in consts and start is True:
        return (n_iter if _bool(consts[c], where) else min(n_iter, 1)), None
    if c == enter.outputs[1] and start is True:
        return n_iter, None
    if has_scan_outputs:
        raise ModelError(f"{_where(enter)}: its condition is known only at run time, and it has scan outputs, whose "
                         f"length would depend on it: not supported (a plan has static shapes)")
    return n_iter, start


def _bool(c, where):
    a = np.asarray(c.data)
    if c.dtype != "bool" or a.size != 1:
        raise ModelError(f"{where}: the condition {c.name!r} must be a bool tensor of one element, got "
                         f"{c.dtype}{list(c.shape)}")
    return bool(a.reshape(()))


def _node(nodes, name, op, inputs, **attrs):
    nodes.append(Node(name, op, tuple(inputs), (name,), freeze(attrs)))
    return name


def _scalar(nodes, name, v, t):
    """`v` as a bool scalar (a condition may be any one-element bool tensor)."""
    if t is not None and t.shape == ():
        return v
    return _node(nodes, name, "reshape", (v,), shape=[])

