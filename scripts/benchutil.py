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
