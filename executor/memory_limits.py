"""How much memory a plan may take here, checked twice before its first step: what the
plan states (before anything is allocated or compiled), and what its compiled kernels
really need (XLA's own figures, before the arena is allocated). Both against the
device's free memory (a GPU's `memory_stats`; on a CPU, the host's available memory
as psutil reads it, less a margin) and the caller's cap (`max_memory`), so that a plan
that states 8 GiB, or whose kernels want more than it states, is one clear error and
not an exhausted host."""

from aotplan.core.errors import ArgumentTypeError, ArgumentValueError, LimitError
from aotplan.core.kernels import COMPILED, COMPILED_VIA_CALL

HOST_SHARE = 0.9  # of the host's available memory a plan may take on a CPU (the process needs some too)


def check_max_memory(who, max_memory):
    """`max_memory` as callers pass it: None or a positive int (bytes)."""
    if max_memory is not None and (isinstance(max_memory, bool) or not isinstance(max_memory, int)
                                   or max_memory <= 0):
        raise (ArgumentValueError if isinstance(max_memory, int) and not isinstance(max_memory, bool)
               else ArgumentTypeError)(f"{who}: max_memory must be a positive number of bytes or None, got {max_memory!r}")
    return max_memory


def limit(device, max_memory=None):
    """-> (bytes a plan may take on `device`, what that figure is), or (None, "") where
    neither the device nor the caller states one."""
    free, where = _free(device)
    if max_memory is not None and (free is None or max_memory <= free):
        return max_memory, f"max_memory allows {max_memory} bytes"
    return free, where


def _free(device):
    try:
        stats = device.memory_stats() or {}
    except Exception:  # a device that reports nothing
        stats = {}
    if "bytes_limit" in stats:
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return free, f"{device} has {free} bytes free"
    if device.platform == "cpu":
        import psutil

        available = psutil.virtual_memory().available
        free = int(available * HOST_SHARE)
        return free, (f"{device} may take {free} bytes ({HOST_SHARE:.0%} of the host's {available} bytes of "
                      f"available memory)")
    return None, ""


def _io_bytes(plan):
    return max(sum(m.tensors[i].nbytes for i in m.inputs + m.outputs) for _, m in plan.all_methods())


def combined(plan):
    """The plan's memory figures over all its methods: one arena and one state buffer,
    the pool constants of equal bytes placed once (as the session places them), every
    method's inline constants, the largest workspace."""
    import dataclasses

    if not plan.methods:
        return plan.memory
    pool, seen = 0, set()
    for _, m in plan.all_methods():
        data = {c.tensor: c.data for c in m.constants}
        for i, t in enumerate(m.tensors):
            if t.storage == "pool":
                key = constant_key(data[i], t) if i in data else (id(m), i)
                if key not in seen:
                    seen.add(key)
                    pool += t.nbytes
    ms = [m.memory for _, m in plan.all_methods()]
    return dataclasses.replace(plan.memory, constant_pool_bytes=pool,
                               inline_constant_bytes=sum(m.inline_constant_bytes for m in ms),
                               max_workspace_bytes=max(m.max_workspace_bytes for m in ms))


def constant_key(data, t):
    """What makes two pool constants one device array: the same bytes of the file
    (methods share a weight's bytes in the data section), dtype and shape."""
    import numpy as np

    view = np.frombuffer(data, np.uint8)
    return view.ctypes.data if view.size else 0, view.size, t.dtype, tuple(t.shape)


def check_stated(plan, allowed, where):
    """The plan's stated memory (arena, constants, workspace, states) and its inputs and
    outputs against `allowed` (`limit`), before anything is allocated."""
    m = combined(plan)
    need = m.step_device_bytes + _io_bytes(plan)
    if allowed is not None and need > allowed:
        raise LimitError(f"plan needs {need} bytes of device memory (arena {m.arena_bytes}, constant pool "
                         f"{m.constant_pool_bytes}, inline constants {m.inline_constant_bytes}, workspace "
                         f"{m.max_workspace_bytes}, states {m.state_bytes}, inputs and outputs {_io_bytes(plan)}), "
                         f"but {where}")


def compiled_workspace(plan, callables, paths):
    """The largest temp bytes XLA states for the kernels compiled here (a native
    executable, from a trusted plan, keeps the plan's figure) -> (bytes, kernel name)."""
    top, name = plan.memory.max_workspace_bytes, ""
    for ki, fn in callables.items():
        if paths.get(ki) not in (COMPILED, COMPILED_VIA_CALL):
            continue
        try:
            temp = int(getattr(fn.memory_analysis(), "temp_size_in_bytes", 0) or 0)
        except Exception:  # this jax or backend does not say
            continue
        if temp > top:
            top, name = temp, plan.kernels[ki].name
    return top, name


def figures(plan):
    """What `check_compiled` needs of a plan (its memory over all methods, the inputs' and
    outputs' bytes), kept by a session instead of the plan (whose constants view the
    file's bytes)."""
    return combined(plan), _io_bytes(plan)


def check_compiled(plan, workspace, kernel, allowed, where):
    """The plan's memory with the workspace its compiled kernels really need (XLA's
    figures: a kernel may want more than the plan states), before the arena is
    allocated. `plan`: a plan, or its `figures`."""
    m, io = plan if isinstance(plan, tuple) else figures(plan)
    need = m.arena_bytes + m.constant_pool_bytes + m.inline_constant_bytes + m.state_bytes + workspace + io
    if allowed is not None and need > allowed:
        raise LimitError(f"plan needs {need} bytes of device memory once compiled here (kernel {kernel!r} wants "
                         f"{workspace} bytes of workspace, the plan states {m.max_workspace_bytes}; arena "
                         f"{m.arena_bytes}, constant pool {m.constant_pool_bytes}), but {where}")
