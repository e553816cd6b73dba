"""`aotplan verify` / `replay --isolate`: a plan's kernels are loaded in a child process
first, so a plan that crashes XLA is an error, not a dead server. And files are written
atomically: a compile killed midway leaves the previous plan intact."""

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from aotplan.core import codec, fileio
from aotplan.cli import main as cli
from aotplan.core.errors import PlanError
from conftest import EXAMPLES
from executor import isolate


@pytest.fixture(scope="module")
def mlp_plan(tmp_path_factory, examples):
    from aotplan.core import model_json
    from compiler import pipeline

    graph = examples["mlp"][0]  # every weight in the pool: the kernel's bytes are its program, not weights
    plan = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(inline_bytes=0)).plan
    path = tmp_path_factory.mktemp("iso") / "mlp.plan"
    path.write_bytes(codec.encode(plan))
    return path, plan


def test_probe_sound_plan(mlp_plan):
    path, plan = mlp_plan
    report = isolate.probe(path)
    assert report.kernels == len(plan.kernels) and report.launches == len(plan.launches)
    assert report.kernel_source == "stablehlo" and not report.trusted


def test_verify_cli(mlp_plan):
    path, _ = mlp_plan
    r = CliRunner().invoke(cli, ["verify", str(path)])
    assert r.exit_code == 0, r.output
    assert "fields and verifier ok" in r.output and "in a child process" in r.output and r.output.endswith("ok\n")


def test_corrupt_kernel_is_an_error_not_a_crash(mlp_plan, tmp_path):
    """Kernel bytes flipped after the build, digest recomputed: the header and the
    verifier cannot see it; the child's load must fail (or crash), reported as an error."""
    path, plan = mlp_plan
    k = plan.kernels[0]
    blob = bytearray(k.exported)
    for i in range(len(blob) // 3, len(blob) // 3 + 64):
        blob[i] ^= 0xA5
    bad = dataclasses.replace(plan, kernels=(dataclasses.replace(k, exported=bytes(blob)),) + plan.kernels[1:])
    p = tmp_path / "bad.plan"
    p.write_bytes(codec.encode(bad))
    with pytest.raises(PlanError, match=re.escape(f"kernel {k.name!r}") + "|child process"):
        isolate.probe(p)
    r = CliRunner().invoke(cli, ["replay", str(p), "--isolate", "--random-inputs"])
    assert r.exit_code == 2 and "error:" in r.output


def test_child_crash_names_the_stage(mlp_plan, monkeypatch):
    """A child killed by a signal while loading a kernel: PlanError naming the kernel."""
    path, _ = mlp_plan
    monkeypatch.setattr(isolate, "_CHILD", ("-c", (
        "import os, signal, sys; sys.stdin.read(); print(\"stage loading kernel 'k3'\", flush=True); "
        "os.kill(os.getpid(), signal.SIGSEGV)")))
    with pytest.raises(PlanError, match=r"crashed \(SIGSEGV\) while loading kernel 'k3'.*not safe to load"):
        isolate.probe(path)


def test_child_hang_times_out(mlp_plan, monkeypatch):
    path, _ = mlp_plan
    monkeypatch.setattr(isolate, "_CHILD", ("-c", (
        "import sys, time; sys.stdin.read(); print('stage running a warm-up step', flush=True); time.sleep(60)")))
    t0 = time.perf_counter()
    with pytest.raises(PlanError, match=r"did not finish in 2 s \(it was running a warm-up step\)"):
        isolate.probe(path, timeout=2)
    assert time.perf_counter() - t0 < 30


def test_child_error_keeps_its_type(mlp_plan, tmp_path):
    path, _ = mlp_plan
    key = tmp_path / "k"
    key.write_bytes(os.urandom(32))
    with pytest.raises(PlanError, match="not signed, and a signature is required"):
        isolate.probe(path, require_signature=True)
    r = CliRunner().invoke(cli, ["verify", str(path), "--trust-key", str(key), "--require-signature"])
    assert r.exit_code == 2 and "not signed" in r.output


def test_replay_isolate_serves_the_bytes_it_checked(mlp_plan, examples, tmp_path, monkeypatch):
    """The plan file replaced by another plan between the child's check and the load:
    the parent loads the bytes the child checked (one read), not the new file."""
    path, plan = mlp_plan
    target = tmp_path / "swapped.plan"
    target.write_bytes(path.read_bytes())
    other = codec.encode(examples["cnn"][1])
    real = isolate.probe

    def probe_then_swap(*args, **kwargs):
        report = real(*args, **kwargs)
        target.write_bytes(other)
        return report

    monkeypatch.setattr(isolate, "probe", probe_then_swap)
    r = CliRunner().invoke(cli, ["replay", str(target), "--isolate", "--random-inputs", "--steps", "1"])
    assert r.exit_code == 0, r.output
    out = plan.tensors[plan.outputs[0]]
    assert f"output {plan.output_names[0]}: float32{list(out.shape)}" in r.output, r.output
    assert target.read_bytes() == other  # (the swap happened)


# ------------------------------------------------------------------ atomic writes

def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "m.plan"
    target.write_bytes(b"old plan")

    def boom(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        fileio.atomic_write(str(target), b"new plan" * 1000)
    assert target.read_bytes() == b"old plan"
    assert os.listdir(tmp_path) == ["m.plan"]  # no temp file left behind


def test_killed_compile_leaves_the_previous_plan(tmp_path):
    """SIGKILL a compile at several points: the plan already there is intact, or (if
    the compile got that far) replaced whole by the new one."""
    model = os.path.join(EXAMPLES, "transformer", "model.json")
    out = tmp_path / "t.plan"
    old = b"the previous plan"
    cmd = [sys.executable, "-m", "aotplan.cli", "compile", model, "-o", str(out), "--launch", "kernel"]
    outcomes = set()
    for delay in (0.5, 2.0, 3.5, 5.0):
        out.write_bytes(old)
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        data = out.read_bytes()
        if data == old:
            outcomes.add("old")
        else:
            codec.decode(data)  # a whole, valid plan
            outcomes.add("new")
    assert "old" in outcomes
