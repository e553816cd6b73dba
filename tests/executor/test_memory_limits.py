"""A plan's memory against what the host allows (executor/memory_limits.py): what the
plan states, before anything is allocated, and what its kernels need once compiled
here, before the arena is; the caller's cap (`max_memory`, `--max-memory`). Each
refusal is one LimitError naming the figures."""

import dataclasses
import types

import psutil
import pytest
from click.testing import CliRunner

import executor
from aotplan.cli import main as cli
from aotplan.cli.app import ByteSize
from aotplan.core import codec
from aotplan.core.errors import LimitError, PlanError
from conftest import one_error_line


@pytest.fixture(scope="module")
def cnn(mode_examples, tmp_path_factory):
    """The example CNN as a sink plan, and its file."""
    plan = mode_examples["cnn", "sink"][1]
    path = tmp_path_factory.mktemp("mem") / "cnn.plan"
    path.write_bytes(codec.encode(plan))
    return plan, path


def _need(plan):
    return plan.memory.step_device_bytes + sum(plan.tensors[i].nbytes for i in plan.inputs + plan.outputs)


def test_a_cap_below_what_the_plan_states_is_refused(cnn):
    plan, path = cnn
    need = _need(plan)
    with pytest.raises(LimitError, match=rf"plan needs {need} bytes of device memory \(arena "
                                         rf"{plan.memory.arena_bytes}, .*but max_memory allows {need - 1} bytes"):
        executor.load(path, max_memory=need - 1, warmup=False)
    assert executor.load(path, max_memory=need, warmup=False).workspace_bytes >= 0


def test_the_cli_takes_a_size(cnn):
    plan, path = cnn
    r = CliRunner().invoke(cli, ["replay", str(path), "--random-inputs", "--steps", "1", "--max-memory", "1K"])
    one_error_line(r, "plan needs", "max_memory allows 1024 bytes")
    r = CliRunner().invoke(cli, ["verify", str(path), "--max-memory", "1K"])
    one_error_line(r, "plan needs", "max_memory allows 1024 bytes")
    r = CliRunner().invoke(cli, ["replay", str(path), "--random-inputs", "--steps", "1", "--max-memory", "8G"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("text, size", [("1000", 1000), ("512M", 512 << 20), ("2GiB", 2 << 30), ("1.5k", 1536),
                                        ("8gb", 8 << 30), ("1T", 1 << 40)])
def test_sizes(text, size):
    assert ByteSize().convert(text, None, None) == size


@pytest.mark.parametrize("text", ["", "lots", "-1", "0", "nan", "inf", "1X", "0.1"])
def test_bad_sizes_are_usage_errors(text, cnn):
    r = CliRunner().invoke(cli, ["verify", str(cnn[1]), "--max-memory", text])
    assert r.exit_code == 2 and "Invalid value for '--max-memory'" in r.output, r.output


def test_a_small_host_is_refused_before_anything_is_allocated(cnn, monkeypatch):
    """On a CPU the limit is the host's available memory (as psutil reads it), less a margin."""
    plan, path = cnn
    small = _need(plan)  # 90% of it is less than the plan needs
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(available=small))
    with pytest.raises(LimitError, match=rf"but cpu:0 may take {int(small * 0.9)} bytes \(90% of the host's "
                                         rf"{small} bytes of available memory\)"):
        executor.load(path, warmup=False)


def test_kernels_that_need_more_than_the_plan_states_are_refused(cnn):
    """The plan states no workspace (figures edited, digest recomputed); its kernel as
    compiled here needs some: refused by what XLA says, before the arena is allocated."""
    plan, _ = cnn
    session = executor.Session(plan, warmup=False)
    real = session.workspace_bytes
    assert real > 0, "the CNN's kernel has a workspace on this host"
    edited = dataclasses.replace(
        plan, kernels=tuple(dataclasses.replace(k, workspace_bytes=0) for k in plan.kernels),
        memory=dataclasses.replace(plan.memory, max_workspace_bytes=0))
    stated = _need(edited)
    with pytest.raises(LimitError, match=rf"once compiled here \(kernel '.*' wants {real} bytes of workspace, the "
                                         rf"plan states 0;.*but max_memory allows {stated} bytes"):
        executor.Session(codec.decode(codec.encode(edited)), warmup=False, max_memory=stated)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1G"])
def test_max_memory_must_be_a_positive_int(cnn, bad):
    with pytest.raises(PlanError, match="max_memory must be a positive number of bytes"):
        executor.load(cnn[1], max_memory=bad)
