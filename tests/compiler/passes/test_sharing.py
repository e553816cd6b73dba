"""Sharing bytes (issue 5): in-place reuse across a launch's reads and writes, reshapes as
views, memory-aware schedules, the bounds every plan reports."""

import dataclasses

import numpy as np
import pytest

from aotplan.core import codec, verify
from aotplan.core.errors import PlanError
from aotplan.core.graph import Graph, Node, TensorInfo, freeze
from compiler import pipeline, reference
from compiler.passes import schedule
from conftest import EXAMPLE_NAMES, compile_and_load, random_feeds


def chain(n=256):
    """x -> relu -> tanh -> sigmoid -> y, every tensor float32[n]."""
    x = TensorInfo("x", "float32", (n,))
    nodes = (Node("r", "relu", ("x",), ("r",)), Node("t", "tanh", ("r",), ("t",)),
             Node("y", "sigmoid", ("t",), ("y",)))
    return Graph("chain", (x,), ("y",), nodes, ())


def offsets(plan):
    return {t.name: t.offset for t in plan.tensors}


def test_inplace_chain_exact_offsets():
    # Phases (launch s reads in 2s+2, writes in 2s+3; the input kernel writes in 1, the
    # output kernel reads in 8). In place:
    #   x [1, 2]  r [3, 4]  t [5, 6]  y [7, 8]    -> no two live at once: all at 0, 1 KiB
    # Without (a launch's reads and writes share both its phases):
    #   x [0, 3]  r [2, 5]  t [4, 7]  y [6, 9]    -> x@0, r@1024, t@0 (x freed), y@1024: 2 KiB
    g = chain()
    plan, sess = compile_and_load(g, launch="kernel")
    assert offsets(plan) == {"x": 0, "r": 0, "t": 0, "y": 0}
    assert plan.arena_bytes == plan.memory.lower_bound_bytes == 1024
    assert plan.memory.plain_bound_bytes == 2048 and plan.memory.shared_bound_bytes == 1024
    off, sess_off = compile_and_load(g, launch="kernel", inplace=False)
    assert offsets(off) == {"x": 0, "r": 1024, "t": 0, "y": 1024}
    assert off.arena_bytes == 2048
    x = np.linspace(-3, 3, 256, dtype=np.float32)
    want = reference.evaluate(g, {"x": x})["y"]
    for s in (sess, sess_off):
        for _ in range(3):  # the input is overwritten in place every step: it must be rewritten each step
            np.testing.assert_allclose(s.run({"x": x})["y"], want, rtol=1e-6)


def test_reshape_is_a_view():
    x = TensorInfo("x", "float32", (2, 8))
    g = Graph("v", (x,), ("y",), (
        Node("flat", "reshape", ("x",), ("flat",), freeze({"shape": [16]})),
        Node("flat2", "unsqueeze", ("flat",), ("flat2",), freeze({"axes": [0]})),
        Node("y", "relu", ("flat2",), ("y",)),
    ), ())
    plan, sess = compile_and_load(g, launch="kernel")
    T = {t.name: t for t in plan.tensors}
    names = [t.name for t in plan.tensors]
    assert T["flat"].base == names.index("x") and T["flat2"].base == names.index("x")  # a view of a view: the root
    assert T["flat"].offset == T["flat2"].offset == T["x"].offset
    assert [l.node for l in plan.launches] == ["y"]
    xs = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(sess.run({"x": xs})["y"], np.maximum(xs.reshape(1, 16), 0))
    plain, _ = compile_and_load(g, launch="kernel", views=False)
    assert len(plain.launches) == 3 and all(t.base == -1 for t in plain.tensors)


def test_verifier_checks_views():
    x = TensorInfo("x", "float32", (4, 64))
    g = Graph("v", (x,), ("y",), (Node("f", "flatten", ("x",), ("f",), freeze({"axis": 0})),
                                  Node("y", "relu", ("f",), ("y",))), ())
    plan, _ = compile_and_load(g, launch="kernel")
    i = [t.name for t in plan.tensors].index("f")
    assert plan.tensors[i].base >= 0
    moved = dataclasses.replace(plan.tensors[i], offset=plan.tensors[i].offset + 64)
    grown = plan.arena_bytes + 64
    bad = dataclasses.replace(plan, tensors=plan.tensors[:i] + (moved,) + plan.tensors[i + 1:], arena_bytes=grown,
                              memory=dataclasses.replace(plan.memory, arena_bytes=grown))
    with pytest.raises(PlanError, match=r"tensor 'f' is a view of 'x': both must have the same offset and bytes"):
        verify.verify(bad)
    selfview = dataclasses.replace(plan.tensors[i], base=i)
    bad = dataclasses.replace(plan, tensors=plan.tensors[:i] + (selfview,) + plan.tensors[i + 1:])
    with pytest.raises(PlanError, match="itself lives inside another tensor"):
        verify.verify(bad)
    l = plan.launches[0]
    bad = dataclasses.replace(plan, launches=(dataclasses.replace(l, writes=l.writes + (i,)),))
    with pytest.raises(PlanError, match=r"tensor 'f' is written by a launch inside 'x', a input"):
        verify.verify(bad)


def test_verifier_phases_refuse_sharing_between_two_writes():
    """In place is reads then writes: two tensors written by one launch never share."""
    sink, _ = compile_and_load(chain(), launch="sink")  # its one launch writes the input and the output
    T = list(sink.tensors)
    ix, iy = (next(i for i, t in enumerate(T) if t.name == n) for n in ("x", "y"))
    assert T[ix].offset != T[iy].offset  # both written by the one launch
    T[iy] = dataclasses.replace(T[iy], offset=T[ix].offset)
    with pytest.raises(PlanError, match=r"tensors 'x' .* and 'y' .* overlap while both are live"):
        verify.verify(dataclasses.replace(sink, tensors=tuple(T)))


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
@pytest.mark.parametrize("mode", ["kernel", "fused"])
def test_examples_same_outputs_with_sharing_on_and_off(mode_examples, name, mode):
    graph, plan, sess = mode_examples[name, mode]
    feeds = random_feeds(graph, 11)
    want = reference.evaluate(graph, feeds)
    got = sess.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    m = plan.memory
    assert m.shared_bound_bytes <= m.plain_bound_bytes
    assert m.lower_bound_bytes <= m.arena_bytes <= m.naive_bytes
    off, sess_off = compile_and_load(graph, launch=mode, inplace=False, views=False, schedule="default")
    assert off.memory.plain_bound_bytes == m.plain_bound_bytes
    assert off.memory.shared_bound_bytes == off.memory.plain_bound_bytes  # no sharing, default order
    assert plan.arena_bytes <= off.arena_bytes
    got_off = sess_off.run(feeds)
    for k in want:
        np.testing.assert_array_equal(got_off[k], got[k])


def test_memory_schedule_never_worse_and_helps_branches():
    """Two branches from one input: the default order runs every wide op first; the
    memory-aware order finishes one branch (and frees its wide tensor) before the next."""
    n = 1024
    x = TensorInfo("x", "float32", (n,))
    # (branches of different widths: cse would merge identical ones)
    nodes = [Node(f"w{b}", "expand", ("x",), (f"w{b}",), freeze({"shape": [6 + b, n]})) for b in range(3)]
    nodes += [Node(f"s{b}", "reduce_sum", (f"w{b}",), (f"s{b}",), freeze({"axes": [0], "keepdims": 0}))
              for b in range(3)]
    nodes.append(Node("y", "concat", ("s0", "s1", "s2"), ("y",), freeze({"axis": 0})))
    g = Graph("branches", (x,), ("y",), tuple(nodes), ())
    mem = pipeline.plan_graph(g, pipeline.Options(launch="kernel"))
    dflt = pipeline.plan_graph(g, pipeline.Options(launch="kernel", schedule="default"))
    assert mem.schedule != "default"
    assert mem.mem.lower_bound_bytes < dflt.mem.lower_bound_bytes
    plan, sess = compile_and_load(g, launch="kernel")
    xs = np.arange(n, dtype=np.float32)
    np.testing.assert_allclose(sess.run({"x": xs})["y"], reference.evaluate(g, {"x": xs})["y"], rtol=1e-6)
    # never worse than the default order, on every example
    for name in EXAMPLE_NAMES:
        import os

        from aotplan.core import model_json
        from conftest import EXAMPLES

        graph, _ = model_json.load(os.path.join(EXAMPLES, name, "model.json"))
        for mode in ("kernel", "fused"):
            a = pipeline.plan_graph(graph, pipeline.Options(launch=mode))
            b = pipeline.plan_graph(graph, pipeline.Options(launch=mode, schedule="default"))
            assert a.mem.lower_bound_bytes <= b.mem.lower_bound_bytes


def test_schedule_candidates_are_topological():
    g = chain()
    order = schedule.run(g)
    for _, o in schedule.candidates(g, order, {"x": 1, "r": 1, "t": 1, "y": 1}):
        seen = {"x"}
        for n in o:
            assert all(i in seen for i in n.inputs)
            seen.update(n.outputs)


def test_v2_plans_still_load(tmp_path):
    """Format 3 reads format 2 plans: no views, both reference bounds are the plan's own."""
    import os

    from conftest import ROOT

    p = codec.read(os.path.join(ROOT, "plans", "golden", "v2", "cnn.plan"))
    assert all(t.base == -1 for t in p.tensors)
    assert p.memory.plain_bound_bytes == p.memory.shared_bound_bytes == p.memory.lower_bound_bytes


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_concat_inputs_placed_in_their_slices(batch):
    """Two convs concatenated on channels: each writes straight into its slice of the
    concat (one run per batch index), the concat runs no launch; same numbers as with
    placement off. With batch > 1 every part is `batch` runs, one concat row apart."""
    from aotplan.core.graph import Constant

    rng = np.random.default_rng(batch)
    w1 = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((6, 3, 1, 1)).astype(np.float32)
    g = Graph("cat", (TensorInfo("x", "float32", (batch, 3, 8, 8)),), ("y",), (
        Node("a", "conv", ("x", "w1"), ("a",), freeze({"pads": [1, 1, 1, 1]})),
        Node("b", "conv", ("x", "w2"), ("b",), freeze({})),
        Node("c", "concat", ("a", "b"), ("c",), freeze({"axis": 1})),
        Node("y", "tanh", ("c",), ("y",)),
    ), (Constant("w1", "float32", w1.shape, w1), Constant("w2", "float32", w2.shape, w2)))
    auto, _ = compile_and_load(g, launch="kernel", format_policy="default")
    # here the concat's bytes would be live from a's write, beside x: auto keeps the copy
    assert [l.node for l in auto.launches] == ["a", "b", "c", "y"]
    # (convolutions unbanded in both plans below: a band's convolution may sum in
    # another order, and this compares placement's numbers bit for bit)
    plan, sess = compile_and_load(g, launch="kernel", placement="always", format_policy="default", conv_bands=False)
    assert plan.memory.lower_bound_bytes >= auto.memory.lower_bound_bytes
    T = {t.name: t for t in plan.tensors}
    assert [l.node for l in plan.launches] == ["a", "b", "y"]
    c = T["c"]
    row = 10 * 64 * 4  # one batch index of c: 10 channels of 8x8 float32
    assert (T["a"].offset, T["a"].runs, T["a"].stride) == (c.offset, batch, row if batch > 1 else T["a"].stride)
    assert T["b"].offset == c.offset + 4 * 64 * 4 and T["b"].runs == batch
    off, sess_off = compile_and_load(g, launch="kernel", placement="off", format_policy="default", conv_bands=False)
    assert [l.node for l in off.launches] == ["a", "b", "c", "y"]
    xs = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
    want = reference.evaluate(g, {"x": xs})["y"]
    np.testing.assert_allclose(sess.run({"x": xs})["y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sess.run({"x": xs})["y"], sess_off.run({"x": xs})["y"])
    # the parts tile the concat: break that and the verifier names it
    i = [t.name for t in plan.tensors].index("b")
    moved = dataclasses.replace(plan.tensors[i], offset=plan.tensors[i].offset + 4)
    bad = dataclasses.replace(plan, tensors=plan.tensors[:i] + (moved,) + plan.tensors[i + 1:])
    with pytest.raises(PlanError, match="the parts of 'c' do not tile it|leave its base"):
        verify.verify(bad)
    # dumps (and `aotplan check`) read a part's runs back
    from executor import tools

    seen = {}
    tools.replay_tensors(sess, {"x": xs}, lambda s, l, j, v: seen.__setitem__(plan.tensors[j].name, v))
    ref = reference.evaluate_all(g, {"x": xs})
    np.testing.assert_allclose(seen["b"], ref["b"], rtol=1e-5, atol=1e-5)


# (the transformer in the slow tier: CI time)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "transformer" else n
                                  for n in EXAMPLE_NAMES])
def test_every_planner_gives_identical_outputs(kernel_examples, name):
    """Kernel mode (every tensor at its offset): each planner's placement gives the same
    numbers, bit for bit, as the default's."""
    from compiler import planners

    graph, plan, sess = kernel_examples[name]
    feeds = random_feeds(graph, 12)
    want = sess.run(feeds)
    arenas = {}
    for planner in sorted(planners.PLANNERS):
        if planner == plan.planner:
            continue
        p, s = compile_and_load(graph, launch="kernel", planner=planner)
        arenas[planner] = p.arena_bytes
        got = s.run(feeds)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    assert plan.arena_bytes <= min(arenas.values())  # the default, best, is the smallest
