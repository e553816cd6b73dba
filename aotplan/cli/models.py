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


def load_model(model, input_shapes, frozen=(), allow_outside_weights=False):
    """model.json or .onnx -> (Graph, digest), with the --freeze-input values (`frozen`:
    NAME=FILE.npy specs) made constants (an ONNX model's declared outputs are checked
    after that, when every shape is known). `allow_outside_weights`: a model.json's
    weights file may lie outside its folder."""
    from aotplan.core import model_json

    if model.lower().endswith(".onnx"):
        from compiler.frontends import onnx_import

        return onnx_import.load(model, parse_shapes(input_shapes), freeze=freezer(frozen))
    if input_shapes:
        raise AotplanError("--input-shape applies to ONNX models; model.json shapes are already static")
    graph, digest = model_json.load(model, allow_outside_weights)
    if frozen:
        graph = freezer(frozen)(graph)
        digest = model_json.graph_digest(graph)
    return graph, digest


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
