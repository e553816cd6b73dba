"""A session serving many steps: soak, threads, unusual feeds (issue 6)."""

import threading

import jax
import numpy as np
import pytest

from aotplan.core.errors import FeedError
from compiler import reference
from conftest import compile_and_load, one_node_graph, random_feeds
import executor
from executor import tools


@pytest.mark.parametrize("mode", ["sink", "kernel"])
def test_soak_1000_steps(mode_examples, mode):
    graph, _, sess = mode_examples["cnn", mode]
    feeds_list = [random_feeds(graph, s) for s in range(3)]
    report = tools.soak(sess, feeds_list, 1000, samples=10)
    assert report.mismatches == 0, report.first_mismatch
    assert report.live_arrays[0] == report.live_arrays[1], report.live_arrays
    assert report.rss_growth_bytes <= report.rss_slack, list(report.lines())
    assert report.ok


def test_soak_reports_a_mismatch(examples):
    """The soak check can fail: a session whose outputs change is caught."""
    graph, _, sess = examples["mlp"]
    feeds = random_feeds(graph, 0)

    class Drifting:
        def __init__(self):
            self.n = 0

        def wait_ready(self):
            return sess.wait_ready()

        def run(self, f):
            self.n += 1
            out = sess.run(f)
            return {k: v + (self.n > 30) for k, v in out.items()}

    report = tools.soak(Drifting(), [feeds], 50, warm=5)
    assert not report.ok and report.mismatches > 0 and "step" in report.first_mismatch


@pytest.mark.parametrize("mode", ["sink", "fused", "kernel"])
def test_threads_share_a_session(mode_examples, mode):
    """Steps from 8 threads are serialized: every caller gets the outputs of its own feeds."""
    graph, _, sess = mode_examples["cnn", mode]
    feeds = [random_feeds(graph, 100 + i) for i in range(8)]
    want = [sess.run(f) for f in feeds]
    errors = []

    def worker(i):
        try:
            for _ in range(15):
                got = sess.run(feeds[i])
                for k in want[i]:
                    if not np.array_equal(got[k], want[i][k]):
                        errors.append(f"thread {i}: output {k} differs")
                        return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_non_contiguous_feeds_accepted(examples):
    graph, _, sess = examples["cnn"]
    feeds = random_feeds(graph, 5)
    x = feeds["image"]
    strided = np.asfortranarray(x)
    assert not strided.flags.c_contiguous
    view = np.ascontiguousarray(np.flip(x, axis=3))[..., ::-1]  # a negative-stride view equal to x
    assert view.strides[3] < 0
    want = sess.run(feeds)
    for a in (strided, view):
        got = sess.run({"image": a})
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("bad,pattern", [
    (lambda x: x.astype(object), r"input 'image': an array of Python objects"),
    (lambda x: np.ma.masked_less(x, 0), r"input 'image': a masked array"),
    (lambda x: x.astype(str), r"input 'image': expected float32\[2, 3, 32, 32\], got <U"),
    (lambda x: "image", r"input 'image': expected float32"),
    (lambda x: None, r"input 'image': an array of Python objects \(object\[\]\)"),
])
def test_bad_feed_values(examples, bad, pattern):
    graph, _, sess = examples["cnn"]
    feeds = random_feeds(graph, 6)
    want = sess.run(feeds)
    before = np.asarray(sess._arena).copy()
    with pytest.raises(FeedError, match=pattern):
        sess.run({"image": bad(feeds["image"])})
    np.testing.assert_array_equal(np.asarray(sess._arena), before)
    got = sess.run(feeds)  # the next correct call is still correct
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_deleted_device_feed(examples):
    graph, _, sess = examples["cnn"]
    feeds = random_feeds(graph, 7)
    x = jax.device_put(feeds["image"])
    x.delete()
    with pytest.raises(FeedError, match=r"input 'image': the device array has been deleted"):
        sess.run({"image": x})
    sess.run(feeds)


@pytest.mark.parametrize("mode", ["sink", "kernel"])
def test_nan_and_inf_pass_through(mode_examples, mode):
    graph, _, sess = mode_examples["mlp", mode]
    feeds = random_feeds(graph, 8)
    x = next(iter(feeds.values()))
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    got = sess.run(feeds)
    want = reference.evaluate(graph, feeds)
    for k in got:
        assert np.isnan(got[k]).any()  # NaN reaches the outputs, as in the reference
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, equal_nan=True)
    # and the next finite step is clean
    clean = random_feeds(graph, 9)
    for k, v in sess.run(clean).items():
        np.testing.assert_allclose(v, reference.evaluate(graph, clean)[k], rtol=1e-5, atol=1e-6)


def test_weights_leave_host_memory_once_on_a_separate_device(kernel_examples, tmp_path, monkeypatch):
    """Where device memory is not host memory, the session drops its host copy of the
    weights once they are placed (here the CPU plays such a device) and still runs."""
    from aotplan.core import codec
    from executor import session as session_mod

    import executor

    graph, plan, sess = kernel_examples["cnn"]  # (kernel mode: every weight in the pool)
    path = tmp_path / "cnn.plan"
    path.write_bytes(codec.encode(plan))
    monkeypatch.setattr(session_mod, "_host_is_device", lambda device: False)
    apart = executor.load(str(path))
    assert apart.plan.constants == () and plan.constants
    feeds = random_feeds(graph, 5)
    want = sess.run(feeds)
    got = apart.run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    monkeypatch.undo()
    kept = executor.load(str(path)).plan.constants
    if __import__("jax").default_backend() == "cpu":
        assert kept  # on CPU they are the pool's bytes: kept
    else:
        assert kept == ()  # a GPU's memory is not the host's: dropped (measured on an H200)


def test_outputs_read_back_together_from_a_separate_device(monkeypatch):
    """Where device memory is not host memory, a step's outputs are copied to the host
    together (every copy started before the first is waited on); the values are the
    same (here the CPU plays such a device)."""
    from executor import session as session_mod

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    graph = one_node_graph("split", [("x", x)], n_out=2, axis=1)
    monkeypatch.setattr(session_mod, "_host_is_device", lambda device: False)
    started = []
    array = type(jax.device_put(x))  # jax's concrete array type
    real = array.copy_to_host_async
    monkeypatch.setattr(array, "copy_to_host_async", lambda a: started.append(a.shape) or real(a))
    sess = compile_and_load(graph)[1]
    started.clear()  # (the warm-up step's)
    got = sess.run({"x": x})
    assert started == [(4, 3), (4, 3)]
    np.testing.assert_array_equal(got["y0"], x[:, :3])
    np.testing.assert_array_equal(got["y1"], x[:, 3:])


def test_a_step_stopped_midway_leaves_a_usable_session(kernel_examples):
    """Every launch donates the arena: whatever stops a step between launches (Ctrl-C,
    a request timeout, a failing tool callback), the session keeps the live arena."""
    graph, plan, _ = kernel_examples["cnn"]
    sess = executor.Session(plan)
    feeds = {t.name: np.random.default_rng(1).standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    want = sess.run(feeds)

    class Stop(Exception):
        pass

    def stop_at_third(s, launch, arena):
        if s == 2:
            raise Stop

    with pytest.raises(Stop):
        sess.run_launches(feeds, stop_at_third)
    for k, v in sess.run(feeds).items():
        np.testing.assert_array_equal(v, want[k])



def test_device_outputs_do_not_read_the_callers_buffer_later():
    """On CPU, XLA may read a numpy feed after `run` returns (async dispatch): with
    device_outputs=True the session copies it first, so refilling it is safe. (A step
    of three 768x768 matmuls outlasts the refill; without the copy the outputs change.)"""
    from aotplan.core.graph import Graph, Node, TensorInfo
    from conftest import compile_and_load

    n = 768
    g = Graph("t", (TensorInfo("x", "float32", (n, n)),), ("y",),
              (Node("m", "matmul", ("x", "x"), ("m",)), Node("m2", "matmul", ("m", "x"), ("m2",)),
               Node("y", "matmul", ("m2", "x"), ("y",))), ())
    _, sess = compile_and_load(g)
    x = np.full((n, n), 0.01, np.float32)
    want = sess.run({"x": x.copy()})["y"]
    for _ in range(3):
        got = sess.run({"x": x}, device_outputs=True)
        x[...] = 7.0
        np.testing.assert_array_equal(np.asarray(got["y"]), want)
        x[...] = 0.01


_FORK_CHILD = r"""
import os, sys, warnings
import numpy as np
import executor
from aotplan.core.errors import ForkError

warnings.simplefilter("ignore")  # jax's own warning about fork

def in_child(fn):
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            print("ok", flush=True)
        except ForkError as e:
            print("ForkError", e, flush=True)
        except BaseException as e:
            print("other", type(e).__name__, e, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)

plan = sys.argv[1]
in_child(lambda: executor.load(plan, warmup=False))  # the parent has not started JAX yet: fine
s = executor.load(plan)
feeds = {t.name: np.zeros(t.shape, np.float32) for t in s._inputs}
s.run(feeds)
in_child(lambda: s.run(feeds))
in_child(lambda: executor.load(plan))
s.run(feeds)
print("parent ok", flush=True)
"""


def test_a_fork_after_jax_started_is_an_error_not_a_hang(examples, tmp_path):
    """A pre-fork server that loads in its master and forks workers: each worker's step
    (or load) would hang inside JAX; it is one ForkError instead. A child forked before
    the parent used JAX loads normally."""
    import subprocess
    import sys

    from aotplan.core import codec
    from conftest import ROOT

    path = tmp_path / "mlp.plan"
    path.write_bytes(codec.encode(examples["mlp"][1]))
    r = subprocess.run([sys.executable, "-c", _FORK_CHILD, str(path)], capture_output=True, text=True,
                       timeout=240, cwd=ROOT)
    lines = r.stdout.splitlines()
    assert r.returncode == 0, r.stderr[-2000:]
    assert lines[0] == "ok", lines
    assert lines[1].startswith("ForkError Session.run: JAX's runtime was started in process"), lines
    assert lines[2].startswith("ForkError executor.load: JAX's runtime was started in process"), lines
    assert lines[3] == "parent ok", lines
