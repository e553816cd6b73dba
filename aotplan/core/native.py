"""Native (build-host) XLA executables: fingerprint, serialize, load, call.

An exported StableHLO kernel is portable but must be compiled on every host (tens to
hundreds of ms per kernel). A serialized executable loads in milliseconds, but it is
native code for one jaxlib, one device kind and, on CPU, the instruction set the
build host had. This is the one module that touches the XLA client's internal calls
(no pickle anywhere):

    backend.serialize_executable(compiled.runtime_executable())        -> bytes
    backend.deserialize_executable(blob, executable_devices=DeviceList,
                                   compile_options=CompileOptions)       -> executable
    executable.execute_sharded(args).disassemble_into_single_device_arrays()
    jax._src.compiler.compile_or_get_cached (replaced while `adopt` compiles)

The executor uses a plan's executables only when `fingerprint(device)` equals the
plan's and the plan is trusted (signature verified, or the caller says so); anything
else falls back to the portable StableHLO.

`adopt` gives a loaded executable jax's own call path: it lowers a jitted function of
the kernel's signature (milliseconds; no XLA compile; the executor passes a stand-in,
`aotplan.core.kernels.stand_in`) and, where jax would compile it, hands back the loaded
executable instead, as a persistent-cache hit does. The result
is a `jax.stages.Compiled`, called through jax's C++ dispatch: numpy arguments are
transferred in C++ and a call costs a few microseconds. `NativeKernel`, which calls
`execute_sharded` from Python (about 20 us per host argument for `jax.device_put`,
and more per call), needs no lowering: a session calls its native kernels so until
the first step is done (`Session._adopt` then adopts them in a background thread),
and for good where this jax's internals differ.
"""

import concurrent.futures
import contextlib
import functools
import hashlib
import platform as _platform
import threading


def _cpu_features():
    """The CPU's instruction-set flags (x86 /proc/cpuinfo `flags`, Arm `Features`)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return " ".join(sorted(value.split()))
    except OSError:
        pass
    return _platform.processor() or ""


def fingerprint(device):
    """What a native executable is tied to, as one readable string."""
    import jax
    import jaxlib

    parts = [f"platform={device.platform}", f"device_kind={device.device_kind}", f"jax={jax.__version__}",
             f"jaxlib={jaxlib.__version__}", f"machine={_platform.machine()}"]
    cc = getattr(device, "compute_capability", None)
    if cc:
        parts.append(f"compute_capability={cc}")
    if device.platform == "cpu":
        parts.append("cpu_features=" + hashlib.sha256(_cpu_features().encode()).hexdigest()[:16])
    return ";".join(parts)


def _backend(device):
    from jax._src import xla_bridge

    return xla_bridge.get_backend(device.platform)


def serialize(compiled, device):
    """A `jax.stages.Compiled` -> bytes, or b"" where this jaxlib cannot serialize."""
    try:
        return bytes(_backend(device).serialize_executable(compiled.runtime_executable()))
    except Exception:  # an internal API: where it is missing, plans just carry no executables
        return b""


def load(blob, device):
    """Serialized executable bytes -> a loaded executable on `device`. The bytes carry
    the build host's compile options, whose device assignment names the device it was
    compiled for (the first); XLA takes the one passed here instead, so the executable
    runs on `device` (as jax's persistent cache loads an entry: the options of the
    compile it stands in for)."""
    import numpy as np
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions()
    options.num_replicas = 1
    options.num_partitions = 1
    options.device_assignment = xla_client.DeviceAssignment.create(np.array([[device.id]]))
    devices = xla_client.DeviceList((device,))
    try:
        # positional, as jax's compilation cache calls it
        return _backend(device).deserialize_executable(blob, devices, options)
    except TypeError:  # a jaxlib without the options argument: the build host's device then
        return _backend(device).deserialize_executable(blob, executable_devices=devices)


class NativeKernel:
    """A loaded executable, called like a compiled jax function with flat array
    arguments; returns one array or a tuple of them, as the kernel's signature says."""

    def __init__(self, exe, device, returns_tuple):
        self._exe = exe
        self._single = not returns_tuple
        self._device = device

    def __call__(self, *args):
        import jax

        args = [a if isinstance(a, jax.Array) else jax.device_put(a, self._device) for a in args]
        outs = [o[0] for o in self._exe.execute_sharded(args).disassemble_into_single_device_arrays()]
        return outs[0] if self._single else tuple(outs)


_adopting = threading.local()  # the executable to hand back, in the thread adopting it
_patch_lock = threading.Lock()
_patch_users = 0
_patch = None  # the compile step `_handing_back` installed, while a thread uses it


@functools.cache
def _hand_back_reachable():
    """Whether jax compiles through `compiler.compile_or_get_cached`, looked up on the
    module at call time (so in jax 0.10.0 and 0.10.2, tested here, and in the jax
    sources back to 0.4). Checked before adopting, so a jax
    that compiles elsewhere is never made to compile a kernel only to drop it."""
    from jax._src import compiler as jc
    from jax._src.interpreters import pxla

    try:
        with open(pxla.__file__, encoding="utf-8") as f:
            source = f.read()
    except (OSError, TypeError, UnicodeDecodeError):
        return False
    return getattr(pxla, "compiler", None) is jc and "compiler.compile_or_get_cached(" in source


class CompileInstead:
    """For `_handing_back`: jax's compile step compiles `module` (an MLIR module) in
    place of the program jax lowered, with the options, devices and persistent cache
    of that compile."""

    def __init__(self, module):
        self.module = module


@contextlib.contextmanager
def _handing_back(exe):
    """While active, jax's compile step in this thread returns `exe` instead of
    compiling (or, for a `CompileInstead`, compiles its module). Other threads compile
    as usual (the patch passes them through)."""
    global _patch_users, _patch
    from jax._src import compiler as jc

    with _patch_lock:
        if _patch_users == 0:
            original = jc.compile_or_get_cached

            def compile_or_get_cached(*args, **kwargs):
                exe_ = getattr(_adopting, "exe", None)
                if exe_ is None:
                    return original(*args, **kwargs)
                _adopting.used = True
                if isinstance(exe_, CompileInstead):  # every compile in the context (a retry too)
                    if len(args) > 1:
                        args = (args[0], exe_.module) + tuple(args[2:])
                    else:
                        kwargs = {**kwargs, "computation": exe_.module}
                    return original(*args, **kwargs)
                _adopting.exe = None
                return exe_

            compile_or_get_cached.original = original
            jc.compile_or_get_cached = _patch = compile_or_get_cached
        _patch_users += 1
    _adopting.exe, _adopting.used = exe, False
    try:
        yield
    finally:
        used = _adopting.used
        _adopting.exe = None
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                # (put back only our own patch: whatever replaced it meanwhile stays)
                if jc.compile_or_get_cached is _patch:
                    jc.compile_or_get_cached = _patch.original
                _patch = None
        if not used:
            raise RuntimeError("jax did not reach its compile step")


def compile_instead(lowered, module, compile):
    """`compile(lowered)` (a jax compile of the lowering, with its options) compiling
    `module` in place of the lowered program -> the `jax.stages.Compiled`, whose call
    path is the lowering's; None where this jax's internals differ. The caller checks
    that the two programs have one signature."""
    if not _hand_back_reachable():
        return None
    with _handing_back(CompileInstead(module)):
        return compile(lowered)


def adopt(exe, fn, avals):
    """`fn` (a jitted kernel, with its donation) lowered for `avals` (placed on the
    device `exe` was loaded onto, or jax lowers it for its first device), as a
    `jax.stages.Compiled` that runs the loaded executable `exe` -> Compiled, or None
    where this jax's internals differ (the caller then uses `NativeKernel`). `exe` may
    be a Future of it, loading in another thread while this one lowers (XLA releases
    the GIL while it deserializes); its error, if any, is raised here."""
    if not _hand_back_reachable():
        return None
    try:
        lowered = fn.lower(*avals)
    except Exception:
        lowered = None
    if isinstance(exe, concurrent.futures.Future):
        exe = exe.result()
    if lowered is None:
        return None
    try:
        with _handing_back(exe):
            compiled = lowered.compile()
        if compiled.runtime_executable() is not exe:
            return None
    except Exception:
        return None
    return compiled
