"""Shared fixtures. XLA compile time dominates the suite: example plans are compiled
once per session and their sessions reused."""

import contextlib
import hashlib
import os
import struct
import threading

import msgpack
import numpy as np
import pytest

from aotplan.core import codec, formats, model_json
import format_ref
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "plans", "examples")
EXAMPLE_NAMES = ("mlp", "cnn", "transformer")


# Test worker processes (pytest-xdist, `-n auto` in pyproject.toml): one per CPU, at most
# this many: each is a JAX process that compiles the session fixtures' plans for itself
# (about 1-2 GB each), and XLA's compiles inside one already use a few threads.
MAX_TEST_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_TEST_WORKERS))


@pytest.fixture(autouse=True)
def _no_adoption_left_running():
    """A test that steps a native plan without `wait_ready` leaves its session's
    background adoption running (`Session._adopt`, a few ms): wait for it, so that it
    never overlaps the next test (which may patch what it uses)."""
    yield
    import threading

    for t in threading.enumerate():
        if t.name == "aotplan-adopt":
            t.join(60)


def tensor_index(plan):
    """{tensor name: its index in plan.tensors}."""
    return {t.name: i for i, t in enumerate(plan.tensors)}


def one_node_graph(op, inputs, consts=(), n_out=1, **attrs):
    """inputs: [(name, array)] graph inputs; consts: [(name, array)] constants."""
    from aotplan.core import dtypes

    ins = tuple(TensorInfo(n, dtypes.dtype_name(a.dtype), a.shape) for n, a in inputs)
    cs = tuple(Constant(n, dtypes.dtype_name(a.dtype), a.shape, a) for n, a in consts)
    outs = tuple(f"y{i}" for i in range(n_out))
    names = tuple(n for n, _ in inputs) + tuple(n for n, _ in consts)
    return Graph("t", ins, outs, (Node("n", op, names, outs, freeze(attrs)),), cs)


def one_error_line(r, *needles):
    """A CliRunner result that failed as a user's error should: exit code 2, one
    "error:" line holding every needle, no traceback, no internal error."""
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    lines = [l for l in r.output.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, r.output
    for n in needles:
        assert n in lines[0], r.output


_NPZ = {}


def example_npz(name):
    """The path of example `name`'s weights as an .npz (the format earlier releases wrote,
    still read): written once per run from the committed weights.safetensors, for the
    tests that exercise .npz reading on purpose (their model.json names weights.npz:
    `example_doc(name, npz=True)`)."""
    if name not in _NPZ:
        import atexit
        import shutil
        import tempfile

        from safetensors.numpy import load_file

        d = tempfile.mkdtemp(prefix=f"npz_{name}_")
        atexit.register(shutil.rmtree, d, True)
        doc = example_doc(name)
        arrays = load_file(os.path.join(EXAMPLES, name, doc["weights"]["file"]))
        np.savez(os.path.join(d, "weights.npz"), **{k: (v.view(np.uint16) if v.dtype.name == "bfloat16" else v)
                                                    for k, v in arrays.items()})
        _NPZ[name] = os.path.join(d, "weights.npz")
    return _NPZ[name]


def example_doc(name, npz=False):
    """Example `name`'s model.json as a dict; `npz`: naming weights.npz (example_npz)."""
    import json

    with open(os.path.join(EXAMPLES, name, "model.json")) as f:
        doc = json.load(f)
    if npz:
        doc["weights"]["file"] = "weights.npz"
    return doc


def plan_file(tmp_path_factory, plan, name):
    """A session-compiled plan written to a file of its own -> its path (str)."""
    from aotplan.core import codec

    path = tmp_path_factory.mktemp(name) / f"{name}.plan"
    path.write_bytes(codec.encode(plan))
    return str(path)


def aotplan_cli(*args, timeout=600, **kwargs):
    """`aotplan ARGS...` in a child process -> its CompletedProcess (text)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "aotplan.cli", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def mlp_model_edited(tmp_path, mutate):
    """The example MLP's model.json, edited by `mutate(doc)`, written with its weights
    into tmp_path -> the model.json's path."""
    import json
    import shutil

    doc = example_doc("mlp", npz=True)
    shutil.copy(example_npz("mlp"), tmp_path / "weights.npz")
    mutate(doc)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    return str(path)


def compile_and_load(graph, **opts):
    """Graph -> (plan, executor Session) through the real codec."""
    import executor
    from compiler import pipeline

    res = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(**opts))
    return res.plan, executor.Session(codec.decode(codec.encode(res.plan)))


@contextlib.contextmanager
def fifo_fed(path, data):
    """A FIFO at `path` (made if missing) that a thread fills with `data` while the
    block runs (a reader that stops early is fine)."""
    if not os.path.exists(path):
        os.mkfifo(path)

    def feed():
        with open(path, "wb") as f:
            try:
                f.write(data)
            except BrokenPipeError:
                pass

    t = threading.Thread(target=feed)
    t.start()
    try:
        yield str(path)
    finally:
        t.join()


def random_feeds(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}


LAUNCH_MODES = ("sink", "fused", "kernel")


class _Examples(dict):
    """(name, mode) -> (graph, plan, session), compiled on first use, once per session."""

    def __missing__(self, key):
        name, mode = key
        g, _ = model_json.load(os.path.join(EXAMPLES, name, "model.json"))
        plan, sess = compile_and_load(g, launch=mode)
        self[key] = (g, plan, sess)
        return self[key]


_EXAMPLES = _Examples()


class _ModeView:
    def __init__(self, mode):
        self.mode = mode

    def __getitem__(self, name):
        return _EXAMPLES[name, self.mode]

    def values(self):
        return [self[n] for n in EXAMPLE_NAMES]

    def items(self):
        return [(n, self[n]) for n in EXAMPLE_NAMES]

    def keys(self):
        return list(EXAMPLE_NAMES)


@pytest.fixture(scope="session")
def examples():
    """name -> (graph, plan, session) in the default (sink) launch mode."""
    return _ModeView("sink")


@pytest.fixture(scope="session")
def kernel_examples():
    """name -> (graph, plan, session) in kernel mode: every tensor at its arena offset."""
    return _ModeView("kernel")


@pytest.fixture(scope="session")
def mode_examples():
    """(name, mode) -> (graph, plan, session), every launch mode."""
    return _EXAMPLES


def padding_violations(plan, sess, feeds):
    """Replay launch by launch; after each, every live tensor with padding must hold
    zeros there. -> [(launch, tensor, nonzero lanes)]."""
    from executor import tools

    T = plan.tensors
    last_read = {}
    for s, l in enumerate(plan.launches):
        for i in l.reads:
            last_read[i] = s
    for i in plan.outputs:
        last_read[i] = len(plan.launches)
    written, bad = set(), []

    def after(s, launch, arena):
        if launch is None:
            return
        written.update(launch.writes)
        host = np.asarray(arena).view(np.uint8).tobytes()
        for i in sorted(written):
            t = T[i]
            # live after launch s: written by it, or read later (a tensor read last by s may
            # have given its bytes to s's outputs)
            if (i not in launch.writes and last_read.get(i, -1) <= s) or not formats.padded_elements(t.shape,
                                                                                                     t.format):
                continue
            dev = tools.device_from_arena(host, t)
            lanes = int(np.count_nonzero(dev[~format_ref.valid_mask(t.shape, t.format)]))
            if lanes:
                bad.append((s, t.name, lanes))

    sess.run_launches(feeds, after)
    return bad


def reheader(payload, version=codec.STATELESS_VERSION, launch_mode="sink", data=b""):
    """A plan file around `payload` (msgpack bytes) with a fresh header: version, launch
    mode, sizes and digest as given (for the codec's refusals of foreign files)."""
    fields = {"launch_mode": launch_mode, "payload_size": len(payload),
              "payload_sha256": hashlib.sha256(payload).digest(), "signature": None}
    if version >= 5:
        fields["data_size"] = len(data)
    header = msgpack.packb(fields)
    out = struct.pack("<8sII", codec.MAGIC, version, len(header)) + header + payload
    if version >= 5:
        out += bytes(codec.data_start(len(header), len(payload)) - len(out)) + data
    return out


def write_plan(tmp_path, plan, name="m.plan", sign_key=None):
    """A plan written to tmp_path/name (signed with `sign_key` if given) -> its path (str)."""
    p = tmp_path / name
    p.write_bytes(codec.encode(plan, sign_key=sign_key))
    return str(p)


@pytest.fixture(scope="session")
def native_plan(examples):
    """The CNN example as a sink plan with embedded executables, and its graph."""
    from aotplan.core import model_json
    from compiler import pipeline

    graph, digest = model_json.load(os.path.join(EXAMPLES, "cnn", "model.json"))
    plan = pipeline.compile_graph(graph, digest, pipeline.Options(embed_native=True)).plan
    return graph, plan


@pytest.fixture(scope="session")
def native_kernel_plan(examples):
    """The CNN example in kernel mode with embedded executables: many kernels, shared
    ones taking offsets, an output kernel that does not donate the arena."""
    from aotplan.core import model_json
    from compiler import pipeline

    graph, digest = model_json.load(os.path.join(EXAMPLES, "cnn", "model.json"))
    opts = pipeline.Options(embed_native=True, launch="kernel")
    return graph, pipeline.compile_graph(graph, digest, opts).plan


def replay_on_loopback(plan, outputs, env, processes=2, timeout=240):
    """`aotplan replay PLAN --random-inputs` in `processes` processes joined on a free
    loopback port (jax.distributed), process i writing its outputs to `outputs[i]`
    -> [(returncode, stdout, stderr)]. Bounded: a lost peer must not hang the suite."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # (a free port: process 0 binds it on loopback)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-m", "aotplan.cli", "replay", plan, "--random-inputs", "--steps", "2",
                               "--output", str(outputs[i]), "--coordinator", f"127.0.0.1:{port}", "--process-id",
                               str(i), "--num-processes", str(processes)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(processes)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


# The start of a child script that runs on 4 forced host devices (XLA_FLAGS before jax
# starts) and collects into `report["errors"]` what each `error(name, fn)` raised.
FOUR_DEVICE_CHILD = r'''
import json, os, sys
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
report = {"errors": {}}


def error(name, fn):
    try:
        fn()
        report["errors"][name] = None
    except Exception as e:
        report["errors"][name] = f"{type(e).__name__}: {e}"
'''


def child_report(script, *args, timeout=900):
    """`python -c SCRIPT ARGS...` (no trust key or cache from this environment) -> the
    JSON its last "REPORT " line prints; its output in the assertion if it printed none."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("AOTPLAN_TRUST_KEY", "AOTPLAN_CACHE_DIR")}
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=timeout)
    lines = [line for line in r.stdout.splitlines() if line.startswith("REPORT ")]
    assert r.returncode == 0 and lines, r.stdout[-3000:] + r.stderr[-6000:]
    return json.loads(lines[-1][len("REPORT "):])
