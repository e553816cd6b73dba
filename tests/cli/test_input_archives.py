"""`--input FILE.npz` / `--input FILE.safetensors`: every input by its name, as
`--output` writes outputs; and model.json weights in .safetensors (what `aotplan import
onnx` writes), read with their declarations checked (aotplan/core/safetensors_weights.py)."""

import json
import os

import ml_dtypes
import numpy as np
import pytest

from aotplan.core import model_json
from aotplan.core.errors import ModelError
from conftest import ROOT, aotplan_cli, plan_file

safetensors_numpy = pytest.importorskip("safetensors.numpy")


@pytest.fixture(scope="module")
def mlp(examples, tmp_path_factory):
    return plan_file(tmp_path_factory, examples["mlp"][1], "mlp"), examples["mlp"][2]


def replay(*args):
    return aotplan_cli("replay", *args)


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_an_archive_feeds_every_input_by_its_name(mlp, tmp_path, ext):
    path, session = mlp
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    archive = str(tmp_path / f"in{ext}")
    if ext == ".npz":
        np.savez(archive, x=x)
    else:
        safetensors_numpy.save_file({"x": x}, archive)
    out = str(tmp_path / "o.npz")
    r = replay(path, "--input", archive, "--output", out, "--steps", "1")
    assert r.returncode == 0, r.stderr
    with np.load(out) as z:
        np.testing.assert_array_equal(z["probs"], session.run({"x": x})["probs"])


def test_archive_errors_name_the_file_and_the_member(mlp, tmp_path):
    path, _ = mlp
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    r = replay(path, "--input", str(bad))
    assert r.returncode == 2 and "not a readable .safetensors file" in r.stderr, r.stderr
    extra = str(tmp_path / "extra.npz")
    np.savez(extra, x=np.zeros((4, 64), np.float32), y=np.zeros(3, np.float32))
    r = replay(path, "--input", extra)
    assert r.returncode == 2 and "[y]: the plan has no input 'y'" in r.stderr, r.stderr
    r = replay(path, "--input", str(tmp_path / "missing.npz"))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_safetensors_weights_round_trip_every_dtype_bit_for_bit(tmp_path):
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo

    values = {"f32": np.linspace(-1, 1, 40, dtype=np.float32).reshape(5, 8),
              "bf16": np.linspace(-3, 3, 40).astype(ml_dtypes.bfloat16).reshape(5, 8),
              "i64": np.arange(40, dtype=np.int64).reshape(5, 8) * (1 << 33)}
    consts = tuple(Constant(k, {"f32": "float32", "bf16": "bfloat16", "i64": "int64"}[k], v.shape, v)
                   for k, v in values.items())
    g = Graph("w", (TensorInfo("x", "float32", (5, 8)),), ("y",), (Node("add", "add", ("x", "f32"), ("y",), ()),),
              consts)
    model_json.save(g, str(tmp_path / "model.json"))
    assert json.loads((tmp_path / "model.json").read_text())["weights"]["file"] == "weights.safetensors"
    back = {c.name: c.data for c in model_json.parse(json.loads((tmp_path / "model.json").read_text()),
                                                     str(tmp_path)).constants}
    for k, v in values.items():
        assert back[k].dtype == v.dtype and back[k].tobytes() == v.tobytes()


def test_a_weight_that_is_not_as_declared_is_refused_before_it_is_read(tmp_path):
    doc = json.load(open(os.path.join(ROOT, "plans", "examples", "mlp", "model.json")))
    arrays = safetensors_numpy.load_file(os.path.join(ROOT, "plans", "examples", "mlp", "weights.safetensors"))
    arrays["fc1.w"] = arrays["fc1.w"][:64]  # (a shape other than declared)
    safetensors_numpy.save_file(arrays, str(tmp_path / "weights.safetensors"))
    doc["weights"]["file"] = "weights.safetensors"
    (tmp_path / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ModelError, match=r"weight 'fc1.w': stored shape \(64, 64\) != declared \(128, 64\)"):
        model_json.load(str(tmp_path / "model.json"))
    (tmp_path / "weights.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(ModelError, match="not a readable .safetensors file"):
        model_json.load(str(tmp_path / "model.json"))
