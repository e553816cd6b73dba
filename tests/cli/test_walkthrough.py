"""A new user's walk through the README and the CLI: what the docs promise the CLI does.

No XLA compile here: where a command would compile or load kernels, the step that must
come first is checked and the expensive one is replaced by a stub that fails loudly."""

import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
from click.testing import CliRunner

from aotplan.cli import compile_cmd, files
from aotplan.cli import main
from conftest import EXAMPLES, ROOT, one_error_line

MLP = os.path.join(EXAMPLES, "mlp", "model.json")
GOLDEN_MLP = os.path.join(ROOT, "plans", "golden", "v5", "mlp.plan")


def _never(*args, **kwargs):
    raise AssertionError("the expensive step ran before the output location was checked")


@pytest.fixture
def no_compile(monkeypatch):
    from compiler import pipeline

    monkeypatch.setattr(pipeline, "compile_graph", _never)


@pytest.fixture
def no_load(monkeypatch):
    import executor

    monkeypatch.setattr(executor, "load", _never)




# ------------------------------------------------- outputs: refused before the work

def test_compile_refuses_a_missing_output_folder_before_compiling(no_compile, tmp_path):
    out = tmp_path / "no_such_dir" / "m.plan"
    r = CliRunner().invoke(main, ["compile", MLP, "-o", str(out)])
    one_error_line(r, "cannot write plan", "does not exist")
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(main, ["compile", MLP, "-o", str(tmp_path / "afile" / "m.plan")])
    one_error_line(r, "cannot write plan", "is not a folder")
    assert not out.parent.exists()


def test_compile_refuses_an_unwritable_folder_before_compiling(no_compile, tmp_path, monkeypatch):
    # root may write anywhere: stand in for a folder this user cannot write
    real_access = os.access
    locked = os.path.realpath(tmp_path)
    monkeypatch.setattr(os, "access", lambda p, m, **k: False if os.path.realpath(p) == locked
                        else real_access(p, m, **k))
    r = CliRunner().invoke(main, ["compile", MLP, "-o", str(tmp_path / "m.plan")])
    one_error_line(r, "cannot write plan", "no permission to write in")
    monkeypatch.chdir(tmp_path)  # no -o: the plan goes to the current folder
    r = CliRunner().invoke(main, ["compile", MLP])
    one_error_line(r, "cannot write the plan in the current folder")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_compile_refuses_a_pseudo_file_system_before_compiling(no_compile, tmp_path):
    """/proc passes access() for root, yet takes no new file: found by trying one."""
    r = CliRunner().invoke(main, ["compile", MLP, "-o", "/proc/m.plan"])
    one_error_line(r, "cannot write plan '/proc/m.plan'", "cannot create a file in '/proc'")
    r = CliRunner().invoke(main, ["compile", MLP, "-o", str(tmp_path / "m.plan")])
    assert r.exit_code != 0 and os.listdir(tmp_path) == [], r.output  # (no_compile stops it) the probe is gone


def test_replay_refuses_unwritable_output_and_dump_before_loading(no_load, tmp_path):
    r = CliRunner().invoke(main, ["replay", GOLDEN_MLP, "--random-inputs", "--output",
                                  str(tmp_path / "nodir" / "o.npz")])
    one_error_line(r, "cannot write outputs to", "does not exist")
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(main, ["replay", GOLDEN_MLP, "--random-inputs", "--dump",
                                  str(tmp_path / "afile" / "sub")])
    one_error_line(r, "cannot write dumps to", "is not a folder")


def test_output_to_a_device_is_not_refused(tmp_path):
    files.refuse_unwritable(os.devnull, "outputs")  # written directly, whatever its folder
    files.refuse_unwritable(str(tmp_path / "new" / "deeper"), "dumps", folder=True)  # --dump creates folders


def test_import_onnx_refuses_a_missing_output_folder_before_reading(monkeypatch, tmp_path):
    from compiler.frontends import onnx_import

    monkeypatch.setattr(onnx_import, "load", _never)
    (tmp_path / "m.onnx").write_bytes(b"")
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "m.onnx"), "-o",
                                  str(tmp_path / "nodir" / "m.json")])
    one_error_line(r, "does not exist")


# ------------------------------------------------- messages

def test_internal_error_names_the_command_as_typed(monkeypatch, tmp_path):
    from compiler.frontends import onnx_import

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(onnx_import, "load", boom)
    r = CliRunner().invoke(main, ["import", "onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 3 and "internal error: RuntimeError: boom" in r.output, r.output
    assert "`aotplan --debug import onnx ...`" in r.output, r.output


def test_object_npy_is_named_as_such(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    r = CliRunner().invoke(main, ["compile", MLP, "--freeze-input", f"x={tmp_path / 'obj.npy'}",
                                  "-o", str(tmp_path / "m.plan")])
    one_error_line(r, "--freeze-input x", "array of Python objects")


def test_verify_counts_in_words(monkeypatch):
    from executor import isolate

    monkeypatch.setattr(isolate, "probe", lambda *a, **k: types.SimpleNamespace(line=lambda: "child: stub"))
    r = CliRunner().invoke(main, ["verify", GOLDEN_MLP])
    assert r.exit_code == 0, r.output
    assert "1 launch, 1 kernel;" in r.output, r.output


def test_ctrl_c_while_the_cli_imports_is_one_line(tmp_path):
    code = ("import builtins, sys\n"
            "real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'numpy':\n"
            "        raise KeyboardInterrupt\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "sys.argv = ['aotplan', '--help']\n"
            "from aotplan.cli import run\n"
            "run()\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 130, (p.returncode, p.stderr)
    assert p.stderr.strip() == "interrupted", p.stderr


# ------------------------------------------------- the README against --help

def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_readme_command_options_exist_in_help():
    """Every --option the README's command table shows is one the command takes."""
    rows = [l for l in _readme().splitlines() if l.startswith("| `aotplan ")]
    assert len(rows) >= 7
    for row in rows:
        usage = row.split("`")[1]
        words = usage.split()
        cmd = words[1:3] if words[1] == "import" else words[1:2]
        r = CliRunner().invoke(main, cmd + ["--help"])
        assert r.exit_code == 0, r.output
        helps = {tuple(cmd): r.output}
        for other in re.findall(r"`aotplan (\w+) [^`]*`|`(\w+) --", row.split("|")[2]):
            name = [w for w in other if w][0]  # "`replay --isolate` does the same": another command's option
            helps[(name,)] = CliRunner().invoke(main, [name, "--help"]).output
        for opt in set(re.findall(r"--[a-z][a-z-]*", row)):
            assert any(re.search(re.escape(opt) + r"\b", h) for h in helps.values()), (cmd, opt)


def _reference():
    with open(os.path.join(ROOT, "docs", "reference.md")) as f:
        return f.read()


def test_reference_names_every_clean_up_pass():
    text = _reference()
    m = re.search(r"--disable-pass\s+([a-z_|]+)", text)
    assert m, "docs/reference.md shows --disable-pass NAME|..."
    assert tuple(m.group(1).split("|")) == compile_cmd.PASS_NAMES


def test_readme_python_minimum_is_what_jax_needs():
    """The README's Python minimum is what the oldest jax aotplan supports needs (judged
    where that jax is installed: a newer jax may need a newer Python)."""
    from importlib.metadata import metadata, version

    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        oldest = re.search(r'"jax>=(\d+)\.(\d+)', f.read()).groups()
    if tuple(version("jax").split(".")[:2]) != oldest:
        pytest.skip(f"the README's minimum is the one jax {'.'.join(oldest)} needs; this is jax {version('jax')}")
    need = re.search(r">=\s*(\d+)\.(\d+)", metadata("jax")["Requires-Python"])
    said = re.search(r"Python (\d+)\.(\d+)\+", _readme())
    assert need and said
    assert tuple(map(int, said.groups())) >= tuple(map(int, need.groups())), (said.group(0), need.group(0))


def test_reference_and_docs_list_every_op():
    """docs/reference.md's op list is the op library (transdata: the layout pass's own), and
    docs/onnx.md names every ONNX operator the importer converts."""
    from compiler import ops
    from compiler.frontends import onnx_import

    listed = re.search(r"^Ops: (.*?) \(`formats.md", _reference(), re.S | re.M).group(1)
    names = {w for w in re.split(r"[,\s/]+", listed) if w}
    assert names == set(ops.model_ops()), (sorted(set(ops.model_ops()) - names), sorted(names - set(ops.OPS)))
    assert set(ops.OPS) - set(ops.model_ops()) == {"transdata"}
    with open(os.path.join(ROOT, "docs", "onnx.md")) as f:
        onnx_md = f.read()
    missing = [op for op in onnx_import.SUPPORTED_OPS if not re.search(rf"\b{op}\b", onnx_md)]
    assert not missing, missing


def test_the_model_json_example_in_formats_md_is_a_valid_model(tmp_path):
    """docs/formats.md's model.json example, written out as it stands (with weights of
    the shapes it declares), passes what compile checks before lowering (it once named
    an output no node produced)."""
    import json

    from aotplan.core import model_json
    from compiler import pipeline

    with open(os.path.join(ROOT, "docs", "formats.md"), encoding="utf-8") as f:
        text = re.search(r"```json\n(.*?)```", f.read(), re.S).group(1)
    doc = json.loads(text)
    (tmp_path / "model.json").write_text(text)
    from safetensors.numpy import save_file

    save_file({t["name"]: np.ones(t["shape"], t["dtype"]) for t in doc["weights"]["tensors"]},
              str(tmp_path / doc["weights"]["file"]))
    graph, _ = model_json.load(str(tmp_path / "model.json"))
    pipeline.prepare(graph)
    assert list(graph.outputs) == doc["outputs"]
