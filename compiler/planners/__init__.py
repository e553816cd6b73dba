"""Memory planners: intervals -> byte offsets. They see intervals, never the graph.

`plan(intervals, alignment) -> offsets` (one per interval, same order, each a multiple
of `alignment`). Registered by name in `PLANNERS`:

  naive              no reuse: every tensor its own bytes, in table order (the baseline)
  greedy_by_size     TFLite's greedy by size (Pisarchyk & Lee, arXiv 2001.03288)
  greedy_by_breadth  TFLite's greedy by breadth (same paper)
  exact              branch and bound when at most EXACT_MAX_INTERVALS tensors have
                     bytes (at most EXACT_NODE_BUDGET search nodes), else greedy_by_size
  best               every member of PORTFOLIO; the smallest arena, ties to the earlier
                     (a member that can no longer win is cut short)

Two tensors conflict when their closed step ranges intersect and both have bytes;
zero-byte tensors conflict with nothing and go to offset 0 (except under `naive`).
Every planner but `naive` depends on the tensor ids, not the list order: permuting the
input permutes the output alike (ties end with the tensor id). The greedy planners and
`exact` never exceed `naive`'s arena: a tensor goes into a gap or onto the conflicting
tensors below it, never above the sum of the aligned sizes placed so far.

The planners, and what they are built from, one module each:

  arena             the arena of a plan, and `naive`
  greedy            greedy_by_size and greedy_by_breadth: TFLite's orders of placement
  branch_and_bound  `exact`
  best_fit          the engine of the greedy planners: `place`, tensors in a given order,
                    each into the best-fitting gap among the tensors it conflicts with
  layout            what the engine needs that does not depend on the order (`Layout`)
  segment_tree      time as the leaves of a segment tree
  gap_index         runs of bytes with an index of their gaps by size
  byte_runs         runs of bytes: unions, merges, the best gap of a union of lists
"""

from operator import add

import numpy as np

from aotplan.core import formats
from compiler.planners.arena import arena_size, naive, naive_arena
from compiler.planners.best_fit import no_gc, place
from compiler.planners.branch_and_bound import EXACT_MAX_INTERVALS, EXACT_NODE_BUDGET, exact, exact_search
from compiler.planners.greedy import breadth_order, greedy_by_breadth, greedy_by_size, size_order
from compiler.planners.layout import Layout, columns, permute, unpermute

__all__ = ["PLANNERS", "PORTFOLIO", "EXACT_MAX_INTERVALS", "EXACT_NODE_BUDGET", "register", "arena_size", "naive",
           "greedy_by_size", "greedy_by_breadth", "exact", "best"]

PLANNERS = {}


def register(name):
    def deco(fn):
        PLANNERS[name] = fn
        return fn
    return deco


register("naive")(naive)
register("greedy_by_size")(greedy_by_size)
register("greedy_by_breadth")(greedy_by_breadth)
register("exact")(exact)

PORTFOLIO = ("greedy_by_size", "greedy_by_breadth", "exact", "naive")


@register("best")
def best(ivs, alignment):
    """Every member of PORTFOLIO; the smallest arena, ties to the earlier member.
    (`exact` is seeded with the best greedy answer rather than recomputing it.)

    The members share one `Layout`, and a member is cut short where it cannot win,
    which leaves the answer as it is: once the choice so far has the lower bound (peak
    live bytes, aligned) no member can do better, and a later member is abandoned as
    soon as its arena reaches the choice's (a tie goes to the earlier member anyway);
    `naive` runs only if its arena, the sum of the aligned sizes, is smaller."""
    with no_gc():
        return _best(ivs, alignment)


def _best(ivs, alignment):
    cols = columns(ivs)
    order = size_order(cols)  # the layout lists the tensors in this order (see permute)
    layout = Layout(permute(cols, order), alignment)
    nbytes = cols[2].tolist()
    choice, choice_size = None, None
    for name in PORTFOLIO:
        if choice is not None and choice_size <= layout.lower_bound:
            break
        if name == "greedy_by_size":
            offsets = unpermute(place(layout, range(len(order)), choice_size), order)
        elif name == "greedy_by_breadth":
            rank = np.empty(len(order), np.int64)  # position -> position in the layout
            rank[order] = np.arange(len(order))
            offsets = place(layout, rank[breadth_order(cols, alignment)].tolist(), choice_size)
            offsets = unpermute(offsets, order)
        elif name == "exact":
            if layout.n_live > EXACT_MAX_INTERVALS:
                continue  # exact is greedy_by_size here
            offsets = exact_search(ivs, alignment, choice)
        elif name == "naive":
            if choice is not None and naive_arena(cols, alignment) >= choice_size:
                continue
            offsets = naive(ivs, alignment)
        else:
            offsets = PLANNERS[name](ivs, alignment)
        if offsets is None:
            continue  # abandoned: its arena reached the choice's
        n = formats.align_up(max(map(add, offsets, nbytes), default=0), alignment)  # arena_size
        if choice is None or n < choice_size:
            choice, choice_size = offsets, n
    return choice
