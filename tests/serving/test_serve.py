"""`aotplan serve` on the open inference protocol, talked to by Triton's client over REST
and gRPC, on loopback: metadata, answers equal to the executor's, bad requests,
concurrent clients, batching, SIGTERM. Needs `pip install -e '.[serve,test]'`."""

import importlib.util
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

# (the server runs in its own process: KServe's and tritonclient's gRPC modules register
# the same protobuf names and cannot both be imported in one process)
if importlib.util.find_spec("kserve") is None:
    pytest.skip("serving needs KServe and Triton's client: pip install -e '.[test,serve,serve-test]' (.ci/run's "
                "Python 3.12 leg runs these)", allow_module_level=True)
httpclient = pytest.importorskip("tritonclient.http", reason="the serving tests talk with tritonclient")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="the serving tests talk with tritonclient")
from tritonclient.utils import InferenceServerException  # noqa: E402

import executor  # noqa: E402
from serve_process import ServeProcess  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


def compile_plan(out, *args):
    cmd = [sys.executable, "-m", "aotplan.cli", "compile", *args, "-o", out]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return out


def cnn_at_batch(folder, rows):
    """The example CNN's model.json at batch `rows` (two batch profiles of one model)."""
    import json
    import shutil

    ex = os.path.join(ROOT, "plans", "examples", "cnn")
    model = json.load(open(os.path.join(ex, "model.json")))
    model["inputs"][0]["shape"][0] = rows
    shutil.copy(os.path.join(ex, "weights.safetensors"), folder / "weights.safetensors")
    path = folder / f"cnn_b{rows}.json"
    path.write_text(json.dumps(model))
    return str(path)


def two_inputs(folder):
    """A model.json of two inputs whose first axes differ (a [2, 3] and b [3]): served at
    its own shapes, no batch axis."""
    import json

    doc = {"format": "aotplan.model", "version": 1, "name": "two",
           "inputs": [{"name": "a", "dtype": "float32", "shape": [2, 3]}, {"name": "b", "dtype": "float32", "shape": [3]}],
           "outputs": ["y"], "nodes": [{"name": "add", "op": "add", "inputs": ["a", "b"], "outputs": ["y"]}]}
    path = folder / "two.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    import onnx

    import onnx_light

    d = tmp_path_factory.mktemp("serve")
    ex = os.path.join(ROOT, "plans", "examples")
    squeeze = str(d / "squeezenet.onnx")
    onnx.save(onnx_light.load_randomized("squeezenet"), squeeze)
    return {
        "cnn": compile_plan(str(d / "cnn.plan"), os.path.join(ex, "cnn", "model.json")),
        "mlp": compile_plan(str(d / "mlp.plan"), os.path.join(ex, "mlp", "model.json")),
        "cnn_rows": compile_plan(str(d / "cnn_rows.plan"), "--method", f"b1={cnn_at_batch(d, 1)}",
                                 "--method", f"b8={cnn_at_batch(d, 8)}"),
        "squeezenet": compile_plan(str(d / "squeezenet.plan"), squeeze),
        "two": compile_plan(str(d / "two.plan"), two_inputs(d)),
    }


@pytest.fixture(scope="module")
def server(plans):
    s = ServeProcess([plans["cnn"], plans["mlp"], plans["cnn_rows"], plans["squeezenet"], plans["two"]],
                     "--name", "cnn", "--name", "mlp", "--name", "cnn_rows", "--name", "squeezenet", "--name", "two",
                     "--max-request-bytes", "4M")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def sessions(plans):
    return {k: executor.load(p) for k, p in plans.items()}


def feeds_for(session, seed=0, rows=None):
    rng = np.random.default_rng(seed)
    out = {}
    for name, dtype, shape in session.input_specs:
        shape = (rows,) + tuple(shape[1:]) if rows else tuple(shape)
        out[name] = rng.standard_normal(shape).astype(dtype)
    return out


def infer(client_mod, url, model, feeds, binary=True, outputs=None):
    client = client_mod.InferenceServerClient(url)
    inputs = []
    for name, a in feeds.items():
        i = client_mod.InferInput(name, list(a.shape), {"float32": "FP32", "int64": "INT64"}[a.dtype.name])
        if client_mod is httpclient:
            i.set_data_from_numpy(a, binary_data=binary)
        else:
            i.set_data_from_numpy(a)
        inputs.append(i)
    asked = None
    if outputs:
        asked = [client_mod.InferRequestedOutput(n, binary_data=binary) if client_mod is httpclient
                 else client_mod.InferRequestedOutput(n) for n in outputs]
    result = client.infer(model, inputs, outputs=asked)
    return result


def test_listens_on_loopback_only(server):
    addresses = server.listening()
    assert {port for _, port in addresses} == {server.http_port, server.grpc_port}
    assert {ip for ip, _ in addresses} <= LOOPBACK, addresses


@pytest.mark.parametrize("client_mod, attr", [(httpclient, "http"), (grpcclient, "grpc")])
def test_live_ready_and_metadata_match_the_plan(server, sessions, client_mod, attr):
    client = client_mod.InferenceServerClient(getattr(server, attr))
    assert client.is_server_live() and client.is_server_ready()
    for name in ("cnn", "mlp", "squeezenet"):
        assert client.is_model_ready(name)
        meta = client.get_model_metadata(name)
        meta = meta if isinstance(meta, dict) else {"inputs": [{"name": t.name, "datatype": t.datatype,
                                                                "shape": list(t.shape)} for t in meta.inputs],
                                                    "outputs": [{"name": t.name, "datatype": t.datatype,
                                                                 "shape": list(t.shape)} for t in meta.outputs]}
        s = sessions[name]
        assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == \
            [(n, "FP32", list(shape)) for n, _, shape in s.input_specs]
        assert [(t["name"], t["shape"]) for t in meta["outputs"]] == [(n, list(shape)) for n, _, shape in
                                                                       s.output_specs]
    rows = client.get_model_metadata("cnn_rows")
    shape = rows["inputs"][0]["shape"] if isinstance(rows, dict) else list(rows.inputs[0].shape)
    assert shape == [-1, 3, 32, 32]  # (two batch profiles: one model, 1 to 8 rows)


@pytest.mark.parametrize("transport", ["http-binary", "http-json", "grpc"])
@pytest.mark.parametrize("model", ["cnn", "mlp", "squeezenet"])
def test_answers_equal_the_executors_bit_for_bit(server, sessions, model, transport):
    s = sessions[model]
    feeds = feeds_for(s, seed=7)
    want = s.run(feeds)
    mod, url = (grpcclient, server.grpc) if transport == "grpc" else (httpclient, server.http)
    result = infer(mod, url, model, feeds, binary=transport != "http-json")
    for name, a in want.items():
        got = result.as_numpy(name)
        assert got.dtype == a.dtype and got.shape == a.shape
        np.testing.assert_array_equal(got, a)


def test_a_profile_plan_takes_any_rows_up_to_its_largest(server, sessions):
    b1 = sessions["cnn_rows"].methods["b1"]
    b8 = sessions["cnn_rows"].methods["b8"]
    one = feeds_for(b1, seed=3)
    np.testing.assert_array_equal(infer(httpclient, server.http, "cnn_rows", one).as_numpy("fc"), b1.run(one)["fc"])
    five = feeds_for(b8, seed=4, rows=5)  # (runs on b8, padded with three zero rows)
    padded = {"image": np.concatenate([five["image"], np.zeros((3, 3, 32, 32), np.float32)])}
    np.testing.assert_array_equal(infer(grpcclient, server.grpc, "cnn_rows", five).as_numpy("fc"),
                                  b8.run(padded)["fc"][:5])


@pytest.mark.parametrize("client_mod, attr", [(httpclient, "http"), (grpcclient, "grpc")])
def test_inputs_of_different_first_axes_at_the_plans_own_shapes(server, sessions, client_mod, attr):
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([10, 20, 30], np.float32)}
    got = infer(client_mod, getattr(server, attr), "two", feeds).as_numpy("y")
    np.testing.assert_array_equal(got, sessions["two"].run(feeds)["y"])


def test_only_the_outputs_asked_for_are_returned(server, sessions):
    r = infer(httpclient, server.http, "cnn", feeds_for(sessions["cnn"]), outputs=["fc"])
    assert r.as_numpy("fc") is not None


def bad_http(server, sessions):
    cnn = sessions["cnn"]
    x = feeds_for(cnn)["image"]
    return {
        "wrong name": ({"imagex": x}, "input 'imagex': the model has no such input"),
        "wrong shape": ({"image": x[:1]}, "input 'image': shape [1, 3, 32, 32], the model takes [2, 3, 32, 32]"),
        "wrong datatype": ({"image": x.astype(np.int64)}, "input 'image': datatype INT64, the model takes FP32"),
    }


@pytest.mark.parametrize("client_mod, attr, code", [(httpclient, "http", "400"),
                                                    (grpcclient, "grpc", "INVALID_ARGUMENT")])
def test_a_bad_request_is_a_protocol_error_naming_the_input_and_the_next_is_served(server, sessions, client_mod,
                                                                                  attr, code):
    cnn = sessions["cnn"]
    good = feeds_for(cnn, seed=1)
    want = cnn.run(good)["fc"]
    url = getattr(server, attr)
    for what, (feeds, says) in bad_http(server, sessions).items():
        with pytest.raises(InferenceServerException) as e:
            infer(client_mod, url, "cnn", feeds)
        assert says in str(e.value), what
        assert code in str(e.value.status()), (what, e.value.status())
        np.testing.assert_array_equal(infer(client_mod, url, "cnn", good).as_numpy("fc"), want)
    with pytest.raises(InferenceServerException, match="output 'nope': the model has no such output"):
        infer(client_mod, url, "cnn", good, outputs=["nope"])
    with pytest.raises(InferenceServerException, match="(?i)not found|unknown model|does not exist"):
        infer(client_mod, url, "nomodel", good)


def test_json_that_is_not_the_models_tensor_is_a_400(server):
    import json
    import urllib.error
    import urllib.request

    def post(body):
        req = urllib.request.Request(f"http://{server.http}/v2/models/mlp/infer", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def tensor(data, shape=(4, 64), datatype="FP32"):
        return json.dumps({"inputs": [{"name": "x", "datatype": datatype, "shape": list(shape),
                                       "data": data}]}).encode()

    assert post(tensor([0.0] * 256))[0] == 200
    for body, says in [(tensor([0.0] * 255), "255 values, shape [4, 64] holds 256"),
                       (tensor(["a"] * 256), "data holds str 'a', not a number"),
                       (tensor([[0.0] * 64] * 3 + [[0.0] * 63]), "255 values"),
                       (json.dumps({"inputs": []}).encode(), "input 'x' is missing")]:
        status, answer = post(body)
        assert status == 400 and says in answer["error"], answer
    status, answer = post(b"{not json")
    assert 400 <= status < 500, (status, answer)
    assert post(tensor([0.5] * 256))[0] == 200


def raw_http(server, head, chunks=()):
    """-> the status line of the answer to a request sent as `head` then `chunks`, the
    server free to answer (and close) before the body has been sent."""
    import socket

    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as c:
        c.sendall(head)
        try:
            for chunk in chunks:
                c.sendall(chunk)
        except OSError:  # (it answered and closed while the body was on its way)
            pass
        answer = b""
        while len(answer) < 65536:
            part = c.recv(65536)
            if not part:
                break
            answer += part
        return answer


def test_a_request_over_the_size_limit_is_refused(server):
    url = "/v2/models/mlp/infer"
    by_length = raw_http(server, f"POST {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: {5 << 20}\r\n\r\n".encode())
    assert by_length.startswith(b"HTTP/1.1 413") and b"at most 4194304" in by_length, by_length
    chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
    chunked = raw_http(server, f"POST {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                               f"Transfer-Encoding: chunked\r\n\r\n".encode(), [chunk] * 4 + [b"10\r\n" + b" " * 16 + b"\r\n"])
    # (the body's last chunk takes it 16 bytes past the limit; nothing more is sent, so
    # the server has read all it got when it answers and closes: no reset loses the answer)
    assert chunked.startswith(b"HTTP/1.1 413"), chunked
    client = grpcclient.InferenceServerClient(server.grpc)
    i = grpcclient.InferInput("x", [4, 64], "FP32")
    i.set_data_from_numpy(np.zeros((4, 64), np.float32))
    i._raw_content = b"\0" * (5 << 20)  # (a message over the limit: refused before it is decoded)
    with pytest.raises(InferenceServerException, match="RESOURCE_EXHAUSTED|larger than max"):
        client.infer("mlp", [i])
    mlp = {"x": np.zeros((4, 64), np.float32)}
    assert infer(grpcclient, server.grpc, "mlp", mlp).as_numpy("probs").shape == (4, 10)
    assert infer(httpclient, server.http, "mlp", mlp).as_numpy("probs").shape == (4, 10)


def test_a_malformed_binary_request_is_a_400_and_the_next_is_served(server):
    """The REST route reads binary tensors itself (aotplan/serving/rest_infer.py): every
    way its framing can be wrong is one 400 naming what is wrong."""
    import json
    import urllib.error
    import urllib.request

    x = np.zeros((4, 64), np.float32).tobytes()

    def post(head, data, header_length=None):
        head = json.dumps(head).encode()
        req = urllib.request.Request(f"http://{server.http}/v2/models/mlp/infer", data=head + data, headers={
            "Inference-Header-Content-Length": str(len(head) if header_length is None else header_length)})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def tensor(size):
        return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 64],
                            "parameters": {"binary_data_size": size}}]}

    assert post(tensor(len(x)), x)[0] == 200
    for head, data, length, says in [
        (tensor(len(x)), x, 10 ** 6, b"Inference-Header-Content-Length 1000000"),
        (tensor(len(x)), x, 3, b"not a v2 inference request"),
        (tensor(len(x) + 4), x, None, b"no 'data' and no binary data"),
        (tensor(len(x) - 4), x, None, b"4 bytes of binary data that no input claims"),
        (tensor(len(x)), x[:-4], None, b"no 'data' and no binary data"),
        ({"inputs": [{"name": "x"}]}, b"", None, b"inputs[0]: needs 'name', 'datatype' and 'shape'"),
        ({"inputs": "x"}, b"", None, b"a list 'inputs'"),
    ]:
        status, answer = post(head, data, length)
        assert status == 400 and says in answer, (status, answer)
    assert post(tensor(len(x)), x)[0] == 200


def test_concurrent_clients_each_get_their_own_answers(server, sessions):
    mlp = sessions["mlp"]
    cases = [feeds_for(mlp, seed=100 + k) for k in range(16)]
    wants = [mlp.run(f)["probs"] for f in cases]
    failures = []

    def client(worker):
        mod, url = (httpclient, server.http) if worker % 2 else (grpcclient, server.grpc)
        for j in range(50):
            k = (worker * 5 + j) % len(cases)
            got = infer(mod, url, "mlp", cases[k]).as_numpy("probs")
            if not np.array_equal(got, wants[k]):
                failures.append((worker, j, k))

    threads = [threading.Thread(target=client, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


def test_batching_joins_concurrent_requests_into_fewer_steps(plans, sessions):
    b1 = sessions["cnn_rows"].methods["b1"]
    s = ServeProcess([plans["cnn_rows"]], "--name", "rows", "--max-batch", "8", "--batch-wait-ms", "20")
    try:
        cases = [feeds_for(b1, seed=200 + k) for k in range(32)]
        wants = [b1.run(f)["fc"] for f in cases]
        before = s.steps("rows")
        got = [None] * 32
        start = threading.Barrier(32)

        def client(k):
            start.wait(60)
            got[k] = infer(httpclient, s.http, "rows", cases[k]).as_numpy("fc")

        threads = [threading.Thread(target=client, args=(k,)) for k in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        steps = s.steps("rows") - before
        for k in range(32):  # (a row run in a batch of 8 is not bit-identical to one run alone)
            np.testing.assert_allclose(got[k], wants[k], rtol=1e-5, atol=1e-6)
        assert 4 <= steps < 32, steps
    finally:
        assert s.stop() == 0


def test_sigterm_finishes_the_requests_in_flight_and_exits_0(plans, sessions):
    mlp = sessions["mlp"]
    feeds = feeds_for(mlp, seed=5)
    want = mlp.run(feeds)["probs"]
    s = ServeProcess([plans["mlp"]], "--name", "mlp")
    answered, refused, wrong = [], [], []
    stop = threading.Event()

    def client():
        while not stop.is_set() and len(answered) < 5000:
            try:
                got = infer(httpclient, s.http, "mlp", feeds).as_numpy("probs")
            except Exception as e:  # (after the server closed its port: refused, never a wrong answer)
                refused.append(type(e).__name__)
                return
            (answered if np.array_equal(got, want) else wrong).append(1)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    while len(answered) < 50 and all(t.is_alive() for t in threads):
        threading.Event().wait(0.01)
    rc = s.stop()
    stop.set()
    for t in threads:
        t.join(60)
    assert rc == 0 and "stopped\n" in s.lines
    assert len(answered) >= 50 and not wrong


def test_without_kserve_serve_says_how_to_install(plans):
    code = ("import sys; sys.modules['kserve'] = None; sys.argv = ['aotplan', 'serve', sys.argv[1]]; "
            "from aotplan.cli import run; run()")
    r = subprocess.run([sys.executable, "-c", code, plans["mlp"]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "pip install 'aotplan[serve]'" in r.stderr, r.stderr


def serve_error(*args):
    """-> (exit code, stderr) of an `aotplan serve` that must fail before serving."""
    from serve_process import free_port

    r = subprocess.run([sys.executable, "-m", "aotplan.cli", "serve", *args, "--http-port", str(free_port()),
                        "--grpc-port", str(free_port())], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stderr


def test_refusals_before_serving_are_one_line_each(plans, tmp_path):
    from state_model import accumulator

    stateful = compile_plan(str(tmp_path / "acc.plan"), accumulator(tmp_path))
    for name in ("key", "other"):  # (Ed25519 pairs: key.pem signs, other.pub.pem is someone else's)
        subprocess.run([sys.executable, "-m", "aotplan.cli", "keygen", str(tmp_path / name)], check=True,
                       capture_output=True, timeout=120)
    other = tmp_path / "other.pub.pem"
    signed = compile_plan(str(tmp_path / "signed.plan"), os.path.join(ROOT, "plans", "examples", "mlp", "model.json"),
                          "--sign-key", str(tmp_path / "key.pem"))
    for args, says in [
        ([plans["mlp"], "--require-signature"], "not signed"),
        ([signed, "--trust-key", str(other)], "signature"),
        ([stateful], "keeps state across steps (acc)"),
        ([plans["cnn_rows"], "--max-batch", "9"], "--max-batch 9: "),
        ([plans["mlp"], "--replicas", "2"], "add --ray"),
        ([plans["mlp"], plans["mlp"]], "two models named 'mlp'"),
        ([str(tmp_path / "missing.plan")], "missing.plan"),
    ]:
        rc, err = serve_error(*args)
        assert rc == 2 and says in err and "Traceback" not in err, (args, rc, err)
        assert len(err.strip().splitlines()) == 1, err


def test_one_port_for_both_servers_is_refused(plans):
    from serve_process import free_port

    port = str(free_port())
    r = subprocess.run([sys.executable, "-m", "aotplan.cli", "serve", plans["mlp"], "--http-port", port, "--grpc-port",
                        port], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and f"--http-port and --grpc-port are both {port}" in r.stderr, r.stderr


def test_a_port_in_use_is_named(plans):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "aotplan.cli", "serve", plans["mlp"], "--http-port", str(port)],
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and f"port {port} on 127.0.0.1: in use" in r.stderr, r.stderr


def test_a_tensor_parallel_plan_is_served_on_its_devices(plans, sessions, tmp_path, monkeypatch):
    """A plan for 2 devices (--parallel tensor; fused, and sink: one program over the
    devices) served on 2 forced host devices answers as the one-device plan does (to
    float rounding: the split sums add in another order)."""
    mlp = os.path.join(ROOT, "plans", "examples", "mlp", "model.json")
    fused = compile_plan(str(tmp_path / "mlp_tp.plan"), mlp, "--devices", "2", "--parallel", "tensor")
    sink = compile_plan(str(tmp_path / "mlp_tp_sink.plan"), mlp, "--devices", "2", "--parallel", "tensor",
                        "--launch", "sink")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")  # (the server's environment)
    s = ServeProcess([fused, sink], "--name", "mlp_tp", "--name", "mlp_tp_sink")
    try:
        feeds = feeds_for(sessions["mlp"], seed=3)
        want = sessions["mlp"].run(feeds)["probs"]
        for name in ("mlp_tp", "mlp_tp_sink"):
            got = infer(httpclient, s.http, name, feeds).as_numpy("probs")
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    finally:
        assert s.stop() == 0
