"""Opset 23's transformer operators (RMSNormalization, RotaryEmbedding, Attention)
against onnxruntime: float32 and float16, position ids fed at run time, partial and
interleaved rotation, 3-D and 4-D inputs; attention with GQA, masks, a KV cache,
softcap, every extra output, padding lengths fed at run time, a fully masked row, and
(against ONNX's reference) opset 25's windows. ONNX's own node tests of these ops run
in tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core.errors import ModelError, ShapeError  # noqa: E402
import onnx_models as om  # noqa: E402

R = np.random.default_rng(2032)
N = helper.make_node
B, H, S, D, MAXPOS = 2, 3, 5, 8, 16


def _caches(dt, half):
    ang = np.arange(MAXPOS)[:, None] / (10000 ** (np.arange(half) / half))[None, :]
    return np.cos(ang).astype(dt), np.sin(ang).astype(dt)


@pytest.mark.parametrize("elem, dt, tol", [(TP.FLOAT, np.float32, 1e-6), (TP.FLOAT16, np.float16, 2e-3)])
def test_rms_norm_and_rotary_embedding_match_onnxruntime(elem, dt, tol):
    cos, sin = _caches(dt, D // 2)
    cos_p, sin_p = _caches(dt, 2)  # rotary_embedding_dim 4
    nodes = [
        N("RMSNormalization", ["x4", "scale"], ["rms"], epsilon=1e-3),
        N("RMSNormalization", ["x4", "scale2"], ["rms_ax"], axis=2),
        N("RotaryEmbedding", ["x4", "cos", "sin", "pos"], ["rope"]),
        N("RotaryEmbedding", ["x4", "cos", "sin", "pos"], ["rope_il"], interleaved=1),
        N("RotaryEmbedding", ["x3", "cos_p", "sin_p", "pos"], ["rope_3d"], num_heads=H, rotary_embedding_dim=4),
        N("RotaryEmbedding", ["x4", "cos_b", "sin_b"], ["rope_nopos"], interleaved=1),
    ]
    outs = [n.output[0] for n in nodes]
    inits = [("scale", R.standard_normal(D).astype(dt)), ("scale2", R.standard_normal((S, D)).astype(dt)),
             ("cos", cos), ("sin", sin), ("cos_p", cos_p), ("sin_p", sin_p)]
    m = om.model(nodes, [om.vi("x4", elem, [B, H, S, D]), om.vi("x3", elem, [B, S, H * D]), om.vi("pos", TP.INT64, [B, S]),
                       om.vi("cos_b", elem, [B, S, D // 2]), om.vi("sin_b", elem, [B, S, D // 2])],
               [om.vi(o, elem) for o in outs], inits, opset=23)
    pos = R.integers(0, MAXPOS, (B, S)).astype(np.int64)
    feeds = {"x4": R.standard_normal((B, H, S, D)).astype(dt), "x3": R.standard_normal((B, S, H * D)).astype(dt),
             "pos": pos, "cos_b": cos[pos[:, ::-1]], "sin_b": sin[pos[:, ::-1]]}
    _, sess = om.check(m, feeds, modes=("kernel", "sink"), rtol=tol, atol=tol)
    feeds["pos"] = R.integers(0, MAXPOS, (B, S)).astype(np.int64)  # other positions, the same plan

    for k, w in om.run_ort(m, feeds).items():
        np.testing.assert_allclose(sess.run(feeds)[k].astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)


def _rope(x_shape, cache_shape, pos_shape=(B, S), **attrs):
    ins = [om.vi("x", TP.FLOAT, list(x_shape)), om.vi("p", TP.INT64, list(pos_shape))]
    c = np.zeros(cache_shape, np.float32)
    return om.model([N("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], name="bad", **attrs)], ins,
                  [om.vi("y", TP.FLOAT)], [("c", c), ("s", c)], opset=23)


@pytest.mark.parametrize("model, match", [
    (_rope((B, S, 24), (MAXPOS, 4)), r"'bad' \(rotary_embedding\): a 3-D x .* needs num_heads"),
    (_rope((B, H, S, D), (MAXPOS, 3)), r"'bad' \(rotary_embedding\): with position_ids, the caches 'c' "
                                       r"float32\[16, 3\] must be \[max_position, 4\]"),
    (_rope((B, H, S, D), (MAXPOS, 4), rotary_embedding_dim=10), r"'bad' \(rotary_embedding\): rotary_embedding_dim "
                                                                r"10 must be even and at most the head size 8"),
    (_rope((B, H, S, D), (MAXPOS, 4), pos_shape=(B, S + 1)), r"'bad' \(rotary_embedding\): position_ids 'p'"),
    (om.model([N("RMSNormalization", ["x", "s"], ["y"], name="bad", stash_type=11)], [om.vi("x", TP.FLOAT, [2, 4])],
            [om.vi("y", TP.FLOAT)], [("s", np.ones(4, np.float32))], opset=23),
     r"'bad' \(rms_norm\): attribute 'stash_type' 11 is not supported"),
    (om.model([N("RMSNormalization", ["x", "s"], ["y"], name="bad")], [om.vi("x", TP.FLOAT, [2, 4])],
            [om.vi("y", TP.FLOAT)], [("s", np.ones(3, np.float32))], opset=23),
     r"'bad' \(rms_norm\): scale 's' float32\[3\] does not broadcast to x"),
])
def test_refused_forms_name_the_node(model, match):
    with pytest.raises((ModelError, ShapeError), match=match):
        om.prepare(model)


def _attention_model(opset=24):
    """Five Attention nodes: GQA with a causal bool mask and a KV cache (every output),
    the probabilities (mode 3) with a scale, 3-D inputs with a float mask and a
    softcap (the scores before it, mode 0, and after it, mode 1), and padding given by
    nonpad_kv_seqlen, fed at run time."""
    nodes = [
        N("Attention", ["q", "k", "v", "bmask", "pk", "pv"], ["y_gqa", "pres_k", "pres_v", "qk_bias"], is_causal=1,
          qk_matmul_output_mode=2),
        N("Attention", ["q", "k", "v"], ["y_probs", "", "", "probs"], qk_matmul_output_mode=3, scale=0.2),
        N("Attention", ["q3", "k3", "v3", "fmask"], ["y_3d", "", "", "qk_raw"], q_num_heads=4, kv_num_heads=2,
          softcap=2.0),  # (mode 0 with a softcap: the scores before it)
        N("Attention", ["q3", "k3", "v3"], ["y_3d_cap", "", "", "qk_cap"], q_num_heads=4, kv_num_heads=2,
          softcap=1.5, qk_matmul_output_mode=1),
        N("Attention", ["q", "k", "v", "", "", "", "lens"], ["y_pad"], is_causal=1),
    ]
    F = TP.FLOAT
    ins = [om.vi("q", F, [2, 4, 3, 8]), om.vi("k", F, [2, 2, 5, 8]), om.vi("v", F, [2, 2, 5, 6]),
           om.vi("pk", F, [2, 2, 4, 8]), om.vi("pv", F, [2, 2, 4, 6]), om.vi("bmask", TP.BOOL, [2, 1, 3, 9]),
           om.vi("q3", F, [2, 3, 32]), om.vi("k3", F, [2, 5, 16]), om.vi("v3", F, [2, 5, 12]), om.vi("fmask", F, [3, 5]),
           om.vi("lens", TP.INT64, [2])]
    outs = ["y_gqa", "pres_k", "pres_v", "qk_bias", "y_probs", "probs", "y_3d", "qk_raw", "y_3d_cap", "qk_cap",
            "y_pad"]
    return om.model(nodes, ins, [om.vi(o, F) for o in outs], opset=opset)


def _attention_feeds(lens=(5, 3)):
    f = lambda *s: R.standard_normal(s).astype(np.float32)  # noqa: E731
    bmask = R.random((2, 1, 3, 9)) > 0.3
    bmask[1, 0, 0, :] = False  # a query row with no key: zeros, not NaN
    return {"q": f(2, 4, 3, 8), "k": f(2, 2, 5, 8), "v": f(2, 2, 5, 6), "pk": f(2, 2, 4, 8), "pv": f(2, 2, 4, 6),
            "bmask": bmask, "q3": f(2, 3, 32), "k3": f(2, 5, 16), "v3": f(2, 5, 12), "fmask": f(3, 5),
            "lens": np.array(lens, np.int64)}


def _ort_attention(m, feeds):
    """onnxruntime's outputs, its -FLT_MAX for a masked score (mode 2's output) read as
    the -inf that ONNX's reference and we give."""

    out = om.run_ort(m, feeds)
    out["qk_bias"] = np.where(out["qk_bias"] <= np.finfo(np.float32).min, -np.inf, out["qk_bias"])
    return out


def test_attention_matches_onnxruntime():
    m = _attention_model()
    feeds = _attention_feeds()
    _, sess = om.check(m, feeds, modes=("kernel", "fused", "sink"), want=_ort_attention(m, feeds), rtol=1e-5, atol=1e-6)
    feeds = _attention_feeds(lens=(2, 5))  # other padding, the same plan
    got = sess.run(feeds)
    for k, w in _ort_attention(m, feeds).items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=k)
    assert not np.isnan(got["y_gqa"]).any() and not got["y_gqa"][1, :, 0].any()


def test_attention_sliding_window_matches_onnx_reference():
    """Opset 25's windows, and a mask shorter than the keys (onnxruntime 1.32 has
    neither)."""
    from onnx.reference import ReferenceEvaluator

    F = TP.FLOAT
    m = om.model([N("Attention", ["q", "k", "v"], ["y"], is_causal=1, left_window_size=2),
                N("Attention", ["q", "k", "v", "m"], ["y2"], left_window_size=1, right_window_size=1)],
               [om.vi("q", F, [1, 2, 6, 4]), om.vi("k", F, [1, 2, 6, 4]), om.vi("v", F, [1, 2, 6, 4]),
                om.vi("m", TP.BOOL, [6, 4])], [om.vi("y", F), om.vi("y2", F)], opset=25)
    feeds = {n: R.standard_normal((1, 2, 6, 4)).astype(np.float32) for n in "qkv"}
    feeds["m"] = R.random((6, 4)) > 0.2  # shorter than the 6 keys: padded with False
    want = dict(zip(["y", "y2"], ReferenceEvaluator(m).run(None, feeds)))
    om.check(m, feeds, modes=("sink",), want=want, rtol=1e-5, atol=1e-6)
