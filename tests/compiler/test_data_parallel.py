"""compiler.data_parallel: a data-parallel plan is one device's plan (the batch divided)
with its mesh; models it cannot split are refused, naming the input or output; the mesh
survives the codec (format 8, only where there is one) and the verifier checks it."""

import dataclasses

import numpy as np
import pytest

import compiler
from aotplan.core import codec, verify
from aotplan.core.errors import ModelError, PlanError
from aotplan.core.graph import Graph, Node, TensorInfo, freeze
from aotplan.core.plan import PlanMesh
from compiler import data_parallel, pipeline
from conftest import EXAMPLES, one_node_graph

MLP = f"{EXAMPLES}/mlp/model.json"


@pytest.fixture(scope="module")
def mlp_plans():
    return compiler.compile(MLP), compiler.compile(MLP, devices=2)


def test_the_plan_is_one_devices_with_its_mesh(mlp_plans):
    one, two = mlp_plans
    assert two.mesh == PlanMesh(devices=2, parallel="data", input_axes=(0,), output_axes=(0,))
    assert two.tensors[two.inputs[0]].shape == (2, 64) and one.tensors[one.inputs[0]].shape == (4, 64)
    assert two.tensors[two.outputs[0]].shape[0] == 2
    assert codec.version_of(one) == codec.STATELESS_VERSION and codec.version_of(two) == codec.MESH_VERSION == 8
    back = codec.decode(codec.encode(two))
    assert back.mesh == two.mesh and dataclasses.replace(back, mesh=None).tensors == one.tensors[:0] + back.tensors
    assert codec.encode(dataclasses.replace(back, mesh=None)) != codec.encode(two)


def test_devices_one_is_the_plain_plan(mlp_plans):
    assert codec.encode(compiler.compile(MLP, devices=1)) == codec.encode(mlp_plans[0])


@pytest.mark.parametrize("mesh,msg", [
    (PlanMesh(1, "data", (0,), (0,)), r"mesh.devices: 1 devices \(a plan for several devices names 2 to 4096\)"),
    (PlanMesh(2, "model", (0,), (0,)), r"mesh.parallel: 'model' \(known: data, tensor\)"),
    (PlanMesh(2, "tensor", (0,), (-1,)), r"mesh.input_axes\[0\]: a tensor-parallel plan's inputs and outputs are "
                                         r"whole on every device \(axis -1\), tensor 'x' has 0"),
    (PlanMesh(2, "data", (0, 0), (0,)), r"mesh.input_axes: 2 axes for 1 tensors"),
    (PlanMesh(2, "data", (0,), (2,)), r"mesh.output_axes\[0\]: axis 2 of tensor '\w+' of shape \[2, \d+\]"),
])
def test_the_verifier_checks_the_mesh(mlp_plans, mesh, msg):
    with pytest.raises(PlanError, match=msg):
        verify.verify(dataclasses.replace(mlp_plans[1], mesh=mesh))


def test_a_corrupt_mesh_field_is_a_plan_error(mlp_plans):
    import msgpack

    from aotplan.core.codec import payload

    enc = payload.encode_payload(mlp_plans[1])
    m = msgpack.unpackb(enc)
    for bad, msg in (([2, "data", [0]], r"mesh: expected 4"), ([2, 3, [0], [0]], r"mesh.parallel"),
                     ("x", r"mesh")):
        m["mesh"] = bad
        with pytest.raises(PlanError, match=msg):
            payload.decode_payload(msgpack.packb(m), 8, b"")


def _graph(*shapes, op="relu", **attrs):
    ins = tuple(TensorInfo(f"x{i}", "float32", s) for i, s in enumerate(shapes))
    return Graph("t", ins, ("y",), (Node("n", op, ("x0",), ("y",), freeze(attrs)),), ())


@pytest.mark.parametrize("graph,devices,msg", [
    (_graph((3, 4)), 2, r"--devices 2 does not divide the batch: input 'x0' has 3 on its first axis"),
    (_graph((4, 4), (2, 4)), 2, r"input 'x1' has 2 on its first axis, input 'x0' 4"),
    (_graph(()), 2, r"input 'x0' is a scalar"),
])
def test_models_it_cannot_split_are_refused_naming_the_input(graph, devices, msg):
    with pytest.raises(ModelError, match=msg):
        data_parallel.shard_graph(graph, devices)


def test_a_model_that_mixes_samples_is_refused_naming_the_output():
    x = np.zeros((4, 3), np.float32)
    graph = one_node_graph("softmax", [("x", x)], axis=0)  # (each sample's value depends on the others)
    with pytest.raises(ModelError, match=r"--devices 2: output 'y0' differs between the whole batch and its slices "
                                         r"joined \(by .*\): the model mixes samples across the batch"):
        data_parallel.compile_data_parallel(graph, "d", pipeline.Options(), 2)
    ok = one_node_graph("softmax", [("x", x)], axis=1)
    assert data_parallel.compile_data_parallel(ok, "d", pipeline.Options(), 2).plan.mesh.devices == 2


def test_an_output_without_the_batch_is_refused():
    x = np.zeros((4, 3), np.float32)
    graph = one_node_graph("reduce_sum", [("x", x)], axes=[0, 1], keepdims=0)
    with pytest.raises(ModelError, match=r"--devices 2: output 'y0' is a scalar: data parallel joins"):
        data_parallel.compile_data_parallel(graph, "d", pipeline.Options(), 2)
    rows = one_node_graph("reduce_sum", [("x", x)], axes=[1], keepdims=0)  # (4,) -> joined (4,): splits
    assert data_parallel.compile_data_parallel(rows, "d", pipeline.Options(), 2).plan.mesh.output_axes == (0,)
    cols = one_node_graph("reduce_sum", [("x", x)], axes=[0], keepdims=0)  # (3,) each: joined (6,)
    with pytest.raises(ModelError, match=r"output 'y0' has shape \[3\] at the whole batch, \[6\] from its slices"):
        data_parallel.compile_data_parallel(cols, "d", pipeline.Options(), 2)


def test_the_options_are_checked():
    with pytest.raises(ModelError, match=r"--parallel 'model': not supported \(supported: data, tensor\)"):
        data_parallel.check_devices(2, "model")
    with pytest.raises(ModelError, match=r"--devices: expected a count of 1 to 4096, got 0"):
        data_parallel.check_devices(0, "data")
