"""The verifier's checks of a tensor-parallel plan's mesh (format 9), on the golden MLP
plan for 2 devices: each tampered field is one PlanError naming it (a collective out
of place, on the wrong tensors or with the wrong axis; a weight's part missing, of the
wrong size or for a device the plan does not have; a sharding that contradicts what
the plan does with the tensor), and the tampered plan never reaches a device."""

import dataclasses
import os

import pytest

from aotplan.core import codec, verify
from aotplan.core.errors import PlanError
from aotplan.core.plan import PlanCollective, PlanShard, PlanSharding
from conftest import ROOT

GOLDEN = os.path.join(ROOT, "plans", "golden", "v9", "mlp_2devices_tensor_kernel.plan")


@pytest.fixture(scope="module")
def plan():
    return codec.read(GOLDEN)


def _mesh(plan, **fields):
    return dataclasses.replace(plan, mesh=dataclasses.replace(plan.mesh, **fields))


def _collective(plan, k, **fields):
    colls = list(plan.mesh.collectives)
    colls[k] = dataclasses.replace(colls[k], **fields)
    return _mesh(plan, collectives=tuple(colls))


def test_the_golden_plan_verifies_and_says_what_it_does(plan):
    verify.verify(plan)
    T = plan.tensors
    assert [(c.op, T[c.reads[0]].name, T[c.writes[0]].name) for c in plan.mesh.collectives] == [
        ("all_reduce", "fc2/partial", "fc2/partial/all_reduce"), ("all_gather", "fc3", "fc3/all_gather")]


@pytest.mark.parametrize("tamper,msg", [
    (lambda p: _collective(p, 0, after=7), r"mesh.collectives\[0\].after = 7 is out of range \(0..6\)"),
    (lambda p: _collective(p, 0, after=0), r"collective all_reduce after launch 0 reads 'fc2/partial' before any "
                                           r"launch writes it"),
    (lambda p: _collective(p, 0, op="reduce_scatter"), r"mesh.collectives\[0\].op: 'reduce_scatter' \(known: "
                                                       r"all_reduce, all_gather\)"),
    (lambda p: _mesh(p, shardings=tuple(dataclasses.replace(s, kind="split", axis=1) if s.kind == "partial" else s
                                        for s in p.mesh.shardings)),
     r"mesh.collectives\[0\]: it sums 'fc2/partial', which the plan's shardings do not say is partial"),
    (lambda p: _collective(p, 0, reads=(8,)), r"tensors 'relu1' .* and 'fc2/partial' .* overlap while both are live"),
    (lambda p: _collective(p, 0, reads=(2,)), r"mesh.collectives\[0\].reads\[0\]: tensor 'fc1.w:kn/part1' must be "
                                              r"an arena intermediate of its own bytes in the default format"),
    (lambda p: _collective(p, 0, writes=(11,)), r"launch 3 \('fc2/bias'\) reads 'fc2/partial/all_reduce' before any "
                                                r"launch writes it"),
    (lambda p: _collective(p, 0, reads=(9, 9), writes=(10,)), r"mesh.collectives\[0\]: 2 reads and 1 writes"),
    (lambda p: _collective(p, 1, axis=0), r"mesh.collectives\[1\]: it joins 'fc3' along axis 0, which the plan's "
                                          r"shardings do not say is split along it"),
    (lambda p: _mesh(p, shards=p.mesh.shards[1:]), r"split constant 'fc1.w:kn/part1' has no part for device 1 "
                                                   r"\(mesh.shards\)"),
    (lambda p: _mesh(p, shards=(dataclasses.replace(p.mesh.shards[0], data=p.mesh.shards[0].data[:-4]),)
                     + p.mesh.shards[1:]),
     r"mesh.shards\[0\]: the part of constant 'fc1.w:kn/part1' for device 1 has 16380 bytes, the tensor 16384"),
    (lambda p: _mesh(p, shards=p.mesh.shards + (PlanShard(2, 2, p.mesh.shards[0].data),)),
     r"mesh.shards\[5\].device = 2 is out of range \(1..1; device 0's part is the constant's row\)"),
    (lambda p: _mesh(p, shards=p.mesh.shards + (PlanShard(1, 1, b"\0" * 256),)),
     r"mesh.shards\[5\].tensor = 1: not a tensor the plan's shardings split"),
    (lambda p: _mesh(p, shardings=p.mesh.shardings + (PlanSharding(1, "partial"),)),
     r"mesh.shardings\[9\]: constant 'fc2.b' is partial: a weight is replicated or split"),
    (lambda p: _mesh(p, shardings=p.mesh.shardings + (PlanSharding(15, "split", 1),)),
     r"mesh.shardings\[9\]: tensor 'probs' is an input or output of the plan, which are whole on every device"),
    (lambda p: _mesh(p, parallel="data", input_axes=(0,), output_axes=(0,)),
     r"a data-parallel plan has no shardings, shards or collectives"),
])
def test_a_tampered_mesh_is_refused_naming_the_field(plan, tamper, msg):
    bad = tamper(plan)
    with pytest.raises(PlanError, match=msg):
        verify.verify(bad)
    import executor

    with pytest.raises(PlanError, match=msg):  # (through the file: the executor's load verifies first)
        executor.load(codec.encode(bad))


def test_the_mesh_survives_the_codec_byte_for_byte(plan):
    with open(GOLDEN, "rb") as f:
        assert codec.encode(plan) == f.read()
    assert codec.decode(codec.encode(plan)).mesh == plan.mesh
    assert PlanCollective("all_reduce", 2, (9,), (10,)) == plan.mesh.collectives[0]


SINK = os.path.join(ROOT, "plans", "golden", "v9", "mlp_2devices_tensor_sink.plan")


def test_a_sink_plan_lists_no_collective_between_launches():
    """A tensor-parallel sink plan is one program over the devices, its collectives
    inside (aotplan/core/spmd.py): one listed between launches would never run."""
    sink = codec.read(SINK)
    verify.verify(sink)
    assert len(sink.launches) == 1 and sink.mesh.collectives == () and sink.mesh.shards
    T = sink.tensors
    reads = next(i for i, t in enumerate(T) if t.kind == "output")
    bad = _mesh(sink, collectives=(PlanCollective("all_reduce", 0, (reads,), (reads,)),))
    with pytest.raises(PlanError, match=r"mesh.collectives: a tensor-parallel sink plan's collectives are in its one "
                                        r"program, yet it lists 1 between launches"):
        verify.verify(bad)
