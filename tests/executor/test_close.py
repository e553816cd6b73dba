"""Several plans per process, freed by unloading: `Session.close()` (or leaving a
`with` block) releases the session's device buffers and kernels; steps after it are
refused; loading and closing plans over and over leaves the process where it was."""

import gc

import jax
import numpy as np
import psutil
import pytest

import executor
from aotplan.core import codec
from aotplan.core.errors import PlanError
from compiler import pipeline
from conftest import random_feeds
from state_model import accumulator


def _live_bytes():
    return sum(a.nbytes for a in jax.live_arrays())


def test_fifty_plans_loaded_and_closed_leave_no_device_buffer_and_no_growth(examples, tmp_path):
    """On CPU, the device's live bytes are jax's live arrays: back to the starting
    level after each close; RSS grows while the first loads warm jax's caches, then
    settles (the last 25 loads add less than 16 MiB)."""
    graph, _, _ = examples["mlp"]
    # (its native executables, trusted: a load compiles nothing, so 50 take seconds)
    data = codec.encode(pipeline.compile_graph(graph, "mlp", pipeline.Options(embed_native=True)).plan)
    feeds = random_feeds(graph)
    gc.collect()
    start_arrays, start_bytes = len(jax.live_arrays()), _live_bytes()
    rss = []
    for i in range(50):
        with executor.load(data, trust_executables=True) as sess:
            assert sess.kernel_source == "native" and _live_bytes() > start_bytes
            sess.run(feeds)
        assert sess.closed
        gc.collect()
        assert len(jax.live_arrays()) == start_arrays and _live_bytes() == start_bytes, i
        rss.append(psutil.Process().memory_info().rss)
    assert rss[-1] - rss[24] < 16 << 20, [r >> 20 for r in rss]


def test_a_closed_session_refuses_steps_and_state_calls(tmp_path):
    from aotplan.core import model_json
    from compiler import pipeline

    g, d = model_json.load(accumulator(tmp_path))
    sess = executor.load(codec.encode(pipeline.compile_graph(g, d, pipeline.Options(launch="kernel")).plan))
    x = np.ones(4, np.float32)
    sess.run({"x": x})
    sess.close()
    sess.close()  # (idempotent)
    for call in (lambda: sess.run({"x": x}), sess.arena_pointer, sess.reset_state, lambda: sess.get_state("acc"),
                 lambda: sess.set_state("acc", x), sess.state_pointer):
        with pytest.raises(PlanError, match=r"this session is closed \(Session.close\)"):
            call()
    assert sess.input_specs == [("x", "float32", (4,))]  # (what the plan is stays readable)
