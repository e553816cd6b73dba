"""Shared fixtures. XLA compile time dominates the suite: example plans are compiled
once per session and their sessions reused."""

import contextlib
import os
import threading

import numpy as np
import pytest

from aotplan.core import codec, model_json
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "plans", "examples")
EXAMPLE_NAMES = ("mlp", "cnn", "transformer")


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
