"""The state of one import: `Out`, what the walk builds (nodes, constants) and what
it knows of the whole model (the values read, its local functions, ONNX's inferred
types); `Ctx`, what a converter may do with the node it converts."""

from aotplan.core.errors import ModelError
from aotplan.core.graph import Node, freeze

from .tensors import attr_value, require_onnx, subgraphs


class Ctx:
    """What a converter may do: read attributes, add constants, emit nodes."""

    def __init__(self, node, name, version, out):
        self.node, self.name, self.version, self._out = node, name, version, out
        self.attrs = {a.name: attr_value(a, f"node {name!r} ({node.op_type})") for a in node.attribute}
        self.inputs = list(node.input)
        while self.inputs and not self.inputs[-1]:  # "" = an omitted optional input; trailing ones
            self.inputs.pop()                       # are as if not listed (Conv bias, Gemm C, ...)
        self.outputs = list(node.output)

    def fail(self, msg):
        raise ModelError(f"node {self.name!r} ({self.node.op_type}, opset {self.version}): {msg}")

    def take(self, *keys, **defaults):
        """Copy the listed attributes (if present); anything not consumed is an error later."""
        out = {}
        for k in keys:
            if k in self.attrs:
                out[k] = self.attrs.pop(k)
        for k, v in defaults.items():
            out[k] = self.attrs.pop(k, v)
        return out

    def drop(self, *keys):
        for k in keys:
            self.attrs.pop(k, None)

    def emit(self, op, inputs, outputs, suffix="", **attrs):
        """Add a node; a converter that emits several gives each a distinct `suffix`. An
        output ONNX leaves unnamed ("": nobody reads it) gets a name of its own."""
        outputs = tuple(o or f"{self.name}{suffix}:unused_output_{i}" for i, o in enumerate(outputs))
        self._out.nodes.append(Node(self.name + suffix, op, tuple(inputs), outputs, freeze(attrs)))

    def single_output(self, keep=1):
        """ONNX ops with optional extra outputs we do not compute: fine if nobody reads them."""
        for extra in self.outputs[keep:]:
            if extra and self.is_read(extra):
                self.fail(f"output {extra!r} (an optional output) is used, and it is not supported")
        return self.outputs[:keep]

    def is_read(self, name):
        """Whether a node (or a graph output) reads the value `name`."""
        return name in self._out.consumed


class Out:
    """What the walk builds into (`nodes`, `constants`), and what converters ask of the
    model: `consumed`, every value name something reads; `functions`, its local
    functions by (domain, name, overload); `types()`."""

    def __init__(self, consumed, model=None):
        self.nodes, self.constants, self.consumed = [], [], consumed
        self.model, self._types = model, None
        self.functions = {(f.domain, f.name, f.overload): f for f in model.functions} if model is not None else {}

    def types(self):
        """{value name: TypeProto} from ONNX's shape inference, computed once, for the
        operators expanded from context-dependent functions (their bodies depend on the
        input types); {} where inference fails."""
        if self._types is None:
            onnx, self._types = require_onnx(), {}
            try:
                m = onnx.shape_inference.infer_shapes(self.model)
            except Exception:
                return self._types
            graphs = [m.graph]
            while graphs:
                g = graphs.pop()
                for vi in list(g.input) + list(g.value_info) + list(g.output):
                    self._types.setdefault(vi.name, vi.type)
                for t in g.initializer:
                    self._types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, t.dims))
                graphs.extend(sub for n in g.node for _, sub in subgraphs(n))
        return self._types
