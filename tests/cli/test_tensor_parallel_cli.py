"""`aotplan compile --devices N --parallel tensor` and the commands that read its plan:
the summary and `inspect` say the collectives, `replay` runs it on N forced host
devices, or on two processes on loopback joined by jax.distributed (gloo), each
printing the one-device plan's outputs; the wrong devices and run flags are each one
clear error."""

import os

import jax
import numpy as np
import pytest

from aotplan.core.errors import PlanError
from conftest import EXAMPLES, aotplan_cli, replay_on_loopback
from executor import distributed

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="host devices and gloo: a CPU host's test")

MLP = os.path.join(EXAMPLES, "mlp", "model.json")


def _env(devices=None):
    env = {k: v for k, v in os.environ.items() if k not in ("AOTPLAN_TRUST_KEY", "AOTPLAN_CACHE_DIR", "XLA_FLAGS")}
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("tp")
    one, two = str(d / "one.plan"), str(d / "two.plan")
    assert aotplan_cli("compile", MLP, "--launch", "kernel", "-o", one).returncode == 0
    r = aotplan_cli("compile", MLP, "--devices", "2", "--parallel", "tensor", "-o", two)
    assert r.returncode == 0, r.stderr
    assert "launch mode fused" in r.stdout, r.stdout  # (the default for tensor parallel)
    assert ("devices: 2 (tensor parallel): each holds its part of 5 split weights and takes the whole inputs; 2 "
            "collectives per step (1 all-reduce, 1 all-gather;") in r.stdout, r.stdout
    out = str(d / "want.npz")
    r = aotplan_cli("replay", one, "--random-inputs", "--steps", "1", "--output", out, env=_env())
    assert r.returncode == 0, r.stderr
    return one, two, out, d


def test_replay_on_forced_host_devices_gives_the_one_device_outputs(plans):
    _, two, want, d = plans
    got = str(d / "forced.npz")
    r = aotplan_cli("replay", two, "--random-inputs", "--steps", "2", "--output", got, env=_env(2))
    assert r.returncode == 0, r.stderr
    assert "on 2 devices (cpu:0, cpu:1), tensor parallel" in r.stdout and "runs 2 collectives between" in r.stdout
    _same(got, want)
    r = aotplan_cli("replay", two, "--random-inputs", "--steps", "2", "--check-alloc", env=_env(2))
    assert r.returncode == 0 and "arena pointers of 2 devices unchanged" in r.stdout and "  ok: nothing" in r.stdout, \
        r.stdout + r.stderr
    r = aotplan_cli("check", two, MLP, env=_env(2))
    assert r.returncode == 0 and "runs on 2 devices (tensor parallel): comparing its outputs" in r.stdout and \
        "output probs: ok" in r.stdout, r.stdout + r.stderr
    r = aotplan_cli("verify", two, env=_env())  # (device 0's kernels, in a child process)
    assert r.returncode == 0 and "format 9" in r.stdout and "run in a child process" in r.stdout, r.stdout + r.stderr
    r = aotplan_cli("inspect", two)
    assert "devices: 2 (tensor parallel" in r.stdout and "collective all_reduce after launch" in r.stdout, r.stdout


def test_two_processes_on_loopback_run_the_plan_and_each_gives_the_outputs(plans):
    _, two, want, d = plans
    for rc, out, err in replay_on_loopback(two, [d / "p0.npz", d / "p1.npz"], _env()):
        assert rc == 0, out + err[-3000:]
        assert "on 2 devices (cpu:0, cpu:2048), tensor parallel" in out, out
    for i in range(2):
        _same(str(d / f"p{i}.npz"), want)


def test_a_sink_plan_is_one_program_over_the_devices(plans):
    """`--launch sink`: compiled without XLA_FLAGS (the command asks XLA for the host
    devices its export needs), its collectives counted in the summary; replayed on
    forced host devices and on two processes it gives the one-device outputs."""
    _, _, want, d = plans
    sink = str(d / "sink.plan")
    r = aotplan_cli("compile", MLP, "--devices", "2", "--parallel", "tensor", "--launch", "sink", "-o", sink,
                    env=_env())
    assert r.returncode == 0, r.stderr
    assert "launch mode sink: 1 launch" in r.stdout and ("one program over the devices holds the step's collectives: "
                                                         "2 in the program, 2 per step in the HLO") in r.stdout, r.stdout
    got = str(d / "sink.npz")
    r = aotplan_cli("replay", sink, "--random-inputs", "--steps", "2", "--output", got, "--check-alloc", env=_env(2))
    assert r.returncode == 0 and "runs one program over the devices, its collectives inside" in r.stdout and \
        "arena pointers of 2 devices unchanged" in r.stdout, r.stdout + r.stderr
    _same(got, want)
    r = aotplan_cli("verify", sink, env=_env())  # (its child asks for the host devices the program spans)
    assert r.returncode == 0 and "run in a child process" in r.stdout, r.stdout + r.stderr
    x = str(d / "x.npy")
    np.save(x, np.ones((4, 64), np.float32))
    for plan in (sink, plans[1]):  # (feeds from a file, as for a one-device plan)
        r = aotplan_cli("replay", plan, "--input", f"x={x}", "--steps", "1", env=_env(2))
        assert r.returncode == 0 and "output probs: float32[4, 10]" in r.stdout, r.stdout + r.stderr
    r = aotplan_cli("replay", sink, "--random-inputs", env=_env())
    assert r.returncode != 0 and "error: the plan runs on 2 devices (tensor parallel); this host has 1 cpu" in \
        r.stderr, r.stderr
    for i, (rc, out, err) in enumerate(replay_on_loopback(sink, [d / "s0.npz", d / "s1.npz"], _env())):
        assert rc == 0, out + err[-3000:]
        _same(str(d / f"s{i}.npz"), want)


def _same(got, want):
    with np.load(got) as g, np.load(want) as w:
        assert set(g.files) == set(w.files)
        for k in w.files:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-6)


def test_bad_devices_and_run_flags_are_one_clear_error(plans):
    _, two, _, _ = plans
    r = aotplan_cli("replay", two, "--random-inputs", env=_env(1))
    assert r.returncode != 0 and "the plan runs on 2 devices (tensor parallel); this host has 1 cpu device" in \
        r.stderr, r.stderr
    r = aotplan_cli("replay", two, "--random-inputs", "--coordinator", "127.0.0.1:1", env=_env())
    assert r.returncode == 2 and "--coordinator, --process-id and --num-processes go together" in r.stderr, r.stderr
    r = aotplan_cli("compile", MLP, "--parallel", "tensor", "-o", os.devnull)
    assert r.returncode == 2 and "--parallel tensor splits the weights across devices: give --devices N" in r.stderr
    for args, msg in ((("nohost", 0, 2), r"--coordinator 'nohost': expected HOST:PORT"),
                      (("127.0.0.1:99999", 0, 2), r"expected HOST:PORT"),
                      (("127.0.0.1:8476", 2, 2), r"--process-id 2: expected 0 to 1 \(--num-processes 2\)"),
                      (("127.0.0.1:8476", 0, 1), r"--num-processes 1: several processes run one plan")):
        with pytest.raises(PlanError, match=msg):
            distributed.initialize(*args)
