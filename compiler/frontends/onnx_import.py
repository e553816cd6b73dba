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
"""

import math
import os

import numpy as np

from aotplan.core import dtypes, model_json
from aotplan.core.errors import ModelError
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

INSTALL_HINT = "ONNX import needs the onnx package: pip install 'aotplan[onnx]'"


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ModelError(INSTALL_HINT) from None
    return onnx


# ONNX TensorProto element types -> our dtype names (others are unsupported)
_ELEM = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
         10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}


def elem_dtype(elem, where):
    if elem not in _ELEM:
        onnx = _onnx()
        name = onnx.TensorProto.DataType.Name(elem) if elem in onnx.TensorProto.DataType.values() else str(elem)
        raise ModelError(f"{where}: ONNX dtype {name} is not supported (supported: {', '.join(sorted(set(_ELEM.values())))})")
    return _ELEM[elem]


def _check_data(tensor, dt, where):
    """The tensor's data holds exactly as many elements as its dims say (numpy_helper
    would fail on a reshape, or read a raw buffer of the wrong length)."""
    from onnx import helper

    dims = [int(d) for d in tensor.dims]
    desc = f"{where}: {dt}{dims}"
    if any(d < 0 for d in dims):
        raise ModelError(f"{desc} has a negative dimension")
    if tensor.HasField("segment"):
        raise ModelError(f"{where}: segmented tensors are not supported")
    n = math.prod(dims)
    if tensor.HasField("raw_data"):
        itemsize = dtypes.np_dtype(dt).itemsize
        got = len(tensor.raw_data)
        if got != n * itemsize:
            raise ModelError(f"{desc} needs {n * itemsize} bytes of raw_data ({n} elements of {itemsize} bytes), "
                             f"got {got}")
        return
    field = helper.tensor_dtype_to_field(tensor.data_type)
    got = len(getattr(tensor, field))
    if got != n:
        raise ModelError(f"{desc} needs {n} values in {field}, got {got}")


def _array(tensor, where):
    onnx = _onnx()
    from onnx import numpy_helper

    dt = elem_dtype(tensor.data_type, where)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise ModelError(f"{where}: tensors with external data are not supported; load the model with "
                         f"onnx.load(..., load_external_data=True) and save it as one file")
    _check_data(tensor, dt, where)
    arr = numpy_helper.to_array(tensor)
    want = dtypes.np_dtype(dt)
    if arr.dtype != want:
        arr = arr.view(want) if arr.dtype.itemsize == want.itemsize and arr.dtype.kind in "uV" else arr.astype(want)
    return dt, np.asarray(arr, order="C")


def _sparse_array(sp, where):
    """A SparseTensorProto, densified: `values` [NNZ] at `indices`, either [NNZ] linear
    indices or [NNZ, rank] coordinates, zeros elsewhere (as onnxruntime reads it)."""
    dims = [int(d) for d in sp.dims]
    if any(d < 0 for d in dims):
        raise ModelError(f"{where}: sparse tensor dims {dims} have a negative dimension")
    dt, vals = _array(sp.values, f"{where} values")
    _, idx = _array(sp.indices, f"{where} indices")
    n, nnz = math.prod(dims), vals.size
    if vals.ndim != 1 or idx.dtype.kind not in "iu" or idx.shape not in ((nnz,), (nnz, len(dims))):
        raise ModelError(f"{where}: sparse tensor of dims {dims} needs 1-D values and integer indices of shape "
                         f"[{nnz}] or [{nnz}, {len(dims)}], got values {list(vals.shape)} and indices "
                         f"{idx.dtype}{list(idx.shape)}")
    idx = idx.astype(np.int64)
    if idx.ndim == 2:
        if (idx < 0).any() or (idx >= np.array(dims, np.int64)).any():
            raise ModelError(f"{where}: sparse tensor indices out of range for dims {dims}")
        idx = np.ravel_multi_index(tuple(idx.T), dims) if nnz else idx.reshape(0)
    elif (idx < 0).any() or (idx >= n).any():
        raise ModelError(f"{where}: sparse tensor indices out of range for {n} elements (dims {dims})")
    dense = np.zeros(n, vals.dtype)
    dense[idx] = vals
    return dt, dense.reshape(dims)


def _attr_value(a, where):
    onnx = _onnx()
    from onnx import helper

    if a.type == onnx.AttributeProto.TENSOR:
        return _array(a.t, f"{where} attribute {a.name!r}")
    if a.type == onnx.AttributeProto.SPARSE_TENSOR:
        return _sparse_array(a.sparse_tensor, f"{where} attribute {a.name!r}")
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.SPARSE_TENSORS):
        raise ModelError(f"{where}: attribute {a.name!r} of type {a.type} is not supported")
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    elif isinstance(v, (list, tuple)):
        v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


# ---------------------------------------------------------------- per-op mapping

class _Ctx:
    """What a converter may do: read attributes, add constants, emit nodes."""

    def __init__(self, node, name, version, out):
        self.node, self.name, self.version, self._out = node, name, version, out
        self.attrs = {a.name: _attr_value(a, f"node {name!r} ({node.op_type})") for a in node.attribute}
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
            if extra and extra in self._out.consumed:
                self.fail(f"output {extra!r} (an optional output) is used, and it is not supported")
        return self.outputs[:keep]


def _simple(op, attrs=()):
    def conv(c):
        c.emit(op, c.inputs, c.single_output(), **c.take(*attrs))
    return conv


def _binary(op):
    def conv(c):
        if c.version < 7 and c.attrs.pop("broadcast", 0):
            if "axis" in c.attrs:
                c.fail("legacy broadcasting with 'axis' (opset < 7) is not supported")
        c.drop("consumed_inputs")
        c.emit(op, c.inputs, c.single_output())
    return conv


def _concat(c):
    a = c.take("axis")
    if c.version < 4:  # Concat-1: 'axis' is optional and defaults to 1 (required from opset 4)
        a.setdefault("axis", 1)
    c.emit("concat", c.inputs, c.single_output(), **a)


def _conv(c):
    c.emit("conv", c.inputs, c.single_output(), **c.take("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape"))


def _pool(op):
    def conv(c):
        keys = ["kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations"]
        keys.append({"avgpool": "count_include_pad", "maxpool": "storage_order", "lppool": "p"}[op])
        a = c.take(*keys)
        if a.get("auto_pad") == "NOTSET":
            del a["auto_pad"]
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def _batchnorm(c):
    if c.attrs.pop("training_mode", 0):
        c.fail("training_mode=1 is not supported (inference only)")
    if c.version < 7 and not c.attrs.pop("is_test", 0):
        c.fail("is_test=0 (training) is not supported")
    if c.version < 9 and not c.attrs.pop("spatial", 1):
        c.fail("spatial=0 is not supported")
    c.drop("momentum", "consumed_inputs")
    c.emit("batchnorm", c.inputs, c.single_output(), **c.take("epsilon"))


def _softmax_like(op):
    def conv(c):
        a = c.take("axis")
        if c.version < 13:  # Softmax/LogSoftmax before 13: x viewed as 2-D at axis (default 1)
            a.setdefault("axis", 1)
            a["legacy_flatten"] = 1
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def _dropout(c):
    if c.version < 7 and not c.attrs.pop("is_test", 0):
        c.fail("is_test=0 (training) is not supported")
    if len(c.inputs) > 2 and c.inputs[2]:
        c.fail("a training_mode input is not supported (inference only)")
    c.drop("ratio", "seed")
    c.emit("identity", c.inputs[:1], c.outputs[:1])
    if c.version < 10 and len(c.outputs) > 1 and c.outputs[1] in c._out.consumed:
        # Dropout-1, -6, -7: the mask has the input's type (bool from opset 10), and its inference
        # value is not defined (onnxruntime gives zeros, ONNX's reference evaluator ones)
        c.fail(f"output {c.outputs[1]!r} (the mask) is used; before opset 10 its inference value is not defined "
               f"(from opset 10 it is a bool mask of all true)")
    if len(c.outputs) > 1 and c.outputs[1] and c.version >= 10:  # in inference the mask keeps everything
        c.emit("shape", c.inputs[:1], [f"{c.name}:shape"], suffix=":shape")
        c.emit("constant_of_shape", [f"{c.name}:shape"], c.outputs[1:2], suffix=":mask", value=True, dtype="bool")


def _gemm(c):
    if c.version < 7:
        c.drop("broadcast")
    c.emit("gemm", c.inputs, c.single_output(),
           **{k: c.attrs.pop(o) for o, k in (("transA", "trans_a"), ("transB", "trans_b"), ("alpha", "alpha"),
                                             ("beta", "beta")) if o in c.attrs})


def _clip(c):
    a = c.take("min", "max") if c.version < 11 else {}
    c.emit("clip", c.inputs, c.single_output(), **a)


def _attr_or_input(op, key, since, extra=()):
    """Ops whose `key` moved from an attribute to an input in opset `since`."""
    def conv(c):
        a = c.take(*extra)
        if c.version < since and key in c.attrs:
            a[key] = c.attrs.pop(key)
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def _split(c):
    a = c.take("axis", "num_outputs")
    if c.version < 13 and "split" in c.attrs:
        a["split"] = c.attrs.pop("split")
    c.emit("split", c.inputs, c.outputs, **a)


def _slice(c):
    if c.version < 10:
        a = c.take("starts", "ends", "axes")
        c.emit("slice", c.inputs, c.single_output(), **a)
    else:
        c.emit("slice", c.inputs, c.single_output())


def _pad(c):
    a = c.take("mode")
    if c.version < 11:
        if "pads" in c.attrs:
            a["pads"] = c.attrs.pop("pads")
        if "value" in c.attrs:
            a["value"] = c.attrs.pop("value")
    if c.version < 2 and "paddings" in c.attrs:
        a["pads"] = c.attrs.pop("paddings")
    c.emit("pad", c.inputs, c.single_output(), **a)


def _reduce(op, since):
    def conv(c):
        a = c.take("keepdims", "noop_with_empty_axes")
        if c.version < since and "axes" in c.attrs:
            a["axes"] = c.attrs.pop("axes")
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def _cast(c):
    to = c.attrs.pop("to")
    if isinstance(to, str):  # Cast-1 (opset 1-5) names the type: to="FLOAT"
        onnx = _onnx()
        if to not in onnx.TensorProto.DataType.keys():
            c.fail(f"attribute 'to' {to!r} is not an ONNX data type name")
        to = onnx.TensorProto.DataType.Value(to)
    c.drop("saturate", "round_mode")
    c.emit("cast", c.inputs, c.single_output(), to=elem_dtype(to, f"node {c.name!r} (Cast) attribute 'to'"))


def _cast_like(c):
    c.drop("saturate", "round_mode")
    c.emit("cast_like", c.inputs, c.single_output())


def _constant_of_shape(c):
    a = {}
    if "value" in c.attrs:
        dt, v = c.attrs.pop("value")
        if v.size != 1:
            c.fail("attribute 'value' must hold one element")
        a = {"dtype": dt, "value": v.reshape(()).item()}
    c.emit("constant_of_shape", c.inputs, c.single_output(), **a)


def _layernorm(c):
    if c.attrs.pop("stash_type", 1) != 1:
        c.fail("stash_type other than 1 (float32 statistics) is not supported")
    outs = list(c.outputs)
    while outs and not outs[-1]:
        outs.pop()
    if "" in outs:  # Mean omitted but InvStdDev wanted: compute both, ignore Mean
        outs[outs.index("")] = f"{c.name}:mean"
    c.emit("layernorm", c.inputs, outs, **c.take("axis", "epsilon"))


def _lrn(c):
    c.emit("lrn", c.inputs, c.single_output(), **c.take("size", "alpha", "beta", "bias"))


def _conv_transpose(c):
    c.emit("conv_transpose", c.inputs, c.single_output(),
           **c.take("strides", "pads", "dilations", "group", "output_padding", "kernel_shape", "auto_pad",
                    "output_shape"))


def _prelu(c):
    # PRelu before opset 7 defines no broadcasting: a slope of one element or of x's shape only
    c.emit("prelu", c.inputs, c.single_output(), **({"legacy_slope": 1} if c.version < 7 else {}))


def _arg(op):
    def conv(c):
        c.emit(op, c.inputs, c.single_output(), **c.take("axis", "keepdims", "select_last_index"))
    return conv


def _tile(c):
    if c.version < 6:
        c.fail("Tile-1 (inputs 'tiles' and 'axis') is not supported; the model needs opset 6 or later, "
               "where Tile takes 'repeats'")
    c.emit("tile", c.inputs, c.single_output())


def _resize(c):
    if c.version >= 11:  # (X, roi, scales, sizes); attributes the op checks (compiler/ops/resize.py)
        a = c.take("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                   "extrapolation_value", *(("antialias", "axes", "keep_aspect_ratio_policy") if c.version >= 18
                                            else ()))
        if a.get("nearest_mode") == "simple":  # our op's value for Resize-10, not an ONNX one
            c.fail("attribute 'nearest_mode' 'simple' is not an ONNX value (round_prefer_floor, "
                   "round_prefer_ceil, floor, ceil)")
        c.emit("resize", c.inputs, c.single_output(), **a)
        return
    # Resize-10: (X, scales) and 'mode' only; coordinates are asymmetric, and nearest
    # rounds as onnxruntime's opset-10 kernel does (nearest_mode "simple": the op's docstring)
    if len(c.inputs) != 2:
        c.fail(f"Resize-10 takes 2 inputs (X, scales), got {len(c.inputs)}")
    a = c.take("mode")
    a.update(coordinate_transformation_mode="asymmetric", nearest_mode="simple")
    c.emit("resize", [c.inputs[0], ""] + c.inputs[1:2], c.single_output(), **a)


def _upsample(c):
    """Upsample (opsets 7-9; Resize replaced it in 10): Resize-10's semantics, which is
    what onnxruntime runs for both (asymmetric coordinates, its nearest rounding);
    Upsample-7 takes `scales` as an attribute."""
    if c.version < 7:
        c.fail("Upsample before opset 7 (height_scale/width_scale) is not supported")
    a = c.take("mode")
    a.update(coordinate_transformation_mode="asymmetric", nearest_mode="simple")
    if c.version < 9:
        if "scales" not in c.attrs:
            c.fail("attribute 'scales' is required")
        a["scales"] = c.attrs.pop("scales")
        c.emit("resize", c.inputs[:1], c.single_output(), **a)
    else:
        if len(c.inputs) != 2:
            c.fail(f"takes 2 inputs (X, scales), got {len(c.inputs)}")
        c.emit("resize", [c.inputs[0], ""] + c.inputs[1:2], c.single_output(), **a)


def _group_norm(c):
    a = c.take("epsilon", "num_groups")
    if c.attrs.get("stash_type", 1) != 1:  # (21 adds it; 1, float32, is what we compute in)
        c.fail(f"attribute 'stash_type' {c.attrs['stash_type']} is not supported (1: float32 statistics)")
    c.attrs.pop("stash_type", None)
    if c.version < 21:  # GroupNormalization-18: scale and bias per group
        a["per_group_affine"] = 1
    c.emit("group_norm", c.inputs, c.single_output(), **a)


def _quant(op):
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


def _eye_like(c):
    a = c.take("k")
    if c.attrs.get("dtype") is not None:
        a["dtype"] = elem_dtype(c.attrs.pop("dtype"), f"node {c.name!r} (EyeLike) attribute 'dtype'")
    c.emit("eye_like", c.inputs, c.single_output(), **a)


_ATTN_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")


def _attention(c):
    """Attention (opset 23+): as the recurrent layers, the inputs given with their roles."""
    a = c.take("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
               "left_window_size", "right_window_size")
    if c.attrs.get("softmax_precision") is not None:
        a["softmax_precision"] = elem_dtype(c.attrs.pop("softmax_precision"),
                                            f"node {c.name!r} (Attention) attribute 'softmax_precision'")
    _emit_with_roles(c, "attention", _ATTN_INPUTS, a)


def _emit_with_roles(c, op, role_names, a):
    """Emit `op` with the inputs given (an optional one may be "" anywhere); attribute
    `roles` names them where some are left out. Unnamed outputs at the end are left
    out."""
    if len(c.inputs) > len(role_names):
        c.fail(f"takes at most {len(role_names)} inputs, got {len(c.inputs)}")
    roles = [r for r, n in zip(role_names, c.inputs) if n]
    if roles[:3] != list(role_names[:3]):
        c.fail(f"inputs {role_names[0]}, {role_names[1]} and {role_names[2]} are required")
    if roles != list(role_names[:len(roles)]):
        a["roles"] = roles
    outs = list(c.outputs)
    while outs and not outs[-1]:
        outs.pop()
    c.emit(op, [n for n in c.inputs if n], outs, **a)


def _grid_sample(c):
    a = c.take("mode", "padding_mode", "align_corners")
    if c.version < 20:  # GridSample-16: 4-D only, the modes spelt bilinear and bicubic
        a["mode"] = {"bilinear": "linear", "bicubic": "cubic"}.get(a.get("mode", "bilinear"), a.get("mode"))
    c.emit("grid_sample", c.inputs, c.single_output(), **a)


def _one_hot(c):
    if len(c.inputs) != 3:
        c.fail(f"takes 3 inputs (indices, depth, values), got {len(c.inputs)}")
    c.emit("one_hot", [c.inputs[0], c.inputs[2], c.inputs[1]], c.single_output(), **c.take("axis"))


def _topk(c):
    a = c.take("axis", "largest", "sorted")
    if c.version < 10:  # TopK-1: k is an attribute
        a["k"] = c.attrs.pop("k", None)
    c.emit("topk", c.inputs, c.outputs, **a)


_RNN_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def _recurrent(op):
    """LSTM, GRU, RNN: the inputs given, with their roles (see `_emit_with_roles`)."""
    def conv(c):
        a = c.take("activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size",
                   "layout", *(("input_forget",) if op == "lstm" else ("linear_before_reset",) if op == "gru" else ()))
        _emit_with_roles(c, op, _RNN_INPUTS if op == "lstm" else _RNN_INPUTS[:6], a)
    return conv


CONVERTERS = {
    "Conv": _conv, "BatchNormalization": _batchnorm, "Relu": _simple("relu"), "Add": _binary("add"),
    "Sub": _binary("sub"), "Mul": _binary("mul"), "Div": _binary("div"), "Sum": _simple("sum"),
    "Concat": _concat, "Reshape": _attr_or_input("reshape", "shape", 5, ("allowzero",)),
    "Flatten": _simple("flatten", ("axis",)), "Transpose": _simple("transpose", ("perm",)),
    "MaxPool": _pool("maxpool"), "AveragePool": _pool("avgpool"), "LpPool": _pool("lppool"), "GlobalAveragePool": _simple("global_avgpool"),
    "Gemm": _gemm, "MatMul": _simple("matmul"), "Softmax": _softmax_like("softmax"), "LogSoftmax": _softmax_like("log_softmax"),
    "Mod": _simple("mod", ("fmod",)), "Trilu": _simple("trilu", ("upper",)),
    "InstanceNormalization": _simple("instance_norm", ("epsilon",)), "LRN": _lrn, "Dropout": _dropout,
    "Clip": _clip, "Sigmoid": _simple("sigmoid"), "Tanh": _simple("tanh"), "Erf": _simple("erf"),
    "Pow": _binary("pow"), "Sqrt": _simple("sqrt"), "Reciprocal": _simple("reciprocal"), "Neg": _simple("neg"),
    "Exp": _simple("exp"), "Log": _simple("log"), "Where": _simple("where"), "Equal": _binary("equal"),
    "Cast": _cast, "CastLike": _cast_like, "Gather": _simple("gather", ("axis",)), "Slice": _slice, "Split": _split,
    "Squeeze": _attr_or_input("squeeze", "axes", 13), "Unsqueeze": _attr_or_input("unsqueeze", "axes", 13),
    "Expand": _simple("expand"), "ReduceMean": _reduce("reduce_mean", 18), "ReduceSum": _reduce("reduce_sum", 13),
    "LayerNormalization": _layernorm, "Pad": _pad, "HardSigmoid": _simple("hard_sigmoid", ("alpha", "beta")),
    "HardSwish": _simple("hard_swish"), "Einsum": _simple("einsum", ("equation",)), "Identity": _simple("identity"),
    "Shape": _simple("shape", ("start", "end")), "ConstantOfShape": _constant_of_shape,
    "Abs": _simple("abs"), "Gelu": _simple("gelu", ("approximate",)),
    "LeakyRelu": _simple("leaky_relu", ("alpha",)), "PRelu": _prelu, "Elu": _simple("elu", ("alpha",)),
    "Selu": _simple("selu", ("alpha", "gamma")), "Softplus": _simple("softplus"), "Floor": _simple("floor"),
    "Ceil": _simple("ceil"), "Round": _simple("round"), "Sin": _simple("sin"), "Cos": _simple("cos"),
    "Sign": _simple("sign"), "Max": _simple("max"), "Min": _simple("min"), "Greater": _binary("greater"),
    "Less": _binary("less"), "GreaterOrEqual": _binary("greater_equal"), "LessOrEqual": _binary("less_equal"),
    "Not": _simple("not"), "And": _binary("and"), "Or": _binary("or"), "Xor": _binary("xor"),
    "ReduceMax": _reduce("reduce_max", 18), "ReduceMin": _reduce("reduce_min", 18),
    "ReduceL1": _reduce("reduce_l1", 18), "ReduceL2": _reduce("reduce_l2", 18),
    "ReduceSumSquare": _reduce("reduce_sum_square", 18), "ReduceLogSumExp": _reduce("reduce_log_sum_exp", 18),
    "Mish": _simple("mish"), "ReduceLogSum": _reduce("reduce_log_sum", 18),
    "BitwiseAnd": _simple("bitwise_and"), "BitwiseOr": _simple("bitwise_or"), "BitwiseXor": _simple("bitwise_xor"),
    "BitwiseNot": _simple("bitwise_not"), "BitShift": _simple("bit_shift", ("direction",)),
    "Swish": _simple("swish", ("alpha",)), "SwiGLU": _simple("swiglu", ("alpha",)),
    "CumProd": _simple("cumprod", ("exclusive", "reverse")),
    "TensorScatter": _simple("tensor_scatter", ("mode", "axis")),
    "ReduceProd": _reduce("reduce_prod", 18), "ArgMax": _arg("argmax"), "ArgMin": _arg("argmin"),
    "GlobalMaxPool": _simple("global_maxpool"), "Tile": _tile, "Resize": _resize,
    "ConvTranspose": _conv_transpose,
    "LSTM": _recurrent("lstm"), "GRU": _recurrent("gru"), "RNN": _recurrent("rnn"),
    "Tan": _simple("tan"), "Asin": _simple("asin"), "Acos": _simple("acos"), "Atan": _simple("atan"),
    "Sinh": _simple("sinh"), "Cosh": _simple("cosh"), "Asinh": _simple("asinh"), "Acosh": _simple("acosh"),
    "Atanh": _simple("atanh"), "Softsign": _simple("softsign"), "Celu": _simple("celu", ("alpha",)),
    "ThresholdedRelu": _simple("thresholded_relu", ("alpha",)), "Shrink": _simple("shrink", ("bias", "lambd")),
    "IsNaN": _simple("is_nan"), "IsInf": _simple("is_inf", ("detect_negative", "detect_positive")),
    "Mean": _simple("mean"),
    "GatherElements": _simple("gather_elements", ("axis",)), "GatherND": _simple("gather_nd", ("batch_dims",)),
    "ScatterElements": _simple("scatter_elements", ("axis", "reduction")), "Scatter": _simple("scatter_elements", ("axis",)),
    "ScatterND": _simple("scatter_nd", ("reduction",)), "OneHot": _one_hot,
    "Hardmax": _softmax_like("hardmax"), "Upsample": _upsample,
    "GroupNormalization": _group_norm,
    "Size": _simple("size"), "EyeLike": _eye_like,
    "Attention": _attention, "GridSample": _grid_sample,
    "LpNormalization": _simple("lp_norm", ("axis", "p")),
    "MeanVarianceNormalization": _simple("mean_variance_norm", ("axes",)),
    "ReverseSequence": _simple("reverse_sequence", ("batch_axis", "time_axis")),
    "RMSNormalization": _simple("rms_norm", ("axis", "epsilon", "stash_type")),
    "RotaryEmbedding": _simple("rotary_embedding", ("interleaved", "num_heads", "rotary_embedding_dim")),
    "QuantizeLinear": _quant("quantize_linear"), "DequantizeLinear": _quant("dequantize_linear"),
    "TopK": _topk, "CumSum": _simple("cumsum", ("exclusive", "reverse")), "Range": _simple("range", ("stash_type",)),
    "DepthToSpace": _simple("depth_to_space", ("blocksize", "mode")),
    "SpaceToDepth": _simple("space_to_depth", ("blocksize", "mode")),
}
# operators imported as the function ONNX defines them by (`_function`; any operator with a
# function body is, these are the ones ONNX's node tests check)
FUNCTION_OPS = ("AffineGrid", "BlackmanWindow", "CausalConvWithState", "CenterCropPad", "DynamicQuantizeLinear",
                "HammingWindow", "HannWindow", "LinearAttention", "NegativeLogLikelihoodLoss",
                "SoftmaxCrossEntropyLoss")
SUPPORTED_OPS = tuple(sorted(list(CONVERTERS) + ["Constant", "If", "Loop", "Scan"] + list(FUNCTION_OPS)))


class _Out:
    def __init__(self, consumed, model=None):
        self.nodes, self.constants, self.consumed = [], [], consumed
        self.model, self._types = model, None
        self.functions = {(f.domain, f.name, f.overload): f for f in model.functions} if model is not None else {}

    def types(self):
        """{value name: TypeProto} from ONNX's shape inference, computed once, for the
        operators expanded from context-dependent functions (their bodies depend on the
        input types); {} where inference fails."""
        if self._types is None:
            onnx, self._types = _onnx(), {}
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
                graphs.extend(sub for n in g.node for _, sub in _subgraphs(n))
        return self._types


def _constant_node(node, name):
    where = f"node {name!r} (Constant)"
    attrs = {a.name: a for a in node.attribute}
    if len(attrs) != 1:
        raise ModelError(f"{where}: expected exactly one value attribute, got {sorted(attrs)}")
    key, a = next(iter(attrs.items()))
    v = _attr_value(a, where)
    if key in ("value", "sparse_value"):
        return v
    if key == "value_float":
        return "float32", np.array(v, np.float32)
    if key == "value_floats":
        return "float32", np.array(v, np.float32)
    if key == "value_int":
        return "int64", np.array(v, np.int64)
    if key == "value_ints":
        return "int64", np.array(v, np.int64)
    raise ModelError(f"{where}: attribute {key!r} is not supported")


def _dims(vi, fixed, where):
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        if vi.name in fixed:
            return tuple(fixed[vi.name])
        raise ModelError(f"{where}: has no shape; fix it with --input-shape {vi.name}=D0,D1,...")
    if vi.name in fixed:
        dims = tuple(fixed[vi.name])
        if len(dims) != len(t.shape.dim):
            raise ModelError(f"{where}: --input-shape gives rank {len(dims)}, the model says rank {len(t.shape.dim)}")
        for i, (d, given) in enumerate(zip(t.shape.dim, dims)):
            if d.HasField("dim_value") and d.dim_value >= 0 and d.dim_value != given:
                raise ModelError(f"{where}: --input-shape gives dimension {i} = {given}, the model fixes it to {d.dim_value}")
        return dims
    out = []
    for i, d in enumerate(t.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            out.append(int(d.dim_value))
        else:  # (some exporters write a dynamic dimension as -1)
            what = f"symbolic ({d.dim_param or '?'!r})" if not d.HasField("dim_value") else \
                f"{d.dim_value} (dynamic)"
            raise ModelError(f"{where}: dimension {i} is {what}; fix it with "
                             f"--input-shape {vi.name}=" + ",".join(
                                 str(x.dim_value) if x.HasField("dim_value") and x.dim_value >= 0 else "N"
                                 for x in t.shape.dim))
    return tuple(out)


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
    return _onnx().defs.onnx_opset_version()


def _check_opset(opset):
    onnx = _onnx()
    top = max_opset()
    if not 1 <= opset <= top:
        raise ModelError(f"model imports ONNX opset {opset} (default domain); supported: opsets 1 to {top} "
                         f"(the newest the installed onnx {onnx.__version__} knows)")


def _type_str(dt, dims):
    return f"{dt}[{', '.join(str(d) for d in dims)}]"


def _check_outputs(graph, declared, dims_too=True):
    """Each graph output's declared element type and static dimensions agree with what
    the graph computes (our own shape rules). Symbolic or missing dimensions, a missing
    shape and an undefined element type are not checked, nor are the dimensions (the
    rank is) where `dims_too` is false: the user's --input-shape may have changed them. Needs every shape to be known
    here (the --freeze-input values are constants by now): if inference fails (an
    error that the compile reports itself, naming the node), nothing is checked.
    This is the front of `pipeline.prepare` with nothing folded but what shapes need."""
    from compiler.passes import fold, infer, schedule, validate

    try:
        g, _ = fold.run(validate.run(graph), fold_constants=False)
        info = infer.run(g, schedule.run(g))
    except Exception:  # noqa: BLE001 - the compile meets the same error and reports it properly
        return
    for vi in declared:
        t = vi.type.tensor_type
        got = info.get(vi.name)
        if got is None or not vi.type.HasField("tensor_type"):
            continue
        dt = _ELEM.get(t.elem_type)
        dt_ok = t.elem_type == 0 or dt == got.dtype
        shape_ok = True
        if t.HasField("shape"):
            dims = t.shape.dim
            shape_ok = len(dims) == len(got.shape) and (not dims_too or all(
                not d.HasField("dim_value") or d.dim_value == g_d for d, g_d in zip(dims, got.shape)))
        if dt_ok and shape_ok:
            continue
        onnx = _onnx()
        if t.elem_type == 0:
            want_dt = "?"
        elif dt is None:
            want_dt = onnx.TensorProto.DataType.Name(t.elem_type) if t.elem_type in onnx.TensorProto.DataType.values() \
                else str(t.elem_type)
        else:
            want_dt = dt
        want = _type_str(want_dt, [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                   for d in t.shape.dim]) if t.HasField("shape") else f"{want_dt} (shape not declared)"
        raise ModelError(f"output {vi.name!r}: the model declares it {want}, but the graph computes "
                         f"{_type_str(got.dtype, got.shape)}")


def _note(msg):
    """A note for the user, once per import: a warning of the `aotplan` logger (printed on
    stderr unless the application configures logging), as the executor's notes are."""
    import logging

    logging.getLogger("aotplan").warning("aotplan: %s", msg)


def convert(model, input_shapes=None, name=None, freeze=None):
    """onnx.ModelProto -> Graph. `input_shapes`: {input name: dims} for symbolic dims;
    `freeze`: Graph -> Graph, applied before the declared outputs are checked (it makes
    the --freeze-input values constants, so that every shape is known there)."""
    fixed = dict(input_shapes or {})
    g = model.graph
    opset = opset_version(model)
    _check_opset(opset)
    local = {(f.domain, f.name, f.overload) for f in model.functions}
    for o in model.opset_import:
        if o.domain not in ("", "ai.onnx") and any(n.domain == o.domain and (n.domain, n.op_type, n.overload)
                                                   not in local for n in g.node):
            raise ModelError(f"model uses operator domain {o.domain!r}, which is not supported")
    inits = {t.name: t for t in g.initializer} | {sp.values.name: sp for sp in g.sparse_initializer}
    unknown = sorted(set(fixed) - {i.name for i in g.input})
    if unknown:
        raise ModelError(f"--input-shape names {unknown[0]!r}, which is not an input of the model")
    init_inputs = [vi.name for vi in g.input if vi.name in inits]
    fixed_inits = sorted(set(fixed) & set(init_inputs))
    if fixed_inits:
        raise ModelError(f"--input-shape names {fixed_inits[0]!r}, an input with an initializer: it is imported as "
                         f"a constant of shape {list(inits[fixed_inits[0]].dims)}")
    if init_inputs and model.ir_version >= 4:
        # From IR 4 on, an input with an initializer is an input whose initializer is a default value
        # (onnxruntime lets a feed override it). Plans are frozen: we keep the value. Before IR 4 every
        # initializer had to be listed as an input, so there it says nothing.
        shown = ", ".join(repr(n) for n in init_inputs[:8]) + (f" and {len(init_inputs) - 8} more"
                                                                if len(init_inputs) > 8 else "")
        one = len(init_inputs) == 1
        _note(f"{'input' if one else f'{len(init_inputs)} inputs'} {shown} "
              f"{'has an initializer' if one else 'have initializers'}: imported as "
              f"{'a constant' if one else 'constants'} with the initializer's value (ONNX lets a runtime "
              f"feed override it; a plan cannot)")
    inputs = []
    for vi in g.input:
        if vi.name in inits:
            continue  # a constant: see above
        where = f"input {vi.name!r}"
        if not vi.type.HasField("tensor_type"):
            raise ModelError(f"{where}: only tensor inputs are supported")
        inputs.append(TensorInfo(vi.name, elem_dtype(vi.type.tensor_type.elem_type, where), _dims(vi, fixed, where)))
    out = _Out(set(_read_names(g.node, {})) | {o.name for o in g.output}, model)
    _initializers(g, out, {})
    _convert_nodes(g.node, out, opset, set(), {}, "", g)
    outputs = tuple(dict.fromkeys(o.name for o in g.output))  # an output listed twice is one output
    graph = Graph(name or g.name or "model", tuple(inputs), outputs, tuple(out.nodes), tuple(out.constants))
    if freeze is not None:
        graph = freeze(graph)
    _check_outputs(graph, g.output, dims_too=not fixed)
    return graph


def _initializers(g, out, scope):
    for t in g.initializer:
        dt, arr = _array(t, f"initializer {t.name!r}")
        out.constants.append(Constant(scope.get(t.name, t.name), dt, tuple(arr.shape), arr))
    for sp in g.sparse_initializer:  # densified: plans hold dense constants
        dt, arr = _sparse_array(sp, f"sparse initializer {sp.values.name!r}")
        out.constants.append(Constant(scope.get(sp.values.name, sp.values.name), dt, tuple(arr.shape), arr))


def _subgraphs(node):
    onnx = _onnx()
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from ((a.name, sub) for sub in a.graphs)


def _read_names(nodes, scope):
    """Every value name the nodes read, their subgraphs (If branches) included, as
    `scope` renames them: what `_Ctx.single_output` asks about."""
    for n in nodes:
        yield from (scope.get(i, i) for i in n.input if i)
        for _, sub in _subgraphs(n):
            yield from _read_names(sub.node, scope)
            yield from (scope.get(o.name, o.name) for o in sub.output)


def _renamed(node, scope):
    """The node with its value names renamed by `scope` (an If branch's own values)."""
    if not any(x in scope for x in list(node.input) + list(node.output)):
        return node
    onnx = _onnx()
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.input[:] = [scope.get(i, i) for i in node.input]
    copy.output[:] = [scope.get(o, o) for o in node.output]
    return copy


def _convert_nodes(nodes, out, opset, used_names, scope, prefix, top):
    """Convert ONNX nodes into `out`; `scope` renames the values an If branch defines
    (others are the enclosing graphs'), `prefix` its node names; `top`: the model's
    graph, for the unsupported-operator error."""
    onnx = _onnx()
    for i, node in enumerate(nodes):
        nname = prefix + (node.name or f"{node.op_type}_{i}")
        while nname in used_names:
            nname = f"{nname}_{i}"
        used_names.add(nname)
        original, node = node, _renamed(node, scope)
        if (node.domain, node.op_type, node.overload) in out.functions or (
                node.domain in ("", "ai.onnx") and node.op_type not in CONVERTERS and node.op_type not in _CONTROL
                and node.op_type != "Constant"):
            fn = _function(node, original, nname, opset, out)
            if fn is not None:
                _expand(node, nname, fn, out, used_names, top)
                continue
        if node.domain not in ("", "ai.onnx"):
            raise ModelError(f"node {nname!r}: operator {node.domain}.{node.op_type} is not supported")
        if node.op_type == "Constant":
            dt, arr = _constant_node(node, nname)
            out.constants.append(Constant(node.output[0], dt, tuple(arr.shape), np.asarray(arr, order="C")))
            continue
        if node.op_type in _CONTROL:
            _CONTROL[node.op_type](node, nname, out, opset, used_names, scope, top)
            continue
        conv = CONVERTERS.get(node.op_type)
        if conv is None:
            raise ModelError(f"node {nname!r}: ONNX operator {node.op_type!r} is not supported"
                             + _unsupported_others(top, node.op_type) + f" ({len(SUPPORTED_OPS)} are: `aotplan "
                             f"import onnx --list-ops` lists them)")
        try:
            version = onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version
        except Exception:
            version = opset
        c = _Ctx(node, nname, version, out)
        conv(c)
        c.drop("consumed_inputs")
        if c.attrs:
            c.fail(f"attribute {sorted(c.attrs)[0]!r} is not supported")


def _function(node, original, nname, opset, out):
    """The FunctionProto that defines `node`: a model-local function, or the body ONNX
    gives the operator (onnxruntime runs an operator it has no kernel for so), built from
    the input types where it depends on them; None if there is none. `original`: the node
    before a subgraph's or function's renaming (ONNX's inference names its values so)."""
    onnx = _onnx()
    local = out.functions.get((node.domain, node.op_type, node.overload))
    if local is not None:
        return local
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:
        return None
    fn = onnx.FunctionProto()
    if schema.has_function:
        v = max(v for v in schema.function_opset_versions if v <= opset)
        fn.ParseFromString(schema.get_function_with_opset_version(v))
        have = {a.name for a in fn.attribute_proto}
        fn.attribute_proto.extend(a.default_value for k, a in sorted(schema.attributes.items())  # the
                                  if k not in have and a.default_value.name)                 # schema's defaults
        return fn
    if schema.has_context_dependent_function:
        types = out.types()
        found = [types.get(i, types.get(o)) if i else onnx.TypeProto() for i, o in zip(node.input, original.input)]
        missing = [i for i, t in zip(node.input, found) if t is None]
        if missing:
            raise ModelError(f"node {nname!r} ({node.op_type}): ONNX defines it by a function that depends on its "
                             f"input types, and the type of {missing[0]!r} is unknown (ONNX's shape inference did "
                             f"not give it)")
        try:
            v = max(v for v in schema.context_dependent_function_opset_versions if v <= opset)
            fn.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                v, node.SerializeToString(), [t.SerializeToString() for t in found]))
        except Exception as e:  # the builder refuses the node (an attribute it cannot take, ...)
            raise ModelError(f"node {nname!r} ({node.op_type}): cannot expand ONNX's function for it: {e}") from None
        return fn if fn.node else None
    return None


def _expand(node, nname, fn, out, used_names, top):
    """`node` replaced by its function's nodes: the formal inputs and outputs bound to the
    node's (the scope the function's nodes, and any subgraph in them, are renamed by),
    attribute references to the node's attributes (or the function's defaults), the
    function's own values renamed `NODE:fn:NAME`; converted with the function's opset
    for the default domain."""
    onnx = _onnx()
    where = f"node {nname!r} ({node.op_type})"
    if len(node.input) > len(fn.input) or len(node.output) > len(fn.output):
        raise ModelError(f"{where}: {len(node.input)} inputs and {len(node.output)} outputs, its function "
                         f"{len(fn.input)} and {len(fn.output)}")
    bind = dict(zip(fn.input, list(node.input) + [""] * (len(fn.input) - len(node.input))))
    outs = list(node.output) + [""] * (len(fn.output) - len(node.output))
    bind.update((f, o or f"{nname}:fn:{f}") for f, o in zip(fn.output, outs))  # (the body may read one left out)
    attrs = {a.name: a for a in fn.attribute_proto} | {a.name: a for a in node.attribute}
    inner = {}
    for n in fn.node:
        for o in n.output:
            if o and o not in bind:
                inner[o] = f"{nname}:fn:{o}"
    names = bind | inner
    body = []
    for i, n in enumerate(fn.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.name = f"{n.name or n.op_type}_{i}"
        _bind_attributes(copy, attrs)
        body.append(copy)
    default = [o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")]
    _learn_types(body, names, fn, out)
    out.consumed |= set(_read_names(body, names))
    _convert_nodes(body, out, default[0] if default else opset_version(out.model), used_names, names,
                   f"{nname}:fn:", top)


def _bind_attributes(node, attrs):
    """Replace `node`'s attribute references (`ref_attr_name`) by the calling node's
    attributes `attrs`, in its subgraphs too; a reference to an attribute the call does
    not set (and has no default) is dropped: an optional attribute left unset."""
    onnx = _onnx()
    kept = []
    for a in node.attribute:
        if a.ref_attr_name:
            if a.ref_attr_name in attrs:
                b = onnx.AttributeProto()
                b.CopyFrom(attrs[a.ref_attr_name])
                b.name = a.name
                kept.append(b)
            continue
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for n in g.node:
                _bind_attributes(n, attrs)
        kept.append(a)
    del node.attribute[:]
    node.attribute.extend(kept)


def _learn_types(body, names, fn, out):
    """Add the types of a function body's values to `out.types()` (ONNX's shape inference
    on the body alone), for the context-dependent functions nested in it."""
    onnx = _onnx()
    types = out.types()
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in body for a in n.attribute):
        return  # (its subgraphs' outer names would need renaming too: no nested functions typed there)
    renamed = [_renamed(n, names) for n in body]
    reads = {x for n in renamed for x in n.input if x} - {x for n in renamed for x in n.output}
    if not all(x in types for x in reads):
        return
    g = onnx.helper.make_graph(renamed, "fn", [onnx.helper.make_value_info(x, types[x]) for x in sorted(reads)], [])
    try:
        m = onnx.shape_inference.infer_shapes(onnx.helper.make_model(g, opset_imports=list(fn.opset_import),
                                                                     functions=list(out.model.functions)))
    except Exception:
        return
    for vi in m.graph.value_info:
        types.setdefault(vi.name, vi.type)


def _if(node, nname, out, opset, used_names, scope, top):
    """ONNX If: both branches become nodes of the graph (each branch's own values renamed
    `NODE:then:NAME` / `NODE:else:NAME`), then an `if` node picks the results
    (compiler/ops/control.py: folded to one branch where the condition is constant)."""
    where = f"node {nname!r} (If)"
    branches = dict(_subgraphs(node))
    for a in node.attribute:
        if a.name not in ("then_branch", "else_branch"):
            raise ModelError(f"{where}: attribute {a.name!r} is not supported")
    for key in ("then_branch", "else_branch"):
        if key not in branches:
            raise ModelError(f"{where}: attribute {key!r} (a graph) is missing")
    if len(node.input) != 1 or not node.input[0]:
        raise ModelError(f"{where}: takes 1 input (the condition), got {len(node.input)}")
    if not node.output:
        raise ModelError(f"{where}: has no outputs")
    results = []
    for key in ("then_branch", "else_branch"):
        b, tag = branches[key], key.split("_")[0]
        if b.input:
            raise ModelError(f"{where}: {key} declares {len(b.input)} inputs; an If branch takes none")
        if len(b.output) != len(node.output):
            raise ModelError(f"{where}: {key} has {len(b.output)} outputs, the node {len(node.output)}")
        own = [t.name for t in b.initializer] + [sp.values.name for sp in b.sparse_initializer] + \
            [o for n in b.node for o in n.output if o]
        inner = dict(scope) | {x: f"{nname}:{tag}:{x}" for x in own}
        out.consumed |= set(_read_names(b.node, inner)) | {inner.get(o.name, o.name) for o in b.output}
        _initializers(b, out, inner)
        _convert_nodes(b.node, out, opset, used_names, inner, f"{nname}:{tag}:", top)
        results.append([inner.get(o.name, o.name) for o in b.output])
    out.nodes.append(Node(nname, "if", (node.input[0], *results[0], *results[1]), _outputs(node, nname), freeze({})))


def _body(node, key, nname, out, opset, used_names, scope, top):
    """A Loop's or Scan's body inlined: its own values (inputs, initializers, node
    outputs) renamed `NODE:body:NAME` -> (its input names, its output names), renamed."""
    where = f"node {nname!r} ({node.op_type})"
    graphs = dict(_subgraphs(node))
    if key not in graphs:
        raise ModelError(f"{where}: attribute {key!r} (a graph) is missing")
    b = graphs[key]
    for vi in b.input:
        if not vi.name:
            raise ModelError(f"{where}: the body has an input with no name")
    own = [vi.name for vi in b.input] + [t.name for t in b.initializer] + \
        [sp.values.name for sp in b.sparse_initializer] + [o for n in b.node for o in n.output if o]
    inner = dict(scope) | {x: f"{nname}:body:{x}" for x in own}
    out.consumed |= set(_read_names(b.node, inner)) | {inner.get(o.name, o.name) for o in b.output}
    _initializers(b, out, inner)
    _convert_nodes(b.node, out, opset, used_names, inner, f"{nname}:body:", top)
    return [inner[vi.name] for vi in b.input], [inner.get(o.name, o.name) for o in b.output]


def _fresh(used_names, name):
    """`name`, or `name_2`, ... : one no node has, reserved."""
    k, fresh = 1, name
    while fresh in used_names:
        k += 1
        fresh = f"{name}_{k}"
    used_names.add(fresh)
    return fresh


def _outputs(node, nname):
    return tuple(o or f"{nname}:unused_output_{i}" for i, o in enumerate(node.output))


def _loop(node, nname, out, opset, used_names, scope, top):
    """ONNX Loop: loop_enter, the body's nodes, loop_exit (ops/control.py); the fold pass
    unrolls it once the trip count is known (passes/unroll.py)."""
    where = f"node {nname!r} (Loop)"
    for a in node.attribute:
        if a.name != "body":
            raise ModelError(f"{where}: attribute {a.name!r} is not supported")
    if len(node.input) < 2:
        raise ModelError(f"{where}: takes at least 2 inputs (M, cond; either may be \"\"), got {len(node.input)}")
    m, cond, init = node.input[0], node.input[1], list(node.input[2:])
    if not all(init):
        raise ModelError(f"{where}: a loop-carried input is empty (\"\"): not supported")
    params, results = _body(node, "body", nname, out, opset, used_names, scope, top)
    if len(params) != 2 + len(init):
        raise ModelError(f"{where}: the body takes {len(params)} inputs; it must take 2 (iteration number, "
                         f"condition) + the {len(init)} loop-carried values")
    if len(results) < 1 + len(init):
        raise ModelError(f"{where}: the body has {len(results)} outputs; it must have 1 (condition) + the "
                         f"{len(init)} loop-carried values + any scan outputs")
    if len(node.output) != len(results) - 1:
        raise ModelError(f"{where}: has {len(node.output)} outputs; its body gives {len(init)} loop-carried values "
                         f"and {len(results) - 1 - len(init)} scan outputs")
    enter_ins = [x for x in (m, cond) if x] + init
    exit_name = _fresh(used_names, f"{nname}:exit")
    out.nodes.append(Node(nname, "loop_enter", tuple(enter_ins), tuple(params),
                          freeze({"trip_count": bool(m), "cond": bool(cond)})))
    out.nodes.append(Node(exit_name, "loop_exit", tuple(results), _outputs(node, nname),
                          freeze({"enter": nname, "kind": "loop", "n_carried": len(init)})))


def _scan(node, nname, out, opset, used_names, scope, top):
    """ONNX Scan: scan_enter, the body's nodes, loop_exit (ops/control.py,
    passes/unroll.py). Scan-8 (a batch axis first, the scan axis second, and a
    `sequence_lens` input, which must be omitted) is a Scan over the batch whose body is
    the Scan-9 form over each batch element."""
    where = f"node {nname!r} (Scan)"
    onnx = _onnx()
    old = onnx.defs.get_schema("Scan", opset, "").since_version < 9
    names = ("body", "num_scan_inputs") + (("directions",) if old else (
        "scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"))
    attrs = {a.name: a for a in node.attribute}
    for a in attrs:
        if a not in names:
            raise ModelError(f"{where}: attribute {a!r} is not supported")
    if "num_scan_inputs" not in attrs:
        raise ModelError(f"{where}: attribute 'num_scan_inputs' is required")
    inputs = list(node.input)
    if old:
        if inputs and inputs[0]:
            raise ModelError(f"{where}: input 'sequence_lens' ({inputs[0]!r}) is not supported (Scan-8); every "
                             f"sequence must run the whole length")
        inputs = inputs[1:]
    k = int(attrs["num_scan_inputs"].i)
    if not 1 <= k <= len(inputs) or not all(inputs):
        raise ModelError(f"{where}: num_scan_inputs {k} must be in [1, {len(inputs)}] (the node's inputs, none "
                         f"empty)")
    n = len(inputs) - k
    params, results = _body(node, "body", nname, out, opset, used_names, scope, top)
    if len(params) != len(inputs):
        raise ModelError(f"{where}: the body takes {len(params)} inputs; it must take the node's {len(inputs)}")
    if len(results) < n or len(node.output) != len(results):
        raise ModelError(f"{where}: has {len(node.output)} outputs and its body {len(results)}; both must be the "
                         f"{n} states + the scan outputs")
    ints = {a: list(attrs[a].ints) for a in names[2:] if a in attrs}
    if old:
        ints = {"scan_input_directions": ints.get("directions", [0] * k)}
    m, outputs = len(results) - n, _outputs(node, nname)
    for key in ("scan_input_directions", "scan_output_directions", "directions"):
        if any(d not in (0, 1) for d in ints.get(key, ())):
            raise ModelError(f"{where}: attribute {key!r} {ints[key]} must hold 0 (forward) or 1 (reverse)")
    exit_name = _fresh(used_names, f"{nname}:exit")
    if old:  # the outer Scan over the batch: every input a scan input, every output stacked
        batch, batch_exit = _fresh(used_names, f"{nname}:batch"), _fresh(used_names, f"{nname}:batch:exit")
        slices = tuple(f"{batch}:in{i}" for i in range(len(inputs)))  # (one tensor may be two inputs)
        out.nodes.append(Node(batch, "scan_enter", tuple(inputs), slices,
                              freeze({"n_carried": 0, "axes": [0] * len(inputs), "directions": [0] * len(inputs)})))
        inputs, outer_outputs = list(slices), outputs
        outputs = tuple(f"{batch}:out{i}" for i in range(len(outputs)))
    out.nodes.append(Node(nname, "scan_enter", tuple(inputs), tuple(params),
                          freeze({"n_carried": n, "axes": ints.get("scan_input_axes", [0] * k),
                                  "directions": ints.get("scan_input_directions", [0] * k)})))
    out.nodes.append(Node(exit_name, "loop_exit", tuple(results), outputs,
                          freeze({"enter": nname, "kind": "scan", "n_carried": n,
                                  "axes": ints.get("scan_output_axes", [0] * m),
                                  "directions": ints.get("scan_output_directions", [0] * m)})))
    if old:
        out.nodes.append(Node(batch_exit, "loop_exit", outputs, outer_outputs,
                              freeze({"enter": batch, "kind": "scan", "n_carried": 0, "axes": [0] * len(outputs),
                                      "directions": [0] * len(outputs)})))


_CONTROL = {"If": _if, "Loop": _loop, "Scan": _scan}


def _unsupported_others(g, first):
    """' (k nodes)' for the first unsupported operator, and '; the model also uses ...'
    for the other unsupported operators of the default domain (so that a user learns
    them all at once), with their node counts."""
    import collections

    seen = collections.Counter(n.op_type for n in g.node if n.domain in ("", "ai.onnx")
                               and n.op_type not in SUPPORTED_OPS)
    k = seen.pop(first, 1)
    count = f" ({k} nodes)" if k > 1 else ""
    if not seen:
        return count
    return count + "; the model also uses " + ", ".join(f"{op} ({k} node{'s' if k > 1 else ''})"
                                                        for op, k in sorted(seen.items())) + ", also unsupported"


def load(path, input_shapes=None, freeze=None):
    """Read an .onnx file -> (Graph, digest); `freeze`: see `convert`."""
    if not os.path.isfile(path):  # before asking for the onnx package: a typo'd path says so
        raise ModelError(f"cannot read model {path!r}: no such file")
    onnx = _onnx()
    try:
        model = onnx.load(path)
    except Exception as e:  # protobuf raises its own DecodeError, and more
        raise ModelError(f"{path}: not a readable ONNX model: {e}") from None
    if not model.graph.output:  # protobuf reads any empty message, an empty file included
        raise ModelError(f"{path}: not a usable ONNX model: its graph has no outputs"
                         + (" (the file is empty)" if os.path.getsize(path) == 0 else ""))
    graph = convert(model, input_shapes, name=os.path.splitext(os.path.basename(path))[0], freeze=freeze)
    return graph, model_json.graph_digest(graph)
