"""Inline constants: sink and fused plans compile their small constants into their
kernels as literals (compiler/pipeline.py, INLINE_BYTES): no argument per step, no
bytes in the plan's constants, their bytes stated in the step's device memory."""

import dataclasses
import re

import jax
import numpy as np
import pytest

from aotplan.core import codec, verify
from aotplan.core.errors import PlanError
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
from compiler import pipeline, reference
from conftest import compile_and_load, random_feeds
from aotplan.core import kernels


def _weight(name):
    """The model's weight a plan's constant holds (the weight_layout pass stores some as
    their kernels read them: NAME:kn, NAME:sio)."""
    return name.split(":")[0]


def _inline(plan):
    return sorted(_weight(t.name) for t in plan.tensors if t.storage == "inline")


def _args(plan, launch=0):
    """The number of arguments the launch's kernel takes."""
    return len(kernels.load_kernel(plan.kernels[plan.launches[launch].kernel]).in_avals)


def test_sink_compiles_small_constants_into_its_program(mode_examples):
    graph, plan, sess = mode_examples["mlp", "sink"]
    consts = sorted(c.name for c in graph.constants)
    assert _inline(plan) == consts and not plan.constants
    assert plan.memory.constant_pool_bytes == 0
    assert plan.memory.inline_constant_bytes == sum(c.data.nbytes for c in graph.constants)
    assert plan.memory.step_device_bytes == (plan.arena_bytes + plan.memory.inline_constant_bytes
                                             + plan.memory.max_workspace_bytes)
    assert _args(plan) == 1 + len(graph.inputs)  # the arena and the feeds, no weights
    # and the same numbers as with every weight an argument from the pool
    plan0, sess0 = compile_and_load(graph, inline_bytes=0)
    assert not _inline(plan0) and len(plan0.constants) == len(consts)
    assert _args(plan0) == 1 + len(consts) + len(graph.inputs)
    feeds = random_feeds(graph, 3)
    want = reference.evaluate(graph, feeds)
    for got in (sess.run(feeds), sess0.run(feeds)):
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_the_budget_takes_the_smallest_first(mode_examples):
    graph = mode_examples["mlp", "sink"][0]
    sizes = sorted((c.data.nbytes, c.name) for c in graph.constants)
    budget = sum(n for n, _ in sizes[:3]) + sizes[3][0] - 1  # room for three, not the fourth
    plan, sess = compile_and_load(graph, inline_bytes=budget)
    assert _inline(plan) == sorted(name for _, name in sizes[:3])
    assert plan.memory.inline_constant_bytes == sum(n for n, _ in sizes[:3])
    pool = sorted(_weight(plan.tensors[c.tensor].name) for c in plan.constants)
    assert pool == sorted(name for _, name in sizes[3:])
    feeds = random_feeds(graph, 4)
    want = reference.evaluate(graph, feeds)
    np.testing.assert_allclose(sess.run(feeds)["probs"], want["probs"], rtol=1e-5, atol=1e-6)


def test_kernel_mode_and_arena_weights_inline_nothing(mode_examples):
    assert not _inline(mode_examples["mlp", "kernel"][1])
    graph = mode_examples["mlp", "sink"][0]
    res = pipeline.compile_graph(graph, "d", pipeline.Options(weights="arena"))
    assert not _inline(res.plan) and res.plan.memory.inline_constant_bytes == 0


def _blocks(n=4, width=16):
    """x -> n x (gemm + relu), each block its own weights of the same shape."""
    rng = np.random.default_rng(0)
    nodes, consts, x = [], [], "x"
    for i in range(n):
        w, b = rng.standard_normal((width, width)).astype(np.float32), rng.standard_normal(width).astype(np.float32)
        consts += [Constant(f"w{i}", "float32", w.shape, w), Constant(f"b{i}", "float32", b.shape, b)]
        nodes += [Node(f"fc{i}", "gemm", (x, f"w{i}", f"b{i}"), (f"fc{i}",), freeze({"trans_b": 1})),
                  Node(f"relu{i}", "relu", (f"fc{i}",), (f"h{i}",), freeze({}))]
        x = f"h{i}"
    return Graph("blocks", (TensorInfo("x", "float32", (2, width)),), (x,), tuple(nodes), tuple(consts))


def test_fused_kernels_shared_by_launches_keep_their_constants_in_the_pool():
    graph = _blocks()
    plan, sess = compile_and_load(graph, launch="fused", fuse_min_flops=0)
    assert len(plan.launches) == 4
    runs = {}
    for l in plan.launches:
        runs[l.kernel] = runs.get(l.kernel, 0) + 1
    # the middle blocks are one computation: one kernel, its weights arguments
    shared = [s for s, l in enumerate(plan.launches) if runs[l.kernel] > 1]
    assert shared == [1, 2]
    assert _inline(plan) == ["b0", "b3", "w0", "w3"]
    pool = sorted(_weight(plan.tensors[c.tensor].name) for c in plan.constants)
    assert pool == ["b1", "b2", "w1", "w2"]
    feeds = random_feeds(graph, 5)
    want = reference.evaluate(graph, feeds)
    got = sess.run(feeds)
    np.testing.assert_allclose(got["h3"], want["h3"], rtol=1e-5, atol=1e-5)
    # without reuse every kernel is its own: every constant inline
    plan2, sess2 = compile_and_load(graph, launch="fused", fuse_min_flops=0, reuse=False)
    assert len(_inline(plan2)) == 8 and not plan2.constants
    np.testing.assert_allclose(sess2.run(feeds)["h3"], want["h3"], rtol=1e-5, atol=1e-5)


def test_device_memory_states_the_inline_bytes(mode_examples):
    _, plan, sess = mode_examples["transformer", "sink"]
    m = sess.memory
    assert m.inline_constant_bytes > 0
    assert m.step_device_bytes == m.arena_bytes + m.constant_pool_bytes + m.inline_constant_bytes + \
        m.max_workspace_bytes


def _refused(plan, match):
    with pytest.raises(PlanError, match=match):
        verify.verify(plan)


def test_verify_refuses_bad_inline_constants(mode_examples):
    _, plan, _ = mode_examples["mlp", "sink"]
    verify.verify(plan)
    i = next(i for i, t in enumerate(plan.tensors) if t.storage == "inline")
    t = plan.tensors[i]

    def with_tensor(**kw):
        ts = list(plan.tensors)
        ts[i] = dataclasses.replace(t, **kw)
        return dataclasses.replace(plan, tensors=tuple(ts))
    _refused(with_tensor(kind="intermediate"), "only constants are inline")
    _refused(with_tensor(offset=64), "only constants are inline")
    _refused(dataclasses.replace(plan, launch_mode="kernel"), "a kernel-mode plan compiles no constants")
    # its values are the kernel's: a data row for it is refused
    from aotplan.core.plan import PlanConstant
    _refused(dataclasses.replace(plan, constants=(PlanConstant(i, bytes(t.nbytes)),)), "an inline constant")
    # the memory it states
    _refused(dataclasses.replace(plan, memory=dataclasses.replace(plan.memory, inline_constant_bytes=0)),
             "inline_constant_bytes")


def test_verify_refuses_an_inline_constant_of_a_shared_kernel():
    plan, _ = compile_and_load(_blocks(), launch="fused", fuse_min_flops=0)
    i = next(i for i, t in enumerate(plan.tensors) if _weight(t.name) == "w1")  # read by a shared kernel
    ts = list(plan.tensors)
    ts[i] = dataclasses.replace(ts[i], storage="inline")
    m = plan.memory
    bad = dataclasses.replace(plan, tensors=tuple(ts), constants=tuple(c for c in plan.constants if c.tensor != i),
                              memory=dataclasses.replace(m, constant_pool_bytes=m.constant_pool_bytes - ts[i].nbytes,
                                                         inline_constant_bytes=m.inline_constant_bytes + ts[i].nbytes))
    _refused(bad, "must be read by one launch, whose kernel runs no other launch")


def test_inline_storage_needs_format_6(mode_examples):
    _, plan, _ = mode_examples["mlp", "sink"]
    import msgpack
    from conftest import reheader

    data = codec.encode(plan)
    payload = msgpack.unpackb(codec.read_header(data)[1], raw=False)
    payload["memory"] = payload["memory"][:7]  # format 5's row
    with pytest.raises(PlanError, match=r"storage: 'inline' is a format 6 storage, this plan says format 5"):
        codec.decode(reheader(msgpack.packb(payload, use_bin_type=True), version=5))
    assert _inline(codec.decode(data)) == _inline(plan)


def test_inline_constants_are_literals_of_the_exported_program(mode_examples):
    """The exported StableHLO holds the values (what a host without the model runs)."""
    graph, plan, _ = mode_examples["mlp", "sink"]
    exp = kernels.load_kernel(plan.kernels[0])
    text = exp.mlir_module()
    literals = re.findall(r"stablehlo\.constant dense<[^>]{20,}> : tensor<([0-9x]+)xf32>", text)
    shapes = sorted("x".join(map(str, t.shape)) for t in plan.tensors if t.storage == "inline")
    assert len(shapes) == len(graph.constants)
    assert sorted(literals) == shapes, literals  # each weight, as a literal of its shape as stored
    out = jax.jit(exp.call, donate_argnums=0)(np.zeros(plan.arena_bytes // 4, np.uint32),
                                              *[random_feeds(graph, 6)[t.name] for t in graph.inputs])
    want = reference.evaluate(graph, random_feeds(graph, 6))
    np.testing.assert_allclose(out[1], want["probs"], rtol=1e-5, atol=1e-6)


_SIZES = {"f32": 4, "s32": 4, "u32": 4, "f16": 2, "bf16": 2, "s16": 2, "u16": 2, "s8": 1, "u8": 1, "pred": 1,
          "s64": 8, "u64": 8, "f64": 8}


def _literal_bytes(hlo):
    """Bytes of the constants in a compiled HLO module's text."""
    total = 0
    for dt, dims in re.findall(r"= (\w+)\[([\d,]*)\](?:\{[^}]*\})? constant\(", hlo):
        total += _SIZES[dt] * int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
    return total


@pytest.mark.parametrize("mode", ["sink", "fused"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_the_stated_inline_bytes_hold_the_compiled_literals(mode_examples, name, mode):
    """XLA may fold what a kernel does to a literal into a new one: the literals in the
    compiled kernels must not exceed the bytes the plan states (a few scalars aside)."""
    _, plan, _ = mode_examples[name, mode]
    stated = plan.memory.inline_constant_bytes
    assert stated > 0
    held = 0
    for k in plan.kernels:
        if any(t.storage == "inline" for l in plan.launches if l.kernel == plan.kernels.index(k)
               for t in (plan.tensors[i] for i in l.reads)):
            exp = kernels.load_kernel(k)
            compiled = kernels.compile_lowered(k.name, kernels.lower_kernel(k.name, exp, True, "cpu"), "cpu")
            held += _literal_bytes(compiled.as_text())
    assert 0.9 * stated <= held <= stated + 1024, (held, stated)


def test_narrow_and_shared_constants_stay_in_the_pool():
    """float16 weights (a kernel converts them: XLA would hold the converted literal) and
    a weight read by two nodes stay arguments."""
    from conftest import one_node_graph

    x, w, b = np.zeros((4, 8), np.float16), np.ones((16, 8), np.float16), np.ones(16, np.float16)
    plan, _ = compile_and_load(one_node_graph("gemm", [("x", x)], [("w", w), ("b", b)], trans_b=1))
    assert not _inline(plan) and len(plan.constants) == 2
    # one weight read by two nodes
    w32 = np.ones((8, 8), np.float32)
    g = Graph("two", (TensorInfo("x", "float32", (2, 8)),), ("y",),
              (Node("a", "gemm", ("x", "w"), ("h",), freeze({"trans_b": 1})),
               Node("b", "gemm", ("h", "w"), ("y",), freeze({"trans_b": 1}))),
              (Constant("w", "float32", w32.shape, w32),))
    plan, sess = compile_and_load(g)
    assert not _inline(plan)
    feeds = random_feeds(g, 1)
    np.testing.assert_allclose(sess.run(feeds)["y"], reference.evaluate(g, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_verify_refuses_an_inline_constant_no_launch_reads(mode_examples):
    _, plan, _ = mode_examples["mlp", "sink"]
    i = next(i for i, t in enumerate(plan.tensors) if t.storage == "inline")
    l = plan.launches[0]
    bad = dataclasses.replace(plan, launches=(dataclasses.replace(l, reads=tuple(j for j in l.reads if j != i)),))
    _refused(bad, "must be read by one launch")
