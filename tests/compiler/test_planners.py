"""Planners on literal intervals with exact answers, then random ones (hypothesis)
against direct O(n^2) transcriptions of TFLite's algorithms (tests/tflite_reference.py)
and a brute-force optimum."""

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from aotplan.core import formats, intervals
from aotplan.core.intervals import Interval
from compiler import planners
from compiler.passes import liveness, plan_memory
from compiler.planners import best_fit, branch_and_bound, byte_runs, gap_index, greedy, layout as layout_module
from compiler.planners.layout import Layout, columns
from tflite_reference import ref_best_fit, ref_breadth_order, ref_size_order

GREEDY = ("greedy_by_size", "greedy_by_breadth", "exact", "best")  # every planner but naive


def iv(t, first, last, nbytes, alignment=64):
    return Interval(t, first, last, nbytes, alignment, "intermediate")


def lower_bound(ivs, alignment):
    return intervals.peak_live_bytes(ivs, lambda n: formats.align_up(n, alignment))


def arena(ivs, offsets, alignment):
    return planners.arena_size(ivs, offsets, alignment)


# --- literal cases ----------------------------------------------------------------------


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


def test_greedy_takes_the_best_fitting_gap_not_the_first():
    ivs = [iv(0, 0, 1, 256), iv(1, 0, 0, 64), iv(2, 1, 2, 320), iv(3, 1, 1, 192), iv(4, 0, 1, 128)]
    # No tensor spans steps 0..2, so all go by size: t2 320, t0 256, t3 192, t4 128, t1 64.
    #   t2 (1-2)  nothing placed                               -> 0    [0, 320)
    #   t0 (0-1)  t2 [0,320)                                   -> 320  [320, 576)
    #   t3 (1)    t2, t0: [0,576)                              -> 576  [576, 768)
    #   t4 (0-1)  t2, t0, t3: [0,768)                          -> 768  [768, 896)
    #   t1 (0)    t0 [320,576), t4 [768,896): gaps [0,320) and [576,768); the smaller
    #             one that holds 64 bytes is [576,768)         -> 576 (first fit: 0)
    offs = planners.greedy_by_size(ivs, 64)
    assert offs == [320, 576, 0, 576, 768]
    assert intervals.find_overlap(ivs, offs) is None
    assert arena(ivs, offs, 64) == lower_bound(ivs, 64) == 896


def test_whole_run_tensors_go_first_and_at_the_bottom():
    # t1 lives over steps 0..3, the whole range: placed first (by tensor id) although
    # t0 and t3 are bigger
    ivs = [iv(0, 0, 0, 256), iv(1, 0, 3, 128), iv(2, 1, 1, 64), iv(3, 2, 2, 192), iv(4, 0, 3, 64)]
    offs = planners.greedy_by_size(ivs, 64)
    assert offs[1] == 0 and offs[4] == 128
    assert offs == [192, 0, 192, 192, 128]
    assert intervals.find_overlap(ivs, offs) is None


# Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net Inference"
# (arXiv 2001.03288), the worked example: (first, last, size) of tensors t0..t7.
PAPER = [(0, 1, 32), (1, 4, 28), (2, 5, 36), (3, 5, 16), (4, 5, 8), (5, 7, 64), (6, 8, 10), (7, 8, 40)]


def paper():
    return [iv(t, f, l, n, 1) for t, (f, l, n) in enumerate(PAPER)]


def test_paper_example_lower_bound():
    # step 5: t2 36 + t3 16 + t4 8 + t5 64 = 124
    assert lower_bound(paper(), 1) == 124


def test_paper_example_greedy_by_size():
    # No tensor spans steps 0..8. By size: t5 64, t7 40, t2 36, t0 32, t1 28, t3 16, t6 10, t4 8.
    #   alloc t5 (5-7)  nothing placed                                  -> 0    [0, 64)
    #   alloc t7 (7-8)  t5 [0,64)                                       -> 64   [64, 104)
    #   alloc t2 (2-5)  t5 [0,64) (t7 starts at 7)                      -> 64   [64, 100)
    #   alloc t0 (0-1)  none of t5, t7, t2 is live at 0-1               -> 0    [0, 32)
    #   alloc t1 (1-4)  t0 [0,32), t2 [64,100): gap [32,64) holds 28    -> 32   [32, 60)
    #   alloc t3 (3-5)  t1, t2, t5: [0,100)                             -> 100  [100, 116)
    #   alloc t6 (6-8)  t5 [0,64), t7 [64,104)                          -> 104  [104, 114)
    #   alloc t4 (4-5)  t1, t2, t3, t5: [0,116)                         -> 116  [116, 124)
    ivs = paper()
    offs = planners.greedy_by_size(ivs, 1)
    assert offs == [0, 32, 64, 100, 116, 0, 104, 64]
    assert arena(ivs, offs, 1) == 124


def test_paper_example_every_planner():
    # breadth per step: 0:32 1:60 2:64 3:80 4:88 5:124 6:74 7:114 8:50. Steps 5, 7, 4, ...:
    # step 5 puts t5 0, t2 64, t3 100, t4 116; step 7 puts t7 64, t6 104; step 4 puts t1
    # in the gap [0,64) at 0; step 1 puts t0 on top of t1, at 28.
    ivs = paper()
    assert planners.greedy_by_breadth(ivs, 1) == [28, 0, 64, 100, 116, 0, 104, 64]
    sizes = {name: arena(ivs, plan(ivs, 1), 1) for name, plan in planners.PLANNERS.items()}
    assert sizes == {"naive": 234, "greedy_by_size": 124, "greedy_by_breadth": 124, "exact": 124, "best": 124}
    assert planners.best(ivs, 1) == planners.greedy_by_size(ivs, 1)  # a tie goes to the first member
    # At alignment 64 every tensor takes 64 bytes and the bound is 4 * 64. By size, t1
    # (1-4) lands on t0 and t2 at 128, so t3 goes to 192 and t4 to 256: 320. By breadth
    # (step 5 first) the bound is reached, and `best` takes it (exact ties, later member).
    ivs64 = [iv(t, f, l, n, 64) for t, (f, l, n) in enumerate(PAPER)]
    assert lower_bound(ivs64, 64) == 256
    assert planners.greedy_by_size(ivs64, 64) == [0, 128, 64, 192, 256, 0, 128, 64]
    sizes = {name: arena(ivs64, plan(ivs64, 64), 64) for name, plan in planners.PLANNERS.items()}
    assert sizes == {"naive": 512, "greedy_by_size": 320, "greedy_by_breadth": 256, "exact": 256, "best": 256}
    assert planners.best(ivs64, 64) == planners.greedy_by_breadth(ivs64, 64)


def test_exact_beats_greedy_by_size():
    ivs = [iv(0, 0, 1, 128, 16), iv(1, 1, 2, 64, 16), iv(2, 3, 5, 160, 16), iv(3, 2, 4, 128, 16)]
    # by size: t2 at 0; t0 (steps 0-1, clear of t2) at 0; t3 on t2 at 160; t1 (live with
    # t0 [0,128) and t3 [160,288)) does not fit the 32-byte gap: on top, at 288 -> 352.
    assert planners.greedy_by_size(ivs, 16) == [0, 288, 0, 160]
    # the optimum puts t3 under t2's future place and t1 above t0: the bound, 288
    assert lower_bound(ivs, 16) == 288
    assert planners.exact(ivs, 16) == [0, 128, 128, 0]
    assert planners.best(ivs, 16) == [0, 128, 128, 0]


def test_zero_bytes_and_empty():
    for name, plan in planners.PLANNERS.items():
        assert plan([], 64) == [], name
    ivs = [iv(0, 0, 3, 0), iv(1, 1, 2, 64), iv(2, 2, 2, 0)]
    for name in GREEDY:
        offs = planners.PLANNERS[name](ivs, 64)
        assert offs[0] == offs[2] == 0 and intervals.find_overlap(ivs, offs) is None, name


def test_plan_memory_runs_every_planner_by_name():
    ivs = tuple(iv(t, f, l, n) for t, (f, l, n) in enumerate(PAPER))
    live = liveness.Liveness((), (), ivs)
    for name in planners.PLANNERS:
        m = plan_memory.run(live, name)
        assert m.planner == name and m.lower_bound_bytes <= m.arena_bytes <= m.naive_bytes
    # at 64-byte alignment every tensor takes 64 bytes; four live at step 4 and at step 5
    assert plan_memory.run(live, "best").arena_bytes == 256 == plan_memory.run(live).lower_bound_bytes


def test_exact_is_bounded():
    # 12 tensors all live together with awkward sizes: the search stops at its budget
    ivs = [iv(t, 0, 1 + t % 3, 64 * (t + 1) + 1) for t in range(12)]
    offs = planners.exact(ivs, 64)
    assert intervals.find_overlap(ivs, offs) is None
    assert arena(ivs, offs, 64) <= arena(ivs, planners.greedy_by_size(ivs, 64), 64)
    big = [iv(t, t, t + 2, 64) for t in range(planners.EXACT_MAX_INTERVALS + 1)]
    assert planners.exact(big, 64) == planners.greedy_by_size(big, 64)


# --- references -------------------------------------------------------------------------


def lowest_fit_arena(ivs, alignment, perm):
    """The arena of placing the tensors in the order `perm`, each at its lowest fit."""
    offsets, placed = [0] * len(ivs), []
    for i in perm:
        a = ivs[i]
        at = 0
        for lo, hi in sorted((offsets[j], formats.align_up(offsets[j] + ivs[j].nbytes, alignment))
                             for j in placed if a.first <= ivs[j].last and ivs[j].first <= a.last):
            if at + a.nbytes <= lo:
                break
            at = max(at, hi)
        offsets[i] = at
        placed.append(i)
    return arena(ivs, offsets, alignment)


# --- random intervals -------------------------------------------------------------------

ALIGNMENTS = st.sampled_from([1, 16, 64])


@st.composite
def interval_sets(draw, max_size=40, max_step=20):
    """Tensor ids unique but not in list order; zero-byte tensors, one huge one at times,
    some live over the whole range."""
    rows = draw(st.lists(st.tuples(st.integers(0, max_step), st.integers(0, 6),
                                   st.one_of(st.integers(1, 5000), st.just(0), st.integers(1, 64))),
                         min_size=1, max_size=max_size))
    ids = draw(st.permutations(range(len(rows))))
    ivs = [iv(t, f, f + d, n) for t, (f, d, n) in zip(ids, rows)]
    if draw(st.booleans()):
        k = draw(st.integers(0, len(ivs) - 1))
        ivs[k] = iv(ivs[k].tensor, ivs[k].first, ivs[k].last, 2**33 + 3)
    if draw(st.booleans()):
        end = max(a.last for a in ivs)
        ivs.append(iv(len(ivs), 0, end, draw(st.integers(1, 4096))))
    return ivs


@settings(max_examples=200, deadline=None)
@given(interval_sets(), ALIGNMENTS)
def test_every_planner_is_valid_and_between_the_bounds(ivs, alignment):
    bound = lower_bound(ivs, alignment)
    sizes = {}
    for name, plan in planners.PLANNERS.items():
        offs = plan(ivs, alignment)
        assert len(offs) == len(ivs), name
        assert all(o % alignment == 0 and o >= 0 for o in offs), name
        assert intervals.find_overlap(ivs, offs) is None, name
        sizes[name] = arena(ivs, offs, alignment)
        assert bound <= sizes[name] <= sizes.get("naive", sizes[name]), name
    assert all(sizes["best"] <= sizes[m] for m in planners.PORTFOLIO)
    assert sizes["exact"] <= sizes["greedy_by_size"]


@settings(max_examples=200, deadline=None)
@given(interval_sets(max_size=60), ALIGNMENTS)
def test_greedy_planners_match_tflite_transcriptions(ivs, alignment):
    assert planners.greedy_by_size(ivs, alignment) == ref_best_fit(ivs, alignment, ref_size_order(ivs))
    assert planners.greedy_by_breadth(ivs, alignment) == ref_best_fit(ivs, alignment,
                                                                     ref_breadth_order(ivs, alignment))


@settings(max_examples=50, deadline=None)
@given(interval_sets(max_size=60, max_step=6), ALIGNMENTS)
def test_engine_merge_paths_match(ivs, alignment):
    # the union of many lists: by sort, through numpy, list by list skipping what is
    # covered, with or without short lists merged first
    want = ref_best_fit(ivs, alignment, ref_size_order(ivs))
    old = byte_runs.NUMPY_EVENTS, byte_runs.SKIP_EVENTS, byte_runs.SKIP_BUDGET
    try:
        for config in ((0, 10**9, 0), (0, 0, 10**9), (0, 0, 3), (0, 0, 0)):
            byte_runs.NUMPY_EVENTS, byte_runs.SKIP_EVENTS, byte_runs.SKIP_BUDGET = config
            assert planners.greedy_by_size(ivs, alignment) == want, config
    finally:
        byte_runs.NUMPY_EVENTS, byte_runs.SKIP_EVENTS, byte_runs.SKIP_BUDGET = old


@settings(max_examples=100, deadline=None)
@given(interval_sets(max_size=6, max_step=4), ALIGNMENTS)
def test_exact_is_optimal_on_small_sets(ivs, alignment):
    live = [i for i, a in enumerate(ivs) if a.nbytes]
    best = min(lowest_fit_arena(ivs, alignment, p) for p in itertools.permutations(live))
    assert arena(ivs, planners.exact(ivs, alignment), alignment) == best


@settings(max_examples=100, deadline=None)
@given(interval_sets(), ALIGNMENTS, st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_list_order(ivs, alignment, rnd):
    shuffled = list(ivs)
    rnd.shuffle(shuffled)
    for name in GREEDY:
        plan = planners.PLANNERS[name]
        offs = plan(ivs, alignment)
        assert plan(list(ivs), alignment) == offs, name
        by_tensor = dict(zip((a.tensor for a in ivs), offs))
        assert dict(zip((a.tensor for a in shuffled), plan(shuffled, alignment))) == by_tensor, name


@settings(max_examples=50, deadline=None)
@given(interval_sets(max_size=60), ALIGNMENTS)
def test_steps_far_apart_plan_alike(ivs, alignment):
    # the leaves of the step ranges: by a table of the steps when they are few, else by
    # search; only the order of the steps matters
    far = [iv(a.tensor, a.first * 10**9 + 7, a.last * 10**9 + 7, a.nbytes) for a in ivs]
    for name in ("greedy_by_size", "greedy_by_breadth"):
        plan = planners.PLANNERS[name]
        assert plan(far, alignment) == plan(ivs, alignment), name

# Knobs that pick the engine's structures (only its speed depends on them): extreme
# values force every path (the gap index of a cut, joins, the hub, gathering caps, numpy).
# Each is set in the module that reads it at call time.
ENGINE_KNOBS = {
    layout_module: ("SHORT", "CUT_PUSHES", "CUT_COVER", "CUT_SHARE", "HUB_MIN", "HUB_FILTER", "JOIN_MIN", "JOIN_SHARE",
                    "START_ADDS"),
    best_fit: ("INDEXED_RUNS", "INDEXED_EXTRA"),
    byte_runs: ("NUMPY_EVENTS", "SKIP_EVENTS", "SKIP_BUDGET", "NUMPY_RANGES", "SWEEP_RUNS"),
}
ENGINE_CONFIGS = (
    {},
    # every query long; a cut at height 1, indexed whatever the other lists; joins everywhere; no gathering
    dict(SHORT=1, CUT_PUSHES=10**9, CUT_COVER=0, CUT_SHARE=1, INDEXED_RUNS=0, INDEXED_EXTRA=0, JOIN_MIN=1,
         JOIN_SHARE=10**9, START_ADDS=0),
    # a cut and the hub, queries of 2 leaves or more long
    dict(SHORT=2, CUT_PUSHES=10**9, CUT_COVER=0, CUT_SHARE=1, INDEXED_RUNS=1, INDEXED_EXTRA=0, HUB_MIN=0,
         HUB_FILTER=10**9),
    # every query short; joins; no hub; gathering as high as it goes; numpy and skipping merges
    dict(SHORT=10**9, JOIN_MIN=1, JOIN_SHARE=10**9, HUB_MIN=10**9, START_ADDS=10**9, NUMPY_EVENTS=0,
         SKIP_EVENTS=0, SKIP_BUDGET=2),
    # joins and the hub together, gathering capped low, ranges merged by numpy
    dict(SHORT=1, JOIN_MIN=1, JOIN_SHARE=10**9, HUB_MIN=0, HUB_FILTER=10**9, START_ADDS=1, SKIP_BUDGET=0,
         NUMPY_RANGES=4),
    # gathered ranges merged among themselves, then added one by one
    dict(SHORT=1, START_ADDS=10**9, SWEEP_RUNS=0),
    # joins whose merges give up at once, into numpy
    dict(SHORT=1, JOIN_MIN=1, JOIN_SHARE=10**9, SKIP_BUDGET=0, NUMPY_EVENTS=0, SKIP_EVENTS=0),
)


def engine_configs():
    old = {(module, k): getattr(module, k) for module, names in ENGINE_KNOBS.items() for k in names}
    try:
        for config in ENGINE_CONFIGS:
            assert set(config) <= {k for _, k in old}, config
            for (module, k), v in old.items():
                setattr(module, k, config.get(k, v))
            yield config
    finally:
        for (module, k), v in old.items():
            setattr(module, k, v)


def shaped_sets(rng):
    """Small sets shaped like the benchmark's (scripts/bench_planners.py): a chain with
    long inputs, branches that join, a stack; each tensor id once, table shuffled."""
    sizes = lambda: rng.choice([64, 128, 192, rng.randrange(1, 4096)])  # noqa: E731
    chain = [(s, s + rng.choice((1, 1, 2))) for s in range(60)] + [(0, rng.randrange(60)) for _ in range(6)]
    fan = []
    for block in range(3):
        s0 = block * 9
        fan += [(s0 + b, s0 + b + 1) for b in range(8)] + [(s0 + b + 1, s0 + 8) for b in range(8)]
    stack = [(s, s + 1) for s in range(5)] + [(5 + rng.randrange(10), 15) for _ in range(40)]
    for rows in (chain, fan, stack):
        ivs = [iv(t, f, l, sizes()) for t, (f, l) in enumerate(rows)]
        rng.shuffle(ivs)
        yield ivs


@settings(max_examples=150, deadline=None)
@given(interval_sets(max_size=60, max_step=12), ALIGNMENTS)
def test_every_engine_path_matches_tflite(ivs, alignment):
    want = ref_best_fit(ivs, alignment, ref_size_order(ivs))
    want_breadth = ref_best_fit(ivs, alignment, ref_breadth_order(ivs, alignment))
    for config in engine_configs():
        assert planners.greedy_by_size(ivs, alignment) == want, config
        assert planners.greedy_by_breadth(ivs, alignment) == want_breadth, config


def test_every_engine_path_matches_tflite_on_shaped_sets():
    rng = random.Random(2)
    for _ in range(10):
        for ivs in shaped_sets(rng):
            for alignment in (1, 64):
                want = ref_best_fit(ivs, alignment, ref_size_order(ivs))
                want_breadth = ref_best_fit(ivs, alignment, ref_breadth_order(ivs, alignment))
                for config in engine_configs():
                    assert planners.greedy_by_size(ivs, alignment) == want, config
                    assert planners.greedy_by_breadth(ivs, alignment) == want_breadth, config


def test_engine_configs_reach_every_path(monkeypatch):
    # each counted where its caller looks it up: best_fit imports the names it calls,
    # byte_runs calls its own
    calls = Counter()
    for module, name in ((best_fit, "best_gap_indexed"), (best_fit, "insert_indexed"), (byte_runs, "merge_skipping"),
                         (best_fit, "best_gap_many"), (byte_runs, "merge_ranges_np"), (best_fit, "add_ranges"),
                         (best_fit, "best_gap_union")):
        def counted(*args, _f=getattr(module, name), _name=name):
            calls[_name] += 1
            return _f(*args)
        monkeypatch.setattr(module, name, counted)
    layouts = Counter()
    rng = random.Random(5)
    for config in engine_configs():
        for ivs in shaped_sets(rng):
            layout = Layout(columns(ivs), 64)
            layouts.update(cut=layout.cut is not None, join=bool(layout.joins), hub=layout.hub > 0,
                           lead=any(r[0] == 4 for r in layout.records), fed=any(r[12] for r in layout.records))
            planners.greedy_by_size(ivs, 64)
    assert all(calls.values()) and len(calls) == 7, calls
    assert all(layouts[k] for k in ("cut", "join", "hub", "lead", "fed")), layouts


def test_lead_ins_of_joins_match_tflite():
    # blocks of 128 branches whose outputs all end at the block's concat (a join, at the
    # default knobs): the outputs read the join's union and its lead-in (a Fenwick tree of
    # the branch tensors by distance to the join); a few long tensors cross the joins, a
    # few outputs outlive their concat (over a join, not a lead-in query)
    rng = random.Random(6)
    rows, s = [], 0
    for block in range(3):
        outs = []
        for b in range(128):
            rows.append((s, s + 1))
            s += 1
            outs.append(s)
        rows += [(o, s + (rng.random() < 0.05)) for o in outs]
        s += 2
    rows += [(rng.randrange(s), s) for _ in range(4)] + [(0, rng.randrange(s)) for _ in range(4)]
    ivs = [iv(t, f, l, rng.choice([64, 128, rng.randrange(1, 1 << 16)])) for t, (f, l) in enumerate(rows)]
    rng.shuffle(ivs)
    layout = Layout(columns(ivs), 64)
    assert layout.joins and any(r[0] == 4 for r in layout.records) and any(r[12] for r in layout.records)
    for alignment in (1, 64):
        assert planners.greedy_by_size(ivs, alignment) == ref_best_fit(ivs, alignment, ref_size_order(ivs))
        assert planners.greedy_by_breadth(ivs, alignment) == ref_best_fit(ivs, alignment,
                                                                         ref_breadth_order(ivs, alignment))


def whole_portfolio(ivs, alignment):
    """`best` without its shortcuts: every member in full, the smallest arena, ties to
    the earlier (exact seeded with the choice so far)."""
    choice, choice_size = None, None
    for name in planners.PORTFOLIO:
        if name == "exact":
            if branch_and_bound.n_live(ivs) > planners.EXACT_MAX_INTERVALS:
                continue
            offsets = branch_and_bound.exact_search(ivs, alignment, choice)
        else:
            offsets = planners.PLANNERS[name](ivs, alignment)
        n = arena(ivs, offsets, alignment)
        if choice is None or n < choice_size:
            choice, choice_size = offsets, n
    return choice


@settings(max_examples=150, deadline=None)
@given(interval_sets(), ALIGNMENTS)
def test_best_returns_what_the_whole_portfolio_does(ivs, alignment):
    # best stops at the lower bound, abandons greedy_by_breadth once its arena reaches the
    # choice's, and skips naive when its arena (the sum of the aligned sizes) cannot win
    assert planners.best(ivs, alignment) == whole_portfolio(ivs, alignment)


def test_best_shortcuts_on_shaped_sets():
    rng = random.Random(3)
    seen = set()
    for _ in range(20):
        for ivs in shaped_sets(rng):
            for alignment in (1, 64):
                sizes = {name: arena(ivs, planners.PLANNERS[name](ivs, alignment), alignment)
                         for name in ("greedy_by_size", "greedy_by_breadth")}
                if sizes["greedy_by_size"] == lower_bound(ivs, alignment):
                    seen.add("bound")
                elif sizes["greedy_by_breadth"] >= sizes["greedy_by_size"]:
                    seen.add("abandoned")
                else:
                    seen.add("breadth wins")
                assert planners.best(ivs, alignment) == whole_portfolio(ivs, alignment)
    assert seen == {"bound", "abandoned", "breadth wins"}


@settings(max_examples=100, deadline=None)
@given(interval_sets(), ALIGNMENTS)
def test_layout_lower_bound_is_peak_live_bytes(ivs, alignment):
    layout = Layout(columns(ivs), alignment)
    assert layout.lower_bound == lower_bound(ivs, alignment)
    assert layout.n_live == branch_and_bound.n_live(ivs)


@settings(max_examples=100, deadline=None)
@given(interval_sets(), ALIGNMENTS)
def test_place_gives_up_at_the_limit(ivs, alignment):
    cols = columns(ivs)
    layout, order = Layout(cols, alignment), greedy.size_order(cols)
    offsets = best_fit.place(layout, order)
    live_end = formats.align_up(max((o + a.nbytes for a, o in zip(ivs, offsets) if a.nbytes and a.first <= a.last),
                                    default=0), alignment)
    for limit in {max(1, live_end - 1), max(1, live_end), live_end + 1, live_end + alignment}:
        got = best_fit.place(layout, order, limit)
        assert got == (None if live_end >= limit else offsets), limit


def test_indexed_runs_match_plain_runs():
    # insert_indexed keeps runs and their index of gaps in step (overlaps included:
    # it falls back to a union and a new index); best_gap_indexed finds the best gap
    # of runs plus other lists whose runs fall in the gaps, as best_gap of the union
    rng = random.Random(4)
    shift = 20
    for _ in range(300):
        runs, index, plain = [], [], []
        for _ in range(rng.randrange(1, 30)):
            a = rng.randrange(0, 2000)
            b = a + rng.randrange(1, 60)
            gap_index.insert_indexed(runs, index, shift, a, b)
            byte_runs.union_into(plain, a, b)
            assert runs == plain and index == gap_index.index_gaps(plain, shift)
        # other lists: ranges inside the gaps of `runs` (touching them at most) or above
        gaps, prev = [], 0
        for k in range(0, len(runs), 2):
            gaps.append((prev, runs[k] >> 1))
            prev = runs[k + 1] >> 1
        gaps.append((prev, prev + 500))
        lists = []
        for _ in range(rng.randrange(0, 4)):
            extra = []
            for g0, g1 in rng.sample(gaps, min(len(gaps), 3)):
                if g1 > g0:
                    a = rng.randrange(g0, g1)
                    byte_runs.union_into(extra, a, rng.randrange(a + 1, g1 + 1))
            lists.append(extra)
        union = list(runs)
        for extra in lists:
            for k in range(0, len(extra), 2):
                byte_runs.union_into(union, extra[k] >> 1, extra[k + 1] >> 1)
        for size in (1, 5, 20, 80, 400):
            assert gap_index.best_gap_indexed(runs, index, shift, lists, size) == byte_runs.best_gap(union, size)


def test_best_gap_of_a_union_of_lists():
    # best_gap_union (starts and ends sorted apart) gives the best gap of the union of
    # lists that overlap, touch, repeat runs or are empty: as a byte-by-byte scan does
    rng = random.Random(5)
    for _ in range(2000):
        lists, used = [], set()
        for _ in range(rng.randrange(0, 6)):
            runs = []
            for _ in range(rng.randrange(0, 6)):
                a = rng.randrange(0, 120)
                b = a + rng.randrange(1, 25)
                byte_runs.union_into(runs, a, b)
                used.update(range(a, b))
            lists.append(runs)
        if lists and rng.random() < 0.2:
            lists.append(list(rng.choice(lists)))  # the same runs twice
        top = max(used, default=-1) + 1
        for size in (1, 2, 3, 7, 20, 200):
            want, best_len, start = None, None, 0
            for byte in range(top + 1):  # free runs below the top, the lowest smallest that holds size
                if byte in used or byte == top:
                    if byte - start >= size and (want is None or byte - start < best_len):
                        want, best_len = start, byte - start
                    start = byte + 1
            assert byte_runs.best_gap_union(lists, size) == (top if want is None else want)


def test_thousands_of_tensors_live_at_once():
    # all live at one step, or nested, or all whole-run: one packed stack, at the bound
    rng = random.Random(0)
    sizes = [rng.randrange(1, 1 << 20) for _ in range(3000)]
    for ivs in ([iv(t, 0, 0, n) for t, n in enumerate(sizes)],
                [iv(t, t % 7, 10, n) for t, n in enumerate(sizes)],
                [iv(t, 0, 5, n) for t, n in enumerate(sizes)] + [iv(3000, 1, 2, 64)],
                # all live at the end but one early tensor: the tree holds them in pieces
                [iv(t, 1 + t % 50, 60, n) for t, n in enumerate(sizes)] + [iv(3000, 0, 0, 1 << 21)]):
        for name in ("greedy_by_size", "greedy_by_breadth", "best"):
            offs = planners.PLANNERS[name](ivs, 64)
            assert intervals.find_overlap(ivs, offs) is None
            assert arena(ivs, offs, 64) == lower_bound(ivs, 64), name


def test_20k_tensors_live_at_once_after_a_chain():
    # no timing assert: planning this pattern quadratically would take minutes, not a second
    rng = random.Random(1)
    ivs = [iv(t, t, t + 1, rng.randrange(1, 1 << 20)) for t in range(200)]
    ivs += [iv(200 + t, 200 + rng.randrange(1000), 1200, rng.randrange(1, 1 << 20)) for t in range(20000)]
    offs = planners.greedy_by_size(ivs, 64)
    assert intervals.find_overlap(ivs, offs) is None
    assert arena(ivs, offs, 64) == lower_bound(ivs, 64)


def test_unknown_planner_is_refused():
    from aotplan.core.errors import ModelError

    with pytest.raises(ModelError, match="best"):
        plan_memory.run(liveness.Liveness((), (), ()), "nope")
