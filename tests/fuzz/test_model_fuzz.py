"""Mutated model.json files and weights (hypothesis): each is either accepted, and then
goes through the whole front end (load, validate, fold, schedule, infer, group,
liveness, memory planning) without any other exception, or refused with a ModelError
(ShapeError is one; LimitError for sizes beyond the formats) whose message names the
node, tensor or field involved. Anything else (KeyError, TypeError, numpy or jax
errors, RecursionError, MemoryError, ...) is a bug.

The mutations start from the example models (plans/examples/*) and are structural:
fields deleted or retyped, names pointing nowhere or used twice, cycles, unknown ops and
attributes, wrong attribute values, shapes and dtypes at odds with the weights, new
nodes of any registered op (whose constant inputs fold through the op's lowering),
truncated or non-UTF-8 text, deep nesting, a non-object top level; and for weights.npz:
missing, mis-typed and mis-shaped arrays, object arrays (never unpickled), files that
are not .npz archives. XLA lowering is too slow to run per mutant: a few mutants go
through the `aotplan compile` CLI end to end instead.

Deterministic (derandomize=True): a failure here reproduces on every run.
"""

import copy
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aotplan.core import model_json
from aotplan.cli import main
from aotplan.core.errors import LimitError, ModelError
from compiler import ops, pipeline
from compiler.passes import group, liveness, plan_memory
from conftest import EXAMPLE_NAMES, EXAMPLES, example_doc, example_npz

SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _read(name, file):
    with open(os.path.join(EXAMPLES, name, file), "rb") as f:
        return f.read()


# (the examples as model.json + weights.npz: this fuzzer damages .npz archives, the format
# earlier releases wrote and the reader still takes)
DOCS = {name: example_doc(name, npz=True) for name in EXAMPLE_NAMES}
WEIGHTS = {}
for _name in EXAMPLE_NAMES:
    with np.load(example_npz(_name), allow_pickle=False) as _z:
        WEIGHTS[_name] = {k: _z[k] for k in _z.files}

# what a message must never look like: a Python traceback or an object's default repr
GARBAGE = re.compile(r"Traceback|object at 0x|<class '|<function |<built-in")


# ------------------------------------------------------------------ the front end

def front_end(path):
    """Everything `aotplan compile` does before XLA lowering."""
    graph, _ = model_json.load(path)
    graph, order, info = pipeline.prepare(graph, pipeline.Options())
    groups = group.run(order, pipeline.DEFAULT_LAUNCH, info)
    live = liveness.run(graph, groups, info, pipeline.DEFAULT_WEIGHTS, materialize_all=False)
    plan_memory.run(live, pipeline.DEFAULT_PLANNER)


def check(path, hints):
    """Run the front end on `path`: None if accepted, else the error message, checked
    to be one clean line that contains one of `hints` (None: any)."""
    try:
        front_end(path)
    except (ModelError, LimitError) as e:
        msg = str(e)
        assert msg.strip(), f"{type(e).__name__} with an empty message"
        assert not GARBAGE.search(msg), msg
        assert "\n" not in msg and "\r" not in msg, f"the CLI would print {msg!r} on several lines"
        if hints is not None:
            # short names ('x', 'q') must appear quoted: a bare "q" is in most messages
            shown = {h if len(h) > 2 else repr(h) for h in hints} | {repr(h)[1:-1] for h in hints if len(h) > 2}
            assert any(h and h in msg for h in shown), f"{msg!r} names none of {sorted(shown)[:40]}"
        return msg
    return None


# ------------------------------------------------------------------ doc helpers

def _nodes(doc):
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        return []
    return [n for n in doc["nodes"] if isinstance(n, dict) and isinstance(n.get("name"), str)]


def _strs(value):
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _tensors(doc, kind):
    """Named tensor declarations of one kind: "inputs", "weights" or "constants"."""
    if not isinstance(doc, dict):
        return []
    seq = doc.get(kind)
    if kind == "weights":
        seq = seq.get("tensors") if isinstance(seq, dict) else None
    if not isinstance(seq, list):
        return []
    return [t for t in seq if isinstance(t, dict) and isinstance(t.get("name"), str)]


def _all_tensor_names(doc):
    names = [t["name"] for k in ("inputs", "weights", "constants") for t in _tensors(doc, k)]
    return names + [o for n in _nodes(doc) for o in _strs(n.get("outputs"))]


def downstream(doc, tensors):
    """`tensors`, and the nodes (and their outputs) that depend on them."""
    seen, out = set(tensors), set(tensors)
    changed = True
    while changed:
        changed = False
        for n in _nodes(doc):
            if n["name"] not in out and any(i in seen for i in _strs(n.get("inputs"))):
                out.add(n["name"])
                outs = _strs(n.get("outputs"))
                out.update(outs)
                seen.update(outs)
                changed = True
    return out


def _op(node):
    return ops.get(node.get("op")) if isinstance(node.get("op"), str) else None


def node_hints(doc, node):
    return {node["name"]} | set(_strs(node.get("outputs"))) | downstream(doc, _strs(node.get("outputs")))


def tensor_hints(doc, name):
    return {name} | downstream(doc, [name])


def _paths(value, prefix=()):
    """Every JSON path in `value` (long lists: their first two and last entries)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        idx = range(len(value)) if len(value) <= 4 else (0, 1, len(value) - 1)
        for i in idx:
            out += _paths(value[i], prefix + (i,))
    return out


def _named_within(value):
    """The named objects (nodes, tensor declarations) in a JSON value."""
    if isinstance(value, dict):
        own = [value] if isinstance(value.get("name"), str) else []
        return own + [x for v in value.values() for x in _named_within(v)]
    if isinstance(value, list):
        return [x for v in value for x in _named_within(v)]
    return []


def path_hints(doc, path):
    """What an error about the value at `path` may name: the path's keys, the objects
    around it (and what depends on them)."""
    hints = set()
    obj, parent_key = doc, None
    for seg in path:
        if isinstance(seg, str):
            hints.add(seg)
        elif parent_key is not None:
            hints.add(f"{parent_key}[{seg}]")
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            hints |= tensor_hints(doc, obj["name"])
            hints |= node_hints(doc, obj) if "op" in obj else set()
        parent_key = seg if isinstance(seg, str) else parent_key
        obj = obj[seg]
    for inner in _named_within(obj):  # whatever the replaced value declared is gone
        hints |= tensor_hints(doc, inner["name"])
        hints |= node_hints(doc, inner) if "op" in inner else set()
    if path and path[0] == "outputs":
        hints |= {"output"} | set(_strs(doc.get("outputs")))
    if len(path) <= 1:
        hints.add("model.json")
    if path[:1] == ("weights",):
        hints.add("weight")
    return hints


# ------------------------------------------------------------------ value strategies

# placeholders written into the JSON text as tokens json.dumps cannot produce
NAN, INF, NEG_INF, BIG_INT, DEEP = "@@NaN@@", "@@1e400@@", "@@-Infinity@@", "@@10**5000@@", "@@deep@@"
TOKENS = {NAN: "NaN", INF: "1e400", NEG_INF: "-Infinity", BIG_INT: "1" + "0" * 5000,
          DEEP: "[" * 3000 + "]" * 3000}
TOKEN_HINTS = {NAN: {"NaN"}, NEG_INF: {"Infinity"}, BIG_INT: {"JSON"}, DEEP: {"nested"}}

SPECIAL_INTS = [0, 1, -1, 2, 3, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 10**30, -10**30]
SPECIAL_FLOATS = [0.5, -0.0, 1.0, 3.0, -2.5, 1e-300, 1e308, -1e308, 1e38, 65504.0, 70000.0]
SPECIAL_STRS = ["", "x", " ", "float32", "int64", "bool", "bfloat16", "float", "relu", "gemm", "fc1",
                "image", "tokens", "none", "tanh", "constant", "reflect", "SAME_UPPER", "VALID",
                "ij,jk->ik", "...", "->", "\u00e9", "\ud800", "a\u0000b", "line\nbreak", "x" * 300]

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(SPECIAL_INTS),
    st.sampled_from(SPECIAL_FLOATS), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(SPECIAL_STRS), st.text(max_size=4),
    st.sampled_from([NAN, INF, NEG_INF, BIG_INT, DEEP]),
)
KEYS = st.sampled_from(["name", "op", "axis", "shape", "dtype", "a"])
json_values = st.recursive(
    leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=4),
                           st.dictionaries(KEYS | st.text(max_size=3), kids, max_size=3)),
    max_leaves=6,
)
attr_values = st.one_of(
    st.integers(-4, 4), st.sampled_from(SPECIAL_INTS),
    st.lists(st.integers(-3, 6), max_size=6),
    st.lists(st.sampled_from(SPECIAL_INTS), min_size=1, max_size=4),
    st.sampled_from(SPECIAL_FLOATS), st.sampled_from(SPECIAL_STRS), st.booleans(), st.none(),
    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=2),
    st.dictionaries(st.sampled_from(["a", "axis"]), st.integers(-1, 2), max_size=2),
    st.sampled_from([NAN, INF, DEEP]),
)
DTYPE_LIST = ["float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "bool",
              "int64", "uint64", "float64"]
int_lists = st.lists(st.integers(-4, 8), max_size=5)
window = st.lists(st.integers(1, 3), min_size=1, max_size=3)
# plausible values for each attribute name: most new nodes get past the first check
SENSIBLE = {
    "axis": st.integers(-4, 4), "axes": st.lists(st.integers(-4, 4), max_size=3),
    "perm": st.permutations(range(4)).map(list) | st.permutations(range(2)).map(list) | int_lists,
    "shape": st.lists(st.integers(-1, 8), max_size=4) | st.sampled_from([[4, 64], [-1], [0, -1], [1, 2, -1]]),
    "starts": int_lists, "ends": int_lists | st.just([2**63 - 1]), "steps": st.lists(st.integers(-2, 3), max_size=4),
    "kernel_shape": window, "strides": window, "dilations": window,
    "pads": st.lists(st.integers(0, 2), min_size=2, max_size=6), "split": st.lists(st.integers(0, 8), max_size=3),
    "epsilon": st.floats(0, 1), "alpha": st.floats(-2, 2), "beta": st.floats(-2, 2), "bias": st.floats(0, 2),
    "to": st.sampled_from(DTYPE_LIST), "dtype": st.sampled_from(DTYPE_LIST),
    "mode": st.sampled_from(["constant", "reflect", "edge", "wrap", "other"]),
    "auto_pad": st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "same"]),
    "equation": st.sampled_from(["ij,jk->ik", "ij->ji", "...ij,...jk->...ik", "i,i->", "bij,bjk->bik", "ii->i",
                                 "ij,jk", "a", "ab,bc->ac,", "->"]),
    "approximate": st.sampled_from(["none", "tanh", "exact"]),
    "value": st.floats(-3, 3) | st.integers(-3, 300) | st.booleans() | st.lists(st.integers(0, 2), max_size=2),
    "min": st.floats(-3, 3) | st.integers(-300, 3), "max": st.floats(-3, 3) | st.integers(-3, 300),
    "group": st.integers(0, 4), "size": st.integers(0, 5), "num_outputs": st.integers(0, 4),
    "start": st.integers(-5, 5), "end": st.integers(-5, 5),
    "weight_layout": st.sampled_from(["OIS", "SIO", "HWIO"]),
}


def sensible(key):
    """Plausible values of attribute `key` (flags: 0 or 1) three times in four, else anything."""
    plausible = SENSIBLE.get(key, st.sampled_from([0, 1]))
    return st.one_of(plausible, plausible, plausible, attr_values)


names = st.one_of(st.sampled_from(["missing", "ghost.t", "x", "\u00e9t\u00e9", "\ud800", "a\u0000b", "0"]),
                  st.text(st.characters(codec="utf-8"), min_size=1, max_size=6))
dims = st.one_of(st.integers(0, 8), st.sampled_from([-1, -2**31, 2**31 - 1, 2**31, 2**40, 10**20, 0, 1]))
shapes = st.lists(dims, max_size=5)


def _walk_value(value):
    """What an error about a drawn value may name: the special tokens it holds (NaN,
    deep nesting, ...) and, should it be an object standing for a node or tensor,
    its keys and strings (quoted, as messages quote names)."""
    found = set()

    def go(v):
        if isinstance(v, str):  # as messages quote names: repr (a bare "a" is in most messages)
            found.update(TOKEN_HINTS.get(v, {repr(v)}))
        elif isinstance(v, list):
            for x in v:
                go(x)
        elif isinstance(v, dict):
            found.update(repr(k) for k in v)
            for x in v.values():
                go(x)
    go(value)
    return found


# ------------------------------------------------------------------ mutations
# Each takes (data, doc), changes doc in place (or returns a new one) and returns
# (doc, hints): what the error, if any, may name. An inapplicable one returns no hints.

def m_retype(data, doc):
    """Replace, delete or extend the value at any JSON path."""
    paths = _paths(doc)
    path = data.draw(st.sampled_from(paths[1:] + paths[:1]), label="path")  # the root (a new top level): rarely
    if not path:
        pairs = list(doc.items()) if isinstance(doc, dict) else []
        new = data.draw(st.one_of(json_values, st.just([doc]), st.just(pairs)))
        return new, {"model.json", "top level"} | _walk_value(new)
    hints = path_hints(doc, path)
    parent = doc
    for seg in path[:-1]:
        parent = parent[seg]
    key = path[-1]
    how = data.draw(st.sampled_from(["replace", "replace", "delete", "add_key"]), label="how")
    if how == "delete":
        del parent[key]
        if isinstance(parent, list):  # the entries after it moved: name them too
            for v in parent[key:key + 1]:
                if isinstance(v, dict) and isinstance(v.get("name"), str):
                    hints |= tensor_hints(doc, v["name"])
        return doc, hints
    if how == "add_key" and isinstance(parent[key], dict):
        k = data.draw(st.sampled_from(["attr", "Name", "shape", "value", "extra", "dtype", "axis"])
                      | st.text(max_size=4))
        parent[key][k] = data.draw(json_values)
        return doc, hints | {k} | _walk_value(parent[key][k])
    new = data.draw(json_values, label="value")
    parent[key] = new
    return doc, hints | _walk_value(new)


def m_rename_input(data, doc):
    nodes = [n for n in _nodes(doc) if _strs(n.get("inputs"))]
    if not nodes:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    i = data.draw(st.integers(0, len(n["inputs"]) - 1))
    name = data.draw(names)
    old = n["inputs"][i]
    n["inputs"][i] = name
    return doc, node_hints(doc, n) | {name, old if isinstance(old, str) else ""}


def m_duplicate_name(data, doc):
    """A node's name or one of its outputs made equal to another name in the model."""
    nodes = _nodes(doc)
    taken = _all_tensor_names(doc) + [n["name"] for n in nodes]
    if not nodes or not taken:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    other = data.draw(st.sampled_from(taken))
    hints = node_hints(doc, n) | tensor_hints(doc, other)
    if data.draw(st.booleans()) or not _strs(n.get("outputs")):
        n["name"] = other
    else:
        outs = n["outputs"]
        outs[data.draw(st.integers(0, len(outs) - 1))] = other
    return doc, hints | {other}


def m_duplicate_output(data, doc):
    outs = _strs(doc.get("outputs")) if isinstance(doc, dict) else []
    if not outs:
        return doc, set()
    how = data.draw(st.sampled_from(["twice", "missing", "empty", "input", "intermediate", "weight"]))
    extra = {"twice": outs[0], "missing": "nowhere", "empty": None,
             "input": (_all_tensor_names(doc) or ["x"])[0],
             "intermediate": data.draw(st.sampled_from(_all_tensor_names(doc) or ["x"])),
             "weight": data.draw(st.sampled_from([t["name"] for t in _tensors(doc, "weights")] or ["w"]))}[how]
    doc["outputs"] = [] if extra is None else outs + [extra]
    return doc, {"output", *outs, *( [extra] if extra else [])}


def m_cycle(data, doc):
    """Feed a node's output back into itself or an earlier node upstream of it."""
    nodes = _nodes(doc)
    if not nodes:
        return doc, set()
    a = data.draw(st.sampled_from(nodes))
    if not _strs(a.get("inputs")):
        return doc, set()
    down = downstream(doc, _strs(a.get("outputs")))
    later = [n for n in nodes if n["name"] in down or n is a]
    later = [n for n in later if _strs(n.get("outputs"))]
    if not later:
        return doc, set()
    b = data.draw(st.sampled_from(later))
    a["inputs"][data.draw(st.integers(0, len(a["inputs"]) - 1))] = _strs(b["outputs"])[0]
    return doc, {a["name"], b["name"]} | node_hints(doc, a)


def m_op(data, doc):
    nodes = _nodes(doc)
    if not nodes:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    hints = node_hints(doc, n)
    n["op"] = data.draw(st.one_of(st.sampled_from(sorted(ops.OPS)), st.sampled_from(["Relu", "conv3d", "", "noop"]),
                                  st.text(max_size=5)), label="op")
    return doc, hints


def m_attr(data, doc):
    """Set an attribute the op accepts (or an unknown one) to an arbitrary value."""
    nodes = [n for n in _nodes(doc) if isinstance(n.get("attrs", {}), dict)]
    if not nodes:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    op = _op(n)
    known = list(op.attrs) if op else []
    key = data.draw(st.sampled_from(known) if known and data.draw(st.integers(0, 3)) else
                    st.sampled_from(["stride", "Axis", "kernel", "attrs", "", "axis", "perm", "epsilon"]), label="key")
    value = data.draw(sensible(key), label="value")
    n.setdefault("attrs", {})[key] = value
    return doc, node_hints(doc, n) | _walk_value(value)


def m_axis(data, doc):
    """An out-of-range (or just different) axis on an op that takes one."""
    nodes = [n for n in _nodes(doc) if _op(n) and isinstance(n.get("attrs", {}), dict)
             and any(a in _op(n).attrs for a in ("axis", "perm", "axes"))]
    if not nodes:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    key = next(a for a in ("axis", "perm", "axes") if a in ops.get(n["op"]).attrs)
    v = data.draw(st.integers(-10, 10) | st.sampled_from([2**63 - 1, -2**63]))
    n.setdefault("attrs", {})[key] = v if key == "axis" else data.draw(st.lists(st.integers(-6, 6), max_size=6))
    return doc, node_hints(doc, n)


def m_shape(data, doc):
    """A declared shape changed: inputs (consistent by definition), weights (at odds
    with the .npz), constants (with the value regenerated to fit, or not)."""
    kind = data.draw(st.sampled_from(["inputs", "weights", "constants"]))
    ts = [t for t in _tensors(doc, kind) if isinstance(t.get("shape"), list)]
    if not ts:
        return doc, set()
    t = data.draw(st.sampled_from(ts))
    old = list(t["shape"])
    how = data.draw(st.sampled_from(["set", "dim", "drop", "add", "scalar"]))
    if how == "set":
        new = data.draw(shapes)
    elif how == "dim" and old:
        new = list(old)
        new[data.draw(st.integers(0, len(old) - 1))] = data.draw(dims)
    elif how == "drop" and old:
        new = old[1:]
    elif how == "add":
        new = [data.draw(st.integers(0, 3))] + old
    else:
        new = []
    t["shape"] = new
    if kind == "constants" and data.draw(st.booleans()) and all(isinstance(d, int) and 0 <= d <= 64 for d in new):
        if int(np.prod(new)) <= 4096:
            t["value"] = np.zeros(new).tolist() if t.get("dtype") != "bool" else np.zeros(new, bool).tolist()
    return doc, tensor_hints(doc, t["name"])


DTYPE_NAMES = ["float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "bool",
               "int64", "uint64", "float64", "float", "Float32", "fp16", "int4", "complex64", "object", ""]


def m_dtype(data, doc):
    kind = data.draw(st.sampled_from(["inputs", "weights", "constants"]))
    ts = _tensors(doc, kind)
    if not ts:
        return doc, set()
    t = data.draw(st.sampled_from(ts))
    t["dtype"] = data.draw(st.sampled_from(DTYPE_NAMES) | json_values)
    return doc, tensor_hints(doc, t["name"]) | _walk_value(t["dtype"])


def m_remove_node(data, doc):
    nodes = _nodes(doc)
    if not nodes:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    hints = node_hints(doc, n)
    doc["nodes"].remove(n)
    return doc, hints


def _new_constant(data, doc, k):
    """A small inline constant: shape-like int64 vectors, or small float/int/bool tensors."""
    dt = data.draw(st.sampled_from(["int64", "int64", "float32", "float32", "int32", "bool", "uint8", "float16"]))
    if dt == "int64" and data.draw(st.booleans()):
        shape = [data.draw(st.integers(0, 4))]
        vals = data.draw(st.lists(st.integers(-3, 70) | st.sampled_from([-1, 0, 2**31 - 1, 2**63 - 1, -2**63]),
                                  min_size=shape[0], max_size=shape[0]))
    else:
        shape = data.draw(st.lists(st.integers(0, 4), max_size=4))
        n = int(np.prod(shape))
        if dt in ("float32", "float16"):
            vals = data.draw(st.lists(st.floats(-4, 4, width=16), min_size=n, max_size=n))
        elif dt == "bool":
            vals = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        else:
            vals = data.draw(st.lists(st.integers(0 if dt == "uint8" else -5, 9), min_size=n, max_size=n))
    value = np.array(vals, dtype=object).reshape(shape).tolist()
    c = {"name": f"fuzz.c{k}", "dtype": dt, "shape": shape, "value": value}
    doc.setdefault("constants", []).append(c)
    return c["name"]


def m_add_node(data, doc):
    """A new node of any registered op, reading existing tensors or new small
    constants (so that fold evaluates it), with plausible or arbitrary attributes."""
    if not (isinstance(doc, dict) and isinstance(doc.get("nodes"), list)
            and isinstance(doc.get("constants", []), list)):
        return doc, set()
    k = len(doc["nodes"])
    op = ops.get(data.draw(st.sampled_from(sorted(ops.OPS)), label="new op"))
    existing = _all_tensor_names(doc)
    lo, hi = op.arity
    n_dyn = data.draw(st.integers(0, 5) if data.draw(st.integers(0, 9)) == 9 else st.integers(lo, max(lo, min(hi, 4))))
    static = dict(op.static_inputs)
    inputs, p = [], 0
    while p < n_dyn + len([q for q in static if q <= n_dyn]) and p < 8:
        if p in static and data.draw(st.integers(0, 2)) == 0:
            inputs.append("")  # omitted
        elif existing and data.draw(st.booleans()):
            inputs.append(data.draw(st.sampled_from(existing)))
        else:
            inputs.append(_new_constant(data, doc, f"{k}.{p}"))
        p += 1
    while inputs and inputs[-1] == "":
        inputs.pop()
    attrs = {}
    for a in data.draw(st.lists(st.sampled_from(op.attrs), unique=True, max_size=4) if op.attrs else st.just([])):
        attrs[a] = data.draw(sensible(a))
    n_out = op.n_outputs if op.n_outputs is not None else data.draw(st.integers(1, 3))
    name = f"fuzz.n{k}"
    node = {"name": name, "op": op.name, "inputs": inputs, "outputs": [f"{name}.y{j}" for j in range(n_out)],
            "attrs": attrs}
    doc["nodes"].append(node)
    if data.draw(st.booleans()) and isinstance(doc.get("outputs"), list):
        doc["outputs"].append(node["outputs"][0])
    return doc, {name, *node["outputs"], *inputs} - {""} | _walk_value(attrs)


MUTATIONS = {f.__name__[2:]: f for f in (m_retype, m_rename_input, m_duplicate_name, m_duplicate_output, m_cycle,
                                          m_op, m_attr, m_axis, m_shape, m_dtype, m_remove_node, m_add_node)}
# retype covers the most ground (any field, any value): drawn more often
MUTATION_CHOICES = list(MUTATIONS) + ["retype", "retype", "attr", "add_node", "add_node"]


def dumps(doc):
    text = json.dumps(doc, ensure_ascii=True)
    for token, raw in TOKENS.items():
        text = text.replace(json.dumps(token), raw)
    return text.encode()


def _position(data, n):
    """An offset in [0, n), uniform (hypothesis' integers favour their lower end)."""
    return random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed")).randrange(max(n, 1))


def m_text(data, raw):
    """Byte-level damage to the file -> (bytes, hints)."""
    how = data.draw(st.sampled_from(["truncate", "bad_utf8", "flip", "bom", "utf16", "wrap", "none"]), label="text")
    where = _position(data, len(raw))
    if how == "truncate":
        return raw[:where], {"JSON", "model.json"}
    if how == "bad_utf8":
        junk = data.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]))
        return raw[:where] + junk + raw[where:], {"JSON", "model.json", "utf-8"}
    if how == "flip" and raw:
        return raw[:where] + bytes([raw[where] ^ data.draw(st.integers(1, 255))]) + raw[where + 1:], None
    if how == "bom":
        return b"\xef\xbb\xbf" + raw, None
    if how == "utf16":
        return raw.decode().encode("utf-16"), None
    if how == "wrap":
        return b"[" + raw + b"]", {"model.json", "top level"}
    return raw, None


def _mutant(data):
    name = data.draw(st.sampled_from(EXAMPLE_NAMES), label="example")
    doc = copy.deepcopy(DOCS[name])
    hints, none_ok = set(), False
    for what in data.draw(st.lists(st.sampled_from(MUTATION_CHOICES), min_size=1, max_size=3), label="mutations"):
        doc, h = MUTATIONS[what](data, doc)
        hints |= h
    raw = dumps(doc)
    if random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed")).random() < 0.1:  # (uniformly)
        raw, h = m_text(data, raw)
        if h is None:
            none_ok = True
        else:
            hints |= h
    return name, raw, (None if none_ok else hints)


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    out = {}
    for name in EXAMPLE_NAMES:
        d = tmp_path_factory.mktemp(f"fuzz_{name}")
        shutil.copy(example_npz(name), d / "weights.npz")
        out[name] = d
    return out


@settings(max_examples=1500, **SETTINGS)  # (CI time: 2,500 took 31 s; scripts/fuzz_graphs.py runs more)
@given(data=st.data())
def test_mutated_model(workdirs, data):
    name, raw, hints = _mutant(data)
    path = workdirs[name] / "model.json"
    path.write_bytes(raw)
    check(str(path), hints)


def test_unmutated_examples_pass(workdirs):
    for name in EXAMPLE_NAMES:
        path = workdirs[name] / "model.json"
        path.write_bytes(dumps(DOCS[name]))
        assert check(str(path), set()) is None


def test_empty_inline_constant_round_trips(tmp_path):
    """A nested list stops at its first empty dimension: what `save` writes for a
    (2, 0, 3) constant loads back (found by the fuzzer: it was refused)."""
    doc = copy.deepcopy(DOCS["mlp"])
    doc["constants"].append({"name": "empty", "dtype": "float32", "shape": [2, 0, 3], "value": [[], []]})
    doc["outputs"].append("empty")
    shutil.copy(example_npz("mlp"), tmp_path / "weights.npz")
    (tmp_path / "model.json").write_bytes(dumps(doc))
    graph, _ = model_json.load(str(tmp_path / "model.json"))
    assert graph.constant_map()["empty"].data.shape == (2, 0, 3)
    model_json.save(graph, str(tmp_path / "again.json"), weights_file="again.npz")
    again, _ = model_json.load(str(tmp_path / "again.json"))
    assert again.constant_map()["empty"].data.shape == (2, 0, 3)
    for value in ([[], [1.0]], [[1.0, 2.0], [3.0]], [1.0, [2.0]]):  # ragged: refused however it adds up
        doc["constants"][-1].update(shape=[2], value=value)
        (tmp_path / "model.json").write_bytes(dumps(doc))
        with pytest.raises(ModelError, match="constant 'empty': inline value"):
            model_json.load(str(tmp_path / "model.json"))


# ------------------------------------------------------------------ weights.npz

class _Boom:
    """Unpickling this creates a marker directory: proof that pickles ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (self.marker,)


def _npy(arr, version=None):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=True)
    return buf.getvalue()


def _write_zip(path, members):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)


HEADER_PIECES = [b"{", b"}", b"'descr'", b"'<f4'", b"'<f8'", b"'O'", b"'|V4'", b"[('a','<f4')]", b"'fortran_order'",
                 b"B'fortran_order'", b"False", b"True", b"'shape'", b"(", b")", b"((", b",", b":", b"4", b"32",
                 b"-1", b"99999999999999999999999", b"1e9", b"None", b"[", b"]", b"\"", b"'", b"\\", b"#", b"\n",
                 b" ", b"lambda", b"\xff", b"'<U'"]
BAD_DTYPES = ["float64", "float16", "int32", "int64", "uint8", "bool", "complex64", ">f8", "V4", "U1", "S4",
              "datetime64[s]", [("a", "<f4")], [("a", "<u2"), ("b", "<u2")]]


def _weights_mutant(data, d, marker):
    """Write a damaged weights.npz into `d` -> (hints for the error, must_fail)."""
    name = data.draw(st.sampled_from(EXAMPLE_NAMES), label="example")
    arrays = dict(WEIGHTS[name])
    w = data.draw(st.sampled_from(sorted(arrays)), label="weight")
    a = arrays[w]
    members = {f"{k}.npy": _npy(v) for k, v in arrays.items()}
    how = data.draw(st.sampled_from(["drop", "rename", "dtype", "shape", "object", "raw_member", "garbage_member",
                                     "truncated_member", "huge_header", "bad_header", "fortran", "extra_object",
                                     "npy_v2", "empty_file", "random_file", "truncated_file", "npy_file",
                                     "text_file", "directory", "stored", "encrypted_flag", "flipped_file",
                                     "flipped_file", "fuzzed_header", "fuzzed_header"]), label="how")
    path = os.path.join(d, "weights.npz")
    if os.path.isdir(path):
        shutil.rmtree(path)
    hints, must_fail = {w}, True
    if how == "drop":
        del members[f"{w}.npy"]
    elif how == "rename":
        members[f"{w}.x.npy"] = members.pop(f"{w}.npy")
    elif how == "dtype":
        dt = np.dtype(data.draw(st.sampled_from(BAD_DTYPES)))
        members[f"{w}.npy"] = _npy(np.zeros(a.shape, dt) if dt.kind not in "fcb" else a.astype(dt))
    elif how == "shape":
        new = data.draw(st.sampled_from([a.T.shape if a.ndim > 1 else (a.size, 1), (1,) + a.shape, (a.size,), (),
                                         (0,) + a.shape[1:], a.shape[:-1] + (a.shape[-1] + 1,)]))
        if new == a.shape:
            new = new + (1,)
        members[f"{w}.npy"] = _npy(np.zeros(new, a.dtype))
    elif how == "object":
        obj = np.empty(a.shape, dtype=object)
        obj.flat[0] = _Boom(marker)
        members[f"{w}.npy"] = _npy(obj)
    elif how == "raw_member":  # no .npy suffix: np.load would hand back raw bytes
        members[w] = members.pop(f"{w}.npy")
    elif how == "garbage_member":
        members[f"{w}.npy"] = data.draw(st.binary(max_size=64))
    elif how == "truncated_member":
        raw = members[f"{w}.npy"]
        members[f"{w}.npy"] = raw[:_position(data, len(raw))]
    elif how == "huge_header":  # a header promising far more data than there is
        raw = _npy(np.zeros(a.shape, a.dtype))
        big = data.draw(st.sampled_from([(2**40,), (2**31, 2**31), (2**62,), a.shape]))
        header = np.lib.format.header_data_from_array_1_0(np.zeros(0, a.dtype))
        header["shape"] = big
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, header)
        members[f"{w}.npy"] = buf.getvalue() + raw[len(raw) - min(a.nbytes, 16):]
    elif how == "bad_header":
        members[f"{w}.npy"] = data.draw(st.sampled_from([
            b"\x93NUMPY\x01\x00\x10\x00{'descr': 5}    \n",
            b"\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }        \n",
            b"\x93NUMPY\x01\x00\x40\x00{'descr': 'O', 'fortran_order': False, 'shape': (1,), }          \n",
            b"\x93NUMPY\x09\x00\x10\x00{}              \n",
            b"\x93NUMPY\x01\x00\xff\xff" + b" " * 100,
            b"\x93NUMPY\x03\x00\x10\x00\x00\x00{}            \n",
        ]))
    elif how == "fuzzed_header":  # header text from pieces numpy's parser has to cope with
        text = b"".join(data.draw(st.lists(st.sampled_from(HEADER_PIECES), max_size=24)))
        version = data.draw(st.sampled_from([(1, 0), (2, 0), (3, 0)]))
        size = len(text).to_bytes(2 if version == (1, 0) else 4, "little")
        members[f"{w}.npy"] = b"\x93NUMPY" + bytes(version) + size + text + bytes(a.nbytes)
        must_fail = False  # (it may spell the right header)
    elif how == "fortran":
        members[f"{w}.npy"] = _npy(np.asfortranarray(a))
        must_fail = False
    elif how == "npy_v2":
        members[f"{w}.npy"] = _npy(a, version=(2, 0))
        must_fail = False
    elif how == "extra_object":  # an undeclared object array is never read
        obj = np.empty(1, dtype=object)
        obj[0] = _Boom(marker)
        members["unused.npy"] = _npy(obj)
        must_fail = False
    elif how == "stored":  # uncompressed members read the same
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
            for k, v in members.items():
                z.writestr(k, v)
        return name, hints, False
    hints = {w, "weights"}
    if how == "empty_file":
        open(path, "wb").close()
    elif how == "random_file":
        with open(path, "wb") as f:
            f.write(data.draw(st.binary(min_size=1, max_size=200)))
    elif how == "truncated_file":
        buf = io.BytesIO()
        _write_zip(buf, members)
        raw = buf.getvalue()
        with open(path, "wb") as f:
            f.write(raw[:_position(data, len(raw))])
    elif how == "npy_file":
        with open(path, "wb") as f:
            f.write(_npy(a))
    elif how == "text_file":
        with open(path, "w") as f:
            f.write('{"not": "an npz"}\n')
    elif how == "directory":
        os.mkdir(path)
    elif how == "flipped_file":  # one damaged byte anywhere: a header, compressed data, the directory
        buf = io.BytesIO()
        _write_zip(buf, members)
        raw = bytearray(buf.getvalue())
        raw[_position(data, len(raw))] ^= data.draw(st.integers(1, 255))
        with open(path, "wb") as f:
            f.write(bytes(raw))
        return name, set(arrays) | {"weights"}, False
    elif how == "encrypted_flag":  # the "encrypted" bit set on every member
        buf = io.BytesIO()
        _write_zip(buf, members)
        raw = bytearray(buf.getvalue())
        for sig in (b"PK\x03\x04", b"PK\x01\x02"):
            at = raw.find(sig)
            while at >= 0:
                flag = at + (6 if sig == b"PK\x03\x04" else 8)
                raw[flag] |= 1
                at = raw.find(sig, at + 4)
        with open(path, "wb") as f:
            f.write(bytes(raw))
    else:
        _write_zip(path, members)
        hints = {w}
    return name, hints, must_fail


@settings(max_examples=600, **SETTINGS)
@given(data=st.data())
def test_mutated_weights(tmp_path_factory, data):
    d = str(tmp_path_factory.mktemp("npz"))
    marker = os.path.join(d, "UNPICKLED")
    name, hints, must_fail = _weights_mutant(data, d, marker)
    with open(os.path.join(d, "model.json"), "wb") as f:
        f.write(dumps(DOCS[name]))
    msg = check(os.path.join(d, "model.json"), hints)
    assert not os.path.exists(marker), "an object array was unpickled"
    if must_fail:
        assert msg is not None, "a damaged weights file was accepted"
    shutil.rmtree(d)


# ------------------------------------------------------------------ the CLI, end to end

def _node(doc, name):
    return next(n for n in doc["nodes"] if n["name"] == name)


def _object_weight(d, marker):
    arrays = {k: _npy(v) for k, v in WEIGHTS["mlp"].items()}
    obj = np.empty((128, 64), dtype=object)
    obj.flat[0] = _Boom(marker)
    arrays["fc1.w"] = _npy(obj)
    _write_zip(os.path.join(d, "weights.npz"), {f"{k}.npy": v for k, v in arrays.items()})


# (example, mutate the doc, damage the text, damage the weights, what the error names; None: compiles)
CLI_CASES = {
    "missing op": ("mlp", lambda d: _node(d, "fc2").pop("op"), None, None, r"node 'fc2': missing field 'op'"),
    "retyped shape": ("cnn", lambda d: d["inputs"][0].update(shape="2x3x32x32"), None, None,
                      r"inputs\[0\]\.shape: expected list"),
    "renamed input": ("cnn", lambda d: _node(d, "down")["inputs"].__setitem__(0, "block9.relu"), None, None,
                      r"node 'down': input 'block9.relu' is not"),
    "cycle": ("transformer", lambda d: _node(d, "ln1")["inputs"].__setitem__(0, "res2"), None, None,
              r"graph has a cycle: .*'ln1'"),
    "window too big": ("cnn", lambda d: _node(d, "pool1")["attrs"].update(kernel_shape=[64, 64], strides=[1, 1]),
                       None, None, r"node 'pool1' \(maxpool\): window 64"),
    "huge folded shape": ("mlp", lambda d: d["nodes"].extend([
        {"name": "c", "op": "constant_of_shape", "inputs": [], "outputs": ["c"],
         "attrs": {"shape": [2**31 - 1, 2**31 - 1], "dtype": "int64"}},
        {"name": "r", "op": "reshape", "inputs": ["probs", "c"], "outputs": ["r"]}]),
        None, None, r"node 'c' \(constant_of_shape\): output 'c' int64\[2147483647, 2147483647\] needs"),
    "lone surrogate": ("mlp", lambda d: _node(d, "relu1").update(name="\ud800"), None, None,
                       r"nodes\[1\]\.name: '\\ud800' is not valid Unicode"),
    "truncated": ("transformer", None, lambda raw: raw[:len(raw) // 2], None, r"model\.json: not valid JSON"),
    "not utf-8": ("cnn", None, lambda raw: raw.replace(b'"stem"', b'"st\xedm"', 1), None,
                  r"not valid JSON: cannot decode the text: 'utf-8' codec"),
    "object array": ("mlp", None, None, _object_weight, r"weight 'fc1\.w': stored dtype object does not match"),
    "harmless": ("mlp", lambda d: d["outputs"].append("x"), None, None, None),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_on_mutants(tmp_path, case):
    """`aotplan compile` on a mutant: one `error:` line naming what is wrong (the same
    message as the front end's), exit 2, no plan, no traceback; or a plan."""
    example, mutate, damage_text, damage_weights, pattern = CLI_CASES[case]
    doc = copy.deepcopy(DOCS[example])
    if mutate:
        mutate(doc)
    raw = dumps(doc)
    (tmp_path / "model.json").write_bytes(damage_text(raw) if damage_text else raw)
    marker = str(tmp_path / "UNPICKLED")
    if damage_weights:
        damage_weights(str(tmp_path), marker)
    else:
        shutil.copy(example_npz(example), tmp_path / "weights.npz")
    msg = check(str(tmp_path / "model.json"), None)
    out = tmp_path / "out.plan"
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "model.json"), "-o", str(out)])
    assert not os.path.exists(marker)
    if pattern is None:
        assert msg is None and r.exit_code == 0 and out.exists(), r.output
        return
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and not out.exists(), r.output
    assert lines == [f"error: {msg}"], r.stderr
    assert re.search(pattern, msg), msg


def test_cli_subprocess_prints_one_line(tmp_path):
    """The installed entry point, in its own process: stderr is exactly one line."""
    doc = copy.deepcopy(DOCS["mlp"])
    _node(doc, "probs")["attrs"]["axis"] = 2**63 - 1
    (tmp_path / "model.json").write_bytes(dumps(doc))
    shutil.copy(example_npz("mlp"), tmp_path / "weights.npz")
    r = subprocess.run([sys.executable, "-c", "from aotplan.cli import run; run()", "compile",
                        str(tmp_path / "model.json"), "-o", str(tmp_path / "out.plan")],
                       capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == ("error: node 'probs' (softmax): axis 9223372036854775807 is out of range for rank 2"), r.stderr
    assert not (tmp_path / "out.plan").exists()
