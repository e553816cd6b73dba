"""What an error about a mutated model.json must name: the nodes, tensors and fields a
mutation touched, and those downstream of them (tests/fuzz/test_model_fuzz.py)."""



from compiler import ops

# ------------------------------------------------------------------ doc helpers

def nodes_of(doc):
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        return []
    return [n for n in doc["nodes"] if isinstance(n, dict) and isinstance(n.get("name"), str)]


def strs_of(value):
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def tensors_of(doc, kind):
    """Named tensor declarations of one kind: "inputs", "weights" or "constants"."""
    if not isinstance(doc, dict):
        return []
    seq = doc.get(kind)
    if kind == "weights":
        seq = seq.get("tensors") if isinstance(seq, dict) else None
    if not isinstance(seq, list):
        return []
    return [t for t in seq if isinstance(t, dict) and isinstance(t.get("name"), str)]


def all_tensor_names(doc):
    names = [t["name"] for k in ("inputs", "weights", "constants") for t in tensors_of(doc, k)]
    return names + [o for n in nodes_of(doc) for o in strs_of(n.get("outputs"))]


def downstream(doc, tensors):
    """`tensors`, and the nodes (and their outputs) that depend on them."""
    seen, out = set(tensors), set(tensors)
    changed = True
    while changed:
        changed = False
        for n in nodes_of(doc):
            if n["name"] not in out and any(i in seen for i in strs_of(n.get("inputs"))):
                out.add(n["name"])
                outs = strs_of(n.get("outputs"))
                out.update(outs)
                seen.update(outs)
                changed = True
    return out


def op_of(node):
    return ops.get(node.get("op")) if isinstance(node.get("op"), str) else None


def node_hints(doc, node):
    return {node["name"]} | set(strs_of(node.get("outputs"))) | downstream(doc, strs_of(node.get("outputs")))


def tensor_hints(doc, name):
    return {name} | downstream(doc, [name])


def paths_of(value, prefix=()):
    """Every JSON path in `value` (long lists: their first two and last entries)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_of(v, prefix + (k,))
    elif isinstance(value, list):
        idx = range(len(value)) if len(value) <= 4 else (0, 1, len(value) - 1)
        for i in idx:
            out += paths_of(value[i], prefix + (i,))
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
        hints |= {"output"} | set(strs_of(doc.get("outputs")))
    if len(path) <= 1:
        hints.add("model.json")
    if path[:1] == ("weights",):
        hints.add("weight")
    return hints
