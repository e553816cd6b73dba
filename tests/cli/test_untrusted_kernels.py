"""An unsigned plan whose kernel holds a forged host callback (tests/kernel_tampering.py):
`aotplan verify`, `aotplan replay --isolate` and `aotplan replay` refuse it with one
error line and exit 2, in a subprocess with a timeout, so that a regression shows as
a failure (a crash's signal, or the timeout), never as a hung CI."""

import subprocess
import sys

import pytest

import kernel_tampering as kt


@pytest.fixture(scope="module")
def forged_plan(tmp_path_factory, mode_examples):
    plan = kt.forged_callback(mode_examples["mlp", "sink"][1])
    return kt.write(tmp_path_factory.mktemp("forged"), plan)


@pytest.mark.parametrize("command", [
    ["verify"],
    ["replay", "--isolate", "--random-inputs", "--steps", "1"],
    ["replay", "--random-inputs", "--steps", "1"],
])
def test_a_forged_callback_is_refused(forged_plan, command):
    r = subprocess.run([sys.executable, "-m", "aotplan.cli", command[0], forged_plan, *command[1:]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "custom call to 'xla_ffi_python_cpu_callback'" in errors[0], errors[0]
