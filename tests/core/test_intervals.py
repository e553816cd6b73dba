"""aotplan.core.intervals: the overlap sweep against an all-pairs check, the lower bound
against a per-step sum, and both at 100,000 intervals."""

from hypothesis import given, settings, strategies as st

from aotplan.core import formats, intervals
from aotplan.core.intervals import Interval


def iv(t, first, last, nbytes):
    return Interval(t, first, last, nbytes, 64, "intermediate")


def clash(a, oa, b, ob):
    return (a.nbytes > 0 and b.nbytes > 0 and a.first <= b.last and b.first <= a.last
            and oa < ob + b.nbytes and ob < oa + a.nbytes)


def all_pairs(ivs, offsets):
    return any(clash(ivs[i], offsets[i], ivs[j], offsets[j])
               for i in range(len(ivs)) for j in range(i + 1, len(ivs)))


def check_answer(ivs, offsets):
    got = intervals.find_overlap(ivs, offsets)
    if not all_pairs(ivs, offsets):
        assert got is None
        return
    assert got is not None
    a, b = got
    at = lambda y: [k for k, x in enumerate(ivs) if x is y]  # noqa: E731  (an object may appear twice)
    assert any(ka != kb and clash(a, offsets[ka], b, offsets[kb]) for ka in at(a) for kb in at(b))
    assert a.first <= b.first  # the earlier-starting one first


@st.composite
def placements(draw):
    """Random small intervals at random offsets (overlaps common), with zero-byte
    intervals, exact duplicates (same object or equal values) and a valid packing with
    one injected overlap."""
    rows = draw(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4), st.integers(0, 5) | st.just(0),
                                   st.integers(0, 12)), min_size=0, max_size=30))
    ivs = [iv(t, f, f + d, n * 8) for t, (f, d, n, _) in enumerate(rows)]
    offsets = [o * 8 for *_, o in rows]
    if ivs and draw(st.booleans()):  # duplicates: the same object, or an equal copy
        k = draw(st.integers(0, len(ivs) - 1))
        same = draw(st.booleans())
        ivs.append(ivs[k] if same else iv(ivs[k].tensor, ivs[k].first, ivs[k].last, ivs[k].nbytes))
        offsets.append(offsets[k])
    if ivs and draw(st.booleans()):  # a valid packing (no reuse), then maybe one overlap
        offsets, end = [], 0
        for x in ivs:
            offsets.append(end)
            end += x.nbytes
        if len(ivs) > 1 and draw(st.booleans()):
            i, j = draw(st.permutations(range(len(ivs))))[:2]
            offsets[i] = offsets[j] + draw(st.integers(0, max(ivs[j].nbytes - 1, 0)))
    return ivs, offsets


@settings(max_examples=300, deadline=None)
@given(placements())
def test_find_overlap_agrees_with_all_pairs(case):
    check_answer(*case)


def test_find_overlap_literals():
    ivs = [iv(0, 0, 2, 128), iv(1, 2, 3, 64)]
    assert intervals.find_overlap(ivs, [0, 64]) == (ivs[0], ivs[1])  # step 2 shared
    assert intervals.find_overlap(ivs, [0, 128]) is None  # touching bytes
    assert intervals.find_overlap([iv(0, 0, 1, 128), iv(1, 2, 3, 64)], [0, 0]) is None  # disjoint steps
    assert intervals.find_overlap([iv(0, 0, 1, 0), iv(1, 0, 1, 64)], [0, 0]) is None  # zero bytes
    same = iv(0, 0, 0, 64)
    assert intervals.find_overlap([same, same], [0, 0]) == (same, same)
    assert intervals.find_overlap([same, same], [0, 64]) is None
    # the successor is the one that overlaps: [0,64) and [128,192) live, then [64,192)
    ivs = [iv(0, 0, 5, 64), iv(1, 0, 5, 64), iv(2, 3, 4, 128)]
    assert intervals.find_overlap(ivs, [0, 128, 64]) == (ivs[1], ivs[2])
    # a long interval far below and a big one whose predecessor is not the clash
    ivs = [iv(0, 0, 9, 1000), iv(1, 0, 9, 8), iv(2, 5, 5, 8)]
    assert intervals.find_overlap(ivs, [0, 2000, 500]) == (ivs[0], ivs[2])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 5), st.integers(0, 300)), max_size=30),
       st.sampled_from([1, 16, 64]))
def test_peak_live_bytes_is_the_largest_step_sum(rows, alignment):
    ivs = [iv(t, f, f + d, n) for t, (f, d, n) in enumerate(rows)]
    align = lambda n: formats.align_up(n, alignment)  # noqa: E731
    want = max((sum(align(x.nbytes) for x in ivs if x.first <= s <= x.last) for s in range(17)), default=0)
    assert intervals.peak_live_bytes(ivs, align) == want


N = 100_000


def test_100k_intervals_all_live_at_once():
    ivs = [iv(t, t % 10, 20 + t % 7, 64 + t % 3) for t in range(N)]
    offsets = [128 * t for t in range(N)]
    assert intervals.find_overlap(ivs, offsets) is None
    offsets[N // 2] = offsets[N // 3] + 32  # one clash in the middle of the stack
    a, b = intervals.find_overlap(ivs, offsets)
    assert {a.tensor, b.tensor} == {N // 2, N // 3}
    assert intervals.peak_live_bytes(ivs, formats.align_up) == sum(formats.align_up(x.nbytes) for x in ivs)


def test_100k_intervals_chain_with_reuse():
    # a chain reusing two slots: t lives t..t+1 at slot t % 2; plus long-lived ones on top
    ivs = [iv(t, t, t + 1, 1000) for t in range(N)] + [iv(N + k, k * 1000, N, 64) for k in range(100)]
    offsets = [1024 * (t % 2) for t in range(N)] + [2048 + 64 * k for k in range(100)]
    assert intervals.find_overlap(ivs, offsets) is None
    offsets[N + 99] = 1024  # a long one onto a slot the chain still uses
    a, b = intervals.find_overlap(ivs, offsets)
    assert b.tensor == N + 99 or a.tensor == N + 99
    assert intervals.peak_live_bytes(ivs, formats.align_up) == 2 * 1024 + 100 * 64
