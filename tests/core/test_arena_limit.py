"""Word offsets are int32: the arena tops out just under 8 GiB. Tested at the boundary
without allocating anything."""

import dataclasses

import pytest

from aotplan.core import formats, intervals, verify
from aotplan.core.errors import LimitError, PlanError
from compiler.passes import liveness, plan_memory


def test_boundary_values():
    assert formats.MAX_ARENA_BYTES == (2**31 - 1) * 4 // 64 * 64
    assert formats.MAX_ARENA_BYTES // formats.WORD_BYTES <= 2**31 - 1
    assert formats.check_arena_bytes(formats.MAX_ARENA_BYTES) == formats.MAX_ARENA_BYTES
    with pytest.raises(LimitError, match="8 GiB"):
        formats.check_arena_bytes(formats.MAX_ARENA_BYTES + 64)


def fake_liveness(sizes):
    ivs = tuple(intervals.Interval(i, 0, 0, n, 64, "intermediate") for i, n in enumerate(sizes))
    return liveness.Liveness((), (), ivs)


def test_planner_refuses_an_arena_past_the_limit():
    half = formats.MAX_ARENA_BYTES // 2 // 64 * 64
    at = fake_liveness([half, formats.MAX_ARENA_BYTES - half])  # two live tensors, exactly the limit
    assert plan_memory.run(at).arena_bytes == formats.MAX_ARENA_BYTES
    over = fake_liveness([half, formats.MAX_ARENA_BYTES - half + 64])
    with pytest.raises(LimitError, match="the arena needs 8589934592 bytes"):
        plan_memory.run(over)


def test_verifier_refuses_a_plan_past_the_limit(examples):
    plan = examples["mlp"][1]
    big = formats.MAX_ARENA_BYTES + 64
    bad = dataclasses.replace(plan, arena_bytes=big, memory=dataclasses.replace(plan.memory, arena_bytes=big))
    with pytest.raises(PlanError, match="int32 word offsets"):
        verify.verify(bad)
