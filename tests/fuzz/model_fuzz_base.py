"""The model fuzzer's ground: the example models as seeds (model.json documents and
their weights as .npz arrays), hypothesis' settings, and the front end every mutant
goes through with the check of what it may raise (tests/fuzz/test_model_fuzz.py)."""

import re

import numpy as np
from hypothesis import HealthCheck

from aotplan.core import model_json
from aotplan.core.errors import LimitError, ModelError
from compiler import pipeline
from compiler.passes import group, liveness, plan_memory
from conftest import EXAMPLE_NAMES, example_doc, example_npz

SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])


# (the examples as model.json + weights.npz: this fuzzer damages .npz archives, the format
# earlier releases wrote and the reader still takes)
DOCS = {name: example_doc(name, npz=True) for name in EXAMPLE_NAMES}
WEIGHTS = {}
for _name in EXAMPLE_NAMES:
    with np.load(example_npz(_name), allow_pickle=False) as _z:
        WEIGHTS[_name] = {k: _z[k] for k in _z.files}

# what a message must never look like: a Python traceback or an object's default repr
GARBAGE = re.compile(r"Traceback|object at 0x|<class '|<function |<built-in")


# ------------------------------------------------------------------ the front end

def front_end(path):
    """Everything `aotplan compile` does before XLA lowering."""
    graph, _ = model_json.load(path)
    graph, order, info = pipeline.prepare(graph, pipeline.Options())
    groups = group.run(order, pipeline.DEFAULT_LAUNCH, info)
    live = liveness.run(graph, groups, info, pipeline.DEFAULT_WEIGHTS, materialize_all=False)
    plan_memory.run(live, pipeline.DEFAULT_PLANNER)


def check(path, hints):
    """Run the front end on `path`: None if accepted, else the error message, checked
    to be one clean line that contains one of `hints` (None: any)."""
    try:
        front_end(path)
    except (ModelError, LimitError) as e:
        msg = str(e)
        assert msg.strip(), f"{type(e).__name__} with an empty message"
        assert not GARBAGE.search(msg), msg
        assert "\n" not in msg and "\r" not in msg, f"the CLI would print {msg!r} on several lines"
        if hints is not None:
            # short names ('x', 'q') must appear quoted: a bare "q" is in most messages
            shown = {h if len(h) > 2 else repr(h) for h in hints} | {repr(h)[1:-1] for h in hints if len(h) > 2}
            assert any(h and h in msg for h in shown), f"{msg!r} names none of {sorted(shown)[:40]}"
        return msg
    return None
