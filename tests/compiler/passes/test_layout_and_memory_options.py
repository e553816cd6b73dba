"""Layout and memory options against the reference, on small models where they
interact: concats with batch > 1 (placement writes one run per outer index), the same
tensor twice in a concat, nested concats, views (reshape chains, reshape of an input),
outputs that later nodes read, an input passed straight to an output, zero-sized and
one-element tensors, odd channel counts (aligned and blocked padding), repeated blocks
(kernel reuse with runtime offsets). Each plan runs twice: once from load's zeroed
arena, once from an arena filled with NaN words, so a read of bytes no launch wrote in
that step (padding included) shows up. The oracle is the reference evaluation with the
clean-up passes off (the compiled plans run them). These are hand-made models, each under the option sets where it stresses most."""

import numpy as np
import pytest

from aotplan.core import codec, model_json
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
from compiler import pipeline, reference

RAW = reference.oracle_options()


class _B:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.inputs, self.nodes, self.consts, self.k = [], [], [], 0

    def inp(self, name, shape):
        self.inputs.append(TensorInfo(name, "float32", tuple(shape)))
        return name

    def const(self, shape, positive=False):
        name = f"c{self.k}"
        self.k += 1
        a = (self.rng.standard_normal(shape) * 0.5).astype(np.float32)
        if positive:
            a = np.abs(a) + 0.5
        self.consts.append(Constant(name, "float32", tuple(shape), a))
        return name

    def node(self, op, ins, n_out=1, **attrs):
        names = [f"t{self.k + j}_{op}" for j in range(n_out)]
        self.k += n_out
        self.nodes.append(Node(names[0] + "_n", op, tuple(ins), tuple(names), freeze(attrs)))
        return names if n_out > 1 else names[0]

    def graph(self, outputs):
        return Graph("sweep", tuple(self.inputs), tuple(outputs), tuple(self.nodes), tuple(self.consts))


def input_passthrough():
    b = _B(1)
    x = b.inp("x", (2, 3, 5, 5))
    r = b.node("relu", [x])
    return b.graph(["x", b.node("concat", [r, x], axis=1), r])


def concat_twice():
    b = _B(2)
    x = b.inp("x", (2, 5, 4, 6))
    c = b.node("conv2d", [x, b.const((7, 5, 3, 3))], pads=[1, 1, 1, 1])
    r = b.node("relu", [c])
    return b.graph([b.node("sigmoid", [b.node("concat", [r, r, c], axis=1)])])


def parts_read_elsewhere():
    b = _B(3)
    x = b.inp("x", (3, 3, 7, 7))
    a = b.node("conv2d", [x, b.const((5, 3, 1, 1))])
    c = b.node("conv2d", [x, b.const((7, 3, 3, 3)), b.const((7,))], pads=[1, 1, 1, 1])
    k = b.node("concat", [a, c], axis=1)
    t = b.node("tanh", [b.node("reshape", [k], shape=[3, 84, 7, 1])])
    m = b.node("maxpool", [a], kernel_shape=[3, 3], strides=[2, 2])
    return b.graph([t, m, b.node("add", [c, c])])


def nested_concat():
    b = _B(4)
    x = b.inp("x", (2, 3, 4, 4))
    a, c, d = b.node("relu", [x]), b.node("neg", [x]), b.node("abs", [x])
    k1 = b.node("concat", [a, c], axis=1)
    k2 = b.node("concat", [k1, d], axis=1)
    return b.graph([b.node("concat", [k2, k1], axis=1)])


def output_then_read():
    b = _B(5)
    x = b.inp("x", (2, 5, 6, 6))
    c = b.node("conv2d", [x, b.const((5, 5, 3, 3))], pads=[1, 1, 1, 1])
    bn = b.node("batchnorm", [c, b.const((5,)), b.const((5,)), b.const((5,)), b.const((5,), positive=True)])
    r = b.node("relu", [bn])
    p = b.node("avgpool", [b.node("concat", [r, bn], axis=1)], kernel_shape=[2, 2], strides=[2, 2])
    return b.graph([c, r, p])


def zero_sized():
    b = _B(6)
    x = b.inp("x", (2, 4, 3, 3))
    zr = b.node("relu", [b.node("slice", [x], starts=[2], ends=[2], axes=[1])])
    k = b.node("concat", [zr, b.node("relu", [x])], axis=1)
    return b.graph([b.node("sigmoid", [k]), zr])


def one_element():
    b = _B(8)
    x = b.inp("x", (1, 1, 1, 1))
    c = b.node("conv2d", [x, b.const((1, 1, 1, 1)), b.const((1,))])
    s = b.node("softmax", [b.node("concat", [b.node("sigmoid", [c]), c, x], axis=1)], axis=1)
    f = b.node("flatten", [b.node("global_avgpool", [s])], axis=1)
    return b.graph([b.node("gemm", [f, b.const((3, 5)), b.const((5,))]), s])


def view_chain():
    b = _B(9)
    x = b.inp("x", (2, 3, 4, 5))
    f = b.node("flatten", [b.node("reshape", [x], shape=[2, 12, 5])], axis=1)
    q = b.node("squeeze", [b.node("relu", [b.node("unsqueeze", [f], axes=[1])])], axes=[1])
    v2 = b.node("reshape", [b.node("add", [q, f])], shape=[2, 3, 4, 5])
    return b.graph([b.node("concat", [v2, x], axis=1), q])


def split_swap():
    b = _B(10)
    x = b.inp("x", (2, 7, 5, 5))
    c = b.node("conv2d", [x, b.const((9, 7, 1, 1))])
    s0, s1 = b.node("split", [c], n_out=2, axis=1, split=[4, 5])
    k = b.node("concat", [b.node("tanh", [s1]), b.node("relu", [s0])], axis=1)
    return b.graph([b.node("mul", [k, c])])


def concat_axes():
    b = _B(11)
    x = b.inp("x", (3, 5, 4, 4))
    a, c = b.node("relu", [x]), b.node("tanh", [x])
    k0 = b.node("concat", [a, c], axis=0)
    k2 = b.node("concat", [a, c], axis=2)
    k3 = b.node("concat", [b.node("sigmoid", [x]), b.node("neg", [x])], axis=-1)
    return b.graph([b.node("reduce_sum", [k0], axes=[0], keepdims=1), k2, k3])


def mlp_odd():
    b = _B(14)
    x = b.inp("x", (3, 17))
    g1 = b.node("gemm", [x, b.const((17, 21)), b.const((21,))])
    r = b.node("relu", [g1])
    s = b.node("softmax", [b.node("gemm", [r, b.const((5, 21)), b.const((5,))], trans_b=1)], axis=-1)
    m = b.node("matmul", [b.node("layernorm", [r, b.const((21,)), b.const((21,))]), b.const((21, 7))])
    return b.graph([b.node("concat", [s, m, s], axis=1), b.node("softmax", [g1], axis=0)])


def reuse_blocks():
    b = _B(15)
    h = b.inp("x", (2, 5, 6, 6))
    for _ in range(3):
        a = b.node("conv2d", [h, b.const((3, 5, 1, 1))])
        c = b.node("conv2d", [h, b.const((2, 5, 3, 3))], pads=[1, 1, 1, 1])
        h = b.node("relu", [b.node("concat", [a, c], axis=1)])
    return b.graph([h])


def broadcast_acts():
    b = _B(17)
    x = b.inp("x", (2, 5, 4, 7))
    c1 = b.node("conv2d", [x, b.const((1, 5, 1, 1))])
    g = b.node("global_avgpool", [x])
    a = b.node("add", [b.node("mul", [x, c1]), g])
    m2 = b.node("mul", [b.node("sigmoid", [g]), a])
    return b.graph([b.node("sub", [m2, b.node("slice", [x], starts=[0], ends=[1], axes=[0])])])


def pools_grouped_conv():
    b = _B(18)
    x = b.inp("x", (3, 7, 5, 5))
    p1 = b.node("maxpool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    p2 = b.node("avgpool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)
    p3 = b.node("avgpool", [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    p4 = b.node("maxpool", [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    k = b.node("concat", [p1, p2, p3, p4], axis=1)
    return b.graph([b.node("conv2d", [k, b.const((28, 1, 3, 3))], group=28, strides=[2, 2], pads=[1, 1, 0, 0])])


KP = dict(launch="kernel", placement="always")
CASES = [
    (input_passthrough, dict(KP, format_policy="nhwc")),
    (input_passthrough, dict(launch="fused", fuse_min_flops=0, weights="arena")),
    (concat_twice, dict(KP, format_policy="blocked")),
    (concat_twice, dict(launch="kernel", format_policy="aligned", inplace=False, planner="greedy_by_breadth")),
    (parts_read_elsewhere, dict(KP, format_policy="default")),
    (parts_read_elsewhere, dict(KP, format_policy="blocked", planner="greedy_by_size")),
    (parts_read_elsewhere, dict(launch="fused", fuse_min_flops=0, format_policy="nhwc")),
    (nested_concat, dict(KP, planner="exact")),
    (nested_concat, dict(launch="kernel", format_policy="aligned", views=False, schedule="default")),
    (output_then_read, dict(KP, format_policy="blocked")),
    (output_then_read, dict(launch="fused", fuse_min_flops=0, format_policy="aligned", inplace=False)),
    (zero_sized, dict(KP, format_policy="aligned")),
    (zero_sized, dict(launch="sink", format_policy="blocked")),
    (one_element, dict(KP, format_policy="blocked")),
    (one_element, dict(launch="fused", fuse_min_flops=0, format_policy="aligned", weights="arena")),
    (view_chain, dict(KP, format_policy="aligned")),
    (view_chain, dict(launch="kernel", views=False, placement="off", inplace=False, planner="naive")),
    (split_swap, dict(KP, format_policy="nhwc")),
    (split_swap, dict(KP, reuse=False, weights="arena")),
    (concat_axes, dict(KP, format_policy="blocked")),
    (concat_axes, dict(KP, format_policy="aligned", planner="greedy_by_breadth")),
    (mlp_odd, dict(launch="kernel", format_policy="aligned")),
    (mlp_odd, dict(launch="fused", fuse_min_flops=0, format_policy="aligned", weights="arena")),
    (reuse_blocks, dict(KP, format_policy="default")),
    (reuse_blocks, dict(KP, format_policy="blocked", weights="arena")),
    (reuse_blocks, dict(launch="fused", fuse_min_flops=0, format_policy="nhwc")),
    (broadcast_acts, dict(launch="kernel", format_policy="blocked")),
    (broadcast_acts, dict(launch="kernel", format_policy="nhwc", inplace=False)),
    (broadcast_acts, dict(launch="sink", format_policy="aligned")),
    (pools_grouped_conv, dict(KP, format_policy="nhwc")),
    (pools_grouped_conv, dict(KP, format_policy="blocked", schedule="default")),
]


def _id(case):
    fn, opts = case
    return fn.__name__ + "-" + "-".join(f"{k}={v}" for k, v in sorted(opts.items()))


@pytest.fixture(scope="session")
def sweep_graphs():
    return {}


def _poison(sess):
    """The arena rebuilt as load builds it (the arena constants placed), but from NaN
    words instead of zeros: a step reads nothing a previous step left but constants."""
    import jax

    sess._zero_arena = lambda words: jax.device_put(np.full((words,), 0x7FC00001, np.uint32), sess.device)
    sess._arena = sess._fresh_arena()


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_layout_options_match_reference(case, sweep_graphs):
    import executor

    fn, opts = case
    g = sweep_graphs.setdefault(fn.__name__, fn())
    res = pipeline.compile_graph(g, model_json.graph_digest(g), pipeline.Options(**opts))
    sess = executor.Session(codec.decode(codec.encode(res.plan)), warmup=False)
    for step, seed in enumerate((1, 2)):
        rng = np.random.default_rng(seed)
        feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in g.inputs}
        want = reference.evaluate(g, feeds, RAW)
        if step:
            _poison(sess)
        got = sess.run(feeds)
        assert set(got) == set(want)
        for k in want:
            assert got[k].shape == want[k].shape, k
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=f"{k} step {step}")
