"""Planners on literal intervals with exact answers, then random ones (hypothesis)."""

from hypothesis import given, settings, strategies as st

from aotplan import formats, intervals
from aotplan.intervals import Interval
from compiler import planners


def iv(t, first, last, nbytes):
    return Interval(t, first, last, nbytes, 64, "intermediate")


def test_naive_literal():
    ivs = [iv(0, 0, 1, 100), iv(1, 1, 2, 64), iv(2, 2, 3, 1)]
    assert planners.naive(ivs, 64) == [0, 128, 192]


def test_greedy_by_size_literal():
    # a chain t0 -> t1 -> t2 -> t3, sizes (i+1)*64: +0 +1 -0 +2 -1 +3 -2
    ivs = [iv(i, i, i + 1, (i + 1) * 64) for i in range(4)]
    # by size: t3 at 0; t2 (live with t3) after it at 256; t1 (live with t2) at 0;
    # t0 (live with t1, which holds 0..128) at 128.
    assert planners.greedy_by_size(ivs, 64) == [128, 0, 256, 0]
    assert planners.arena_size(ivs, planners.greedy_by_size(ivs, 64), 64) == 448
    assert intervals.peak_live_bytes(ivs, formats.align_up) == 448


def test_greedy_best_fit_gap():
    # a big long-lived tensor and two small ones that fit in the hole it leaves behind
    ivs = [iv(0, 0, 0, 256), iv(1, 0, 3, 128), iv(2, 1, 1, 64), iv(3, 2, 2, 192)]
    offs = planners.greedy_by_size(ivs, 64)
    assert offs == [0, 256, 0, 0]
    assert intervals.find_overlap(ivs, offs) is None


interval_sets = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 6), st.integers(1, 5000)), min_size=1, max_size=40,
).map(lambda rows: [iv(i, f, f + d, n) for i, (f, d, n) in enumerate(rows)])


@settings(max_examples=200, deadline=None)
@given(interval_sets)
def test_planners_never_overlap(ivs):
    bound = intervals.peak_live_bytes(ivs, formats.align_up)
    sizes = {}
    for name, plan in planners.PLANNERS.items():
        offs = plan(ivs, 64)
        assert intervals.find_overlap(ivs, offs) is None, name
        assert all(o % 64 == 0 for o in offs)
        sizes[name] = planners.arena_size(ivs, offs, 64)
        assert sizes[name] >= bound
    assert sizes["greedy_by_size"] <= sizes["naive"]


def test_find_overlap_detects():
    ivs = [iv(0, 0, 2, 128), iv(1, 2, 3, 64)]
    assert intervals.find_overlap(ivs, [0, 64]) == (ivs[0], ivs[1])
    assert intervals.find_overlap(ivs, [0, 128]) is None
    assert intervals.find_overlap([iv(0, 0, 1, 128), iv(1, 2, 3, 64)], [0, 0]) is None  # disjoint in time
