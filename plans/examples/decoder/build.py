"""A tiny GPT-style decoder with a static KV cache, as ONNX (opset 24) built with onnx.helper.

    python plans/examples/decoder/build.py        # writes prefill.onnx and decode.onnx here

Two layers of pre-norm attention and MLP, learned positions, logits tied to the token
embedding. One step takes `tokens` int64[1, T] (T = PROMPT for prefill, 1 for decode),
`position` int64[1] (how many tokens the cache holds already) and each layer's cache
`past_key_L`, `past_value_L` float32[1, HEADS, CACHE, HEAD_DIM]; it writes the new keys
and values at `position` with `TensorScatter` (giving `present_key_L`, ...) and attends
with `Attention` over the whole cache, masked to the positions written so far (causal).
Run stateless (onnxruntime), `present_*` are fed back as `past_*`; compiled with
`--state present_key_0=past_key_0 ...` the cache stays on the device.

The weights come from a fixed seed, so the two files share them byte for byte.
"""

import os
import sys

import numpy as np

VOCAB, DIM, HEADS, LAYERS, CACHE, PROMPT = 64, 32, 2, 2, 32, 8
HEAD_DIM = DIM // HEADS
OPSET = 24


def weights(seed=0, cache=CACHE):
    """{name: float32 array}: the decoder's weights (fixed seed; `cache` positions)."""
    rng = np.random.default_rng(seed)
    w = {"wte": rng.normal(0, 0.5, (VOCAB, DIM)), "wpe": rng.normal(0, 0.1, (cache, DIM)),
         "lnf.g": 1 + rng.normal(0, 0.05, DIM), "lnf.b": rng.normal(0, 0.05, DIM)}
    for i in range(LAYERS):
        for name, shape in (("wq", (DIM, DIM)), ("wk", (DIM, DIM)), ("wv", (DIM, DIM)), ("wo", (DIM, DIM)),
                            ("w1", (DIM, 4 * DIM)), ("w2", (4 * DIM, DIM))):
            w[f"l{i}.{name}"] = rng.normal(0, DIM ** -0.5, shape)
        for ln in ("ln1", "ln2"):
            w[f"l{i}.{ln}.g"] = 1 + rng.normal(0, 0.05, DIM)
            w[f"l{i}.{ln}.b"] = rng.normal(0, 0.05, DIM)
    return {k: v.astype(np.float32) for k, v in w.items()}


def cache_names():
    """[(present, past)] for every layer's keys and values: the `--state` pairs."""
    return [(f"present_{kv}_{i}", f"past_{kv}_{i}") for i in range(LAYERS) for kv in ("key", "value")]


def build(tokens_per_step, seed=0, cache=CACHE):
    """-> an onnx.ModelProto of one step over `tokens_per_step` tokens, with a cache of
    `cache` positions (the example's: CACHE; benchmarks take longer ones)."""
    from onnx import TensorProto, helper, numpy_helper

    T, CACHE = tokens_per_step, cache  # noqa: N806 (the module's constant, overridden)
    nodes, inits = [], [numpy_helper.from_array(v, k) for k, v in weights(seed, cache).items()]

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    const("steps", np.arange(T, dtype=np.int64)[None, :])  # [1, T]
    const("keys_at", np.arange(CACHE, dtype=np.int64).reshape(1, 1, 1, CACHE))
    const("split_heads", np.array([1, T, HEADS, HEAD_DIM], np.int64))
    const("merge_heads", np.array([1, T, DIM], np.int64))
    const("axes_1", np.array([1], np.int64))
    const("axes_13", np.array([1, 3], np.int64))
    const("one", np.array(1, np.int64))
    # positions of this step's tokens, and the mask over the cache: a query at position
    # p attends the keys at positions <= p (those written so far, this step's included)
    pos = node("Add", ["position_col", "steps"], "positions")
    nodes.insert(0, helper.make_node("Unsqueeze", ["position", "axes_1"], ["position_col"], name="position_col"))
    node("Add", [pos, "one"], "positions_end")
    node("Unsqueeze", ["positions_end", "axes_13"], "positions_end4")  # [1, 1, T, 1]
    mask = node("Less", ["keys_at", "positions_end4"], "mask")  # [1, 1, T, CACHE]
    h = node("Add", [node("Gather", ["wte", "tokens"], "tok_emb"), node("Gather", ["wpe", pos], "pos_emb")], "h0")
    for i in range(LAYERS):
        x = node("LayerNormalization", [h, f"l{i}.ln1.g", f"l{i}.ln1.b"], f"l{i}.x1", axis=-1, epsilon=1e-5)
        heads = {}
        for p in ("q", "k", "v"):
            y = node("MatMul", [x, f"l{i}.w{p}"], f"l{i}.{p}")
            y = node("Reshape", [y, "split_heads"], f"l{i}.{p}.split")
            heads[p] = node("Transpose", [y], f"l{i}.{p}.heads", perm=[0, 2, 1, 3])  # [1, H, T, Dh]
        k = node("TensorScatter", [f"past_key_{i}", heads["k"], "position"], f"present_key_{i}", axis=-2)
        v = node("TensorScatter", [f"past_value_{i}", heads["v"], "position"], f"present_value_{i}", axis=-2)
        a = node("Attention", [heads["q"], k, v, mask], f"l{i}.attn")
        a = node("Transpose", [a], f"l{i}.attn.t", perm=[0, 2, 1, 3])
        a = node("Reshape", [a, "merge_heads"], f"l{i}.attn.merged")
        h = node("Add", [h, node("MatMul", [a, f"l{i}.wo"], f"l{i}.attn.out")], f"l{i}.h1")
        x = node("LayerNormalization", [h, f"l{i}.ln2.g", f"l{i}.ln2.b"], f"l{i}.x2", axis=-1, epsilon=1e-5)
        m = node("Gelu", [node("MatMul", [x, f"l{i}.w1"], f"l{i}.mlp.up")], f"l{i}.mlp.act")
        h = node("Add", [h, node("MatMul", [m, f"l{i}.w2"], f"l{i}.mlp.down")], f"l{i}.h2")
    x = node("LayerNormalization", [h, "lnf.g", "lnf.b"], "xf", axis=-1, epsilon=1e-5)
    node("MatMul", [x, node("Transpose", ["wte"], "wte.t", perm=[1, 0])], "logits")

    cache = [1, HEADS, CACHE, HEAD_DIM]
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("tokens", i64, [1, T]), helper.make_tensor_value_info("position", i64, [1])]
    outputs = [helper.make_tensor_value_info("logits", f32, [1, T, VOCAB])]
    for present, past in cache_names():
        inputs.append(helper.make_tensor_value_info(past, f32, cache))
        outputs.append(helper.make_tensor_value_info(present, f32, cache))
    graph = helper.make_graph(nodes, f"decoder_t{T}", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="aotplan")
    model.ir_version = 10
    return model


def main(folder=os.path.dirname(os.path.abspath(__file__))):
    import onnx

    for name, t in (("prefill", PROMPT), ("decode", 1)):
        path = os.path.join(folder, f"{name}.onnx")
        onnx.save(build(t), path)
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
