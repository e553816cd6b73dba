"""Liveness, memory planning, layout and the lowering's kernel sharing on a literal
three-node graph, checked against values worked out by hand: no XLA compile, so
these run in milliseconds and fail on the pass that broke, not on a model's output.

    x -> relu r1 -> a -> relu r2 -> b -> relu r3 -> y      (float32[4]: 16 bytes each)

Phases (aotplan.core.intervals.phases): launch s reads in phase 2s + 2 and writes in
2s + 3; the input kernel writes before launch 0; outputs are read after the last
launch. With `inplace` a tensor lives from its write to its last read; without, a
launch's reads and writes occupy both of its phases."""

import pytest

import compiler.ops  # noqa: F401  (registers the ops)
from aotplan.core.graph import Graph, Node, TensorInfo
from compiler.passes import group, infer, layout, liveness, lower, plan_memory, schedule

CHAIN = Graph("chain", (TensorInfo("x", "float32", (4,)),), ("y",),
              (Node("r1", "relu", ("x",), ("a",)), Node("r2", "relu", ("a",), ("b",)),
               Node("r3", "relu", ("b",), ("y",))), ())


@pytest.fixture(scope="module")
def typed():
    order = schedule.run(CHAIN)
    return order, infer.run(CHAIN, order)


def _lifetimes(lv):
    return [(lv.tensors[iv.tensor].name, iv.first, iv.last) for iv in lv.intervals]


def test_kernel_mode_in_place_lifetimes_touch_and_share_one_slot(typed):
    order, info = typed
    assert [n.name for n in order] == ["r1", "r2", "r3"]
    assert all(info[t].shape == (4,) and info[t].dtype == "float32" for t in "xaby")
    groups = group.run(order, "kernel", info)
    assert [[n.name for n in g] for g in groups] == [["r1"], ["r2"], ["r3"]]
    lv = liveness.run(CHAIN, groups, info, "pool", materialize_all=True, inplace=True)
    assert [(t.name, t.kind, t.nbytes) for t in lv.tensors] == [
        ("x", "input", 16), ("a", "intermediate", 16), ("b", "intermediate", 16), ("y", "output", 16)]
    assert lv.steps == (((0,), (1,)), ((1,), (2,)), ((2,), (3,)))
    # x: written by the input kernel (1), read by launch 0 (2); y: written by launch 2 (7),
    # read after it (8)
    assert _lifetimes(lv) == [("x", 1, 2), ("a", 3, 4), ("b", 5, 6), ("y", 7, 8)]
    mem = plan_memory.run(lv, "best")
    assert mem.arena_bytes == mem.lower_bound_bytes == 64  # one aligned slot: no two live at once
    assert set(mem.offsets.values()) == {0}


def test_kernel_mode_without_inplace_neighbours_overlap_and_alternate(typed):
    order, info = typed
    lv = liveness.run(CHAIN, group.run(order, "kernel", info), info, "pool", materialize_all=True, inplace=False)
    assert _lifetimes(lv) == [("x", 0, 3), ("a", 2, 5), ("b", 4, 7), ("y", 6, 9)]
    mem = plan_memory.run(lv, "best")
    assert mem.arena_bytes == mem.lower_bound_bytes == 128
    assert mem.offsets[0] == mem.offsets[2] != mem.offsets[1] == mem.offsets[3]  # x, b | a, y


def test_a_sink_plan_holds_only_what_crosses_the_launch(typed):
    order, info = typed
    groups = group.run(order, "sink", info)
    assert [[n.name for n in g] for g in groups] == [["r1", "r2", "r3"]]
    lv = liveness.run(CHAIN, groups, info, "pool", materialize_all=False, inplace=True)
    assert [t.name for t in lv.tensors] == ["x", "y"]  # a and b are the program's own temps
    assert _lifetimes(lv) == [("x", 3, 3), ("y", 3, 4)]  # the sink writes the feeds itself


def test_the_same_computation_is_one_kernel_key(typed):
    """Kernel reuse: three launches of relu on float32[4] from the arena to the arena
    are one computation (their offsets come at run time), one key used three times."""
    order, info = typed
    groups = group.run(order, "kernel", info)
    lv = liveness.run(CHAIN, groups, info, "pool", materialize_all=True)
    keys, uses = lower.launch_keys(groups, lv.steps, lv.tensors, "kernel")
    assert len(set(keys)) == 1 and list(uses.values()) == [3]


def test_layout_default_keeps_every_tensor_logical_and_aligned_converts_only_inside(typed):
    order, info = typed
    plain = layout.run(CHAIN, order, info, "default", "cpu", launch="kernel")
    assert plain.conversions == 0 and set(plain.formats.values()) == {"default"}
    aligned = layout.run(CHAIN, order, info, "aligned", "cpu", launch="kernel")
    # the graph's input and output stay logical: one conversion in, one out
    assert aligned.formats["x"] == aligned.formats["y"] == "default" and aligned.conversions == 2
    assert aligned.formats["a"] == aligned.formats["b"] != "default"
