#!/usr/bin/env python3
"""`aotplan serve` under load: p50/p99 latency and requests/s through Triton's client
(REST with binary tensors, and gRPC), at several concurrencies, with and without
batching, against the floor: the same plan's `session.run` in a plain loop.

Per model, two plans are compiled: the model at its own batch, and a plan of two batch
profiles (1 and 8 rows) for `--max-batch 8`. A run sends single-row requests (the
model's own batch for the unbatched plan) from C client threads for --seconds, all
clients in this process (on a 2-core machine the client threads and the server share
the cores: what this measures is the server and its clients together). Printed per
row: p50, p99, requests/s, and p50 over the floor's step time; the "server overhead" line
is p50 at concurrency 1 minus the floor.

    python scripts/bench_serve.py [--models cnn,squeezenet] [--concurrency 1,4,16]
        [--seconds 3] [--batch-wait-ms 2] [--ray]
Needs: pip install -e '.[serve,serve-test,onnx]' (and '.[ray]' for --ray)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from serve_process import ServeProcess  # noqa: E402


def compile_plan(out, *args):
    subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", *args, "-o", out], check=True,
                   capture_output=True, timeout=1800)
    return out


def model_plans(name, folder):
    """-> (plan at the model's batch, plan of profiles b1 and b8, input name)."""
    if name == "cnn":
        ex = os.path.join(ROOT, "plans", "examples", "cnn")
        shutil.copy(os.path.join(ex, "weights.safetensors"), folder)
        paths = {}
        for rows in (1, 8):
            model = json.load(open(os.path.join(ex, "model.json")))
            model["inputs"][0]["shape"][0] = rows
            paths[rows] = os.path.join(folder, f"cnn_b{rows}.json")
            json.dump(model, open(paths[rows], "w"))
        plain = compile_plan(os.path.join(folder, "cnn.plan"), os.path.join(ex, "model.json"))
        rows = compile_plan(os.path.join(folder, "cnn_rows.plan"), "--method", f"b1={paths[1]}",
                            "--method", f"b8={paths[8]}")
        return plain, rows
    import onnx

    import onnx_light

    m = onnx_light.load_randomized(name)
    path = os.path.join(folder, f"{name}.onnx")
    onnx.save(m, path)
    plain = compile_plan(os.path.join(folder, f"{name}.plan"), path)
    inp = onnx_light.data_input(m)
    inp.type.tensor_type.shape.dim[0].dim_param = "N"
    sym = os.path.join(folder, f"{name}_n.onnx")
    onnx.save(m, sym)
    dims = ",".join(str(d.dim_value) for d in inp.type.tensor_type.shape.dim[1:])
    rows = compile_plan(os.path.join(folder, f"{name}_rows.plan"), sym, "--profile", f"b1:{inp.name}=1,{dims}",
                        "--profile", f"b8:{inp.name}=8,{dims}")
    return plain, rows


def floor(plan, method=None, seconds=2.0):
    """-> (p50 step seconds, steps/s) of session.run in a loop, and the feeds used."""
    import executor

    s = executor.load(plan)
    s = s.methods[method] if method else s
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape).astype(d) for n, d, shape in s.input_specs}
    for _ in range(5):
        s.run(feeds)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        s.run(feeds)
        times.append(time.perf_counter() - t0)
    s.close()
    return float(np.median(times)), len(times) / sum(times), feeds


def load(url, transport, model, feeds, clients, seconds):
    """-> (p50 s, p99 s, requests/s) of `clients` threads sending `feeds` for `seconds`."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    mod = grpcclient if transport == "grpc" else httpclient
    latencies, errors = [[] for _ in range(clients)], []
    start = threading.Barrier(clients)
    stop_at = [0.0]

    def client(k):
        c = mod.InferenceServerClient(url)
        inputs = []
        for name, a in feeds.items():
            i = mod.InferInput(name, list(a.shape), "FP32")
            i.set_data_from_numpy(a)
            inputs.append(i)
        c.infer(model, inputs)  # (connection set up outside the timing)
        start.wait(60)
        if k == 0:
            stop_at[0] = time.perf_counter() + seconds
        while stop_at[0] == 0.0:
            time.sleep(0.0005)
        while time.perf_counter() < stop_at[0] and len(latencies[k]) < 200_000:
            t0 = time.perf_counter()
            try:
                c.infer(model, inputs)
            except Exception as e:  # noqa: BLE001 (counted and reported, never silently)
                errors.append(repr(e))
                return
            latencies[k].append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    wall = time.perf_counter() - t0 - 0  # (includes the warm-up requests: requests/s uses the timed window)
    del wall
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[0]}")
    all_l = np.concatenate([np.array(x) for x in latencies])
    return float(np.percentile(all_l, 50)), float(np.percentile(all_l, 99)), len(all_l) / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="cnn,squeezenet")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--batch-wait-ms", type=float, default=2.0)
    ap.add_argument("--transports", default="http,grpc")
    ap.add_argument("--ray", action="store_true",
                    help="Also serve the plain plan on 1 and 2 Ray Serve replicas (--ray --replicas N). Ray binds "
                         "every interface: run the script in a network namespace of its own, "
                         "unshare -n sh -c 'ip link set lo up && python scripts/bench_serve.py --ray'")
    args = ap.parse_args()
    conc = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            plain, rows = model_plans(name, folder)
            f_p50, f_rate, feeds = floor(plain)
            f1_p50, _, one = floor(rows, "b1")
            f8_p50, _, _ = floor(rows, "b8")
            print(f"\n{name}: floor (session.run loop): {f_p50 * 1e3:.3f} ms/step at its own batch "
                  f"({f_rate:.0f} steps/s); profiles: b1 {f1_p50 * 1e3:.3f} ms, b8 {f8_p50 * 1e3:.3f} ms "
                  f"({f8_p50 / 8 * 1e3:.3f} ms a row)")
            print(f"  {'server':<24} {'transport':<9} {'clients':>7} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} "
                  f"{'p50/floor':>9}")
            runs = [("plain", [plain], feeds, f_p50), ("batch 8, {:g} ms".format(args.batch_wait_ms),
                                                         [rows, "--max-batch", "8", "--batch-wait-ms",
                                                          str(args.batch_wait_ms)], one, f1_p50)]
            if args.ray:
                runs += [(f"ray, {n} replica{'s' * (n > 1)}", [plain, "--ray", "--replicas", str(n)], feeds, f_p50)
                         for n in (1, 2)]
            for label, serve_args, req, base in runs:
                srv = ServeProcess([serve_args[0]], "--name", "m", *serve_args[1:])
                try:
                    for transport in args.transports.split(","):
                        url = srv.grpc if transport == "grpc" else srv.http
                        for c in conc:
                            p50, p99, rate = load(url, transport, "m", req, c, args.seconds)
                            print(f"  {label:<24} {transport:<9} {c:>7} {p50 * 1e3:>8.3f} {p99 * 1e3:>8.3f} "
                                  f"{rate:>8.0f} {p50 / base:>9.2f}")
                            if c == 1 and label == "plain":
                                print(f"  {'':<24} server overhead per request at 1 client: "
                                      f"{(p50 - base) * 1e3:.3f} ms")
                    if not label.startswith("ray"):
                        print(f"  {label}: {srv.steps('m')} steps served")
                finally:
                    srv.stop()


if __name__ == "__main__":
    main()
