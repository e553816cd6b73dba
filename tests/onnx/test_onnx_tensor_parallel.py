"""Tensor parallel on an ONNX transformer layer written as exporters write one: MatMul +
Add projections, heads made by Reshape to [0, 0, heads, head_dim] (ONNX's 0 copies a
dimension) and Transpose, attention scaled by a Div, LayerNormalization, GELU
decomposed into Mul/Erf/Add. The sharding keeps the heads split through all of it, so
the layer costs one all-reduce per block (attention's output projection, the MLP's
second matmul), as Megatron-LM's does, on 2 and 4 devices; the compiler's own check
(every device evaluated at once under jax.vmap, compared with the model) passes."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core import model_json  # noqa: E402
from compiler import pipeline, tensor_parallel_plan  # noqa: E402
from compiler.frontends import onnx_import  # noqa: E402
from onnx_models import model, vi  # noqa: E402

B, S, H, HEADS = 1, 8, 32, 4


def _layer():
    rng = np.random.default_rng(0)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    scalar = lambda v: np.array(v, np.float32)  # noqa: E731
    inits = [("Wq", w(H, H)), ("bq", w(H)), ("Wk", w(H, H)), ("bk", w(H)), ("Wv", w(H, H)), ("bv", w(H)),
             ("Wo", w(H, H)), ("bo", w(H)), ("W1", w(H, 4 * H)), ("b1", w(4 * H)), ("W2", w(4 * H, H)), ("b2", w(H)),
             ("heads", np.array([0, 0, HEADS, H // HEADS], np.int64)), ("merge", np.array([0, 0, H], np.int64)),
             ("sqrt_d", scalar(np.sqrt(H // HEADS))), ("g", np.ones(H, np.float32)), ("beta", np.zeros(H, np.float32)),
             ("half", scalar(0.5)), ("one", scalar(1.0)), ("rsqrt2", scalar(1 / np.sqrt(2)))]
    n = helper.make_node
    nodes = []
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"W{p}"], [f"{p}_mm"]), n("Add", [f"{p}_mm", f"b{p}"], [p]),
                  n("Reshape", [p, "heads"], [f"{p}_r"]), n("Transpose", [f"{p}_r"], [f"{p}_t"], perm=[0, 2, 1, 3])]
    nodes += [n("Transpose", ["k_r"], ["k_tt"], perm=[0, 2, 3, 1]), n("MatMul", ["q_t", "k_tt"], ["qk"]),
              n("Div", ["qk", "sqrt_d"], ["scores"]), n("Softmax", ["scores"], ["probs"], axis=-1),
              n("MatMul", ["probs", "v_t"], ["ctx"]), n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              n("Reshape", ["ctx_t", "merge"], ["ctx_m"]), n("MatMul", ["ctx_m", "Wo"], ["o_mm"]),
              n("Add", ["o_mm", "bo"], ["o"]), n("Add", ["x", "o"], ["r1"]),
              n("LayerNormalization", ["r1", "g", "beta"], ["ln"], axis=-1, epsilon=1e-5),
              n("MatMul", ["ln", "W1"], ["f1_mm"]), n("Add", ["f1_mm", "b1"], ["f1"]),
              n("Mul", ["f1", "rsqrt2"], ["ge_a"]), n("Erf", ["ge_a"], ["ge_b"]), n("Add", ["ge_b", "one"], ["ge_c"]),
              n("Mul", ["f1", "ge_c"], ["ge_d"]), n("Mul", ["ge_d", "half"], ["ge"]),
              n("MatMul", ["ge", "W2"], ["f2_mm"]), n("Add", ["f2_mm", "b2"], ["f2"]), n("Add", ["ln", "f2"], ["y"])]
    return model(nodes, [vi("x", TP.FLOAT, [B, S, H])], [vi("y", TP.FLOAT, [B, S, H])], inits)


@pytest.mark.parametrize("devices", [2, 4])
def test_an_exported_transformer_layer_splits_by_heads_with_one_all_reduce_per_block(devices):
    g = onnx_import.convert(_layer(), name="layer")
    plan = tensor_parallel_plan.compile_tensor_parallel(g, model_json.graph_digest(g), pipeline.Options(launch="fused"),
                                                        devices).plan  # (checked against the model under vmap)
    T = plan.tensors
    assert [(c.op, [T[i].name for i in c.reads]) for c in plan.mesh.collectives] == [
        ("all_reduce", ["o_mm"]), ("all_reduce", ["f2_mm"])]
    # (no all-gather: the heads stayed split through reshape, transpose, softmax and the GELU's ops)
    assert {T[s.tensor].name for s in plan.mesh.shardings if s.kind == "partial"} == {"o_mm", "f2_mm"}
    whole = sum(a.nbytes for a in (_arrays(_layer())))
    assert plan.memory.constant_pool_bytes < whole / devices * 1.1 + 1024  # (the biases and norms replicated)


def _arrays(m):
    from onnx import numpy_helper

    return [numpy_helper.to_array(t) for t in m.graph.initializer if t.data_type == TP.FLOAT]


@pytest.mark.parametrize("kv_heads", [4, 2])  # (multi-head, and grouped-query: 2 query heads per key head)
def test_an_attention_node_attends_with_each_devices_heads(kv_heads):
    rng = np.random.default_rng(1)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    d = H // HEADS
    n = helper.make_node
    nodes = [n("MatMul", ["x", "Wq"], ["q"]), n("MatMul", ["x", "Wk"], ["k"]), n("MatMul", ["x", "Wv"], ["v"]),
             n("Attention", ["q", "k", "v"], ["a"], q_num_heads=HEADS, kv_num_heads=kv_heads, is_causal=1),
             n("MatMul", ["a", "Wo"], ["y"])]
    inits = [("Wq", w(H, H)), ("Wk", w(H, kv_heads * d)), ("Wv", w(H, kv_heads * d)), ("Wo", w(H, H))]
    m = model(nodes, [vi("x", TP.FLOAT, [B, S, H])], [vi("y", TP.FLOAT, [B, S, H])], inits, opset=23)
    g = onnx_import.convert(m, name="attn")
    plan = tensor_parallel_plan.compile_tensor_parallel(g, model_json.graph_digest(g), pipeline.Options(launch="fused"),
                                                        2).plan  # (checked against the model under vmap)
    assert [c.op for c in plan.mesh.collectives] == ["all_reduce"]  # (the output projection's, nothing gathered)
