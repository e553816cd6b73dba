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
        for f in ("model.json", "weights.safetensors"):
            shutil.copy(os.path.join(EXAMPLES, "transformer", f), d / f)
        out = d / "t.plan"
        r = subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", "model.json", "-o", str(out),
                            "--launch", mode],
                           cwd=d, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": str(i + 1)})
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert b"/build0" not in outs[0] and b"test_determinism" not in outs[0]


def test_parallel_compiles_give_the_same_plan(kernel_examples):
    """Kernels compile on a thread pool (`--jobs`): a plan of several kernels is
    byte-identical whatever the number. (Embedded executables are not byte-stable even
    compiled twice in one thread: they get built, and their workspaces match.)"""
    from aotplan.core import codec, model_json
    from compiler import pipeline

    g, plan0 = kernel_examples["cnn"][:2]
    blobs = []
    for jobs in (1, 3):
        plan = pipeline.compile_graph(g, model_json.graph_digest(g), pipeline.Options(launch="kernel", jobs=jobs)).plan
        assert len(plan.kernels) > 3
        blobs.append(codec.encode(plan))
    assert blobs[0] == blobs[1]
    native = pipeline.compile_graph(g, model_json.graph_digest(g),
                                    pipeline.Options(launch="kernel", embed_native=True, jobs=3)).plan
    assert all(k.native for k in native.kernels)
    assert [k.workspace_bytes for k in native.kernels] == [k.workspace_bytes for k in plan0.kernels]
