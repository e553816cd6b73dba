"""LSTM, GRU and RNN (PyTorch's nn.LSTM/nn.GRU/nn.RNN export to them) against
onnxruntime: every direction, initial states, peepholes, biases, clip, input_forget,
linear_before_reset, activations with parameters, sequence_lens fed at run time
(zero, partial and full lengths), outputs left unnamed, float16, and each launch mode.
Batchwise layout (onnxruntime refuses it) against ONNX's reference evaluator. ONNX's own
node tests of these ops run in tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core.errors import ModelError, ShapeError  # noqa: E402
import onnx_models as om  # noqa: E402

R = np.random.default_rng(2029)
N = helper.make_node
SEQ, BATCH, IN, HID = 5, 3, 4, 6


def _w(*shape, dt=np.float32):
    return (R.standard_normal(shape) * 0.5).astype(dt)


def _weights(prefix, gates, dirs, dt=np.float32, peep=False):
    inits = [(f"{prefix}W", _w(dirs, gates * HID, IN, dt=dt)), (f"{prefix}R", _w(dirs, gates * HID, HID, dt=dt)),
             (f"{prefix}B", _w(dirs, 2 * gates * HID, dt=dt))]
    if peep:
        inits.append((f"{prefix}P", _w(dirs, 3 * HID, dt=dt)))
    return inits


def _recurrent_model(elem=TP.FLOAT, dt=np.float32, opset=14):
    """Seven recurrent nodes over one x [5, 3, 4], with sequence lengths and initial
    states fed at run time."""
    nodes, inits, outs = [], [], []

    def add(op, gates, dirs, inputs, outputs, peep=False, **attrs):
        p = f"{outputs[0] or outputs[1]}_"
        inits.extend(_weights(p, gates, dirs, dt, peep))
        names = {"W": p + "W", "R": p + "R", "B": p + "B", "P": p + "P"}
        nodes.append(N(op, [names.get(i, i) for i in inputs], outputs, hidden_size=HID, **attrs))
        outs.extend(o for o in outputs if o)

    add("LSTM", 4, 1, ["x", "W", "R", "B"], ["lstm_y", "lstm_h", "lstm_c"])
    add("LSTM", 4, 2, ["x", "W", "R", "B", "lens", "h2", "c2", "P"], ["bi_y", "bi_h", "bi_c"], peep=True,
        direction="bidirectional")
    add("LSTM", 4, 1, ["x", "W", "R", "", "", "", "", "P"], ["", "rev_h"], peep=True, direction="reverse",
        clip=1.5, input_forget=1)
    add("GRU", 3, 2, ["x", "W", "R", "B", "lens", "h2"], ["gru_y", "gru_h"], direction="bidirectional")
    add("GRU", 3, 1, ["x", "W", "R", "B", "lens"], ["grul_y"], linear_before_reset=1, clip=2.0,
        direction="reverse")
    add("RNN", 1, 1, ["x", "W", "R", "B", "", "h1"], ["rnn_y", "rnn_h"],
        activations=["LeakyRelu"], activation_alpha=[0.1])
    add("LSTM", 4, 1, ["x", "W", "R", "B"], ["act_y"],
        activations=["HardSigmoid", "ScaledTanh", "Affine"], activation_alpha=[0.3, 1.2, 0.7],
        activation_beta=[0.4, 0.8, -0.1])
    state = lambda n, d: om.vi(n, elem, [d, BATCH, HID])  # noqa: E731
    m = om.model(nodes, [om.vi("x", elem, [SEQ, BATCH, IN]), om.vi("lens", TP.INT32, [BATCH]), state("h2", 2),
                       state("c2", 2), state("h1", 1)], [om.vi(o, elem) for o in outs], inits, opset)
    return m


def _feeds(dt=np.float32, lens=(5, 2, 0)):
    return {"x": _w(SEQ, BATCH, IN, dt=dt), "lens": np.array(lens, np.int32), "h2": _w(2, BATCH, HID, dt=dt),
            "c2": _w(2, BATCH, HID, dt=dt), "h1": _w(1, BATCH, HID, dt=dt)}


def test_recurrent_layers_match_onnxruntime():
    m = _recurrent_model()
    plan, sess = om.check(m, _feeds(), modes=("kernel", "fused", "sink"), rtol=1e-5, atol=1e-6)
    # the lengths arrive at run time: other lengths in the same plan (full, and partial)
    for lens in ((5, 5, 5), (1, 4, 3)):
        feeds = _feeds(lens=lens)

        want = om.run_ort(m, feeds)
        got = sess.run(feeds)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=f"{k} lens={lens}")


def test_recurrent_layers_in_float16():
    """float16 computes in float32 and rounds once; onnxruntime has no float16 LSTM, so
    the oracle is onnxruntime on the float32 model with the same (float16) values."""
    m16 = _recurrent_model(TP.FLOAT16, np.float16)
    feeds16 = _feeds(np.float16)
    m32 = onnx.helper.make_model(m16.graph, opset_imports=m16.opset_import)
    for t in m32.graph.initializer:
        a = onnx.numpy_helper.to_array(t).astype(np.float32)
        t.CopyFrom(onnx.numpy_helper.from_array(a, t.name))
    for v in list(m32.graph.input) + list(m32.graph.output):
        if v.type.tensor_type.elem_type == TP.FLOAT16:
            v.type.tensor_type.elem_type = TP.FLOAT

    try:  # (onnxruntime 1.30 fails on this model; 1.32 runs it)
        want = om.run_ort(m32, {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds16.items()})
    except Exception as e:
        pytest.skip(f"onnxruntime {ort.__version__} cannot run the float32 model: {str(e)[:200]}")
    want = {k: v.astype(np.float16) for k, v in want.items()}
    om.check(m16, feeds16, modes=("sink",), want=want, rtol=2e-3, atol=2e-3)


def test_batchwise_layout_matches_onnx_reference():
    from onnx.reference import ReferenceEvaluator

    inits = _weights("", 4, 1) + [(f"g{k}", v) for k, v in _weights("", 3, 1)]
    m = om.model([N("LSTM", ["x", "W", "R", "B", "", "h"], ["y", "yh"], hidden_size=HID, layout=1),
                N("GRU", ["x", "gW", "gR", "gB"], ["gy"], hidden_size=HID, layout=1)],
               [om.vi("x", TP.FLOAT, [BATCH, SEQ, IN]), om.vi("h", TP.FLOAT, [BATCH, 1, HID])],
               [om.vi(o, TP.FLOAT) for o in ("y", "yh", "gy")], inits, opset=14)
    feeds = {"x": _w(BATCH, SEQ, IN), "h": _w(BATCH, 1, HID)}
    want = dict(zip(["y", "yh", "gy"], ReferenceEvaluator(m).run(None, feeds)))
    plan, sess = om.check(m, feeds, modes=("sink",), want=want, rtol=1e-5, atol=1e-6)
    assert sess.run(feeds)["y"].shape == (BATCH, SEQ, 1, HID)


def _lstm(inputs, inits, x_shape=(SEQ, BATCH, IN), outputs=("y",), **attrs):
    return om.model([N("LSTM", ["x"] + inputs, list(outputs), name="bad", **attrs)],
                  [om.vi("x", TP.FLOAT, list(x_shape))], [om.vi(o, TP.UNDEFINED) for o in outputs], inits, opset=14)


_LW = _weights("", 4, 1)


@pytest.mark.parametrize("model, match", [
    (_lstm(["W", "R"], _LW[:2], direction="bidirectional"), r"'bad' \(lstm\): input R 'R' float32\[1, 24, 6\] "
                                                             r"must be \[2, 4 \* hidden, hidden\]"),
    (_lstm(["W", "R"], _LW[:2], hidden_size=7), r"'bad' \(lstm\): attribute 'hidden_size' 7 does not match R"),
    (_lstm(["W", "R"], _LW[:2], x_shape=(SEQ, BATCH, 5)), r"'bad' \(lstm\): input W 'W' float32\[1, 24, 4\] "
                                                          r"must have shape \[1, 24, 5\]"),
    (_lstm(["W", "R"], _LW[:2], activations=["Sigmoid", "Gelu", "Tanh"]),
     r"'bad' \(lstm\): activation 'Gelu' is not supported"),
    (_lstm(["W", "R"], _LW[:2], activations=["Sigmoid", "Tanh"]), r"'bad' \(lstm\).*must list 3 names"),
    (_lstm(["W", "R"], _LW[:2], activations=["Sigmoid", "Affine", "Tanh"], activation_alpha=[1.0]),
     r"'bad' \(lstm\): activation 'Affine' needs a value in 'activation_beta'"),
    (_lstm(["W", "R"], _LW[:2], direction="sideways"), r"'bad' \(lstm\).*'direction' must be forward, reverse"),
    (_lstm(["W", "R"], _LW[:2], clip=-1.0), r"'bad' \(lstm\).*'clip' must be >= 0"),
    (_lstm(["W", "", "R"], _LW[:2]), r"'bad' \(LSTM, opset 14\): inputs X, W and R are required"),
    (_lstm(["W", "R", "", "s"], _LW[:2] + [("s", np.array([1, 2, 3], np.float32))]),
     r"'bad' \(lstm\): input sequence_lens 's' float32\[3\] must be int32 \(or int64\)"),
])
def test_refused_forms_name_the_node(model, match):
    with pytest.raises((ModelError, ShapeError), match=match):
        om.prepare(model)


def test_activation_parameters_default_to_the_operators():
    """An activation with no activation_alpha/beta left takes its operator's default
    (LeakyRelu 0.01, Elu 1.0, HardSigmoid 0.2/0.5), as onnxruntime does."""
    inits = [(f"r{k}", v) for k, v in _weights("", 1, 1)] + [(f"g{k}", v) for k, v in _weights("", 3, 1)]
    m = om.model([N("RNN", ["x", "rW", "rR", "rB"], ["ry"], hidden_size=HID, activations=["LeakyRelu"]),
                N("GRU", ["x", "gW", "gR", "gB"], ["gy"], hidden_size=HID, activations=["HardSigmoid", "Elu"])],
               [om.vi("x", TP.FLOAT, [SEQ, BATCH, IN])], [om.vi("ry", TP.FLOAT), om.vi("gy", TP.FLOAT)], inits, opset=14)
    om.check(m, {"x": _w(SEQ, BATCH, IN)}, modes=("sink",), rtol=1e-5, atol=1e-6)
