"""Checks of decoded msgpack values: each wrong type, length or field set is one
PlanError naming the field (a plan is untrusted data)."""

import os

from aotplan.core.errors import PlanError


def type_name(kind):
    return kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)


def check(value, kind, field):
    if isinstance(value, bool) and kind in (int, (int,)):
        raise PlanError(f"plan field {field}: expected int, got bool")
    if not isinstance(value, kind):
        raise PlanError(f"plan field {field}: expected {type_name(kind)}, got {type(value).__name__}")
    return value


def get(m, key, kind, where="plan"):
    if key not in m:
        raise PlanError(f"plan field {where}.{key} is missing")
    return check(m[key], kind, f"{where}.{key}")


def ints(value, field):
    check(value, list, field)
    for i, v in enumerate(value):
        check(v, int, f"{field}[{i}]")
    return tuple(value)


def strs(value, field):
    for i, v in enumerate(value):
        check(v, str, f"{field}[{i}]")
    return tuple(value)


def exact_fields(m, fields, where):
    """`m` (a map) has exactly `fields`."""
    for k in m:
        if k not in fields:
            raise PlanError(f"plan field {where}: unknown field {str(k)[:64]!r}")
    for k in fields:
        if k not in m:
            raise PlanError(f"plan field {where}.{k} is missing")


def row(value, n, field):
    check(value, list, field)
    if len(value) != n:
        raise PlanError(f"plan field {field}: expected {n} entries, got {len(value)}")
    return value


def check_path(path, what):
    """`open` takes an int as a file descriptor (reads it, then closes it under its
    owner): a path here must be a str or os.PathLike."""
    if not isinstance(path, (str, os.PathLike)):
        raise PlanError(f"{what}: expected a path (str or os.PathLike), got {type(path).__name__}")
