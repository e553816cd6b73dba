"""The same model compiles to byte-identical plans from different directories and
processes (exported modules carry no source locations; nothing iterates a set)."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import EXAMPLES


@pytest.mark.parametrize("mode", ["sink", "fused", "kernel"])
def test_byte_identical_across_directories_and_processes(tmp_path, mode):
    outs = []
    for i in range(2):
        d = tmp_path / f"build{i}" / ("nested" * i)
        d.mkdir(parents=True)
        for f in ("model.json", "weights.npz"):
            shutil.copy(os.path.join(EXAMPLES, "transformer", f), d / f)
        out = d / "t.plan"
        r = subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", "model.json", "-o", str(out),
                            "--launch", mode],
                           cwd=d, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": str(i + 1)})
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert b"/build0" not in outs[0] and b"test_determinism" not in outs[0]
