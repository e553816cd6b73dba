"""`aotplan serve --ray --replicas 2`: two Ray Serve replicas on a local Ray instance
serve one model through the same front end; both answer, both answers are the
executor's, and SIGTERM ends everything. Slow (a Ray instance takes ~10 s to start and
~1.6 GB): python -m pytest -q -m slow tests/serving/test_serve_ray.py.

Ray's own processes (GCS, raylet, workers) listen on every interface, whatever
`ray.init` is told; the test runs in a network namespace of its own (`unshare -n`,
where only loopback exists) so nothing it starts is reachable from outside this host."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _netns_works():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    r = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("kserve", "ray", "tritonclient")),
                    reason="needs pip install -e '.[serve,serve-test,ray]'")
@pytest.mark.skipif(not _netns_works(), reason="needs `unshare -n` (a network namespace: root or user namespaces), "
                                               "so that Ray, which binds every interface, stays on loopback")
def test_two_ray_replicas_both_serve_and_stop_cleanly(tmp_path):
    plan = str(tmp_path / "mlp.plan")
    subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", os.path.join(ROOT, "plans/examples/mlp/model.json"),
                    "-o", plan], check=True, capture_output=True, timeout=600)
    r = subprocess.run(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable,
                        os.path.join(HERE, "ray_replicas_check.py"), plan],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["answered"] == 80 and report["wrong"] == 0, report
    assert len(report["replicas"]) == 2 and all(n > 0 for n in report["replicas"].values()), report
    assert {ip for ip, _ in report["front_end_listens"]} <= {"127.0.0.1", "::ffff:127.0.0.1"}, report
    assert report["rc"] == 0 and report["stopped_line"], report
    assert report["left_running"] == [], report
    print(f"ray: started in {report['start_s']:.1f} s, stopped in {report['stop_s']:.1f} s, "
          f"requests per replica {sorted(report['replicas'].values())}")
