"""The compile's search beyond one plan: fused groups split where that lowers the
step's device memory. It calls the planner and the lowering it is given, on one
`pipeline.Front` (nothing is prepared or laid out again)."""

from aotplan.core import debug, formats
from compiler.passes import group, lower

MAX_SPLITS = 4  # fused groups split for memory, at most


def step_bytes(p, lowered):
    """Arena + max workspace: the step's device memory beyond the constant pool."""
    return p.mem.arena_bytes + max((k.workspace_bytes for k in lowered.kernels), default=0)


def split_widest(p, lowered, plan_with_cuts, lowered_for):
    """Fused mode: split the group whose kernel has the plan's largest workspace (XLA's
    temps) at its narrowest point between two contractions, plan and lower again, and
    keep the split if arena + max workspace (the step's device memory beyond the
    constant pool) drops; repeat up to MAX_SPLITS times, while the max workspace is
    at least lower.MIN_REFINED_WORKSPACE. A group that chains several
    large convolutions (a UNet decoder stage: conv, upsampling, projection, concat with
    the skip, conv) holds their inputs and results as temps at once; split, the tensor
    at the cut goes to the arena, where the planner shares its bytes, and each part's
    convolutions can be banded (passes/lower.py).
    `plan_with_cuts(cuts)` -> Planned with fused groups starting at the nodes named in
    `cuts`; `lowered_for(p, only=, band_floor=)` lowers a Planned (`only`: those
    launches' workspaces alone)."""
    cuts = frozenset()
    for _ in range(MAX_SPLITS):
        ws = [lowered.kernels[k].workspace_bytes for k, _, _ in lowered.launches]
        top = ws.index(max(ws, default=0)) if ws else 0  # the first launch at the max
        if not ws or ws[top] < lower.MIN_REFINED_WORKSPACE:
            break
        order = [n for g in p.groups for n in g]
        sizes = {t: formats.nbytes(i.shape, i.dtype, p.layout.formats.get(t, "default")) for t, i in p.info.items()}
        at = group.split_point(order, p.groups[top], sizes)
        if at is None:
            break
        q = plan_with_cuts(cuts | {at})
        # first a cheap look: lower only the two parts; the other groups' computations
        # are unchanged (their offsets move, their temps do not)
        second = next(s for s, g in enumerate(q.groups) if g[0].name == at)
        parts = {second - 1, second}
        rest = max(ws[:top] + ws[top + 1:], default=0)
        guess = q.mem.arena_bytes + max([rest, *lowered_for(q, only=parts, band_floor=0).values()])
        now = step_bytes(p, lowered)
        debug.log(1, f"split before {at!r}: step bytes {now} -> about {guess}")
        if guess >= now:
            break
        lq = lowered_for(q, band_floor=0)  # (this compile refines: see the check above)
        debug.log(1, f"split before {at!r}: step bytes {now} -> {step_bytes(q, lq)}")
        if step_bytes(q, lq) >= now:
            break
        p, lowered, cuts = q, lq, cuts | {at}
    return p, lowered
