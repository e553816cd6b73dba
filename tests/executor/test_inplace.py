"""In-place replay: the arena's device buffer never changes, nothing accumulates, and
no kernel hides a copy of the arena."""

import gc

import jax
import numpy as np
import pytest

from conftest import LAUNCH_MODES, compile_and_load, random_feeds


@pytest.mark.parametrize("mode", LAUNCH_MODES)
@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_fifty_steps_in_place(mode_examples, name, mode):
    graph, plan, sess = mode_examples[name, mode]
    feeds = random_feeds(graph, 1)
    first = sess.run(feeds)
    ptr = sess.arena_pointer()
    gc.collect()
    live = len(jax.live_arrays())
    for _ in range(50):
        out = sess.run(feeds)
        assert sess.arena_pointer() == ptr
    del out
    gc.collect()
    assert len(jax.live_arrays()) == live
    again = sess.run(feeds)
    for k in first:
        np.testing.assert_array_equal(again[k], first[k])  # replay is deterministic


@pytest.mark.parametrize("mode", LAUNCH_MODES)
def test_kernels_alias_the_whole_arena(mode_examples, mode):
    _, plan, sess = mode_examples["cnn", mode]
    for ki, compiled in sess._kernels.items():
        if ki == plan.output_kernel:
            continue
        ma = compiled.memory_analysis()
        assert ma.alias_size_in_bytes == plan.arena_bytes, plan.kernels[ki].name


def test_workspace_far_below_arena(examples):
    """A kernel that copied the arena would need at least the arena's bytes of temp.
    With the naive planner (a big arena) every kernel's temp must stay far below it."""
    from compiler.pipeline import CLEANUP_PASSES

    graph, _, _ = examples["cnn"]
    plan, _ = compile_and_load(graph, planner="naive", disabled=frozenset(CLEANUP_PASSES), launch="kernel")
    for k in plan.kernels:
        assert k.workspace_bytes < plan.arena_bytes / 4, (k.name, k.workspace_bytes, plan.arena_bytes)
    for l in plan.launches:  # and each launch's temp is about its own working set, not the arena's
        touched = sum(plan.tensors[t].nbytes for t in l.reads + l.writes)
        assert plan.kernels[l.kernel].workspace_bytes <= 2 * touched + 64 * 1024, l.node
    assert plan.memory.max_workspace_bytes == max(k.workspace_bytes for k in plan.kernels) > 0


def test_arena_is_words_and_offsets_aligned(examples):
    """Decision: the arena is uint32 words (a uint8 arena makes XLA assemble floats from
    bytes) and every arena tensor starts on a 64-byte boundary."""
    import jax.export

    for _, plan, _ in examples.values():
        assert plan.alignment >= 64
        assert all(t.offset % 64 == 0 for t in plan.tensors if t.storage == "arena")
        for k in plan.kernels:
            arena = jax.export.deserialize(bytearray(k.exported)).in_avals[0]
            assert str(arena.dtype) == "uint32" and arena.shape == (plan.arena_bytes // 4,), k.name
