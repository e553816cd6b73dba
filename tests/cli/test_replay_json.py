"""`replay --json` (one JSON object: load, memory, step-time percentiles, outputs, and
what --profile / --check-alloc found) and `replay --profile --trace FILE` (a Chrome
trace: one slice per launch, one track per step): both parsed here."""

import json

import pytest

from conftest import aotplan_cli, plan_file



@pytest.fixture(scope="module")
def kernel_plan(kernel_examples, tmp_path_factory):
    return plan_file(tmp_path_factory, kernel_examples["mlp"][1], "mlp"), kernel_examples["mlp"][1]


def replay(*args):
    return aotplan_cli("replay", *args)


def test_json_holds_the_run_and_nothing_else_is_printed(kernel_plan):
    path, plan = kernel_plan
    r = replay(path, "--random-inputs", "--steps", "30", "--json", "--profile", "--check-alloc")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)  # (the whole of stdout is the one object)
    t = report["step_ms"]
    assert 0 < t["min"] <= t["p50"] <= t["p90"] <= t["p99"] <= t["max"] and t["min"] <= t["mean"] <= t["max"]
    assert report["steps"] == 30 and report["launch_mode"] == "kernel" and report["launches"] == len(plan.launches)
    assert report["device_memory"]["step"] == plan.memory.step_device_bytes and report["load_ms"] > 0
    assert report["outputs"] == {"probs": {"dtype": "float32", "shape": [4, 10]}}
    assert [row["launch"] for row in report["profile"]["launches"]] == list(range(len(plan.launches)))
    assert report["check_alloc"]["ok"] is True


def test_trace_has_one_slice_per_launch_per_profiled_step(kernel_plan, tmp_path):
    path, plan = kernel_plan
    out = tmp_path / "trace.json"
    r = replay(path, "--random-inputs", "--steps", "6", "--profile", "--trace", str(out))
    assert r.returncode == 0 and "written to" in r.stdout, r.stderr
    events = json.loads(out.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    launches = [e for e in slices if e["args"]["launch"] >= 0]
    assert len(launches) == 6 * len(plan.launches)
    for step in range(1, 7):
        mine = sorted((e for e in slices if e["tid"] == step), key=lambda e: e["ts"])
        assert [e["args"]["launch"] for e in mine if e["args"]["launch"] >= 0] == list(range(len(plan.launches)))
        assert all(e["dur"] >= 0 for e in mine)
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(mine, mine[1:]))  # (back to back)
    assert {e["name"] for e in launches} == {l.node for l in plan.launches}


def test_trace_without_profile_or_over_the_plan_is_refused(kernel_plan):
    path, _ = kernel_plan
    r = replay(path, "--random-inputs", "--trace", "t.json")
    assert r.returncode == 2 and "--trace writes the steps --profile times: add --profile" in r.stderr
    r = replay(path, "--random-inputs", "--profile", "--trace", path)
    assert r.returncode == 2 and "--trace" in r.stderr and "plan" in r.stderr
