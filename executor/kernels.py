"""Kernel loading: exported StableHLO -> an XLA executable for this host.

`jax.export.deserialize` reads the plan's bytes (no pickle); the program is then
compiled ahead of the first step, with the arena argument donated where the kernel
writes it, so every call updates the arena in place. Every kernel is lowered for the
session's device (`device_avals`): a program lowered for bare avals is compiled for
the process's first device, whatever device the session runs on.
"""

import jax
import numpy as np

from aotplan import dtypes, xla_options
from aotplan.errors import PlanError


def load_kernel(k):
    try:
        exp = jax.export.deserialize(bytearray(k.exported))
    except Exception as e:  # a corrupt blob can fail in many layers of flatbuffers/MLIR
        raise PlanError(f"kernel {k.name!r}: its exported program is not a readable jax.export serialization "
                        f"(the plan is corrupt or was not written by aotplan; {type(e).__name__}: {e})") from None
    return exp


def check_signature(name, exp, takes, returns):
    """`takes`/`returns`: lists of (shape, storage dtype name) the plan implies."""
    try:
        sig = [[(tuple(a.shape), np.dtype(a.dtype)) for a in avals] for avals in (exp.in_avals, exp.out_avals)]
    except Exception as e:
        raise PlanError(f"kernel {name!r}: unreadable signature ({e})") from None
    for got, want, verb in zip(sig, (takes, returns), ("takes", "returns")):
        expect = [(tuple(s), np.dtype(d) if d in ("uint32", "int32") else dtypes.np_dtype(d)) for s, d in want]
        if got != expect:
            raise PlanError(f"kernel {name!r}: {verb} {_fmt(got)}, the plan's tensors say {_fmt(expect)}")


def _fmt(sig):
    return "(" + ", ".join(f"{d}{list(s)}" for s, d in sig) + ")"


def kernel_function(exp, donate):
    """The exported program as a jitted function, the arena argument donated if `donate`."""
    return jax.jit(exp.call, donate_argnums=0) if donate else jax.jit(exp.call)


def device_avals(exp, device):
    """The exported program's argument types, each placed on `device` (a committed
    single-device sharding), so the kernel is lowered and compiled for that device."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in exp.in_avals]


def lower_kernel(name, exp, donate, platform, device=None):
    """-> the kernel lowered for `device` (default: the first device), ready for XLA
    (`compile_lowered`; Python work, done one at a time)."""
    if platform not in exp.platforms:
        raise PlanError(f"kernel {name!r} was exported for {', '.join(exp.platforms)}; this host runs {platform}: "
                        f"recompile the model for this platform")
    fn = kernel_function(exp, donate)
    avals = exp.in_avals if device is None else device_avals(exp, device)
    try:
        return fn.lower(*avals)
    except Exception as e:
        raise PlanError(f"kernel {name!r}: XLA could not compile it on this host: {e}") from None


def compile_lowered(name, lowered, platform):
    """XLA's compile of a lowered kernel (it releases the GIL: several may run at once)."""
    try:
        return xla_options.compile(lowered, platform)
    except Exception as e:
        raise PlanError(f"kernel {name!r}: XLA could not compile it on this host: {e}") from None
