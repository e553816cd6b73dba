"""States through the commands: `compile --state OUT=IN` and model.json's `states`
compile to plans that keep the state on the device (in every launch mode, from its
initial value); `inspect` and `replay` show it; each bad declaration is one clear
error naming what is wrong."""

import numpy as np
import pytest
from click.testing import CliRunner

import executor
from aotplan.cli import main
from conftest import one_error_line
from decoder_model import STATES, write_onnx
from state_model import accumulator


def _compile(*args):
    return CliRunner().invoke(main, ["compile", *map(str, args)])


@pytest.fixture(scope="module")
def onnx_steps(tmp_path_factory):
    return write_onnx(str(tmp_path_factory.mktemp("decoder_onnx")))


@pytest.mark.parametrize("mode", ("sink", "fused", "kernel"))
def test_a_model_json_state_starts_from_its_initial_value_and_accumulates(tmp_path, mode):
    plan = tmp_path / "acc.plan"
    r = _compile(accumulator(tmp_path), "-o", plan, "--launch", mode)
    assert r.exit_code == 0, r.output
    assert "states: 1 tensor kept on the device across steps (acc), a buffer of 16 B beside the arena" in r.output
    sess = executor.load(str(plan))
    x = np.array([1, 1, 0, -1], np.float32)
    for k in range(1, 4):
        np.testing.assert_array_equal(sess.run({"x": x})["y"], 2 * (np.arange(4) + k * x))
    np.testing.assert_array_equal(sess.get_state("acc"), np.arange(4) + 3 * x)
    sess.reset_state()
    np.testing.assert_array_equal(sess.get_state("acc"), np.arange(4, dtype=np.float32))


def test_inspect_and_replay_show_the_states(tmp_path):
    plan = tmp_path / "acc.plan"
    assert _compile(accumulator(tmp_path), "-o", plan).exit_code == 0
    r = CliRunner().invoke(main, ["inspect", str(plan)])
    assert r.exit_code == 0, r.output
    assert "+ states 16 B +" in r.output
    assert "acc                          float32 [4] at byte 0 of the state buffer, updated by 'acc_new', " \
           "initially constant" in r.output
    r = CliRunner().invoke(main, ["replay", str(plan), "--random-inputs", "--steps", "3"])
    assert r.exit_code == 0, r.output
    assert "states 16 B" in r.output and "output y:" in r.output
    r = CliRunner().invoke(main, ["replay", str(plan), "--random-inputs", "--check-alloc"])
    assert r.exit_code == 0 and "ok: nothing is allocated per step" in r.output, r.output


def test_onnx_states_compile_and_check_against_the_model(tmp_path, onnx_steps):
    plan = tmp_path / "decode.plan"
    states = [a for s in STATES for a in ("--state", s)]
    r = _compile(onnx_steps["decode"], "-o", plan, "--launch", "kernel", *states)
    assert r.exit_code == 0, r.output
    assert "states: 4 tensors kept on the device across steps (past_key_0, past_value_0, past_key_1, " \
           "past_value_1), a buffer of 16.0 KiB beside the arena" in r.output
    r = CliRunner().invoke(main, ["check", str(plan), onnx_steps["decode"], *states])
    assert r.exit_code == 0, r.output
    assert "output logits: ok" in r.output and "agree with the direct evaluation" in r.output


BAD_STATES = {
    "spec": (["--state", "present_key_0"], "--state 'present_key_0': expected OUT=IN"),
    "missing input": (["--state", "present_key_0=nope"], "--state present_key_0=nope: 'nope' is not a graph input"),
    "missing output": (["--state", "nope=past_key_0"], "--state nope=past_key_0: 'nope' is not a graph output"),
    "mismatch": (["--state", "logits=past_key_0"],
                 "state logits=past_key_0: output 'logits' is float32[1, 1, 64], input 'past_key_0' is "
                 "float32[1, 2, 32, 16]: a state's output must have its input's dtype and shape"),
    "twice": (["--state", "present_key_0=past_key_0", "--state", "present_value_0=past_key_0"],
              "state present_value_0=past_key_0: 'past_key_0' is already in state present_key_0=past_key_0"),
}


@pytest.mark.parametrize("case", sorted(BAD_STATES))
def test_a_bad_state_option_is_one_clear_error(tmp_path, onnx_steps, case):
    args, message = BAD_STATES[case]
    one_error_line(_compile(onnx_steps["decode"], "-o", tmp_path / "x.plan", *args), message)
    assert not (tmp_path / "x.plan").exists()


def _reads_old_after_update(doc):
    doc["nodes"].append({"name": "late", "op": "sub", "inputs": ["acc_new", "acc"], "outputs": ["delta"]})
    doc["outputs"].append("delta")


BAD_DOCS = {
    "listed as output": (lambda d: d["outputs"].append("acc_new"),
                         "states[0]: output 'acc_new' is a state's update, which a step does not return"),
    "unknown init": (lambda d: d["states"][0].update(init="nope"),
                     "states[0].init: expected \"zeros\" or the name of a weight or constant, got 'nope'"),
    "init shape": (lambda d: d["states"][0].update(init="two"),
                   "state acc_new=acc: its initial value is float32[], the input 'acc' is float32[4]"),
    "not an input": (lambda d: d["states"][0].update(input="two"),
                     "state acc_new=two: 'two' is not a graph input (it is a constant)"),
    "unknown field": (lambda d: d["states"][0].update(shape=[4]), "states[0]: unknown field 'shape'"),
    "dtype": (lambda d: d["nodes"].append({"name": "half", "op": "cast", "inputs": ["acc_new"],
                                           "outputs": ["acc16"], "attrs": {"to": "float16"}})
              or d["states"][0].update(output="acc16"),
              "state acc16=acc: output 'acc16' is float16[4], input 'acc' is float32[4]"),
}


@pytest.mark.parametrize("case", sorted(BAD_DOCS))
def test_a_bad_model_json_state_is_one_clear_error(tmp_path, case):
    mutate, message = BAD_DOCS[case]
    one_error_line(_compile(accumulator(tmp_path, mutate), "-o", tmp_path / "x.plan"), message)


def test_reading_a_state_after_its_update_is_refused_where_launches_split_them(tmp_path):
    """In a sink plan the old value is read in the same kernel that writes the new one
    (before it): fine. In kernel mode a later launch would read the new bytes."""
    model = accumulator(tmp_path, _reads_old_after_update)
    # (the default format policy: another one may give kernel mode a converted copy of
    # the old value, read from the arena, which is correct too)
    one_error_line(_compile(model, "-o", tmp_path / "k.plan", "--launch", "kernel", "--format-policy", "default"),
                   "state acc_new=acc: node 'late' reads 'acc' (the value before the step) after node 'add' has "
                   "written 'acc_new' over the same bytes")
    x = np.array([1, 2, 3, 4], np.float32)
    for name, args in (("s.plan", ()), ("k.plan", ("--launch", "kernel"))):
        assert _compile(model, "-o", tmp_path / name, *args).exit_code == 0
        sess = executor.load(str(tmp_path / name))
        for _ in range(2):
            np.testing.assert_array_equal(sess.run({"x": x})["delta"], x)


def test_feeding_a_state_to_replay_is_one_clear_error(tmp_path):
    plan = tmp_path / "acc.plan"
    assert _compile(accumulator(tmp_path), "-o", plan).exit_code == 0
    np.save(tmp_path / "acc.npy", np.zeros(4, np.float32))
    np.save(tmp_path / "x.npy", np.zeros(4, np.float32))
    r = CliRunner().invoke(main, ["replay", str(plan), "--input", f"x={tmp_path / 'x.npy'}",
                                  "--input", f"acc={tmp_path / 'acc.npy'}"])
    one_error_line(r, "input 'acc' is a state of the plan: it stays on the device across steps and is not fed")


def _greedy_onnxruntime(path, prompt, n):
    from decoder_model import OrtStateless

    ort = OrtStateless(path)
    for p, t in enumerate(prompt):
        logits = ort.step([t], p)
    out = []
    for i in range(n):
        out.append(int(logits[0, -1].argmax()))
        logits = ort.step([out[-1]], len(prompt) + i)
    return out


def test_generate_decodes_greedily_as_onnxruntime_does(tmp_path, onnx_steps):
    states = [a for s in STATES for a in ("--state", s)]
    for mode in ("sink", "kernel"):
        assert _compile(onnx_steps["decode"], "-o", tmp_path / f"{mode}.plan", "--launch", mode, *states).exit_code == 0
    prompt = [5, 9, 2, 33, 7]
    want = _greedy_onnxruntime(onnx_steps["decode"], prompt, 10)
    assert len(set(want)) > 1  # (not a constant answer)
    for mode in ("sink", "kernel"):
        r = CliRunner().invoke(main, ["generate", str(tmp_path / f"{mode}.plan"), "--prompt",
                                      ",".join(map(str, prompt)), "--tokens", "10"])
        assert r.exit_code == 0, r.output
        assert f"generated: {','.join(map(str, want))}" in r.output, (mode, want, r.output)
        assert "prefill: 5 tokens in" in r.output and "tokens/s" in r.output


def test_generate_refuses_what_it_cannot_run(tmp_path, onnx_steps):
    states = [a for s in STATES for a in ("--state", s)]
    assert _compile(onnx_steps["decode"], "-o", tmp_path / "d.plan", *states).exit_code == 0
    assert _compile(onnx_steps["decode"], "-o", tmp_path / "stateless.plan").exit_code == 0
    assert _compile(onnx_steps["prefill"], "-o", tmp_path / "p.plan", *states).exit_code == 0
    gen = lambda plan, *a: CliRunner().invoke(main, ["generate", str(tmp_path / plan), *a])  # noqa: E731
    one_error_line(gen("stateless.plan", "--prompt", "1"), "keeps no state: generate needs a decoder step")
    one_error_line(gen("d.plan", "--prompt", "1,2", "--tokens", "32"),
                   "a prompt of 2 tokens and 32 more need 33 positions; the cache holds 32")
    r = gen("d.plan", "--prompt", "1,2", "--tokens", "31")  # (exactly full: the last token is never fed)
    assert r.exit_code == 0 and r.output.count(",") >= 31, r.output
    one_error_line(gen("d.plan", "--prompt", "1,64"), "--prompt: token id 64 is outside the vocabulary of 64")
    one_error_line(gen("p.plan", "--prompt", "1,2"), "takes 8 tokens a step (a prefill step): generate decodes a "
                                                      "token a step")
    one_error_line(gen("d.plan", "--prompt", "1", "--logits-output", "probs"),
                   "--logits-output probs: the plan has no output 'probs' (its outputs: logits)")
    r = gen("d.plan", "--prompt", "1,x")
    assert r.exit_code == 2 and "expected token ids separated by commas" in r.output, r.output
