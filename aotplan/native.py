"""Native (build-host) XLA executables: fingerprint, serialize, load, call.

An exported StableHLO kernel is portable but must be compiled on every host (tens to
hundreds of ms per kernel). A serialized executable loads in milliseconds, but it is
native code for one jaxlib, one device kind and, on CPU, the instruction set the
build host had. This is the one module that touches the XLA client's internal calls
(no pickle anywhere):

    backend.serialize_executable(compiled.runtime_executable())        -> bytes
    backend.deserialize_executable(blob, executable_devices=DeviceList) -> executable
    executable.execute_sharded(args).disassemble_into_single_device_arrays()

The executor uses a plan's executables only when `fingerprint(device)` equals the
plan's and the plan is trusted (signature verified, or the caller says so); anything
else falls back to the portable StableHLO.
"""

import hashlib
import platform as _platform


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


class NativeKernel:
    """A deserialized executable, called like a compiled jax function with flat array
    arguments; returns one array or a tuple of them, as the kernel's signature says."""

    def __init__(self, blob, device, returns_tuple):
        from jax._src.lib import xla_client

        self._exe = _backend(device).deserialize_executable(
            blob, executable_devices=xla_client.DeviceList((device,)))
        self._single = not returns_tuple
        self._device = device

    def __call__(self, *args):
        import jax

        args = [a if isinstance(a, jax.Array) else jax.device_put(a, self._device) for a in args]
        outs = [o[0] for o in self._exe.execute_sharded(args).disassemble_into_single_device_arrays()]
        return outs[0] if self._single else tuple(outs)
