"""The default-domain opset: the one a model imports (`opset_version`), and the ones we
convert (1 to `max_opset`, what the installed onnx package has schemas for)."""

from aotplan.core.errors import ModelError

from .tensors import require_onnx


def opset_version(model):
    """The default domain's opset the model imports; ModelError where it imports none
    (an ONNX model must: onnxruntime refuses one without, and no opset can be assumed)."""
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    raise ModelError("model imports no opset of the default ONNX domain (its opset_import lists "
                     + (", ".join(repr(o.domain) for o in model.opset_import) or "none")
                     + "): re-export it with an opset")


def max_opset():
    """The newest default-domain opset we convert: the newest the installed onnx package
    has schemas for (each node is converted with the schema its opset selects)."""
    return require_onnx().defs.onnx_opset_version()


def check_opset(opset):
    """ModelError unless `opset` is one we convert."""
    onnx = require_onnx()
    top = max_opset()
    if not 1 <= opset <= top:
        raise ModelError(f"model imports ONNX opset {opset} (default domain); supported: opsets 1 to {top} "
                         f"(the newest the installed onnx {onnx.__version__} knows)")
