"""ONNX -> aotplan Graph.

Each ONNX node maps to one op of our library, with the semantics of the version of its
schema that the model's opset selects (`since_version`): e.g. Softmax before 13
flattens at `axis`, Slice before 10 takes attributes where later versions take inputs.
Inputs that ONNX passes as tensors but that decide shapes (Reshape's shape, Slice's
starts, ...) stay node inputs here; the compiler's `fold` pass binds them once they
are constants. Initializers and Constant nodes become constants (a graph input with an
initializer too: a note says so). An op we do not support is an error naming it and its
node: nothing is skipped silently. Checked here: tensor data holds as many elements as
its dims say, the default-domain opset is one the installed onnx knows, and each graph
output's declared element type and static dimensions match what the graph computes.

`onnx` is an optional dependency (`pip install aotplan[onnx]`).

The modules: importer (`convert`, `load`: the model as a whole), walk (nodes -> our
IR), converters with converters_nn and converters_tensor (one ONNX operator each),
control_flow (If, Loop, Scan), functions (operators defined by ONNX functions),
context (the state of one import), tensors (TensorProto and attribute decoding),
opsets (which opsets we convert).
"""

from .converters import CONVERTERS, FUNCTION_OPS, SUPPORTED_OPS
from .importer import convert, load
from .opsets import max_opset, opset_version
from .tensors import INSTALL_HINT, elem_dtype

__all__ = ["CONVERTERS", "FUNCTION_OPS", "INSTALL_HINT", "SUPPORTED_OPS", "convert", "elem_dtype", "load", "max_opset",
           "opset_version"]
