"""The jax internals aotplan relies on, each checked by name so that a jax release that
moves one fails here, loudly, rather than as a slower path taken in silence.

Fast start (`aotplan/core/native.py`) hands a loaded executable back at jax's compile
step (`jax._src.compiler.compile_or_get_cached`, called from `pxla` on the module);
where that step moves, `native.adopt` returns None and sessions call their native
kernels from Python for good (correct, about 60 us slower a step) and portable kernels
go through `exported.call` (slower loads). The executor's process and feed checks read
`xla_bridge.backends_are_initialized` and the transfer-guard config states; the
lowering turns traceback locations off. The CI runs this file on the oldest jax we
support and on the newest pip gives (.ci/run)."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aotplan.core import kernels, native


def _why(what):
    return (f"jax {jax.__version__}: {what}; aotplan's fast start (aotplan/core/native.py) needs a "
            f"new way in for this release")


def test_the_compile_step_is_where_native_hands_back():
    from jax._src import compiler as jc
    from jax._src.interpreters import pxla

    assert hasattr(jc, "compile_or_get_cached"), _why("jax._src.compiler.compile_or_get_cached is gone")
    params = list(inspect.signature(jc.compile_or_get_cached).parameters)
    # `_handing_back` swaps the program: the second positional argument, or `computation=`
    assert len(params) > 1 and params[1] == "computation", _why(f"compile_or_get_cached's parameters are {params}")
    assert native._hand_back_reachable(), _why("pxla no longer calls compiler.compile_or_get_cached on the module")


def test_a_loaded_executable_is_adopted_through_jax_dispatch():
    """The whole round trip the executor makes for a native plan: serialize a compiled
    kernel, load it back, adopt it; the Compiled runs the loaded executable itself."""
    device = jax.devices()[0]
    spec = (jax.ShapeDtypeStruct((4,), np.float32),) * 2
    built = jax.jit(lambda a, x: (a + 1, x * 2), donate_argnums=0)
    blob = native.serialize(built.lower(*spec).compile(), device)
    assert blob, _why("the backend no longer serializes executables")
    exe = native.load(blob, device)
    # the executor's stand-in: the same signature, a body never compiled (a function
    # jax has not compiled in this process, as on an inference host)
    stand_in = jax.jit(lambda a, x: (jnp.zeros_like(a), jnp.zeros_like(x)), donate_argnums=0, keep_unused=True)
    compiled = native.adopt(exe, stand_in, spec)
    assert compiled is not None, _why("a loaded executable could not be handed back at the compile step")
    assert compiled.runtime_executable() is exe
    a, y = compiled(jnp.zeros(4, np.float32), jnp.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(y), [0, 2, 4, 6])
    np.testing.assert_array_equal(np.asarray(a), [1, 1, 1, 1])


def test_an_exported_module_is_compiled_in_place_of_its_stand_in():
    """`kernels.Direct`: the portable kernels' fast path (no `exported.call` lowering)."""
    fn = jax.jit(lambda a, x: (a + 1, x * 3), donate_argnums=0)
    spec = (jax.ShapeDtypeStruct((4,), np.float32),) * 2
    exp = jax.export.export(fn)(*spec)
    platform = kernels.export_platform(jax.devices()[0].platform)
    lowered = kernels.lower_kernel("k", exp, True, platform)
    assert isinstance(lowered, kernels.Direct), _why("an exported module is not compiled in place of its stand-in")
    compiled, path = kernels.compile_kernel("k", lowered, platform)
    assert path == kernels.COMPILED, _why(f"the direct compile fell back to {path!r}")


@pytest.mark.parametrize("module, name", [
    ("jax._src.xla_bridge", "backends_are_initialized"),  # executor/process.py: fork and dispatch checks
    ("jax._src.xla_bridge", "get_backend"),  # native.py: serialize / deserialize
    ("jax._src.config", "transfer_guard_host_to_device"),  # executor/feeds.py
    ("jax._src.config", "transfer_guard_device_to_host"),
    ("jax._src.config", "traceback_in_locations_limit"),  # compiler/passes/lower.py
    ("jax._src.lib.xla_client", "CompileOptions"),  # native.load
    ("jax._src.lib.xla_client", "DeviceAssignment"),
    ("jax._src.lib.xla_client", "DeviceList"),
])
def test_internal_names_aotplan_reads_exist(module, name):
    import importlib

    path, _, leaf = module.rpartition(".")
    owner = importlib.import_module(path)  # (xla_client is an attribute of jax._src.lib, not a submodule)
    found = getattr(owner, leaf, None)
    found = found if found is not None else importlib.import_module(module)
    assert hasattr(found, name), _why(f"{module}.{name} is gone")


def test_the_reader_helper_reads_with_jax_extend_mlirs_own_functions():
    """executor/reader_helper.py reads modules with jaxlib's bindings without importing
    jax (a quarter of a second, not seconds): they must be the very functions
    `kernels.read_module` calls, or the helper surviving a module says nothing about
    this process reading it (the helper falls back to jax.extend.mlir, slower)."""
    from jax.extend import mlir as jax_mlir
    from jax.extend.mlir import ir as jax_ir
    from jaxlib._jax import mlir
    from jaxlib.mlir import ir

    assert mlir.deserialize_portable_artifact is jax_mlir.deserialize_portable_artifact, \
        f"jax {jax.__version__}: jaxlib._jax.mlir is not jax.extend.mlir's; the reader guard's helper needs a new way in"
    assert ir.Context is jax_ir.Context, f"jax {jax.__version__}: jaxlib.mlir.ir.Context is not jax.extend.mlir.ir's"
