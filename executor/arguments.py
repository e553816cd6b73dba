"""Checks of what a caller passes to `executor.load` and `Session`: each wrong argument
is one PlanError naming it, raised before any file is read or device touched: an
ArgumentTypeError (a TypeError) or an ArgumentValueError (a ValueError)."""

import inspect
import os

import jax
import numpy as np

from aotplan.core import codec
from aotplan.core.errors import ArgumentTypeError, ArgumentValueError


def short(value):
    """`repr(value)`, cut to 60 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_path(path):
    """`load`'s `path` when it is not a plan's bytes: a str or os.PathLike, or PlanError
    saying what was passed (an int would be opened as a file descriptor: read, then
    closed under its owner)."""
    if isinstance(path, (str, os.PathLike)):
        return path
    raise ArgumentTypeError(f"executor.load takes the path of a plan file (str or os.PathLike) or a plan's bytes, got "
                    f"{type(path).__name__} {short(path)}")


def check_flag(who, flag, value):
    """A bool argument (numpy's bool too)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{who}: {flag} must be True or False, got {type(value).__name__} {short(value)}")


def check_jobs(who, jobs):
    """None or a positive int -> None or int."""
    if jobs is None:
        return None
    if not isinstance(jobs, (int, np.integer)) or isinstance(jobs, (bool, np.bool_)) or jobs < 1:
        raise (ArgumentValueError if isinstance(jobs, (int, np.integer)) and not isinstance(jobs, (bool, np.bool_))
               else ArgumentTypeError)(f"{who}: jobs must be None or a positive int, got {type(jobs).__name__} {short(jobs)}")
    return int(jobs)


def trust_key(key):
    """`trust_key`: None (AOTPLAN_TRUST_KEY's file, if set), a key file's path (str or
    os.PathLike, read like --trust-key), or the key's bytes -> bytes or None."""
    if key is None:
        return codec.env_key()
    if isinstance(key, (str, os.PathLike)):
        return codec.read_key(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return codec.check_key(key, "trust_key")
    raise ArgumentTypeError(f"trust_key: expected the key's bytes or a key file's path, got {type(key).__name__}")


def check_progress(progress, who):
    """None or a function of one str (it is called with each loading stage's name)."""
    if progress is None:
        return
    ok = callable(progress)
    if ok:
        try:
            inspect.signature(progress).bind("text")
        except TypeError:
            ok = False
        except ValueError:  # (no signature to read: a builtin)
            pass
    if not ok:
        raise ArgumentTypeError(f"{who}: progress must be None or a function of one str, got {type(progress).__name__} "
                        f"{short(progress)}")


def resolve_device(device):
    """`device` as Session and load take it -> a jax Device: None (the first device), a
    jax Device, or a platform name ("cpu", "gpu", "cuda", "rocm", "tpu": its first
    device; "cpu:1": its device 1 in `jax.devices("cpu")` order). Anything else, or a
    platform this host lacks, is a PlanError. (An object with a str `platform` is
    taken as a device, as jax's own device types are: tests stand in for devices.)"""
    if device is None:
        return jax.devices()[0]
    if isinstance(device, jax.Device) or isinstance(getattr(device, "platform", None), str):
        return device
    if not isinstance(device, str):
        raise ArgumentTypeError(f"device: expected a jax Device or a platform name such as 'cpu' or 'gpu', got "
                        f"{type(device).__name__} {short(device)}")
    name, _, index = device.strip().lower().partition(":")
    try:
        found = jax.devices(name)
    except Exception:  # jax: RuntimeError for a platform it does not know or cannot start
        found = []
    if not found:
        have = sorted({d.platform for d in jax.devices()})
        raise ArgumentValueError(f"device {device!r}: no such platform on this host (it has: {', '.join(have)})")
    if not index:
        return found[0]
    if not index.isdigit() or int(index) >= len(found):
        raise ArgumentValueError(f"device {device!r}: this host has {len(found)} {name} device(s), numbered 0-{len(found) - 1}")
    return found[int(index)]
