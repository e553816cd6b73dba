"""Making plans of several methods through `compile` (--method, --profile), and each
wrong way of asking for one: one clear error naming the method, model or input."""

import os

import pytest
from click.testing import CliRunner

from aotplan.cli import main
from conftest import one_error_line
from decoder_model import write_onnx
from state_model import accumulator


@pytest.fixture(scope="module")
def onnx_steps(tmp_path_factory):
    return write_onnx(str(tmp_path_factory.mktemp("decoder_onnx")))


def _compile(*args):
    return CliRunner().invoke(main, ["compile", *map(str, args)])


def _no_states(doc):
    doc["states"] = []
    doc["outputs"].append("acc_new")


def test_bad_method_requests_are_one_clear_error(tmp_path, onnx_steps):
    acc = accumulator(tmp_path)
    os.makedirs(tmp_path / "plain")
    plain = accumulator(tmp_path / "plain", _no_states)
    out = ["-o", tmp_path / "x.plan"]
    r = _compile(acc, "--method", f"a={acc}", *out)
    assert r.exit_code == 2 and "give MODEL, or --method NAME=MODEL for each method, not both" in r.output
    r = _compile(*out)
    assert r.exit_code == 2 and "missing MODEL (or --method NAME=MODEL for each method)" in r.output
    one_error_line(_compile("--method", acc, *out), f"--method {acc!r}: expected NAME=MODEL")
    one_error_line(_compile("--method", f"a={acc}", "--method", f"a={acc}", *out), "method 'a' is given twice")
    one_error_line(_compile("--method", f"a b={acc}", *out), "method name 'a b': use letters, digits, '-' and '_'")
    one_error_line(_compile("--method", f"a={acc}", "--method", f"b={plain}", *out),
                   "method 'b' declares states (none), method 'a' (acc float32[4]): the methods of a plan share its "
                   "states")
    os.makedirs(tmp_path / "other_init")
    other = accumulator(tmp_path / "other_init", lambda d: d["constants"][1].update(value=[9.0, 9.0, 9.0, 9.0]))
    one_error_line(_compile("--method", f"a={acc}", "--method", f"b={other}", *out),
                   "state 'acc': method 'b' gives it another initial value than method 'a'")
    one_error_line(_compile("--method", f"a={acc}", "--method", f"b={acc}", "--weights", "arena", *out),
                   "the methods of a plan keep their weights in the pool")
    one_error_line(_compile(acc, "--profile", "b1:x=1,4", *out),
                   "--profile b1: model.json shapes are static; profiles give an ONNX model's symbolic dimensions")
    one_error_line(_compile(onnx_steps["decode"], "--profile", "wide:tokens=1,2", *out),
                   "--profile wide: input 'tokens': --input-shape gives dimension 1 = 2, the model fixes it to 1")
    one_error_line(_compile(onnx_steps["decode"], "--profile", "wide", *out),
                   "--profile 'wide': expected NAME:INPUT=D0,D1,...")
    assert not (tmp_path / "x.plan").exists()


def test_replay_needs_the_method_of_a_plan_of_several(tmp_path):
    acc = accumulator(tmp_path)
    plan = tmp_path / "two.plan"
    r = _compile("--method", f"first={acc}", "--method", f"second={acc}", "-o", plan)
    assert r.exit_code == 0, r.output
    assert "methods: first (1 launch, inputs x float32[4]); second (1 launch, inputs x float32[4])" in r.output
    one_error_line(CliRunner().invoke(main, ["replay", str(plan), "--random-inputs"]),
                   "has methods first, second: name one with --method")
    one_error_line(CliRunner().invoke(main, ["replay", str(plan), "--random-inputs", "--method", "third"]),
                   "--method third: ", "has no method 'third' (its methods: 'first', 'second')")
    r = CliRunner().invoke(main, ["replay", str(plan), "--random-inputs", "--method", "second", "--steps", "2"])
    assert r.exit_code == 0 and "output y: float32[4]" in r.output, r.output
    r = CliRunner().invoke(main, ["inspect", str(plan)])
    assert r.exit_code == 0 and "methods (2, sharing the weights, the states and the arena" in r.output, r.output
    one_error_line(CliRunner().invoke(main, ["check", str(plan), acc]),
                   "is a plan of methods (first, second): check compares a plan of one model with it")
