"""ONNX's own node tests as an outside oracle: load, select, run through aotplan and
through onnxruntime. Shared by tests/onnx/test_onnx_node.py and scripts/onnx_node_report.py."""

import functools
import os

import numpy as np

# The ops the ONNX issue lists (plus Constant, which every front end folds away), and
# the ones added since (Abs, Gelu; the activations, comparisons, reductions, Tile,
# Resize and ConvTranspose of real UNet/FPN/YOLO/MobileNet exports).
LISTED_OPS = frozenset("""Conv BatchNormalization Relu Add Sum Mul Sub Div Concat Reshape Flatten Transpose MaxPool
AveragePool GlobalAveragePool Gemm MatMul Softmax LRN Dropout Clip Sigmoid Tanh Erf Pow Sqrt Reciprocal Neg Exp Log
Where Equal Cast Gather Slice Split Squeeze Unsqueeze Expand ReduceMean ReduceSum LayerNormalization Pad HardSigmoid
HardSwish Einsum Identity Shape ConstantOfShape Constant
Abs Gelu LeakyRelu PRelu Elu Selu Softplus Floor Ceil Round Sin Cos Sign Max Min Greater Less GreaterOrEqual
LessOrEqual Not And Or Xor ReduceMax ReduceMin ReduceProd ArgMax ArgMin GlobalMaxPool Tile Resize
ConvTranspose
Mod Trilu LogSoftmax InstanceNormalization ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSumExp Mish
TopK CumSum Range DepthToSpace SpaceToDepth LSTM GRU RNN
Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Softsign Celu ThresholdedRelu Shrink IsNaN IsInf Mean
GatherElements GatherND ScatterElements Scatter ScatterND OneHot Hardmax Upsample GroupNormalization
QuantizeLinear DequantizeLinear RMSNormalization RotaryEmbedding Size EyeLike Attention GridSample
LpNormalization MeanVarianceNormalization ReverseSequence If Loop Scan CastLike
ReduceLogSum BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift Swish SwiGLU CumProd TensorScatter
AffineGrid CenterCropPad LinearAttention CausalConvWithState NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss
BlackmanWindow HammingWindow HannWindow DynamicQuantizeLinear LpPool""".split())

SKIP_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_node_skips.txt")


@functools.lru_cache(maxsize=1)
def all_cases():
    import warnings

    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(load_node_model_tests())


def case_ops(case):
    """The operators a case's graph uses, those of its subgraphs (If branches) too."""
    return set(_graph_ops(case.model.graph))


def _graph_ops(g):
    for n in g.node:
        yield n.op_type
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _graph_ops(sub)


def supported_cases():
    """Cases whose graphs use only the listed ops."""
    return tuple(c for c in all_cases() if case_ops(c) <= LISTED_OPS)


def skip_list():
    """{case name: reason} from the committed skip list (`name: reason` per line)."""
    out = {}
    with open(SKIP_FILE) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(":")
                out[name.strip()] = reason.strip()
    return out


def _feeds(case, inputs):
    inits = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    return {n: np.asarray(v) for n, v in zip(names, inputs)}  # some cases hold numpy scalars


def compare(case, got, want):
    """ONNX's own check: same dtype and shape, values within the case's rtol/atol."""
    names = [o.name for o in case.model.graph.output]
    for name, w in zip(names, want):
        g = got[name]
        w = np.asarray(w)
        if g.dtype != w.dtype:
            raise AssertionError(f"output {name!r}: dtype {g.dtype}, expected {w.dtype}")
        if g.shape != w.shape:
            raise AssertionError(f"output {name!r}: shape {g.shape}, expected {w.shape}")
        if w.dtype.kind in "fc" or w.dtype.name == "bfloat16":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=case.rtol, atol=case.atol,
                                       err_msg=f"output {name!r}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {name!r}")


def static_graph_inputs(graph):
    """Graph inputs whose values decide shapes (they reach some static input or a
    loop's trip count): aotplan compiles for static shapes, so these are frozen to
    constants first (as --freeze-input does)."""
    from compiler.passes import fold

    return graph.inputs_feeding(fold.shape_deciding(graph.nodes))


def run_aotplan(case):
    """Import -> compile -> codec -> executor -> compare. Raises on any difference."""
    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline
    from compiler.frontends import onnx_import

    from compiler.passes import fold

    base = onnx_import.convert(case.model, name=case.name)
    frozen = static_graph_inputs(base)
    sessions = {}
    for inputs, outputs in case.data_sets:
        feeds = _feeds(case, inputs)
        # aotplan compiles for static shapes: inputs that decide shapes (a Reshape's shape
        # fed as a graph input) are frozen to this data set's values, as --freeze-input does
        key = tuple(feeds[n].tobytes() for n in frozen)
        if key not in sessions:
            graph = fold.freeze_inputs(base, {n: feeds[n] for n in frozen})
            plan = pipeline.compile_graph(graph, model_json.graph_digest(graph)).plan
            sessions[key] = executor.Session(codec.decode(codec.encode(plan)), warmup=False)
        compare(case, sessions[key].run({k: v for k, v in feeds.items() if k not in frozen}), outputs)


def run_onnxruntime(case):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in case.model.graph.output]
    for inputs, outputs in case.data_sets:
        got = dict(zip(names, sess.run(names, _feeds(case, inputs))))
        compare(case, got, outputs)
