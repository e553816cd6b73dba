"""The arena a plan needs, and the plan that reuses nothing (`naive`: the baseline that
the other planners never exceed)."""

from aotplan.core import formats


def arena_size(ivs, offsets, alignment):
    end = max((o + iv.nbytes for iv, o in zip(ivs, offsets)), default=0)
    return formats.align_up(end, alignment)


def naive(ivs, alignment):
    """Every tensor its own bytes, in table order."""
    offsets, end = [], 0
    for iv in ivs:
        end = formats.align_up(end, alignment)
        offsets.append(end)
        end += iv.nbytes
    return offsets


def naive_arena(cols, alignment):
    """`naive`'s arena without placing: the sum of the aligned sizes."""
    size = cols[2]
    return int((-(-size // alignment) * alignment).sum())
