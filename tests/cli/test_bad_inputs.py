"""Regression tests for bad inputs found by fuzzing: each gets one clear error, exit 2."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from aotplan.core import codec
from aotplan.cli import main
from conftest import EXAMPLES, example_doc, example_npz


def write_model(tmp_path, mutate, example="mlp", raw=None):
    shutil.copy(example_npz(example), tmp_path / "weights.npz")
    # (a raw model.json is the example's own text: it names weights.safetensors)
    shutil.copy(os.path.join(EXAMPLES, example, "weights.safetensors"), tmp_path / "weights.safetensors")
    if raw is None:
        doc = example_doc(example, npz=True)
        mutate(doc)
        raw = json.dumps(doc)
    (tmp_path / "model.json").write_text(raw)
    return str(tmp_path / "model.json")


def node(doc, name):
    return next(n for n in doc["nodes"] if n["name"] == name)


def compile_error(path, tmp_path):
    out = tmp_path / "out.plan"
    r = CliRunner().invoke(main, ["compile", path, "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert not out.exists() and "Traceback" not in r.output and "internal error" not in r.output
    return r.output


CASES = {
    "huge float attr": (lambda d: node(d, "fc1")["attrs"].update(alpha=10**400), r"'alpha' must be finite"),
    "nan attr": (None, r"NaN is not valid JSON"),
    "negative epsilon": (lambda d: d.update(nodes=d["nodes"] + [{"name": "ln", "op": "layernorm", "inputs": ["probs", "fc3.b"],
                                                                 "outputs": ["ln"], "attrs": {"epsilon": -1.0}}]),
                         r"'epsilon' must be >= 0"),
    "huge int attr": (lambda d: d.update(nodes=d["nodes"] + [{"name": "r", "op": "reshape", "inputs": ["probs"], "outputs": ["r"],
                                                              "attrs": {"shape": [10**20]}}]),
                      r"node 'r' \(reshape\): attribute 'shape' must be a list of 64-bit integers"),
    "flag not 0/1": (lambda d: node(d, "fc1")["attrs"].update(trans_b=2), r"'trans_b' must be 0 or 1"),
    "huge dim": (lambda d: d["inputs"][0].update(shape=[10**20, 0]), r"shape must be a list of integers in \[0, 2147483647\]"),
    "scalar softmax": (lambda d: d.update(inputs=[{"name": "x", "dtype": "float32", "shape": []}], outputs=["s"],
                                          nodes=[{"name": "s", "op": "softmax", "inputs": ["x"], "outputs": ["s"], "attrs": {"axis": 0}}]),
                       r"node 's' \(softmax\): needs an input of rank >= 1"),
    "constants not a list": (lambda d: d.update(constants=5), r"model.json.constants: expected a list"),
    "deep nesting": (None, r"nested too deeply"),
    "huge version": (None, r"not valid JSON"),
    "misspelt attrs key": (lambda d: node(d, "probs").update(attr={"axis": 0}), r"node 'probs': unknown field 'attr'"),
    "version 1.0": (lambda d: d.update(version=1.0), r"version 1.0 is not supported"),
    "duplicate key": (None, r"key 'nodes' appears twice"),
    "int8 out of range": (lambda d: d.update(constants=[{"name": "c", "dtype": "int8", "shape": [], "value": 300}]),
                          r"constant 'c': value 300 is outside the int8 range"),
    "int from string": (lambda d: d.update(constants=[{"name": "c", "dtype": "int32", "shape": [], "value": "12"}]),
                        r"constant 'c': int32 values must be numbers"),
    "int from float": (lambda d: d.update(constants=[{"name": "c", "dtype": "int32", "shape": [], "value": 1.7}]),
                       r"constant 'c': int32 values must be integers"),
    "bool from int": (lambda d: d.update(constants=[{"name": "c", "dtype": "bool", "shape": [], "value": 5}]),
                      r"bool values must be true or false"),
    "float16 overflow": (lambda d: d.update(constants=[{"name": "c", "dtype": "float16", "shape": [], "value": 1e6}]),
                         r"value 1000000.0 overflows float16"),
    "bfloat16 overflow": (lambda d: d.update(constants=[{"name": "c", "dtype": "bfloat16", "shape": [],
                                                          "value": 1e39}]),
                          r"value 1e\+39 overflows bfloat16 \(max 3.38953e\+38"),
    "float past float64": (None, r"constant 'c': value beyond -1e308 overflows float32 .*JSON has no infinity"),
    "ragged constant": (lambda d: d.update(constants=[{"name": "c", "dtype": "float32", "shape": [2], "value": [[1, 2], [3]]}]),
                        r"constant 'c': inline value"),
}
RAW = {
    "nan attr": lambda: open(os.path.join(EXAMPLES, "mlp", "model.json")).read().replace('"axis": -1', '"axis": NaN'),
    "deep nesting": lambda: open(os.path.join(EXAMPLES, "mlp", "model.json")).read().replace('"axis": -1', '"axis": ' + "[" * 5000 + "]" * 5000),
    "huge version": lambda: open(os.path.join(EXAMPLES, "mlp", "model.json")).read().replace('"version": 1', '"version": 1' + "0" * 5000),
    "duplicate key": lambda: open(os.path.join(EXAMPLES, "mlp", "model.json")).read().replace('"nodes": [', '"nodes": [], "nodes": ['),
    # 1e400 parses as infinity (JSON has none): it once went through as an inf weight
    "float past float64": lambda: json.dumps({**json.load(open(os.path.join(EXAMPLES, "mlp", "model.json"))),
                                              "constants": [{"name": "c", "dtype": "float32", "shape": [2],
                                                             "value": [1.0, "X"]}]}).replace('"X"', "-1e400"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_model(tmp_path, case):
    mutate, pattern = CASES[case]
    path = write_model(tmp_path, mutate, raw=RAW[case]() if case in RAW else None)
    out = compile_error(path, tmp_path)
    assert re.search(pattern, out), out


def test_default_output_name_stays_in_cwd(tmp_path):
    path = write_model(tmp_path, lambda d: d.update(name="../../escape\u0000me"))
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", path], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(work)) == ["escape_me.plan"]


@pytest.mark.parametrize("name, file", [("模型 ü", "模型_ü.plan"), ("ж" * 300, "ж" * 100 + ".plan"),
                                        ("../", "model.plan")])
def test_default_output_name_keeps_letters_of_any_script(tmp_path, name, file):
    path = write_model(tmp_path, lambda d: d.update(name=name))
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", path], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(work)) == [file]


@pytest.fixture(scope="module")
def plan_file(examples, tmp_path_factory):
    p = tmp_path_factory.mktemp("rob") / "mlp.plan"
    p.write_bytes(codec.encode(examples["mlp"][1]))
    return str(p)


@pytest.mark.parametrize("args,pattern", [
    (["--input", "x={empty}"], r"cannot read .* as .npy"),
    (["--input", "zz={good}"], r"the plan has no input 'zz'"),
    (["--input", "x={good}", "--input", "x={good}"], r"--input x: given twice"),
    (["--random-inputs", "--seed", "-1"], r"Invalid value for '--seed'"),
    (["--random-inputs", "--output", "/nonexistent/dir/o.npz"], r"cannot write outputs"),
    (["--steps", "0"], r"Invalid value for '--steps'"),
])
def test_bad_replay_args(plan_file, tmp_path, args, pattern):
    (tmp_path / "empty.npy").write_bytes(b"")
    np.save(tmp_path / "good.npy", np.zeros((4, 64), np.float32))
    args = [a.format(empty=tmp_path / "empty.npy", good=tmp_path / "good.npy") for a in args]
    r = subprocess.run([sys.executable, "-c", "from aotplan.cli import run; run()", "replay", plan_file] + args,
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and re.search(pattern, lines[0]), r.stderr


_SWALLOWED_CTRL_C = r"""
import gc, os, signal
from aotplan.cli import run

fired = []


def callback(phase, info):  # Ctrl-C arriving while a garbage-collector callback runs (JAX has one)
    if not fired and phase == "start" and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs here: Python only prints what it raises
            pass


gc.callbacks.append(callback)
# (a shell that starts the tests in the background leaves SIGINT ignored, which a child
# inherits: Python then installs no handler and `run` keeps it so; this test is about
# the handler a terminal's process has)
signal.signal(signal.SIGINT, signal.default_int_handler)
run()
"""


def test_ctrl_c_swallowed_in_a_gc_callback_still_interrupts(plan_file, tmp_path):
    """A KeyboardInterrupt raised inside a gc callback is printed by Python and dropped:
    `replay --output` went on, wrote the outputs and exited 0 (a Ctrl-C a second into
    start-up did so 6 times in 6). Now: "interrupted", exit 130, no output file."""
    out = tmp_path / "o.npz"
    r = subprocess.run([sys.executable, "-c", _SWALLOWED_CTRL_C, "replay", plan_file, "--random-inputs", "--output",
                        str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 130 and r.stderr == "interrupted\n", (r.returncode, r.stderr)
    assert os.listdir(tmp_path) == []


def test_plan_with_swapped_kernel_roles_is_refused(kernel_examples):
    import dataclasses

    from aotplan.core import verify
    from aotplan.core.errors import PlanError

    plan = kernel_examples["mlp"][1]
    l = plan.launches
    bad = dataclasses.replace(plan, launches=(dataclasses.replace(l[0], kernel=plan.output_kernel),) + l[1:])
    with pytest.raises(PlanError, match="is the input, output or place kernel"):
        verify.verify(bad)
    bad = dataclasses.replace(plan, memory=dataclasses.replace(plan.memory, constant_pool_bytes=-10))
    with pytest.raises(PlanError, match="constant_pool_bytes"):
        verify.verify(bad)


def test_output_kernel_results_checked(kernel_examples):
    """A plan whose output tensor claims another dtype than its kernel returns is refused."""
    import dataclasses

    import executor
    from aotplan.core.errors import PlanError

    plan = kernel_examples["mlp"][1]
    i = plan.outputs[0]
    ts = list(plan.tensors)
    ts[i] = dataclasses.replace(ts[i], dtype="int32")
    with pytest.raises(PlanError, match=r"kernel 'read_outputs': returns \(float32\[4, 10\]\), the plan's tensors say \(int32\[4, 10\]\)"):
        executor.Session(dataclasses.replace(plan, tensors=tuple(ts)))


@pytest.mark.parametrize("damage", ["unknown op", "zeroed section"])
def test_unreadable_stablehlo_is_one_error(examples, damage):
    """A kernel whose StableHLO this jax cannot read (altered bytes, or a plan from a jax
    outside its compatibility window) is one PlanError naming the kernel and the likely
    cause. (MLIR prints its own reason on stderr before it.)"""
    import dataclasses

    import jax

    import executor
    from aotplan.core.errors import PlanError
    from aotplan.core.kernels import load_kernel

    plan = examples["mlp"][1]
    k = plan.kernels[0]
    blob = bytearray(k.exported)
    at = blob.find(b"dot_general")
    assert at > 200
    if damage == "unknown op":
        blob[at:at + 11] = b"dot_genxxxx"
    else:
        blob[at - 200:at + 200] = bytes(400)
    bad = dataclasses.replace(plan, kernels=(dataclasses.replace(k, exported=bytes(blob)),) + plan.kernels[1:])
    load_kernel(bad.kernels[0])  # the jax.export envelope still reads: the damage is in the StableHLO
    with pytest.raises(PlanError, match=rf"^kernel '{re.escape(k.name)}': this host's jax cannot read its StableHLO "
                                        rf"\(.*[Dd]eserialize.*\); the plan is corrupt$"):
        executor.Session(bad)
    other = dataclasses.replace(bad, provenance=dataclasses.replace(plan.provenance, jax_version="99.0"))
    with pytest.raises(PlanError, match=rf"compiled with jax 99.0: recompile it with a jax whose StableHLO this "
                                        rf"host's jax {re.escape(jax.__version__)} reads"):
        executor.Session(other)
