"""The ONNX front end through the CLI: import, compile .onnx directly, symbolic
dimensions, unsupported ops named, and the hint when onnx is not installed."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from aotplan.cli import main  # noqa: E402

R = np.random.default_rng(3)


def small_model(path, op_override=None, opset=13):
    """x[N,3,8,8] -> Conv -> BatchNorm -> Relu -> Shape/Gather/Reshape (dynamic-shape idiom) -> Gemm -> Softmax."""
    w = numpy_helper.from_array(R.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bn = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in
          (("s", R.random(4) + 0.5), ("b", R.standard_normal(4)), ("m", R.standard_normal(4) * 0.1), ("v", R.random(4) + 0.5))]
    fc = numpy_helper.from_array(R.standard_normal((5, 256)).astype(np.float32) * 0.05, "fc")
    idx = numpy_helper.from_array(np.array([0], np.int64), "idx")
    minus1 = numpy_helper.from_array(np.array([-1], np.int64), "minus1")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
        helper.make_node(op_override or "Relu", ["bn"], ["r"]),
        helper.make_node("Shape", ["r"], ["shp"]),
        helper.make_node("Gather", ["shp", "idx"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus1"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["r", "newshape"], ["flat"]),
        helper.make_node("Dropout", ["flat"], ["d"]),
        helper.make_node("Gemm", ["d", "fc"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], [w, *bn, fc, idx, minus1])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(m, path)
    return m


def test_compile_onnx_with_input_shape_matches_onnxruntime(tmp_path):
    model = small_model(str(tmp_path / "small.onnx"))
    out = tmp_path / "small.plan"
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "small.onnx"), "--input-shape", "x=2,3,8,8", "-o", str(out)])
    assert r.exit_code == 0, r.output
    import executor
    from compiler import pipeline

    sess = executor.load(str(out))
    # every clean-up pass (weight_layout only when the kernels are for the CPU alone)
    assert sess.plan.passes == tuple(p for p in pipeline.CLEANUP_PASSES if pipeline.Options().runs(p))
    assert [n for l in sess.plan.launches for n in l.nodes] == ["Conv_0", "Relu_2", "Reshape_6", "Gemm_8", "Softmax_9"]
    x = R.standard_normal((2, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def test_import_writes_model_json_that_compiles(tmp_path):
    small_model(str(tmp_path / "small.onnx"))
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "small.onnx"), "--input-shape", "x=1,3,8,8",
                                  "-o", str(tmp_path / "small.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "small.json").read_text())
    assert doc["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 3, 8, 8]}]
    assert (tmp_path / "small.weights.npz").exists()
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "small.json"), "-o", str(tmp_path / "s.plan")])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args,pattern", [
    ([], r"input 'x': dimension 0 is symbolic \('N'\); fix it with --input-shape x=N,3,8,8"),
    (["--input-shape", "x=2,3,9,8"], r"--input-shape gives dimension 2 = 9, the model fixes it to 8"),
    (["--input-shape", "y=2"], r"--input-shape names 'y', which is not an input"),
    (["--input-shape", "x=a,b"], r"expected NAME=D0,D1"),
])
def test_symbolic_dims_errors(tmp_path, args, pattern):
    import re

    small_model(str(tmp_path / "small.onnx"))
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "small.onnx"), "-o", str(tmp_path / "o.plan")] + args)
    assert r.exit_code == 2 and re.search(pattern, r.output), r.output


def test_unsupported_op_is_named(tmp_path):
    small_model(str(tmp_path / "m.onnx"), op_override="Selu")
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "--input-shape", "x=1,3,8,8"])
    assert r.exit_code == 2 and "node 'Selu_2': ONNX operator 'Selu' is not supported" in r.output


def test_not_an_onnx_file(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"\x00garbage" * 10)
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "bad.onnx")])
    assert r.exit_code == 2 and "not a readable ONNX model" in r.output


def test_without_onnx_installed_says_how_to_get_it(tmp_path):
    small_model(str(tmp_path / "m.onnx"))
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from aotplan.cli import run; run()")
    r = subprocess.run([sys.executable, "-c", code, "compile", str(tmp_path / "m.onnx")], capture_output=True, text=True)
    assert r.returncode == 2 and "pip install 'aotplan[onnx]'" in r.stderr, r.stderr
