"""Mutated model.json files and weights (hypothesis): each is either accepted, and then
goes through the whole front end (load, validate, fold, schedule, infer, group,
liveness, memory planning) without any other exception, or refused with a ModelError
(ShapeError is one; LimitError for sizes beyond the formats) whose message names the
node, tensor or field involved. Anything else (KeyError, TypeError, numpy or jax
errors, RecursionError, MemoryError, ...) is a bug.

The mutations start from the example models (plans/examples/*) and are structural:
fields deleted or retyped, names pointing nowhere or used twice, cycles, unknown ops and
attributes, wrong attribute values, shapes and dtypes at odds with the weights, new
nodes of any registered op (whose constant inputs fold through the op's lowering),
truncated or non-UTF-8 text, deep nesting, a non-object top level; and for weights.npz:
missing, mis-typed and mis-shaped arrays, object arrays (never unpickled), files that
are not .npz archives. XLA lowering is too slow to run per mutant: a few mutants go
through the `aotplan compile` CLI end to end instead.

Deterministic (derandomize=True): a failure here reproduces on every run. The parts:
model_fuzz_base.py (the seeds, the front end and its check), model_doc_hints.py (what
an error must name), model_mutators.py (model.json mutations), npz_mutators.py
(damaged weights archives).
"""

import copy
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from aotplan.core import model_json
from aotplan.cli import main
from aotplan.core.errors import ModelError
from model_fuzz_base import DOCS, SETTINGS, WEIGHTS, check
from model_mutators import mutant, dumps
from npz_mutators import Boom, npy_bytes, weights_mutant, write_zip
from conftest import EXAMPLE_NAMES, example_npz

@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    out = {}
    for name in EXAMPLE_NAMES:
        d = tmp_path_factory.mktemp(f"fuzz_{name}")
        shutil.copy(example_npz(name), d / "weights.npz")
        out[name] = d
    return out


@settings(max_examples=1500, **SETTINGS)  # (CI time: 2,500 took 31 s; scripts/fuzz_graphs.py runs more)
@given(data=st.data())
def test_mutated_model(workdirs, data):
    name, raw, hints = mutant(data)
    path = workdirs[name] / "model.json"
    path.write_bytes(raw)
    check(str(path), hints)


def test_unmutated_examples_pass(workdirs):
    for name in EXAMPLE_NAMES:
        path = workdirs[name] / "model.json"
        path.write_bytes(dumps(DOCS[name]))
        assert check(str(path), set()) is None


def test_empty_inline_constant_round_trips(tmp_path):
    """A nested list stops at its first empty dimension: what `save` writes for a
    (2, 0, 3) constant loads back (found by the fuzzer: it was refused)."""
    doc = copy.deepcopy(DOCS["mlp"])
    doc["constants"].append({"name": "empty", "dtype": "float32", "shape": [2, 0, 3], "value": [[], []]})
    doc["outputs"].append("empty")
    shutil.copy(example_npz("mlp"), tmp_path / "weights.npz")
    (tmp_path / "model.json").write_bytes(dumps(doc))
    graph, _ = model_json.load(str(tmp_path / "model.json"))
    assert graph.constant_map()["empty"].data.shape == (2, 0, 3)
    model_json.save(graph, str(tmp_path / "again.json"), weights_file="again.npz")
    again, _ = model_json.load(str(tmp_path / "again.json"))
    assert again.constant_map()["empty"].data.shape == (2, 0, 3)
    for value in ([[], [1.0]], [[1.0, 2.0], [3.0]], [1.0, [2.0]]):  # ragged: refused however it adds up
        doc["constants"][-1].update(shape=[2], value=value)
        (tmp_path / "model.json").write_bytes(dumps(doc))
        with pytest.raises(ModelError, match="constant 'empty': inline value"):
            model_json.load(str(tmp_path / "model.json"))


@settings(max_examples=600, **SETTINGS)
@given(data=st.data())
def test_mutated_weights(tmp_path_factory, data):
    d = str(tmp_path_factory.mktemp("npz"))
    marker = os.path.join(d, "UNPICKLED")
    name, hints, must_fail = weights_mutant(data, d, marker)
    with open(os.path.join(d, "model.json"), "wb") as f:
        f.write(dumps(DOCS[name]))
    msg = check(os.path.join(d, "model.json"), hints)
    assert not os.path.exists(marker), "an object array was unpickled"
    if must_fail:
        assert msg is not None, "a damaged weights file was accepted"
    shutil.rmtree(d)


# ------------------------------------------------------------------ the CLI, end to end

def _node(doc, name):
    return next(n for n in doc["nodes"] if n["name"] == name)


def _object_weight(d, marker):
    arrays = {k: npy_bytes(v) for k, v in WEIGHTS["mlp"].items()}
    obj = np.empty((128, 64), dtype=object)
    obj.flat[0] = Boom(marker)
    arrays["fc1.w"] = npy_bytes(obj)
    write_zip(os.path.join(d, "weights.npz"), {f"{k}.npy": v for k, v in arrays.items()})


# (example, mutate the doc, damage the text, damage the weights, what the error names; None: compiles)
CLI_CASES = {
    "missing op": ("mlp", lambda d: _node(d, "fc2").pop("op"), None, None, r"node 'fc2': missing field 'op'"),
    "retyped shape": ("cnn", lambda d: d["inputs"][0].update(shape="2x3x32x32"), None, None,
                      r"inputs\[0\]\.shape: expected list"),
    "renamed input": ("cnn", lambda d: _node(d, "down")["inputs"].__setitem__(0, "block9.relu"), None, None,
                      r"node 'down': input 'block9.relu' is not"),
    "cycle": ("transformer", lambda d: _node(d, "ln1")["inputs"].__setitem__(0, "res2"), None, None,
              r"graph has a cycle: .*'ln1'"),
    "window too big": ("cnn", lambda d: _node(d, "pool1")["attrs"].update(kernel_shape=[64, 64], strides=[1, 1]),
                       None, None, r"node 'pool1' \(maxpool\): window 64"),
    "huge folded shape": ("mlp", lambda d: d["nodes"].extend([
        {"name": "c", "op": "constant_of_shape", "inputs": [], "outputs": ["c"],
         "attrs": {"shape": [2**31 - 1, 2**31 - 1], "dtype": "int64"}},
        {"name": "r", "op": "reshape", "inputs": ["probs", "c"], "outputs": ["r"]}]),
        None, None, r"node 'c' \(constant_of_shape\): output 'c' int64\[2147483647, 2147483647\] needs"),
    "lone surrogate": ("mlp", lambda d: _node(d, "relu1").update(name="\ud800"), None, None,
                       r"nodes\[1\]\.name: '\\ud800' is not valid Unicode"),
    "truncated": ("transformer", None, lambda raw: raw[:len(raw) // 2], None, r"model\.json: not valid JSON"),
    "not utf-8": ("cnn", None, lambda raw: raw.replace(b'"stem"', b'"st\xedm"', 1), None,
                  r"not valid JSON: cannot decode the text: 'utf-8' codec"),
    "object array": ("mlp", None, None, _object_weight, r"weight 'fc1\.w': stored dtype object does not match"),
    "harmless": ("mlp", lambda d: d["outputs"].append("x"), None, None, None),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_on_mutants(tmp_path, case):
    """`aotplan compile` on a mutant: one `error:` line naming what is wrong (the same
    message as the front end's), exit 2, no plan, no traceback; or a plan."""
    example, mutate, damage_text, damage_weights, pattern = CLI_CASES[case]
    doc = copy.deepcopy(DOCS[example])
    if mutate:
        mutate(doc)
    raw = dumps(doc)
    (tmp_path / "model.json").write_bytes(damage_text(raw) if damage_text else raw)
    marker = str(tmp_path / "UNPICKLED")
    if damage_weights:
        damage_weights(str(tmp_path), marker)
    else:
        shutil.copy(example_npz(example), tmp_path / "weights.npz")
    msg = check(str(tmp_path / "model.json"), None)
    out = tmp_path / "out.plan"
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "model.json"), "-o", str(out)])
    assert not os.path.exists(marker)
    if pattern is None:
        assert msg is None and r.exit_code == 0 and out.exists(), r.output
        return
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and not out.exists(), r.output
    assert lines == [f"error: {msg}"], r.stderr
    assert re.search(pattern, msg), msg


def test_cli_subprocess_prints_one_line(tmp_path):
    """The installed entry point, in its own process: stderr is exactly one line."""
    doc = copy.deepcopy(DOCS["mlp"])
    _node(doc, "probs")["attrs"]["axis"] = 2**63 - 1
    (tmp_path / "model.json").write_bytes(dumps(doc))
    shutil.copy(example_npz("mlp"), tmp_path / "weights.npz")
    r = subprocess.run([sys.executable, "-c", "from aotplan.cli import run; run()", "compile",
                        str(tmp_path / "model.json"), "-o", str(tmp_path / "out.plan")],
                       capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == ("error: node 'probs' (softmax): axis 9223372036854775807 is out of range for rank 2"), r.stderr
    assert not (tmp_path / "out.plan").exists()
