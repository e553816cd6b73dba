"""What one served model runs: a plan's methods seen as batch profiles, and a step of
several requests' rows on the smallest profile that holds them.

A plan whose methods take the same inputs and give the same outputs, differing only in
their first axis (`compile --profile b1:x=1,... --profile b8:x=8,...`), is one served
model taking 1 to the largest profile's rows: each step runs on the smallest profile
that holds its rows, padded with zero rows. A plan of one method is a profile of its
own. Rows are taken to be independent (as Triton's dynamic batcher takes them): a model
that mixes its batch's rows must be served without --max-batch, at its own batch.
"""

from dataclasses import dataclass

import numpy as np

from aotplan.serving.tensors import TensorSpec


@dataclass(frozen=True)
class Profile:
    rows: int  # the batch (first axis) of every input and output
    method: str  # the plan's method that runs it
    session: object


class ModelSteps:
    """The steps of one served model: `inputs` / `outputs` as the protocol shows them,
    `max_rows` per step, and `run(requests)` for a list of {input: array} requests,
    run as one step -> a list of {output: array}, one per request, its own rows."""

    def __init__(self, profiles, variable_rows):
        self.profiles = sorted(profiles, key=lambda p: p.rows)
        first = self.profiles[0].session
        self.variable_rows = variable_rows
        self.max_rows = self.profiles[-1].rows
        lead = (-1,) if variable_rows else None
        self.inputs = [TensorSpec(n, d, lead + tuple(s[1:]) if lead else tuple(s)) for n, d, s in first.input_specs]
        self.outputs = [TensorSpec(n, d, lead + tuple(s[1:]) if lead else tuple(s)) for n, d, s in first.output_specs]
        self.steps = 0  # (counted for the server's metrics and the batching test)

    def rows(self, feeds):
        """The rows of one request (1 at a plan's own shapes)."""
        return len(next(iter(feeds.values()))) if self.variable_rows and feeds else 1

    def profile_for(self, rows):
        return next(p for p in self.profiles if p.rows >= rows)

    def run(self, requests):
        if not self.variable_rows:  # (one request, at the plan's own shapes)
            (feeds,) = requests
            self.steps += 1
            return [self.profiles[0].session.run(feeds)]
        counts = [self.rows(r) for r in requests]
        total = sum(counts)
        profile = self.profile_for(total)
        feeds = {}
        for spec in self.inputs:
            parts = [r[spec.name] for r in requests]
            pad = profile.rows - total
            if pad:
                parts.append(np.zeros((pad,) + parts[0].shape[1:], parts[0].dtype))
            feeds[spec.name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self.steps += 1
        outs = profile.session.run(feeds)
        bounds = np.cumsum([0] + counts)
        return [{k: v[bounds[i]:bounds[i + 1]] for k, v in outs.items()} for i in range(len(requests))]


def batch_profiles(session):
    """-> [Profile] when every method of the session's plan is a batch profile of one
    signature (same names, dtypes and dims past the first; every input and output of
    rank >= 1 with one batch), else None."""
    methods = session.methods
    found = []
    sig = None
    for name, ms in methods.items():
        specs = list(ms.input_specs) + list(ms.output_specs)
        if not specs or any(len(s) == 0 for _, _, s in specs):
            return None
        rows = {s[0] for _, _, s in specs}
        if len(rows) != 1:
            return None
        this = [(n, d, tuple(s[1:])) for n, d, s in specs]
        if sig is not None and this != sig:
            return None
        sig = this
        found.append(Profile(rows.pop(), name, ms))
    if len({p.rows for p in found}) != len(found):
        return None
    return found
