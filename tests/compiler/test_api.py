"""`compiler.compile(model, ...) -> Plan` and `plan.save(path)` (compiler/api.py): the
command's pipeline from Python, the same plan file byte for byte."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import compiler
from conftest import ROOT

MLP = os.path.join(ROOT, "plans", "examples", "mlp", "model.json")


def cli_compile(tmp_path, *args):
    out = tmp_path / "cli.plan"
    subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", *args, "-o", str(out)], check=True,
                   capture_output=True, timeout=600)
    return out.read_bytes()


def test_a_model_json_compiles_to_the_commands_plan_byte_for_byte(tmp_path):
    path = compiler.compile(MLP, launch="kernel").save(str(tmp_path / "api.plan"))
    assert open(path, "rb").read() == cli_compile(tmp_path, MLP, "--launch", "kernel")


def test_onnx_paths_and_model_protos_with_symbolic_shapes(tmp_path):
    import executor
    from onnx_models import N, TP, model, ort, vi

    m = model([N("MatMul", ["x", "w"], ["y"]), N("Softmax", ["y"], ["p"], axis=-1)], [vi("x", TP.FLOAT, ["n", 3])],
              [vi("p", TP.FLOAT, ["n", 5])], [("w", np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5))])
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for source in (path, m):
        plan = compiler.compile(source, input_shapes={"x": (4, 3)})
        got = executor.load(plan.save(str(tmp_path / "m.plan"))).run({"x": x})["p"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    from_path = compiler.compile(path, input_shapes={"x": (4, 3)}).save(str(tmp_path / "a.plan"))
    assert open(from_path, "rb").read() == cli_compile(tmp_path, path, "--input-shape", "x=4,3")


def test_states_as_the_commands_state_option(tmp_path):
    import json

    from state_model import ACC_DOC

    doc = dict(ACC_DOC, states=[], outputs=["y", "acc_new"])
    doc["constants"] = [c for c in doc["constants"] if c["name"] != "start"]
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    plan = compiler.compile(str(path), states={"acc_new": "acc"})
    assert [s.name for s in plan.states] == ["acc"]
    assert open(plan.save(str(tmp_path / "s.plan")), "rb").read() == cli_compile(tmp_path, str(path), "--state",
                                                                                 "acc_new=acc")


def test_wrong_arguments_are_type_errors_or_name_the_field(tmp_path):
    from aotplan.core.errors import ModelError

    with pytest.raises(TypeError, match="unknown option 'planer'"):
        compiler.compile(MLP, planer="greedy")
    with pytest.raises(TypeError, match="got int"):
        compiler.compile(3)
    with pytest.raises(ModelError, match="input_shapes applies to ONNX models"):
        compiler.compile(MLP, input_shapes={"x": (4, 64)})
    with pytest.raises(ModelError, match="states acc_new=x: 'acc_new' is not a graph output"):
        compiler.compile(MLP, states={"acc_new": "x"})


def test_the_readme_example_runs(tmp_path):
    text = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"<!-- the README's compile example[^\n]*-->\n```python\n(.*?)```", text, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", block.replace("plans/examples", os.path.join(ROOT, "plans", "examples"))],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "(4, 10)" and (tmp_path / "mlp.plan").exists()
