"""The graph IR: frozen records that every compiler pass reads and returns.

A `Graph` is valid once `compiler.passes.validate` has accepted it: names are unique,
every input of every node is produced exactly once (by a graph input, a constant or
another node), there is no cycle, and every op is known. Passes never mutate a graph;
they build a new one with `dataclasses.replace`.
"""

import unicodedata
from dataclasses import dataclass, field

import numpy as np


def has_control_char(name):
    """Names go into files (.npz members, dumps) and one-line messages: a NUL, newline
    or other control character in one breaks them (model.json and validate refuse it)."""
    return any(unicodedata.category(c) == "Cc" for c in name)


def freeze(value):
    """JSON-ish attribute value -> hashable, deterministic value (lists -> tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


def thaw(value):
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor's logical dtype and shape (shape: tuple of ints >= 0)."""

    name: str
    dtype: str
    shape: tuple


@dataclass(frozen=True)
class Constant:
    """A weight or inline constant. `data` has the logical dtype and `shape`."""

    name: str
    dtype: str
    shape: tuple
    data: np.ndarray = field(compare=False, repr=False)

    @property
    def info(self):
        return TensorInfo(self.name, self.dtype, self.shape)


@dataclass(frozen=True)
class Node:
    """One op application. `attrs` is a sorted tuple of (name, frozen value)."""

    name: str
    op: str
    inputs: tuple
    outputs: tuple
    attrs: tuple = ()

    def attr(self, key, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def attr_dict(self):
        return dict(self.attrs)


@dataclass(frozen=True)
class State:
    """A tensor that persists on the device across steps: graph input `input` holds its
    value before a step, graph output `output` (a "ref output") its value after, written
    in place over the same bytes. A state's input is never fed and its output never
    returned; `init` (logical dtype, the input's shape) is its value before the first
    step, None for zeros."""

    input: str
    output: str
    init: np.ndarray = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Graph:
    """A model: inputs (with shapes), output names, nodes, constants, and the states
    (`State`) that pair an input with an output. A state's output is in `outputs` too,
    so every pass keeps what computes it; `returned` lists the outputs a step returns."""

    name: str
    inputs: tuple  # of TensorInfo
    outputs: tuple  # of str
    nodes: tuple  # of Node
    constants: tuple  # of Constant
    states: tuple = ()  # of State

    @property
    def returned(self):
        """The outputs a step returns: `outputs` but the states'."""
        updates = {s.output for s in self.states}
        return tuple(o for o in self.outputs if o not in updates)

    def constant_map(self):
        return {c.name: c for c in self.constants}

    def inputs_feeding(self, names):
        """The graph inputs that the values `names` are computed from, sorted."""
        made_by = {o: n for n in self.nodes for o in n.outputs}
        inputs = {t.name for t in self.inputs}
        want, seen, found = list(names), set(), set()
        while want:
            v = want.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in inputs:
                found.add(v)
            elif v in made_by:
                want.extend(i for i in made_by[v].inputs if i)
        return sorted(found)
