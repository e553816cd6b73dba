"""Real architectures from the onnx wheel, with seeded well-conditioned random weights,
through import -> compile -> replay, against onnxruntime on the same inputs; some also
after onnx.version_converter to newer opsets. The large ones are in the slow tier."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx_light  # noqa: E402

FAST = ("squeezenet", "shufflenet", "inception_v1")
SLOW = ("resnet50", "densenet121", "inception_v2", "bvlc_alexnet", "zfnet512", "vgg19")  # (CI time: resnet50 25 s)
RTOL, ATOL = 1e-4, 1e-6


def compile_model(model, name, launch="sink", **opts):
    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline
    from compiler.frontends import onnx_import

    graph = onnx_import.convert(model, name=name)
    res = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(launch=launch, **opts))
    FORMATS[name] = res.formats
    return res.plan, executor.Session(codec.decode(codec.encode(res.plan)), warmup=False)


_compiled = {}
FORMATS = {}  # model name -> the FormatStats of its last compile


def compiled(name):
    if name not in _compiled:
        m = onnx_light.load_randomized(name)
        # fused: real architectures exercise grouping, arena tensors between groups and
        # kernels shared by repeated blocks (sink is covered by the examples and node tests)
        _compiled[name] = (m,) + compile_model(m, name, launch="fused")
    return _compiled[name]


def check_against_onnxruntime(model, sess, n_inputs=3):
    xs = onnx_light.sample_inputs(onnx_light.input_shape(model), n_inputs)
    ort_sess, _ = onnx_light.run_onnxruntime(model, xs[0])
    name = onnx_light.data_input(model).name
    outs = []
    for x in xs:
        want = ort_sess.run(None, {name: x})[0]
        got = next(iter(sess.run({name: x}).values()))
        # float32 rounding of a sum scales with its terms, not with the (possibly near
        # zero) result: the absolute tolerance scales with the output's magnitude
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(want).max())))
        outs.append(want.reshape(-1))
    return outs


def check_conditioned(model):
    """The oracle is only worth something if the outputs depend on the input."""
    xs = onnx_light.sample_inputs(onnx_light.input_shape(model), 8)
    sess, _ = onnx_light.run_onnxruntime(model, xs[0])
    outs = [sess.run(None, {onnx_light.data_input(model).name: x})[0].reshape(-1).astype(np.float64) for x in xs]
    assert all(np.isfinite(o).all() for o in outs)
    if not any(n.op_type == "Softmax" for n in model.graph.node):  # logits: judge their softmax
        outs = [np.exp(o - o.max()) / np.exp(o - o.max()).sum() for o in outs]
    probs = outs
    assert len({int(p.argmax()) for p in probs}) >= 2, "argmax is the same for every input"
    assert max(float(p.max()) for p in probs) < 0.99, "softmax saturated"
    assert min(float(np.log(p + 1e-30).std()) for p in probs) > 0.01, "softmax flat"


def run(name):
    model, plan, sess = compiled(name)
    check_conditioned(model)
    check_against_onnxruntime(model, sess)
    # every weight stored as its kernel reads it: conv filters, and the transB Gemms of
    # shufflenet, inception and the AlexNet-style classifiers (compiler/constant_moves.py)
    assert FORMATS[name].constant_moves == 0, FORMATS[name]
    assert plan.launch_mode == "fused"
    assert plan.memory.lower_bound_bytes <= plan.memory.arena_bytes <= plan.memory.naive_bytes
    # with one fused group only the input and output cross: nothing to share
    assert plan.memory.arena_bytes < plan.memory.naive_bytes or len(plan.launches) == 1


@pytest.mark.parametrize("name", FAST)
def test_light_model_matches_onnxruntime(name):
    run(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_light_model_matches_onnxruntime_slow(name):
    run(name)
    _compiled.pop(name, None)  # free the big ones


@pytest.mark.parametrize("name,opset", [("squeezenet", 11), ("squeezenet", 13), ("squeezenet", 17),
                                        pytest.param("resnet50", 13, marks=pytest.mark.slow), ("shufflenet", 17)])
def test_converted_opsets_match_onnxruntime(name, opset):
    from onnx import helper, version_converter

    base = onnx.ModelProto()
    base.CopyFrom(onnx_light.load_randomized(name))
    # the converter wants initializers listed as graph inputs too (as IR 3 models did)
    base.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in base.graph.initializer)
    model = version_converter.convert_version(base, opset)
    _, sess = compile_model(model, f"{name}_opset{opset}")
    check_against_onnxruntime(model, sess, n_inputs=2)


@pytest.mark.parametrize("policy", ["default", "nhwc"])
@pytest.mark.parametrize("name", ["squeezenet", pytest.param("inception_v1", marks=pytest.mark.slow)])  # (CI time)
def test_kernel_mode_with_sharing_matches_onnxruntime(name, policy):
    """Kernel mode, where every tensor lives at its offset: in-place reuse, views and
    concat inputs placed in their concats (these two have 8 and 9 concats), against
    the outside oracle; and the same in channels-last storage (nhwc concats are not
    placed: a channel slice of NHWC is one run per pixel)."""
    model = onnx_light.load_randomized(name)
    plan, sess = compile_model(model, name, launch="kernel", format_policy=policy)
    written = {j for l in plan.launches for j in l.writes}
    if policy == "default":
        assert any(t.base >= 0 and i in written for i, t in enumerate(plan.tensors))  # placed parts
    else:
        assert sum(t.format == "nhwc" for t in plan.tensors) > 10
    assert plan.memory.shared_bound_bytes < plan.memory.plain_bound_bytes
    assert plan.arena_bytes <= plan.memory.shared_bound_bytes
    check_against_onnxruntime(model, sess, n_inputs=2)
