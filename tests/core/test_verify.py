"""The verifier catches what a planner or a corrupt file could get wrong."""

import dataclasses

import pytest

from conftest import EXAMPLE_NAMES, LAUNCH_MODES, tensor_index
from aotplan.core import verify
from aotplan.core.errors import PlanError


def with_tensor(plan, name, **changes):
    idx = tensor_index(plan)[name]
    ts = list(plan.tensors)
    ts[idx] = dataclasses.replace(ts[idx], **changes)
    return dataclasses.replace(plan, tensors=tuple(ts))


def live_pair(plan):
    """Two arena tensors live at the same step: a launch's input and output."""
    l = next(l for l in plan.launches if any(plan.tensors[r].storage == "arena" for r in l.reads))
    a = next(plan.tensors[r] for r in l.reads if plan.tensors[r].storage == "arena")
    return a, plan.tensors[l.writes[0]]


def test_good_plans_verify(mode_examples):
    for name in EXAMPLE_NAMES:
        for mode in LAUNCH_MODES:
            verify.verify(mode_examples[name, mode][1])


def test_injected_overlap_names_both_tensors(examples):
    plan = examples["cnn"][1]
    a, b = live_pair(plan)
    bad = with_tensor(plan, b.name, offset=a.offset)
    with pytest.raises(PlanError, match=rf"tensors '.*' .* and '.*' .* overlap while both are live"):
        verify.verify(bad)
    msg = ""
    try:
        verify.verify(bad)
    except PlanError as e:
        msg = str(e)
    assert repr(a.name) in msg and repr(b.name) in msg


def test_misaligned_and_out_of_bounds(examples):
    plan = examples["mlp"][1]
    t = next(t for t in plan.tensors if t.storage == "arena")
    with pytest.raises(PlanError, match="not a non-negative multiple of the alignment"):
        verify.verify(with_tensor(plan, t.name, offset=t.offset + 4))
    with pytest.raises(PlanError, match="exceed the arena"):
        verify.verify(with_tensor(plan, t.name, offset=plan.arena_bytes))
    with pytest.raises(PlanError, match="nbytes"):
        verify.verify(with_tensor(plan, t.name, nbytes=t.nbytes + 4))


def test_bad_references(kernel_examples):
    plan = kernel_examples["mlp"][1]
    l0 = plan.launches[0]
    bad = dataclasses.replace(plan, launches=(dataclasses.replace(l0, kernel=99),) + plan.launches[1:])
    with pytest.raises(PlanError, match="kernel = 99 is out of range"):
        verify.verify(bad)
    bad = dataclasses.replace(plan, launches=(dataclasses.replace(l0, writes=(plan.inputs[0],)),) + plan.launches[1:])
    with pytest.raises(PlanError, match="writes 'x', a input"):
        verify.verify(bad)
    bad = dataclasses.replace(plan, launches=plan.launches[1:])
    with pytest.raises(PlanError, match="before any launch writes it"):
        verify.verify(bad)
    bad = dataclasses.replace(plan, constants=plan.constants[1:])
    with pytest.raises(PlanError, match="has no data"):
        verify.verify(bad)


def test_unknown_enums(examples):
    plan = examples["mlp"][1]
    with pytest.raises(PlanError, match="launch mode 'warp'"):
        verify.verify(dataclasses.replace(plan, launch_mode="warp"))
    with pytest.raises(PlanError, match="unknown dtype 'float8'"):
        verify.verify(with_tensor(plan, "x", dtype="float8"))
