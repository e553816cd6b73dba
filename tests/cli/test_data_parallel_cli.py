"""`aotplan compile --devices N` and the commands that read its plan: the summary says
the devices, `inspect` prints the mesh, `replay` runs it on N (forced host) devices
and prints them, `check` compares one device's program with the model, and what is
not supported yet for such a plan is one error naming
the flag."""

import os

import jax
import numpy as np
import pytest

from conftest import EXAMPLES, aotplan_cli, replay_on_loopback

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="forced host devices: a CPU host's test")

MLP = os.path.join(EXAMPLES, "mlp", "model.json")


def _env(devices):
    flags = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}").strip()
    return {**{k: v for k, v in os.environ.items() if k not in ("AOTPLAN_TRUST_KEY", "AOTPLAN_CACHE_DIR")},
            "XLA_FLAGS": flags}


@pytest.fixture(scope="module")
def plan2(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("dp") / "mlp2.plan")
    r = aotplan_cli("compile", MLP, "--devices", "2", "-o", path)
    assert r.returncode == 0, r.stderr
    assert "devices: 2 (data parallel): each runs this plan on 2 of the batch's 4" in r.stdout, r.stdout
    assert "per device; compile time" in r.stdout, r.stdout
    return path


def test_replay_runs_on_the_devices_and_inspect_prints_the_mesh(plan2, tmp_path):
    r = aotplan_cli("replay", plan2, "--random-inputs", "--steps", "2", env=_env(2))
    assert r.returncode == 0, r.stderr
    assert "on 2 devices (cpu:0, cpu:1), data parallel" in r.stdout and "output probs: float32[4, 10]" in r.stdout, \
        r.stdout
    x = str(tmp_path / "x.npy")  # (feeds from a file, as for a one-device plan)
    np.save(x, np.ones((4, 64), np.float32))
    r = aotplan_cli("replay", plan2, "--input", f"x={x}", "--steps", "1", env=_env(2))
    assert r.returncode == 0 and "output probs: float32[4, 10]" in r.stdout, r.stdout + r.stderr
    r = aotplan_cli("inspect", plan2)
    assert r.returncode == 0 and "devices: 2 (data parallel:" in r.stdout, r.stdout + r.stderr


def test_check_compares_one_devices_program_with_the_model(plan2):
    r = aotplan_cli("check", plan2, MLP)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "runs on 2 devices (data parallel): checking one device's program against the model at one slice" \
        in r.stdout and "output probs: ok" in r.stdout, r.stdout


@pytest.mark.parametrize("args,msg", [
    (["replay", "{plan}", "--random-inputs"],
     "error: the plan runs on 2 devices (data parallel); this host has 1 cpu device(s)"),
    (["replay", "{plan}", "--random-inputs", "--profile"],
     "error: --profile: not supported yet for a plan for several devices"),
    (["compile", MLP, "--devices", "3", "-o", "{tmp}/x.plan"],
     "error: --devices 3 does not divide the batch: input 'x' has 4 on its first axis"),
    (["compile", MLP, "--devices", "2", "--state", "probs=x", "-o", "{tmp}/x.plan"],
     "--devices 2: a plan for several devices holds one method and no states (leave out --state)"),
])
def test_what_it_cannot_do_is_one_error(plan2, tmp_path, args, msg):
    devices = 2 if "--profile" in args else 1
    r = aotplan_cli(*[a.format(plan=plan2, tmp=tmp_path) for a in args], env=_env(devices))
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr


def test_two_processes_on_loopback_run_the_plan_and_each_gives_the_whole_outputs(plan2, tmp_path):
    import numpy as np

    one = str(tmp_path / "one.plan")
    assert aotplan_cli("compile", MLP, "-o", one).returncode == 0
    r = aotplan_cli("replay", one, "--random-inputs", "--steps", "1", "--output", str(tmp_path / "want.npz"),
                    env=_env(1))
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in _env(1).items() if k != "XLA_FLAGS"}  # (one device each)
    for rc, out, err in replay_on_loopback(plan2, [tmp_path / "p0.npz", tmp_path / "p1.npz"], env):
        assert rc == 0 and "on 2 devices (cpu:0, cpu:2048), data parallel" in out, out + err[-3000:]
    with np.load(tmp_path / "want.npz") as w:
        for i in range(2):
            with np.load(tmp_path / f"p{i}.npz") as g:
                np.testing.assert_allclose(g["probs"], w["probs"], rtol=1e-5, atol=1e-6)
