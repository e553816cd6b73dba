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
    assert sess.plan.passes == tuple(p for p in pipeline.CLEANUP_PASSES if pipeline.resolve(pipeline.Options()).runs(p))
    model_nodes = [n for l in sess.plan.launches for n in l.nodes if not n.startswith("transdata:")]  # formats aside
    assert model_nodes == ["Conv_0", "Relu_2", "Reshape_6", "Gemm_8", "Softmax_9"]
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
    assert (tmp_path / "small.weights.safetensors").exists()
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
    # NonZero: its output's shape depends on the values, which a static plan cannot hold
    small_model(str(tmp_path / "m.onnx"), op_override="NonZero")  # (Selu, Mish, Celu until they were added)
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "--input-shape", "x=1,3,8,8"])
    assert r.exit_code == 2 and "node 'NonZero_2': ONNX operator 'NonZero' is not supported" in r.output


def test_not_an_onnx_file(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"\x00garbage" * 10)
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "bad.onnx")])
    assert r.exit_code == 2 and "not a readable ONNX model" in r.output


def test_empty_file_is_not_a_model(tmp_path):
    """Protobuf reads an empty file as an empty model: import wrote a model.json of
    nothing, and compile said only that the model had no outputs."""
    (tmp_path / "empty.onnx").write_bytes(b"")
    for args in (["import", "onnx", str(tmp_path / "empty.onnx"), "-o", str(tmp_path / "out.json")],
                 ["compile", str(tmp_path / "empty.onnx"), "-o", str(tmp_path / "e.plan")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "empty.onnx: not a usable ONNX model: its graph has no outputs (the file is " \
                                    "empty)" in r.output, r.output
    assert sorted(os.listdir(tmp_path)) == ["empty.onnx"]


def test_without_onnx_installed_says_how_to_get_it(tmp_path):
    small_model(str(tmp_path / "m.onnx"))
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from aotplan.cli import run; run()")
    r = subprocess.run([sys.executable, "-c", code, "compile", str(tmp_path / "m.onnx")], capture_output=True, text=True)
    assert r.returncode == 2 and "pip install 'aotplan[onnx]'" in r.stderr, r.stderr


# ------------------------------------------------------------ malformed models

def _tiny(path, nodes, inputs=None, outputs=None, inits=(), opset=13, ir_version=None):
    """x FLOAT[1,4] -> nodes -> y FLOAT[1,4] unless told otherwise."""
    g = helper.make_graph(nodes, "tiny", inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        m.ir_version = ir_version
    onnx.save(m, str(path))
    return m


def _raw_tensor(name, dims, raw):
    """A float TensorProto with raw_data of any length (helper.make_tensor refuses a wrong one)."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    t.raw_data = raw
    return t


def _compile(path, *args):
    return CliRunner().invoke(main, ["compile", str(path), "-o", str(path) + ".plan", *args])


@pytest.mark.parametrize("case,message", [
    ("raw", "initializer 'w': float32[4] needs 16 bytes of raw_data (4 elements of 4 bytes), got 8"),
    ("typed", "initializer 'w': float32[4] needs 4 values in float_data, got 2"),
    ("constant_raw", "node 'Constant_0' (Constant) attribute 'value': float32[4] needs 16 bytes of raw_data "
                     "(4 elements of 4 bytes), got 8"),
    ("constant_typed", "node 'Constant_0' (Constant) attribute 'value': float32[4] needs 4 values in float_data, "
                       "got 5"),
])
def test_tensor_data_of_the_wrong_size_is_a_model_error(tmp_path, case, message):
    add = helper.make_node("Add", ["x", "w"], ["y"])
    if case == "raw":
        _tiny(tmp_path / "m.onnx", [add], inits=[_raw_tensor("w", [4], np.zeros(2, np.float32).tobytes())])
    elif case == "typed":
        _tiny(tmp_path / "m.onnx", [add], inits=[TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4],
                                                             float_data=[1.0, 2.0])])
    else:
        t = (_raw_tensor("c", [4], np.zeros(2, np.float32).tobytes()) if case == "constant_raw" else
             TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[4], float_data=[1, 2, 3, 4, 5]))
        _tiny(tmp_path / "m.onnx", [helper.make_node("Constant", [], ["w"], value=t), add])
    r = _compile(tmp_path / "m.onnx")
    assert r.exit_code == 2 and f"error: {message}" in r.output, r.output


def test_declared_output_type_must_match_the_graph(tmp_path):
    relu = helper.make_node("Relu", ["x"], ["y"])
    for elem, dims, want in ((TensorProto.INT32, [7, 7], "int32[7, 7]"), (TensorProto.INT32, [1, 4], "int32[1, 4]"),
                             (TensorProto.INT32, None, "int32 (shape not declared)"),
                             (TensorProto.FLOAT, [7, 7], "float32[7, 7]"),
                             (TensorProto.FLOAT, [1, 4, 1], "float32[1, 4, 1]"),
                             (TensorProto.FLOAT, ["N", 5], "float32[N, 5]"), (TensorProto.FLOAT, [], "float32[]")):
        _tiny(tmp_path / "m.onnx", [relu], outputs=[helper.make_tensor_value_info("y", elem, dims)])
        r = _compile(tmp_path / "m.onnx")
        assert r.exit_code == 2 and (f"error: output 'y': the model declares it {want}, but the graph computes "
                                     f"float32[1, 4]") in r.output, (dims, r.output)


def test_declared_output_with_symbolic_or_unknown_dims_is_fine(tmp_path):
    relu = helper.make_node("Relu", ["x"], ["y"])
    for out in (helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "M"]),
                helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None]),
                helper.make_tensor_value_info("y", TensorProto.FLOAT, None),  # no shape at all
                helper.make_tensor_value_info("y", TensorProto.UNDEFINED, [1, 4])):
        _tiny(tmp_path / "m.onnx", [relu], outputs=[out])
        r = _compile(tmp_path / "m.onnx")
        assert r.exit_code == 0, (out, r.output)


def test_declared_output_with_a_given_input_shape(tmp_path):
    """--input-shape may change what the declared dimensions were written for: then the
    output's element type and rank are checked, not its dimensions."""
    small_model(str(tmp_path / "small.onnx"))  # y is declared [N, 5]: any batch matches
    assert _compile(tmp_path / "small.onnx", "--input-shape", "x=3,3,8,8").exit_code == 0
    m = onnx.load(str(tmp_path / "small.onnx"))
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1  # now declared [1, 5]
    onnx.save(m, str(tmp_path / "b1.onnx"))
    assert _compile(tmp_path / "b1.onnx", "--input-shape", "x=1,3,8,8").exit_code == 0
    assert _compile(tmp_path / "b1.onnx", "--input-shape", "x=3,3,8,8").exit_code == 0
    m.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 1  # declared [1, 5, 1]: rank 3
    onnx.save(m, str(tmp_path / "r3.onnx"))
    r = _compile(tmp_path / "r3.onnx", "--input-shape", "x=3,3,8,8")
    assert r.exit_code == 2 and "output 'y': the model declares it float32[1, 5, 1], but the graph computes " \
                                "float32[3, 5]" in r.output, r.output


def test_opset_beyond_the_known_ones_is_refused(tmp_path):
    relu = helper.make_node("Relu", ["x"], ["y"])
    top = onnx.defs.onnx_opset_version()
    _tiny(tmp_path / "m.onnx", [relu], opset=top)
    assert _compile(tmp_path / "m.onnx").exit_code == 0
    for opset in (top + 1, 99):
        _tiny(tmp_path / "m.onnx", [relu], opset=opset)
        r = _compile(tmp_path / "m.onnx")
        assert r.exit_code == 2 and (f"error: model imports ONNX opset {opset} (default domain); supported: "
                                     f"opsets 1 to {top}") in r.output, r.output


def test_input_with_an_initializer_becomes_a_constant_and_says_so(tmp_path, caplog):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])
    init = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    add = helper.make_node("Add", ["x", "w"], ["y"])
    _tiny(tmp_path / "m.onnx", [add], inputs=[x, w], inits=[init], ir_version=8)
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    note = ("aotplan: input 'w' has an initializer: imported as a constant with the initializer's value "
            "(ONNX lets a runtime feed override it; a plan cannot)")
    # a warning of the `aotplan` logger, as the executor's notes (on stderr unless logging is configured)
    got = [(rec.name, rec.levelname, rec.getMessage()) for rec in caplog.records]
    assert got == [("aotplan.import", "WARNING", note)]
    caplog.clear()
    doc = json.loads((tmp_path / "m.json").read_text())
    assert [t["name"] for t in doc["inputs"]] == ["x"]
    r = subprocess.run([sys.executable, "-m", "aotplan.cli", "import", "onnx", str(tmp_path / "m.onnx"), "-o",
                        str(tmp_path / "p.json")], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.count(note) == 1, r.stderr  # the CLI prints it
    assert doc["constants"] == [{"name": "w", "dtype": "float32", "shape": [4], "value": [0.0, 1.0, 2.0, 3.0]}]
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "n.json"),
                                  "--input-shape", "w=4"])
    assert r.exit_code == 2 and "--input-shape names 'w', an input with an initializer" in r.output, r.output
    # before IR 4 every initializer had to be listed as an input: nothing to say
    _tiny(tmp_path / "old.onnx", [add], inputs=[x, w], inits=[init], ir_version=3)
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "old.onnx"), "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 0 and not caplog.records, (r.output, caplog.records)


def test_import_without_weights_does_not_name_a_weights_file(tmp_path):
    _tiny(tmp_path / "ok.onnx", [helper.make_node("Relu", ["x"], ["y"])])
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "ok.onnx"), "-o", str(tmp_path / "ok.json")])
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "ok.weights.safetensors").exists()
    assert "weights in" not in r.output and "no weights file" in r.output, r.output


def test_negative_input_dimension_is_dynamic(tmp_path):
    """Some exporters write a dynamic dimension as -1: it asks for --input-shape, as a
    symbolic one does (it passed import, then compile failed with an internal error)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 4])
    _tiny(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], inputs=[x],
          outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4])])
    for cmd in (["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.json")],
                ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.plan")]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 2, r.output
        assert "input 'x': dimension 0 is -1 (dynamic); fix it with --input-shape x=N,4" in r.output, r.output
    r = _compile(tmp_path / "m.onnx", "--input-shape", "x=3,4")
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.plan"]


def test_import_checks_the_graph_as_compile_does(tmp_path):
    """`import` wrote a model.json that `compile` then refused (a cycle, an input no one
    produces): now the same error, and no file."""
    cycle = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Neg", ["a"], ["y"])]
    _tiny(tmp_path / "m.onnx", cycle)
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "graph has a cycle: 'Add_0' -> 'Relu_1' -> 'Add_0'" in r.output, r.output
    assert os.listdir(tmp_path) == ["m.onnx"]


def test_model_without_a_default_opset_is_refused(tmp_path):
    """No opset_import for the default domain: opset 1 was assumed, silently (onnxruntime
    refuses such a model)."""
    m = _tiny(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])])
    del m.opset_import[:]
    onnx.save(m, str(tmp_path / "m.onnx"))
    r = _compile(tmp_path / "m.onnx")
    assert r.exit_code == 2 and "model imports no opset of the default ONNX domain (its opset_import lists none)" \
        in r.output, r.output


def test_import_freezes_a_shape_deciding_input(tmp_path):
    """A Reshape whose shape is a graph input: `import onnx --freeze-input` writes a
    model.json with that input as a constant, and the plan compiled from it gives
    onnxruntime's numbers (the import had no --freeze-input, though its error named it)."""
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    _tiny(tmp_path / "m.onnx", [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
          inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]), s],
          outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    np.save(tmp_path / "s.npy", np.array([2, 2], np.int64))
    cmd = ["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.json")]
    r = CliRunner().invoke(main, cmd)
    assert r.exit_code == 2 and "input 's' (shape) must be known at compile time" in r.output, r.output
    assert "--freeze-input" in r.output, r.output
    r = CliRunner().invoke(main, cmd + ["--freeze-input", f"s={tmp_path / 's.npy'}"])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "m.json").read_text())
    assert [t["name"] for t in doc["inputs"]] == ["x"], doc["inputs"]
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "s.npy"),
                                  "--freeze-input", f"s={tmp_path / 's.npy'}"])
    assert r.exit_code == 2 and "--freeze-input s file" in r.output, r.output
    plan = str(tmp_path / "m.plan")
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.json"), "-o", plan])
    assert r.exit_code == 0, r.output
    import executor

    x = R.standard_normal((1, 4)).astype(np.float32)
    got = executor.load(plan).run({"x": x})["y"]
    want = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x, "s": np.array([2, 2], np.int64)})[0]
    np.testing.assert_array_equal(got, want)


def test_declared_outputs_are_checked_after_freezing(tmp_path):
    """The declared output shape was not checked when an input that decides shapes was
    frozen (inference failed before the freeze, so the check was skipped): now it runs
    after it, for import and compile alike."""
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    _tiny(tmp_path / "m.onnx", [helper.make_node("Reshape", ["x", "s"], ["y"])],
          inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]), s],
          outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    np.save(tmp_path / "s.npy", np.array([4, 1], np.int64))
    freeze = ["--freeze-input", f"s={tmp_path / 's.npy'}"]
    for cmd in (["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.json")],
                ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.plan")]):
        r = CliRunner().invoke(main, cmd + freeze)
        assert r.exit_code == 2 and "output 'y'" in r.output and "float32[2, 2]" in r.output, r.output
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "s.npy"]


def test_every_unsupported_operator_is_named_at_once(tmp_path):
    """Only the first unsupported operator was named: a user removed it and met the next."""
    nodes = [helper.make_node("NonZero", ["x"], ["a"]), helper.make_node("Unique", ["a"], ["b"]),
             helper.make_node("NonZero", ["b"], ["c"]), helper.make_node("NonZero", ["c"], ["y"])]
    _tiny(tmp_path / "m.onnx", nodes)
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.plan")])
    assert r.exit_code == 2, r.output
    assert ("node 'NonZero_0': ONNX operator 'NonZero' is not supported (3 nodes); the model also uses Unique "
            "(1 node), also unsupported (") in r.output, r.output
    assert "`aotplan import onnx --list-ops` lists them" in r.output and len(r.output) < 300, r.output
    r = CliRunner().invoke(main, ["import", "onnx", "--list-ops"])
    from compiler.frontends import onnx_import

    n = len(onnx_import.SUPPORTED_OPS)
    assert r.exit_code == 0 and f"{n} ONNX operators" in r.output and "LSTM," in r.output, r.output
    assert r.output.count(",") == n - 1, r.output  # each once
