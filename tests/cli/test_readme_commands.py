"""Every `aotplan` command the README shows in its shell blocks runs as shown (`pip`
steps aside; `model.onnx` is a small ONNX model with the README's input name; `serve`
on a free port, stopped once ready, or where KServe is not installed, saying how)."""

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT


def readme_commands():
    text = open(os.path.join(ROOT, "README.md")).read()
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("aotplan "):
                    cmds.append(part)
    return cmds


def small_onnx(path):
    pytest.importorskip("onnx")
    from onnx_models import N, TP, model, vi

    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    m = model([N("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]), N("GlobalAveragePool", ["c"], ["g"]),
               N("Flatten", ["g"], ["output"])], [vi("input", TP.FLOAT, ["batch", 3, 224, 224])],
              [vi("output", TP.FLOAT, ["batch", 4])], [("w", w)])
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


def test_the_readme_shows_its_commands():
    cmds = readme_commands()
    assert any(c.startswith("aotplan compile plans/examples/cnn") for c in cmds)
    assert {c.split()[1] for c in cmds} >= {"compile", "replay", "inspect", "serve"}


def test_every_readme_command_runs(tmp_path):
    small_onnx(str(tmp_path / "model.onnx"))
    for cmd in readme_commands():
        args = cmd.replace("plans/", os.path.join(ROOT, "plans") + "/").split()[1:]
        if args[0] == "inspect" and "--plot" in args:
            pytest.importorskip("matplotlib")
        if args[0] == "serve":
            _serve(args, tmp_path)
            continue
        r = subprocess.run([sys.executable, "-m", "aotplan.cli", *args], capture_output=True, text=True,
                           cwd=tmp_path, timeout=900)
        assert r.returncode == 0, (cmd, r.stderr[-2000:])


def _serve(args, tmp_path):
    from serve_process import free_port

    args = [a if a != "8080" else str(free_port()) for a in args] + ["--grpc-port", str(free_port())]
    p = subprocess.Popen([sys.executable, "-m", "aotplan.cli", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    if importlib.util.find_spec("kserve") is None:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 2 and "pip install 'aotplan[serve]'" in err, err
        return
    deadline = time.monotonic() + 300
    line = ""
    while not line.startswith("ready:") and time.monotonic() < deadline and p.poll() is None:
        line = p.stdout.readline()
    p.send_signal(signal.SIGTERM)
    p.wait(120)
    assert line.startswith("ready:") and p.returncode == 0, p.stderr.read()[-2000:]
