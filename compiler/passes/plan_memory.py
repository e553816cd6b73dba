"""plan_memory: run a registered planner, verify it, and state the arena's bytes,
the naive size and the lower bound (peak live bytes)."""

from dataclasses import dataclass

from aotplan.core import formats, intervals
from aotplan.core.errors import InternalError, LimitError, ModelError
from compiler import planners


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict  # tensor index -> byte offset (arena tensors only)
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    planner: str


def run(liveness, planner="best", alignment=formats.ALIGNMENT):
    if planner not in planners.PLANNERS:
        raise ModelError(f"unknown planner {planner!r} (known: {', '.join(sorted(planners.PLANNERS))})")
    ivs = list(liveness.intervals)
    offsets = planners.PLANNERS[planner](ivs, alignment)
    if any(o % alignment for o in offsets):
        raise InternalError(f"planner {planner!r} returned an unaligned offset")
    clash = intervals.find_overlap(ivs, offsets)
    if clash:
        raise InternalError(f"planner {planner!r} overlapped tensors {clash[0].tensor} and {clash[1].tensor}")
    arena = planners.arena_size(ivs, offsets, alignment)
    naive = planners.arena_size(ivs, planners.naive(ivs, alignment), alignment)
    try:
        formats.check_arena_bytes(arena, "the arena")
    except LimitError as e:  # name the largest tensor: the model's doing, not the planner's
        i = max(ivs, key=lambda iv: iv.nbytes).tensor
        if i >= len(liveness.tensors):
            raise
        t = liveness.tensors[i]
        raise LimitError(f"{e}; its largest tensor is {t.kind} {t.name!r} {t.dtype}{list(t.shape)} "
                         f"({t.nbytes} bytes)") from None
    return MemoryPlan({iv.tensor: o for iv, o in zip(ivs, offsets)}, arena, naive,
                      intervals.peak_live_bytes(ivs, lambda n: formats.align_up(n, alignment)), planner)
