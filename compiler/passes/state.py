"""state: the checks and the layout of a model's states (`Graph.states`).

A state's input (its value before a step) and output (after) share bytes of the state
buffer, which persists across steps beside the arena. The output is written in place,
so every node that reads the input must run before the output is written or in the
same launch (a kernel reads its inputs before it writes); a launch order where a later
launch reads the input would read the new value. The planner keeps only launch orders
that respect this (`conflict`); where the model itself makes it impossible (the
output's producer feeds a node that reads the input) the compile stops naming both.
"""

from aotplan.core import formats
from aotplan.core.errors import ModelError


def check_types(graph, info):
    """A state's input and output have one dtype and shape (the cleaned-up graph's
    `info`), or ModelError naming both."""
    for st in graph.states:
        a, b = info[st.input], info[st.output]
        if (a.dtype, tuple(a.shape)) != (b.dtype, tuple(b.shape)):
            raise ModelError(f"state {st.output}={st.input}: output {st.output!r} is {b.dtype}{list(b.shape)}, input "
                             f"{st.input!r} is {a.dtype}{list(a.shape)}: a state's output must have its input's dtype "
                             f"and shape")


def conflict(graph, groups):
    """-> None where every reader of each state's input runs in or before the launch
    that writes its output, else a message naming the state and both nodes."""
    launch_of = {n.name: s for s, g in enumerate(groups) for n in g}
    made_by = {o: n for g in groups for n in g for o in n.outputs}
    for st in graph.states:
        writer = made_by.get(st.output)
        if writer is None:
            continue
        for g in groups:
            for n in g:
                if st.input in n.inputs and launch_of[n.name] > launch_of[writer.name]:
                    return (f"state {st.output}={st.input}: node {n.name!r} reads {st.input!r} (the value before "
                            f"the step) after node {writer.name!r} has written {st.output!r} over the same bytes")
    return None


def check_order(graph, groups):
    msg = conflict(graph, groups)
    if msg:
        raise ModelError(f"{msg}: no launch order reads the old value first (the new value is written in place)")


def place(graph, records, alignment=formats.ALIGNMENT):
    """-> ({record index: byte offset in the state buffer}, state_bytes): each state at
    its own aligned bytes in the order the model declares them; its output at its
    input's offset."""
    index = {t.name: i for i, t in enumerate(records)}
    offsets, end = {}, 0
    for st in graph.states:
        i, o = index[st.input], index[st.output]
        at = formats.align_up(end, alignment)
        offsets[i] = offsets[o] = at
        end = at + records[i].nbytes
    return offsets, formats.align_up(end, formats.WORD_BYTES)
