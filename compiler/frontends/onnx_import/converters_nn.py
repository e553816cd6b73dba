"""Converters of the neural-network layers: convolutions and pooling, the
normalizations, Gemm, PRelu, Dropout, Softmax and its kin, Resize and Upsample,
GridSample, Attention and the recurrent layers (LSTM, GRU, RNN). Each takes the
node's `context.Ctx` and emits our op(s) with the semantics of the schema version the
model's opset selects (`c.version`)."""

from .tensors import elem_dtype


def conv(c):
    c.emit("conv", c.inputs, c.single_output(), **c.take("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape"))


def pool(op):
    def conv(c):
        keys = ["kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations"]
        keys.append({"avgpool": "count_include_pad", "maxpool": "storage_order", "lppool": "p"}[op])
        a = c.take(*keys)
        if a.get("auto_pad") == "NOTSET":
            del a["auto_pad"]
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def batchnorm(c):
    if c.attrs.pop("training_mode", 0):
        c.fail("training_mode=1 is not supported (inference only)")
    if c.version < 7 and not c.attrs.pop("is_test", 0):
        c.fail("is_test=0 (training) is not supported")
    if c.version < 9 and not c.attrs.pop("spatial", 1):
        c.fail("spatial=0 is not supported")
    c.drop("momentum", "consumed_inputs")
    c.emit("batchnorm", c.inputs, c.single_output(), **c.take("epsilon"))


def softmax_like(op):
    def conv(c):
        a = c.take("axis")
        if c.version < 13:  # Softmax/LogSoftmax before 13: x viewed as 2-D at axis (default 1)
            a.setdefault("axis", 1)
            a["legacy_flatten"] = 1
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def dropout(c):
    if c.version < 7 and not c.attrs.pop("is_test", 0):
        c.fail("is_test=0 (training) is not supported")
    if len(c.inputs) > 2 and c.inputs[2]:
        c.fail("a training_mode input is not supported (inference only)")
    c.drop("ratio", "seed")
    c.emit("identity", c.inputs[:1], c.outputs[:1])
    if c.version < 10 and len(c.outputs) > 1 and c.is_read(c.outputs[1]):
        # Dropout-1, -6, -7: the mask has the input's type (bool from opset 10), and its inference
        # value is not defined (onnxruntime gives zeros, ONNX's reference evaluator ones)
        c.fail(f"output {c.outputs[1]!r} (the mask) is used; before opset 10 its inference value is not defined "
               f"(from opset 10 it is a bool mask of all true)")
    if len(c.outputs) > 1 and c.outputs[1] and c.version >= 10:  # in inference the mask keeps everything
        c.emit("shape", c.inputs[:1], [f"{c.name}:shape"], suffix=":shape")
        c.emit("constant_of_shape", [f"{c.name}:shape"], c.outputs[1:2], suffix=":mask", value=True, dtype="bool")


def gemm(c):
    if c.version < 7:
        c.drop("broadcast")
    c.emit("gemm", c.inputs, c.single_output(),
           **{k: c.attrs.pop(o) for o, k in (("transA", "trans_a"), ("transB", "trans_b"), ("alpha", "alpha"),
                                             ("beta", "beta")) if o in c.attrs})


def layernorm(c):
    if c.attrs.pop("stash_type", 1) != 1:
        c.fail("stash_type other than 1 (float32 statistics) is not supported")
    outs = list(c.outputs)
    while outs and not outs[-1]:
        outs.pop()
    if "" in outs:  # Mean omitted but InvStdDev wanted: compute both, ignore Mean
        outs[outs.index("")] = f"{c.name}:mean"
    c.emit("layernorm", c.inputs, outs, **c.take("axis", "epsilon"))


def lrn(c):
    c.emit("lrn", c.inputs, c.single_output(), **c.take("size", "alpha", "beta", "bias"))


def conv_transpose(c):
    c.emit("conv_transpose", c.inputs, c.single_output(),
           **c.take("strides", "pads", "dilations", "group", "output_padding", "kernel_shape", "auto_pad",
                    "output_shape"))


def prelu(c):
    # PRelu before opset 7 defines no broadcasting: a slope of one element or of x's shape only
    c.emit("prelu", c.inputs, c.single_output(), **({"legacy_slope": 1} if c.version < 7 else {}))


def resize(c):
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


def upsample(c):
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


def group_norm(c):
    a = c.take("epsilon", "num_groups")
    if c.attrs.get("stash_type", 1) != 1:  # (21 adds it; 1, float32, is what we compute in)
        c.fail(f"attribute 'stash_type' {c.attrs['stash_type']} is not supported (1: float32 statistics)")
    c.attrs.pop("stash_type", None)
    if c.version < 21:  # GroupNormalization-18: scale and bias per group
        a["per_group_affine"] = 1
    c.emit("group_norm", c.inputs, c.single_output(), **a)


_ATTN_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")


def attention(c):
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


def grid_sample(c):
    a = c.take("mode", "padding_mode", "align_corners")
    if c.version < 20:  # GridSample-16: 4-D only, the modes spelt bilinear and bicubic
        a["mode"] = {"bilinear": "linear", "bicubic": "cubic"}.get(a.get("mode", "bilinear"), a.get("mode"))
    c.emit("grid_sample", c.inputs, c.single_output(), **a)


_RNN_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def recurrent(op):
    """LSTM, GRU, RNN: the inputs given, with their roles (see `_emit_with_roles`)."""
    def conv(c):
        a = c.take("activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size",
                   "layout", *(("input_forget",) if op == "lstm" else ("linear_before_reset",) if op == "gru" else ()))
        _emit_with_roles(c, op, _RNN_INPUTS if op == "lstm" else _RNN_INPUTS[:6], a)
    return conv
