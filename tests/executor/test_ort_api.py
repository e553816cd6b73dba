"""Code written for onnxruntime's InferenceSession runs on a Session unchanged: the same
calls on one ONNX model give the same names, shapes, type strings and outputs
(executor/ort_api.py); feed and argument errors are ValueError / TypeError."""

import numpy as np
import pytest

from onnx_models import N, TP, compile_onnx, model, ort, vi


@pytest.fixture(scope="module")
def pair():
    m = model([N("MatMul", ["x", "w"], ["y"]), N("Cast", ["y"], ["ids"], to=TP.INT64), N("Relu", ["y"], ["r"])],
              [vi("x", TP.FLOAT, [2, 3])], [vi("r", TP.FLOAT, [2, 4]), vi("ids", TP.INT64, [2, 4])],
              [("w", np.arange(12, dtype=np.float32).reshape(3, 4) / 7)])
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    theirs = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return compile_onnx(m)[1], theirs


def test_inputs_and_outputs_described_as_onnxruntime_describes_them(pair):
    ours, theirs = pair
    for mine, ort_args in ((ours.get_inputs(), theirs.get_inputs()), (ours.get_outputs(), theirs.get_outputs())):
        assert [(a.name, a.shape, a.type) for a in mine] == [(a.name, a.shape, a.type) for a in ort_args]
    assert [a.dtype for a in ours.get_outputs()] == [np.dtype(np.float32), np.dtype(np.int64)]


def test_run_in_onnxruntimes_order_gives_its_lists(pair):
    ours, theirs = pair
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    for names in (None, ["ids"], ["ids", "r"], []):
        got, want = ours.run(names, feeds), theirs.run(names, feeds)
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert ours.run(feeds).keys() == {"r", "ids"}  # (aotplan's own call is unchanged: a dict)


def test_model_metadata(pair):
    meta = pair[0].get_modelmeta()
    assert meta.graph_name == "m" and meta.producer_name == "aotplan" and meta.launch_mode == "sink"
    assert meta.device_memory_bytes == pair[0].memory.step_device_bytes > 0
    assert all(isinstance(v, str) for v in meta.custom_metadata_map.values())
    assert pair[0].get_providers() == ["aotplan:cpu"]


def test_feed_and_argument_errors_are_value_and_type_errors(pair, tmp_path):
    import executor

    ours = pair[0]
    x = np.zeros((2, 3), np.float32)
    cases = [
        (lambda: ours.run(["nope"], {"x": x}), ValueError, "output 'nope': no such output"),
        (lambda: ours.run("r", {"x": x}), ValueError, "output_names must be a list"),
        (lambda: ours.run(None, [x]), ValueError, "feeds must be a dict"),
        (lambda: ours.run([x]), ValueError, "run(feeds): feeds must be a dict"),
        (lambda: ours.run({"x": x[:1]}), ValueError, "input 'x': expected float32[2, 3]"),
        (lambda: executor.load(3), TypeError, "executor.load takes the path"),
        (lambda: executor.load(str(tmp_path / "p"), warmup="yes"), TypeError, "warmup must be True or False"),
        (lambda: executor.load(str(tmp_path / "p"), jobs=0), ValueError, "jobs must be None or a positive int"),
        (lambda: executor.load(str(tmp_path / "p"), device="cpu:99"), ValueError, "numbered 0-"),
    ]
    for call, kind, says in cases:
        with pytest.raises(kind, match=None) as e:
            call()
        assert says in str(e.value), (says, str(e.value))
