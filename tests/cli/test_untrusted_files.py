"""Files a command reads because another file names them, or that could be endless:
a model.json's weights file lies beside it or below its folder (unless
--allow-outside-weights); key files are regular files of bounded size (a FIFO would
hang, /dev/zero never ends). Each refusal is one error line, exit 2."""

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from aotplan.cli import main as cli
from aotplan.core import codec, model_json
from aotplan.core.errors import ModelError, PlanError
from conftest import EXAMPLES, example_npz, one_error_line

MLP = os.path.join(EXAMPLES, "mlp")


def _model_naming(tmp_path, weights_file):
    """model.json of the example MLP in tmp_path/model/, naming `weights_file`."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    doc = json.load(open(os.path.join(MLP, "model.json")))
    doc["weights"]["file"] = weights_file
    (folder / "model.json").write_text(json.dumps(doc))
    return folder / "model.json"


@pytest.mark.parametrize("where", ["parent", "absolute", "symlink"])
def test_weights_outside_the_model_folder_are_refused(tmp_path, where):
    shutil.copy(example_npz("mlp"), tmp_path / "w.npz")
    if where == "parent":
        model = _model_naming(tmp_path, "../w.npz")
    elif where == "absolute":
        model = _model_naming(tmp_path, str(tmp_path / "w.npz"))
    else:
        model = _model_naming(tmp_path, "link.npz")
        os.symlink(tmp_path / "w.npz", tmp_path / "model" / "link.npz")
    with pytest.raises(ModelError, match="a weights file lies beside model.json or in a folder below it"):
        model_json.load(str(model))
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "m.plan")])
    one_error_line(r, "weights.file", "--allow-outside-weights")
    assert not (tmp_path / "m.plan").exists()
    graph, _ = model_json.load(str(model), allow_outside_weights=True)
    assert graph.constants
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "m.plan"), "--allow-outside-weights"])
    assert r.exit_code == 0, r.output


def test_weights_in_a_folder_below_are_read(tmp_path):
    model = _model_naming(tmp_path, "sub/w.npz")
    (tmp_path / "model" / "sub").mkdir()
    shutil.copy(example_npz("mlp"), tmp_path / "model" / "sub" / "w.npz")
    assert model_json.load(str(model))[0].constants


def test_key_files_are_bounded_regular_files(tmp_path):
    big = tmp_path / "big.key"
    big.write_bytes(b"k" * (codec.MAX_KEY_FILE_BYTES + 1))
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    cases = [("/dev/zero", "is not a regular file"), (str(fifo), "is not a regular file"),
             (str(big), "a key file holds at most"), (str(tmp_path), "cannot read key file")]
    for path, why in cases:
        with pytest.raises(PlanError, match=why):
            codec.read_key(path)
    plan = os.path.join(EXAMPLES, "mlp", "model.json")
    for path, why in cases[:3]:
        r = CliRunner().invoke(cli, ["compile", plan, "-o", str(tmp_path / "s.plan"), "--sign-key", path])
        one_error_line(r, why)
        r = CliRunner().invoke(cli, ["verify", str(tmp_path / "absent.plan"), "--trust-key", path])
        assert r.exit_code == 2, r.output


def test_the_trust_key_variable_is_bounded_too(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTPLAN_TRUST_KEY", "/dev/zero")
    with pytest.raises(PlanError, match="AOTPLAN_TRUST_KEY: key file '/dev/zero' is not a regular file"):
        codec.env_key()
