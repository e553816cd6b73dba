"""Every example model: plan output == direct evaluation of the graph (the op library's
lowerings without an arena) and == the independent numpy evaluation."""

import numpy as np
import pytest

import numpy_ref
from compiler import reference
from conftest import EXAMPLE_NAMES, random_feeds


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_matches_references(examples, name):
    graph, plan, sess = examples[name]
    for seed in range(3):
        feeds = random_feeds(graph, seed)
        got = sess.run(feeds)
        direct = reference.evaluate(graph, feeds)
        independent = numpy_ref.evaluate(graph, feeds)
        assert set(got) == set(graph.outputs)
        for o in graph.outputs:
            np.testing.assert_allclose(got[o], direct[o], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[o], independent[o], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_memory_stats(kernel_examples, name):
    _, plan, _ = kernel_examples[name]
    m = plan.memory
    assert m.lower_bound_bytes <= m.arena_bytes <= m.naive_bytes
    assert m.arena_bytes < m.naive_bytes  # the reusing planner reuses something on every example
    assert m.constant_pool_bytes == sum(t.nbytes for t in plan.tensors if t.storage == "pool") > 0
    assert plan.launch_mode == "kernel" and len(plan.launches) == sum(len(l.nodes) for l in plan.launches)
