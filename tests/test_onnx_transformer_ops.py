"""Opset 23's transformer operators (RMSNormalization, RotaryEmbedding) against
onnxruntime: float32 and float16, position ids fed at run time, partial and
interleaved rotation, 3-D and 4-D inputs; in kernel and sink mode. ONNX's own node
tests of these ops run in tests/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.errors import ModelError, ShapeError  # noqa: E402
from test_onnx_added_ops import _check, _prepare  # noqa: E402
from test_onnx_semantics import _model, _vi  # noqa: E402

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
    m = _model(nodes, [_vi("x4", elem, [B, H, S, D]), _vi("x3", elem, [B, S, H * D]), _vi("pos", TP.INT64, [B, S]),
                       _vi("cos_b", elem, [B, S, D // 2]), _vi("sin_b", elem, [B, S, D // 2])],
               [_vi(o, elem) for o in outs], inits, opset=23)
    pos = R.integers(0, MAXPOS, (B, S)).astype(np.int64)
    feeds = {"x4": R.standard_normal((B, H, S, D)).astype(dt), "x3": R.standard_normal((B, S, H * D)).astype(dt),
             "pos": pos, "cos_b": cos[pos[:, ::-1]], "sin_b": sin[pos[:, ::-1]]}
    _, sess = _check(m, feeds, modes=("kernel", "sink"), rtol=tol, atol=tol)
    feeds["pos"] = R.integers(0, MAXPOS, (B, S)).astype(np.int64)  # other positions, the same plan
    from test_onnx_semantics import _ort

    for k, w in _ort(m, feeds).items():
        np.testing.assert_allclose(sess.run(feeds)[k].astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)


def _rope(x_shape, cache_shape, pos_shape=(B, S), **attrs):
    ins = [_vi("x", TP.FLOAT, list(x_shape)), _vi("p", TP.INT64, list(pos_shape))]
    c = np.zeros(cache_shape, np.float32)
    return _model([N("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], name="bad", **attrs)], ins,
                  [_vi("y", TP.FLOAT)], [("c", c), ("s", c)], opset=23)


@pytest.mark.parametrize("model, match", [
    (_rope((B, S, 24), (MAXPOS, 4)), r"'bad' \(rotary_embedding\): a 3-D x .* needs num_heads"),
    (_rope((B, H, S, D), (MAXPOS, 3)), r"'bad' \(rotary_embedding\): with position_ids, the caches 'c' "
                                       r"float32\[16, 3\] must be \[max_position, 4\]"),
    (_rope((B, H, S, D), (MAXPOS, 4), rotary_embedding_dim=10), r"'bad' \(rotary_embedding\): rotary_embedding_dim "
                                                                r"10 must be even and at most the head size 8"),
    (_rope((B, H, S, D), (MAXPOS, 4), pos_shape=(B, S + 1)), r"'bad' \(rotary_embedding\): position_ids 'p'"),
    (_model([N("RMSNormalization", ["x", "s"], ["y"], name="bad", stash_type=11)], [_vi("x", TP.FLOAT, [2, 4])],
            [_vi("y", TP.FLOAT)], [("s", np.ones(4, np.float32))], opset=23),
     r"'bad' \(rms_norm\): attribute 'stash_type' 11 is not supported"),
    (_model([N("RMSNormalization", ["x", "s"], ["y"], name="bad")], [_vi("x", TP.FLOAT, [2, 4])],
            [_vi("y", TP.FLOAT)], [("s", np.ones(3, np.float32))], opset=23),
     r"'bad' \(rms_norm\): scale 's' float32\[3\] does not broadcast to x"),
])
def test_refused_forms_name_the_node(model, match):
    with pytest.raises((ModelError, ShapeError), match=match):
        _prepare(model)
