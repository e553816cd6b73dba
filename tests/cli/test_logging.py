"""One logging story: the compiler's pass lines on "aotplan.compiler", the executor's
notes on "aotplan.executor", the importer's on "aotplan.import"; the CLI's -v / -vv / -q
(AOTPLAN_DEBUG as -v's environment variable) set the "aotplan" logger's level."""

import logging
import os
import subprocess
import sys

from conftest import ROOT

MLP = os.path.join(ROOT, "plans", "examples", "mlp", "model.json")


def compile_(tmp_path, *flags, env=None):
    return subprocess.run([sys.executable, "-m", "aotplan.cli", *flags, "compile", MLP, "-o", str(tmp_path / "m.plan")],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def test_verbosity_from_flags_and_the_environment(tmp_path):
    quiet = compile_(tmp_path)
    assert quiet.returncode == 0 and "[aotplan]" not in quiet.stderr
    one = compile_(tmp_path, "-v")
    assert "[aotplan] validate: 6 nodes" in one.stderr and "phases" not in one.stderr
    two = compile_(tmp_path, env={"AOTPLAN_DEBUG": "2"})
    assert "[aotplan] validate: 6 nodes" in two.stderr and "phases" in two.stderr
    bad = compile_(tmp_path, env={"AOTPLAN_DEBUG": "lots"})
    assert bad.returncode == 2 and "AOTPLAN_DEBUG" in bad.stderr


def test_the_library_logs_on_named_loggers(caplog):
    from aotplan.core import model_json
    from compiler import pipeline

    graph, digest = model_json.load(MLP)
    with caplog.at_level(logging.DEBUG, logger="aotplan"):
        pipeline.compile_graph(graph, digest, pipeline.Options(launch="kernel"))
    names = {r.name for r in caplog.records}
    assert "aotplan.compiler" in names
    assert any(r.getMessage().startswith("validate: 6 nodes") for r in caplog.records)
