"""Launch modes (sink, fused, kernel), kernel reuse, device arrays in and out, and the
memory a plan states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aotplan.core import codec
from compiler import reference
from conftest import EXAMPLE_NAMES, LAUNCH_MODES, compile_and_load, random_feeds
from executor import tools


@pytest.mark.parametrize("mode", LAUNCH_MODES)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_mode_matches_the_reference(mode_examples, name, mode):
    graph, plan, sess = mode_examples[name, mode]
    assert plan.launch_mode == mode
    for seed in (0, 1):
        feeds = random_feeds(graph, seed)
        want = reference.evaluate(graph, feeds)
        got = sess.run(feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_modes_shape_the_plan(mode_examples):
    for name in EXAMPLE_NAMES:
        graph, sink, _ = mode_examples[name, "sink"]
        _, fused, _ = mode_examples[name, "fused"]
        _, kernel, _ = mode_examples[name, "kernel"]
        # sink: one launch that takes the feeds and returns the outputs
        assert len(sink.launches) == 1 and sink.input_kernel == sink.output_kernel == -1
        assert sink.kernels[sink.launches[0].kernel].feeds and sink.kernels[sink.launches[0].kernel].returns
        assert kernel.input_kernel >= 0 and kernel.output_kernel >= 0
        views = sum(t.base >= 0 for t in kernel.tensors)  # reshapes: no launch in kernel mode
        # the same graph nodes in every mode; each may add format conversions (auto: nhwc
        # for the CNN)
        model_nodes = lambda p: [n for l in p.launches for n in l.nodes if not n.startswith("transdata:")]  # noqa
        ran = sum(len(l.nodes) for l in kernel.launches)
        assert len(model_nodes(fused)) == len(model_nodes(sink)) == len(model_nodes(kernel)) + views
        assert len(kernel.launches) == ran and all(len(l.nodes) == 1 for l in kernel.launches)
        # only tensors crossing launches get arena bytes: sink <= fused <= kernel
        arena_tensors = [sum(t.storage == "arena" for t in p.tensors) for p in (sink, fused, kernel)]
        assert arena_tensors[0] <= arena_tensors[1] <= arena_tensors[2]
        assert sink.arena_bytes <= fused.arena_bytes <= kernel.arena_bytes
        sink_arena = {sink.tensors[i].name for i, t in enumerate(sink.tensors) if t.storage == "arena"}
        assert sink_arena == {sink.tensors[i].name for i in sink.inputs + sink.outputs}


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_fused_groups_at_most_a_third_of_the_nodes(mode_examples, name):
    graph, plan, _ = mode_examples[name, "fused"]
    assert 1 <= len(plan.launches) <= len(graph.nodes) / 3, [l.node for l in plan.launches]
    # the first launch takes the inputs and the last returns the outputs
    assert plan.input_kernel == plan.output_kernel == -1
    assert plan.kernels[plan.launches[0].kernel].feeds and plan.kernels[plan.launches[-1].kernel].returns


def test_fused_one_contraction_per_group(mode_examples):
    """fuse_min_flops=0: every contraction starts a group (the transformer's tiny
    matmuls otherwise share one); groups cross through the arena, same numbers."""
    graph, _, sink = mode_examples["transformer", "sink"]
    plan, sess = compile_and_load(graph, launch="fused", fuse_min_flops=0)
    anchors = sum(1 for l in plan.launches for n in l.nodes if n in {"q", "k", "v", "qk", "ctx", "o", "ff1", "ff2"})
    assert len(plan.launches) == 8 and anchors == 8
    assert any(t.kind == "intermediate" and t.storage == "arena" for t in plan.tensors)
    for seed in (0, 1):
        feeds = random_feeds(graph, seed)
        want = reference.evaluate(graph, feeds)
        got = sess.run(feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_kernel_reuse_shares_kernels_with_runtime_offsets(kernel_examples):
    graph, plan, sess = kernel_examples["transformer"]
    launch_kernels = {l.kernel for l in plan.launches}
    assert len(launch_kernels) < len(plan.launches)
    shared = [k for k in launch_kernels if sum(l.kernel == k for l in plan.launches) > 1]
    assert shared and all(plan.kernels[k].n_offsets > 0 for k in shared)
    singles = launch_kernels - set(shared)
    assert all(plan.kernels[k].n_offsets == 0 for k in singles)  # a computation run once keeps static offsets
    # the same plan without reuse: one kernel per launch, the same numbers
    plan2, sess2 = compile_and_load(graph, launch="kernel", reuse=False)
    assert len({l.kernel for l in plan2.launches}) == len(plan2.launches)
    feeds = random_feeds(graph, 3)
    a, b = sess.run(feeds), sess2.run(feeds)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_shared_kernels_keep_aliasing_and_workspace(kernel_examples):
    """Runtime offsets must not cost an arena copy: each shared kernel still aliases the
    whole arena, and its workspace is no larger than the static version's plus one copy
    of what it writes (with offsets known only at run time, XLA cannot prove that an
    output does not overlap an input that dies in the launch, so it stages the output)."""
    graph, plan, sess = kernel_examples["transformer"]
    plan2, sess2 = compile_and_load(graph, launch="kernel", reuse=False)
    static_ws = {l.node: plan2.kernels[l.kernel].workspace_bytes for l in plan2.launches}
    for l in plan.launches:
        k = plan.kernels[l.kernel]
        if not k.n_offsets:
            continue
        ma = sess._kernels[l.kernel].memory_analysis()
        assert ma.alias_size_in_bytes == plan.arena_bytes, k.name
        written = sum(plan.tensors[i].nbytes for i in l.writes)
        assert k.workspace_bytes <= static_ws[l.node] + written + 1024, (k.name, k.workspace_bytes, static_ws[l.node])
        assert k.workspace_bytes < plan.arena_bytes or plan.arena_bytes <= written + 1024


@pytest.mark.parametrize("mode", LAUNCH_MODES)
def test_plan_states_its_device_memory(mode_examples, mode):
    for name in EXAMPLE_NAMES:
        _, plan, _ = mode_examples[name, mode]
        m = plan.memory
        assert m.step_device_bytes == m.arena_bytes + m.constant_pool_bytes + m.inline_constant_bytes + \
            m.max_workspace_bytes
        assert m.inline_constant_bytes == sum(t.nbytes for t in plan.tensors if t.storage == "inline")
        assert (m.inline_constant_bytes > 0) == (mode != "kernel")  # small weights inline, but in kernel mode
        assert m.max_workspace_bytes == max(k.workspace_bytes for k in plan.kernels)


def test_device_arrays_in_and_out(examples):
    graph, plan, sess = examples["cnn"]
    feeds = random_feeds(graph, 4)
    want = sess.run(feeds)
    dev = {k: jax.device_put(v) for k, v in feeds.items()}
    out = sess.run(dev, device_outputs=True)
    assert all(isinstance(v, jax.Array) for v in out.values())
    for k in want:
        np.testing.assert_array_equal(np.asarray(out[k]), want[k])
    from aotplan.core.errors import FeedError

    with pytest.raises(FeedError, match="expected float32"):
        sess.run({k: jnp.zeros(v.shape, jnp.int32) for k, v in feeds.items()})
    with pytest.raises(FeedError, match="expected float32"):
        sess.run({k: jnp.zeros((1,) + v.shape, jnp.float32) for k, v in feeds.items()})


@pytest.mark.parametrize("mode", LAUNCH_MODES)
def test_check_alloc_finds_nothing_per_step(mode_examples, mode):
    graph, plan, sess = mode_examples["transformer", mode]
    report = tools.check_alloc(sess, random_feeds(graph, 0), steps=100)
    assert report.ok, list(report.lines())
    assert report.arena_pointers == 1 and report.live_arrays[0] == report.live_arrays[1]


def test_profile_covers_every_launch(kernel_examples):
    graph, plan, sess = kernel_examples["cnn"]
    prof = tools.profile(sess, random_feeds(graph, 0), steps=3)
    assert len(prof.launches) == len(plan.launches) and prof.step_ms > 0
    assert all(ms > 0 for *_, ms in prof.launches)
    lines = list(prof.lines())
    assert any("share" in line for line in lines)


def test_dump_writes_every_launch_output(kernel_examples, tmp_path):
    graph, plan, sess = kernel_examples["mlp"]
    feeds = random_feeds(graph, 2)
    files = tools.dump(sess, feeds, str(tmp_path))
    assert len(files) == sum(len(l.writes) for l in plan.launches)
    last = np.load(files[-1])
    np.testing.assert_allclose(last, reference.evaluate(graph, feeds)[graph.outputs[-1]], rtol=1e-6)


def test_check_names_the_first_bad_launch(kernel_examples):
    """Corrupt one kernel (swap in another launch's kernel of the same signature) and
    `check` must name that launch, and nothing before it."""
    import dataclasses

    import executor
    from aotplan.cli import check_launches as check
    from compiler import pipeline

    graph, plan, _ = kernel_examples["mlp"]
    opts = pipeline.Options(launch="kernel")
    feeds = random_feeds(graph, 0)
    diffs, n = check.check(executor.Session(plan), graph, feeds, opts)
    assert diffs == [] and n == len(plan.launches)
    # relu1 (launch 1) and tanh2 (launch 3) have the same signature: run tanh's kernel for relu
    relu = next(i for i, l in enumerate(plan.launches) if l.node == "relu1")
    tanh = next(i for i, l in enumerate(plan.launches) if l.node == "tanh2")
    bad = dataclasses.replace(plan, kernels=tuple(
        plan.kernels[plan.launches[tanh].kernel] if i == plan.launches[relu].kernel else k
        for i, k in enumerate(plan.kernels)))
    try:
        sess = executor.Session(bad)
    except Exception as e:  # offsets differ: the kernel writes tanh2's tensor; either way it is caught
        pytest.skip(f"swapped kernel refused at load: {e}")
    diffs, _ = check.check(sess, graph, feeds, opts)
    assert diffs and diffs[0].launch == relu and diffs[0].label == "relu1"


def test_compile_is_deterministic_in_process(examples):
    graph, plan, _ = examples["transformer"]
    plan2, _ = compile_and_load(graph)
    assert codec.encode(plan) == codec.encode(plan2)


def test_plan_larger_than_free_device_memory_is_refused(examples):
    """Where a device reports its memory (GPUs), a plan that cannot fit is refused
    before anything is allocated."""
    import executor
    from aotplan.core.errors import LimitError

    _, plan, _ = examples["cnn"]
    real = jax.devices()[0]

    class SmallDevice:
        platform = real.platform

        def memory_stats(self):
            return {"bytes_limit": 100_000, "bytes_in_use": 50_000}

        def __str__(self):
            return "small device"

    with pytest.raises(LimitError, match=r"plan needs \d+ bytes of device memory .* small device has 50000 bytes free"):
        executor.Session(plan, device=SmallDevice())
