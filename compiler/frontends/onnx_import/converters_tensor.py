"""Converters of the tensor operators whose ONNX forms need more than a rename:
shapes (Reshape, Squeeze, Unsqueeze, Concat, Split, Slice, Pad, Tile), indexing
(OneHot, TopK) and dtypes (Cast, CastLike, QuantizeLinear, DequantizeLinear,
ConstantOfShape, EyeLike). Each takes the node's `context.Ctx` and emits our op with
the semantics of the schema version the model's opset selects (`c.version`)."""

from .tensors import elem_dtype, require_onnx


def attr_or_input(op, key, since, extra=()):
    """Ops whose `key` moved from an attribute to an input in opset `since`."""
    def conv(c):
        a = c.take(*extra)
        if c.version < since and key in c.attrs:
            a[key] = c.attrs.pop(key)
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def concat(c):
    a = c.take("axis")
    if c.version < 4:  # Concat-1: 'axis' is optional and defaults to 1 (required from opset 4)
        a.setdefault("axis", 1)
    c.emit("concat", c.inputs, c.single_output(), **a)


def split(c):
    a = c.take("axis", "num_outputs")
    if c.version < 13 and "split" in c.attrs:
        a["split"] = c.attrs.pop("split")
    c.emit("split", c.inputs, c.outputs, **a)


def slice_(c):
    if c.version < 10:
        a = c.take("starts", "ends", "axes")
        c.emit("slice", c.inputs, c.single_output(), **a)
    else:
        c.emit("slice", c.inputs, c.single_output())


def pad(c):
    a = c.take("mode")
    if c.version < 11:
        if "pads" in c.attrs:
            a["pads"] = c.attrs.pop("pads")
        if "value" in c.attrs:
            a["value"] = c.attrs.pop("value")
    if c.version < 2 and "paddings" in c.attrs:
        a["pads"] = c.attrs.pop("paddings")
    c.emit("pad", c.inputs, c.single_output(), **a)


def tile(c):
    if c.version < 6:
        c.fail("Tile-1 (inputs 'tiles' and 'axis') is not supported; the model needs opset 6 or later, "
               "where Tile takes 'repeats'")
    c.emit("tile", c.inputs, c.single_output())


def one_hot(c):
    if len(c.inputs) != 3:
        c.fail(f"takes 3 inputs (indices, depth, values), got {len(c.inputs)}")
    c.emit("one_hot", [c.inputs[0], c.inputs[2], c.inputs[1]], c.single_output(), **c.take("axis"))


def topk(c):
    a = c.take("axis", "largest", "sorted")
    if c.version < 10:  # TopK-1: k is an attribute
        a["k"] = c.attrs.pop("k", None)
    c.emit("topk", c.inputs, c.outputs, **a)


def cast(c):
    to = c.attrs.pop("to")
    if isinstance(to, str):  # Cast-1 (opset 1-5) names the type: to="FLOAT"
        onnx = require_onnx()
        if to not in onnx.TensorProto.DataType.keys():
            c.fail(f"attribute 'to' {to!r} is not an ONNX data type name")
        to = onnx.TensorProto.DataType.Value(to)
    c.drop("saturate", "round_mode")
    c.emit("cast", c.inputs, c.single_output(), to=elem_dtype(to, f"node {c.name!r} (Cast) attribute 'to'"))


def cast_like(c):
    c.drop("saturate", "round_mode")
    c.emit("cast_like", c.inputs, c.single_output())


def quant(op):
    """QuantizeLinear, DequantizeLinear: ONNX's type attributes become dtype names."""
    def conv(c):
        a = c.take("axis", "block_size")
        for key in ("output_dtype", "precision"):
            if c.attrs.get(key):  # (0: not given)
                a[key] = elem_dtype(c.attrs.pop(key), f"node {c.name!r} ({c.node.op_type}) attribute {key!r}")
            c.attrs.pop(key, None)
        if c.attrs.get("saturate", 1) == 1:  # (float8 only; 1 is its default)
            c.attrs.pop("saturate", None)
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def constant_of_shape(c):
    a = {}
    if "value" in c.attrs:
        dt, v = c.attrs.pop("value")
        if v.size != 1:
            c.fail("attribute 'value' must hold one element")
        a = {"dtype": dt, "value": v.reshape(()).item()}
    c.emit("constant_of_shape", c.inputs, c.single_output(), **a)


def eye_like(c):
    a = c.take("k")
    if c.attrs.get("dtype") is not None:
        a["dtype"] = elem_dtype(c.attrs.pop("dtype"), f"node {c.name!r} (EyeLike) attribute 'dtype'")
    c.emit("eye_like", c.inputs, c.single_output(), **a)
