"""Convolutions in row bands (compiler/ops/conv.py `_in_bands`, chosen by
compiler/passes/lower.py `_band_widest`): the same numbers, less workspace."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
from compiler import reference
from compiler.ops import conv
from conftest import compile_and_load, random_feeds


def _conv_node(nd, s, d, pads, g):
    return Node("c", "conv", ("x", "w"), ("y",), freeze({"strides": [s] * nd, "dilations": [d] * nd,
                                                         "pads": list(pads), "group": g}))


# (1-D and 3-D channels-first in the slow tier: CI time)
@pytest.mark.parametrize("nd,channels_last", [pytest.param(1, False, marks=pytest.mark.slow), (1, True), (2, False),
                                              (2, True), pytest.param(3, False, marks=pytest.mark.slow)])
def test_banded_convolution_equals_the_whole_one(nd, channels_last):
    """Band counts (more bands than output rows included), strides, dilations,
    top/bottom padding and groups: the banded result is the whole convolution's, and
    has its shape."""
    rng = np.random.default_rng(nd)
    cases = 0
    combos = itertools.product([1, 9], [1, 3], [1, 3], [1, 2], [(0, 0), (2, 1)])
    for i, (h, k, s, d, (top, bottom)) in enumerate(combos):
        if d * (k - 1) + 1 > h + top + bottom:
            continue
        g = 1 + i % 2
        x = rng.standard_normal([2, 4, h] + [5] * (nd - 1)).astype(np.float32)
        w = rng.standard_normal([6, 4 // g] + [k] * nd).astype(np.float32)
        node = _conv_node(nd, s, d, [top] + [1] * (nd - 1) + [bottom] + [0] * (nd - 1), g)
        xs = jnp.asarray(np.moveaxis(x, 1, -1) if channels_last else x)
        want = conv.conv_lowered(node, xs, jnp.asarray(w), logical=x, channels_last=channels_last)
        for bands in (3, 16):
            got = conv.conv_lowered(conv.with_strategy(node, bands=bands), xs, jnp.asarray(w), logical=x,
                                    channels_last=channels_last)
            assert got.shape == want.shape
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
            cases += 1
    assert cases > 40


def _two_convs():
    """x -> conv 3x3 -> relu -> conv 3x3 (stride 2) -> y: each conv's input and result
    are most of its launch's temp bytes."""
    rng = np.random.default_rng(0)
    c = 16
    w1 = (rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    nodes = (Node("c1", "conv", ("x", "w1", "b"), ("h",), freeze({"pads": [1, 1, 1, 1]})),
             Node("r1", "relu", ("h",), ("hr",), ()),
             Node("c2", "conv", ("hr", "w2"), ("y",), freeze({"pads": [1, 1, 1, 1], "strides": [2, 2]})))
    consts = (Constant("w1", "float32", w1.shape, w1), Constant("w2", "float32", w2.shape, w2),
              Constant("b", "float32", b.shape, b))
    return Graph("bands", (TensorInfo("x", "float32", (1, c, 96, 96)),), ("y",), nodes, consts)


@pytest.mark.parametrize("mode", ["kernel", "fused"])
def test_bands_lower_the_workspace_and_keep_the_outputs(mode):
    """Kernel mode, and fused mode with a group per conv (a group holding both convs
    holds both their temps: banding one would not lower it, and is not kept)."""
    g = _two_convs()
    opts = dict(launch=mode, format_policy="default", **({"fuse_min_flops": 0} if mode == "fused" else {}))
    plain, plain_sess = compile_and_load(g, conv_bands=False, **opts)
    banded, sess = compile_and_load(g, conv_bands=True, **opts)
    assert banded.memory.max_workspace_bytes < plain.memory.max_workspace_bytes
    assert banded.memory.arena_bytes == plain.memory.arena_bytes  # the arena is the planner's, untouched
    assert len(banded.launches) == len(plain.launches) >= 2
    feeds = random_feeds(g, 1)
    want = reference.evaluate(g, feeds)["y"]
    np.testing.assert_allclose(sess.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(plain_sess.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)


def test_sink_plans_are_not_banded():
    """In sink mode XLA plans the whole step: there is no launch to band."""
    g = _two_convs()
    a, _ = compile_and_load(g, launch="sink", conv_bands=False, format_policy="default")
    b, _ = compile_and_load(g, launch="sink", conv_bands=True, format_policy="default")
    assert [k.exported for k in a.kernels] == [k.exported for k in b.kernels]


def _decoder_stage():
    """A UNet decoder stage in one fused group: conv -> relu -> 1x1 projection -> concat
    with the skip (the input) -> conv."""
    rng = np.random.default_rng(1)
    c = 8
    ws = {n: (rng.standard_normal(s) * 0.2).astype(np.float32)
          for n, s in (("w1", (c, c, 3, 3)), ("w2", (c, c, 1, 1)), ("w3", (c, 2 * c, 3, 3)))}
    nodes = (Node("c1", "conv", ("x", "w1"), ("h1",), freeze({"pads": [1, 1, 1, 1]})),
             Node("r1", "relu", ("h1",), ("a1",), ()),
             Node("proj", "conv", ("a1", "w2"), ("p",), ()),
             Node("cat", "concat", ("p", "x"), ("pc",), freeze({"axis": 1})),
             Node("c3", "conv", ("pc", "w3"), ("y",), freeze({"pads": [1, 1, 1, 1]})))
    consts = tuple(Constant(n, "float32", a.shape, a) for n, a in ws.items())
    return Graph("stage", (TensorInfo("x", "float32", (1, c, 48, 48)),), ("y",), nodes, consts)


def test_cuts_start_fused_groups_and_split_point_is_between_contractions():
    from compiler import pipeline
    from compiler.passes import group

    g = _decoder_stage()
    p = pipeline.plan_graph(g, pipeline.Options(launch="fused", fuse_min_flops=10**12, format_policy="default"))
    assert len(p.groups) == 1
    order = list(p.groups[0])
    sizes = {t: int(np.prod(i.shape)) * 4 for t, i in p.info.items()}
    at = group.split_point(order, p.groups[0], sizes)
    names = [n.name for n in order]
    assert names.index("c1") < names.index(at) <= names.index("c3")
    cut = pipeline.plan_graph(g, pipeline.Options(launch="fused", fuse_min_flops=10**12, format_policy="default"),
                              cuts=frozenset({at}))
    assert [[n.name for n in grp] for grp in cut.groups] == [names[:names.index(at)], names[names.index(at):]]
    assert group.split_point(order, (order[0],), sizes) is None  # one contraction: nothing to split


@pytest.mark.parametrize("model", ["two_convs", "decoder_stage"])
def test_fused_splits_are_kept_only_where_the_step_memory_drops(model):
    """compile_graph keeps a split only where arena + max workspace drops; the outputs
    are the reference's either way. Two 3x3 convs in one group (16 channels, 96x96)
    split in two (measured with jax 0.10: 1.92 -> 1.85 MB); the small decoder stage
    stays whole."""
    g = _two_convs() if model == "two_convs" else _decoder_stage()
    opts = dict(launch="fused", fuse_min_flops=10**12, format_policy="default")
    base, _ = compile_and_load(g, split_groups=False, **opts)
    plan, sess = compile_and_load(g, **opts)
    step = lambda pl: pl.memory.arena_bytes + pl.memory.max_workspace_bytes  # noqa: E731
    assert len(base.launches) == 1
    if model == "two_convs":
        assert len(plan.launches) == 2 and step(plan) < step(base)
    else:
        assert len(plan.launches) == 1 and step(plan) == step(base)
    feeds = random_feeds(g, 2)
    np.testing.assert_allclose(sess.run(feeds)["y"], reference.evaluate(g, feeds)["y"], rtol=1e-4, atol=1e-4)
