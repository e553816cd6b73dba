"""Golden plans written by earlier aotplans keep loading and give their frozen answers,
or, once their format has left the supported window, are refused saying so."""

import functools
import glob
import json
import os
import struct

import numpy as np
import pytest

import executor
from aotplan.core import codec
from aotplan.core.errors import PlanError
from conftest import ROOT, child_report

GOLDEN = sorted(glob.glob(os.path.join(ROOT, "plans", "golden", "v*", "*.plan")))


def _version(path):
    with open(path, "rb") as f:
        return struct.unpack_from("<8sII", f.read(16))[1]


def test_there_are_golden_plans_of_this_version_and_older():
    versions = {_version(p) for p in GOLDEN}
    assert codec.FORMAT_VERSION in versions and min(versions) < codec.FORMAT_VERSION
    here = [p for p in GOLDEN if _version(p) == codec.FORMAT_VERSION]
    # (format 9 holds tensor-parallel plans: in every launch mode, sink one program over the devices)
    assert {codec.read(p).launch_mode for p in here} == {"fused", "kernel", "sink"}


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: os.path.relpath(p, os.path.join(ROOT, "plans", "golden")))
def test_golden_plan_replays_or_is_refused_by_version(path):
    v = _version(path)
    assert os.path.basename(os.path.dirname(path)) == f"v{v}"
    if not codec.MIN_SUPPORTED_VERSION <= v <= codec.MAX_SUPPORTED_VERSION:
        with pytest.raises(PlanError, match=f"plan format {v} is (older|newer) than this executor"):
            executor.load(path)
        return
    if codec.read(path).mesh is not None:  # (several devices: forced host devices, in a child process)
        assert _mesh_replays()[path] == "OK", _mesh_replays()[path]
        return
    sess = executor.load(path)
    # every kernel of an older plan, written by an older jax, takes the fast path too
    assert set(sess.kernel_paths.values()) == {"compiled"}, sess.kernel_paths
    for feeds, want, method in _steps(path[:-len(".plan")] + ".io.npz"):  # (in order: states carry over)
        got = sess.run(feeds, method=method)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


_MESH_CHILD = r"""
import json, os, sys
paths = json.loads(sys.argv[1])
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={sys.argv[2]}").strip()
import numpy as np
import executor
report = {}
for path in paths:
    try:
        sess = executor.load(path)
        # (a tensor-parallel sink plan's one program spans the devices: its own path)
        fast = "compiled over the devices" if type(sess).__name__ == "SpmdSession" else "compiled"
        assert set(sess.kernel_paths.values()) == {fast}, sess.kernel_paths
        with np.load(path[:-len(".plan")] + ".io.npz") as z:  # (one step: "in:NAME", "out:NAME")
            io = {k: z[k] for k in z.files}
        got = sess.run({k[3:]: v for k, v in io.items() if k.startswith("in:")})
        want = {k[4:]: v for k, v in io.items() if k.startswith("out:")}
        assert set(got) == set(want) and want
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
        report[path] = "OK"
    except Exception as e:
        report[path] = f"{type(e).__name__}: {e}"
print("REPORT " + json.dumps(report))
"""


@functools.lru_cache(maxsize=None)
def _mesh_replays():
    """{golden mesh plan: "OK" or what failed}: every plan for several devices replayed
    in one child process with enough forced host devices (one jax start for all)."""
    paths = [p for p in GOLDEN if codec.MIN_SUPPORTED_VERSION <= _version(p) <= codec.MAX_SUPPORTED_VERSION
             and codec.read(p).mesh is not None]
    devices = max(codec.read(p).mesh.devices for p in paths)
    return child_report(_MESH_CHILD, json.dumps(paths), str(devices), timeout=600)


def _steps(io_path):
    """[(feeds, outputs, method)] of a golden plan's io file: "in:NAME"/"out:NAME" for
    one step, "step{k}.in:NAME"/"step{k}.out:NAME" (and "step{k}.method" in a plan of
    several methods) for several (scripts/make_golden.py)."""
    with np.load(io_path) as z:
        arrays = {k: z[k] for k in z.files}
    steps = {}
    for key, v in arrays.items():
        prefix, _, rest = key.partition(".") if key.startswith("step") else ("", "", key)
        step = steps.setdefault(int(prefix[4:]) if prefix else 0, [{}, {}, None])
        if rest == "method":
            step[2] = str(v)
            continue
        side, _, name = rest.partition(":")
        step[side == "out"][name] = v
    return [tuple(steps[k]) for k in sorted(steps)]
