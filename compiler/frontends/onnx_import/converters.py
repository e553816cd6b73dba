"""The converter table, `CONVERTERS`: ONNX operator (default domain) -> the function
that converts one node of it (`context.Ctx` -> our nodes). The operators that map onto
one op of ours, their attributes taken as they are or by opset (`_simple`, `_binary`,
Clip, the reductions, ArgMax and ArgMin), are converted here; the others in
converters_nn (layers) and converters_tensor (shapes, indexing, dtypes). `SUPPORTED_OPS` adds the operators the
walk handles itself (Constant; If, Loop and Scan in control_flow) and those imported
as the functions ONNX defines them by (functions)."""

from . import converters_nn as nn
from . import converters_tensor as tensor


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


def _clip(c):
    a = c.take("min", "max") if c.version < 11 else {}
    c.emit("clip", c.inputs, c.single_output(), **a)


def _reduce(op, since):
    def conv(c):
        a = c.take("keepdims", "noop_with_empty_axes")
        if c.version < since and "axes" in c.attrs:
            a["axes"] = c.attrs.pop("axes")
        c.emit(op, c.inputs, c.single_output(), **a)
    return conv


def _arg(op):
    def conv(c):
        c.emit(op, c.inputs, c.single_output(), **c.take("axis", "keepdims", "select_last_index"))
    return conv


CONVERTERS = {
    "Conv": nn.conv, "BatchNormalization": nn.batchnorm, "Relu": _simple("relu"), "Add": _binary("add"),
    "Sub": _binary("sub"), "Mul": _binary("mul"), "Div": _binary("div"), "Sum": _simple("sum"),
    "Concat": tensor.concat, "Reshape": tensor.attr_or_input("reshape", "shape", 5, ("allowzero",)),
    "Flatten": _simple("flatten", ("axis",)), "Transpose": _simple("transpose", ("perm",)),
    "MaxPool": nn.pool("maxpool"), "AveragePool": nn.pool("avgpool"), "LpPool": nn.pool("lppool"),
    "GlobalAveragePool": _simple("global_avgpool"),
    "Gemm": nn.gemm, "MatMul": _simple("matmul"), "Softmax": nn.softmax_like("softmax"),
    "LogSoftmax": nn.softmax_like("log_softmax"),
    "Mod": _simple("mod", ("fmod",)), "Trilu": _simple("trilu", ("upper",)),
    "InstanceNormalization": _simple("instance_norm", ("epsilon",)), "LRN": nn.lrn, "Dropout": nn.dropout,
    "Clip": _clip, "Sigmoid": _simple("sigmoid"), "Tanh": _simple("tanh"), "Erf": _simple("erf"),
    "Pow": _binary("pow"), "Sqrt": _simple("sqrt"), "Reciprocal": _simple("reciprocal"), "Neg": _simple("neg"),
    "Exp": _simple("exp"), "Log": _simple("log"), "Where": _simple("where"), "Equal": _binary("equal"),
    "Cast": tensor.cast, "CastLike": tensor.cast_like, "Gather": _simple("gather", ("axis",)), "Slice": tensor.slice_,
    "Split": tensor.split,
    "Squeeze": tensor.attr_or_input("squeeze", "axes", 13), "Unsqueeze": tensor.attr_or_input("unsqueeze", "axes", 13),
    "Expand": _simple("expand"), "ReduceMean": _reduce("reduce_mean", 18), "ReduceSum": _reduce("reduce_sum", 13),
    "LayerNormalization": nn.layernorm, "Pad": tensor.pad, "HardSigmoid": _simple("hard_sigmoid", ("alpha", "beta")),
    "HardSwish": _simple("hard_swish"), "Einsum": _simple("einsum", ("equation",)), "Identity": _simple("identity"),
    "Shape": _simple("shape", ("start", "end")), "ConstantOfShape": tensor.constant_of_shape,
    "Abs": _simple("abs"), "Gelu": _simple("gelu", ("approximate",)),
    "LeakyRelu": _simple("leaky_relu", ("alpha",)), "PRelu": nn.prelu, "Elu": _simple("elu", ("alpha",)),
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
    "GlobalMaxPool": _simple("global_maxpool"), "Tile": tensor.tile, "Resize": nn.resize,
    "ConvTranspose": nn.conv_transpose,
    "LSTM": nn.recurrent("lstm"), "GRU": nn.recurrent("gru"), "RNN": nn.recurrent("rnn"),
    "Tan": _simple("tan"), "Asin": _simple("asin"), "Acos": _simple("acos"), "Atan": _simple("atan"),
    "Sinh": _simple("sinh"), "Cosh": _simple("cosh"), "Asinh": _simple("asinh"), "Acosh": _simple("acosh"),
    "Atanh": _simple("atanh"), "Softsign": _simple("softsign"), "Celu": _simple("celu", ("alpha",)),
    "ThresholdedRelu": _simple("thresholded_relu", ("alpha",)), "Shrink": _simple("shrink", ("bias", "lambd")),
    "IsNaN": _simple("is_nan"), "IsInf": _simple("is_inf", ("detect_negative", "detect_positive")),
    "Mean": _simple("mean"),
    "GatherElements": _simple("gather_elements", ("axis",)), "GatherND": _simple("gather_nd", ("batch_dims",)),
    "ScatterElements": _simple("scatter_elements", ("axis", "reduction")), "Scatter": _simple("scatter_elements", ("axis",)),
    "ScatterND": _simple("scatter_nd", ("reduction",)), "OneHot": tensor.one_hot,
    "Hardmax": nn.softmax_like("hardmax"), "Upsample": nn.upsample,
    "GroupNormalization": nn.group_norm,
    "Size": _simple("size"), "EyeLike": tensor.eye_like,
    "Attention": nn.attention, "GridSample": nn.grid_sample,
    "LpNormalization": _simple("lp_norm", ("axis", "p")),
    "MeanVarianceNormalization": _simple("mean_variance_norm", ("axes",)),
    "ReverseSequence": _simple("reverse_sequence", ("batch_axis", "time_axis")),
    "RMSNormalization": _simple("rms_norm", ("axis", "epsilon", "stash_type")),
    "RotaryEmbedding": _simple("rotary_embedding", ("interleaved", "num_heads", "rotary_embedding_dim")),
    "QuantizeLinear": tensor.quant("quantize_linear"), "DequantizeLinear": tensor.quant("dequantize_linear"),
    "TopK": tensor.topk, "CumSum": _simple("cumsum", ("exclusive", "reverse")),
    "Range": _simple("range", ("stash_type",)),
    "DepthToSpace": _simple("depth_to_space", ("blocksize", "mode")),
    "SpaceToDepth": _simple("space_to_depth", ("blocksize", "mode")),
}


# operators imported as the function ONNX defines them by (`functions.function_of`; any operator
# with a function body is, these are the ones ONNX's node tests check)
FUNCTION_OPS = ("AffineGrid", "BlackmanWindow", "CausalConvWithState", "CenterCropPad", "DynamicQuantizeLinear",
                "HammingWindow", "HannWindow", "LinearAttention", "NegativeLogLikelihoodLoss",
                "SoftmaxCrossEntropyLoss")
SUPPORTED_OPS = tuple(sorted(list(CONVERTERS) + ["Constant", "If", "Loop", "Scan"] + list(FUNCTION_OPS)))
