"""compiler.tensor_parallel and tensor_parallel_plan: the sharding rules on small graphs
(the weights split, the collectives placed and named; every sharded graph checked
against the model under `jax.vmap`, one device standing in for all), the plans they
compile to (format 9: shardings, the other devices' parts of the weights, the
collectives between launches; byte-identical on recompiling), and the models and
options it refuses, each with one clear error."""

import dataclasses

import numpy as np
import pytest

import compiler
from aotplan.core import codec, model_json
from aotplan.core.errors import ModelError
from compiler import pipeline, tensor_parallel, tensor_parallel_plan
from conftest import EXAMPLES
from tensor_models import small_graph, three_heads

MLP = f"{EXAMPLES}/mlp/model.json"
TRANSFORMER = f"{EXAMPLES}/transformer/model.json"
NO_PASSES = frozenset(pipeline.CLEANUP_PASSES)


def _shard(graph, devices):
    options = pipeline.resolve(pipeline.Options(launch="fused"))
    cleaned, _, info = pipeline.prepare(graph, options)
    sharded = tensor_parallel.shard(cleaned, info, devices)
    tensor_parallel_plan.check_same_outputs(cleaned, sharded, devices, dataclasses.replace(options, disabled=NO_PASSES))
    return sharded


def _ops(sharded):
    return [(n.op, n.inputs, n.outputs) for n in sharded.graph.nodes if n.op in ("all_reduce", "all_gather")]


def _mlp(hidden=8):
    return small_graph([("up", "matmul", ("x", "w1"), ("h",), {}), ("act", "relu", ("h",), ("a",), {}),
                   ("down", "matmul", ("a", "w2"), ("y",), {}), ("out", "add", ("y", "b2"), ("z",), {})],
                  [("x", (3, 4))], [("w1", (4, hidden)), ("w2", (hidden, 4)), ("b2", (4,))], ["z"])


@pytest.mark.parametrize("devices", [2, 4])
def test_an_mlp_block_is_column_then_row_parallel_with_one_all_reduce(devices):
    s = _shard(_mlp(), devices)
    assert {k: v[0].shape for k, v in s.parts.items()} == {"w1/part1": (4, 8 // devices),
                                                           "w2/part0": (8 // devices, 4)}
    assert all(len(v) == devices for v in s.parts.values())
    np.testing.assert_array_equal(np.concatenate(s.parts["w1/part1"], axis=1), _mlp().constant_map()["w1"].data)
    assert _ops(s) == [("all_reduce", ("y",), ("y/all_reduce",))]  # (the bias is added once, after the sum)
    assert s.shardings["h"] == tensor_parallel.Sharding("split", 1)
    assert s.shardings["y"] == tensor_parallel.Sharding("partial")


def test_a_gemm_with_a_bias_and_transposed_weights_adds_the_bias_after_the_sum():
    g = small_graph([("up", "gemm", ("x", "w1", "b1"), ("h",), {"trans_b": 1}), ("act", "tanh", ("h",), ("a",), {}),
                ("down", "gemm", ("a", "w2", "b2"), ("y",), {"trans_b": 1, "beta": 0.5})],
               [("x", (3, 4))], [("w1", (6, 4)), ("b1", (6,)), ("w2", (4, 6)), ("b2", (4,))], ["y"])
    s = _shard(g, 2)
    assert _ops(s) == [("all_reduce", ("y/partial",), ("y/partial/all_reduce",))]
    assert [n.op for n in s.graph.nodes][-1] == "add" and s.graph.nodes[-1].outputs == ("y",)


def test_attention_heads_stay_split_through_reshape_transpose_and_softmax():
    s = _shard(model_json.load(TRANSFORMER)[0], 2)
    assert [op for op, _, _ in _ops(s)] == ["all_reduce", "all_reduce"]  # attention's, the MLP's
    reshapes = {n.name: n.attr("shape") for n in s.graph.nodes if n.op == "reshape"}
    assert reshapes["q.r"] == (1, 16, 1, 16) and reshapes["ctx.r"] == (1, 16, 16)  # (one of 2 heads each)


def test_a_split_that_a_rule_cannot_keep_is_gathered():
    # 2 heads on 4 devices: the projections split, then gathered before the heads' reshape
    s = _shard(model_json.load(TRANSFORMER)[0], 4)
    gathers = [(i, o) for op, i, o in _ops(s) if op == "all_gather"]
    assert ("q.add",) in [i for i, _ in gathers] and len(gathers) == 4


def test_a_split_graph_output_is_gathered_into_its_own_name():
    g = small_graph([("fc", "matmul", ("x", "w"), ("y",), {})], [("x", (2, 4))], [("w", (4, 6))], ["y"])
    s = _shard(g, 2)
    assert _ops(s) == [("all_gather", ("y/part",), ("y",))] and s.graph.outputs == ("y",)


def test_a_model_with_no_weight_to_split_is_refused():
    g = small_graph([("fc", "matmul", ("x", "w"), ("y",), {})], [("x", (2, 4))], [("w", (4, 3))], ["y"])
    with pytest.raises(ModelError, match=r"--devices 2 --parallel tensor: no weight of the model can be split "
                                         r".*compile it --parallel data, or for one device"):
        _shard(g, 2)


@pytest.fixture(scope="module")
def mlp_kernel_plan():
    return compiler.compile(MLP, launch="kernel", devices=2, parallel="tensor")


def test_the_plan_records_shardings_parts_and_collectives(mlp_kernel_plan):
    p = mlp_kernel_plan
    mesh = p.mesh
    assert (mesh.devices, mesh.parallel, mesh.input_axes, mesh.output_axes) == (2, "tensor", (-1,), (-1,))
    names = {p.tensors[s.tensor].name: (s.kind, s.axis) for s in mesh.shardings}
    split = {n for n, (k, _) in names.items() if k == "split" and p.tensors[[t.name for t in p.tensors].index(n)].kind
             == "constant"}
    assert split and {p.tensors[s.tensor].name for s in mesh.shards} == split
    assert all(s.device == 1 and len(s.data) == p.tensors[s.tensor].nbytes for s in mesh.shards)
    assert [c.op for c in mesh.collectives] == ["all_reduce", "all_gather"]
    for c in mesh.collectives:  # between two kernel launches, on arena tensors
        assert 0 <= c.after < len(p.launches) - 1
        assert all(p.tensors[i].storage == "arena" for i in (*c.reads, *c.writes))
    assert p.input_kernel >= 0 and p.output_kernel >= 0  # (a collective may be a step's last work)
    assert codec.version_of(p) == codec.FORMAT_VERSION == 9
    back = codec.decode(codec.encode(p))
    assert back.mesh == mesh and codec.encode(back) == codec.encode(p)


def test_the_plan_is_byte_identical_on_recompiling(mlp_kernel_plan):
    again = compiler.compile(MLP, launch="kernel", devices=2, parallel="tensor")
    assert codec.encode(again) == codec.encode(mlp_kernel_plan)


def test_each_device_holds_its_part_of_the_weights(mlp_kernel_plan):
    one = compiler.compile(MLP, launch="kernel")
    assert mlp_kernel_plan.memory.constant_pool_bytes < 0.6 * one.memory.constant_pool_bytes


@pytest.mark.parametrize("kwargs,msg", [
    # (this process has one host device: a sink plan's program is exported over 2)
    (dict(launch="sink"), r"--devices 2 --parallel tensor --launch sink: the plan's one program spans 2 devices, "
                          r"and exporting it takes that many devices of this host's platform \(cpu\); this process "
                          r"has 1: set XLA_FLAGS=--xla_force_host_platform_device_count=N"),
    (dict(launch="sink", embed_native=True), r"an executable for one device cannot be embedded for it"),
    (dict(launch="sink", weights="arena"), r"--launch sink: the program takes each device's part of the split "
                                           r"weights from its pool: leave out --weights arena"),
    (dict(format_policy="aligned"), r"activations stay in the default storage format .*leave out --formats aligned"),
])
def test_options_it_cannot_honour_are_refused(kwargs, msg):
    with pytest.raises(ModelError, match=msg):
        compiler.compile(MLP, devices=2, parallel="tensor", **kwargs)


def test_a_collective_in_a_one_device_model_is_refused():
    g = small_graph([("sum", "all_reduce", ("x",), ("y",), {})], [("x", (2, 4))], [], ["y"])
    with pytest.raises(ModelError, match=r"node 'sum': all_reduce is a collective over several devices; it runs "
                                         r"only in a plan compiled --devices N --parallel tensor"):
        pipeline.compile_graph(g, "d", pipeline.Options(launch="kernel"))


def test_three_tensors_summed_at_one_point_are_one_block_and_one_collective():
    s = _shard(three_heads(), 2)
    assert _ops(s) == [("all_reduce", ("o1/part", "o2/part", "o3/part"), ("o1", "o2", "o3"))]
    plan = pipeline.compile_graph(s.graph, "d", pipeline.Options(launch="kernel", devices=2, inline_bytes=0,
                                                                 disabled=NO_PASSES, split_groups=False,
                                                                 format_policy="default")).plan
    (c,) = plan.mesh.collectives
    T = plan.tensors
    parts = [T[i] for i in c.reads]
    assert [t.name for t in parts] == ["o1/part", "o2/part", "o3/part"]
    assert [t.nbytes for t in parts] == [2 * 3 * 4, 2 * 5 * 4, 2 * 16 * 4]  # 24, 40, 128 bytes
    start = parts[0].offset
    assert start % 64 == 0
    # each part at the aligned offset right after the one before; the block ends the arena
    assert [t.offset - start for t in parts] == [0, 64, 128]
    assert plan.arena_bytes == start + 128 + 128
    assert [T[i].offset for i in c.writes] == [t.offset for t in parts]  # the results in place
    from executor.collectives import block

    assert block(plan, c) == (start // 4, (128 + 128) // 4)  # one slice of 64 words: one collective moves it


def test_collective_blocks_off_is_one_all_reduce_per_tensor():
    options = pipeline.resolve(pipeline.Options(launch="fused"))
    cleaned, _, info = pipeline.prepare(three_heads(), options)
    s = tensor_parallel.shard(cleaned, info, 2, blocks=False)
    assert [(op, i) for op, i, _ in _ops(s)] == [("all_reduce", ("o1/part",)), ("all_reduce", ("o2/part",)),
                                                  ("all_reduce", ("o3/part",))]


def test_a_split_reshape_that_feeds_a_collective_is_no_view_in_kernel_mode():
    # the heads' reshape keeps the split; its output, a graph output, is gathered: the
    # gather's operand must have bytes of its own (a kernel-mode reshape is otherwise a view)
    g = small_graph([("fc", "matmul", ("x", "w"), ("h",), {}), ("r", "reshape", ("h",), ("y",), {"shape": [2, 2, 4]})],
                    [("x", (2, 4))], [("w", (4, 8))], ["y"])
    plan = compiler.compile(g_path(g), launch="kernel", devices=2, parallel="tensor")
    (c,) = plan.mesh.collectives
    assert c.op == "all_gather" and plan.tensors[c.reads[0]].base == -1


def g_path(graph, _dir=[]):
    import tempfile

    if not _dir:
        _dir.append(tempfile.mkdtemp())
    path = f"{_dir[0]}/{graph.name}_{len(graph.nodes)}.json"
    model_json.save(graph, path)
    return path
