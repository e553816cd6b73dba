"""Reading a model for `compile`, `import` and `check`: model.json or ONNX, with
--input-shape and --freeze-input applied.
"""

from aotplan.core.errors import AotplanError
from aotplan.cli.feeds import frozen_values


def parse_shapes(specs):
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            if name in shapes:
                raise AotplanError(f"--input-shape {name}: given twice")
            shapes[name] = tuple(int(d) for d in dims.split(",")) if dims else ()
            if any(d < 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise AotplanError(f"--input-shape {spec!r}: expected NAME=D0,D1,... with non-negative integers") from None
    return shapes


def load_model(model, input_shapes, frozen=(), allow_outside_weights=False, states=(), state_inits=()):
    """model.json or .onnx -> (Graph, digest), with the --freeze-input values (`frozen`:
    NAME=FILE.npy specs) made constants (an ONNX model's declared outputs are checked
    after that, when every shape is known) and the --state pairs (`states`: OUT=IN
    specs) made states. `allow_outside_weights`: a model.json's weights file may lie
    outside its folder."""
    from aotplan.core import model_json

    if model.lower().endswith(".onnx"):
        from compiler.frontends import onnx_import

        graph, digest = onnx_import.load(model, parse_shapes(input_shapes), freeze=freezer(frozen))
        return with_states(graph, digest, states, state_inits)
    if input_shapes:
        raise AotplanError("--input-shape applies to ONNX models; model.json shapes are already static")
    graph, digest = model_json.load(model, allow_outside_weights)
    if frozen:
        graph = freezer(frozen)(graph)
        digest = model_json.graph_digest(graph)
    return with_states(graph, digest, states, state_inits)


def load_methods(model, method_specs, profiles, input_shapes, frozen, allow_outside_weights, states, state_inits=()):
    """-> ([(method name, Graph)], digest): MODEL alone (one method, named ""), each
    --method NAME=MODEL, or MODEL at each --profile NAME:INPUT=D0,...;INPUT=...; the
    same --input-shape, --freeze-input and --state apply to every method. The digest
    covers every method's model and name."""
    import hashlib

    if method_specs:
        named = []
        for spec in method_specs:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path:
                raise AotplanError(f"--method {spec!r}: expected NAME=MODEL")
            named.append((name, *load_model(path, input_shapes, frozen, allow_outside_weights, states, state_inits)))
    elif profiles:
        named = []
        for spec in profiles:
            name, sep, shapes = spec.partition(":")
            if not sep or not name or not shapes:
                raise AotplanError(f"--profile {spec!r}: expected NAME:INPUT=D0,D1,... (inputs separated by ';')")
            given = parse_shapes(shapes.split(";"))
            if not model.lower().endswith(".onnx"):
                raise AotplanError(f"--profile {name}: model.json shapes are static; profiles give an ONNX model's "
                                   f"symbolic dimensions")
            both = dict(parse_shapes(input_shapes), **given)
            try:
                named.append((name, *load_model(model, [f"{k}={','.join(map(str, v))}" for k, v in both.items()],
                                                frozen, allow_outside_weights, states, state_inits)))
            except AotplanError as e:
                raise type(e)(f"--profile {name}: {e}") from None
    else:
        graph, digest = load_model(model, input_shapes, frozen, allow_outside_weights, states, state_inits)
        return [("", graph)], digest
    digest = hashlib.sha256(repr([(name, d) for name, _, d in named]).encode()).hexdigest()
    return [(name, g) for name, g, _ in named], digest


def parse_states(specs):
    """--state OUT=IN specs -> [(OUT, IN)]."""
    pairs = []
    for spec in specs:
        out, sep, inp = spec.partition("=")
        if not sep or not out or not inp:
            raise AotplanError(f"--state {spec!r}: expected OUT=IN, a graph output and the graph input it updates")
        pairs.append((out, inp))
    return pairs


def with_states(graph, digest, specs, init_specs=()):
    """The graph with each --state OUT=IN pair a state (zeros before the first step, or
    the --state-init IN=FILE.npy value), and its digest covering them; the graph's checks
    (`validate`) name a missing input or output, the compile mismatched shapes or dtypes."""
    from compiler.frontends.states import declare

    inits = {}
    if init_specs:
        from aotplan.cli.feeds import as_bfloat16, load_npy

        want = {t.name: t.dtype for t in graph.inputs}
        for spec in init_specs:
            name, a = load_npy(spec, "--state-init", want)
            if name in inits:
                raise AotplanError(f"--state-init {name}: given twice")
            inits[name] = as_bfloat16(a, f"--state-init {name}") if want.get(name) == "bfloat16" else a
    return declare(graph, digest, parse_states(specs), inits=inits)


STATE_INIT_HELP = ("A state's value before the first step (and after reset_state), from a .npy of the state's dtype "
                   "and shape, for the state whose input is IN (repeatable; default: zeros).")


STATE_HELP = ("Keep a tensor on the device across steps (a KV cache): graph output OUT is written in place over "
              "graph input IN (same dtype and shape), which is then neither fed nor returned; it starts as zeros "
              "(Session.reset_state, get_state, set_state). Repeatable. model.json may declare them itself "
              "(`states`).")


def freezer(frozen):
    """--freeze-input specs -> a function: graph -> the graph with those inputs made
    constants (None without specs)."""
    if not frozen:
        return None

    def freeze(graph):
        from compiler.passes import fold

        return fold.freeze_inputs(graph, frozen_values(frozen, graph))
    return freeze


FREEZE_HELP = ("Make a graph input a constant with these values (repeatable). Needed for inputs that decide "
                "shapes, such as an ONNX Reshape's shape fed as a graph input: plans have static shapes.")


OUTSIDE_WEIGHTS_HELP = ("Read a model.json's weights file even where it lies outside the model's folder (an "
                        "absolute path, '..', or a symbolic link leading out): by default it must lie beside "
                        "model.json or below it.")


INPUT_SHAPE_HELP = "For ONNX models: fix an input's shape, e.g. --input-shape input=1,3,224,224 (repeatable)."
