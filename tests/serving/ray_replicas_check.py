"""Run by test_serve_ray.py inside a network namespace of its own (only loopback
exists there, so whatever Ray binds is reachable from this host alone): serve a plan
on 2 Ray Serve replicas, ask both transports, report as JSON on stdout."""

import json
import os
import sys
import time
import urllib.request

import numpy as np
import psutil

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the checkout first: with tests/ on the path, its folder tests/executor would otherwise
# be found as a namespace package before an editable install's `executor`
sys.path[:0] = [os.path.dirname(TESTS), TESTS]
from serve_process import ServeProcess  # noqa: E402


def main(plan):
    import executor

    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    session = executor.load(plan)
    (name, dtype, shape), = session.input_specs
    cases = [np.random.default_rng(k).standard_normal(shape).astype(dtype) for k in range(8)]
    wants = [session.run({name: x}) for x in cases]
    t0 = time.monotonic()
    s = ServeProcess([plan], "--name", "m", "--ray", "--replicas", "2", timeout=300)
    report = {"start_s": time.monotonic() - t0, "wrong": 0, "answered": 0}
    try:
        for mod, url in ((httpclient, s.http), (grpcclient, s.grpc)):
            client = mod.InferenceServerClient(url)
            for k in range(40):
                i = mod.InferInput(name, list(shape), "FP32")
                i.set_data_from_numpy(cases[k % 8])
                got = client.infer("m", [i])
                for out, want in wants[k % 8].items():
                    report["wrong"] += not np.array_equal(got.as_numpy(out), want)
                report["answered"] += 1
        metrics = urllib.request.urlopen(f"http://{s.http}/metrics", timeout=30).read().decode()
        report["replicas"] = {line.split('replica="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                              for line in metrics.splitlines() if line.startswith("aotplan_replica_requests_total")}
        report["front_end_listens"] = s.listening()
        tree = [s.proc.pid] + [c.pid for c in psutil.Process(s.proc.pid).children(recursive=True)]
    finally:
        t1 = time.monotonic()
        report["rc"] = s.stop(timeout=120)
        report["stop_s"] = time.monotonic() - t1
    time.sleep(2)
    report["left_running"] = [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    report["stopped_line"] = "stopped\n" in s.lines
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
