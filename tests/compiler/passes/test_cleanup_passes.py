"""Graph clean-up passes: each on literal graphs with exact expectations, each with its
off switch, and outputs within tolerance with every pass on or off."""

import numpy as np
import pytest

from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
from compiler import pipeline, reference
from compiler.passes import bn_fold, cse, dce, fold, identity
from conftest import EXAMPLE_NAMES, compile_and_load, one_node_graph, random_feeds
from onnx_cases import static_graph_inputs

R = np.random.default_rng(11)


def c(name, a):
    a = np.asarray(a)
    return Constant(name, {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64"}[a.dtype], a.shape, a)


def N(name, op, ins, outs=None, **attrs):
    return Node(name, op, tuple(ins), tuple(outs or [name]), freeze(attrs))


X = TensorInfo("x", "float32", (2, 3, 6, 6))


def test_identity_removed_and_output_renamed():
    g = Graph("g", (X,), ("out",), (N("r", "relu", ["x"]), N("i1", "identity", ["r"]), N("t", "tanh", ["i1"]),
                                    N("i2", "identity", ["t"], ["out"])), ())
    g2, n = identity.run(g)
    assert n == 2 and [(m.op, m.inputs, m.outputs) for m in g2.nodes] == [
        ("relu", ("x",), ("r",)), ("tanh", ("r",), ("out",))]


@pytest.mark.parametrize("order", ["model", "reversed"])
def test_identity_chains_into_an_output(order):
    """relu -> identity -> identity (an output): the second identity read the first's
    output, which the pass had removed, so 'out' was produced by no node (found by the
    graph fuzzer, seed 234); and a chain through an output to another output."""
    nodes = [N("r", "relu", ["x"]), N("i1", "identity", ["r"], ["b"]), N("i2", "identity", ["b"], ["out"]),
             N("i3", "identity", ["out"], ["out2"]), N("i4", "identity", ["b"], ["c"]), N("t", "tanh", ["c"])]
    g = Graph("g", (X,), ("out", "out2", "t"), tuple(nodes if order == "model" else nodes[::-1]), ())
    g2, n = identity.run(g)
    assert n == 3 and sorted((m.op, m.inputs, m.outputs) for m in g2.nodes) == [
        ("identity", ("out",), ("out2",)), ("relu", ("x",), ("out",)), ("tanh", ("out",), ("t",))]
    feeds = {"x": np.random.default_rng(0).standard_normal(X.shape).astype(np.float32)}
    got = reference.evaluate(g, feeds)
    r = np.maximum(feeds["x"], 0)
    for k, v in (("out", r), ("out2", r), ("t", np.tanh(r))):
        np.testing.assert_allclose(got[k], v, rtol=1e-6)


def test_identity_of_input_kept_for_an_output():
    g = Graph("g", (X,), ("out",), (N("i", "identity", ["x"], ["out"]),), ())
    assert identity.run(g)[1] == 0


def test_dce_drops_dead_nodes_and_constants():
    g = Graph("g", (X,), ("a",), (N("a", "relu", ["x"]), N("dead", "mul", ["x", "w"]), N("dead2", "tanh", ["dead"])),
              (c("w", np.float32(2)), c("unused", np.float32(1))))
    g2, n = dce.run(g)
    assert [m.name for m in g2.nodes] == ["a"] and g2.constants == () and n == 4


def test_cse_merges_nodes_and_constants_but_not_outputs():
    g = Graph("g", (X,), ("s", "r2"), (N("m1", "mul", ["x", "w1"]), N("m2", "mul", ["x", "w2"]),
                                       N("s", "add", ["m1", "m2"]), N("r1", "relu", ["x"]), N("r2", "relu", ["x"])),
              (c("w1", np.float32(3)), c("w2", np.float32(3))))
    g2, n = cse.run(g)
    assert [m.name for m in g2.nodes] == ["m1", "s", "r1", "r2"]  # r2 is an output: kept
    assert g2.nodes[1].inputs == ("m1", "m1") and [k.name for k in g2.constants] == ["w1"] and n == 2


def conv_bn_graph(bias=True):
    w = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
    consts = [c("w", w), c("s", R.random(4).astype(np.float32) + 0.5), c("b", R.standard_normal(4).astype(np.float32)),
              c("m", R.standard_normal(4).astype(np.float32)), c("v", R.random(4).astype(np.float32) + 0.5)]
    ins = ["x", "w"] + (["cb"] if bias else [])
    if bias:
        consts.append(c("cb", R.standard_normal(4).astype(np.float32)))
    return Graph("g", (X,), ("y",), (N("conv", "conv2d", ins, ["h"], pads=[1, 1, 1, 1]),
                                     N("bn", "batchnorm", ["h", "s", "b", "m", "v"], ["y"], epsilon=1e-3)),
                 tuple(consts))


def gemm_bn_graph(trans_b, with_c, beta):
    b = R.standard_normal((5, 4) if trans_b else (4, 5)).astype(np.float32)
    consts = [c("B", b), c("s", R.random(5).astype(np.float32) + 0.5), c("t", R.standard_normal(5).astype(np.float32)),
              c("m", R.standard_normal(5).astype(np.float32)), c("v", R.random(5).astype(np.float32) + 0.5)]
    if with_c:
        consts.append(c("C", R.standard_normal(5).astype(np.float32)))
    ins = ["a", "B"] + (["C"] if with_c else [])
    return Graph("g", (TensorInfo("a", "float32", (3, 4)),), ("y",),
                 (N("fc", "gemm", ins, ["h"], trans_b=trans_b, beta=beta),
                  N("bn", "batchnorm", ["h", "s", "t", "m", "v"], ["y"])), tuple(consts))


@pytest.mark.parametrize("graph", [conv_bn_graph(True), conv_bn_graph(False), gemm_bn_graph(0, True, 1.0),
                                   gemm_bn_graph(1, True, 0.5), gemm_bn_graph(1, False, 1.0)],
                         ids=["conv+bias", "conv", "gemm", "gemm-transB-beta", "gemm-noC"])
def test_bn_fold_exact_numbers(graph):
    g2, n = bn_fold.run(graph)
    assert n == 1 and [m.op for m in g2.nodes] == [graph.nodes[0].op]
    feeds = random_feeds(graph, 4)
    on = reference.evaluate(graph, feeds)
    off = reference.evaluate(graph, feeds, pipeline.Options(disabled=frozenset({"bn_fold"})))
    np.testing.assert_allclose(on["y"], off["y"], rtol=1e-5, atol=1e-5)


def test_bn_fold_skips_shared_conv_output():
    g = conv_bn_graph()
    g = Graph(g.name, g.inputs, ("y", "h"), g.nodes, g.constants)  # conv output is also an output
    assert bn_fold.run(g)[1] == 0


def test_fold_shape_chain_into_reshape():
    """shape -> gather -> concat -> reshape: folding leaves one launch."""
    g = Graph("g", (X,), ("y",), (
        N("sh", "shape", ["x"]), N("g0", "gather", ["sh", "i0"], axis=0),
        N("cat", "concat", ["g0", "minus1"], axis=0), N("y", "reshape", ["x", "cat"])),
        (c("i0", np.array([0], np.int64)), c("minus1", np.array([-1], np.int64))))
    g2, stats = fold.run(g, fold_constants=True)
    assert [m.op for m in g2.nodes] == ["reshape"] and g2.nodes[0].attr("shape") == (2, -1)
    assert stats.folded == 3 and stats.bound == 1
    # off: the chain that decides the shape is still evaluated (it must be), nothing else is
    g3, stats = fold.run(Graph("g", (X,), ("y", "z"), g.nodes + (N("z", "mul", ["two", "two"]),),
                               g.constants + (c("two", np.float32(2)),)), fold_constants=False)
    assert [m.op for m in g3.nodes] == ["reshape", "mul"]


def test_static_input_fed_by_graph_input_is_a_clear_error_and_freezable():
    from aotplan.core.errors import ModelError

    g = Graph("g", (X, TensorInfo("s", "int64", (2,))), ("y",), (N("y", "reshape", ["x", "s"]),), ())
    with pytest.raises(ModelError, match=r"node 'y' \(reshape\): input 's' \(shape\) must be known at compile time"):
        fold.run(g)
    assert static_graph_inputs(g) == ["s"]
    g2 = fold.freeze_inputs(g, {"s": np.array([6, -1], np.int64)})
    _, sess = compile_and_load(g2)
    x = random_feeds(g2)["x"]
    np.testing.assert_array_equal(sess.run({"x": x})["y"], x.reshape(6, -1))


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
@pytest.mark.parametrize("off", [(), ("fold",), ("identity",), ("bn_fold",), ("weight_layout",), ("cse",), ("dce",),
                                 pipeline.CLEANUP_PASSES])
def test_examples_same_with_each_pass_off(examples, name, off):
    graph = examples[name][0]
    feeds = random_feeds(graph, 9)
    want = examples[name][2].run(feeds)
    got = reference.evaluate(graph, feeds, pipeline.Options(disabled=frozenset(off)))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_plan_records_passes_and_all_off_still_matches(kernel_examples):
    graph, plan, sess = kernel_examples["cnn"]
    assert plan.passes == pipeline.CLEANUP_PASSES
    assert len(plan.launches) < len(graph.nodes)  # batchnorms folded into their convs
    plan_off, sess_off = compile_and_load(graph, disabled=frozenset(pipeline.CLEANUP_PASSES), launch="kernel",
                                          views=False, format_policy="default")
    assert plan_off.passes == () and len(plan_off.launches) == len(graph.nodes)
    feeds = random_feeds(graph, 5)
    np.testing.assert_allclose(sess_off.run(feeds)["fc"], sess.run(feeds)["fc"], rtol=1e-5, atol=1e-5)


def test_weight_layout_transposes_conv_weights_once():
    """Conv weights become (spatial..., in, out) constants, shared by convs that shared
    them; outputs equal those with the pass off, including grouped convs and 1-D/3-D."""
    from compiler.passes import weight_layout

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)  # group=2: in/group = 3
    g = Graph("t", (TensorInfo("x", "float32", x.shape),), ("y", "z"), (
        Node("c1", "conv", ("x", "w"), ("y",), freeze({"group": 2, "pads": [1, 0, 1, 1]})),
        Node("c2", "conv", ("x", "w"), ("z",), freeze({"group": 2, "strides": [2, 1]})),
    ), (Constant("w", "float32", w.shape, w),))
    g2, changed = weight_layout.run(g)
    assert changed == 2
    new = [c for c in g2.constants if c.name == "w:sio"]
    assert len(new) == 1 and new[0].shape == (3, 2, 3, 4)
    np.testing.assert_array_equal(new[0].data[1, 0, 2, 3], w[3, 2, 1, 0])
    assert all(n.attr("weight_layout") == "SIO" and n.inputs[1] == "w:sio" for n in g2.nodes)
    assert weight_layout.run(g2)[1] == 0  # idempotent
    on = reference.evaluate(g, {"x": x})
    off = reference.evaluate(g, {"x": x}, pipeline.Options(disabled=frozenset({"weight_layout"})))
    for k in ("y", "z"):
        np.testing.assert_allclose(on[k], off[k], rtol=1e-5, atol=1e-5)
    for nd in (1, 3):
        xs = rng.standard_normal((1, 2) + (5,) * nd).astype(np.float32)
        ws = rng.standard_normal((3, 2) + (2,) * nd).astype(np.float32)
        g = one_node_graph("conv", [("x", xs)], [("w", ws)])
        a = reference.evaluate(g, {"x": xs})["y0"]
        b = reference.evaluate(g, {"x": xs}, pipeline.Options(disabled=frozenset({"weight_layout"})))["y0"]
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_weight_layout_stores_a_transposed_gemm_weight_as_read():
    """A Gemm's constant B with trans_b=1 becomes one (K, N) constant for every Gemm
    that shared it, trans_b cleared; a B that is no constant is left; same outputs."""
    from compiler.passes import weight_layout

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6)).astype(np.float32)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    g = Graph("t", (TensorInfo("x", "float32", x.shape), TensorInfo("v", "float32", (4, 6))), ("y", "z", "u"), (
        Node("g1", "gemm", ("x", "w"), ("y",), freeze({"trans_b": 1})),
        Node("g2", "gemm", ("x", "w"), ("z",), freeze({"trans_b": 1, "alpha": 2.0})),
        Node("g3", "gemm", ("x", "v"), ("u",), freeze({"trans_b": 1})),
    ), (Constant("w", "float32", w.shape, w),))
    g2, changed = weight_layout.run(g)
    assert changed == 2
    [new] = [c for c in g2.constants if c.name == "w:kn"]
    np.testing.assert_array_equal(new.data, w.T)
    assert [(n.inputs[1], n.attr("trans_b")) for n in g2.nodes] == [("w:kn", 0), ("w:kn", 0), ("v", 1)]
    assert weight_layout.run(g2)[1] == 0  # idempotent
    feeds = {"x": x, "v": rng.standard_normal((4, 6)).astype(np.float32)}
    on = reference.evaluate(g, feeds)
    off = reference.evaluate(g, feeds, pipeline.Options(disabled=frozenset({"weight_layout"})))
    for k in ("y", "z", "u"):
        np.testing.assert_allclose(on[k], off[k], rtol=1e-5, atol=1e-5)


def test_weight_layout_only_for_cpu_targets():
    assert pipeline.Options(targets=("cpu",)).runs("weight_layout")
    assert not pipeline.Options(targets=("cuda",)).runs("weight_layout")
    assert not pipeline.Options(targets=("cpu", "cuda")).runs("weight_layout")
    assert not pipeline.Options(targets=("cpu",), disabled=frozenset({"weight_layout"})).runs("weight_layout")


def _fused_groups(nodes, shapes, min_flops):
    from compiler.passes import group

    info = {t: TensorInfo(t, "float32", s) for t, s in shapes.items()}
    return [[n.name for n in g] for g in group.run(nodes, "fused", info, min_flops)]


def test_fused_group_ends_where_the_fewest_bytes_cross():
    """A UNet decoder step: conv -> relu -> upsample (reshape, expand, reshape) -> conv.
    The first group ends before the expand (1x4x8x8 crosses: 1 KiB; the relu and the
    first reshape tie, the later wins), not after the upsample (1x4x16x16: 4 KiB)."""
    shapes = {"x": (1, 4, 8, 8), "w1": (4, 4, 3, 3), "w2": (4, 4, 1, 1), "c1": (1, 4, 8, 8), "r": (1, 4, 8, 8),
              "u1": (1, 4, 8, 1, 8, 1), "u2": (1, 4, 8, 2, 8, 2), "u3": (1, 4, 16, 16), "c2": (1, 4, 16, 16),
              "cat": (1, 8, 16, 16), "p": (1, 4, 4, 4)}
    nodes = [Node("c1", "conv2d", ("x", "w1"), ("c1",)), Node("r", "relu", ("c1",), ("r",)),
             Node("u1", "reshape", ("r",), ("u1",)), Node("u2", "expand", ("u1",), ("u2",)),
             Node("u3", "reshape", ("u2",), ("u3",)), Node("c2", "conv2d", ("u3", "w2"), ("c2",)),
             Node("cat", "concat", ("u3", "c2"), ("cat",))]
    assert _fused_groups(nodes, shapes, 0) == [["c1", "r", "u1"], ["u2", "u3", "c2", "cat"]]
    # a skip connection read after the second conv crosses wherever the cut is
    skip = nodes[:-1] + [Node("cat", "concat", ("r", "c2"), ("cat",))]
    assert _fused_groups(skip, shapes, 0) == [["c1", "r"], ["u1", "u2", "u3", "c2", "cat"]]
    # downsampling: the cut after the pool is the cheapest (what the pass did before)
    down = nodes[:2] + [Node("p", "maxpool", ("r",), ("p",)), Node("c2", "conv2d", ("p", "w2"), ("c2",))]
    assert _fused_groups(down, shapes, 0) == [["c1", "r", "p"], ["c2"]]
    # below the work threshold nothing is cut
    assert _fused_groups(nodes, shapes, 10**12) == [[n.name for n in nodes]]


def test_fused_group_waits_for_a_narrower_cut_ahead():
    """A transformer FFN: matmul -> gelu (4x wide) -> matmul -> residual add -> matmul.
    When the second matmul arrives the group has its work (544 >= 500 FLOPs), but every
    cut there carries the wide gelu output (x 32 B + gelu 128 B). Within the lookahead a
    cut after the add carries only 32 B, so the group takes the second matmul and ends
    there; without lookahead it ends at the wide point."""
    from compiler.passes import group

    shapes = {"x": (1, 8), "w1": (8, 32), "m1": (1, 32), "g": (1, 32), "w2": (32, 8), "m2": (1, 8),
              "a": (1, 8), "w3": (8, 8), "m3": (1, 8)}
    nodes = [Node("m1", "matmul", ("x", "w1"), ("m1",)), Node("g", "gelu", ("m1",), ("g",)),
             Node("m2", "matmul", ("g", "w2"), ("m2",)), Node("a", "add", ("x", "m2"), ("a",)),
             Node("m3", "matmul", ("a", "w3"), ("m3",))]
    info = {t: TensorInfo(t, "float32", s) for t, s in shapes.items()}
    names = lambda gs: [[n.name for n in g] for g in gs]  # noqa: E731
    assert names(group.run(nodes, "fused", info, 500)) == [["m1", "g", "m2", "a"], ["m3"]]
    assert names(group.run(nodes, "fused", info, 500, lookahead=0)) == [["m1", "g"], ["m2", "a"], ["m3"]]


def test_narrowest_cut_query_matches_a_scan():
    """group._Narrowest (a sparse table) against a linear scan: fewest bytes, latest on ties."""
    from compiler.passes.group import _Narrowest

    rng = np.random.default_rng(0)
    for _ in range(300):
        cross = [int(c) for c in rng.integers(0, 6, rng.integers(1, 40))]
        narrowest = _Narrowest(cross)
        for _ in range(20):
            lo = int(rng.integers(0, len(cross) + 1))
            hi = int(rng.integers(lo, len(cross) + 1))
            want = None
            for p in range(lo, hi):
                if want is None or cross[p] <= cross[want]:
                    want = p
            assert narrowest(lo, hi) == want, (cross, lo, hi)
    # crossing bytes too large for int64 keys: exact all the same
    huge = [2**61, 2**62 + 5, 2**61, 3]
    assert _Narrowest(huge)(0, 3) == 2 and _Narrowest(huge)(0, 4) == 3 and _Narrowest(huge)(1, 2) == 1


def test_empty_names_at_the_end_of_the_inputs_are_omitted_optional_inputs():
    """ONNX writes an omitted optional input as "": at the end of a node's inputs (gemm's
    C, conv's bias) it is dropped, as if the list stopped before it; anywhere else (not a
    static input) it is an error naming the position."""
    from aotplan.core.errors import ModelError
    from compiler.passes import validate

    x, w = TensorInfo("x", "float32", (2, 3)), Constant("w", "float32", (3, 4), np.ones((3, 4), np.float32))
    g = Graph("g", (x,), ("y",), (Node("n", "gemm", ("x", "w", ""), ("y",), freeze({})),), (w,))
    assert validate.run(g).nodes[0].inputs == ("x", "w")
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    np.testing.assert_allclose(reference.evaluate(g, feeds)["y"], feeds["x"] @ np.ones((3, 4)))
    g = Graph("g", (x,), ("y",), (Node("n", "gemm", ("x", "", "w"), ("y",), freeze({})),), (w,))
    with pytest.raises(ModelError, match=r"^node 'n' \(gemm\): input 1 is empty \(\"\"\): only the optional inputs at "
                                         r"the end of the list, or a static input, may be omitted$"):
        validate.run(g)
    # an op without optional inputs takes no "" (relu's ["x", ""] is two inputs)
    g = Graph("g", (x,), ("y",), (Node("n", "relu", ("x", ""), ("y",), freeze({})),), ())
    with pytest.raises(ModelError, match=r"^node 'n' \(relu\): takes 1 inputs, got 2$"):
        validate.run(g)
