"""Mutations of model.json documents and text for the model fuzzer: value strategies,
structural mutations (retype, rename, duplicate, cycle, op, attribute, axis, shape,
dtype, node removal and addition) and text damage; `mutant` draws one."""

import copy
import json
import random

import numpy as np
from hypothesis import strategies as st

from compiler import ops
from model_doc_hints import (all_tensor_names, nodes_of, op_of, paths_of, strs_of,
                             tensors_of, downstream, node_hints, path_hints, tensor_hints)
from model_fuzz_base import DOCS
from conftest import EXAMPLE_NAMES

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
    paths = paths_of(doc)
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
    nodes = [n for n in nodes_of(doc) if strs_of(n.get("inputs"))]
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
    nodes = nodes_of(doc)
    taken = all_tensor_names(doc) + [n["name"] for n in nodes]
    if not nodes or not taken:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    other = data.draw(st.sampled_from(taken))
    hints = node_hints(doc, n) | tensor_hints(doc, other)
    if data.draw(st.booleans()) or not strs_of(n.get("outputs")):
        n["name"] = other
    else:
        outs = n["outputs"]
        outs[data.draw(st.integers(0, len(outs) - 1))] = other
    return doc, hints | {other}


def m_duplicate_output(data, doc):
    outs = strs_of(doc.get("outputs")) if isinstance(doc, dict) else []
    if not outs:
        return doc, set()
    how = data.draw(st.sampled_from(["twice", "missing", "empty", "input", "intermediate", "weight"]))
    extra = {"twice": outs[0], "missing": "nowhere", "empty": None,
             "input": (all_tensor_names(doc) or ["x"])[0],
             "intermediate": data.draw(st.sampled_from(all_tensor_names(doc) or ["x"])),
             "weight": data.draw(st.sampled_from([t["name"] for t in tensors_of(doc, "weights")] or ["w"]))}[how]
    doc["outputs"] = [] if extra is None else outs + [extra]
    return doc, {"output", *outs, *( [extra] if extra else [])}


def m_cycle(data, doc):
    """Feed a node's output back into itself or an earlier node upstream of it."""
    nodes = nodes_of(doc)
    if not nodes:
        return doc, set()
    a = data.draw(st.sampled_from(nodes))
    if not strs_of(a.get("inputs")):
        return doc, set()
    down = downstream(doc, strs_of(a.get("outputs")))
    later = [n for n in nodes if n["name"] in down or n is a]
    later = [n for n in later if strs_of(n.get("outputs"))]
    if not later:
        return doc, set()
    b = data.draw(st.sampled_from(later))
    a["inputs"][data.draw(st.integers(0, len(a["inputs"]) - 1))] = strs_of(b["outputs"])[0]
    return doc, {a["name"], b["name"]} | node_hints(doc, a)


def m_op(data, doc):
    nodes = nodes_of(doc)
    if not nodes:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    hints = node_hints(doc, n)
    n["op"] = data.draw(st.one_of(st.sampled_from(sorted(ops.OPS)), st.sampled_from(["Relu", "conv3d", "", "noop"]),
                                  st.text(max_size=5)), label="op")
    return doc, hints


def m_attr(data, doc):
    """Set an attribute the op accepts (or an unknown one) to an arbitrary value."""
    nodes = [n for n in nodes_of(doc) if isinstance(n.get("attrs", {}), dict)]
    if not nodes:
        return doc, set()
    n = data.draw(st.sampled_from(nodes))
    op = op_of(n)
    known = list(op.attrs) if op else []
    key = data.draw(st.sampled_from(known) if known and data.draw(st.integers(0, 3)) else
                    st.sampled_from(["stride", "Axis", "kernel", "attrs", "", "axis", "perm", "epsilon"]), label="key")
    value = data.draw(sensible(key), label="value")
    n.setdefault("attrs", {})[key] = value
    return doc, node_hints(doc, n) | _walk_value(value)


def m_axis(data, doc):
    """An out-of-range (or just different) axis on an op that takes one."""
    nodes = [n for n in nodes_of(doc) if op_of(n) and isinstance(n.get("attrs", {}), dict)
             and any(a in op_of(n).attrs for a in ("axis", "perm", "axes"))]
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
    ts = [t for t in tensors_of(doc, kind) if isinstance(t.get("shape"), list)]
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
    ts = tensors_of(doc, kind)
    if not ts:
        return doc, set()
    t = data.draw(st.sampled_from(ts))
    t["dtype"] = data.draw(st.sampled_from(DTYPE_NAMES) | json_values)
    return doc, tensor_hints(doc, t["name"]) | _walk_value(t["dtype"])


def m_remove_node(data, doc):
    nodes = nodes_of(doc)
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
    existing = all_tensor_names(doc)
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


def position(data, n):
    """An offset in [0, n), uniform (hypothesis' integers favour their lower end)."""
    return random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed")).randrange(max(n, 1))


def m_text(data, raw):
    """Byte-level damage to the file -> (bytes, hints)."""
    how = data.draw(st.sampled_from(["truncate", "bad_utf8", "flip", "bom", "utf16", "wrap", "none"]), label="text")
    where = position(data, len(raw))
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


def mutant(data):
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
