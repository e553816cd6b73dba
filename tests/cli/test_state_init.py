"""`--state-init IN=FILE.npy` (compile, import onnx, check) and `compiler.compile(...,
state_inits=)`: a state's value before the first step, other than zeros, for an ONNX
model whose states are declared on the command line."""

import numpy as np
import pytest

import compiler
from conftest import aotplan_cli

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def acc_onnx(tmp_path_factory):
    from onnx_models import N, TP, model, vi

    m = model([N("Add", ["acc", "x"], ["acc_new"]), N("Mul", ["acc_new", "two"], ["y"])],
              [vi("x", TP.FLOAT, [4]), vi("acc", TP.FLOAT, [4])], [vi("y", TP.FLOAT, [4]), vi("acc_new", TP.FLOAT, [4])],
              [("two", np.float32(2))])
    d = tmp_path_factory.mktemp("acc")
    path = d / "acc.onnx"
    path.write_bytes(m.SerializeToString())
    init = np.array([5, 6, 7, 8], np.float32)
    np.save(d / "init.npy", init)
    return str(path), str(d / "init.npy"), init, d


def test_the_plan_starts_from_the_given_value_and_reset_returns_to_it(acc_onnx):
    import executor

    path, init_file, init, d = acc_onnx
    r = aotplan_cli("compile", path, "--state", "acc_new=acc", "--state-init", f"acc={init_file}", "-o",
                    str(d / "acc.plan"))
    assert r.returncode == 0, r.stderr
    s = executor.load(str(d / "acc.plan"))
    np.testing.assert_array_equal(s.get_state("acc"), init)
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(s.run({"x": x})["y"], 2 * (init + 1))
    s.reset_state()
    np.testing.assert_array_equal(s.get_state("acc"), init)
    r = aotplan_cli("check", str(d / "acc.plan"), path, "--state", "acc_new=acc", "--state-init", f"acc={init_file}")
    assert r.returncode == 0, r.stderr
    plan = compiler.compile(path, states={"acc_new": "acc"}, state_inits={"acc": init})
    assert plan.save(str(d / "api.plan")) and open(d / "api.plan", "rb").read() == open(d / "acc.plan", "rb").read()


def test_import_writes_the_initial_value_into_model_json(acc_onnx):
    import json

    path, init_file, _, d = acc_onnx
    r = aotplan_cli("import", "onnx", path, "--state", "acc_new=acc", "--state-init", f"acc={init_file}", "-o",
                    str(d / "acc.json"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((d / "acc.json").read_text())
    assert doc["states"] == [{"input": "acc", "output": "acc_new", "init": "acc.init"}]


@pytest.mark.parametrize("args, says", [
    (["--state", "acc_new=acc", "--state-init", "acc={bad}"],
     "--state-init acc: the value is float32[3], the state is float32[4]"),
    (["--state", "acc_new=acc", "--state-init", "x={init}"], "--state-init x: not the input of a state declared here"),
    (["--state-init", "acc={init}"], "--state-init acc: no state is declared"),
])
def test_a_wrong_initial_value_is_one_error(acc_onnx, args, says):
    path, init_file, _, d = acc_onnx
    np.save(d / "bad.npy", np.zeros(3, np.float32))
    args = [a.format(bad=d / "bad.npy", init=init_file) for a in args]
    r = aotplan_cli("compile", path, *args, "-o", str(d / "x.plan"))
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
