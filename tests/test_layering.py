"""The layers: the core imports neither the compiler nor the executor, the two never
import each other, and the commands sit on top (import-linter's contracts in
pyproject.toml). Inference hosts have the executor, not the compiler: `replay` and
`inspect` must work where `compiler` cannot be imported."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

BLOCK = """
import importlib.abc, sys
class NoCompiler(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "compiler" or name.startswith("compiler."):
            raise ImportError("the compiler is not installed on this host")
sys.meta_path.insert(0, NoCompiler())
from aotplan.cli import main
try:
    main(sys.argv[1:])
finally:
    assert not any(m == "compiler" or m.startswith("compiler.") for m in sys.modules)
"""


def test_layer_contracts_hold():
    r = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                        "sys.exit(lint_imports(no_cache=True, no_logo=True))"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout and "4 kept" in r.stdout, r.stdout


@pytest.mark.parametrize("module, late, chain", [
    ("compiler/reference.py", "from executor import tools", "compiler.reference -> executor.tools"),
    ("compiler/ops/matmul.py", "from compiler.passes import group", "compiler.ops.matmul -> compiler.passes.group"),
    ("compiler/planners/greedy.py", "from aotplan.core import graph", "compiler.planners.greedy -> aotplan.core.graph"),
    ("aotplan/serving/profiles.py", "from compiler import pipeline", "aotplan.serving.profiles -> compiler.pipeline"),
    ("executor/session.py", "from aotplan.serving import catalog", "executor.session -> aotplan.serving.catalog"),
])
def test_layer_contracts_catch_a_broken_rule(tmp_path, module, late, chain):
    """The contracts are not vacuous: an import made inside a function (as the compiler
    once imported the executor) breaks each of them."""
    import shutil

    for d in ("aotplan", "compiler", "executor"):
        shutil.copytree(os.path.join(ROOT, d), tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    with open(tmp_path / module, "a") as f:
        f.write(f"\n\ndef _late():\n    {late}  # noqa\n")
    r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, '.'); from importlinter.cli import "
                        "lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"],
                       cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode != 0 and chain in r.stdout, r.stdout + r.stderr


def test_executor_sources_never_import_compiler():
    pat = re.compile(r"^\s*(from|import)\s+compiler\b", re.M)
    for dirpath, _, files in os.walk(os.path.join(ROOT, "executor")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f)) as fh:
                    assert not pat.search(fh.read()), f


def test_replay_and_inspect_without_compiler(examples, tmp_path):
    from aotplan.core import codec

    plan = tmp_path / "mlp.plan"
    plan.write_bytes(codec.encode(examples["mlp"][1]))
    for args in (["replay", str(plan), "--random-inputs", "--steps", "2"], ["inspect", str(plan)]):
        r = subprocess.run([sys.executable, "-c", BLOCK] + args, capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
    assert "output probs" in subprocess.run([sys.executable, "-c", BLOCK, "replay", str(plan), "--random-inputs"],
                                            capture_output=True, text=True).stdout
    r = subprocess.run([sys.executable, "-c", BLOCK, "compile", os.path.join(ROOT, "plans/examples/mlp/model.json")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0  # the block is real: compiling needs the compiler
