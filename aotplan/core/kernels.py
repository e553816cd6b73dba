"""Kernel loading: exported StableHLO -> an XLA executable for this host.

`jax.export.deserialize` reads the plan's bytes (no pickle); the program is then
compiled ahead of the first step, with the arena argument donated where the kernel
writes it, so every call updates the arena in place. Every kernel is lowered for the
session's device (`device_avals`): a program lowered for bare avals is compiled for
the process's first device, whatever device the session runs on.

A kernel gets jax's call path (a `jax.stages.Compiled`: C++ dispatch) from the lowering
of a stand-in of its signature (`stand_in`); at jax's compile step the exported module
is compiled in its place (`Direct`), or a native executable is handed back (`adopt`),
and the result's signature is checked against the exported one. `jit(exp.call)` is
lowered only where that does not apply (docs/design.md, "Fast start").
"""

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import dtypes, kernel_program, native, xla_options
from aotplan.core.errors import PlanError

# How a kernel got its call path (`Session.kernel_paths`). The first two are the fast
# ones; NATIVE_PENDING is a native kernel's until the session has given it jax's call
# path (in a background thread after the first step: `Session.wait_ready`); the others
# are taken where a program is not plain, or this jax's internals differ, and cost a
# slower load (`exp.call`'s lowering: on CPU, scipy.linalg's import) or slower steps.
COMPILED = "compiled"  # its StableHLO compiled as it is, called through a stand-in
NATIVE = "native"  # its native executable, called through a stand-in
NATIVE_PENDING = "native, called from Python until the first step's adoption"  # native.NativeKernel
COMPILED_VIA_CALL = "compiled via exported.call"
NATIVE_VIA_CALL = "native via exported.call"
NATIVE_FROM_PYTHON = "native, called from Python"  # native.NativeKernel, for good
# a program over several devices (aotplan/core/spmd.py) has one path: exp.call lowered
# with each argument's sharding over the mesh (no stand-in is written for one)
OVER_DEVICES = "compiled over the devices"
FAST_PATHS = (COMPILED, NATIVE, OVER_DEVICES)


def export_platform(device_platform):
    """A jax device's `platform` -> the platform name `jax.export` lowers and exports
    for (jax calls a CUDA device's platform "gpu"; export calls it "cuda")."""
    return "cuda" if device_platform == "gpu" else device_platform


def paths_note(paths):
    """{kernel name: path} (`Session.kernel_paths`) -> "" where every kernel took a
    fast path, else what `replay` and `verify` add to their load line: how many took
    which slower path."""
    slow = {}
    for path in paths.values():
        if path not in FAST_PATHS and path != NATIVE_PENDING:
            slow[path] = slow.get(path, 0) + 1
    if not slow:
        return ""
    return ("; " + ", ".join(f"{n} of {len(paths)} {path}" for path, n in sorted(slow.items()))
            + " (a slower path: a program that is not plain, or this jax's internals differ)")


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


def donated(donate):
    """`donate`, how many leading arguments a kernel donates (the arena, then the state
    buffer; True counts as 1) -> jax's donate_argnums."""
    return tuple(range(int(donate)))


def kernel_function(exp, donate):
    """The exported program as a jitted function, its first `donate` arguments donated."""
    return jax.jit(exp.call, donate_argnums=donated(donate))


def stand_in(exp, donate):
    """A jitted function with the exported program's signature (argument and result
    types, donation, every argument kept) and a trivial body, for `adopt`: lowering it
    gives jax's call path for a loaded executable, and it is never compiled or run. It
    lowers in a few ms where `exp.call` takes 2 ms more and, the first time in a
    process, about 130 ms more: jax.export initializes the CPU's LAPACK kernels (by
    importing scipy.linalg) before lowering any call of an exported CPU program."""
    def kernel(*args):
        return jax.tree_util.tree_unflatten(exp.out_tree, [jnp.zeros(a.shape, a.dtype) for a in exp.out_avals])

    kernel.__name__ = "stand_in"
    return jax.jit(kernel, donate_argnums=donated(donate), keep_unused=True)


def _plain(exp):
    """Whether a stand-in can take the exported program's place: one device, no
    effects and no custom calls (a LAPACK call needs the initialization above)."""
    try:
        return (exp.nr_devices == 1 and not exp.ordered_effects and not exp.unordered_effects
                and all(s is None for s in (*exp.in_shardings_hlo, *exp.out_shardings_hlo))
                and b"custom_call" not in bytes(exp.mlir_module_serialized))
    except Exception:  # another jax's Exported: take the exported program itself
        return False


def _same_signature(compiled, exp, donate):
    """Whether jax's call path for `compiled` passes and returns exactly what the
    exported program takes and returns (types, donation, the result's structure)."""
    try:
        ins = jax.tree_util.tree_leaves(compiled.args_info)
        outs = compiled.out_info
        return ([(tuple(a.shape), np.dtype(a.dtype), bool(a.donated)) for a in ins]
                == [(tuple(a.shape), np.dtype(a.dtype), i < donate) for i, a in enumerate(exp.in_avals)]
                and jax.tree_util.tree_structure(outs) == exp.out_tree
                and [(tuple(a.shape), np.dtype(a.dtype)) for a in jax.tree_util.tree_leaves(outs)]
                == [(tuple(a.shape), np.dtype(a.dtype)) for a in exp.out_avals])
    except Exception:
        return False


def adopt(exe, exp, donate, device):
    """A loaded native executable (or a Future of it) of the exported program `exp`,
    called through jax's dispatch (`native.adopt`) -> (`jax.stages.Compiled`, its
    path: NATIVE or NATIVE_VIA_CALL), or (None, None) where this jax does not allow it.
    Lowered from a stand-in of the same signature, checked against the exported one,
    else from the exported program itself."""
    avals = device_avals(exp, device)
    if _plain(exp):
        compiled = native.adopt(exe, stand_in(exp, donate), avals)
        if compiled is not None and _same_signature(compiled, exp, donate):
            return compiled, NATIVE
    compiled = native.adopt(exe, kernel_function(exp, donate), avals)
    return (compiled, NATIVE_VIA_CALL) if compiled is not None else (None, None)


def device_avals(exp, device):
    """The exported program's argument types, each placed on `device` (a committed
    single-device sharding), so the kernel is lowered and compiled for that device."""
    sharding = jax.sharding.make_single_device_sharding(device)  # (0.12 deprecates SingleDeviceSharding(...))
    return [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in exp.in_avals]


def _unreadable(name, e, plan_jax):
    """The PlanError for a kernel whose StableHLO this jax cannot read."""
    cause = (f"the plan was compiled with jax {plan_jax}: recompile it with a jax whose StableHLO this host's "
             f"jax {jax.__version__} reads (or install that jax here)"
             if plan_jax and plan_jax != jax.__version__ else "the plan is corrupt")
    return PlanError(f"kernel {name!r}: this host's jax cannot read its StableHLO ({e}); {cause}")


def _is_unreadable(e):
    return "deserialize stablehlo" in str(e).lower()  # (jax 0.10 and 0.11: "Failed to deserialize StableHLO")


class Direct:
    """A kernel compiled from its exported module as it is, called through a stand-in's
    lowering (`compile_kernel`): where `exp.call` is lowered instead, jax first
    initializes the CPU's LAPACK kernels (about 130 ms and 20 MiB the first time in a
    process: it imports scipy.linalg) and lowers for 2 ms more a kernel. For plain
    programs (the module's `main` then takes exactly the kernel's arguments, and
    carries its donation as `tf.aliasing_output`; a program exported for several
    platforms gets such a `main` that picks this one, `_for_platform`). The compile
    goes through jax's own step (its options, devices, persistent cache), given this
    module in place of the stand-in's."""

    def __init__(self, lowered, module, exp, donate, lower_call):
        self.lowered, self.module = lowered, module  # the stand-in's lowering; the exported module
        self.exp, self.donate = exp, donate  # what the result's signature is checked against
        self.lower_call = lower_call  # -> jit(exp.call) lowered: the way back


def read_module(name, exp, plan_jax=None):
    """The exported program as an MLIR module, in a context of its own (kept alive by
    the module) -> module; a PlanError where this jax cannot read it."""
    from jax.extend import mlir as jax_mlir  # (public: jax.extend)
    from jax.extend.mlir import ir

    # a bare context: reading the artifact loads the dialects it needs (1.2 ms a
    # kernel; jax's lowering context, every dialect registered and loaded, 3 ms)
    with ir.Context():
        try:
            return jax_mlir.deserialize_portable_artifact(bytes(exp.mlir_module_serialized))
        except Exception as e:
            if _is_unreadable(e):
                raise _unreadable(name, e, plan_jax) from None
            raise PlanError(f"kernel {name!r}: its StableHLO does not read "
                            f"({kernel_program.first_line(e)})") from None


def _module(module, exp, platform):
    """`module` (`read_module`) for `platform`: a module whose `main` takes exactly the
    kernel's arguments, or None where this jax's internals differ."""
    from jax.extend.mlir import ir

    if len(exp.platforms) == 1:
        return module
    with module.context:
        try:
            return _for_platform(module, exp.platforms.index(platform), ir)
        except Exception:  # another layout than jax's below: exp.call's lowering knows it
            return None


_ALL_PLATFORMS = "aotplan_all_platforms"  # what _for_platform renames a multi-platform `main` to


def _for_platform(module, index, ir):
    """A module exported for several platforms (`--target both`): its `main` takes the
    platform's index first (an i32 argument marked `jax.global_constant =
    "_platform_index"`) and branches on it where the platforms' lowerings differ.
    -> the module with that `main` renamed and private, and a new `main` that takes
    the kernel's arguments (their attributes: the arena's donation) and calls it with
    `index`, a constant, as jax's lowering of `exp.call` does; XLA then folds the
    branches. None where `main` is not laid out so."""
    funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
             if op.operation.name == "func.func"}
    main = funcs.get("main")
    if main is None or _ALL_PLATFORMS in funcs:
        return None
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    args = list(ftype.inputs)
    if not args or str(args[0]) != "tensor<i32>" or "arg_attrs" not in main.attributes \
            or '"_platform_index"' not in str(ir.ArrayAttr(main.attributes["arg_attrs"])[0]):
        return None
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(module.body), ir.Location.unknown():
        wrapper = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get("main"),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get(args[1:], list(ftype.results))),
            "arg_attrs": ir.ArrayAttr.get(list(ir.ArrayAttr(main.attributes["arg_attrs"]))[1:]),
            **({"res_attrs": main.attributes["res_attrs"]} if "res_attrs" in main.attributes else {})})
        body = wrapper.regions[0].blocks.append(*args[1:])
        with ir.InsertionPoint(body):
            index_type = ir.RankedTensorType.get([], i32)
            const = ir.Operation.create("stablehlo.constant", results=[index_type], attributes={
                "value": ir.DenseElementsAttr.get_splat(index_type, ir.IntegerAttr.get(i32, index))})
            call = ir.Operation.create("func.call", results=list(ftype.results),
                                       operands=[const.result, *body.arguments],
                                       attributes={"callee": ir.FlatSymbolRefAttr.get(_ALL_PLATFORMS)})
            ir.Operation.create("func.return", operands=list(call.results))
    main.attributes["sym_name"] = ir.StringAttr.get(_ALL_PLATFORMS)
    main.attributes["sym_visibility"] = ir.StringAttr.get("private")
    if not module.operation.verify():
        return None
    return module


def lower_kernel(name, exp, donate, platform, device=None, plan_jax=None, module=None, avals=None):
    """-> the kernel lowered for `device` (default: the first device), ready for XLA
    (`compile_kernel`; Python work, done one at a time): a `Direct` where the program
    is plain, else `jit(exp.call)` lowered. `module`: the program, where the caller has
    read it already (`read_module`: the executor checks it first).
    `plan_jax`: the jax version the plan was compiled with, named where this jax cannot
    read the kernel's StableHLO (MLIR prints its reason on stderr first: collecting
    MLIR's diagnostics needs a handler on an MLIR context, which crashed jax 0.11.2 on
    such a program). `avals`: the argument types, each with its sharding, of a program
    over several devices (aotplan/core/spmd.py), in place of `device`'s."""
    if platform not in exp.platforms:
        raise PlanError(f"kernel {name!r} was exported for {', '.join(exp.platforms)}; this host runs {platform}: "
                        f"recompile the model for this platform")
    if avals is None:
        avals = exp.in_avals if device is None else device_avals(exp, device)

    def lower_call():
        try:
            return kernel_function(exp, donate).lower(*avals)
        except Exception as e:
            if _is_unreadable(e):
                raise _unreadable(name, e, plan_jax) from None
            raise PlanError(f"kernel {name!r}: XLA could not compile it on this host: {e}") from None

    if _plain(exp):
        module = _module(module if module is not None else read_module(name, exp, plan_jax), exp, platform)
        if module is not None:
            return Direct(stand_in(exp, donate).lower(*avals), module, exp, donate, lower_call)
    return lower_call()


def compile_kernel(name, lowered, platform):
    """XLA's compile of a lowered kernel (it releases the GIL: several may run at once)
    -> (`jax.stages.Compiled`, its path: COMPILED or COMPILED_VIA_CALL). A `Direct`
    whose compile fails or whose signature differs from the exported one (checked) is
    lowered from `exp.call` and compiled again, which names what failed."""
    if isinstance(lowered, Direct):
        direct = lowered
        try:
            compiled = native.compile_instead(direct.lowered, direct.module,
                                              lambda low: xla_options.compile(low, platform))
            if compiled is not None and _same_signature(compiled, direct.exp, direct.donate):
                return compiled, COMPILED
        except Exception:  # whatever failed, the exp.call path below reports it, or works
            pass
        lowered = direct.lower_call()
    try:
        return xla_options.compile(lowered, platform), COMPILED_VIA_CALL
    except Exception as e:
        raise PlanError(f"kernel {name!r}: XLA could not compile it on this host: {e}") from None


def compile_lowered(name, lowered, platform):
    """`compile_kernel`'s executable alone."""
    return compile_kernel(name, lowered, platform)[0]
