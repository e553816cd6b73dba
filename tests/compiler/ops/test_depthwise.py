"""Depthwise convolutions lowered as sums of shifted slices (compiler/ops/conv.py,
`_depthwise_taps`; CPU targets): the same numbers as lax.conv for every geometry and
layout, against onnxruntime through plans in every launch mode and storage format, and
no XLA convolution left in the compiled kernel."""

import types

import numpy as np
import pytest

import jax.numpy as jnp
from aotplan.core.graph import Node, freeze
from compiler.ops import conv
import onnx_models as om  # noqa: E402

R = np.random.default_rng(2032)


def _node(**attrs):
    return Node("dw", "conv", ("x", "w"), ("y",), freeze(attrs))


@pytest.mark.parametrize("shape, k, attrs", [
    ((2, 8, 9, 11), (3, 3), {}),
    ((1, 6, 10, 7), (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 5, 12, 12), (3, 3), {"strides": [2, 1], "pads": [0, 2, 1, 0], "dilations": [2, 1]}),
    ((1, 4, 9, 9), (7, 7), {"pads": [3, 3, 3, 3]}),  # ConvNeXt's 7x7
    ((1, 4, 8, 8), (5, 5), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 3, 17), (5,), {"pads": [2, 1], "dilations": [3]}),  # 1-D (a conformer's depthwise conv)
    ((1, 3, 5, 6, 7), (3, 3, 3), {"strides": [1, 2, 1], "pads": [1, 0, 1, 1, 1, 0]}),
])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("sio", [False, True])
def test_taps_equal_lax_conv(shape, k, attrs, channels_last, sio):
    c = shape[1]
    x = R.standard_normal(shape).astype(np.float32)
    w = R.standard_normal((c, 1) + k).astype(np.float32)
    b = R.standard_normal(c).astype(np.float32)
    node = _node(group=c, **attrs, **({"weight_layout": "SIO"} if sio else {}))
    wv = np.ascontiguousarray(np.moveaxis(w, (0, 1), (-1, -2))) if sio else w
    xv = np.moveaxis(x, 1, -1) if channels_last else x
    kw = {"logical": types.SimpleNamespace(shape=shape), "channels_last": True} if channels_last else {}
    want = conv.conv_lowered(node, jnp.asarray(xv), jnp.asarray(wv), jnp.asarray(b), **kw)
    assert conv.is_depthwise(node, jnp.asarray(xv), jnp.asarray(wv), k, channels_last)
    got = conv.conv_lowered(conv.with_strategy(node, depthwise_taps=True), jnp.asarray(xv), jnp.asarray(wv),
                            jnp.asarray(b), **kw)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, group, m, k, why", [
    (np.float16, 4, 4, (3, 3), "half precision: a sum of taps would round at each"),
    (np.float32, 2, 4, (3, 3), "grouped, not depthwise"),
    (np.float32, 4, 8, (3, 3), "a channel multiplier of 2"),
    (np.float32, 4, 4, (9, 9), "81 taps: past MAX_DEPTHWISE_TAPS"),
])
def test_other_convs_stay_xla_convolutions(dtype, group, m, k, why):
    x = jnp.zeros((1, 4, 12, 12), dtype)
    w = jnp.zeros((m, 4 // group) + k, dtype)
    assert not conv.is_depthwise(_node(group=group), x, w, k, False), why


def _dw_model():
    """Depthwise 3x3 (stride 2, bias) -> relu -> depthwise 5x5 dilated -> a grouped
    (not depthwise) conv, as in MobileNet/EfficientNet blocks."""
    from onnx import TensorProto as TP, helper


    N = helper.make_node
    nodes = [N("Conv", ["x", "w1", "b1"], ["a"], group=8, strides=[2, 2], pads=[1, 1, 1, 1]), N("Relu", ["a"], ["r"]),
             N("Conv", ["r", "w2"], ["d"], group=8, pads=[4, 4, 4, 4], dilations=[2, 2]),
             N("Conv", ["d", "w3"], ["y"], group=2, pads=[1, 1, 1, 1])]
    inits = [("w1", R.standard_normal((8, 1, 3, 3)).astype(np.float32)), ("b1", R.standard_normal(8).astype(np.float32)),
             ("w2", R.standard_normal((8, 1, 5, 5)).astype(np.float32)),
             ("w3", R.standard_normal((6, 4, 3, 3)).astype(np.float32))]
    return om.model(nodes, [om.vi("x", TP.FLOAT, [2, 8, 15, 13])], [om.vi("y", TP.FLOAT)], inits)


@pytest.mark.parametrize("mode, policy", [("sink", "auto"), ("sink", "default"), ("fused", "blocked"),
                                          ("kernel", "nhwc"), ("kernel", "default")])
def test_depthwise_plans_match_onnxruntime(mode, policy):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import jax


    m = _dw_model()
    x = R.standard_normal((2, 8, 15, 13)).astype(np.float32)
    _, sess = om.check(m, {"x": x}, modes=(mode,), rtol=1e-5, atol=1e-5, format_policy=policy)
    if mode == "sink" and jax.devices()[0].platform == "cpu":  # the depthwise ones are taps now
        (kernel,) = sess._kernels.values()
        assert kernel.as_text().count("convolution(") == 1, "only the grouped conv stays an XLA convolution"
