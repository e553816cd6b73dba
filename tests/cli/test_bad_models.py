"""Bad model.json files through `aotplan compile`: each one clear error naming what is
wrong, exit 2; and the CLI's choices (pass names, launch modes) match the compiler's."""

import pytest
from click.testing import CliRunner

from aotplan.cli import main
from conftest import mlp_model_edited as _model


def _node(doc, name):
    return next(n for n in doc["nodes"] if n["name"] == name)


BAD_MODELS = {
    "unknown op": (lambda d: _node(d, "relu1").update(op="frobnicate"),
                   r"node 'relu1': unknown op 'frobnicate' \(\d+ ops are known: docs/formats.md lists them\)$"),
    "misspelt op": (lambda d: _node(d, "relu1").update(op="rleu"), r"node 'relu1': unknown op 'rleu' \(did you mean "
                                                                   r"'relu'\? \d+ ops are known"),
    # the layout pass's own op: a model's transdata compiled, and gave scrambled outputs with exit 0
    "internal op": (lambda d: _node(d, "relu1").update(op="transdata", attrs={"src": "nhwc", "dst": "default"}),
                    r"node 'relu1': unknown op 'transdata' \((did you mean 'transpose'\? )?\d+ ops are known"),
    "empty output name": (lambda d: _node(d, "relu1")["outputs"].__setitem__(0, ""),
                          r"node 'relu1'.outputs: expected a non-empty name string, got ''"),
    "dangling input": (lambda d: _node(d, "fc2")["inputs"].__setitem__(0, "nope"),
                       r"node 'fc2': input 'nope' is not a graph input"),
    "cycle": (lambda d: _node(d, "fc1")["inputs"].__setitem__(0, "tanh2"), r"cycle: 'fc1' -> .*'fc1'"),
    "shape mismatch": (lambda d: d["inputs"][0].update(shape=[4, 63]),
                       r"node 'fc1' \(gemm\): contraction mismatch: A 'x' float32\[4, 63\]"),
    "bad dtype": (lambda d: d["inputs"][0].update(dtype="float128"), r"input 'x': unsupported dtype 'float128'"),
    "missing weights": (lambda d: d["weights"].update(file="gone.npz"), r"weights file .*gone.npz.* not found"),
    "missing weight": (lambda d: d["weights"]["tensors"].append({"name": "extra", "dtype": "float32", "shape": [1]}),
                       r"weight 'extra': not found in weights file"),
    "weight dtype": (lambda d: d["weights"]["tensors"][0].update(dtype="int32"),
                     r"weight 'fc1.w': stored dtype float32 does not match declared dtype int32"),
    "duplicate node": (lambda d: _node(d, "fc2").update(name="fc1"), r"node name 'fc1' is used twice"),
    "bad attr": (lambda d: _node(d, "probs")["attrs"].update(axis=5), r"node 'probs' \(softmax\): axis 5 is out of range"),
    "missing field": (lambda d: _node(d, "fc1").pop("op"), r"node 'fc1': missing field 'op'"),
    "wrong version": (lambda d: d.update(version=9), r"model.json.version: version 9 is not supported"),
    "no outputs": (lambda d: d.update(outputs=[]), r"model has no outputs"),
    "unknown attribute": (lambda d: _node(d, "probs")["attrs"].update(axes=1),
                          r"node 'probs' \(softmax\): unknown attribute 'axes' \(accepted: axis, legacy_flatten\)"),
    "arity": (lambda d: _node(d, "relu1")["inputs"].append("x"), r"node 'relu1' \(relu\): takes 1 inputs, got 2"),
    "empty input": (lambda d: _node(d, "fc1")["inputs"].__setitem__(1, ""),
                    r"node 'fc1' \(gemm\): input 1 is empty \(\"\"\): only the optional inputs at the end"),
    "empty planner": (lambda d: None, r"unknown planner '' \(known: best, "),
    "control character": (lambda d: _node(d, "relu1").update(outputs=["relu\n1"]),
                          r"node 'relu1'.outputs: name 'relu\\n1' holds a control character"),
}


@pytest.mark.parametrize("case", list(BAD_MODELS))
def test_bad_model_one_clear_error(tmp_path, case):
    mutate, pattern = BAD_MODELS[case]
    path = _model(tmp_path, mutate)
    out = tmp_path / "out.plan"
    r = CliRunner().invoke(main, ["compile", path, "-o", str(out)] + (["--planner", ""] if case == "empty planner"
                                                                      else []))
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [l for l in r.output.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, r.output
    import re
    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists()


def test_not_json(tmp_path):
    p = tmp_path / "model.json"
    p.write_text("{nope")
    r = CliRunner().invoke(main, ["compile", str(p)])
    assert r.exit_code == 2 and "not valid JSON" in r.output


def test_cli_pass_names_match_the_pipeline():
    from aotplan.cli import compile_cmd
    from compiler import pipeline

    assert compile_cmd.PASS_NAMES == pipeline.CLEANUP_PASSES


def test_cli_launch_modes_match_the_plan_schema():
    from aotplan.cli import compile_cmd
    from aotplan.core import plan
    from compiler import pipeline

    assert compile_cmd.LAUNCH_MODES == plan.LAUNCH_MODES == pipeline.LAUNCH_MODES
