"""ONNX test models: build one with onnx.helper, compile it through the whole pipeline
(import -> compile -> codec -> executor) in any launch mode, run onnxruntime on it, and
compare the two. Shared by the tests under tests/onnx/ and tests/compiler/ops/."""

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper, numpy_helper  # noqa: E402

N = helper.make_node


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 8)
    return m


def vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def compile_onnx(model, launch="sink", **options):
    """Import -> compile (pipeline.Options: `launch` and any other `options`) -> codec ->
    executor: (plan, session)."""
    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline
    from compiler.frontends import onnx_import

    g = onnx_import.convert(model, name="m")
    plan = pipeline.compile_graph(g, model_json.graph_digest(g), pipeline.Options(launch=launch, **options)).plan
    return plan, executor.Session(codec.decode(codec.encode(plan)), warmup=False)


def run_aotplan(model, feeds, launch="sink", **options):
    return compile_onnx(model, launch, **options)[1].run(feeds)


def run_ort(model, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, s.run(names, feeds)))


def check(model, feeds, modes=("kernel", "sink"), rtol=1e-5, atol=1e-6, want=None, **options):
    """Compile in each launch mode, run, compare every output with `want` (default:
    onnxruntime): same dtype and shape, values within tolerance (exact for ints and bools).
    -> the last (plan, session)."""
    want = want if want is not None else run_ort(model, feeds)
    for mode in modes:
        plan, sess = compile_onnx(model, mode, **options)
        compare(sess.run(feeds), want, rtol, atol, mode)
    return plan, sess


def compare(got, want, rtol, atol, where):
    for k, w in want.items():
        g, w = got[k], np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (where, k, g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind == "f":  # NaN where the oracle has NaN
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{where}: {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{where}: {k}")


def prepare(model):
    """Import and run the shape rules (no XLA): raises the error a compile would."""
    from compiler import pipeline
    from compiler.frontends import onnx_import

    return pipeline.prepare(onnx_import.convert(model, name="m"))


def one_node(op, inputs, inits=(), opset=13, elem=TP.FLOAT, shape=(1, 2, 4, 4), **attrs):
    return model([N(op, ["x"] + list(inputs), ["y"], name="bad", **attrs)], [vi("x", elem, list(shape))],
                  [vi("y", TP.UNDEFINED)], list(inits), opset=opset)
