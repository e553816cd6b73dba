"""The verifier and the codec on plans with states (format 7): a tampered state table,
state tensor or kernel flag is one PlanError naming it; a stateful plan round-trips;
an older format cannot claim a state."""

import dataclasses

import msgpack
import numpy as np
import pytest

from aotplan.core import codec, model_json, verify
from aotplan.core.errors import PlanError
from conftest import reheader, tensor_index
from state_model import accumulator


@pytest.fixture(scope="module")
def acc_plans(tmp_path_factory):
    """{mode: the accumulator's plan}: kernel mode (launch "add" writes the state's
    update, launch "double" reads it) and sink mode."""
    from compiler import pipeline

    graph, digest = model_json.load(accumulator(tmp_path_factory.mktemp("acc")))
    return {mode: pipeline.compile_graph(graph, digest, pipeline.Options(launch=mode, format_policy="default")).plan
            for mode in ("kernel", "sink")}


def _tensor(plan, name, **changes):
    i = tensor_index(plan)[name]
    ts = list(plan.tensors)
    ts[i] = dataclasses.replace(ts[i], **changes)
    return dataclasses.replace(plan, tensors=tuple(ts))


def _launch(plan, s, **changes):
    ls = list(plan.launches)
    ls[s] = dataclasses.replace(ls[s], **changes)
    return dataclasses.replace(plan, launches=tuple(ls))


def _refused(plan, pattern):
    with pytest.raises(PlanError, match=pattern):
        verify.verify(plan)


def test_stateful_plans_verify_and_round_trip(acc_plans):
    for plan in acc_plans.values():
        verify.verify(plan)
        data = codec.encode(plan)
        assert data[8:12] == (7).to_bytes(4, "little")
        again = codec.decode(data)
        assert again.states == plan.states and again.memory == plan.memory
        assert [k.state for k in again.kernels] == [k.state for k in plan.kernels]
        assert codec.encode(again) == data


def test_the_state_table_is_checked(acc_plans):
    plan = acc_plans["kernel"]
    st = plan.states[0]
    idx = tensor_index(plan)
    _refused(dataclasses.replace(plan, states=(dataclasses.replace(st, update=idx["y"]),)),
             "state 'acc': its update 'y' is not a state tensor of its own")
    _refused(dataclasses.replace(plan, states=(dataclasses.replace(st, tensor=99),)),
             r"state 'acc': tensor = 99 is out of range")
    _refused(dataclasses.replace(plan, states=()), "tensor 'acc': a state tensor that no state lists")
    _refused(dataclasses.replace(plan, states=(st, dataclasses.replace(st, name="again"))),
             "state 'again': its tensor 'acc' is not a state tensor of its own")
    _refused(_tensor(plan, "acc_new", offset=64), "'acc_new'.* are not an aligned range of the state buffer")
    _refused(_tensor(plan, "acc_new", shape=(2, 2), device_shape=(2, 2), padding=(0, 0)),
             r"state 'acc': 'acc' float32\[4\] at byte 0 and its update 'acc_new' float32\[2, 2\] at byte 0 must be")
    _refused(dataclasses.replace(plan, memory=dataclasses.replace(plan.memory, state_bytes=1 << 20)),
             "memory.state_bytes 1048576 != 16, where the last state ends")
    _refused(_tensor(plan, "y", kind="state"), "tensor 'y': a state tensor lives in the state buffer")
    _refused(_tensor(plan, "y", storage="state", offset=0), "tensor 'y': only state tensors live in the state buffer")


def test_what_launches_do_with_the_state_is_checked(acc_plans):
    plan = acc_plans["kernel"]
    idx = tensor_index(plan)
    add = next(s for s, l in enumerate(plan.launches) if l.node == "add")
    double = next(s for s, l in enumerate(plan.launches) if l.node == "double")
    assert add < double
    _refused(_launch(plan, double, reads=plan.launches[double].reads + (idx["acc"],)),
             rf"launch {double} \('double'\) reads 'acc', the value of state 'acc' before the step, after launch "
             rf"{add} updated it in place")
    _refused(_launch(plan, add, writes=()), "state 'acc': no launch writes its update 'acc_new'|reads 'acc_new'")
    # a state written by a node that is not its ref output: the old value's tensor written
    _refused(_launch(plan, add, writes=(idx["acc"],)),
             rf"launch {add} \('add'\) writes 'acc' into the state buffer, which is no state's update")
    kernels = list(plan.kernels)
    k = plan.launches[add].kernel
    kernels[k] = dataclasses.replace(kernels[k], state=False)
    _refused(dataclasses.replace(plan, kernels=tuple(kernels)),
             r"launch \d+ \('add'\) touches the state buffer, but its kernel .* does not take it")
    kernels = list(plan.kernels)  # (double reads the update: it takes the state buffer too)
    other = plan.launches[double].kernel
    kernels[other] = dataclasses.replace(kernels[other], state=False)
    _refused(dataclasses.replace(plan, kernels=tuple(kernels)),
             r"launch \d+ \('double'\) touches the state buffer, but its kernel .* does not take it")
    _refused(_launch(plan, double, reads=tuple(i for i in plan.launches[double].reads if i != idx["acc_new"])),
             r"launch \d+ \('double'\) does not touch the state buffer, but its kernel .* takes it")
    special = plan.output_kernel
    kernels = list(plan.kernels)
    kernels[special] = dataclasses.replace(kernels[special], state=True)
    _refused(dataclasses.replace(plan, kernels=tuple(kernels)), "is the output kernel, which .* nor the state buffer")


def test_a_state_initial_value_is_a_constant_row_of_its_tensor(acc_plans):
    plan = acc_plans["sink"]
    idx = tensor_index(plan)
    row = next(c for c in plan.constants if c.tensor == idx["acc"])
    assert np.frombuffer(row.data, "<f4").tolist() == [0.0, 1.0, 2.0, 3.0]
    moved = tuple(dataclasses.replace(c, tensor=idx["acc_new"]) if c is row else c for c in plan.constants)
    _refused(dataclasses.replace(plan, constants=moved), "refers to 'acc_new', which is not a constant or a state's "
                                                         "initial value")


def test_an_older_format_cannot_claim_a_state(acc_plans):
    plan = acc_plans["sink"]
    data = codec.encode(plan)
    header, payload, section, _ = codec.split(data)
    m = msgpack.unpackb(payload, raw=False)
    del m["states"], m["method"], m["methods"]  # a format-6 payload: no such fields, kernel rows of 7, memory of 8
    m["kernels"] = [r[:7] for r in m["kernels"]]
    m["memory"] = m["memory"][:8]
    forged = reheader(msgpack.packb(m, use_bin_type=True), version=6, data=bytes(section))
    with pytest.raises(PlanError, match=r"tensors\[\d+\]: 'state' is a format 7 kind and storage, this plan says "
                                        r"format 6"):
        codec.decode(forged)
