"""Shared by the benchmark scripts."""

import time


def timed(fn, steps):
    """Wall-clock seconds of each of `steps` calls of fn()."""
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def interleaved(fns, steps, rounds):
    """{name: fn} -> {name: wall-clock seconds of each call}: `rounds` rounds, each
    calling every fn `steps` times in turn, so that a noisy machine's slow spells fall
    on every peer alike (after one warm-up call each)."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name] += timed(fn, steps)
    return times


_NOT_RUN = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}


def entry_ops(hlo_text):
    """{op: count} of what a compiled XLA program's entry computation runs (its
    parameters, constants, tuples and bitcasts aside): on a GPU, about one kernel
    launch each (a fusion, a convolution or dot library call, a copy, an in-place
    dynamic-update-slice)."""
    import re

    counts, inside = {}, False
    for line in hlo_text.splitlines():
        if line.startswith("ENTRY "):
            inside = True
        elif inside and line.startswith("}"):
            break
        elif inside:
            m = re.search(r"= [^ ]+ ([a-z][a-z0-9-]*)\(", line)
            if m and m.group(1) not in _NOT_RUN:
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def fmt_ops(counts):
    """entry_ops' counts -> "N (fusion 5, convolution 3, ...)"."""
    return f"{sum(counts.values())} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"
