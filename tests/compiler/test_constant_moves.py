"""No per-step work on weights: a model.json shaped like AlexNet's classifier (Gemms
with trans_b=1, ONNX's fully connected layers) at batch 1 compiles to kernels that
transpose, copy or pad no constant (compiler/constant_moves.py counts them in the
compiled HLO), with a workspace far below one weight's size; with the weight_layout
pass off the same count finds the per-step transposes (XLA's CPU backend turns a
batch-1 dot into a vector product and transposes the (N, K) weight for it first; at
batch 2 it reads the weight in place), and the outputs agree."""

import json

import numpy as np
import pytest

import executor
from aotplan.core import codec, model_json
from compiler import constant_moves, pipeline

K, H, O = 576, 256, 100


def _classifier(d, batch):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    w = {"fc6.w": (rng.standard_normal((H, K)) / np.sqrt(K)).astype(np.float32),
         "fc6.b": (rng.standard_normal(H) * 0.1).astype(np.float32),
         "fc7.w": (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32),
         "fc8.w": (rng.standard_normal((O, H)) / np.sqrt(H)).astype(np.float32)}
    save_file(w, str(d / "weights.safetensors"))
    gemm = lambda name, x, ins: {"name": name, "op": "gemm", "inputs": [x, *ins], "outputs": [name],  # noqa: E731
                                 "attrs": {"trans_b": 1}}
    model = {"format": "aotplan.model", "version": 1, "name": "classifier",
             "inputs": [{"name": "x", "dtype": "float32", "shape": [batch, K]}], "outputs": ["fc8"],
             "nodes": [gemm("fc6", "x", ["fc6.w", "fc6.b"]),
                       {"name": "r6", "op": "relu", "inputs": ["fc6"], "outputs": ["r6"], "attrs": {}},
                       gemm("fc7", "r6", ["fc7.w"]),
                       {"name": "r7", "op": "relu", "inputs": ["fc7"], "outputs": ["r7"], "attrs": {}},
                       gemm("fc8", "r7", ["fc8.w"])],
             "weights": {"file": "weights.safetensors",
                         "tensors": [{"name": k, "dtype": "float32", "shape": list(v.shape)} for k, v in w.items()]}}
    (d / "model.json").write_text(json.dumps(model))
    x = rng.standard_normal((batch, K)).astype(np.float32)
    r6 = np.maximum(x @ w["fc6.w"].T + w["fc6.b"], 0)
    want = np.maximum(r6 @ w["fc7.w"].T, 0) @ w["fc8.w"].T
    return str(d / "model.json"), x, want


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return _classifier(tmp_path_factory.mktemp("classifier"), 1)


@pytest.mark.parametrize("launch", ["sink", "kernel"])
def test_transposed_fully_connected_weights_are_stored_as_read(classifier, launch):
    path, x, want = classifier
    graph, digest = model_json.load(path)
    on = pipeline.compile_graph(graph, digest, pipeline.Options(launch=launch))
    off = pipeline.compile_graph(graph, digest, pipeline.Options(launch=launch, disabled=frozenset({"weight_layout"})))
    assert on.formats.constant_moves == 0, on.formats
    assert off.formats.constant_moves >= 3, off.formats  # (each weight: a transpose, and its copy)
    smallest_weight = O * H * 4
    assert max(k.workspace_bytes for k in on.plan.kernels) < smallest_weight
    assert max(k.workspace_bytes for k in off.plan.kernels) >= smallest_weight
    for res in (on, off):
        got = executor.Session(codec.decode(codec.encode(res.plan)), warmup=False).run({"x": x})["fc8"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_weights_read_by_several_rows_are_stored_as_read_too(tmp_path):
    """At batch 4 the same Gemms read their weights stored (K, N) too (XLA's own dot,
    aotplan/core/xla_options.py), and nothing moves a constant per step either."""
    path, x, want = _classifier(tmp_path, 4)
    graph, digest = model_json.load(path)
    res = pipeline.compile_graph(graph, digest, pipeline.Options(launch="sink"))
    assert res.formats.constant_moves == 0, res.formats
    assert sum(t.name.endswith(":kn") for t in res.plan.tensors) == 3
    got = executor.Session(codec.decode(codec.encode(res.plan)), warmup=False).run({"x": x})["fc8"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_moves_are_followed_into_fused_computations():
    """The HLO shape XLA's CPU backend gives a weight transposed every step: the
    parameter passed to a fusion that transposes and copies it; a transpose of a
    non-constant parameter is not counted."""
    hlo = """HloModule m

%fused_computation (param_0.2: f32[4,8]) -> f32[8,4] {
  %param_0.2 = f32[4,8]{1,0} parameter(0)
  %transpose.0 = f32[8,4]{0,1} transpose(%param_0.2), dimensions={1,0}
  ROOT %copy.1 = f32[8,4]{1,0} copy(%transpose.0)
}

ENTRY %main.9 (arena.1: u32[64], args_0_.1: f32[4,8], x.1: f32[4,8]) -> f32[8,4] {
  %arena.1 = u32[64]{0} parameter(0)
  %args_0_.1 = f32[4,8]{1,0} parameter(1)
  %x.1 = f32[4,8]{1,0} parameter(2)
  %bitcast.1 = f32[4,8]{1,0} bitcast(%args_0_.1)
  %transpose_copy_fusion = f32[8,4]{1,0} fusion(%bitcast.1), kind=kLoop, calls=%fused_computation
  %transpose.2 = f32[8,4]{0,1} transpose(%x.1), dimensions={1,0}
  ROOT %add.3 = f32[8,4]{1,0} add(%transpose_copy_fusion, %transpose.2)
}
"""
    assert constant_moves.count(hlo, [1]) == 2
    assert constant_moves.count(hlo, [2]) == 1
    assert constant_moves.count(hlo, []) == 0
